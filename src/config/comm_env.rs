//! The environment's say over a communicator's config, in the order and with the clamping of
//! NCCL 2.28.9 src/init.cc envConfigOverride (run after the defaults, and again for a child
//! that inherits its parent's config).

use super::comm_config::{CommConfig, CTA_POLICY_DEFAULT, CTA_POLICY_ZERO, MAX_CHANNELS};
use super::env::parse_param;
use super::abi::NCCL_CONFIG_UNDEF_INT as UNDEF;
use crate::log::Subsys;

/// NCCL_MAX_CGA_CLUSTER_SIZE.
const MAX_CGA_CLUSTER_SIZE: i32 = 8;

/// Applies NCCL_COMM_BLOCKING, NCCL_CGA_CLUSTER_SIZE, NCCL_MIN_CTAS, NCCL_MAX_CTAS,
/// NCCL_NCHANNELS_PER_NET_PEER, NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE, NCCL_NET,
/// NCCL_COMM_SPLIT_SHARE_RESOURCES, NCCL_COMM_SHRINK_SHARE_RESOURCES, NCCL_COLLNET_ENABLE,
/// NCCL_CTA_POLICY and NCCL_NVLS_NCHANNELS, then NCCL's final clamps. Out-of-range environment
/// values are ignored or clamped, never errors.
pub fn apply_env_overrides(cfg: &mut CommConfig, env: &dyn Fn(&str) -> Option<String>) {
    // NCCL reads these as int64 parameters (default UNDEF) and stores them into ints.
    let param = |name: &str| env(name).map_or(i64::from(UNDEF), |v| parse_param(name, &v, i64::from(UNDEF))) as i32;

    let blocking = param("NCCL_COMM_BLOCKING");
    if blocking == 0 || blocking == 1 {
        cfg.blocking = blocking == 1;
    }

    let cga = param("NCCL_CGA_CLUSTER_SIZE");
    if (0..=MAX_CGA_CLUSTER_SIZE).contains(&cga) {
        nccl_info!(Subsys::Env, "Comm config cgaClusterSize reset to NCCL_MAX_CGA_CLUSTER_SIZE={}", cga);
        cfg.cga_cluster_size = cga;
    } else if cga > MAX_CGA_CLUSTER_SIZE {
        nccl_info!(Subsys::Env, "NCCL_CGA_CLUSTER_SIZE value {} is too big. Limiting value to {}.", cga, MAX_CGA_CLUSTER_SIZE);
        cfg.cga_cluster_size = MAX_CGA_CLUSTER_SIZE;
    }

    positive_override(param("NCCL_MIN_CTAS"), &mut cfg.min_ctas, "NCCL_MIN_CTAS", "minCTAs");
    positive_override(param("NCCL_MAX_CTAS"), &mut cfg.max_ctas, "NCCL_MAX_CTAS", "maxCTAs");
    positive_override(
        param("NCCL_NCHANNELS_PER_NET_PEER"),
        &mut cfg.n_channels_per_net_peer,
        "NCCL_NCHANNELS_PER_NET_PEER",
        "nChannelsPerNetPeer",
    );

    let sched = param("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE");
    if sched != UNDEF {
        if sched == 0 || sched == 1 {
            nccl_info!(Subsys::Env, "Comm config nvlinkCentricSched reset to NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE={}", sched);
            cfg.nvlink_centric_sched = sched == 1;
        } else {
            nccl_info!(Subsys::Env, "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE {} is not valid, leaving it set at {}", sched, i32::from(cfg.nvlink_centric_sched));
        }
    }

    if let Some(net) = env("NCCL_NET") {
        if cfg.net_name.is_some() {
            nccl_info!(Subsys::Env, "Comm config netName reset to NCCL_NET={}", net);
        }
        cfg.net_name = Some(net);
    }

    // splitShare and collnetEnable take any integer here and are checked for 0/1 below.
    let mut split_share = i32::from(cfg.split_share);
    let split = param("NCCL_COMM_SPLIT_SHARE_RESOURCES");
    if split != UNDEF {
        split_share = split;
    }
    let shrink = param("NCCL_COMM_SHRINK_SHARE_RESOURCES");
    if shrink != UNDEF {
        cfg.shrink_share = shrink != 0;
    }
    let mut collnet_enable = i32::from(cfg.collnet_enable);
    let collnet = param("NCCL_COLLNET_ENABLE");
    if collnet != UNDEF {
        collnet_enable = collnet;
    }
    let policy = param("NCCL_CTA_POLICY");
    if policy != UNDEF {
        cfg.cta_policy = policy;
    }
    let nvls = param("NCCL_NVLS_NCHANNELS");
    if nvls != UNDEF {
        cfg.nvls_ctas = nvls;
    }

    // NCCL 2.30.7's overrides of the 2.29-2.30 fields (launchOrderImplicit: 2.31's field for its
    // older NCCL_LAUNCH_ORDER_IMPLICIT).
    let mixing = param("NCCL_GRAPH_MIXING_SUPPORT");
    if mixing == 0 || mixing == 1 {
        cfg.graph_usage_mode = if mixing == 1 { 2 } else { 0 };
        nccl_info!(Subsys::Env, "Comm config graphUsageMode reset to {} by NCCL_GRAPH_MIXING_SUPPORT={}", cfg.graph_usage_mode, mixing);
    } else if mixing != UNDEF {
        nccl_info!(Subsys::Env, "NCCL_GRAPH_MIXING_SUPPORT {} is not valid, leaving it set at {}", mixing, cfg.graph_usage_mode);
    }
    let rma_ctx = param("NCCL_NUM_RMA_CTX");
    if rma_ctx != UNDEF {
        if rma_ctx < 0 {
            nccl_info!(Subsys::Env, "NCCL_NUM_RMA_CTX {} is too low, leaving it set at {}", rma_ctx, cfg.num_rma_ctx);
        } else {
            cfg.num_rma_ctx = rma_ctx;
        }
    }
    positive_override(param("NCCL_MAX_P2P_PEERS"), &mut cfg.max_p2p_peers, "NCCL_MAX_P2P_PEERS", "maxP2pPeers");
    let ordering = param("NCCL_GRAPH_STREAM_ORDERING");
    if ordering == 0 || ordering == 1 {
        cfg.graph_stream_ordering = ordering;
    } else if ordering != UNDEF {
        nccl_info!(Subsys::Env, "NCCL_GRAPH_STREAM_ORDERING {} is not valid, leaving it set at {}", ordering, cfg.graph_stream_ordering);
    }
    let implicit = param("NCCL_LAUNCH_ORDER_IMPLICIT");
    if implicit == 0 || implicit == 1 {
        cfg.launch_order_implicit = implicit == 1;
    }

    // Final clamps.
    cfg.min_ctas = cfg.min_ctas.min(MAX_CHANNELS);
    cfg.max_ctas = cfg.max_ctas.min(MAX_CHANNELS);
    if cfg.min_ctas > cfg.max_ctas {
        nccl_info!(Subsys::Env, "minCTAs {} is larger than maxCTAs {}, set both to {}", cfg.min_ctas, cfg.max_ctas, cfg.max_ctas);
        cfg.min_ctas = cfg.max_ctas;
    }
    cfg.split_share = split_share == 1;
    cfg.collnet_enable = collnet_enable == 1;
    if !(CTA_POLICY_DEFAULT..=CTA_POLICY_ZERO).contains(&cfg.cta_policy) {
        nccl_info!(Subsys::Env, "CTAPolicy {} is not a valid value, set it to {}", cfg.cta_policy, CTA_POLICY_DEFAULT);
        cfg.cta_policy = CTA_POLICY_DEFAULT;
    }
    if cfg.nvls_ctas != UNDEF && cfg.nvls_ctas <= 0 {
        cfg.nvls_ctas = UNDEF; // NCCL decides
    }
}

/// NCCL's pattern for CTA counts: a set value <= 0 is ignored, else it replaces the field.
fn positive_override(value: i32, field: &mut i32, var: &str, what: &str) {
    if value == UNDEF {
        return;
    }
    if value <= 0 {
        nccl_info!(Subsys::Env, "{} {} is too low, leaving it set at {}", var, value, *field);
    } else {
        nccl_info!(Subsys::Env, "Comm config {} reset to {}={}", what, var, value);
        *field = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with_env(vars: &[(&str, &str)]) -> CommConfig {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut cfg = CommConfig::builtin_defaults();
        apply_env_overrides(&mut cfg, &|n| map.get(n).cloned());
        cfg
    }

    #[test]
    fn no_env_changes_nothing() {
        assert_eq!(with_env(&[]), CommConfig::builtin_defaults());
    }

    #[test]
    fn blocking_takes_only_0_or_1() {
        assert!(!with_env(&[("NCCL_COMM_BLOCKING", "0")]).blocking);
        assert!(with_env(&[("NCCL_COMM_BLOCKING", "2")]).blocking);
        assert!(with_env(&[("NCCL_COMM_BLOCKING", "junk")]).blocking);
    }

    #[test]
    fn cga_is_limited_to_8_and_negative_ignored() {
        assert_eq!(with_env(&[("NCCL_CGA_CLUSTER_SIZE", "0")]).cga_cluster_size, 0);
        assert_eq!(with_env(&[("NCCL_CGA_CLUSTER_SIZE", "9")]).cga_cluster_size, 8);
        assert_eq!(with_env(&[("NCCL_CGA_CLUSTER_SIZE", "-1")]).cga_cluster_size, 4);
    }

    #[test]
    fn cta_counts() {
        let c = with_env(&[("NCCL_MIN_CTAS", "0"), ("NCCL_MAX_CTAS", "-2")]);
        assert_eq!((c.min_ctas, c.max_ctas), (1, 64));
        let c = with_env(&[("NCCL_MIN_CTAS", "32"), ("NCCL_MAX_CTAS", "8")]);
        assert_eq!((c.min_ctas, c.max_ctas), (8, 8), "min > max: both set to max");
        let c = with_env(&[("NCCL_MIN_CTAS", "200")]);
        assert_eq!((c.min_ctas, c.max_ctas), (64, 64));
        let c = with_env(&[("NCCL_NCHANNELS_PER_NET_PEER", "0")]);
        assert_eq!(c.n_channels_per_net_peer, UNDEF);
    }

    #[test]
    fn booleans_and_policies() {
        let c = with_env(&[
            ("NCCL_COMM_SPLIT_SHARE_RESOURCES", "5"),
            ("NCCL_COLLNET_ENABLE", "7"),
            ("NCCL_CTA_POLICY", "9"),
            ("NCCL_NVLS_NCHANNELS", "-4"),
            ("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "3"),
            ("NCCL_COMM_SHRINK_SHARE_RESOURCES", "1"),
        ]);
        assert!(!c.split_share && !c.collnet_enable && !c.nvlink_centric_sched);
        assert_eq!(c.cta_policy, 0);
        assert_eq!(c.nvls_ctas, UNDEF);
        assert!(c.shrink_share);
    }

    #[test]
    fn env_can_clear_a_callers_flag() {
        let mut cfg = CommConfig::builtin_defaults();
        cfg.split_share = true;
        cfg.collnet_enable = true;
        let env = |n: &str| {
            matches!(n, "NCCL_COMM_SPLIT_SHARE_RESOURCES" | "NCCL_COLLNET_ENABLE").then(|| "0".to_string())
        };
        apply_env_overrides(&mut cfg, &env);
        assert!(!cfg.split_share && !cfg.collnet_enable);
    }

    #[test]
    fn net_name_from_env() {
        assert_eq!(with_env(&[("NCCL_NET", "Socket")]).net_name.as_deref(), Some("Socket"));
    }
}
