//! Point-to-point operations. A group's sends and receives on one communicator run as one
//! launch at the group's end (after its collectives; several where the group is larger than a
//! launch holds, algo::batches), small ones of a pair in the group's grouped collective launch
//! (algo::group::fold_p2p); outside a group each runs alone. Counts of
//! 0 are enqueued like any other (applications rely on it).

use std::ffi::{c_int, c_void};

use super::coll::{dtype, pointer_check, root_check};
use super::types::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclResult_t};
use super::{call_grouped, comm_arg};
use crate::comm::task::P2pOp;
use crate::error::{Error, Result};
use crate::gpu::cu;
use crate::launch::group::{self, Deferred};

fn p2p(
    is_send: bool,
    buf: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let dt = dtype(datatype)?;
    root_check(&c, peer, "peer")?;
    let bytes = (count as u64)
        .checked_mul(dt.size() as u64)
        .ok_or_else(|| Error::invalid_argument(format!("count {count} is too large")))?;
    if count > 0 {
        pointer_check(&c, buf, if is_send { "sendbuff" } else { "recvbuff" })?;
    }
    let op = P2pOp { is_send, peer: peer as usize, buf: buf as u64, bytes, stream: stream as cu::CUstream };
    group::submit(Deferred::P2p(c, op))
}

/// Sends `count` elements of `datatype` from `sendbuff` to rank `peer`, which posts the
/// matching ncclRecv (same count and datatype); `peer` may be this rank. Matching is by order:
/// the n-th send to a peer meets that peer's n-th receive from this rank, as in NCCL. Inside a
/// group, a communicator's sends and receives run together at ncclGroupEnd, so two ranks may
/// send to each other without deadlock; outside a group each call runs alone and waits on the
/// device for its peer. A count of 0 is enqueued like any other. Units, stream, thread
/// semantics and return codes as ncclAllReduce (no `op`), plus ncclInvalidArgument when `peer`
/// is not in [0, nranks).
#[no_mangle]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclSend", || p2p(true, sendbuff, count, datatype, peer, comm, stream))
}

/// Receives `count` elements of `datatype` into `recvbuff` from rank `peer`, which posts the
/// matching ncclSend; the semantics and return codes are ncclSend's.
#[no_mangle]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclRecv", || p2p(false, recvbuff, count, datatype, peer, comm, stream))
}
