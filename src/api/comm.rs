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
use crate::comm::grow;
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
    let c = Arc::new(Comm::new(rank as usize, nranks as usize, device, config));
    launch_init(slot, c, |c, background| {
        if background {
            group::init_in_background(c, id)
        } else {
            group::submit_init(c, id)
        }
    })
}

/// Registers a new communicator and has `start` initialise it: `start(c, false)` now, or at the
/// outermost ncclGroupEnd inside a group; `start(c, true)` on a background thread when it is
/// nonblocking outside a group (then ncclInProgress is returned). `*slot` gets the handle at once
/// in a group or when nonblocking, else once the init succeeded; it stays NULL on an error.
fn launch_init(slot: &mut ncclComm_t, c: Arc<Comm>, start: impl FnOnce(Arc<Comm>, bool) -> Result<()>) -> Result<()> {
    let blocking = c.config.blocking;
    let handle = register(c.clone());
    if group::depth() > 0 {
        *slot = handle as ncclComm_t;
        return start(c, false);
    }
    if !blocking {
        // Nonblocking: the handle is usable for ncclCommGetAsyncError (InProgress until the
        // background init ends) and for destroy/abort at once.
        *slot = handle as ncclComm_t;
        start(c, true)?;
        return Err(Error::in_progress());
    }
    match start(c, false) {
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

/// Makes the id that grows `comm` with ncclCommGrow, as NCCL 2.30+'s ncclCommGetUniqueId
/// (src/init.cc): starts a rendezvous root in this process (on the interface NCCL_SOCKET_IFNAME
/// picks; it serves one grow and ends at the latest OXCCL_BOOTSTRAP_TIMEOUT, 300 s by default,
/// after this call) and writes the id, which the application hands to the ranks joining. Called by
/// one rank of `comm` (the coordinator) before each grow; not collective. The id is single-use
/// (nccl.h): it stays outstanding until a grow of `comm` uses it (once ncclCommGrow on this rank
/// has passed it to the other existing ranks), and no other can be made until then. Any thread;
/// no stream or GPU work.
///
/// Returns ncclSuccess, or:
/// - ncclInvalidArgument: `comm` NULL, unknown or destroyed, or still initialising (nonblocking);
///   `uniqueId` NULL;
/// - ncclInvalidUsage: an id made earlier has not been used by a grow yet, or ncclCommGrow on
///   this rank has not yet passed it on (the 2.32.3 header's constraints; NCCL 2.30's code does not
///   check them), or NCCL_COMM_ID is set (as NCCL, src/bootstrap.cc);
/// - `comm`'s asynchronous error, if it has one (as NCCL's ncclCommEnsureReady);
/// - ncclSystemError: no usable network interface, or the root could not start.
#[no_mangle]
pub extern "C" fn ncclCommGetUniqueId(comm: ncclComm_t, uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    call("ncclCommGetUniqueId", || {
        let parent = comm_arg(comm)?;
        grow::ensure_ready(&parent)?;
        let id = out(uniqueId, "uniqueId")?;
        let bytes = grow::unique_id(&parent)?;
        for (o, i) in id.internal.iter_mut().zip(bytes.iter()) {
            *o = *i as std::ffi::c_char;
        }
        Ok(())
    })
}

/// Creates `*newcomm`, a communicator of `nRanks` ranks made of every rank of an existing
/// communicator plus new ones, as NCCL 2.30+'s ncclCommGrow (src/init.cc; docs/userguide
/// usage/communicators.rst). Collective over all `nRanks` ranks:
/// - each existing rank passes its communicator as `comm`, `rank` -1 and `uniqueId` NULL, or the
///   id from ncclCommGetUniqueId (the coordinator may pass it; any other id is refused). It keeps
///   its rank in the new communicator and learns the id over `comm`'s bootstrap;
/// - each new rank passes `comm` NULL, the coordinator's id and the rank it takes, from `comm`'s
///   size to `nRanks` - 1, on the current CUDA device (`cudaSetDevice`).
///
/// `config` NULL inherits `comm`'s settings for an existing rank (with NCCL_* overrides applied
/// again, as NCCL's copyCommConfig) and gives the defaults to a new one. `comm` is left as it was
/// and stays usable; it should have no outstanding operations (they may deadlock the grow), and
/// NCCL advises destroying it once the grow completed. The id is used up by the grow, whatever its
/// outcome, once the existing ranks exchanged it. Blocks until the new communicator is ready;
/// inside ncclGroupStart/End it runs at the outermost ncclGroupEnd (one thread may grow the ranks
/// of several GPUs); with a nonblocking config it returns ncclInProgress at once with `*newcomm`
/// set, and ncclCommGetAsyncError on it reports the outcome.
///
/// Returns ncclSuccess, or:
/// - ncclInvalidArgument: `newcomm` NULL; `nRanks` < 1; `comm` unknown or destroyed, still
///   initialising (nonblocking), or not smaller than `nRanks`; an existing rank's `rank` not -1;
///   a new rank's `rank` outside `comm`'s size..`nRanks` - 1 or `uniqueId` NULL, not made by
///   ncclCommGetUniqueId, or corrupt; an existing rank passing an id other than the
///   coordinator's; invalid `config` fields;
/// - ncclInvalidUsage: no rank of `comm`, or several, made an id for this grow; an earlier grow of
///   `comm` on this rank has not yet exchanged its id; the ranks disagree on `nRanks` or two take one rank (as
///   ncclCommInitRank);
/// - `comm`'s asynchronous error, if it has one (as NCCL's ncclCommEnsureReady);
/// - ncclInProgress: nonblocking (see above);
/// - what ncclCommInitRank returns for a failed initialisation (ncclSystemError for a rendezvous
///   that did not complete within OXCCL_BOOTSTRAP_TIMEOUT, ncclRemoteError, ncclUnhandledCudaError,
///   ncclInternalError).
///
/// On an error other than ncclInProgress `*newcomm` is NULL (inside a group, an error of the
/// initialisation itself is reported by ncclGroupEnd).
#[no_mangle]
pub extern "C" fn ncclCommGrow(
    comm: ncclComm_t,
    nRanks: c_int,
    uniqueId: *const ncclUniqueId,
    rank: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    call("ncclCommGrow", || {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        if nRanks < 1 {
            return Err(Error::invalid_argument(format!("ncclCommGrow: total ranks must be positive, got {nRanks}")));
        }
        // SAFETY: uniqueId is NULL or points to the caller's ncclUniqueId (nccl.h).
        let passed = unsafe { uniqueId.as_ref() }.map(id_bytes);
        if comm.is_null() {
            // A new rank. NCCL's checks, in its order; then the id's (joining_id).
            if rank < 0 {
                return Err(Error::invalid_argument(format!("ncclCommGrow: new ranks must pass valid rank >= 0, got {rank}")));
            }
            let Some(id) = passed else {
                return Err(Error::invalid_argument("ncclCommGrow: new ranks must pass non-NULL uniqueId"));
            };
            if rank >= nRanks {
                return Err(Error::invalid_argument(format!("ncclCommGrow: new rank {rank} exceeds total ranks {nRanks}")));
            }
            let boot = grow::joining_id(&id, rank as usize, nRanks as usize)?;
            // SAFETY: config is NULL or points to the caller's ncclConfig_t (of the size it declares).
            let cfg = unsafe { parse_comm_config(config) }?;
            return init_rank(newcomm, nRanks, boot, rank, None, cfg);
        }
        let parent = comm_arg(comm)?;
        if nRanks as usize <= parent.nranks {
            return Err(Error::invalid_argument(format!(
                "ncclCommGrow: total ranks {nRanks} is not more than the current {} ranks",
                parent.nranks
            )));
        }
        grow::ensure_ready(&parent)?;
        if rank != -1 {
            return Err(Error::invalid_argument(format!("ncclCommGrow: existing ranks must pass rank=-1, got {rank}")));
        }
        let cfg = if config.is_null() {
            parent.config.inherited()
        } else {
            // SAFETY: as above.
            unsafe { parse_comm_config(config) }?
        };
        let c = Arc::new(Comm::new(parent.rank, nRanks as usize, parent.device, cfg));
        let job = grow::GrowJob::begin(parent, c.clone(), passed)?;
        launch_init(slot, c, |_, background| {
            if background {
                group::grow_in_background(job)
            } else {
                group::submit_grow(job)
            }
        })
    })
}

/// Writes the communicator's asynchronous state to `*asyncError`: ncclSuccess; ncclInProgress
/// while a nonblocking operation on it runs (its own init or grow, or a split or shrink of it as
/// the parent), or that operation's error once it failed. The state leaves ncclInProgress only
/// once the operation ended and, for a split or shrink, wrote `newcomm`; an error seen meanwhile
/// (a lost peer during an NCCL_SHRINK_ABORT shrink, say) becomes the state then, so whether a
/// shrink made a communicator is told by `newcomm`, not by the parent's state. That can take until
/// the child's bootstrap gives up on a dead peer (OXCCL_BOOTSTRAP_TIMEOUT, 300 s by default). Or
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
    use crate::api::aliases::{pncclCommGetUniqueId, pncclCommGrow};

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

    fn as_id(bytes: [u8; NCCL_UNIQUE_ID_BYTES]) -> ncclUniqueId {
        let mut id = ncclUniqueId { internal: [0; 128] };
        for (o, i) in id.internal.iter_mut().zip(bytes.iter()) {
            *o = *i as std::ffi::c_char;
        }
        id
    }

    /// A junk handle value, to see that an error clears `*newcomm`.
    const JUNK: ncclComm_t = 0x5a5a as ncclComm_t;

    /// NCCL's argument checks for a joining rank (comm NULL), each before anything waits.
    #[test]
    fn grow_refuses_bad_new_rank_arguments() {
        let grow_id = as_id(grow::GrowId::new(bootstrap::child_unique_id().unwrap(), 2).unwrap().encode());
        let plain = as_id(bootstrap::get_unique_id().unwrap());
        let null: ncclComm_t = std::ptr::null_mut();
        assert_eq!(ncclCommGrow(null, 4, &grow_id, 2, std::ptr::null_mut(), null.cast()), ResultCode::InvalidArgument, "newcomm NULL");
        for (n, id, rank, what) in [
            (0, &grow_id as *const ncclUniqueId, 2, "nRanks 0"),
            (-3, &grow_id, 2, "nRanks < 0"),
            (4, &grow_id, -1, "a new rank passing -1"),
            (4, std::ptr::null(), 2, "a new rank without an id"),
            (4, &grow_id, 4, "rank = nRanks"),
            (4, &grow_id, 1, "a rank the parent keeps"),
            (4, &plain, 2, "an ncclGetUniqueId id"),
            (2, &grow_id, 1, "nRanks not above the parent's 2"),
        ] {
            let mut nc = JUNK;
            assert_eq!(ncclCommGrow(null, n, id, rank, &mut nc, null.cast()), ResultCode::InvalidArgument, "{what}");
            assert!(nc.is_null(), "{what}: *newcomm cleared");
        }
        let mut nc = JUNK;
        assert_eq!(pncclCommGrow(null, 4, std::ptr::null(), 2, &mut nc, null.cast()), ResultCode::InvalidArgument, "alias");
        assert!(nc.is_null());
    }

    /// The existing-rank side without a GPU: parents that are unknown, still initialising, too
    /// large for nRanks, or failed; ncclCommGetUniqueId's refusals alike.
    #[test]
    fn grow_and_get_unique_id_check_the_parent_first() {
        let null: ncclComm_t = std::ptr::null_mut();
        let mut id = ncclUniqueId { internal: [0; 128] };
        let bogus = 0x1000 as ncclComm_t;
        let mut nc = JUNK;
        assert_eq!(ncclCommGrow(bogus, 4, std::ptr::null(), -1, &mut nc, null.cast()), ResultCode::InvalidArgument);
        assert!(nc.is_null());
        assert_eq!(ncclCommGetUniqueId(null, &mut id), ResultCode::InvalidArgument);
        assert_eq!(ncclCommGetUniqueId(bogus, &mut id), ResultCode::InvalidArgument);

        // A 2-rank communicator whose (nonblocking) init has not ended: not ready.
        let cfg = CommConfig { blocking: false, ..Default::default() };
        let c = Arc::new(Comm::new(1, 2, 0, cfg));
        let h = register(c.clone()) as ncclComm_t;
        for n in [1, 2] {
            let mut nc = JUNK;
            assert_eq!(ncclCommGrow(h, n, std::ptr::null(), -1, &mut nc, null.cast()), ResultCode::InvalidArgument, "nRanks {n}");
            assert!(nc.is_null());
        }
        assert_eq!(ncclCommGrow(h, 3, std::ptr::null(), -1, &mut nc, null.cast()), ResultCode::InvalidArgument, "not ready");
        assert_eq!(ncclCommGetUniqueId(h, &mut id), ResultCode::InvalidArgument, "not ready");
        assert_eq!(pncclCommGetUniqueId(h, &mut id), ResultCode::InvalidArgument, "alias");
        // Its init failed: its error, as NCCL's ncclCommEnsureReady returns it.
        c.fail_operation(ResultCode::RemoteError);
        assert_eq!(ncclCommGetUniqueId(h, &mut id), ResultCode::RemoteError);
        assert_eq!(ncclCommGrow(h, 3, std::ptr::null(), -1, &mut nc, null.cast()), ResultCode::RemoteError);
        assert!(nc.is_null());
        // nRanks too small is refused before the parent's state is looked at (NCCL's order).
        assert_eq!(ncclCommGrow(h, 2, std::ptr::null(), -1, &mut nc, null.cast()), ResultCode::InvalidArgument);
        // Nothing was made outstanding by the refused calls.
        assert!(c.grow.issue(|| Ok([3; NCCL_UNIQUE_ID_BYTES])).is_ok());
        unregister(h as usize);
    }
}
