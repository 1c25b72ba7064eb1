//! Who is logging: host name (cut at the first '.', as NCCL's getHostName(.., '.')), process id,
//! kernel thread id, and the CUDA device the calling thread works on.

use std::cell::Cell;

thread_local! {
    // NCCL calls cudaGetDevice per line; oxccl code sets the thread's device when it switches.
    static DEVICE: Cell<i32> = const { Cell::new(0) };
    // NCCL caches syscall(SYS_gettid) per thread; -1 = not fetched yet.
    static TID: Cell<i32> = const { Cell::new(-1) };
}

/// The device shown as `[dev]` in this thread's lines.
pub fn set_thread_device(dev: i32) {
    let _ = DEVICE.try_with(|d| d.set(dev));
}

pub fn thread_device() -> i32 {
    DEVICE.try_with(Cell::get).unwrap_or(0)
}

/// The kernel thread id (what `gettid` returns), cached per thread.
pub fn thread_id() -> i32 {
    TID.try_with(|t| {
        if t.get() < 0 {
            t.set(gettid());
        }
        t.get()
    })
    .unwrap_or_else(|_| gettid())
}

fn gettid() -> i32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

pub fn pid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// The host name up to its first '.'; "unknown" if gethostname fails, as in NCCL.
pub fn short_hostname() -> String {
    let mut buf = [0u8; 1024];
    // SAFETY: the buffer is writable for its whole length; we keep its last byte as NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let end = buf.iter().position(|&b| b == 0 || b == b'.').unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_is_per_thread_and_defaults_to_zero() {
        set_thread_device(5);
        assert_eq!(thread_device(), 5);
        let other = std::thread::spawn(thread_device).join().expect("thread");
        assert_eq!(other, 0);
    }

    #[test]
    fn ids_and_host() {
        assert!(pid() > 0);
        let tid = thread_id();
        assert!(tid > 0);
        assert_eq!(thread_id(), tid);
        let other = std::thread::spawn(thread_id).join().expect("thread");
        assert_ne!(other, tid);
        let host = short_hostname();
        assert!(!host.is_empty() && !host.contains('.'));
    }
}
