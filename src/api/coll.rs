//! Collective operations.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use super::types::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use super::{call_grouped, comm_arg, not_yet};
use crate::comm::{Comm, ResolvedOp};
use crate::config::env_bool;
use crate::enqueue::{Coll, CollTask};
use crate::error::{Error, Result};
use crate::gpu::{self, cu};
use crate::group::{self, Deferred};
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

/// Reduces `count` elements across all ranks, result on every rank (in place if send == recv).
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
    call_grouped("ncclAllReduce", || {
        let (c, dt, op) = reducing(comm, datatype, op)?;
        if count == 0 {
            return Ok(());
        }
        pointer_check(&c, sendbuff, "sendbuff")?;
        pointer_check(&c, recvbuff, "recvbuff")?;
        group::submit(Deferred::Coll(CollTask {
            comm: c,
            coll: Coll::AllReduce,
            send: sendbuff as u64,
            recv: recvbuff as u64,
            count: count as u64,
            dtype: dt,
            op,
            stream: stream as cu::CUstream,
        }))
    })
}

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
        let _ = (sendbuff, recvbuff, count, stream);
        let (c, _, _) = reducing(comm, datatype, op)?;
        root_check(&c, root, "root")?;
        Err(not_yet("ncclReduce"))
    })
}

#[no_mangle]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclBcast", || {
        let _ = (buff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, root, "root")?;
        Err(not_yet("ncclBcast"))
    })
}

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
    call_grouped("ncclBroadcast", || {
        let _ = (sendbuff, recvbuff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, root, "root")?;
        Err(not_yet("ncclBroadcast"))
    })
}

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
        let _ = (sendbuff, recvbuff, recvcount, stream);
        reducing(comm, datatype, op)?;
        Err(not_yet("ncclReduceScatter"))
    })
}

#[no_mangle]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclAllGather", || {
        let _ = (sendbuff, recvbuff, sendcount, stream);
        comm_arg(comm)?;
        dtype(datatype)?;
        Err(not_yet("ncclAllGather"))
    })
}

#[no_mangle]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclAlltoAll", || {
        let _ = (sendbuff, recvbuff, count, stream);
        comm_arg(comm)?;
        dtype(datatype)?;
        Err(not_yet("ncclAlltoAll"))
    })
}

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
    call_grouped("ncclGather", || {
        let _ = (sendbuff, recvbuff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, root, "root")?;
        Err(not_yet("ncclGather"))
    })
}

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
    call_grouped("ncclScatter", || {
        let _ = (sendbuff, recvbuff, count, stream);
        let c = comm_arg(comm)?;
        dtype(datatype)?;
        root_check(&c, root, "root")?;
        Err(not_yet("ncclScatter"))
    })
}
