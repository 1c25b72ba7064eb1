//! ncclMemAlloc / ncclMemFree. Allocations use the cuMem VMM API with a POSIX-FD shareable
//! handle, the recommended granularity, and read-write access for every GPU that can reach the
//! owning one, so buffers can later be mapped by peers; where VMM is unavailable (or
//! NCCL_CUMEM_ENABLE=0) they fall back to cuMemAlloc. Frees switch to the owning device and
//! restore the caller's.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::config::env_bool;
use crate::error::Result;
use crate::gpu::context::{can_access, device_count};
use crate::gpu::stream::RelaxedCapture;
use crate::gpu::{check, cu, current_device, CtxGuard, Device};
use crate::log::Subsys;

enum Alloc {
    Vmm { handle: cu::CUmemGenericAllocationHandle, size: usize, device: i32 },
    Legacy { device: i32 },
}

static ALLOCS: Mutex<Option<HashMap<u64, Alloc>>> = Mutex::new(None);

/// Allocates `size` bytes on the caller's current device. Returns 0 for size 0.
pub fn alloc(size: usize) -> Result<u64> {
    let dev = Device::get(current_device()?)?;
    if size == 0 {
        return Ok(0);
    }
    let _relaxed = RelaxedCapture::new()?;
    let _ctx = CtxGuard::new(dev)?;
    let (ptr, a) = if env_bool("NCCL_CUMEM_ENABLE", true) {
        match vmm_alloc(dev, size) {
            Ok(x) => x,
            Err(e) => {
                nccl_info!(Subsys::Alloc, "cuMem allocation of {size} bytes failed ({}); using cuMemAlloc", e.msg);
                legacy_alloc(dev, size)?
            }
        }
    } else {
        legacy_alloc(dev, size)?
    };
    ALLOCS.lock().get_or_insert_with(HashMap::new).insert(ptr, a);
    nccl_info!(Subsys::Alloc, "ncclMemAlloc {size} bytes on device {} at {ptr:#x}", dev.ordinal);
    Ok(ptr)
}

fn legacy_alloc(dev: &Device, size: usize) -> Result<(u64, Alloc)> {
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; the device's context is current.
    check(unsafe { cu::cuMemAlloc_v2(&mut p, size) }, "cuMemAlloc")?;
    Ok((p, Alloc::Legacy { device: dev.ordinal }))
}

pub(crate) fn location(ordinal: i32) -> cu::CUmemLocation {
    cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }
}

/// Maps cuMem allocation `handle` (`size` bytes) at a fresh address aligned to `align`, readable
/// and writable by the GPUs in `devices`. On failure everything done here is undone; the handle
/// stays the caller's.
pub(crate) fn map_handle(handle: cu::CUmemGenericAllocationHandle, size: usize, align: usize, devices: &[i32]) -> Result<u64> {
    let mut ptr: cu::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local.
    check(unsafe { cu::cuMemAddressReserve(&mut ptr, size, align, 0, 0) }, "cuMemAddressReserve")?;
    let undo = |mapped: bool| unsafe {
        if mapped {
            cu::cuMemUnmap(ptr, size);
        }
        cu::cuMemAddressFree(ptr, size);
    };
    // SAFETY: ptr..ptr+size is reserved; the handle covers `size` bytes.
    if let Err(e) = check(unsafe { cu::cuMemMap(ptr, size, 0, handle, 0) }, "cuMemMap") {
        undo(false);
        return Err(e);
    }
    let descs: Vec<cu::CUmemAccessDesc> = devices
        .iter()
        .map(|&d| cu::CUmemAccessDesc { location: location(d), flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE })
        .collect();
    // SAFETY: the range is mapped; descs is a valid array of its length.
    if let Err(e) = check(unsafe { cu::cuMemSetAccess(ptr, size, descs.as_ptr(), descs.len()) }, "cuMemSetAccess") {
        undo(true);
        return Err(e);
    }
    Ok(ptr)
}

/// Undoes [`map_handle`] and releases the handle.
///
/// # Safety
/// `ptr`/`size` came from `map_handle` with `handle`, and no kernel uses the range any more.
pub(crate) unsafe fn unmap_handle(ptr: u64, size: usize, handle: cu::CUmemGenericAllocationHandle) -> Result<()> {
    check(cu::cuMemUnmap(ptr, size), "cuMemUnmap")?;
    check(cu::cuMemAddressFree(ptr, size), "cuMemAddressFree")?;
    check(cu::cuMemRelease(handle), "cuMemRelease")
}

fn vmm_alloc(dev: &Device, size: usize) -> Result<(u64, Alloc)> {
    let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location(dev.ordinal);
    prop.requestedHandleTypes = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    let mut gran = 0usize;
    let g = cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
    // SAFETY: out-pointer to a local, prop fully initialised.
    check(unsafe { cu::cuMemGetAllocationGranularity(&mut gran, &prop, g) }, "cuMemGetAllocationGranularity")?;
    let gran = gran.max(1);
    let rounded = size.div_ceil(gran) * gran;
    let mut handle: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: out-pointer to a local.
    check(unsafe { cu::cuMemCreate(&mut handle, rounded, &prop, 0) }, "cuMemCreate")?;
    let mut devices = Vec::new();
    for d in 0..device_count()? {
        if can_access(d, dev.ordinal).unwrap_or(false) {
            devices.push(d);
        }
    }
    let ptr = match map_handle(handle, rounded, gran, &devices) {
        Ok(p) => p,
        Err(e) => {
            // SAFETY: created above, not mapped anywhere.
            unsafe { cu::cuMemRelease(handle) };
            return Err(e);
        }
    };
    Ok((ptr, Alloc::Vmm { handle, size: rounded, device: dev.ordinal }))
}

/// Frees memory from [`alloc`]; other device pointers are freed with cuMemFree, as NCCL does.
pub fn free(ptr: u64) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    let a = ALLOCS.lock().as_mut().and_then(|m| m.remove(&ptr));
    let _relaxed = RelaxedCapture::new()?;
    match a {
        Some(Alloc::Vmm { handle, size, device }) => {
            let _ctx = CtxGuard::new(Device::get(device)?)?;
            // SAFETY: the range and handle came from vmm_alloc and are released once.
            unsafe { unmap_handle(ptr, size, handle) }
        }
        Some(Alloc::Legacy { device }) => {
            let _ctx = CtxGuard::new(Device::get(device)?)?;
            // SAFETY: allocated by cuMemAlloc in legacy_alloc, freed once.
            check(unsafe { cu::cuMemFree_v2(ptr) }, "cuMemFree")
        }
        None => {
            let mut ordinal: i32 = 0;
            // SAFETY: out-pointer to a local; the driver validates ptr.
            check(
                unsafe {
                    cu::cuPointerGetAttribute(
                        (&mut ordinal as *mut i32).cast(),
                        cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                        ptr,
                    )
                },
                "cuPointerGetAttribute",
            )?;
            let _ctx = CtxGuard::new(Device::get(ordinal)?)?;
            // SAFETY: the caller passes a device allocation it owns.
            check(unsafe { cu::cuMemFree_v2(ptr) }, "cuMemFree")
        }
    }
}
