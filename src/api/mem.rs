//! Memory allocation and buffer registration.

use std::ffi::{c_int, c_void};

use super::types::{ncclComm_t, ncclResult_t, ncclWindow_t};
use super::{call, call_grouped, comm_arg, out};

/// Allocates device memory on the current device, shareable with peers (cuMem VMM when available).
#[no_mangle]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    call("ncclMemAlloc", || {
        let slot = out(ptr, "ptr")?;
        *slot = crate::gpu::vmm::alloc(size)? as *mut c_void;
        Ok(())
    })
}

/// Frees memory from ncclMemAlloc (or any device allocation), restoring the caller's device.
#[no_mangle]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    call("ncclMemFree", || crate::gpu::vmm::free(ptr as u64))
}

/// Registers a buffer with the communicator (local, reference-counted: the same buffer gets the
/// same handle). Peers on the same host map it and write large transfers straight into it.
/// NULL or size 0 succeeds with a NULL handle.
#[no_mangle]
pub extern "C" fn ncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
    call_grouped("ncclCommRegister", || {
        let c = comm_arg(comm)?;
        let h = out(handle, "handle")?;
        if buff.is_null() || size == 0 {
            *h = std::ptr::null_mut();
            return Ok(());
        }
        *h = c.register(buff as u64, size as u64)? as usize as *mut c_void;
        Ok(())
    })
}

/// Drops one reference to a registration; NULL is a no-op.
#[no_mangle]
pub extern "C" fn ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    call("ncclCommDeregister", || {
        let c = comm_arg(comm)?;
        if handle.is_null() {
            return Ok(());
        }
        c.deregister(handle as usize as u64)
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
        crate::comm::window::check_flags(winFlags)?;
        let job = crate::comm::window::WindowJob { comm: c, what: crate::comm::window::What::Register { base: buff as u64, size: size as u64, flags: winFlags }, out: win as usize };
        crate::launch::group::submit_window(job)
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
        let w = c.windows.remove(win as usize)?;
        if w.reg != 0 {
            c.deregister(w.reg)?;
        }
        Ok(())
    })
}
