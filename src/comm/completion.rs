//! A communicator's completion mark: what "its last launch has finished" is to the host. A call
//! on another stream waits for it, so do the other streams of a group after its launches, and
//! finalize, destroy, abort and the OXCCL_DEBUG_DUMP watchdog poll it. The stream of the launch
//! itself is never touched again: the application may destroy it at any time (a driver call on a
//! destroyed stream crashes).
//!
//! Two kinds of mark:
//! - **Counted**: an uncaptured launch whose last work on the stream is one of oxccl's kernels
//!   passes the communicator's done counter in the kernel's `done` argument, and every block adds
//!   one to it as it finishes (kernels/prims/done.cuh). The host counts the blocks it launched counted;
//!   the mark is that total, waited for with cuStreamWaitValue32 (GEQ, modulo 2^32). No driver
//!   call on the launch path, but a release at the end of every block: algo::counting picks the
//!   launches where the host is the bottleneck.
//! - **Event**: anything else (copy-engine and host-staged paths, local copies, and every launch
//!   captured into a graph, which a replay repeats uncounted) records an event behind the launch,
//!   about 0.25 us of host time (BENCHMARKS.md of 2026-11-27, 2d19a1c). An event recorded in a capture
//!   can only be waited for in the same capture, so the mark keeps the capture's id.
//!
//! Eager event marks go into a ring of events, so each launch keeps a `Probe` that can still be
//! asked after later launches (src/comm/liveness.rs), and finalize, destroy and abort wait for the last
//! uncaptured launch's probe (captured work after it does not hide it).
//!
//! Counted launches follow each other on one stream with programmatic serialization at most, and
//! a counted kernel waits for its predecessor before publishing (done.cuh), so the counter reaches
//! a launch's total only once that launch and everything before it on its stream have finished.

use crate::device_abi::OX_PRIV_DONE_OFF;
use crate::error::Result;
use crate::gpu::stream::Event;
use crate::gpu::{check, cu};

/// What the communicator's last launch left to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// No launch yet (or only ones that issued nothing).
    None,
    /// The event, recorded in this capture (None: uncaptured).
    Event(Option<u64>),
    /// The done counter reaching this many blocks.
    Count(u32),
}

impl Mark {
    /// The capture the mark belongs to: a stream may wait for it only in the same capture state.
    pub fn capture(self) -> Option<u64> {
        match self {
            Mark::Event(c) => c,
            Mark::None | Mark::Count(_) => None,
        }
    }
}

/// Eager event marks are recorded in turn into this many events, so that a launch's own mark can
/// still be asked about after later launches (`Probe`).
const RING: usize = 8;

/// What tells whether one launch has finished, kept after later launches (src/comm/liveness.rs asks
/// it when a peer is lost: did the work that needed that peer end?).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Nothing was issued (or only work captured into a graph, which a replay runs).
    Nothing,
    /// The done counter reaching this many blocks.
    Count(u32),
    /// The eager event slot its mark was recorded in. A later launch may have recorded the slot
    /// again: its answer then is the later launch's, which ends after this one (launches of a
    /// communicator end in order), so "finished" still holds and "not yet" is conservative.
    Slot(usize),
}

/// The mark and what it needs: the events, the counter's address and the blocks counted so far.
pub struct Completion {
    mark: Mark,
    /// The last uncaptured launch's probe: what finalize, destroy and abort wait for (work
    /// captured into a graph is the application's, but it does not hide eager work before it).
    eager: Probe,
    /// Eager event marks, recorded in turn; `slot` holds the latest.
    ring: Vec<Event>,
    slot: usize,
    /// The event of a mark recorded in a capture.
    captured: Event,
    /// Device address of the done counter; 0 when the communicator has no DevComm (ranks joined
    /// only through the network), whose launches are never counted.
    counter: u64,
    /// Blocks launched counted so far (modulo 2^32): what the counter reaches once they finish.
    counted: u32,
    /// A stream of our own, made on first need, where a counted probe becomes an event to poll.
    aux: cu::CUstream,
    aux_event: Option<Event>,
    /// The count `aux_event` was last recorded behind (its wait on `aux`), if any.
    aux_at: Option<u32>,
}

// SAFETY: the event and stream handles are usable from any thread with the context current; the
// communicator's launch lock serialises every use.
unsafe impl Send for Completion {}

impl Completion {
    /// `dev_comm`: the communicator's DevComm in device memory, or 0.
    pub fn new(dev_comm: u64) -> Result<Completion> {
        let counter = if dev_comm == 0 { 0 } else { dev_comm + OX_PRIV_DONE_OFF };
        let ring = (0..RING).map(|_| Event::new()).collect::<Result<Vec<_>>>()?;
        Ok(Completion { mark: Mark::None, eager: Probe::Nothing, ring, slot: 0, captured: Event::new()?, counter, counted: 0, aux: std::ptr::null_mut(), aux_event: None, aux_at: None })
    }

    /// What the communicator's last launch left to wait for.
    pub fn mark(&self) -> Mark {
        self.mark
    }

    /// Whether a launch that is not captured may be counted.
    pub fn can_count(&self) -> bool {
        self.counter != 0
    }

    /// Device address of the done counter (a counted kernel's `done` argument).
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// A counted kernel of `grid` blocks was launched.
    pub fn counted_launch(&mut self, grid: u32) {
        self.counted = self.counted.wrapping_add(grid);
    }

    /// The launch just issued ended with a counted kernel: the mark is the total so far.
    pub fn set_counted(&mut self) {
        self.mark = Mark::Count(self.counted);
        self.eager = Probe::Count(self.counted);
    }

    /// Records the event behind the launch just issued on `stream`, in `capture`.
    pub fn set_event(&mut self, stream: cu::CUstream, capture: Option<u64>) -> Result<()> {
        if capture.is_some() {
            self.captured.record(stream)?;
        } else {
            let next = (self.slot + 1) % RING;
            self.ring[next].record(stream)?;
            self.slot = next;
            self.eager = Probe::Slot(next);
        }
        self.mark = Mark::Event(capture);
        Ok(())
    }

    /// The probe of the launch whose mark was just set (see `Probe`).
    pub fn probe(&self) -> Probe {
        match self.mark {
            Mark::None | Mark::Event(Some(_)) => Probe::Nothing,
            Mark::Event(None) => Probe::Slot(self.slot),
            Mark::Count(n) => Probe::Count(n),
        }
    }

    /// Makes `stream` wait for the mark (the caller checked that the capture states agree).
    pub fn wait_on(&self, stream: cu::CUstream) -> Result<()> {
        match self.mark {
            Mark::None => Ok(()),
            Mark::Event(Some(_)) => self.captured.wait_on(stream),
            Mark::Event(None) => self.ring[self.slot].wait_on(stream),
            Mark::Count(n) => wait_count(stream, self.counter, n),
        }
    }

    /// Ok(true) once the marked work has finished.
    pub fn query(&mut self) -> Result<bool> {
        match self.mark {
            Mark::None => Ok(true),
            Mark::Event(Some(_)) => self.captured.query(),
            Mark::Event(None) => self.ring[self.slot].query(),
            Mark::Count(n) => self.probe_done(Probe::Count(n)),
        }
    }

    /// The probe of the last uncaptured launch: finished once every uncaptured launch has,
    /// whatever was captured after them.
    pub fn eager_probe(&self) -> Probe {
        self.eager
    }

    /// Ok(true) once the launch `p` probes has finished. A counted probe becomes an event
    /// recorded on a stream of our own behind a wait for the count, then polled.
    pub fn probe_done(&mut self, p: Probe) -> Result<bool> {
        match p {
            Probe::Nothing => Ok(true),
            Probe::Slot(i) => self.ring[i % RING].query(),
            Probe::Count(n) => {
                if self.aux.is_null() {
                    let mut s: cu::CUstream = std::ptr::null_mut();
                    // SAFETY: out-pointer to a local; the caller has the device's context current.
                    check(unsafe { cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }, "cuStreamCreate")?;
                    self.aux = s;
                }
                if self.aux_event.is_none() {
                    self.aux_event = Some(Event::new()?);
                }
                let ev = self.aux_event.as_ref().ok_or_else(|| crate::error::Error::internal("no event"))?;
                // One wait and record per count asked about; asking again only queries. Queued at
                // every poll (finalize, destroy and abort poll thousands of times a second), they
                // pile up while a kernel runs, and once the stream's queue is full the next call
                // blocks in the driver, deadline or not, with the launch lock held. An event
                // behind a count at least `n` (modulo 2^32, as GEQ waits compare) answers for `n`.
                if self.aux_at.is_none_or(|m| (m.wrapping_sub(n) as i32) < 0) {
                    wait_count(self.aux, self.counter, n)?;
                    ev.record(self.aux)?;
                    self.aux_at = Some(n);
                }
                ev.query()
            }
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.aux.is_null() {
            // SAFETY: our own stream, destroyed once and not synchronised: a wait left on it (the
            // kernels of an aborted communicator that never finished) must not hang the drop; the
            // driver frees the stream once its work is done.
            unsafe { cu::cuStreamDestroy_v2(self.aux) };
        }
    }
}

fn wait_count(stream: cu::CUstream, counter: u64, n: u32) -> Result<()> {
    // SAFETY: the counter is a u32 in the communicator's private device buffer, which outlives
    // every wait: it is freed only after the communicator's work has drained, or leaked.
    check(
        unsafe { cu::cuStreamWaitValue32_v2(stream, counter, n, cu::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32) },
        "cuStreamWaitValue32",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_event_mark_belongs_to_a_capture() {
        assert_eq!(Mark::Event(Some(7)).capture(), Some(7));
        assert_eq!(Mark::Event(None).capture(), None);
        assert_eq!(Mark::Count(3).capture(), None);
        assert_eq!(Mark::None.capture(), None);
    }

    /// The kernels a launch may count must publish its completion: each `extern "C" __global__`
    /// taking CollArgs, GroupArgs or ExchangeArgs (or the typed macro's ARGS) calls ox_done_publish, but for the copy-engine path's three,
    /// which only that path and the one-sided operations (ox_ce_post) launch, never counted. A kernel that forgot would leave the counter
    /// short, and the next stream switch or destroy would wait forever.
    #[test]
    fn every_counted_kernel_publishes_its_completion() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let never_counted = ["ox_ce_wait", "ox_ce_post", "ox_ce_copy"];
        let mut seen = Vec::new();
        let files = ["prims", "colls"].into_iter().flat_map(|d| std::fs::read_dir(dir.join(d)).expect("kernels/"));
        for e in files {
            let path = e.expect("entry").path();
            let src = std::fs::read_to_string(&path).expect("read kernel source");
            let mut rest = src.as_str();
            while let Some(at) = rest.find("extern \"C\" __global__") {
                let text = &rest[at..];
                let open = text.find('{').expect("kernel body");
                let head = &text[..open];
                // The body: up to the brace that closes the first one (a macro's lines end in '\').
                let mut depth = 0;
                let mut end = open;
                for (i, ch) in text[open..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let body = &text[open..=end];
                let name = head.rsplit_once('(').map_or("", |(before, _)| before).split_whitespace().last().unwrap_or("").to_string();
                if ["CollArgs", "GroupArgs", "ExchangeArgs", "ARGS args"].iter().any(|a| head.contains(a)) {
                    if !never_counted.contains(&name.as_str()) {
                        assert!(body.contains("ox_done_publish("), "{}: kernel {name} never calls ox_done_publish", path.display());
                    }
                    seen.push(name);
                }
                rest = &text[end..];
            }
        }
        // The scan found the kernels it is about (the typed macro counts once, by its token name).
        for k in ["ox_exchange", "ox_p2p_oneshot", "ox_gather_oneshot", "ox_broadcast_oneshot", "ox_broadcast_ll128", "ox_ce_wait"] {
            assert!(seen.iter().any(|s| s == k), "kernel {k} not found in kernels/ (seen: {seen:?})");
        }
        assert!(seen.iter().any(|s| s.contains("PREFIX")), "the typed-kernel macro was not found (seen: {seen:?})");
    }
}
