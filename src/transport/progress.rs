//! Pipelined staged steps: a large staged step's copies through its host arena overlap the wire.
//!
//! A staged step (`stage`) copies all its GPU inputs into the arena before it hands the step to
//! the proxy, and its results out only after the proxy has finished: at 2 simulated hosts x 2 a
//! 64 MiB Send/Recv took 8.8-9.4 ms staged against 6.5-6.9 with the proxy's pipelined copy-engine
//! copies (BENCHMARKS.md of 2026-11-27, 148bd4f), which the proxy may no longer make. So (unless
//! OXCCL_NET_STAGE_PIPELINE=0) a staged step moving more than `threshold()` through its arena
//! either way is handed over first and flags its copies chunk by chunk in the arena instead:
//! - *pre* flags: the kernel sets chunk c's flag (to the step's tag) once its blocks have copied
//!   that chunk of the GPU inputs into the arena; a link thread sends a range only once every
//!   chunk it covers is flagged (`Gate`), and the proxy reads inputs for reductions and inline
//!   phases only once every chunk is;
//! - *post* flags: the proxy sets chunk c's flag once every byte of that chunk of the results is
//!   final in the arena (received, or combined: `Marker`), and the kernel copies the chunk to the
//!   GPU once it sees the flag. The proxy publishes none before every pre flag is set, so a result
//!   never overwrites GPU memory a pre-copy still reads (in-place calls).
//!
//! Chunks are `Layout::chunk` bytes of each copy's arena range (`chunk_for`: a quarter of what the
//! step moves, 32-256 KiB), numbered over the copies in kernel order
//! (kernels/colls/net_step.cu computes the same numbering). A flag holds the step's tag (its packets'
//! flag, `packets::flag`: the step number's low 31 bits with the top bit set), so the arena's
//! flags never need clearing: an older step's flags hold another tag.
//!
//! The layout is a pure function of the copies, tested here; the flags are host-mapped memory
//! read and written with acquire/release ordering on the host and system-scope acquire/release on
//! the GPU.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};
use crate::log::Subsys;

/// Most bytes per flag: a 1 MiB copy keeps four of the kernel's blocks busy, and a link thread
/// writes at most a chunk before it looks at the next flag.
pub const CHUNK: u64 = 256 << 10;
/// Fewest bytes per flag: a smaller step still splits into four chunks, so that its copies into
/// the arena, the wire and its copies out overlap (a step of one chunk would not pipeline).
pub const MIN_CHUNK: u64 = 32 << 10;
// kernels/colls/net_step.cu takes the chunk size from the step's arguments (`pipe`); the largest is
// OX_NET_PIPE_CHUNK in the generated header.
const _: () = assert!(CHUNK == crate::device_abi::OX_NET_PIPE_CHUNK as u64);

/// The chunk size of a pipelined step whose pre- or post-copies move at most `moved` bytes either
/// way: a quarter of it rounded up to a power of two, within [`MIN_CHUNK`, `CHUNK`]. From 1 MiB on
/// that is `CHUNK`, the one size before chunks were chosen per step; a 512 KiB step goes in four
/// chunks of 128 KiB, so its copy in, the wire and its copy out overlap.
pub fn chunk_for(moved: u64) -> u64 {
    moved.div_ceil(4).next_power_of_two().clamp(MIN_CHUNK, CHUNK)
}

/// A staged step pipelines when its pre- or post-copies move more than this (and it has no
/// packets), unless OXCCL_NET_STAGE_PIPELINE_MIN says otherwise: below, one copy before and one
/// after cost less than the flags' round trips (at 2 simulated hosts x 1, 256 KiB steps in 64 KiB
/// chunks were no faster; 512 KiB-1 MiB ones in quarters were up to 3x faster; BENCHMARKS.md
/// of 2026-11-28, 491a903).
pub const MIN_BYTES: u64 = 256 << 10;

/// The threshold above which staged steps pipeline, or None when they never do.
/// OXCCL_NET_STAGE_PIPELINE: 1 (default: at 2 x 2 simulated hosts the kernel as it stands ran every
/// multihost-check binary eagerly and under graphs to 8 MB, and the PyTorch suite with its mixed
/// AllReduce/Broadcast sequence; it took 64 MB Broadcast from 6.3 to 3.6 ms, AllGather from 2.8 to
/// 2.0; BENCHMARKS.md of 2026-11-27, 9d158f8) or 0 (copy everything before the hand-over and
/// after the step). OXCCL_NET_STAGE_PIPELINE_MIN: bytes, `MIN_BYTES` unless set
/// (at least one chunk; tuning).
pub fn threshold() -> Option<u64> {
    let on = match crate::config::env("OXCCL_NET_STAGE_PIPELINE").map(|v| v.trim().to_string()) {
        None => true,
        Some(v) if v == "1" => true,
        Some(v) if v == "0" => {
            nccl_info!(Subsys::Net, "OXCCL_NET_STAGE_PIPELINE set by environment to 0");
            false
        }
        Some(v) => {
            nccl_warn!("OXCCL_NET_STAGE_PIPELINE={v}: expected 0 or 1, using 1");
            true
        }
    };
    on.then(|| parse_min(crate::config::env("OXCCL_NET_STAGE_PIPELINE_MIN").as_deref()))
}

/// OXCCL_NET_STAGE_PIPELINE_MIN's value: a byte count of at least one chunk, else `MIN_BYTES`.
fn parse_min(v: Option<&str>) -> u64 {
    let Some(v) = v else { return MIN_BYTES };
    match v.trim().parse::<u64>() {
        Ok(n) if n >= MIN_CHUNK => {
            nccl_info!(Subsys::Net, "OXCCL_NET_STAGE_PIPELINE_MIN set by environment to {n}");
            n
        }
        _ => {
            nccl_warn!("OXCCL_NET_STAGE_PIPELINE_MIN={v}: expected a byte count of at least {MIN_CHUNK}, using {MIN_BYTES}");
            MIN_BYTES
        }
    }
}

/// Where a pipelined step's copies and flags lie in its arena (offsets from the arena's start).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Arena range of each pre-copy (GPU -> arena), in kernel order: (offset, bytes).
    pub pre: Vec<(u64, u64)>,
    /// Arena range of each post-copy (arena -> GPU), in kernel order.
    pub post: Vec<(u64, u64)>,
    /// Offset of the pre flags, a `u32` per chunk.
    pub pre_flags: u64,
    /// Offset of the post flags, a `u32` per chunk.
    pub post_flags: u64,
    /// Bytes per chunk (`chunk_for`); the kernel gets it as `NetStepArgs::pipe`.
    pub chunk: u64,
}

/// Number of chunks of `chunk` bytes of copies of these sizes.
fn chunk_count(spans: &[(u64, u64)], chunk: u64) -> usize {
    spans.iter().map(|&(_, n)| n.div_ceil(chunk) as usize).sum()
}

/// The chunks that overlap arena range [lo, hi): (flag index, chunk's arena start, chunk's end).
fn covering(spans: &[(u64, u64)], chunk: u64, lo: u64, hi: u64) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    let mut first = 0usize;
    for &(at, n) in spans {
        let k = n.div_ceil(chunk) as usize;
        if lo < at + n && at < hi {
            let a = (lo.max(at) - at) / chunk;
            let b = (hi.min(at + n) - at).div_ceil(chunk);
            for j in a..b {
                let c0 = at + j * chunk;
                out.push((first + j as usize, c0, (c0 + chunk).min(at + n)));
            }
        }
        first += k;
    }
    out
}

impl Layout {
    /// Reserves the flag arrays with `host` (the step's arena allocator) for these copies, cut
    /// into chunks of `chunk` bytes (a power of two within [`MIN_CHUNK`, `CHUNK`]).
    pub fn new(pre: Vec<(u64, u64)>, post: Vec<(u64, u64)>, chunk: u64, host: &mut dyn FnMut(u64) -> u64) -> Layout {
        debug_assert!(chunk.is_power_of_two() && (MIN_CHUNK..=CHUNK).contains(&chunk));
        let pre_flags = host(4 * chunk_count(&pre, chunk) as u64);
        let post_flags = host(4 * chunk_count(&post, chunk) as u64);
        Layout { pre, post, pre_flags, post_flags, chunk }
    }
}

/// Spins (then yields) until `ready()`, failing when the communicator is aborted (`abort`: host
/// address of the abort flag's first word).
fn wait_until(ready: &dyn Fn() -> bool, abort: usize, what: &str) -> Result<()> {
    let mut spins = 0u32;
    while !ready() {
        // SAFETY: the abort flag, written by ncclCommAbort and the watchdog, alive with Net.
        if unsafe { std::ptr::read_volatile(abort as *const u32) } != 0 {
            return Err(Error::remote(format!("communicator aborted while {what}")));
        }
        spins = spins.wrapping_add(1);
        if spins > 1024 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// The pre flags of one run of a step: what has been copied into the arena.
pub struct Gate {
    arena: usize,
    flags: usize,
    spans: Vec<(u64, u64)>,
    chunk: u64,
    tag: u32,
    abort: usize,
}

// SAFETY: the addresses are the step's arena (host-mapped, alive with Net until the proxy has
// finished the step, which waits for every job using the gate) and are only read atomically.
unsafe impl Send for Gate {}
unsafe impl Sync for Gate {}

impl Gate {
    /// `arena`: host address of the arena the kernel used; `abort`: of the abort flag (a `u32`),
    /// which outlives the step.
    pub fn new(layout: &Layout, arena: *mut u8, tag: u32, abort: *const u32) -> Gate {
        let abort = abort as usize;
        Gate { arena: arena as usize, flags: arena as usize + layout.pre_flags as usize, spans: layout.pre.clone(), chunk: layout.chunk, tag, abort }
    }

    /// Bytes per flag: a link thread sends this much at a time from a gated range.
    pub fn chunk(&self) -> u64 {
        self.chunk
    }

    fn flag(&self, i: usize) -> &AtomicU32 {
        // SAFETY: i < chunk_count(spans, chunk): inside the flag array reserved in the arena; u32-aligned
        // (arena reservations are 16-byte aligned).
        unsafe { &*(self.flags as *const AtomicU32).add(i) }
    }

    fn ready(&self, lo: u64, hi: u64) -> bool {
        // Acquire: the kernel's copies of the chunk are visible once its flag is.
        covering(&self.spans, self.chunk, lo, hi).iter().all(|&(i, _, _)| self.flag(i).load(Ordering::Acquire) == self.tag)
    }

    /// How many bytes from host address `p` on (at most `len`) have been copied in, where
    /// pre-copied: up to the first chunk not yet flagged (ranges no pre-copy covers are ready).
    pub fn ready_prefix(&self, p: *const u8, len: u64) -> u64 {
        let lo = (p as usize).wrapping_sub(self.arena) as u64;
        let mut cs = covering(&self.spans, self.chunk, lo, lo + len);
        // Copies are numbered in kernel order, which need not be the arena's.
        cs.sort_unstable_by_key(|&(_, a, _)| a);
        for (i, a, _) in cs {
            // Acquire, as `ready`.
            if self.flag(i).load(Ordering::Acquire) != self.tag {
                return a.max(lo) - lo;
            }
        }
        len
    }

    /// Every pre-copy is in the arena.
    pub fn all(&self) -> bool {
        (0..chunk_count(&self.spans, self.chunk)).all(|i| self.flag(i).load(Ordering::Acquire) == self.tag)
    }

    /// Waits until host range [p, p + len) of the arena, where pre-copied, has been copied.
    pub fn wait(&self, p: *const u8, len: u64) -> Result<()> {
        let lo = (p as usize).wrapping_sub(self.arena) as u64;
        wait_until(&|| self.ready(lo, lo + len), self.abort, "waiting for a step kernel's copies into host memory")
    }

    /// Waits until every pre-copy is in the arena (spinning, then yielding). Fails where the
    /// communicator's abort flag is set meanwhile.
    pub fn wait_all(&self) -> Result<()> {
        wait_until(&|| self.all(), self.abort, "waiting for a step kernel's copies into host memory")
    }
}

/// The post flags of one run of a step: which results are final in the arena.
pub struct Marker {
    /// Host address of the post flags.
    flags: usize,
    spans: Vec<(u64, u64)>,
    chunk: u64,
    /// Per chunk: bytes not yet final; `u64::MAX` once its flag is published.
    left: Vec<u64>,
    tag: u32,
    pre_done: bool,
}

impl Marker {
    /// No result final yet: the post flags of `layout`, in the arena at host address `arena`,
    /// for the run whose flags hold `tag`.
    pub fn new(layout: &Layout, arena: *mut u8, tag: u32) -> Marker {
        let left = covering(&layout.post, layout.chunk, 0, u64::MAX).iter().map(|&(_, a, b)| b - a).collect();
        Marker { flags: arena as usize + layout.post_flags as usize, spans: layout.post.clone(), chunk: layout.chunk, left, tag, pre_done: false }
    }

    /// Arena bytes [lo, hi) are final (each byte is marked once at most: a staged step writes
    /// each result range once). Publishes what it can.
    pub fn mark(&mut self, gate: &Gate, lo: u64, hi: u64) {
        for (i, a, b) in covering(&self.spans, self.chunk, lo, hi) {
            let n = hi.min(b) - lo.max(a);
            if let Some(l) = self.left.get_mut(i).filter(|l| **l != u64::MAX) {
                *l = l.saturating_sub(n);
            }
        }
        self.publish(gate);
    }

    /// Sets the flags of finished chunks, once every pre flag is set.
    pub fn publish(&mut self, gate: &Gate) {
        if !self.pre_done {
            self.pre_done = gate.all();
            if !self.pre_done {
                return;
            }
        }
        for (i, l) in self.left.iter_mut().enumerate() {
            if *l == 0 {
                // SAFETY: i < the post chunk count: inside the flag array reserved in the arena,
                // u32-aligned (see Gate::flag).
                let f = unsafe { &*(self.flags as *const AtomicU32).add(i) };
                // Release: the chunk's bytes (written by this thread, or by a link or helper
                // thread whose progress this thread acquired) are visible to the GPU before it.
                f.store(self.tag, Ordering::Release);
                *l = u64::MAX;
            }
        }
    }

    /// The step is done: every result is final; publishes all (after every pre flag).
    pub fn finish(&mut self, gate: &Gate) -> Result<()> {
        gate.wait_all()?;
        self.left.iter_mut().filter(|l| **l != u64::MAX).for_each(|l| *l = 0);
        self.publish(gate);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_at_least_one_chunk() {
        assert_eq!(parse_min(None), MIN_BYTES);
        assert_eq!(parse_min(Some(" 262144 ")), CHUNK);
        assert_eq!(parse_min(Some("4194304")), 4 << 20);
        assert_eq!(parse_min(Some("65536")), 64 << 10);
        // Below the smallest chunk, or not a number: the default, with a WARN.
        assert_eq!(parse_min(Some("16384")), MIN_BYTES);
        assert_eq!(parse_min(Some("1M")), MIN_BYTES);
    }

    #[test]
    fn a_step_splits_into_four_chunks_of_32_to_256_kib() {
        assert_eq!(chunk_for(0), MIN_CHUNK);
        assert_eq!(chunk_for(64 << 10), MIN_CHUNK);
        assert_eq!(chunk_for(128 << 10), MIN_CHUNK);
        assert_eq!(chunk_for(256 << 10), 64 << 10);
        assert_eq!(chunk_for((256 << 10) + 1), 128 << 10);
        assert_eq!(chunk_for(512 << 10), 128 << 10);
        // From 1 MiB (the threshold before f098993, 2026-11-28) the chunk is CHUNK, the one size
        // there was.
        assert_eq!(chunk_for(1 << 20), CHUNK);
        assert_eq!(chunk_for((1 << 20) + 1), CHUNK);
        assert_eq!(chunk_for(1 << 40), CHUNK);
        // Smaller chunks number the same copies more finely.
        let spans = [(0u64, 100 << 10), (512 << 10, 10)];
        assert_eq!(chunk_count(&spans, MIN_CHUNK), 4 + 1);
        assert_eq!(covering(&spans, MIN_CHUNK, 40 << 10, (512 << 10) + 1), vec![(1, 32 << 10, 64 << 10), (2, 64 << 10, 96 << 10), (3, 96 << 10, 100 << 10), (4, 512 << 10, (512 << 10) + 10)]);
    }

    #[test]
    fn chunks_are_numbered_over_the_copies_in_order() {
        let spans = [(0u64, CHUNK + 1), (4 * CHUNK, 10), (8 * CHUNK, 2 * CHUNK)];
        assert_eq!(chunk_count(&spans, CHUNK), 2 + 1 + 2);
        assert_eq!(covering(&spans, CHUNK, 0, 1), vec![(0, 0, CHUNK)]);
        assert_eq!(covering(&spans, CHUNK, CHUNK, CHUNK + 1), vec![(1, CHUNK, CHUNK + 1)]);
        // A range across the gap between two copies covers the chunks on either side.
        assert_eq!(covering(&spans, CHUNK, CHUNK, 4 * CHUNK + 5), vec![(1, CHUNK, CHUNK + 1), (2, 4 * CHUNK, 4 * CHUNK + 10)]);
        assert_eq!(covering(&spans, CHUNK, 9 * CHUNK - 1, 9 * CHUNK + 1), vec![(3, 8 * CHUNK, 9 * CHUNK), (4, 9 * CHUNK, 10 * CHUNK)]);
        assert!(covering(&spans, CHUNK, 2 * CHUNK, 4 * CHUNK).is_empty(), "nothing pre-copied there");
        let mut next = 1000u64;
        let l = Layout::new(spans.to_vec(), vec![(0, 3 * CHUNK)], CHUNK, &mut |n| {
            let o = next;
            next += n.div_ceil(16) * 16;
            o
        });
        assert_eq!((l.pre_flags, l.post_flags), (1000, 1032), "5 flags of 4 bytes, then 3, each array 16-byte aligned");
    }

    #[test]
    fn the_ready_prefix_ends_at_the_first_chunk_not_copied_in() {
        // Two copies numbered against the arena's order: [4 CHUNK, 5 CHUNK) first, then [0, 2 CHUNK).
        let arena: &'static mut [u8] = Box::leak(vec![0u8; 6 * CHUNK as usize + 256].into_boxed_slice());
        let base = arena.as_mut_ptr();
        let mut next = 6 * CHUNK;
        let l = Layout::new(vec![(4 * CHUNK, CHUNK), (0, 2 * CHUNK)], vec![], CHUNK, &mut |n| {
            let o = next;
            next += n.div_ceil(16) * 16;
            o
        });
        let tag = 0x8000_0003;
        let gate = Gate::new(&l, base, tag, fake_abort());
        let flag = |i: usize| unsafe { &*(base.add(l.pre_flags as usize) as *const AtomicU32).add(i) };
        let at = |o: u64| unsafe { base.add(o as usize) as *const u8 };
        assert_eq!(gate.ready_prefix(at(0), 6 * CHUNK), 0);
        // A range no copy covers is ready, up to the first covered chunk not flagged.
        assert_eq!(gate.ready_prefix(at(2 * CHUNK), 4 * CHUNK), 2 * CHUNK);
        assert_eq!(gate.ready_prefix(at(2 * CHUNK), CHUNK), CHUNK);
        flag(1).store(tag, Ordering::Release); // [0, CHUNK)
        assert_eq!(gate.ready_prefix(at(0), 6 * CHUNK), CHUNK);
        assert_eq!(gate.ready_prefix(at(CHUNK / 2), 6 * CHUNK), CHUNK / 2, "from inside a chunk");
        flag(0).store(tag, Ordering::Release); // [4 CHUNK, 5 CHUNK), numbered first
        assert_eq!(gate.ready_prefix(at(0), 6 * CHUNK), CHUNK, "[CHUNK, 2 CHUNK) still out");
        flag(2).store(tag - 1, Ordering::Release); // an older step's tag
        assert_eq!(gate.ready_prefix(at(0), 6 * CHUNK), CHUNK);
        flag(2).store(tag, Ordering::Release);
        assert_eq!(gate.ready_prefix(at(0), 6 * CHUNK), 6 * CHUNK);
        assert_eq!(gate.ready_prefix(at(0), 3), 3);
    }

    fn fake_abort() -> *mut u32 {
        Box::leak(Box::new(0u32))
    }

    #[test]
    fn results_are_published_by_whole_chunks_and_only_after_every_pre_copy() {
        // An arena in plain memory: pre-copy [0, 2 CHUNK), post-copy [2 CHUNK, 2 CHUNK + CHUNK + 8), flags after.
        let arena: &'static mut [u8] = Box::leak(vec![0u8; 4 * CHUNK as usize + 256].into_boxed_slice());
        let base = arena.as_mut_ptr();
        let mut next = 4 * CHUNK;
        let l = Layout::new(vec![(0, 2 * CHUNK)], vec![(2 * CHUNK, CHUNK + 8)], CHUNK, &mut |n| {
            let o = next;
            next += n.div_ceil(16) * 16;
            o
        });
        let tag = 0x8000_0007;
        let abort = fake_abort();
        let gate = Gate::new(&l, base, tag, abort);
        let mut m = Marker::new(&l, base, tag);
        let flag = |off: u64, i: usize| unsafe { &*(base.add(off as usize) as *const AtomicU32).add(i) };
        assert!(!gate.ready(0, 1) && !gate.all());
        flag(l.pre_flags, 0).store(tag, Ordering::Release);
        assert!(gate.ready(0, CHUNK) && !gate.ready(0, CHUNK + 1), "only the first chunk is in");
        // The first post chunk is final, but a pre-copy is still running: nothing published.
        m.mark(&gate, 2 * CHUNK, 3 * CHUNK);
        assert_eq!(flag(l.post_flags, 0).load(Ordering::Acquire), 0);
        flag(l.pre_flags, 1).store(0x8000_0006, Ordering::Release); // an older step's tag
        m.publish(&gate);
        assert_eq!(flag(l.post_flags, 0).load(Ordering::Acquire), 0, "a stale flag is not this step's");
        flag(l.pre_flags, 1).store(tag, Ordering::Release);
        m.publish(&gate);
        assert_eq!(flag(l.post_flags, 0).load(Ordering::Acquire), tag);
        // The second post chunk (8 bytes) in two halves.
        m.mark(&gate, 3 * CHUNK, 3 * CHUNK + 4);
        assert_eq!(flag(l.post_flags, 1).load(Ordering::Acquire), 0);
        m.mark(&gate, 3 * CHUNK + 4, 3 * CHUNK + 8);
        assert_eq!(flag(l.post_flags, 1).load(Ordering::Acquire), tag);
        m.finish(&gate).unwrap();
        gate.wait(base, 2 * CHUNK).unwrap();
        // The next step's gate waits for its own tag: an abort ends the wait with an error.
        let next_gate = Gate::new(&l, base, tag + 1, abort);
        assert!(!next_gate.all());
        unsafe { std::ptr::write_volatile(abort, 1) };
        assert!(Marker::new(&l, base, tag + 1).finish(&next_gate).is_err());
        assert!(next_gate.wait(base, 1).is_err());
    }
}
