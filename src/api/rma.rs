//! One-sided operations of NCCL 2.29+ on registered windows: ncclPutSignal, ncclSignal and
//! ncclWaitSignal. This layer checks the arguments (NCCL's order and codes: src/collectives.cc,
//! src/enqueue.cc's rmaTaskAppend and src/misc/argcheck.cc in NCCL 2.30.7) and submits the
//! operation; comm::rma issues it. Like any operation they are deferred to ncclGroupEnd inside a
//! group, where they run in call order on their streams before the group's collectives and
//! point-to-point operations, as NCCL schedules them (launch::group's `launch_ops`).

use std::ffi::{c_int, c_uint, c_void};

use super::coll::{dtype, pointer_check};
use super::types::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclResult_t, ncclWaitSignalDesc_t, ncclWindow_t};
use super::{call_grouped, comm_arg};
use crate::comm::rma::{put_target, Limits, RmaKind, RmaOp};
use crate::error::{Error, Result};
use crate::gpu::cu;
use crate::launch::group::{self, Deferred};

#[allow(clippy::too_many_arguments)]
fn put_signal(
    localbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    peer_win: ncclWindow_t,
    offset: usize,
    sig: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let limits = Limits::of(&c.config, c.nranks);
    // NCCL's ArgsCheck looks at the peer (its `root`) before the datatype.
    limits.peer(peer)?;
    let dt = dtype(datatype)?;
    let (peer, ctx, sig) = limits.signal_args(peer, sig, ctx, flags)?;
    if peer_win.is_null() {
        return Err(Error::invalid_argument("peerWin is NULL"));
    }
    let h = peer_win as usize;
    let bytes = (count as u64).checked_mul(dt.size() as u64).ok_or_else(|| Error::invalid_argument(format!("count {count} is too large")))?;
    let view = c.windows.view(h);
    let dst = put_target(view, c.windows.peer_size(h, peer).unwrap_or(0), peer, offset as u64, bytes)?;
    if localbuff.is_null() {
        return Err(Error::invalid_argument("localbuff is NULL"));
    }
    if count > 0 {
        pointer_check(&c, localbuff, "localbuff")?;
    }
    let kind = RmaKind::Put { src: localbuff as u64, dst, bytes, peer, ctx, sig };
    group::submit(Deferred::Rma(c, RmaOp { kind, stream: stream as cu::CUstream }))
}

/// Writes `count` elements of `datatype` from `localbuff` into rank `peer`'s copy of window
/// `peerWin`, starting `peerWinOffset` bytes into it, then raises signal `sigIdx` of context
/// `ctx` at `peer` (a one-sided put: `peer` posts nothing). `peerWin` is this rank's handle of a
/// window every rank registered with ncclCommWindowRegister; `peer` may be this rank. Ordered on
/// `stream`; asynchronous to the host. Puts and signals to one peer and context arrive in call
/// order: once `peer`'s ncclWaitSignal has seen this signal, the data is visible to the work
/// after the wait on its stream. Under CUDA graph capture every replay puts and signals again.
/// Inside a group it is deferred to ncclGroupEnd. NCCL 2.30.7 also requires `localbuff` to lie in a
/// symmetric window; oxccl copies from any device memory.
///
/// Needs the window in symmetric memory (ranks on one host with peer access, memory from
/// ncclMemAlloc); NCCL's proxy path for other peers is not implemented.
///
/// Returns ncclSuccess once enqueued, or (NCCL's codes, checked in NCCL's order):
/// ncclInvalidArgument for a NULL or destroyed `comm`, `peer` outside [0, nranks), a bad
/// `datatype`, `ctx` outside [0, numRmaCtx), `sigIdx` outside [0, numRmaSig), `flags` not 0,
/// `peerWin` NULL or not registered with `comm`, `peerWinOffset` + the put's bytes past the end of
/// the peer's window, or `localbuff` NULL; ncclInvalidUsage where numRmaCtx is 0 or the window
/// (or the communicator) has no symmetric memory; a launch's error otherwise.
#[no_mangle]
pub extern "C" fn ncclPutSignal(
    localbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    peerWin: ncclWindow_t,
    peerWinOffset: usize,
    sigIdx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call_grouped("ncclPutSignal", || put_signal(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream))
}

/// Raises signal `sigIdx` of context `ctx` at rank `peer` without data (`peer` may be this rank),
/// ordered on `stream` after the work before it there, puts included. Stream, group and graph
/// semantics as ncclPutSignal's.
///
/// Returns ncclSuccess once enqueued, or ncclInvalidArgument for a NULL or destroyed `comm`,
/// `peer` outside [0, nranks), `ctx` outside [0, numRmaCtx), `sigIdx` outside [0, numRmaSig) or
/// `flags` not 0; ncclInvalidUsage where numRmaCtx is 0, or (when it runs) where the communicator
/// has no window in symmetric memory.
#[no_mangle]
pub extern "C" fn ncclSignal(peer: c_int, sigIdx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t {
    call_grouped("ncclSignal", || {
        let c = comm_arg(comm)?;
        let (peer, ctx, sig) = Limits::of(&c.config, c.nranks).signal_args(peer, sigIdx, ctx, flags)?;
        group::submit(Deferred::Rma(c, RmaOp { kind: RmaKind::Signal { peer, ctx, sig }, stream: stream as cu::CUstream }))
    })
}

/// Makes `stream` wait until, for each of the `nDesc` descriptors, `opCnt` more signals from its
/// `peer` on its (`ctx`, `sigIdx`) have arrived than earlier waits on that signal took (a
/// descriptor named twice waits for both counts); the data of the puts behind those signals is
/// then visible to the work after the wait on `stream`. The host does not wait. The
/// descriptors are read before the call returns. Under CUDA graph capture every replay waits
/// again (the counts live on the device); inside a group it is deferred to ncclGroupEnd. An
/// abort of the communicator releases the wait.
///
/// Returns ncclSuccess once enqueued, or ncclInvalidArgument for a NULL or destroyed `comm`,
/// `nDesc` not above 0 or `signalDescs` NULL (as NCCL 2.30.7), or a descriptor whose `opCnt` is
/// not above 0, `peer` outside [0, nranks), `ctx` outside [0, numRmaCtx) or `sigIdx` outside
/// [0, numRmaSig); ncclInvalidUsage where numRmaCtx is 0, or (when it runs) where the
/// communicator has no window in symmetric memory.
#[no_mangle]
pub extern "C" fn ncclWaitSignal(nDesc: c_int, signalDescs: *mut ncclWaitSignalDesc_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t {
    call_grouped("ncclWaitSignal", || {
        let c = comm_arg(comm)?;
        let raw: Vec<(c_int, c_int, c_int, c_int)> = if nDesc <= 0 || signalDescs.is_null() {
            Vec::new()
        } else {
            // SAFETY: a non-NULL array of nDesc descriptors from the caller (nccl.h's contract),
            // copied here before the call returns.
            let d = unsafe { std::slice::from_raw_parts(signalDescs as *const ncclWaitSignalDesc_t, nDesc as usize) };
            d.iter().map(|d| (d.opCnt, d.peer, d.sigIdx, d.ctx)).collect()
        };
        let descs = Limits::of(&c.config, c.nranks).wait_descs(&raw)?;
        group::submit(Deferred::Rma(c, RmaOp { kind: RmaKind::Wait(descs), stream: stream as cu::CUstream }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::aliases::{pncclPutSignal, pncclSignal, pncclWaitSignal};
    use crate::comm::window::Window;
    use crate::comm::{register, unregister, Comm};
    use crate::config::CommConfig;
    use crate::error::ResultCode;
    use std::sync::Arc;

    const S: cudaStream_t = std::ptr::null_mut();

    /// Every argument error of the three calls through the C entry points, on a 2-rank
    /// communicator (never initialised: no check needs it) with a window that looks symmetric.
    #[test]
    fn argument_errors_get_nccls_codes() {
        let null: ncclComm_t = std::ptr::null_mut();
        let d = ncclWaitSignalDesc_t { opCnt: 1, peer: 0, sigIdx: 0, ctx: 0 };
        let mut one = [d];
        assert_eq!(ncclSignal(0, 0, 0, 0, null, S), ResultCode::InvalidArgument, "NULL comm");
        assert_eq!(ncclWaitSignal(1, one.as_mut_ptr(), null, S), ResultCode::InvalidArgument, "NULL comm");
        assert_eq!(ncclPutSignal(0x1000 as *const c_void, 1, 0, 0, 0x10 as ncclWindow_t, 0, 0, 0, 0, null, S), ResultCode::InvalidArgument, "NULL comm");

        let cfg = CommConfig { num_rma_ctx: 2, num_rma_sig: 3, ..Default::default() };
        let c = Arc::new(Comm::new(0, 2, 0, cfg));
        let comm = register(c.clone()) as ncclComm_t;
        let win = c.windows.insert_symmetric(Window { base: 0x7000_0000, size: 4096, flags: 1, reg: 0 }, (1 << 40, 1 << 32), vec![4096, 4096]) as ncclWindow_t;
        let plain = c.windows.insert(Window { base: 0x9000_0000, size: 4096, flags: 0, reg: 0 }) as ncclWindow_t;
        let buf = 0x5000_0000 as *const c_void;
        let put = |count: usize, dt: c_int, peer: c_int, w: ncclWindow_t, off: usize, sig: c_int, ctx: c_int, flags: c_uint, src: *const c_void| {
            ncclPutSignal(src, count, dt, peer, w, off, sig, ctx, flags, comm, S)
        };
        use ResultCode::{InvalidArgument as Arg, InvalidUsage as Usage};
        for (code, r, what) in [
            (Arg, put(4, 7, 2, win, 0, 0, 0, 0, buf), "peer = nranks"),
            (Arg, put(4, 7, -1, win, 0, 0, 0, 0, buf), "peer < 0"),
            (Arg, put(4, 12, 1, win, 0, 0, 0, 0, buf), "datatype"),
            (Arg, put(4, 7, 1, win, 0, 0, 2, 0, buf), "ctx = numRmaCtx"),
            (Arg, put(4, 7, 1, win, 0, 3, 0, 0, buf), "sigIdx = numRmaSig"),
            (Arg, put(4, 7, 1, win, 0, -1, 0, 0, buf), "sigIdx < 0"),
            (Arg, put(4, 7, 1, win, 0, 0, 0, 1, buf), "flags"),
            (Arg, put(4, 7, 1, std::ptr::null_mut(), 0, 0, 0, 0, buf), "peerWin NULL"),
            (Arg, put(4, 7, 1, 0x1234 as ncclWindow_t, 0, 0, 0, 0, buf), "peerWin not registered"),
            (Usage, put(4, 7, 1, plain, 0, 0, 0, 0, buf), "no symmetric memory"),
            (Arg, put(1025, 7, 1, win, 0, 0, 0, 0, buf), "past the window's end"),
            (Arg, put(1, 7, 1, win, 4093, 0, 0, 0, buf), "offset + bytes past the end"),
            (Arg, put(usize::MAX, 7, 1, win, 0, 0, 0, 0, buf), "count * size overflows"),
            (Arg, put(4, 7, 1, win, 0, 0, 0, 0, std::ptr::null()), "localbuff NULL"),
            (Arg, ncclSignal(2, 0, 0, 0, comm, S), "signal: peer"),
            (Arg, ncclSignal(0, 3, 0, 0, comm, S), "signal: sigIdx"),
            (Arg, ncclSignal(0, 0, -1, 0, comm, S), "signal: ctx"),
            (Arg, ncclSignal(0, 0, 0, 2, comm, S), "signal: flags"),
            (Arg, ncclWaitSignal(0, one.as_mut_ptr(), comm, S), "nDesc 0"),
            (Arg, ncclWaitSignal(-1, one.as_mut_ptr(), comm, S), "nDesc < 0"),
            (Arg, ncclWaitSignal(1, std::ptr::null_mut(), comm, S), "descs NULL"),
            (Arg, ncclWaitSignal(1, [ncclWaitSignalDesc_t { opCnt: 0, ..d }].as_mut_ptr(), comm, S), "opCnt 0"),
            (Arg, ncclWaitSignal(1, [ncclWaitSignalDesc_t { opCnt: -2, ..d }].as_mut_ptr(), comm, S), "opCnt < 0"),
            (Arg, ncclWaitSignal(1, [ncclWaitSignalDesc_t { peer: 2, ..d }].as_mut_ptr(), comm, S), "desc peer"),
            (Arg, ncclWaitSignal(2, [d, ncclWaitSignalDesc_t { sigIdx: 3, ..d }].as_mut_ptr(), comm, S), "desc sigIdx"),
            (Arg, ncclWaitSignal(1, [ncclWaitSignalDesc_t { ctx: 2, ..d }].as_mut_ptr(), comm, S), "desc ctx"),
            (Arg, pncclPutSignal(buf, 4, 7, 5, win, 0, 0, 0, 0, comm, S), "alias: peer"),
            (Arg, pncclSignal(0, 0, 0, 9, comm, S), "alias: flags"),
            (Arg, pncclWaitSignal(0, one.as_mut_ptr(), comm, S), "alias: nDesc"),
        ] {
            assert_eq!(r, code, "{what}");
        }

        // Valid calls are accepted: inside a group they are deferred, and the group's end then
        // fails as the launch would on a communicator that never initialised.
        group::start();
        assert_eq!(put(1024, 7, 1, win, 0, 2, 1, 0, buf), ResultCode::Success, "the whole window");
        assert_eq!(put(0, 7, 0, win, 4096, 0, 0, 0, buf), ResultCode::Success, "a signal alone, to itself");
        assert_eq!(ncclSignal(1, 2, 1, 0, comm, S), ResultCode::Success);
        assert_eq!(ncclWaitSignal(2, [d, ncclWaitSignalDesc_t { opCnt: 3, peer: 1, sigIdx: 2, ctx: 1 }].as_mut_ptr(), comm, S), ResultCode::Success);
        assert!(group::end().is_err(), "the communicator is not ready");

        // numRmaCtx 0: one-sided operations are invalid usage (arguments before it still first).
        let off = Arc::new(Comm::new(0, 2, 0, CommConfig { num_rma_ctx: 0, ..Default::default() }));
        let offh = register(off.clone()) as ncclComm_t;
        let w2 = off.windows.insert_symmetric(Window { base: 0x7000_0000, size: 4096, flags: 1, reg: 0 }, (1 << 40, 1 << 32), vec![]) as ncclWindow_t;
        assert_eq!(ncclSignal(0, 0, 0, 0, offh, S), Usage);
        assert_eq!(ncclSignal(3, 0, 0, 0, offh, S), Arg, "the peer is checked first");
        assert_eq!(ncclWaitSignal(1, one.as_mut_ptr(), offh, S), Usage);
        assert_eq!(ncclPutSignal(buf, 4, 7, 1, w2, 0, 0, 0, 0, offh, S), Usage);
        unregister(offh as usize);
        unregister(comm as usize);
    }
}
