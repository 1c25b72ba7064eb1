//! ncclGroupStart/End. Group depth and the deferred work are thread-local; only the outermost End
//! acts: it runs every deferred init concurrently (one thread can create N communicators on N
//! GPUs), then the deferred operations communicator by communicator, in an order every rank shares
//! (`by_communicator`; `launch_ops`): the one-sided operations in call order, then the
//! collectives in call order (each communicator's first grouped launch carrying the small sends
//! and receives algo::group::fold_p2p takes), then each communicator's point-to-point batch of the
//! rest, then the finalizes, destroys and aborts in call order.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use crate::comm::Comm;
use crate::launch::enqueue::{exchange_ops, fold_p2p, group_launches, launch_group, launch_p2p, launch_put_group, launch_task, predict_group_us, predict_us};
use crate::comm::task::{CollTask, P2pOp};
use crate::error::{Error, Result};
use crate::gpu::cu;

/// A call queued by an open group (or run at once outside one), issued at the outermost
/// ncclGroupEnd in call order.
pub enum Deferred {
    /// A collective.
    Coll(CollTask),
    /// Point-to-point operations of one communicator in a group run as one launch (several for a
    /// group larger than a launch holds, algo::batches), after that group's collectives, or in its
    /// first grouped launch where algo::group::fold_p2p takes their pair (every rank orders them
    /// the same way, whatever order it posted).
    P2p(Arc<Comm>, P2pOp),
    /// A one-sided operation (ncclPutSignal, ncclSignal, ncclWaitSignal): runs before the group's
    /// collectives and point-to-point operations, in posting order (`launch_ops`).
    Rma(Arc<Comm>, crate::comm::rma::RmaOp),
    /// ncclCommFinalize.
    Finalize(Arc<Comm>),
    /// ncclCommDestroy, with the handle value to unregister.
    Destroy(Arc<Comm>, usize),
    /// ncclCommAbort, with the handle value to unregister.
    Abort(Arc<Comm>, usize),
}

enum InitJob {
    Rank { comm: Arc<Comm>, id: [u8; crate::bootstrap::UNIQUE_ID_BYTES] },
    Derived(DerivedJob),
    /// An existing rank's ncclCommGrow (new ranks are `Rank`s).
    Grow(crate::comm::grow::GrowJob),
}

/// A split or shrink: collective over the parent's ranks, so inside a group it runs at End,
/// concurrently with the group's other inits (one thread may split the communicators of
/// several GPUs).
pub struct DerivedJob {
    /// The communicator split or shrunk.
    pub parent: Arc<Comm>,
    /// What to make of it (color and key, or the ranks to exclude).
    pub req: crate::comm::split::Request,
    /// The child's configuration; None inherits the parent's.
    pub config: Option<crate::config::CommConfig>,
    /// Hands the outcome to the caller (the API layer registers the child and writes its handle).
    pub publish: Box<dyn FnOnce(Result<Option<Comm>>) -> Result<()> + Send>,
    /// Runs in the background: the parent shows ncclInProgress until the job ends.
    pub background: bool,
}

impl InitJob {
    /// Runs the job; a panic becomes an error (and the communicator's async state), since jobs
    /// also run on threads of their own, outside the C ABI's panic boundary.
    fn run(self) -> Result<()> {
        // The communicator whose async state must show a panic: the new one, or a background
        // split's parent (which would otherwise stay ncclInProgress).
        let shows_state = match &self {
            InitJob::Rank { comm, .. } => Some(comm.clone()),
            InitJob::Derived(j) => j.background.then(|| j.parent.clone()),
            InitJob::Grow(j) => Some(j.comm.clone()),
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_inner())).unwrap_or_else(|_| {
            let e = Error::internal("communicator initialization panicked");
            if let Some(c) = shows_state {
                // Ends the operation if the panic came before its end, else records the error.
                c.fail_operation(e.code);
                c.set_error(e.code);
            }
            Err(e)
        })
    }

    /// Whether the job runs in nonblocking mode: its communicator's config, or for a split or
    /// shrink its parent's (as in NCCL, which runs the job on the parent).
    fn nonblocking(&self) -> bool {
        match self {
            InitJob::Rank { comm, .. } => !comm.config.blocking,
            InitJob::Derived(j) => !j.parent.config.blocking,
            // NCCL runs a grow's job on the new communicator, with its config.
            InitJob::Grow(j) => !j.comm.config.blocking,
        }
    }

    fn run_inner(self) -> Result<()> {
        match self {
            InitJob::Rank { comm, id } => comm.init(&id, &crate::launch::enqueue::connect_net),
            InitJob::Derived(j) => {
                let child = crate::comm::split::run(&j.parent, &j.req, j.config, &crate::launch::enqueue::connect_net);
                let r = (j.publish)(child);
                if j.background {
                    j.parent.end_async(&r);
                }
                r
            }
            InitJob::Grow(j) => j.run(&crate::launch::enqueue::connect_net),
        }
    }
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    inits: Vec<InitJob>,
    /// ncclCommWindowRegister calls: collective, so run at End after the inits, before the ops.
    windows: Vec<crate::comm::window::WindowJob>,
    ops: Vec<Deferred>,
    /// Each communicator's streams among `ops`, in first use, for the capture rule (note_stream).
    streams: Vec<StreamUse>,
    error: Option<Error>,
}

/// A stream one communicator's operations in the open group use, with the capture it belongs to
/// once that has been asked for.
struct StreamUse {
    comm: *const Comm,
    stream: cu::CUstream,
    capture: Option<Option<u64>>,
}

impl GroupState {
    /// NCCL's rule: one communicator's operations in a group use streams that are all uncaptured
    /// or all captured into the same graph, since its launch orders them with events. A single
    /// stream asks the driver nothing; each further one asks once.
    fn note_stream(&mut self, comm: &Arc<Comm>, stream: cu::CUstream) -> Result<()> {
        let key = Arc::as_ptr(comm);
        let mut first = None;
        for (i, u) in self.streams.iter().enumerate().filter(|(_, u)| u.comm == key) {
            if u.stream == stream {
                return Ok(());
            }
            first.get_or_insert(i);
        }
        let capture = match first {
            None => None,
            Some(i) => {
                let theirs = match self.streams[i].capture {
                    Some(c) => c,
                    None => capture_of(self.streams[i].stream)?,
                };
                self.streams[i].capture = Some(theirs);
                let mine = capture_of(stream)?;
                if mine != theirs {
                    return Err(Error::invalid_usage(
                        "Streams given to a communicator within a NCCL group must either be all uncaptured or all captured by the same graph.",
                    ));
                }
                Some(mine)
            }
        };
        self.streams.push(StreamUse { comm: key, stream, capture });
        Ok(())
    }
}

/// The id of the capture `stream` belongs to, or None when it is not being captured.
fn capture_of(stream: cu::CUstream) -> Result<Option<u64>> {
    Ok(crate::gpu::stream::capture_tail(stream)?.map(|t| t.id))
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

/// ncclGroupStart: one level deeper on this thread.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// This thread's group nesting depth (0: no group open).
pub fn depth() -> usize {
    GROUP.with(|g| g.borrow().depth)
}

/// Remembers an argument error raised inside a group: End returns it and drops the group.
pub fn record_error(e: &Error) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(e.clone());
        }
    });
}

/// Keeps `item` in the open group (through `keep`), or hands it back when no group is open.
fn defer<T>(item: T, keep: impl FnOnce(&mut GroupState, T)) -> Option<T> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            keep(&mut g, item);
            None
        } else {
            Some(item)
        }
    })
}

/// Runs `f` on every item at once, one thread each (ranks of one communicator driven by one
/// thread wait for each other); returns the error that came first (`earliest_failure`).
fn run_concurrently<T: Send>(items: Vec<T>, what: &str, f: impl Fn(T) -> Result<()> + Sync) -> Result<()> {
    let f = &f;
    let results: Vec<(Result<()>, Instant)> = std::thread::scope(|s| {
        let hs: Vec<_> = items.into_iter().map(|i| s.spawn(move || (f(i), Instant::now()))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| (Err(Error::internal(format!("{what} panicked"))), Instant::now()))).collect()
    });
    earliest_failure(results, what)
}

/// The error that ended first, each with when it ended; the later ones are WARNed here (the
/// caller reports the one returned). A rank that fails makes its peers fail after it (they wait
/// for it until the bootstrap timeout, or until they see it gone), so the first failure is the
/// cause. The first in call order was often one of its consequences: a 2 x 2 job showed only a
/// peer's 300 s bootstrap timeout, and the failure behind it was never printed.
fn earliest_failure(results: Vec<(Result<()>, Instant)>, what: &str) -> Result<()> {
    let mut errs: Vec<(Error, Instant)> = results.into_iter().filter_map(|(r, t)| r.err().map(|e| (e, t))).collect();
    errs.sort_by_key(|&(_, t)| t);
    let mut errs = errs.into_iter();
    let Some((first, _)) = errs.next() else { return Ok(()) };
    for (e, _) in errs {
        nccl_warn!("{what}: another job of this group failed after the one reported: {}", e.msg);
    }
    Err(first)
}

/// Registers a window now, or at the outermost End when a group is open (where the registrations
/// of several communicators driven by one thread run concurrently, as their inits do).
pub fn submit_window(job: crate::comm::window::WindowJob) -> Result<()> {
    defer(job, |g, j| g.windows.push(j)).map_or(Ok(()), crate::comm::window::WindowJob::run)
}

/// Window registrations of a group: one communicator's in order, communicators concurrently.
fn run_windows(jobs: Vec<crate::comm::window::WindowJob>) -> Result<()> {
    let mut per: Vec<Vec<crate::comm::window::WindowJob>> = Vec::new();
    for j in jobs {
        match per.iter_mut().find(|v| Arc::ptr_eq(&v[0].comm, &j.comm)) {
            Some(v) => v.push(j),
            None => per.push(vec![j]),
        }
    }
    run_concurrently(per, "window registration", |v| v.into_iter().try_for_each(crate::comm::window::WindowJob::run))
}

/// Runs an operation now, or defers it to the outermost End when a group is open.
pub fn submit(op: Deferred) -> Result<()> {
    crate::diag::hostprof::mark(crate::diag::hostprof::Stage::Validate);
    if let Some((comm, stream)) = op_stream(&op) {
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth > 0 {
                g.note_stream(comm, stream)
            } else {
                Ok(())
            }
        })?;
    }
    match defer(op, |g, op| g.ops.push(op)) {
        None => Ok(()),
        Some(Deferred::Coll(t)) => {
            // Outside a group the agreement check runs here; a group's End checks all its
            // collectives first (check_agreement) and must not check them twice.
            t.comm.agree(&t)?;
            if crate::launch::checksum::wanted(std::iter::once((&t.comm, t.stream))) {
                return end_checksummed(vec![Deferred::Coll(t)], None);
            }
            launch_task(&t)
        }
        Some(op @ Deferred::P2p(..)) if crate::launch::checksum::wanted(op_stream(&op).into_iter()) => end_checksummed(vec![op], None),
        Some(op) => run(op),
    }
}

/// Initialises a communicator now, or at the outermost End when a group is open.
pub fn submit_init(comm: Arc<Comm>, id: [u8; crate::bootstrap::UNIQUE_ID_BYTES]) -> Result<()> {
    submit_job(InitJob::Rank { comm, id })
}

/// Runs a split or shrink now, or at the outermost End when a group is open.
/// As in NCCL, a nonblocking parent's split outside a group returns at once (ncclSuccess) and the
/// caller's handle is written when the child is ready; the parent reports ncclInProgress meanwhile.
pub fn submit_derived(job: DerivedJob) -> Result<()> {
    if depth() == 0 && !job.parent.config.blocking {
        return spawn_inits(vec![InitJob::Derived(job)]);
    }
    submit_job(InitJob::Derived(job))
}

fn submit_job(job: InitJob) -> Result<()> {
    defer(job, |g, j| g.inits.push(j)).map_or(Ok(()), InitJob::run)
}

/// Runs an existing rank's ncclCommGrow now, or at the outermost End when a group is open.
pub fn submit_grow(job: crate::comm::grow::GrowJob) -> Result<()> {
    submit_job(InitJob::Grow(job))
}

/// Runs a nonblocking grow on a background thread; the new communicator's state stays
/// InProgress until that ends.
pub fn grow_in_background(job: crate::comm::grow::GrowJob) -> Result<()> {
    spawn_inits(vec![InitJob::Grow(job)])
}

/// Initialises a nonblocking communicator on a background thread; its state stays InProgress
/// until that ends.
pub fn init_in_background(comm: Arc<Comm>, id: [u8; crate::bootstrap::UNIQUE_ID_BYTES]) -> Result<()> {
    spawn_inits(vec![InitJob::Rank { comm, id }])
}

fn spawn_inits(mut jobs: Vec<InitJob>) -> Result<()> {
    // Background splits mark their parents ncclInProgress first; if the jobs never start, the
    // parents go back to ncclSuccess (nothing was done to them) and the caller gets the error.
    let undo = |jobs: &[InitJob]| {
        for j in jobs {
            if let InitJob::Derived(d) = j {
                d.parent.end_async(&Ok(()));
            }
        }
    };
    for i in 0..jobs.len() {
        if let InitJob::Derived(d) = &mut jobs[i] {
            if let Err(e) = d.parent.begin_async() {
                // E.g. two splits of one parent in one nonblocking group.
                undo(&jobs[..i]);
                return Err(e);
            }
            d.background = true;
        }
    }
    let parents: Vec<Arc<Comm>> = jobs
        .iter()
        .filter_map(|j| match j {
            InitJob::Derived(d) => Some(d.parent.clone()),
            InitJob::Rank { .. } | InitJob::Grow(_) => None,
        })
        .collect();
    std::thread::Builder::new()
        .name("oxccl-init".into())
        .spawn(move || {
            // Failures are in each communicator's async state (ncclCommGetAsyncError); the
            // first is WARNed here (run_concurrently WARNs the others), as End would.
            if let Err(e) = run_inits(jobs) {
                crate::log::warn_error(&e.context("nonblocking communicator initialization"));
            }
        })
        .map(|_| ())
        .map_err(|e| {
            for p in &parents {
                p.end_async(&Ok(()));
            }
            Error::io("cannot start a background init thread", &e)
        })
}


/// ncclGroupEnd: closes a level; the outermost issues the group (`ncclGroupEnd`'s doc says how).
pub fn end() -> Result<()> {
    let Some(mut state) = close()? else { return Ok(()) };
    if let Some(e) = state.error {
        return Err(e);
    }
    // A group of nonblocking inits and nothing else completes in the background, as in NCCL:
    // End returns ncclInProgress and each communicator reports its own progress.
    if !state.inits.is_empty() && state.ops.is_empty() && state.windows.is_empty() && state.inits.iter().all(InitJob::nonblocking) {
        spawn_inits(state.inits)?;
        return Err(Error::in_progress());
    }
    let mut first_err = run_inits(state.inits).err();
    if first_err.is_none() && !state.windows.is_empty() {
        first_err = run_windows(state.windows).err();
    }
    // Communicator by communicator, in an order every rank shares (`by_communicator`). Work for a
    // communicator still initialising fails here, as its launch would: were it to become ready
    // before its launch, it would run out of the order the other ranks use.
    let mut unready = None;
    state.ops = by_communicator(refuse_unready(state.ops, &mut unready), comm_order_key);
    if let Err(e) = check_completion_events(&state.ops) {
        return Err(drop_work(state.ops, e));
    }
    if first_err.is_none() {
        // OXCCL_CHECK: a disagreement drops the group's work before anything is launched.
        if let Err(e) = check_agreement(&state.ops) {
            return Err(drop_work(std::mem::take(&mut state.ops), e));
        }
        if crate::launch::checksum::wanted(state.ops.iter().filter_map(op_stream)) {
            return end_checksummed(state.ops, unready);
        }
    }
    // The first error is the init's or window's, else the refused operations', else a launch's.
    let set_up_err = first_err.take().or(unready);
    let streams_per_comm = multi_stream_comms(&state.ops);
    // On an error the launches still go ahead (as after a failed launch): the peers wait for them.
    if let Err(e) = fork_streams(&streams_per_comm) {
        first_err.get_or_insert(e);
    }
    if per_set_threads(&state.ops, handshake_may_wait) {
        let r = run_concurrently(split_by_stream_set(state.ops), "group launch", |ops| {
            let mut err = None;
            launch_ops(ops, &mut err);
            err.map_or(Ok(()), Err)
        });
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    } else {
        launch_ops(state.ops, &mut first_err);
    }
    // Even after an error: a grouped launch (launch_grouped) on one stream may have written
    // the outputs of operations posted on the others, which must not run ahead of it.
    if let Err(e) = join_streams(streams_per_comm) {
        first_err.get_or_insert(e);
    }
    set_up_err.or(first_err).map_or(Ok(()), Err)
}

/// A group refused before anything launched (`why`): none of its collectives, sends, receives or
/// one-sided operations run, as in NCCL, but its finalizes, destroys and aborts still do, so no
/// communicator handle the application gave up is left alive. Returns `why`.
fn drop_work(ops: Vec<Deferred>, why: Error) -> Error {
    let teardown: Vec<Deferred> = ops.into_iter().filter(|op| matches!(op, Deferred::Finalize(..) | Deferred::Destroy(..) | Deferred::Abort(..))).collect();
    let mut err = None;
    launch_ops(teardown, &mut err);
    if let Some(e) = err {
        crate::log::warn_error(&e.context("teardown in a refused group"));
    }
    why
}

/// NCCL 2.32.3's ncclValidateCollConfigLaunchCompletionEvents: at most one collective of a
/// communicator in a group may carry a launchCompletionEvent (ncclCollConfig_t); more is
/// ncclInvalidUsage, before anything of the group launches.
fn check_completion_events(ops: &[Deferred]) -> Result<()> {
    let mut seen: Vec<&Arc<Comm>> = Vec::new();
    for op in ops {
        if let Deferred::Coll(t) = op {
            if t.config.as_deref().is_some_and(|c| c.event != 0) {
                if seen.iter().any(|c| Arc::ptr_eq(c, &t.comm)) {
                    return Err(Error::invalid_usage("Only one launch-completion event may be provided in one NCCL group"));
                }
                seen.push(&t.comm);
            }
        }
    }
    Ok(())
}

/// Runs a group's operations: its one-sided operations in posting order first (NCCL 2.30.7's
/// ncclLaunchPrepare schedules a group's RMA plans before the others, src/enqueue.cc, so a put a
/// peer waits for never sits behind this rank's collectives), then its collectives in order,
/// each communicator's point-to-point operations as one launch (or several,
/// enqueue::launch_p2p) after its collectives, then its finalizes, destroys and aborts in posting
/// order, after the work they end; notes the first error and goes on (the peers wait for the
/// rest). Consecutive collectives of one communicator launch together where algo::group says so,
/// as NCCL runs a group's collectives in one launch, and the communicator's first grouped launch
/// carries the sends and receives of the pairs algo::group::fold_p2p takes; within a group no
/// operation may read another's output, as in NCCL. Only collectives cut each other's runs: a
/// rank posts its own sends, receives and one-sided operations, at places of its own in the
/// group, and were those to cut the runs, ranks would group the same collectives differently and
/// wait on each other forever.
fn launch_ops(ops: Vec<Deferred>, first_err: &mut Option<Error>) {
    let Split { one_sided, colls, p2p, teardown } = Split::of(ops);
    let mut p2p = P2pLists { ops: p2p, offered: Vec::new() };
    for op in one_sided {
        if let Err(e) = run(op) {
            first_err.get_or_insert(e);
        }
    }
    let mut grouped: Vec<CollTask> = Vec::new();
    for t in colls {
        if grouped.first().is_some_and(|f| !Arc::ptr_eq(&f.comm, &t.comm)) {
            launch_grouped(std::mem::take(&mut grouped), &mut p2p, first_err);
        }
        grouped.push(t);
    }
    launch_grouped(grouped, &mut p2p, first_err);
    for (c, ops) in &p2p.ops {
        if let Err(e) = launch_p2p(c, ops) {
            first_err.get_or_insert(e);
        }
    }
    for op in teardown {
        if let Err(e) = run(op) {
            first_err.get_or_insert(e);
        }
    }
}

/// A group's operations by what `launch_ops` runs one after another, each in posting order.
struct Split {
    one_sided: Vec<Deferred>,
    colls: Vec<CollTask>,
    /// Per communicator (push_p2p).
    p2p: Vec<(Arc<Comm>, Vec<P2pOp>)>,
    /// Finalizes, destroys and aborts.
    teardown: Vec<Deferred>,
}

impl Split {
    fn of(ops: Vec<Deferred>) -> Split {
        let mut s = Split { one_sided: Vec::new(), colls: Vec::with_capacity(ops.len()), p2p: Vec::new(), teardown: Vec::new() };
        for op in ops {
            match op {
                Deferred::P2p(c, o) => push_p2p(&mut s.p2p, c, o),
                Deferred::Coll(t) => s.colls.push(t),
                op @ Deferred::Rma(..) => s.one_sided.push(op),
                other => s.teardown.push(other),
            }
        }
        s
    }
}

/// A group's point-to-point operations per communicator (those not yet launched), and the
/// communicators whose first grouped launch has been offered them (`launch_grouped`).
#[derive(Default)]
struct P2pLists {
    ops: Vec<(Arc<Comm>, Vec<P2pOp>)>,
    offered: Vec<Arc<Comm>>,
}

/// Consecutive collectives of one communicator, grouped into launches as algo::group
/// says. The communicator's first grouped launch of the group also carries its sends and
/// receives that algo::group::fold_p2p lets travel there; the rest stay in `p2p`.
fn launch_grouped(tasks: Vec<CollTask>, p2p: &mut P2pLists, first_err: &mut Option<Error>) {
    let parts = group_launches(&tasks);
    // Lone non-reducing collectives, where two or more of them are, go with the communicator's
    // sends and receives as one exchange launch (or as few as it holds) instead of one launch
    // each, as NCCL runs a group's collectives in one kernel. All ranks group alike, so they
    // agree on which go.
    let mut exchanged: Vec<Option<Vec<P2pOp>>> = parts.iter().map(|(p, _)| if p.len() == 1 { exchange_ops(&tasks[p.start]) } else { None }).collect();
    if exchanged.iter().filter(|e| e.is_some()).count() < 2 {
        exchanged.iter_mut().for_each(|e| *e = None);
    }
    let mut moved = Vec::new();
    for ((part, puts), ex) in parts.into_iter().zip(exchanged) {
        if let Some(ops) = ex {
            moved.extend(ops);
            continue;
        }
        let r = if puts {
            // Put-based reductions: no packets, so no sends or receives fold into them.
            launch_put_group(&tasks[part])
        } else if part.len() > 1 {
            let comm = &tasks[part.start].comm;
            let mut folded = Vec::new();
            if !p2p.offered.iter().any(|c| Arc::ptr_eq(c, comm)) {
                p2p.offered.push(comm.clone());
                if let Some((_, ops)) = p2p.ops.iter_mut().find(|(c, _)| Arc::ptr_eq(c, comm)) {
                    let fold = fold_p2p(&tasks[part.clone()], ops);
                    if fold.iter().any(Option::is_some) {
                        let mut keep = Vec::new();
                        for (o, f) in ops.drain(..).zip(fold) {
                            match f {
                                Some(first_packet) => folded.push((o, first_packet)),
                                None => keep.push(o),
                            }
                        }
                        *ops = keep;
                    }
                }
            }
            launch_group(&tasks[part], &folded)
        } else {
            launch_task(&tasks[part.start])
        };
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    // After the grouped launches, which fold only the application's own sends and receives:
    // the k-th transfer of a pair and direction is the k-th on both ends.
    if let Some(first) = tasks.first() {
        for o in moved {
            push_p2p(&mut p2p.ops, first.comm.clone(), o);
        }
    }
}

/// Whether a group's launches run on several threads: one per set of communicators that share
/// streams (`stream_sets`; one communicator each where none do). A launch on the copy-engine
/// direct path handshakes on the calling thread by default, waiting on the host for its peers'
/// matching launches (transport::ce_direct). Two processes that each drive several ranks
/// (nccl-tests `-g 2` under mpirun) and launched their communicators one after another would
/// then wait for each other in a cycle: rank 0 for rank 3, whose process is in rank 2's launch,
/// which waits for rank 1, launched after rank 0. So where two or more communicators have
/// operations and one of them may wait (`may_wait`: the communicator and an operation's largest
/// byte count), each communicator's operations run in order on a thread of their own. Else in
/// one thread, as NCCL launches them: threads cost a small group more than its launches.
/// Communicators that share a stream stay on one thread, in the group's order (by_communicator):
/// threads would put their kernels on it in an order that differs from rank to rank, and a rank
/// whose stream runs communicator A's kernel first then waits forever for a peer whose stream
/// runs B's first (two processes, an AllReduce on one communicator and a ReduceScatter on another
/// in one group on one stream: a hang the conformance fuzzer found). But one thread for all of a
/// process's ranks would bring back the cycle above where each rank's stream carries two
/// communicators (2 processes x 2 ranks, communicators A and B on every rank's stream, under the
/// zero CTA policy's handshakes at every size): so one thread per set of communicators joined by
/// shared streams, each launching A before B as every rank does.
fn per_set_threads(ops: &[Deferred], may_wait: impl Fn(&Arc<Comm>, u64) -> bool) -> bool {
    let launches = || {
        ops.iter().filter_map(|op| match op {
            // An upper bound of any one transfer: the whole of the larger buffer.
            Deferred::Coll(t) => Some((&t.comm, t.count.saturating_mul(t.dtype.size() as u64).saturating_mul(t.comm.nranks.max(1) as u64))),
            Deferred::P2p(c, o) => Some((c, o.bytes)),
            _ => None,
        })
    };
    // Pointer comparisons first: most groups hold one communicator, and ask no more.
    let Some((first, _)) = launches().next() else { return false };
    launches().any(|(c, _)| !Arc::ptr_eq(c, first)) && launches().any(|(c, bytes)| may_wait(c, bytes)) && stream_sets(ops).iter().any(|&k| k > 0)
}

/// Each operation's set (numbered from 0 in first-use order): communicators are in one set where
/// operations of two of them share a stream, directly or through others. Streams are told apart
/// by device too: the NULL, legacy and per-thread handles name a stream of each device.
fn stream_sets(ops: &[Deferred]) -> Vec<usize> {
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    // Communicators in first-use order, a union-find over them, and each stream's first user.
    let mut comms: Vec<&Arc<Comm>> = Vec::new();
    let mut parent: Vec<usize> = Vec::new();
    let mut streams: Vec<((i32, cu::CUstream), usize)> = Vec::new();
    let mut of_op = Vec::with_capacity(ops.len());
    for op in ops {
        let c = deferred_comm(op);
        let i = comms.iter().position(|x| Arc::ptr_eq(x, c)).unwrap_or_else(|| {
            comms.push(c);
            parent.push(parent.len());
            comms.len() - 1
        });
        if let Some((c, st)) = op_stream(op) {
            match streams.iter().find(|(k, _)| *k == (c.device, st)) {
                Some(&(_, j)) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => streams.push(((c.device, st), i)),
            }
        }
        of_op.push(i);
    }
    // Sets numbered by their first communicator's first use.
    let mut number: Vec<Option<usize>> = vec![None; comms.len()];
    let mut next = 0;
    let mut out = Vec::with_capacity(of_op.len());
    for i in of_op {
        let r = root(&mut parent, i);
        out.push(*number[r].get_or_insert_with(|| {
            next += 1;
            next - 1
        }));
    }
    out
}

/// A group's operations by `stream_sets`, each list in the group's order.
fn split_by_stream_set(ops: Vec<Deferred>) -> Vec<Vec<Deferred>> {
    let sets = stream_sets(&ops);
    let mut out: Vec<Vec<Deferred>> = Vec::new();
    for (op, k) in ops.into_iter().zip(sets) {
        if out.len() <= k {
            out.resize_with(k + 1, Vec::new);
        }
        out[k].push(op);
    }
    out
}

/// Whether a launch of `bytes` on `comm` may wait on the host for its peers: the communicator
/// has copy-engine direct links handshaking on the calling thread, and the size reaches the
/// path's smallest threshold.
fn handshake_may_wait(comm: &Arc<Comm>, bytes: u64) -> bool {
    let Ok(r) = comm.ready() else { return false };
    let min = crate::algo::ce_direct::min_bytes(&r.tuning);
    r.ce.as_ref().is_some_and(|ce| !ce.is_async()) && min > 0 && bytes >= min
}

/// A group's operations with each communicator's together, in the group's order, and the
/// communicators ordered by `key` (the same on every rank of a communicator); ties (the ranks of
/// one communicator that this process drives, a communicator not yet ready) keep first-use order.
///
/// Launches on one stream run in the order they are issued, and a kernel waits for its peers'
/// kernels of the same communicator. Ranks that interleave the same communicators' operations
/// differently within a group (rank 0 posts on A then B, rank 1 on B then A; nothing forbids it)
/// would otherwise issue A's launch first on one GPU and B's first on the other, and each would
/// wait for a kernel queued behind the other's: a hang the conformance fuzzer found (one process
/// driving 2 ranks, point-to-point groups on two communicators sharing each rank's stream, 2 x
/// H200, 2026-11-30). A total order shared by all ranks, collectives (with the sends and
/// receives folded into their grouped launch) before the other point-to-point operations as
/// `launch_ops` runs them, leaves no cycle. NCCL orders a group's communicators the same way:
/// ncclGroupCommJoin (src/group.cc, 2.28) keeps a process's ranks of one communicator adjacent
/// and sorts the rest by commHash.
fn by_communicator(ops: Vec<Deferred>, key: impl Fn(&Arc<Comm>) -> u64) -> Vec<Deferred> {
    // Most groups hold one communicator: nothing to order, nothing to allocate.
    let one = ops.first().is_none_or(|f| ops.iter().all(|op| Arc::ptr_eq(deferred_comm(op), deferred_comm(f))));
    if one {
        return ops;
    }
    let mut parts: Vec<(u64, Vec<Deferred>)> = split_by_comm(ops).into_iter().map(|v| (v.first().map_or(0, |op| key(deferred_comm(op))), v)).collect();
    // Stable: equal keys keep first-use order.
    parts.sort_by_key(|(k, _)| *k);
    parts.into_iter().flat_map(|(_, v)| v).collect()
}

/// The group's operations without the collectives and point-to-point operations of communicators
/// that are not ready (a nonblocking init still running, or one that failed), whose error is kept
/// in `first_err` (the first one only). Finalize, destroy and abort stay: they act on any state.
fn refuse_unready(ops: Vec<Deferred>, first_err: &mut Option<Error>) -> Vec<Deferred> {
    ops.into_iter()
        .filter(|op| match op {
            Deferred::Coll(_) | Deferred::P2p(..) | Deferred::Rma(..) => match deferred_comm(op).ready() {
                Ok(_) => true,
                Err(e) => {
                    first_err.get_or_insert(e);
                    false
                }
            },
            _ => true,
        })
        .collect()
}

/// `by_communicator`'s key: Ready::key (a hash of the communicator's bootstrap secret and its
/// ranks' addresses, equal on every rank); u64::MAX for a communicator not ready.
fn comm_order_key(c: &Arc<Comm>) -> u64 {
    c.ready().map_or(u64::MAX, |r| r.key)
}

/// The communicator a deferred operation belongs to.
fn deferred_comm(op: &Deferred) -> &Arc<Comm> {
    match op {
        Deferred::Coll(t) => &t.comm,
        Deferred::P2p(c, _) | Deferred::Rma(c, _) | Deferred::Finalize(c) | Deferred::Destroy(c, _) | Deferred::Abort(c, _) => c,
    }
}

/// A group's operations by communicator, each list in the group's order, communicators in
/// first-use order.
fn split_by_comm(ops: Vec<Deferred>) -> Vec<Vec<Deferred>> {
    let mut out: Vec<(Arc<Comm>, Vec<Deferred>)> = Vec::new();
    for op in ops {
        let comm = deferred_comm(&op).clone();
        match out.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &comm)) {
            Some((_, v)) => v.push(op),
            None => out.push((comm, vec![op])),
        }
    }
    out.into_iter().map(|(_, v)| v).collect()
}

/// Adds a point-to-point operation to its communicator's batch (one launch per communicator, or
/// several where the batch is larger than a launch holds: enqueue::launch_p2p).
fn push_p2p(p2p: &mut Vec<(Arc<Comm>, Vec<P2pOp>)>, c: Arc<Comm>, o: P2pOp) {
    match p2p.iter_mut().find(|(x, _)| Arc::ptr_eq(x, &c)) {
        Some((_, v)) => v.push(o),
        None => p2p.push((c, vec![o])),
    }
}

/// The communicator and stream of a collective or point-to-point operation.
fn op_stream(op: &Deferred) -> Option<(&Arc<Comm>, cu::CUstream)> {
    match op {
        Deferred::Coll(t) => Some((&t.comm, t.stream)),
        Deferred::P2p(c, o) => Some((c, o.stream)),
        Deferred::Rma(c, o) => Some((c, o.stream)),
        _ => None,
    }
}

/// A group's operations under OXCCL_CHECKSUM (src/launch/checksum.rs), in `launch_ops`' order:
/// the one-sided operations, then the collectives in waves, wave k holding the k-th collective
/// of every communicator (so a collective that reads what an earlier one of the same group wrote
/// is hashed after that one ran, and one thread driving every rank launches each wave's
/// collectives of all of them before waiting), then the point-to-point batches as the last wave,
/// then the finalizes, destroys and aborts. Inputs are hashed before a wave, outputs after it,
/// and the ranks compare at the end.
fn end_checksummed(ops: Vec<Deferred>, mut first_err: Option<Error>) -> Result<()> {
    let streams_per_comm = multi_stream_comms(&ops);
    if let Err(e) = fork_streams(&streams_per_comm) {
        first_err.get_or_insert(e);
    }
    let mut s = crate::launch::checksum::Session::default();
    let Split { one_sided, colls: in_order, p2p, teardown } = Split::of(ops);
    let mut colls: Vec<(Arc<Comm>, std::collections::VecDeque<CollTask>)> = Vec::new();
    for t in in_order {
        match colls.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &t.comm)) {
            Some((_, q)) => q.push_back(t),
            None => colls.push((t.comm.clone(), std::collections::VecDeque::from([t]))),
        }
    }
    let note = |r: Result<()>, first_err: &mut Option<Error>| {
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    };
    let flush = |wave: &mut Vec<CollTask>, s: &mut crate::launch::checksum::Session, first_err: &mut Option<Error>| {
        if wave.is_empty() {
            return;
        }
        wave.iter().for_each(|t| s.before_coll(t));
        for t in wave.drain(..) {
            if let Err(e) = launch_task(&t) {
                first_err.get_or_insert(e);
            }
        }
        s.after_wave();
    };
    for op in one_sided {
        note(run(op), &mut first_err);
    }
    loop {
        let mut wave: Vec<CollTask> = colls.iter_mut().filter_map(|(_, q)| q.pop_front()).collect();
        if wave.is_empty() {
            break;
        }
        flush(&mut wave, &mut s, &mut first_err);
    }
    if !p2p.is_empty() {
        p2p.iter().for_each(|(c, ops)| s.before_p2p(c, ops));
        for (c, ops) in &p2p {
            note(launch_p2p(c, ops), &mut first_err);
        }
        s.after_wave();
    }
    for op in teardown {
        note(run(op), &mut first_err);
    }
    if first_err.is_none() {
        note(join_streams(streams_per_comm), &mut first_err);
    }
    // Compared even after a launch error: the peers wait for this rank's hashes.
    note(s.finish(), &mut first_err);
    first_err.map_or(Ok(()), Err)
}

/// ncclGroupSimulateEnd: closes the group like End (running its inits), launches nothing, and
/// returns the predicted time of its collectives in microseconds (algo::cost), a grouped launch
/// predicted as the one launch it is. Point-to-point operations are not predicted.
pub fn simulate_end() -> Result<f64> {
    let Some(state) = close()? else { return Ok(0.0) };
    if let Some(e) = state.error {
        return Err(e);
    }
    run_inits(state.inits)?;
    // Launches as `launch_ops` makes them: consecutive groupable collectives of one communicator
    // as algo::group cuts them, each grouped launch one prediction.
    let mut us = 0.0;
    let mut grouped: Vec<CollTask> = Vec::new();
    let flush = |grouped: &mut Vec<CollTask>, us: &mut f64| -> Result<()> {
        let tasks = std::mem::take(grouped);
        for (part, puts) in group_launches(&tasks) {
            *us += if puts {
                // Lone plans back to back in one launch: predicted as their lone times (the launches
                // it saves are not modelled).
                tasks[part].iter().map(predict_us).sum::<Result<f64>>()?
            } else if part.len() > 1 {
                predict_group_us(&tasks[part])
            } else {
                predict_us(&tasks[part.start])?
            };
        }
        Ok(())
    };
    // Nothing but collectives cuts a run of collectives (`launch_ops`).
    for op in &state.ops {
        if let Deferred::Coll(t) = op {
            if grouped.first().is_some_and(|f| !Arc::ptr_eq(&f.comm, &t.comm)) {
                flush(&mut grouped, &mut us)?;
            }
            grouped.push(t.clone());
        }
    }
    flush(&mut grouped, &mut us)?;
    Ok(us)
}

/// Leaves one group level; returns the group's work when the outermost level closes.
fn close() -> Result<Option<GroupState>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.depth {
            0 => Err(Error::invalid_usage("not in a group call")),
            1 => {
                g.depth = 0;
                Ok(Some(std::mem::take(&mut *g)))
            }
            _ => {
                g.depth -= 1;
                Ok(None)
            }
        }
    })
}

/// OXCCL_CHECK for a group's collectives: per communicator in group order, communicators
/// concurrently (one thread may drive every rank of a communicator).
fn check_agreement(ops: &[Deferred]) -> Result<()> {
    let mut per: Vec<(&Arc<Comm>, Vec<&CollTask>)> = Vec::new();
    for op in ops {
        if let Deferred::Coll(t) = op {
            if !t.comm.checks_agreement() {
                continue;
            }
            match per.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &t.comm)) {
                Some((_, v)) => v.push(t),
                None => per.push((&t.comm, vec![t])),
            }
        }
    }
    let agree_all = |(c, ts): &(&Arc<Comm>, Vec<&CollTask>)| ts.iter().try_for_each(|t| c.agree(t));
    match per.len() {
        0 => Ok(()),
        1 => agree_all(&per[0]),
        _ => run_concurrently(per.iter().collect(), "OXCCL_CHECK", agree_all),
    }
}

/// Runs one deferred operation (a group's collectives were agreement-checked at its End).
fn run(op: Deferred) -> Result<()> {
    match op {
        Deferred::Coll(t) => launch_task(&t),
        Deferred::P2p(c, o) => launch_p2p(&c, &[o]),
        Deferred::Rma(c, o) => crate::launch::enqueue::launch_rma(&c, &o),
        Deferred::Finalize(c) => c.finalize(),
        Deferred::Destroy(c, handle) => {
            let r = c.destroy();
            crate::comm::unregister(handle);
            r
        }
        Deferred::Abort(c, handle) => {
            c.abort();
            crate::comm::unregister(handle);
            Ok(())
        }
    }
}

fn run_inits(jobs: Vec<InitJob>) -> Result<()> {
    match jobs.len() {
        0 => Ok(()),
        1 => jobs.into_iter().try_for_each(InitJob::run),
        // Ranks of one communicator wait for each other during init: run them concurrently.
        _ => run_concurrently(jobs, "communicator init", InitJob::run),
    }
}

/// Communicators whose group operations (collectives and point-to-point) used more than one
/// stream, with those streams in order.
fn multi_stream_comms(ops: &[Deferred]) -> Vec<(Arc<Comm>, Vec<cu::CUstream>)> {
    let mut out: Vec<(Arc<Comm>, Vec<cu::CUstream>)> = Vec::new();
    for (comm, stream) in ops.iter().filter_map(op_stream) {
        match out.iter_mut().find(|(c, _)| Arc::ptr_eq(c, comm)) {
            Some((_, ss)) => {
                if !ss.contains(&stream) {
                    ss.push(stream);
                }
            }
            None => out.push((comm.clone(), vec![stream])),
        }
    }
    out.retain(|(_, ss)| ss.len() > 1);
    out
}

/// Before a group's launches, every stream a communicator uses in it waits for what all the
/// others hold, as NCCL's one launch per group does: the group's first kernel (whichever stream
/// it is on) comes after all of them, and the later ones follow it (enqueue::with_launch).
fn fork_streams(comms: &[(Arc<Comm>, Vec<cu::CUstream>)]) -> Result<()> {
    for (comm, streams) in comms {
        let Some((&first, rest)) = streams.split_first() else { continue };
        let r = comm.ready()?;
        let _ctx = crate::gpu::CtxGuard::new(r.dev)?;
        let ls = r.launch.lock();
        for &s in rest {
            ls.join.record(s)?;
            ls.join.wait_on(first)?;
        }
        ls.join.record(first)?;
        for &s in rest {
            ls.join.wait_on(s)?;
        }
    }
    Ok(())
}

/// After a group, every stream a communicator used waits for all of that communicator's work
/// (note_stream made sure that events can join them: all uncaptured, or all in one capture).
fn join_streams(comms: Vec<(Arc<Comm>, Vec<cu::CUstream>)>) -> Result<()> {
    for (comm, streams) in comms {
        let r = comm.ready()?;
        let _ctx = crate::gpu::CtxGuard::new(r.dev)?;
        let ls = r.launch.lock();
        // ls.done already marks the last launch, which was on `last`.
        let Some(last) = ls.last_stream else { continue };
        for s in streams.into_iter().filter(|&s| s != last) {
            ls.done.wait_on(s)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    /// A group's jobs that fail report the failure that came first, not the first job's: there a
    /// rank's init failed at once and its peer in the same process (the first job) timed out
    /// waiting for it, and only the timeout was reported.
    #[test]
    fn concurrent_jobs_report_the_failure_that_came_first() {
        let r = run_concurrently(vec![0u64, 1, 2], "test job", |i| match i {
            0 => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                Err(Error::system("a consequence (timed out waiting for a peer)"))
            }
            1 => Err(Error::internal("the cause")),
            _ => Ok(()),
        });
        assert_eq!(r.expect_err("failed").msg, "the cause");
        let t0 = Instant::now();
        let later = |ms| t0 + std::time::Duration::from_millis(ms);
        let r = earliest_failure(vec![(Ok(()), t0), (Err(Error::system("late")), later(9)), (Err(Error::system("early")), later(2))], "test");
        assert_eq!(r.expect_err("failed").msg, "early");
        assert!(earliest_failure(vec![(Ok(()), t0), (Ok(()), later(1))], "test").is_ok());
    }

    /// The background path of nonblocking init: the state is InProgress at first and ends as the
    /// init's outcome (on a machine without a GPU, the CUDA error).
    #[test]
    fn background_init_reports_through_the_async_state() {
        let cfg = crate::config::CommConfig { blocking: false, ..Default::default() };
        let c = Arc::new(Comm::new(0, 1, 0, cfg));
        assert_eq!(c.async_state(), ResultCode::InProgress);
        let id = crate::bootstrap::get_unique_id().expect("unique id");
        init_in_background(c.clone(), id).expect("spawn");
        let t0 = std::time::Instant::now();
        while c.async_state() == ResultCode::InProgress {
            assert!(t0.elapsed() < std::time::Duration::from_secs(60), "background init never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let end = c.async_state();
        assert!(end == ResultCode::Success || end == ResultCode::SystemError || end == ResultCode::UnhandledCudaError, "{end:?}");
        assert_eq!(c.ready().is_ok(), end == ResultCode::Success);
    }

    #[test]
    fn a_group_of_nonblocking_inits_returns_in_progress() {
        let cfg = crate::config::CommConfig { blocking: false, ..Default::default() };
        let c = Arc::new(Comm::new(0, 1, 0, cfg));
        let id = crate::bootstrap::get_unique_id().expect("unique id");
        start();
        submit_init(c.clone(), id).expect("deferred");
        assert_eq!(end().unwrap_err().code, ResultCode::InProgress);
        let t0 = std::time::Instant::now();
        while c.async_state() == ResultCode::InProgress {
            assert!(t0.elapsed() < std::time::Duration::from_secs(60), "background init never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The capture rule costs a group on one stream per communicator nothing: no driver call
    /// (there is no driver here, so a call would fail the test), one entry per communicator.
    #[test]
    fn one_stream_per_communicator_asks_the_driver_nothing() {
        let cfg = crate::config::CommConfig::default();
        let (a, b) = (Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 0, cfg)));
        let (sa, sb) = (0x1000 as cu::CUstream, 0x2000 as cu::CUstream);
        let mut g = GroupState::default();
        for _ in 0..3 {
            g.note_stream(&a, sa).expect("first stream of a");
            g.note_stream(&b, sb).expect("first stream of b");
        }
        assert_eq!(g.streams.len(), 2);
        assert!(g.streams.iter().all(|u| u.capture.is_none()), "no capture was asked for");
    }

    /// Every communicator whose group operations use several streams, collectives and
    /// point-to-point alike (the group orders all of them), streams in first-use order.
    #[test]
    fn multi_stream_comms_counts_point_to_point_streams() {
        let cfg = crate::config::CommConfig::default();
        let (a, b) = (Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 0, cfg)));
        let s = |x: usize| x as cu::CUstream;
        let coll = |c: &Arc<Comm>, st| {
            let op = crate::types::ResolvedOp { op: crate::types::RedOp::Sum, scalar: 0, scalar_ptr: 0 };
            Deferred::Coll(CollTask { comm: c.clone(), coll: crate::types::Coll::AllReduce, send: 0, recv: 0, count: 1, dtype: crate::types::DataType::Float32, op, root: 0, stream: st, config: None })
        };
        let p2p = |c: &Arc<Comm>, st| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes: 4, stream: st });
        // a: a collective on 0x10, then sends on 0x20 and 0x10; b: everything on 0x30.
        let ops = vec![coll(&a, s(0x10)), coll(&b, s(0x30)), p2p(&a, s(0x20)), p2p(&b, s(0x30)), p2p(&a, s(0x10))];
        let got = multi_stream_comms(&ops);
        assert_eq!(got.len(), 1, "only a uses more than one stream");
        assert!(Arc::ptr_eq(&got[0].0, &a));
        assert_eq!(got[0].1, vec![s(0x10), s(0x20)]);
    }

    /// Several communicators' launches go one thread each only where one of them may wait on the
    /// host for its peers (a copy-engine direct handshake); one communicator never.
    /// `launch_ops`' order: a one-sided call or a finalize posted between two collectives does
    /// not separate them (ranks post those at places of their own), one-sided calls come first
    /// and teardown last, each kind in posting order.
    #[test]
    fn a_group_splits_into_one_sided_collectives_point_to_point_and_teardown() {
        let cfg = crate::config::CommConfig::default();
        let (a, b) = (Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 0, cfg)));
        let coll = |c: &Arc<Comm>, count| {
            let op = crate::types::ResolvedOp { op: crate::types::RedOp::Sum, scalar: 0, scalar_ptr: 0 };
            Deferred::Coll(CollTask { comm: c.clone(), coll: crate::types::Coll::AllGather, send: 0, recv: 0, count, dtype: crate::types::DataType::Float32, op, root: 0, stream: std::ptr::null_mut(), config: None })
        };
        let signal = |c: &Arc<Comm>, sig| Deferred::Rma(c.clone(), crate::comm::rma::RmaOp { kind: crate::comm::rma::RmaKind::Signal { peer: 1, ctx: 0, sig }, stream: std::ptr::null_mut() });
        let send = |c: &Arc<Comm>, bytes| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes, stream: std::ptr::null_mut() });
        let ops = vec![coll(&a, 1), signal(&a, 7), Deferred::Finalize(b.clone()), send(&a, 5), coll(&a, 2), send(&b, 6), signal(&b, 8), coll(&b, 3), send(&a, 9)];
        let Split { one_sided, colls, p2p, teardown } = Split::of(ops);
        let sigs: Vec<usize> = one_sided.iter().map(|o| match o { Deferred::Rma(_, crate::comm::rma::RmaOp { kind: crate::comm::rma::RmaKind::Signal { sig, .. }, .. }) => *sig, _ => usize::MAX }).collect();
        assert_eq!(sigs, [7, 8], "one-sided calls in posting order");
        assert_eq!(colls.iter().map(|t| t.count).collect::<Vec<_>>(), [1, 2, 3], "collectives in posting order, one run per communicator");
        let sends: Vec<(usize, Vec<u64>)> = p2p.iter().map(|(c, v)| (c.rank, v.iter().map(|o| o.bytes).collect())).collect();
        assert_eq!(sends, [(0, vec![5, 9]), (1, vec![6])], "point-to-point per communicator");
        assert!(matches!(teardown.as_slice(), [Deferred::Finalize(c)] if Arc::ptr_eq(c, &b)));
    }

    #[test]
    fn per_set_threads_only_where_a_launch_may_wait() {
        let cfg = crate::config::CommConfig::default();
        let (a, b) = (Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 0, cfg)));
        // Each communicator on a stream of its own (as nccl-tests -g 2: a stream per GPU).
        let stream = |c: &Arc<Comm>| (0x100 + c.rank) as cu::CUstream;
        let p2p = |c: &Arc<Comm>, bytes| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes, stream: stream(c) });
        let coll = |c: &Arc<Comm>, count| {
            let op = crate::types::ResolvedOp { op: crate::types::RedOp::Sum, scalar: 0, scalar_ptr: 0 };
            Deferred::Coll(CollTask { comm: c.clone(), coll: crate::types::Coll::AllGather, send: 0, recv: 0, count, dtype: crate::types::DataType::Float32, op, root: 0, stream: stream(c), config: None })
        };
        let big = |_: &Arc<Comm>, bytes: u64| bytes >= 4 << 20;
        assert!(per_set_threads(&[p2p(&a, 8), p2p(&b, 4 << 20)], big));
        assert!(!per_set_threads(&[p2p(&a, 8), p2p(&b, (4 << 20) - 1)], big));
        assert!(!per_set_threads(&[p2p(&a, 4 << 20), p2p(&a, 4 << 20)], big), "one communicator");
        // A collective counts its whole buffer: 2 ranks x 2 MiB of AllGather output.
        assert!(per_set_threads(&[coll(&a, 512 << 10), coll(&b, 8)], big));
        assert!(!per_set_threads(&[coll(&a, 512 << 10), Deferred::Finalize(b.clone())], big), "a finalize launches nothing");
        assert!(!per_set_threads(&[p2p(&a, 1 << 30), p2p(&b, 1 << 30)], |_, _| false));
        // Two communicators on one stream: one thread, in call order, whatever may wait.
        let on_null = |c: &Arc<Comm>, bytes| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes, stream: std::ptr::null_mut() });
        assert!(!per_set_threads(&[on_null(&a, 8), on_null(&b, 4 << 20)], big), "a shared stream keeps the call order");
        assert!(!per_set_threads(&[p2p(&a, 8), on_null(&b, 4 << 20), on_null(&a, 8)], big), "shared by a's second operation");
        // The NULL stream of another device is another stream: threads as before.
        let cfg = crate::config::CommConfig::default();
        let c = Arc::new(Comm::new(1, 2, 1, cfg));
        assert!(per_set_threads(&[on_null(&a, 8), on_null(&c, 4 << 20)], big), "NULL streams of two devices");
    }

    /// Communicators that share a stream go on one thread, in the group's order; sets that share
    /// none get threads of their own (2 processes x 2 ranks with communicators A and B on every
    /// rank's stream: one thread per rank, each launching A before B).
    #[test]
    fn stream_sets_join_communicators_that_share_a_stream() {
        let cfg = crate::config::CommConfig::default();
        let comm = |rank, dev| Arc::new(Comm::new(rank, 4, dev, cfg.clone()));
        let (a0, b0, a1, b1, c1) = (comm(0, 0), comm(0, 0), comm(1, 1), comm(1, 1), comm(1, 1));
        let on = |c: &Arc<Comm>, st: usize| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 2, buf: 0, bytes: 8, stream: st as cu::CUstream });
        let all = |_: &Arc<Comm>, _: u64| true;
        let ops = vec![on(&a0, 0x10), on(&a1, 0x20), on(&b0, 0x10), on(&b1, 0x20)];
        assert_eq!(stream_sets(&ops), vec![0, 1, 0, 1]);
        assert!(per_set_threads(&ops, all));
        let parts: Vec<Vec<(usize, usize)>> = split_by_stream_set(ops)
            .iter()
            .map(|v| v.iter().map(|op| (deferred_comm(op).rank, op_stream(op).map_or(0, |(_, st)| st as usize))).collect())
            .collect();
        assert_eq!(parts, vec![vec![(0, 0x10), (0, 0x10)], vec![(1, 0x20), (1, 0x20)]]);
        // Joined through another communicator: a1 and c1 share nothing directly, both share with b1.
        let ops = vec![on(&a1, 0x20), on(&c1, 0x30), on(&b1, 0x20), on(&b1, 0x30), on(&a0, 0x10)];
        assert_eq!(stream_sets(&ops), vec![0, 0, 0, 0, 1]);
        // One stream for all (per device): one set, one thread.
        let ops = vec![on(&a0, 0x10), on(&b0, 0x10), Deferred::Finalize(b0.clone())];
        assert_eq!(stream_sets(&ops), vec![0, 0, 0]);
        assert!(!per_set_threads(&ops, all));
        // The same handle on two devices is two streams.
        assert_eq!(stream_sets(&[on(&a0, 0), on(&a1, 0)]), vec![0, 1]);
    }

    /// Two ranks that post the same communicators' operations in different orders launch them in
    /// one order: by key, each communicator's in the group's order; equal keys (one
    /// communicator's ranks in this process) stay in first-use order.
    #[test]
    fn by_communicator_orders_alike_on_every_rank() {
        let cfg = crate::config::CommConfig::default();
        // Rank 0 and rank 1 of communicators A (key 20) and B (key 10).
        let a = [Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 1, cfg.clone()))];
        let b = [Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 1, cfg))];
        let key = |c: &Arc<Comm>| if a.iter().any(|x| Arc::ptr_eq(x, c)) { 20 } else { 10 };
        let p2p = |c: &Arc<Comm>, bytes| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1 - c.rank, buf: 0, bytes, stream: std::ptr::null_mut() });
        let seen = |ops: Vec<Deferred>| -> Vec<(u64, usize, u64)> {
            by_communicator(ops, key)
                .iter()
                .map(|op| match op {
                    Deferred::P2p(c, o) => (key(c), c.rank, o.bytes),
                    _ => unreachable!(),
                })
                .collect()
        };
        // Rank 0 uses A first, rank 1 uses B first.
        let r0 = seen(vec![p2p(&a[0], 1), p2p(&b[0], 2), p2p(&a[0], 3)]);
        let r1 = seen(vec![p2p(&b[1], 2), p2p(&a[1], 1), p2p(&a[1], 3)]);
        assert_eq!(r0, vec![(10, 0, 2), (20, 0, 1), (20, 0, 3)]);
        assert_eq!(r1, vec![(10, 1, 2), (20, 1, 1), (20, 1, 3)]);
        // One thread driving both ranks: B's ranks together, then A's, each in first-use order.
        let both = seen(vec![p2p(&a[0], 1), p2p(&a[1], 1), p2p(&b[1], 2), p2p(&b[0], 2)]);
        assert_eq!(both, vec![(10, 1, 2), (10, 0, 2), (20, 0, 1), (20, 1, 1)]);
    }

    /// Collectives and point-to-point operations of a communicator that is not ready are refused
    /// with its error before anything is ordered or launched; finalize, destroy and abort stay.
    #[test]
    fn work_for_a_communicator_not_ready_is_refused() {
        let cfg = crate::config::CommConfig::default();
        let a = Arc::new(Comm::new(0, 2, 0, cfg));
        assert!(a.ready().is_err(), "a communicator never initialised");
        let p2p = Deferred::P2p(a.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes: 4, stream: std::ptr::null_mut() });
        let mut err = None;
        let kept = refuse_unready(vec![p2p, Deferred::Finalize(a.clone())], &mut err);
        assert_eq!(kept.len(), 1);
        assert!(matches!(kept[0], Deferred::Finalize(_)));
        assert_eq!(err.map(|e| e.msg), a.ready().err().map(|e| e.msg));
    }

    /// Each communicator's operations keep the group's order.
    #[test]
    fn split_by_comm_keeps_each_communicators_order() {
        let cfg = crate::config::CommConfig::default();
        let (a, b) = (Arc::new(Comm::new(0, 2, 0, cfg.clone())), Arc::new(Comm::new(1, 2, 0, cfg)));
        let p2p = |c: &Arc<Comm>, bytes| Deferred::P2p(c.clone(), P2pOp { is_send: true, peer: 1, buf: 0, bytes, stream: std::ptr::null_mut() });
        let parts = split_by_comm(vec![p2p(&b, 1), p2p(&a, 2), p2p(&b, 3), Deferred::Finalize(a.clone()), p2p(&a, 4)]);
        let seen: Vec<Vec<(usize, u64)>> = parts
            .iter()
            .map(|v| {
                v.iter()
                    .map(|op| match op {
                        Deferred::P2p(c, o) => (c.rank, o.bytes),
                        Deferred::Finalize(c) => (c.rank, 0),
                        _ => unreachable!(),
                    })
                    .collect()
            })
            .collect();
        assert_eq!(seen, vec![vec![(1, 1), (1, 3)], vec![(0, 2), (0, 0), (0, 4)]]);
    }

    #[test]
    fn end_without_start_is_invalid_usage() {
        assert_eq!(end().unwrap_err().code, ResultCode::InvalidUsage);
    }

    #[test]
    fn nesting_only_outermost_end_acts_and_errors_drop_the_group() {
        start();
        start();
        assert_eq!(depth(), 2);
        record_error(&Error::invalid_argument("bad root"));
        assert!(end().is_ok(), "inner End does nothing");
        assert_eq!(depth(), 1);
        let e = end().unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidArgument);
        assert_eq!(depth(), 0);
        // The next group starts clean.
        start();
        assert!(end().is_ok());
    }
}
