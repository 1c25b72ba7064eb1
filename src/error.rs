//! The library's error type. Every fallible internal function returns `Result<T>`; the C ABI
//! layer turns an `Error` into its `ncclResult_t` and logs it once, as a NCCL WARN.

use std::fmt;
use std::panic::Location;

/// `ncclResult_t`, as oxccl produces it. Values are NCCL 2.32's.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultCode {
    /// ncclSuccess.
    Success = 0,
    /// ncclUnhandledCudaError: a CUDA driver call failed.
    UnhandledCudaError = 1,
    /// ncclSystemError: an operating-system call failed (sockets, files, threads, memory).
    SystemError = 2,
    /// ncclInternalError: a fault inside oxccl (an invariant broken, a caught panic).
    InternalError = 3,
    /// ncclInvalidArgument: an argument of the call is invalid.
    InvalidArgument = 4,
    /// ncclInvalidUsage: the call is valid but not now or not here (a revoked communicator,
    /// ranks disagreeing, a group call out of order).
    InvalidUsage = 5,
    /// ncclRemoteError: a peer failed, aborted or went away while work needed it.
    RemoteError = 6,
    /// ncclInProgress: a nonblocking communicator's operation has not finished yet.
    InProgress = 7,
    /// ncclTimeout (NCCL 2.29): a bounded wait ran out of time.
    Timeout = 8,
}

impl ResultCode {
    /// Interprets a raw `ncclResult_t` (which C may hand us with any value).
    pub fn from_raw(v: i32) -> Option<ResultCode> {
        use ResultCode::*;
        Some(match v {
            0 => Success,
            1 => UnhandledCudaError,
            2 => SystemError,
            3 => InternalError,
            4 => InvalidArgument,
            5 => InvalidUsage,
            6 => RemoteError,
            7 => InProgress,
            8 => Timeout,
            _ => return None,
        })
    }

    /// NCCL's exact `ncclGetErrorString` text.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultCode::Success => "no error",
            ResultCode::UnhandledCudaError => "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            ResultCode::SystemError => "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            ResultCode::InternalError => "internal error - please report this issue to the NCCL developers",
            ResultCode::InvalidArgument => "invalid argument (run with NCCL_DEBUG=WARN for details)",
            ResultCode::InvalidUsage => "invalid usage (run with NCCL_DEBUG=WARN for details)",
            ResultCode::RemoteError => "remote process exited or there was a network error",
            ResultCode::InProgress => "NCCL operation in progress",
            ResultCode::Timeout => "timeout",
        }
    }
}

/// An error with its NCCL code, a message for the WARN line, and where it was raised.
#[derive(Clone)]
pub struct Error {
    /// What the C caller receives.
    pub code: ResultCode,
    /// The WARN line's text (ncclGetLastError returns it).
    pub msg: String,
    /// Where in oxccl's source it was raised (`#[track_caller]` constructors).
    pub location: &'static Location<'static>,
}

/// The result of every fallible function of the library.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error of `code` with `msg`, located at the caller.
    #[track_caller]
    pub fn new(code: ResultCode, msg: impl Into<String>) -> Error {
        Error { code, msg: msg.into(), location: Location::caller() }
    }
    /// ncclInvalidArgument.
    #[track_caller]
    pub fn invalid_argument(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::InvalidArgument, msg)
    }
    /// ncclInvalidUsage.
    #[track_caller]
    pub fn invalid_usage(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::InvalidUsage, msg)
    }
    /// ncclSystemError.
    #[track_caller]
    pub fn system(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::SystemError, msg)
    }
    /// ncclInternalError.
    #[track_caller]
    pub fn internal(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::InternalError, msg)
    }
    /// ncclRemoteError.
    #[track_caller]
    pub fn remote(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::RemoteError, msg)
    }
    /// ncclUnhandledCudaError.
    #[track_caller]
    pub fn cuda(msg: impl Into<String>) -> Error {
        Error::new(ResultCode::UnhandledCudaError, msg)
    }
    /// ncclInProgress (not logged as a WARN: it is not a failure).
    #[track_caller]
    pub fn in_progress() -> Error {
        Error::new(ResultCode::InProgress, "operation in progress")
    }
    /// A system error carrying an `std::io::Error`'s text.
    #[track_caller]
    pub fn io(what: &str, e: &std::io::Error) -> Error {
        Error::new(ResultCode::SystemError, format!("{what}: {e}"))
    }

    /// The file name (without directories) and line where the error was raised, for WARN lines.
    pub fn file_line(&self) -> (&'static str, u32) {
        let f = self.location.file();
        let short = f.rsplit('/').next().unwrap_or(f);
        (short, self.location.line())
    }

    /// Adds context in front of the message, keeping code and location.
    pub fn context(mut self, what: impl fmt::Display) -> Error {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (file, line) = self.file_line();
        write!(f, "{:?} at {file}:{line}: {}", self.code, self.msg)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

/// `bail!(Code, "fmt", args)`: return early with an `Error` of that code.
#[macro_export]
macro_rules! bail {
    ($code:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::ResultCode::$code, format!($($arg)*)))
    };
}

/// `ensure!(cond, Code, "fmt", args)`: bail unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $code:ident, $($arg:tt)*) => {
        if !$cond {
            $crate::bail!($code, $($arg)*);
        }
    };
}

/// The message of a caught panic (`std::panic::catch_unwind`'s payload).
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip_and_strings() {
        for v in 0..9 {
            let c = ResultCode::from_raw(v).expect("valid code");
            assert_eq!(c as i32, v);
        }
        assert!(ResultCode::from_raw(9).is_none());
        assert_eq!(ResultCode::Timeout.as_str(), "timeout");
        assert!(ResultCode::from_raw(-1).is_none());
        assert_eq!(ResultCode::InProgress.as_str(), "NCCL operation in progress");
    }

    #[test]
    fn location_is_callers() {
        let e = Error::invalid_argument("x");
        let (file, line) = e.file_line();
        assert_eq!(file, "error.rs");
        assert!(line > 100);
    }
}

