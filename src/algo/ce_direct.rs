//! Which transfers the copy-engine direct path takes (src/transport/ce_direct.rs): large one-way
//! or two-way streams between two ranks in separate processes of one host, copied by the sender's
//! copy engine straight into the receiver's buffer. One copy engine moves 391-396 GB/s each way
//! over an NV18 pair where SM copies reach 365-373 (scripts/lab/oneway_lab.cu in git before 7bcb34d, BENCHMARKS.md
//! of 2026-11-26, cf9da02); each transfer pays a host handshake and two stream waits, so only large
//! ones gain.
//!
//! The decision is per pair of ranks, and both ranks of a pair must reach it alike, from values
//! both see: a send's byte count equals the matching receive's, so this rank's (sends, receives)
//! with a peer are the peer's (receives, sends) with this rank, and every condition below is
//! symmetric in the two lists. Local copies do not enter it (one side of a Gather has one, the
//! other none); the path runs any number of them beside the transfers. Transfers with other
//! peers do not enter it either: a launch may send one peer's stream by copy engine and another
//! by the exchange kernel.

use super::envlists::Func;
use super::{ExchangeSpec, Tuning};

/// Smallest transfer taken unless tuned (OXCCL_CE_DIRECT_MIN_BYTES; 0 = never), at two ranks and
/// for Send/Recv and Gather beyond. At 4-32 MiB the path beat the SM kernels by 20-50% for
/// Send/Recv, Gather, Scatter, AllGather and AlltoAll and tied them for Broadcast (H200 x2,
/// BENCHMARKS.md of 2026-11-26, cf9da02); at 4 MiB AllGather's 2 MiB pieces were not taken. At 4
/// ranks Send/Recv gained from 4 MiB (142 against 110 GB/s at 4 MB, 272 against 221 at 16 MB) and
/// Gather from 16 MB (267 against 204; BENCHMARKS.md of 2026-11-26, 10e77a7).
pub const DEFAULT_MIN_BYTES: u64 = 4 << 20;

/// Beyond two ranks, where a root or every rank sends to several peers one copy after another,
/// each copy's waits and stream operations cost more than the SM kernels lose, up to (busbw,
/// copy engines / SM kernels, 4 x H200, BENCHMARKS.md of 2026-11-26, 10e77a7):
/// - AlltoAll: 130 / 187 GB/s at 16 MB, 250 / 265 at 64 MB; from 128 MB (32 MiB pieces) the
///   copy engines lead: 306 / 288-300 at 128 MB, 338 / 320 at 256 MB, 363-365 / 328-330 at 512 MB.
/// - AllGather: even at 128 MB (302-305 / 304-305; one run of the copy engines fell to 236 on
///   H100), ahead from 256 MB (64 MiB pieces): 341-344 / 323-328, 361-364 / 335-338 at 512.
/// - Scatter: 330 / 339 still at 128 MB, 360 / 353 at 256 MB, 379 / 360 at 512.
///
/// AlltoAll's smallest transfer beyond two ranks.
pub const ALLTOALL_MIN_BYTES: u64 = 32 << 20;
/// AllGather's, Scatter's and Broadcast's beyond two ranks.
pub const SPREAD_MIN_BYTES: u64 = 64 << 20;

/// Smallest transfer the path takes inside a CUDA graph unless tuned (OXCCL_CE_DIRECT_MIN_BYTES,
/// or the zero CTA policy's minimum). In a graph the exchange kernel pays no host launch, while
/// the path still adds a signal kernel and a wait kernel per transfer. 2 x H200, `-G 20`, us per
/// call, exchange kernel / copy engines (2026-11-30, zero-graph branch 5b343c9 against main
/// af6a0e4, same call): Send/Recv 8 MiB 39.5 / 43.1, 16 MiB 66.6 / 64.9, 32 MiB 130.5 / 108.5,
/// 64 MiB 218.1 / 193.9; AllGather in place, 32 MiB pieces, 129.6 / 107.4; 16 MiB pieces out of
/// place 71.6 / 79.0.
pub const GRAPH_MIN_BYTES: u64 = 32 << 20;

/// Smallest transfer the path takes inside a CUDA graph, or None where it takes none there
/// (OXCCL_CE_DIRECT_GRAPH=0): OXCCL_CE_DIRECT_MIN_BYTES (or the zero policy's) where set, else
/// GRAPH_MIN_BYTES. Beyond two ranks `pairs` still applies its own minimum first.
pub fn graph_min_bytes(t: &Tuning) -> Option<u64> {
    (!t.ce_direct_graph_off).then(|| t.ce_direct_min_bytes.unwrap_or(GRAPH_MIN_BYTES))
}

/// Whether a pair whose transfers (`send`, `recv` bytes; 0 = none) the path takes eagerly takes
/// them inside a CUDA graph too, with `graph_min` from `graph_min_bytes`. Symmetric: the peer's
/// (send, recv) are this rank's (recv, send).
pub fn takes_in_graph(send: u64, recv: u64, graph_min: Option<u64>) -> bool {
    graph_min.is_some_and(|m| m > 0 && (send | recv) != 0 && [send, recv].iter().all(|&b| b == 0 || b >= m))
}

/// The operation a launch's transfers serve (`ExchangeSpec::traffic`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Traffic {
    /// A group of Send/Recv.
    #[default]
    P2p,
    /// ncclGather.
    Gather,
    /// ncclScatter.
    Scatter,
    /// ncclAllGather.
    AllGather,
    /// ncclAlltoAll.
    AlltoAll,
    /// ncclBroadcast.
    Broadcast,
}

/// Whether the path may run at all (OXCCL_CE_DIRECT_MIN_BYTES not 0).
pub fn min_bytes(t: &Tuning) -> u64 {
    t.ce_direct_min_bytes.unwrap_or(DEFAULT_MIN_BYTES)
}

/// Smallest transfer the path takes for `traffic` on `nranks` ranks: OXCCL_CE_DIRECT_MIN_BYTES
/// for everything where set, else the measured crossings above.
pub fn min_bytes_for(traffic: Traffic, nranks: usize, t: &Tuning) -> u64 {
    if let Some(m) = t.ce_direct_min_bytes {
        return m;
    }
    match traffic {
        _ if nranks <= 2 => DEFAULT_MIN_BYTES,
        Traffic::P2p | Traffic::Gather => DEFAULT_MIN_BYTES,
        Traffic::AlltoAll => ALLTOALL_MIN_BYTES,
        Traffic::AllGather | Traffic::Scatter | Traffic::Broadcast => SPREAD_MIN_BYTES,
    }
}

/// Pieces below this that the path would take alone go instead, in a group of two or more lone
/// non-reducing collectives, with the group's other transfers through the exchange kernel as one
/// launch (launch::group): the path takes one send and one receive a pair, so each would launch
/// alone and pay its handshake. Groups of eight, 2 x H200, per operation us, alone by copy engine /
/// one exchange launch / NCCL 2.28.9 (2026-11-30, 962d1e3, `<coll>_perf -m 8 -b 8M -e 256M -f 2`):
/// AllGather 4 MiB pieces 30.50 / 19.82 / 20.69, 16 MiB 65.68 / 60.97 / 69.22, 32 MiB 110.14 /
/// 108.76 / 129.57, 64 MiB 195.44 / 208.99 / 240.60; Scatter 32 MiB 102.75 / 104.94 / 98.36;
/// Broadcast 64 MiB 185.86 / 203.18 / 184.45. From 32 MiB the copy engines' pace outweighs the
/// handshakes.
pub const GROUPED_EXCHANGE_MAX_BYTES: u64 = 32 << 20;

/// Whether a piece of `bytes` that the path takes alone (at least `min_bytes_for`) stays with it
/// in a group whose lone non-reducing collectives otherwise run as one exchange launch:
/// `engine_moves` (the zero CTA policy: every transfer by copy engine) or at least
/// GROUPED_EXCHANGE_MAX_BYTES. Pieces below the path's minimum never do.
pub fn keeps_grouped(bytes: u64, min: u64, engine_moves: bool) -> bool {
    min > 0 && bytes >= min && (engine_moves || bytes >= GROUPED_EXCHANGE_MAX_BYTES)
}

/// The peers whose transfers of one launch the path takes, in the order the sends should go
/// (from the next rank up, so that ranks start on different peers): each pair has at most one
/// send and one receive, none relayed, each at least the minimum (`min_bytes_for`), and at least
/// one of them, and a link (`linked`, the same on both ranks). `func`: the collective NCCL_PROTO
/// may restrict (None for Send/Recv, AlltoAll, Gather, Scatter); the path counts as its Simple
/// protocol.
pub fn pairs(spec: &ExchangeSpec, func: Option<Func>, me: usize, nranks: usize, t: &Tuning, linked: impl Fn(usize) -> bool) -> Vec<usize> {
    let min = min_bytes_for(spec.traffic, nranks, t);
    if nranks < 2 || me >= nranks || min == 0 || spec.put_chunk.is_some() || func.is_some_and(|f| !t.allowed.puts[f as usize]) {
        return Vec::new();
    }
    // Every exchange launch asks: most move nothing this large, and need no scan per peer.
    if spec.sends.iter().chain(&spec.recvs).all(|x| x.bytes < min) {
        return Vec::new();
    }
    (1..nranks)
        .map(|k| (me + k) % nranks)
        .filter(|&p| {
            let sends = spec.sends.iter().filter(|x| x.peer == p);
            let recvs = spec.recvs.iter().filter(|x| x.peer == p);
            let (ns, nr) = (sends.clone().count(), recvs.clone().count());
            ns + nr > 0 && ns <= 1 && nr <= 1 && sends.chain(recvs).all(|x| x.relay.is_none() && x.bytes >= min) && linked(p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_take_the_path_from_their_own_minimum_alike_on_both_ranks() {
        let t = Tuning::default();
        let m = graph_min_bytes(&t);
        assert_eq!(m, Some(GRAPH_MIN_BYTES));
        assert!(!takes_in_graph(DEFAULT_MIN_BYTES, 0, m), "eager's minimum is not the graph's");
        assert!(takes_in_graph(GRAPH_MIN_BYTES, 0, m));
        assert!(!takes_in_graph(0, 0, m), "nothing to move");
        for (s, r) in [(GRAPH_MIN_BYTES, GRAPH_MIN_BYTES - 1), (GRAPH_MIN_BYTES, 1 << 40), (0, GRAPH_MIN_BYTES), (5, 0)] {
            assert_eq!(takes_in_graph(s, r, m), takes_in_graph(r, s, m), "({s}, {r}) seen from the peer");
        }
        assert!(!takes_in_graph(GRAPH_MIN_BYTES, GRAPH_MIN_BYTES - 1, m), "every transfer of the pair must qualify");
        let zero = Tuning { ce_direct_min_bytes: Some(1), ..Tuning::default() };
        assert!(takes_in_graph(1, 0, graph_min_bytes(&zero)), "the zero policy's minimum holds in graphs");
        let never = Tuning { ce_direct_min_bytes: Some(0), ..Tuning::default() };
        assert!(!takes_in_graph(1 << 40, 0, graph_min_bytes(&never)), "OXCCL_CE_DIRECT_MIN_BYTES=0 turns the path off everywhere");
        let off = Tuning { ce_direct_graph_off: true, ..Tuning::default() };
        assert_eq!(graph_min_bytes(&off), None);
        assert!(!takes_in_graph(1 << 40, 1 << 40, None));
    }

    #[test]
    fn grouped_pieces_leave_the_path_below_32_mib_unless_engines_move_everything() {
        let min = DEFAULT_MIN_BYTES;
        assert!(!keeps_grouped(min - 1, min, false));
        assert!(!keeps_grouped(min, min, false));
        assert!(!keeps_grouped(GROUPED_EXCHANGE_MAX_BYTES - 1, min, false));
        assert!(keeps_grouped(GROUPED_EXCHANGE_MAX_BYTES, min, false));
        assert!(keeps_grouped(min, min, true));
        assert!(keeps_grouped(1, 1, true));
        assert!(!keeps_grouped(GROUPED_EXCHANGE_MAX_BYTES, 0, true), "the path off (minimum 0) keeps nothing");
    }
    use crate::algo::{LocalCopy, Transfer};

    fn x(peer: usize, bytes: u64) -> Transfer {
        Transfer { peer, ptr: 0x1000, bytes, relay: None }
    }

    fn spec(sends: Vec<Transfer>, recvs: Vec<Transfer>, copies: usize) -> ExchangeSpec {
        ExchangeSpec { sends, recvs, copies: vec![LocalCopy { src: 1, dst: 2, bytes: 3 }; copies], ..Default::default() }
    }

    fn takes(s: &ExchangeSpec, func: Option<Func>, me: usize, n: usize, t: &Tuning) -> bool {
        !pairs(s, func, me, n, t, |_| true).is_empty()
    }

    #[test]
    fn both_sides_of_every_pattern_decide_alike() {
        let t = Tuning::default();
        let big = DEFAULT_MIN_BYTES;
        // (rank 0's lists, rank 1's lists, taken): rank 1's are rank 0's mirrored.
        let cases = [
            (spec(vec![x(1, big)], vec![], 1), spec(vec![], vec![x(0, big)], 0), true), // Broadcast root 0, out of place
            (spec(vec![], vec![x(1, big)], 1), spec(vec![x(0, big)], vec![], 0), true), // Gather root 0
            (spec(vec![x(1, big)], vec![x(1, big)], 0), spec(vec![x(0, big)], vec![x(0, big)], 0), true), // Send/Recv both ways
            (spec(vec![x(1, big)], vec![x(1, 2 * big)], 1), spec(vec![x(0, 2 * big)], vec![x(0, big)], 0), true), // AllGather-like, uneven
            (spec(vec![x(1, big)], vec![x(1, big - 1)], 0), spec(vec![x(0, big - 1)], vec![x(0, big)], 0), false), // one side too small
            (spec(vec![x(1, big), x(1, big)], vec![], 0), spec(vec![], vec![x(0, big), x(0, big)], 0), false), // two sends
            (spec(vec![], vec![], 2), spec(vec![], vec![], 0), false), // nothing between the ranks
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(takes(a, None, 0, 2, &t), *want, "case {i}, rank 0");
            assert_eq!(takes(b, None, 1, 2, &t), *want, "case {i}, rank 1");
        }
    }

    /// Every rank's lists of one launch on `n` ranks, from the (from, to, bytes) streams of the
    /// launch: each pair's decision must come out the same on its two ranks.
    fn launch(n: usize, streams: &[(usize, usize, u64)]) -> Vec<ExchangeSpec> {
        let mut v: Vec<ExchangeSpec> = (0..n).map(|_| ExchangeSpec::default()).collect();
        for &(from, to, bytes) in streams {
            v[from].sends.push(x(to, bytes));
            v[to].recvs.push(x(from, bytes));
        }
        v
    }

    fn assert_pairwise(n: usize, streams: &[(usize, usize, u64)], func: Option<Func>, t: &Tuning, linked: &dyn Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
        assert_pairwise_as(n, streams, Traffic::P2p, func, t, linked)
    }

    fn assert_pairwise_as(
        n: usize,
        streams: &[(usize, usize, u64)],
        traffic: Traffic,
        func: Option<Func>,
        t: &Tuning,
        linked: &dyn Fn(usize, usize) -> bool,
    ) -> Vec<Vec<usize>> {
        let mut specs = launch(n, streams);
        for s in &mut specs {
            s.traffic = traffic;
        }
        let got: Vec<Vec<usize>> = (0..n).map(|me| pairs(&specs[me], func, me, n, t, |p| linked(me, p))).collect();
        for a in 0..n {
            for b in 0..n {
                assert_eq!(got[a].contains(&b), got[b].contains(&a), "ranks {a} and {b} disagree: {got:?}");
            }
        }
        got
    }

    #[test]
    fn pairs_of_larger_communicators_decide_alike_on_both_ranks() {
        let t = Tuning::default();
        let big = DEFAULT_MIN_BYTES;
        let all = |_: usize, _: usize| true;
        // Send/Recv ring of 4: each rank takes its two neighbours, the next one first.
        let ring: Vec<_> = (0..4).map(|r| (r, (r + 1) % 4, big)).collect();
        let got = assert_pairwise(4, &ring, None, &t, &all);
        assert_eq!(got[0], [1, 3]);
        assert_eq!(got[3], [0, 2]);
        // One pair too small, one missing link: those pairs (only) go to the kernel.
        let mixed = [(0, 1, big), (1, 2, big - 1), (2, 0, big), (3, 1, big)];
        let no_link_1_3 = |a: usize, b: usize| !matches!((a, b), (1, 3) | (3, 1));
        let got = assert_pairwise(4, &mixed, None, &t, &no_link_1_3);
        assert_eq!(got[1], [0]);
        assert_eq!(got[2], [0]);
        assert!(got[3].is_empty());
        // Two sends on one pair: that pair only.
        let twice = [(0, 1, big), (0, 1, big), (0, 2, big), (2, 0, big)];
        let got = assert_pairwise(3, &twice, None, &t, &all);
        assert_eq!(got[0], [2]);
        // AlltoAll-like, 3 ranks: as AllGather, pieces count from 64 MiB; as Send/Recv, 4 MiB.
        let a2a = |bytes: u64| -> Vec<(usize, usize, u64)> { (0..3).flat_map(|a| (0..3).filter(move |&b| b != a).map(move |b| (a, b, bytes))).collect() };
        let got = assert_pairwise_as(3, &a2a(big), Traffic::AllGather, Some(Func::AllGather), &t, &all);
        assert!(got.iter().all(|g| g.is_empty()));
        let got = assert_pairwise_as(3, &a2a(ALLTOALL_MIN_BYTES), Traffic::AllGather, Some(Func::AllGather), &t, &all);
        assert!(got.iter().all(|g| g.is_empty()));
        let got = assert_pairwise_as(3, &a2a(ALLTOALL_MIN_BYTES), Traffic::AlltoAll, None, &t, &all);
        assert_eq!(got, [vec![1, 2], vec![2, 0], vec![0, 1]]);
        let got = assert_pairwise_as(3, &a2a(SPREAD_MIN_BYTES), Traffic::AllGather, Some(Func::AllGather), &t, &all);
        assert_eq!(got, [vec![1, 2], vec![2, 0], vec![0, 1]]);
        let got = assert_pairwise(3, &a2a(big), None, &t, &all);
        assert_eq!(got[1], [2, 0]);
        // An explicit minimum holds for every operation.
        let low = Tuning { ce_direct_min_bytes: Some(1 << 20), ..Tuning::default() };
        let got = assert_pairwise_as(3, &a2a(1 << 20), Traffic::Scatter, None, &low, &all);
        assert_eq!(got[0], [1, 2]);
    }

    #[test]
    fn only_unrelayed_linked_pairs_and_when_enabled() {
        let big = DEFAULT_MIN_BYTES;
        let mut t = Tuning::default();
        let s = spec(vec![x(1, big)], vec![], 0);
        assert!(takes(&s, None, 0, 2, &t));
        assert!(takes(&s, None, 0, 3, &t), "three ranks, point to point");
        let scatter = ExchangeSpec { traffic: Traffic::Scatter, ..s.clone() };
        assert!(takes(&scatter, None, 0, 2, &t), "two ranks: 4 MiB for everything");
        assert!(!takes(&scatter, None, 0, 3, &t), "a Scatter's pieces count from 64 MiB beyond");
        let big_scatter = ExchangeSpec { sends: vec![x(1, SPREAD_MIN_BYTES)], ..scatter };
        assert!(takes(&big_scatter, None, 0, 3, &t));
        assert!(pairs(&s, None, 0, 2, &t, |_| false).is_empty(), "no link");
        assert!(!takes(&spec(vec![x(0, big)], vec![], 0), None, 0, 2, &t), "a send to self is a local copy, not a transfer");
        let mut relayed = s.clone();
        relayed.sends[0].relay = Some(1);
        assert!(!takes(&relayed, None, 0, 2, &t));
        let mut chunked = s.clone();
        chunked.put_chunk = Some(4096);
        assert!(!takes(&chunked, None, 0, 2, &t));
        t.ce_direct_min_bytes = Some(0);
        assert!(!takes(&s, None, 0, 2, &t), "0 turns the path off");
        t.ce_direct_min_bytes = Some(1);
        // NCCL_PROTO without Simple for Broadcast keeps its Broadcasts off the path, not others.
        t.allowed = crate::algo::envlists::Allowed::from_values(Some("Broadcast:LL,LL128"), None).unwrap();
        assert!(!takes(&s, Some(Func::Broadcast), 0, 2, &t));
        assert!(takes(&s, Some(Func::AllGather), 0, 2, &t));
        assert!(takes(&s, None, 0, 2, &t));
        assert!(takes(&spec(vec![x(1, 1)], vec![], 0), None, 0, 2, &t));
    }
}
