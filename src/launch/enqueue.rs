//! Turning validated operations into GPU work on the user's stream: algorithm choice, kernel
//! arguments, launch, and the ordering of a communicator's launches across streams. Nothing here
//! is per-call host state that a CUDA graph replay would miss: flags and semaphores live on the
//! device.

use std::sync::Arc;

use crate::algo::ce_direct::Traffic;
use crate::algo::envlists::Func;
use crate::algo::{
    offer_candidates, plan_exchange, select_allreduce, select_reduce, select_reducescatter, ExchangeSpec, LocalCopy, Transfer,
};
use crate::comm::task::{CollTask, P2pOp};
use crate::comm::view::View;
use crate::comm::{Comm, LaunchState, Ready, RingLast, RingLaunch};
use crate::device_abi::{
    CollArgs, GroupArgs, GroupP2p, OX_GROUP_ALLGATHER, OX_GROUP_ALLREDUCE, OX_GROUP_ALLTOALL, OX_GROUP_BROADCAST, OX_GROUP_GATHER, OX_GROUP_REDUCE, OX_GROUP_REDUCESCATTER, OX_GROUP_SCATTER,
};
use crate::error::{Error, Result};
use crate::gpu::module::{launch_pdl, launch_with_event, Kernel};
use crate::algo::pdl::{CaptureTail, RingAnchor};
use crate::device_abi::{
    OX_ONESHOT_CHAIN, OX_ONESHOT_EARLY, OX_ONESHOT_ENTRY, OX_ONESHOT_POS_SHIFT, OX_ONESHOT_PRESENT, OX_ONESHOT_RING,
};
use crate::gpu::stream::capture_tail;
use crate::gpu::{check, cu, CtxGuard};
use crate::comm::liveness::Needs;
use crate::log::Subsys;
use crate::transport::ce_direct::Fallback;
use crate::algo::group::{packets, GroupedKind, GroupedOp, GroupedP2p};
use crate::types::{Coll, DataType, RedOp};

/// Runs `f` with the communicator's device current and its launch lock held, on `stream`, after
/// ordering the stream behind the communicator's previous launch when the stream changed.
/// `needs`: the peers the launch needs (a lost one fails it, src/comm/liveness.rs). `bytes` is the
/// launch's largest message per rank (algo::counting); `what` describes the operation for
/// OXCCL_DEBUG_DUMP (called only when the dump is on).
fn with_launch<F: FnOnce(&Ready, &mut LaunchState) -> Result<()>>(
    comm: &Arc<Comm>,
    needs: Needs,
    stream: cu::CUstream,
    bytes: u64,
    what: impl FnOnce() -> String,
    f: F,
) -> Result<()> {
    crate::diag::hostprof::mark(crate::diag::hostprof::Stage::Submit);
    let r = comm.ready()?;
    let _ctx = CtxGuard::new(r.dev)?;
    let mut ls = r.launch.lock();
    // Under the lock: an abort's wait for the kernels (which takes it) then covers this launch,
    // or this launch sees the abort.
    comm.check_usable()?;
    // Kernels of one communicator share its scratch and counters: they must not overlap. A new
    // stream waits for the mark of the previous launch (src/comm/completion.rs) when a wait can join
    // them (neither captured, or both in the same capture, where the wait becomes a graph edge);
    // across captures no dependency is allowed and the application orders. The previous stream
    // itself is not touched: the application may have destroyed it.
    // One query serves the switch, the mark and the ring AllReduce's PDL rule (tail_now).
    let mut tail = capture_tail(stream)?;
    let capture = tail.map(|t| t.id);
    if ls.last_stream.is_some_and(|s| s != stream) {
        if capture == ls.done.mark().capture() {
            ls.done.wait_on(stream)?;
            if capture.is_some() {
                tail = capture_tail(stream)?; // the wait added an edge
            }
        }
        // Nothing of this communicator's can still hold SMs ahead of the new stream's first
        // launch that algo::pdl would have to count (the wait orders it, or, across
        // captures, the application orders the two).
        ls.last_grid = 0;
    }
    crate::diag::hostprof::mark(crate::diag::hostprof::Stage::Prepare);
    ls.ring_prev = ls.ring_anchor.take(); // only the launch right after it may use it
    ls.tail_now = tail;
    // A replay repeats a captured kernel uncounted: only uncaptured launches count theirs, and of
    // those the ones where the host, not the kernel, is the bottleneck.
    ls.counting = capture.is_none() && ls.done.can_count() && crate::algo::counting::counts(bytes, r.topo.nranks, r.process_ranks, &r.tuning);
    ls.counted_last = false;
    // Which peers it needs, should one of them be lost (src/comm/liveness.rs).
    let ord = comm.watch.begin(needs, capture.is_none());
    let res = f(r, &mut ls);
    // The mark follows whatever this launch issued, even when it failed part way: the counted
    // kernel that came last, else an event.
    let rec = if ls.counted_last {
        ls.done.set_counted();
        Ok(())
    } else {
        ls.done.set_event(stream, capture)
    };
    if rec.is_ok() {
        ls.last_stream = Some(stream);
    }
    // In flight until its probe says otherwise; captured work is held by its graph instead.
    if capture.is_none() {
        let probe = ls.done.probe();
        ls.recent.push(ord, probe);
    }
    comm.watch.end();
    let held = if capture.is_some() { comm.retain_for_graph(&mut ls, stream, needs) } else { Ok(()) };
    if let Err(e) = res.and(rec).and(held) {
        ls.last_grid = u32::MAX; // whatever ran last is unknown: no PDL behind it
        return Err(e);
    }
    if crate::diag::dump_after().is_some() {
        ls.progress.note(what());
    }
    Ok(())
}

/// Runs one one-sided operation (ncclPutSignal, ncclSignal, ncclWaitSignal) on its stream, in
/// the communicator's launch order like any launch (comm::rma says what it issues). Fails with
/// ncclInvalidUsage where the communicator has no signal area (no window in symmetric memory).
pub fn launch_rma(comm: &Arc<Comm>, op: &crate::comm::rma::RmaOp) -> Result<()> {
    let peers = op.peers();
    with_launch(comm, Needs::Peers(&peers), op.stream, op.bytes(), || op.describe(), |r, ls| {
        let area = comm
            .windows
            .rma_area()
            .ok_or_else(|| Error::invalid_usage(format!("the communicator has no signal area: {}", crate::comm::rma::NEEDS_SYMMETRIC)))?;
        // Copies and one-block kernels, none counted: the event marks the launch.
        ls.counted_last = false;
        let waited = crate::comm::rma::issue(r, &area, comm.rank, op);
        // Nothing may start early behind a wait (it may wait for a peer's kernels, which need
        // SMs); behind a signal's one block, a kernel may.
        ls.last_grid = match waited {
            Ok(false) => 1,
            _ => u32::MAX,
        };
        waited.map(|_| ())
    })
}

/// The cross-host part of a communicator spanning hosts, built at init (`Comm::init`'s
/// `ConnectNet`): its host-local stages launch through this module.
pub fn connect_net(s: crate::comm::cross_host::Setup<'_>) -> Result<Arc<dyn crate::comm::cross_host::CrossHost>> {
    crate::net::connect(s, crate::net::Launch { coll: launch_task, p2p: launch_p2p })
}

/// Launches one collective on its stream, as its config (if any) shapes it (comm::view).
pub fn launch_task(t: &CollTask) -> Result<()> {
    let what = || format!("{:?} {} x {} root {} on stream {:p}", t.coll, t.count, t.dtype.name(), t.root, t.stream);
    let bytes = t.count.saturating_mul(t.dtype.size() as u64);
    with_launch(&t.comm, Needs::All, t.stream, bytes, what, |r, ls| {
        let r = &View::of_task(r, t)?;
        match t.config.as_deref().filter(|c| c.event != 0) {
            None => dispatch(r, ls, t),
            Some(c) => with_completion_event(r, ls, c.event as cu::CUevent, t.stream, |ls| dispatch(r, ls, t)),
        }
    })
}

/// One collective's launch under its view.
fn dispatch(r: &View, ls: &mut LaunchState, t: &CollTask) -> Result<()> {
    // NCCL_PROTO/NCCL_ALGO may leave a collective nothing to run.
    let func = nccl_func(t.coll);
    if let Some(f) = func {
        r.tuning.allowed.for_func(f)?;
    }
    if let Some(net) = &r.net {
        if matches!(t.coll, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce) {
            check_fp8(r, t.dtype)?;
        }
        return net.launch_coll(r, t);
    }
    match t.coll {
        Coll::AllReduce => allreduce(r, ls, t, t.count),
        Coll::ReduceScatter | Coll::Reduce => reducing(r, ls, t),
        Coll::Broadcast => broadcast(r, ls, t, func),
        Coll::AllGather | Coll::AlltoAll => gather(r, ls, t, func),
        _ => exchange(r, ls, &coll_spec(r, t), func, t.stream),
    }
}

/// Runs `f` (one configured call's launch) so that `event` (its launchCompletionEvent) is
/// recorded when the call's first kernel has launched (`launch`), or on `stream` after the call's
/// work where it launched no kernel of its own (copies, copy-engine transfers, a cross-host
/// stage). Before driver 12.3 the event is recorded before the launch, as NCCL 2.32.3 does.
fn with_completion_event(r: &View, ls: &mut LaunchState, event: cu::CUevent, stream: cu::CUstream, f: impl FnOnce(&mut LaunchState) -> Result<()>) -> Result<()> {
    // SAFETY: the caller's event and stream are handles the driver validates (nccl.h: the event
    // stays alive while the call's work is queued).
    let record = || check(unsafe { cu::cuEventRecord(event, stream) }, "cuEventRecord (launchCompletionEvent)");
    if r.dev.driver < 12030 {
        nccl_info!(Subsys::Coll, "CUDA launch-completion events require CUDA 12.3 or newer; recording the user event before launch");
        record()?;
        return f(ls);
    }
    ls.completion_event = Some(event);
    // Never left behind for a later launch, even by a panic (caught at the API boundary).
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *ls)));
    let unused = ls.completion_event.take();
    match res {
        Err(p) => std::panic::resume_unwind(p),
        Ok(Ok(())) if unused.is_some() => record(),
        Ok(res) => res,
    }
}

/// How a group's consecutive collectives on one communicator launch
/// (algo::group): ranges of `tasks` in order, each of more than one task a grouped launch
/// (`launch_group`, or `launch_put_group` where the flag says the range is put-based
/// reductions), each single one a lone launch. All lone where the communicator spans hosts
/// (its collectives run through `net`) or is not ready (each launch then reports why); a lone
/// task (most groups) is not planned.
pub fn group_launches(tasks: &[CollTask]) -> Vec<(std::ops::Range<usize>, bool)> {
    let lone = || (0..tasks.len()).map(|i| (i..i + 1, false)).collect();
    let [first, _, ..] = tasks else { return lone() };
    let Ok(r) = first.comm.ready() else { return lone() };
    if r.net.is_some() {
        return lone();
    }
    let r = &View::plain(r);
    let ops: Vec<GroupedOp> = tasks
        .iter()
        .map(|t| {
            let kind = grouped_kind(t.coll);
            // Under the ZERO CTA policy what a copy engine can move stays out of the SMs' launch.
            let piece = t.count * t.dtype.size() as u64;
            // A configured call launches as its config says, alone (NCCL isolates it too).
            let alone = t.config.is_some() || traffic(t.coll).is_some_and(|tr| engine_takes(r, tr, piece)) || (kind == GroupedKind::AllGather && symmetric_allgather(r, t));
            GroupedOp { kind, count: t.count, dtype: t.dtype, op: t.op.op, alone }
        })
        .collect();
    crate::algo::group::launches(&ops, &r.topo, &r.scratch, &r.tuning)
        .into_iter()
        .map(|p| {
            let puts = crate::algo::group::puts_shape(&ops[p.clone()], &r.topo, &r.scratch, &r.tuning).is_some();
            (p, puts)
        })
        .collect()
}

/// A range `group_launches` made of put-based reductions (2 to OX_GROUP_MAX_OPS AllReduces,
/// ReduceScatters and Reduces of one communicator, datatype and op; algo::group::merge_puts) as one
/// launch of kernels/colls/reduce_colls.cu's put_group on the first task's stream: each operation
/// with its lone plan's slices (`algo::group::put_plan`), one after another in every block, on the
/// largest plan's grid (algo::group::puts_shape).
pub fn launch_put_group(tasks: &[CollTask]) -> Result<()> {
    let Some(first) = tasks.first() else { return Ok(()) };
    // GroupArgs holds OX_GROUP_MAX_OPS operations; more would have the kernel read past them.
    if !(2..=crate::device_abi::OX_GROUP_MAX_OPS).contains(&tasks.len()) {
        return Err(Error::internal(format!("a put-based grouped launch of {} operations", tasks.len())));
    }
    let (dtype, op) = (first.dtype, first.op.op);
    let bytes: u64 = tasks.iter().map(|t| t.count * t.dtype.size() as u64).sum();
    let what = || format!("{} put-based reductions ({}, {bytes} bytes) in one launch, on stream {:p}", tasks.len(), dtype.name(), first.stream);
    with_launch(&first.comm, Needs::All, first.stream, bytes, what, |r, ls| {
        let r = &View::plain(r);
        check_fp8(r, dtype)?;
        let mut ops = Vec::with_capacity(tasks.len());
        for t in tasks {
            let (kind, func, mode) = match t.coll {
                Coll::AllReduce => (GroupedKind::AllReduce, Func::AllReduce, OX_GROUP_ALLREDUCE),
                Coll::ReduceScatter => (GroupedKind::ReduceScatter, Func::ReduceScatter, OX_GROUP_REDUCESCATTER),
                Coll::Reduce => (GroupedKind::Reduce, Func::Reduce, OX_GROUP_REDUCE),
                c => return Err(Error::internal(format!("{c:?} in a put-based grouped launch"))),
            };
            r.tuning.allowed.for_func(func)?;
            ops.push((GroupedOp { kind, count: t.count, dtype: t.dtype, op: t.op.op, alone: false }, mode));
        }
        let grouped: Vec<GroupedOp> = ops.iter().map(|(o, _)| *o).collect();
        let Some((grid, block)) = crate::algo::group::puts_shape(&grouped, &r.topo, &r.scratch, &r.tuning) else {
            return Err(Error::internal("a put-based grouped launch of operations the put-based kernels do not take"));
        };
        let mut args = GroupArgs { comm: r.dev_comm, nops: tasks.len() as u32, ..Default::default() };
        for ((slot, t), (o, mode)) in args.ops.iter_mut().zip(tasks).zip(&ops) {
            let Some((_, _, chunk)) = crate::algo::group::put_plan(o, &r.topo, &r.scratch, &r.tuning) else {
                return Err(Error::internal("a put-based grouped launch of an operation the put-based kernels do not take"));
            };
            *slot = coll_args(r, t, t.count, chunk, *mode);
        }
        let kinds = crate::algo::group::PutGroupKinds::of(&grouped);
        nccl_trace!(Subsys::Coll, "{} reductions ({} {:?}, {bytes} bytes) -> one put-based grouped launch ({}) grid {grid} block {block}", tasks.len(), dtype.name(), op, kinds.name());
        kernel(r, ls, r.module.put_group(kinds, dtype, op), grid, block, first.stream, &mut args)
    })
}

/// A collective's kind in a grouped launch (every kind may join one: algo::group says which do).
fn grouped_kind(c: Coll) -> GroupedKind {
    match c {
        Coll::AllReduce => GroupedKind::AllReduce,
        Coll::ReduceScatter => GroupedKind::ReduceScatter,
        Coll::Reduce => GroupedKind::Reduce,
        Coll::AllGather => GroupedKind::AllGather,
        Coll::AlltoAll => GroupedKind::AlltoAll,
        Coll::Broadcast => GroupedKind::Broadcast,
        Coll::Gather => GroupedKind::Gather,
        Coll::Scatter => GroupedKind::Scatter,
    }
}

/// A non-reducing collective as the sends and receives it amounts to, for a group that launches
/// several of them with its point-to-point operations as one exchange (launch::group): per peer,
/// in the collective's order, and a send to self paired with a receive from self for the local
/// piece (none in place). None where the lone call takes another path that matters: a
/// communicator spanning hosts, NCCL_PROTO or NCCL_ALGO set, an AllGather into a symmetric
/// window, a relayed Broadcast, pieces the copy-engine direct path keeps
/// (algo::ce_direct::keeps_grouped: 32 MiB and more, or every piece it takes under the zero CTA
/// policy), or nothing to move. Every rank decides alike: only the collective's
/// kind, size and root, the communicator's settings and whether the buffer lies in a symmetric
/// window (registered by every rank alike) enter. So an AlltoAll with `send == recv`, which has
/// no in-place form and gives undefined data, joins like any other: were one rank's AlltoAll
/// left out to launch alone, the ranks' launches would differ and wait on each other forever.
pub fn exchange_ops(t: &CollTask) -> Option<Vec<P2pOp>> {
    if t.config.is_some() {
        return None; // it launches as its config says
    }
    let r = &View::plain(t.comm.ready().ok()?);
    let (me, n) = (t.comm.rank, t.comm.nranks);
    let bytes = t.count * t.dtype.size() as u64;
    let ce_min = crate::algo::ce_direct::min_bytes_for(traffic(t.coll)?, n, &r.tuning);
    if r.net.is_some() || n < 2 || bytes == 0 || r.tuning.allowed != Default::default() || crate::algo::ce_direct::keeps_grouped(bytes, ce_min, r.engine_moves) {
        return None;
    }
    if t.coll == Coll::AllGather && symmetric_allgather(r, t) {
        return None;
    }
    if t.coll == Coll::Broadcast && crate::algo::broadcast_relay(bytes, &r.topo, &r.scratch, &r.tuning).is_some() {
        return None;
    }
    Some(as_p2p(t.coll, me, n, t.root as usize, (t.send, t.recv), bytes, t.stream))
}

/// `exchange_ops`' sends and receives of rank `me` of `n` for a non-reducing collective of
/// `bytes` a piece (buffers `(send, recv)`); empty for a reduction.
fn as_p2p(coll: Coll, me: usize, n: usize, root: usize, (send, recv): (u64, u64), bytes: u64, stream: cu::CUstream) -> Vec<P2pOp> {
    let op = |is_send: bool, peer: usize, buf: u64| P2pOp { is_send, peer, buf, bytes, stream };
    let mut ops = Vec::new();
    let local = |src: u64, dst: u64, ops: &mut Vec<P2pOp>| {
        if src != dst {
            ops.push(op(true, me, src));
            ops.push(op(false, me, dst));
        }
    };
    let others = (0..n).filter(|&p| p != me);
    match coll {
        Coll::AllGather => {
            for p in others {
                ops.push(op(true, p, send));
                ops.push(op(false, p, recv + p as u64 * bytes));
            }
            local(send, recv + me as u64 * bytes, &mut ops);
        }
        Coll::AlltoAll => {
            for p in others {
                ops.push(op(true, p, send + p as u64 * bytes));
                ops.push(op(false, p, recv + p as u64 * bytes));
            }
            local(send + me as u64 * bytes, recv + me as u64 * bytes, &mut ops);
        }
        Coll::Broadcast if me == root => {
            ops.extend(others.map(|p| op(true, p, send)));
            local(send, recv, &mut ops);
        }
        Coll::Broadcast => ops.push(op(false, root, recv)),
        Coll::Gather if me == root => {
            ops.extend(others.map(|p| op(false, p, recv + p as u64 * bytes)));
            local(send, recv + me as u64 * bytes, &mut ops);
        }
        Coll::Gather => ops.push(op(true, root, send)),
        Coll::Scatter if me == root => {
            ops.extend(others.map(|p| op(true, p, send + p as u64 * bytes)));
            local(send + me as u64 * bytes, recv, &mut ops);
        }
        Coll::Scatter => ops.push(op(false, root, recv)),
        Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce => {}
    }
    ops
}

/// Whether the ZERO CTA policy sends a collective of `traffic` whose pieces are `bytes` to the
/// exchange launch, whose transfers the copy-engine path takes, instead of its SM-only kernels
/// (one-shot packets, LL128 chain, symmetric direct kernel): where ranks of other processes exist
/// and the path's threshold (every transfer, unless OXCCL_CE_DIRECT_MIN_BYTES says otherwise)
/// is reached. The same on every rank: the piece size is.
fn engine_takes(r: &View, traffic: Traffic, bytes: u64) -> bool {
    r.engine_moves && bytes >= crate::algo::ce_direct::min_bytes_for(traffic, r.topo.nranks, &r.tuning)
}

/// Whether an AllGather goes to the direct kernel into a symmetric window (`gather`).
fn symmetric_allgather(r: &View, t: &CollTask) -> bool {
    let piece = t.count * t.dtype.size() as u64;
    crate::algo::symm::allgather(piece, &r.topo, &r.tuning).is_some()
        && t.comm.windows.symmetric_span(t.recv, piece * r.topo.nranks as u64).is_some()
}

/// The communicator's sends and receives of `p2p` (in group order) that travel in the grouped
/// launch of `tasks` (algo::group::fold_p2p), each with its first packet in its pair's region.
pub fn fold_p2p(tasks: &[CollTask], p2p: &[P2pOp]) -> Vec<Option<u64>> {
    let none = || vec![None; p2p.len()];
    let Some(first) = tasks.first() else { return none() };
    let Ok(r) = first.comm.ready() else { return none() };
    if r.net.is_some() || r.engine_moves {
        return none();
    }
    let total: u64 = tasks.iter().map(|t| packets(t.count, t.dtype)).sum();
    let ops: Vec<GroupedP2p> = p2p.iter().map(|o| GroupedP2p { is_send: o.is_send, peer: o.peer, bytes: o.bytes }).collect();
    crate::algo::group::fold_p2p(total, first.comm.rank, &ops, &r.topo, &r.scratch, &r.tuning)
}

/// Launches collectives of a group as one kernel (kernels/colls/allreduce_group.cu): `tasks` are
/// a range `group_launches` grouped (2 to
/// OX_GROUP_MAX_OPS of one communicator, the reductions of one datatype and op), on the first
/// task's stream, with the sends and receives `p2p` (`fold_p2p`'s, each with its first packet).
/// The group has already ordered its other streams around that one (group::fork_streams,
/// group::join_streams).
pub fn launch_group(tasks: &[CollTask], p2p: &[(P2pOp, u64)]) -> Result<()> {
    let Some(first) = tasks.first() else { return Ok(()) };
    debug_assert!((2..=crate::device_abi::OX_GROUP_MAX_OPS).contains(&tasks.len()));
    if p2p.len() > crate::device_abi::OX_GROUP_MAX_P2P {
        return Err(Error::internal(format!("a grouped launch of {} sends and receives; it holds {}", p2p.len(), crate::device_abi::OX_GROUP_MAX_P2P)));
    }
    let coll_total: u64 = tasks.iter().map(|t| packets(t.count, t.dtype)).sum();
    let total = coll_total + p2p.iter().map(|(o, _)| o.bytes.div_ceil(8)).sum::<u64>();
    // The kernel's datatype and op: the reductions'; bytes where none reduces.
    let reduces = |t: &&CollTask| matches!(t.coll, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce);
    let (dtype, op) = tasks.iter().find(reduces).map_or((DataType::Uint8, RedOp::Sum), |t| (t.dtype, t.op.op));
    let what = || {
        let peers: Vec<String> = p2p.iter().map(|(o, _)| format!("{} {} B {} {}", if o.is_send { "send" } else { "recv" }, o.bytes, if o.is_send { "to" } else { "from" }, o.peer)).collect();
        format!("{} collectives ({}) and {} sends/receives [{}] in one launch, {total} packets, on stream {:p}", tasks.len(), dtype.name(), p2p.len(), peers.join(", "), first.stream)
    };
    with_launch(&first.comm, Needs::All, first.stream, total * 8, what, |r, ls| {
        let r = &View::plain(r);
        for f in tasks.iter().filter_map(|t| nccl_func(t.coll)) {
            r.tuning.allowed.for_func(f)?;
        }
        if tasks.iter().any(|t| reduces(&t)) {
            check_fp8(r, dtype)?;
        }
        let mut args = GroupArgs { comm: r.dev_comm, nops: tasks.len() as u32, ..Default::default() };
        let mut start = 0;
        for (slot, t) in args.ops.iter_mut().zip(tasks) {
            let bytes = t.count * t.dtype.size() as u64;
            // The non-reducing kinds' counts in bytes: they travel as bytes whatever the kernel's
            // datatype. No scalar: the kernel builds the launch's op from every operation's arguments.
            let moved = |mode| CollArgs { scalar: 0, scalar_ptr: 0, ..coll_args(r, t, bytes, start, mode) };
            *slot = match t.coll {
                Coll::ReduceScatter => coll_args(r, t, t.count, start, OX_GROUP_REDUCESCATTER),
                Coll::Reduce => coll_args(r, t, t.count, start, OX_GROUP_REDUCE),
                Coll::AllGather => moved(OX_GROUP_ALLGATHER),
                Coll::AlltoAll => moved(OX_GROUP_ALLTOALL),
                Coll::Broadcast => moved(OX_GROUP_BROADCAST),
                Coll::Gather => moved(OX_GROUP_GATHER),
                Coll::Scatter => moved(OX_GROUP_SCATTER),
                Coll::AllReduce => coll_args(r, t, t.count, start, OX_GROUP_ALLREDUCE),
            };
            start += packets(t.count, t.dtype);
        }
        args.np2p = p2p.len() as u32;
        let mut local = coll_total;
        for (slot, (o, first_packet)) in args.p2p.iter_mut().zip(p2p) {
            *slot = GroupP2p { buf: o.buf, bytes: o.bytes, start: *first_packet, local, peer: o.peer as u32, is_send: o.is_send.into() };
            local += o.bytes.div_ceil(8);
        }
        let (grid, block) = crate::algo::group::launch_shape(total, &r.topo, &r.tuning);
        nccl_trace!(Subsys::Coll, "{} collectives ({} {:?}) and {} sends and receives, {total} packets -> one grouped launch grid {grid} block {block}", tasks.len(), dtype.name(), op, p2p.len());
        kernel(r, ls, r.module.allreduce_group(dtype, op), grid, block, first.stream, &mut args)
    })
}

/// The NCCL function name NCCL_PROTO/NCCL_ALGO use for a collective, if they cover it.
fn nccl_func(c: Coll) -> Option<Func> {
    match c {
        Coll::AllReduce => Some(Func::AllReduce),
        Coll::ReduceScatter => Some(Func::ReduceScatter),
        Coll::Reduce => Some(Func::Reduce),
        Coll::AllGather => Some(Func::AllGather),
        Coll::Broadcast => Some(Func::Broadcast),
        Coll::AlltoAll | Coll::Gather | Coll::Scatter => None,
    }
}

/// Launches one communicator's point-to-point operations of a group on the first operation's
/// stream: as one kernel, or several one after another where the group is larger than a launch
/// holds (algo::batches). When the group spans several streams, the group orders them: each
/// waits for all the others before the group's first launch and for its last launch after it
/// (group::fork_streams, group::join_streams).
pub fn launch_p2p(comm: &Arc<Comm>, ops: &[P2pOp]) -> Result<()> {
    let Some(first) = ops.first() else { return Ok(()) };
    let me = comm.rank;
    // Sends to self pair with receives from self in order: checked for the whole group before
    // anything is launched.
    let to_self: Vec<&P2pOp> = ops.iter().filter(|o| o.peer == me && o.is_send).collect();
    let from_self: Vec<&P2pOp> = ops.iter().filter(|o| o.peer == me && !o.is_send).collect();
    if to_self.len() != from_self.len() {
        return Err(Error::invalid_usage(format!(
            "{} send(s) to self but {} receive(s) from self in one group",
            to_self.len(),
            from_self.len()
        )));
    }
    if let Some((s, r)) = to_self.iter().zip(&from_self).find(|(s, r)| s.bytes != r.bytes) {
        return Err(Error::invalid_usage(format!("send to self of {} bytes matched with a receive of {}", s.bytes, r.bytes)));
    }
    // More than one launch holds (algo::batches): launches cut alike on both ends of every pair.
    // A group of at most `per_pair` operations and OX_MAX_COPIES sends to self is one launch.
    if ops.len() <= crate::algo::batches::per_pair(comm.nranks) && to_self.len() <= crate::device_abi::OX_MAX_COPIES {
        return launch_p2p_batch(comm, ops, first.stream);
    }
    let batch = crate::algo::batches::p2p_batches(me, comm.nranks, ops.iter().map(|o| (o.is_send, o.peer)));
    let last = batch.iter().copied().max().unwrap_or(0);
    if last == 0 {
        return launch_p2p_batch(comm, ops, first.stream);
    }
    nccl_trace!(Subsys::P2p, "rank {me}: a group of {} point-to-point operations in {} launches", ops.len(), last + 1);
    for j in 0..=last {
        let part: Vec<P2pOp> = ops.iter().zip(&batch).filter(|(_, &b)| b == j).map(|(o, _)| *o).collect();
        launch_p2p_batch(comm, &part, first.stream)?;
    }
    Ok(())
}

/// One launch's worth of a group's point-to-point operations (`launch_p2p`), on `stream`.
fn launch_p2p_batch(comm: &Arc<Comm>, ops: &[P2pOp], stream: cu::CUstream) -> Result<()> {
    let me = comm.rank;
    let mut spec = ExchangeSpec::default();
    let (mut self_sends, mut self_recvs) = (Vec::new(), Vec::new());
    for op in ops {
        let x = Transfer { peer: op.peer, ptr: op.buf, bytes: op.bytes, relay: None };
        match (op.is_send, op.peer == me) {
            (true, false) => spec.sends.push(x),
            (false, false) => spec.recvs.push(x),
            (true, true) => self_sends.push(x),
            (false, true) => self_recvs.push(x),
        }
    }
    // launch_p2p checked that they pair up, and cut them in pairs.
    for (s, r) in self_sends.iter().zip(&self_recvs) {
        spec.copies.push(LocalCopy { src: s.ptr, dst: r.ptr, bytes: s.bytes });
    }
    let what = || {
        let list: Vec<String> = ops.iter().map(|o| format!("{} {} B {} {}", if o.is_send { "send" } else { "recv" }, o.bytes, if o.is_send { "to" } else { "from" }, o.peer)).collect();
        format!("point-to-point [{}] on stream {:p}", list.join(", "), stream)
    };
    let bytes = ops.iter().map(|o| o.bytes).max().unwrap_or(0);
    // The peers it needs, without an allocation for the usual few.
    let mut few = [0usize; 8];
    let many: Vec<usize>;
    let peers: &[usize] = if ops.len() <= few.len() {
        for (f, o) in few.iter_mut().zip(ops) {
            *f = o.peer;
        }
        &few[..ops.len()]
    } else {
        many = ops.iter().map(|o| o.peer).collect();
        &many
    };
    with_launch(comm, Needs::Peers(peers), stream, bytes, what, |r, ls| {
        match &r.net {
            Some(net) => net.launch_p2p(r, ops, stream),
            None => p2p(&View::plain(r), ls, &spec, stream),
        }
    })
}

/// A group's point-to-point transfers on one host: the one-shot kernel where the selector says so,
/// else the exchange kernel.
fn p2p(r: &View, ls: &mut LaunchState, spec: &ExchangeSpec, stream: cu::CUstream) -> Result<()> {
    if ce_direct(r, ls, spec, None, stream)? {
        return Ok(());
    }
    let Some((grid, block)) = crate::algo::select_p2p_oneshot(spec, &r.topo, &r.scratch, &r.tuning) else {
        return exchange(r, ls, spec, None, stream);
    };
    let (send, recv) = (spec.sends.first(), spec.recvs.first());
    nccl_trace!(Subsys::P2p, "one-shot point-to-point: send {:?}, receive {:?} -> grid {grid} block {block}", send.map(|x| (x.peer, x.bytes)), recv.map(|x| (x.peer, x.bytes)));
    // Kernel-specific use of CollArgs: see kernels/colls/p2p_oneshot.cu.
    let mut args = CollArgs {
        comm: r.dev_comm,
        send: send.map_or(0, |x| x.ptr),
        recv: recv.map_or(0, |x| x.ptr),
        count: send.map_or(0, |x| x.bytes),
        chunk_elems: recv.map_or(0, |x| x.bytes),
        scalar: 0,
        scalar_ptr: 0,
        root: send.map_or(-1, |x| x.peer as i32),
        mode: recv.map_or(u32::MAX, |x| x.peer as u32),
        done: 0,
    };
    kernel(r, ls, r.module.p2p_oneshot(), grid, block, stream, &mut args)
}

/// Transfer lists of a non-reducing collective, as this rank sees them.
fn coll_spec(r: &View, t: &CollTask) -> ExchangeSpec {
    let (me, n) = (t.comm.rank, t.comm.nranks);
    let bytes = t.count * t.dtype.size() as u64;
    let root = t.root as usize;
    let mut s = ExchangeSpec::default();
    let others = |me: usize| (0..n).filter(move |&p| p != me);
    let copy = |src: u64, dst: u64| LocalCopy { src, dst, bytes };
    match t.coll {
        Coll::AllGather => {
            for p in others(me) {
                s.sends.push(Transfer { peer: p, ptr: t.send, bytes, relay: None });
                s.recvs.push(Transfer { peer: p, ptr: t.recv + p as u64 * bytes, bytes, relay: None });
            }
            s.copies.push(copy(t.send, t.recv + me as u64 * bytes));
            (s.chunk_cap, s.threads) = crate::algo::allgather_shape(bytes, &r.topo, &r.scratch);
        }
        Coll::Broadcast => {
            // The ZERO CTA policy's transfers go root to peer by copy engine: no relay, whose
            // chunked puts the copy-engine path does not take.
            let relay = if engine_takes(r, Traffic::Broadcast, bytes) { None } else { crate::algo::broadcast_relay(bytes, &r.topo, &r.scratch, &r.tuning) };
            s = crate::algo::broadcast_spec(me, root, n, t.send, t.recv, bytes, relay);
        }
        Coll::AlltoAll => {
            for p in others(me) {
                s.sends.push(Transfer { peer: p, ptr: t.send + p as u64 * bytes, bytes, relay: None });
                s.recvs.push(Transfer { peer: p, ptr: t.recv + p as u64 * bytes, bytes, relay: None });
            }
            s.copies.push(copy(t.send + me as u64 * bytes, t.recv + me as u64 * bytes));
        }
        Coll::Gather => {
            if me == root {
                s.recvs.extend(others(me).map(|p| Transfer { peer: p, ptr: t.recv + p as u64 * bytes, bytes, relay: None }));
                s.copies.push(copy(t.send, t.recv + me as u64 * bytes));
            } else {
                s.sends.push(Transfer { peer: root, ptr: t.send, bytes, relay: None });
            }
            s.chunk_cap = Some(crate::algo::gather_chunk_cap(&r.scratch));
        }
        Coll::Scatter => {
            if me == root {
                s.sends.extend(others(me).map(|p| Transfer { peer: p, ptr: t.send + p as u64 * bytes, bytes, relay: None }));
                s.copies.push(copy(t.send + me as u64 * bytes, t.recv));
            } else {
                s.recvs.push(Transfer { peer: root, ptr: t.recv, bytes, relay: None });
            }
            s.grid = crate::algo::rooted_grid(bytes, &r.topo, &r.scratch);
        }
        Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce => {}
    }
    s.copies.retain(|c| c.src != c.dst && c.bytes > 0);
    s.traffic = traffic(t.coll).unwrap_or(Traffic::P2p);
    s
}

/// The copy-engine path's name for a non-reducing collective's transfers (None for reductions).
fn traffic(c: Coll) -> Option<Traffic> {
    match c {
        Coll::AllGather => Some(Traffic::AllGather),
        Coll::Broadcast => Some(Traffic::Broadcast),
        Coll::AlltoAll => Some(Traffic::AlltoAll),
        Coll::Gather => Some(Traffic::Gather),
        Coll::Scatter => Some(Traffic::Scatter),
        Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce => None,
    }
}

/// Broadcast: small ones as one-way packets, mid sizes along the LL128 chain where the
/// selectors say so, else the exchange kernel's direct or relayed transfers.
fn broadcast(r: &View, ls: &mut LaunchState, t: &CollTask, func: Option<Func>) -> Result<()> {
    let bytes = t.count * t.dtype.size() as u64;
    if engine_takes(r, Traffic::Broadcast, bytes) {
        return exchange(r, ls, &coll_spec(r, t), func, t.stream);
    }
    if let Some((grid, block)) = crate::algo::chain::broadcast_oneshot(bytes, &r.topo, &r.scratch, &r.tuning) {
        nccl_trace!(Subsys::Coll, "Broadcast {bytes} B root {} -> one-shot packets grid {grid} block {block}", t.root);
        let mut args = coll_args(r, t, bytes, 0, 0);
        return kernel(r, ls, r.module.broadcast_oneshot(), grid, block, t.stream, &mut args);
    }
    let Some((grid, block)) = crate::algo::chain::broadcast_ll128(bytes, &r.topo, &r.scratch, &r.tuning) else {
        return exchange(r, ls, &coll_spec(r, t), func, t.stream);
    };
    nccl_trace!(Subsys::Coll, "Broadcast {bytes} B root {} -> LL128 chain grid {grid} block {block}", t.root);
    let mut args = coll_args(r, t, bytes, 0, crate::device_abi::OX_MODE_LL128_CHAIN as u32);
    kernel(r, ls, r.module.broadcast_ll128(), grid, block, t.stream, &mut args)
}

/// AllGather and AlltoAll: an AllGather into a symmetric window by the direct kernel where
/// algo::symm says so, else the one-shot gather kernel where its selector says so, else the
/// exchange kernel.
fn gather(r: &View, ls: &mut LaunchState, t: &CollTask, func: Option<Func>) -> Result<()> {
    let piece = t.count * t.dtype.size() as u64;
    let allgather = t.coll == Coll::AllGather;
    if engine_takes(r, if allgather { Traffic::AllGather } else { Traffic::AlltoAll }, piece) {
        return exchange(r, ls, &coll_spec(r, t), func, t.stream);
    }
    if allgather {
        if let Some((grid, block)) = crate::algo::symm::allgather(piece, &r.topo, &r.tuning) {
            if let Some((flat, stride)) = t.comm.windows.symmetric_span(t.recv, piece * r.topo.nranks as u64) {
                nccl_trace!(Subsys::Coll, "AllGather {piece} B per rank into a symmetric window -> direct grid {grid} block {block}");
                // Kernel-specific use of CollArgs: see kernels/colls/symm_allgather.cu.
                let mut args = CollArgs {
                    comm: r.dev_comm,
                    send: t.send,
                    recv: flat,
                    count: piece,
                    chunk_elems: stride,
                    scalar: t.recv,
                    scalar_ptr: 0,
                    root: -1,
                    mode: 0,
                    done: 0,
                };
                return kernel(r, ls, r.module.allgather_symm(), grid, block, t.stream, &mut args);
            }
        }
    }
    let Some((grid, block)) = crate::algo::select_gather_oneshot(piece, allgather, &r.topo, &r.scratch, &r.tuning) else {
        return exchange(r, ls, &coll_spec(r, t), func, t.stream);
    };
    nccl_trace!(Subsys::Coll, "{:?} {piece} B per rank -> one-shot gather grid {grid} block {block}", t.coll);
    let mode = if allgather { 0 } else { crate::device_abi::OX_GATHER_ALLTOALL as u32 };
    let mut args = coll_args(r, t, piece, 0, mode);
    kernel(r, ls, r.module.gather_oneshot(), grid, block, t.stream, &mut args)
}

fn exchange(r: &View, ls: &mut LaunchState, spec: &ExchangeSpec, func: Option<Func>, stream: cu::CUstream) -> Result<()> {
    if spec.sends.is_empty() && spec.recvs.is_empty() && spec.copies.iter().all(|c| c.bytes >= LOCAL_COPY_MIN_BYTES) {
        // Nothing but large local copies (one rank, or sends to self): the copy engine.
        return spec.copies.iter().try_for_each(|c| local_copy(ls, c.dst, c.src, c.bytes, stream));
    }
    if ce_direct(r, ls, spec, func, stream)? {
        return Ok(());
    }
    let mut plan = exchange_plan(r, spec, func)?;
    kernel(r, ls, r.module.exchange(), plan.grid, plan.block, stream, &mut plan.args)
}

/// The exchange kernel's launch for `spec`, with this rank's registered-buffer offers.
fn exchange_plan(r: &View, spec: &ExchangeSpec, func: Option<Func>) -> Result<crate::algo::ExchangePlan> {
    let me = r.bootstrap.rank();
    let mut plan = plan_exchange(me, spec, func, &r.topo, &r.scratch, &r.tuning)?;
    if r.reg.sharing() {
        for (peer, dst, bytes) in offer_candidates(&plan.args) {
            plan.args.offer[peer] = r.reg.offer(dst, bytes).unwrap_or(0);
        }
    }
    plan.args.comm = r.dev_comm;
    nccl_trace!(Subsys::Coll, "exchange: {} sends, {} receives, {} copies", plan.args.nsend, plan.args.nrecv, plan.args.ncopy);
    Ok(plan)
}

/// Large transfers between ranks in separate processes by copy engine straight into the peer's
/// buffer, for the pairs algo::ce_direct::pairs takes where their handshakes agree; the exchange
/// kernel moves the rest of the launch (false: no pair is taken, the caller moves it all).
fn ce_direct(r: &View, ls: &mut LaunchState, spec: &ExchangeSpec, func: Option<Func>, stream: cu::CUstream) -> Result<bool> {
    let Some(ce) = &r.ce else { return Ok(false) };
    let peers = crate::algo::ce_direct::pairs(spec, func, r.bootstrap.rank(), r.topo.nranks, &r.tuning, |p| ce.linked(p));
    if peers.is_empty() {
        return Ok(false);
    }
    ls.counted_last = false; // copies and waits follow, unless the fallback kernel comes last
    nccl_trace!(Subsys::P2p, "copy-engine direct: peers {peers:?} of sends {:?}, receives {:?}", spec.sends.iter().map(|x| (x.peer, x.bytes)).collect::<Vec<_>>(), spec.recvs.iter().map(|x| (x.peer, x.bytes)).collect::<Vec<_>>());
    let kernels = crate::transport::ce_direct::Kernels { wait: r.module.ce_wait(), post: r.module.ce_post(), copy: r.module.ce_copy() };
    // The kernel for the whole launch, planned here in call order like any launch; the path
    // takes out the pairs that agree.
    let plan = exchange_plan(r, spec, func)?;
    let fallback = Fallback { kernel: r.module.exchange(), grid: plan.grid, block: plan.block, args: Box::new(plan.args) };
    if ce.is_async() {
        return match ce.submit(kernels, r.dev_comm, spec, &peers, fallback, stream)? {
            Some(mut fb) => kernel(r, ls, fb.kernel, fb.grid, fb.block, stream, &mut *fb.args).map(|_| true),
            None => {
                // A wait came last on the stream (the gate, or a receive's `done`), and it may
                // wait for kernels on the worker's stream, which need SMs: nothing may start
                // early behind it and take them.
                ls.last_grid = u32::MAX;
                Ok(true)
            }
        };
    }
    ce.run(kernels, r.dev_comm, spec, &peers, fallback, stream)?;
    // Copies, kernels and stream waits came last: a kernel after them has nothing of ours to overlap.
    ls.last_grid = 0;
    Ok(true)
}

fn check_fp8(r: &Ready, dt: DataType) -> Result<()> {
    if dt.is_fp8() && !r.fp8_ok {
        return Err(Error::invalid_argument(format!(
            "{} reductions need compute capability 9.0 on every GPU of the communicator",
            dt.name()
        )));
    }
    Ok(())
}

fn coll_args(r: &Ready, t: &CollTask, count: u64, chunk_elems: u64, mode: u32) -> CollArgs {
    CollArgs {
        comm: r.dev_comm,
        send: t.send,
        recv: t.recv,
        count,
        chunk_elems,
        scalar: t.op.scalar,
        scalar_ptr: t.op.scalar_ptr,
        root: t.root,
        mode,
        done: 0,
    }
}

/// Ring one-shot AllReduces launched early in this process (algo::pdl::early), for tests that must
/// know the early path ran (oxccl-gpu-check --chain).
static EARLY_LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many so far.
pub fn early_launches() -> u64 {
    EARLY_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Of those, the chained ones (OX_ONESHOT_CHAIN: the input is the previous launch's output).
static CHAINED_LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many so far.
pub fn chained_launches() -> u64 {
    CHAINED_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Of those, the ones whose packets the launch before them sent (OX_ONESHOT_PRESENT).
static PRESENT_LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many so far.
pub fn present_launches() -> u64 {
    PRESENT_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Single-rank copies at least this large use the copy engine.
const LOCAL_COPY_MIN_BYTES: u64 = 256 << 10;

/// AllReduce of `count` elements (also a one-rank ReduceScatter or Reduce).
fn allreduce(r: &View, ls: &mut LaunchState, t: &CollTask, count: u64) -> Result<()> {
    check_fp8(r, t.dtype)?;
    let bytes = count * t.dtype.size() as u64;
    if t.comm.nranks == 1 && t.op.op != RedOp::PreMulSum && (t.send == t.recv || bytes >= LOCAL_COPY_MIN_BYTES) {
        // One rank: every built-in op is the identity (avg multiplies by 1/1 exactly). Large
        // copies go to the copy engine; small ones take the one-pass kernel, whose launch is far
        // cheaper than a copy-engine transfer's set-up.
        return local_copy(ls, t.recv, t.send, bytes, t.stream);
    }
    let plan = select_allreduce(count, t.dtype, &r.topo, &r.scratch, &r.tuning);
    nccl_trace!(
        Subsys::Coll,
        "AllReduce count {count} {} {} -> {:?} grid {} block {}",
        t.dtype.name(),
        t.op.op.name(),
        plan.algo,
        plan.grid,
        plan.block
    );
    let k = r.module.allreduce(plan.algo, t.dtype, t.op.op);
    if !plan.ring {
        return kernel(r, ls, k, plan.grid, plan.block, t.stream, &mut coll_args(r, t, count, plan.chunk_elems, 0));
    }
    // The ring one-shot: early behind the previous one where algo::pdl::early proves it safe,
    // and remembered as the anchor for the next launch when captured.
    let pdl = pdl_allowed(r, ls, plan.grid);
    let tail = ls.tail_now; // nothing was issued on the stream since with_launch asked
    let send = (t.send, t.send.saturating_add(bytes));
    let (on, scalar, stream, anchor) = (!r.tuning.early_off, t.op.scalar_ptr != 0, t.stream as usize, ls.ring_prev.as_ref().map(|p| &p.anchor));
    let chainable = crate::algo::pdl::chained(on, pdl, scalar, stream, tail, anchor, send, plan.grid, plan.block);
    let present = crate::algo::pdl::presend(!r.tuning.presend_off, chainable, t.op.op, t.dtype);
    let chained = chainable && ls.ring_prev.as_ref().is_some_and(|p| p.launch.publish(p.anchor.node, present));
    let early = chained || crate::algo::pdl::early(on, pdl, scalar, stream, tail, anchor, send);
    let prev = ls.ring_prev.map(|p| p.anchor).filter(|_| early);
    let pos = prev.and_then(|a| a.next_pos()).unwrap_or(0);
    let entry = crate::algo::pdl::entry(early, bytes, r.tuning.entry_bytes);
    let mode = OX_ONESHOT_RING
        | if early { OX_ONESHOT_EARLY | pos << OX_ONESHOT_POS_SHIFT } else { 0 }
        | if entry { OX_ONESHOT_ENTRY } else { 0 }
        | if chained { OX_ONESHOT_CHAIN } else { 0 }
        | if chained && present { OX_ONESHOT_PRESENT } else { 0 };
    if early {
        EARLY_LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if chained {
        CHAINED_LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if present {
            PRESENT_LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    nccl_trace!(
        Subsys::Coll,
        "AllReduce ring one-shot{}{}",
        if entry { ", early at entry" } else if early { ", early" } else { "" },
        if chained && present { ", chained, pre-sent" } else if chained { ", chained" } else { "" }
    );
    let chain_kernel = r.module.allreduce_chain(t.dtype, t.op.op);
    let mut args = coll_args(r, t, count, 0, mode);
    launch(ls, if chained { chain_kernel } else { k }, plan.grid, plan.block, t.stream, &mut args, pdl)?;
    if entry {
        // The launch before this one may run until the next one's wait: count its blocks too.
        ls.last_grid = plan.grid.saturating_add(prev.map_or(u32::MAX, |a| a.grid));
    }
    if tail.is_some() {
        if let Some(CaptureTail { id, only: Some(node) }) = capture_tail(t.stream)? {
            let anchor = RingAnchor {
                stream: t.stream as usize,
                capture: id,
                node,
                recv: (t.recv, t.recv.saturating_add(bytes)),
                grid: plan.grid,
                block: plan.block,
                pos,
                before: prev.filter(|_| entry).map(|a| a.recv),
            };
            ls.ring_anchor = Some(RingLast { anchor, launch: RingLaunch { chain_kernel, grid: plan.grid, block: plan.block, args } });
        }
    }
    Ok(())
}

/// ReduceScatter or Reduce (one rank: AllReduce's single pass, which also applies PreMulSum).
fn reducing(r: &View, ls: &mut LaunchState, t: &CollTask) -> Result<()> {
    if t.comm.nranks == 1 {
        return allreduce(r, ls, t, t.count);
    }
    check_fp8(r, t.dtype)?;
    let select = if t.coll == Coll::Reduce { select_reduce } else { select_reducescatter };
    let plan = select(t.count, t.dtype, &r.topo, &r.scratch, &r.tuning);
    let put = !plan.packets(); // the put kernels also run the relay and the chain
    let k = if t.coll == Coll::Reduce {
        r.module.reduce(put, t.dtype, t.op.op)
    } else {
        r.module.reducescatter(put, t.dtype, t.op.op)
    };
    let mut args = coll_args(r, t, t.count, plan.chunk_elems, plan.mode);
    kernel(r, ls, k, plan.grid, plan.block, t.stream, &mut args)
}

/// Launches one kernel of the communicator on `stream`, with programmatic dependent launch where
/// algo::pdl allows it behind the communicator's previous kernel there.
fn kernel<A: KernelArgs>(r: &View, ls: &mut LaunchState, k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &mut A) -> Result<()> {
    let pdl = pdl_allowed(r, ls, grid);
    launch(ls, k, grid, block, stream, args, pdl)
}

/// Whether a kernel of `grid` blocks may start early behind the communicator's previous one.
fn pdl_allowed(r: &View, ls: &LaunchState, grid: u32) -> bool {
    crate::algo::pdl::allowed(!r.tuning.pdl_off, r.dev.cc_major, r.dev.driver, ls.last_grid, grid, r.topo.sm_count)
}

/// Launches one kernel of the communicator, counted where the launch may count
/// (src/comm/completion.rs): its blocks then report their end on the done counter.
fn launch<A: KernelArgs>(ls: &mut LaunchState, k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &mut A, pdl: bool) -> Result<()> {
    crate::diag::hostprof::mark(crate::diag::hostprof::Stage::Plan);
    let counted = ls.counting;
    if counted {
        *args.done_mut() = ls.done.counter();
    }
    ls.counted_last = false; // a failed launch leaves the event to mark what came before it
    match ls.completion_event.take() {
        None => launch_pdl(k, grid, block, stream, args, pdl)?,
        Some(event) => launch_with_event(k, grid, block, stream, args, pdl, event)?,
    }
    crate::diag::hostprof::mark(crate::diag::hostprof::Stage::Launch);
    if counted {
        ls.done.counted_launch(grid);
    }
    ls.counted_last = counted;
    ls.last_grid = grid;
    Ok(())
}

/// Kernel arguments with a `done` field: the done counter of a counted launch (kernels/prims/done.cuh).
pub trait KernelArgs {
    /// The `done` field, which a counted launch sets.
    fn done_mut(&mut self) -> &mut u64;
}

impl KernelArgs for CollArgs {
    fn done_mut(&mut self) -> &mut u64 {
        &mut self.done
    }
}

impl KernelArgs for GroupArgs {
    fn done_mut(&mut self) -> &mut u64 {
        &mut self.done
    }
}

impl KernelArgs for crate::device_abi::ExchangeArgs {
    fn done_mut(&mut self) -> &mut u64 {
        &mut self.done
    }
}

/// The cost model's prediction for a task, in microseconds (ncclGroupSimulateEnd).
pub fn predict_us(t: &CollTask) -> Result<f64> {
    let r = t.comm.ready()?;
    let bytes = t.count * t.dtype.size() as u64;
    let n = t.comm.nranks;
    Ok(match t.coll {
        Coll::AllReduce => {
            let plan = select_allreduce(t.count, t.dtype, &r.topo, &r.scratch, &r.tuning);
            crate::algo::cost::allreduce_us(&plan, bytes, n)
        }
        // The others move at most what an AllReduce of their total size moves.
        _ => {
            let total = bytes * if matches!(t.coll, Coll::Broadcast | Coll::Reduce) { 1 } else { n as u64 };
            let plan = select_allreduce(total / t.dtype.size() as u64, t.dtype, &r.topo, &r.scratch, &r.tuning);
            crate::algo::cost::allreduce_us(&plan, total, n) / 2.0
        }
    })
}

/// The cost model's prediction for a grouped launch of `tasks` (`launch_group`), in microseconds.
pub fn predict_group_us(tasks: &[CollTask]) -> f64 {
    let packets = tasks.iter().map(|t| packets(t.count, t.dtype)).sum();
    crate::algo::cost::grouped_us(packets, tasks.first().map_or(2, |t| t.comm.nranks))
}

fn local_copy(ls: &mut LaunchState, dst: u64, src: u64, bytes: u64, stream: cu::CUstream) -> Result<()> {
    if dst == src || bytes == 0 {
        return Ok(());
    }
    ls.last_grid = 0; // a kernel behind the copy waits for the copy, and so for every kernel before
    ls.counted_last = false;
    // SAFETY: both ranges belong to the caller's device buffers of at least `bytes`.
    check(unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes as usize, stream) }, "cuMemcpyDtoDAsync")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// `as_p2p` on every rank, its transfers matched in order per pair and direction as the
    /// exchange matches them and applied to a model of every rank's buffers (piece identities,
    /// read from the inputs as they were), gives each collective's result, in place and out of
    /// place, at 2-4 ranks and every root.
    #[test]
    fn collectives_as_sends_and_receives_give_their_results() {
        const B: u64 = 16;
        let kinds = [Coll::AllGather, Coll::AlltoAll, Coll::Broadcast, Coll::Gather, Coll::Scatter];
        for coll in kinds {
            for n in 2..=4usize {
                for root in 0..n {
                    for in_place in [false, true] {
                        // Rank r's buffers: recv at base(r), room for n pieces; send elsewhere, or
                        // inside recv in NCCL's in-place form.
                        let base = |r: usize| 0x1000_0000 * (r as u64 + 1);
                        let recv = |r: usize| base(r);
                        let send = |r: usize| {
                            if !in_place {
                                return base(r) + 0x10_0000;
                            }
                            match coll {
                                Coll::AllGather => recv(r) + r as u64 * B,
                                Coll::Gather if r == root => recv(r) + r as u64 * B,
                                Coll::Scatter if r == root => recv(r) - r as u64 * B, // recv = send + root piece
                                _ => recv(r),
                            }
                        };
                        let recv_of = |r: usize| if in_place && coll == Coll::Scatter && r == root { send(r) + r as u64 * B } else { recv(r) };
                        // Inputs: piece k of rank r's send buffer is (r, k).
                        let pieces = |r: usize| match coll {
                            Coll::AlltoAll => n,
                            Coll::Scatter if r == root => n,
                            _ => 1,
                        };
                        let mut mem: HashMap<(usize, u64), (usize, usize)> = HashMap::new();
                        for r in 0..n {
                            for k in 0..pieces(r) {
                                mem.insert((r, send(r) + k as u64 * B), (r, k));
                            }
                        }
                        let before = mem.clone();
                        let ops: Vec<Vec<P2pOp>> = (0..n).map(|r| as_p2p(coll, r, n, root, (send(r), recv_of(r)), B, std::ptr::null_mut())).collect();
                        for a in 0..n {
                            for b in 0..n {
                                let sends: Vec<&P2pOp> = ops[a].iter().filter(|o| o.is_send && o.peer == b).collect();
                                let recvs: Vec<&P2pOp> = ops[b].iter().filter(|o| !o.is_send && o.peer == a).collect();
                                assert_eq!(sends.len(), recvs.len(), "{coll:?} n={n} root={root} in_place={in_place}: {a}->{b}");
                                for (s, r) in sends.iter().zip(&recvs) {
                                    assert_eq!(s.bytes, r.bytes);
                                    let v = *before.get(&(a, s.buf)).unwrap_or_else(|| panic!("{coll:?} n={n}: rank {a} sends from {:#x}, no input there", s.buf));
                                    mem.insert((b, r.buf), v);
                                }
                            }
                        }
                        let got = |r: usize, k: usize| mem.get(&(r, recv_of(r) + k as u64 * B)).copied();
                        for r in 0..n {
                            let want: Vec<(usize, (usize, usize))> = match coll {
                                Coll::AllGather => (0..n).map(|p| (p, (p, 0))).collect(),
                                Coll::AlltoAll => (0..n).map(|p| (p, (p, r))).collect(),
                                Coll::Broadcast => vec![(0, (root, 0))],
                                Coll::Gather if r == root => (0..n).map(|p| (p, (p, 0))).collect(),
                                Coll::Scatter => vec![(0, (root, r))],
                                _ => vec![],
                            };
                            for (k, v) in want {
                                assert_eq!(got(r, k), Some(v), "{coll:?} n={n} root={root} in_place={in_place}: rank {r} piece {k}");
                            }
                        }
                    }
                }
            }
        }
    }
}
