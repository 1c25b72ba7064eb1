//! The communicator: identity (rank, size, device), configuration, asynchronous state, and once
//! initialised, its bootstrap, peers, channels and launch bookkeeping.
//!
//! A `Comm` exists from the moment ncclCommInitRank* returns a handle (inits inside a group run at
//! ncclGroupEnd), so its initialised part lives in a `OnceLock`. Handles given to C are addresses of
//! registered `Arc<Comm>`s; every API call resolves them through the registry, so a stale or forged
//! handle is an error, not a use-after-free.

mod async_state;
pub mod completion;
pub mod cross_host;
pub mod devcomm;
mod dump;
pub mod grow;
pub mod liveness;
pub mod reaper;
mod registry;
pub mod rma;
mod teardown;
pub mod split;
mod suspend;
pub mod task;
pub mod view;
mod watchdog;
pub mod window;

pub use registry::{live, lookup, register, unregister};
pub use teardown::when_idle;
use teardown::release_when_idle;
use watchdog::{end_watchdog, fail_async, launch_done, watch_peers, Watchdog};

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use async_state::AsyncState;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::algo::{Scratch, Topology, Tuning};
use crate::bootstrap::{self, Bootstrap};
use crate::channel::MemoryChannels;
use crate::config::CommConfig;
use crate::error::{Error, Result, ResultCode};
use crate::gpu::cu;
use crate::algo::pdl::RingAnchor;
use crate::device_abi::{CollArgs, OX_ONESHOT_PRESEND, OX_ONESHOT_PUBLISH};
use crate::gpu::module::{Kernel, Module};
use crate::gpu::stream::{Event, RelaxedCapture};
use crate::gpu::{CtxGuard, Device, HostMapped};
use crate::log::Subsys;
use crate::bootstrap::topo::{self, PeerInfo};
use crate::types::{DataType, RedOp, ResolvedOp};

static NEXT_TAG: AtomicU32 = AtomicU32::new(0);

/// One rank's communicator (what an ncclComm_t handle names): identity, configuration and
/// asynchronous state, plus its initialised part (`Ready`) once init completed.
pub struct Comm {
    /// This rank's index in the communicator, 0..nranks.
    pub rank: usize,
    /// Number of ranks in the communicator.
    pub nranks: usize,
    /// CUDA device ordinal this rank runs on.
    pub device: i32,
    /// The communicator's configuration (ncclConfig_t, defaults applied).
    pub config: CommConfig,
    /// ncclCommGetAsyncError's answer (shared with the liveness watchdog and the transports'
    /// error callbacks; async_state.rs).
    state: Arc<AsyncState>,
    ready: OnceLock<Ready>,
    finalized: AtomicBool,
    aborted: AtomicBool,
    /// ncclCommRevoke (or a shrink with NCCL_SHRINK_ABORT): kernels were told to stop; only
    /// destroy, abort, split and shrink remain allowed.
    revoked: AtomicBool,
    /// ncclCommSuspend with NCCL_SUSPEND_MEM took effect and no ncclCommResume since: no work may
    /// be enqueued (src/comm/suspend.rs).
    suspended: AtomicBool,
    /// OXCCL_CHECK: this rank's collective count, the sequence number ranks agree on.
    check_seq: AtomicU64,
    /// Ops made by ncclRedOpCreatePreMulSum, indexed by the low 16 bits of their handle.
    user_ops: Mutex<Vec<Option<UserOp>>>,
    /// Marks this communicator's op handles, so an op used with another communicator is caught.
    op_tag: u32,
    /// Windows registered with ncclCommWindowRegister (freed with the communicator).
    pub windows: crate::comm::window::Windows,
    /// Lost peers and the peers in-flight work needs (src/comm/liveness.rs).
    pub watch: Arc<crate::comm::liveness::Watch>,
    /// ncclCommGetUniqueId / ncclCommGrow bookkeeping: the outstanding grow id, a grow running.
    pub grow: crate::comm::grow::GrowState,
    /// Kernels may still run on this communicator's memory (a destroy gave up waiting for them
    /// after OXCCL_FINALIZE_TIMEOUT): what they touch was leaked (`leak_device`, once).
    leaked: AtomicBool,
}

/// A PreMulSum op: its datatype and scalar (bytes, or a device address read at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserOp {
    /// The datatype the op was created for; it may only reduce that type.
    pub dtype: DataType,
    /// ncclScalarHostImmediate: the scalar's bytes in the low bits; else 0.
    pub scalar: u64,
    /// ncclScalarDevice: the device address of the scalar, read by the kernel at run time; else 0.
    pub scalar_ptr: u64,
}

const OP_INDEX_BITS: u32 = 16;
const OP_TAG_MASK: u32 = 0x3fff;

/// Everything an initialised communicator owns.
pub struct Ready {
    /// The CUDA device this rank runs on.
    pub dev: &'static Device,
    /// The embedded kernels, loaded into that device's context.
    pub module: &'static Module,
    /// The TCP bootstrap connecting the ranks (host-side exchanges, barriers, liveness).
    pub bootstrap: Arc<Bootstrap>,
    /// What every rank told the others at init, indexed by rank (this one included).
    pub peers: Vec<PeerInfo>,
    /// What the algorithm selectors know: ranks, and thread blocks a kernel may use.
    pub topo: Topology,
    /// Scratch sizes every rank allocated at init (identical on every rank).
    pub scratch: Scratch,
    /// The OXCCL_* tuning variables, read once at init.
    pub tuning: Tuning,
    /// FP8 reductions need sm_90 on every GPU of the communicator.
    pub fp8_ok: bool,
    /// OXCCL_CHECK=1: ranks agree on every collective before it runs (src/diag/agreement.rs).
    pub check: bool,
    /// OXCCL_CHECKSUM=1: transfers are checksummed and compared (src/launch/checksum.rs).
    pub checksum: bool,
    /// Host-mapped flag the kernels and proxy poll: its first u32 set to 1 stops them (abort, a
    /// lost peer, an asynchronous error).
    pub abort_flag: Arc<HostMapped>,
    /// Watches the peers' liveness (see `watch_peers`); joined by destroy and abort.
    watchdog: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Freed when the communicator goes (`release_memory`), or leaked where kernels may still
    /// run (`leak_device`).
    channels: Mutex<Option<MemoryChannels>>,
    /// Communicators spanning hosts: the local communicator, network links and proxy (src/net);
    /// they have no channels of their own.
    pub net: Option<Arc<dyn cross_host::CrossHost>>,
    /// Names this communicator among this process's (src/comm/reaper.rs): its id and its ranks'
    /// bootstrap addresses, so a reused NCCL_COMM_ID gives another key.
    pub key: u64,
    /// Device address of this rank's DevComm, the MemoryChannel kernels' argument; 0 where the
    /// communicator has no MemoryChannels (`net`).
    pub dev_comm: u64,
    /// Ranks of this communicator driven by this process (this one included): above one, one
    /// thread may launch for all of them (algo::counting).
    pub process_ranks: usize,
    /// Shared with the liveness watchdog, which asks launches' probes.
    pub launch: Arc<Mutex<LaunchState>>,
    /// ncclCommRegister's buffers, offered to peers for zero-copy streams (src/reg).
    pub reg: crate::reg::Registry,
    /// Two ranks in two processes of one host: large transfers by copy engine straight into the
    /// peer's buffer (transport::ce_direct).
    pub ce: Option<crate::transport::ce_direct::CeDirect>,
    /// The zero CTA policy (algo::policy; its block cap is in `topo`, its copy-engine threshold in
    /// `tuning`) with ranks in other processes: AllGather, AlltoAll, Broadcast, Gather, Scatter
    /// and Send/Recv skip their SM-only paths (one-shot packets, LL128 chain, symmetric direct
    /// kernel, grouped launches) for the exchange, which moves what the copy-engine path takes.
    /// The same on every rank where every process sets the same OXCCL_* tuning (as
    /// docs/tuning.md requires): the policy is agreed, the other inputs every rank sees.
    pub engine_moves: bool,
    /// What a call's own CTA policy (ncclCollConfig_t.CTAPolicy, algo::collcfg) starts from:
    /// the agreed policy and the budget and tuning before it.
    pub policy_base: crate::algo::collcfg::PolicyBase,
}

/// The communicator's last ring one-shot, captured: where it stands in the graph and its chain
/// (pure, algo::pdl) and the launch as issued.
#[derive(Clone, Copy)]
pub struct RingLast {
    /// Where the launch stands in the captured graph and in its chain.
    pub anchor: RingAnchor,
    /// The launch as issued.
    pub launch: RingLaunch,
}

/// A captured ring one-shot launch as issued: what a chained launch behind it (algo::pdl::chained)
/// needs to make it publish its output.
#[derive(Clone, Copy)]
pub struct RingLaunch {
    /// The chained variant of the kernel it launched (same type and op), which publishes.
    pub chain_kernel: Kernel,
    /// Thread blocks it was launched with.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Its kernel arguments.
    pub args: CollArgs,
}

impl RingLaunch {
    /// Makes the launch's captured node (`node`) the chained variant with OX_ONESHOT_PUBLISH, or
    /// with OX_ONESHOT_PRESEND where `presend` (algo::pdl::presend). False where the driver
    /// refuses: the launch behind it then is not chained.
    pub(crate) fn publish(&self, node: usize, presend: bool) -> bool {
        let mut args = self.args;
        args.mode |= if presend { OX_ONESHOT_PRESEND } else { OX_ONESHOT_PUBLISH };
        match crate::gpu::module::set_kernel_node_args(node as cu::CUgraphNode, self.chain_kernel, self.grid, self.block, &args) {
            Ok(()) => true,
            Err(e) => {
                nccl_info!(Subsys::Coll, "AllReduce ring one-shot not chained: {}", e.msg);
                false
            }
        }
    }
}

/// Launch bookkeeping, held across a launch so that one communicator's kernels are issued in a
/// single order even when several threads or streams use it.
pub struct LaunchState {
    /// The stream of the previous launch; None before the first. Only compared, never used:
    /// the application may have destroyed it since (NCCL allows that, even with work pending).
    pub last_stream: Option<cu::CUstream>,
    /// What marks the end of the last launch (src/comm/completion.rs): a stream switch makes the new
    /// stream wait for it, and finalize, destroy and abort wait for it, without touching a stream
    /// that the application may have destroyed since.
    pub done: crate::comm::completion::Completion,
    /// The current launch may count its kernels (uncaptured, with a DevComm): set as it begins.
    pub counting: bool,
    /// The last work the current launch issued on its stream is a counted kernel.
    pub counted_last: bool,
    /// Orders the streams of a group among themselves before its first launch
    /// (group::fork_streams).
    pub join: Event,
    /// The capture state of the current launch's stream, asked once as the launch begins.
    pub tail_now: Option<crate::algo::pdl::CaptureTail>,
    /// Blocks of the communicator's last kernel on `last_stream` that may still hold SMs when the
    /// next launch there begins early (algo::pdl's `prev_grid`): 0 when none can, u32::MAX when
    /// unknown (after a failed launch or one made elsewhere), which allows no early start.
    pub last_grid: u32,
    /// The communicator's last launch, when it was a ring one-shot AllReduce captured into a
    /// graph (algo::pdl::early), with the launch as issued, which a chained launch rewrites;
    /// taken into `ring_prev` as each launch begins.
    pub ring_anchor: Option<RingLast>,
    /// `ring_anchor` as the current launch began: the ring one-shot right before it, which only
    /// this launch may chain behind.
    pub ring_prev: Option<RingLast>,
    /// OXCCL_DEBUG_DUMP's record of issued work (empty when the dump is off).
    pub progress: crate::diag::Progress,
    /// Probes of the last uncaptured launches, by ordinal (src/comm/liveness.rs).
    pub recent: crate::comm::liveness::Recent,
    /// The capture that already holds this communicator for a launch that needs every peer
    /// (`retain_for_graph`): later launches of the same capture need not hold it again.
    pub graph_all_capture: Option<u64>,
    /// A configured call's launchCompletionEvent (ncclCollConfig_t), until its first kernel
    /// launch takes it (launch::enqueue); None for every plain call.
    pub completion_event: Option<cu::CUevent>,
}

// SAFETY: CUstream values are opaque handles the driver accepts from any thread.
unsafe impl Send for LaunchState {}

impl Comm {
    /// A communicator not yet initialised: it reports ncclInProgress until `init` ends.
    pub fn new(rank: usize, nranks: usize, device: i32, config: CommConfig) -> Comm {
        Comm {
            rank,
            nranks,
            device,
            config,
            state: Arc::new(AsyncState::new(ResultCode::InProgress)),
            ready: OnceLock::new(),
            finalized: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            suspended: AtomicBool::new(false),
            check_seq: AtomicU64::new(0),
            user_ops: Mutex::new(Vec::new()),
            op_tag: (topo::process_token() as u32 ^ NEXT_TAG.fetch_add(1, Ordering::Relaxed)) & OP_TAG_MASK,
            windows: crate::comm::window::Windows::default(),
            watch: Arc::new(crate::comm::liveness::Watch::new(nranks)),
            grow: Default::default(),
            leaked: AtomicBool::new(false),
        }
    }

    /// Registers a PreMulSum op; returns its ncclRedOp_t value (ncclNumOps + tag/index).
    pub fn create_op(&self, op: UserOp) -> Result<i32> {
        let mut ops = self.user_ops.lock();
        let idx = match ops.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                if ops.len() >= 1 << OP_INDEX_BITS {
                    return Err(Error::invalid_usage("too many live reduction ops on this communicator"));
                }
                ops.push(None);
                ops.len() - 1
            }
        };
        ops[idx] = Some(op);
        Ok(RedOp::NUM_BUILTIN + ((self.op_tag << OP_INDEX_BITS) | idx as u32) as i32)
    }

    fn user_op_index(&self, raw: i32) -> Result<usize> {
        let v = raw.checked_sub(RedOp::NUM_BUILTIN).filter(|v| *v >= 0).ok_or_else(|| {
            Error::invalid_argument(format!("invalid reduction op {raw}"))
        })? as u32;
        if v >> OP_INDEX_BITS != self.op_tag {
            return Err(Error::invalid_argument(format!("reduction op {raw} was not created on this communicator")));
        }
        Ok((v & ((1 << OP_INDEX_BITS) - 1)) as usize)
    }

    /// ncclRedOpDestroy: frees a PreMulSum op's slot. Fails for a built-in op, an op of another
    /// communicator, or one already destroyed.
    pub fn destroy_op(&self, raw: i32) -> Result<()> {
        if RedOp::builtin(raw).is_some() {
            return Err(Error::invalid_argument(format!("cannot destroy built-in reduction op {raw}")));
        }
        let idx = self.user_op_index(raw)?;
        let mut ops = self.user_ops.lock();
        match ops.get_mut(idx) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Error::invalid_argument(format!("reduction op {raw} does not exist (destroyed already?)"))),
        }
    }

    /// The kernel form of a raw op for a collective of datatype `dt`.
    pub fn resolve_op(&self, raw: i32, dt: DataType) -> Result<ResolvedOp> {
        if let Some(op) = RedOp::builtin(raw) {
            return Ok(ResolvedOp { op, scalar: 0, scalar_ptr: 0 });
        }
        let idx = self.user_op_index(raw)?;
        let u = self.user_ops.lock().get(idx).copied().flatten().ok_or_else(|| {
            Error::invalid_argument(format!("reduction op {raw} does not exist (destroyed already?)"))
        })?;
        if u.dtype != dt {
            return Err(Error::invalid_argument(format!(
                "reduction op {raw} was created for {}, used with {}",
                u.dtype.name(),
                dt.name()
            )));
        }
        Ok(ResolvedOp { op: RedOp::PreMulSum, scalar: u.scalar, scalar_ptr: u.scalar_ptr })
    }

    /// ncclCommRegister: a handle for [ptr, ptr + size) (the same one for the same buffer).
    pub fn register(&self, ptr: u64, size: u64) -> Result<u64> {
        let r = self.ready()?;
        let _relaxed = RelaxedCapture::new()?;
        r.reg.register(ptr, size)
    }

    /// ncclCommDeregister. The last reference's generation is retired only after this
    /// communicator's kernels finished: a peer may be writing into the buffer until then.
    pub fn deregister(&self, handle: u64) -> Result<()> {
        let r = self.ready()?;
        if let Some(gen) = r.reg.release(handle)? {
            if !self.aborted.load(Ordering::Acquire) {
                self.wait_idle("ncclCommDeregister")?;
            }
            r.reg.retire(gen);
        }
        Ok(())
    }

    /// The initialised state, or the reason there is none.
    pub fn ready(&self) -> Result<&Ready> {
        if let Some(r) = self.ready.get() {
            return Ok(r);
        }
        match self.state.get() {
            // Only a nonblocking communicator can be seen here before its init ended.
            ResultCode::InProgress => Err(Error::invalid_argument(
                "communicator is still initializing (nonblocking): poll ncclCommGetAsyncError until it is not ncclInProgress",
            )),
            ResultCode::Success => Err(Error::internal("communicator has no state")),
            code => Err(Error::new(code, "communicator initialization failed earlier")),
        }
    }

    /// ncclCommGetAsyncError's answer: ncclInProgress during a nonblocking init, split, shrink or
    /// grow, then ncclSuccess or an error: the operation's own, else the first one reported while
    /// it ran, else, outside operations, the first one reported.
    pub fn async_state(&self) -> ResultCode {
        self.state.get()
    }

    /// Records an asynchronous error; only the first is kept, and while a nonblocking operation
    /// runs it waits for that operation's end (async_state.rs).
    pub fn set_error(&self, code: ResultCode) {
        self.state.fail(code);
    }

    /// The init, split, shrink or grow that made this communicator report ncclInProgress ended
    /// with `code`, which becomes its state.
    pub fn fail_operation(&self, code: ResultCode) {
        self.state.end(Err(code));
    }

    /// Whether ncclCommAbort was called on this communicator.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// A nonblocking split or shrink of this communicator starts: it reports ncclInProgress, and
    /// refuses other work, until `end_async`.
    pub fn begin_async(&self) -> Result<()> {
        self.state.begin()
    }

    /// The nonblocking split or shrink begun by `begin_async` ended: its error, else one reported
    /// while it ran, else ncclSuccess.
    pub fn end_async(&self, outcome: &Result<()>) {
        self.state.end(outcome.as_ref().map(|_| ()).map_err(|e| e.code));
    }

    /// Whether OXCCL_CHECK is on for this communicator.
    pub fn checks_agreement(&self) -> bool {
        self.ready.get().is_some_and(|r| r.check)
    }

    /// OXCCL_CHECK: agrees with the other ranks on `t` (collective over the communicator).
    pub fn agree(&self, t: &task::CollTask) -> Result<()> {
        let r = self.ready()?;
        if !r.check {
            return Ok(());
        }
        let seq = self.check_seq.fetch_add(1, Ordering::Relaxed);
        crate::diag::agreement::agree(&r.bootstrap, crate::diag::agreement::Signature::of(t.coll, t.dtype, t.op.op, t.root, t.count, seq))
    }

    /// Why no more work may be enqueued, if so.
    pub fn check_usable(&self) -> Result<()> {
        self.check_live()?;
        if self.suspended.load(Ordering::Acquire) {
            return Err(Error::invalid_usage("communicator is suspended (ncclCommSuspend): ncclCommResume it before enqueuing work"));
        }
        Ok(())
    }

    /// The communicator's asynchronous error, if its work failed (ncclInProgress while a
    /// nonblocking operation runs is not an error here).
    pub fn check_failed(&self) -> Result<()> {
        match self.async_state() {
            ResultCode::Success | ResultCode::InProgress => Ok(()),
            code => Err(Error::new(code, "communicator failed earlier (see the WARN that said why; ncclCommAbort it)")),
        }
    }

    /// Why the communicator can take no call but destroy, abort, split and shrink, if so: its
    /// work failed or it was aborted or revoked.
    pub fn check_live(&self) -> Result<()> {
        match self.async_state() {
            ResultCode::Success => {}
            ResultCode::InProgress => {
                return Err(Error::invalid_argument(
                    "communicator used before its previous nonblocking operation completed (poll ncclCommGetAsyncError)",
                ))
            }
            code => return Err(Error::new(code, "communicator failed earlier (see the WARN that said why; ncclCommAbort it)")),
        }
        if self.is_aborted() {
            return Err(Error::invalid_usage("communicator was aborted"));
        }
        if self.revoked.load(Ordering::Acquire) {
            return Err(Error::invalid_usage("communicator was revoked: only destroy, abort, split and shrink are allowed"));
        }
        Ok(())
    }

    /// Initialises the communicator: bootstrap, peer exchange, channels. Collective over its ranks.
    /// `connect` builds the cross-host part where the communicator spans hosts (net::connect).
    pub fn init(&self, id: &[u8; bootstrap::UNIQUE_ID_BYTES], connect: &cross_host::ConnectNet) -> Result<()> {
        let r = self.init_inner(id, connect).and_then(|ready| {
            // Aborted while a nonblocking init ran: drop what was built instead of publishing it
            // (through the gate, as a communicator's memory always goes: `release_when_idle`).
            if self.is_aborted() {
                // Gone for the peers now, whenever the memory goes.
                ready.bootstrap.abort();
                end_watchdog(&ready.bootstrap, ready.watchdog.lock().take(), false);
                release_when_idle(self.rank, Box::new(ready));
                return Err(Error::invalid_usage("communicator was aborted during its initialization"));
            }
            Ok(ready)
        });
        match r {
            Ok(ready) => {
                let _ = self.ready.set(ready);
                self.state.end(Ok(()));
                crate::diag::start_monitor(|after| {
                    for c in live() {
                        // A line each: NCCL's log lines hold 1023 bytes, and a dump is longer.
                        c.stall_dump(after, &mut |text| {
                            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                                nccl_warn!("{line}");
                            }
                        });
                    }
                });
                Ok(())
            }
            Err(e) => {
                self.state.end(Err(e.code));
                Err(e)
            }
        }
    }

    fn init_inner(&self, id: &[u8; bootstrap::UNIQUE_ID_BYTES], connect: &cross_host::ConnectNet) -> Result<Ready> {
        let t0 = Instant::now();
        crate::log::version_banner_for_rank(self.rank as i32);
        crate::gpu::ensure()?; // before any driver call: without libcuda those would panic
        let _relaxed = RelaxedCapture::new()?;
        let dev = Device::get(self.device)?;
        crate::log::set_thread_device(dev.ordinal);
        let _ctx = CtxGuard::new(dev)?;
        let module = dev.module()?;
        // Before the peers learn of this process: they may look for it later (reaper::process_gone).
        crate::comm::reaper::beacon();
        let bootstrap = Bootstrap::init(id, self.rank, self.nranks, bootstrap::default_timeout())?;
        // Until every rank has passed the final barrier, a failure here fails the peers at once
        // rather than after the bootstrap timeout (Bootstrap::abandon).
        let give_up = GiveUp(Some(&bootstrap));
        let knobs = crate::transport::select::Knobs::from_env(self.config.net_name.as_deref());
        let paths = crate::transport::select::choose(&knobs, cfg!(feature = "ib"))?;

        // Read before the exchange: every rank learns whether the others read the same.
        let env_tuning = Tuning::from_env()?;
        let me = PeerInfo {
            rank: self.rank as u32,
            host_hash: topo::host_hash(),
            process: topo::process_token(),
            pid: std::process::id(),
            device: dev.ordinal,
            cc_major: dev.cc_major,
            cc_minor: dev.cc_minor,
            sm_count: topo::block_budget(dev.sm_count, self.config.max_ctas),
            bus_id: bus_id_bytes(&dev.bus_id),
            paths: paths.code(),
            machine: topo::machine_hash(),
            cpus: u32::try_from(topo::cpus()).unwrap_or(u32::MAX),
            network: topo::network_hash(),
            gpu: topo::gpu_hash(&dev.uuid, &dev.bus_id),
            gpu_sms: dev.sm_count,
            cta_policy: self.config.cta_policy,
            tuning: topo::fnv1a(format!("{env_tuning:?}").as_bytes()),
        };
        if me.sm_count < dev.sm_count {
            nccl_info!(Subsys::Init, "rank {}: maxCTAs {} caps kernels at {} thread blocks ({} SMs)", self.rank, self.config.max_ctas, me.sm_count, dev.sm_count);
        }
        let mut peers = bootstrap
            .all_gather(&me.encode())?
            .iter()
            .map(|b| PeerInfo::decode(b))
            .collect::<Result<Vec<_>>>()?;
        let sharing = topo::share_gpus(&mut peers, self.rank);
        if sharing > 1 {
            let budget = peers.get(self.rank).map_or(1, |p| p.sm_count);
            nccl_info!(Subsys::Init, "rank {}: {sharing} ranks of this communicator share GPU {}; kernels capped at {budget} thread blocks each, so that all fit on its {} SMs at once", self.rank, dev.bus_id, dev.sm_count);
        }
        for (r, p) in peers.iter().enumerate() {
            if p.rank as usize != r {
                return Err(Error::internal(format!("bootstrap returned rank {}'s info in slot {r}", p.rank)));
            }
            if r != self.rank && p.same_process(&me) && p.device == me.device {
                nccl_info!(Subsys::Init, "ranks {} and {r} share CUDA device {} in one process", self.rank, me.device);
            }
        }
        crate::transport::select::agree(&peers.iter().map(|p| p.paths).collect::<Vec<_>>())?;
        let process_ranks = peers.iter().filter(|p| p.same_process(&me)).count();
        let (policy, agreed) = crate::algo::policy::agree(&peers.iter().map(|p| p.cta_policy).collect::<Vec<_>>());
        if !agreed {
            nccl_warn!("comm rank {}: ranks asked for different CTA policies ({:?}); every rank uses the default", self.rank, peers.iter().map(|p| p.cta_policy).collect::<Vec<_>>());
        }
        let free_blocks = peers.iter().map(|p| p.sm_count.max(1) as u32).min().unwrap_or(1);
        let topo = Topology { nranks: self.nranks, sm_count: policy.block_budget(free_blocks) };
        let other_tuning: Vec<u32> = peers.iter().filter(|p| p.tuning != me.tuning).map(|p| p.rank).collect();
        if !other_tuning.is_empty() {
            nccl_warn!(
                "comm rank {}: ranks {:?} read other OXCCL_* tuning settings than this rank; every rank must read the same (docs/tuning.md), or the ranks choose different algorithms and collectives may hang",
                self.rank,
                other_tuning
            );
        }
        let tuning = policy.tune(&env_tuning);
        let other_processes = peers.iter().any(|p| !p.same_process(&me));
        let engine_moves = policy == crate::algo::policy::CtaPolicy::Zero && self.nranks >= 2 && crate::algo::ce_direct::min_bytes(&tuning) > 0 && other_processes;
        let policy_base = crate::algo::collcfg::PolicyBase { policy, free_blocks, env_ce_min: env_tuning.ce_direct_min_bytes, other_processes };
        let scratch = Scratch::for_ranks(self.nranks, &tuning);
        let fp8_ok = peers.iter().all(|p| p.cc_major >= 9);
        let abort_flag = Arc::new(HostMapped::zeroed(dev, 64)?);
        // Cross-host machinery also serves one host when peer GPU memory is not to be used.
        let spans_hosts = peers.iter().any(|p| !p.same_host(&me));
        let port_channels = spans_hosts || (self.nranks > 1 && paths.local != crate::transport::select::LocalPath::Memory);
        let (channels, net) = if port_channels {
            let (state, flag) = (self.state.clone(), abort_flag.clone());
            let rank = self.rank;
            let net = connect(cross_host::Setup {
                bs: &bootstrap,
                dev,
                me: self.rank,
                peers: &peers,
                device: self.device,
                config: &self.config,
                paths,
                abort_flag: abort_flag.clone(),
                on_error: Box::new(move |e| {
                    let held = fail_async(&state, e.code, &|| flag.store_u32(0, 1));
                    nccl_warn!("comm rank {rank}: {}; {}", e.msg, AsyncState::reports(e.code, held));
                }),
            })?;
            (None, Some(net))
        } else {
            (Some(MemoryChannels::connect(&bootstrap, dev, &peers, &scratch, &abort_flag)?), None)
        };
        let dev_comm = channels.as_ref().map_or(0, |c| c.dev_comm);
        let ce = match &channels {
            // Pairs in separate processes (one host: the channels map every peer); a rank has no
            // copy engine of its own to lend a peer in its own process, whose buffers it sees.
            Some(ch) if self.nranks >= 2 && crate::algo::ce_direct::min_bytes(&tuning) > 0 && peers.iter().any(|p| !p.same_process(&peers[self.rank])) => {
                let candidate: Vec<bool> = peers.iter().map(|p| !p.same_process(&peers[self.rank])).collect();
                let key = crate::reg::comm_key(id);
                let fail = || {
                    let (state, flag, rank) = (self.state.clone(), abort_flag.clone(), self.rank);
                    Box::new(move |e: Error| {
                        let held = fail_async(&state, e.code, &|| flag.store_u32(0, 1));
                        nccl_warn!("comm rank {rank}: {}; {}", e.msg, AsyncState::reports(e.code, held));
                    }) as Box<dyn Fn(Error) + Send + Sync>
                };
                let on_error = tuning.ce_direct_async.then(fail);
                crate::transport::ce_direct::CeDirect::connect(&bootstrap, dev, key, &ch.ce_counters, &candidate, abort_flag.clone(), fail(), on_error, policy.local_copies_by_engine(), crate::algo::ce_direct::graph_min_bytes(&tuning))?
            }
            _ => None,
        };
        if policy != crate::algo::policy::CtaPolicy::Default {
            nccl_info!(
                Subsys::Init,
                "rank {}: CTA policy {}: kernels take at most {} thread blocks{}",
                self.rank,
                policy.name(),
                topo.sm_count,
                match (engine_moves, ce.is_some()) {
                    (true, true) => "; AllGather, AlltoAll, Broadcast, Gather, Scatter and Send/Recv with the copy-engine links' peers move by copy engine at every size (inside CUDA graphs too, where both ranks of a pair capture), local copies too; reductions and other peers by kernel",
                    (true, false) => "; no copy-engine link to any peer: AllGather, AlltoAll, Broadcast, Gather, Scatter and Send/Recv by the exchange kernel",
                    _ if policy == crate::algo::policy::CtaPolicy::Zero => "; no peer in another process (or OXCCL_CE_DIRECT_MIN_BYTES=0): every collective by kernel",
                    _ => "",
                }
            );
        }
        // Before the barrier: every rank's registration socket exists before any rank registers.
        let reg = crate::reg::Registry::start(dev, self.rank, &peers, crate::reg::comm_key(id), channels.as_ref().map(|c| c.reg_table.clone()));
        let mem = channels.as_ref().map_or(0, |c| c.device_bytes);
        // Every rank has mapped every peer before any of them launches a kernel on the channels.
        bootstrap.barrier()?;
        give_up.disarm();
        let launch = LaunchState {
            last_stream: None,
            done: crate::comm::completion::Completion::new(dev_comm)?,
            counting: false,
            counted_last: false,
            join: Event::new()?,
            tail_now: None,
            last_grid: 0,
            ring_anchor: None,
            ring_prev: None,
            progress: Default::default(),
            recent: Default::default(),
            graph_all_capture: None,
            completion_event: None,
        };
        let launch = Arc::new(Mutex::new(launch));
        let key = bootstrap.instance_key();
        let bootstrap = Arc::new(bootstrap);
        // Weak: a watchdog left to end by itself (stop_watchdog) must not hold the last
        // reference, whose drop (cuMemFreeHost; cuStreamDestroy and cuEventDestroy of the launch
        // state) would run on its thread, past the gate every free goes through.
        let (flag, ls) = (Arc::downgrade(&abort_flag), Arc::downgrade(&launch));
        let watchdog = watch_peers(Watchdog {
            rank: self.rank,
            nranks: self.nranks,
            bs: bootstrap.clone(),
            state: self.state.clone(),
            watch: self.watch.clone(),
            launch_done: Box::new(move |ord| ls.upgrade().and_then(|ls| launch_done(dev, &ls, ord))),
            stop_kernels: Box::new(move || {
                if let Some(f) = flag.upgrade() {
                    f.store_u32(0, 1);
                }
            }),
        })?;
        nccl_info!(
            Subsys::Init,
            "comm {:p} rank {} nRanks {} cudaDev {} busId {} - Init COMPLETE ({:.1} ms, {:.1} MiB device memory)",
            self as *const Comm,
            self.rank,
            self.nranks,
            dev.ordinal,
            dev.bus_id,
            t0.elapsed().as_secs_f64() * 1e3,
            mem as f64 / (1 << 20) as f64
        );
        Ok(Ready {
            dev,
            module,
            bootstrap,
            peers,
            topo,
            scratch,
            tuning,
            fp8_ok,
            check: crate::config::env_bool("OXCCL_CHECK", false),
            checksum: crate::config::env_bool("OXCCL_CHECKSUM", false),
            abort_flag,
            channels: Mutex::new(channels),
            net,
            watchdog: Mutex::new(Some(watchdog)),
            key,
            dev_comm,
            process_ranks,
            launch,
            reg,
            ce,
            engine_moves,
            policy_base,
        })
    }

}

/// Gives up on the bootstrap (`Bootstrap::abandon`) when dropped armed: an init that failed
/// before its final barrier.
struct GiveUp<'a>(Option<&'a Bootstrap>);

impl GiveUp<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        if let Some(bs) = self.0 {
            bs.abandon();
        }
    }
}

fn bus_id_bytes(s: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (o, i) in b.iter_mut().zip(s.bytes()) {
        *o = i;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::watchdog::on_peer_lost;

    /// One rank of one communicator as its liveness watchdog sees it, without a GPU (every
    /// launch it made has finished).
    struct SimRank {
        bs: Arc<Bootstrap>,
        state: Arc<AsyncState>,
        stopped: Arc<AtomicBool>,
        watchdog: Option<std::thread::JoinHandle<()>>,
    }

    /// A communicator of `nranks` ranks as threads, each with its real liveness watchdog; each
    /// rank ran one collective, which finished.
    fn sim_comm(nranks: usize) -> Vec<SimRank> {
        crate::bootstrap::local_ranks(nranks)
            .into_iter()
            .map(|bs| {
                let bs = Arc::new(bs);
                let state = Arc::new(AsyncState::new(ResultCode::Success));
                let stopped = Arc::new(AtomicBool::new(false));
                let watch = Arc::new(crate::comm::liveness::Watch::new(nranks));
                watch.begin(crate::comm::liveness::Needs::All, true);
                watch.end();
                let flag = stopped.clone();
                let watchdog = watch_peers(Watchdog {
                    rank: bs.rank(),
                    nranks,
                    bs: bs.clone(),
                    state: state.clone(),
                    watch,
                    launch_done: Box::new(|_| Some(true)),
                    stop_kernels: Box::new(move || flag.store(true, Ordering::Release)),
                })
                .expect("watchdog");
                SimRank { bs, state, stopped, watchdog: Some(watchdog) }
            })
            .collect()
    }

    /// `comms` communicators over `nranks` ranks, by rank (as a process holds them).
    fn sim_ranks(nranks: usize, comms: usize) -> Vec<Vec<SimRank>> {
        let mut by_rank: Vec<Vec<SimRank>> = (0..nranks).map(|_| Vec::new()).collect();
        for _ in 0..comms {
            for (r, c) in sim_comm(nranks).into_iter().enumerate() {
                by_rank[r].push(c);
            }
        }
        by_rank
    }

    /// ncclCommAbort's host side for the bootstrap (no goodbye), then its memory going (release
    /// notices to every peer); the Bootstrap stays, as the reaper keeps it.
    fn sim_abort(c: &mut SimRank) {
        c.bs.abort();
        end_watchdog(&c.bs, c.watchdog.take(), false);
        for p in (0..c.bs.nranks()).filter(|&p| p != c.bs.rank()) {
            let _ = c.bs.send_released(p);
        }
    }

    /// ncclCommDestroy's host side for the bootstrap (goodbye, watchdog, release notices).
    fn sim_destroy(c: &mut SimRank) {
        end_watchdog(&c.bs, c.watchdog.take(), true);
        for p in (0..c.bs.nranks()).filter(|&p| p != c.bs.rank()) {
            let _ = c.bs.send_released(p);
        }
    }

    fn assert_healthy(survivors: &[Vec<SimRank>]) {
        for c in survivors.iter().flatten() {
            assert_eq!(c.state.get(), ResultCode::Success, "rank {}: nothing pending needed the lost rank", c.bs.rank());
            assert!(!c.stopped.load(Ordering::Acquire), "rank {}: kernels stopped", c.bs.rank());
        }
    }

    /// The conformance fuzzer's "abort, posters only" at 3 ranks with 4 communicators each: rank 0
    /// aborts every communicator; ranks 1 and 2 (each in a process of its own, nothing pending)
    /// stay healthy, then finalize and destroy every communicator at once.
    #[test]
    fn survivors_of_an_abort_in_their_own_processes_tear_down_at_once() {
        let mut ranks = sim_ranks(3, 4);
        let mut survivors = ranks.split_off(1);
        let t0 = Instant::now();
        ranks[0].iter_mut().for_each(sim_abort);
        assert!(t0.elapsed() < Duration::from_secs(3), "abort took {:?}", t0.elapsed());
        std::thread::sleep(Duration::from_secs(2));
        assert_healthy(&survivors);
        std::thread::scope(|s| {
            for comms in survivors.iter_mut() {
                s.spawn(move || {
                    let t = Instant::now();
                    comms.iter_mut().for_each(sim_destroy);
                    assert!(t.elapsed() < Duration::from_secs(3), "teardown took {:?}", t.elapsed());
                });
            }
        });
    }

    /// The same with every rank in one process, driven by one thread: the survivors' teardowns
    /// one after another.
    #[test]
    fn survivors_of_an_abort_driven_by_one_thread_tear_down_at_once() {
        let mut ranks = sim_ranks(3, 4);
        let poster = ranks.pop().expect("rank 2");
        let mut poster = poster;
        poster.iter_mut().for_each(sim_abort);
        std::thread::sleep(Duration::from_secs(2));
        assert_healthy(&ranks);
        let t = Instant::now();
        ranks.iter_mut().flatten().for_each(sim_destroy);
        assert!(t.elapsed() < Duration::from_secs(3), "teardown took {:?}", t.elapsed());
    }

    /// The gate for frees: communicators that never launched (here: never initialised) hold
    /// nothing back.
    #[test]
    fn memory_is_freed_at_once_where_no_communicator_launched() {
        let c = Arc::new(Comm::new(0, 2, 0, CommConfig::default()));
        let h = register(c);
        let mut ran = false;
        assert!(when_idle(&mut || ran = true));
        assert!(ran);
        unregister(h);
    }

    #[test]
    fn registry_rejects_unknown_and_destroyed_handles() {
        let c = Arc::new(Comm::new(0, 1, 0, CommConfig::default()));
        let h = register(c);
        assert!(lookup(h).is_ok());
        assert_eq!(lookup(h + 8).map(|_| ()).unwrap_err().code, ResultCode::InvalidArgument);
        assert!(unregister(h).is_some());
        assert_eq!(lookup(h).map(|_| ()).unwrap_err().code, ResultCode::InvalidArgument);
        assert!(unregister(h).is_none());
    }

    #[test]
    fn user_ops_are_per_comm_and_typed() {
        let a = Comm::new(0, 2, 0, CommConfig::default());
        let b = Comm::new(0, 2, 0, CommConfig::default());
        let op = a.create_op(UserOp { dtype: DataType::Float32, scalar: 0x3f80_0000, scalar_ptr: 0 }).unwrap();
        assert!(op >= 5);
        let r = a.resolve_op(op, DataType::Float32).unwrap();
        assert_eq!(r.op, RedOp::PreMulSum);
        assert_eq!(r.scalar, 0x3f80_0000);
        assert_eq!(a.resolve_op(op, DataType::Float16).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(b.resolve_op(op, DataType::Float32).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(a.destroy_op(2).unwrap_err().code, ResultCode::InvalidArgument, "built-in");
        a.destroy_op(op).unwrap();
        assert_eq!(a.destroy_op(op).unwrap_err().code, ResultCode::InvalidArgument, "twice");
        assert_eq!(a.resolve_op(op, DataType::Float32).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(a.resolve_op(-1, DataType::Float32).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(a.resolve_op(3, DataType::Int8).unwrap().op, RedOp::Min);
        // Slots are reused after destroy.
        let op2 = a.create_op(UserOp { dtype: DataType::Int8, scalar: 2, scalar_ptr: 0 }).unwrap();
        assert_eq!(op2, op);
    }

    #[test]
    fn nonblocking_operation_marks_the_parent_in_progress() {
        let c = Comm::new(0, 2, 0, CommConfig::default());
        c.state.force(ResultCode::Success);
        c.begin_async().unwrap();
        assert_eq!(c.async_state(), ResultCode::InProgress);
        assert_eq!(c.begin_async().unwrap_err().code, ResultCode::InvalidArgument, "second one");
        assert_eq!(c.check_usable().unwrap_err().code, ResultCode::InvalidArgument, "used too early");
        c.end_async(&Ok(()));
        assert_eq!(c.async_state(), ResultCode::Success);
        assert!(c.check_usable().is_ok());
        c.begin_async().unwrap();
        c.end_async(&Err(Error::remote("peer died")));
        assert_eq!(c.async_state(), ResultCode::RemoteError);
        assert_eq!(c.begin_async().unwrap_err().code, ResultCode::RemoteError);
    }

    #[test]
    fn a_lost_peer_makes_the_comm_a_remote_error_and_stops_kernels() {
        let state = AsyncState::new(ResultCode::Success);
        let stopped = AtomicBool::new(false);
        on_peer_lost(&state, &|| stopped.store(true, Ordering::Release));
        assert_eq!(state.get(), ResultCode::RemoteError);
        assert!(stopped.load(Ordering::Acquire));
        let failed = AsyncState::new(ResultCode::SystemError);
        on_peer_lost(&failed, &|| {});
        assert_eq!(failed.get(), ResultCode::SystemError, "the first error stays");
        let c = Comm::new(0, 2, 0, CommConfig::default());
        c.state.force(ResultCode::RemoteError);
        assert_eq!(c.check_usable().unwrap_err().code, ResultCode::RemoteError, "no new work on a failed comm");
    }

    #[test]
    fn pending_comm_reports_in_progress_and_keeps_first_error() {
        let c = Comm::new(0, 2, 0, CommConfig::default());
        assert_eq!(c.async_state(), ResultCode::InProgress);
        assert_eq!(c.ready().map(|_| ()).unwrap_err().code, ResultCode::InvalidArgument);
        c.set_error(ResultCode::SystemError);
        c.set_error(ResultCode::RemoteError);
        assert_eq!(c.async_state(), ResultCode::InProgress, "held until the init ends");
        c.fail_operation(ResultCode::InvalidUsage);
        assert_eq!(c.async_state(), ResultCode::InvalidUsage, "the init's own error");
        c.set_error(ResultCode::RemoteError);
        assert_eq!(c.async_state(), ResultCode::InvalidUsage, "the first error stays");
    }
}
