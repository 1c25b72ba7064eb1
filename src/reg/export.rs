//! The registering side: which allocation holds a buffer, and how a peer may map it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::wire::Kind;
use crate::error::{Error, Result};
use crate::gpu::ipc::{self, IPC_HANDLE_BYTES};
use crate::gpu::{cu, CtxGuard, Device};
use crate::gpu::vmm::{location, map_handle, unmap_handle};

/// The allocation holding a registered buffer.
pub struct Alloc {
    pub base: u64,
    pub size: u64,
    /// cuMemAlloc memory: its CUDA IPC handle (zeros otherwise).
    pub ipc: [u8; IPC_HANDLE_BYTES],
    legacy: bool,
    /// cuMem memory: a POSIX file descriptor for it.
    fd: Option<OwnedFd>,
}

/// Describes the allocation holding [ptr, ptr + size) on `dev`, or None if peers cannot map it
/// (host memory, a buffer spanning several allocations, cuMem memory without a POSIX handle).
pub fn describe(dev: &'static Device, ptr: u64, size: u64) -> Result<Option<Alloc>> {
    let _g = CtxGuard::new(dev)?;
    let (mut base, mut asize): (cu::CUdeviceptr, usize) = (0, 0);
    // SAFETY: out-pointers to locals; the driver validates ptr.
    if unsafe { cu::cuMemGetAddressRange_v2(&mut base, &mut asize, ptr) } != cu::CUresult::CUDA_SUCCESS {
        return Ok(None);
    }
    let asize = asize as u64;
    if ptr < base || size > asize || ptr - base > asize - size {
        return Ok(None);
    }
    let mut legacy: i32 = 0;
    // SAFETY: out-pointer to a local of the attribute's type (int).
    let rc = unsafe {
        cu::cuPointerGetAttribute(
            (&mut legacy as *mut i32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            ptr,
        )
    };
    if rc == cu::CUresult::CUDA_SUCCESS && legacy != 0 {
        let h = ipc::export(dev, base)?;
        return Ok(Some(Alloc { base, size: asize, ipc: h, legacy: true, fd: None }));
    }
    let mut h: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: out-pointer to a local; ptr lies in a mapped range (checked above).
    if unsafe { cu::cuMemRetainAllocationHandle(&mut h, ptr as *mut std::ffi::c_void) } != cu::CUresult::CUDA_SUCCESS {
        return Ok(None);
    }
    let fd = export_fd(h);
    // SAFETY: drops the reference cuMemRetainAllocationHandle took.
    unsafe { cu::cuMemRelease(h) };
    let Some(fd) = fd else { return Ok(None) };
    Ok(Some(Alloc { base, size: asize, ipc: [0; IPC_HANDLE_BYTES], legacy: false, fd: Some(fd) }))
}

pub use crate::gpu::suspendable::{export_fd, import_fd};

impl Alloc {
    /// How a peer on GPU `peer_device` maps it: the message kind and the descriptor to send.
    /// None if that peer cannot use it.
    pub fn share_with(&self, same_process: bool, peer_device: i32) -> Option<(Kind, Option<RawFd>)> {
        if same_process {
            // cuMemAlloc memory is reachable once peer access is on (the channels turned it on
            // between every pair of GPUs of the communicator); cuMem memory only where the owner
            // granted that GPU access.
            return if self.legacy || self.peer_may_access(peer_device) { Some((Kind::Ptr, None)) } else { None };
        }
        if self.legacy {
            Some((Kind::Ipc, None))
        } else {
            self.fd.as_ref().map(|f| (Kind::Fd, Some(f.as_raw_fd())))
        }
    }

    fn peer_may_access(&self, device: i32) -> bool {
        let mut flags: u64 = 0;
        let loc = location(device);
        // SAFETY: out-pointer to a local; base is a mapped cuMem address.
        let rc = unsafe { cu::cuMemGetAccess(&mut flags, &loc, self.base) };
        rc == cu::CUresult::CUDA_SUCCESS && flags == cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u64
    }
}

/// A peer's cuMem allocation imported from its file descriptor and mapped here.
pub struct VmmImport {
    pub ptr: u64,
    size: usize,
    handle: cu::CUmemGenericAllocationHandle,
    dev: &'static Device,
}

impl VmmImport {
    pub fn map(dev: &'static Device, fd: &OwnedFd, size: u64) -> Result<VmmImport> {
        let _g = CtxGuard::new(dev)?;
        let size = size as usize;
        let handle = import_fd(fd)?;
        let ptr = match map_handle(handle, size, 0, &[dev.ordinal]) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: imported above, not mapped anywhere.
                unsafe { cu::cuMemRelease(handle) };
                return Err(e);
            }
        };
        Ok(VmmImport { ptr, size, handle, dev })
    }
}

impl Drop for VmmImport {
    fn drop(&mut self) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: mapped by `map`, released once; kernels are done with it (the registration
            // thread drops imports only after the peer retired them or the communicator ended).
            let _ = unsafe { unmap_handle(self.ptr, self.size, self.handle) };
        }
    }
}

/// For error messages of the importing side.
pub fn kind_error(kind: Kind) -> Error {
    Error::internal(format!("registration message of kind {kind:?} without what it needs"))
}
