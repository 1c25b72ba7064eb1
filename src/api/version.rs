//! Version, error strings, last error, debug re-initialisation.

use std::ffi::{c_char, c_int};

use super::types::{ncclComm_t, ncclResultArg_t, ncclResult_t};
use super::{call, out};
use crate::error::ResultCode;

/// Stores NCCL_VERSION_CODE (23203: NCCL 2.32.3, the newest NCCL whose whole host API oxccl
/// implements) in `*version`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`version` NULL).
#[no_mangle]
pub extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    call("ncclGetVersion", || {
        *out(version, "version")? = crate::NCCL_VERSION_CODE;
        Ok(())
    })
}

/// Returns NCCL's text for a result code ("unknown result code" for any other value): a static
/// string, never freed. Any thread.
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: ncclResultArg_t) -> *const c_char {
    error_string(result).as_ptr()
}

fn error_string(raw: c_int) -> &'static std::ffi::CStr {
    match ResultCode::from_raw(raw) {
        Some(ResultCode::Success) => c"no error",
        Some(ResultCode::UnhandledCudaError) => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        Some(ResultCode::SystemError) => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        Some(ResultCode::InternalError) => c"internal error - please report this issue to the NCCL developers",
        Some(ResultCode::InvalidArgument) => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        Some(ResultCode::InvalidUsage) => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        Some(ResultCode::RemoteError) => c"remote process exited or there was a network error",
        Some(ResultCode::InProgress) => c"NCCL operation in progress",
        Some(ResultCode::Timeout) => c"timeout",
        None => c"unknown result code",
    }
}

/// The text of the last WARN line of this process (`comm` is ignored, as in NCCL), or "" when
/// there was none: the message behind the last error code returned. The string stays valid until
/// the next WARN. Any thread.
#[no_mangle]
pub extern "C" fn ncclGetLastError(_comm: ncclComm_t) -> *const c_char {
    crate::log::last_error_ptr()
}

/// Re-reads NCCL_DEBUG* on the next log call.
#[no_mangle]
#[deprecated(note = "ncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")]
pub extern "C" fn ncclResetDebugInit() {
    let _ = std::panic::catch_unwind(crate::log::reset_debug_init);
}

/// Exported by NCCL 2.28.9 without a declaration; same effect as ncclResetDebugInit.
#[no_mangle]
pub extern "C" fn ncclResetDebugInitInternal() {
    let _ = std::panic::catch_unwind(crate::log::reset_debug_init);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_match_nccl() {
        assert_eq!(error_string(0).to_str().unwrap(), "no error");
        assert_eq!(error_string(7).to_str().unwrap(), "NCCL operation in progress");
        assert_eq!(error_string(8).to_str().unwrap(), "timeout");
        assert_eq!(error_string(9).to_str().unwrap(), "unknown result code");
        assert_eq!(error_string(-1).to_str().unwrap(), "unknown result code");
        for code in 0..8 {
            let c = ResultCode::from_raw(code).unwrap();
            assert_eq!(error_string(code).to_str().unwrap(), c.as_str());
        }
    }

    #[test]
    fn version_is_23203_and_null_is_rejected() {
        let mut v = 0;
        assert_eq!(ncclGetVersion(&mut v), ResultCode::Success);
        assert_eq!(v, 23203);
        assert_eq!(ncclGetVersion(std::ptr::null_mut()), ResultCode::InvalidArgument);
    }
}
