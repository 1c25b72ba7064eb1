//! `ncclConfig_t` as NCCL 2.32.3's nccl.h lays it out: the C struct this module parses into
//! `CommConfig` (comm_config.rs). It lives here, below api/, so the dependency points one way;
//! api/types.rs re-exports it for the C boundary.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint};

/// `struct ncclConfig_v23100`, sizeof 120 on x86-64 (2.28's `ncclConfig_v22800` is its first 80
/// bytes; callers built against older headers pass their own `size` and `version`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    /// sizeof the caller's struct (NCCL_CONFIG_INITIALIZER sets it): which fields it has.
    pub size: usize,
    /// NCCL_CONFIG_MAGIC, set by the initializer.
    pub magic: c_uint,
    /// NCCL_VERSION_CODE the caller was built against.
    pub version: c_uint,
    /// 0: nonblocking communicator; 1: blocking (the default).
    pub blocking: c_int,
    /// CGA cluster size (0-8): read and validated; no effect.
    pub cgaClusterSize: c_int,
    /// Fewest thread blocks per kernel: read and validated; no effect.
    pub minCTAs: c_int,
    /// Most thread blocks per kernel (below 64 caps every kernel of the communicator).
    pub maxCTAs: c_int,
    /// The network transport to use by name (NCCL_NET).
    pub netName: *const c_char,
    /// Whether a split child may share the parent's resources: read; children never share.
    pub splitShare: c_int,
    /// InfiniBand traffic class for the communicator's queue pairs.
    pub trafficClass: c_int,
    /// A name for logs.
    pub commName: *const c_char,
    /// CollNet: read and validated; oxccl has none.
    pub collnetEnable: c_int,
    /// NCCL_CTA_POLICY_*: how many SMs the collectives may take (src/algo/policy.rs).
    pub CTAPolicy: c_int,
    /// Whether a shrunk child may share the parent's resources: read; children never share.
    pub shrinkShare: c_int,
    /// NVLS thread blocks: read; oxccl never uses NVLS.
    pub nvlsCTAs: c_int,
    /// Network channels per peer: read and validated; no effect.
    pub nChannelsPerNetPeer: c_int,
    /// NVLink-centric scheduling: read and validated; no effect.
    pub nvlinkCentricSched: c_int,
    /// CUDA graph usage (0 none, 1 graphs only, 2 graphs mixed with eager; NCCL 2.29).
    pub graphUsageMode: c_int,
    /// RMA contexts for the one-sided operations (NCCL 2.29).
    pub numRmaCtx: c_int,
    /// Most peers a rank connects to for point-to-point (NCCL 2.30).
    pub maxP2pPeers: c_int,
    /// Whether captured kernels keep the capturing stream's order (NCCL 2.30.5).
    pub graphStreamOrdering: c_int,
    /// Whether launch order across communicators is implied by issue order (NCCL 2.31).
    pub launchOrderImplicit: c_int,
    /// Signal slots per RMA context and peer for the one-sided operations (NCCL 2.31).
    pub numRmaSig: c_int,
    /// Whether RMA resources are set up at init rather than at first use (NCCL 2.31).
    pub rmaEagerInit: c_int,
    /// Host collective-fabric-transport mode, ncclHostCftMode_t (NCCL 2.31).
    pub hostCftMode: c_int,
    /// Host NVLS components disabled, ncclNvlsHostMode_t flags (NCCL 2.31).
    pub nvlsHostMode: c_int,
}

/// `ncclConfig_t::magic` as NCCL_CONFIG_INITIALIZER sets it.
pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// An integer field left for NCCL (here oxccl) to decide.
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
