//! Steps whose GPU data the step kernel itself moves through host memory.
//!
//! A small step spends most of its time in the proxy's CUDA calls: a device-to-host copy and a
//! stream synchronisation before it can send, a host-to-device copy and another synchronisation
//! after it received. When every job of a step is small, the plan is rewritten instead: each GPU
//! range the step reads gets a *shadow* in the step's pinned, host-mapped arena, which the step
//! kernel fills before it hands the step to the proxy (`pre`), and each GPU range the step writes
//! gets a shadow the kernel copies out after the proxy is done (`post`). The proxy then touches
//! host memory only and makes no CUDA call at all.
//!
//! Since f1c579e (2026-11-27) every step on TCP links is staged, whatever its size (`max_bytes`): a
//! proxy that issues CUDA copies during a step deadlocks under an application thread that waits in
//! the driver for that step. PyTorch's `.cpu()` of a result is a pageable device-to-host copy, and
//! while it waits for our spinning step kernel, every copy, launch, stream creation and host
//! allocation of any other thread of the process waits for it (`.device-carry/lockprobe.cu`,
//! BENCHMARKS.md of 2026-11-27, 148bd4f); only queries pass. NCCL's proxy never touches the driver
//! during a step either: its kernels copy through host memory.
//!
//! A pure function of the step, so it is tested on the CPU with the plan simulator.

use super::hostreduce::{Combine, HostOp};
use super::plan::{Buf, HostReduce, Phase, Step, Xfer};
use crate::log::Subsys;

/// OXCCL_NET_STAGE_MAX: the largest job (bytes) of a step its kernel stages through host memory;
/// unlimited by default. A step with a larger job has its GPU data copied by the proxy with the
/// copy engines, pipelined with the wire, which can deadlock as the module note says (kept for
/// comparison: 262144 is the limit before f1c579e); 0 stages nothing.
pub fn max_bytes() -> u64 {
    match crate::config::env("OXCCL_NET_STAGE_MAX") {
        None => u64::MAX,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => {
                nccl_info!(Subsys::Net, "OXCCL_NET_STAGE_MAX set by environment to {n}");
                n
            }
            Err(_) => {
                nccl_warn!("OXCCL_NET_STAGE_MAX={v}: not a byte count, staging every step");
                u64::MAX
            }
        },
    }
}

/// OXCCL_NET_GPU_COMBINE: `0` leaves every reduction of a staged step to the proxy's CPU; default
/// `1`: one of a GPU input with one received input is combined by the step kernel on its way out
/// (`stage_on_host`), from just above the size whose steps pass packets (`packets_max`; those few
/// bytes the proxy combines at once, and packets save more). Returns the `combine_min` to stage with.
pub fn combine_min(packets_max: u64) -> u64 {
    match crate::config::env("OXCCL_NET_GPU_COMBINE").as_deref().map(str::trim) {
        None | Some("1") => packets_max.saturating_add(1),
        Some("0") => {
            nccl_info!(Subsys::Net, "OXCCL_NET_GPU_COMBINE set by environment to 0");
            u64::MAX
        }
        Some(v) => {
            nccl_warn!("OXCCL_NET_GPU_COMBINE={v}: expected 0 or 1, using 1");
            packets_max.saturating_add(1)
        }
    }
}

/// One copy the step kernel makes: between GPU address `dev` and arena offset `host`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCopy {
    /// GPU address of the range.
    pub dev: u64,
    /// Byte offset of its shadow in the step's arena.
    pub host: u64,
    /// Bytes to copy.
    pub bytes: u64,
    /// None, or (a copy out) the GPU address the kernel combines the arena's bytes with on the
    /// way: `dev[i] = with[i] (op) arena[i]`, by `Staged::combine` (see "Combined on the GPU" below).
    pub with: Option<u64>,
}

/// A step rewritten to host memory, with the copies around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// The step the proxy runs: every GPU range its phases read or write replaced by a
    /// shadow in the arena.
    pub step: Step,
    /// GPU -> arena, before the proxy runs the step.
    pub pre: Vec<HostCopy>,
    /// Arena -> GPU, after.
    pub post: Vec<HostCopy>,
    /// The reduction of the copies out that combine (`HostCopy::with`); None when none does.
    pub combine: Option<HostOp>,
}

impl Staged {
    /// The step only sends: once its kernel has filled the arena and handed it over, nothing of it
    /// is left for the kernel to do, so the kernel may return without waiting (`detach`).
    pub fn sends_only(&self) -> bool {
        self.post.is_empty() && self.step.phases.iter().all(|p| p.recvs.is_empty() && p.reduces.is_empty())
    }
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// Rewrites `step` (see the module note) when every transfer is at most `max_job` bytes and at
/// most `max_copies` copies are needed in all (the step's own `copies` included); None when it
/// does not apply.
///
/// All reads are copied before the step and all writes after it. A read of exactly a range an
/// earlier phase wrote (a relay passing on what it received) reads that write's shadow; a read
/// that only overlaps one, or a range written twice, leaves the step alone (no plan does today).
///
/// Combined on the GPU: a reduction of one GPU input with what one receive of its phase brought
/// (`on_gpu`), at least `combine_min` bytes, is left to the kernel: the receive lands in a shadow
/// of the result and the copy out combines it with the GPU input on the way (`HostCopy::with`),
/// so the proxy neither combines on the CPU nor waits for that input's copy in. u64::MAX: never.
pub fn stage_on_host(step: &Step, max_job: u64, max_copies: usize, combine_min: u64) -> Option<Staged> {
    let all = step.phases.iter().flat_map(|p| p.sends.iter().chain(&p.recvs));
    if all.clone().any(|x| x.bytes > max_job) || all.clone().next().is_none() {
        return None;
    }
    // Writes so far (earlier phases), to refuse a later read of them.
    let mut written: Vec<(u64, u64)> = Vec::new();
    for ph in &step.phases {
        let reads = ph.sends.iter().map(|x| (x.buf, x.bytes)).chain(ph.reduces.iter().flat_map(|r| r.inputs.iter().map(|&b| (b, r.bytes))));
        for (b, n) in reads {
            if let Buf::Dev(a) = b {
                if n > 0 && written.iter().any(|&w| overlap(w, (a, n)) && w != (a, n)) {
                    return None;
                }
            }
        }
        let writes = ph.recvs.iter().map(|x| (x.buf, x.bytes)).chain(ph.reduces.iter().map(|r| (r.out, r.bytes)));
        for (b, n) in writes {
            if let Buf::Dev(a) = b {
                if n > 0 {
                    if written.iter().any(|&w| overlap(w, (a, n))) {
                        return None;
                    }
                    written.push((a, n));
                }
            }
        }
    }

    // The step's own GPU-to-GPU copies stay as they are (disjoint from what the phases touch).
    let mut out = Step { phases: Vec::with_capacity(step.phases.len()), arena_bytes: step.arena_bytes, pinned: 0, pinned_flip: 0, copies: step.copies.clone(), packets: Vec::new(), progress: None };
    let (mut pre, mut post): (Vec<HostCopy>, Vec<HostCopy>) = (Vec::new(), Vec::new());
    // A shadow has the GPU address's alignment modulo 16, so the kernel copies 16-byte words.
    let shadow = |out: &mut Step, dev: u64, bytes: u64| out.host(bytes + 15) + dev % 16;
    // The copy whose shadow was reserved last (pre-copies: true), and the arena's end right after:
    // a range that continues it on the GPU continues its shadow and joins the copy (AlltoAll's
    // slices for the ranks of another host are one copy, not one per rank), while nothing else
    // has been reserved since.
    let last = std::cell::Cell::new(None::<(bool, u64)>);
    let extend = |out: &mut Step, list: &mut Vec<HostCopy>, is_pre: bool, dev: u64, bytes: u64| -> Option<u64> {
        let c = list.last_mut()?;
        if last.get() != Some((is_pre, out.arena_bytes)) || c.dev.checked_add(c.bytes) != Some(dev) {
            return None;
        }
        let host = c.host + c.bytes;
        c.bytes += bytes;
        out.arena_bytes = out.arena_bytes.max((host + bytes).div_ceil(16) * 16);
        last.set(Some((is_pre, out.arena_bytes)));
        Some(host)
    };
    // Writes of earlier phases (their shadows), which later reads of the same range take.
    let mut earlier: Vec<HostCopy> = Vec::new();
    let mut read = |out: &mut Step, earlier: &[HostCopy], b: Buf, bytes: u64| -> Buf {
        let Buf::Dev(dev) = b else { return b };
        if let Some(c) = earlier.iter().find(|c| c.dev == dev && c.bytes == bytes) {
            return Buf::Host(c.host);
        }
        if let Some(c) = pre.iter().find(|c: &&HostCopy| c.dev == dev && c.bytes == bytes) {
            return Buf::Host(c.host);
        }
        if let Some(host) = extend(out, &mut pre, true, dev, bytes) {
            return Buf::Host(host);
        }
        let host = shadow(out, dev, bytes);
        pre.push(HostCopy { dev, host, bytes, with: None });
        last.set(Some((true, out.arena_bytes)));
        Buf::Host(host)
    };
    // `with`: a copy out that combines (it continues no other copy, and none continues it).
    let mut write = |out: &mut Step, b: Buf, bytes: u64, host: Option<u64>, with: Option<u64>| -> Buf {
        let Buf::Dev(dev) = b else { return b };
        if host.is_none() && with.is_none() {
            if let Some(h) = extend(out, &mut post, false, dev, bytes) {
                return Buf::Host(h);
            }
        }
        let fresh = host.is_none() && with.is_none();
        let host = host.unwrap_or_else(|| shadow(out, dev, bytes));
        post.push(HostCopy { dev, host, bytes, with });
        // A result left in its accumulator reserved nothing: it continues nothing either.
        last.set(fresh.then_some((false, out.arena_bytes)));
        Buf::Host(host)
    };
    let mut combine: Option<HostOp> = None;
    for (pi, ph) in step.phases.iter().enumerate() {
        // The transfers keep their striping (both ends stage alike, so it still matches). No
        // `..`: a field added to Phase must be carried over here too (b1d1183 of 2026-11-28 fixed
        // `stripe_min` dropped by `Phase::default()`).
        let mut p = Phase { sends: Vec::new(), recvs: Vec::new(), reduces: Vec::new(), stripe_min: ph.stripe_min, narrow: ph.narrow };
        let mut wrote = Vec::new();
        for x in &ph.sends {
            p.sends.push(Xfer { buf: read(&mut out, &earlier, x.buf, x.bytes), ..*x });
        }
        for x in &ph.recvs {
            let b = write(&mut out, x.buf, x.bytes, None, None);
            if let (Buf::Dev(dev), Buf::Host(host)) = (x.buf, b) {
                wrote.push(HostCopy { dev, host, bytes: x.bytes, with: None });
            }
            p.recvs.push(Xfer { buf: b, ..*x });
        }
        for (ri, r) in ph.reduces.iter().enumerate() {
            if let Some((a, o, recv)) = on_gpu(step, pi, ri, combine_min).filter(|_| combine.is_none_or(|c| c == r.op)) {
                // The receive lands in the result's shadow; the kernel combines it on the way out.
                p.recvs[recv].buf = write(&mut out, Buf::Dev(o), r.bytes, None, Some(a));
                combine = Some(r.op);
                continue;
            }
            let inputs = r.inputs.iter().map(|&b| read(&mut out, &earlier, b, r.bytes)).collect();
            // The result is left in the accumulator, which the kernel copies out.
            let outb = match r.out {
                Buf::Dev(_) if r.bytes > 0 => write(&mut out, r.out, r.bytes, Some(r.acc), None),
                Buf::Dev(_) => Buf::Host(r.acc),
                b => b,
            };
            if let (Buf::Dev(dev), Buf::Host(host)) = (r.out, outb) {
                wrote.push(HostCopy { dev, host, bytes: r.bytes, with: None });
            }
            p.reduces.push(HostReduce { inputs, out: outb, ..r.clone() });
        }
        out.phases.push(p);
        earlier.extend(wrote);
    }
    pre.retain(|c| c.bytes > 0);
    post.retain(|c| c.bytes > 0);
    if pre.len().saturating_add(post.len()).saturating_add(out.copies.len()) > max_copies {
        return None;
    }
    Some(Staged { step: out, pre, post, combine })
}

/// Whether reduction `ri` of phase `pi` can be combined on the GPU (`stage_on_host`): (its GPU
/// input, its result, the receive of the phase that brings its other input). It must be:
/// - at least `min` bytes, an op the kernel has (not the integer average's division);
/// - one GPU input `a` and one host input, received whole by one receive of this phase and used
///   by nothing else of the step (the receive is moved to the result's shadow);
/// - a result `o` in GPU memory that is `a` or disjoint from it, with `a`'s alignment modulo 16
///   (the kernel combines 16-byte words);
/// - with nothing else in the step writing `a` or `o`, and no later phase reading `o` (it would
///   expect the combined value in the arena, which is never there).
fn on_gpu(step: &Step, pi: usize, ri: usize, min: u64) -> Option<(u64, u64, usize)> {
    let ph = &step.phases[pi];
    let r = &ph.reduces[ri];
    let n = r.bytes;
    let ops = matches!(r.op.combine, Combine::Sum | Combine::Prod | Combine::Max | Combine::Min);
    if n == 0 || n < min || r.op.postdiv >= 2 || !ops {
        return None;
    }
    let Buf::Dev(o) = r.out else { return None };
    let (a, h) = match r.inputs[..] {
        [Buf::Dev(a), Buf::Host(h)] | [Buf::Host(h), Buf::Dev(a)] => (a, h),
        _ => return None,
    };
    if (a != o && overlap((a, n), (o, n))) || a % 16 != o % 16 {
        return None;
    }
    let recv = ph.recvs.iter().position(|x| x.buf == Buf::Host(h) && x.bytes == n)?;
    // Every use of a buffer in the step but this reduction's own: (phase, is a write, buffer, bytes).
    let mut uses: Vec<(usize, bool, Buf, u64)> = Vec::new();
    for (pj, p) in step.phases.iter().enumerate() {
        uses.extend(p.sends.iter().map(|x| (pj, false, x.buf, x.bytes)));
        uses.extend(p.recvs.iter().map(|x| (pj, true, x.buf, x.bytes)));
        for (_, q) in p.reduces.iter().enumerate().filter(|&(rj, _)| (pj, rj) != (pi, ri)) {
            uses.extend(q.inputs.iter().map(|&b| (pj, false, b, q.bytes)));
            uses.extend([(pj, true, q.out, q.bytes), (pj, true, Buf::Host(q.acc), q.bytes)]);
        }
    }
    let hits = |b: Buf, m: u64, x: u64| m > 0 && matches!(b, Buf::Dev(d) if overlap((d, m), (x, n)));
    let host_hits = uses.iter().filter(|&&(_, _, b, m)| m > 0 && matches!(b, Buf::Host(y) if overlap((y, m), (h, n)))).count();
    let clash = uses.iter().any(|&(pj, w, b, m)| (w && (hits(b, m, a) || hits(b, m, o))) || (pj > pi && hits(b, m, o)));
    // Nothing may read the accumulator either: it never gets the combined value (a ring's complete
    // part goes on from there, `plan::allreduce_ring`).
    let acc_read = uses.iter().any(|&(_, _, b, m)| m > 0 && matches!(b, Buf::Host(y) if overlap((y, m), (r.acc, n))));
    // The receive itself is the one other use of the host input.
    (host_hits == 1 && !clash && !acc_read).then_some((a, o, recv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::hostreduce::{Combine, HostOp};
    use crate::types::DataType;

    fn op() -> HostOp {
        HostOp { dtype: DataType::Float32, combine: Combine::Sum, postdiv: 0 }
    }

    #[test]
    fn reads_and_writes_get_aligned_shadows_and_reads_are_shared() {
        let mut s = Step::default();
        let acc = s.host(64);
        let got = s.host(64);
        let ph = Phase {
            sends: vec![Xfer { peer: 1, buf: Buf::Dev(0x1003), bytes: 64 }, Xfer { peer: 2, buf: Buf::Dev(0x1003), bytes: 64 }],
            recvs: vec![Xfer { peer: 1, buf: Buf::Host(got), bytes: 64 }, Xfer { peer: 2, buf: Buf::Dev(0x5008), bytes: 64 }],
            reduces: vec![HostReduce { inputs: vec![Buf::Dev(0x1003), Buf::Host(got)], acc, out: Buf::Dev(0x1003), bytes: 64, op: op() }],
            stripe_min: 0,
            narrow: false,
        };
        s.phases.push(ph);
        let st = stage_on_host(&s, 64, 3, u64::MAX).unwrap();
        // One read copy for the three reads of 0x1003; writes: the receive and the result.
        assert_eq!(st.pre.len(), 1);
        assert_eq!(st.pre[0].dev, 0x1003);
        assert_eq!(st.pre[0].host % 16, 3);
        assert_eq!(st.post.len(), 2);
        assert_eq!(st.post[0].dev, 0x5008);
        assert_eq!(st.post[0].host % 16, 8);
        assert_eq!(st.post[1], HostCopy { dev: 0x1003, host: acc, bytes: 64, with: None });
        let p = &st.step.phases[0];
        assert!(p.sends.iter().chain(&p.recvs).all(|x| matches!(x.buf, Buf::Host(_))));
        assert!(!st.sends_only());
        assert_eq!(p.reduces[0].inputs, vec![Buf::Host(st.pre[0].host), Buf::Host(got)]);
        assert_eq!(p.reduces[0].out, Buf::Host(acc));
        // Shadows lie beyond the plan's own arena, inside the new size.
        assert!(st.pre[0].host >= s.arena_bytes && st.pre[0].host + 64 <= st.step.arena_bytes);
    }

    #[test]
    fn staged_phases_keep_their_striping() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let ph = Phase { sends: vec![x(Buf::Dev(0x1000), 64)], recvs: vec![x(Buf::Dev(0x2000), 64)], stripe_min: 128 << 10, narrow: true, ..Default::default() };
        let st = stage_on_host(&Step { phases: vec![ph], ..Default::default() }, u64::MAX, 4, u64::MAX).unwrap();
        let p = &st.step.phases[0];
        assert!(matches!((p.sends[0].buf, p.recvs[0].buf), (Buf::Host(_), Buf::Host(_))), "{p:?}");
        assert_eq!((p.stripe_min, p.narrow), (128 << 10, true));
    }

    #[test]
    fn large_jobs_too_many_copies_and_hazards_are_left_alone() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let one = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Step { phases: vec![Phase { sends, recvs, reduces: vec![], stripe_min: 0, narrow: false }], ..Default::default() };
        assert!(stage_on_host(&one(vec![x(Buf::Dev(0), 65)], vec![]), 64, 4, u64::MAX).is_none());
        assert!(stage_on_host(&one(vec![], vec![]), 64, 4, u64::MAX).is_none(), "nothing to carry");
        let many: Vec<Xfer> = (0..5).map(|i| x(Buf::Dev(i * 64), 8)).collect();
        assert!(stage_on_host(&one(many.clone(), vec![]), 64, 4, u64::MAX).is_none());
        assert!(stage_on_host(&one(many.clone(), vec![x(Buf::Dev(1000), 8)]), 64, 5, u64::MAX).is_none(), "reads and writes count together");
        assert!(stage_on_host(&one(many, vec![]), 64, 5, u64::MAX).is_some());
        // Written in phase 0, read in phase 1.
        let mut s = one(vec![], vec![x(Buf::Dev(100), 8)]);
        s.phases.push(Phase { sends: vec![x(Buf::Dev(104), 8)], ..Default::default() });
        assert!(stage_on_host(&s, 64, 4, u64::MAX).is_none());
        // Written twice.
        assert!(stage_on_host(&one(vec![], vec![x(Buf::Dev(100), 8), x(Buf::Dev(96), 8)]), 64, 4, u64::MAX).is_none());
        // Read and written in one phase is fine (reads are copied first).
        assert!(stage_on_host(&one(vec![x(Buf::Dev(100), 8)], vec![x(Buf::Dev(100), 8)]), 64, 4, u64::MAX).is_some());
    }

    #[test]
    fn contiguous_ranges_join_one_copy_while_their_shadows_are_the_newest() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        // Two sends of adjacent ranges, then two receives into adjacent ranges (8-byte pieces, so
        // the second shadow starts off 16-byte alignment, as its GPU range does).
        let s = Step { phases: vec![Phase { sends: vec![x(Buf::Dev(0x1000), 24), x(Buf::Dev(0x1018), 40)], recvs: vec![x(Buf::Dev(0x2008), 8), x(Buf::Dev(0x2010), 8)], reduces: vec![], stripe_min: 0, narrow: false }], ..Default::default() };
        let st = stage_on_host(&s, u64::MAX, 4, u64::MAX).unwrap();
        assert_eq!(st.pre.len(), 1);
        assert_eq!((st.pre[0].dev, st.pre[0].bytes), (0x1000, 64));
        assert_eq!(st.post.len(), 1);
        assert_eq!((st.post[0].dev, st.post[0].bytes, st.post[0].host % 16), (0x2008, 16, 8));
        let p = &st.step.phases[0];
        assert_eq!(p.sends[1].buf, Buf::Host(st.pre[0].host + 24), "the second send reads inside the joined shadow");
        assert_eq!(p.recvs[1].buf, Buf::Host(st.post[0].host + 8));
        assert!(st.post[0].host + 16 <= st.step.arena_bytes && st.pre[0].host + 64 <= st.post[0].host);
        // Not adjacent on the GPU, or another shadow reserved in between: separate copies.
        let gap = Step { phases: vec![Phase { sends: vec![x(Buf::Dev(0x1000), 24), x(Buf::Dev(0x1020), 8)], ..Default::default() }], ..Default::default() };
        assert_eq!(stage_on_host(&gap, u64::MAX, 4, u64::MAX).unwrap().pre.len(), 2);
        let between = Step {
            phases: vec![
                Phase { sends: vec![x(Buf::Dev(0x1000), 16)], recvs: vec![x(Buf::Dev(0x3000), 16)], reduces: vec![], stripe_min: 0, narrow: false },
                Phase { sends: vec![x(Buf::Dev(0x1010), 16)], ..Default::default() },
            ],
            ..Default::default()
        };
        let st = stage_on_host(&between, u64::MAX, 4, u64::MAX).unwrap();
        assert_eq!(st.pre.len(), 2, "the receive's shadow came between");
    }

    #[test]
    fn a_relay_sends_what_it_received_from_the_same_shadow() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let mut s = Step { phases: vec![Phase { recvs: vec![x(Buf::Dev(96), 8)], ..Default::default() }], ..Default::default() };
        s.phases.push(Phase { sends: vec![x(Buf::Dev(96), 8)], ..Default::default() });
        let st = stage_on_host(&s, 64, 4, u64::MAX).expect("an exact range is relayed");
        let Buf::Host(h) = st.step.phases[0].recvs[0].buf else { panic!("receive not shadowed") };
        assert_eq!(st.step.phases[1].sends[0].buf, Buf::Host(h), "the send reads what the receive wrote");
        assert!(st.pre.is_empty(), "nothing is read from the GPU");
        assert_eq!(st.post, vec![HostCopy { dev: 96, host: h, bytes: 8, with: None }]);
        // In one phase, a read of a range the same phase writes still reads the GPU's data.
        let one = Step { phases: vec![Phase { sends: vec![x(Buf::Dev(96), 8)], recvs: vec![x(Buf::Dev(96), 8)], reduces: vec![], stripe_min: 0, narrow: false }], ..Default::default() };
        let st = stage_on_host(&one, 64, 4, u64::MAX).unwrap();
        assert_eq!(st.pre.len(), 1);
        assert_ne!(st.step.phases[0].sends[0].buf, st.step.phases[0].recvs[0].buf);
    }

    #[test]
    fn only_a_step_without_receives_reductions_or_copies_out_is_send_only() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let one = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Step { phases: vec![Phase { sends, recvs, reduces: vec![], stripe_min: 0, narrow: false }], ..Default::default() };
        assert!(stage_on_host(&one(vec![x(Buf::Dev(0), 8), x(Buf::Dev(64), 8)], vec![]), 64, 4, u64::MAX).unwrap().sends_only());
        // Even into host memory only, a receive needs the kernel to wait.
        assert!(!stage_on_host(&one(vec![x(Buf::Dev(0), 8)], vec![x(Buf::Host(0), 8)]), 64, 4, u64::MAX).unwrap().sends_only());
        assert!(!stage_on_host(&one(vec![], vec![x(Buf::Dev(0), 8)]), 64, 4, u64::MAX).unwrap().sends_only());
    }

    /// An exchange's reduction as at 2 hosts x 1: send our input, receive the peer's, combine
    /// into `out`. (`got`, `acc`: the plan's host buffers.)
    fn exchange(input: u64, out: u64, n: u64, o: HostOp) -> (Step, u64) {
        let mut s = Step::default();
        let got = s.host(n);
        let acc = s.host(n);
        s.phases.push(Phase {
            sends: vec![Xfer { peer: 1, buf: Buf::Dev(input), bytes: n }],
            recvs: vec![Xfer { peer: 1, buf: Buf::Host(got), bytes: n }],
            reduces: vec![HostReduce { inputs: vec![Buf::Dev(input), Buf::Host(got)], acc, out: Buf::Dev(out), bytes: n, op: o }],
            stripe_min: 0,
            narrow: false,
        });
        (s, got)
    }

    #[test]
    fn a_reduction_with_one_received_input_is_combined_on_the_way_out() {
        for (input, out) in [(0x1000u64, 0x1000u64), (0x1000, 0x9000), (0x1004, 0x9004)] {
            let (s, got) = exchange(input, out, 4096, op());
            let st = stage_on_host(&s, u64::MAX, 4, 1).unwrap();
            assert_eq!(st.combine, Some(op()));
            // The send still reads a copy of the input; the receive lands in the result's shadow,
            // which the kernel combines with the input on the way out; the proxy combines nothing.
            assert_eq!(st.pre.len(), 1);
            assert_eq!((st.pre[0].dev, st.pre[0].with), (input, None));
            assert_eq!(st.post.len(), 1);
            let c = st.post[0];
            assert_eq!((c.dev, c.bytes, c.with, c.host % 16), (out, 4096, Some(input), out % 16));
            let p = &st.step.phases[0];
            assert!(p.reduces.is_empty());
            assert_eq!(p.recvs[0].buf, Buf::Host(c.host));
            assert_ne!(c.host, got);
            assert!(c.host + 4096 <= st.step.arena_bytes);
            // Below the threshold, or never: the proxy combines, as before.
            for min in [4097, u64::MAX] {
                let plain = stage_on_host(&s, u64::MAX, 4, min).unwrap();
                assert_eq!((plain.combine, plain.step.phases[0].reduces.len()), (None, 1));
                assert!(plain.post.iter().all(|c| c.with.is_none()));
            }
        }
    }

    #[test]
    fn reductions_the_kernel_cannot_combine_stay_with_the_proxy() {
        let on_cpu = |s: &Step| {
            let st = stage_on_host(s, u64::MAX, 8, 1).unwrap();
            st.combine.is_none() && st.post.iter().all(|c| c.with.is_none()) && st.step.phases.iter().map(|p| p.reduces.len()).sum::<usize>() > 0
        };
        // The integer average's division.
        let avg = HostOp { dtype: DataType::Int32, combine: Combine::Sum, postdiv: 3 };
        assert!(on_cpu(&exchange(0x1000, 0x1000, 4096, avg).0));
        // Input and result aligned differently modulo 16, or overlapping without being one range.
        assert!(on_cpu(&exchange(0x1000, 0x9008, 4096, op()).0));
        assert!(on_cpu(&exchange(0x1000, 0x1800, 4096, op()).0));
        // The received input also sent on.
        let (mut s, got) = exchange(0x1000, 0x1000, 4096, op());
        s.phases[0].sends.push(Xfer { peer: 2, buf: Buf::Host(got), bytes: 4096 });
        assert!(on_cpu(&s));
        // A later phase reads the result (it would look for it in the arena).
        let (mut s, _) = exchange(0x1000, 0x9000, 4096, op());
        s.phases.push(Phase { sends: vec![Xfer { peer: 2, buf: Buf::Dev(0x9000), bytes: 4096 }], ..Default::default() });
        assert!(on_cpu(&s));
        // A later phase sends the accumulator (a ring's complete part): it must hold the result.
        let (mut s, _) = exchange(0x1000, 0x9000, 4096, op());
        let acc = s.phases[0].reduces[0].acc;
        s.phases.push(Phase { sends: vec![Xfer { peer: 2, buf: Buf::Host(acc), bytes: 4096 }], ..Default::default() });
        assert!(on_cpu(&s));
        // Something else writes the input.
        let (mut s, _) = exchange(0x1000, 0x9000, 4096, op());
        s.phases[0].recvs.push(Xfer { peer: 2, buf: Buf::Dev(0x1800), bytes: 64 });
        assert!(on_cpu(&s));
        // Two inputs received: the proxy combines them.
        let (mut s, got) = exchange(0x1000, 0x1000, 4096, op());
        let more = s.host(4096);
        s.phases[0].recvs.push(Xfer { peer: 2, buf: Buf::Host(more), bytes: 4096 });
        s.phases[0].reduces[0].inputs = vec![Buf::Dev(0x1000), Buf::Host(got), Buf::Host(more)];
        assert!(on_cpu(&s));
        // A second reduction of another op in the step: the first is combined, the second not.
        let (s, got2) = {
            let (mut s, _) = exchange(0x1000, 0x1000, 4096, op());
            let g = s.host(4096);
            let acc = s.host(4096);
            let max = HostOp { dtype: DataType::Float32, combine: Combine::Max, postdiv: 0 };
            s.phases[0].recvs.push(Xfer { peer: 2, buf: Buf::Host(g), bytes: 4096 });
            s.phases[0].reduces.push(HostReduce { inputs: vec![Buf::Dev(0x20000), Buf::Host(g)], acc, out: Buf::Dev(0x20000), bytes: 4096, op: max });
            (s, g)
        };
        let st = stage_on_host(&s, u64::MAX, 8, 1).unwrap();
        assert_eq!(st.combine, Some(op()));
        assert_eq!(st.step.phases[0].reduces.len(), 1);
        assert_eq!(st.step.phases[0].reduces[0].inputs[1], Buf::Host(got2));
    }
}
