//! How a communicator ends: finalize, destroy, abort and revoke, what they wait for and how long,
//! and when its memory may go. A free of device or pinned memory synchronises the device, so it
//! waits behind every kernel there: memory goes only through a gate (`when_idle`) that no running
//! or capturable kernel of the process can hold up, and a communicator whose kernels were told to
//! stop but have not left is kept until they have (`Comm::hold_until_stopped`).

use super::*;

/// How long ncclCommAbort, ncclCommRevoke and the destroy of a revoked communicator wait for its
/// kernels to leave once told to stop. A running kernel sees the flag within microseconds and
/// runs to its end skipping every wait; a launch still queued behind another communicator's
/// kernel on its stream (a group over two communicators, the other waiting for a peer) starts
/// only once that one ends, and then does the same. Waiting for it would last until the
/// application stops the other communicator, often its next call: so the wait is short, and
/// memory stays until the kernels left (`Comm::hold_until_stopped`).
const STOP_WAIT: Duration = Duration::from_secs(1);

impl Comm {
    /// ncclCommRevoke: makes this communicator's kernels stop (as abort does) and refuses new
    /// work, but keeps the bootstrap, so the communicator can still be split or shrunk. Waits
    /// `STOP_WAIT` at most for the kernels to leave, never on a peer: a launch still queued behind
    /// other work on its stream leaves when it starts (skipping its waits), after this returns.
    pub fn revoke(&self) {
        if self.revoked.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(r) = self.ready.get() else { return };
        r.abort_flag.store_u32(0, 1);
        // A communicator spanning hosts launches on its host-local communicator too.
        if let Some(net) = &r.net {
            net.local().revoke();
        }
        if !self.quiesce(Some(Instant::now() + STOP_WAIT)).unwrap_or(false) {
            nccl_info!(
                Subsys::Init,
                "ncclCommRevoke: comm rank {}'s kernels have not left within {STOP_WAIT:?} (one may be queued behind other work on its stream): they leave as they start",
                self.rank
            );
        }
    }

    /// Waits until every kernel and copy this communicator launched outside a graph has finished
    /// (work captured into a graph is the application's to wait for, but it does not hide eager
    /// work issued before it). With `deadline`, gives up then and says so (Ok(false)).
    fn quiesce(&self, deadline: Option<Instant>) -> Result<bool> {
        let Some(r) = self.ready.get() else { return Ok(true) };
        let _ctx = CtxGuard::new(r.dev)?;
        // The launch lock within the deadline too: a call of another thread may hold it while it
        // waits (ncclCommAbort runs while the application's thread is still in a call).
        let lock = || match deadline {
            Some(d) => r.launch.try_lock_until(d),
            None => Some(r.launch.lock()),
        };
        let Some(ls) = lock() else {
            nccl_info!(Subsys::Init, "comm rank {}: a call of another thread held the communicator until the deadline", self.rank);
            return Ok(false);
        };
        // The last uncaptured launch's probe: launches end in order, so it covers them all.
        let probe = ls.done.eager_probe();
        drop(ls);
        let mut spins = 0u32;
        loop {
            // The lock only for the question: the liveness watchdog asks probes meanwhile.
            let Some(mut ls) = lock() else { return Ok(false) };
            if ls.done.probe_done(probe)? {
                return Ok(true);
            }
            drop(ls);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            spins += 1;
            if spins > 100 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// ncclCommFinalize: flushes this communicator's work; a second call is an error.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Err(Error::invalid_argument("communicator already finalized"));
        }
        self.wait_idle("ncclCommFinalize")
    }

    /// ncclCommDestroy's local part: waits for this communicator's work and stops its threads.
    /// Needs no peer: ranks driven by one thread destroy their communicators one after another.
    /// The memory goes with the last reference (`release_memory`: the caller's, or a CUDA
    /// graph's that captured work of this communicator).
    pub fn destroy(self: &Arc<Self>) -> Result<()> {
        if self.revoked.load(Ordering::Acquire) {
            // Its kernels were told to stop: they leave without any peer.
            if !self.quiesce(Some(Instant::now() + STOP_WAIT)).unwrap_or(false) {
                self.hold_until_stopped("ncclCommDestroy");
            }
        } else if !self.finalized.load(Ordering::Acquire) {
            if let Err(e) = self.wait_idle("ncclCommDestroy") {
                // Kernels still run on our buffers: keep them (leaked) rather than free them.
                self.leak_device("ncclCommDestroy");
                self.stop_watchdog(true);
                return Err(e);
            }
        }
        if let Some(net) = self.ready.get().and_then(|r| r.net.as_ref()) {
            // Revoked: its work was stopped, so nothing queued is carried out.
            net.shutdown(self.revoked.load(Ordering::Acquire));
        }
        self.stop_watchdog(true);
        Ok(())
    }

    /// Waits for this communicator's kernels, WARNing every minute about what it waits for, and
    /// gives up after OXCCL_FINALIZE_TIMEOUT seconds (default 1800) with ncclSystemError: a
    /// kernel still running then waits on a hung peer, and only ncclCommAbort can stop it.
    pub(super) fn wait_idle(&self, caller: &str) -> Result<()> {
        let limit = finalize_timeout();
        let t0 = Instant::now();
        loop {
            let waited = t0.elapsed();
            let slice = Duration::from_secs(60).min(limit.saturating_sub(waited));
            if self.quiesce(Some(Instant::now() + slice))? {
                return Ok(());
            }
            let waited = t0.elapsed();
            if waited >= limit {
                return Err(Error::system(format!(
                    "{caller}: comm rank {}/{}'s kernels are still running after {:.0} s (OXCCL_FINALIZE_TIMEOUT); \
                     a peer is probably hung. Its buffers stay allocated; ncclCommAbort stops the kernels",
                    self.rank,
                    self.nranks,
                    waited.as_secs_f64()
                )));
            }
            nccl_warn!(
                "{caller}: still waiting for comm rank {}/{}'s kernels after {:.0} s (set OXCCL_DEBUG_DUMP to see where they wait)",
                self.rank,
                self.nranks,
                waited.as_secs_f64()
            );
        }
    }

    /// Ends the liveness watchdog; `goodbye` first tells the peers this close is orderly. The
    /// watchdog ends within its next wait (a heartbeat to an unreachable host can take a few
    /// seconds): after two it is left to end by itself.
    fn stop_watchdog(&self, goodbye: bool) {
        let Some(r) = self.ready.get() else { return };
        let t = r.watchdog.lock().take();
        end_watchdog(&r.bootstrap, t, goodbye);
    }

    /// ncclCommAbort: makes kernels waiting on peers exit, stops bootstrap waits, and never waits
    /// on a peer. Memory goes with the last reference, once this communicator's kernels have left
    /// (`hold_until_stopped`) and every peer released what this rank shared (src/comm/reaper.rs).
    pub fn abort(self: &Arc<Self>) {
        self.aborted.store(true, Ordering::Release);
        self.set_error(ResultCode::RemoteError);
        let Some(r) = self.ready.get() else { return };
        r.abort_flag.store_u32(0, 1);
        r.bootstrap.abort();
        if let Some(net) = &r.net {
            net.shutdown(true);
        }
        // No goodbye: the peers see this rank gone, which fails only their work that needs it.
        self.stop_watchdog(false);
        // The copy-engine worker gives up on the peer and releases the stream waits it owns.
        if let Some(ce) = &r.ce {
            ce.stop();
        }
        if !self.quiesce(Some(Instant::now() + STOP_WAIT)).unwrap_or(false) {
            self.hold_until_stopped("ncclCommAbort");
        }
    }

    /// Keeps this communicator, whose kernels were told to stop but have not all left, until they
    /// have: its memory then goes the usual way (`release_when_idle`), and until then other frees
    /// of the process wait for its kernels as for a live communicator's (`when_idle`). A kernel
    /// that never leaves keeps it for good, as a leak would.
    fn hold_until_stopped(self: &Arc<Self>, caller: &str) {
        let rank = self.rank;
        nccl_info!(
            Subsys::Init,
            "{caller}: comm rank {rank}'s kernels have not left within {STOP_WAIT:?} (one may be queued behind other work on its stream); its memory stays until they have"
        );
        registry::drain(self);
        let weak = Arc::downgrade(self);
        crate::comm::reaper::drop_when(
            move |free: &mut dyn FnMut()| {
                // Asked, never waited for (deadline now); an error (a stream or event that could
                // not be made) answers nothing, so it is asked again later.
                // A reset device took the kernels with it (and probing its stale streams could
                // crash): gone, as far as this free is concerned.
                let left = weak.upgrade().is_none_or(|c| c.ready.get().is_some_and(|r| r.dev.was_reset()) || c.quiesce(Some(Instant::now())).unwrap_or(false));
                if left {
                    free();
                }
                left
            },
            || format!("comm rank {rank} (told to stop)"),
            Box::new(self.clone()),
        );
    }

    /// Kernels or copies may still run: everything they can touch stays allocated for good
    /// (channels, the abort flag they poll, mappings of peers' memory, network buffers).
    fn leak_device(&self, caller: &str) {
        if self.leaked.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(r) = self.ready.get() else { return };
        nccl_info!(Subsys::Init, "{caller}: comm rank {}'s device memory and mappings are leaked (its kernels may still run)", self.rank);
        r.reg.close(false);
        if let Some(ch) = r.channels.lock().take() {
            std::mem::forget(ch);
        }
        std::mem::forget(r.abort_flag.clone());
        if let Some(ce) = &r.ce {
            ce.leak();
        }
        if let Some(net) = &r.net {
            std::mem::forget(net.clone());
        }
    }

    /// A CUDA graph being captured on `stream` holds work of this communicator that needs
    /// `needs`: the graph keeps the communicator (its buffers, its mappings of peers' memory, its
    /// abort flag) until the driver destroys the graph, so a replay after ncclCommDestroy or
    /// ncclCommAbort finds them (an aborted communicator's kernels exit at once). The caller holds
    /// the launch lock.
    pub fn retain_for_graph(self: &Arc<Self>, ls: &mut LaunchState, stream: cu::CUstream, needs: crate::comm::liveness::Needs) -> Result<()> {
        let Some((id, graph)) = crate::gpu::stream::capture_graph(stream)? else { return Ok(()) };
        let all = matches!(needs, crate::comm::liveness::Needs::All);
        if all && ls.graph_all_capture == Some(id) {
            return Ok(());
        }
        let hold = Box::new(GraphHold { comm: self.clone(), needs: crate::comm::liveness::OwnedNeeds::from(needs) });
        self.watch.graph_held(needs);
        let ptr = Box::into_raw(hold);
        let mut obj: cu::CUuserObject = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `ptr` is a leaked Box the callback takes back once.
        let rc = unsafe {
            cu::cuUserObjectCreate(&mut obj, ptr.cast(), Some(graph_released), 1, cu::CUuserObject_flags_enum::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32)
        };
        if rc != cu::CUresult::CUDA_SUCCESS {
            // SAFETY: not handed to the driver: ours to take back.
            drop(unsafe { Box::from_raw(ptr) });
            return crate::gpu::check(rc, "cuUserObjectCreate");
        }
        // SAFETY: a graph under capture and our new object; the graph takes our reference.
        let rc = unsafe { cu::cuGraphRetainUserObject(graph, obj, 1, cu::CUuserObjectRetain_flags_enum::CU_GRAPH_USER_OBJECT_MOVE as u32) };
        if rc != cu::CUresult::CUDA_SUCCESS {
            // SAFETY: our reference; the driver calls `graph_released` (later, on its thread).
            unsafe { cu::cuUserObjectRelease(obj, 1) };
            return crate::gpu::check(rc, "cuGraphRetainUserObject");
        }
        if all {
            ls.graph_all_capture = Some(id);
        }
        Ok(())
    }
}

/// What a CUDA graph holds of a communicator it captured work of.
struct GraphHold {
    comm: Arc<Comm>,
    needs: crate::comm::liveness::OwnedNeeds,
}

impl Drop for GraphHold {
    fn drop(&mut self) {
        self.comm.watch.graph_released(self.needs.as_needs());
    }
}

/// The driver destroyed a graph that held a communicator. No CUDA call is allowed here, and the
/// communicator's last reference may be this one (its drop frees memory): dropped on the
/// reaper's thread.
unsafe extern "C" fn graph_released(p: *mut std::ffi::c_void) {
    // SAFETY: `p` is the Box leaked in `retain_for_graph`, given back exactly once.
    let hold = unsafe { Box::from_raw(p.cast::<GraphHold>()) };
    crate::comm::reaper::drop_later(hold);
}

impl Drop for Comm {
    /// The communicator's device resources go through the gate (`release_when_idle`), its
    /// windows after them, as the fields would; forgotten instead if its GPU's context was reset
    /// by then (`gpu::UnlessReset`).
    fn drop(&mut self) {
        let Some(ready) = self.ready.take() else { return };
        let windows = std::mem::take(&mut self.windows);
        let dev = ready.dev;
        release_when_idle(self.rank, Box::new(crate::gpu::UnlessReset::new(dev, Box::new((ready, windows)))));
    }
}

/// Drops `hold` (a communicator's `Ready`: its memory, mappings, streams, and the release notices
/// to its peers) now if `when_idle` allows, else on the reaper's thread once it does. Freeing
/// device or pinned memory synchronises the device, so a free while another communicator's kernel
/// waits for a peer waits with it: ncclCommAbort of an idle communicator hangs for good when a
/// later one (aborted next, by the same thread) has a kernel waiting for a peer that never comes.
pub(super) fn release_when_idle(rank: usize, hold: Box<dyn Send>) {
    crate::comm::reaper::drop_when(when_idle, || format!("comm rank {rank}'s memory"), hold);
}

/// Runs `free` and returns true only while no communicator of this process (live, or draining:
/// `registry::drain`; any device, as a free can hold up other threads' CUDA calls) has an
/// uncaptured launch still running or being issued, or captured work in a CUDA graph that a
/// replay may be running, unless it was told to stop (aborted or revoked: its replays leave at
/// once) or its GPU's context was reset (`Device::was_reset`: nothing of it runs, and its
/// streams and events are gone). Their launch locks are held throughout, so none begins a launch
/// meanwhile. Else returns
/// false and runs nothing. Never waits: launch locks are only tried, launches only queried. A
/// graph kept by the application (as under CUDA graphs for a whole training run) so defers every
/// free until it goes; a free behind a replay that waits for a peer would hang (a rank aborting
/// an idle communicator before the one whose replay waits, 2026-11-29).
pub fn when_idle(free: &mut dyn FnMut()) -> bool {
    let mut comms: Vec<Arc<Comm>> = Vec::new();
    let mut add = |c: Arc<Comm>| {
        // Once each: a second try_lock of a lock this function holds would fail.
        if !comms.iter().any(|x| Arc::ptr_eq(x, &c)) {
            comms.push(c);
        }
    };
    for c in live().into_iter().chain(registry::draining()) {
        // A communicator spanning hosts launches on its host-local communicator too.
        if let Some(net) = c.ready.get().and_then(|r| r.net.as_ref()) {
            add(net.local().clone());
        }
        add(c);
    }
    // A reset device's graphs went with it.
    let replaying = |c: &Arc<Comm>| {
        c.watch.holds_graphs() && !c.is_aborted() && !c.revoked.load(Ordering::Acquire) && !c.ready.get().is_some_and(|r| r.dev.was_reset())
    };
    if comms.iter().any(replaying) {
        return false;
    }
    let mut held = Vec::new();
    for r in comms.iter().filter_map(|c| c.ready.get()) {
        let Some(ls) = r.launch.try_lock() else { return false };
        held.push((r.dev, ls));
    }
    for (dev, ls) in held.iter_mut() {
        // A reset device's kernels are gone with it, and its streams and events with them.
        if dev.was_reset() {
            continue;
        }
        let Ok(_ctx) = CtxGuard::new(dev) else { continue };
        let probe = ls.done.eager_probe();
        // Asked once, never waited for: every launch lock of the process is held here, and the
        // reaper asks again (a counted launch's probe is an event recorded when first asked, done
        // by the next ask). An error (a broken context) is no kernel to wait for.
        if matches!(ls.done.probe_done(probe), Ok(false)) {
            return false;
        }
    }
    free();
    drop(held);
    true
}

impl Drop for Ready {
    fn drop(&mut self) {
        // Only an init given up after it finished (an abort during a nonblocking init) leaves
        // the watchdog running: this rank is gone for its peers.
        if self.watchdog.get_mut().take().is_some() {
            self.bootstrap.abort();
        }
        self.release_memory();
    }
}

impl Ready {
    /// The communicator's last reference went and its kernels are done, or never launched (an
    /// init that failed or was aborted late): closes this rank's mappings of its peers' memory,
    /// tells each peer so, and hands the shared buffer to the reaper, which frees it once every
    /// peer that mapped it did the same. After `leak_device` nothing is left to release here.
    fn release_memory(&mut self) {
        let rank = self.bootstrap.rank();
        let _ctx = CtxGuard::new(self.dev);
        self.reg.close(true);
        drop(self.ce.take());
        let Some(ch) = self.channels.get_mut().take() else { return };
        let shared_bytes = ch.shared_bytes();
        let (imports, private, shared) = ch.into_parts();
        drop(imports);
        drop(private);
        let me = &self.peers[rank];
        let mut waiting = Vec::new();
        for (p, peer) in self.peers.iter().enumerate().filter(|(p, _)| *p != rank) {
            if peer.same_process(me) {
                waiting.push(crate::comm::reaper::Waiter::Local { rank: p });
                continue;
            }
            if let Err(e) = self.bootstrap.send_released(p) {
                nccl_info!(Subsys::Init, "comm rank {rank}: telling rank {p} that its memory is released failed: {}", e.msg);
            }
            waiting.push(crate::comm::reaper::Waiter::Remote { rank: p, token: peer.process, visible: peer.network == me.network });
        }
        let held = crate::comm::reaper::Held {
            what: format!("comm rank {rank}'s channel buffer ({:.1} MiB)", shared_bytes as f64 / (1 << 20) as f64),
            key: self.key,
            waiting,
            bootstrap: Some(self.bootstrap.clone()),
            hold: Box::new(crate::gpu::UnlessReset::new(self.dev, shared)),
        };
        crate::comm::reaper::retire(self.key, rank, self.process_ranks, Some(held));
    }
}

/// OXCCL_FINALIZE_TIMEOUT: seconds finalize/destroy wait for kernels (default 1800).
fn finalize_timeout() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        crate::config::env("OXCCL_FINALIZE_TIMEOUT")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| *v > 0.0)
            .and_then(|v| Duration::try_from_secs_f64(v).ok())
            .unwrap_or(Duration::from_secs(1800))
    })
}
