//! ReduceScatter and Reduce algorithm choice (kernels/colls/reduce_colls.cu).

use super::allreduce::{select_allreduce, AllReduceAlgo};
use super::envlists::Func;
use super::exchange::exchange_shape;
use super::{Scratch, Topology, Tuning};
use crate::device_abi::{OX_MODE_CHAIN, OX_MODE_LL, OX_MODE_LL128_CHAIN, OX_MODE_PUT, OX_MODE_RELAY};
use crate::types::DataType;

/// How one ReduceScatter or Reduce runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReducePlan {
    /// OX_MODE_LL (packets) or OX_MODE_PUT (put rounds).
    pub mode: u32,
    /// Thread blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Elements per block per round (put mode).
    pub chunk_elems: u64,
}

impl ReducePlan {
    /// Runs in the packet kernels (reduce_ll / reducescatter_ll), else in the put kernels.
    pub fn packets(&self) -> bool {
        [OX_MODE_LL, OX_MODE_LL128_CHAIN].contains(&(self.mode as u8))
    }
}

/// Largest ReduceScatter chunk or Reduce message moved as packets, unless tuned (H200 sweep at 2
/// and 4 ranks, BENCHMARKS.md: packets win up to 1 MiB on 2 ranks; on 4, up to 512 KiB for Reduce
/// and 256 KiB chunks for ReduceScatter, whose every rank receives from all others).
fn default_ll_max_bytes(f: Func, nranks: usize) -> u64 {
    match (nranks <= 2, f) {
        (true, _) => 1 << 20,
        (false, Func::Reduce) => 512 << 10,
        (false, _) => 256 << 10,
    }
}
/// Smallest per-block slice of the put rounds (as AllReduce's).
const MIN_SLICE_BYTES: u64 = 4096;

/// Packets for `f`: allowed by NCCL_PROTO, within their scratch, and small enough (the size limit
/// does not apply when NCCL_PROTO allows nothing else).
fn ll_fits(f: Func, bytes: u64, n: usize, s: &Scratch, t: &Tuning) -> bool {
    let slot = (s.ll_half_bytes / n.max(1) as u64) & !15;
    let i = f as usize;
    t.allowed.packets[i]
        && bytes.div_ceil(8) * 16 <= slot
        && (!t.allowed.puts[i] || bytes <= t.reduce_ll_max_bytes.unwrap_or_else(|| default_ll_max_bytes(f, n)))
}

/// `count` is each rank's chunk (recvcount).
pub fn select_reducescatter(count: u64, dt: DataType, topo: &Topology, s: &Scratch, t: &Tuning) -> ReducePlan {
    let n = topo.nranks.max(1);
    let es = dt.size() as u64;
    let bytes = count * es;
    if ll_fits(Func::ReduceScatter, bytes, n, s, t) {
        let threads = 512u32;
        let work = bytes.div_ceil(8) * (n as u64 - 1).max(1);
        let grid = work.div_ceil(threads as u64).clamp(4, 64) as u32;
        return ReducePlan { mode: OX_MODE_LL as u32, grid, block: threads, chunk_elems: 0 };
    }
    let unit = (16 / es).max(1);
    let cap = s.rs_max_blocks.min(topo.sm_count.max(1)).max(1) as u64;
    let slot_elems = (s.rs_slot_bytes / es / unit * unit).max(unit);
    let min_elems = (MIN_SLICE_BYTES / es).div_ceil(unit) * unit;
    let spread = count.div_ceil(cap).div_ceil(unit) * unit;
    let chunk = spread.max(min_elems).min(slot_elems);
    let grid = count.div_ceil(chunk).clamp(1, cap) as u32;
    ReducePlan { mode: OX_MODE_PUT as u32, grid, block: 1024, chunk_elems: chunk }
}

/// Smallest Reduce relayed (3+ ranks), unless tuned (OXCCL_REDUCE_RELAY_MIN_BYTES, 0 = never).
/// H200 x4, float sum: relayed 41.6 / 101.7 / 307 / 960 us at 4 / 16 / 64 / 256 MiB, reduce-scatter
/// then gather 33.4 / 93.0 / 302 / 1112 us, so the relay only pays from about 128 MiB.
const DEFAULT_REDUCE_RELAY_MIN_BYTES: u64 = 128 << 20;

/// Smallest Reduce reduced along a chain (3+ ranks), unless tuned (OXCCL_REDUCE_CHAIN_MIN_BYTES,
/// 0 = never). H200 x4, float sum, us: chain 148.9 / 246.9 / 457 / 842 / 1575 at 32 / 64 / 128 /
/// 256 / 512 MiB against 156.3 / 289.4 / 524 / 956 / 1908 for reduce-scatter-then-gather or the
/// relay; at 16 MiB and below the chain's per-step release (a system-scope fence, ~2-3 us per
/// step) loses (108.8 against 90.4 at 16 MiB). 3 ranks: 140.0 / 137.7 at 32 MiB, 234 / 275 at 64.
const DEFAULT_REDUCE_CHAIN_MIN_BYTES: u64 = 32 << 20;
/// Most ranks at which packet Reduce takes the one-shot AllReduce's shape (measured at 2-4).
const DEFAULT_REDUCE_LL_SHAPE_MAX_RANKS: u64 = 4;
/// Largest chain step per block unless OXCCL_CHAIN_STEPS asks otherwise: past it, more and smaller
/// steps shorten the pipeline's fill (n - 1 steps) while each step still moves 128 blocks x 64 KiB,
/// enough to hide its release (H200 x4: 815 us at 256 MiB in 64 KiB steps against 842 in 128 KiB).
const CHAIN_MAX_STEP_BYTES: u64 = 64 << 10;

/// The chain's launch (kernels/colls/reduce_colls.cu, reduce_chain): one block per
/// OXCCL_CHAIN_BLOCK_BYTES (256 KiB) of message, up to the put scratch's blocks and the SMs; a
/// block's range walked in 16 steps (OXCCL_CHAIN_STEPS) or in steps of 64 KiB where that makes
/// more, within 4 KiB and a scratch slot. Every rank derives the same plan.
fn chain_plan(count: u64, dt: DataType, topo: &Topology, s: &Scratch, t: &Tuning) -> ReducePlan {
    let es = dt.size() as u64;
    let unit = (16 / es).max(1);
    let bytes = count * es;
    let (cap, _) = exchange_shape(topo, s); // <= rs_max_blocks: the chain's slots are per block
    let grid = bytes.div_ceil(t.chain_block_bytes.unwrap_or(256 << 10)).clamp(1, cap as u64) as u32;
    let per = count.div_ceil(grid as u64).div_ceil(unit) * unit;
    let slot_elems = (s.rs_slot_bytes / es / unit * unit).max(unit);
    let min_elems = ((4096 / es) / unit * unit).max(unit);
    let chunk = match t.chain_steps {
        Some(steps) => per.div_ceil(steps),
        None => per.div_ceil(16).min(CHAIN_MAX_STEP_BYTES / es),
    };
    let chunk = chunk.div_ceil(unit) * unit;
    ReducePlan { mode: OX_MODE_CHAIN as u32, grid, block: 1024, chunk_elems: chunk.max(min_elems).min(slot_elems) }
}

/// Smallest Reduce sent as LL128 lines along the chain (3+ ranks), unless tuned
/// (OXCCL_REDUCE_LL128_MIN_BYTES, 0 = never). H200, us, LL128 chain / previous default / NCCL:
/// 4 ranks 6.00 / 5.37 / 6.35 at 128 KiB, 6.16 / 6.52 / 6.51 at 256 KiB, 6.93 / 8.10 / 8.09 at
/// 512 KiB, 9.10 / 11.37 / 11.78 at 1 MiB; 3 ranks 6.11 / 6.65 / 6.5 at 256 KiB (the previous
/// default there was an LL16 packet chain, retired since).
const DEFAULT_REDUCE_LL128_MIN_BYTES: u64 = 256 << 10;
/// Largest Reduce (exclusive) sent as LL128 lines along the chain, unless tuned
/// (OXCCL_REDUCE_LL128_MAX_BYTES); from there the put chain. H200 x4, us, LL128 / put chain / NCCL:
/// 111.7 / 149.9 / 110.5 at 32 MiB, 217.4 / 246.7 / 203.5 at 64 MiB, 427.0 / 449.6 / 385.6 at
/// 128 MiB, 846.9 / 813.6 / 751.0 at 256 MiB.
const DEFAULT_REDUCE_LL128_MAX_BYTES: u64 = 256 << 20;
/// LL128 lines along the chain (kernels/colls/reduce_colls.cu, reduce_ll128_chain): 3+ ranks, packets
/// allowed, from OXCCL_REDUCE_LL128_MIN_BYTES to below OXCCL_REDUCE_LL128_MAX_BYTES. Any size: the
/// kernel goes in rounds of half an LL128 scratch half (shape: chain::ll128_shape).
fn ll128_chain_plan(bytes: u64, n: usize, topo: &Topology, s: &Scratch, t: &Tuning) -> Option<ReducePlan> {
    let min = t.reduce_ll128_min_bytes.unwrap_or(DEFAULT_REDUCE_LL128_MIN_BYTES);
    let max = t.reduce_ll128_max_bytes.unwrap_or(DEFAULT_REDUCE_LL128_MAX_BYTES);
    if n < 3 || min == 0 || bytes < min || bytes >= max || !t.allowed.packets[Func::Reduce as usize] {
        return None;
    }
    let (grid, block) = super::chain::ll128_shape(bytes, topo, s, t);
    Some(ReducePlan { mode: OX_MODE_LL128_CHAIN as u32, grid, block, chunk_elems: 0 })
}

/// Reduce to a root: packets for small messages (one-directional pairs, so the communicator's
/// fixed exchange grid); on 3+ ranks LL128 lines along the chain from 256 KiB below 256 MiB, and the put chain from there (from 32 MiB when LL128 is
/// tuned off), where every link carries the message
/// once (reduce-scatter-then-gather makes the root receive 1.5x the message on 4 ranks); else
/// AllReduce's put-based algorithm with the gather to the root only. With the chain turned off,
/// the relay (the root receives only finished pieces) from 128 MiB.
pub fn select_reduce(count: u64, dt: DataType, topo: &Topology, s: &Scratch, t: &Tuning) -> ReducePlan {
    let n = topo.nranks.max(1);
    let bytes = count * dt.size() as u64;
    if let Some(p) = ll128_chain_plan(bytes, n, topo, s, t) {
        return p;
    }
    if ll_fits(Func::Reduce, bytes, n, s, t) {
        // The one-shot AllReduce's shape for the same packets: the exchange kernel's fixed grid of
        // 1024-thread blocks dates from flags kept per block. On H200 x2 it took 0.35-0.6 us off
        // 64 B-32 KB (BENCHMARKS.md of 2026-11-22, 7750d95); on H200 x4 it took 1.4-1.7 us off
        // eager and 0.6-0.9 us off -G 20 at 8 B-32 KB (BENCHMARKS.md of 2026-11-26, 049c93f). More
        // than 4 ranks keep the exchange grid until measured there.
        let shape_ranks = t.reduce_ll_shape_max_ranks.unwrap_or(DEFAULT_REDUCE_LL_SHAPE_MAX_RANKS);
        let (grid, block) = if n as u64 <= shape_ranks { super::allreduce::ll_shape(bytes.div_ceil(8), topo.sm_count, t) } else { exchange_shape(topo, s) };
        return ReducePlan { mode: OX_MODE_LL as u32, grid, block, chunk_elems: 0 };
    }
    let chain_min = t.reduce_chain_min_bytes.unwrap_or(DEFAULT_REDUCE_CHAIN_MIN_BYTES);
    if n >= 3 && chain_min > 0 && bytes >= chain_min {
        return chain_plan(count, dt, topo, s, t);
    }
    let relay_min = t.reduce_relay_min_bytes.unwrap_or(DEFAULT_REDUCE_RELAY_MIN_BYTES);
    if n >= 3 && relay_min > 0 && bytes >= relay_min {
        let es = dt.size() as u64;
        let unit = (16 / es).max(1);
        let (grid, block) = exchange_shape(topo, s);
        let per = count.div_ceil(n as u64 - 1).div_ceil(unit) * unit;
        let rounds = super::exchange::relay_rounds(per * es, grid, t); // as the relayed Broadcast
        let slot_elems = (s.rs_slot_bytes / es / unit * unit).max(unit);
        let chunk = per.div_ceil(grid as u64 * rounds).div_ceil(unit) * unit;
        return ReducePlan { mode: OX_MODE_RELAY as u32, grid, block, chunk_elems: chunk.clamp(unit, slot_elems) };
    }
    // The put-based AllReduce's geometry, without the block and thread counts measured for
    // AllReduce alone (its 64-block, 512-thread mid-size shapes): Reduce keeps what it had.
    let forced = Tuning {
        allreduce_algo: Some(AllReduceAlgo::Rsag),
        rsag_mid_blocks: Some(t.rsag_mid_blocks.unwrap_or(u32::MAX)),
        rs_threads: Some(t.rs_threads.unwrap_or(1024)),
        ..t.clone()
    };
    let p = select_allreduce(count, dt, topo, s, &forced);
    ReducePlan { mode: OX_MODE_PUT as u32, grid: p.grid, block: p.block, chunk_elems: p.chunk_elems }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_reduce_keeps_full_blocks_of_1024() {
        let t = Tuning {
            reduce_ll_max_bytes: Some(0),
            reduce_ll128_min_bytes: Some(0),
            reduce_chain_min_bytes: Some(0),
            reduce_relay_min_bytes: Some(0),
            ..Tuning::default()
        };
        for n in [2usize, 4] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            let p = select_reduce((8 << 20) / 4, DataType::Float32, &topo, &s, &t);
            assert_eq!((p.mode, p.grid, p.block), (OX_MODE_PUT as u32, 128, 1024), "n={n}");
        }
    }

    #[test]
    fn small_is_packets_large_is_puts_within_scratch() {
        let t = Tuning::default();
        for n in [2usize, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for dt in DataType::ALL {
                for count in [1u64, 7, 1000, 65537, 1 << 20, 100_000_003] {
                    let rs = select_reducescatter(count, dt, &topo, &s, &t);
                    let rd = select_reduce(count, dt, &topo, &s, &t);
                    for p in [rs, rd] {
                        if !p.packets() {
                            assert!(p.chunk_elems * dt.size() as u64 <= s.rs_slot_bytes);
                            assert!(p.grid >= 1 && p.grid <= s.rs_max_blocks);
                        } else if p.mode == OX_MODE_LL128_CHAIN as u32 {
                            assert!(n >= 3 && p.grid >= 1 && p.grid <= s.rs_max_blocks);
                        } else {
                            let region = (s.ll_half_bytes / n as u64) & !15;
                            assert!((count * dt.size() as u64).div_ceil(8) * 16 <= region);
                            assert_eq!(p.mode, OX_MODE_LL as u32);
                        }
                    }
                }
                assert_eq!(select_reducescatter(1, dt, &topo, &s, &t).mode, OX_MODE_LL as u32);
                let mode = select_reduce((2u64 << 20) / dt.size() as u64, dt, &topo, &s, &t).mode;
                assert_eq!(mode, if n >= 3 { OX_MODE_LL128_CHAIN } else { OX_MODE_PUT } as u32, "n={n} 2 MiB");
                let no_ll128 = Tuning { reduce_ll128_min_bytes: Some(0), ..t.clone() };
                let mode = select_reduce((2u64 << 20) / dt.size() as u64, dt, &topo, &s, &no_ll128).mode;
                assert_eq!(mode, OX_MODE_PUT as u32, "n={n} 2 MiB without LL128: reduce-scatter then gather");
                for count in [(256u64 << 20) / dt.size() as u64, 1 << 30] {
                    let mode = select_reduce(count, dt, &topo, &s, &t).mode;
                    assert_eq!(mode, if n >= 3 { OX_MODE_CHAIN } else { OX_MODE_PUT } as u32, "n={n} count {count}");
                }
                let mode = select_reduce((32u64 << 20) / dt.size() as u64, dt, &topo, &s, &no_ll128).mode;
                assert_eq!(mode, if n >= 3 { OX_MODE_CHAIN } else { OX_MODE_PUT } as u32, "n={n} 32 MiB without LL128");
                let no_chain = Tuning { reduce_chain_min_bytes: Some(0), reduce_ll128_min_bytes: Some(0), ..t.clone() };
                let mid = select_reduce((64 << 20) / dt.size() as u64, dt, &topo, &s, &no_chain).mode;
                assert_eq!(mid, OX_MODE_PUT as u32, "64 MiB without the chain: reduce-scatter then gather");
                let big = select_reduce(1 << 28, dt, &topo, &s, &no_chain).mode;
                assert_eq!(big, if n >= 3 { OX_MODE_RELAY } else { OX_MODE_PUT } as u32);
            }
        }
    }

    #[test]
    fn quarter_mib_to_256_mib_on_three_or_more_ranks_is_an_ll128_chain() {
        let t = Tuning::default();
        let simple = Tuning { allowed: super::super::envlists::Allowed::from_values(Some("Simple"), None).unwrap(), ..Default::default() };
        for n in [2usize, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for dt in DataType::ALL {
                let es = dt.size() as u64;
                for bytes in [256u64 << 10, 1 << 20, 3_000_017, 16 << 20, 32 << 20, 100_000_007, (256 << 20) - 64] {
                    let p = select_reduce(bytes / es, dt, &topo, &s, &t);
                    if n >= 3 {
                        assert_eq!(p.mode, OX_MODE_LL128_CHAIN as u32, "n={n} {} {bytes} B", dt.name());
                        assert!(p.packets() && p.grid >= 1 && p.grid <= s.rs_max_blocks && p.block.is_multiple_of(32));
                    } else {
                        assert_ne!(p.mode, OX_MODE_LL128_CHAIN as u32);
                    }
                    assert_ne!(select_reduce(bytes / es, dt, &topo, &s, &simple).mode, OX_MODE_LL128_CHAIN as u32, "NCCL_PROTO=Simple");
                }
                let at_chain = select_reduce((256 << 20) / es, dt, &topo, &s, &t).mode;
                assert_eq!(at_chain, if n >= 3 { OX_MODE_CHAIN } else { OX_MODE_PUT } as u32);
                assert_eq!(select_reduce(((256 << 10) - 64) / es, dt, &topo, &s, &t).mode, OX_MODE_LL as u32, "below: direct packets");
                // OXCCL_REDUCE_LL128_MAX_BYTES moves the end.
                let longer = Tuning { reduce_ll128_max_bytes: Some(128 << 20), ..t.clone() };
                let mode = |bytes: u64| select_reduce(bytes / es, dt, &topo, &s, &longer).mode;
                if n >= 3 {
                    assert_eq!((mode(64 << 20), mode(128 << 20)), (OX_MODE_LL128_CHAIN as u32, OX_MODE_CHAIN as u32));
                }
            }
        }
        // Enough blocks for a round of lines, within the grid cap.
        let grid = |bytes: u64| select_reduce(bytes / 4, DataType::Float32, &Topology { nranks: 4, sm_count: 132 }, &Scratch::for_ranks(4, &t), &t).grid;
        assert_eq!((grid(1 << 20), grid(16 << 20)), (128, 128));
        assert_eq!(Scratch::for_ranks(4, &t).ll128_half_bytes % 256, 0);
    }

    #[test]
    fn chain_plans_fit_the_scratch_and_pipeline() {
        let t = Tuning { reduce_chain_min_bytes: Some(1), reduce_ll128_min_bytes: Some(0), ..Tuning::default() };
        for n in [3usize, 4, 5, 8, 16] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for dt in DataType::ALL {
                let es = dt.size() as u64;
                let unit = (16 / es).max(1);
                for bytes in [(1u64 << 20) + 16, 3 << 20, 64 << 20, 100_000_007, 1 << 29] {
                    let count = bytes / es;
                    let p = select_reduce(count, dt, &topo, &s, &t);
                    assert_eq!(p.mode, OX_MODE_CHAIN as u32, "n={n} {} {bytes} B", dt.name());
                    assert!(p.grid >= 1 && p.grid <= s.rs_max_blocks && p.grid <= 132);
                    assert!(p.block >= 96 && p.block.is_multiple_of(32), "a signalling warp, a waiting warp and at least one computing warp");
                    assert_eq!(p.chunk_elems % unit, 0);
                    assert!(p.chunk_elems >= unit && p.chunk_elems * es <= s.rs_slot_bytes);
                    let per = count.div_ceil(p.grid as u64).div_ceil(unit) * unit;
                    let steps = per.div_ceil(p.chunk_elems);
                    // 16 steps, or more of 64 KiB; fewer only when a block has little to do.
                    let step_cap = (64 << 10).min(s.rs_slot_bytes);
                    assert!(steps <= 16 || p.chunk_elems * es + es * unit > step_cap, "n={n} {bytes} B: {steps} steps");
                    assert!(p.chunk_elems * es <= step_cap || p.chunk_elems == unit, "n={n} {bytes} B: step of {} B", p.chunk_elems * es);
                }
            }
        }
        let grid = |bytes: u64| select_reduce(bytes / 4, DataType::Float32, &Topology { nranks: 4, sm_count: 132 }, &Scratch::for_ranks(4, &t), &t).grid;
        assert_eq!((grid(2 << 20), grid(32 << 20), grid(1 << 29)), (8, 128, 128), "a block per 256 KiB, up to the scratch");
    }

    #[test]
    fn large_reduce_on_three_or_more_ranks_relays() {
        let t = Tuning { reduce_chain_min_bytes: Some(0), reduce_ll128_min_bytes: Some(0), ..Tuning::default() };
        for n in [3usize, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for dt in DataType::ALL {
                for count in [(128u64 << 20) / dt.size() as u64, (200u64 << 20) / dt.size() as u64 + 3, 1 << 28] {
                    let p = select_reduce(count, dt, &topo, &s, &t);
                    assert_eq!(p.mode, OX_MODE_RELAY as u32, "n={n} {} count {count}", dt.name());
                    assert_eq!((p.grid, p.block), exchange_shape(&topo, &s));
                    assert!(p.chunk_elems >= 1 && p.chunk_elems * dt.size() as u64 <= s.rs_slot_bytes);
                    // The kernel's rounds: at most the 12 aimed for, unless the slots are too
                    // small for that (then as few as full slots allow).
                    let per = count.div_ceil(n as u64 - 1);
                    let rounds = per.div_ceil(p.grid as u64 * p.chunk_elems);
                    let slot_elems = s.rs_slot_bytes / dt.size() as u64;
                    let floor = per.div_ceil(p.grid as u64 * slot_elems);
                    assert!(rounds >= 1 && rounds <= floor.max(13), "n={n} rounds {rounds} floor {floor}");
                }
            }
        }
        let s = Scratch::for_ranks(2, &t);
        let two = Topology { nranks: 2, sm_count: 132 };
        assert_eq!(select_reduce(1 << 28, DataType::Float32, &two, &s, &t).mode, OX_MODE_PUT as u32, "2 ranks: no one to relay");
        let off = Tuning { reduce_relay_min_bytes: Some(0), ..t.clone() };
        let s4 = Scratch::for_ranks(4, &t);
        let four = Topology { nranks: 4, sm_count: 132 };
        assert_eq!(select_reduce(1 << 28, DataType::Float32, &four, &s4, &off).mode, OX_MODE_PUT as u32);
    }

    #[test]
    fn reduce_packets_take_the_one_shot_allreduce_shape_up_to_four_ranks() {
        let t = Tuning::default();
        let s4 = Scratch::for_ranks(4, &t);
        let four = Topology { nranks: 4, sm_count: 132 };
        for count in [1u64, 4096] {
            let p = select_reduce(count, DataType::Float32, &four, &s4, &t);
            assert_eq!((p.mode, (p.grid, p.block)), (OX_MODE_LL as u32, crate::algo::allreduce::ll_shape((count * 4).div_ceil(8), 132, &t)), "4 ranks, count {count}");
        }
        let s8 = Scratch::for_ranks(8, &t);
        let eight = Topology { nranks: 8, sm_count: 132 };
        let p = select_reduce(64, DataType::Float32, &eight, &s8, &t);
        assert_eq!((p.mode, (p.grid, p.block)), (OX_MODE_LL as u32, exchange_shape(&eight, &s8)), "8 ranks: not measured");
        let s = Scratch::for_ranks(2, &t);
        let topo = Topology { nranks: 2, sm_count: 132 };
        for count in [1u64, 4096, 10_000] {
            let p = select_reduce(count, DataType::Float32, &topo, &s, &t);
            assert_eq!(p.mode, OX_MODE_LL as u32, "count {count}");
            assert_eq!((p.grid, p.block), crate::algo::allreduce::ll_shape((count * 4).div_ceil(8), 132, &t), "count {count}");
        }
        let (small, big) = (select_reduce(1, DataType::Float32, &topo, &s, &t), select_reduce(10_000, DataType::Float32, &topo, &s, &t));
        assert!(small.grid < big.grid, "the grid follows the packets: {} vs {}", small.grid, big.grid);
        // OXCCL_REDUCE_LL_SHAPE_MAX_RANKS=2 gives 4 ranks the exchange grid back (to compare).
        let t2 = Tuning { reduce_ll_shape_max_ranks: Some(2), ..Tuning::default() };
        let p = select_reduce(4096, DataType::Float32, &four, &s4, &t2);
        assert_eq!((p.mode, (p.grid, p.block)), (OX_MODE_LL as u32, exchange_shape(&four, &s4)));
    }
}
