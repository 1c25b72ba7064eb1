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
//! Since session 46 every step on TCP links is staged, whatever its size (`max_bytes`): a proxy
//! that issues CUDA copies during a step deadlocks under an application thread that waits in the
//! driver for that step. PyTorch's `.cpu()` of a result is a pageable device-to-host copy, and
//! while it waits for our spinning step kernel, every copy, launch, stream creation and host
//! allocation of any other thread of the process waits for it (`.device-carry/lockprobe.cu`,
//! BENCHMARKS thirty-fourth pass); only queries pass. NCCL's proxy never touches the driver
//! during a step either: its kernels copy through host memory.
//!
//! A pure function of the step, so it is tested on the CPU with the plan simulator.

use super::plan::{Buf, HostReduce, Phase, Step, Xfer};
use crate::log::Subsys;

/// OXCCL_NET_STAGE_MAX: the largest job (bytes) of a step its kernel stages through host memory;
/// unlimited by default. A step with a larger job has its GPU data copied by the proxy with the
/// copy engines, pipelined with the wire, which can deadlock as the module note says (kept for
/// comparison: 262144 is the limit before session 46); 0 stages nothing.
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

/// One copy the step kernel makes: between GPU address `dev` and arena offset `host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCopy {
    pub dev: u64,
    pub host: u64,
    pub bytes: u64,
}

/// A step rewritten to host memory, with the copies around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    pub step: Step,
    /// GPU -> arena, before the proxy runs the step.
    pub pre: Vec<HostCopy>,
    /// Arena -> GPU, after.
    pub post: Vec<HostCopy>,
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
pub fn stage_on_host(step: &Step, max_job: u64, max_copies: usize) -> Option<Staged> {
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
        pre.push(HostCopy { dev, host, bytes });
        last.set(Some((true, out.arena_bytes)));
        Buf::Host(host)
    };
    let mut write = |out: &mut Step, b: Buf, bytes: u64, host: Option<u64>| -> Buf {
        let Buf::Dev(dev) = b else { return b };
        if host.is_none() {
            if let Some(h) = extend(out, &mut post, false, dev, bytes) {
                return Buf::Host(h);
            }
        }
        let fresh = host.is_none();
        let host = host.unwrap_or_else(|| shadow(out, dev, bytes));
        post.push(HostCopy { dev, host, bytes });
        // A result left in its accumulator reserved nothing: it continues nothing either.
        last.set(fresh.then_some((false, out.arena_bytes)));
        Buf::Host(host)
    };
    for ph in &step.phases {
        let mut p = Phase::default();
        let mut wrote = Vec::new();
        for x in &ph.sends {
            p.sends.push(Xfer { buf: read(&mut out, &earlier, x.buf, x.bytes), ..*x });
        }
        for x in &ph.recvs {
            let b = write(&mut out, x.buf, x.bytes, None);
            if let (Buf::Dev(dev), Buf::Host(host)) = (x.buf, b) {
                wrote.push(HostCopy { dev, host, bytes: x.bytes });
            }
            p.recvs.push(Xfer { buf: b, ..*x });
        }
        for r in &ph.reduces {
            let inputs = r.inputs.iter().map(|&b| read(&mut out, &earlier, b, r.bytes)).collect();
            // The result is left in the accumulator, which the kernel copies out.
            let outb = match r.out {
                Buf::Dev(_) if r.bytes > 0 => write(&mut out, r.out, r.bytes, Some(r.acc)),
                Buf::Dev(_) => Buf::Host(r.acc),
                b => b,
            };
            if let (Buf::Dev(dev), Buf::Host(host)) = (r.out, outb) {
                wrote.push(HostCopy { dev, host, bytes: r.bytes });
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
    Some(Staged { step: out, pre, post })
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
        };
        s.phases.push(ph);
        let st = stage_on_host(&s, 64, 3).unwrap();
        // One read copy for the three reads of 0x1003; writes: the receive and the result.
        assert_eq!(st.pre.len(), 1);
        assert_eq!(st.pre[0].dev, 0x1003);
        assert_eq!(st.pre[0].host % 16, 3);
        assert_eq!(st.post.len(), 2);
        assert_eq!(st.post[0].dev, 0x5008);
        assert_eq!(st.post[0].host % 16, 8);
        assert_eq!(st.post[1], HostCopy { dev: 0x1003, host: acc, bytes: 64 });
        let p = &st.step.phases[0];
        assert!(p.sends.iter().chain(&p.recvs).all(|x| matches!(x.buf, Buf::Host(_))));
        assert!(!st.sends_only());
        assert_eq!(p.reduces[0].inputs, vec![Buf::Host(st.pre[0].host), Buf::Host(got)]);
        assert_eq!(p.reduces[0].out, Buf::Host(acc));
        // Shadows lie beyond the plan's own arena, inside the new size.
        assert!(st.pre[0].host >= s.arena_bytes && st.pre[0].host + 64 <= st.step.arena_bytes);
    }

    #[test]
    fn large_jobs_too_many_copies_and_hazards_are_left_alone() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let one = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Step { phases: vec![Phase { sends, recvs, reduces: vec![], stripe_min: 0 }], ..Default::default() };
        assert!(stage_on_host(&one(vec![x(Buf::Dev(0), 65)], vec![]), 64, 4).is_none());
        assert!(stage_on_host(&one(vec![], vec![]), 64, 4).is_none(), "nothing to carry");
        let many: Vec<Xfer> = (0..5).map(|i| x(Buf::Dev(i * 64), 8)).collect();
        assert!(stage_on_host(&one(many.clone(), vec![]), 64, 4).is_none());
        assert!(stage_on_host(&one(many.clone(), vec![x(Buf::Dev(1000), 8)]), 64, 5).is_none(), "reads and writes count together");
        assert!(stage_on_host(&one(many, vec![]), 64, 5).is_some());
        // Written in phase 0, read in phase 1.
        let mut s = one(vec![], vec![x(Buf::Dev(100), 8)]);
        s.phases.push(Phase { sends: vec![x(Buf::Dev(104), 8)], ..Default::default() });
        assert!(stage_on_host(&s, 64, 4).is_none());
        // Written twice.
        assert!(stage_on_host(&one(vec![], vec![x(Buf::Dev(100), 8), x(Buf::Dev(96), 8)]), 64, 4).is_none());
        // Read and written in one phase is fine (reads are copied first).
        assert!(stage_on_host(&one(vec![x(Buf::Dev(100), 8)], vec![x(Buf::Dev(100), 8)]), 64, 4).is_some());
    }

    #[test]
    fn contiguous_ranges_join_one_copy_while_their_shadows_are_the_newest() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        // Two sends of adjacent ranges, then two receives into adjacent ranges (8-byte pieces, so
        // the second shadow starts off 16-byte alignment, as its GPU range does).
        let s = Step { phases: vec![Phase { sends: vec![x(Buf::Dev(0x1000), 24), x(Buf::Dev(0x1018), 40)], recvs: vec![x(Buf::Dev(0x2008), 8), x(Buf::Dev(0x2010), 8)], reduces: vec![], stripe_min: 0 }], ..Default::default() };
        let st = stage_on_host(&s, u64::MAX, 4).unwrap();
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
        assert_eq!(stage_on_host(&gap, u64::MAX, 4).unwrap().pre.len(), 2);
        let between = Step {
            phases: vec![
                Phase { sends: vec![x(Buf::Dev(0x1000), 16)], recvs: vec![x(Buf::Dev(0x3000), 16)], reduces: vec![], stripe_min: 0 },
                Phase { sends: vec![x(Buf::Dev(0x1010), 16)], ..Default::default() },
            ],
            ..Default::default()
        };
        let st = stage_on_host(&between, u64::MAX, 4).unwrap();
        assert_eq!(st.pre.len(), 2, "the receive's shadow came between");
    }

    #[test]
    fn a_relay_sends_what_it_received_from_the_same_shadow() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let mut s = Step { phases: vec![Phase { recvs: vec![x(Buf::Dev(96), 8)], ..Default::default() }], ..Default::default() };
        s.phases.push(Phase { sends: vec![x(Buf::Dev(96), 8)], ..Default::default() });
        let st = stage_on_host(&s, 64, 4).expect("an exact range is relayed");
        let Buf::Host(h) = st.step.phases[0].recvs[0].buf else { panic!("receive not shadowed") };
        assert_eq!(st.step.phases[1].sends[0].buf, Buf::Host(h), "the send reads what the receive wrote");
        assert!(st.pre.is_empty(), "nothing is read from the GPU");
        assert_eq!(st.post, vec![HostCopy { dev: 96, host: h, bytes: 8 }]);
        // In one phase, a read of a range the same phase writes still reads the GPU's data.
        let one = Step { phases: vec![Phase { sends: vec![x(Buf::Dev(96), 8)], recvs: vec![x(Buf::Dev(96), 8)], reduces: vec![], stripe_min: 0 }], ..Default::default() };
        let st = stage_on_host(&one, 64, 4).unwrap();
        assert_eq!(st.pre.len(), 1);
        assert_ne!(st.step.phases[0].sends[0].buf, st.step.phases[0].recvs[0].buf);
    }

    #[test]
    fn only_a_step_without_receives_reductions_or_copies_out_is_send_only() {
        let x = |buf, bytes| Xfer { peer: 1, buf, bytes };
        let one = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Step { phases: vec![Phase { sends, recvs, reduces: vec![], stripe_min: 0 }], ..Default::default() };
        assert!(stage_on_host(&one(vec![x(Buf::Dev(0), 8), x(Buf::Dev(64), 8)], vec![]), 64, 4).unwrap().sends_only());
        // Even into host memory only, a receive needs the kernel to wait.
        assert!(!stage_on_host(&one(vec![x(Buf::Dev(0), 8)], vec![x(Buf::Host(0), 8)]), 64, 4).unwrap().sends_only());
        assert!(!stage_on_host(&one(vec![], vec![x(Buf::Dev(0), 8)]), 64, 4).unwrap().sends_only());
    }
}
