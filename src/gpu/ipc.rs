//! CUDA IPC: sharing a device allocation with another process on the same host.

use cudarc::driver::sys as cu;

use super::context::{CtxGuard, Device};
use super::driver::check;
use crate::error::Result;

pub const IPC_HANDLE_BYTES: usize = 64;

/// The IPC handle of the allocation that starts at `base` (must be a cuMemAlloc base pointer).
pub fn export(dev: &'static Device, base: cu::CUdeviceptr) -> Result<[u8; IPC_HANDLE_BYTES]> {
    let _g = CtxGuard::new(dev)?;
    let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: out-pointer to a local; base is an allocation of this context.
    check(unsafe { cu::cuIpcGetMemHandle(&mut h, base) }, "cuIpcGetMemHandle")?;
    let mut out = [0u8; IPC_HANDLE_BYTES];
    for (o, i) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *i as u8;
    }
    Ok(out)
}

/// Another process's allocation, mapped into `dev`'s context; unmapped on drop.
pub struct ImportedBuffer {
    pub ptr: cu::CUdeviceptr,
    dev: &'static Device,
}

impl ImportedBuffer {
    pub fn open(dev: &'static Device, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<ImportedBuffer> {
        let _g = CtxGuard::new(dev)?;
        let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
        for (o, i) in h.reserved.iter_mut().zip(handle.iter()) {
            *o = *i as std::ffi::c_char;
        }
        let mut ptr: cu::CUdeviceptr = 0;
        let flags = cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: out-pointer to a local; the handle bytes came from the exporting process.
        check(unsafe { cu::cuIpcOpenMemHandle_v2(&mut ptr, h, flags) }, "cuIpcOpenMemHandle")?;
        Ok(ImportedBuffer { ptr, dev })
    }
}

impl Drop for ImportedBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: ptr came from cuIpcOpenMemHandle and is closed once.
            unsafe { cu::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}
