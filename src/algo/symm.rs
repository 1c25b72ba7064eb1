//! Collectives over symmetric windows (src/symmem): which take the direct kernel, with which grid.
//!
//! An AllGather whose output lies in an `NCCL_WIN_COLL_SYMMETRIC` window is written straight into
//! every rank's output through the flat space (kernels/colls/symm_allgather.cu). Every rank must choose
//! alike, as the kernel's barriers pair blocks by index: the choice depends on the piece's size,
//! the grid on the size and the smallest GPU, and on each rank's own finding that the output lies
//! in such a window. That last part rests on NCCL's rule for symmetric windows: every rank passes
//! buffers at the same offset of the same windows.

use super::envlists::Func;
use super::{Topology, Tuning};
use crate::device_abi::OX_MAX_BLOCKS;

/// Pieces (bytes each rank contributes) taken by default, from 2 x H200 (BENCHMARKS.md of
/// 2026-11-28, 2bbec39; us at 2 ranks, direct / the other paths): below 512 KiB the one-shot packet
/// kernel is faster (256 KiB: 8.76 / 5.58); 512 KiB-16 MiB the direct kernel wins (1 MiB: 10.22 /
/// 15.74, 2 MiB: 13.45 / 31.21, 16 MiB: 57.85 / 66.04); 32 MiB ties (110.56 / 110.59); from 64 MiB
/// the put paths, which move the data with fewer SM stores per byte, win (212.85 / 196.13).
pub const DEFAULT_ALLGATHER_MIN_BYTES: u64 = 512 << 10;
/// Largest piece the direct kernel takes by default.
pub const DEFAULT_ALLGATHER_MAX_BYTES: u64 = 32 << 20;
/// Bytes a block writes to each rank, by default, before another block is added.
const BYTES_PER_BLOCK: u64 = 32 << 10;
const DEFAULT_THREADS: u32 = 512;

/// The direct AllGather's launch shape for a piece of `piece` bytes, or None for the other paths.
pub fn allgather(piece: u64, topo: &Topology, t: &Tuning) -> Option<(u32, u32)> {
    let min = t.symm_allgather_min_bytes.unwrap_or(DEFAULT_ALLGATHER_MIN_BYTES).max(1);
    let max = t.symm_allgather_max_bytes.unwrap_or(DEFAULT_ALLGATHER_MAX_BYTES);
    if topo.nranks < 2 || piece < min || piece > max || !t.allowed.puts[Func::AllGather as usize] {
        return None;
    }
    let cap = topo.sm_count.clamp(1, OX_MAX_BLOCKS as u32);
    let grid = t.symm_blocks.unwrap_or_else(|| piece.div_ceil(BYTES_PER_BLOCK).min(cap as u64) as u32).max(t.min_blocks.unwrap_or(1)).clamp(1, cap);
    Some((grid, t.symm_threads.unwrap_or(DEFAULT_THREADS)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_grids() {
        let topo = Topology { nranks: 2, sm_count: 132 };
        let t = Tuning::default();
        assert_eq!(allgather(256 << 10, &topo, &t), None, "small pieces stay on the packet kernel");
        assert_eq!(allgather(512 << 10, &topo, &t), Some((16, 512)));
        assert_eq!(allgather(32 << 20, &topo, &t), Some((OX_MAX_BLOCKS as u32, 512)), "at most the blocks the semaphores have");
        assert_eq!(allgather(32 << 20, &Topology { nranks: 2, sm_count: 60 }, &t), Some((60, 512)), "and the SMs");
        assert_eq!(allgather(64 << 20, &topo, &t), None, "large pieces stay on the put paths");
        assert_eq!(allgather(1 << 20, &Topology { nranks: 1, sm_count: 132 }, &t), None, "one rank: nothing to gather");
        let t = Tuning { symm_allgather_max_bytes: Some(0), ..Tuning::default() };
        assert_eq!(allgather(1 << 20, &topo, &t), None, "max 0: never");
        let t = Tuning { symm_allgather_min_bytes: Some(0), symm_blocks: Some(999), symm_threads: Some(256), ..Tuning::default() };
        assert_eq!(allgather(8, &topo, &t), Some((128, 256)), "min 0: every size; grids capped");
        let t = Tuning { symm_allgather_max_bytes: Some(u64::MAX), ..Tuning::default() };
        assert!(allgather(1 << 30, &topo, &t).is_some(), "a larger max takes larger pieces");
        let mut t = Tuning::default();
        t.allowed.puts[Func::AllGather as usize] = false;
        assert_eq!(allgather(1 << 20, &topo, &t), None, "NCCL_PROTO without Simple");
    }
}
