//! What one fuzz case is (serialisable: its JSON is the one-line reproduction), and what the
//! NCCL contract says each rank's buffers hold before and after it.

use serde::{Deserialize, Serialize};

use oxccl::gpu::cu;
use oxccl::types::DataType;

/// A collective, or a list of sends and receives (`SendRecv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    AllReduce,
    ReduceScatter,
    Reduce,
    AllGather,
    Broadcast,
    AlltoAll,
    Gather,
    Scatter,
    SendRecv,
}

impl Kind {
    pub const ALL: [Kind; 9] =
        [Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce, Kind::AllGather, Kind::Broadcast, Kind::AlltoAll, Kind::Gather, Kind::Scatter, Kind::SendRecv];

    pub fn reduces(self) -> bool {
        matches!(self, Kind::AllReduce | Kind::ReduceScatter | Kind::Reduce)
    }

    pub fn rooted(self) -> bool {
        matches!(self, Kind::Reduce | Kind::Broadcast | Kind::Gather | Kind::Scatter)
    }

    /// The library's collective (None for point-to-point).
    pub fn coll(self) -> Option<oxccl::types::Coll> {
        use oxccl::types::Coll;
        Some(match self {
            Kind::AllReduce => Coll::AllReduce,
            Kind::ReduceScatter => Coll::ReduceScatter,
            Kind::Reduce => Coll::Reduce,
            Kind::AllGather => Coll::AllGather,
            Kind::Broadcast => Coll::Broadcast,
            Kind::AlltoAll => Coll::AlltoAll,
            Kind::Gather => Coll::Gather,
            Kind::Scatter => Coll::Scatter,
            Kind::SendRecv => return None,
        })
    }

    /// Whether NCCL defines an in-place form (AlltoAll and point-to-point have none).
    pub fn has_in_place(self) -> bool {
        !matches!(self, Kind::AlltoAll | Kind::SendRecv)
    }

    /// Whether `count` is per rank (the buffers hold nranks x count on one side).
    pub fn per_rank(self) -> bool {
        matches!(self, Kind::ReduceScatter | Kind::AllGather | Kind::AlltoAll | Kind::Gather | Kind::Scatter)
    }
}

/// Reduction ops: NCCL's five built-ins and PreMulSum with its scalar on the host (read at
/// creation) or in device memory (read by the kernel); oxccl-gpu-check's set.
pub use crate::values::CheckOp as Op;

/// What the fuzzer asks of an op beyond oxccl-gpu-check's use of it.
pub trait OpExt {
    /// ncclRedOp_t of a built-in.
    fn raw(self) -> Option<i32>;
    fn premul(self) -> bool;
}

impl OpExt for Op {
    fn raw(self) -> Option<i32> {
        match self {
            Op::Sum => Some(0),
            Op::Prod => Some(1),
            Op::Max => Some(2),
            Op::Min => Some(3),
            Op::Avg => Some(4),
            Op::PreMulHost | Op::PreMulDevice => None,
        }
    }

    fn premul(self) -> bool {
        matches!(self, Op::PreMulHost | Op::PreMulDevice)
    }
}

/// How the case's group is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Called and run at once, blocking communicators.
    Eager,
    /// Captured into one CUDA graph per rank, then replayed `replays` times with fresh inputs.
    Graph,
    /// Nonblocking communicators (config.blocking = 0): calls may return ncclInProgress; the
    /// ranks poll ncclCommGetAsyncError until the group is enqueued.
    NonBlocking,
}

/// One send of `count` elements from rank `src` to rank `dst` (src == dst: a send to self),
/// each buffer at its own element offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub src: usize,
    pub dst: usize,
    pub count: u64,
    pub soff: u8,
    pub roff: u8,
}

/// How an operation's buffers are allocated and made known to the library (every rank alike):
/// the allocators NCCL's users hand it memory from, each registered or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mem {
    /// cuMemAlloc, not registered.
    #[default]
    Plain,
    /// ncclMemAlloc (cuMem, shareable between processes), not registered.
    NcclAlloc,
    /// cuMemAlloc, every allocation registered with ncclCommRegister on the operation's
    /// communicator (zero-copy paths), deregistered after the case.
    Registered,
    /// ncclMemAlloc and ncclCommRegister.
    NcclAllocRegistered,
    /// cuMemAllocManaged (unified memory, CU_MEM_ATTACH_GLOBAL), not registered: peers cannot
    /// map it.
    Managed,
    /// cuMemAllocAsync from the device's default pool (cudaMallocAsync: CuPy's and PyTorch's
    /// `backend:cudaMallocAsync`), not registered: no IPC handle, and a freed block's address
    /// comes back for the next allocation.
    Pool,
    /// As `Pool`, registered.
    PoolRegistered,
    /// cuMem physical chunks of the allocation granularity mapped back to back into one reserved
    /// range, with POSIX file-descriptor handles (PyTorch's `expandable_segments`): an
    /// allocation of 512 bytes or more starts in one chunk and ends in a later one, so no one
    /// cuMem allocation holds a large buffer. Not registered.
    Chunked,
    /// As `Chunked`, registered (PyTorch registers its expandable segments).
    ChunkedRegistered,
    /// One ncclMemAlloc per rank holding all the operation's buffers, of one size on every rank,
    /// registered as a symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC) on the
    /// operation's communicator, in one group over the process's ranks; deregistered the same way
    /// after the case (NCCL 2.28's symmetric memory, as PyTorch's symmetric tensors).
    Window,
}

/// Which allocator a buffer kind uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    CuMem,
    NcclMem,
    Managed,
    Pool,
    Chunked,
    Window,
}

impl Mem {
    pub const ALL: [Mem; 10] = [
        Mem::Plain,
        Mem::NcclAlloc,
        Mem::Registered,
        Mem::NcclAllocRegistered,
        Mem::Managed,
        Mem::Pool,
        Mem::PoolRegistered,
        Mem::Chunked,
        Mem::ChunkedRegistered,
        Mem::Window,
    ];

    pub fn allocator(self) -> Allocator {
        match self {
            Mem::Plain | Mem::Registered => Allocator::CuMem,
            Mem::NcclAlloc | Mem::NcclAllocRegistered => Allocator::NcclMem,
            Mem::Managed => Allocator::Managed,
            Mem::Pool | Mem::PoolRegistered => Allocator::Pool,
            Mem::Chunked | Mem::ChunkedRegistered => Allocator::Chunked,
            Mem::Window => Allocator::Window,
        }
    }

    pub fn registered(self) -> bool {
        matches!(self, Mem::Registered | Mem::NcclAllocRegistered | Mem::PoolRegistered | Mem::ChunkedRegistered)
    }

    fn is_plain(&self) -> bool {
        *self == Mem::Plain
    }
}

/// The algorithm selections a `CallCfg` draws from (NCCL 2.32.3's names; index 0: none). Some
/// name only algorithms oxccl lacks (NVLS), some are not valid for every collective (TREE is
/// AllReduce's, PAT AllGather's and ReduceScatter's): `CallCfg::forced_ok` says where
/// forceAlgSelection 1 may go with them.
pub const SELECTIONS: [&str; 10] = ["", "RING", "RING_LL", "RING_LL128", "RING_SIMPLE", "TREE", "PAT_SIMPLE", "NVLS_SIMPLE", "^NVLS", "ring_ll,TREE_SIMPLE"];

/// A per-collective config (NCCL 2.32.3's ncclCollConfig_t): the operation is posted with its
/// nccl*Config function (the plain one where the library has none; results are the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCfg {
    /// maxCTAs (0: unset).
    #[serde(default)]
    pub max_ctas: u8,
    /// minCTAs (0: unset).
    #[serde(default)]
    pub min_ctas: u8,
    /// CTAPolicy + 1 (0: unset; 1 default, 2 efficiency, 3 zero, 4 efficiency|zero).
    #[serde(default)]
    pub policy: u8,
    /// algSelection: an index into `SELECTIONS`.
    #[serde(default)]
    pub sel: u8,
    /// forceAlgSelection (false: 0).
    #[serde(default)]
    pub force: bool,
    /// A launchCompletionEvent (eager and nonblocking cases; at most one per communicator).
    #[serde(default)]
    pub event: bool,
}

impl CallCfg {
    /// Whether forceAlgSelection 1 may go with this selection for `kind`: it names a RING entry
    /// valid for the collective (oxccl runs RING everywhere, as NCCL does); no selection at all
    /// is always fine.
    pub fn forced_ok(&self, kind: Kind) -> bool {
        let Some(coll) = kind.coll() else { return false };
        let mask = oxccl::algo::collcfg::parse_selection(SELECTIONS[self.sel as usize]).unwrap_or(0) & oxccl::algo::collcfg::valid_mask(coll);
        self.sel == 0 || oxccl::algo::collcfg::names(mask).iter().any(|n| n.starts_with("RING_"))
    }
}

/// One operation of the case's group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCase {
    pub kind: Kind,
    /// ncclDataType_t.
    pub dtype: i32,
    /// Reduction op (reducing kinds only).
    pub op: Op,
    /// NCCL's count argument (per rank where `Kind::per_rank`; unused for SendRecv).
    pub count: u64,
    pub root: usize,
    pub in_place: bool,
    /// Which of the ranks' three communicators runs it: 0; 1, split from 0 with the ranks
    /// reversed; 2, split from 0 by parity, each half running the operation on its own, roots and
    /// peers modulo its size (exec.rs `view`). Ranks, roots and peers are communicator ranks.
    pub comm: u8,
    /// Per rank: the send and receive buffers' start, in elements past a 64-byte aligned address.
    pub soff: Vec<u8>,
    pub roff: Vec<u8>,
    /// Per rank: PreMulSum's scalar (an index into `scalar_value`).
    pub scalars: Vec<u8>,
    /// SendRecv only, in posting order (every rank posts its part in this order, so each pair's
    /// sends and receives match).
    pub transfers: Vec<Transfer>,
    /// Absent in cases written before it existed: plain.
    #[serde(default, skip_serializing_if = "Mem::is_plain")]
    pub mem: Mem,
    /// Ranks (bit r for rank r) that leave this operation's buffers unregistered although `mem`
    /// registers them: ncclCommRegister is local, so ranks may differ, and no rank may plan
    /// differently for it. Zero unless `mem` registers; absent (older cases too): 0.
    #[serde(default, skip_serializing_if = "is_zero16")]
    pub unreg: u16,
    /// Ranks (bit r for rank r) that post this operation on their second stream, so that their
    /// group spans two streams, as NCCL allows (the group orders its streams). Eager and
    /// nonblocking cases on the ranks' own streams only; absent (older cases too): 0.
    #[serde(default, skip_serializing_if = "is_zero16")]
    pub side: u16,
    /// Posted with nccl*Config and this config; absent (older cases too): the plain call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfg: Option<CallCfg>,
}

impl OpCase {
    pub fn dt(&self) -> DataType {
        DataType::from_raw(self.dtype).expect("a valid datatype")
    }
}

/// How the stopping ranks stop their communicators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// ncclCommAbort on every communicator.
    #[default]
    Abort,
    /// ncclCommRevoke on every communicator, then ncclCommDestroy.
    Revoke,
    /// ncclCommShrink with NCCL_SHRINK_ABORT over the stopping ranks (the others excluded), a
    /// correct AllReduce on each new communicator, then both destroyed.
    ShrinkAbort,
}

impl Stop {
    pub const ALL: [Stop; 3] = [Stop::Abort, Stop::Revoke, Stop::ShrinkAbort];

    fn is_abort(&self) -> bool {
        *self == Stop::Abort
    }
}

/// Which ranks abort, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Abort {
    /// Per rank: whether it posts the case's group. A rank that does not leaves its peers waiting.
    pub posts: Vec<bool>,
    /// Microseconds between every rank having issued its part and the aborts.
    pub delay_us: u32,
    /// Only the posting ranks abort; the others (nothing pending with them) must see no error
    /// for a while and then destroy their communicators in bounded time.
    pub posters_only: bool,
    /// Absent in cases written before revoke and shrink were drawn: ncclCommAbort.
    #[serde(default, skip_serializing_if = "Stop::is_abort")]
    pub how: Stop,
}

/// One fuzz case: a group of operations on `procs` processes of `per_proc` ranks each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub procs: usize,
    pub per_proc: usize,
    pub mode: Mode,
    /// Graph replays (Graph mode).
    pub replays: u8,
    pub ops: Vec<OpCase>,
    pub abort: Option<Abort>,
    /// Seeds the input data and the untouched bytes' pattern.
    pub seed: u64,
    /// The operations go on the legacy default stream (NULL, as PyTorch's blocking collectives on
    /// its default current stream) instead of each rank's own non-blocking stream. Eager and
    /// nonblocking modes only (the legacy stream cannot be captured), no abort, and only where a
    /// process's ranks are on distinct GPUs (two ranks of one communicator may not share a
    /// stream). Absent in cases written before it was drawn: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_stream: bool,
    /// The communicators' CTA policy (ncclConfig_t.CTAPolicy: 0 default, 1 efficiency, 2 zero),
    /// the same on every rank. Absent in cases written before it was drawn: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cta_policy: u8,
    /// Every communicator of the case is suspended (ncclCommSuspend with NCCL_SUSPEND_MEM) and
    /// resumed before the work runs: eager and nonblocking cases before the group is issued,
    /// graph cases after capture, before the first replay (the graph holds addresses the suspend
    /// gave back). No abort. Skipped with a library that has no ncclCommSuspend (NCCL before
    /// 2.29). Absent in cases written before it was drawn: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Graph mode with some ranks not capturing: the processes of odd index call the operations
    /// eagerly once per replay (each time with that replay's inputs) while the others capture
    /// once and replay, as NCCL allows (its ranks meet only in the kernels). Needs 2+ processes;
    /// no abort, no suspend. Absent in cases written before it was drawn: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mixed_capture: bool,
    /// Graph mode: the capture mode, 0 thread-local, 1 global (PyTorch's default: a potentially
    /// unsafe CUDA call from any thread of the process while the capture runs fails it), 2
    /// relaxed. No abort (its calls from another thread meet a global capture). Absent in cases
    /// written before it was drawn: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capture_mode: u8,
}

fn is_zero(v: &u8) -> bool {
    *v == 0
}

fn is_zero16(v: &u16) -> bool {
    *v == 0
}

impl Case {
    pub fn nranks(&self) -> usize {
        self.procs * self.per_proc
    }

    /// The CUDA capture mode of `capture_mode`.
    pub fn capture_mode(&self) -> cu::CUstreamCaptureMode {
        match self.capture_mode {
            1 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            2 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            _ => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        }
    }

    /// Whether process `proc_` captures a graph (Graph mode; with `mixed_capture`, even processes).
    pub fn captures(&self, proc_: usize) -> bool {
        self.mode == Mode::Graph && !(self.mixed_capture && proc_ % 2 == 1)
    }

    /// Graph mode: replays launched back to back on every rank's stream, without waiting in
    /// between, after the checked replays (as a training loop or nccl-tests `-G` replays): each
    /// must leave the outputs as the last checked replay did. Only where that holds whatever the
    /// number of replays: no in-place reduction (whose output is its next input); every other
    /// operation writes the same output from the same inputs. A replay that runs ahead of its
    /// peer's previous one (flags, semaphores or scratch reused too early) shows here.
    pub fn burst(&self) -> usize {
        let idempotent = self.ops.iter().all(|o| !(o.in_place && o.kind.reduces()));
        if self.mode == Mode::Graph && self.abort.is_none() && idempotent {
            3
        } else {
            0
        }
    }

    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a case serialises")
    }

    pub fn from_line(s: &str) -> Result<Case, String> {
        let c: Case = serde_json::from_str(s).map_err(|e| format!("not a case: {e}"))?;
        c.validate()?;
        Ok(c)
    }

    /// The invariants generation keeps, checked for hand-written reproductions too.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.nranks();
        if n == 0 || self.ops.is_empty() {
            return Err("a case needs ranks and operations".into());
        }
        for o in &self.ops {
            DataType::from_raw(o.dtype).ok_or_else(|| format!("datatype {}", o.dtype))?;
            if o.soff.len() != n || o.roff.len() != n || o.scalars.len() != n {
                return Err(format!("per-rank lists of {:?} are not {n} long", o.kind));
            }
            if o.mem == Mem::Window && (o.soff.iter().any(|&x| x != o.soff[0]) || o.roff.iter().any(|&x| x != o.roff[0])) {
                return Err(format!("{:?}: a window's buffers at different offsets on different ranks", o.kind));
            }
            if o.root >= n || o.comm > 2 || o.soff.iter().chain(&o.roff).any(|&x| x > 15) {
                return Err(format!("{:?}: root, comm or an offset out of range", o.kind));
            }
            if o.transfers.iter().any(|t| t.src >= n || t.dst >= n || t.soff > 15 || t.roff > 15) {
                return Err("a transfer's rank or offset is out of range".into());
            }
            if o.unreg != 0 && (!o.mem.registered() || n > 16 || o.unreg as u32 >> n != 0) {
                return Err(format!("{:?}: unreg names ranks that do not exist or buffers that are not registered", o.kind));
            }
            if o.side != 0 && (self.mode == Mode::Graph || self.default_stream || n > 16 || o.side as u32 >> n != 0) {
                return Err(format!("{:?}: side names ranks that do not exist, or a graph or legacy-stream case", o.kind));
            }
            if o.in_place && !o.kind.has_in_place() {
                return Err(format!("{:?} has no in-place form", o.kind));
            }
            if o.scalars.iter().any(|&s| s as usize >= SCALARS) {
                return Err("a scalar index is out of range".into());
            }
            if let Some(c) = &o.cfg {
                if o.kind == Kind::SendRecv || c.max_ctas > 64 || c.min_ctas > 64 || c.policy > 4 || c.sel as usize >= SELECTIONS.len() {
                    return Err(format!("{:?}: a config out of range", o.kind));
                }
                if c.force && !c.forced_ok(o.kind) {
                    return Err(format!("{:?}: selection {:?} forced where it may fail", o.kind, SELECTIONS[c.sel as usize]));
                }
                if c.event && self.mode == Mode::Graph {
                    return Err("launch-completion events go with eager and nonblocking cases".into());
                }
            }
        }
        for comm in 0..3 {
            if self.ops.iter().filter(|o| o.comm == comm && o.cfg.is_some_and(|c| c.event)).count() > 1 {
                return Err(format!("two launch-completion events on communicator {comm} in one group"));
            }
        }
        if let Some(a) = &self.abort {
            if a.posts.len() != n {
                return Err("abort.posts is not nranks long".into());
            }
        }
        if self.cta_policy > 2 {
            return Err(format!("cta_policy {} (NCCL's are 0, 1 and 2)", self.cta_policy));
        }
        if self.default_stream && (self.mode == Mode::Graph || self.abort.is_some()) {
            return Err("default_stream goes with eager or nonblocking cases without an abort".into());
        }
        if self.suspend && self.abort.is_some() {
            return Err("suspend goes with cases without an abort".into());
        }
        if self.capture_mode > 2 || (self.capture_mode != 0 && (self.mode != Mode::Graph || self.abort.is_some())) {
            return Err("capture_mode is 0-2, and other than 0 only in graph cases without an abort".into());
        }
        if self.mixed_capture && (self.mode != Mode::Graph || self.procs < 2 || self.abort.is_some() || self.suspend) {
            return Err("mixed_capture goes with graph cases of 2+ processes without an abort or suspend".into());
        }
        Ok(())
    }
}

/// PreMulSum scalars: powers of two (and small integers for integer types), so that every
/// pre-multiplied input stays exact.
pub const SCALARS: usize = 6;

pub fn scalar_value(dt: DataType, idx: u8) -> f64 {
    if dt.is_float() {
        // fp8: integers only (halves would need bits fp8 lacks once summed).
        let table: [f64; SCALARS] = if dt.is_fp8() { [1.0, -1.0, 2.0, 1.0, -2.0, 2.0] } else { [1.0, -1.0, 2.0, 0.5, -0.25, 4.0] };
        table[idx as usize % SCALARS]
    } else {
        [1.0, -1.0, 2.0, 3.0, 0.0, -3.0][idx as usize % SCALARS]
    }
}

/// Where one rank's buffers of one operation lie: allocations (each `len` elements starting `off`
/// elements past 64 bytes of guard), and the send / receive buffers as (allocation, element
/// offset in it, elements).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub allocs: Vec<AllocSpec>,
    pub send: Option<(usize, u64, u64)>,
    pub recv: Option<(usize, u64, u64)>,
    /// SendRecv: per transfer this rank takes part in (index into the op's transfers), its send
    /// and receive buffers.
    pub sends: Vec<(usize, (usize, u64, u64))>,
    pub recvs: Vec<(usize, (usize, u64, u64))>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocSpec {
    pub off: u64,
    pub len: u64,
}

/// Guard bytes on each side of every buffer: they, and every byte the contract does not let the
/// operation write, must come back unchanged.
pub const GUARD: u64 = 64;

impl AllocSpec {
    pub fn bytes(&self, es: u64) -> u64 {
        GUARD + (self.off + self.len) * es + GUARD
    }
    /// Byte offset of element 0 in the allocation.
    pub fn start(&self, es: u64) -> u64 {
        GUARD + self.off * es
    }
}

/// Elements of rank `r`'s send and receive buffers.
pub fn send_recv_len(o: &OpCase, n: usize, r: usize) -> (u64, u64) {
    let c = o.count;
    let nc = c * n as u64;
    let _ = r;
    match o.kind {
        Kind::AllReduce | Kind::Reduce | Kind::Broadcast => (c, c),
        Kind::ReduceScatter => (nc, c),
        Kind::AllGather | Kind::Gather => (c, nc),
        Kind::AlltoAll => (nc, nc),
        Kind::Scatter => (nc, c),
        Kind::SendRecv => (0, 0),
    }
}

/// Rank `r`'s buffers for `o` on `n` ranks.
pub fn layout(o: &OpCase, n: usize, r: usize) -> Layout {
    let mut l = Layout::default();
    if o.kind == Kind::SendRecv {
        for (i, t) in o.transfers.iter().enumerate() {
            if t.src == r {
                l.allocs.push(AllocSpec { off: t.soff as u64, len: t.count });
                l.sends.push((i, (l.allocs.len() - 1, 0, t.count)));
            }
            if t.dst == r {
                l.allocs.push(AllocSpec { off: t.roff as u64, len: t.count });
                l.recvs.push((i, (l.allocs.len() - 1, 0, t.count)));
            }
        }
        return l;
    }
    let (s, rl) = send_recv_len(o, n, r);
    let c = o.count;
    // In place where the contract defines it (rooted in-place forms only at the root).
    let in_place = o.in_place && (!matches!(o.kind, Kind::Gather | Kind::Scatter) || r == o.root);
    if in_place {
        let len = s.max(rl);
        l.allocs.push(AllocSpec { off: o.soff[r] as u64, len });
        let (so, ro) = match o.kind {
            Kind::ReduceScatter => (0, r as u64 * c),
            Kind::AllGather => (r as u64 * c, 0),
            Kind::Gather => (o.root as u64 * c, 0),
            Kind::Scatter => (0, o.root as u64 * c),
            _ => (0, 0),
        };
        l.send = Some((0, so, s));
        l.recv = Some((0, ro, rl));
    } else {
        l.allocs.push(AllocSpec { off: o.soff[r] as u64, len: s });
        l.allocs.push(AllocSpec { off: o.roff[r] as u64, len: rl });
        l.send = Some((0, 0, s));
        l.recv = Some((1, 0, rl));
    }
    l
}

/// One element of an expected output: rank `src`'s send element `idx` copied, or the reduction
/// over every rank of their send elements `idx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Copy { src: usize, idx: u64 },
    Reduce { idx: u64 },
}

/// What rank `r`'s receive buffer must hold after `o` (None: it must not be written), as a
/// function from output element index to its source.
pub fn output_rule(o: &OpCase, n: usize, r: usize) -> Option<Box<dyn Fn(u64) -> Source + Send + Sync>> {
    let c = o.count;
    let root = o.root;
    Some(match o.kind {
        Kind::AllReduce => Box::new(|i| Source::Reduce { idx: i }),
        Kind::Reduce if r == root => Box::new(|i| Source::Reduce { idx: i }),
        Kind::Reduce => return None,
        Kind::ReduceScatter => Box::new(move |i| Source::Reduce { idx: r as u64 * c + i }),
        Kind::AllGather => Box::new(move |i| Source::Copy { src: (i / c.max(1)) as usize, idx: i % c.max(1) }),
        Kind::Broadcast => Box::new(move |i| Source::Copy { src: root, idx: i }),
        Kind::AlltoAll => Box::new(move |i| Source::Copy { src: (i / c.max(1)) as usize, idx: r as u64 * c + i % c.max(1) }),
        Kind::Gather if r == root => Box::new(move |i| Source::Copy { src: (i / c.max(1)) as usize, idx: i % c.max(1) }),
        Kind::Gather => return None,
        Kind::Scatter => Box::new(move |i| Source::Copy { src: root, idx: r as u64 * c + i }),
        Kind::SendRecv => {
            let _ = n;
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: Kind, count: u64, in_place: bool, root: usize) -> OpCase {
        OpCase {
            kind,
            dtype: 7,
            op: Op::Sum,
            count,
            root,
            in_place,
            comm: 0,
            soff: vec![1, 2, 3],
            roff: vec![4, 5, 6],
            scalars: vec![0; 3],
            transfers: vec![],
            mem: Mem::Plain,
            cfg: None,
            unreg: 0,
            side: 0,
        }
    }

    /// A config's rules: no config on point-to-point, forced selections only where RING serves the
    /// collective, events only outside graphs and once a communicator; old cases (no `cfg`) parse.
    #[test]
    fn call_configs_follow_nccls_rules() {
        let mut c = Case { procs: 3, per_proc: 1, mode: Mode::Eager, replays: 1, ops: vec![op(Kind::Broadcast, 7, false, 2)], abort: None, seed: 9, default_stream: false, cta_policy: 0, suspend: false, mixed_capture: false, capture_mode: 0 };
        let line = c.to_line();
        assert!(!line.contains("cfg"), "a plain operation writes no cfg: {line}");
        assert_eq!(Case::from_line(&line).unwrap(), c);
        let sel = |s: &str| SELECTIONS.iter().position(|x| *x == s).unwrap() as u8;
        c.ops[0].cfg = Some(CallCfg { sel: sel("TREE"), force: true, ..CallCfg::default() });
        assert!(c.validate().is_err(), "TREE serves AllReduce only");
        c.ops[0].cfg = Some(CallCfg { sel: sel("ring_ll,TREE_SIMPLE"), force: true, policy: 4, max_ctas: 64, event: true, ..CallCfg::default() });
        c.validate().unwrap();
        assert_eq!(Case::from_line(&c.to_line()).unwrap(), c);
        assert!(!CallCfg { sel: sel("RING"), force: true, ..CallCfg::default() }.forced_ok(Kind::AlltoAll), "no NCCL algorithm serves AlltoAll");
        assert!(!CallCfg { sel: sel("NVLS_SIMPLE"), force: true, ..CallCfg::default() }.forced_ok(Kind::AllReduce));
        assert!(CallCfg { sel: sel("^NVLS"), force: true, ..CallCfg::default() }.forced_ok(Kind::Reduce));
        let mut two = c.clone();
        two.ops.push(two.ops[0].clone());
        assert!(two.validate().is_err(), "two events on one communicator");
        two.ops[1].comm = 1;
        two.validate().unwrap();
        c.mode = Mode::Graph;
        assert!(c.validate().is_err(), "no events in graphs");
        c.ops[0].kind = Kind::SendRecv;
        c.mode = Mode::Eager;
        assert!(c.validate().is_err(), "no config on point-to-point");
    }

    #[test]
    fn in_place_forms_put_the_send_buffer_where_nccl_says() {
        // ReduceScatter in place: recvbuff = sendbuff + rank * recvcount.
        let l = layout(&op(Kind::ReduceScatter, 10, true, 0), 3, 2);
        assert_eq!((l.allocs.len(), l.send, l.recv), (1, Some((0, 0, 30)), Some((0, 20, 10))));
        // AllGather in place: sendbuff = recvbuff + rank * sendcount.
        let l = layout(&op(Kind::AllGather, 10, true, 0), 3, 1);
        assert_eq!((l.send, l.recv), (Some((0, 10, 10)), Some((0, 0, 30))));
        // Gather in place only at the root; elsewhere two buffers.
        assert_eq!(layout(&op(Kind::Gather, 10, true, 1), 3, 1).send, Some((0, 10, 10)));
        assert_eq!(layout(&op(Kind::Gather, 10, true, 1), 3, 0).allocs.len(), 2);
        let l = layout(&op(Kind::Scatter, 10, true, 2), 3, 2);
        assert_eq!((l.send, l.recv), (Some((0, 0, 30)), Some((0, 20, 10))));
        // Offsets are per rank and per buffer.
        let l = layout(&op(Kind::AllReduce, 10, false, 0), 3, 2);
        assert_eq!((l.allocs[0].off, l.allocs[1].off), (3, 6));
    }

    #[test]
    fn outputs_follow_the_contract() {
        let at = |k: Kind, r: usize, i: u64| output_rule(&op(k, 4, false, 1), 3, r).map(|f| f(i));
        assert_eq!(at(Kind::AlltoAll, 2, 5), Some(Source::Copy { src: 1, idx: 9 }));
        assert_eq!(at(Kind::AllGather, 0, 9), Some(Source::Copy { src: 2, idx: 1 }));
        assert_eq!(at(Kind::ReduceScatter, 2, 3), Some(Source::Reduce { idx: 11 }));
        assert_eq!(at(Kind::Scatter, 0, 3), Some(Source::Copy { src: 1, idx: 3 }));
        assert_eq!(at(Kind::Reduce, 0, 0), None);
        assert_eq!(at(Kind::Gather, 1, 6), Some(Source::Copy { src: 1, idx: 2 }));
    }

    #[test]
    fn a_reproduction_line_round_trips() {
        let c = Case { procs: 3, per_proc: 1, mode: Mode::Graph, replays: 2, ops: vec![op(Kind::Gather, 7, true, 2)], abort: None, seed: 9, default_stream: false, cta_policy: 0, suspend: false, mixed_capture: false, capture_mode: 0 };
        assert_eq!(Case::from_line(&c.to_line()).unwrap(), c);
        let mut bad = c.clone();
        bad.ops[0].root = 3;
        assert!(Case::from_line(&bad.to_line()).is_err());
        // Plain buffers are left out of the line (lines written before buffer kinds still read
        // as plain); the others are spelt out and read back.
        assert!(!c.to_line().contains("mem"));
        let mut reg = c.clone();
        reg.ops[0].mem = Mem::NcclAllocRegistered;
        assert!(reg.to_line().contains(r#""mem":"nccl_alloc_registered""#), "{}", reg.to_line());
        assert_eq!(Case::from_line(&reg.to_line()).unwrap(), reg);
        // Likewise the way of stopping: ncclCommAbort is left out, the others spelt out.
        let mut stop = c.clone();
        stop.abort = Some(Abort { posts: vec![true, false, true], delay_us: 5, posters_only: true, how: Stop::Abort });
        assert!(!stop.to_line().contains("how"));
        stop.abort.as_mut().unwrap().how = Stop::ShrinkAbort;
        assert!(stop.to_line().contains(r#""how":"shrink_abort""#), "{}", stop.to_line());
        assert_eq!(Case::from_line(&stop.to_line()).unwrap(), stop);
    }

    #[test]
    fn the_default_stream_goes_only_with_uncaptured_cases_without_an_abort() {
        let mut c = Case { procs: 3, per_proc: 1, mode: Mode::Eager, replays: 1, ops: vec![op(Kind::Gather, 7, true, 2)], abort: None, seed: 9, default_stream: true, cta_policy: 0, suspend: false, mixed_capture: false, capture_mode: 0 };
        assert!(c.validate().is_ok());
        assert!(c.to_line().contains(r#""default_stream":true"#));
        assert_eq!(Case::from_line(&c.to_line()).unwrap(), c);
        c.mode = Mode::Graph;
        assert!(c.validate().is_err(), "the legacy stream cannot be captured");
        c.mode = Mode::NonBlocking;
        c.abort = Some(Abort { posts: vec![true, false, true], delay_us: 5, posters_only: true, how: Stop::Abort });
        assert!(c.validate().is_err());
        c.abort = None;
        c.default_stream = false;
        assert!(!c.to_line().contains("default_stream"), "absent when false, as in older lines");
    }

    #[test]
    fn back_to_back_replays_only_where_each_leaves_the_same_output() {
        let c = Case { procs: 2, per_proc: 1, mode: Mode::Graph, replays: 1, ops: vec![op(Kind::Gather, 7, true, 2)], abort: None, seed: 9, default_stream: false, cta_policy: 0, suspend: false, mixed_capture: false, capture_mode: 0 };
        assert_eq!(c.burst(), 3, "an in-place Gather is idempotent");
        let mut r = c.clone();
        r.ops.push(op(Kind::AllReduce, 5, true, 2));
        assert_eq!(r.burst(), 0, "an in-place AllReduce's output is its next input");
        r.ops[1].in_place = false;
        assert_eq!(r.burst(), 3);
        let mut e = c.clone();
        e.mode = Mode::Eager;
        assert_eq!(e.burst(), 0);
        let mut a = c.clone();
        a.abort = Some(Abort { posts: vec![true, false], delay_us: 5, posters_only: true, how: Stop::Abort });
        assert_eq!(a.burst(), 0);
    }

    #[test]
    fn every_regression_line_is_a_case() {
        let text = include_str!("regressions.txt");
        for l in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            Case::from_line(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        }
    }
}
