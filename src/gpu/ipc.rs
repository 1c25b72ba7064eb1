//! CUDA IPC: sharing a device allocation with another process on the same host.

use std::collections::HashMap;
use std::hash::Hash;

use cudarc::driver::sys as cu;
use parking_lot::{Condvar, Mutex};

use super::context::{CtxGuard, Device};
use super::driver::check;
use crate::error::Result;

/// Size of a CUDA IPC memory handle (CUipcMemHandle), in bytes.
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

/// A mapping a process holds once per key, however many of its users ask for it: the first
/// `acquire` opens it, the last `release` closes it. Opening or closing one key runs outside the
/// lock, and meanwhile other users of that key wait (other keys go on).
pub(crate) struct Shared<K> {
    slots: Mutex<HashMap<K, Slot>>,
    changed: Condvar,
}

enum Slot {
    /// Being opened or closed by some thread.
    Busy,
    Open { ptr: u64, users: usize },
}

impl<K: Hash + Eq + Clone> Shared<K> {
    pub(crate) fn new() -> Shared<K> {
        Shared { slots: Mutex::new(HashMap::new()), changed: Condvar::new() }
    }

    /// The mapping of `key`, opened with `open` unless this process holds it already.
    pub(crate) fn acquire(&self, key: &K, open: impl FnOnce() -> Result<u64>) -> Result<u64> {
        let mut slots = self.slots.lock();
        loop {
            match slots.get_mut(key) {
                Some(Slot::Open { ptr, users }) => {
                    *users += 1;
                    return Ok(*ptr);
                }
                Some(Slot::Busy) => self.changed.wait(&mut slots),
                None => break,
            }
        }
        slots.insert(key.clone(), Slot::Busy);
        drop(slots);
        let r = open();
        let mut slots = self.slots.lock();
        match &r {
            Ok(ptr) => slots.insert(key.clone(), Slot::Open { ptr: *ptr, users: 1 }),
            Err(_) => slots.remove(key),
        };
        drop(slots);
        self.changed.notify_all();
        r
    }

    /// One user of `key` is done with it; the last one closes it with `close`.
    pub(crate) fn release(&self, key: &K, close: impl FnOnce(u64)) {
        let mut slots = self.slots.lock();
        let ptr = match slots.get_mut(key) {
            Some(Slot::Open { users, .. }) if *users > 1 => {
                *users -= 1;
                return;
            }
            Some(Slot::Open { ptr, .. }) => *ptr,
            _ => return, // not acquired: nothing of ours to close
        };
        slots.insert(key.clone(), Slot::Busy);
        drop(slots);
        close(ptr);
        self.slots.lock().remove(key);
        self.changed.notify_all();
    }
}

/// Every IPC mapping of this process, by device and handle. The ranks of one process on one GPU
/// map each peer's buffer once between them: the driver's answer to a second cuIpcOpenMemHandle
/// of a handle this context holds is not dependable (CUDA_ERROR_ALREADY_MAPPED where two threads
/// open it, as UCX found), and the rank that got it failed its init. Two processes x two ranks on
/// one GPU did exactly that at every communicator: each process's two ranks open the other
/// process's two buffers at the same moment.
fn imports() -> &'static Shared<(i32, [u8; IPC_HANDLE_BYTES])> {
    static S: std::sync::OnceLock<Shared<(i32, [u8; IPC_HANDLE_BYTES])>> = std::sync::OnceLock::new();
    S.get_or_init(Shared::new)
}

/// Another process's allocation, mapped into `dev`'s context (shared with this process's other
/// importers of it); unmapped when the last of them drops it.
pub struct ImportedBuffer {
    /// The allocation's base address in this process.
    pub ptr: cu::CUdeviceptr,
    dev: &'static Device,
    handle: [u8; IPC_HANDLE_BYTES],
}

impl ImportedBuffer {
    /// Maps the allocation `handle` names (cuIpcOpenMemHandle, once per process and device).
    pub fn open(dev: &'static Device, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<ImportedBuffer> {
        let ptr = imports().acquire(&(dev.ordinal, *handle), || {
            let _g = CtxGuard::new(dev)?;
            let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
            for (o, i) in h.reserved.iter_mut().zip(handle.iter()) {
                *o = *i as std::ffi::c_char;
            }
            let mut ptr: cu::CUdeviceptr = 0;
            let flags = cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
            // SAFETY: out-pointer to a local; the handle bytes came from the exporting process.
            check(unsafe { cu::cuIpcOpenMemHandle_v2(&mut ptr, h, flags) }, "cuIpcOpenMemHandle")?;
            Ok(ptr)
        })?;
        Ok(ImportedBuffer { ptr, dev, handle: *handle })
    }
}

impl Drop for ImportedBuffer {
    fn drop(&mut self) {
        let dev = self.dev;
        imports().release(&(dev.ordinal, self.handle), |ptr| {
            if let Ok(_g) = CtxGuard::new(dev) {
                // SAFETY: ptr came from cuIpcOpenMemHandle and is closed once, by its last user.
                unsafe { cu::cuIpcCloseMemHandle(ptr) };
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    /// Users of one key share one opening, however they race; the last release closes it once,
    /// and a later acquire opens it afresh. (Before: every importer opened the handle itself.)
    #[test]
    fn one_mapping_per_key_however_many_importers() {
        let shared: Shared<u32> = Shared::new();
        let (opens, closes) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let n = 8;
        let start = Barrier::new(n);
        let ptrs: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        shared
                            .acquire(&7, || {
                                let k = opens.fetch_add(1, Ordering::SeqCst);
                                // Long enough for the others to arrive while it opens.
                                std::thread::sleep(std::time::Duration::from_millis(50));
                                Ok(0x1000 + k as u64)
                            })
                            .expect("acquire")
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(opens.load(Ordering::SeqCst), 1, "opened once");
        assert!(ptrs.iter().all(|&p| p == 0x1000), "{ptrs:?}");
        // Another key is opened on its own.
        assert_eq!(shared.acquire(&8, || Ok(0x2000)).expect("other key"), 0x2000);
        for _ in 0..n - 1 {
            shared.release(&7, |_| {
                closes.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(closes.load(Ordering::SeqCst), 0, "still in use");
        shared.release(&7, |p| {
            assert_eq!(p, 0x1000);
            closes.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(closes.load(Ordering::SeqCst), 1, "closed once, by the last user");
        assert_eq!(shared.acquire(&7, || Ok(0x3000)).expect("reopen"), 0x3000, "opened afresh");
        // A release of something never acquired closes nothing.
        shared.release(&9, |_| panic!("not ours"));
    }

    /// A failed open is not remembered: the next importer tries again.
    #[test]
    fn a_failed_open_is_retried_by_the_next_importer() {
        let shared: Shared<u32> = Shared::new();
        assert!(shared.acquire(&1, || Err(crate::error::Error::internal("no"))).is_err());
        assert_eq!(shared.acquire(&1, || Ok(5)).expect("second try"), 5);
    }
}
