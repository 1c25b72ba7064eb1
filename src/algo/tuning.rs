//! Tuning overrides from the environment (read once per communicator). They exist to measure and
//! tune the selector on real machines; every rank must see the same values.

use super::envlists::Allowed;
use crate::config::env;
use crate::error::Result;

/// The OXCCL_* tuning variables the selectors read, once per communicator (None: the default;
/// docs/tuning.md lists them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// OXCCL_ALLREDUCE_ALGO = oneshot | twophase | rsag: force one algorithm where it fits.
    pub allreduce_algo: Option<super::AllReduceAlgo>,
    /// OXCCL_AP128=0: the one-shot and two-phase AllReduces keep LL16 packets beyond the ring's
    /// sizes instead of LL128 lines.
    pub ap128_off: bool,
    /// OXCCL_AP128_HALF_BYTES: bytes of each half of the all-pairs LL128 area (at least 1 MiB).
    pub ap128_half_bytes: Option<u64>,
    /// OXCCL_RSAG_MID_BLOCKS: most blocks of the put-based AllReduce at 4+ ranks while each rank
    /// owns at most 4 MiB (default 64).
    pub rsag_mid_blocks: Option<u32>,
    /// OXCCL_ONESHOT_MAX_BYTES: largest message for the one-shot packet algorithm.
    pub oneshot_max_bytes: Option<u64>,
    /// OXCCL_TWOPHASE_MAX_BYTES: largest message for the two-phase packet algorithm.
    pub twophase_max_bytes: Option<u64>,
    /// OXCCL_LL_BLOCKS / OXCCL_LL_THREADS: launch shape cap of the packet algorithms.
    pub ll_blocks: Option<u32>,
    /// OXCCL_LL_THREADS (above).
    pub ll_threads: Option<u32>,
    /// OXCCL_LL_MIN_BLOCKS: fewest blocks a packet algorithm launches, however small the message.
    pub ll_min_blocks: Option<u32>,
    /// OXCCL_RSAG_BLOCKS / OXCCL_RSAG_THREADS: launch shape of the put-based algorithm.
    pub rs_blocks: Option<u32>,
    /// OXCCL_RSAG_THREADS (above).
    pub rs_threads: Option<u32>,
    /// OXCCL_EXCHANGE_LL_MAX_BYTES: largest per-pair stream the exchange kernel moves as packets.
    pub exchange_ll_max_bytes: Option<u64>,
    /// OXCCL_EXCHANGE_THREADS: threads per block of every exchange launch (default 256 for
    /// packet-only launches, 1024 for launches with puts);
    /// OXCCL_EXCHANGE_LL_BLOCKS: grid of packet-only exchange launches (default: the full grid).
    /// Both free to differ between the ranks of a pair only where noted in exchange.rs.
    pub exchange_threads: Option<u32>,
    /// OXCCL_EXCHANGE_LL_BLOCKS (above).
    pub exchange_ll_blocks: Option<u32>,
    /// OXCCL_GATHER_ONESHOT_MAX_BYTES: largest piece (bytes per pair of ranks) of an AllGather or
    /// AlltoAll run by the one-shot gather kernel instead of the exchange kernel (0 = never).
    pub gather_oneshot_max_bytes: Option<u64>,
    /// OXCCL_SYMM_ALLGATHER_MIN_BYTES / _MAX_BYTES: pieces (bytes each rank contributes) of an
    /// AllGather into a symmetric window that the direct kernel takes (algo::symm; max 0 = never).
    pub symm_allgather_min_bytes: Option<u64>,
    /// OXCCL_SYMM_ALLGATHER_MAX_BYTES (above).
    pub symm_allgather_max_bytes: Option<u64>,
    /// OXCCL_SYMM_BLOCKS / OXCCL_SYMM_THREADS: the direct kernels' grid and block (every rank alike).
    pub symm_blocks: Option<u32>,
    /// OXCCL_SYMM_THREADS (above).
    pub symm_threads: Option<u32>,
    /// OXCCL_BROADCAST_ONESHOT_MAX_BYTES: largest Broadcast run by the one-shot packet kernel
    /// (0 = never).
    pub broadcast_oneshot_max_bytes: Option<u64>,
    /// OXCCL_P2P_ONESHOT_MAX_BYTES: largest send or receive of a one-send, one-receive group run
    /// by the one-shot point-to-point kernel (0 = never).
    pub p2p_oneshot_max_bytes: Option<u64>,
    /// OXCCL_CE_DIRECT_MIN_BYTES: smallest transfer the copy-engine direct path takes between two
    /// ranks in separate processes, for every operation (0 = never; unset: algo::ce_direct's
    /// defaults per operation and rank count).
    pub ce_direct_min_bytes: Option<u64>,
    /// OXCCL_CE_DIRECT_ASYNC=1. By default (false) the copy-engine direct path's handshakes run on
    /// the calling thread, whose call then waits for the peer's. True hands them to a worker
    /// thread so that calls return at once, as NCCL's do (transport::ce_direct::CeDirect::submit);
    /// but the worker then issues stream work that the user's stream already waits for, and a
    /// driver call of its can stall behind an application thread's synchronous copy that waits
    /// for that stream (PyTorch's `.cpu()` after a 4 MiB send at 4 ranks: stalls of 4-50 s and
    /// hangs, BENCHMARKS.md of 2026-11-27, 25ab531).
    pub ce_direct_async: bool,
    /// OXCCL_CE_DIRECT_GRAPH=0: no copy-engine direct path inside CUDA graphs (captured transfers
    /// take the exchange kernel); by default it runs there with device-counted counters
    /// (transport::ce_direct::GraphCounter) from algo::ce_direct::graph_min_bytes.
    pub ce_direct_graph_off: bool,
    /// OXCCL_REDUCE_LL_MAX_BYTES: largest ReduceScatter chunk / Reduce message moved as packets.
    pub reduce_ll_max_bytes: Option<u64>,
    /// OXCCL_REDUCE_LL_SHAPE_MAX_RANKS: most ranks at which a packet Reduce takes the one-shot
    /// AllReduce's launch shape instead of the exchange grid (default 4: measured at 2-4).
    pub reduce_ll_shape_max_ranks: Option<u64>,
    /// OXCCL_RELAY_MIN_BYTES: smallest Broadcast (3+ ranks) that the root scatters and the other
    /// ranks forward to each other (0 = never); OXCCL_RELAY_ROUNDS: the pipeline depth of the
    /// relayed Broadcast and Reduce.
    pub relay_min_bytes: Option<u64>,
    /// OXCCL_REDUCE_RELAY_MIN_BYTES: smallest Reduce (3+ ranks) reduced by relay (0 = never).
    pub reduce_relay_min_bytes: Option<u64>,
    /// OXCCL_RELAY_ROUNDS (1-1024): the relayed Broadcast's and Reduce's pipeline depth.
    pub relay_rounds: Option<u32>,
    /// OXCCL_REDUCE_CHAIN_MIN_BYTES: smallest Reduce (3+ ranks) reduced along a chain (0 = never);
    /// OXCCL_CHAIN_BLOCK_BYTES: least message bytes per block of the chain's grid;
    /// OXCCL_CHAIN_STEPS: pipeline steps per block the chain aims for.
    pub reduce_chain_min_bytes: Option<u64>,
    /// OXCCL_CHAIN_BLOCK_BYTES (above).
    pub chain_block_bytes: Option<u64>,
    /// OXCCL_CHAIN_STEPS (above).
    pub chain_steps: Option<u64>,
    /// OXCCL_RSAG_SLOT_BYTES / OXCCL_LL_HALF_BYTES: scratch geometry.
    pub rs_slot_bytes: Option<u64>,
    /// OXCCL_LL_HALF_BYTES (above).
    pub ll_half_bytes: Option<u64>,
    /// OXCCL_LL128_HALF_BYTES: LL128 scratch geometry; OXCCL_LL128_LINES_PER_BLOCK /
    /// OXCCL_LL128_THREADS: the LL128 chains' launch shape.
    pub ll128_half_bytes: Option<u64>,
    /// OXCCL_LL128_LINES_PER_BLOCK (above).
    pub ll128_lines_per_block: Option<u64>,
    /// OXCCL_LL128_THREADS (above).
    pub ll128_threads: Option<u32>,
    /// OXCCL_REDUCE_LL128_MIN_BYTES: smallest Reduce (3+ ranks) sent as LL128 lines along the chain
    /// (0 = never); OXCCL_REDUCE_LL128_MAX_BYTES: where it stops (default: the put chain's threshold).
    pub reduce_ll128_min_bytes: Option<u64>,
    /// OXCCL_REDUCE_LL128_MAX_BYTES (above).
    pub reduce_ll128_max_bytes: Option<u64>,
    /// OXCCL_BROADCAST_LL128_MIN_BYTES / _MAX_BYTES: Broadcast along the LL128 chain from / below.
    pub broadcast_ll128_min_bytes: Option<u64>,
    /// OXCCL_BROADCAST_LL128_MAX_BYTES (above).
    pub broadcast_ll128_max_bytes: Option<u64>,
    /// OXCCL_PDL=0: no programmatic dependent launch (algo::pdl); on by default on sm_90+.
    pub pdl_off: bool,
    /// OXCCL_GROUP_LAUNCH=0: a group's collectives launch one by one instead of together where
    /// algo::group allows (on by default).
    pub group_off: bool,
    /// OXCCL_GROUP_MAX_BYTES: the most payload bytes per pair of one grouped launch (algo::group;
    /// default `group::default_group_max_bytes` where an AllReduce is in it).
    pub group_max_bytes: Option<u64>,
    /// OXCCL_COUNTED_LAUNCH: 1, every uncaptured launch counts its end on the done counter; 0,
    /// every launch records an event behind it; unset, algo::counting decides per launch.
    pub counted_launch: Option<bool>,
    /// OXCCL_ONESHOT_EARLY=0: no early one-shot AllReduce launches in CUDA graphs (algo::pdl::early).
    pub early_off: bool,
    /// OXCCL_ONESHOT_PRESEND=0: a chained launch sends its own packets (algo::pdl::presend).
    pub presend_off: bool,
    /// OXCCL_ONESHOT_ENTRY_BYTES: early one-shot AllReduces up to this size trigger at entry
    /// (algo::pdl::entry); 0 never.
    pub entry_bytes: u64,
    /// NCCL_PROTO / NCCL_ALGO, per collective.
    pub allowed: Allowed,
    /// ncclCollConfig_t.minCTAs of one configured call (algo::collcfg; never from the
    /// environment): the fewest blocks of the kernels whose grid grows with the message.
    pub min_blocks: Option<u32>,
}

/// Default OXCCL_ONESHOT_ENTRY_BYTES.
pub const ENTRY_BYTES: u64 = 256;

impl Tuning {
    /// Reads the OXCCL_* tuning variables and NCCL_PROTO/NCCL_ALGO (whose syntax errors are
    /// ncclInvalidUsage, as at NCCL's communicator init).
    pub fn from_env() -> Result<Tuning> {
        let num = |k: &str| env(k).and_then(|v| v.trim().parse::<u64>().ok());
        let num32 = |k: &str| num(k).and_then(|v| u32::try_from(v).ok());
        Ok(Tuning {
            allowed: Allowed::from_values(env("NCCL_PROTO").as_deref(), env("NCCL_ALGO").as_deref())?,
            allreduce_algo: env("OXCCL_ALLREDUCE_ALGO").and_then(|v| super::AllReduceAlgo::from_name(v.trim())),
            ap128_off: env("OXCCL_AP128").is_some_and(|v| v.trim() == "0"),
            group_off: env("OXCCL_GROUP_LAUNCH").is_some_and(|v| v.trim() == "0"),
            group_max_bytes: num("OXCCL_GROUP_MAX_BYTES"),
            rsag_mid_blocks: num32("OXCCL_RSAG_MID_BLOCKS").filter(|&b| b > 0),
            ap128_half_bytes: num("OXCCL_AP128_HALF_BYTES").filter(|&b| (1 << 20..=1 << 30).contains(&b)),
            oneshot_max_bytes: num("OXCCL_ONESHOT_MAX_BYTES"),
            twophase_max_bytes: num("OXCCL_TWOPHASE_MAX_BYTES"),
            ll_blocks: num32("OXCCL_LL_BLOCKS").filter(|&b| b > 0),
            ll_threads: num32("OXCCL_LL_THREADS").filter(|&t| (64..=1024).contains(&t) && t % 32 == 0),
            ll_min_blocks: num32("OXCCL_LL_MIN_BLOCKS").filter(|&b| b > 0),
            rs_blocks: num32("OXCCL_RSAG_BLOCKS").filter(|&b| b > 0),
            rs_threads: num32("OXCCL_RSAG_THREADS").filter(|&t| (64..=1024).contains(&t) && t % 32 == 0),
            exchange_ll_max_bytes: num("OXCCL_EXCHANGE_LL_MAX_BYTES"),
            exchange_threads: num32("OXCCL_EXCHANGE_THREADS").filter(|&t| (64..=1024).contains(&t) && t % 32 == 0),
            exchange_ll_blocks: num32("OXCCL_EXCHANGE_LL_BLOCKS").filter(|&b| b > 0),
            gather_oneshot_max_bytes: num("OXCCL_GATHER_ONESHOT_MAX_BYTES"),
            symm_allgather_min_bytes: num("OXCCL_SYMM_ALLGATHER_MIN_BYTES"),
            symm_allgather_max_bytes: num("OXCCL_SYMM_ALLGATHER_MAX_BYTES"),
            symm_blocks: num32("OXCCL_SYMM_BLOCKS").filter(|&b| b > 0),
            symm_threads: num32("OXCCL_SYMM_THREADS").filter(|&t| (64..=1024).contains(&t) && t % 32 == 0),
            broadcast_oneshot_max_bytes: num("OXCCL_BROADCAST_ONESHOT_MAX_BYTES"),
            p2p_oneshot_max_bytes: num("OXCCL_P2P_ONESHOT_MAX_BYTES"),
            ce_direct_min_bytes: num("OXCCL_CE_DIRECT_MIN_BYTES"),
            ce_direct_async: num("OXCCL_CE_DIRECT_ASYNC").is_some_and(|v| v != 0),
            ce_direct_graph_off: num("OXCCL_CE_DIRECT_GRAPH") == Some(0),
            reduce_ll_max_bytes: num("OXCCL_REDUCE_LL_MAX_BYTES"),
            reduce_ll_shape_max_ranks: num("OXCCL_REDUCE_LL_SHAPE_MAX_RANKS"),
            relay_min_bytes: num("OXCCL_RELAY_MIN_BYTES"),
            reduce_relay_min_bytes: num("OXCCL_REDUCE_RELAY_MIN_BYTES"),
            relay_rounds: num32("OXCCL_RELAY_ROUNDS").filter(|&r| (1..=1024).contains(&r)),
            reduce_chain_min_bytes: num("OXCCL_REDUCE_CHAIN_MIN_BYTES"),
            chain_block_bytes: num("OXCCL_CHAIN_BLOCK_BYTES").filter(|&b| b > 0),
            chain_steps: num("OXCCL_CHAIN_STEPS").filter(|&s| (1..=1 << 20).contains(&s)),
            rs_slot_bytes: num("OXCCL_RSAG_SLOT_BYTES").filter(|&b| b >= 4096),
            ll_half_bytes: num("OXCCL_LL_HALF_BYTES").filter(|&b| b >= 64 * 1024),
            ll128_half_bytes: num("OXCCL_LL128_HALF_BYTES").filter(|&b| b >= 64 * 1024),
            ll128_lines_per_block: num("OXCCL_LL128_LINES_PER_BLOCK").filter(|&l| (1..=1 << 20).contains(&l)),
            ll128_threads: num32("OXCCL_LL128_THREADS").filter(|&t| (64..=1024).contains(&t) && t % 32 == 0),
            reduce_ll128_min_bytes: num("OXCCL_REDUCE_LL128_MIN_BYTES"),
            reduce_ll128_max_bytes: num("OXCCL_REDUCE_LL128_MAX_BYTES").filter(|&b| b > 0),
            broadcast_ll128_min_bytes: num("OXCCL_BROADCAST_LL128_MIN_BYTES"),
            broadcast_ll128_max_bytes: num("OXCCL_BROADCAST_LL128_MAX_BYTES").filter(|&b| b > 0),
            pdl_off: num("OXCCL_PDL") == Some(0),
            counted_launch: num("OXCCL_COUNTED_LAUNCH").map(|v| v != 0),
            early_off: num("OXCCL_ONESHOT_EARLY") == Some(0),
            presend_off: num("OXCCL_ONESHOT_PRESEND") == Some(0),
            entry_bytes: num("OXCCL_ONESHOT_ENTRY_BYTES").unwrap_or(ENTRY_BYTES),
            min_blocks: None,
        })
    }
}
