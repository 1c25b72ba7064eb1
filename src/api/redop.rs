//! User-created reduction operators.

use std::ffi::c_void;

use super::coll::dtype;
use super::types::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclScalarResidence_t};
use super::{call, comm_arg, out};
use crate::comm::UserOp;
use crate::error::Error;

const SCALAR_DEVICE: ncclScalarResidence_t = 0;
const SCALAR_HOST_IMMEDIATE: ncclScalarResidence_t = 1;

/// Creates a reduction op for `comm` that multiplies every input by `*scalar` (a `datatype`
/// value) before summing, and writes it to `*op`; use it only with `datatype` on this
/// communicator. With ncclScalarHostImmediate the scalar is copied now (sizeof(datatype) bytes:
/// for bf16, two bytes, as NCCL reads them); with ncclScalarDevice it is read from device memory
/// while each operation runs (so it may change between operations, ordered by the stream). As
/// NCCL (src/enqueue.cc). Release it with ncclRedOpDestroy.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`op`, `scalar` NULL; `comm` NULL, unknown or
/// destroyed; `datatype` or `residence` invalid), ncclInvalidUsage (too many live ops on this
/// communicator), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut ncclRedOp_t,
    scalar: *mut c_void,
    datatype: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> ncclResult_t {
    call("ncclRedOpCreatePreMulSum", || {
        let slot = out(op, "op")?;
        let c = comm_arg(comm)?;
        let dt = dtype(datatype)?;
        if scalar.is_null() {
            return Err(Error::invalid_argument("scalar argument is NULL"));
        }
        let u = match residence {
            SCALAR_HOST_IMMEDIATE => {
                let mut bytes = [0u8; 8];
                // SAFETY: the caller's scalar holds at least sizeof(datatype) readable bytes.
                unsafe { std::ptr::copy_nonoverlapping(scalar.cast::<u8>(), bytes.as_mut_ptr(), dt.size()) };
                UserOp { dtype: dt, scalar: u64::from_le_bytes(bytes), scalar_ptr: 0 }
            }
            SCALAR_DEVICE => UserOp { dtype: dt, scalar: 0, scalar_ptr: scalar as u64 },
            r => return Err(Error::invalid_argument(format!("invalid scalar residence {r}"))),
        };
        *slot = c.create_op(u)?;
        Ok(())
    })
}

/// Destroys a reduction operator made by ncclRedOpCreatePreMulSum on `comm`; its number may be
/// reused by a later create. Do not destroy it while an operation using it is still queued in an
/// open group; launched operations no longer need it (as NCCL, src/enqueue.cc).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `op` is a
/// built-in op, was never created on this communicator, or was destroyed already),
/// ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
    call("ncclRedOpDestroy", || comm_arg(comm)?.destroy_op(op))
}
