//! ncclConfig_t → `CommConfig`, step by step as NCCL src/init.cc parseCommConfig (2.28.9, and
//! 2.30.7 for the fields 2.29-2.30 added): copy the caller's first min(size, 120) bytes over
//! NCCL_CONFIG_INITIALIZER, check the magic, reset the
//! fields newer than the caller's `version`, validate, apply defaults, then the environment
//! overrides of envConfigOverride (see `comm_env`).

use super::comm_env::apply_env_overrides;
use super::abi::{ncclConfig_t, NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT as UNDEF};
use crate::error::{Error, Result};
use crate::log::Subsys;
use std::ffi::{c_char, CStr};
use std::mem::size_of;

/// MAXCHANNELS: the default and the cap for maxCTAs and nChannelsPerNetPeer.
pub const MAX_CHANNELS: i32 = 64;
/// NCCL_CTA_POLICY_DEFAULT / _EFFICIENCY / _ZERO.
pub const CTA_POLICY_DEFAULT: i32 = 0;
pub const CTA_POLICY_ZERO: i32 = 2;
/// NCCL_VERSION(2,32,3): the version NCCL_CONFIG_INITIALIZER stamps.
const INITIALIZER_VERSION: u32 = 23203;
/// The bytes NCCL reads from a caller's struct at most: sizeof(ncclConfig_t) of 2.32.
pub const CONFIG_BYTES: usize = size_of::<ncclConfig_t>();

/// A communicator's configuration, defaults applied. Integer fields equal to
/// `NCCL_CONFIG_UNDEF_INT` (traffic_class, nvls_ctas, n_channels_per_net_peer) mean "NCCL decides".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommConfig {
    /// `ncclConfig_t::blocking` (NCCL_COMM_BLOCKING).
    pub blocking: bool,
    /// `cgaClusterSize` (NCCL_CGA_CLUSTER_SIZE); no effect.
    pub cga_cluster_size: i32,
    /// `minCTAs` (NCCL_MIN_CTAS); no effect.
    pub min_ctas: i32,
    /// `maxCTAs` (NCCL_MAX_CTAS): below 64, every kernel's block cap.
    pub max_ctas: i32,
    /// `netName` (NCCL_NET): the network transport by name.
    pub net_name: Option<String>,
    /// `splitShare` (NCCL_COMM_SPLIT_SHARE_RESOURCES); children never share.
    pub split_share: bool,
    /// `trafficClass`: InfiniBand traffic class.
    pub traffic_class: i32,
    /// `commName`.
    pub comm_name: Option<String>,
    /// `collnetEnable` (NCCL_COLLNET_ENABLE); oxccl has no CollNet.
    pub collnet_enable: bool,
    /// `CTAPolicy` (NCCL_CTA_POLICY): algo::policy acts on it at init.
    pub cta_policy: i32,
    /// `shrinkShare` (NCCL_COMM_SHRINK_SHARE_RESOURCES); children never share.
    pub shrink_share: bool,
    /// `nvlsCTAs` (NCCL_NVLS_NCHANNELS); oxccl never uses NVLS.
    pub nvls_ctas: i32,
    /// `nChannelsPerNetPeer` (NCCL_NCHANNELS_PER_NET_PEER); no effect.
    pub n_channels_per_net_peer: i32,
    /// `nvlinkCentricSched` (NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE); no effect.
    pub nvlink_centric_sched: bool,
    /// `graphUsageMode` (0/1/2, default 2; NCCL_GRAPH_MIXING_SUPPORT 0/1 sets 0/2); oxccl mixes
    /// graphs and eager launches in every mode.
    pub graph_usage_mode: i32,
    /// `numRmaCtx` (>= 0, default 1; NCCL_NUM_RMA_CTX): contexts of the one-sided operations;
    /// 0 disables them.
    pub num_rma_ctx: i32,
    /// `maxP2pPeers` (> 0 or UNDEF; NCCL_MAX_P2P_PEERS); oxccl connects peers as they are used.
    pub max_p2p_peers: i32,
    /// `graphStreamOrdering` (0/1 or UNDEF; NCCL_GRAPH_STREAM_ORDERING); captured work always
    /// keeps the capturing stream's order in oxccl.
    pub graph_stream_ordering: i32,
    /// `launchOrderImplicit` (0/1, default 0; NCCL_LAUNCH_ORDER_IMPLICIT); no effect.
    pub launch_order_implicit: bool,
    /// `numRmaSig` (> 0, default 1): signal indices per RMA context.
    pub num_rma_sig: i32,
    /// `rmaEagerInit` (0/1, default 0); the one-sided operations' signal area is allocated with
    /// the communicator's first window in symmetric memory either way.
    pub rma_eager_init: bool,
    /// `hostCftMode` (ncclHostCftMode_t: 1 enable, 2 disable, 3 fallback; default UNDEF); oxccl
    /// has no CFT transport, so every mode runs without it.
    pub host_cft_mode: i32,
    /// `nvlsHostMode` (ncclNvlsHostMode_t flags, >= 0, default UNDEF); oxccl never uses NVLS.
    pub nvls_host_mode: i32,
}

impl Default for CommConfig {
    /// What a NULL config gives: NCCL's defaults, then the environment's overrides.
    fn default() -> CommConfig {
        let mut cfg = CommConfig::builtin_defaults();
        apply_env_overrides(&mut cfg, &super::env::env);
        cfg
    }
}

impl CommConfig {
    /// NCCL's defaults before any environment override (parseCommConfig's NCCL_CONFIG_DEFAULTs).
    pub fn builtin_defaults() -> CommConfig {
        CommConfig {
            blocking: true,
            cga_cluster_size: 4,
            min_ctas: 1,
            max_ctas: MAX_CHANNELS,
            net_name: None,
            split_share: false,
            traffic_class: UNDEF,
            comm_name: None,
            collnet_enable: false,
            cta_policy: CTA_POLICY_DEFAULT,
            shrink_share: false,
            nvls_ctas: UNDEF,
            n_channels_per_net_peer: UNDEF,
            nvlink_centric_sched: false,
            graph_usage_mode: 2,
            num_rma_ctx: 1,
            max_p2p_peers: UNDEF,
            graph_stream_ordering: UNDEF,
            launch_order_implicit: false,
            num_rma_sig: 1,
            rma_eager_init: false,
            host_cft_mode: UNDEF,
            nvls_host_mode: UNDEF,
        }
    }

    /// A child communicator's config when ncclCommSplit/Shrink get a NULL config: the parent's,
    /// with the environment overrides applied again (NCCL init.cc copyCommConfig).
    pub fn inherited(&self) -> CommConfig {
        let mut cfg = self.clone();
        apply_env_overrides(&mut cfg, &super::env::env);
        cfg
    }
}

/// NCCL_CONFIG_INITIALIZER.
pub fn config_initializer() -> ncclConfig_t {
    ncclConfig_t {
        size: CONFIG_BYTES,
        magic: NCCL_CONFIG_MAGIC,
        version: INITIALIZER_VERSION,
        blocking: UNDEF,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
        graphUsageMode: UNDEF,
        numRmaCtx: UNDEF,
        maxP2pPeers: UNDEF,
        graphStreamOrdering: UNDEF,
        launchOrderImplicit: UNDEF,
        numRmaSig: UNDEF,
        rmaEagerInit: UNDEF,
        hostCftMode: UNDEF,
        nvlsHostMode: UNDEF,
    }
}

/// Reads a caller's ncclConfig_t (NULL → defaults) and resolves it as NCCL 2.28.9 does.
/// Errors are InvalidArgument with NCCL's WARN text.
///
/// # Safety
/// `config` is NULL or points to at least min(its `size`, 120) readable bytes (and 8 in any
/// case); `netName` and `commName`, where the caller's version has them, are NULL or
/// NUL-terminated strings. Both strings are copied before returning.
pub unsafe fn parse_comm_config(config: *const ncclConfig_t) -> Result<CommConfig> {
    let env = &super::env::env;
    if config.is_null() {
        return resolve(&config_initializer(), &|_| String::new(), env);
    }
    // SAFETY: the caller guarantees the size field and min(size, 120) bytes are readable.
    let size = unsafe { std::ptr::read_unaligned(config as *const usize) };
    let bytes = unsafe { std::slice::from_raw_parts(config as *const u8, size.min(CONFIG_BYTES)) };
    // SAFETY: resolve only passes the string pointers the caller vouched for (after the version
    // resets, which NULL those a caller's version predates).
    let read_str = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    resolve(&overlay(bytes), &read_str, env)
}

/// NCCL's memcpy of the caller's bytes over a default struct whose magic is cleared first, so a
/// struct too short to hold a magic is rejected.
pub fn overlay(caller: &[u8]) -> ncclConfig_t {
    let mut raw = config_initializer();
    raw.magic = 0;
    let n = caller.len().min(CONFIG_BYTES);
    // SAFETY: ncclConfig_t is integers and raw pointers (no padding, any bit pattern valid) and
    // `n` is at most its size. The untyped copy keeps the pointers' provenance.
    unsafe { std::ptr::copy_nonoverlapping(caller.as_ptr(), &mut raw as *mut ncclConfig_t as *mut u8, n) };
    raw
}

/// The NCCL_VERSION code at which each field appeared: older callers get the default back.
fn reset_newer_fields(raw: &mut ncclConfig_t) {
    let d = config_initializer();
    let v = raw.version;
    if v < 21400 {
        raw.blocking = d.blocking;
    }
    if v < 21700 {
        raw.cgaClusterSize = d.cgaClusterSize;
        raw.minCTAs = d.minCTAs;
        raw.maxCTAs = d.maxCTAs;
        raw.netName = d.netName;
    }
    if v < 22500 {
        raw.trafficClass = d.trafficClass;
    }
    if v < 22700 {
        raw.collnetEnable = d.collnetEnable;
        raw.CTAPolicy = d.CTAPolicy;
        raw.shrinkShare = d.shrinkShare;
        raw.nvlsCTAs = d.nvlsCTAs;
    }
    if v < 22800 {
        raw.nChannelsPerNetPeer = d.nChannelsPerNetPeer;
        raw.nvlinkCentricSched = d.nvlinkCentricSched;
    }
    if v < 22900 {
        raw.graphUsageMode = d.graphUsageMode;
        raw.numRmaCtx = d.numRmaCtx;
    }
    if v < 23000 {
        raw.maxP2pPeers = d.maxP2pPeers;
    }
    if v < 23005 {
        raw.graphStreamOrdering = d.graphStreamOrdering;
    }
    // ncclConfig_v23100's fields.
    if v < 23100 {
        raw.launchOrderImplicit = d.launchOrderImplicit;
        raw.numRmaSig = d.numRmaSig;
        raw.rmaEagerInit = d.rmaEagerInit;
        raw.hostCftMode = d.hostCftMode;
        raw.nvlsHostMode = d.nvlsHostMode;
    }
}

/// parseCommConfig's checks, with its messages. UNDEF means "not set" and always passes, except
/// that NCCL compares minCTAs > maxCTAs raw, so a set minCTAs with an unset maxCTAs fails.
fn validate(c: &ncclConfig_t) -> Result<()> {
    let set = |v: i32| v != UNDEF;
    let not_bool = |v: i32| set(v) && v != 0 && v != 1;
    let fail = |what: &str, v: i32| Err(Error::invalid_argument(format!("Invalid config {what} attribute value {v}")));
    if not_bool(c.blocking) {
        return fail("blocking", c.blocking);
    }
    if set(c.cgaClusterSize) && c.cgaClusterSize < 0 {
        return fail("cgaClusterSize", c.cgaClusterSize);
    }
    if (set(c.minCTAs) && c.minCTAs <= 0) || (set(c.maxCTAs) && c.maxCTAs <= 0) || c.minCTAs > c.maxCTAs {
        return Err(Error::invalid_argument(format!(
            "Invalid config min/max channels attribute value {}/{}",
            c.minCTAs, c.maxCTAs
        )));
    }
    if not_bool(c.splitShare) {
        return fail("splitShare", c.splitShare);
    }
    if not_bool(c.collnetEnable) {
        return fail("collnetEnable", c.collnetEnable);
    }
    if set(c.CTAPolicy) && !(CTA_POLICY_DEFAULT..=CTA_POLICY_ZERO).contains(&c.CTAPolicy) {
        return fail("policy", c.CTAPolicy);
    }
    if not_bool(c.shrinkShare) {
        return fail("shrinkShare", c.shrinkShare);
    }
    if set(c.nvlsCTAs) && c.nvlsCTAs <= 0 {
        return fail("nvlsCTAs", c.nvlsCTAs);
    }
    if set(c.nChannelsPerNetPeer) && !(1..=MAX_CHANNELS).contains(&c.nChannelsPerNetPeer) {
        return fail("nChannelsPerNetPeer", c.nChannelsPerNetPeer);
    }
    if not_bool(c.nvlinkCentricSched) {
        return fail("nvlinkCentricSched", c.nvlinkCentricSched);
    }
    // The 2.29-2.30 fields as NCCL 2.30.7 checks them.
    if set(c.graphUsageMode) && !(0..=2).contains(&c.graphUsageMode) {
        return fail("graphUsageMode", c.graphUsageMode);
    }
    if set(c.numRmaCtx) && c.numRmaCtx < 0 {
        return fail("numRmaCtx", c.numRmaCtx);
    }
    if set(c.maxP2pPeers) && c.maxP2pPeers <= 0 {
        return fail("maxP2pPeers", c.maxP2pPeers);
    }
    if not_bool(c.graphStreamOrdering) {
        return fail("graphStreamOrdering", c.graphStreamOrdering);
    }
    // The 2.31 fields, by the ranges their types in nccl.h give.
    if not_bool(c.launchOrderImplicit) {
        return fail("launchOrderImplicit", c.launchOrderImplicit);
    }
    if set(c.numRmaSig) && c.numRmaSig <= 0 {
        return fail("numRmaSig", c.numRmaSig);
    }
    if not_bool(c.rmaEagerInit) {
        return fail("rmaEagerInit", c.rmaEagerInit);
    }
    if set(c.hostCftMode) && !(1..=3).contains(&c.hostCftMode) {
        return fail("hostCftMode", c.hostCftMode);
    }
    if set(c.nvlsHostMode) && c.nvlsHostMode < 0 {
        return fail("nvlsHostMode", c.nvlsHostMode);
    }
    Ok(())
}

/// A set field's value (with NCCL's "Comm config X set to V" INFO), else the default.
fn or_default(v: i32, default: i32, what: &str) -> i32 {
    if v == UNDEF {
        return default;
    }
    nccl_info!(Subsys::Env, "Comm config {} set to {}", what, v);
    v
}

/// The pure core of `parse_comm_config`: `raw` is the struct after the byte overlay, `read_str`
/// copies a non-NULL C string, `env` looks a setting up.
fn resolve(
    raw: &ncclConfig_t,
    read_str: &dyn Fn(*const c_char) -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<CommConfig> {
    if raw.magic != NCCL_CONFIG_MAGIC {
        return Err(Error::invalid_argument("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER"));
    }
    let mut c = *raw;
    reset_newer_fields(&mut c);
    validate(&c)?;
    let string = |p: *const c_char, what: &str| {
        let s = (!p.is_null()).then(|| read_str(p));
        if let Some(s) = &s {
            nccl_info!(Subsys::Env, "Comm config {} set to {}", what, s);
        }
        s
    };
    let mut cfg = CommConfig {
        blocking: or_default(c.blocking, 1, "Blocking") != 0,
        cga_cluster_size: or_default(c.cgaClusterSize, 4, "CGA cluster size"),
        min_ctas: or_default(c.minCTAs, 1, "Min CTAs"),
        max_ctas: or_default(c.maxCTAs, MAX_CHANNELS, "Max CTAs"),
        net_name: string(c.netName, "Net name"),
        split_share: or_default(c.splitShare, 0, "Split share") != 0,
        traffic_class: or_default(c.trafficClass, UNDEF, "Traffic class"),
        comm_name: string(c.commName, "Comm name"),
        collnet_enable: or_default(c.collnetEnable, 0, "Collnet enable") != 0,
        cta_policy: or_default(c.CTAPolicy, CTA_POLICY_DEFAULT, "CTA policy flags"),
        shrink_share: or_default(c.shrinkShare, 0, "shrinkShare") != 0,
        nvls_ctas: or_default(c.nvlsCTAs, UNDEF, "nvlsCTAs"),
        n_channels_per_net_peer: or_default(c.nChannelsPerNetPeer, UNDEF, "nChannelsPerNetPeer"),
        nvlink_centric_sched: or_default(c.nvlinkCentricSched, 0, "nvlinkCentricSched") != 0,
        graph_usage_mode: or_default(c.graphUsageMode, 2, "graphUsageMode"),
        num_rma_ctx: or_default(c.numRmaCtx, 1, "numRmaCtx"),
        max_p2p_peers: or_default(c.maxP2pPeers, UNDEF, "maxP2pPeers"),
        graph_stream_ordering: or_default(c.graphStreamOrdering, UNDEF, "graphStreamOrdering"),
        launch_order_implicit: or_default(c.launchOrderImplicit, 0, "launchOrderImplicit") != 0,
        num_rma_sig: or_default(c.numRmaSig, 1, "numRmaSig"),
        rma_eager_init: or_default(c.rmaEagerInit, 0, "rmaEagerInit") != 0,
        host_cft_mode: or_default(c.hostCftMode, UNDEF, "hostCftMode"),
        nvls_host_mode: or_default(c.nvlsHostMode, UNDEF, "nvlsHostMode"),
    };
    apply_env_overrides(&mut cfg, env);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;
    use std::collections::HashMap;
    use std::ffi::CString;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn read(p: *const c_char) -> String {
        // Tests only hand out pointers to live CStrings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn bytes_of(c: &ncclConfig_t) -> Vec<u8> {
        let p = c as *const ncclConfig_t as *const u8;
        // SAFETY: reading the bytes of a live, padding-free struct.
        unsafe { std::slice::from_raw_parts(p, CONFIG_BYTES) }.to_vec()
    }

    /// The caller's struct of `size` bytes, as parse_comm_config would see it.
    fn parse_sized(c: &ncclConfig_t, size: usize, env: &dyn Fn(&str) -> Option<String>) -> Result<CommConfig> {
        let mut c = *c;
        c.size = size;
        let bytes = bytes_of(&c);
        resolve(&overlay(&bytes[..size.min(CONFIG_BYTES)]), &read, env)
    }

    fn parse(c: &ncclConfig_t) -> Result<CommConfig> {
        parse_sized(c, CONFIG_BYTES, &no_env)
    }

    fn code(r: Result<CommConfig>) -> ResultCode {
        r.err().map_or(ResultCode::Success, |e| e.code)
    }

    #[test]
    fn null_config_gives_defaults() {
        let cfg = unsafe { parse_comm_config(std::ptr::null()) }.expect("NULL config");
        // The test environment may carry NCCL_* overrides; compare against the same env.
        assert_eq!(cfg, CommConfig::default());
        assert_eq!(resolve(&config_initializer(), &read, &no_env).ok(), Some(CommConfig::builtin_defaults()));
    }

    #[test]
    fn initializer_gives_nccl_defaults() {
        let cfg = parse(&config_initializer()).expect("initializer");
        assert!(cfg.blocking);
        assert_eq!((cfg.cga_cluster_size, cfg.min_ctas, cfg.max_ctas), (4, 1, 64));
        assert_eq!(cfg.traffic_class, UNDEF);
        assert_eq!(cfg.nvls_ctas, UNDEF);
        assert_eq!(cfg.n_channels_per_net_peer, UNDEF);
        assert_eq!(cfg.cta_policy, 0);
        assert!(!cfg.split_share && !cfg.collnet_enable && !cfg.shrink_share && !cfg.nvlink_centric_sched);
        assert_eq!(cfg.net_name, None);
        assert_eq!(cfg.comm_name, None);
        assert_eq!(cfg, CommConfig::builtin_defaults());
    }

    #[test]
    fn parses_through_the_raw_pointer() {
        let name = CString::new("world").expect("cstring");
        let mut c = config_initializer();
        c.blocking = 0;
        c.commName = name.as_ptr();
        c.nvlinkCentricSched = 1; // as nccl-tests does
        let cfg = unsafe { parse_comm_config(&c) }.expect("config");
        assert!(!cfg.blocking || std::env::var_os("NCCL_COMM_BLOCKING").is_some());
        assert_eq!(cfg.comm_name.as_deref(), Some("world"));
    }

    #[test]
    fn every_field_is_read() {
        let net = CString::new("IB").expect("cstring");
        let name = CString::new("trainer").expect("cstring");
        let mut c = config_initializer();
        c.blocking = 0;
        c.cgaClusterSize = 2;
        c.minCTAs = 4;
        c.maxCTAs = 16;
        c.netName = net.as_ptr();
        c.splitShare = 1;
        c.trafficClass = 106;
        c.commName = name.as_ptr();
        c.collnetEnable = 1;
        c.CTAPolicy = 2;
        c.shrinkShare = 1;
        c.nvlsCTAs = 8;
        c.nChannelsPerNetPeer = 2;
        c.nvlinkCentricSched = 1;
        c.graphUsageMode = 1;
        c.numRmaCtx = 3;
        c.maxP2pPeers = 5;
        c.graphStreamOrdering = 0;
        c.launchOrderImplicit = 1;
        c.numRmaSig = 6;
        c.rmaEagerInit = 1;
        c.hostCftMode = 2;
        c.nvlsHostMode = 3;
        let cfg = parse(&c).expect("config");
        let want = CommConfig {
            blocking: false,
            cga_cluster_size: 2,
            min_ctas: 4,
            max_ctas: 16,
            net_name: Some("IB".into()),
            split_share: true,
            traffic_class: 106,
            comm_name: Some("trainer".into()),
            collnet_enable: true,
            cta_policy: 2,
            shrink_share: true,
            nvls_ctas: 8,
            n_channels_per_net_peer: 2,
            nvlink_centric_sched: true,
            graph_usage_mode: 1,
            num_rma_ctx: 3,
            max_p2p_peers: 5,
            graph_stream_ordering: 0,
            launch_order_implicit: true,
            num_rma_sig: 6,
            rma_eager_init: true,
            host_cft_mode: 2,
            nvls_host_mode: 3,
        };
        assert_eq!(cfg, want);
    }

    #[test]
    fn small_2_17_struct_keeps_later_fields_default() {
        // A 2.17 caller: its struct ends after trafficClass's slot (48 bytes); the bytes beyond
        // are garbage here and must not be read.
        let mut c = config_initializer();
        c.version = 21700;
        c.blocking = 0;
        c.maxCTAs = 8;
        c.commName = std::ptr::NonNull::<c_char>::dangling().as_ptr(); // would crash if dereferenced
        c.collnetEnable = 77;
        c.nvlinkCentricSched = 99;
        let cfg = parse_sized(&c, 48, &no_env).expect("2.17 config");
        assert!(!cfg.blocking);
        assert_eq!(cfg.max_ctas, 8);
        assert_eq!(cfg.comm_name, None);
        assert!(!cfg.collnet_enable && !cfg.nvlink_centric_sched);
    }

    #[test]
    fn larger_struct_is_read_up_to_120_bytes() {
        let mut c = config_initializer();
        c.minCTAs = 2;
        c.maxCTAs = 32; // minCTAs alone fails: NCCL compares it with an unset (INT_MIN) maxCTAs
        assert_eq!(parse_sized(&c, 136, &no_env).map(|c| c.min_ctas).ok(), Some(2));
        // Through the pointer too: a 136-byte caller buffer whose tail is never looked at.
        let mut buf = [0u8; 136];
        c.size = 136;
        buf[..CONFIG_BYTES].copy_from_slice(&bytes_of(&c));
        buf[CONFIG_BYTES..].fill(0xff);
        let cfg = unsafe { parse_comm_config(buf.as_ptr() as *const ncclConfig_t) }.expect("136-byte config");
        if std::env::var_os("NCCL_MIN_CTAS").is_none() && std::env::var_os("NCCL_MAX_CTAS").is_none() {
            assert_eq!(cfg.min_ctas, 2);
        }
    }

    #[test]
    fn a_2_28_caller_is_read_to_its_80_bytes() {
        // An 80-byte ncclConfig_v22800 followed by bytes that would fail every 2.29-2.31 field.
        let mut c = config_initializer();
        c.version = 22809;
        c.size = 80;
        c.maxCTAs = 16;
        let mut buf = [0x7fu8; CONFIG_BYTES];
        buf[..80].copy_from_slice(&bytes_of(&c)[..80]);
        let cfg = unsafe { parse_comm_config(buf.as_ptr() as *const ncclConfig_t) }.expect("2.28 config");
        if std::env::var_os("NCCL_MAX_CTAS").is_none() {
            assert_eq!(cfg.max_ctas, 16);
        }
        let d = CommConfig::builtin_defaults();
        assert_eq!((cfg.graph_usage_mode, cfg.num_rma_sig, cfg.host_cft_mode), (d.graph_usage_mode, d.num_rma_sig, d.host_cft_mode));
        assert_eq!(CONFIG_BYTES, 120);
    }

    #[test]
    fn bad_magic_and_short_structs_are_rejected() {
        let mut c = config_initializer();
        c.magic = 0xdeadbeef;
        let e = parse(&c).expect_err("bad magic");
        assert_eq!(e.code, ResultCode::InvalidArgument);
        assert!(e.msg.contains("NCCL_CONFIG_INITIALIZER"));
        // A size too small to reach the magic leaves it cleared.
        assert_eq!(code(parse_sized(&config_initializer(), 8, &no_env)), ResultCode::InvalidArgument);
        assert_eq!(code(parse_sized(&config_initializer(), 0, &no_env)), ResultCode::InvalidArgument);
        assert_eq!(code(parse_sized(&config_initializer(), 12, &no_env)), ResultCode::Success);
    }

    #[test]
    fn invalid_values_are_rejected_with_field_and_value() {
        type Set = fn(&mut ncclConfig_t);
        let cases: [(Set, &str); 22] = [
            (|c| c.blocking = 2, "blocking attribute value 2"),
            (|c| c.cgaClusterSize = -1, "cgaClusterSize attribute value -1"),
            (|c| c.minCTAs = 0, "min/max channels attribute value 0/"),
            (|c| c.maxCTAs = -3, "min/max channels attribute value "),
            (|c| { c.minCTAs = 8; c.maxCTAs = 4 }, "min/max channels attribute value 8/4"),
            (|c| c.minCTAs = 8, "min/max channels attribute value 8/"), // NCCL quirk: max unset
            (|c| c.splitShare = 3, "splitShare attribute value 3"),
            (|c| c.collnetEnable = -1, "collnetEnable attribute value -1"),
            (|c| c.CTAPolicy = 3, "policy attribute value 3"),
            (|c| c.shrinkShare = 2, "shrinkShare attribute value 2"),
            (|c| c.nvlsCTAs = 0, "nvlsCTAs attribute value 0"),
            (|c| c.nChannelsPerNetPeer = 65, "nChannelsPerNetPeer attribute value 65"),
            (|c| c.nvlinkCentricSched = 2, "nvlinkCentricSched attribute value 2"),
            (|c| c.graphUsageMode = 3, "graphUsageMode attribute value 3"),
            (|c| c.numRmaCtx = -1, "numRmaCtx attribute value -1"),
            (|c| c.maxP2pPeers = 0, "maxP2pPeers attribute value 0"),
            (|c| c.graphStreamOrdering = 2, "graphStreamOrdering attribute value 2"),
            (|c| c.launchOrderImplicit = 2, "launchOrderImplicit attribute value 2"),
            (|c| c.numRmaSig = 0, "numRmaSig attribute value 0"),
            (|c| c.rmaEagerInit = -1, "rmaEagerInit attribute value -1"),
            (|c| c.hostCftMode = 0, "hostCftMode attribute value 0"),
            (|c| c.nvlsHostMode = -2, "nvlsHostMode attribute value -2"),
        ];
        for (set, text) in cases {
            let mut c = config_initializer();
            set(&mut c);
            let e = parse(&c).expect_err(text);
            assert_eq!(e.code, ResultCode::InvalidArgument, "{text}");
            assert!(e.msg.contains(text), "{:?} lacks {text:?}", e.msg);
        }
        // The boundaries that pass.
        let mut c = config_initializer();
        c.cgaClusterSize = 0;
        c.maxCTAs = 1;
        c.nChannelsPerNetPeer = 64;
        c.CTAPolicy = 0;
        assert!(parse(&c).is_ok());
    }

    #[test]
    fn fields_newer_than_the_callers_version_are_reset() {
        let mut c = config_initializer();
        c.blocking = 7; // invalid, but a 2.13 caller has no such field
        c.cgaClusterSize = -5;
        c.trafficClass = 3;
        c.collnetEnable = 9;
        c.CTAPolicy = 9;
        c.shrinkShare = 9;
        c.nvlsCTAs = -1;
        c.nChannelsPerNetPeer = 0;
        c.nvlinkCentricSched = 9;
        c.netName = std::ptr::NonNull::<c_char>::dangling().as_ptr(); // must not be read
        c.version = 21300;
        assert_eq!(parse(&c).ok(), Some(CommConfig::builtin_defaults()));

        let mut c = config_initializer();
        c.trafficClass = 3;
        c.version = 22400;
        assert_eq!(parse(&c).map(|c| c.traffic_class).ok(), Some(UNDEF));
        c.version = 22500;
        assert_eq!(parse(&c).map(|c| c.traffic_class).ok(), Some(3));

        let mut c = config_initializer();
        c.nvlsCTAs = 4;
        c.nvlinkCentricSched = 1;
        c.version = 22700;
        let cfg = parse(&c).expect("2.27");
        assert_eq!(cfg.nvls_ctas, 4);
        assert!(!cfg.nvlink_centric_sched);
        // Each 2.29-2.31 field from the version that added it.
        let mut c = config_initializer();
        c.graphUsageMode = 0;
        c.maxP2pPeers = 3;
        c.graphStreamOrdering = 1;
        c.numRmaSig = 4;
        let at = |v: u32| {
            let mut c = c;
            c.version = v;
            let g = parse(&c).expect("config");
            (g.graph_usage_mode, g.max_p2p_peers, g.graph_stream_ordering, g.num_rma_sig)
        };
        assert_eq!(at(22809), (2, UNDEF, UNDEF, 1));
        assert_eq!(at(22900), (0, UNDEF, UNDEF, 1));
        assert_eq!(at(23000), (0, 3, UNDEF, 1));
        assert_eq!(at(23005), (0, 3, 1, 1));
        assert_eq!(at(23100), (0, 3, 1, 4));
    }

    #[test]
    fn env_overrides_apply_after_defaults() {
        let vars: HashMap<&str, &str> = [
            ("NCCL_COMM_BLOCKING", "0"),
            ("NCCL_CGA_CLUSTER_SIZE", "12"),
            ("NCCL_MIN_CTAS", "8"),
            ("NCCL_MAX_CTAS", "100"),
            ("NCCL_NET", "Socket"),
            ("NCCL_COMM_SPLIT_SHARE_RESOURCES", "1"),
            ("NCCL_COMM_SHRINK_SHARE_RESOURCES", "1"),
            ("NCCL_COLLNET_ENABLE", "1"),
            ("NCCL_CTA_POLICY", "1"),
            ("NCCL_NVLS_NCHANNELS", "16"),
            ("NCCL_NCHANNELS_PER_NET_PEER", "4"),
            ("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "1"),
            ("NCCL_GRAPH_MIXING_SUPPORT", "0"),
            ("NCCL_NUM_RMA_CTX", "0"),
            ("NCCL_MAX_P2P_PEERS", "7"),
            ("NCCL_GRAPH_STREAM_ORDERING", "1"),
            ("NCCL_LAUNCH_ORDER_IMPLICIT", "1"),
        ]
        .into_iter()
        .collect();
        let env = |n: &str| vars.get(n).map(|v| v.to_string());
        let net = CString::new("IB").expect("cstring");
        let mut c = config_initializer();
        c.netName = net.as_ptr();
        let cfg = parse_sized(&c, CONFIG_BYTES, &env).expect("config");
        let want = CommConfig {
            blocking: false,
            cga_cluster_size: 8, // limited to NCCL_MAX_CGA_CLUSTER_SIZE
            min_ctas: 8,
            max_ctas: 64, // capped at MAXCHANNELS
            net_name: Some("Socket".into()),
            split_share: true,
            traffic_class: UNDEF,
            comm_name: None,
            collnet_enable: true,
            cta_policy: 1,
            shrink_share: true,
            nvls_ctas: 16,
            n_channels_per_net_peer: 4,
            nvlink_centric_sched: true,
            graph_usage_mode: 0,
            num_rma_ctx: 0,
            max_p2p_peers: 7,
            graph_stream_ordering: 1,
            launch_order_implicit: true,
            ..CommConfig::builtin_defaults()
        };
        assert_eq!(cfg, want);
    }
}
