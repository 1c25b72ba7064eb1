//! LL128 lines along the chain rank-1 -> rank -> rank+1 (kernels/ll128_chain.cuh): the launch
//! geometry every rank derives alike (the kernel's line ownership pairs block b with block b), and
//! Broadcast's choice of it. Reduce's is in reducing.rs.

use super::envlists::Func;
use super::{exchange_shape, Scratch, Topology, Tuning};

/// Lines of a round each block of an LL128 chain aims for: one pass of a 512-thread block.
const LL128_LINES_PER_BLOCK: u64 = 64;
/// Threads per block of an LL128 chain.
pub const LL128_BLOCK: u32 = 512;

/// The grid of an LL128 chain moving `bytes`: about 64 lines of a round per block (a round is half
/// an LL128 scratch half), within the communicator's block cap. The same on every rank.
pub fn ll128_grid(bytes: u64, topo: &Topology, s: &Scratch) -> u32 {
    let lines = bytes.div_ceil(8).div_ceil(15);
    let sub_lines = (s.ll128_half_bytes / 2 / 128).max(1);
    let (cap, _) = exchange_shape(topo, s);
    lines.min(sub_lines).div_ceil(LL128_LINES_PER_BLOCK).clamp(1, cap as u64) as u32
}

/// Smallest Broadcast sent along the LL128 chain on 3+ ranks, unless tuned
/// (OXCCL_BROADCAST_LL128_MIN_BYTES; 0 = never). Below it the exchange kernel's direct packets,
/// one hop, cost less than the chain's n-1 hops. On 2 ranks the chain is one direct link and is
/// used only when tuned in.
const DEFAULT_BROADCAST_LL128_MIN_BYTES: u64 = 256 << 10;
/// Largest Broadcast (exclusive) sent along the LL128 chain, unless tuned
/// (OXCCL_BROADCAST_LL128_MAX_BYTES); from there on the relay's puts.
const DEFAULT_BROADCAST_LL128_MAX_BYTES: u64 = 64 << 20;

/// Broadcast along the LL128 chain from the root: (grid, block), or None for the exchange kernel.
pub fn broadcast_ll128(bytes: u64, topo: &Topology, s: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    let n = topo.nranks;
    let min = match (t.broadcast_ll128_min_bytes, n) {
        (Some(m), _) => m,
        (None, 2) => 0,
        (None, _) => DEFAULT_BROADCAST_LL128_MIN_BYTES,
    };
    let max = t.broadcast_ll128_max_bytes.unwrap_or(DEFAULT_BROADCAST_LL128_MAX_BYTES);
    if n < 2 || min == 0 || bytes < min || bytes >= max || !t.allowed.packets[Func::Broadcast as usize] {
        return None;
    }
    Some((ll128_grid(bytes, topo, s), LL128_BLOCK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::envlists::Allowed;

    #[test]
    fn broadcast_takes_the_chain_from_a_quarter_mib_on_three_or_more_ranks() {
        let t = Tuning::default();
        for n in [2usize, 3, 4, 8] {
            let s = Scratch::for_ranks(n, &t);
            let topo = Topology { nranks: n, sm_count: 132 };
            for bytes in [1u64, 4096, (256 << 10) - 1, 256 << 10, 3_000_017, (64 << 20) - 1, 64 << 20, 1 << 30] {
                let p = broadcast_ll128(bytes, &topo, &s, &t);
                let want = n >= 3 && (256 << 10..64 << 20).contains(&bytes);
                assert_eq!(p.is_some(), want, "n={n} {bytes} B");
                if let Some((grid, block)) = p {
                    assert!(grid >= 1 && grid <= s.rs_max_blocks && grid <= 132 && block % 32 == 0);
                    assert_eq!(grid, ll128_grid(bytes, &topo, &s));
                }
            }
        }
        // Tuned: any rank count from 2, own bounds; LL/LL128 turned off for Broadcast: never.
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
        assert_eq!(ll128_grid(1, &topo, &s), 1);
        assert_eq!((ll128_grid(1 << 20, &topo, &s), ll128_grid(16 << 20, &topo, &s)), (128, 128));
        let few = Topology { nranks: 4, sm_count: 20 };
        assert_eq!(ll128_grid(16 << 20, &few, &s), 20);
    }
}
