//! ncclGroupStart/End. Group depth and the deferred work are thread-local; only the outermost End
//! acts: it runs every deferred init concurrently (one thread can create N communicators on N
//! GPUs), then launches the deferred operations in the order they were called, then runs deferred
//! finalize/destroy/abort.

use std::cell::RefCell;
use std::sync::Arc;

use crate::comm::Comm;
use crate::enqueue::{launch_p2p, launch_task, CollTask, P2pOp};
use crate::error::{Error, Result};
use crate::gpu::cu;

pub enum Deferred {
    Coll(CollTask),
    /// Point-to-point operations of one communicator in a group run as one launch, after that
    /// group's collectives (every rank orders them the same way, whatever order it posted).
    P2p(Arc<Comm>, P2pOp),
    Finalize(Arc<Comm>),
    Destroy(Arc<Comm>, usize),
    Abort(Arc<Comm>, usize),
}

enum InitJob {
    Rank { comm: Arc<Comm>, id: [u8; crate::bootstrap::UNIQUE_ID_BYTES] },
    Derived(DerivedJob),
}

/// A split or shrink: collective over the parent's ranks, so inside a group it runs at End,
/// concurrently with the group's other inits (one thread may split the communicators of
/// several GPUs).
pub struct DerivedJob {
    pub parent: Arc<Comm>,
    pub req: crate::split::Request,
    /// The child's configuration; None inherits the parent's.
    pub config: Option<crate::config::CommConfig>,
    /// Hands the outcome to the caller (the API layer registers the child and writes its handle).
    pub publish: Box<dyn FnOnce(Result<Option<Comm>>) -> Result<()> + Send>,
}

impl InitJob {
    fn run(self) -> Result<()> {
        match self {
            InitJob::Rank { comm, id } => comm.init(&id),
            InitJob::Derived(j) => {
                let child = crate::split::run(&j.parent, &j.req, j.config);
                (j.publish)(child)
            }
        }
    }
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    inits: Vec<InitJob>,
    ops: Vec<Deferred>,
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

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

/// Runs an operation now, or defers it to the outermost End when a group is open.
pub fn submit(op: Deferred) -> Result<()> {
    let deferred = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.ops.push(op);
            None
        } else {
            Some(op)
        }
    });
    match deferred {
        None => Ok(()),
        Some(op) => run(op),
    }
}

/// Initialises a communicator now, or at the outermost End when a group is open.
pub fn submit_init(comm: Arc<Comm>, id: [u8; crate::bootstrap::UNIQUE_ID_BYTES]) -> Result<()> {
    submit_job(InitJob::Rank { comm, id })
}

/// Runs a split or shrink now, or at the outermost End when a group is open.
pub fn submit_derived(job: DerivedJob) -> Result<()> {
    submit_job(InitJob::Derived(job))
}

fn submit_job(job: InitJob) -> Result<()> {
    let job = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.inits.push(job);
            None
        } else {
            Some(job)
        }
    });
    match job {
        None => Ok(()),
        Some(j) => j.run(),
    }
}

pub fn end() -> Result<()> {
    let Some(state) = close()? else { return Ok(()) };
    if let Some(e) = state.error {
        return Err(e);
    }
    let mut first_err = run_inits(state.inits).err();
    let streams_per_comm = multi_stream_comms(&state.ops);
    let mut p2p: Vec<(Arc<Comm>, Vec<P2pOp>)> = Vec::new();
    for op in state.ops {
        let r = match op {
            Deferred::P2p(c, o) => {
                match p2p.iter_mut().find(|(x, _)| Arc::ptr_eq(x, &c)) {
                    Some((_, v)) => v.push(o),
                    None => p2p.push((c, vec![o])),
                }
                Ok(())
            }
            other => run(other),
        };
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    for (c, ops) in &p2p {
        if let Err(e) = launch_p2p(c, ops) {
            first_err.get_or_insert(e);
        }
    }
    if first_err.is_none() {
        if let Err(e) = join_streams(streams_per_comm) {
            first_err = Some(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// ncclGroupSimulateEnd: closes the group like End (running its inits), launches nothing, and
/// returns the predicted time of its collectives in microseconds.
pub fn simulate_end() -> Result<f64> {
    let Some(state) = close()? else { return Ok(0.0) };
    if let Some(e) = state.error {
        return Err(e);
    }
    run_inits(state.inits)?;
    let mut us = 0.0;
    for op in &state.ops {
        if let Deferred::Coll(t) = op {
            us += crate::enqueue::predict_us(t)?;
        }
    }
    Ok(us)
}

/// Leaves one group level; returns the group's work when the outermost level closes.
fn close() -> Result<Option<GroupState>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.depth {
            0 => Err(Error::invalid_usage("ncclGroupEnd: not in a group call")),
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

fn run(op: Deferred) -> Result<()> {
    match op {
        Deferred::Coll(t) => launch_task(&t),
        Deferred::P2p(c, o) => launch_p2p(&c, &[o]),
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
        _ => {
            // Ranks of one communicator wait for each other during init: run them concurrently.
            let results: Vec<Result<()>> = std::thread::scope(|s| {
                let hs: Vec<_> = jobs.into_iter().map(|j| s.spawn(move || j.run())).collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(Error::internal("communicator init panicked"))))
                    .collect()
            });
            results.into_iter().find(|r| r.is_err()).unwrap_or(Ok(()))
        }
    }
}

/// Communicators whose group operations used more than one stream, with those streams in order.
fn multi_stream_comms(ops: &[Deferred]) -> Vec<(Arc<Comm>, Vec<cu::CUstream>)> {
    let mut out: Vec<(Arc<Comm>, Vec<cu::CUstream>)> = Vec::new();
    for op in ops {
        if let Deferred::Coll(t) = op {
            match out.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &t.comm)) {
                Some((_, ss)) => {
                    if !ss.contains(&t.stream) {
                        ss.push(t.stream);
                    }
                }
                None => out.push((t.comm.clone(), vec![t.stream])),
            }
        }
    }
    out.retain(|(_, ss)| ss.len() > 1);
    out
}

/// After a group, every stream a communicator used waits for all of that communicator's work.
fn join_streams(comms: Vec<(Arc<Comm>, Vec<cu::CUstream>)>) -> Result<()> {
    for (comm, streams) in comms {
        let r = comm.ready()?;
        let _ctx = crate::gpu::CtxGuard::new(r.dev)?;
        let ls = r.launch.lock();
        let Some(last) = ls.last_stream else { continue };
        ls.done.record(last)?;
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
