//! Frees what cannot be freed at once.
//!
//! - **Shared buffers.** A rank's channel buffer is written by its peers' kernels (CUDA IPC or,
//!   in one process, peer access). Freeing it while a peer's kernel may still write there (the
//!   peer's abort makes its kernels leave their waits and go on with their puts and signals) is an
//!   illegal address in the peer's context, and CUDA calls freeing an exported allocation before
//!   every importer closed it undefined. So a communicator that goes hands its shared buffer
//!   here, with the peers that mapped it; it is freed once each of them released it (a notice
//!   over the bootstrap, `Bootstrap::send_released`, or `retire` within this process) or its
//!   process is gone (`process_gone`). Until then it stays allocated.
//! - **Drops from driver callbacks.** A CUDA graph holds the communicators it captured work of
//!   (comm/teardown.rs, `retain_for_graph`) until the driver destroys it; the driver's callback may
//!   make no CUDA call, so it hands what it held to the thread here, which drops it.
//! - **Frees that would wait for another communicator's kernel.** Freeing device or pinned
//!   memory (cuMemFree, cuMemFreeHost, cuIpcCloseMemHandle) synchronises the whole context: it
//!   waits for every kernel there, including one of another communicator that waits for a peer,
//!   and other threads' CUDA calls may wait behind it. A thread that aborts a process's
//!   communicators one after another deadlocks so: the first abort's free waits for a kernel
//!   that only the abort of a later communicator (same thread, not reached) would end. So memory
//!   is freed only through a `Gate` (comm/teardown.rs `when_idle`: no communicator of this
//!   process has an unfinished launch or, unless told to stop, captured work a graph replay may
//!   be running, and none can begin a launch meanwhile); what it refuses waits here (`drop_when`)
//!   and is freed by the thread once it lets it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::bootstrap::Bootstrap;
use crate::log::Subsys;

/// Set once the process exits (`at_exit`): CUDA's own exit handlers are about to tear its
/// contexts down, and a free on this module's thread from then on can fault. What is left is
/// leaked; the process is ending.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Held by this module's thread while it drops (frees) anything: `at_exit` lets a drop under
/// way end before exit goes on.
static BUSY: Mutex<()> = parking_lot::const_mutex(());

/// How often the thread looks at what waits for remote peers.
const POLL: Duration = Duration::from_millis(20);
/// After this long, a buffer still waiting is reported (once, at INFO): it may never be freed.
const NOTE_AFTER: Duration = Duration::from_secs(30);
/// How often a waiting buffer asks whether its peers' processes ended (a socket bind each).
const GONE_EVERY: Duration = Duration::from_secs(1);

/// A peer that must let go of a buffer before it is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiter {
    /// A rank of the same communicator in this process (`retire`).
    Local {
        /// Its rank in the communicator.
        rank: usize,
    },
    /// A rank in another process of this host: its release notice, or its process's end, which
    /// this process can see only within one network namespace (`beacon`).
    Remote {
        /// Its rank in the communicator.
        rank: usize,
        /// Its process's token (`topo::process_token`), which names its beacon.
        token: u64,
        /// Its process is in this network namespace, so its end can be seen (`process_gone`).
        visible: bool,
    },
}

/// A buffer waiting for its peers.
pub struct Held {
    /// For log lines.
    pub what: String,
    /// The communicator (`Bootstrap::instance_key`): local releases are matched by it.
    pub key: u64,
    /// The peers that must let go of it first.
    pub waiting: Vec<Waiter>,
    /// Where remote peers' release notices arrive.
    pub bootstrap: Option<Arc<Bootstrap>>,
    /// Dropped (freed) once nobody waits.
    pub hold: Box<dyn Send>,
}

struct Entry {
    held: Held,
    since: Instant,
    noted: bool,
    /// When its peers' processes were last looked for.
    looked: Option<Instant>,
}

/// Runs the closure it is given (which frees memory) and returns true only where that cannot
/// wait for a kernel that waits for this process (comm/teardown.rs `when_idle`), or where what it frees
/// is no longer touched by a kernel (comm/teardown.rs `hold_until_stopped`); else returns false and runs
/// nothing.
pub type Gate = Box<dyn FnMut(&mut dyn FnMut()) -> bool + Send>;

/// Something to free that its gate refused so far.
struct Gated {
    what: String,
    hold: Box<dyn Send>,
    gate: Gate,
    since: Instant,
    noted: bool,
}

#[derive(Default)]
struct State {
    held: Vec<Entry>,
    /// Ranks of a communicator in this process that released their peers' memory, by key, with
    /// how many ranks of it this process drives (the entry goes once all of them released).
    local: HashMap<u64, (usize, Vec<usize>)>,
    drops: Vec<Box<dyn Send>>,
    gated: Vec<Gated>,
    thread: bool,
}

fn state() -> &'static (Mutex<State>, Condvar) {
    static S: OnceLock<(Mutex<State>, Condvar)> = OnceLock::new();
    S.get_or_init(|| (Mutex::new(State::default()), Condvar::new()))
}

/// Which of `waiting` still hold the buffer. Pure: `local` says whether a rank of this process
/// released, `remote` whether a peer's notice came, `gone` whether a process (by token) ended.
pub fn still_waiting(waiting: &[Waiter], local: &dyn Fn(usize) -> bool, remote: &dyn Fn(usize) -> bool, gone: &dyn Fn(u64) -> bool) -> Vec<Waiter> {
    waiting
        .iter()
        .copied()
        .filter(|w| match *w {
            Waiter::Local { rank } => !local(rank),
            Waiter::Remote { rank, token, visible } => !(remote(rank) || (visible && gone(token))),
        })
        .collect()
}

/// Rank `rank` of communicator `key` (one of `ranks_here` ranks this process drives) no longer
/// touches its peers' memory, and hands over `held`, its own shared buffer: what waited only for
/// this rank is freed on this thread, and `held` at once if nobody needs it, else later (on a
/// release here, or on this module's thread when a remote peer's notice comes).
pub fn retire(key: u64, rank: usize, ranks_here: usize, held: Option<Held>) {
    let (m, cv) = state();
    let mut st = m.lock();
    let e = st.local.entry(key).or_insert((ranks_here, Vec::new()));
    if !e.1.contains(&rank) {
        e.1.push(rank);
    }
    if let Some(h) = held {
        st.held.push(Entry { held: h, since: Instant::now(), noted: false, looked: None });
    }
    let done = sweep(&mut st);
    if !st.held.is_empty() {
        ensure_thread(&mut st);
        cv.notify_all();
    }
    drop(st);
    dispose(done);
}

/// Drops `hold` (memory whose free synchronises the device) through `gate`: at once on this
/// thread where it lets it, else later on this module's thread, once it does. Never waits.
pub fn drop_when(gate: impl FnMut(&mut dyn FnMut()) -> bool + Send + 'static, what: impl FnOnce() -> String, hold: Box<dyn Send>) {
    if exiting() {
        std::mem::forget(hold);
        return;
    }
    let mut gate: Gate = Box::new(gate);
    let mut slot = Some(hold);
    if gate(&mut || drop(slot.take())) {
        return;
    }
    let Some(hold) = slot else { return };
    let what = what();
    nccl_info!(Subsys::Init, "{what}: freed later: a communicator of this process has a kernel running or a launch under way, and a free now would wait for it (and could deadlock)");
    let (m, cv) = state();
    let mut st = m.lock();
    st.gated.push(Gated { what, hold, gate, since: Instant::now(), noted: false });
    ensure_thread(&mut st);
    cv.notify_all();
}

/// One pass over the gated frees, off the lock: each is dropped if its gate lets it now.
fn drop_gated() {
    let (m, _) = state();
    let gated = std::mem::take(&mut m.lock().gated);
    if gated.is_empty() {
        return;
    }
    let mut kept = Vec::new();
    for mut g in gated {
        if exiting() {
            std::mem::forget(g.hold);
            continue;
        }
        let mut slot = Some(g.hold);
        if (g.gate)(&mut || drop(slot.take())) {
            nccl_info!(Subsys::Init, "{}: freed after {:.1} s", g.what, g.since.elapsed().as_secs_f64());
            continue;
        }
        let Some(hold) = slot else { continue };
        g.hold = hold;
        if !g.noted && g.since.elapsed() > NOTE_AFTER {
            g.noted = true;
            nccl_info!(Subsys::Init, "{}: still not freed after {:?}: some communicator of this process has had a kernel running whenever it was tried", g.what, NOTE_AFTER);
        }
        kept.push(g);
    }
    m.lock().gated.extend(kept);
}

/// Drops `b` on this module's thread (for driver callbacks, which may make no CUDA call).
pub fn drop_later(b: Box<dyn Send>) {
    if exiting() {
        std::mem::forget(b);
        return;
    }
    let (m, cv) = state();
    let mut st = m.lock();
    st.drops.push(b);
    ensure_thread(&mut st);
    cv.notify_all();
}

/// Takes out what nobody holds any more (dropped by the caller, outside the lock) and forgets
/// local releases no entry can need again.
fn sweep(st: &mut State) -> Vec<Box<dyn Send>> {
    let mut done = Vec::new();
    let local = &st.local;
    let mut kept = Vec::with_capacity(st.held.len());
    for mut e in st.held.drain(..) {
        let key = e.held.key;
        let bs = e.held.bootstrap.clone();
        let look = e.looked.is_none_or(|t| t.elapsed() >= GONE_EVERY);
        if look {
            e.looked = Some(Instant::now());
        }
        let left = still_waiting(
            &e.held.waiting,
            &|r| local.get(&key).is_some_and(|(_, v)| v.contains(&r)),
            &|r| bs.as_ref().is_some_and(|b| b.released_by(r)),
            &|t| look && process_gone(t),
        );
        if left.is_empty() {
            nccl_info!(Subsys::Init, "{}: every peer released it; freed", e.held.what);
            done.push(e.held.hold);
            continue;
        }
        e.held.waiting = left;
        if !e.noted && e.since.elapsed() > NOTE_AFTER {
            e.noted = true;
            nccl_info!(Subsys::Init, "{}: still allocated after {:?}: ranks {:?} have not released it (their kernels may still write there); it stays until they do", e.held.what, NOTE_AFTER, e.held.waiting);
        }
        kept.push(e);
    }
    st.held = kept;
    let keys: Vec<u64> = st.held.iter().map(|e| e.held.key).collect();
    st.local.retain(|k, (n, v)| v.len() < *n || keys.contains(k));
    done
}

fn ensure_thread(st: &mut State) {
    if st.thread || exiting() {
        return;
    }
    let spawned = std::thread::Builder::new().name("oxccl-reaper".into()).spawn(run);
    match spawned {
        Ok(_) => st.thread = true,
        Err(e) => nccl_warn!("cannot start the thread that frees communicators' memory later ({e}); it stays allocated"),
    }
}

/// Whether the process is exiting: frees are leaked from then on, on every thread.
fn exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}

/// Drops `b`, or leaks it once the process exits (CUDA may be torn down under the free).
fn dispose<T>(b: T) {
    if exiting() {
        std::mem::forget(b);
    } else {
        drop(b);
    }
}

/// The process exits (after main returned, or exit()): this module makes no CUDA call from now
/// on, on its thread or the callers'. A drop under way may end first (bounded: it can wait on the device). Seen in
/// one process driving two GPUs with CUDA graphs: a graph's last reference to a communicator,
/// released by the driver after the application destroyed the communicator, was freed on this
/// thread while CUDA tore down at exit.
extern "C" fn at_exit() {
    EXITING.store(true, Ordering::Release);
    drop(BUSY.try_lock_for(Duration::from_secs(2)));
}

fn run() {
    let (m, cv) = state();
    loop {
        let mut st = m.lock();
        if st.held.is_empty() && st.drops.is_empty() && st.gated.is_empty() {
            cv.wait(&mut st);
        } else if st.drops.is_empty() {
            cv.wait_for(&mut st, POLL);
        }
        let drops = std::mem::take(&mut st.drops);
        let done = sweep(&mut st);
        drop(st);
        let _busy = BUSY.lock();
        if exiting() {
            std::mem::forget(drops);
            std::mem::forget(done);
            std::mem::forget(std::mem::take(&mut m.lock().gated));
            return;
        }
        // Item by item: once exit begins the rest is leaked, so at_exit's wait stays short.
        for d in drops {
            dispose(d);
        }
        // Buffers every peer released: freed on this thread, which nothing else waits for, but
        // through the gate all the same (a free here can hold up the application's threads).
        for hold in done {
            drop_when(crate::comm::when_idle, || "a channel buffer every peer released".into(), hold);
        }
        drop_gated();
    }
}

/// This process's beacon: an abstract socket named after its token, bound while it lives
/// (`process_gone`). Made once, at the first communicator's init.
pub fn beacon() {
    static B: OnceLock<Option<std::os::fd::OwnedFd>> = OnceLock::new();
    B.get_or_init(|| {
        // At the first communicator's init, after the application initialised CUDA: CUDA's
        // exit handlers were registered before this one, which therefore runs first (handlers
        // run in reverse order). Registered lazily (at the first deferred free) it could come
        // too late: after exit began, or inside CUDA's own handler.
        // SAFETY: registers a plain function of this library. libc_nonshared's atexit ties it
        // to this object, so an unload (dlclose) runs it rather than leaving it dangling.
        if unsafe { libc::atexit(at_exit) } != 0 {
            nccl_info!(Subsys::Init, "cannot register the reaper's exit handler");
        }
        crate::reg::uds::listen(&beacon_name(crate::bootstrap::topo::process_token())).ok()
    });
}

fn beacon_name(token: u64) -> String {
    format!("oxccl-proc-{token:016x}")
}

/// Whether the process with `token` (of this network namespace) has ended: its beacon's name is
/// free. Every rank makes its process's beacon before it joins a communicator, so a peer's is
/// there while it lives (unless the socket could not be made, which is not expected).
pub fn process_gone(token: u64) -> bool {
    match crate::reg::uds::listen(&beacon_name(token)) {
        Ok(_probe) => true, // bound here, so nobody held it; closed at once
        Err(_) => false,    // in use (or cannot tell): alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn a_buffer_waits_for_each_peer_to_release_it_or_end() {
        let w = [
            Waiter::Local { rank: 1 },
            Waiter::Remote { rank: 2, token: 22, visible: true },
            Waiter::Remote { rank: 3, token: 33, visible: false },
        ];
        let none = still_waiting(&w, &|_| false, &|_| false, &|_| false);
        assert_eq!(none, w.to_vec(), "nobody let go");
        let all = still_waiting(&w, &|r| r == 1, &|r| r == 2 || r == 3, &|_| false);
        assert!(all.is_empty(), "every one released");
        // A process that ended let go, but only where its end can be seen.
        let gone = still_waiting(&w, &|r| r == 1, &|_| false, &|_| true);
        assert_eq!(gone, vec![Waiter::Remote { rank: 3, token: 33, visible: false }]);
        // A local rank is never taken for gone.
        assert_eq!(still_waiting(&w[..1], &|_| false, &|_| true, &|_| true), vec![Waiter::Local { rank: 1 }]);
    }

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn local_releases_free_at_once_in_any_order() {
        let freed = Arc::new(AtomicUsize::new(0));
        let key = 0x5eed_0001;
        let held = |rank: usize, peer: usize| Held {
            what: format!("test rank {rank}"),
            key,
            waiting: vec![Waiter::Local { rank: peer }],
            bootstrap: None,
            hold: Box::new(Counted(freed.clone())),
        };
        // Rank 0 goes first: its buffer waits for rank 1.
        retire(key, 0, 2, Some(held(0, 1)));
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        // Rank 1 goes: rank 0's buffer is freed on this thread, and rank 1's needs nobody.
        retire(key, 1, 2, Some(held(1, 0)));
        assert_eq!(freed.load(Ordering::SeqCst), 2);
        assert!(!state().0.lock().local.contains_key(&key), "the key is forgotten once all its ranks went");
        // Another communicator whose rank 1 never goes: rank 0's buffer stays.
        let key2 = 0x5eed_0002;
        retire(key2, 0, 2, Some(Held { key: key2, ..held(0, 1) }));
        assert_eq!(freed.load(Ordering::SeqCst), 2);
        assert!(state().0.lock().held.iter().any(|e| e.held.key == key2));
    }

    /// A free its gate refuses (another communicator's kernel still runs, and a free would wait
    /// for it) costs the caller nothing: it waits here and is freed on the thread once the gate
    /// lets it; a free the gate lets through happens at once, on the caller's thread.
    #[test]
    fn a_gated_free_never_waits_and_happens_once_the_gate_opens() {
        static OPEN: AtomicBool = AtomicBool::new(false);
        fn gate(free: &mut dyn FnMut()) -> bool {
            OPEN.load(Ordering::SeqCst) && {
                free();
                true
            }
        }
        let freed = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        drop_when(gate, || "test buffer".into(), Box::new(Counted(freed.clone())));
        assert!(t0.elapsed() < Duration::from_millis(100), "the caller waited {:?}", t0.elapsed());
        std::thread::sleep(POLL * 5);
        assert_eq!(freed.load(Ordering::SeqCst), 0, "kept while the gate refuses");
        OPEN.store(true, Ordering::SeqCst);
        let t1 = Instant::now();
        while freed.load(Ordering::SeqCst) == 0 {
            assert!(t1.elapsed() < Duration::from_secs(5), "never freed once the gate opened");
            std::thread::sleep(Duration::from_millis(2));
        }
        drop_when(gate, || "test buffer".into(), Box::new(Counted(freed.clone())));
        assert_eq!(freed.load(Ordering::SeqCst), 2, "freed at once when the gate lets it");
    }

    #[test]
    fn drops_handed_over_happen_on_the_thread() {
        let freed = Arc::new(AtomicUsize::new(0));
        drop_later(Box::new(Counted(freed.clone())));
        let t0 = Instant::now();
        while freed.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "never dropped");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_live_process_beacon_is_seen_and_a_missing_one_is_gone() {
        beacon();
        assert!(!process_gone(crate::bootstrap::topo::process_token()), "this process is alive");
        assert!(process_gone(0x0bad_0bad_0bad_0bad), "nobody holds that name");
    }
}
