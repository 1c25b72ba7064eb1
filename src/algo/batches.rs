//! A group's point-to-point operations cut into launches that the exchange kernel can hold.
//!
//! One exchange launch carries at most `OX_MAX_XFERS` sends, `OX_MAX_XFERS` receives and
//! `OX_MAX_COPIES` sends to self (its arguments are a kernel parameter block). NCCL puts no limit
//! on a group, so a larger group becomes several launches on the stream, one after another.
//!
//! The cut must be the same on both ends of every pair. The k-th send from A to B matches the k-th
//! receive at B from A, and both must go into launches of the same index: each launch pairs its
//! transfers with the peer's launch of that index (modes, stream offsets and flags are per launch).
//! A rank does not know how many operations its peers post to others, so the cut may depend only
//! on what both ends of a pair know: the operation's ordinal within its pair and direction. With
//! `per` = OX_MAX_XFERS / (nranks - 1) operations per pair and direction in each launch, no launch
//! exceeds the limits whatever the peers do. Sends to self pair with receives from self in order,
//! `OX_MAX_COPIES` of them a launch. Launch j holds the ops whose index is j; a rank with nothing
//! in launch j skips it, and so does every peer (no pair has an op there).
//!
//! A group within `per` operations per pair and direction stays one launch. One with more, which
//! fitted one launch before (at 8 ranks, 6 to 40 sends to one peer), now takes several.

use crate::device_abi::{OX_MAX_COPIES, OX_MAX_XFERS};

/// Operations per pair and direction in each launch, at `nranks` ranks.
pub fn per_pair(nranks: usize) -> usize {
    (OX_MAX_XFERS / nranks.saturating_sub(1).max(1)).max(1)
}

/// The launch index of each operation `(is_send, peer)` of rank `me`'s group, in the group's order.
/// Every index from 0 to the largest is used by at least one operation.
pub fn p2p_batches(me: usize, nranks: usize, ops: impl IntoIterator<Item = (bool, usize)>) -> Vec<usize> {
    let per = per_pair(nranks);
    // Ordinals so far per peer: [sends, receives]; self's count sends and receives to self.
    let mut seen: Vec<[usize; 2]> = vec![[0, 0]; nranks.max(me + 1)];
    ops.into_iter()
        .map(|(is_send, peer)| {
            // A peer out of range was refused by the API; the exchange's planning refuses it too.
            let Some(slot) = seen.get_mut(peer) else { return 0 };
            let k = &mut slot[usize::from(!is_send)];
            let ordinal = *k;
            *k += 1;
            ordinal / if peer == me { OX_MAX_COPIES } else { per }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random numbers (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, m: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % m as u64) as usize
        }
    }

    #[test]
    fn a_group_that_fits_stays_one_launch() {
        for n in [1usize, 2, 3, 4, 8, 32] {
            let per = per_pair(n);
            assert!(per * n.saturating_sub(1) <= OX_MAX_XFERS && per >= 1, "n={n}");
            // `per` sends and receives to every peer, and the most sends to self one launch holds.
            let mut ops = Vec::new();
            for p in 0..n {
                let k = if p == 0 { OX_MAX_COPIES } else { per };
                for _ in 0..k {
                    ops.push((true, p));
                    ops.push((false, p));
                }
            }
            assert!(p2p_batches(0, n, ops).iter().all(|&b| b == 0), "n={n}");
        }
        assert_eq!(per_pair(2), OX_MAX_XFERS);
        assert_eq!(per_pair(8), OX_MAX_XFERS / 7);
    }

    #[test]
    fn larger_groups_are_cut_in_order_within_the_limits() {
        // 100 sends to rank 1 and 9 sends to self at 2 ranks.
        let ops: Vec<(bool, usize)> = (0..100).map(|_| (true, 1)).chain((0..9).flat_map(|_| [(true, 0), (false, 0)])).collect();
        let b = p2p_batches(0, 2, ops.clone());
        assert_eq!(&b[..100], &(0..100).map(|i| i / OX_MAX_XFERS).collect::<Vec<_>>()[..]);
        // Each send to self and its receive from self share a launch.
        for i in 0..9 {
            assert_eq!(b[100 + 2 * i], i / OX_MAX_COPIES);
            assert_eq!(b[101 + 2 * i], i / OX_MAX_COPIES);
        }
    }

    /// Random groups on every rank of a communicator, matched pair by pair as NCCL requires: each
    /// launch fits the kernel's limits, the k-th send from A to B and the k-th receive at B from A
    /// land in launches of the same index, the launches used are 0..=max, and every launch of a
    /// rank that has one pairs only with launches its peers make.
    #[test]
    fn both_ends_of_every_pair_agree_and_every_launch_fits() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for n in [2usize, 3, 4, 5, 8, 16, 32] {
            for _ in 0..40 {
                // msgs[a][b]: how many messages a sends b this group (self included).
                let msgs: Vec<Vec<usize>> = (0..n).map(|_| (0..n).map(|_| [0, 1, 2, 7, 45, 90][rng.next(6)]).collect()).collect();
                // Each rank's group: its sends and receives in a random interleaving.
                let groups: Vec<Vec<(bool, usize)>> = (0..n)
                    .map(|me| {
                        let mut pending: Vec<(bool, usize, usize)> =
                            (0..n).flat_map(|p| [(true, p, msgs[me][p]), (false, p, msgs[p][me])]).filter(|x| x.2 > 0).collect();
                        let mut g = Vec::new();
                        while !pending.is_empty() {
                            let i = rng.next(pending.len());
                            g.push((pending[i].0, pending[i].1));
                            pending[i].2 -= 1;
                            if pending[i].2 == 0 {
                                pending.swap_remove(i);
                            }
                        }
                        g
                    })
                    .collect();
                let batches: Vec<Vec<usize>> = (0..n).map(|me| p2p_batches(me, n, groups[me].iter().copied())).collect();
                for me in 0..n {
                    let b = &batches[me];
                    let top = b.iter().copied().max().unwrap_or(0);
                    for j in 0..=top {
                        let ops: Vec<&(bool, usize)> = groups[me].iter().zip(b).filter(|(_, &x)| x == j).map(|(o, _)| o).collect();
                        assert!(!ops.is_empty() || b.is_empty(), "n={n} rank {me}: launch {j} of 0..={top} is empty");
                        let sends = ops.iter().filter(|o| o.0 && o.1 != me).count();
                        let recvs = ops.iter().filter(|o| !o.0 && o.1 != me).count();
                        let selfs = ops.iter().filter(|o| o.0 && o.1 == me).count();
                        let self_recvs = ops.iter().filter(|o| !o.0 && o.1 == me).count();
                        assert!(sends <= OX_MAX_XFERS && recvs <= OX_MAX_XFERS, "n={n} rank {me} launch {j}: {sends} sends, {recvs} receives");
                        assert!(selfs <= OX_MAX_COPIES && selfs == self_recvs, "n={n} rank {me} launch {j}: {selfs} to self, {self_recvs} from self");
                    }
                    // The k-th message me -> p sits in launch j on both ends.
                    for p in (0..n).filter(|&p| p != me) {
                        let at = |r: usize, is_send: bool, peer: usize| -> Vec<usize> {
                            groups[r].iter().zip(&batches[r]).filter(|(o, _)| o.0 == is_send && o.1 == peer).map(|(_, &x)| x).collect()
                        };
                        assert_eq!(at(me, true, p), at(p, false, me), "n={n}: {me} -> {p}");
                    }
                }
            }
        }
    }
}
