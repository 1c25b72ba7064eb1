//! When the user's stream reached each of a cross-host call's launches (OXCCL_NET_TRACE).
//!
//! The proxy's trace (`Trace` in mod.rs) says when each step was handed over and finished; it
//! cannot say when the GPU got to a step's kernel, or how long the host-local launch between a
//! step and its completion took. So with OXCCL_NET_TRACE set, every eagerly enqueued cross-host
//! call also records a timing event on its stream before its first launch and after each one.
//! When the communicator goes (gracefully), each event's GPU time is put on CLOCK_MONOTONIC
//! through an anchor event recorded on an idle stream of ours right before the host reads the
//! clock, and the lines go to `oxccl-net-stream.<pid>.txt` beside the proxy's trace: label, ns,
//! then the host's CLOCK_MONOTONIC ns when it had recorded the event (so a mark the GPU reached
//! just after the host recorded it was late on the host, not on the GPU). The error of the anchor
//! is the time the host takes to see it complete (a few us).
//!
//! Recording costs the calling thread one driver call per launch, so this is for measuring only.
//! Calls being captured into a graph are skipped (an event recorded in a capture is a graph node
//! and has no time of its own).

use crate::error::Result;
use crate::gpu::stream::{is_capturing, Event};
use crate::gpu::{cu, Device};
use crate::log::Subsys;

/// Events kept at most (a few MB of driver objects); later calls are not traced.
const MAX_EVENTS: usize = 100_000;

/// Which launch an event follows (or, for `Begin`, precedes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Before the call's first launch: the stream's earlier work has finished.
    Begin,
    /// After a cross-host step's kernel (the whole step, or its hand-over when it is issued).
    Step,
    /// After a host-local launch (a collective or point-to-point work of this host's ranks).
    Local,
    /// After an issued step's completion kernel.
    Complete,
}

impl Mark {
    fn label(self) -> &'static str {
        match self {
            Mark::Begin => "begin",
            Mark::Step => "step",
            Mark::Local => "local",
            Mark::Complete => "complete",
        }
    }
}

/// The events of one communicator's cross-host calls, in the order they were recorded.
pub struct StreamTrace {
    dir: String,
    events: Vec<(Mark, Event, u64)>,
    full: bool,
}

impl StreamTrace {
    pub fn new(dir: String) -> StreamTrace {
        StreamTrace { dir, events: Vec::new(), full: false }
    }

    /// Records `m` on `stream` unless it is capturing or the trace is full. A failure is logged
    /// once and ends the trace: measuring must never fail a call.
    pub(super) fn mark(&mut self, m: Mark, stream: cu::CUstream) {
        if self.full || !matches!(is_capturing(stream), Ok(false)) {
            return;
        }
        match Event::timed().and_then(|e| e.record(stream).map(|_| e)) {
            Ok(e) => self.events.push((m, e, super::monotonic_ns())),
            Err(e) => {
                nccl_warn!("OXCCL_NET_TRACE: stream events stop here: {}", e.msg);
                self.full = true;
            }
        }
        self.full |= self.events.len() >= MAX_EVENTS;
    }

    /// Puts every event on CLOCK_MONOTONIC and writes the file. Call once the communicator's
    /// work has finished (every event recorded has completed).
    pub fn write(&self, dev: &'static Device, rank: usize) {
        if self.events.is_empty() {
            return;
        }
        let path = std::path::Path::new(self.dir.trim()).join(format!("oxccl-net-stream.{}.txt", std::process::id()));
        let out = self.lines(dev, rank).and_then(|s| std::fs::write(&path, s).map_err(|e| crate::error::Error::system(format!("cannot write {}: {e}", path.display()))));
        match out {
            Ok(()) => nccl_info!(Subsys::Net, "OXCCL_NET_TRACE: {} stream events in {}", self.events.len(), path.display()),
            Err(e) => nccl_warn!("OXCCL_NET_TRACE: {}", e.msg),
        }
    }

    fn lines(&self, dev: &'static Device, rank: usize) -> Result<String> {
        let _ctx = crate::gpu::CtxGuard::new(dev)?;
        let stream = crate::gpu::stream::OwnedStream::new(dev)?;
        // Our own stream is idle: the anchor completes as soon as it is recorded.
        let anchor = Event::timed()?;
        anchor.record(stream.raw)?;
        anchor.synchronize()?;
        let now = super::monotonic_ns();
        let mut out = format!("# rank {rank} label ns host_ns (CLOCK_MONOTONIC: from the GPU's event times; when the host recorded it)\n");
        for (m, e, host) in &self.events {
            // Complete by now (the caller's contract); the wait only makes sure.
            e.synchronize()?;
            let before = (f64::from(e.ms_until(&anchor)?) * 1e6).max(0.0) as u64;
            out.push_str(&format!("{} {} {host}\n", m.label(), now.saturating_sub(before)));
        }
        Ok(out)
    }
}
