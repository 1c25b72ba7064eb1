//! The text behind ncclGetLastError: NCCL's `char ncclLastError[1024]`, overwritten by every WARN
//! (whatever NCCL_DEBUG says) and handed to C as a pointer that stays valid forever.

use parking_lot::Mutex;
use std::ffi::c_char;
use std::fmt::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};

pub const LAST_ERROR_CAP: usize = 1024;

/// A NUL-terminated byte buffer C may read at any time. The bytes are atomics so Rust's own
/// accesses stay defined while C reads the array without synchronisation, as it does with NCCL.
pub struct LastError {
    bytes: [AtomicU8; LAST_ERROR_CAP],
    writer: Mutex<()>,
}

impl LastError {
    pub const fn new() -> LastError {
        LastError { bytes: [const { AtomicU8::new(0) }; LAST_ERROR_CAP], writer: Mutex::new(()) }
    }

    /// Replaces the text with `args`, cut to 1023 bytes as vsnprintf into 1024 would.
    pub fn record(&self, args: fmt::Arguments) {
        let mut text = Truncating { buf: [0; LAST_ERROR_CAP - 1], len: 0 };
        let _ = text.write_fmt(args); // a failing Display impl leaves what it wrote so far
        let _guard = self.writer.lock();
        for (dst, &b) in self.bytes.iter().zip(&text.buf[..text.len]) {
            dst.store(b, Ordering::Relaxed);
        }
        self.bytes[text.len].store(0, Ordering::Release);
    }

    /// The C view: valid as long as `self` lives (the global one is a static).
    pub fn as_ptr(&self) -> *const c_char {
        self.bytes.as_ptr() as *const c_char
    }

    /// The current text, up to its NUL (for Rust callers and tests).
    pub fn text(&self) -> String {
        let _guard = self.writer.lock();
        let bytes: Vec<u8> =
            self.bytes.iter().map(|b| b.load(Ordering::Relaxed)).take_while(|&b| b != 0).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Default for LastError {
    fn default() -> Self {
        LastError::new()
    }
}

/// A fixed buffer that keeps the first bytes written and drops the rest, without allocating.
struct Truncating {
    buf: [u8; LAST_ERROR_CAP - 1],
    len: usize,
}

impl Write for Truncating {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn empty_until_recorded() {
        let e = LastError::new();
        assert_eq!(e.text(), "");
        assert_eq!(unsafe { CStr::from_ptr(e.as_ptr()) }.to_bytes(), b"");
    }

    #[test]
    fn records_and_overwrites() {
        let e = LastError::new();
        e.record(format_args!("Invalid config blocking attribute value {}", 7));
        assert_eq!(e.text(), "Invalid config blocking attribute value 7");
        e.record(format_args!("short"));
        assert_eq!(unsafe { CStr::from_ptr(e.as_ptr()) }.to_str(), Ok("short"));
    }

    #[test]
    fn truncates_to_1023_bytes() {
        let e = LastError::new();
        let long = "x".repeat(3000);
        e.record(format_args!("{long}"));
        let c = unsafe { CStr::from_ptr(e.as_ptr()) };
        assert_eq!(c.to_bytes().len(), LAST_ERROR_CAP - 1);
        assert!(c.to_bytes().iter().all(|&b| b == b'x'));
    }
}
