//! Which peers a communicator's work needs, and what losing a peer does to it.
//!
//! NCCL fails nothing when a peer aborts or exits: an operation that needed the peer hangs until
//! the application gives up on it, and every rank that needed nothing from it goes on. oxccl
//! fails only what cannot complete. Once a peer is lost (src/comm/mod.rs `watch_peers`), the
//! watchdog asks, again and again, whether work that needs it is unfinished (`verdict`): being
//! issued, launched and not known to have finished, or captured into a CUDA graph that may still
//! be replayed (a replay cannot be seen from the host). Work still unfinished after a short grace
//! (the peer may have done its part before it left) makes the communicator report
//! ncclRemoteError and stops its kernels; until then, and for good if nothing needs the peer,
//! ncclCommGetAsyncError stays ncclSuccess. An operation enqueued later that needs the lost peer
//! is judged the same way, so it fails within the grace and a watchdog tick.
//!
//! A launch's completion is asked through its `Probe` (src/comm/completion.rs), kept in `Recent` for
//! the last launches; a communicator's launches end in the order they were issued, so a later
//! launch that finished answers for every earlier one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::comm::completion::Probe;

/// The peers one launch needs.
#[derive(Clone, Copy, Debug)]
pub enum Needs<'a> {
    /// Every rank (a collective).
    All,
    /// These ranks (point-to-point; the caller's own rank may be among them).
    Peers(&'a [usize]),
}

/// `Needs` kept beyond its launch (by a CUDA graph's hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedNeeds {
    /// Every rank (a collective).
    All,
    /// These ranks (point-to-point).
    Peers(Vec<usize>),
}

impl From<Needs<'_>> for OwnedNeeds {
    fn from(n: Needs<'_>) -> Self {
        match n {
            Needs::All => OwnedNeeds::All,
            Needs::Peers(ps) => OwnedNeeds::Peers(ps.to_vec()),
        }
    }
}

impl OwnedNeeds {
    /// Borrowed as the `Needs` that `Watch` takes.
    pub fn as_needs(&self) -> Needs<'_> {
        match self {
            OwnedNeeds::All => Needs::All,
            OwnedNeeds::Peers(ps) => Needs::Peers(ps),
        }
    }
}

/// What a lost peer means for the communicator's work, now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing unfinished needs it: the communicator goes on.
    Tolerate,
    /// Unfinished work needs it (why, for the WARN if it stays so past the grace).
    Fail(String),
    /// Cannot tell (a launch holds the launch lock): ask again.
    Undecided,
}

/// What the watchdog knows about one lost peer when it decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// A launch being issued right now needs it.
    pub issuing: bool,
    /// Work captured into a CUDA graph that is still alive needs it.
    pub graphs: bool,
    /// The last launch (ordinal, from 1) that needs it; 0: none.
    pub last: u64,
    /// Whether that launch has finished; None: could not be asked.
    pub last_done: Option<bool>,
}

/// The decision, a pure function of what is in flight.
pub fn verdict(v: &View) -> Verdict {
    if v.issuing {
        return Verdict::Fail("an operation that needs it is being issued".into());
    }
    if v.graphs {
        return Verdict::Fail("work that needs it was captured into a CUDA graph that may still be replayed".into());
    }
    if v.last == 0 {
        return Verdict::Tolerate;
    }
    match v.last_done {
        Some(true) => Verdict::Tolerate,
        Some(false) => Verdict::Fail(format!("operation #{} of this communicator needs it and has not finished", v.last)),
        None => Verdict::Undecided,
    }
}

/// Work that needs a lost peer and is still unfinished after this long fails the communicator:
/// the peer may have done its part before it left (its last sends already delivered), and such
/// work ends well within it.
pub const GRACE: Duration = Duration::from_secs(1);
/// How long the watchdog may be unable to tell (a launch holds the launch lock) before it fails.
pub const UNDECIDED_LIMIT: Duration = Duration::from_secs(5);

/// Whether a lost peer fails the communicator at `now`, given this judgement and since when
/// unfinished work has needed it (`bad_since`, kept by the caller across judgements).
pub fn fails_now(v: &Verdict, bad_since: &mut Option<Instant>, now: Instant) -> bool {
    let limit = match v {
        Verdict::Tolerate => {
            *bad_since = None;
            return false;
        }
        Verdict::Fail(_) => GRACE,
        Verdict::Undecided => UNDECIDED_LIMIT,
    };
    now.saturating_duration_since(*bad_since.get_or_insert(now)) >= limit
}

/// The peers the last launch needs (in progress while `Watch::issuing` is set).
#[derive(Default)]
struct Current {
    all: bool,
    peers: Vec<usize>,
}

struct Inner {
    current: Current,
    /// Launches begun so far (each launch's ordinal).
    ordinal: u64,
    /// The last uncaptured launch that needed every peer, and each peer.
    last_all: u64,
    last_peer: Vec<u64>,
    /// Captured launches whose graphs are alive, needing every peer, and each peer.
    graphs_all: usize,
    graphs_peer: Vec<usize>,
}

/// A communicator's bookkeeping of the peers its work needs. Its lock is taken inside the launch
/// lock and never around a driver call, so the watchdog can read it while a launch waits (a
/// copy-engine handshake holds the launch lock until its peer comes).
pub struct Watch {
    inner: Mutex<Inner>,
    /// A launch is being issued (`begin` to `end`).
    issuing: AtomicBool,
}

impl Watch {
    /// Nothing launched yet, for a communicator of `nranks` ranks.
    pub fn new(nranks: usize) -> Watch {
        Watch {
            inner: Mutex::new(Inner {
                current: Current::default(),
                ordinal: 0,
                last_all: 0,
                last_peer: vec![0; nranks],
                graphs_all: 0,
                graphs_peer: vec![0; nranks],
            }),
            issuing: AtomicBool::new(false),
        }
    }

    /// A launch that needs `needs` begins (the caller holds the launch lock): its ordinal.
    /// `eager`: not captured, so its work is in flight from here until its probe says otherwise
    /// (a captured launch is held by its graph instead, `graph_held`). One lock per launch; `end`
    /// takes none.
    pub fn begin(&self, needs: Needs, eager: bool) -> u64 {
        let mut g = self.inner.lock();
        g.ordinal += 1;
        let ord = g.ordinal;
        let Inner { current, last_all, last_peer, .. } = &mut *g;
        current.all = matches!(needs, Needs::All);
        current.peers.clear();
        match needs {
            Needs::All if eager => *last_all = ord,
            Needs::Peers(ps) => {
                current.peers.extend_from_slice(ps);
                for &p in ps.iter().filter(|_| eager) {
                    if let Some(l) = last_peer.get_mut(p) {
                        *l = ord;
                    }
                }
            }
            Needs::All => {}
        }
        self.issuing.store(true, Ordering::Release);
        ord
    }

    /// The launch begun last was issued (or failed part way) on the host.
    pub fn end(&self) {
        self.issuing.store(false, Ordering::Release);
    }

    /// A CUDA graph now holds a captured launch that needs `needs` (until `graph_released`).
    pub fn graph_held(&self, needs: Needs) {
        self.graph_count(needs, true);
    }

    /// The CUDA graph that held a captured launch needing `needs` (`graph_held`) was destroyed.
    pub fn graph_released(&self, needs: Needs) {
        self.graph_count(needs, false);
    }

    fn graph_count(&self, needs: Needs, up: bool) {
        let mut g = self.inner.lock();
        let bump = |v: &mut usize| *v = if up { *v + 1 } else { v.saturating_sub(1) };
        match needs {
            Needs::All => bump(&mut g.graphs_all),
            Needs::Peers(ps) => {
                for &p in ps {
                    if let Some(c) = g.graphs_peer.get_mut(p) {
                        bump(c);
                    }
                }
            }
        }
    }

    /// Some CUDA graph holds captured work of this communicator: a replay of it may be running,
    /// unseen by the launch probes.
    pub fn holds_graphs(&self) -> bool {
        let g = self.inner.lock();
        g.graphs_all > 0 || g.graphs_peer.iter().any(|&n| n > 0)
    }

    /// What is known about the work that needs `p` (the caller asks `last_done` itself).
    pub fn view_of(&self, p: usize) -> View {
        let g = self.inner.lock();
        let c = &g.current;
        View {
            issuing: self.issuing.load(Ordering::Acquire) && (c.all || c.peers.contains(&p)),
            graphs: g.graphs_all > 0 || g.graphs_peer.get(p).is_some_and(|&n| n > 0),
            last: g.last_all.max(g.last_peer.get(p).copied().unwrap_or(0)),
            last_done: None,
        }
    }
}

/// Probes of the last launches, by ordinal (kept with the launch state, under the launch lock).
#[derive(Default)]
pub struct Recent {
    probes: VecDeque<(u64, Probe)>,
}

/// Launches whose probes are kept; an older one is answered for by the oldest kept.
const RECENT: usize = 64;

impl Recent {
    /// Records launch `ord`'s probe; only the last 64 are kept, the oldest dropped first.
    pub fn push(&mut self, ord: u64, p: Probe) {
        if self.probes.len() == RECENT {
            self.probes.pop_front();
        }
        self.probes.push_back((ord, p));
    }

    /// The probe that answers for launch `ord`: its own, or the earliest later one kept (which
    /// ends after it). None when no launch from `ord` on has been recorded yet.
    pub fn probe_for(&self, ord: u64) -> Option<Probe> {
        self.probes.iter().find(|(o, _)| *o >= ord).map(|(_, p)| *p)
    }
}

/// The ranks this one sends heartbeats to and watches (the next and previous ranks of the ring
/// that are not `out`: lost, or gone with a goodbye); None where no other rank is left.
pub fn ring_neighbours(me: usize, n: usize, out: &dyn Fn(usize) -> bool) -> (Option<usize>, Option<usize>) {
    let next = (1..n).map(|k| (me + k) % n).find(|&r| !out(r));
    let prev = (1..n).map(|k| (me + n - k) % n).find(|&r| !out(r));
    (next, prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_fails_the_communicator_only_for_work_that_needs_the_peer() {
        // Nothing ever needed it, or what did has finished: go on.
        assert_eq!(verdict(&View::default()), Verdict::Tolerate);
        assert_eq!(verdict(&View { last: 7, last_done: Some(true), ..View::default() }), Verdict::Tolerate);
        // A launch that needs it still runs.
        assert!(matches!(verdict(&View { last: 7, last_done: Some(false), ..View::default() }), Verdict::Fail(_)));
        // Being issued (a handshake waiting for it), or in a graph that may be replayed.
        assert!(matches!(verdict(&View { issuing: true, ..View::default() }), Verdict::Fail(_)));
        assert!(matches!(verdict(&View { graphs: true, last: 3, last_done: Some(true), ..View::default() }), Verdict::Fail(_)));
        // The launch could not be asked: ask again.
        assert_eq!(verdict(&View { last: 7, ..View::default() }), Verdict::Undecided);
    }

    #[test]
    fn unfinished_work_fails_only_after_the_grace() {
        let t0 = Instant::now();
        let fail = Verdict::Fail("x".into());
        let mut since = None;
        assert!(!fails_now(&fail, &mut since, t0), "the peer may have done its part");
        assert!(!fails_now(&fail, &mut since, t0 + GRACE / 2));
        assert!(fails_now(&fail, &mut since, t0 + GRACE));
        // Work that finished within the grace starts the clock again.
        let mut since = None;
        assert!(!fails_now(&fail, &mut since, t0));
        assert!(!fails_now(&Verdict::Tolerate, &mut since, t0 + GRACE / 2));
        assert!(!fails_now(&fail, &mut since, t0 + GRACE));
        assert!(fails_now(&fail, &mut since, t0 + GRACE * 2));
        // Not knowing lasts longer before it fails.
        let mut since = None;
        assert!(!fails_now(&Verdict::Undecided, &mut since, t0));
        assert!(!fails_now(&Verdict::Undecided, &mut since, t0 + GRACE));
        assert!(fails_now(&Verdict::Undecided, &mut since, t0 + UNDECIDED_LIMIT));
    }

    #[test]
    fn the_watch_tracks_which_launches_need_which_peers() {
        let w = Watch::new(3);
        // Rank 1's view: a collective (every peer), then a send/recv between ranks 1 and 2.
        let a = w.begin(Needs::All, true);
        w.end();
        let b = w.begin(Needs::Peers(&[2, 1]), true);
        // Rank 2 lost while b is being issued: it needs rank 2.
        assert!(w.view_of(2).issuing);
        assert!(!w.view_of(0).issuing, "b does not need rank 0");
        w.end();
        assert!(!w.view_of(2).issuing);
        // Rank 0 lost: the last launch that needs it is the collective; rank 2's is b.
        assert_eq!(w.view_of(0), View { issuing: false, graphs: false, last: a, last_done: None });
        assert_eq!(w.view_of(2).last, b);
        // Work enqueued later that needs rank 0 is judged the same way.
        let c = w.begin(Needs::All, true);
        w.end();
        assert_eq!(w.view_of(0).last, c);
        // A captured launch counts while its graph lives, and is not in flight by itself.
        let w = Watch::new(2);
        w.begin(Needs::Peers(&[1]), false);
        w.end();
        assert!(!w.holds_graphs());
        w.graph_held(Needs::Peers(&[1]));
        assert_eq!(w.view_of(1), View { graphs: true, ..View::default() });
        assert!(w.holds_graphs(), "frees wait while a graph holds captured work (when_idle)");
        w.graph_released(Needs::Peers(&[1]));
        assert!(!w.holds_graphs());
        assert_eq!(verdict(&w.view_of(1)), Verdict::Tolerate, "a graph destroyed, and no eager launch");
        w.graph_held(Needs::All);
        assert!(w.holds_graphs());
    }

    #[test]
    fn a_later_probe_answers_for_an_earlier_launch() {
        let mut r = Recent::default();
        assert_eq!(r.probe_for(1), None);
        r.push(3, Probe::Slot(1));
        r.push(5, Probe::Count(40));
        assert_eq!(r.probe_for(3), Some(Probe::Slot(1)));
        assert_eq!(r.probe_for(4), Some(Probe::Count(40)), "launch 4 ends before launch 5");
        assert_eq!(r.probe_for(1), Some(Probe::Slot(1)), "older than every probe kept");
        assert_eq!(r.probe_for(6), None, "not recorded yet (being issued)");
        for o in 10..10 + RECENT as u64 + 5 {
            r.push(o, Probe::Count(o as u32));
        }
        assert_eq!(r.probes.len(), RECENT);
        assert_eq!(r.probe_for(3), Some(Probe::Count(15)), "answered by the oldest kept");
    }

    #[test]
    fn the_heartbeat_ring_skips_ranks_that_are_out() {
        assert_eq!(ring_neighbours(1, 4, &|_| false), (Some(2), Some(0)));
        assert_eq!(ring_neighbours(0, 4, &|r| r == 1), (Some(2), Some(3)));
        assert_eq!(ring_neighbours(2, 4, &|r| r == 1), (Some(3), Some(0)));
        assert_eq!(ring_neighbours(1, 3, &|r| r == 0), (Some(2), Some(2)));
        assert_eq!(ring_neighbours(1, 2, &|r| r == 0), (None, None));
        assert_eq!(ring_neighbours(0, 1, &|_| false), (None, None));
    }
}
