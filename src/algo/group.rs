//! Grouped launches: which collectives of one ncclGroupStart/End run together as one kernel
//! (kernels/colls/allreduce_group.cu), as NCCL runs a group's collectives on one communicator in
//! one launch.
//!
//! Today: consecutive AllReduces, ReduceScatters, Reduces, AllGathers, AlltoAlls, Broadcasts,
//! Gathers and Scatters, each of which a lone call would send as packets in one hop, as LL16 packets together; the
//! reductions of one launch share a datatype and op (the others' bytes travel as they are, beside
//! any). Invariants, tested below:
//! - every rank of the communicator plans the same launches: the plan reads only what all its
//!   ranks share (each operation's kind, count, datatype and op, and whether it must run alone,
//!   which for an AllGather into a symmetric window every rank sees alike because ranks register
//!   windows alike; the topology, scratch sizes and tuning), never streams;
//! - a grouped launch holds 2 to `OX_GROUP_MAX_OPS` consecutive operations, in group order, and
//!   every operation is in exactly one launch;
//! - every operation of a grouped launch is one a lone call sends as packets in one hop (the
//!   one-shot AllReduce, LL16 or LL128; the packet ReduceScatter and Reduce; the one-shot gather
//!   and Broadcast, and at 2 ranks the LL128 Broadcast, whose chain is the one link; Gathers and Scatters of pieces the one-shot gather would carry, which the
//!   exchange kernel sends alone as packets), so grouping never moves data through another size class than a lone call;
//! - a grouped launch's packets per pair fit a pair's LL region, and are at most what the LL16
//!   one-shot carries alone (`default_group_max_bytes`, OXCCL_GROUP_MAX_BYTES), or, where all are
//!   ReduceScatters, a message the packet ReduceScatter carries alone.
//!
//! Consecutive reductions that a lone call runs put-based (an AllReduce as rsag, a ReduceScatter
//! through the put scratch, a Reduce as rsag to the root), of one datatype, op and block size, of
//! one kind or, up to `MIXED_PUT_MAX_BYTES` each, of several (by default ReduceScatters and
//! Reduces at two ranks), run as one launch too (`merge_puts`; kernels/colls/reduce_colls.cu,
//! put_group): the operations one after another in every block, each with its lone plan's
//! slices, on the largest lone grid (`puts_shape`). Invariants, tested below: every rank plans the
//! same (the same shared inputs as above); 2 to `OX_GROUP_MAX_OPS` operations a launch; never an
//! operation a lone call would run otherwise (a Reduce relayed or along a chain stays alone); no
//! sends or receives fold into them.
//!
//! A communicator's sends and receives of the group travel in its first grouped launch
//! (`fold_p2p`) pair by pair: a pair's transfers go there when each is one a lone call sends as
//! packets in one hop (the one-shot point-to-point kernel's), they are at most
//! `OX_GROUP_MAX_P2P / (n - 1)` and their packets fit beside the collectives'; else the pair's
//! transfers launch after the collectives as before. Invariants, tested below:
//! - both ranks of a pair decide alike: the decision reads only the pair's transfers (matched
//!   send for receive, in order and size, as NCCL requires) and the launch's collective packets,
//!   which every rank shares. Both presume that every rank groups its operations alike: a send
//!   posted in a group whose peer posts the matching receive in another group (or none) is
//!   undefined in NCCL too (NVIDIA/nccl#1279: "it should be considered as undefined"), and here
//!   it can hang, as grouped collectives posted in different groups on different ranks can;
//! - the k-th send to a peer starts at the packet where that peer's k-th receive from this rank
//!   reads, after the collectives' packets, and a pair's packets in either direction fit its LL
//!   region and the launch's limit;
//! - a rank's folded transfers are at most `OX_GROUP_MAX_P2P`.

use std::ops::Range;

use super::{exchange::p2p_oneshot_max, select_allreduce, select_gather_oneshot, select_reduce, select_reducescatter, AllReduceAlgo, Scratch, Topology, Tuning};
use crate::device_abi::{OX_GROUP_MAX_OPS, OX_GROUP_MAX_P2P, OX_MODE_LL, OX_MODE_PUT};
use crate::types::{DataType, RedOp};

/// The collectives a grouped launch carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupedKind {
    /// `count` elements, reduced.
    AllReduce,
    /// `count` elements a rank (the per-rank chunk), reduced.
    ReduceScatter,
    /// `count` elements, reduced to the root.
    Reduce,
    /// `count` elements a rank, gathered.
    AllGather,
    /// `count` elements a pair of ranks.
    AlltoAll,
    /// `count` elements from the root.
    Broadcast,
    /// `count` elements a rank, to the root.
    Gather,
    /// `count` elements a rank, from the root.
    Scatter,
}

/// What the planner knows of one collective of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedOp {
    /// Its kind.
    pub kind: GroupedKind,
    /// Elements (a ReduceScatter's per-rank chunk, an AllGather's, Gather's or Scatter's per-rank
    /// piece, an AlltoAll's piece per pair).
    pub count: u64,
    /// The element type.
    pub dtype: DataType,
    /// The kernel's op (PreMulSum scalars may differ: each operation carries its own); unused
    /// where the kind does not reduce.
    pub op: RedOp,
    /// Runs in a launch of its own whatever its size: another kernel serves it (an AllGather into
    /// a symmetric window). Every rank sees the same (windows are registered collectively).
    pub alone: bool,
}

impl GroupedOp {
    fn reduces(&self) -> bool {
        matches!(self.kind, GroupedKind::AllReduce | GroupedKind::ReduceScatter | GroupedKind::Reduce)
    }
}

/// An operation's packets in a grouped launch, per pair of ranks that exchange: its bytes (a
/// ReduceScatter's chunk, an AllGather's, AlltoAll's, Gather's or Scatter's piece) rounded up to whole 8-byte packets.
pub fn packets(count: u64, dtype: DataType) -> u64 {
    (count * dtype.size() as u64).div_ceil(8)
}

/// The group's operations cut into launches, in order: each range of more than one operation is
/// one grouped launch, each single one runs alone as before. `ops` are consecutive collectives
/// of one group on one communicator.
pub fn launches(ops: &[GroupedOp], topo: &Topology, scratch: &Scratch, t: &Tuning) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let mut end = i + 1;
        let first = &ops[i];
        if topo.nranks >= 2 && !t.group_off && one_hop_packets(first, topo, scratch, t) {
            let mut pk = packets(first.count, first.dtype);
            let mut scatter_only = first.kind == GroupedKind::ReduceScatter;
            // The launch's datatype and op: its first reduction's.
            let mut key = first.reduces().then_some((first.dtype, first.op));
            while end < ops.len() && end - i < OX_GROUP_MAX_OPS {
                let o = &ops[end];
                let total = pk + packets(o.count, o.dtype);
                let so = scatter_only && o.kind == GroupedKind::ReduceScatter;
                let clash = o.reduces() && key.is_some_and(|k| k != (o.dtype, o.op));
                // A ReduceScatter-only launch's limit is in the datatype's elements.
                if clash || !one_hop_packets(o, topo, scratch, t) || !fits(total, so, o.dtype, topo, scratch, t) {
                    break;
                }
                if o.reduces() {
                    key.get_or_insert((o.dtype, o.op));
                }
                (pk, scatter_only) = (total, so);
                end += 1;
            }
        }
        out.push(i..end);
        i = end;
    }
    merge_puts(ops, out, topo, scratch, t)
}

/// A lone call's plan for `o` where it is one the grouped put kernel also runs (an AllReduce as
/// rsag, a ReduceScatter as reducescatter_put, a Reduce as rsag to the root, not relayed or
/// along a chain): its (grid, block, chunk_elems); else None.
pub fn put_plan(o: &GroupedOp, topo: &Topology, scratch: &Scratch, t: &Tuning) -> Option<(u32, u32, u64)> {
    if o.alone || o.count == 0 || topo.nranks < 2 || t.group_off {
        return None;
    }
    match o.kind {
        GroupedKind::AllReduce => {
            let p = select_allreduce(o.count, o.dtype, topo, scratch, t);
            (p.algo == AllReduceAlgo::Rsag).then_some((p.grid, p.block, p.chunk_elems))
        }
        GroupedKind::ReduceScatter => {
            let p = select_reducescatter(o.count, o.dtype, topo, scratch, t);
            (p.mode == OX_MODE_PUT as u32).then_some((p.grid, p.block, p.chunk_elems))
        }
        GroupedKind::Reduce => {
            let p = select_reduce(o.count, o.dtype, topo, scratch, t);
            (p.mode == OX_MODE_PUT as u32).then_some((p.grid, p.block, p.chunk_elems))
        }
        _ => None,
    }
}

/// The most input bytes of any operation of a put-based run of several kinds. One-kind groups
/// forced through the variant holding every kind's body (which spills registers) took 6-12%
/// longer than lone launches at 16-64 MB, and as long at 4 MB, where the one-kind variants took
/// 8-11% less (nccl-tests -m 8, two ranks sharing one H200, 2026-12-01; BENCHMARKS.md). Whether
/// mixing saves time at or below it with one GPU a rank is open. Under the default tuning kinds
/// mix only as ReduceScatters and Reduces at two ranks: put-based AllReduces up to 8 MiB take 512
/// threads (the others 1024), and at three or more ranks no Reduce up to 4 MiB is put-based.
pub const MIXED_PUT_MAX_BYTES: u64 = 4 << 20;

/// An operation's input bytes in a lone call (a ReduceScatter's `count` is its output chunk).
fn put_input_bytes(o: &GroupedOp, nranks: usize) -> u64 {
    let bytes = o.count * o.dtype.size() as u64;
    if o.kind == GroupedKind::ReduceScatter {
        bytes * nranks as u64
    } else {
        bytes
    }
}

/// Runs of consecutive lone operations that `put_plan` takes, of one datatype, op and block
/// size, and of one kind unless each operation's input is at most `MIXED_PUT_MAX_BYTES`, become
/// one launch of 2 to `OX_GROUP_MAX_OPS` (kernels/colls/reduce_colls.cu, put_group:
/// the operations one after another in one kernel, each with its lone plan's slices, on as many
/// blocks as the largest plan takes).
fn merge_puts(ops: &[GroupedOp], plan: Vec<Range<usize>>, topo: &Topology, scratch: &Scratch, t: &Tuning) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::with_capacity(plan.len());
    let mut key = None;
    // A run of more than one kind launches the kernel variant holding every body, which spills
    // (`PutGroupKinds`): only while every operation of it is small enough for a launch's fixed
    // cost to matter.
    let joins = |run: &Range<usize>, o: &GroupedOp| {
        let one_kind = ops[run.clone()].iter().all(|x| x.kind == o.kind);
        one_kind || ops[run.clone()].iter().chain(std::iter::once(o)).all(|x| put_input_bytes(x, topo.nranks) <= MIXED_PUT_MAX_BYTES)
    };
    for r in plan {
        let o = &ops[r.start];
        let k = (r.len() == 1).then(|| put_plan(o, topo, scratch, t).map(|(_, b, _)| (o.dtype, o.op, b))).flatten();
        match out.last_mut() {
            Some(last) if k.is_some() && k == key && last.end == r.start && last.len() < OX_GROUP_MAX_OPS && joins(last, o) => last.end = r.end,
            _ => {
                out.push(r);
                key = k;
            }
        }
    }
    out
}

/// Which variant of the grouped put kernel (kernels/colls/reduce_colls.cu, put_group) a launch
/// takes: one holding a single kind takes every operation as that kind and keeps that kind's
/// registers; `Mixed` holds every kind's body and reads each operation's `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutGroupKinds {
    /// Every operation an AllReduce (rsag).
    AllReduce,
    /// Every operation a ReduceScatter (reducescatter_put).
    ReduceScatter,
    /// Every operation a Reduce (rsag to the root).
    Reduce,
    /// Two or three of the kinds.
    Mixed,
}

impl PutGroupKinds {
    /// The variant for a grouped put launch of `ops` (`merge_puts` made them: AllReduces,
    /// ReduceScatters and Reduces): the one kind they all are, else `Mixed`.
    pub fn of(ops: &[GroupedOp]) -> PutGroupKinds {
        let one = |k| match k {
            GroupedKind::AllReduce => Self::AllReduce,
            GroupedKind::ReduceScatter => Self::ReduceScatter,
            GroupedKind::Reduce => Self::Reduce,
            _ => Self::Mixed,
        };
        match ops.split_first() {
            Some((first, rest)) if rest.iter().all(|o| o.kind == first.kind) => one(first.kind),
            _ => Self::Mixed,
        }
    }

    /// Every variant, in the order of the module's kernel table.
    pub const ALL: [PutGroupKinds; 4] = [Self::AllReduce, Self::ReduceScatter, Self::Reduce, Self::Mixed];

    /// The kernel name's part after `ox_put_group_`.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "allreduce",
            Self::ReduceScatter => "reducescatter",
            Self::Reduce => "reduce",
            Self::Mixed => "mixed",
        }
    }
}

/// The launch shape of a grouped launch of `ops` that `launches` made of put-based reductions
/// (`merge_puts`): the largest of their lone plans' grids and their block size; None where the
/// range is a packet launch or a lone operation.
pub fn puts_shape(ops: &[GroupedOp], topo: &Topology, scratch: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    if ops.len() < 2 {
        return None;
    }
    let (_, block, _) = put_plan(&ops[0], topo, scratch, t)?;
    let mut grid = 0;
    for o in ops {
        let (g, b, _) = put_plan(o, topo, scratch, t)?;
        if b != block || (o.dtype, o.op) != (ops[0].dtype, ops[0].op) {
            return None;
        }
        grid = grid.max(g);
    }
    Some((grid, block))
}

/// Whether a lone call of `o` sends packets in one hop: the one-shot AllReduce (LL16 or LL128
/// lines), the packet ReduceScatter and Reduce, the one-shot gather (AllGather, AlltoAll) and
/// Broadcast (at 2 ranks also LL128 lines: the chain is then one hop, as the one-shot AllReduce's
/// LL128 lines are); a Gather or Scatter whose piece the one-shot gather would carry (the exchange kernel
/// moves those as packets: its packet limit, `exchange::default_ll_max_bytes`, is above the
/// gather's at every rank count).
fn one_hop_packets(o: &GroupedOp, topo: &Topology, scratch: &Scratch, t: &Tuning) -> bool {
    o.count > 0
        && !o.alone
        && match o.kind {
            GroupedKind::ReduceScatter => select_reducescatter(o.count, o.dtype, topo, scratch, t).mode == OX_MODE_LL as u32,
            GroupedKind::AllReduce => {
                matches!(select_allreduce(o.count, o.dtype, topo, scratch, t).algo, AllReduceAlgo::OneShot | AllReduceAlgo::OneShot128)
            }
            GroupedKind::Reduce => select_reduce(o.count, o.dtype, topo, scratch, t).mode == OX_MODE_LL as u32,
            GroupedKind::AllGather => select_gather_oneshot(o.count * o.dtype.size() as u64, true, topo, scratch, t).is_some(),
            GroupedKind::AlltoAll | GroupedKind::Gather | GroupedKind::Scatter => {
                select_gather_oneshot(o.count * o.dtype.size() as u64, false, topo, scratch, t).is_some()
            }
            GroupedKind::Broadcast => {
                let bytes = o.count * o.dtype.size() as u64;
                super::chain::broadcast_oneshot(bytes, topo, scratch, t).is_some()
                    || (topo.nranks == 2 && super::chain::broadcast_ll128(bytes, topo, scratch, t).is_some())
            }
        }
}

/// Whether `total` packets per pair make one grouped launch: they fit a pair's LL region, and are
/// at most what the LL16 one-shot carries alone, or where all are ReduceScatters (`scatter_only`)
/// a chunk the packet ReduceScatter carries alone.
fn fits(total: u64, scatter_only: bool, dtype: DataType, topo: &Topology, scratch: &Scratch, t: &Tuning) -> bool {
    let n = topo.nranks.max(1) as u64;
    let region = (scratch.ll_half_bytes / n) & !15;
    if total * 16 > region || t.group_max_bytes.is_some_and(|m| total * 8 > m) {
        return false;
    }
    if scatter_only {
        // Whole packets of the total, in elements of the datatype (at most 8 bytes: exact).
        let total_count = total * 8 / dtype.size() as u64;
        select_reducescatter(total_count, dtype, topo, scratch, t).mode == OX_MODE_LL as u32
    } else {
        total * 8 <= t.group_max_bytes.unwrap_or_else(|| default_group_max_bytes(n))
    }
}

/// Largest grouped launch unless all are ReduceScatters (payload bytes per pair): the LL16 one-shot's own
/// limit before LL128 lines took over from it at 64 KiB (`allreduce::default_oneshot_max`
/// without lines). One LL16 launch of the group's packets beats a launch per operation (LL128
/// lines from 64 KiB) up to it: on 2 x H200, nccl-tests float, per-operation us with this limit /
/// 256 KiB / 64 KiB / one launch each (2026-11-30): `-m 8` at 64 KiB
/// 1.06 / 1.62 / 4.59 / 4.94, at 256 KiB 2.88 / 4.87 / 4.82 / 5.17; `-m 4 -G 10` at 128 KiB
/// 1.84 / 2.44 / 3.96 / 3.95. From 512 KiB every choice is within 5%.
pub fn default_group_max_bytes(n: u64) -> u64 {
    super::allreduce::default_oneshot_max(n, false)
}

/// A send or receive of a group, as `fold_p2p` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedP2p {
    /// A send (else a receive).
    pub is_send: bool,
    /// The peer's rank.
    pub peer: usize,
    /// Bytes moved.
    pub bytes: u64,
}

/// Which of rank `me`'s sends and receives (`p2p`, in group order) travel in a grouped launch
/// whose collectives send `total` packets a pair (module doc): per transfer, its first packet in
/// its pair's LL region, or None where its pair launches apart.
pub fn fold_p2p(total: u64, me: usize, p2p: &[GroupedP2p], topo: &Topology, scratch: &Scratch, t: &Tuning) -> Vec<Option<u64>> {
    let n = topo.nranks;
    let mut out = vec![None; p2p.len()];
    if n < 2 || total == 0 || t.group_off {
        return out;
    }
    let region_packets = ((scratch.ll_half_bytes / n as u64) & !15) / 16;
    let max_packets = t.group_max_bytes.unwrap_or_else(|| default_group_max_bytes(n as u64)) / 8;
    let max_bytes = p2p_oneshot_max(n, t);
    let per_pair = OX_GROUP_MAX_P2P / (n - 1);
    for peer in (0..n).filter(|&p| p != me) {
        let pair: Vec<usize> = (0..p2p.len()).filter(|&i| p2p[i].peer == peer).collect();
        let sum = |send: bool| pair.iter().filter(|&&i| p2p[i].is_send == send).map(|&i| p2p[i].bytes.div_ceil(8)).sum::<u64>();
        let most = total + sum(true).max(sum(false));
        if pair.is_empty() || pair.len() > per_pair || pair.iter().any(|&i| p2p[i].bytes == 0 || p2p[i].bytes > max_bytes) || most > region_packets || most > max_packets {
            continue;
        }
        let (mut to, mut from) = (total, total);
        for &i in &pair {
            let next = if p2p[i].is_send { &mut to } else { &mut from };
            out[i] = Some(*next);
            *next += p2p[i].bytes.div_ceil(8);
        }
    }
    out
}

/// The launch shape of a grouped launch of `packets` packets: the one-shot's for a message of
/// that many packets.
pub fn launch_shape(packets: u64, topo: &Topology, t: &Tuning) -> (u32, u32) {
    super::allreduce::ll_shape(packets, topo.sm_count, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_kinds_one_kind_or_mixed() {
        let f = DataType::Float32;
        let red = of(GroupedKind::Reduce, 1 << 20, f, RedOp::Sum);
        assert_eq!(PutGroupKinds::of(&[ar(1 << 20, f, RedOp::Sum), ar(1 << 22, f, RedOp::Sum)]), PutGroupKinds::AllReduce);
        assert_eq!(PutGroupKinds::of(&[rs(1 << 20, f, RedOp::Sum); 3]), PutGroupKinds::ReduceScatter);
        assert_eq!(PutGroupKinds::of(&[red, red]), PutGroupKinds::Reduce);
        assert_eq!(PutGroupKinds::of(&[ar(1 << 20, f, RedOp::Sum), rs(1 << 20, f, RedOp::Sum)]), PutGroupKinds::Mixed);
        assert_eq!(PutGroupKinds::of(&[rs(1 << 20, f, RedOp::Sum), rs(1 << 20, f, RedOp::Sum), red]), PutGroupKinds::Mixed);
        assert_eq!(PutGroupKinds::of(&[]), PutGroupKinds::Mixed);
        // The kernel names the module looks up (kernels/colls/reduce_colls.cu).
        assert_eq!(PutGroupKinds::ALL.map(PutGroupKinds::name), ["allreduce", "reducescatter", "reduce", "mixed"]);
        // The module indexes its table, built in ALL's order, by `kinds as usize`.
        assert!(PutGroupKinds::ALL.iter().enumerate().all(|(i, &k)| k as usize == i));
    }

    fn ar(count: u64, dtype: DataType, op: RedOp) -> GroupedOp {
        GroupedOp { kind: GroupedKind::AllReduce, count, dtype, op, alone: false }
    }

    fn rs(count: u64, dtype: DataType, op: RedOp) -> GroupedOp {
        GroupedOp { kind: GroupedKind::ReduceScatter, count, dtype, op, alone: false }
    }

    fn ag(count: u64, dtype: DataType) -> GroupedOp {
        GroupedOp { kind: GroupedKind::AllGather, count, dtype, op: RedOp::Sum, alone: false }
    }

    fn of(kind: GroupedKind, count: u64, dtype: DataType, op: RedOp) -> GroupedOp {
        GroupedOp { kind, count, dtype, op, alone: false }
    }

    fn setup(n: usize) -> (Topology, Scratch, Tuning) {
        (Topology { nranks: n, sm_count: 132 }, Scratch::for_ranks(n, &Tuning::default()), Tuning::default())
    }

    /// Checks the invariants of the module doc on one plan.
    fn check(ops: &[GroupedOp], plan: &[Range<usize>], topo: &Topology, scratch: &Scratch, t: &Tuning) {
        let mut next = 0;
        for r in plan {
            assert_eq!(r.start, next, "ranges in order, covering every operation once: {plan:?}");
            assert!(!r.is_empty() && r.len() <= OX_GROUP_MAX_OPS, "{plan:?}");
            next = r.end;
            if r.len() > 1 && puts_shape(&ops[r.clone()], topo, scratch, t).is_some() {
                // A put-based run: reductions a lone call runs put-based, one datatype, op and block.
                let first = ops[r.start];
                let block = |o: &GroupedOp| put_plan(o, topo, scratch, t).map(|(_, b, _)| b);
                for o in &ops[r.clone()] {
                    assert!(block(o).is_some() && block(o) == block(&first), "{r:?}");
                    assert!(o.dtype == first.dtype && o.op == first.op, "{r:?}");
                }
                // Several kinds (the variant that spills) only where each operation is small.
                if PutGroupKinds::of(&ops[r.clone()]) == PutGroupKinds::Mixed {
                    assert!(ops[r.clone()].iter().all(|o| put_input_bytes(o, topo.nranks) <= MIXED_PUT_MAX_BYTES), "{r:?}");
                }
                continue;
            }
            if r.len() > 1 {
                let total: u64 = ops[r.clone()].iter().map(|o| packets(o.count, o.dtype)).sum();
                // The reductions share one datatype and op; AllGathers go with any.
                let mut reductions = ops[r.clone()].iter().filter(|o| o.reduces());
                if let Some(first) = reductions.next() {
                    assert!(reductions.all(|o| o.dtype == first.dtype && o.op == first.op), "{r:?}");
                }
                for o in &ops[r.clone()] {
                    assert!(o.count > 0 && !o.alone);
                    assert!(one_hop_packets(o, topo, scratch, t), "each is one-hop packets alone: {r:?}");
                }
                if ops[r.clone()].iter().all(|o| o.kind == GroupedKind::ReduceScatter) {
                    let first = ops[r.start];
                    let total_count = total * 8 / first.dtype.size() as u64;
                    assert!(t.group_max_bytes.is_none_or(|m| total * 8 <= m), "{r:?}");
                    assert_eq!(select_reducescatter(total_count, first.dtype, topo, scratch, t).mode, OX_MODE_LL as u32, "{r:?}");
                } else {
                    let max = t.group_max_bytes.unwrap_or_else(|| default_group_max_bytes(topo.nranks as u64));
                    assert!(total * 8 <= max, "a grouped launch with an AllReduce is at most the LL16 one-shot's limit: {r:?}");
                }
                // Every pair's packets fit its region of an LL half (kernels/prims/ll_flags.cuh).
                assert!(total * 16 <= (scratch.ll_half_bytes / topo.nranks as u64) & !15, "{r:?}");
            }
        }
        assert_eq!(next, ops.len());
    }

    #[test]
    fn small_allreduces_of_one_type_and_op_share_a_launch() {
        let (topo, s, t) = setup(2);
        let ops = vec![ar(1024, DataType::Float32, RedOp::Sum); 4];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..4]);
        check(&ops, &plan, &topo, &s, &t);
    }

    #[test]
    fn a_change_of_datatype_or_op_starts_a_new_launch() {
        let (topo, s, t) = setup(2);
        let ops = vec![
            ar(16, DataType::Float32, RedOp::Sum),
            ar(16, DataType::Float32, RedOp::Sum),
            ar(16, DataType::Float16, RedOp::Sum),
            ar(16, DataType::Float16, RedOp::Max),
            ar(16, DataType::Float16, RedOp::Max),
        ];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..2, 2..3, 3..5]);
        check(&ops, &plan, &topo, &s, &t);
    }

    #[test]
    fn launches_hold_one_hop_operations_up_to_the_ll16_limit() {
        for n in [2, 3, 4, 8] {
            let (topo, s, t) = setup(n);
            let max = default_group_max_bytes(n as u64);
            for bytes in [8u64, 1000, 4096, 16 << 10, 32 << 10, 60 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20] {
                let ops = vec![ar(bytes / 4, DataType::Float32, RedOp::Sum); 20];
                let plan = launches(&ops, &topo, &s, &t);
                check(&ops, &plan, &topo, &s, &t);
                let algo = select_allreduce(bytes / 4, DataType::Float32, &topo, &s, &t).algo;
                let one_hop = matches!(algo, AllReduceAlgo::OneShot | AllReduceAlgo::OneShot128);
                // As many per launch as the limit holds, at most OX_GROUP_MAX_OPS; put-based
                // ones OX_GROUP_MAX_OPS a launch (`merge_puts`).
                let per = if one_hop {
                    (max / bytes).clamp(1, OX_GROUP_MAX_OPS as u64) as usize
                } else if algo == AllReduceAlgo::Rsag {
                    OX_GROUP_MAX_OPS
                } else {
                    1
                };
                assert!(plan.iter().all(|r| r.len() == per || r.end == 20), "n {n} bytes {bytes}: {plan:?}");
            }
            // Twenty 8-byte operations: sixteen in one launch, four in the next.
            let ops = vec![ar(2, DataType::Float32, RedOp::Sum); 20];
            assert_eq!(launches(&ops, &topo, &s, &t), vec![0..16, 16..20], "n {n}");
        }
        // At 2 ranks eight 32 KiB AllReduces are one launch (LL128 lines alone from 64 KiB);
        // eight of 256 KiB two of four.
        let (topo, s, mut t) = setup(2);
        assert_eq!(launches(&[ar(8 << 10, DataType::Float32, RedOp::Sum); 8], &topo, &s, &t), vec![0..8]);
        assert_eq!(launches(&[ar(64 << 10, DataType::Float32, RedOp::Sum); 8], &topo, &s, &t), vec![0..4, 4..8]);
        // OXCCL_GROUP_MAX_BYTES holds both kinds.
        t.group_max_bytes = Some(64 << 10);
        let ops = vec![ar(8 << 10, DataType::Float32, RedOp::Sum); 8];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..2, 2..4, 4..6, 6..8]);
        check(&ops, &plan, &topo, &s, &t);
        let ops = vec![rs(8 << 10, DataType::Float32, RedOp::Sum); 8];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..2, 2..4, 4..6, 6..8]);
    }

    #[test]
    fn one_rank_and_the_switch_keep_lone_launches() {
        let (topo, s, t) = setup(1);
        let ops = vec![ar(16, DataType::Float32, RedOp::Sum); 3];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        let (topo, s, mut t) = setup(2);
        t.group_off = true;
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn odd_sizes_take_whole_packets() {
        assert_eq!(packets(1, DataType::Int8), 1);
        assert_eq!(packets(8, DataType::Int8), 1);
        assert_eq!(packets(9, DataType::Int8), 2);
        assert_eq!(packets(3, DataType::Float16), 1);
        assert_eq!(packets(5, DataType::Float16), 2);
        let (topo, s, t) = setup(2);
        let ops: Vec<_> = (1..=12u64).map(|c| ar(c * 7 + 1, DataType::Int8, RedOp::Sum)).collect();
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..12]);
        check(&ops, &plan, &topo, &s, &t);
    }

    #[test]
    fn reduce_scatters_group_up_to_the_packet_limit_and_with_allreduces() {
        let (topo, s, t) = setup(2);
        // Eight 64 KiB chunks: packets alone (up to 1 MiB at 2 ranks), so together while they fit.
        let ops = vec![rs(16 << 10, DataType::Float32, RedOp::Sum); 8];
        let plan = launches(&ops, &topo, &s, &t);
        check(&ops, &plan, &topo, &s, &t);
        assert_eq!(plan[0], 0..8, "{plan:?}");
        // An AllReduce among them holds the launch to the one-shot's size.
        let ops = vec![rs(1024, DataType::Float32, RedOp::Sum), ar(1024, DataType::Float32, RedOp::Sum), rs(1024, DataType::Float32, RedOp::Sum)];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..3]);
        check(&ops, &plan, &topo, &s, &t);
    }

    #[test]
    fn allgathers_join_any_launch_of_one_hop_operations() {
        let (topo, s, t) = setup(2);
        // Any datatype beside the reductions' (they travel as bytes).
        let ops = vec![ag(100, DataType::Int8), ar(16, DataType::Float32, RedOp::Sum), ag(7, DataType::Float16), rs(16, DataType::Float32, RedOp::Sum)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..4]);
        check(&ops, &launches(&ops, &topo, &s, &t), &topo, &s, &t);
        // The reductions still share one datatype and op, AllGathers between them or not.
        let ops = vec![ar(16, DataType::Float32, RedOp::Sum), ag(16, DataType::Float64), ar(16, DataType::Float16, RedOp::Sum), ag(3, DataType::Int8)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..2, 2..4]);
        check(&ops, &launches(&ops, &topo, &s, &t), &topo, &s, &t);
        // Sixteen AllGathers alone: one launch; one served by another kernel runs alone.
        let mut ops = vec![ag(1000, DataType::Float32); 16];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..16]);
        ops[5].alone = true;
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..5, 5..6, 6..16]);
        // A piece past the one-shot gather's limit (256 KiB at 2-4 ranks) is no packet message.
        let ops = vec![ag(64 << 10, DataType::Float32), ag(64 << 10 | 1, DataType::Float32), ag(16, DataType::Float32)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        // No one-shot gather above 4 ranks (not measured there): AllGathers launch alone.
        let (topo, s, t) = setup(8);
        assert_eq!(launches(&[ag(16, DataType::Float32); 3], &topo, &s, &t), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn rooted_and_alltoall_operations_group_as_their_lone_packet_calls() {
        use GroupedKind::*;
        let (topo, s, t) = setup(2);
        // Broadcasts, AlltoAlls and Reduces, small: one launch; the Reduces' datatype and op are
        // the launch's key, the others go with any.
        let ops = vec![
            of(Broadcast, 100, DataType::Int8, RedOp::Sum),
            of(Reduce, 64, DataType::Float32, RedOp::Max),
            of(AlltoAll, 9, DataType::Float16, RedOp::Sum),
            of(Reduce, 8, DataType::Float32, RedOp::Max),
            of(AllReduce, 8, DataType::Float32, RedOp::Max),
        ];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..5]);
        check(&ops, &plan, &topo, &s, &t);
        let ops = vec![of(Reduce, 64, DataType::Float32, RedOp::Max), of(Reduce, 64, DataType::Float32, RedOp::Sum)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2]);
        // Each only while a lone call of it is packets: a Broadcast past the one-shot's limit runs
        // alone.
        let big = (1u64 << 30) / 4;
        assert!(crate::algo::chain::broadcast_oneshot(big * 4, &topo, &s, &t).is_none());
        let ops = vec![of(Broadcast, 16, DataType::Float32, RedOp::Sum), of(Broadcast, big, DataType::Float32, RedOp::Sum), of(Broadcast, 16, DataType::Float32, RedOp::Sum)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        // At 2 ranks, Broadcasts the LL128 chain (one link) carries alone group too: eight of
        // 128 KiB are one launch.
        assert!(crate::algo::chain::broadcast_oneshot(128 << 10, &topo, &s, &t).is_none());
        let ops = vec![of(Broadcast, 32 << 10, DataType::Float32, RedOp::Sum); 8];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..8]);
        check(&ops, &launches(&ops, &topo, &s, &t), &topo, &s, &t);
        // Not at 4, where the chain relays through every rank.
        let (topo, s, t) = setup(4);
        let ops = vec![of(Broadcast, 32 << 10, DataType::Float32, RedOp::Sum); 2];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2]);
    }

    #[test]
    fn gathers_and_scatters_group_while_their_pieces_are_one_shot_gather_pieces() {
        use GroupedKind::*;
        let (topo, s, t) = setup(4);
        let ops = vec![
            of(Gather, 100, DataType::Int8, RedOp::Sum),
            of(Scatter, 64, DataType::Float32, RedOp::Sum),
            of(AllReduce, 8, DataType::Float16, RedOp::Max),
            of(Gather, 3, DataType::Float64, RedOp::Sum),
        ];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..4]);
        check(&ops, &plan, &topo, &s, &t);
        // A piece past the one-shot gather's limit (256 KiB at 2-4 ranks) runs alone, as it would
        // outside a group; none group above 4 ranks (the gather's limit there is 0).
        let ops = vec![of(Scatter, 16, DataType::Int8, RedOp::Sum), of(Scatter, (256 << 10) + 1, DataType::Int8, RedOp::Sum), of(Gather, 16, DataType::Int8, RedOp::Sum)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        let (topo, s, t) = setup(8);
        assert_eq!(launches(&[of(Gather, 16, DataType::Int8, RedOp::Sum); 3], &topo, &s, &t), vec![0..1, 1..2, 2..3]);
    }

    /// Matched sends and receives between ranks (per ordered pair, the transfers' sizes in
    /// order), as each rank posts them, interleaved in some order.
    fn posts(lists: &[(usize, usize, Vec<u64>)], me: usize) -> Vec<GroupedP2p> {
        let mut v = Vec::new();
        for (from, to, sizes) in lists {
            for &b in sizes {
                if *from == me {
                    v.push(GroupedP2p { is_send: true, peer: *to, bytes: b });
                }
                if *to == me && *from != me {
                    v.push(GroupedP2p { is_send: false, peer: *from, bytes: b });
                }
            }
        }
        v
    }

    /// Checks `fold_p2p`'s invariants (module doc) over every rank of `n`.
    fn check_fold(n: usize, total: u64, lists: &[(usize, usize, Vec<u64>)], t: &Tuning) {
        let (topo, s, _) = setup(n);
        let folds: Vec<(Vec<GroupedP2p>, Vec<Option<u64>>)> = (0..n)
            .map(|me| {
                let p = posts(lists, me);
                let f = fold_p2p(total, me, &p, &topo, &s, t);
                (p, f)
            })
            .collect();
        let region = ((s.ll_half_bytes / n as u64) & !15) / 16;
        for a in 0..n {
            let (pa, fa) = &folds[a];
            assert!(fa.iter().filter(|f| f.is_some()).count() <= OX_GROUP_MAX_P2P, "rank {a}: {fa:?}");
            for b in (0..n).filter(|&b| b != a) {
                let (pb, fb) = &folds[b];
                // a's sends to b and b's receives from a, in order, with their starts.
                let sends: Vec<(u64, Option<u64>)> = pa.iter().zip(fa).filter(|(o, _)| o.is_send && o.peer == b).map(|(o, f)| (o.bytes, *f)).collect();
                let recvs: Vec<(u64, Option<u64>)> = pb.iter().zip(fb).filter(|(o, _)| !o.is_send && o.peer == a).map(|(o, f)| (o.bytes, *f)).collect();
                assert_eq!(sends, recvs, "ranks {a} -> {b}: the k-th send and the k-th receive start alike");
                // Whole pairs: every transfer of a with b folds, or none does.
                let pair: Vec<bool> = pa.iter().zip(fa).filter(|(o, _)| o.peer == b).map(|(_, f)| f.is_some()).collect();
                assert!(pair.iter().all(|&x| x) || pair.iter().all(|&x| !x), "{pair:?}");
                for (bytes, start) in sends.iter().filter_map(|&(b, f)| f.map(|f| (b, f))) {
                    assert!(start >= total && start + bytes.div_ceil(8) <= region, "{start} {bytes}");
                    assert!(bytes > 0 && bytes <= p2p_oneshot_max(n, t));
                }
            }
        }
    }

    #[test]
    fn sends_and_receives_fold_pair_by_pair_alike_on_both_ends() {
        let t = Tuning::default();
        // 2 ranks: both directions, several transfers each.
        check_fold(2, 100, &[(0, 1, vec![8, 4096, 1]), (1, 0, vec![64 << 10])], &t);
        let (topo, s, _) = setup(2);
        let p = posts(&[(0, 1, vec![8, 4096, 1]), (1, 0, vec![64 << 10])], 0);
        let f = fold_p2p(100, 0, &p, &topo, &s, &t);
        assert!(f.iter().all(Option::is_some), "{f:?}");
        // A transfer past the one-shot point-to-point limit keeps its whole pair apart.
        let big = p2p_oneshot_max(2, &t) + 1;
        let p = posts(&[(0, 1, vec![8, big])], 0);
        assert!(fold_p2p(100, 0, &p, &topo, &s, &t).iter().all(Option::is_none));
        // No grouped launch, no fold; zero-byte transfers keep their pair apart.
        assert!(fold_p2p(0, 0, &posts(&[(0, 1, vec![8])], 0), &topo, &s, &t).iter().all(Option::is_none));
        assert!(fold_p2p(10, 0, &posts(&[(0, 1, vec![8, 0])], 0), &topo, &s, &t).iter().all(Option::is_none));
        // 4 ranks: at most 5 transfers a pair (16 / 3), so at most 15 a rank.
        let lists: Vec<(usize, usize, Vec<u64>)> = (0..4).flat_map(|a| (0..4).filter(move |&b| b != a).map(move |b| (a, b, vec![16u64 * (a + 1) as u64; 3]))).collect();
        check_fold(4, 10, &lists, &t);
        let (topo, s, _) = setup(4);
        assert!(fold_p2p(10, 0, &posts(&lists, 0), &topo, &s, &t).iter().all(Option::is_none), "6 transfers a pair");
        let lists: Vec<(usize, usize, Vec<u64>)> = vec![(0, 1, vec![8; 5]), (2, 0, vec![8; 2])];
        assert!(fold_p2p(10, 0, &posts(&lists, 0), &topo, &s, &t).iter().all(Option::is_some));
    }

    #[test]
    fn random_sends_and_receives_fold_alike_on_both_ends() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let list = (0usize..8, 0usize..8, proptest::collection::vec(proptest::prop_oneof![0u64..64, 1u64..300_000], 0..6));
        runner
            .run(&(2usize..=8, 0u64..200_000, proptest::collection::vec(list, 0..12), proptest::option::of(0u64..2 << 20)), |(n, total, raw, max)| {
                let t = Tuning { group_max_bytes: max, ..Tuning::default() };
                let lists: Vec<(usize, usize, Vec<u64>)> = raw.into_iter().filter(|(a, b, _)| a < &n && b < &n).collect();
                check_fold(n, total, &lists, &t);
                Ok(())
            })
            .unwrap();
    }

    /// Large AllReduces (put-based alone) of one datatype and op run as one launch, up to
    /// OX_GROUP_MAX_OPS a launch; a change of op, a packet-sized one or another kind cuts the run.
    #[test]
    fn put_based_allreduces_of_one_type_and_op_share_a_launch() {
        let (topo, s, t) = setup(2);
        let big = 8 << 20; // elements of f32: 32 MiB, rsag at 2 ranks
        assert_eq!(select_allreduce(big, DataType::Float32, &topo, &s, &t).algo, AllReduceAlgo::Rsag);
        let ops = vec![ar(big, DataType::Float32, RedOp::Sum); 20];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..OX_GROUP_MAX_OPS, OX_GROUP_MAX_OPS..20]);
        check(&ops, &plan, &topo, &s, &t);
        let (grid, block) = puts_shape(&ops[0..2], &topo, &s, &t).expect("a put-based run");
        let lone = select_allreduce(big, DataType::Float32, &topo, &s, &t);
        assert_eq!((grid, block), (lone.grid, lone.block));
        let mixed = vec![
            ar(big, DataType::Float32, RedOp::Sum),
            ar(big + 5, DataType::Float32, RedOp::Sum),
            ar(big, DataType::Float32, RedOp::Max),
            ar(16, DataType::Float32, RedOp::Max),
            ar(big, DataType::Float32, RedOp::Max),
            of(GroupedKind::ReduceScatter, big, DataType::Float32, RedOp::Max),
            ar(big, DataType::Float32, RedOp::Max),
        ];
        let plan = launches(&mixed, &topo, &s, &t);
        // The ReduceScatter runs through the put scratch alone, with 1024 threads as the 32 MiB
        // AllReduces, but a run of several kinds holds operations of at most 4 MiB: it cuts the run.
        assert_eq!(plan, vec![0..2, 2..3, 3..4, 4..5, 5..6, 6..7]);
        check(&mixed, &plan, &topo, &s, &t);
        assert!(puts_shape(&mixed[3..5], &topo, &s, &t).is_none(), "a packet-sized AllReduce is no put-based run");
        let mut alone = ops.clone();
        alone[1].alone = true;
        assert_eq!(launches(&alone[..3], &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        let one = setup(1);
        assert_eq!(launches(&ops[..3], &one.0, &one.1, &one.2), vec![0..1, 1..2, 2..3]);
    }

    /// ReduceScatters and Reduces that run put-based alone (AllReduces only with 1024 threads, from
    /// 8 MiB) share a launch in any mix where each is at most `MIXED_PUT_MAX_BYTES`; larger ones
    /// only with their own kind. A Reduce relayed or along a chain, a packet-sized ReduceScatter,
    /// another kind, another datatype cut the run. Each keeps its lone plan's grid and slices.
    #[test]
    fn put_based_reductions_of_every_kind_share_a_launch() {
        use GroupedKind::*;
        let (topo, s, t) = setup(2);
        let f = DataType::Float32;
        // 2-4 MiB inputs at 2 ranks: ReduceScatters and Reduces put-based, 1024 threads.
        let (rs3, red3, rs4, red2) = (of(ReduceScatter, 3 << 17, f, RedOp::Sum), of(Reduce, 3 << 18, f, RedOp::Sum), of(ReduceScatter, 1 << 19, f, RedOp::Sum), of(Reduce, 1 << 19, f, RedOp::Sum));
        for o in [rs3, red3, rs4, red2] {
            assert!(put_input_bytes(&o, 2) <= MIXED_PUT_MAX_BYTES);
            assert_eq!(put_plan(&o, &topo, &s, &t).map(|(_, b, _)| b), Some(1024), "{o:?}");
        }
        // A put-based bf16 Reduce (3 MiB) beside f32 ones: the datatype cuts the run.
        let red_bf16 = of(Reduce, 3 << 19, DataType::Bfloat16, RedOp::Sum);
        assert_eq!(put_plan(&red_bf16, &topo, &s, &t).map(|(_, b, _)| b), Some(1024));
        let small = vec![rs3, red3, rs4, red2, of(AllGather, 1 << 20, f, RedOp::Sum), red3, red_bf16, red_bf16, of(ReduceScatter, 16, DataType::Bfloat16, RedOp::Sum)];
        let plan = launches(&small, &topo, &s, &t);
        assert_eq!(plan, vec![0..4, 4..5, 5..6, 6..8, 8..9]);
        check(&small, &plan, &topo, &s, &t);
        assert_eq!(PutGroupKinds::of(&small[0..4]), PutGroupKinds::Mixed);
        let grids: Vec<u32> = small[0..4].iter().map(|o| put_plan(o, &topo, &s, &t).unwrap().0).collect();
        assert_eq!(puts_shape(&small[0..4], &topo, &s, &t), Some((*grids.iter().max().unwrap(), 1024)));
        assert_eq!(put_plan(&small[8], &topo, &s, &t), None, "packets alone");
        // A mixed run stops before a larger operation even of its last operation's kind.
        let red16 = of(Reduce, 4 << 20, f, RedOp::Sum);
        assert_eq!(put_plan(&red16, &topo, &s, &t).map(|(_, b, _)| b), Some(1024));
        assert_eq!(launches(&[rs3, red3, red16], &topo, &s, &t), vec![0..2, 2..3]);
        assert_eq!(launches(&[red3, red3, red16], &topo, &s, &t), vec![0..3], "one kind: any size");
        assert_eq!(put_plan(&small[4], &topo, &s, &t), None, "not a reduction");
        // 32 MiB: each kind's run launches alone, with its own kernel variant.
        let big = 8 << 20;
        let rs = select_reducescatter(big, f, &topo, &s, &t);
        let red = select_reduce(big, f, &topo, &s, &t);
        let all = select_allreduce(big, f, &topo, &s, &t);
        assert_eq!((rs.mode, red.mode, all.algo), (OX_MODE_PUT as u32, OX_MODE_PUT as u32, AllReduceAlgo::Rsag));
        assert_eq!((rs.block, red.block), (all.block, all.block), "one block size at 32 MiB");
        let ops = vec![
            of(ReduceScatter, big, f, RedOp::Sum),
            of(ReduceScatter, big / 2, f, RedOp::Sum),
            of(Reduce, big, f, RedOp::Sum),
            of(Reduce, big, f, RedOp::Sum),
            ar(big, f, RedOp::Sum),
            ar(big, f, RedOp::Sum),
            rs3,
        ];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..2, 2..4, 4..6, 6..7]);
        check(&ops, &plan, &topo, &s, &t);
        let kinds: Vec<PutGroupKinds> = plan[..3].iter().map(|r| PutGroupKinds::of(&ops[r.clone()])).collect();
        assert_eq!(kinds, [PutGroupKinds::ReduceScatter, PutGroupKinds::Reduce, PutGroupKinds::AllReduce]);
        let grids = [rs.grid, select_reducescatter(big / 2, f, &topo, &s, &t).grid];
        assert_eq!(puts_shape(&ops[0..2], &topo, &s, &t), Some((*grids.iter().max().unwrap(), all.block)));
        assert_eq!(put_plan(&ops[0], &topo, &s, &t), Some((rs.grid, rs.block, rs.chunk_elems)), "the lone plan's slices");
        // At 4 ranks a 64 MiB Reduce goes along a chain alone: it stays lone between put-based ones.
        let (topo4, s4, t4) = setup(4);
        let chain = of(Reduce, 16 << 20, f, RedOp::Sum);
        assert_ne!(select_reduce(chain.count, chain.dtype, &topo4, &s4, &t4).mode, OX_MODE_PUT as u32);
        let ops = vec![ar(big, f, RedOp::Sum), chain, ar(big, f, RedOp::Sum), ar(big, f, RedOp::Sum)];
        let plan = launches(&ops, &topo4, &s4, &t4);
        assert_eq!(plan, vec![0..1, 1..2, 2..4]);
        check(&ops, &plan, &topo4, &s4, &t4);
    }

    /// A put-based run takes the largest lone grid; a change of block size (512 threads up to
    /// 8 MiB, 1024 above) cuts the run.
    #[test]
    fn put_based_runs_take_the_largest_grid_and_one_block_size() {
        let (topo, s, t) = setup(4);
        let mib = |m: u64| ar(m << 18, DataType::Float32, RedOp::Sum);
        let (small, large) = (select_allreduce(5 << 18, DataType::Float32, &topo, &s, &t), select_allreduce(7 << 18, DataType::Float32, &topo, &s, &t));
        assert_eq!((small.algo, large.algo), (AllReduceAlgo::Rsag, AllReduceAlgo::Rsag));
        let ops = vec![mib(5), mib(7), mib(6)];
        assert_eq!(launches(&ops, &topo, &s, &t), vec![0..3]);
        let lone: Vec<u32> = ops.iter().map(|o| select_allreduce(o.count, o.dtype, &topo, &s, &t).grid).collect();
        assert_eq!(puts_shape(&ops, &topo, &s, &t), Some((*lone.iter().max().unwrap(), small.block)));
        // 8 MiB takes 512 threads alone, 32 MiB 1024: two launches.
        let ops = vec![mib(8), mib(8), mib(32), mib(32)];
        let plan = launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..2, 2..4]);
        check(&ops, &plan, &topo, &s, &t);
        assert!(puts_shape(&ops, &topo, &s, &t).is_none(), "one launch has one block size");
        // OXCCL_GROUP_LAUNCH=0 keeps them lone too.
        let mut off = t.clone();
        off.group_off = true;
        assert_eq!(launches(&ops, &topo, &s, &off), vec![0..1, 1..2, 2..3, 3..4]);
    }

    /// Random groups: the invariants hold for every plan.
    #[test]
    fn invariants_hold_for_random_groups() {
        let dts = [DataType::Int8, DataType::Float16, DataType::Float32, DataType::Float64, DataType::Bfloat16];
        let opsk = [RedOp::Sum, RedOp::Max, RedOp::Avg, RedOp::PreMulSum];
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        runner
            .run(&(1usize..=9, proptest::collection::vec((0usize..5, 0usize..4, proptest::prop_oneof![3 => 0u64..300_000, 1 => 0u64..20_000_000], 0usize..8, 0u8..8), 0..40), proptest::option::of(0u64..2 << 20), proptest::bool::ANY), |(n, raw, max, no_lines)| {
                let (topo, s, mut t) = setup(n);
                t.group_max_bytes = max;
                // Without LL128 lines the put-based algorithm takes over from a few hundred KiB.
                t.ap128_off = no_lines;
                let ops: Vec<_> = raw
                    .iter()
                    .map(|&(d, o, c, k, alone)| {
                        use GroupedKind::*;
                        let mut op = of([AllReduce, ReduceScatter, Reduce, AllGather, AlltoAll, Broadcast, Gather, Scatter][k], c, dts[d], opsk[o]);
                        op.alone = alone == 0;
                        op
                    })
                    .collect();
                let plan = launches(&ops, &topo, &s, &t);
                check(&ops, &plan, &topo, &s, &t);
                Ok(())
            })
            .unwrap();
    }
}
