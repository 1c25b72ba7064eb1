//! Device memory a communicator gives back while suspended (ncclCommSuspend with
//! NCCL_SUSPEND_MEM) and gets again at the same device address (ncclCommResume), so the DevComm,
//! kernels' arguments and CUDA graphs captured before the suspend, which hold that address, stay
//! valid. As NCCL's memory manager does (src/mem_manager.cc, NCCL 2.30): the address range stays
//! reserved while the physical memory is unmapped and released, and a peer in another process
//! unmaps its mapping and maps the owner's new memory at the same address on resume. Contents are
//! kept in host memory meanwhile (NCCL's "offload" kind): the channel buffer holds semaphores and
//! acknowledgement words whose values the next kernels expect.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::context::{can_access, device_count, CtxGuard, Device};
use super::driver::check;
use super::vmm::location;
use crate::error::{Error, Result};
use cudarc::driver::sys as cu;

/// A POSIX file descriptor for cuMem allocation `h`, or None if it has no such handle type.
pub fn export_fd(h: cu::CUmemGenericAllocationHandle) -> Option<OwnedFd> {
    let mut fd: RawFd = -1;
    // SAFETY: out-pointer to an int, as POSIX_FILE_DESCRIPTOR handles are.
    let rc = unsafe {
        cu::cuMemExportToShareableHandle((&mut fd as *mut RawFd).cast(), h, cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
    };
    // SAFETY: on success the driver returned a fresh descriptor, now owned here.
    (rc == cu::CUresult::CUDA_SUCCESS && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The cuMem allocation a peer's POSIX file descriptor stands for (a new reference, the caller's
/// to release).
pub fn import_fd(fd: &OwnedFd) -> Result<cu::CUmemGenericAllocationHandle> {
    let mut handle: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: a POSIX-FD handle is passed as the descriptor's value cast to a pointer.
    check(
        unsafe {
            cu::cuMemImportFromShareableHandle(
                &mut handle,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        },
        "cuMemImportFromShareableHandle",
    )?;
    Ok(handle)
}

fn access_desc(device: i32) -> cu::CUmemAccessDesc {
    cu::CUmemAccessDesc { location: location(device), flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE }
}

/// Maps `handle` over [ptr, ptr + size) (reserved, unmapped) with read-write access for
/// `devices`; on failure the range is left unmapped.
fn map_at(ptr: u64, size: usize, handle: cu::CUmemGenericAllocationHandle, devices: &[i32]) -> Result<()> {
    // SAFETY: the range is reserved by the caller and unmapped; the handle covers `size` bytes.
    check(unsafe { cu::cuMemMap(ptr, size, 0, handle, 0) }, "cuMemMap")?;
    let descs: Vec<cu::CUmemAccessDesc> = devices.iter().map(|&d| access_desc(d)).collect();
    // SAFETY: the range was just mapped; descs is a valid array of its length.
    if let Err(e) = check(unsafe { cu::cuMemSetAccess(ptr, size, descs.as_ptr(), descs.len()) }, "cuMemSetAccess") {
        // SAFETY: mapped above, used by nobody yet.
        unsafe { cu::cuMemUnmap(ptr, size) };
        return Err(e);
    }
    Ok(())
}

/// A cuMem allocation of this rank's at a reserved address, which peers of other processes map
/// through its POSIX file descriptor and peers of this process use directly (read-write access is
/// granted to every GPU that can reach the owner's).
pub struct SuspendableBuffer {
    /// Device address of the first byte; the same for the buffer's whole life.
    pub ptr: u64,
    /// Bytes (the requested size rounded up to the allocation granularity).
    pub size: usize,
    dev: &'static Device,
    access: Vec<i32>,
    /// The physical memory; None while suspended.
    handle: Option<cu::CUmemGenericAllocationHandle>,
    /// The contents while suspended.
    backup: Option<Vec<u8>>,
}

impl SuspendableBuffer {
    /// Allocates at least `size` zeroed bytes on `dev`; the zeroes are in place on return.
    pub fn zeroed(dev: &'static Device, size: usize) -> Result<SuspendableBuffer> {
        let _g = CtxGuard::new(dev)?;
        let gran = granularity(dev)?;
        let size = size.max(1).div_ceil(gran) * gran;
        let mut access = Vec::new();
        for d in 0..device_count()? {
            if d == dev.ordinal || can_access(d, dev.ordinal).unwrap_or(false) {
                access.push(d);
            }
        }
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local.
        check(unsafe { cu::cuMemAddressReserve(&mut ptr, size, gran, 0, 0) }, "cuMemAddressReserve")?;
        let mut b = SuspendableBuffer { ptr, size, dev, access, handle: None, backup: None };
        b.handle = Some(b.create_and_map()?);
        // SAFETY: ptr..ptr+size is mapped above.
        dev.on_copy_stream(|s| unsafe { cu::cuMemsetD8Async(ptr, 0, size, s) }, "cuMemsetD8Async")?;
        Ok(b)
    }

    fn create_and_map(&self) -> Result<cu::CUmemGenericAllocationHandle> {
        let prop = props(self.dev);
        let mut h: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local, prop fully initialised.
        check(unsafe { cu::cuMemCreate(&mut h, self.size, &prop, 0) }, "cuMemCreate")?;
        if let Err(e) = map_at(self.ptr, self.size, h, &self.access) {
            // SAFETY: created above, mapped nowhere.
            unsafe { cu::cuMemRelease(h) };
            return Err(e);
        }
        Ok(h)
    }

    /// A file descriptor a peer of another process maps the current memory with; None while
    /// suspended or where the driver cannot export one.
    pub fn export(&self) -> Option<OwnedFd> {
        self.handle.and_then(export_fd)
    }

    /// Whether its memory is given back (between `suspend` and `resume`).
    pub fn is_suspended(&self) -> bool {
        self.handle.is_none()
    }

    /// Copies the contents to host memory, then unmaps and releases the physical memory, keeping
    /// the address. The caller has made sure no kernel or copy uses it and that peers unmapped it.
    pub fn suspend(&mut self) -> Result<()> {
        let Some(h) = self.handle else { return Ok(()) };
        let _g = CtxGuard::new(self.dev)?;
        let mut backup = vec![0u8; self.size];
        let (ptr, size) = (self.ptr, self.size);
        // SAFETY: source range mapped (handle present); destination a live Vec of `size` bytes
        // that outlives the synchronise in on_copy_stream.
        self.dev.on_copy_stream(|s| unsafe { cu::cuMemcpyDtoHAsync_v2(backup.as_mut_ptr().cast(), ptr, size, s) }, "cuMemcpyDtoHAsync")?;
        // SAFETY: mapped by create_and_map with this handle; nothing uses it (the caller's promise).
        check(unsafe { cu::cuMemUnmap(ptr, size) }, "cuMemUnmap")?;
        self.handle = None;
        self.backup = Some(backup);
        // SAFETY: the handle's last mapping here is gone; released once.
        check(unsafe { cu::cuMemRelease(h) }, "cuMemRelease")
    }

    /// New physical memory at the same address, with the contents `suspend` saved.
    pub fn resume(&mut self) -> Result<()> {
        if self.handle.is_some() {
            return Ok(());
        }
        let _g = CtxGuard::new(self.dev)?;
        let h = self.create_and_map()?;
        self.handle = Some(h);
        let (ptr, size) = (self.ptr, self.size);
        match self.backup.take() {
            // SAFETY: destination mapped above; source a live Vec of `size` bytes outliving the
            // synchronise.
            Some(backup) => self.dev.on_copy_stream(|s| unsafe { cu::cuMemcpyHtoDAsync_v2(ptr, backup.as_ptr().cast(), size.min(backup.len()), s) }, "cuMemcpyHtoDAsync"),
            // Nothing saved: zeroes, as at allocation (a packet area must never hold stale
            // bytes that look like a packet).
            // SAFETY: the range is mapped above.
            None => self.dev.on_copy_stream(|s| unsafe { cu::cuMemsetD8Async(ptr, 0, size, s) }, "cuMemsetD8Async"),
        }
    }

    /// The device it lives on.
    pub fn device(&self) -> &'static Device {
        self.dev
    }
}

impl Drop for SuspendableBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: the range was reserved by `zeroed`, mapped with `handle` when present; both
            // are released once, after every user (teardown's promise).
            unsafe {
                if let Some(h) = self.handle.take() {
                    cu::cuMemUnmap(self.ptr, self.size);
                    cu::cuMemRelease(h);
                }
                cu::cuMemAddressFree(self.ptr, self.size);
            }
        }
    }
}

/// Another process's `SuspendableBuffer`, mapped at an address reserved here for as long as this
/// lives, so a resume maps the owner's new memory where the DevComm already points.
pub struct PeerMapping {
    /// Device address of the peer's first byte in this process.
    pub ptr: u64,
    size: usize,
    dev: &'static Device,
    mapped: bool,
}

impl PeerMapping {
    /// Reserves `size` bytes of address space and maps the allocation `fd` stands for there.
    pub fn map(dev: &'static Device, fd: &OwnedFd, size: usize) -> Result<PeerMapping> {
        let _g = CtxGuard::new(dev)?;
        // The owner rounded to its GPU's recommended granularity, a multiple of the minimum
        // (which may differ from this GPU's recommended one on a host of mixed GPUs).
        let gran = granularity_of(dev, cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?;
        if size == 0 || !size.is_multiple_of(gran) {
            return Err(Error::internal(format!("a peer's channel buffer of {size} bytes is not a multiple of the {gran}-byte granularity")));
        }
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local.
        check(unsafe { cu::cuMemAddressReserve(&mut ptr, size, gran, 0, 0) }, "cuMemAddressReserve")?;
        let mut m = PeerMapping { ptr, size, dev, mapped: false };
        m.remap(fd)?;
        Ok(m)
    }

    /// Maps the allocation `fd` stands for at this mapping's address, in place of what was
    /// mapped there (a suspend that failed part-way may have left the peer's old memory mapped).
    pub fn remap(&mut self, fd: &OwnedFd) -> Result<()> {
        self.unmap()?;
        let _g = CtxGuard::new(self.dev)?;
        let h = import_fd(fd)?;
        let r = map_at(self.ptr, self.size, h, &[self.dev.ordinal]);
        // SAFETY: the imported reference; the mapping keeps the memory alive on its own.
        unsafe { cu::cuMemRelease(h) };
        r?;
        self.mapped = true;
        Ok(())
    }

    /// Unmaps the peer's memory, keeping the address (the owner is about to release it).
    pub fn unmap(&mut self) -> Result<()> {
        if !self.mapped {
            return Ok(());
        }
        let _g = CtxGuard::new(self.dev)?;
        // SAFETY: mapped by remap; no kernel of this rank uses it (the caller's promise).
        check(unsafe { cu::cuMemUnmap(self.ptr, self.size) }, "cuMemUnmap")?;
        self.mapped = false;
        Ok(())
    }
}

impl Drop for PeerMapping {
    fn drop(&mut self) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: reserved by `map`, mapped when `mapped`; released once, after every user.
            unsafe {
                if self.mapped {
                    cu::cuMemUnmap(self.ptr, self.size);
                }
                cu::cuMemAddressFree(self.ptr, self.size);
            }
        }
    }
}

fn props(dev: &Device) -> cu::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid (empty) value.
    let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location(dev.ordinal);
    prop.requestedHandleTypes = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop
}

fn granularity(dev: &Device) -> Result<usize> {
    granularity_of(dev, cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
}

fn granularity_of(dev: &Device, g: cu::CUmemAllocationGranularity_flags) -> Result<usize> {
    let prop = props(dev);
    let mut gran = 0usize;
    // SAFETY: out-pointer to a local, prop fully initialised.
    check(unsafe { cu::cuMemGetAllocationGranularity(&mut gran, &prop, g) }, "cuMemGetAllocationGranularity")?;
    Ok(gran.max(1))
}
