//! The C ABI: every NCCL 2.28.9 host function and its `pncclX` alias. This layer only converts and
//! validates arguments, then calls safe Rust; every entry point runs inside `call`, so no panic
//! crosses into C and every error is logged once as a NCCL WARN with its code returned.
// Parameter and field names are NCCL's own, as nccl.h shows them.
#![allow(non_snake_case)]
// Pointers come from C callers, whose contract (nccl.h) makes them valid; the layer exists to
// take them at that word.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod aliases;
pub mod coll;
pub mod comm;
pub mod devapi;
pub mod encryption;
pub mod group;
pub mod mem;
pub mod p2p;
pub mod param;
pub mod redop;
pub mod rma;
pub mod types;
pub mod version;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::comm::{self as comm_mod, Comm};
use crate::error::{Error, Result, ResultCode};
use types::{ncclComm_t, ncclResult_t};

/// Runs one API call: catches panics, logs errors as WARN, returns the NCCL code.
pub(crate) fn call(name: &'static str, f: impl FnOnce() -> Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ResultCode::Success,
        Ok(Err(e)) => report(name, e),
        Err(p) => {
            nccl_warn!("{name}: internal error: {}", crate::error::panic_text(&*p));
            ResultCode::InternalError
        }
    }
}

/// Like [`call`], for operations that can be part of a group: an error is also remembered by the
/// calling thread's open group, whose End then returns it and drops the group.
pub(crate) fn call_grouped(name: &'static str, f: impl FnOnce() -> Result<()>) -> ncclResult_t {
    // The profiler's clock runs inside the panic boundary too (it touches thread-locals).
    let r = catch_unwind(AssertUnwindSafe(|| {
        crate::diag::hostprof::begin();
        let r = f();
        crate::diag::hostprof::end(crate::launch::group::depth() > 0);
        r
    }));
    match r {
        Ok(Ok(())) => ResultCode::Success,
        Ok(Err(e)) => {
            crate::launch::group::record_error(&e);
            report(name, e)
        }
        Err(p) => {
            let e = Error::internal(format!("{name}: internal error: {}", crate::error::panic_text(&*p)));
            crate::launch::group::record_error(&e);
            report(name, e)
        }
    }
}

fn report(name: &str, e: Error) -> ncclResult_t {
    if e.code != ResultCode::InProgress {
        crate::log::warn_error(&e.clone().context(name));
    }
    e.code
}

/// A required out-pointer: NULL is an invalid argument naming the parameter.
fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    // SAFETY: non-null pointers from C are taken to point to a valid, writable T (the C contract).
    unsafe { p.as_mut() }.ok_or_else(|| Error::invalid_argument(format!("{name} argument is NULL")))
}

/// The communicator behind a handle; NULL, never-created and destroyed handles are invalid.
fn comm_arg(c: ncclComm_t) -> Result<Arc<Comm>> {
    if c.is_null() {
        return Err(Error::invalid_argument("comm argument is NULL"));
    }
    comm_mod::lookup(c as usize)
}

