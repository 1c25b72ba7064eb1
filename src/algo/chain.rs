//! LL128 lines along the chain rank-1 -> rank -> rank+1 (kernels/colls/ll128_chain.cuh): the launch
//! geometry every rank derives alike (the kernel's line ownership pairs block b with block b), and
//! Broadcast's choice of it (on any rank count: on 2 it is one direct link). Reduce's is in reducing.rs.

use super::envlists::Func;
use super::{exchange_shape, Scratch, Topology, Tuning};

/// Lines of a round each block of an LL128 chain aims for, unless tuned
/// (OXCCL_LL128_LINES_PER_BLOCK): one pass of a 512-thread block.
const LL128_LINES_PER_BLOCK: u64 = 64;
/// Threads per block of an LL128 chain, unless tuned (OXCCL_LL128_THREADS). Any multiple of 32
/// works: a warp takes 4 lines per pass.
const LL128_BLOCK: u32 = 512;

/// The launch shape of an LL128 chain moving `bytes`: about 64 lines of a round per block (a round
/// is half an LL128 scratch half), within the communicator's block cap. The grid is the same on
/// every rank (the tuning variables must be too, as for every grid knob).
pub fn ll128_shape(bytes: u64, topo: &Topology, s: &Scratch, t: &Tuning) -> (u32, u32) {
    let lines = bytes.div_ceil(8).div_ceil(15);
    let sub_lines = (s.ll128_half_bytes / 2 / 128).max(1);
    let (cap, _) = exchange_shape(topo, s);
    let per_block = t.ll128_lines_per_block.unwrap_or(LL128_LINES_PER_BLOCK);
    let grid = lines.min(sub_lines).div_ceil(per_block).clamp(1, cap as u64) as u32;
    (grid, t.ll128_threads.unwrap_or(LL128_BLOCK))
}

/// Broadcast along the LL128 chain, unless tuned (OXCCL_BROADCAST_LL128_MIN_BYTES, 0 = never, and
/// OXCCL_BROADCAST_LL128_MAX_BYTES): from where it beats the exchange kernel's direct packets (one
/// hop, but the root sends n-1 streams) to where the relay's puts (3+ ranks) or direct puts (2)
/// move more per second. H200, us, chain / exchange kernel / NCCL 2.28.9, `-n 20`:
/// 4 ranks 6.90 / 6.37 / - at 64 KiB, 6.37 / 7.66 / 10.25 at 128 KiB, 7.61 / 13.86 / 10.23 at
/// 512 KiB, 58.9 / 83.3 / 66.7 at 16 MiB, 425 / 433 / 394 at 128 MiB, 872 / 831 / 762 at 256 MiB;
/// 3 ranks 6.52 / 8.36 / 8.52 at 128 KiB, 218.5 / 225.0 / 207.7 at 64 MiB, 427.7 / 420.1 / 392.2 at
/// 128 MiB; 2 ranks 7.06 / 6.33 / 8.59 at 32 KiB, 6.21 / 6.77 / 8.54 at 64 KiB, 111.3 / 117.3 /
/// 111.4 at 32 MiB, 214.8 / 205.6 / 205.0 at 64 MiB (all with 4 MiB LL128 halves). With 8 MiB
/// halves (BENCHMARKS.md of 2026-11-21, dd65c40), 4 ranks: 410.4 / 433.0 / 394.4 at 128 MiB,
/// 1112.9 / 832.8 / 767.3 at 256.
fn default_broadcast_ll128_bounds(nranks: usize) -> (u64, u64) {
    if nranks <= 2 {
        (64 << 10, 64 << 20)
    } else {
        (128 << 10, 256 << 20)
    }
}

/// Largest Broadcast the one-shot packet kernel takes by default: everything below the LL128
/// chain's range, at 2-4 ranks. Above 4 ranks none until it is measured on 8 GPUs.
fn default_broadcast_oneshot_max(nranks: usize) -> u64 {
    if nranks <= 4 {
        default_broadcast_ll128_bounds(nranks).0 - 1
    } else {
        0
    }
}

/// Broadcast as one-way packets from the root (kernels/colls/broadcast.cu, `ox_broadcast_oneshot`):
/// (grid, block), or None. Bounded by what one source region of a rank's LL scratch holds, as
/// the one-shot AllReduce is; the shape is that kernel's for the same packets.
pub fn broadcast_oneshot(bytes: u64, topo: &Topology, s: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    let n = topo.nranks;
    if n < 2 || bytes == 0 || !t.allowed.packets[Func::Broadcast as usize] {
        return None;
    }
    let max = t.broadcast_oneshot_max_bytes.unwrap_or_else(|| default_broadcast_oneshot_max(n)).min(super::allreduce::oneshot_capacity(s, n as u64));
    (bytes <= max).then(|| super::allreduce::ll_shape(bytes.div_ceil(8), topo.sm_count, t))
}

/// Broadcast along the LL128 chain from the root: (grid, block), or None for the exchange kernel.
pub fn broadcast_ll128(bytes: u64, topo: &Topology, s: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    let n = topo.nranks;
    let (dmin, dmax) = default_broadcast_ll128_bounds(n);
    let min = t.broadcast_ll128_min_bytes.unwrap_or(dmin);
    let max = t.broadcast_ll128_max_bytes.unwrap_or(dmax);
    if n < 2 || min == 0 || bytes < min || bytes >= max || !t.allowed.packets[Func::Broadcast as usize] {
        return None;
    }
    Some(ll128_shape(bytes, topo, s, t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::envlists::Allowed;

    #[test]
    fn small_broadcasts_take_the_one_shot_kernel_up_to_the_chain() {
        for n in [2usize, 3, 4, 8] {
            let mut t = Tuning::default();
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            let chain_min = default_broadcast_ll128_bounds(n).0;
            if n <= 4 {
                for bytes in [1u64, 8, 4096, chain_min - 1] {
                    let (grid, block) = broadcast_oneshot(bytes, &topo, &s, &t).unwrap_or_else(|| panic!("{bytes} B at {n} ranks"));
                    assert!(grid >= 1 && block >= 64, "{grid} x {block}");
                    assert!(broadcast_ll128(bytes, &topo, &s, &t).is_none(), "{bytes} B: below the chain");
                }
                assert!(broadcast_oneshot(chain_min, &topo, &s, &t).is_none());
                assert!(broadcast_ll128(chain_min, &topo, &s, &t).is_some(), "the chain takes over at {chain_min}");
            } else {
                assert!(broadcast_oneshot(8, &topo, &s, &t).is_none(), "off above 4 ranks until measured");
            }
            assert!(broadcast_oneshot(0, &topo, &s, &t).is_none(), "nothing to move");
            // The scratch bounds it whatever the setting; 0 turns it off; NCCL_PROTO without packets too.
            t.broadcast_oneshot_max_bytes = Some(u64::MAX);
            let cap = crate::algo::allreduce::oneshot_capacity(&s, n as u64);
            assert!(broadcast_oneshot(cap, &topo, &s, &t).is_some() && broadcast_oneshot(cap + 1, &topo, &s, &t).is_none());
            t.broadcast_oneshot_max_bytes = Some(0);
            assert!(broadcast_oneshot(8, &topo, &s, &t).is_none());
            t.broadcast_oneshot_max_bytes = None;
            t.allowed = Allowed::from_values(Some("Simple"), None).unwrap();
            assert!(broadcast_oneshot(8, &topo, &s, &t).is_none());
        }
    }

    #[test]
    fn broadcast_takes_the_chain_at_mid_sizes() {
        let t = Tuning::default();
        for n in [2usize, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            let (lo, hi) = if n == 2 { (64u64 << 10, 64u64 << 20) } else { (128 << 10, 256 << 20) };
            for bytes in [1u64, 4096, 64 << 10, (128 << 10) - 1, 128 << 10, 3_000_017, (64 << 20) - 1, 64 << 20, 128 << 20, (256 << 20) - 1, 256 << 20, 1 << 30] {
                let p = broadcast_ll128(bytes, &topo, &s, &t);
                let want = (lo..hi).contains(&bytes);
                assert_eq!(p.is_some(), want, "n={n} {bytes} B");
                if let Some((grid, block)) = p {
                    assert!(grid >= 1 && grid <= s.rs_max_blocks && grid <= 132 && block % 32 == 0);
                    assert_eq!((grid, block), ll128_shape(bytes, &topo, &s, &t));
                }
            }
        }
        // Tuned bounds; LL/LL128 turned off for Broadcast: never.
        let tuned = Tuning { broadcast_ll128_min_bytes: Some(1), broadcast_ll128_max_bytes: Some(1 << 30), ..Default::default() };
        let topo = Topology { nranks: 2, sm_count: 132 };
        let s = Scratch::for_ranks(2, &tuned);
        assert!(broadcast_ll128(8, &topo, &s, &tuned).is_some() && broadcast_ll128(512 << 20, &topo, &s, &tuned).is_some());
        let simple = Tuning { allowed: Allowed::from_values(Some("broadcast:Simple"), None).unwrap(), ..tuned.clone() };
        assert!(broadcast_ll128(1 << 20, &topo, &s, &simple).is_none());
        let off = Tuning { broadcast_ll128_min_bytes: Some(0), ..Default::default() };
        assert!(broadcast_ll128(1 << 20, &Topology { nranks: 4, sm_count: 132 }, &s, &off).is_none());
    }

    #[test]
    fn ll128_grid_covers_a_round_within_the_cap() {
        let t = Tuning::default();
        let topo = Topology { nranks: 4, sm_count: 132 };
        let s = Scratch::for_ranks(4, &t);
        assert_eq!(ll128_shape(1, &topo, &s, &t), (1, 512));
        assert_eq!((ll128_shape(1 << 20, &topo, &s, &t).0, ll128_shape(16 << 20, &topo, &s, &t).0), (128, 128));
        let few = Topology { nranks: 4, sm_count: 20 };
        assert_eq!(ll128_shape(16 << 20, &few, &s, &t).0, 20);
        // Tuned: fewer lines per block means more blocks (up to the cap); the block size as given.
        let tuned = Tuning { ll128_lines_per_block: Some(512), ll128_threads: Some(1024), ..Default::default() };
        assert_eq!(ll128_shape(16 << 20, &topo, &s, &tuned), (64, 1024)); // 4 MiB rounds: 32768 lines
    }
}
