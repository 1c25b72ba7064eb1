//! AllReduce algorithm choice.

use super::envlists::Func;
use super::{Scratch, Topology, Tuning};
use crate::device_abi::OX_MAX_BLOCKS;
use crate::types::DataType;

/// The AllReduce kernels; discriminants index the kernel table (kernels/colls/allreduce.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllReduceAlgo {
    /// All-pairs LL16: one hop, every rank reduces everything. Small messages.
    OneShot = 0,
    /// LL16 reduce-scatter then LL16 all-gather. Medium messages, many ranks.
    TwoPhase = 1,
    /// Put-based reduce-scatter + all-gather with semaphores, pipelined per block. Large messages.
    Rsag = 2,
    /// OneShot with LL128 lines through the all-pairs LL128 area: 120 payload bytes in 128.
    OneShot128 = 3,
    /// TwoPhase with LL128 lines.
    TwoPhase128 = 4,
}

impl AllReduceAlgo {
    /// In discriminant order (the kernel table is indexed by it).
    pub const ALL: [AllReduceAlgo; 5] =
        [AllReduceAlgo::OneShot, AllReduceAlgo::TwoPhase, AllReduceAlgo::Rsag, AllReduceAlgo::OneShot128, AllReduceAlgo::TwoPhase128];

    /// Name in kernel symbols (`ox_allreduce_<name>_...`) and in OXCCL_ALLREDUCE_ALGO.
    pub fn name(self) -> &'static str {
        match self {
            AllReduceAlgo::OneShot => "oneshot",
            AllReduceAlgo::TwoPhase => "twophase",
            AllReduceAlgo::Rsag => "rsag",
            AllReduceAlgo::OneShot128 => "oneshot128",
            AllReduceAlgo::TwoPhase128 => "twophase128",
        }
    }

    /// The algorithm `name` gives (any case), as OXCCL_ALLREDUCE_ALGO spells it.
    pub fn from_name(s: &str) -> Option<AllReduceAlgo> {
        AllReduceAlgo::ALL.into_iter().find(|a| a.name().eq_ignore_ascii_case(s))
    }
}

/// How one AllReduce runs: which kernel, its launch shape, and its chunking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllReducePlan {
    /// The kernel.
    pub algo: AllReduceAlgo,
    /// Thread blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Elements per block per round (rsag only; 0 otherwise).
    pub chunk_elems: u64,
    /// One-shot through the ring area (OX_ONESHOT_RING): a pure function of the size and rank
    /// count, so every rank agrees on where the packets go.
    pub ring: bool,
}

/// Whether a one-shot AllReduce of `bytes` on `n` ranks goes through the ring area.
pub fn oneshot_ring(bytes: u64, n: usize) -> bool {
    Scratch::ring_bytes(n) > 0 && bytes <= crate::device_abi::OX_RING_PAYLOAD_BYTES
}

/// Largest message the one-shot algorithm's scratch holds: each source rank's slot of
/// half/nranks bytes carries 8 payload bytes per 16-byte packet.
pub(super) fn oneshot_capacity(s: &Scratch, n: u64) -> u64 {
    ((s.ll_half_bytes / n) & !15) / 2
}

/// Largest message the two-phase algorithm's scratch holds: a chunk of ceil(bytes/8/n) packets
/// must fit half of a source's half/nranks region (the other half carries the all-gather phase).
fn twophase_capacity(s: &Scratch, n: u64) -> u64 {
    (twophase_area(s, n) / 16) * 8 * n
}

/// Bytes of each phase's area in a source's LL region (kernels/colls/allreduce.cu, allreduce_twophase).
fn twophase_area(s: &Scratch, n: u64) -> u64 {
    (((s.ll_half_bytes / n) & !15) / 2) & !15
}

/// Largest message the LL128 one-shot holds: its lines (120 payload bytes each) fit one source's
/// region of the all-pairs area.
fn oneshot128_capacity(s: &Scratch, n: u64) -> u64 {
    s.ap128_region_bytes(n as usize) / 128 * 120
}

/// Largest message the LL128 two-phase holds: a chunk of ceil(words/n) words, in lines of 15
/// words, fits half a source's region (the other half carries the all-gather).
fn twophase128_capacity(s: &Scratch, n: u64) -> u64 {
    (s.ap128_region_bytes(n as usize) / 2 / 128) * 15 * 8 * n
}

/// Default one-shot limit, from nccl-tests sweeps on H200 NVLink (BENCHMARKS.md): with two
/// ranks one-shot moves the same bytes as two-phase in one hop instead of two, and wins until the
/// packets' half efficiency costs more than the put-based algorithm's syncs (about 1 MiB); with
/// more ranks one-shot moves (n-1)/2 times more bytes than two-phase and stops paying earlier.
/// As LL128 lines (`lines`: the message fits the all-pairs area), two ranks keep one-shot as far
/// as the area holds: 8.8 against 10.8 us at 1 MiB on H200 x4, 13.8 against the put-based 17.3
/// at 2 MiB, even at 4 MiB (22.4 against 23.6) and behind at 8 MiB (39.4 against 36.0;
/// BENCHMARKS.md of 2026-11-26, 1ffcb7a).
pub(super) fn default_oneshot_max(n: u64, lines: bool) -> u64 {
    match n {
        2 if lines => u64::MAX,
        2 => 1 << 20,
        3..=4 => 256 << 10,
        _ => 32 << 10,
    }
}

/// Default two-phase limit: above it the put-based algorithm, spread over every block, is faster
/// (two ranks never pick two-phase: one-shot moves the same bytes in one hop). As LL128 lines
/// two-phase wins as far as the all-pairs area holds: 10.0 against 16.5 us at 1 MiB on 4 H200,
/// 16.1 against 22.9 at 2 MiB, even at 4 MiB (32.4 against 32.2) and behind from 8 MiB
/// (64.9 against 50.8; BENCHMARKS.md of 2026-11-26, 1ffcb7a), where LL128 lines move about 200 GB/s
/// out of a GPU. The default area holds about 3.75 MiB at any rank count (Scratch::for_ranks).
fn default_twophase_max(n: u64, lines: bool) -> u64 {
    if n == 2 {
        0
    } else if lines {
        u64::MAX
    } else {
        512 << 10
    }
}

/// Fewest blocks a packet algorithm launches.
const DEFAULT_LL_MIN_BLOCKS: u32 = 4;

/// Smallest per-block slice of the put-based algorithm: below it, more blocks only add syncs.
const RSAG_MIN_SLICE_BYTES: u64 = 4096;

/// Largest message for which the put-based algorithm's blocks have 512 threads instead of 1024:
/// on 4 H200, 8 MiB took 48.1-48.2 us against 49.2 (64 blocks), 2 ranks 34.0 against 35.8; at
/// 16 MiB 4 ranks lost 1% (BENCHMARKS.md of 2026-11-26, 1ffcb7a).
const RSAG_HALF_BLOCK_MAX_BYTES: u64 = 8 << 20;

/// Largest range a rank owns (message / ranks) for which the put-based algorithm at 4+ ranks takes
/// fewer blocks: on 4 H200, 64 blocks beat 128 by 1-7% at 2-16 MiB and lost 3% at 32 MiB
/// (BENCHMARKS.md of 2026-11-26, 049c93f).
const RSAG_MID_MAX_PER_BYTES: u64 = 4 << 20;

pub(super) fn ll_shape(npkt: u64, sm_count: u32, t: &Tuning) -> (u32, u32) {
    let threads = t.ll_threads.unwrap_or(512);
    let cap = t.ll_blocks.unwrap_or(sm_count.clamp(1, 64)).min(OX_MAX_BLOCKS as u32);
    // Even a one-packet message takes several blocks: measured on H200, an 8-byte AllReduce runs
    // in 4.1 us with 4 blocks against 5.9 us with one (BENCHMARKS.md).
    let min = t.ll_min_blocks.unwrap_or(DEFAULT_LL_MIN_BLOCKS).max(t.min_blocks.unwrap_or(0)).clamp(1, cap);
    let grid = npkt.div_ceil(threads as u64).clamp(min as u64, cap as u64) as u32;
    (grid, threads)
}

/// Launch shape of the LL128 algorithms for `lines` lines per phase: a warp takes 4 lines at a
/// time, and a phase goes best in one pass of the grid. Up to 64 blocks of 512 threads, then
/// blocks of 1024, up to one per SM: at 2 MiB on 4 H200, 103 blocks of 1024 took 16.1 us, 64 of
/// 512 20.0 and 64 of 1024 17.8; below 1 MiB, 1024-thread blocks lost up to 1.5 us
/// (BENCHMARKS.md of 2026-11-26, 1ffcb7a).
fn ap128_shape(lines: u64, sm_count: u32, t: &Tuning) -> (u32, u32) {
    let groups = lines.div_ceil(4);
    let threads = t.ll_threads.unwrap_or(if groups <= 64 * 16 { 512 } else { 1024 });
    let cap = t.ll_blocks.unwrap_or(sm_count.clamp(1, OX_MAX_BLOCKS as u32)).min(OX_MAX_BLOCKS as u32);
    let min = t.ll_min_blocks.unwrap_or(DEFAULT_LL_MIN_BLOCKS).max(t.min_blocks.unwrap_or(0)).clamp(1, cap);
    let grid = groups.div_ceil((threads / 32) as u64).clamp(min as u64, cap as u64) as u32;
    (grid, threads)
}

/// Chooses the AllReduce algorithm and launch shape.
pub fn select_allreduce(count: u64, dt: DataType, topo: &Topology, scratch: &Scratch, t: &Tuning) -> AllReducePlan {
    let es = dt.size() as u64;
    let bytes = count * es;
    let npkt = bytes.div_ceil(8);
    if topo.nranks <= 1 {
        // One rank: the one-shot kernel with no peers is an elementwise pre/post pass, any size.
        let (grid, block) = ll_shape(npkt, topo.sm_count, t);
        return AllReducePlan { algo: AllReduceAlgo::OneShot, grid, block, chunk_elems: 0, ring: false };
    }
    let n = topo.nranks as u64;
    let f = Func::AllReduce as usize;
    // LL128 replaces LL16 beyond the ring's sizes wherever its area holds the message.
    let lines_ok = !t.ap128_off && t.allowed.lines[f] && !oneshot_ring(bytes, topo.nranks);
    let oneshot128_fits = lines_ok && bytes <= oneshot128_capacity(scratch, n);
    let twophase128_fits = lines_ok && bytes <= twophase128_capacity(scratch, n);
    let oneshot_fits = bytes <= oneshot_capacity(scratch, n) || oneshot128_fits;
    let twophase_fits = bytes <= twophase_capacity(scratch, n) || twophase128_fits;

    // NCCL_PROTO: LL/LL128 stand for the packet algorithms, Simple for the put-based one. Where
    // only packets are allowed but the message exceeds their scratch, the put-based algorithm runs.
    let (packets_ok, puts_ok) = (t.allowed.packets[f], t.allowed.puts[f]);
    let forced = t.allreduce_algo.filter(|a| match a {
        AllReduceAlgo::OneShot => bytes <= oneshot_capacity(scratch, n),
        AllReduceAlgo::TwoPhase => bytes <= twophase_capacity(scratch, n),
        AllReduceAlgo::OneShot128 => !t.ap128_off && bytes <= oneshot128_capacity(scratch, n),
        AllReduceAlgo::TwoPhase128 => !t.ap128_off && bytes <= twophase128_capacity(scratch, n),
        AllReduceAlgo::Rsag => true,
    });
    let algo = forced.unwrap_or_else(|| {
        if !packets_ok {
            AllReduceAlgo::Rsag
        } else if oneshot_fits && bytes <= t.oneshot_max_bytes.unwrap_or_else(|| default_oneshot_max(n, oneshot128_fits)) {
            AllReduceAlgo::OneShot
        } else if twophase_fits && (!puts_ok || bytes <= t.twophase_max_bytes.unwrap_or_else(|| default_twophase_max(n, twophase128_fits))) {
            AllReduceAlgo::TwoPhase
        } else if oneshot_fits && !puts_ok {
            AllReduceAlgo::OneShot
        } else {
            AllReduceAlgo::Rsag
        }
    });
    let algo = match algo {
        AllReduceAlgo::OneShot if forced.is_none() && oneshot128_fits => AllReduceAlgo::OneShot128,
        AllReduceAlgo::TwoPhase if forced.is_none() && twophase128_fits => AllReduceAlgo::TwoPhase128,
        a => a,
    };

    match algo {
        AllReduceAlgo::OneShot => {
            let (grid, block) = ll_shape(npkt, topo.sm_count, t);
            AllReducePlan { algo, grid, block, chunk_elems: 0, ring: oneshot_ring(bytes, topo.nranks) }
        }
        AllReduceAlgo::TwoPhase => {
            let (grid, block) = ll_shape(npkt.div_ceil(n) * (n - 1), topo.sm_count, t);
            AllReducePlan { algo, grid, block, chunk_elems: 0, ring: false }
        }
        AllReduceAlgo::OneShot128 => {
            let (grid, block) = ap128_shape(npkt.div_ceil(15), topo.sm_count, t);
            AllReducePlan { algo, grid, block, chunk_elems: 0, ring: false }
        }
        AllReduceAlgo::TwoPhase128 => {
            let (grid, block) = ap128_shape(npkt.div_ceil(n).div_ceil(15) * (n - 1), topo.sm_count, t);
            AllReducePlan { algo, grid, block, chunk_elems: 0, ring: false }
        }
        AllReduceAlgo::Rsag => {
            // Slices are whole 16-byte units so every slice of an aligned buffer stays aligned.
            // A message is spread over every block before it takes more than one round: the
            // bandwidth comes from many blocks copying at once.
            let unit = (16 / es).max(1);
            let slot_elems = (scratch.rs_slot_bytes / es / unit * unit).max(unit);
            let per = count.div_ceil(n).div_ceil(unit) * unit;
            let min_elems = (RSAG_MIN_SLICE_BYTES / es).div_ceil(unit) * unit;
            // One block per SM at most: more would queue behind each other. And at 4+ ranks, at most
            // 64 while each rank owns at most 4 MiB (t.rsag_mid_blocks).
            let mid = if n >= 4 && per * es <= RSAG_MID_MAX_PER_BYTES { t.rsag_mid_blocks.unwrap_or(64) } else { u32::MAX };
            let cap = scratch.rs_max_blocks.min(topo.sm_count.max(1)).min(mid.max(1)) as u64;
            let spread = per.div_ceil(cap).div_ceil(unit) * unit;
            let chunk = spread.max(min_elems).min(slot_elems);
            let grid = per.div_ceil(chunk).clamp(1, cap) as u32;
            let block = t.rs_threads.unwrap_or(if bytes <= RSAG_HALF_BLOCK_MAX_BYTES { 512 } else { 1024 });
            AllReducePlan { algo, grid, block, chunk_elems: chunk, ring: false }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(n: usize) -> Topology {
        Topology { nranks: n, sm_count: 132 }
    }

    #[test]
    fn small_messages_take_one_hop() {
        let t = Tuning::default();
        for n in [2, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            for count in [1u64, 2, 7, 1024, 4096] {
                let p = select_allreduce(count, DataType::Float32, &topo(n), &s, &t);
                assert_eq!(p.algo, AllReduceAlgo::OneShot, "n={n} count={count}");
                assert!(p.grid >= 1 && p.grid <= 64);
            }
        }
    }

    #[test]
    fn one_shots_up_to_64k_on_2_to_8_ranks_take_the_ring() {
        let t = Tuning::default();
        for n in [2usize, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let plan = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(n), &s, &t);
            // Eight ranks leave one-shot at 32 KiB (default_oneshot_max); what one-shot takes is ringed.
            let top = if n == 8 { 32 << 10 } else { 64 << 10 };
            assert!(plan(8).ring && plan(top).ring, "n={n}");
            let p = plan(128 << 10);
            assert!(!p.ring, "n={n}: beyond the ring's regions");
        }
        for n in [1usize, 9, 16] {
            let s = Scratch::for_ranks(n, &t);
            assert!(!select_allreduce(2, DataType::Float32, &topo(n), &s, &t).ring, "n={n}: no ring area");
            assert_eq!(Scratch::ring_bytes(n), 0);
        }
        assert_eq!(Scratch::ring_bytes(2), 2 << 20, "8 slots of 2 regions of 128 KiB");
    }

    #[test]
    fn sizes_progress_through_the_algorithms() {
        let t = Tuning::default();
        let s = Scratch::for_ranks(4, &t);
        let pick = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(4), &s, &t).algo;
        assert_eq!(pick(64 << 10), AllReduceAlgo::OneShot);
        assert_eq!(pick(256 << 10), AllReduceAlgo::OneShot128);
        assert_eq!(pick(512 << 10), AllReduceAlgo::TwoPhase128);
        assert_eq!(pick(1 << 20), AllReduceAlgo::TwoPhase128);
        assert_eq!(pick(twophase128_capacity(&s, 4) + 4), AllReduceAlgo::Rsag);
        assert_eq!(pick(512 << 20), AllReduceAlgo::Rsag);
        // Two ranks: one hop up to 512 KiB, then the put-based algorithm.
        let s2 = Scratch::for_ranks(2, &t);
        let pick2 = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(2), &s2, &t).algo;
        assert_eq!(pick2(64 << 10), AllReduceAlgo::OneShot);
        assert_eq!(pick2(1 << 20), AllReduceAlgo::OneShot128);
        assert_eq!(pick2(2 << 20), AllReduceAlgo::OneShot128);
        assert_eq!(pick2(4 << 20), AllReduceAlgo::Rsag);
        assert_eq!(pick(2 << 20), AllReduceAlgo::TwoPhase128);
        assert_eq!(pick(4 << 20), AllReduceAlgo::Rsag);
        // OXCCL_AP128=0: LL16 packets throughout.
        let off = Tuning { ap128_off: true, ..Tuning::default() };
        let pick_off = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(4), &s, &off).algo;
        assert_eq!(pick_off(256 << 10), AllReduceAlgo::OneShot);
        assert_eq!(pick_off(512 << 10), AllReduceAlgo::TwoPhase);
        assert_eq!(pick_off(1 << 20), AllReduceAlgo::Rsag);
    }

    #[test]
    fn rsag_uses_every_block_before_adding_rounds() {
        let t = Tuning::default();
        for n in [2usize, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let plan = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(n), &s, &t);
            // Large enough for every block: all blocks in use.
            let p = plan(64 << 20);
            assert_eq!(p.grid, s.rs_max_blocks, "n={n}");
            // 4 MiB: one round spread over many blocks, never below the minimum slice.
            let p = plan(4 << 20);
            assert_eq!(p.algo, AllReduceAlgo::Rsag);
            assert!(p.grid >= 16, "n={n}: grid {}", p.grid);
            assert!(p.chunk_elems * 4 >= RSAG_MIN_SLICE_BYTES);
        }
    }

    #[test]
    fn packet_algorithms_never_exceed_their_scratch() {
        let t = Tuning::default();
        for n in 2..=16usize {
            let s = Scratch::for_ranks(n, &t);
            for dt in DataType::ALL {
                for bytes in (0..28).map(|k| 1u64 << k).chain([3, 1000, 123457, 999_999]) {
                    let count = bytes / dt.size() as u64;
                    let p = select_allreduce(count, dt, &topo(n), &s, &t);
                    let nb = count * dt.size() as u64;
                    let npkt = nb.div_ceil(8);
                    match p.algo {
                        AllReduceAlgo::OneShot if p.ring => {
                            assert!(npkt * 16 <= crate::device_abi::OX_RING_REGION_BYTES && n <= crate::device_abi::OX_RING_MAX_RANKS)
                        }
                        AllReduceAlgo::OneShot => assert!(npkt * 16 <= (s.ll_half_bytes / n as u64) & !15),
                        AllReduceAlgo::TwoPhase => {
                            assert!(npkt.div_ceil(n as u64) * 16 <= twophase_area(&s, n as u64))
                        }
                        AllReduceAlgo::OneShot128 => {
                            assert!(!p.ring && npkt.div_ceil(15) * 128 <= s.ap128_region_bytes(n));
                            assert!(nb > crate::device_abi::OX_RING_PAYLOAD_BYTES || n > crate::device_abi::OX_RING_MAX_RANKS);
                        }
                        AllReduceAlgo::TwoPhase128 => {
                            assert!(npkt.div_ceil(n as u64).div_ceil(15) * 128 <= s.ap128_region_bytes(n) / 2 / 128 * 128)
                        }
                        AllReduceAlgo::Rsag => {
                            assert!(p.chunk_elems * dt.size() as u64 <= s.rs_slot_bytes);
                            assert!(p.chunk_elems > 0 && p.grid <= s.rs_max_blocks);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rsag_takes_fewer_blocks_at_four_ranks_up_to_16_mib() {
        let t = Tuning::default();
        let s = Scratch::for_ranks(4, &t);
        let plan = |bytes: u64| select_allreduce(bytes / 4, DataType::Float32, &topo(4), &s, &t);
        assert_eq!((plan(8 << 20).algo, plan(8 << 20).grid, plan(8 << 20).block), (AllReduceAlgo::Rsag, 64, 512));
        assert_eq!((plan(16 << 20).grid, plan(16 << 20).block), (64, 1024));
        assert_eq!(plan(32 << 20).grid, 128);
        let old = Tuning { rsag_mid_blocks: Some(128), ..Tuning::default() };
        assert_eq!(select_allreduce((8 << 20) / 4, DataType::Float32, &topo(4), &s, &old).grid, 128);
        // Two ranks keep every block.
        let s2 = Scratch::for_ranks(2, &t);
        assert_eq!(select_allreduce((8 << 20) / 4, DataType::Float32, &topo(2), &s2, &t).grid, 128);
    }

    #[test]
    fn rsag_chunks_are_whole_sixteen_byte_units() {
        let t = Tuning::default();
        let s = Scratch::for_ranks(3, &t);
        for dt in DataType::ALL {
            let p = select_allreduce(100_000_000 / dt.size() as u64, dt, &topo(3), &s, &t);
            assert_eq!(p.algo, AllReduceAlgo::Rsag);
            assert_eq!((p.chunk_elems * dt.size() as u64) % 16, 0, "{dt:?}");
        }
    }

    #[test]
    fn forcing_respects_capacity() {
        let mut t = Tuning::default();
        let s = Scratch::for_ranks(2, &t);
        t.allreduce_algo = Some(AllReduceAlgo::OneShot);
        let big = select_allreduce(64 << 20, DataType::Float32, &topo(2), &s, &t);
        assert_eq!(big.algo, AllReduceAlgo::Rsag, "one-shot cannot hold 256 MiB: fall back");
        let small = select_allreduce((1 << 20) / 4, DataType::Float32, &topo(2), &s, &t);
        assert_eq!(small.algo, AllReduceAlgo::OneShot);
        t.allreduce_algo = Some(AllReduceAlgo::Rsag);
        assert_eq!(select_allreduce(1, DataType::Int8, &topo(2), &s, &t).algo, AllReduceAlgo::Rsag);
    }

    #[test]
    fn one_rank_is_a_single_pass_at_any_size() {
        let t = Tuning::default();
        let s = Scratch::for_ranks(1, &t);
        for count in [1u64, 1 << 20, 1 << 30] {
            let p = select_allreduce(count, DataType::Float32, &topo(1), &s, &t);
            assert_eq!(p.algo, AllReduceAlgo::OneShot);
        }
    }

    #[test]
    fn nccl_proto_restricts_the_choice() {
        let s = Scratch::for_ranks(4, &Tuning::default());
        let simple = Tuning { allowed: super::super::envlists::Allowed::from_values(Some("Simple"), None).unwrap(), ..Default::default() };
        assert_eq!(select_allreduce(2, DataType::Float32, &topo(4), &s, &simple).algo, AllReduceAlgo::Rsag);
        let ll = Tuning { allowed: super::super::envlists::Allowed::from_values(Some("LL"), None).unwrap(), ..Default::default() };
        assert_eq!(select_allreduce(200_000, DataType::Float32, &topo(4), &s, &ll).algo, AllReduceAlgo::TwoPhase);
        let ll128 = Tuning { allowed: super::super::envlists::Allowed::from_values(Some("LL128"), None).unwrap(), ..Default::default() };
        assert_eq!(select_allreduce(200_000, DataType::Float32, &topo(4), &s, &ll128).algo, AllReduceAlgo::TwoPhase128);
        // Beyond the packet scratch, the put-based algorithm is the only one that can run.
        assert_eq!(select_allreduce(100 << 20, DataType::Float32, &topo(4), &s, &ll).algo, AllReduceAlgo::Rsag);
    }

    #[test]
    fn ll128_capacities_hold_whole_lines() {
        let t = Tuning::default();
        for n in 2..=32usize {
            let s = Scratch::for_ranks(n, &t);
            let n64 = n as u64;
            // The largest message each takes still fits, in lines, where the kernels put it.
            let one = oneshot128_capacity(&s, n64);
            assert!(one.div_ceil(8).div_ceil(15) * 128 <= s.ap128_region_bytes(n), "n={n}");
            let two = twophase128_capacity(&s, n64);
            let area = (s.ap128_region_bytes(n) / 2) & !127;
            assert!(two.div_ceil(8).div_ceil(n64).div_ceil(15) * 128 <= area, "n={n}");
            // And the kernels' region arithmetic gives the same region as the host's.
            assert_eq!(s.ap128_region_bytes(n) % 128, 0);
        }
        // At 4 ranks both hold what the defaults give them.
        let s = Scratch::for_ranks(4, &t);
        assert!(oneshot128_capacity(&s, 4) >= 256 << 10 && twophase128_capacity(&s, 4) >= 3 << 20);
        assert!(oneshot128_capacity(&Scratch::for_ranks(2, &t), 2) >= 3 << 20);
    }

    #[test]
    fn ll128_grids_take_a_phase_in_one_pass_where_they_can() {
        let t = Tuning::default();
        // 512 KiB at 4 ranks: 3279 lines a phase, 52 blocks of 512.
        assert_eq!(ap128_shape(3279, 132, &t), (52, 512));
        // 2 MiB at 4 ranks: 13107 lines, 103 blocks of 1024.
        assert_eq!(ap128_shape(13107, 132, &t), (103, 1024));
        // Never more blocks than SMs or OX_MAX_BLOCKS, never fewer than the minimum.
        assert_eq!(ap128_shape(1 << 20, 132, &t), (128, 1024));
        assert_eq!(ap128_shape(1 << 20, 78, &t).0, 78);
        assert_eq!(ap128_shape(1, 132, &t), (DEFAULT_LL_MIN_BLOCKS, 512));
    }

    #[test]
    fn names_round_trip() {
        for a in AllReduceAlgo::ALL {
            assert_eq!(AllReduceAlgo::from_name(a.name()), Some(a));
        }
        assert_eq!(AllReduceAlgo::from_name("RSAG"), Some(AllReduceAlgo::Rsag));
        assert_eq!(AllReduceAlgo::from_name("ring"), None);
    }
}
