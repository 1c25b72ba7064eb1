//! Drawing cases: proptest strategies over the whole contract, with counts concentrated where
//! oxccl's own plans change (every threshold of the algorithm selectors and chunk plans, found by
//! probing the pure selectors in `oxccl::algo` with the topology the run will have).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;

use oxccl::algo::ce_direct::{min_bytes_for, Traffic};
use oxccl::algo::policy::CtaPolicy;
use oxccl::algo::{
    allgather_shape, broadcast_relay, broadcast_spec, exchange_shape, gather_chunk_cap, plan_exchange, rooted_grid, select_allreduce, select_gather_oneshot,
    select_reduce, select_reducescatter, ExchangeSpec, Scratch, Topology, Transfer as XTransfer, Tuning,
};
use oxccl::types::DataType;

use crate::case::{Abort, CallCfg, Case, Kind, Mem, Mode, Op, OpCase, Stop, Transfer, SCALARS, SELECTIONS};

/// What the run may draw.
#[derive(Clone, Debug)]
pub struct Space {
    pub ngpus: usize,
    /// Multiprocessors of one GPU.
    pub sms: u32,
    /// (processes, ranks per process).
    pub layouts: Vec<(usize, usize)>,
    pub kinds: Vec<Kind>,
    pub modes: Vec<Mode>,
    /// Buffer kinds (plain drawn half the time where it is among them).
    pub mems: Vec<Mem>,
    /// Percent of cases (of 2+ ranks) that abort.
    pub abort_pct: u32,
    /// Largest buffer one rank allocates for one operation.
    pub max_bytes: u64,
    /// Largest group of independently drawn operations.
    pub max_group: usize,
    /// Largest coalesced group (operations of one kind, datatype, op and communicator).
    pub max_coalesced: usize,
    /// Percent of collectives posted with a per-collective config (nccl*Config).
    pub collcfg_pct: u32,
    /// Percent of cases (without an abort) whose communicators are suspended and resumed first.
    pub suspend_pct: u32,
}

/// Counts (elements, NCCL's count argument) at which some plan changes, per (kind, element size,
/// ranks, ranks sharing a GPU); each comes with its neighbours.
pub struct Boundaries {
    map: HashMap<(Kind, usize, usize), Arc<Vec<u64>>>,
}

fn dtype_of_size(es: usize) -> DataType {
    match es {
        1 => DataType::Int8,
        2 => DataType::Bfloat16,
        4 => DataType::Float32,
        _ => DataType::Float64,
    }
}

/// A string that changes exactly where oxccl's plan for the call changes.
fn plan_print(kind: Kind, es: usize, topo: &Topology, count: u64, t: &Tuning) -> String {
    let dt = dtype_of_size(es);
    let n = topo.nranks;
    let s = Scratch::for_ranks(n, t);
    let bytes = count * es as u64;
    let peers = |me: usize| (0..n).filter(move |&p| p != me);
    let xfer = |peer, bytes| XTransfer { peer, ptr: 0, bytes, relay: None };
    let exch = |spec: &ExchangeSpec, me: usize| match plan_exchange(me, spec, None, topo, &s, t) {
        Ok(p) => format!("{} {} {:?}", p.grid, p.block, p.args),
        Err(e) => e.msg,
    };
    match kind {
        Kind::AllReduce => format!("{:?} {}", select_allreduce(count, dt, topo, &s, t), n == 1 && bytes >= 256 << 10),
        Kind::ReduceScatter => format!("{:?}", select_reducescatter(count, dt, topo, &s, t)),
        Kind::Reduce => format!("{:?}", select_reduce(count, dt, topo, &s, t)),
        Kind::AllGather | Kind::AlltoAll => {
            let ag = kind == Kind::AllGather;
            let mut spec = ExchangeSpec { traffic: if ag { Traffic::AllGather } else { Traffic::AlltoAll }, ..Default::default() };
            spec.sends = peers(0).map(|p| xfer(p, bytes)).collect();
            spec.recvs = peers(0).map(|p| xfer(p, bytes)).collect();
            if ag {
                (spec.chunk_cap, spec.threads) = allgather_shape(bytes, topo, &s);
            }
            let ce = bytes >= min_bytes_for(spec.traffic, n, t);
            format!("{:?} {ce} {}", select_gather_oneshot(bytes, ag, topo, &s, t), exch(&spec, 0))
        }
        Kind::Broadcast => {
            let oneshot = oxccl::algo::chain::broadcast_oneshot(bytes, topo, &s, t);
            let ll128 = oxccl::algo::chain::broadcast_ll128(bytes, topo, &s, t);
            let relay = broadcast_relay(bytes, topo, &s, t);
            let spec = broadcast_spec(0, 0, n, 0, 0, bytes, relay);
            let ce = bytes >= min_bytes_for(Traffic::Broadcast, n, t);
            format!("{oneshot:?} {ll128:?} {relay:?} {ce} {}", exch(&spec, 0))
        }
        Kind::Gather => {
            let spec = ExchangeSpec { recvs: peers(0).map(|p| xfer(p, bytes)).collect(), chunk_cap: Some(gather_chunk_cap(&s)), traffic: Traffic::Gather, ..Default::default() };
            format!("{} {}", bytes >= min_bytes_for(Traffic::Gather, n, t), exch(&spec, 0))
        }
        Kind::Scatter => {
            let spec = ExchangeSpec { sends: peers(0).map(|p| xfer(p, bytes)).collect(), grid: rooted_grid(bytes, topo, &s), traffic: Traffic::Scatter, ..Default::default() };
            format!("{} {}", bytes >= min_bytes_for(Traffic::Scatter, n, t), exch(&spec, 0))
        }
        Kind::SendRecv => {
            let spec = ExchangeSpec { sends: vec![xfer(1 % n, bytes)], recvs: vec![xfer(n - 1, bytes)], ..Default::default() };
            let one = oxccl::algo::select_p2p_oneshot(&spec, topo, &s, t);
            format!("{one:?} {} {}", bytes >= min_bytes_for(Traffic::P2p, n, t), if n > 1 { exch(&spec, 0) } else { String::new() })
        }
    }
}

impl Boundaries {
    /// Probes every plan for counts up to `max_bytes` per buffer: at 1, 1.5 and 2 times each
    /// power of two, and by bisection between probes whose plans differ, so each change between
    /// two probes is found (one per interval), with the counts chunk plans multiply out to.
    pub fn probe(space: &Space) -> Boundaries {
        Self::probe_under(space, &[CtaPolicy::Default, CtaPolicy::Efficiency])
    }

    /// `probe` for the block budgets of `policies` (efficiency and zero share theirs).
    fn probe_under(space: &Space, policies: &[CtaPolicy]) -> Boundaries {
        let t = Tuning::from_env().unwrap_or_default();
        let mut map = HashMap::new();
        let mut ranks: Vec<usize> = space.layouts.iter().map(|&(p, k)| p * k).collect();
        ranks.sort_unstable();
        ranks.dedup();
        for &n in &ranks {
            let per_gpu = n.div_ceil(space.ngpus.max(1));
            let sm = if per_gpu > 1 { (space.sms / (2 * per_gpu as u32)).max(1) } else { space.sms };
            // The block budgets a case may run under: the GPU's, and the efficiency and zero CTA
            // policies' cap (cases draw the policy), whose smaller grids move some boundaries.
            let full = sm.min(oxccl::device_abi::OX_MAX_BLOCKS as u32);
            let mut budgets: Vec<u32> = policies.iter().map(|p| p.block_budget(full)).collect();
            budgets.sort_unstable();
            budgets.dedup();
            for kind in Kind::ALL {
                for es in [1usize, 2, 4, 8] {
                    let mut all: Vec<u64> = Vec::new();
                    for &sm_count in &budgets {
                        let topo = Topology { nranks: n, sm_count };
                        let per = if kind.per_rank() { n as u64 } else { 1 };
                        let max = (space.max_bytes / es as u64 / per).max(2);
                        let f = |c: u64| plan_print(kind, es, &topo, c, &t);
                        let mut probes: Vec<u64> = (0..64).flat_map(|k| [1u64 << k, 3u64 << k >> 1]).filter(|&c| c >= 1 && c <= max).collect();
                        probes.sort_unstable();
                        probes.dedup();
                        let mut found = Vec::new();
                        for w in probes.windows(2) {
                            let (mut lo, mut hi) = (w[0], w[1]);
                            let a = f(lo);
                            if a == f(hi) {
                                continue;
                            }
                            while hi - lo > 1 {
                                let mid = lo + (hi - lo) / 2;
                                if f(mid) == a {
                                    lo = mid;
                                } else {
                                    hi = mid;
                                }
                            }
                            found.push(hi);
                        }
                        // Chunked plans: whole chunks and whole rounds of every block.
                        let extra: Vec<u64> = found
                            .iter()
                            .chain(probes.iter())
                            .filter_map(|&c| match kind {
                                Kind::AllReduce => {
                                    let p = select_allreduce(c, dtype_of_size(es), &topo, &Scratch::for_ranks(n, &t), &t);
                                    (p.chunk_elems > 0).then(|| vec![p.chunk_elems * n as u64, p.chunk_elems * n as u64 * p.grid as u64])
                                }
                                Kind::ReduceScatter | Kind::Reduce => {
                                    let s = Scratch::for_ranks(n, &t);
                                    let p = if kind == Kind::Reduce { select_reduce(c, dtype_of_size(es), &topo, &s, &t) } else { select_reducescatter(c, dtype_of_size(es), &topo, &s, &t) };
                                    (p.chunk_elems > 0).then(|| vec![p.chunk_elems, p.chunk_elems * p.grid as u64])
                                }
                                _ => None,
                            })
                            .flatten()
                            .filter(|&c| c <= max)
                            .collect();
                        found.extend(extra);
                        // Powers of two bytes, and the probes themselves.
                        found.extend((0..40).map(|k| (1u64 << k) / es as u64).filter(|&c| c >= 1 && c <= max));
                        all.extend(found);
                    }
                    all.sort_unstable();
                    all.dedup();
                    let _ = exchange_shape;
                    map.insert((kind, es, n), Arc::new(all));
                }
            }
        }
        Boundaries { map }
    }

    pub fn get(&self, kind: Kind, es: usize, n: usize) -> Arc<Vec<u64>> {
        self.map.get(&(kind, es, n)).cloned().unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.map.values().map(|v| v.len()).sum()
    }
}

const DTYPES: [i32; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
const PRIMES: [u64; 12] = [2, 3, 5, 7, 13, 31, 127, 251, 4099, 65537, 262147, 1048583];

/// A count for `kind` of `es`-byte elements on `n` ranks: mostly near a boundary or small, some
/// anywhere up to the byte cap.
fn count_strategy(b: Arc<Vec<u64>>, es: usize, per: u64, max_bytes: u64) -> BoxedStrategy<u64> {
    let max = (max_bytes / es as u64 / per).max(2);
    let near = if b.is_empty() {
        Just(1u64).boxed()
    } else {
        (prop::sample::select((*b).clone()), -2i64..=2).prop_map(move |(c, d)| (c as i64 + d).max(0) as u64).boxed()
    };
    let log_uniform = move |top: u64| (0u32..=top.ilog2(), any::<u64>()).prop_map(move |(k, x)| ((1u64 << k) + x % (1u64 << k)).min(top));
    prop_oneof![
        2 => 0u64..=17,
        4 => near,
        1 => prop::sample::select(PRIMES.to_vec()).prop_map(move |p| p.min(max)),
        3 => log_uniform((4u64 << 20) / es as u64 / per),
        1 => log_uniform(max),
    ]
    .prop_map(move |c| c.min(max))
    .boxed()
}

/// Element offsets: aligned half the time, else any of 1-15.
fn offsets(n: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![1 => Just(0u8), 1 => 0u8..16], n)
}

fn op_strategy(space: Arc<Space>, bounds: Arc<Boundaries>, n: usize) -> BoxedStrategy<OpCase> {
    let kinds = space.kinds.clone();
    (prop::sample::select(kinds), prop::sample::select(DTYPES.to_vec()))
        .prop_flat_map(move |(kind, dtype)| op_of(space.clone(), bounds.clone(), n, kind, dtype))
        .boxed()
}

/// A group of 2-`max_coalesced` operations of one kind, datatype, op and communicator, as
/// frameworks post them (PyTorch's coalesced operations, nccl-tests -m): what oxccl launches
/// together (src/algo/group.rs), past its 16 operations a launch. Two times in three the kind is
/// one oxccl groups (all collectives: not Send/Recv) where the space has it, and half the time
/// each operation is at most 16 KiB a rank, so that launches do group.
fn coalesced_strategy(space: Arc<Space>, bounds: Arc<Boundaries>, n: usize) -> BoxedStrategy<Vec<OpCase>> {
    let all = space.kinds.clone();
    let grouped: Vec<Kind> = all.iter().copied().filter(|&k| k != Kind::SendRecv).collect();
    let kind = if grouped.is_empty() {
        prop::sample::select(all).boxed()
    } else {
        prop_oneof![2 => prop::sample::select(grouped), 1 => prop::sample::select(all)].boxed()
    };
    let most = space.max_coalesced.max(2);
    (kind, prop::sample::select(DTYPES.to_vec()), prop::sample::select(Op::ALL.to_vec()), 0u8..3, any::<bool>())
        .prop_flat_map(move |(kind, dtype, op, comm, small)| {
            let es = DataType::from_raw(dtype).expect("valid").size() as u64;
            let per = if kind.per_rank() { n as u64 } else { 1 };
            let cap = ((16u64 << 10) / es / per).max(1);
            prop::collection::vec(op_of(space.clone(), bounds.clone(), n, kind, dtype), 2..=most).prop_map(move |mut ops| {
                for o in &mut ops {
                    if kind.reduces() {
                        o.op = op;
                    }
                    o.comm = comm;
                    if small && kind != Kind::SendRecv {
                        o.count = o.count.min(cap);
                    }
                }
                ops
            })
        })
        .boxed()
}

/// A group of 2-`max_group` operations of any kinds: half the time on one communicator with each
/// collective at most 16 KiB a rank, so that mixed kinds, datatypes and ops meet in one grouped
/// launch (src/algo/group.rs) beside the group's point-to-point operations.
fn mixed_strategy(space: Arc<Space>, bounds: Arc<Boundaries>, n: usize) -> BoxedStrategy<Vec<OpCase>> {
    let most = space.max_group.max(2);
    (prop::collection::vec(op_strategy(space, bounds, n), 2..=most), any::<bool>())
        .prop_map(move |(mut ops, small)| {
            if small {
                for o in &mut ops {
                    let es = DataType::from_raw(o.dtype).expect("valid").size() as u64;
                    let per = if o.kind.per_rank() { n as u64 } else { 1 };
                    o.comm = 0;
                    if o.kind != Kind::SendRecv {
                        o.count = o.count.min(((16u64 << 10) / es / per).max(1));
                    }
                }
            }
            ops
        })
        .boxed()
}

/// One operation of `kind` and `dtype`.
fn op_of(space: Arc<Space>, bounds: Arc<Boundaries>, n: usize, kind: Kind, dtype: i32) -> BoxedStrategy<OpCase> {
    let es = DataType::from_raw(dtype).expect("valid").size();
    let per = if kind.per_rank() { n as u64 } else { 1 };
    let count = count_strategy(bounds.get(kind, es, n), es, per, space.max_bytes);
    let tcount = count_strategy(bounds.get(Kind::SendRecv, es, n), es, 1, space.max_bytes / 4);
    let transfers = if kind == Kind::SendRecv {
        prop::collection::vec((0..n, 0..n, tcount, 0u8..16, 0u8..16), 1..=6)
            .prop_map(|v| v.into_iter().map(|(src, dst, count, soff, roff)| Transfer { src, dst, count, soff, roff }).collect())
            .boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    let op = if kind.reduces() { prop::sample::select(Op::ALL.to_vec()).boxed() } else { Just(Op::Sum).boxed() };
    let in_place = if kind.has_in_place() { any::<bool>().boxed() } else { Just(false).boxed() };
    let count = if kind == Kind::SendRecv { Just(0u64).boxed() } else { count };
    let others: Vec<Mem> = space.mems.iter().copied().filter(|&m| m != Mem::Plain).collect();
    let mem = match (space.mems.contains(&Mem::Plain), others.is_empty()) {
        (_, true) => Just(Mem::Plain).boxed(),
        (false, false) => prop::sample::select(others).boxed(),
        (true, false) => prop_oneof![1 => Just(Mem::Plain), 1 => prop::sample::select(others)].boxed(),
    };
    let pct = space.collcfg_pct.min(100);
    let cfg = if kind == Kind::SendRecv || pct == 0 {
        Just(None).boxed()
    } else {
        prop_oneof![(100 - pct) => Just(None), pct => cfg_strategy(kind).prop_map(Some)].boxed()
    };
    // One operation in four goes on some ranks' second stream (`OpCase::side`).
    let side = prop_oneof![3 => Just(0u16), 1 => 0u16..=((1u32 << n.min(16)) - 1) as u16];
    // Registered buffers: one operation in three leaves some ranks' buffers unregistered.
    let unreg = prop_oneof![2 => Just(0u16), 1 => 0u16..=((1u32 << n.min(16)) - 1) as u16];
    (op, count, 0..n, in_place, 0u8..3, offsets(n), offsets(n), prop::collection::vec(0u8..SCALARS as u8, n), transfers, mem, cfg, (unreg, side)).prop_map(
        move |(op, count, root, in_place, comm, soff, roff, scalars, transfers, mem, cfg, (unreg, side))| OpCase {
            side: if n <= 16 { side } else { 0 },
            unreg: if mem.registered() && n <= 16 { unreg } else { 0 },
            kind,
            dtype,
            op,
            count,
            root: if kind.rooted() { root } else { 0 },
            in_place,
            comm,
            // In a symmetric window every rank's buffer sits at the same offset (NCCL's
            // symmetric kernels address a peer's buffer at the caller's offset).
            soff: if mem == Mem::Window { vec![soff[0]; n] } else { soff },
            roff: if mem == Mem::Window { vec![roff[0]; n] } else { roff },
            scalars,
            transfers,
            mem,
            cfg,
        },
    )
    .boxed()
}

/// A per-collective config for `kind`: thread-block bounds mostly unset (else 1, 4 or any up to
/// 64), any policy, any selection (forced only where `CallCfg::forced_ok`), a launch-completion
/// event one time in four (`case_strategy` keeps at most one per communicator, none in graphs).
fn cfg_strategy(kind: Kind) -> BoxedStrategy<CallCfg> {
    let ctas = || prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(4u8), 1 => 1u8..=64];
    (ctas(), ctas(), 0u8..=4, 0..SELECTIONS.len() as u8, any::<bool>(), prop_oneof![3 => Just(false), 1 => Just(true)])
        .prop_map(move |(max_ctas, min_ctas, policy, sel, force, event)| {
            let mut c = CallCfg { max_ctas, min_ctas, policy, sel, force, event };
            c.force &= c.forced_ok(kind);
            c
        })
        .boxed()
}

/// Every case the space allows.
pub fn case_strategy(space: Arc<Space>, bounds: Arc<Boundaries>) -> BoxedStrategy<Case> {
    let layouts = space.layouts.clone();
    let modes = space.modes.clone();
    (prop::sample::select(layouts), prop::sample::select(modes), 1u8..=3, any::<u64>())
        .prop_flat_map(move |((procs, per_proc), mode, replays, seed)| {
            let n = procs * per_proc;
            let op = op_strategy(space.clone(), bounds.clone(), n);
            let ops = prop_oneof![
                3 => prop::collection::vec(op.clone(), 1..=1),
                2 => mixed_strategy(space.clone(), bounds.clone(), n),
                1 => coalesced_strategy(space.clone(), bounds.clone(), n),
            ];
            let abort = if n >= 2 && space.abort_pct > 0 {
                // ncclCommAbort two times in three; revoke and shrink the rest.
                let how = prop_oneof![1 => Just(Stop::Abort), 1 => prop::sample::select(Stop::ALL.to_vec())];
                let a = (prop::collection::vec(any::<bool>(), n), 0u32..20_000, any::<bool>(), how)
                    .prop_map(|(posts, delay_us, posters_only, how)| Some(Abort { posts, delay_us, posters_only, how }));
                prop_oneof![(100 - space.abort_pct.min(100)) => Just(None), space.abort_pct.min(100) => a].boxed()
            } else {
                Just(None).boxed()
            };
            // One case in six on the legacy default stream where it may be: not captured, no
            // abort, a process's ranks on distinct GPUs (5, not 0: shrinking moves toward 0, and a
            // shrunk case should not move onto the legacy stream).
            let ngpus = space.ngpus;
            // The CTA policy: default half the time (shrinking moves toward it), else efficiency
            // or zero.
            let policy = prop_oneof![2 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
            let suspend_pct = space.suspend_pct.min(100);
            // One graph case in four of 2+ processes leaves the odd processes uncaptured (3, not
            // 0: a shrunk case moves toward all capturing).
            (ops, abort, 0u8..6, policy, 0u32..100, 0u8..4, 0u8..3).prop_map(move |(mut ops, abort, stream, cta_policy, draw, mixed, capture)| Case {
                // Thread-local, global or relaxed capture, a third each (shrinking toward thread-local).
                capture_mode: if mode == Mode::Graph && abort.is_none() { capture } else { 0 },
                mixed_capture: mixed == 3 && mode == Mode::Graph && procs >= 2 && abort.is_none() && 99 - draw >= suspend_pct,
                default_stream: stream == 5 && mode != Mode::Graph && abort.is_none() && per_proc <= ngpus,
                // 99 - draw: shrinking moves the draw toward 0, and a shrunk case toward no suspend.
                suspend: 99 - draw < suspend_pct && abort.is_none(),
                cta_policy,
                procs,
                per_proc,
                mode,
                replays: if mode == Mode::Graph { replays } else { 1 },
                ops: {
                    // Launch-completion events: at most one per communicator in the group, none
                    // in graphs (NCCL's rules; oxccl's check of the first is tested elsewhere).
                    let mut seen = [false; 3];
                    let one_stream = mode == Mode::Graph || (stream == 5 && mode != Mode::Graph && abort.is_none() && per_proc <= ngpus);
                    for o in &mut ops {
                        // A second stream: eager and nonblocking cases on their own streams.
                        if one_stream {
                            o.side = 0;
                        }
                        if let Some(c) = &mut o.cfg {
                            c.event &= mode != Mode::Graph && !seen[o.comm as usize];
                            seen[o.comm as usize] |= c.event;
                        }
                    }
                    ops
                },
                abort: abort.map(|mut a| {
                    // At least one rank posts (else nothing is in flight to abort).
                    if !a.posts.iter().any(|&p| p) {
                        a.posts[0] = true;
                    }
                    // A shrink excludes someone (NCCL refuses an empty exclusion list): only
                    // posters stop, and some rank does not post.
                    if a.how == Stop::ShrinkAbort && (!a.posters_only || a.posts.iter().all(|&p| p)) {
                        a.how = Stop::Revoke;
                    }
                    a
                }),
                seed,
            })
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    fn space() -> Space {
        Space {
            ngpus: 2,
            sms: 132,
            layouts: vec![(1, 1), (2, 1), (1, 3), (2, 2)],
            kinds: Kind::ALL.to_vec(),
            modes: vec![Mode::Eager, Mode::Graph, Mode::NonBlocking],
            mems: Mem::ALL.to_vec(),
            abort_pct: 10,
            collcfg_pct: 25,
            suspend_pct: 10,
            max_bytes: 64 << 20,
            max_group: 4,
            max_coalesced: 18,
        }
    }

    /// The probes find the selectors' documented thresholds (AllReduce at 2 ranks: the one-shot's
    /// ring payload, the put-based algorithm's start; ReduceScatter: packets up to 1 MiB chunks).
    #[test]
    fn boundaries_include_the_selectors_thresholds() {
        let s = space();
        let b = Boundaries::probe(&s);
        let ar = b.get(Kind::AllReduce, 4, 2);
        let t = Tuning::default();
        let topo = Topology { nranks: 2, sm_count: 132 };
        let sc = Scratch::for_ranks(2, &t);
        for w in ar.windows(2) {
            let _ = w;
        }
        // Every change of plan between consecutive probes is bracketed by a boundary.
        let mut prev = select_allreduce(1, DataType::Float32, &topo, &sc, &t).algo;
        for c in (1..(16u64 << 20) / 4).step_by(997) {
            let a = select_allreduce(c, DataType::Float32, &topo, &sc, &t).algo;
            if a != prev {
                assert!(ar.iter().any(|&x| x <= c && x + 997 > c), "no boundary near {c} ({prev:?} -> {a:?})");
                prev = a;
            }
        }
        let rs = b.get(Kind::ReduceScatter, 1, 2);
        assert!(rs.contains(&((1 << 20) + 1)) || rs.contains(&(1 << 20)), "ReduceScatter's packet limit (1 MiB chunks)");
        assert!(b.len() > 1000);
    }

    /// Cases draw the efficiency and zero CTA policies, whose block cap moves some plans'
    /// boundaries (grids, chunked rounds): those are probed too, beside the uncapped ones.
    #[test]
    fn boundaries_include_the_capped_budgets() {
        let s = space();
        let (all, full) = (Boundaries::probe(&s), Boundaries::probe_under(&s, &[CtaPolicy::Default]));
        let mut added = 0;
        for (key, v) in &full.map {
            let a = all.map.get(key).expect("the same keys");
            assert!(v.iter().all(|c| a.contains(c)), "{key:?}: every uncapped boundary stays");
            added += a.len() - v.len();
        }
        assert!(added > 0, "the cap adds no boundary");
    }

    #[test]
    fn drawn_cases_are_valid_and_shrink_to_valid_cases() {
        let s = Arc::new(space());
        let b = Arc::new(Boundaries::probe(&s));
        let strat = case_strategy(s, b);
        let mut runner = TestRunner::deterministic();
        let mut kinds = std::collections::HashSet::new();
        let mut mems = std::collections::HashSet::new();
        let mut drawn = [false; 4];
        for _ in 0..300 {
            let mut tree = strat.new_tree(&mut runner).unwrap();
            let c = tree.current();
            c.validate().unwrap();
            assert!(c.ops.iter().all(|o| (o.count * o.dt().size() as u64) * if o.kind.per_rank() { c.nranks() as u64 } else { 1 } <= 64 << 20));
            kinds.extend(c.ops.iter().map(|o| o.kind));
            mems.extend(c.ops.iter().map(|o| o.mem));
            drawn[0] |= c.ops.iter().any(|o| o.unreg != 0);
            drawn[1] |= c.mixed_capture;
            drawn[2] |= c.capture_mode == 1;
            drawn[3] |= c.ops.iter().any(|o| o.side != 0);
            for _ in 0..20 {
                if !tree.simplify() {
                    break;
                }
                tree.current().validate().unwrap();
            }
        }
        assert_eq!(kinds.len(), Kind::ALL.len(), "every kind is drawn");
        assert_eq!(mems.len(), Mem::ALL.len(), "every buffer kind is drawn");
        assert_eq!(drawn, [true; 4], "registration on some ranks only, mixed capture, global capture and second streams are drawn");
    }

    /// Every way of stopping is drawn, and a shrink always excludes a rank that did not post.
    #[test]
    fn abort_cases_stop_every_way_and_shrinks_exclude_someone() {
        let mut s = space();
        s.abort_pct = 100;
        s.layouts = vec![(2, 1), (1, 3), (2, 2)];
        let s = Arc::new(s);
        let strat = case_strategy(s.clone(), Arc::new(Boundaries::probe(&s)));
        let mut runner = TestRunner::deterministic();
        let mut stops = std::collections::HashSet::new();
        for _ in 0..200 {
            let c = strat.new_tree(&mut runner).unwrap().current();
            let a = c.abort.clone().expect("every case aborts");
            if a.how == Stop::ShrinkAbort {
                assert!(a.posters_only && a.posts.iter().any(|&p| !p), "{}", c.to_line());
            }
            stops.insert(a.how);
        }
        assert_eq!(stops.len(), Stop::ALL.len(), "every way of stopping is drawn");
    }

    /// Per-collective configs are drawn with every setting, forced selections only where every
    /// library runs them, launch-completion events at most once a communicator and never in graphs.
    #[test]
    fn collective_configs_are_drawn_within_nccls_rules() {
        let s = Arc::new(space());
        let strat = case_strategy(s.clone(), Arc::new(Boundaries::probe(&s)));
        let mut runner = TestRunner::deterministic();
        let (mut cfgs, mut events, mut forced, mut policies, mut sels) = (0, 0, 0, std::collections::HashSet::new(), std::collections::HashSet::new());
        for _ in 0..400 {
            let c = strat.new_tree(&mut runner).unwrap().current();
            c.validate().unwrap();
            for o in &c.ops {
                let Some(cc) = o.cfg else { continue };
                assert_ne!(o.kind, Kind::SendRecv);
                cfgs += 1;
                events += usize::from(cc.event);
                forced += usize::from(cc.force && cc.sel != 0);
                assert!(!cc.event || c.mode != Mode::Graph, "{}", c.to_line());
                assert!(!cc.force || cc.forced_ok(o.kind), "{}", c.to_line());
                policies.insert(cc.policy);
                sels.insert(cc.sel);
            }
        }
        assert!(cfgs > 100 && events > 10 && forced > 10, "{cfgs} configs, {events} events, {forced} forced selections");
        assert_eq!(policies.len(), 5, "unset and every policy");
        assert_eq!(sels.len(), SELECTIONS.len(), "every selection");
        let none = Arc::new(Space { collcfg_pct: 0, ..space() });
        let strat = case_strategy(none.clone(), Arc::new(Boundaries::probe(&none)));
        for _ in 0..50 {
            assert!(strat.new_tree(&mut runner).unwrap().current().ops.iter().all(|o| o.cfg.is_none()));
        }
    }

    #[test]
    fn buffer_kinds_follow_the_space() {
        let mut s = space();
        s.mems = vec![Mem::Registered];
        let s = Arc::new(s);
        let strat = case_strategy(s.clone(), Arc::new(Boundaries::probe(&s)));
        let mut runner = TestRunner::deterministic();
        for _ in 0..50 {
            let c = strat.new_tree(&mut runner).unwrap().current();
            assert!(c.ops.iter().all(|o| o.mem == Mem::Registered), "{}", c.to_line());
        }
    }
}
