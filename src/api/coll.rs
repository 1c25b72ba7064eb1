//! Collective operations.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use super::types::{cudaStream_t, ncclCollConfig_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use super::{call, call_grouped, comm_arg};
use crate::algo::collcfg::{at_call, CallConfig};
use crate::config::coll_config::{env_ctas, parse_coll_config, CollConfigArgs};
use crate::error::ResultCode;
use crate::log::Subsys;
use crate::comm::Comm;
use crate::types::ResolvedOp;
use crate::config::env_bool;
use crate::comm::task::CollTask;
use crate::types::Coll;
use crate::types::RedOp;
use crate::error::{Error, Result};
use crate::gpu::{self, cu};
use crate::launch::group::{self, Deferred};
use crate::types::DataType;

pub(super) fn dtype(raw: ncclDataType_t) -> Result<DataType> {
    DataType::from_raw(raw).ok_or_else(|| Error::invalid_argument(format!("invalid data type {raw}")))
}

pub(super) fn root_check(c: &Comm, root: c_int, what: &str) -> Result<()> {
    if root < 0 || root as usize >= c.nranks {
        return Err(Error::invalid_argument(format!("invalid {what} {root}, nranks {}", c.nranks)));
    }
    Ok(())
}

/// NCCL_CHECK_POINTERS=1: buffers must be device memory of the communicator's GPU.
pub(super) fn pointer_check(c: &Comm, ptr: *const c_void, name: &str) -> Result<()> {
    static ON: OnceLock<bool> = OnceLock::new();
    if !*ON.get_or_init(|| env_bool("NCCL_CHECK_POINTERS", false)) {
        return Ok(());
    }
    if ptr.is_null() {
        return Err(Error::invalid_argument(format!("{name} argument is NULL")));
    }
    gpu::ensure()?;
    let mut ordinal: c_int = -1;
    // SAFETY: out-pointer to a local; the driver validates the address.
    let rc = unsafe {
        cu::cuPointerGetAttribute(
            (&mut ordinal as *mut c_int).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr as cu::CUdeviceptr,
        )
    };
    if rc != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::invalid_argument(format!("{name} {ptr:p} is not a device pointer")));
    }
    if ordinal != c.device {
        return Err(Error::invalid_argument(format!(
            "{name} {ptr:p} is on device {ordinal}, the communicator is on device {}",
            c.device
        )));
    }
    Ok(())
}

/// Validated common arguments of a reducing collective.
fn reducing(c: ncclComm_t, dt: ncclDataType_t, op: ncclRedOp_t) -> Result<(Arc<Comm>, DataType, ResolvedOp)> {
    let c = comm_arg(c)?;
    let dt = dtype(dt)?;
    let op = c.resolve_op(op, dt)?;
    Ok((c, dt, op))
}

/// The identity op for collectives that do not reduce.
const NO_OP: ResolvedOp = ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 };

/// Rejects counts whose byte size (times the rank count, for per-rank counts) overflows.
fn size_check(c: &Comm, count: usize, dt: DataType, per_rank: bool) -> Result<()> {
    let n = if per_rank { c.nranks as u64 } else { 1 };
    (count as u64)
        .checked_mul(dt.size() as u64)
        .and_then(|b| b.checked_mul(n))
        .map(|_| ())
        .ok_or_else(|| Error::invalid_argument(format!("count {count} is too large")))
}

#[allow(clippy::too_many_arguments)]
fn submit(
    c: Arc<Comm>,
    coll: Coll,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: DataType,
    op: ResolvedOp,
    root: c_int,
    stream: cudaStream_t,
    config: Option<Box<CallConfig>>,
) -> Result<()> {
    group::submit(Deferred::Coll(CollTask {
        comm: c,
        coll,
        send: send as u64,
        recv: recv as u64,
        count: count as u64,
        dtype,
        op,
        root,
        stream: stream as cu::CUstream,
        config,
    }))
}

/// The nccl*Config collectives' config: parsed first, as NCCL 2.32.3 does before it looks at the
/// communicator (config::coll_config; its errors do not fail an open group, as in NCCL, where
/// they come before the call joins it), then the call with it.
fn configured(name: &'static str, config: *const ncclCollConfig_t, f: impl FnOnce(Option<&CollConfigArgs>) -> Result<()>) -> ncclResult_t {
    let mut args = None;
    let rc = call(name, || {
        args = parse_coll_config(config)?;
        Ok(())
    });
    if rc != ResultCode::Success {
        return rc;
    }
    call_grouped(name, || f(args.as_ref()))
}

/// A configured call's line at INFO (COLL): NCCL's collective line, with the config's settings
/// (userProfilerTag among them). Plain calls log nothing here.
#[allow(clippy::too_many_arguments)]
fn log_configured(cfg: Option<&CollConfigArgs>, coll: Coll, c: &Comm, send: *const c_void, recv: *const c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, stream: cudaStream_t) {
    let Some(a) = cfg else { return };
    nccl_info!(
        Subsys::Coll,
        "{coll:?}: sendbuff {send:p} recvbuff {recv:p} count {count} datatype {datatype} op {op} root {root} comm {:p} [nranks={}] stream {stream:p} userProfilerTag {:#x} algSelection {:?} forceAlgSelection {} CTAPolicy {} minCTAs {} maxCTAs {} nvlsCTAs {} cgaClusterSize {} launchCompletionEvent {:#x}",
        c as *const Comm,
        c.nranks,
        a.tag,
        a.alg_selection.as_deref().unwrap_or(""),
        i32::from(a.force),
        a.cta_policy,
        a.min_ctas,
        a.max_ctas,
        a.nvls_ctas,
        a.cga_cluster_size,
        a.event
    );
}

/// A configured, non-empty call's config judged against its communicator and collective
/// (algo::collcfg::at_call); None where the launch is the plain call's.
fn judge(cfg: Option<&CollConfigArgs>, c: &Comm, coll: Coll) -> Result<Option<Box<CallConfig>>> {
    let Some(a) = cfg else { return Ok(None) };
    let judged = at_call(a, coll, c.config.max_ctas, env_ctas())?;
    Ok(judged.shapes_launch().then(|| Box::new(judged)))
}

/// Reduces `count` elements of `datatype` with `op` across all ranks; every rank's `recvbuff`
/// receives the result. In place when `sendbuff == recvbuff`. As in NCCL (NCCL's
/// src/collectives.cc).
///
/// What every collective here shares (the others say "as ncclAllReduce"):
/// - **Units and buffers**: counts are elements of `datatype`, not bytes. Buffers are device
///   memory the communicator's GPU can address (cudaMalloc, ncclMemAlloc, ...), each aligned to
///   its datatype's size at least, send and receive independently; nothing outside the output
///   range is written.
/// - **Stream**: the operation is enqueued on `stream` (of the communicator's device; NULL is the
///   legacy default stream) and the call returns before data moves. The send buffer must stay
///   unchanged and the receive buffer unread until `stream` passes the operation. On a capturing
///   stream the operation is captured into the CUDA graph, and each replay runs it again.
/// - **Groups**: between ncclGroupStart and ncclGroupEnd the operation is queued and launched at
///   the outermost ncclGroupEnd, which then returns its errors; the arguments are checked here.
/// - **Threads**: one thread at a time per communicator, in the same order on every rank, as in
///   NCCL; different communicators may be used from different threads at once.
/// - **count 0**: ncclSuccess at once, nothing enqueued (after the arguments are checked).
/// - **Returns** ncclSuccess, or:
///   - ncclInvalidArgument: `comm` NULL, never created or destroyed; `datatype` or `op` invalid,
///     or a ncclRedOpCreatePreMulSum op of another datatype or already destroyed; `count` times
///     the datatype's size (times the rank count where the count is per rank) overflows; an fp8
///     reduction where a GPU of the communicator is below compute capability 9.0; with
///     NCCL_CHECK_POINTERS=1, a NULL buffer or one not on the communicator's GPU; a nonblocking
///     communicator still initialising, or with an earlier call still ncclInProgress.
///   - ncclInvalidUsage: the communicator was revoked, or another thread is aborting it (an
///     aborted or destroyed handle is ncclInvalidArgument, above); NCCL_ALGO / NCCL_PROTO leave
///     this collective no algorithm; with OXCCL_CHECK=1, the ranks disagree on the collective.
///   - The communicator's asynchronous error, once it has one (ncclCommGetAsyncError): for
///     example ncclRemoteError after a peer was lost or aborted while work needed it.
///   - ncclUnhandledCudaError: a CUDA call failed (launch, stream or capture query); the WARN
///     line names it.
///   - ncclInternalError: a fault inside oxccl (caught, never a crash across the C ABI).
#[no_mangle]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclAllReduce", || symmetric_reduction(Coll::AllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream, None))
}

/// Reduces `count` elements of `datatype` with `op` across all ranks into `root`'s `recvbuff`;
/// other ranks' `recvbuff` is never written and may be NULL. In place when `sendbuff ==
/// recvbuff` on the root. Units, stream, group and thread semantics and return codes as
/// ncclAllReduce, plus ncclInvalidArgument when `root` is not in [0, nranks).
#[no_mangle]
pub extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclReduce", || rooted_reduction(sendbuff, recvbuff, count, datatype, op, root, comm, stream, None))
}

/// Reduce: `recvbuff` is only checked on the root.
#[allow(clippy::too_many_arguments)]
fn rooted_reduction(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    cfg: Option<&CollConfigArgs>,
) -> Result<()> {
    let raw_op = op;
    let (c, dt, op) = reducing(comm, datatype, op)?;
    root_check(&c, root, "root")?;
    size_check(&c, count, dt, false)?;
    log_configured(cfg, Coll::Reduce, &c, sendbuff, recvbuff, count, datatype, raw_op, root, stream);
    if count == 0 {
        return Ok(());
    }
    pointer_check(&c, sendbuff, "sendbuff")?;
    if c.rank == root as usize {
        pointer_check(&c, recvbuff, "recvbuff")?;
    }
    let config = judge(cfg, &c, Coll::Reduce)?;
    submit(c, Coll::Reduce, sendbuff, recvbuff, count, dt, op, root, stream, config)
}

/// In-place Broadcast (NCCL's older API): the same as ncclBroadcast(buff, buff, count, datatype,
/// root, comm, stream), with its semantics and return codes.
#[no_mangle]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclBcast", || rooted_movement(Coll::Broadcast, buff, buff, count, datatype, root, comm, stream, None))
}

/// Copies `count` elements from `root`'s `sendbuff` to every rank's `recvbuff`; `sendbuff` is
/// ignored off the root. In place when `sendbuff == recvbuff` on the root. Units, stream, group
/// and thread semantics and return codes as ncclAllReduce (no `op`), plus ncclInvalidArgument
/// when `root` is not in [0, nranks).
#[no_mangle]
pub extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclBroadcast", || rooted_movement(Coll::Broadcast, sendbuff, recvbuff, count, datatype, root, comm, stream, None))
}


/// Reduces `nranks * recvcount` elements of every rank's `sendbuff` with `op` and leaves block i
/// of the result (`recvcount` elements from offset `i * recvcount`) in rank i's `recvbuff`. In
/// place when `recvbuff == sendbuff + rank * recvcount` (NCCL's form). Units, stream, group and
/// thread semantics and return codes as ncclAllReduce; the overflow check covers
/// `nranks * recvcount` elements.
#[no_mangle]
pub extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclReduceScatter", || {
        symmetric_reduction(Coll::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream, None)
    })
}

/// AllReduce and ReduceScatter: no root, both buffers used on every rank; ReduceScatter's count
/// is per rank.
#[allow(clippy::too_many_arguments)]
fn symmetric_reduction(
    coll: Coll,
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    cfg: Option<&CollConfigArgs>,
) -> Result<()> {
    let raw_op = op;
    let (c, dt, op) = reducing(comm, datatype, op)?;
    size_check(&c, count, dt, coll == Coll::ReduceScatter)?;
    log_configured(cfg, coll, &c, sendbuff, recvbuff, count, datatype, raw_op, 0, stream);
    if count == 0 {
        return Ok(());
    }
    pointer_check(&c, sendbuff, "sendbuff")?;
    pointer_check(&c, recvbuff, "recvbuff")?;
    let config = judge(cfg, &c, coll)?;
    submit(c, coll, sendbuff, recvbuff, count, dt, op, 0, stream, config)
}

/// AllGather and AlltoAll: per-rank counts, no root, both buffers used on every rank.
#[allow(clippy::too_many_arguments)]
fn per_rank_movement(
    coll: Coll,
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    cfg: Option<&CollConfigArgs>,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let dt = dtype(datatype)?;
    size_check(&c, count, dt, true)?;
    log_configured(cfg, coll, &c, sendbuff, recvbuff, count, datatype, 0, 0, stream);
    if count == 0 {
        return Ok(());
    }
    pointer_check(&c, sendbuff, "sendbuff")?;
    pointer_check(&c, recvbuff, "recvbuff")?;
    let config = judge(cfg, &c, coll)?;
    submit(c, coll, sendbuff, recvbuff, count, dt, NO_OP, 0, stream, config)
}

/// Broadcast, Gather and Scatter: Gather and Scatter counts are per rank; buffers only the root
/// uses (Broadcast's and Scatter's sendbuff, Gather's recvbuff) are only checked on the root.
#[allow(clippy::too_many_arguments)]
fn rooted_movement(
    coll: Coll,
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    cfg: Option<&CollConfigArgs>,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let dt = dtype(datatype)?;
    root_check(&c, root, "root")?;
    size_check(&c, count, dt, coll != Coll::Broadcast)?;
    log_configured(cfg, coll, &c, sendbuff, recvbuff, count, datatype, 0, root, stream);
    if count == 0 {
        return Ok(());
    }
    let on_root = c.rank == root as usize;
    let gather = coll == Coll::Gather;
    if gather || on_root {
        pointer_check(&c, sendbuff, "sendbuff")?;
    }
    if !gather || on_root {
        pointer_check(&c, recvbuff, "recvbuff")?;
    }
    let config = judge(cfg, &c, coll)?;
    submit(c, coll, sendbuff, recvbuff, count, dt, NO_OP, root, stream, config)
}

/// Gathers `sendcount` elements from every rank into every rank's `recvbuff`, rank i's at offset
/// `i * sendcount` (`recvbuff` holds `nranks * sendcount`). In place when `sendbuff == recvbuff +
/// rank * sendcount` (NCCL's form). Units, stream, group and thread semantics and return codes as
/// ncclAllReduce (no `op`); the overflow check covers `nranks * sendcount` elements.
#[no_mangle]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclAllGather", || per_rank_movement(Coll::AllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream, None))
}

/// Block j (`count` elements from offset `j * count`) of every rank's `sendbuff` goes to rank j,
/// landing at block i of its `recvbuff` for sender i; both buffers hold `nranks * count`
/// elements. There is no in-place form: `sendbuff == recvbuff` gives undefined data but never a
/// fault. Units, stream, group and thread semantics and return codes as ncclAllReduce (no `op`);
/// the overflow check covers `nranks * count` elements.
#[no_mangle]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclAlltoAll", || per_rank_movement(Coll::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream, None))
}

/// Every rank's `count` elements of `sendbuff` go to `root`'s `recvbuff`, rank i's at offset
/// `i * count` (`recvbuff` holds `nranks * count` on the root and is ignored elsewhere). In place
/// when `sendbuff == recvbuff + root * count` on the root. Units, stream, group and thread
/// semantics and return codes as ncclAllReduce (no `op`), plus ncclInvalidArgument when `root`
/// is not in [0, nranks).
#[no_mangle]
pub extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclGather", || rooted_movement(Coll::Gather, sendbuff, recvbuff, count, datatype, root, comm, stream, None))
}

/// Block i (`count` elements from offset `i * count`) of `root`'s `sendbuff` goes to rank i's
/// `recvbuff`; `sendbuff` (`nranks * count` elements) is ignored off the root. In place when
/// `recvbuff == sendbuff + root * count` on the root. Units, stream, group and thread semantics
/// and return codes as ncclAllReduce (no `op`), plus ncclInvalidArgument when `root` is not in
/// [0, nranks).
#[no_mangle]
pub extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclScatter", || rooted_movement(Coll::Scatter, sendbuff, recvbuff, count, datatype, root, comm, stream, None))
}

/// ncclAllReduce with a per-call configuration (NCCL 2.32.3's nccl*Config collectives, whose
/// semantics follow NCCL 2.32.3's libnccl.so.2 and nccl.h; NCCL's config/collconfig.cc).
/// `config == NULL` is exactly ncclAllReduce. Otherwise `config` points to a struct set up with
/// NCCL_COLLCONFIG_INITIALIZER, the same on every rank (only this rank's is checked); its first
/// min(`size`, sizeof(ncclCollConfig_t)) bytes are read during the call (fields past `size` keep
/// their defaults; `version` and the `ext` list are not read), so it may change after the call
/// returns, in a group too. What every nccl*Config collective shares (the others say "as
/// ncclAllReduceConfig"):
/// - **minCTAs / maxCTAs** (1-64): the call's kernels take at most maxCTAs thread blocks (capped
///   at the communicator's maxCTAs, as its own maxCTAs caps them), and those whose grid grows with
///   the message (packet and LL128-line kernels, the AllGather into a symmetric window) at least
///   minCTAs. Out-of-range values are ignored with NCCL's INFO line; NCCL_MIN_CTAS /
///   NCCL_MAX_CTAS, when set, win; minCTAs above maxCTAs becomes 1.
/// - **CTAPolicy** (NCCL_CTA_POLICY_* flags; EFFICIENCY|ZERO means ZERO): this call's CTA policy
///   instead of the communicator's (src/algo/policy.rs): EFFICIENCY caps the call's kernels at
///   the blocks that keep NCCL's bandwidth; ZERO also moves AllGather, AlltoAll, Broadcast, Gather
///   and Scatter between ranks of separate processes by copy engine. Unset, or NCCL_CTA_POLICY
///   set, keeps the communicator's.
/// - **algSelection** (NCCL's names: TREE_LL, RING_LL128, RING_SIMPLE, NVLS_SIMPLE, PAT_SIMPLE,
///   SYMK_*, ...; `,` for alternatives, `+` to intersect, `^` to exclude, prefixes allowed): the
///   algorithms this call may use, mapped onto oxccl's as NCCL_ALGO / NCCL_PROTO are
///   (src/algo/collcfg.rs: RING, TREE and PAT admit oxccl's NVLink algorithms, LL/LL128 its
///   packet ones, SIMPLE its put-based ones; AllGather's SYMK_ST its direct AllGather into a
///   symmetric window; NVLS, COLLNET and the other SYMK kernels nothing). NULL or "" is
///   automatic. Where nothing is left (nothing valid for the collective: AlltoAll, Gather and
///   Scatter have no entries; or nothing oxccl runs there), forceAlgSelection 1 (the default)
///   fails the call, 0 falls back to the automatic choice with NCCL's INFO (TUNING) line. Where
///   only packet algorithms are selected and the message exceeds their scratch, the put-based
///   algorithm runs, as under NCCL_PROTO=LL.
/// - **nvlsCTAs** (1-64) and **cgaClusterSize** (0-8) are checked (out of range: NCCL's INFO
///   line); oxccl has no NVLS and launches no clusters.
/// - **userProfilerTag**: shown in the call's INFO line (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=COLL).
/// - **launchCompletionEvent**: a cudaEvent_t (created with cudaEventDisableTiming, not
///   interprocess) recorded when the call's first kernel has launched (every block begun; the
///   launch attribute of CUDA 12.3; an older driver records it before the launch, as NCCL does),
///   or, for a call that launches no kernel of its own (copy-engine transfers, a one-rank copy),
///   on `stream` after the call's work. Every rank passes one or every rank passes NULL; at most
///   one collective per communicator in a group may pass one (more: ncclGroupEnd returns
///   ncclInvalidUsage and launches nothing). count 0 records nothing, as in NCCL.
/// - A call whose config changes its launch (any of the above but the tag, nvlsCTAs and
///   cgaClusterSize) launches on its own in a group, never fused with the others (NCCL isolates
///   it too).
/// - **Returns** what ncclAllReduce returns, and ncclInvalidArgument for: a bad magic, a
///   forceAlgSelection other than 0 or 1, a CTAPolicy other than unset or 0-3 (checked before
///   `comm`; these do not fail an open group, as in NCCL); with forceAlgSelection 1, an
///   algSelection nothing can honour (checked after the other arguments, for count > 0).
#[no_mangle]
pub extern "C" fn ncclAllReduceConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclAllReduceConfig", config, |cfg| symmetric_reduction(Coll::AllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream, cfg))
}

/// ncclBroadcast with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclBroadcast), with its semantics and return codes.
#[no_mangle]
pub extern "C" fn ncclBroadcastConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclBroadcastConfig", config, |cfg| rooted_movement(Coll::Broadcast, sendbuff, recvbuff, count, datatype, root, comm, stream, cfg))
}

/// ncclReduce with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclReduce), with its semantics and return codes.
#[no_mangle]
pub extern "C" fn ncclReduceConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclReduceConfig", config, |cfg| rooted_reduction(sendbuff, recvbuff, count, datatype, op, root, comm, stream, cfg))
}

/// ncclAllGather with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclAllGather), with its semantics and return codes.
#[no_mangle]
pub extern "C" fn ncclAllGatherConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclAllGatherConfig", config, |cfg| per_rank_movement(Coll::AllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream, cfg))
}

/// ncclReduceScatter with a per-call configuration: `config` as ncclAllReduceConfig's (NULL:
/// exactly ncclReduceScatter), with its semantics and return codes.
#[no_mangle]
pub extern "C" fn ncclReduceScatterConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclReduceScatterConfig", config, |cfg| {
        symmetric_reduction(Coll::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream, cfg)
    })
}

/// ncclAlltoAll with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclAlltoAll), with its semantics and return codes; no algSelection entry serves AlltoAll.
#[no_mangle]
pub extern "C" fn ncclAlltoAllConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclAlltoAllConfig", config, |cfg| per_rank_movement(Coll::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream, cfg))
}

/// ncclGather with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclGather), with its semantics and return codes; no algSelection entry serves Gather.
#[no_mangle]
pub extern "C" fn ncclGatherConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclGatherConfig", config, |cfg| rooted_movement(Coll::Gather, sendbuff, recvbuff, count, datatype, root, comm, stream, cfg))
}

/// ncclScatter with a per-call configuration: `config` as ncclAllReduceConfig's (NULL: exactly
/// ncclScatter), with its semantics and return codes; no algSelection entry serves Scatter.
#[no_mangle]
pub extern "C" fn ncclScatterConfig(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
    config: *const ncclCollConfig_t,
) -> ncclResult_t {
    configured("ncclScatterConfig", config, |cfg| rooted_movement(Coll::Scatter, sendbuff, recvbuff, count, datatype, root, comm, stream, cfg))
}
