//! Memory allocation and buffer registration.

use std::ffi::{c_int, c_void};

use super::types::{ncclComm_t, ncclResult_t, ncclWindow_t};
use super::{call, call_grouped, comm_arg, out};
use crate::error::Error;

/// Allocates device memory on the current device, shareable with peers (cuMem VMM when available).
#[no_mangle]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    call("ncclMemAlloc", || {
        let slot = out(ptr, "ptr")?;
        *slot = crate::mem::alloc(size)? as *mut c_void;
        Ok(())
    })
}

/// Frees memory from ncclMemAlloc (or any device allocation), restoring the caller's device.
#[no_mangle]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    call("ncclMemFree", || crate::mem::free(ptr as u64))
}

/// Registration lets peers use a buffer directly. oxccl's collectives do not use registered
/// buffers yet, so, as NCCL does where registration buys nothing, this succeeds with a NULL handle.
#[no_mangle]
pub extern "C" fn ncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
    call_grouped("ncclCommRegister", || {
        let _ = (buff, size);
        comm_arg(comm)?;
        *out(handle, "handle")? = std::ptr::null_mut();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    call("ncclCommDeregister", || {
        comm_arg(comm)?;
        if handle.is_null() {
            return Ok(());
        }
        Err(Error::invalid_usage(format!("unknown registration handle {handle:p}")))
    })
}

/// Registers `buff` as a window on every rank (collective; deferred to ncclGroupEnd in a group).
/// NULL or size 0 succeeds with a NULL window, as in NCCL.
#[no_mangle]
pub extern "C" fn ncclCommWindowRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    winFlags: c_int,
) -> ncclResult_t {
    call_grouped("ncclCommWindowRegister", || {
        let c = comm_arg(comm)?;
        let w = out(win, "win")?;
        if buff.is_null() || size == 0 {
            *w = std::ptr::null_mut();
            return Ok(());
        }
        crate::window::check_flags(winFlags)?;
        let job = crate::window::WindowJob { comm: c, base: buff as u64, size: size as u64, flags: winFlags, out: win as usize };
        crate::group::submit_window(job)
    })
}

/// Frees a window of this communicator; NULL is a no-op. Local: peers need not take part.
#[no_mangle]
pub extern "C" fn ncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t {
    call("ncclCommWindowDeregister", || {
        let c = comm_arg(comm)?;
        if win.is_null() {
            return Ok(());
        }
        c.windows.remove(win as usize)
    })
}
