//! The proxy FIFO, host side. GPU threads push triggers (kernels/prims/fifo.cuh): take a position with an
//! atomic add on the device-memory head, wait while the ring is full (position >= tail + size),
//! then publish the trigger with one 128-bit store whose top bit is the lap's commit bit. The proxy
//! consumes positions in order: a slot is ready when its commit bit matches the position's lap
//! (zeroed memory never does), and consuming it advances the tail in pinned host memory, which is
//! what frees the slot for the next lap. Sync triggers additionally advance `flush_done` once
//! everything before them has completed, which is what a flushing GPU thread waits for.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::trigger::{commit_bit, COMMIT_MASK};
use crate::device_abi::Trigger;
use crate::error::{Error, Result};

/// Default ring size: enough for every block of a launch to have several requests in flight.
pub const DEFAULT_SLOTS: u32 = 512;

/// The host-visible words of one FIFO: 2 x size trigger words, then tail, flush_done, stop.
/// Backed by pinned host memory in production (the device maps it) or plain memory in tests.
#[derive(Clone, Copy)]
pub struct FifoWords {
    /// 2 x `size` trigger words (each trigger is two words).
    pub slots: *const AtomicU64,
    /// How far the host has consumed: the device may fill positions below tail + size.
    pub tail: *const AtomicU64,
    /// The position up to which the host has carried out triggers (device flushes wait on it).
    pub flush_done: *const AtomicU64,
    /// Non-zero releases every device waiter (proxy stopped, communicator aborted).
    pub stop: *const AtomicU32,
    /// Slots in the ring.
    pub size: u32,
}

// SAFETY: the words are shared with the GPU by design and only accessed atomically.
unsafe impl Send for FifoWords {}
unsafe impl Sync for FifoWords {}

impl FifoWords {
    /// Bytes the host-visible words take, for `size` slots (trigger array first, 16-byte aligned).
    pub fn bytes(size: u32) -> usize {
        size as usize * 16 + 3 * 8
    }

    /// Lays the words out over `base`.
    ///
    /// # Safety
    /// `base` must be 16-byte aligned, zeroed, valid for `FifoWords::bytes(size)` bytes and
    /// outlive every use of the result.
    pub unsafe fn over(base: *mut u8, size: u32) -> Result<FifoWords> {
        if size == 0 || !size.is_power_of_two() || size > 1 << 20 {
            return Err(Error::invalid_argument(format!("FIFO size {size} must be a power of two in [1, 2^20]")));
        }
        if !(base as usize).is_multiple_of(16) {
            return Err(Error::internal("FIFO memory is not 16-byte aligned"));
        }
        let words = base.cast::<AtomicU64>();
        // SAFETY: offsets stay within the `bytes(size)` the caller vouched for.
        unsafe {
            let tail = words.add(2 * size as usize);
            Ok(FifoWords { slots: words, tail, flush_done: tail.add(1), stop: tail.add(2).cast::<AtomicU32>(), size })
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: i < 2 * size (callers index slots only), memory valid per `over`.
        unsafe { &*self.slots.add(i) }
    }
    /// The `tail` word.
    pub fn tail(&self) -> &AtomicU64 {
        // SAFETY: valid per `over`.
        unsafe { &*self.tail }
    }
    /// The `flush_done` word.
    pub fn flush_done(&self) -> &AtomicU64 {
        // SAFETY: valid per `over`.
        unsafe { &*self.flush_done }
    }
    /// The `stop` word.
    pub fn stop(&self) -> &AtomicU32 {
        // SAFETY: valid per `over`.
        unsafe { &*self.stop }
    }

    /// The trigger at `pos` if its pusher has published it. Acquire on the word holding the commit
    /// bit: the other word came in the same 128-bit store.
    pub fn read(&self, pos: u64) -> Option<Trigger> {
        let i = (pos % u64::from(self.size)) as usize;
        let snd = self.word(2 * i + 1).load(Ordering::Acquire);
        if snd & COMMIT_MASK != commit_bit(pos, self.size) {
            return None;
        }
        Some(Trigger { fst: self.word(2 * i).load(Ordering::Relaxed), snd: snd & !COMMIT_MASK })
    }

    /// What a pushing GPU thread does (kernels/prims/fifo.cuh), for tests and the host-side emulation:
    /// returns the position used, or None when released while waiting for a free slot.
    pub fn push_like_device(&self, head: &AtomicU64, t: Trigger) -> Option<u64> {
        let pos = head.fetch_add(1, Ordering::Relaxed);
        while pos >= self.tail().load(Ordering::Acquire) + u64::from(self.size) {
            if self.stop().load(Ordering::Acquire) != 0 {
                return None;
            }
            // Unlike a GPU thread, an emulating CPU thread may be starving the proxy of a core.
            std::thread::yield_now();
        }
        let i = (pos % u64::from(self.size)) as usize;
        // The device writes both words in one store; here the commit word goes last, with release.
        self.word(2 * i).store(t.fst, Ordering::Relaxed);
        self.word(2 * i + 1).store((t.snd & !COMMIT_MASK) | commit_bit(pos, self.size), Ordering::Release);
        Some(pos)
    }

    /// What a flushing GPU thread does after pushing a sync trigger at `pos`.
    pub fn flush_like_device(&self, pos: u64) -> bool {
        while self.flush_done().load(Ordering::Acquire) <= pos {
            if self.stop().load(Ordering::Acquire) != 0 {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }
}

/// The kernels' view of a FIFO whose words (`FifoWords::bytes(size)`, host-mapped) start at device
/// address `base`, with its head counter at `head` (device memory, zeroed).
pub fn device_view(base: u64, head: u64, size: u32) -> crate::device_abi::FifoDevice {
    let words = 16 * u64::from(size);
    crate::device_abi::FifoDevice {
        triggers: base,
        tail: base + words,
        flush_done: base + words + 8,
        stop: base + words + 16,
        head,
        size,
        _pad0: 0,
    }
}

/// The consuming side: positions in order, one at a time.
pub struct FifoHost {
    words: FifoWords,
    next: u64,
}

impl FifoHost {
    /// The consumer of `words`, starting at its current tail.
    pub fn new(words: FifoWords) -> FifoHost {
        FifoHost { next: words.tail().load(Ordering::Acquire), words }
    }

    /// The next trigger, if published.
    pub fn poll(&self) -> Option<Trigger> {
        self.words.read(self.next)
    }

    /// The position of the next trigger to consume.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Frees the current slot. Release: the handler's reads of the trigger happened before.
    pub fn pop(&mut self) {
        self.next += 1;
        self.words.tail().store(self.next, Ordering::Release);
    }

    /// Every trigger before `pos` has completed: release flushing GPU threads up to it.
    pub fn complete_through(&self, pos: u64) {
        self.words.flush_done().store(pos, Ordering::Release);
    }

    /// Releases every device waiter for good.
    pub fn release(&self) {
        self.words.stop().store(1, Ordering::Release);
    }
}

/// Plain-memory FIFO words for tests (and for a host-only transport).
pub struct HeapFifo {
    _mem: Vec<u128>,
    /// The words, in `_mem`.
    pub words: FifoWords,
}

impl HeapFifo {
    /// A zeroed FIFO of `size` slots.
    pub fn new(size: u32) -> Result<HeapFifo> {
        let mut mem = vec![0u128; FifoWords::bytes(size).div_ceil(16)];
        // SAFETY: u128 storage is 16-byte aligned, zeroed, and lives as long as `self` (the Vec's
        // buffer does not move when the HeapFifo does).
        let words = unsafe { FifoWords::over(mem.as_mut_ptr().cast(), size)? };
        Ok(HeapFifo { _mem: mem, words })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn sizes_must_be_powers_of_two() {
        assert!(HeapFifo::new(0).is_err());
        assert!(HeapFifo::new(3).is_err());
        assert!(HeapFifo::new(1).is_ok());
        assert!(HeapFifo::new(512).is_ok());
    }

    #[test]
    fn zero_triggers_and_exact_lap_wrap() {
        let f = HeapFifo::new(4).unwrap();
        let head = AtomicU64::new(0);
        let mut host = FifoHost::new(f.words);
        assert!(host.poll().is_none(), "zeroed memory is not a trigger");
        for pos in 0..12u64 {
            let t = if pos % 3 == 0 { Trigger::default() } else { Trigger { fst: pos, snd: pos << 8 } };
            assert_eq!(f.words.push_like_device(&head, t), Some(pos));
            assert_eq!(host.poll(), Some(t), "position {pos}");
            host.pop();
            assert!(host.poll().is_none(), "slot of the next lap still holds the old lap's trigger");
        }
    }

    #[test]
    fn a_full_ring_blocks_the_pusher_until_the_proxy_consumes() {
        let f = Arc::new(HeapFifo::new(4).unwrap());
        let head = Arc::new(AtomicU64::new(0));
        for i in 0..4 {
            f.words.push_like_device(&head, Trigger { fst: i, snd: 0 }).unwrap();
        }
        let (f2, h2) = (f.clone(), head.clone());
        let pusher = std::thread::spawn(move || f2.words.push_like_device(&h2, Trigger { fst: 99, snd: 1 }));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!pusher.is_finished(), "the fifth push must wait: the ring is full");
        let mut host = FifoHost::new(f.words);
        assert_eq!(host.poll().unwrap().fst, 0, "the first slot was not overwritten");
        host.pop();
        assert_eq!(pusher.join().unwrap(), Some(4));
        for want in [1, 2, 3, 99] {
            assert_eq!(host.poll().unwrap().fst, want);
            host.pop();
        }
    }

    #[test]
    fn many_pushers_every_trigger_exactly_once() {
        let f = Arc::new(HeapFifo::new(8).unwrap());
        let head = Arc::new(AtomicU64::new(0));
        let (threads, each) = (4u64, 5000u64);
        let pushers: Vec<_> = (0..threads)
            .map(|t| {
                let (f, head) = (f.clone(), head.clone());
                std::thread::spawn(move || {
                    for k in 0..each {
                        f.words.push_like_device(&head, Trigger { fst: t << 32 | k, snd: k & 0xff }).unwrap();
                    }
                })
            })
            .collect();
        let mut host = FifoHost::new(f.words);
        let mut seen = vec![0u64; threads as usize];
        let t0 = Instant::now();
        let mut got = 0;
        while got < threads * each {
            // A hang guard, not a timing check: on a loaded 2-core machine a pusher that took a
            // slot can be descheduled before it commits, and the consumer then waits for it.
            assert!(t0.elapsed() < Duration::from_secs(600), "consumer starved");
            let Some(t) = host.poll() else {
                std::thread::yield_now();
                continue;
            };
            {
                let (th, k) = (t.fst >> 32, t.fst & 0xffff_ffff);
                assert_eq!(k, seen[th as usize], "pusher {th}'s triggers arrive in its order");
                assert_eq!(t.snd, k & 0xff);
                seen[th as usize] += 1;
                host.pop();
                got += 1;
            }
        }
        pushers.into_iter().for_each(|p| p.join().unwrap());
        assert!(host.poll().is_none());
    }

    #[test]
    fn release_frees_blocked_pushers_and_flushers() {
        let f = Arc::new(HeapFifo::new(1).unwrap());
        let head = Arc::new(AtomicU64::new(0));
        f.words.push_like_device(&head, Trigger::default()).unwrap();
        let (f2, h2) = (f.clone(), head.clone());
        let blocked = std::thread::spawn(move || f2.words.push_like_device(&h2, Trigger::default()));
        let f3 = f.clone();
        let flusher = std::thread::spawn(move || f3.words.flush_like_device(0));
        std::thread::sleep(Duration::from_millis(20));
        FifoHost::new(f.words).release();
        assert_eq!(blocked.join().unwrap(), None);
        assert!(!flusher.join().unwrap());
    }
}
