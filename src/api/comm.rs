//! Communicator creation, queries and teardown.

use std::ffi::c_int;
use std::sync::Arc;

use super::types::{ncclComm_t, ncclConfig_t, ncclResult_t, ncclUniqueId, NCCL_UNIQUE_ID_BYTES};
use super::{call, comm_arg, out};
use crate::bootstrap;
use crate::comm::{register, unregister, Comm};
use crate::config::{parse_comm_config, CommConfig};
use crate::error::{Error, Result};
use crate::gpu;
use crate::launch::group::{self, Deferred, DerivedJob};
use crate::comm::split::{self, Request};

/// Writes a new unique id to `*uniqueId`, to be passed to every rank of one new communicator
/// (ncclCommInitRank). Starts this process's rendezvous root (a TCP listener on the interface
/// NCCL_SOCKET_IFNAME picks) unless NCCL_COMM_ID names one, as NCCL does. Any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`uniqueId` NULL), ncclSystemError (no usable
/// network interface, or the listener could not start), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    call("ncclGetUniqueId", || {
        let id = out(uniqueId, "uniqueId")?;
        let bytes = bootstrap::get_unique_id()?;
        for (o, i) in id.internal.iter_mut().zip(bytes.iter()) {
            *o = *i as std::ffi::c_char;
        }
        Ok(())
    })
}

fn id_bytes(id: &ncclUniqueId) -> [u8; NCCL_UNIQUE_ID_BYTES] {
    let mut b = [0u8; NCCL_UNIQUE_ID_BYTES];
    for (o, i) in b.iter_mut().zip(id.internal.iter()) {
        *o = *i as u8;
    }
    b
}

/// `*comm = NULL` where `comm` is not NULL: what an init leaves on any error (nccl.h).
fn clear(comm: *mut ncclComm_t) {
    if let Ok(slot) = out(comm, "comm") {
        *slot = std::ptr::null_mut();
    }
}

/// Creates one rank's communicator on the current device. Inside a group, `*comm` is set at once
/// and the initialisation runs at the outermost ncclGroupEnd.
fn init_rank(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    id: [u8; NCCL_UNIQUE_ID_BYTES],
    rank: c_int,
    device: Option<i32>,
    config: CommConfig,
) -> Result<()> {
    let slot = out(newcomm, "comm")?;
    *slot = std::ptr::null_mut(); // on any error below, as documented
    if nranks < 1 {
        return Err(Error::invalid_argument(format!("invalid nranks {nranks}")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Error::invalid_argument(format!("invalid rank {rank}, nranks {nranks}")));
    }
    let device = match device {
        Some(d) => d,
        None => gpu::current_device()?,
    };
    let blocking = config.blocking;
    let c = Arc::new(Comm::new(rank as usize, nranks as usize, device, config));
    let handle = register(c.clone());
    if group::depth() > 0 {
        *slot = handle as ncclComm_t;
        return group::submit_init(c, id);
    }
    if !blocking {
        // Nonblocking: the handle is usable for ncclCommGetAsyncError (InProgress until the
        // background init ends) and for destroy/abort at once.
        *slot = handle as ncclComm_t;
        group::init_in_background(c, id)?;
        return Err(Error::in_progress());
    }
    match group::submit_init(c, id) {
        Ok(()) => {
            *slot = handle as ncclComm_t;
            Ok(())
        }
        Err(e) => {
            unregister(handle);
            *slot = std::ptr::null_mut();
            Err(e)
        }
    }
}

/// Creates rank `rank` of an `nranks`-rank communicator on the current CUDA device (the caller's
/// `cudaSetDevice`) and writes its handle to `*comm`. Collective: every rank calls it with the same
/// `commId` (from ncclGetUniqueId on one rank, passed to the others by the application) and blocks
/// until all `nranks` have joined, as in NCCL (src/init.cc). Several threads may each create their
/// own rank at once. Inside ncclGroupStart/End, `*comm` is written at once and the initialisation
/// runs at the outermost ncclGroupEnd, which returns its error; several inits of one group run
/// concurrently, so one thread can create the ranks of several GPUs.
///
/// Returns ncclSuccess, or:
/// - ncclInvalidArgument: `comm` is NULL, `nranks` < 1, or `rank` is outside `0..nranks`;
/// - ncclInvalidUsage: the ranks' settings disagree where they must be equal (transports, scratch
///   sizes; docs/tuning.md);
/// - ncclSystemError: the CUDA driver library (libcuda.so.1) cannot be loaded, a socket failed,
///   or the rendezvous did not complete within OXCCL_BOOTSTRAP_TIMEOUT (300 s by default);
/// - ncclRemoteError: a peer failed or went away during the rendezvous;
/// - ncclUnhandledCudaError: a CUDA driver call failed (cuInit found no usable GPU, no such
///   device, out of memory);
/// - ncclInProgress: the communicator is nonblocking (`NCCL_COMM_BLOCKING=0`) and initialises in
///   the background; poll ncclCommGetAsyncError until it reports ncclSuccess;
/// - ncclInternalError: a bug in oxccl (logged as a WARN).
///
/// On an error `*comm` is NULL.
#[no_mangle]
pub extern "C" fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t {
    call("ncclCommInitRank", || {
        init_rank(comm, nranks, id_bytes(&commId), rank, None, CommConfig::default())
    })
}

/// As ncclCommInitRank, with NCCL's per-communicator settings: `config` is NULL (defaults) or an
/// `ncclConfig_t` made with NCCL_CONFIG_INITIALIZER (any struct size NCCL has used is accepted, as
/// its `size` field says). `blocking = 0` makes the communicator nonblocking; `maxCTAs` below 64
/// caps every kernel of the communicator at that many thread blocks; `NCCL_*` environment
/// variables override the fields as in NCCL (src/init.cc, envConfigOverride).
///
/// Returns what ncclCommInitRank returns, and ncclInvalidArgument also for an invalid `config`
/// field (a bad `blocking`, CTA bounds, `CTAPolicy` or other value outside NCCL's range).
/// ncclInProgress also where `config->blocking` is 0. On an error `*comm` is NULL.
#[no_mangle]
pub extern "C" fn ncclCommInitRankConfig(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    call("ncclCommInitRankConfig", || {
        clear(comm);
        // SAFETY: config is NULL or points to the caller's ncclConfig_t (of the size it declares).
        let cfg = unsafe { parse_comm_config(config) }?;
        init_rank(comm, nranks, id_bytes(&commId), rank, None, cfg)
    })
}

/// ncclCommInitRankConfig with `nId` unique ids: NCCL spreads the rendezvous over their roots;
/// every rank passes the same list, and oxccl's bootstrap is served by the first id's root alone
/// (the others go unused). Semantics and return codes as ncclCommInitRankConfig, plus
/// ncclInvalidArgument when `nId` < 1 or `commIds` is NULL.
#[no_mangle]
pub extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    nId: c_int,
    commIds: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    call("ncclCommInitRankScalable", || {
        clear(newcomm);
        if nId < 1 {
            return Err(Error::invalid_argument(format!("invalid nId {nId}")));
        }
        let first = *out(commIds, "commIds")?;
        // SAFETY: as for ncclCommInitRankConfig.
        let cfg = unsafe { parse_comm_config(config) }?;
        init_rank(newcomm, nranks, id_bytes(&first), myrank, None, cfg)
    })
}

/// Creates an `ndev`-rank communicator in this process, rank i on device `devlist[i]` (devices
/// 0..ndev-1 when `devlist` is NULL), writing rank i's handle to `comms[i]`. Blocks until all are
/// ready (one group of ncclCommInitRank calls, as in NCCL).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comms` NULL; `ndev` < 1 or more than the visible
/// devices; a device in `devlist` that does not exist), ncclInvalidUsage (a device listed twice),
/// and the initialisation's errors as ncclCommInitRank's.
#[no_mangle]
pub extern "C" fn ncclCommInitAll(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    call("ncclCommInitAll", || {
        if comms.is_null() {
            return Err(Error::invalid_argument("comms argument is NULL"));
        }
        if ndev < 1 {
            return Err(Error::invalid_argument(format!("invalid ndev {ndev}")));
        }
        gpu::ensure()?;
        let count = gpu::context::device_count()?;
        let devs: Vec<i32> = if devlist.is_null() {
            if ndev > count {
                return Err(Error::invalid_argument(format!("ndev {ndev} exceeds the {count} visible devices")));
            }
            (0..ndev).collect()
        } else {
            // SAFETY: the caller passes ndev entries.
            unsafe { std::slice::from_raw_parts(devlist, ndev as usize) }.to_vec()
        };
        for (i, d) in devs.iter().enumerate() {
            if *d < 0 || *d >= count {
                return Err(Error::invalid_argument(format!("invalid device {d} in devlist")));
            }
            if devs[..i].contains(d) {
                return Err(Error::invalid_usage(format!("duplicate device {d} in devlist")));
            }
        }
        let id = bootstrap::get_unique_id()?;
        // SAFETY: the caller passes room for ndev handles.
        let slots = unsafe { std::slice::from_raw_parts_mut(comms, ndev as usize) };
        group::start();
        let mut first_err = None;
        for (i, d) in devs.iter().enumerate() {
            if let Err(e) = init_rank(&mut slots[i], ndev, id, i as c_int, Some(*d), CommConfig::default()) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            group::record_error(&e);
        }
        group::end()
    })
}

/// Waits until the communicator's work launched outside CUDA graphs has finished, so that
/// ncclCommDestroy then frees nothing still in use (NCCL 2.28's ncclCommFinalize, src/init.cc).
/// Needs no peer: a peer that aborted or exited leaves it bounded, since work that needed that
/// peer was failed and stopped. Blocks the calling thread (up to OXCCL_FINALIZE_TIMEOUT, 1800 s by
/// default, with a WARN every minute); inside a group it runs at the outermost ncclGroupEnd. Do
/// not call it for one communicator from two threads at once.
///
/// Returns ncclSuccess (also for a NULL `comm`), or ncclInvalidArgument (an unknown or destroyed
/// handle), ncclSystemError (the timeout passed: a hung peer; ncclCommAbort stops the kernels),
/// ncclRemoteError or ncclUnhandledCudaError (the communicator's work failed), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    call("ncclCommFinalize", || {
        if comm.is_null() {
            return Ok(());
        }
        group::submit(Deferred::Finalize(comm_arg(comm)?))
    })
}

/// Waits for the communicator's work (unless it was finalized), stops its threads and releases
/// the handle, as NCCL's ncclCommDestroy (src/init.cc). Not collective: each rank destroys its own.
/// Its memory goes when the last CUDA graph that captured its work is destroyed, and the part its
/// peers' kernels write (its channel buffer) only once every peer released it or exited; while
/// another communicator of the process has a kernel running, later (a free would wait for it).
/// Blocks the calling thread like ncclCommFinalize; inside a group it runs at the outermost
/// ncclGroupEnd. The handle must not be used afterwards, by any thread.
///
/// Returns ncclSuccess (also for a NULL `comm`), or ncclInvalidArgument (an unknown or already
/// destroyed handle), and, where it waits as ncclCommFinalize does (not finalized first), what
/// ncclCommFinalize returns: ncclSystemError (OXCCL_FINALIZE_TIMEOUT passed), ncclRemoteError or
/// ncclUnhandledCudaError (the work failed); ncclInternalError. The handle is released in every
/// case.
#[no_mangle]
pub extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    call("ncclCommDestroy", || {
        if comm.is_null() {
            return Ok(());
        }
        group::submit(Deferred::Destroy(comm_arg(comm)?, comm as usize))
    })
}

/// Makes the communicator's kernels leave their waits, stops its threads and waits at most 1 s
/// for its kernels to exit, never for a peer; its streams then drain without error. Memory is
/// freed as ncclCommDestroy's is; where a kernel has not left by then (one queued behind another
/// communicator's work on its stream starts only after it), the call still returns ncclSuccess and
/// the memory stays until that kernel has left, which it does at once when it starts. The peers see
/// this rank gone: only their work that needs it fails (ncclRemoteError from their
/// ncclCommGetAsyncError). May be called from another thread while this communicator's calls
/// block (the use NCCL documents, src/init.cc); the handle is invalid afterwards.
///
/// Returns ncclSuccess (also for a NULL `comm`), or ncclInvalidArgument (an unknown or destroyed
/// handle), ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    call("ncclCommAbort", || {
        if comm.is_null() {
            return Ok(());
        }
        group::submit(Deferred::Abort(comm_arg(comm)?, comm as usize))
    })
}

/// Stops the communicator's in-flight kernels (they leave their waits at once) and refuses new
/// work with ncclInvalidUsage; it can still be split, shrunk, destroyed or aborted. Returns at
/// once; the stream drains without an error. Local: peers are not told (they learn of it through
/// work that needed this rank). NULL is a no-op. Any thread, also while another thread is inside
/// a call on the communicator.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` unknown or destroyed; `revokeFlags` not
/// NCCL_REVOKE_DEFAULT (0)).
#[no_mangle]
pub extern "C" fn ncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t {
    call("ncclCommRevoke", || {
        if comm.is_null() {
            return Ok(());
        }
        let c = comm_arg(comm)?;
        if revokeFlags != 0 {
            return Err(Error::invalid_argument(format!("revokeFlags must be NCCL_REVOKE_DEFAULT, got {revokeFlags}")));
        }
        c.revoke();
        Ok(())
    })
}

/// Registers a split/shrink child and writes its handle (NULL for none or on failure) into the
/// caller's `newcomm`, given as an address so the job can run at ncclGroupEnd on another thread.
fn publish_child(newcomm: usize, child: Result<Option<Comm>>) -> Result<()> {
    let (handle, r) = match child {
        Ok(Some(c)) => (register(Arc::new(c)) as ncclComm_t, Ok(())),
        Ok(None) => (std::ptr::null_mut(), Ok(())),
        Err(e) => (std::ptr::null_mut(), Err(e)),
    };
    // SAFETY: `newcomm` was checked non-NULL at the call, and the caller keeps it valid until the
    // call, or the group it was made in, completes (NCCL's contract too).
    unsafe { *(newcomm as *mut ncclComm_t) = handle };
    r
}

/// Runs (or, in a group, defers) a split or shrink whose arguments were validated; a NULL config
/// inherits the parent's.
fn submit_child(parent: Arc<Comm>, req: Request, config: *mut ncclConfig_t, newcomm: *mut ncclComm_t) -> Result<()> {
    let config = if config.is_null() {
        None
    } else {
        // SAFETY: config points to the caller's ncclConfig_t (of the size it declares).
        Some(unsafe { parse_comm_config(config) }?)
    };
    let addr = newcomm as usize;
    group::submit_derived(DerivedJob {
        parent,
        req,
        config,
        publish: Box::new(move |child| publish_child(addr, child)),
        background: false,
    })
}

/// Creates `*newcomm` from the ranks of `comm` that pass the same `color`, ordered by `key` (ties by
/// their rank in `comm`), as NCCL's ncclCommSplit (src/init.cc). Collective over every rank of
/// `comm`, each of which must call it; a rank passing NCCL_SPLIT_NOCOLOR (-1) joins no child and
/// gets NULL. `config` NULL inherits the parent's settings; `splitShare` is ignored (children never
/// share the parent's buffers). Blocks until the child is ready, also for a nonblocking parent
/// (which then reports ncclInProgress until its child is written); inside a group it runs at the
/// outermost ncclGroupEnd.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` unknown, `newcomm` NULL, a negative color
/// other than NCCL_SPLIT_NOCOLOR, invalid `config` fields), ncclInvalidUsage (the ranks' settings
/// disagree), ncclSystemError / ncclRemoteError (the rendezvous failed, as for
/// ncclCommInitRank), ncclUnhandledCudaError, ncclInternalError. On an error `*newcomm` is NULL.
#[no_mangle]
pub extern "C" fn ncclCommSplit(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    call("ncclCommSplit", || {
        let parent = comm_arg(comm)?;
        *out(newcomm, "newcomm")? = std::ptr::null_mut();
        split::check_color(color)?;
        submit_child(parent, Request::Split { color, key }, config, newcomm)
    })
}

/// Creates `*newcomm` from the ranks of `comm` minus the `excludeRanksCount` ranks listed in
/// `excludeRanksList` (sorted in place, as NCCL does; duplicates count once); the others keep
/// their order, renumbered densely from 0. Collective over the remaining ranks only: an excluded
/// rank takes no part. `shrinkFlags` is NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1: revoke the
/// parent first, so kernels stuck waiting for an excluded rank are stopped). `config` NULL
/// inherits the parent's settings; `shrinkShare` is ignored. As NCCL 2.28's ncclCommShrink
/// (src/init.cc). Blocking and group behaviour as ncclCommSplit.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` unknown, `newcomm` NULL, a negative count,
/// a NULL list with a positive count, a rank outside the parent, other `shrinkFlags`, invalid
/// `config` fields), ncclSystemError / ncclRemoteError (the rendezvous failed),
/// ncclUnhandledCudaError, ncclInternalError. On an error `*newcomm` is NULL.
#[no_mangle]
pub extern "C" fn ncclCommShrink(
    comm: ncclComm_t,
    excludeRanksList: *mut c_int,
    excludeRanksCount: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
    shrinkFlags: c_int,
) -> ncclResult_t {
    call("ncclCommShrink", || {
        let parent = comm_arg(comm)?;
        *out(newcomm, "newcomm")? = std::ptr::null_mut();
        if excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList.is_null()) {
            return Err(Error::invalid_argument(format!(
                "invalid exclude list ({excludeRanksCount} ranks at {excludeRanksList:p})"
            )));
        }
        let abort_parent = match shrinkFlags {
            0 => false,
            1 => true,
            f => return Err(Error::invalid_argument(format!("invalid shrinkFlags {f}"))),
        };
        let list: &mut [c_int] = if excludeRanksCount == 0 {
            &mut []
        } else {
            // SAFETY: the caller passes excludeRanksCount writable ints (NCCL sorts them in place too).
            unsafe { std::slice::from_raw_parts_mut(excludeRanksList, excludeRanksCount as usize) }
        };
        list.sort_unstable();
        let mut excluded = Vec::with_capacity(list.len());
        for &r in list.iter() {
            if r < 0 || r as usize >= parent.nranks {
                return Err(Error::invalid_argument(format!("excluded rank {r} out of range (nranks {})", parent.nranks)));
            }
            if excluded.last() != Some(&(r as usize)) {
                excluded.push(r as usize);
            }
        }
        submit_child(parent, Request::Shrink { excluded, abort_parent }, config, newcomm)
    })
}

/// Writes the communicator's asynchronous state to `*asyncError`: ncclSuccess; ncclInProgress
/// while a nonblocking init, split or shrink is still running, or its error once it failed; or
/// the error that stopped the communicator: ncclRemoteError for a lost peer, and on
/// communicators with a proxy thread or copy-engine worker (hosts, OXCCL_CE_DIRECT_ASYNC) that
/// thread's error, such as ncclSystemError for a failed socket. Thread-safe:
/// watchdogs poll it while other threads enqueue. A peer that aborted, exited or stopped
/// answering makes it ncclRemoteError only if work that needs that peer stays unfinished for a
/// second (launched and not finished, or captured into a CUDA graph still alive); otherwise it
/// stays ncclSuccess, and an operation enqueued later that needs the peer fails so within about a
/// second.
///
/// Returns ncclSuccess, or ncclInvalidArgument when `comm` or `asyncError` is NULL or `comm` is
/// not a live communicator (nothing is written then).
#[no_mangle]
pub extern "C" fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
    call("ncclCommGetAsyncError", || {
        let c = comm_arg(comm)?;
        let slot = out(asyncError, "asyncError")?;
        // Written as a raw int: the caller's variable may hold anything before.
        // SAFETY: slot points to an ncclResult_t-sized, writable location.
        unsafe { std::ptr::write((slot as *mut ncclResult_t).cast::<c_int>(), c.async_state() as c_int) };
        Ok(())
    })
}

/// Writes the communicator's number of ranks to `*count`. Thread-safe; touches no stream or GPU.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `count` NULL),
/// ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    call("ncclCommCount", || {
        let c = comm_arg(comm)?;
        *out(count, "count")? = c.nranks as c_int;
        Ok(())
    })
}

/// Writes the CUDA device ordinal the communicator's rank runs on (the current device when it was
/// created, or its entry of ncclCommInitAll's `devlist`) to `*device`. Thread-safe; touches no
/// stream or GPU.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `device` NULL),
/// ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    call("ncclCommCuDevice", || {
        let c = comm_arg(comm)?;
        *out(device, "device")? = c.device;
        Ok(())
    })
}

/// Writes the calling rank's index in the communicator (0 to ncclCommCount - 1) to `*rank`.
/// Thread-safe; touches no stream or GPU.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `rank` NULL),
/// ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    call("ncclCommUserRank", || {
        let c = comm_arg(comm)?;
        *out(rank, "rank")? = c.rank as c_int;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn null_and_invalid_arguments() {
        let mut n = 0;
        assert_eq!(ncclCommCount(std::ptr::null_mut(), &mut n), ResultCode::InvalidArgument);
        assert_eq!(ncclCommCount(0x1000 as ncclComm_t, &mut n), ResultCode::InvalidArgument);
        assert_eq!(ncclCommDestroy(std::ptr::null_mut()), ResultCode::Success);
        assert_eq!(ncclCommAbort(std::ptr::null_mut()), ResultCode::Success);
        assert_eq!(ncclCommFinalize(std::ptr::null_mut()), ResultCode::Success);
        assert_eq!(ncclGetUniqueId(std::ptr::null_mut()), ResultCode::InvalidArgument);
        let id = ncclUniqueId { internal: [0; 128] };
        assert_eq!(ncclCommInitRank(std::ptr::null_mut(), 2, id, 0), ResultCode::InvalidArgument);
        assert_eq!(ncclCommInitAll(std::ptr::null_mut(), 1, std::ptr::null()), ResultCode::InvalidArgument);
    }
}
