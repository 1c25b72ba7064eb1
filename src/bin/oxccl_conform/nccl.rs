//! The library under test, opened at run time by path: oxccl's liboxccl.so or NVIDIA's
//! libnccl.so.2 alike, through NCCL 2.28's C ABI (include/nccl.h).

use std::ffi::{c_char, c_int, c_void, CStr};

use oxccl::gpu::cu;

pub type Comm = *mut c_void;
pub type Stream = cu::CUstream;

pub const SUCCESS: c_int = 0;
pub const IN_PROGRESS: c_int = 7;
/// ncclCommShrink's flag: revoke the parent's operations first.
pub const SHRINK_ABORT: c_int = 1;

/// ncclUniqueId.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId(pub [u8; 128]);

/// ncclConfig_t as NCCL 2.28 lays it out (NCCL_CONFIG_INITIALIZER; unset fields INT_MIN / NULL).
#[repr(C)]
pub struct Config {
    size: usize,
    magic: u32,
    version: u32,
    pub blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
    traffic_class: c_int,
    comm_name: *const c_char,
    collnet_enable: c_int,
    cta_policy: c_int,
    shrink_share: c_int,
    nvls_ctas: c_int,
    n_channels_per_net_peer: c_int,
    nvlink_centric_sched: c_int,
}

impl Config {
    /// With `cta_policy` set (ncclConfig_t.CTAPolicy; 0 leaves it unset, NCCL's default).
    pub fn with_policy(blocking: bool, cta_policy: u8) -> Config {
        let mut c = Config::new(blocking);
        if cta_policy != 0 {
            c.cta_policy = c_int::from(cta_policy);
        }
        c
    }

    pub fn new(blocking: bool) -> Config {
        const U: c_int = c_int::MIN;
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 22809,
            blocking: blocking as c_int,
            cga_cluster_size: U,
            min_ctas: U,
            max_ctas: U,
            net_name: std::ptr::null(),
            split_share: U,
            traffic_class: U,
            comm_name: std::ptr::null(),
            collnet_enable: U,
            cta_policy: U,
            shrink_share: U,
            nvls_ctas: U,
            n_channels_per_net_peer: U,
            nvlink_centric_sched: U,
        }
    }
}

type CollFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;
type RootedRedFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, Comm, Stream) -> c_int;
type MoveFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int;
type RootedMoveFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;
type P2pFn = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> c_int;

/// NCCL 2.32.3's ncclCollConfig_t, as oxccl lays it out (its layout test checks NCCL's offsets).
pub use oxccl::config::coll_config::{coll_config_initializer, ncclCollConfig_t as CollConfig};
type Cfg = *const CollConfig;
type CollCfgFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream, Cfg) -> c_int;
type RootedRedCfgFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, Comm, Stream, Cfg) -> c_int;
type MoveCfgFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream, Cfg) -> c_int;
type RootedMoveCfgFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream, Cfg) -> c_int;

/// The nccl*Config collectives (NCCL 2.32.3; older libraries have none).
pub struct ConfigFns {
    pub all_reduce: CollCfgFn,
    pub reduce_scatter: CollCfgFn,
    pub reduce: RootedRedCfgFn,
    pub all_gather: MoveCfgFn,
    pub alltoall: MoveCfgFn,
    pub broadcast: RootedMoveCfgFn,
    pub gather: RootedMoveCfgFn,
    pub scatter: RootedMoveCfgFn,
}


/// Every entry point the fuzzer calls.
pub struct Nccl {
    _lib: libloading::Library,
    pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    pub comm_init_rank_config: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int, *mut Config) -> c_int,
    pub comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    pub comm_split: unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, *mut Config) -> c_int,
    pub comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    pub comm_finalize: unsafe extern "C" fn(Comm) -> c_int,
    pub comm_abort: unsafe extern "C" fn(Comm) -> c_int,
    pub comm_revoke: unsafe extern "C" fn(Comm, c_int) -> c_int,
    pub comm_shrink: unsafe extern "C" fn(Comm, *mut c_int, c_int, *mut Comm, *mut Config, c_int) -> c_int,
    pub comm_get_async_error: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    pub get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    pub get_last_error: unsafe extern "C" fn(Comm) -> *const c_char,
    pub get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub group_start: unsafe extern "C" fn() -> c_int,
    pub group_end: unsafe extern "C" fn() -> c_int,
    pub all_reduce: CollFn,
    pub reduce_scatter: CollFn,
    pub reduce: RootedRedFn,
    pub all_gather: MoveFn,
    pub alltoall: MoveFn,
    pub broadcast: RootedMoveFn,
    pub gather: RootedMoveFn,
    pub scatter: RootedMoveFn,
    pub send: P2pFn,
    pub recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    pub redop_create_premulsum: unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, Comm) -> c_int,
    pub redop_destroy: unsafe extern "C" fn(c_int, Comm) -> c_int,
    pub mem_alloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int,
    pub mem_free: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub comm_register: unsafe extern "C" fn(Comm, *mut c_void, usize, *mut *mut c_void) -> c_int,
    pub comm_deregister: unsafe extern "C" fn(Comm, *mut c_void) -> c_int,
    pub comm_window_register: unsafe extern "C" fn(Comm, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int,
    pub comm_window_deregister: unsafe extern "C" fn(Comm, *mut c_void) -> c_int,
    /// None where the library predates them: configured operations then take the plain calls.
    pub config: Option<ConfigFns>,
    /// ncclCommSuspend and ncclCommResume (NCCL 2.29+); None where the library predates them.
    pub suspend: Option<SuspendFns>,
}

/// ncclCommSuspend / ncclCommResume.
pub struct SuspendFns {
    pub suspend: unsafe extern "C" fn(Comm, c_int) -> c_int,
    pub resume: unsafe extern "C" fn(Comm) -> c_int,
}

/// One entry point of the library, typed by the field it fills.
fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: every symbol asked for has the type NCCL 2.28's header gives it, which is the
    // field's type.
    unsafe { lib.get::<T>(name.as_bytes()) }.map(|s| *s).map_err(|e| format!("{name}: {e}"))
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        sym(&$lib, $name)?
    };
}

impl Nccl {
    pub fn open(path: &str) -> Result<Nccl, String> {
        // SAFETY: loading a shared library runs its initialisers; both libraries' are benign.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("cannot open {path}: {e}"))?;
        Ok(Nccl {
            get_unique_id: sym!(lib, "ncclGetUniqueId"),
            comm_init_rank_config: sym!(lib, "ncclCommInitRankConfig"),
            comm_init_all: sym!(lib, "ncclCommInitAll"),
            comm_split: sym!(lib, "ncclCommSplit"),
            comm_destroy: sym!(lib, "ncclCommDestroy"),
            comm_finalize: sym!(lib, "ncclCommFinalize"),
            comm_abort: sym!(lib, "ncclCommAbort"),
            comm_revoke: sym!(lib, "ncclCommRevoke"),
            comm_shrink: sym!(lib, "ncclCommShrink"),
            comm_get_async_error: sym!(lib, "ncclCommGetAsyncError"),
            get_error_string: sym!(lib, "ncclGetErrorString"),
            get_last_error: sym!(lib, "ncclGetLastError"),
            get_version: sym!(lib, "ncclGetVersion"),
            group_start: sym!(lib, "ncclGroupStart"),
            group_end: sym!(lib, "ncclGroupEnd"),
            all_reduce: sym!(lib, "ncclAllReduce"),
            reduce_scatter: sym!(lib, "ncclReduceScatter"),
            reduce: sym!(lib, "ncclReduce"),
            all_gather: sym!(lib, "ncclAllGather"),
            alltoall: sym!(lib, "ncclAlltoAll"),
            broadcast: sym!(lib, "ncclBroadcast"),
            gather: sym!(lib, "ncclGather"),
            scatter: sym!(lib, "ncclScatter"),
            send: sym!(lib, "ncclSend"),
            recv: sym!(lib, "ncclRecv"),
            redop_create_premulsum: sym!(lib, "ncclRedOpCreatePreMulSum"),
            redop_destroy: sym!(lib, "ncclRedOpDestroy"),
            mem_alloc: sym!(lib, "ncclMemAlloc"),
            mem_free: sym!(lib, "ncclMemFree"),
            comm_register: sym!(lib, "ncclCommRegister"),
            comm_deregister: sym!(lib, "ncclCommDeregister"),
            comm_window_register: sym!(lib, "ncclCommWindowRegister"),
            comm_window_deregister: sym!(lib, "ncclCommWindowDeregister"),
            config: ConfigFns::open(&lib).ok(),
            suspend: (|| -> Result<SuspendFns, String> { Ok(SuspendFns { suspend: sym!(lib, "ncclCommSuspend"), resume: sym!(lib, "ncclCommResume") }) })().ok(),
            _lib: lib,
        })
    }

    /// "ncclX (code): last error" for a failed call.
    pub fn describe(&self, what: &str, rc: c_int, comm: Comm) -> String {
        // SAFETY: both return static or library-owned NUL-terminated strings (or NULL).
        let (s, last) = unsafe { ((self.get_error_string)(rc), (self.get_last_error)(comm)) };
        let text = |p: *const c_char| if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
        format!("{what} returned {rc} ({}): {}", text(s), text(last).replace('\n', " "))
    }

    pub fn version(&self) -> i32 {
        let mut v = 0;
        // SAFETY: out-pointer to a local.
        unsafe { (self.get_version)(&mut v) };
        v
    }
}

impl ConfigFns {
    fn open(lib: &libloading::Library) -> Result<ConfigFns, String> {
        Ok(ConfigFns {
            all_reduce: sym!(lib, "ncclAllReduceConfig"),
            reduce_scatter: sym!(lib, "ncclReduceScatterConfig"),
            reduce: sym!(lib, "ncclReduceConfig"),
            all_gather: sym!(lib, "ncclAllGatherConfig"),
            alltoall: sym!(lib, "ncclAlltoAllConfig"),
            broadcast: sym!(lib, "ncclBroadcastConfig"),
            gather: sym!(lib, "ncclGatherConfig"),
            scatter: sym!(lib, "ncclScatterConfig"),
        })
    }
}
