//! The registry: every NCCL_* setting oxccl reads, sorted by key. Defaults are those of oxccl's
//! readers (tests.rs checks them against the reading code); `FLAG_PUBLISHED` marks the settings
//! NCCL's environment-variable guide documents (docs/userguide/source/env.rst, and NCCL 2.32.3's
//! own registry for its ten keys); `FLAG_UNUSED` those oxccl registers for NCCL's sake but
//! does not act on. Comm-config settings default to NCCL_CONFIG_UNDEF_INT, as in NCCL: unset,
//! the ncclConfig_t field (or oxccl's choice) stands.

use super::{Entry, Kind, FLAG_PUBLISHED as PUB, FLAG_UNUSED as UNUSED};
use crate::config::abi::NCCL_CONFIG_UNDEF_INT;

const UNDEF: i64 = NCCL_CONFIG_UNDEF_INT as i64;

/// InfiniBand settings act only in builds with the `ib` feature.
const IB_FLAGS: u64 = if cfg!(feature = "ib") { PUB } else { PUB | UNUSED };

/// Every parameter, sorted by key.
pub static REGISTRY: &[Entry] = &[
    e(c"NCCL_ALGO", Kind::Str(None), PUB, "Algorithms collectives may use (NCCL's syntax: ;-separated [function:]list, ^ excludes). Ring, Tree and PAT admit oxccl's NVLink algorithms; NVLS, NVLSTree and CollNet select none. Read at communicator init; a syntax error is ncclInvalidUsage there."),
    e(c"NCCL_CGA_CLUSTER_SIZE", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.cgaClusterSize (0-8; larger values are clamped to 8). Recorded; oxccl's kernels launch without clusters. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_CHECK_POINTERS", Kind::Int(0), PUB, "Non-zero: collectives check that their buffers are device memory of the communicator's GPU. Read once per process."),
    e(c"NCCL_COLLNET_ENABLE", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.collnetEnable (0 or 1). Recorded; oxccl has no CollNet. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_COMM_BLOCKING", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.blocking: 0 makes communicator calls nonblocking (ncclInProgress), 1 blocking. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_COMM_ID", Kind::Str(None), 0, "ip:port, [ipv6]:port or host:port where rank 0 hosts the bootstrap root, instead of the address in the unique id."),
    e(c"NCCL_COMM_SHRINK_SHARE_RESOURCES", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.shrinkShare. Recorded; shrunk communicators never share resources in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_COMM_SPLIT_SHARE_RESOURCES", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.splitShare (0 or 1). Recorded; split communicators never share resources in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    Entry { conf_files: false, ..e(c"NCCL_CONF_FILE", Kind::Str(None), PUB, "The user configuration file (KEY=VALUE lines) read instead of ~/.nccl.conf, before /etc/nccl.conf. Only the environment sets it; files never override the environment.") },
    e(c"NCCL_CTA_POLICY", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.CTAPolicy: 0 default, 1 efficiency (at most 48 blocks a kernel), 2 zero (copy engines between processes); other values give 0. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_CUMEM_ENABLE", Kind::Int(1), PUB, "0: ncclMemAlloc uses cuMemAlloc instead of cuMem VMM, communicators get no symmetric memory, and their channel buffers are cuMemAlloc memory shared by CUDA IPC, which ncclCommSuspend cannot release."),
    e(c"NCCL_DEBUG", Kind::DebugLevel, PUB, "Set the debug output level. Each level includes less-verbose levels."),
    e(c"NCCL_DEBUG_FILE", Kind::Text(None), PUB, "Set the NCCL debug logging output to a file. The filename format can be set to filename.%h.%p where %h is replaced with the hostname and %p is replaced with the process PID. This does not accept the ~ character as part of the path, please convert to a relative or absolute path first."),
    e(c"NCCL_DEBUG_LEVELS", Kind::LevelMask(0), PUB | UNUSED, "Add comma-separated debug levels to NCCL_DEBUG. oxccl's logger does not read it."),
    e(c"NCCL_DEBUG_SUBSYS", Kind::SubsysMask, PUB, "Filter debug output by (comma-separated)"),
    e(c"NCCL_DEBUG_TIMESTAMP_FORMAT", Kind::Text(Some("[%F %T] ")), PUB, "Set the format used when printing debug log messages"),
    e(c"NCCL_DEBUG_TIMESTAMP_LEVELS", Kind::LevelMask(1 << 2), PUB, "Set the log levels that include timestamps."),
    e(c"NCCL_DEV_API_JIT", Kind::Int(0), 0, "1: ncclDevCommCreate fills NCCL 2.32.3's ncclDevComm (version 2.32.3) whatever headers the requirements came from, as for device code JIT-compiled against the library (NCCL's useRuntimeVersion)."),
    e(c"NCCL_ENABLE_VERSION_CHECK", Kind::Int(1), 0, "0: device-API structs from headers newer than NCCL 2.32.3 are not refused as \"too old\" (they still need a compat entry, so they fail as \"not backwards compatible\")."),
    e(c"NCCL_GRAPH_MIXING_SUPPORT", Kind::Int(UNDEF), 0, "0 or 1: sets ncclConfig_t.graphUsageMode to 0 or 2. Validated; oxccl mixes CUDA graphs and eager launches in every mode. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_GRAPH_STREAM_ORDERING", Kind::Int(UNDEF), 0, "0 or 1: overrides ncclConfig_t.graphStreamOrdering. Validated; captured work keeps the capturing stream's order in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_HOSTID", Kind::Str(None), 0, "Host identity (OXCCL_HOSTID wins over it): ranks with equal ids share memory, others talk over the network. Unset: host name and boot id."),
    e(c"NCCL_IB_DISABLE", Kind::Int(0), PUB, "Non-zero: no InfiniBand/RoCE; TCP carries traffic between hosts."),
    e(c"NCCL_IB_GID_INDEX", Kind::Int(-1), IB_FLAGS, "RoCE GID index; -1: the first RoCE v2 entry with an IPv4-mapped address."),
    e(c"NCCL_IB_HCA", Kind::Str(None), IB_FLAGS, "InfiniBand devices and ports to use (mlx5_0:1,mlx5_1:1; = exact names, ^ excludes)."),
    e(c"NCCL_IB_RETRY_CNT", Kind::Int(7), IB_FLAGS, "InfiniBand retry count of each queue pair (0-255)."),
    e(c"NCCL_IB_SL", Kind::Int(0), IB_FLAGS, "InfiniBand service level (0-255)."),
    e(c"NCCL_IB_TC", Kind::Int(0), IB_FLAGS, "InfiniBand traffic class (0-255)."),
    e(c"NCCL_IB_TIMEOUT", Kind::Int(20), IB_FLAGS, "InfiniBand timeout exponent of each queue pair (0-255)."),
    e(c"NCCL_LAUNCH_ORDER_IMPLICIT", Kind::Int(UNDEF), 0, "0 or 1: overrides ncclConfig_t.launchOrderImplicit. Validated; no effect in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_MAX_CTAS", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.maxCTAs when positive (at most 64): below 64 it caps every kernel of the communicator at that many thread blocks. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_MAX_P2P_PEERS", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.maxP2pPeers when positive. Validated; oxccl connects peers as they are used. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_MIN_CTAS", Kind::Int(UNDEF), PUB, "Overrides ncclConfig_t.minCTAs when positive (at most 64, and at most maxCTAs). Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_NCHANNELS_PER_NET_PEER", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.nChannelsPerNetPeer when positive. Recorded; no effect in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_NET", Kind::Str(None), PUB, "The network between hosts: Socket forces TCP, IB requires InfiniBand. Overrides ncclConfig_t.netName."),
    e(c"NCCL_NET_GDR_READ", Kind::Int(1), IB_FLAGS, "0: InfiniBand sends stage GPU memory through the host even when nvidia-peermem allows GPUDirect RDMA."),
    e(c"NCCL_NO_CACHE", Kind::Text(None), UNUSED, "Comma-separated list of param keys to disable caching (or ALL). oxccl's registry caches nothing: every query reads the environment."),
    e(c"NCCL_NUM_RMA_CTX", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.numRmaCtx when not negative: the contexts of the one-sided operations (0 disables them). Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.nvlinkCentricSched (0 or 1). Recorded; no effect in oxccl. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_NVLS_NCHANNELS", Kind::Int(UNDEF), 0, "Overrides ncclConfig_t.nvlsCTAs when positive. Recorded; oxccl has no NVLS. Unset: -2147483648 (NCCL_CONFIG_UNDEF_INT), and the ncclConfig_t field stands."),
    e(c"NCCL_P2P_DISABLE", Kind::Int(0), PUB, "Non-zero: no direct GPU-to-GPU path between processes of a host; their traffic is staged through host memory."),
    e(c"NCCL_PARAM_DUMP_ALL", Kind::Bool(false), 0, "Print all parameters including private ones"),
    e(c"NCCL_PROTO", Kind::Str(None), PUB, "Protocols collectives may use (NCCL's syntax): LL and LL128 select oxccl's packet algorithms, Simple its put-based ones. Read at communicator init; a syntax error is ncclInvalidUsage there."),
    e(c"NCCL_SET_THREAD_NAME", Kind::Bool(false), PUB | UNUSED, "Allow NCCL to give meaningful names to NCCL CPU threads via pthread_setname_np. oxccl always names its threads."),
    e(c"NCCL_SOCKET_FAMILY", Kind::Str(None), PUB, "AF_INET or AF_INET6: the address family of bootstrap sockets."),
    e(c"NCCL_SOCKET_IFNAME", Kind::Str(None), PUB, "Network interfaces for bootstrap sockets: prefixes, ^ excludes, = exact names."),
    e(c"NCCL_WARN_ENABLE_DEBUG_INFO", Kind::IntBool(false), 0, "If enabled, the debug level will be set to INFO after a WARN level debug message is logged."),
    e(c"NCCL_WIN_ENABLE", Kind::Int(1), PUB, "0: communicators get no symmetric memory (ncclCommWindowRegister registers nothing symmetric)."),
    e(c"NCCL_WIN_STRIDE", Kind::Int(-1), 0, "Bytes between ranks' slots of the symmetric address space (rounded up to 4 GiB); -1 or at most 1: the largest GPU memory among the ranks."),
];

const fn e(key: &'static std::ffi::CStr, kind: Kind, flags: u64, desc: &'static str) -> Entry {
    Entry { key, kind, flags, desc, conf_files: true }
}
