//! The liveness watchdog of a communicator: heartbeats over the bootstrap, lost peers, and the
//! verdict (liveness.rs) that fails the communicator only where work needs a lost peer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::LaunchState;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result, ResultCode};
use crate::gpu::{CtxGuard, Device};
use crate::log::Subsys;

/// `Comm::stop_watchdog` for a bootstrap and its watchdog thread (if still there).
pub(super) fn end_watchdog(bs: &Bootstrap, t: Option<std::thread::JoinHandle<()>>, goodbye: bool) {
    if goodbye {
        bs.say_goodbye();
    }
    let Some(t) = t else { return };
    let t0 = Instant::now();
    while !t.is_finished() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    if t.is_finished() {
        let _ = t.join();
    } else {
        nccl_info!(Subsys::Init, "comm rank {}: the liveness watchdog is still in a heartbeat; left to end by itself", bs.rank());
    }
}

/// What the liveness watchdog works with.
pub(super) struct Watchdog {
    pub(super) rank: usize,
    pub(super) nranks: usize,
    pub(super) bs: Arc<Bootstrap>,
    pub(super) state: Arc<super::AsyncState>,
    pub(super) watch: Arc<crate::comm::liveness::Watch>,
    /// Whether the launch with this ordinal has finished; None if that cannot be told now
    /// (`launch_done`; a closure so that the loop runs without a GPU in tests).
    pub(super) launch_done: Box<dyn Fn(u64) -> Option<bool> + Send>,
    /// Sets the communicator's abort flag.
    pub(super) stop_kernels: Box<dyn Fn() + Send>,
}

/// A lost peer, judged at every tick (src/comm/liveness.rs) until the communicator fails.
struct Lost {
    rank: usize,
    why: String,
    /// Since when unfinished work has needed it (or the watchdog could not tell).
    bad_since: Option<Instant>,
    /// The INFO saying that the communicator goes on was printed.
    noted: bool,
    /// The latest launch that needs it known to have finished (asked once, not at every tick).
    done_through: u64,
}

/// The watchdog's tick while some peer is lost.
const LOST_TICK: Duration = Duration::from_millis(200);

/// The liveness watchdog: when a peer is lost (its connection to this rank ended without a
/// goodbye, or another rank reports it), a first-hand loss is reported to the other ranks (not
/// every rank is connected to every other), and from then on the watchdog asks whether work that
/// needs the peer is unfinished (src/comm/liveness.rs). Work that stays so past a short grace makes the
/// communicator's async state ncclRemoteError and its kernels stop (abort flag), so nothing spins
/// on the dead peer, and a WARN names the peer; otherwise the communicator goes on. Detection
/// costs nothing on the hot path: it rides on the bootstrap's sockets (a dead process's close at
/// once; a hung one's silence through the heartbeats, see Bootstrap::heartbeat, which pass over
/// the ranks that are gone).
pub(super) fn watch_peers(w: Watchdog) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("oxccl-watch{}", w.rank))
        .spawn(move || {
            let silence = heartbeat_timeout();
            let mut since = Instant::now();
            let mut beat: Option<Instant> = None;
            let mut watched = None;
            let mut gone = vec![false; w.nranks];
            let mut lost: Vec<Lost> = Vec::new();
            let mut failed = false;
            while w.bs.watching() {
                let (next, prev) = crate::comm::liveness::ring_neighbours(w.rank, w.nranks, &|r| gone[r] || w.bs.left(r));
                if prev != watched {
                    // A newly watched rank beat for someone else until now: count from here.
                    watched = prev;
                    since = Instant::now();
                }
                if beat.is_none_or(|b| b.elapsed() >= HEARTBEAT_INTERVAL) {
                    beat = Some(Instant::now());
                    if let Some(n) = next {
                        w.bs.heartbeat_to(n);
                    }
                }
                if let Some(p) = prev {
                    w.bs.check_heartbeat_of(p, since, silence);
                }
                for l in lost.iter_mut() {
                    if !failed {
                        failed = w.judge(l);
                    }
                }
                let wait = if lost.is_empty() || failed { HEARTBEAT_INTERVAL } else { LOST_TICK };
                let Some(loss) = w.bs.wait_loss(wait) else { continue };
                let p = loss.rank as usize;
                if p >= w.nranks || gone[p] {
                    continue;
                }
                gone[p] = true;
                if loss.reported_by.is_none() {
                    w.bs.report_loss(p);
                }
                let mut l = Lost { rank: p, why: loss.why, bad_since: None, noted: false, done_through: 0 };
                if !failed {
                    failed = w.judge(&mut l);
                }
                lost.push(l);
            }
        })
        .map_err(|e| Error::io("cannot start the liveness watchdog thread", &e))
}

impl Watchdog {
    /// Judges the lost peer `l` once; true when that failed the communicator.
    fn judge(&self, l: &mut Lost) -> bool {
        use crate::comm::liveness::{verdict, Verdict};
        let (rank, nranks, p) = (self.rank, self.nranks, l.rank);
        let mut v = self.watch.view_of(p);
        if v.last != 0 && !v.issuing && !v.graphs {
            v.last_done = if v.last <= l.done_through { Some(true) } else { (self.launch_done)(v.last) };
            if v.last_done == Some(true) {
                l.done_through = v.last;
            }
        }
        let judged = verdict(&v);
        if !crate::comm::liveness::fails_now(&judged, &mut l.bad_since, Instant::now()) {
            if judged == Verdict::Tolerate && !l.noted {
                l.noted = true;
                nccl_info!(
                    Subsys::Init,
                    "comm rank {rank}/{nranks}: rank {p} {}; no unfinished work of this rank needs it, so the communicator goes on (work that needs rank {p} will fail with ncclRemoteError)",
                    l.why
                );
            }
            return false;
        }
        let reason = match judged {
            Verdict::Fail(reason) => format!("{reason} {} s after it was lost", crate::comm::liveness::GRACE.as_secs_f64()),
            _ => String::from("whether unfinished work needs it could not be told (a launch held the communicator)"),
        };
        let held = on_peer_lost(&self.state, &*self.stop_kernels);
        nccl_warn!(
            "comm rank {rank}/{nranks}: rank {p} {}; {reason}: {}",
            l.why,
            super::AsyncState::reports(ResultCode::RemoteError, held)
        );
        true
    }

}

/// Whether the launch with ordinal `ord` has finished; None if a launch holds the lock.
pub(super) fn launch_done(dev: &'static Device, launch: &Mutex<LaunchState>, ord: u64) -> Option<bool> {
    let mut ls = launch.try_lock_for(Duration::from_millis(100))?;
    let Some(probe) = ls.recent.probe_for(ord) else { return Some(false) };
    let Ok(_ctx) = CtxGuard::new(dev) else { return Some(false) };
    Some(ls.done.probe_done(probe).unwrap_or(false))
}

/// How often the watchdog tells the next rank this one is alive.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Silence after which the previous rank counts as lost, unless OXCCL_HEARTBEAT_TIMEOUT says
/// otherwise (seconds; 0 turns heartbeats off). Generous: a rank stopped in a debugger or
/// swapping hard for a minute is not dead yet, and dead processes are caught at once anyway
/// (their sockets close); this is for hung processes, frozen hosts and cut networks.
const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn heartbeat_timeout() -> Duration {
    match crate::config::env("OXCCL_HEARTBEAT_TIMEOUT") {
        None => DEFAULT_HEARTBEAT_TIMEOUT,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(secs) if secs >= 0.0 && secs.is_finite() => Duration::from_secs_f64(secs),
            _ => {
                nccl_warn!("OXCCL_HEARTBEAT_TIMEOUT={v} is not a number of seconds; using {DEFAULT_HEARTBEAT_TIMEOUT:?}");
                DEFAULT_HEARTBEAT_TIMEOUT
            }
        },
    }
}

/// What a lost peer that work in flight needs does to the communicator: RemoteError (unless it
/// already failed) and the device-side abort flag.
pub(super) fn on_peer_lost(state: &super::AsyncState, stop_kernels: &dyn Fn()) -> bool {
    fail_async(state, ResultCode::RemoteError, stop_kernels)
}

/// Records an asynchronous failure (unless one is recorded already) and stops the kernels.
/// Returns whether the state holds it until a running init, split, shrink or grow ends.
pub(super) fn fail_async(state: &super::AsyncState, code: ResultCode, stop_kernels: &dyn Fn()) -> bool {
    let held = state.fail(code);
    stop_kernels();
    held
}
