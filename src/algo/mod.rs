//! Algorithm choice: pure functions of (collective, bytes, datatype, topology, tuning), with no
//! CUDA and no globals, so every threshold is unit-tested on the CPU. All ranks of a communicator
//! must make the same choice for the same call; the inputs are identical on every rank.

mod allreduce;
pub mod batches;
pub mod ce_direct;
pub mod chain;
pub mod collcfg;
pub mod cost;
pub mod counting;
pub mod envlists;
pub mod group;
mod exchange;
pub mod pdl;
pub mod policy;
mod reducing;
pub mod symm;
mod tuning;

pub use allreduce::{select_allreduce, AllReduceAlgo, AllReducePlan};
pub use exchange::{
    allgather_shape, broadcast_relay, broadcast_spec, exchange_shape, gather_chunk_cap, offer_candidates, plan_exchange, rooted_grid, select_gather_oneshot, select_p2p_oneshot, ExchangePlan,
    ExchangeSpec, LocalCopy, Transfer,
};
pub use reducing::{select_reduce, select_reducescatter, ReducePlan};
pub use tuning::Tuning;

/// What the selector knows about a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Ranks of the communicator.
    pub nranks: usize,
    /// Thread blocks a kernel may use: the multiprocessors of the (smallest) GPU of the
    /// communicator, capped by maxCTAs (topo::block_budget).
    pub sm_count: u32,
}

/// Scratch memory every rank of a communicator allocates at init; sizes bound what algorithms may
/// use. Identical on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scratch {
    /// One half of the LL packet scratch (two halves alternate by flag parity).
    pub ll_half_bytes: u64,
    /// One half of the LL128 line scratch (the same alternation; kernels/prims/ll128.cuh).
    pub ll128_half_bytes: u64,
    /// One half of the all-pairs LL128 area (one region per source rank, as the LL halves).
    pub ap128_half_bytes: u64,
    /// One (block, source) slot of the put-based scratch.
    pub rs_slot_bytes: u64,
    /// Blocks the put-based scratch has slots for.
    pub rs_max_blocks: u32,
}

impl Scratch {
    /// Sizes for `nranks` ranks: 8 MiB LL and LL128 halves; 128 blocks of put-based slots (128 beat 64 by
    /// 5-6% at 512 MiB on H200, BENCHMARKS.md), slots shrinking as ranks grow so the put-based
    /// scratch stays at about 2 x 128 blocks x 512 KiB whatever the rank count.
    pub fn for_ranks(nranks: usize, tuning: &Tuning) -> Scratch {
        if nranks <= 1 {
            // A single rank exchanges nothing; kernels (PreMulSum scaling) never touch scratch.
            return Scratch { ll_half_bytes: 4096, ll128_half_bytes: 4096, ap128_half_bytes: 4096, rs_slot_bytes: 4096, rs_max_blocks: 1 };
        }
        let n = nranks as u64;
        let slot = tuning.rs_slot_bytes.unwrap_or_else(|| (512 * 1024 / n).clamp(32 * 1024, 256 * 1024));
        Scratch {
            // Whole 16-byte packets: the second half and the ring area after both start at
            // `half` and `2 half`, where packets take 16-byte stores (OXCCL_LL_HALF_BYTES may be any).
            ll_half_bytes: tuning.ll_half_bytes.unwrap_or(8 << 20) & !15,
            // Whole lines, two sub-buffers per half. 8 MiB halves (rounds of 4 MiB of lines) beat
            // 4 MiB at 64-128 MiB on H200 x4 (Reduce 416.5 against 436.0 us at 128 MiB, Broadcast
            // 410.4 against 428.3), 16 MiB loses at 128 MiB for Broadcast (457.3) and both lose at
            // 256 MiB, where the put chain and the relay take over.
            ll128_half_bytes: tuning.ll128_half_bytes.unwrap_or(8 << 20) & !255,
            // 8 MiB halves: LL128 two-phase AllReduces of up to 3.75 MiB at any rank count, and
            // one-shots of 3.75 MiB at 2 ranks (algo::allreduce), 16 MiB a rank in all. Larger
            // messages go faster put-based.
            ap128_half_bytes: tuning.ap128_half_bytes.unwrap_or(8 << 20) & !4095,
            rs_slot_bytes: slot & !15,
            rs_max_blocks: tuning.rs_blocks.unwrap_or(128).clamp(1, crate::device_abi::OX_MAX_BLOCKS as u32),
        }
    }

    /// Bytes of LL scratch each rank allocates (both halves).
    pub fn ll_bytes(&self) -> u64 {
        2 * self.ll_half_bytes
    }

    /// Bytes of the one-shot AllReduce's ring area each rank allocates right after its LL halves
    /// (kernels/prims/ll_flags.cuh, ox_ring_at): OX_RING_SLOTS slots of one region per source, for 2 to
    /// OX_RING_MAX_RANKS ranks; none otherwise (2 MiB at 2 ranks, 8 MiB at 8).
    pub fn ring_bytes(nranks: usize) -> u64 {
        use crate::device_abi::{OX_RING_MAX_RANKS, OX_RING_REGION_BYTES, OX_RING_SLOTS};
        if (2..=OX_RING_MAX_RANKS).contains(&nranks) {
            OX_RING_SLOTS * nranks as u64 * OX_RING_REGION_BYTES
        } else {
            0
        }
    }

    /// Bytes of LL128 scratch each rank allocates (both halves).
    pub fn ll128_bytes(&self) -> u64 {
        2 * self.ll128_half_bytes
    }

    /// Bytes of the all-pairs LL128 area each rank allocates (both halves).
    pub fn ap128_bytes(&self) -> u64 {
        2 * self.ap128_half_bytes
    }

    /// Bytes of one source's region in one half of the all-pairs LL128 area: whole 128-byte lines
    /// (kernels/colls/allreduce.cu, ox_ap128_region_bytes computes the same).
    pub fn ap128_region_bytes(&self, nranks: usize) -> u64 {
        (self.ap128_half_bytes / nranks.max(1) as u64) & !127
    }

    /// Bytes of put-based scratch each rank allocates (RS and AG areas).
    pub fn rs_bytes(&self, nranks: usize) -> u64 {
        2 * self.rs_max_blocks as u64 * nranks as u64 * self.rs_slot_bytes
    }
}

#[cfg(test)]
mod plan_identity_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_bounded_for_every_rank_count() {
        let t = Tuning::default();
        assert!(Scratch::for_ranks(1, &t).rs_bytes(1) <= 8192);
        for n in 2..=32 {
            let s = Scratch::for_ranks(n, &t);
            assert_eq!(s.rs_slot_bytes % 16, 0);
            assert!(s.rs_bytes(n) <= 256 << 20, "n={n}: {} bytes", s.rs_bytes(n));
            assert!(s.rs_slot_bytes >= 32 * 1024);
        }
    }

    #[test]
    fn every_tuned_scratch_area_starts_on_sixteen_bytes() {
        // Packets and lines are stored 16 bytes at a time into the second half (at `half`), the ring
        // area (at `2 half`), every region and slot: a tuned size must not move them off 16 bytes.
        for odd in [65_537u64, 100_003, (1 << 20) + 8, (8 << 20) + 4] {
            let t = Tuning { ll_half_bytes: Some(odd), ll128_half_bytes: Some(odd), ap128_half_bytes: Some(odd), rs_slot_bytes: Some(odd), ..Tuning::default() };
            for n in 2..=8 {
                let s = Scratch::for_ranks(n, &t);
                assert_eq!(s.ll_half_bytes % 16, 0, "{odd}: LL half");
                assert_eq!(s.ll128_half_bytes % 128, 0, "{odd}: LL128 half");
                assert_eq!(s.ap128_half_bytes % 128, 0, "{odd}: all-pairs LL128 half");
                assert_eq!(s.rs_slot_bytes % 16, 0, "{odd}: put slot");
            }
        }
    }
}
