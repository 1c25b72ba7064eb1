//! Driver presence, initialisation and error conversion.

use std::ffi::CStr;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

use crate::error::{Error, Result};

static INIT: OnceLock<std::result::Result<(), (bool, String)>> = OnceLock::new();

/// Loads libcuda and runs cuInit once per process. A missing library is a system error; a driver
/// that loads but has no usable GPU is a CUDA error.
pub fn ensure() -> Result<()> {
    let r = INIT.get_or_init(|| {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { cu::is_culib_present() } {
            return Err((true, "CUDA driver library (libcuda.so) not found".to_string()));
        }
        // SAFETY: cuInit has no preconditions.
        let rc = unsafe { cu::cuInit(0) };
        if rc != cu::CUresult::CUDA_SUCCESS {
            return Err((false, format!("cuInit failed: {}", describe(rc))));
        }
        Ok(())
    });
    match r {
        Ok(()) => Ok(()),
        Err((true, msg)) => Err(Error::system(msg.clone())),
        Err((false, msg)) => Err(Error::cuda(msg.clone())),
    }
}

/// True once the driver has been loaded and initialised successfully (no attempt is made).
pub fn is_ready() -> bool {
    matches!(INIT.get(), Some(Ok(())))
}

/// "CUDA_ERROR_X (code): description".
pub fn describe(rc: cu::CUresult) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: out-pointers to locals; the driver returns static strings or leaves them NULL.
    unsafe {
        cu::cuGetErrorName(rc, &mut name);
        cu::cuGetErrorString(rc, &mut text);
    }
    let s = |p: *const std::ffi::c_char| {
        if p.is_null() {
            "unknown".to_string()
        } else {
            // SAFETY: non-null pointers from cuGetError* are static NUL-terminated strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!("{} ({}): {}", s(name), rc as i32, s(text))
}

/// Converts a driver result into an error naming the failed call.
#[track_caller]
pub fn check(rc: cu::CUresult, what: &str) -> Result<()> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(format!("Cuda failure '{what}': {}", describe(rc))))
    }
}
