//! NCCL_DEBUG-compatible logging, built on `tracing`.
//!
//! Behaviour follows NCCL 2.28.9 src/debug.cc: NCCL_DEBUG (VERSION, WARN, INFO, ABORT, TRACE),
//! NCCL_DEBUG_SUBSYS (default INIT,BOOTSTRAP,ENV; `^` inverts), NCCL_DEBUG_FILE (%h, %p; else
//! stdout), NCCL_DEBUG_TIMESTAMP_LEVELS/_FORMAT, NCCL_WARN_ENABLE_DEBUG_INFO. Every WARN is also
//! kept for ncclGetLastError, even with NCCL_DEBUG unset.
//!
//! Flow: the macros test `enabled()` (two atomic loads) before formatting anything; `log()` then
//! records WARN text, and turns a shown message into a tracing event handed straight to this
//! module's own subscriber (see `layer`; no global or thread default is installed), which writes
//! the NCCL-format line (see `line`) to C's stdout or NCCL_DEBUG_FILE (see `sink`).

mod last_error;
mod layer;
pub(crate) mod level;
mod line;
mod no_warn;
mod process;
pub(crate) mod settings;
mod sink;
mod state;
mod timestamp;

pub use level::{Level, Subsys};
pub use line::{format_line, LineInfo};
pub use no_warn::no_warn;

use level::ALL_SUBSYS;
use std::ffi::c_char;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

/// ncclGetLastError's buffer.
static LAST_ERROR: last_error::LastError = last_error::LastError::new();

/// The CUDA version NCCL's banner names: the one the driver bindings are built for (cuda-13000).
const CUDA_VERSION: &str = "13.0";

/// The subsystem flags NCCL gives a message: WARN and VERSION lines carry NCCL_ALL.
fn flags_of(level: Level, sub: Subsys) -> u64 {
    match level {
        Level::Warn | Level::Version => ALL_SUBSYS,
        _ => sub.bit(),
    }
}

/// Whether a message of this level and subsystem would be shown. The hot path: two atomic loads
/// (level with Acquire, as NCCL's, then mask), no lock, no allocation; only the first call (or
/// the first after a reset) initialises the logger.
#[inline]
pub fn enabled(level: Level, sub: Subsys) -> bool {
    let flags = flags_of(level, sub);
    match state::passes_fast(level, flags) {
        Some(shown) => shown,
        None => enabled_slow(level, flags),
    }
}

#[cold]
fn enabled_slow(level: Level, flags: u64) -> bool {
    catch_unwind(|| state::Busy::enter().is_some_and(|busy| state::passes(&busy, level, flags)))
        .unwrap_or(false)
}

/// Logs one message. WARNs are recorded for ncclGetLastError whatever the level; a shown
/// message becomes a tracing event. Never panics; a call made from inside the logger on the same
/// thread is dropped rather than deadlocking.
pub fn log(level: Level, sub: Subsys, file: &'static str, line: u32, args: fmt::Arguments) {
    // NCCL's file names are relative to its src/ directory; do the same with ours.
    let file = file.strip_prefix("src/").unwrap_or(file);
    emit(level, flags_of(level, sub), sub, file, line, args);
}

fn emit(level: Level, flags: u64, sub: Subsys, file: &'static str, line: u32, args: fmt::Arguments) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(busy) = state::Busy::enter() else { return };
        let (level, flags) = no_warn::demote(level, flags);
        if level == Level::Warn {
            LAST_ERROR.record(args);
        }
        if state::passes(&busy, level, flags) {
            let call = level == Level::Trace && flags == Subsys::Call.bit();
            layer::emit(level, sub.name(), call, file, line, args);
        }
    }));
}

/// Logs an error returned to C as a WARN at the place it was raised.
pub fn warn_error(e: &crate::error::Error) {
    let (file, line) = e.file_line();
    log(Level::Warn, Subsys::Init, file, line, format_args!("{}", e.msg));
}

/// The CUDA device shown as `[dev]` in this thread's lines (default 0).
pub fn set_thread_device(dev: i32) {
    process::set_thread_device(dev);
}

/// ncclGetLastError: the text of the last WARN, "" if none; valid for the process lifetime.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.as_ptr()
}

/// The text of the last WARN, for Rust callers.
pub fn last_error() -> String {
    LAST_ERROR.text()
}

/// ncclResetDebugInit: NCCL_DEBUG* are read again (and the debug file reopened) on next use.
pub fn reset_debug_init() {
    state::reset();
}

/// Prints "NCCL version 2.32.3+cuda13.0 (oxccl X.Y.Z: ...)" once per process when NCCL_DEBUG is set:
/// a bare line at VERSION and WARN, an INFO line above (NCCL init.cc showVersion).
pub fn version_banner() {
    static SHOWN: AtomicBool = AtomicBool::new(false);
    let _ = catch_unwind(|| {
        let level = match state::Busy::enter() {
            Some(busy) => state::level(&busy),
            None => return,
        };
        if level == Level::None || SHOWN.swap(true, Ordering::AcqRel) {
            return;
        }
        let shown_as = if level <= Level::Warn { Level::Version } else { Level::Info };
        emit(
            shown_as,
            ALL_SUBSYS,
            Subsys::Init,
            file!(),
            line!(),
            format_args!(
                "NCCL version {}.{}.{}+cuda{} (oxccl {}: NCCL's whole host API of that version)",
                crate::NCCL_VERSION_CODE / 10000,
                crate::NCCL_VERSION_CODE / 100 % 100,
                crate::NCCL_VERSION_CODE % 100,
                CUDA_VERSION,
                crate::OXCCL_VERSION
            ),
        );
    });
}

/// NCCL's condition for the banner at communicator init: always above WARN, else only rank 0.
pub fn version_banner_for_rank(rank: i32) {
    let level = match state::Busy::enter() {
        Some(busy) => state::level(&busy),
        None => return,
    };
    if level > Level::Warn || (level != Level::None && rank == 0) {
        version_banner();
    }
}

/// `nccl_info!(Subsys::X, "fmt", args)`: an INFO line, formatted only when shown.
#[macro_export]
macro_rules! nccl_info {
    ($sub:expr, $($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Info, $sub) {
            $crate::log::log($crate::log::Level::Info, $sub, file!(), line!(), format_args!($($arg)*))
        }
    };
}

/// `nccl_trace!(Subsys::X, "fmt", args)`: a TRACE line (Subsys::Call gives NCCL's "NCCL CALL").
#[macro_export]
macro_rules! nccl_trace {
    ($sub:expr, $($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Trace, $sub) {
            $crate::log::log($crate::log::Level::Trace, $sub, file!(), line!(), format_args!($($arg)*))
        }
    };
}

/// `nccl_warn!("fmt", args)`: a WARN line; always recorded for ncclGetLastError.
#[macro_export]
macro_rules! nccl_warn {
    ($($arg:tt)*) => {
        $crate::log::log($crate::log::Level::Warn, $crate::log::Subsys::Init, file!(), line!(), format_args!($($arg)*))
    };
}

// After the macros: macro_rules are in scope only below their definition.
#[cfg(test)]
mod pipeline_tests;
