//! Which transports a communicator uses: a pure function of the settings, so every rank decides
//! alike (and init checks that they did, through PeerInfo::paths).
//!
//! Between GPUs of one host (`LocalPath`):
//! - `Memory` (default): MemoryChannels, GPU threads copying over NVLink/PCIe peer mappings.
//! - `CopyEngine` (OXCCL_LOCAL_TRANSPORT=ce): PortChannel over CUDA IPC. Every rank is planned as
//!   a host of its own, and the proxy threads move the data with copy-engine copies
//!   (`ce`), so no SM copies data between GPUs.
//! - `Host` (OXCCL_LOCAL_TRANSPORT=host, or NCCL_P2P_DISABLE=1): no peer GPU memory at all; data is
//!   staged through pinned host memory over TCP on the host itself. This is the nearest oxccl
//!   meaning of NCCL with P2P disabled (NCCL then uses its SHM transport, or its network transport
//!   when NCCL_SHM_DISABLE=1 too; oxccl's host path is already the network one, so
//!   NCCL_SHM_DISABLE changes nothing).
//!
//! Between hosts (`NetWant`): TCP sockets, or InfiniBand/RoCE verbs when built with the `ib`
//! feature and a device is found. NCCL_NET=Socket or NCCL_IB_DISABLE=1 force sockets;
//! NCCL_NET=IB requires InfiniBand (an error when it is unavailable, as in NCCL).

use crate::error::{Error, Result};

/// How ranks on one host reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalPath {
    /// MemoryChannels: GPU threads copy over NVLink/PCIe peer mappings (the default).
    Memory,
    /// PortChannels over CUDA IPC, the proxy moving data with copy-engine copies
    /// (OXCCL_LOCAL_TRANSPORT=ce).
    CopyEngine,
    /// No peer GPU memory: staged through pinned host memory over TCP (OXCCL_LOCAL_TRANSPORT=host,
    /// or NCCL_P2P_DISABLE=1).
    Host,
}

/// Which network carries traffic between hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetWant {
    /// TCP sockets (NCCL_NET=Socket, NCCL_IB_DISABLE=1, or a build without `ib`).
    Socket,
    /// NCCL_NET=IB: InfiniBand or an error.
    Ib,
    /// InfiniBand when built in and a device is found, else sockets.
    Auto,
}

/// The settings the choice depends on (read from the environment by `Knobs::from_env`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// OXCCL_LOCAL_TRANSPORT as set (memory, ce or host, and their aliases); None: unset.
    pub local: Option<String>,
    /// NCCL_P2P_DISABLE: no peer GPU memory between ranks of one host.
    pub p2p_disable: bool,
    /// NCCL_IB_DISABLE: no InfiniBand, sockets across hosts.
    pub ib_disable: bool,
    /// ncclConfig_t.netName, or NCCL_NET (config::comm_env applies the precedence).
    pub net_name: Option<String>,
}

impl Knobs {
    /// Reads OXCCL_LOCAL_TRANSPORT, NCCL_P2P_DISABLE and NCCL_IB_DISABLE; `net_name` is the
    /// communicator's netName or NCCL_NET, as already resolved.
    pub fn from_env(net_name: Option<&str>) -> Knobs {
        use crate::config::{env, env_bool};
        Knobs {
            local: env("OXCCL_LOCAL_TRANSPORT"),
            p2p_disable: env_bool("NCCL_P2P_DISABLE", false),
            ib_disable: env_bool("NCCL_IB_DISABLE", false),
            net_name: net_name.map(str::to_string),
        }
    }
}

/// The transports a communicator uses (`choose`); every rank must choose the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Between GPUs of one host.
    pub local: LocalPath,
    /// Between hosts.
    pub net: NetWant,
}

impl Paths {
    /// For PeerInfo: ranks must agree.
    pub fn code(self) -> u32 {
        let l = match self.local {
            LocalPath::Memory => 0,
            LocalPath::CopyEngine => 1,
            LocalPath::Host => 2,
        };
        let n = match self.net {
            NetWant::Socket => 0,
            NetWant::Ib => 1,
            NetWant::Auto => 2,
        };
        l | n << 4
    }

    /// The choice in words, for log lines.
    pub fn describe(self) -> String {
        let l = match self.local {
            LocalPath::Memory => "MemoryChannel (peer GPU memory)",
            LocalPath::CopyEngine => "copy engine (PortChannel over CUDA IPC)",
            LocalPath::Host => "host-staged TCP",
        };
        let n = match self.net {
            NetWant::Socket => "TCP sockets",
            NetWant::Ib => "InfiniBand",
            NetWant::Auto => "InfiniBand if found, else TCP sockets",
        };
        format!("on one host {l}; across hosts {n}")
    }
}

/// `ib_built`: whether this library was built with the `ib` feature.
pub fn choose(k: &Knobs, ib_built: bool) -> Result<Paths> {
    let explicit = match k.local.as_deref().map(|s| s.trim().to_ascii_lowercase()) {
        None => None,
        Some(s) => Some(match s.as_str() {
            "memory" | "nvlink" | "p2p" => LocalPath::Memory,
            "ce" | "copy-engine" | "copyengine" => LocalPath::CopyEngine,
            "host" | "tcp" => LocalPath::Host,
            _ => {
                return Err(Error::invalid_usage(format!(
                    "OXCCL_LOCAL_TRANSPORT={s}: expected memory (the default), ce (copy engine) or host"
                )))
            }
        }),
    };
    let local = match (k.p2p_disable, explicit) {
        (false, l) => l.unwrap_or(LocalPath::Memory),
        (true, None | Some(LocalPath::Host)) => LocalPath::Host,
        (true, Some(l)) => {
            nccl_warn!("NCCL_P2P_DISABLE=1 forbids peer GPU memory, which OXCCL_LOCAL_TRANSPORT={l:?} needs; using the host-staged path");
            LocalPath::Host
        }
    };
    let net = match k.net_name.as_deref().map(str::trim) {
        None | Some("") => {
            if k.ib_disable || !ib_built {
                NetWant::Socket
            } else {
                NetWant::Auto
            }
        }
        Some(n) if n.eq_ignore_ascii_case("socket") => NetWant::Socket,
        Some(n) if n.eq_ignore_ascii_case("ib") => {
            if !ib_built {
                return Err(Error::invalid_usage("NCCL_NET=IB: this oxccl was built without InfiniBand (cargo feature `ib`)"));
            }
            if k.ib_disable {
                return Err(Error::invalid_usage("NCCL_NET=IB with NCCL_IB_DISABLE=1: no network left to use"));
            }
            NetWant::Ib
        }
        Some(n) => return Err(Error::invalid_usage(format!("network {n} not found (NCCL_NET / netName): oxccl has Socket and IB"))),
    };
    Ok(Paths { local, net })
}

/// The paths every rank chose must be the same (they decide the plan and the links).
pub fn agree(codes: &[u32]) -> Result<()> {
    match codes.iter().position(|&c| c != codes[0]) {
        None => Ok(()),
        Some(r) => Err(Error::invalid_usage(format!(
            "rank {r} chose other transports than rank 0 (transport code {:#x} vs {:#x}): \
             OXCCL_LOCAL_TRANSPORT, NCCL_P2P_DISABLE, NCCL_IB_DISABLE and NCCL_NET must be equal on every rank",
            codes[r], codes[0]
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(local: Option<&str>, p2p: bool, ib: bool, net: Option<&str>) -> Knobs {
        Knobs { local: local.map(Into::into), p2p_disable: p2p, ib_disable: ib, net_name: net.map(Into::into) }
    }

    #[test]
    fn defaults_and_local_paths() {
        let p = choose(&Knobs::default(), false).unwrap();
        assert_eq!(p, Paths { local: LocalPath::Memory, net: NetWant::Socket });
        assert_eq!(choose(&Knobs::default(), true).unwrap().net, NetWant::Auto);
        assert_eq!(choose(&k(Some("CE"), false, false, None), false).unwrap().local, LocalPath::CopyEngine);
        assert_eq!(choose(&k(Some(" copy-engine "), false, false, None), false).unwrap().local, LocalPath::CopyEngine);
        assert_eq!(choose(&k(Some("host"), false, false, None), false).unwrap().local, LocalPath::Host);
        assert_eq!(choose(&k(Some("nvlink"), false, false, None), false).unwrap().local, LocalPath::Memory);
        assert!(choose(&k(Some("shm"), false, false, None), false).is_err());
    }

    #[test]
    fn p2p_disable_means_host_staging() {
        assert_eq!(choose(&k(None, true, false, None), false).unwrap().local, LocalPath::Host);
        assert_eq!(choose(&k(Some("ce"), true, false, None), false).unwrap().local, LocalPath::Host);
        assert_eq!(choose(&k(Some("memory"), true, false, None), false).unwrap().local, LocalPath::Host);
    }

    #[test]
    fn net_names_and_ib_disable() {
        assert_eq!(choose(&k(None, false, false, Some("Socket")), true).unwrap().net, NetWant::Socket);
        assert_eq!(choose(&k(None, false, false, Some("socket")), false).unwrap().net, NetWant::Socket);
        assert_eq!(choose(&k(None, false, true, None), true).unwrap().net, NetWant::Socket);
        assert_eq!(choose(&k(None, false, false, Some("IB")), true).unwrap().net, NetWant::Ib);
        let e = choose(&k(None, false, false, Some("IB")), false).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::InvalidUsage);
        assert!(choose(&k(None, false, true, Some("ib")), true).is_err());
        let e = choose(&k(None, false, false, Some("UCX")), true).unwrap_err();
        assert!(e.msg.contains("UCX"), "{}", e.msg);
    }

    #[test]
    fn codes_differ_per_choice_and_ranks_must_agree() {
        let all: Vec<u32> = [LocalPath::Memory, LocalPath::CopyEngine, LocalPath::Host]
            .iter()
            .flat_map(|&l| [NetWant::Socket, NetWant::Ib, NetWant::Auto].map(|n| Paths { local: l, net: n }.code()))
            .collect();
        let mut u = all.clone();
        u.sort_unstable();
        u.dedup();
        assert_eq!(u.len(), all.len());
        assert!(agree(&[5, 5, 5]).is_ok());
        let e = agree(&[5, 5, 1]).unwrap_err();
        assert!(e.msg.contains("rank 2"), "{}", e.msg);
    }
}
