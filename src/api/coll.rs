//! Collective operations.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use super::types::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use super::{call_grouped, comm_arg};
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
    }))
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
    call_grouped("ncclAllReduce", || symmetric_reduction(Coll::AllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream))
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
    call_grouped("ncclReduce", || {
        let (c, dt, op) = reducing(comm, datatype, op)?;
        root_check(&c, root, "root")?;
        size_check(&c, count, dt, false)?;
        if count == 0 {
            return Ok(());
        }
        pointer_check(&c, sendbuff, "sendbuff")?;
        if c.rank == root as usize {
            pointer_check(&c, recvbuff, "recvbuff")?;
        }
        submit(c, Coll::Reduce, sendbuff, recvbuff, count, dt, op, root, stream)
    })
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
    call_grouped("ncclBcast", || rooted_movement(Coll::Broadcast, buff, buff, count, datatype, root, comm, stream))
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
    call_grouped("ncclBroadcast", || rooted_movement(Coll::Broadcast, sendbuff, recvbuff, count, datatype, root, comm, stream))
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
        symmetric_reduction(Coll::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
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
) -> Result<()> {
    let (c, dt, op) = reducing(comm, datatype, op)?;
    size_check(&c, count, dt, coll == Coll::ReduceScatter)?;
    if count == 0 {
        return Ok(());
    }
    pointer_check(&c, sendbuff, "sendbuff")?;
    pointer_check(&c, recvbuff, "recvbuff")?;
    submit(c, coll, sendbuff, recvbuff, count, dt, op, 0, stream)
}

/// AllGather and AlltoAll: per-rank counts, no root, both buffers used on every rank.
fn per_rank_movement(
    coll: Coll,
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let dt = dtype(datatype)?;
    size_check(&c, count, dt, true)?;
    if count == 0 {
        return Ok(());
    }
    pointer_check(&c, sendbuff, "sendbuff")?;
    pointer_check(&c, recvbuff, "recvbuff")?;
    submit(c, coll, sendbuff, recvbuff, count, dt, NO_OP, 0, stream)
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
) -> Result<()> {
    let c = comm_arg(comm)?;
    let dt = dtype(datatype)?;
    root_check(&c, root, "root")?;
    size_check(&c, count, dt, coll != Coll::Broadcast)?;
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
    submit(c, coll, sendbuff, recvbuff, count, dt, NO_OP, root, stream)
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
    call_grouped("ncclAllGather", || per_rank_movement(Coll::AllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream))
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
    call_grouped("ncclAlltoAll", || per_rank_movement(Coll::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream))
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
    call_grouped("ncclGather", || rooted_movement(Coll::Gather, sendbuff, recvbuff, count, datatype, root, comm, stream))
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
    call_grouped("ncclScatter", || rooted_movement(Coll::Scatter, sendbuff, recvbuff, count, datatype, root, comm, stream))
}
