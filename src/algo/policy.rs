//! NCCL's CTA policies (ncclConfig_t.CTAPolicy; NCCL_CTA_POLICY overrides it, as in NCCL 2.28's
//! envConfigOverride; nccl.h 2.28: NCCL_CTA_POLICY_DEFAULT 0, _EFFICIENCY 1, _ZERO 2): how many
//! of the GPU's SMs a communicator's collectives may take from the application's kernels they run
//! beside.
//!
//! - DEFAULT: the selectors' own choice (up to one block per SM for large puts).
//! - EFFICIENCY: every kernel of the communicator takes at most `EFFICIENT_BLOCKS` blocks, the
//!   fewest that keep NCCL's bandwidth (see its measurements).
//! - ZERO: no SM moves data where a copy engine can: AllGather, AlltoAll, Broadcast, Gather,
//!   Scatter and Send/Recv between ranks in separate processes of a host go by copy engine at every
//!   size (transport::ce_direct, its host handshake included: the call returns once the peer has
//!   made its matching call), their local copies too; a one-thread kernel per transfer waits for
//!   the peer's counter. Those kinds then skip their SM-only kernels for the exchange launch, and
//!   what the copy engines do not take there (ranks of one process, memory that cannot be
//!   shared, transfers captured in a CUDA graph where only one rank of the pair captures or
//!   OXCCL_CE_DIRECT_GRAPH=0) the exchange kernel moves within the block cap; reductions run as under EFFICIENCY.
//!
//! NCCL 2.28.9 does less: its zero policy sends AllGather, AlltoAll, Gather and Scatter through
//! copy engines only between symmetric windows of one node (src/ce_coll.cc), without a block cap
//! or a host wait, and its efficiency policy only re-picks NVLS for registered buffers.
//!
//! Every rank must reach the same choice: a rank taking the copy-engine path waits for its peer's
//! handshake. Ranks' policies travel in the init exchange (`agree`).

use super::Tuning;

/// The policy of a communicator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CtaPolicy {
    /// NCCL_CTA_POLICY_DEFAULT.
    #[default]
    Default,
    /// NCCL_CTA_POLICY_EFFICIENCY.
    Efficiency,
    /// NCCL_CTA_POLICY_ZERO.
    Zero,
}

/// Most thread blocks any kernel of an EFFICIENCY or ZERO communicator takes. nccl-tests busbw
/// (GB/s), 2 x H200, 4-256 MB, maxCTAs capping oxccl's kernels, NCCL 2.28.9 in the same call
/// (its three policies alike, 24 blocks; 2026-11-30):
/// - AllReduce: 32 blocks 160-309, 48 blocks 170-313, unbounded (128) 182-358; NCCL 122-300.
/// - ReduceScatter: 32 blocks 99-201, 48 blocks 100-248, unbounded 116-304; NCCL 81-236 (240
///   under its efficiency policy).
///
/// 48 is the fewest of those that stay at NCCL's bandwidth for both (32 falls to 201 against
/// 236-240 for a 256 MB ReduceScatter); at 24, NCCL's own count, oxccl's kernels lose (AllReduce
/// 257 against 300 at 256 MB).
pub const EFFICIENT_BLOCKS: u32 = 48;

/// ZERO's smallest copy-engine transfer: every one.
pub const ZERO_CE_MIN_BYTES: u64 = 1;

impl CtaPolicy {
    /// From a validated config value (config::comm_config keeps it within 0..=2).
    pub fn from_raw(v: i32) -> CtaPolicy {
        match v {
            1 => CtaPolicy::Efficiency,
            2 => CtaPolicy::Zero,
            _ => CtaPolicy::Default,
        }
    }

    /// The value as ncclConfig_t holds it.
    pub fn raw(self) -> i32 {
        match self {
            CtaPolicy::Default => 0,
            CtaPolicy::Efficiency => 1,
            CtaPolicy::Zero => 2,
        }
    }

    /// Its name in logs.
    pub fn name(self) -> &'static str {
        match self {
            CtaPolicy::Default => "default",
            CtaPolicy::Efficiency => "efficiency",
            CtaPolicy::Zero => "zero",
        }
    }

    /// The blocks a kernel may take under this policy, from the communicator's budget (SMs, or
    /// maxCTAs below 64). Never more than `budget`, never 0.
    pub fn block_budget(self, budget: u32) -> u32 {
        match self {
            CtaPolicy::Default => budget.max(1),
            CtaPolicy::Efficiency | CtaPolicy::Zero => budget.clamp(1, EFFICIENT_BLOCKS),
        }
    }

    /// Whether local copies beside copy-engine transfers (an out-of-place root's own piece) go by
    /// copy engine rather than by an SM kernel.
    pub fn local_copies_by_engine(self) -> bool {
        self == CtaPolicy::Zero
    }

    /// The tuning under this policy: ZERO sends every transfer the copy-engine path can take
    /// there, unless OXCCL_CE_DIRECT_MIN_BYTES says otherwise (0 = never, as always).
    pub fn tune(self, t: &Tuning) -> Tuning {
        let mut t = t.clone();
        if self == CtaPolicy::Zero && t.ce_direct_min_bytes.is_none() {
            t.ce_direct_min_bytes = Some(ZERO_CE_MIN_BYTES);
        }
        t
    }
}

/// The communicator's policy from every rank's (`raws`, by rank): theirs where all agree, else
/// DEFAULT, and false (the caller warns). Identical on every rank, since every rank sees the same
/// list.
pub fn agree(raws: &[i32]) -> (CtaPolicy, bool) {
    match raws.split_first() {
        Some((first, rest)) if rest.iter().all(|r| r == first) => (CtaPolicy::from_raw(*first), true),
        Some(_) => (CtaPolicy::Default, false),
        None => (CtaPolicy::Default, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_never_exceed_the_communicators_and_never_reach_zero() {
        for p in [CtaPolicy::Default, CtaPolicy::Efficiency, CtaPolicy::Zero] {
            for b in [0u32, 1, 8, 31, 32, 33, 64, 132, 1000] {
                let got = p.block_budget(b);
                assert!(got >= 1 && got <= b.max(1), "{p:?} {b} -> {got}");
                if p == CtaPolicy::Default {
                    assert_eq!(got, b.max(1), "DEFAULT leaves the budget as it is");
                } else {
                    assert!(got <= EFFICIENT_BLOCKS);
                }
            }
        }
        assert_eq!(CtaPolicy::Efficiency.block_budget(132), EFFICIENT_BLOCKS);
        assert_eq!(CtaPolicy::Efficiency.block_budget(16), 16, "a smaller maxCTAs stays");
        assert_eq!(CtaPolicy::Zero.block_budget(40), 40);
    }

    #[test]
    fn raw_values_round_trip() {
        for v in 0..=2 {
            assert_eq!(CtaPolicy::from_raw(v).raw(), v);
        }
    }

    #[test]
    fn zero_takes_the_copy_engines_at_every_size_unless_tuned() {
        let t = Tuning::default();
        assert_eq!(CtaPolicy::Default.tune(&t), t);
        assert_eq!(CtaPolicy::Efficiency.tune(&t), t);
        let z = CtaPolicy::Zero.tune(&t);
        assert_eq!(super::super::ce_direct::min_bytes(&z), ZERO_CE_MIN_BYTES);
        for n in [2, 4, 8] {
            for tr in [
                super::super::ce_direct::Traffic::P2p,
                super::super::ce_direct::Traffic::AllGather,
                super::super::ce_direct::Traffic::AlltoAll,
                super::super::ce_direct::Traffic::Scatter,
            ] {
                assert_eq!(super::super::ce_direct::min_bytes_for(tr, n, &z), ZERO_CE_MIN_BYTES);
            }
        }
        let off = Tuning { ce_direct_min_bytes: Some(0), ..Tuning::default() };
        assert_eq!(CtaPolicy::Zero.tune(&off).ce_direct_min_bytes, Some(0), "OXCCL_CE_DIRECT_MIN_BYTES=0 still wins");
    }

    #[test]
    fn ranks_that_disagree_get_the_default() {
        assert_eq!(agree(&[2, 2, 2]), (CtaPolicy::Zero, true));
        assert_eq!(agree(&[1]), (CtaPolicy::Efficiency, true));
        assert_eq!(agree(&[2, 0]), (CtaPolicy::Default, false));
        assert_eq!(agree(&[]), (CtaPolicy::Default, true));
    }
}
