//! The cross-host executor's settings from the environment: plan thresholds (equal on every rank:
//! they change the plan) and the link, proxy and step-kernel knobs, each read and logged here.

use crate::error::{Error, Result};
use crate::log::Subsys;

/// A byte count from the environment that changes the plan (so every rank must see the same
/// value): None when unset; a value that is not a number fails the communicator's init.
pub(super) fn plan_bytes(name: &str) -> Result<Option<u64>> {
    match crate::config::env(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => {
                nccl_info!(Subsys::Net, "{name} set by environment to {n}");
                Ok(Some(n))
            }
            Err(_) => Err(Error::invalid_usage(format!("{name}={v}: expected a number of bytes"))),
        },
    }
}

/// OXCCL_NET_BCAST_DIRECT_MAX: bytes up to which a Broadcast between two hosts goes from the root
/// to every rank of the other host (`plan::DIRECT_MAX_BYTES` unless set; 0 = never).
pub(super) fn bcast_direct_max() -> Result<Option<u64>> {
    plan_bytes("OXCCL_NET_BCAST_DIRECT_MAX")
}

/// OXCCL_NET_BCAST_STRIPE_MIN: the smallest transfer of a Broadcast from its root to another host
/// that is striped over every socket of the link (0, the default: the link's threshold,
/// OXCCL_NET_STRIPE_MIN). At 2 simulated hosts x 2 a one-way Broadcast of 256 KB-1 MB gained from
/// striping at 256 KiB where exchanges of the same size lost (BENCHMARKS.md of 2026-11-27, 26c2104); this
/// lowers it for Broadcast alone. Both ends of a transfer must split it alike: equal on every rank.
pub(super) fn bcast_stripe_min() -> Result<u64> {
    match plan_bytes("OXCCL_NET_BCAST_STRIPE_MIN")? {
        None => Ok(0),
        Some(n) if n == 0 || n >= 64 << 10 => Ok(n),
        Some(n) => Err(Error::invalid_usage(format!("OXCCL_NET_BCAST_STRIPE_MIN={n}: expected 0 or a byte count of at least 65536"))),
    }
}

/// OXCCL_NET_NARROW: 1 or 0 plans Broadcast and Reduce as narrow (`plan::Phase::narrow`: plain
/// TCP links spin for their jobs and stripe them from `link::FIT_STRIPE_MIN`) or not, whatever the cores
/// (`link::narrow_fit` decides when unset). Equal on every rank.
pub(super) fn narrow_setting() -> Result<Option<bool>> {
    match plan_bytes("OXCCL_NET_NARROW")? {
        None => Ok(None),
        Some(n @ (0 | 1)) => Ok(Some(n == 1)),
        Some(n) => Err(Error::invalid_usage(format!("OXCCL_NET_NARROW={n}: expected 0 or 1"))),
    }
}

/// A plan threshold "from this many bytes" (`plan_bytes`): `default` unless set; 0: never.
/// OXCCL_NET_BCAST_PIPELINE_MIN and OXCCL_NET_REDUCE_PIPELINE_MIN: the smallest Broadcast and
/// Reduce across three hosts or more that go along the chain of hosts in pieces
/// (`plan::Layout::bcast_pipeline_min`, `reduce_pipeline_min`; by default from 512 KiB where the
/// hosts are apart, on network stacks of their own, never where they share one:
/// `plan::pipeline_defaults`).
/// OXCCL_NET_BCAST_SCATTER_MIN: the smallest Broadcast between two hosts that the root sends as
/// slices, one to each rank of the other host, which then gather them (`plan::SCATTER_MIN_BYTES`).
/// OXCCL_NET_REDUCE_SLICE_MIN: the smallest Reduce between two hosts of equal size that goes slice
/// by slice (`plan::reduce_sliced`: reduce-scatter on each host, rank k to rank k across, gather to
/// the root; `plan::SLICE_MIN_BYTES`).
pub(super) fn plan_min(name: &str, default: u64) -> Result<u64> {
    Ok(match plan_bytes(name)? {
        None => default,
        Some(0) => u64::MAX,
        Some(n) => n,
    })
}

/// A "from this many bytes" threshold for a log line: `never` for u64::MAX.
pub(super) fn threshold(n: u64) -> String {
    if n == u64::MAX { "never".to_string() } else { n.to_string() }
}

/// Lanes (socket pairs) per pair of ranks on different hosts unless set: large transfers are
/// striped over them (one TCP stream rarely fills a fast NIC, or even loopback).
pub(super) const DEFAULT_SOCKETS: usize = 4;

/// OXCCL_NET_SOCKETS: a number of sockets (each way) per pair of ranks on different hosts (default
/// `DEFAULT_SOCKETS`), or `fit`: the most, up to that default, whose link threads fit every
/// machine's cores (`link::fit_lanes`), so that they spin and never queue for a CPU behind each
/// other. Must be equal on every rank. Returns None for `fit`.
pub(super) fn sockets_per_link() -> Result<Option<usize>> {
    match crate::config::env("OXCCL_NET_SOCKETS") {
        None => Ok(Some(DEFAULT_SOCKETS)),
        Some(v) if v.trim() == "fit" => Ok(None),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=crate::bootstrap::MAX_DATA_SOCKETS).contains(&n) => {
                nccl_info!(Subsys::Net, "OXCCL_NET_SOCKETS set by environment to {n}");
                Ok(Some(n))
            }
            _ => Err(Error::invalid_usage(format!("OXCCL_NET_SOCKETS={v}: expected 1..={} or fit", crate::bootstrap::MAX_DATA_SOCKETS))),
        },
    }
}

/// OXCCL_NET_P2P_OVERLAP: 1 (default) overlaps a group's local point-to-point launch with its
/// cross-host step (see `Net::p2p_overlap`); 0 runs them one after the other.
pub(super) fn p2p_overlap() -> bool {
    match crate::config::env("OXCCL_NET_P2P_OVERLAP").map(|v| v.trim().to_string()) {
        None => true,
        Some(v) if v == "0" || v == "1" => {
            nccl_info!(Subsys::Net, "OXCCL_NET_P2P_OVERLAP set by environment to {v}");
            v == "1"
        }
        Some(v) => {
            nccl_warn!("OXCCL_NET_P2P_OVERLAP={v}: expected 0 or 1, using 1");
            true
        }
    }
}

/// OXCCL_NET_STEP_BLOCKS: most blocks of a staged step kernel (1..=32), which share its copies
/// through host memory at one block per 32 KiB; default 1 (one block copies everything): 8 were
/// no better at 2 x 2, 64 B-256 KB (BENCHMARKS.md of 2026-11-26, 5822b1b).
pub(super) fn step_blocks() -> u32 {
    match crate::config::env("OXCCL_NET_STEP_BLOCKS") {
        None => 1,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if (1..=32).contains(&n) => {
                nccl_info!(Subsys::Net, "OXCCL_NET_STEP_BLOCKS set by environment to {n}");
                n
            }
            _ => {
                nccl_warn!("OXCCL_NET_STEP_BLOCKS={v}: expected 1..=32, using 1");
                1
            }
        },
    }
}
