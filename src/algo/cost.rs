//! A small latency-bandwidth model of oxccl's algorithms, for ncclGroupSimulateEnd. It predicts
//! what the selector would run; constants are round numbers measured on H100/H200 NVLink machines
//! (see BENCHMARKS.md) and only need to rank choices sensibly.

use super::{AllReduceAlgo, AllReducePlan};

/// Host launch plus kernel start, microseconds.
const LAUNCH_US: f64 = 4.0;
/// One cross-GPU hop (a packet or a semaphore round trip), microseconds.
const HOP_US: f64 = 1.0;
/// Bytes on the links per payload byte of LL128 lines.
const LL128_OVERHEAD: f64 = 128.0 / 120.0;
/// Per-GPU NVLink bandwidth one way, bytes per microsecond (370 GB/s).
const LINK_BYTES_PER_US: f64 = 370_000.0;

/// Predicted time in microseconds of one AllReduce of `bytes` over `nranks` ranks with `plan`.
pub fn allreduce_us(plan: &AllReducePlan, bytes: u64, nranks: usize) -> f64 {
    if nranks <= 1 {
        return LAUNCH_US + bytes as f64 / (10.0 * LINK_BYTES_PER_US);
    }
    let n = nranks as f64;
    let b = bytes as f64;
    match plan.algo {
        // Every rank sends all its data to every peer, as packets of half efficiency.
        AllReduceAlgo::OneShot => LAUNCH_US + HOP_US + 2.0 * (n - 1.0) * b / LINK_BYTES_PER_US,
        // Two hops, each moving (n-1)/n of the data as packets.
        AllReduceAlgo::TwoPhase => LAUNCH_US + 2.0 * HOP_US + 2.0 * 2.0 * (n - 1.0) / n * b / LINK_BYTES_PER_US,
        // The same as LL128 lines: 128 bytes on the links for 120 of payload.
        AllReduceAlgo::OneShot128 => LAUNCH_US + HOP_US + LL128_OVERHEAD * (n - 1.0) * b / LINK_BYTES_PER_US,
        AllReduceAlgo::TwoPhase128 => LAUNCH_US + 2.0 * HOP_US + LL128_OVERHEAD * 2.0 * (n - 1.0) / n * b / LINK_BYTES_PER_US,
        // Two semaphore syncs per round per block; full efficiency.
        AllReduceAlgo::Rsag => {
            let rounds = (b / n / (plan.chunk_elems.max(1) as f64 * plan.grid.max(1) as f64)).ceil().max(1.0);
            LAUNCH_US + 2.0 * HOP_US * rounds + 2.0 * (n - 1.0) / n * b / LINK_BYTES_PER_US
        }
    }
}

/// Predicted time in microseconds of a grouped launch (kernels/colls/allreduce_group.cu) moving
/// `packets` LL16 packets to every peer: one launch, one hop, as a one-shot AllReduce of their
/// payload.
pub fn grouped_us(packets: u64, nranks: usize) -> f64 {
    let n = nranks.max(2) as f64;
    LAUNCH_US + HOP_US + 2.0 * (n - 1.0) * (packets * 8) as f64 / LINK_BYTES_PER_US
}

#[cfg(test)]
mod tests {
    use super::super::{select_allreduce, Scratch, Topology, Tuning};
    use super::*;
    use crate::types::DataType;

    #[test]
    fn grows_with_size_and_is_positive() {
        let t = Tuning::default();
        for n in [1usize, 2, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            let mut prev = 0.0;
            for k in 0..30 {
                let bytes = 1u64 << k;
                let p = select_allreduce(bytes / 4, DataType::Float32, &topo, &s, &t);
                let us = allreduce_us(&p, bytes, n);
                assert!(us > 0.0 && us.is_finite());
                assert!(us + 1.0 >= prev, "n={n} bytes={bytes}: {us} < {prev}");
                prev = us;
            }
        }
    }

    #[test]
    fn a_grouped_launch_costs_less_than_its_operations_alone() {
        let t = Tuning::default();
        for n in [2usize, 4] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for bytes in [8u64, 4096, 64 << 10] {
                let p = select_allreduce(bytes / 4, DataType::Float32, &topo, &s, &t);
                let alone = 8.0 * allreduce_us(&p, bytes, n);
                let grouped = grouped_us(8 * bytes.div_ceil(8), n);
                assert!(grouped < alone, "n={n} bytes={bytes}: {grouped} >= {alone}");
                assert!(grouped > allreduce_us(&p, bytes, n), "one launch of eight moves more than one alone");
            }
        }
    }
}
