//! Point-to-point operations.

use std::ffi::{c_int, c_void};

use super::coll::{dtype, root_check};
use super::types::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclResult_t};
use super::{call_grouped, comm_arg, not_yet};

#[no_mangle]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclSend", || {
        let _ = (sendbuff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, peer, "peer")?;
        Err(not_yet("ncclSend"))
    })
}

#[no_mangle]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclRecv", || {
        let _ = (recvbuff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, peer, "peer")?;
        Err(not_yet("ncclRecv"))
    })
}
