//! Memory allocation and buffer registration.

use std::ffi::{c_int, c_void};

use super::types::{ncclCommMemStat_t, ncclComm_t, ncclResult_t, ncclWindow_t};
use super::{call, call_grouped, comm_arg, out};

/// Allocates `size` bytes of device memory on the caller's current CUDA device and writes its
/// address to `*ptr` (0 for size 0). The memory is shareable with peers (cuMem with a POSIX file
/// descriptor handle where the driver allows and NCCL_CUMEM_ENABLE is not 0, else cuMemAlloc), so
/// registering it lets peers on the host write into it directly, as with NCCL's ncclMemAlloc.
/// Synchronous; allowed while the thread's stream is being captured (the allocation is not
/// part of the graph). Any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`ptr` NULL), ncclUnhandledCudaError (no
/// current device, or the allocation failed: out of memory), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    call("ncclMemAlloc", || {
        let slot = out(ptr, "ptr")?;
        *slot = crate::gpu::vmm::alloc(size)? as *mut c_void;
        Ok(())
    })
}

/// Frees memory from ncclMemAlloc (or, as NCCL does, any other cuMemAlloc'd pointer); NULL is a
/// no-op. Synchronous, like cudaFree: the memory must no longer be used by queued work. The
/// caller's current device is unchanged. Any thread.
///
/// Returns ncclSuccess, or ncclUnhandledCudaError (`ptr` is not a device allocation, or the free
/// failed), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    call("ncclMemFree", || crate::gpu::vmm::free(ptr as u64))
}

/// Registers `size` bytes at `buff` with the communicator and writes a handle to `*handle`. Local
/// (no peer takes part, as in NCCL) and reference-counted: registering the same buffer again
/// gives the same handle. Peers on the same host map it in the background and then write large
/// transfers into it directly (AllGather, AlltoAll, Gather, Scatter and Send/Recv on one host;
/// reductions copy through scratch); operations on it are correct before that too. A buffer
/// peers cannot map (not device memory, or beyond the 512 registrations a communicator shares at
/// once) is registered for this rank alone,
/// and an INFO line (NCCL_DEBUG_SUBSYS=REG) says why. NULL or size 0 succeeds
/// with a NULL handle. Inside a group it runs at once. One thread at a time per communicator.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `handle` NULL;
/// a nonblocking communicator still initialising), ncclUnhandledCudaError (a CUDA call failed),
/// ncclInternalError.
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

/// Drops one reference to a registration from ncclCommRegister; NULL is a no-op. The last
/// reference's registration is withdrawn from the peers after this communicator's queued work
/// finished (a peer may write into the buffer until then), so the call may wait for the streams.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed),
/// ncclInvalidUsage (`handle` was not registered on this communicator or is already released),
/// the communicator's asynchronous error if its work failed, ncclInternalError.
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

/// Registers `size` bytes at `buff` as a window of the communicator and writes its handle to
/// `*win`. Collective: every rank calls it, in the same order, with the same flags. `winFlags`
/// combines NCCL 2.32.3's NCCL_WIN_* flags (NCCL_WIN_DEFAULT is 0; other bits are ignored, as
/// NCCL ignores them):
/// - NCCL_WIN_COLL_SYMMETRIC: every rank gives the same size; collectives on buffers inside the
///   window may use the symmetric kernels;
/// - NCCL_WIN_STRICT_ORDERING: strict ordering of GIN writes over IB verbs; no effect (no GIN);
/// - NCCL_WIN_GIN_ONLY: registered for GIN only, so, as in NCCL 2.32.3, no one-sided use
///   (ncclPutSignal into it is ncclInvalidArgument) and CFT queries on it are ncclInvalidUsage;
/// - NCCL_WIN_CFT_COUNTED: counted CFT endpoints; no effect (no CFT).
///
/// The window descriptor kernels read (`ncclWindow_vidmem`) is NCCL 2.32.3's, whose first 72
/// bytes are NCCL 2.28's, with `winFlags` set to the flags. Inside a group it runs at the
/// outermost ncclGroupEnd. NULL or size 0 succeeds with a NULL window, as in NCCL
/// (src/register/register.cc).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `win` NULL),
/// ncclInvalidUsage (symmetric windows of different
/// sizes or flags across ranks), ncclUnhandledCudaError (mapping failed), ncclRemoteError (a
/// peer was lost during the exchange), ncclInternalError.
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
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed),
/// ncclInvalidUsage (`win` is not a window of this communicator, or was freed already),
/// ncclInternalError.
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

/// NCCL_SUSPEND_MEM (nccl.h).
const SUSPEND_MEM: c_int = 0x01;

/// Suspends the communicator: with `flags` holding NCCL_SUSPEND_MEM, gives its dynamic device
/// memory back to the driver (its channel buffer of scratch, packets and semaphores: nearly all
/// it allocated; ncclCommMemStats says how much), keeping the addresses reserved and the
/// contents in host memory. Other flag bits are ignored and `flags` without NCCL_SUSPEND_MEM does
/// nothing, as in NCCL (src/mem_manager.cc). Collective: every rank calls it; it waits for every
/// kernel and copy on the rank's device to end (cuCtxSynchronize, as NCCL's cudaDeviceSynchronize),
/// then for every rank. Inside a group it runs at the outermost ncclGroupEnd. Until
/// ncclCommResume, enqueuing work on the communicator fails with ncclInvalidUsage, and
/// replaying a CUDA graph that holds its work is undefined (the memory is unmapped, as in NCCL);
/// destroy, abort, split and queries work.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed),
/// ncclInvalidUsage (already suspended; aborted or revoked), the communicator's asynchronous error
/// if its work failed, ncclUnhandledCudaError (a driver call failed), ncclSystemError or
/// ncclRemoteError (a peer was lost in the barriers), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t {
    call_grouped("ncclCommSuspend", || {
        let c = comm_arg(comm)?;
        c.ready()?;
        c.check_failed()?;
        if flags & SUSPEND_MEM == 0 {
            return Ok(());
        }
        let job = crate::comm::window::WindowJob { comm: c, what: crate::comm::window::What::Suspend, out: 0 };
        crate::launch::group::submit_window(job)
    })
}

/// Resumes a communicator ncclCommSuspend suspended: new device memory at the same addresses,
/// with the contents it had, and the peers' mapped again, so work enqueued before (CUDA graphs
/// included) and after runs as if nothing happened. Collective: every rank calls it. Inside a
/// group it runs at the outermost ncclGroupEnd.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed),
/// ncclInvalidUsage (not suspended; aborted or revoked), the communicator's asynchronous error if
/// its work failed, ncclUnhandledCudaError (out of device memory, or a driver call failed),
/// ncclSystemError or ncclRemoteError (a peer was lost in the exchange), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommResume(comm: ncclComm_t) -> ncclResult_t {
    call_grouped("ncclCommResume", || {
        let c = comm_arg(comm)?;
        c.ready()?;
        let job = crate::comm::window::WindowJob { comm: c, what: crate::comm::window::What::Resume, out: 0 };
        crate::launch::group::submit_window(job)
    })
}

/// Writes one memory statistic of the communicator (this rank) to `*value`:
/// ncclStatGpuMemSuspend (0): device bytes ncclCommSuspend gives back; ncclStatGpuMemSuspended
/// (1): 1 while suspended, else 0; ncclStatGpuMemPersist (2): device bytes it keeps while
/// suspended (private buffer, registration table); ncclStatGpuMemTotal (3): the sum of 0 and 2.
/// The byte counts stay the same while suspended, as in NCCL (src/mem_manager.cc). Buffers of
/// the application (registered, windows) are not counted. Local; any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed, or its
/// nonblocking initialisation has not ended; `value` NULL; `stat` not one of the four), the
/// communicator's asynchronous error where its work failed.
#[no_mangle]
pub extern "C" fn ncclCommMemStats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> ncclResult_t {
    call("ncclCommMemStats", || {
        let c = comm_arg(comm)?;
        let v = out(value, "value")?;
        // As NCCL's ncclCommEnsureReady: a communicator whose work failed reports that.
        c.check_failed()?;
        let s = c.mem_stats()?;
        *v = match stat {
            0 => s.suspendable,
            1 => s.suspended as u64,
            2 => s.persistent,
            3 => s.total(),
            _ => return Err(crate::error::Error::invalid_argument(format!("ncclCommMemStats: stat {stat} is not an ncclCommMemStat_t value"))),
        };
        Ok(())
    })
}
