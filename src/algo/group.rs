//! Grouped launches: which collectives of one ncclGroupStart/End run together as one kernel
//! (kernels/colls/allreduce_group.cu), as NCCL runs a group's collectives on one communicator in
//! one launch.
//!
//! Today: consecutive AllReduces of one datatype and op whose packets together are a one-shot
//! (LL16) message. Invariants, tested below:
//! - every rank of the communicator plans the same launches: the plan reads only what all its
//!   ranks share (each operation's count, datatype and op; the topology, scratch sizes and
//!   tuning), never buffer addresses or streams;
//! - a grouped launch holds 2 to `OX_GROUP_MAX_OPS` consecutive operations, in group order, and
//!   every operation is in exactly one launch;
//! - a grouped launch runs the algorithm a lone AllReduce of its total size would get (the
//!   one-shot), so grouping never moves data through another algorithm than its size class, and
//!   its packets fit the one-shot's scratch.

use std::ops::Range;

use super::{select_allreduce, AllReduceAlgo, Scratch, Topology, Tuning};
use crate::device_abi::OX_GROUP_MAX_OPS;
use crate::types::{DataType, RedOp};

/// What the planner knows of one AllReduce of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedAllReduce {
    /// Elements.
    pub count: u64,
    /// The element type.
    pub dtype: DataType,
    /// The kernel's op (PreMulSum scalars may differ: each operation carries its own).
    pub op: RedOp,
}

/// An operation's packets in a grouped launch: its bytes rounded up to whole 8-byte packets.
pub fn packets(count: u64, dtype: DataType) -> u64 {
    (count * dtype.size() as u64).div_ceil(8)
}

/// The group's operations cut into launches, in order: each range of more than one operation is
/// one grouped launch, each single one runs alone as before. `ops` are consecutive AllReduces of
/// one group on one communicator and stream.
pub fn allreduce_launches(ops: &[GroupedAllReduce], topo: &Topology, scratch: &Scratch, t: &Tuning) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let mut end = i + 1;
        if topo.nranks >= 2 && !t.group_off && lone_oneshot(&ops[i], ops[i].count, topo, scratch, t) {
            let mut pk = packets(ops[i].count, ops[i].dtype);
            while end < ops.len() && end - i < OX_GROUP_MAX_OPS {
                let o = &ops[end];
                let total = pk + packets(o.count, o.dtype);
                // Whole packets of the total, in elements of the datatype (at most 8 bytes: exact).
                let total_count = total * 8 / o.dtype.size() as u64;
                if o.dtype != ops[i].dtype || o.op != ops[i].op || o.count == 0 || !lone_oneshot(o, total_count, topo, scratch, t) {
                    break;
                }
                pk = total;
                end += 1;
            }
        }
        out.push(i..end);
        i = end;
    }
    out
}

/// Whether a lone AllReduce of `count` elements of `o`'s type would run the one-shot (LL16).
fn lone_oneshot(o: &GroupedAllReduce, count: u64, topo: &Topology, scratch: &Scratch, t: &Tuning) -> bool {
    count > 0 && select_allreduce(count, o.dtype, topo, scratch, t).algo == AllReduceAlgo::OneShot
}

/// The launch shape of a grouped launch of `packets` packets: the one-shot's for a message of
/// that many packets.
pub fn launch_shape(packets: u64, topo: &Topology, t: &Tuning) -> (u32, u32) {
    super::allreduce::ll_shape(packets, topo.sm_count, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar(count: u64, dtype: DataType, op: RedOp) -> GroupedAllReduce {
        GroupedAllReduce { count, dtype, op }
    }

    fn setup(n: usize) -> (Topology, Scratch, Tuning) {
        (Topology { nranks: n, sm_count: 132 }, Scratch::for_ranks(n, &Tuning::default()), Tuning::default())
    }

    /// Checks the invariants of the module doc on one plan.
    fn check(ops: &[GroupedAllReduce], plan: &[Range<usize>], topo: &Topology, scratch: &Scratch, t: &Tuning) {
        let mut next = 0;
        for r in plan {
            assert_eq!(r.start, next, "ranges in order, covering every operation once: {plan:?}");
            assert!(!r.is_empty() && r.len() <= OX_GROUP_MAX_OPS, "{plan:?}");
            next = r.end;
            if r.len() > 1 {
                let first = ops[r.start];
                let total: u64 = ops[r.clone()].iter().map(|o| packets(o.count, o.dtype)).sum();
                assert!(ops[r.clone()].iter().all(|o| o.dtype == first.dtype && o.op == first.op && o.count > 0));
                let plan = select_allreduce(total * 8 / first.dtype.size() as u64, first.dtype, topo, scratch, t);
                assert_eq!(plan.algo, AllReduceAlgo::OneShot, "a grouped launch is a one-shot message: {r:?}");
                assert!(total * 8 <= super::super::allreduce::oneshot_capacity(scratch, topo.nranks as u64));
            }
        }
        assert_eq!(next, ops.len());
    }

    #[test]
    fn small_allreduces_of_one_type_and_op_share_a_launch() {
        let (topo, s, t) = setup(2);
        let ops = vec![ar(1024, DataType::Float32, RedOp::Sum); 4];
        let plan = allreduce_launches(&ops, &topo, &s, &t);
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
        let plan = allreduce_launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..2, 2..3, 3..5]);
        check(&ops, &plan, &topo, &s, &t);
    }

    #[test]
    fn launches_stop_where_the_total_leaves_the_one_shot() {
        for n in [2, 3, 4, 8] {
            let (topo, s, t) = setup(n);
            // Grow each operation until a lone call stops being one-shot: the plan never exceeds it.
            for bytes in [8u64, 1000, 4096, 16 << 10, 60 << 10, 64 << 10, 256 << 10, 1 << 20] {
                let ops = vec![ar(bytes / 4, DataType::Float32, RedOp::Sum); 20];
                let plan = allreduce_launches(&ops, &topo, &s, &t);
                check(&ops, &plan, &topo, &s, &t);
                if select_allreduce(bytes / 4, DataType::Float32, &topo, &s, &t).algo != AllReduceAlgo::OneShot {
                    assert!(plan.iter().all(|r| r.len() == 1), "n {n} bytes {bytes}: {plan:?}");
                }
            }
            // Twenty 8-byte operations: sixteen in one launch, four in the next.
            let ops = vec![ar(2, DataType::Float32, RedOp::Sum); 20];
            assert_eq!(allreduce_launches(&ops, &topo, &s, &t), vec![0..16, 16..20], "n {n}");
        }
    }

    #[test]
    fn one_rank_and_the_switch_keep_lone_launches() {
        let (topo, s, t) = setup(1);
        let ops = vec![ar(16, DataType::Float32, RedOp::Sum); 3];
        assert_eq!(allreduce_launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
        let (topo, s, mut t) = setup(2);
        t.group_off = true;
        assert_eq!(allreduce_launches(&ops, &topo, &s, &t), vec![0..1, 1..2, 2..3]);
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
        let plan = allreduce_launches(&ops, &topo, &s, &t);
        assert_eq!(plan, vec![0..12]);
        check(&ops, &plan, &topo, &s, &t);
    }

    /// Random groups: the invariants hold for every plan.
    #[test]
    fn invariants_hold_for_random_groups() {
        use proptest::prelude::*;
        let dts = [DataType::Int8, DataType::Float16, DataType::Float32, DataType::Float64, DataType::Bfloat16];
        let opsk = [RedOp::Sum, RedOp::Max, RedOp::Avg, RedOp::PreMulSum];
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        runner
            .run(&(1usize..=9, proptest::collection::vec((0usize..5, 0usize..4, 0u64..40_000), 0..40)), |(n, raw)| {
                let (topo, s, t) = setup(n);
                let ops: Vec<_> = raw.iter().map(|&(d, o, c)| ar(c, dts[d], opsk[o])).collect();
                let plan = allreduce_launches(&ops, &topo, &s, &t);
                check(&ops, &plan, &topo, &s, &t);
                prop_assert!(true);
                Ok(())
            })
            .unwrap();
    }
}
