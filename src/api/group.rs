//! Group calls.

use super::types::{ncclResult_t, ncclSimInfo_t, NCCL_SIM_INFO_MAGIC};
use super::{call, out};
use crate::error::Error;
use crate::launch::group;

/// Opens a group on the calling thread (groups are thread-local and nest; only the outermost
/// ncclGroupEnd acts). Collectives, sends/receives, inits, splits, shrinks, window registrations,
/// finalize and destroy called on this thread until the matching ncclGroupEnd are queued and
/// then issued together, as in NCCL (src/group.cc). An argument error inside the group is
/// returned by that call and again by the group's end, which then drops the group.
///
/// Returns ncclSuccess, or ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclGroupStart() -> ncclResult_t {
    call("ncclGroupStart", || {
        crate::diag::hostprof::begin();
        group::start();
        Ok(())
    })
}

/// Closes the calling thread's innermost group; the outermost one issues what the group queued:
/// first inits (concurrently), then window registrations, then every operation in call order,
/// each communicator's operations as one launch per stream where they fit. A communicator's
/// operations in one group may use several streams: the group starts after each stream's earlier
/// work and each stream's later work waits for the whole group (graph edges when captured). The
/// launches are asynchronous: ncclGroupEnd returns once they are enqueued, not finished.
///
/// Returns ncclSuccess, or:
/// - ncclInvalidUsage: no group is open on this thread, a communicator's streams mix captured and
///   uncaptured (as in NCCL), or `OXCCL_CHECK=1` found the ranks' calls differ;
/// - the first error of a queued call (an argument error recorded when it was made, or an init,
///   split or launch error: ncclInvalidArgument, ncclSystemError, ncclRemoteError,
///   ncclUnhandledCudaError), in which case the group is dropped;
/// - ncclInProgress: the group held only nonblocking inits, which complete in the background.
///   Operations on nonblocking communicators are enqueued before ncclGroupEnd returns, so it
///   returns ncclSuccess for them (NCCL may return ncclInProgress there; either is allowed, and
///   ncclCommGetAsyncError then reports ncclSuccess);
/// - ncclInternalError.
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> ncclResult_t {
    call("ncclGroupEnd", || {
        let r = group::end();
        crate::diag::hostprof::end(group::depth() > 0);
        r
    })
}

/// Like ncclGroupEnd, but launches no operation: closes the group (its communicator inits still
/// run), drops its operations, and stores in `simInfo->estimatedTime` the predicted time of its
/// collectives (microseconds, as NCCL's estimatedTime, from oxccl's cost model; 0 when an inner
/// group level closes).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`simInfo` NULL or not initialised with
/// NCCL_SIM_INFO_INITIALIZER), ncclInvalidUsage (no group is open), and the argument errors
/// the group's calls recorded.
#[no_mangle]
pub extern "C" fn ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
    call("ncclGroupSimulateEnd", || {
        let info = out(simInfo, "simInfo")?;
        if info.magic != NCCL_SIM_INFO_MAGIC {
            return Err(Error::invalid_argument("ncclSimInfo_t not initialized via NCCL_SIM_INFO_INITIALIZER"));
        }
        let us = group::simulate_end()?;
        if info.size >= std::mem::size_of::<ncclSimInfo_t>() {
            info.estimatedTime = us as f32;
        }
        Ok(())
    })
}
