//! Which transfers the copy-engine direct path takes (src/transport/ce_direct.rs): large one-way
//! or two-way streams between the two ranks of a 2-rank communicator, copied by the sender's copy
//! engine straight into the receiver's buffer. One copy engine moves 391-396 GB/s each way over an
//! NV18 pair where SM copies reach 365-373 (scripts/lab/oneway_lab.cu, BENCHMARKS eighteenth pass);
//! each transfer pays a host handshake and two stream waits, so only large ones gain.
//!
//! Both ranks of the pair must decide alike, from values both see: a send's byte count equals the
//! matching receive's, so this rank's (sends, receives) are the peer's (receives, sends), and every
//! condition below is symmetric in the two lists. Local copies do not enter the decision (one side
//! of a Gather has one, the other none); the path runs any number of them beside the transfer.

use super::envlists::Func;
use super::{ExchangeSpec, Tuning};

/// Smallest transfer taken unless tuned (OXCCL_CE_DIRECT_MIN_BYTES; 0 = never). At 4-32 MiB the
/// path beat the SM kernels by 20-50% for Send/Recv, Gather, Scatter, AllGather and AlltoAll and
/// tied them for Broadcast (H200 x2, s30h); at 4 MiB AllGather's 2 MiB pieces were not taken.
pub const DEFAULT_MIN_BYTES: u64 = 4 << 20;

pub fn min_bytes(t: &Tuning) -> u64 {
    t.ce_direct_min_bytes.unwrap_or(DEFAULT_MIN_BYTES)
}

/// Whether the path takes this rank's transfer lists of one launch: a 2-rank communicator, at
/// most one send and one receive, each with the other rank, none relayed, each at least the
/// minimum, and at least one of them. `func`: the collective NCCL_PROTO may restrict (None for
/// Send/Recv, AlltoAll, Gather, Scatter); the path counts as its Simple protocol.
pub fn takes(spec: &ExchangeSpec, func: Option<Func>, me: usize, nranks: usize, t: &Tuning) -> bool {
    let min = min_bytes(t);
    if nranks != 2 || me > 1 || min == 0 || spec.put_chunk.is_some() || spec.sends.len() > 1 || spec.recvs.len() > 1 {
        return false;
    }
    if func.is_some_and(|f| !t.allowed.puts[f as usize]) {
        return false;
    }
    let mut all = spec.sends.iter().chain(&spec.recvs).peekable();
    all.peek().is_some() && all.all(|x| x.peer == 1 - me && x.relay.is_none() && x.bytes >= min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{LocalCopy, Transfer};

    fn x(peer: usize, bytes: u64) -> Transfer {
        Transfer { peer, ptr: 0x1000, bytes, relay: None }
    }

    fn spec(sends: Vec<Transfer>, recvs: Vec<Transfer>, copies: usize) -> ExchangeSpec {
        ExchangeSpec { sends, recvs, copies: vec![LocalCopy { src: 1, dst: 2, bytes: 3 }; copies], ..Default::default() }
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

    #[test]
    fn only_two_ranks_unrelayed_and_when_enabled() {
        let big = DEFAULT_MIN_BYTES;
        let mut t = Tuning::default();
        let s = spec(vec![x(1, big)], vec![], 0);
        assert!(takes(&s, None, 0, 2, &t));
        assert!(!takes(&s, None, 0, 3, &t), "three ranks");
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
