//! Host reductions that run while their inputs arrive.
//!
//! On the threaded path (jobs above the inline size), waiting for every transfer of a phase before
//! copying a GPU input to the host, combining whole buffers and copying the result back left a
//! 2 MB AllReduce at 2 simulated hosts 1.1 ms of its 1.7 ms step after the wire (BENCHMARKS.md of
//! 2026-11-25, e852477). So, where a phase allows it, the proxy copies every GPU input
//! to the host while the transfers run, combines each piece (`piece_bytes`) as soon as all its
//! received inputs have it (`link::Landing`), and copies the piece's result to the GPU at once.
//! `plan` decides, as a pure function of the phase, whether and how; the proxy (`mod.rs`) runs it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use super::plan::{Buf, Phase};

/// Bytes combined, and copied to the GPU, at a time: a quarter of the reduction, between
/// `MIN_PIECE` and `PIECE` (so a reduction of 512 KiB still overlaps its last quarter only).
pub const PIECE: u64 = 256 << 10;
/// The smallest piece, in bytes (`piece_bytes`).
pub const MIN_PIECE: u64 = 32 << 10;

/// The piece size for a reduction of `bytes` (a multiple of 4 KiB, so of every element size).
pub fn piece_bytes(bytes: u64) -> u64 {
    (bytes / 4).next_multiple_of(4 << 10).clamp(MIN_PIECE, PIECE)
}

/// Where one input of a reduction is while the phase runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// In the arena at this offset before the phase starts (an earlier phase's result).
    Ready(u64),
    /// Landing in the arena at `at`, which is byte `skip` of the phase's receive number `recv`.
    Landing {
        /// Index of the receive in `Phase::recvs`.
        recv: usize,
        /// Byte offset of the input in the arena.
        at: u64,
        /// Byte offset of the input in the receive's data.
        skip: u64,
    },
    /// GPU memory, copied to the host while the transfers run: into the reduction's accumulator
    /// when it is the first input (`tmp` None), else at offset `tmp` of the proxy's scratch.
    Dev {
        /// Device address of the input.
        dev: u64,
        /// Byte offset of its host copy in the proxy's scratch (`Pipe::tmp_bytes`); None: the
        /// accumulator.
        tmp: Option<u64>,
    },
}

/// When a piece of a reduction's result goes to its GPU range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// The result stays in the arena (a later phase sends it).
    Host,
    /// As soon as the piece is made.
    Early,
    /// Once these sends of the phase (an in-place call's own input) have read the piece's range.
    AfterSends(Vec<usize>),
    /// After every transfer of the phase (a receive writes that range too).
    AtEnd,
}

/// How one of the phase's reductions (`plan::HostReduce`) runs as its inputs arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    /// Where each input is, in the order of `HostReduce::inputs`.
    pub inputs: Vec<Src>,
    /// When each piece of the result goes to the GPU.
    pub out: Out,
}

/// A phase's reductions, planned to run while its transfers do (`plan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipe {
    /// One per `Phase::reduces`, in order.
    pub reductions: Vec<Reduction>,
    /// Bytes of scratch for the host copies of GPU inputs after the first (16-byte aligned each).
    pub tmp_bytes: u64,
    /// Per receive of the phase: whether a reduction reads it as it lands.
    pub watched: Vec<bool>,
    /// Per send of the phase: whether a result waits for it to read its source (`Out::AfterSends`).
    pub watched_sends: Vec<bool>,
}

fn overlap(a: u64, an: u64, b: u64, bn: u64) -> bool {
    an > 0 && bn > 0 && a < b + bn && b < a + an
}

/// How to run `ph`'s reductions as their inputs arrive; None where the phase has none, or where
/// its buffers are laid out in a way this does not handle (then the proxy combines after the
/// transfers, as before): a GPU input that a receive writes, an accumulator that a transfer
/// touches, a host input that covers part of a receive.
pub fn plan(ph: &Phase) -> Option<Pipe> {
    if ph.reduces.is_empty() {
        return None;
    }
    let xfers = || ph.sends.iter().chain(&ph.recvs);
    let host_xfer = |o: u64, n: u64| xfers().any(|x| matches!(x.buf, Buf::Host(q) if overlap(o, n, q, x.bytes)));
    let mut watched = vec![false; ph.recvs.len()];
    let mut watched_sends = vec![false; ph.sends.len()];
    let mut tmp_bytes = 0u64;
    let mut reductions = Vec::with_capacity(ph.reduces.len());
    for r in &ph.reduces {
        let n = r.bytes;
        if host_xfer(r.acc, n) || ph.reduces.iter().flat_map(|q| &q.inputs).any(|b| matches!(*b, Buf::Host(o) if overlap(o, n, r.acc, n))) {
            return None;
        }
        let mut inputs = Vec::with_capacity(r.inputs.len());
        for (i, b) in r.inputs.iter().enumerate() {
            inputs.push(match *b {
                Buf::Dev(p) => {
                    if ph.recvs.iter().any(|x| matches!(x.buf, Buf::Dev(q) if overlap(p, n, q, x.bytes))) {
                        return None;
                    }
                    let tmp = (i > 0).then(|| {
                        let t = tmp_bytes;
                        tmp_bytes += n.div_ceil(16) * 16;
                        t
                    });
                    Src::Dev { dev: p, tmp }
                }
                Buf::Host(o) => {
                    let into = ph.recvs.iter().position(|x| matches!(x.buf, Buf::Host(q) if overlap(o, n, q, x.bytes)));
                    match into {
                        None => Src::Ready(o),
                        Some(k) => {
                            let (q, len) = match ph.recvs[k].buf {
                                Buf::Host(q) => (q, ph.recvs[k].bytes),
                                Buf::Dev(_) => return None,
                            };
                            if o < q || o + n > q + len {
                                return None;
                            }
                            watched[k] = true;
                            Src::Landing { recv: k, at: o, skip: o - q }
                        }
                    }
                }
            });
        }
        let out = match r.out {
            Buf::Host(_) => Out::Host,
            Buf::Dev(p) if ph.recvs.iter().any(|x| matches!(x.buf, Buf::Dev(q) if overlap(p, n, q, x.bytes))) => Out::AtEnd,
            Buf::Dev(p) => {
                let sends: Vec<usize> = (0..ph.sends.len()).filter(|&k| matches!(ph.sends[k].buf, Buf::Dev(q) if overlap(p, n, q, ph.sends[k].bytes))).collect();
                sends.iter().for_each(|&k| watched_sends[k] = true);
                if sends.is_empty() {
                    Out::Early
                } else {
                    Out::AfterSends(sends)
                }
            }
        };
        reductions.push(Reduction { inputs, out });
    }
    Some(Pipe { reductions, tmp_bytes, watched, watched_sends })
}

/// Bytes [lo, hi) of a send from GPU range [q, q + len) that must have been read before bytes
/// [a, b) of a result at `out` may be written; None if the ranges do not meet.
pub fn read_before(out: u64, a: u64, b: u64, q: u64, len: u64) -> Option<(u64, u64)> {
    let (lo, hi) = ((out + a).max(q), (out + b).min(q + len));
    (lo < hi).then(|| (lo - q, hi - q))
}

/// Who combines which piece, among the proxy thread and its helpers: a piece is open, then
/// taken by one thread, then made (combined, readable by the others).
struct Claims {
    state: Vec<AtomicU8>,
    open: AtomicUsize,
    cancelled: AtomicBool,
}

const OPEN: u8 = 0;
const TAKEN: u8 = 1;
const MADE: u8 = 2;

impl Claims {
    fn new(n: usize) -> Claims {
        Claims { state: (0..n).map(|_| AtomicU8::new(OPEN)).collect(), open: AtomicUsize::new(n), cancelled: AtomicBool::new(false) }
    }

    fn open(&self, i: usize) -> bool {
        self.state[i].load(Ordering::Relaxed) == OPEN
    }

    /// Takes piece `i` for this thread; false if another took it first.
    fn take(&self, i: usize) -> bool {
        let won = self.state[i].compare_exchange(OPEN, TAKEN, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        if won {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
        won
    }

    /// Piece `i` is combined (release: its bytes are written before another thread sees it made).
    fn made(&self, i: usize) {
        self.state[i].store(MADE, Ordering::Release);
    }

    /// Whether piece `i` is combined (acquire: its bytes may be read then).
    fn is_made(&self, i: usize) -> bool {
        self.state[i].load(Ordering::Acquire) == MADE
    }

    fn any_open(&self) -> bool {
        self.open.load(Ordering::Relaxed) > 0
    }

    fn all_made(&self) -> bool {
        (0..self.state.len()).all(|i| self.is_made(i))
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// What `drive` needs to know of a phase's pieces, by piece number.
pub struct Pieces<'a> {
    /// Whether every input of piece n has landed (asked from every combining thread).
    pub landed: &'a (dyn Fn(usize) -> bool + Sync),
    /// Combines piece n (once per piece, on whichever combining thread took it).
    pub combine: &'a (dyn Fn(usize) + Sync),
    /// Whether piece n goes to the GPU as soon as it is made (`Out::Early`, `Out::AfterSends`);
    /// other pieces are done once made.
    pub copied: &'a [bool],
    /// Whether piece n's result may be written to the GPU now (asked on the calling thread).
    pub writable: &'a dyn Fn(usize) -> bool,
}

/// Runs a phase's pieces: the calling thread (the proxy) and `helpers` more combine each piece
/// once it has landed; the calling thread alone copies each made piece out (`copy_out`, once per
/// piece, when writable), since it alone makes CUDA calls. `tick` runs every turn (the profile's
/// clock); `failed`, asked now and then while nothing moves, ends the run with its error (a failed
/// transfer, an abort), and the helpers stop with it; `note(left)` once nothing has been left
/// waiting for a second (the hang dump).
pub fn drive(
    p: &Pieces<'_>,
    helpers: usize,
    copy_out: &mut dyn FnMut(usize) -> crate::error::Result<()>,
    tick: &mut dyn FnMut(),
    failed: &dyn Fn() -> Option<crate::error::Error>,
    note: &dyn Fn(usize),
) -> crate::error::Result<()> {
    let n = p.copied.len();
    let claims = Claims::new(n);
    // Combines every piece that has landed and that nobody has taken; true if any.
    let combine_some = || {
        let mut any = false;
        for i in 0..n {
            if claims.open(i) && (p.landed)(i) && claims.take(i) {
                (p.combine)(i);
                claims.made(i);
                any = true;
            }
        }
        any
    };
    std::thread::scope(|sc| {
        for _ in 0..helpers {
            sc.spawn(|| {
                let mut idle = 0;
                while claims.any_open() && !claims.cancelled() {
                    if combine_some() {
                        idle = 0;
                    } else {
                        idle_wait(&mut idle);
                    }
                }
            });
        }
        let r = (|| {
            let (mut idle, mut noted) = (0u32, false);
            let t0 = std::time::Instant::now();
            let mut out: Vec<bool> = p.copied.iter().map(|c| !c).collect();
            let mut left = out.iter().filter(|&&o| !o).count();
            while claims.any_open() || left > 0 || !claims.all_made() {
                let mut progressed = combine_some();
                for (i, done) in out.iter_mut().enumerate() {
                    if *done || !claims.is_made(i) || !(p.writable)(i) {
                        continue;
                    }
                    copy_out(i)?;
                    *done = true;
                    left -= 1;
                    progressed = true;
                }
                tick();
                if progressed {
                    idle = 0;
                } else if idle_wait(&mut idle) {
                    if let Some(e) = failed() {
                        return Err(e);
                    }
                    if !noted && t0.elapsed() >= std::time::Duration::from_secs(1) {
                        noted = true;
                        note((0..n).filter(|&i| !out[i] || !claims.is_made(i)).count());
                    }
                }
            }
            Ok(())
        })();
        // Helpers stop at once on a failure (pieces that will never land).
        claims.cancel();
        r
    })
}

/// One idle turn of a polling loop: spins first, then yields, then sleeps briefly; true when the
/// caller should look for failures (not every turn: that takes a lock).
pub fn idle_wait(idle: &mut u32) -> bool {
    *idle += 1;
    if *idle < 64 {
        std::hint::spin_loop();
    } else if *idle < 4096 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    (*idle).is_multiple_of(16)
}

/// The pieces of a reduction of `bytes`: [start, end) ranges of `piece_bytes(bytes)`.
pub fn pieces(bytes: u64) -> impl Iterator<Item = (u64, u64)> {
    let p = piece_bytes(bytes);
    (0..bytes.div_ceil(p)).map(move |k| (k * p, ((k + 1) * p).min(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::hostreduce::{Combine, HostOp};
    use crate::net::plan::{HostReduce, Xfer};
    use crate::types::DataType;

    fn red(inputs: Vec<Buf>, acc: u64, out: Buf, bytes: u64) -> HostReduce {
        HostReduce { inputs, acc, out, bytes, op: HostOp { dtype: DataType::Float32, combine: Combine::Sum, postdiv: 0 } }
    }

    fn xfer(peer: usize, buf: Buf, bytes: u64) -> Xfer {
        Xfer { peer, buf, bytes }
    }

    /// Two hosts' AllReduce as the planner makes it: send my input, receive the other's, combine.
    fn two_host_allreduce(mine_first: bool, send: u64, out: u64) -> Phase {
        let n = 1 << 20;
        let (recv_at, acc) = (0, n);
        let inputs = if mine_first { vec![Buf::Dev(send), Buf::Host(recv_at)] } else { vec![Buf::Host(recv_at), Buf::Dev(send)] };
        Phase {
            sends: vec![xfer(1, Buf::Dev(send), n)],
            recvs: vec![xfer(1, Buf::Host(recv_at), n)],
            reduces: vec![red(inputs, acc, Buf::Dev(out), n)],
            stripe_min: 0,
            narrow: false,
        }
    }

    #[test]
    fn received_inputs_are_watched_and_gpu_inputs_staged() {
        let p = plan(&two_host_allreduce(true, 0x1000_0000, 0x2000_0000)).unwrap();
        assert_eq!(p.watched, vec![true]);
        assert_eq!(p.tmp_bytes, 0, "a first GPU input goes straight to the accumulator");
        assert_eq!(p.reductions[0].inputs, vec![Src::Dev { dev: 0x1000_0000, tmp: None }, Src::Landing { recv: 0, at: 0, skip: 0 }]);
        assert_eq!(p.reductions[0].out, Out::Early);
        assert_eq!(p.watched_sends, vec![false]);
        // Host order keeps the other host's input first on the second host: the GPU's goes to scratch.
        let p = plan(&two_host_allreduce(false, 0x1000_0000, 0x2000_0000)).unwrap();
        assert_eq!(p.reductions[0].inputs, vec![Src::Landing { recv: 0, at: 0, skip: 0 }, Src::Dev { dev: 0x1000_0000, tmp: Some(0) }]);
        assert_eq!(p.tmp_bytes, 1 << 20);
    }

    #[test]
    fn an_in_place_result_waits_for_the_send_that_reads_its_range() {
        // In place: the send reads the very range the result goes to.
        let p = plan(&two_host_allreduce(true, 0x1000_0000, 0x1000_0000)).unwrap();
        assert_eq!(p.reductions[0].out, Out::AfterSends(vec![0]));
        assert_eq!(p.watched_sends, vec![true]);
        // Overlapping by one element is enough.
        let p = plan(&two_host_allreduce(true, 0x1000_0000, 0x1000_0000 + (1 << 20) - 4)).unwrap();
        assert_eq!(p.reductions[0].out, Out::AfterSends(vec![0]));
        let p = plan(&two_host_allreduce(true, 0x1000_0000, 0x1000_0000 + (1 << 20))).unwrap();
        assert_eq!(p.reductions[0].out, Out::Early, "adjacent ranges do not overlap");
        // A receive into the result's range: only after the phase.
        let mut ph = two_host_allreduce(true, 0x1000_0000, 0x2000_0000);
        ph.recvs.push(xfer(2, Buf::Dev(0x2000_0000 + 64), 64));
        assert_eq!(plan(&ph).unwrap().reductions[0].out, Out::AtEnd);
    }

    #[test]
    fn a_result_piece_waits_for_the_send_bytes_under_it() {
        // Result at 1000, send source at 1100 of 200 bytes.
        assert_eq!(read_before(1000, 0, 100, 1100, 200), None);
        assert_eq!(read_before(1000, 0, 101, 1100, 200), Some((0, 1)));
        assert_eq!(read_before(1000, 150, 250, 1100, 200), Some((50, 150)));
        assert_eq!(read_before(1000, 250, 400, 1100, 200), Some((150, 200)));
        assert_eq!(read_before(1000, 300, 400, 1100, 200), None);
        // In place: the same range.
        assert_eq!(read_before(1000, 64, 128, 1000, 256), Some((64, 128)));
    }

    #[test]
    fn layouts_it_does_not_handle_fall_back() {
        assert_eq!(plan(&Phase { sends: vec![xfer(1, Buf::Dev(0), 64)], ..Phase::default() }), None, "nothing to reduce");
        // A GPU input that a receive of the same phase writes.
        let mut ph = two_host_allreduce(true, 0x1000_0000, 0x2000_0000);
        ph.recvs.push(xfer(2, Buf::Dev(0x1000_0000 + 64), 64));
        assert_eq!(plan(&ph), None);
        // An accumulator a transfer reads.
        let mut ph = two_host_allreduce(true, 0x1000_0000, 0x2000_0000);
        ph.sends.push(xfer(2, Buf::Host(1 << 20), 16));
        assert_eq!(plan(&ph), None);
        // A host input that starts inside a receive and runs past its end.
        let mut ph = two_host_allreduce(true, 0x1000_0000, 0x2000_0000);
        ph.reduces[0].inputs[1] = Buf::Host(16);
        ph.reduces[0].acc = 4 << 20;
        assert_eq!(plan(&ph), None);
    }

    #[test]
    fn a_host_input_inside_a_receive_lands_at_its_offset_and_arena_inputs_are_ready() {
        let n = 4096;
        let ph = Phase {
            sends: vec![],
            recvs: vec![xfer(1, Buf::Host(0), 3 * n)],
            reduces: vec![red(vec![Buf::Host(10 * n), Buf::Host(n), Buf::Dev(0x5000)], 20 * n, Buf::Host(20 * n), n)],
            stripe_min: 0,
            narrow: false,
        };
        let p = plan(&ph).unwrap();
        assert_eq!(p.reductions[0].inputs, vec![Src::Ready(10 * n), Src::Landing { recv: 0, at: n, skip: n }, Src::Dev { dev: 0x5000, tmp: Some(0) }]);
        assert_eq!(p.reductions[0].out, Out::Host, "a result left in the arena is not copied");
    }

    /// Every phase with reductions that the planner makes, in every layout, in and out of place,
    /// runs this way (none falls back). A result waits for a send where the send reads its range:
    /// in place, or where a host stage left the host's partial result in the output first.
    #[test]
    fn every_planned_reduction_runs_as_its_inputs_land() {
        use crate::net::plan::{plan_coll, Call, Layout, Stage};
        use crate::types::ResolvedOp;
        use crate::types::Coll;
        use crate::types::RedOp;
        let sum = ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 };
        let mut seen = [0usize; 4];
        for hashes in [vec![1, 2], vec![7, 7, 9, 9], vec![1, 2, 3, 4], vec![5, 6, 5], vec![1, 2, 2, 1, 3]] {
            for me in 0..hashes.len() {
                let l = Layout::new(me, &hashes);
                for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce] {
                    for count in [1u64, 1000, 1 << 20] {
                        for inplace in [false, true] {
                            let recv = if inplace { 0x1000_0000 } else { 0x2000_0000 };
                            let c = Call { coll, send: 0x1000_0000, recv, count, dtype: DataType::Float32, op: sum, root: 0, scratch: 0x4000_0000 };
                            for st in plan_coll(&l, &c) {
                                let Stage::Net(step) = st else { continue };
                                for ph in step.phases.iter().filter(|p| !p.reduces.is_empty()) {
                                    let p = plan(ph).unwrap_or_else(|| panic!("{hashes:?} rank {me} {coll:?} {count} in-place {inplace}: {ph:?}"));
                                    for r in &p.reductions {
                                        seen[match r.out {
                                            Out::Host => 0,
                                            Out::Early => 1,
                                            Out::AfterSends(_) => 2,
                                            Out::AtEnd => 3,
                                        }] += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(seen[1] > 0 && seen[2] > 0, "{seen:?}");
        assert_eq!(seen[3], 0, "no planned result range is a receive's");
    }

    #[test]
    fn each_piece_is_taken_by_one_thread_and_seen_made() {
        let c = Claims::new(64);
        let won = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..64 {
                        if c.open(i) && c.take(i) {
                            won.fetch_add(1, Ordering::Relaxed);
                            c.made(i);
                        }
                    }
                });
            }
        });
        assert_eq!(won.load(Ordering::Relaxed), 64, "every piece taken exactly once");
        assert!(!c.any_open() && c.all_made());
        let c = Claims::new(2);
        assert!(c.take(0) && !c.take(0));
        assert!(c.any_open() && !c.all_made() && !c.is_made(0));
        assert!(!c.cancelled());
        c.cancel();
        assert!(c.cancelled());
    }

    /// Pieces land and become writable in a random order on other threads; every piece must be
    /// combined once, only after it landed, and copied out once, only after it was made and
    /// became writable, with and without helpers.
    #[test]
    fn drive_combines_each_landed_piece_once_and_copies_it_once_writable() {
        use std::sync::atomic::AtomicU32;
        for helpers in [0, 3] {
            let n = 40;
            let landed: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
            let writable: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
            let combined: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            let copied_to: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            // Every third piece stays on the host (done once made).
            let copied: Vec<bool> = (0..n).map(|i| i % 3 != 0).collect();
            let combine = |i: usize| {
                assert!(landed[i].load(Ordering::Acquire), "piece {i} combined before it landed");
                combined[i].fetch_add(1, Ordering::Relaxed);
            };
            let land = |i: usize| landed[i].load(Ordering::Acquire);
            let may_write = |i: usize| writable[i].load(Ordering::Acquire);
            let p = Pieces { landed: &land, combine: &combine, copied: &copied, writable: &may_write };
            std::thread::scope(|sc| {
                // Land the pieces in a scrambled order, and let each be written some time later.
                sc.spawn(|| {
                    for k in 0..n {
                        let i = (k * 17 + 5) % n;
                        landed[i].store(true, Ordering::Release);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        writable[(k * 7 + 3) % n].store(true, Ordering::Release);
                    }
                });
                let mut copy_out = |i: usize| {
                    assert!(combined[i].load(Ordering::Relaxed) == 1 && may_write(i), "piece {i} copied before it was made or writable");
                    copied_to[i].fetch_add(1, Ordering::Relaxed);
                    Ok(())
                };
                drive(&p, helpers, &mut copy_out, &mut || {}, &|| None, &|_| {}).unwrap();
            });
            for i in 0..n {
                assert_eq!(combined[i].load(Ordering::Relaxed), 1, "helpers {helpers}: piece {i} combined once");
                assert_eq!(copied_to[i].load(Ordering::Relaxed), u32::from(copied[i]), "helpers {helpers}: piece {i} copied once if it goes out");
            }
        }
    }

    /// A piece that never lands (its transfer failed) ends the run with the failure, and the
    /// helpers stop with it.
    #[test]
    fn drive_stops_on_a_failure_with_pieces_left() {
        let land = |i: usize| i != 2;
        let p = Pieces { landed: &land, combine: &|_| {}, copied: &[true; 4], writable: &|_| true };
        let t0 = std::time::Instant::now();
        let failed = || (t0.elapsed() > std::time::Duration::from_millis(50)).then(|| crate::error::Error::remote("rank 1 closed its network connection"));
        let e = drive(&p, 2, &mut |_| Ok(()), &mut || {}, &failed, &|_| {}).unwrap_err();
        assert!(e.msg.contains("rank 1"), "{e:?}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        // A copy that fails ends it too.
        let p = Pieces { landed: &|_| true, combine: &|_| {}, copied: &[true; 4], writable: &|_| true };
        let e = drive(&p, 1, &mut |i| if i == 1 { Err(crate::error::Error::system("cuMemcpyHtoDAsync failed")) } else { Ok(()) }, &mut || {}, &|| None, &|_| {}).unwrap_err();
        assert!(e.msg.contains("cuMemcpyHtoDAsync"), "{e:?}");
    }

    #[test]
    fn pieces_cover_a_reduction_once() {
        assert_eq!(pieces(0).count(), 0);
        assert_eq!(pieces(8).collect::<Vec<_>>(), vec![(0, 8)]);
        let v: Vec<_> = pieces(8 * PIECE + 12).collect();
        assert_eq!(v.len(), 9);
        assert_eq!((v[0], v[8]), ((0, PIECE), (8 * PIECE, 8 * PIECE + 12)));
        assert!(v.windows(2).all(|w| w[0].1 == w[1].0));
        // A quarter of a mid-size reduction, at least MIN_PIECE.
        assert_eq!(piece_bytes(512 << 10), 128 << 10);
        assert_eq!(piece_bytes(100 << 10), MIN_PIECE);
        assert_eq!(piece_bytes(1 << 30), PIECE);
        assert_eq!(piece_bytes(300_000) % (4 << 10), 0);
        assert_eq!(pieces(512 << 10).count(), 4);
    }
}
