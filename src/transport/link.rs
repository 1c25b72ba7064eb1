//! A TCP link to one rank on another host: one socket each way (opened through the bootstrap, so
//! NCCL_SOCKET_IFNAME and the id's secret apply), a sender thread and a receiver thread, each
//! taking jobs in order. Per direction the byte stream is a sequence of frames (header, payload),
//! one per job; both ends derive the same jobs from the same plan, so the header only confirms
//! what the receiver expects (sequence number, length): a mismatch means the ranks called
//! different operations, and fails the communicator instead of corrupting memory.
//!
//! GPU memory is staged through pinned buffers in chunks: the sender copies chunk k+1 to the host
//! while chunk k is on the wire; the receiver copies chunk k to the GPU while chunk k+1 arrives.
//! Copies use the thread's own non-blocking stream, never the legacy default stream, which would
//! wait for (and deadlock with) the user's kernel that waits for this transfer.
//!
//! Each thread makes its stream and pinned buffers when the link starts, and the link is not
//! ready until every thread has: never inside a step. Made on first use, at 8 ranks (32-56 link
//! threads per process creating streams and pinning memory at once, while the step kernel spins)
//! the driver deadlocked: threads stood in cuMemHostAlloc and cuStreamCreate on its write lock,
//! the copies the spinning kernel waited for stood behind them on its read lock (cuda-gdb,
//! BENCHMARKS.md of 2026-11-22, 7750d95).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::gpu::stream::{OwnedStream, RelaxedCapture};
use crate::gpu::{check, cu, CtxGuard, Device, HostMapped};
use crate::tls::Stream;

/// Staging chunk per copy.
pub const CHUNK: usize = 1 << 20;
const MAGIC: u32 = 0x544e_584f; // "OXNT"
/// Bytes of a frame's header (`header`): magic, a 32-bit word, the job's sequence number and its
/// length in bytes.
pub const HEADER_BYTES: usize = 24;

/// Where a job's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum Mem {
    /// GPU memory, by device address (staged through pinned buffers by carriers that need it).
    Dev(u64),
    /// Host memory (such as the proxy's arena), by address.
    Host(*mut u8),
}

/// One transfer for a link thread.
pub struct Job {
    /// Where its bytes are: the source of a send, the destination of a receive.
    pub mem: Mem,
    /// Its length in bytes.
    pub bytes: u64,
    /// The phase's tracker, where the job counts itself finished (or failed).
    pub done: Arc<Tracker>,
    /// Watched progress (`Landing`), published with release ordering: for a receive, how many
    /// bytes are in memory; for a send, how many of its source have been read (copied out of the
    /// GPU). Set to `bytes` when the job ends well, whatever the carrier; TCP also publishes along
    /// the way (receives into host memory, sends from GPU memory).
    pub landed: Option<Arc<AtomicU64>>,
    /// A send from a pipelined staged step's arena (`progress`): each piece goes once the step
    /// kernel has flagged it copied in.
    pub gate: Option<Arc<super::progress::Gate>>,
    /// Striped over every lane from this size; 0: the link's threshold (`stripe_min`). Both ends
    /// of a job must give the same value (`plan::Phase::stripe_min`).
    pub stripe_min: u64,
    /// A job of a collective that keeps few links busy at once (`plan::Phase::narrow`): a plain
    /// TCP link spins for it (`Spin::for_links(true)`) and, without a threshold of its own,
    /// stripes it from `narrow_stripe_min()`; other links ignore it. Both ends give the same value.
    pub narrow: bool,
}

/// A job posted with `Link::post_job` to be watched: how much of each striped part has landed
/// (a receive) or been read (a send).
pub struct Landing {
    /// (offset in the job, length, bytes of it landed)
    parts: Vec<(u64, u64, Arc<AtomicU64>)>,
}

impl Landing {
    /// Each stripe part's (offset in the job, length, bytes landed so far); acquire ordering.
    pub fn progress(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.parts.iter().map(|(off, len, got)| (*off, *len, got.load(Ordering::Acquire)))
    }

    /// Whether bytes [a, b) of the job have landed (a receive: they may be read then) or been read
    /// (a send: that range may be overwritten then); acquire ordering.
    pub fn has(&self, a: u64, b: u64) -> bool {
        self.parts.iter().all(|(off, len, got)| {
            let (lo, hi) = (a.max(*off), b.min(off + len));
            lo >= hi || got.load(Ordering::Acquire) >= hi - off
        })
    }
}

/// A TCP receive into host memory publishes its progress after every this many bytes (at most
/// the smallest piece a reduction combines at a time, `pipeline::MIN_PIECE`).
const LANDING_STEP: usize = 32 << 10;

// SAFETY: a Host pointer refers to the proxy's arena, which outlives the job (the proxy waits for
// the tracker before touching the arena again); device addresses are plain numbers.
unsafe impl Send for Job {}

/// Counts a phase's outstanding jobs; the first failure is kept.
pub struct Tracker {
    state: Mutex<(usize, Option<Error>)>,
    cv: Condvar,
}

impl Tracker {
    /// A tracker expecting `jobs` jobs, none failed.
    pub fn new(jobs: usize) -> Arc<Tracker> {
        Arc::new(Tracker { state: Mutex::new((jobs, None)), cv: Condvar::new() })
    }

    /// `k` more jobs (a job striped over several sockets).
    fn add(&self, k: usize) {
        self.state.lock().0 += k;
    }

    fn finish(&self, r: Result<()>) {
        let mut s = self.state.lock();
        s.0 = s.0.saturating_sub(1);
        if let Err(e) = r {
            s.1.get_or_insert(e);
        }
        self.cv.notify_all();
    }

    /// Jobs not finished yet.
    pub fn pending(&self) -> usize {
        self.state.lock().0
    }

    /// The first failure so far, if any (without waiting; `wait` still reports it).
    pub fn failed(&self) -> Option<Error> {
        self.state.lock().1.clone()
    }

    /// Waits until every job finished (or one failed); `stop()` is polled every few ms and makes
    /// the wait fail (communicator aborted).
    pub fn wait(&self, stop: &dyn Fn() -> Option<Error>) -> Result<()> {
        self.wait_noting(Spin::from_env().io, stop, &|_| {})
    }

    /// `wait`, telling `note` how many jobs are left once the wait has lasted a second (the
    /// proxy keeps it for the hang dump, OXCCL_DEBUG_DUMP); looking without sleeping for `spin`
    /// first (`Spin::io`: a condvar wake is a futex wake).
    pub fn wait_noting(&self, spin: Duration, stop: &dyn Fn() -> Option<Error>, note: &dyn Fn(usize)) -> Result<()> {
        let t0 = std::time::Instant::now();
        let mut noted = false;
        let mut w = SpinWait::new(spin);
        loop {
            let busy = {
                let s = self.state.lock();
                s.0 > 0 && s.1.is_none()
            };
            if !busy || !w.idle() {
                break;
            }
        }
        let mut s = self.state.lock();
        loop {
            if let Some(e) = s.1.take() {
                return Err(e);
            }
            if s.0 == 0 {
                return Ok(());
            }
            if let Some(e) = stop() {
                return Err(e);
            }
            if !noted && t0.elapsed() >= Duration::from_secs(1) {
                noted = true;
                note(s.0);
            }
            self.cv.wait_for(&mut s, Duration::from_millis(5));
        }
    }
}

/// One direction of one lane of a link: carries that direction's jobs, in order, on its own
/// thread. Both ends number a lane's jobs alike (1, 2, ...), so a carrier can check that what
/// arrives is what this rank expects. A transport (TCP here, the copy engine in `ce`, InfiniBand
/// in `ib`) is a pair of carriers per lane.
pub trait Carrier: Send + 'static {
    /// Sets up the thread's CUDA side before any job (see the module note): a stream; this
    /// default is for carriers that move GPU memory with copies only.
    fn prepare(&mut self, cx: &mut Cx) -> Result<()> {
        cx.prepare(false)
    }

    /// Carries job number `seq` of this lane and direction; `cx` is the thread's CUDA side.
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()>;

    /// The plain TCP socket this carrier frames jobs on, if that is all it does: the proxy may then
    /// carry small jobs itself on a clone of it (`inline`), with the same frames. None for a TLS
    /// stream (inline moves bytes on the descriptor; its link threads carry every job instead).
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

/// A lane: its sending and its receiving carrier.
pub type Lane = (Box<dyn Carrier>, Box<dyn Carrier>);

/// Unblocks every carrier of a link at once (abort): their blocking calls fail.
pub type Interrupt = Arc<dyn Fn() + Send + Sync>;

/// A lane's queues: its sender thread's and its receiver thread's (None once closed); each job
/// goes with its sequence number.
type Queues = (Option<Sender<Queued>>, Option<Sender<Queued>>);

/// A job on a lane's queue: its sequence number, and when it was posted (`lanetrace::stamp`).
type Queued = (u64, Job, u64);

/// Which way a job goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From this rank to the peer.
    Send,
    /// From the peer to this rank.
    Recv,
}

/// A link to one peer rank: its lanes, each a sending and a receiving carrier on threads of their
/// own that take jobs in order; large jobs are striped over the lanes.
pub struct Link {
    /// The peer's rank.
    pub peer: usize,
    lanes: Vec<Queues>,
    /// Per lane, the last sequence number given out each way (sends, receives). Numbers are taken
    /// when a job is posted, not when a thread carries it, so the proxy can carry a job on lane 0
    /// itself (`inline`) between posted ones: the lane's threads are idle then (the proxy waits
    /// for a phase's jobs before the next), and both ends count every job of the lane alike.
    seqs: Vec<[AtomicU64; 2]>,
    /// Jobs without their own threshold are striped from this size (0: `stripe_min()`).
    stripe_min: u64,
    /// Narrow jobs (`Job::narrow`) without their own threshold are striped from this size: on
    /// plain TCP links `narrow_stripe_min()`, else `stripe_min`.
    narrow_stripe_min: u64,
    /// Clones of lane 0's sockets (ours to write, ours to read) when the lanes are plain TCP.
    inline: Option<(TcpStream, TcpStream)>,
    interrupt: Interrupt,
    threads: Vec<JoinHandle<()>>,
    /// One report per thread that its CUDA side is set up (`ready` takes them).
    pending: Mutex<Vec<Receiver<Result<()>>>>,
}

/// Jobs at least this large are striped over every lane of the link (by default). 512 KiB rather
/// than 1 MiB since dddbb7a (2026-11-25): with the inline limit at 256 KiB (`inline::DEFAULT_MAX`
/// says why).
pub const STRIPE_MIN: u64 = 512 << 10;

/// OXCCL_NET_STRIPE_MIN: the smallest job (bytes) striped over every lane, default `STRIPE_MIN`,
/// at least 64 KiB. Both ends must split alike: equal on every rank (a mismatch fails the first
/// such transfer as a size mismatch, not silently).
pub fn stripe_min() -> u64 {
    static V: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *V.get_or_init(|| match crate::config::env("OXCCL_NET_STRIPE_MIN") {
        None => STRIPE_MIN,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 64 << 10 => {
                nccl_info!(crate::log::Subsys::Net, "OXCCL_NET_STRIPE_MIN set by environment to {n}");
                n
            }
            _ => {
                nccl_warn!("OXCCL_NET_STRIPE_MIN={v}: expected a byte count of at least 65536, using {STRIPE_MIN}");
                STRIPE_MIN
            }
        },
    })
}

/// How long a link's threads, and the proxy waiting for them, spin after the last progress before
/// they block. A blocked thread is woken by a futex or the socket's wait queue: tens of
/// microseconds on an idle server core, once per job and again whenever a socket runs dry mid-job.
/// Spinning costs a core per waiting thread, so by default links spin only where every machine has
/// a core for each thread that may (`threads_fit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spin {
    /// On an empty job queue, after a job: between steps too.
    pub queue: Duration,
    /// Mid-transfer (a socket with nothing to read or no room to write), and the proxy waiting for
    /// its phase's jobs: only while something is in flight.
    pub io: Duration,
}

/// The spin of links whose threads fit their machines' cores. At 2 simulated hosts x 1 on H200
/// (BENCHMARKS.md of 2026-11-28, 0743db7), with stripes from 256 KiB: Broadcast and Reduce 256 KB
/// 0.69 and 0.78 of NCCL's time against 0.98 and 1.05; exchanges of 256 KiB a rank (AllGather,
/// ReduceScatter, AlltoAll 512 KB) 0.54-0.64 against 0.75-0.81. 200 us gained little more.
pub const FIT_SPIN: Duration = Duration::from_micros(50);

/// The striping threshold of links whose threads spin (`FIT_SPIN`): a job from 128 KiB on four
/// lanes then costs no wake-ups, and the proxy no longer carries it alone. Without spinning,
/// striping at 256 KiB gained little (BENCHMARKS.md of 2026-11-28, 0743db7) and lost at 2 x 2
/// (BENCHMARKS.md of 2026-11-27, 26c2104), whose threads do not fit. At 2 simulated hosts x 1 on
/// H200, three rounds, 128 KiB against 256 KiB: Broadcast and Reduce 128 KB 0.80 and 0.77 of NCCL's
/// time against 0.92 and 0.96, AllGather and AlltoAll 256 KB 0.49-0.54 against 0.60-0.70, the rest
/// within noise (BENCHMARKS.md of 2026-11-28, d5ead55).
pub const FIT_STRIPE_MIN: u64 = 128 << 10;

/// The striping threshold of links that spin by default (`fit`, see `Link::spawn`): 0 (the
/// link's, `stripe_min()`) unless they do and OXCCL_NET_STRIPE_MIN is not set.
pub fn fit_stripe_min(fit: bool) -> u64 {
    if fit && crate::config::env("OXCCL_NET_STRIPE_MIN").is_none() {
        FIT_STRIPE_MIN
    } else {
        0
    }
}

/// The striping threshold of narrow jobs (`Job::narrow`) on plain TCP links: `FIT_STRIPE_MIN`, or
/// OXCCL_NET_STRIPE_MIN where set. Proxies carry such jobs inline only below it.
pub fn narrow_stripe_min() -> u64 {
    match fit_stripe_min(true) {
        0 => stripe_min(),
        n => n,
    }
}

impl Spin {
    /// OXCCL_NET_LANE_SPIN_US (both waits) and OXCCL_NET_QUEUE_SPIN_US (the queue's alone), else
    /// `FIT_SPIN` where the threads fit (`fit`), else none.
    pub fn for_links(fit: bool) -> Spin {
        let io = env_spin("OXCCL_NET_LANE_SPIN_US").unwrap_or(if fit { FIT_SPIN } else { Duration::ZERO });
        Spin { queue: env_spin("OXCCL_NET_QUEUE_SPIN_US").unwrap_or(io), io }
    }

    /// The settings alone (links made without a communicator: tests).
    pub fn from_env() -> Spin {
        Spin::for_links(false)
    }
}

/// A spin budget in microseconds (at most a second) from the environment (read when links are
/// made, not on a hot path).
fn env_spin(name: &str) -> Option<Duration> {
    crate::config::env(name).and_then(|v| match v.trim().parse::<u64>() {
        Ok(n) => {
            nccl_info!(crate::log::Subsys::Net, "{name} set by environment to {n}");
            Some(Duration::from_micros(n.min(1_000_000)))
        }
        Err(_) => {
            nccl_warn!("{name}={v}: expected microseconds, ignored");
            None
        }
    })
}

/// Whether every machine has a core for each thread of the communicator's links that may spin
/// there: per rank, two per lane for each rank it links to (those of another host hash), and its
/// proxy. `ranks`: (host hash, machine, CPUs it may use) per rank. A machine's ranks count
/// together, so hosts simulated on one machine count as one (at 2 x 2 on 64 cores, 64 link
/// threads spinning 200 us made AlltoAll 2 MB slower: BENCHMARKS.md of 2026-11-27, 1464379).
pub fn threads_fit(ranks: &[(u64, u64, u32)], lanes: usize) -> bool {
    each_machine_fits(ranks, |here| here.iter().map(|r| remote_ranks(ranks, r) * lanes * 2 + 1).sum())
}

/// The most lanes, up to `max`, with which the links' threads fit every machine's cores
/// (`threads_fit`); `max` where even one lane's do not (nothing spins then, and more lanes still
/// carry more). At 4 simulated hosts x 1 on one 64-core machine: 2 lanes (52 threads; 4 lanes
/// are 100, and striped steps of 2-4 MB kept 96 of them busy at once); 2 x 2: 3 (52, not 68).
pub fn fit_lanes(ranks: &[(u64, u64, u32)], max: usize) -> usize {
    (1..=max).rev().find(|&l| threads_fit(ranks, l)).unwrap_or(max)
}

/// `threads_fit` for collectives that keep few links busy at once (Broadcast, Reduce:
/// `plan::Phase::narrow`): each rank moves data with at most one link each way (two threads per
/// lane) but the root, which may send to or receive from every other host's representative, in
/// one direction (a thread per lane each). Per machine: two threads per lane and the proxy for
/// each rank, and a thread per lane for each of the root's links beyond two. At 2 or 4 simulated
/// hosts on one 64-core machine with 4 lanes, 36 and 40 threads: it holds where `threads_fit`
/// (68, 100) does not.
pub fn narrow_fit(ranks: &[(u64, u64, u32)], lanes: usize) -> bool {
    each_machine_fits(ranks, |here| {
        let root_extra = here.iter().map(|r| remote_ranks(ranks, r).saturating_sub(2)).max().unwrap_or(0) * lanes;
        here.len() * (2 * lanes + 1) + root_extra
    })
}

/// Whether every machine's ranks (`ranks`: host hash, machine, CPUs each) need at most as many
/// threads (`need` of that machine's ranks) as the fewest CPUs any of them may use.
fn each_machine_fits(ranks: &[(u64, u64, u32)], need: impl Fn(&[&(u64, u64, u32)]) -> usize) -> bool {
    ranks.iter().all(|m| {
        let here: Vec<_> = ranks.iter().filter(|r| r.1 == m.1).collect();
        let cores = here.iter().map(|r| r.2).min().unwrap_or(0) as usize;
        need(&here) <= cores
    })
}

/// How many ranks are on another host than `r` (it links to each).
fn remote_ranks(ranks: &[(u64, u64, u32)], r: &(u64, u64, u32)) -> usize {
    ranks.iter().filter(|o| o.0 != r.0).count()
}

/// A spinning wait's budget: `idle` after each round without progress says whether to go on
/// spinning (false once `budget` has passed since the last `progress`, or at once for a zero
/// budget). The clock is read every 16th round only.
struct SpinWait {
    budget: Duration,
    until: Option<Instant>,
    rounds: u32,
}

impl SpinWait {
    fn new(budget: Duration) -> SpinWait {
        SpinWait { budget, until: None, rounds: 0 }
    }

    /// Whether it spins at all: only with a budget. A thread without one never spins, not even
    /// through a burst: where the link threads outnumber the cores, spinning ones kept threads
    /// just woken off a CPU for a scheduler slice (2 x 1 on 12 cores, ReduceScatter 1-4 MB took
    /// 3.6-4.0 ms a call instead of 0.2-0.4: BENCHMARKS.md of 2026-11-28, 266c558).
    fn spins(&self) -> bool {
        !self.budget.is_zero()
    }

    fn idle(&mut self) -> bool {
        if !self.spins() {
            return false;
        }
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(16) {
            let now = Instant::now();
            let until = *self.until.get_or_insert(now + self.budget);
            if now >= until && !burst::holds(now - until) {
                return false;
            }
        }
        std::hint::spin_loop();
        true
    }

    fn progress(&mut self) {
        self.until = None;
        self.rounds = 0;
    }
}

/// Spinning through a burst of eager steps (OXCCL_NET_BURST_SPIN_US): while this process has
/// launched cross-host steps whose triggers the proxy has not taken yet (nccl-tests' timed loop,
/// a training step's collectives), a thread that spins at all (`Spin`) keeps spinning past its
/// budget, for at most that long, instead of blocking and costing a wake-up on the next step's
/// path. At 4 simulated hosts x 1, once the ranks' steps drift apart some links' threads idle past
/// their 50 us and block; each step then waits for wake-ups, which keeps them apart: runs of 128 KB
/// Broadcasts at 100-500 us a step where 20 is possible (BENCHMARKS.md of 2026-11-28, f347df5). Off
/// by default until measured.
pub mod burst {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    /// Eager steps launched and not taken yet, summed over the process's communicators
    /// (`Plans::eager` keeps it).
    static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

    /// How long past its budget a spinning thread may go on during a burst (0: off).
    pub fn cap() -> Duration {
        static CAP: OnceLock<Duration> = OnceLock::new();
        *CAP.get_or_init(|| super::env_spin("OXCCL_NET_BURST_SPIN_US").unwrap_or_default())
    }

    /// A spinning thread `past` its budget goes on spinning.
    pub fn holds(past: Duration) -> bool {
        // Relaxed: a hint; a stale count costs at most one spin or one wake-up.
        holds_with(past, cap(), IN_FLIGHT.load(Ordering::Relaxed))
    }

    /// `holds` with the setting and the count given.
    pub fn holds_with(past: Duration, cap: Duration, in_flight: usize) -> bool {
        past < cap && in_flight > 0
    }

    /// `n` more eager steps on their way (negative: taken or dropped).
    pub fn add(n: isize) {
        if n >= 0 {
            IN_FLIGHT.fetch_add(n.unsigned_abs(), Ordering::Relaxed);
        } else {
            // Never below zero, whatever the order of the updates.
            let _ = IN_FLIGHT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n.unsigned_abs())));
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn spins_past_the_budget_only_in_a_burst_and_within_the_cap() {
            let (us, cap) = (Duration::from_micros, Duration::from_micros(2000));
            assert!(holds_with(us(0), cap, 1));
            assert!(holds_with(us(1999), cap, 3));
            assert!(!holds_with(us(2000), cap, 3), "past the cap");
            assert!(!holds_with(us(10), cap, 0), "no step on its way");
            assert!(!holds_with(us(0), Duration::ZERO, 5), "off");
        }
    }
}

/// Moves `len` bytes by `op(offset, blocking)`, one socket call on the rest from `offset`:
/// non-blocking while `w` allows spinning, else blocking (which returns with whatever moved, after
/// which the spinning starts again). A call moving nothing ends the stream: `zero`.
fn full(len: usize, w: &mut SpinWait, zero: ErrorKind, mut op: impl FnMut(usize, bool) -> std::io::Result<usize>) -> std::io::Result<()> {
    let (mut done, mut blocking) = (0, false);
    while done < len {
        match op(done, blocking) {
            Ok(0) => return Err(zero.into()),
            Ok(n) => {
                done += n;
                blocking = false;
                w.progress();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => blocking = !w.idle(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `read_exact`, spinning on non-blocking reads while `w` allows before each blocking one.
fn read_full(sock: &mut Stream, buf: &mut [u8], w: &mut SpinWait) -> std::io::Result<()> {
    if !w.spins() {
        return sock.read_exact(buf);
    }
    full(buf.len(), w, ErrorKind::UnexpectedEof, |off, blocking| {
        let rest = &mut buf[off..];
        if blocking {
            return sock.read(rest);
        }
        // MSG_DONTWAIT applies to this call only (the socket stays blocking for the blocking calls).
        sock.recv_nowait(rest)
    })
}

/// `write_all`, spinning on non-blocking writes while `w` allows before each blocking one (a TLS
/// stream then flushes what the last non-blocking write left).
fn write_full(sock: &mut Stream, buf: &[u8], w: &mut SpinWait) -> std::io::Result<()> {
    if !w.spins() {
        return sock.write_all(buf);
    }
    full(buf.len(), w, ErrorKind::WriteZero, |off, blocking| {
        let rest = &buf[off..];
        if blocking {
            return sock.write(rest);
        }
        // MSG_NOSIGNAL too: a closed peer is an error here, not SIGPIPE in the application.
        sock.send_nowait(rest)
    })?;
    sock.flush()
}

/// A job of `bytes` as the parts each lane carries: the whole job on lane 0 when smaller than
/// `min` (0: `stripe_min()`), else one contiguous part per lane. Both ends split alike (same
/// size, threshold and lane count).
fn stripes(bytes: u64, lanes: usize, min: u64) -> Vec<(u64, u64)> {
    let min = if min == 0 { stripe_min() } else { min };
    if bytes < min || lanes < 2 {
        return vec![(0, bytes)];
    }
    (0..lanes).map(|i| split(bytes, lanes, i)).filter(|&(_, n)| n > 0).collect()
}

/// TCP lanes: one per socket pair; `out` sockets we write, `inc` sockets we read; both lists
/// equally long.
pub fn tcp_lanes(peer: usize, out: Vec<Stream>, inc: Vec<Stream>) -> Result<(Vec<Lane>, Interrupt)> {
    let socks = prepare_sockets("network", &out, &inc)?;
    let lanes = out
        .into_iter()
        .zip(inc)
        .map(|(o, i)| (Box::new(TcpSend { sock: o, peer }) as Box<dyn Carrier>, Box::new(TcpRecv { sock: i, peer }) as Box<dyn Carrier>))
        .collect();
    Ok((lanes, shutdown_all(socks)))
}

/// Checks a link's socket pairs (`out` and `inc` equally long, not empty), puts them in blocking
/// mode without Nagle's delay, and returns clones of them all for the link's interrupt.
/// `what` names the transport in errors.
pub fn prepare_sockets(what: &str, out: &[Stream], inc: &[Stream]) -> Result<Vec<Stream>> {
    if out.is_empty() || out.len() != inc.len() {
        return Err(Error::internal(format!("{what} link with {} + {} sockets", out.len(), inc.len())));
    }
    let mut socks = Vec::new();
    for s in out.iter().chain(inc) {
        s.set_nonblocking(false).map_err(|e| Error::io("blocking mode", &e))?;
        s.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", &e))?;
        socks.push(s.try_clone().map_err(|e| Error::io("cloning a socket", &e))?);
    }
    Ok(socks)
}

/// An interrupt that shuts these sockets down.
pub fn shutdown_all(socks: Vec<Stream>) -> Interrupt {
    Arc::new(move || {
        for s in &socks {
            let _ = s.shutdown(Shutdown::Both);
        }
    })
}

impl Link {
    /// A TCP link with `peer` (see tcp_lanes). `dev`: the GPU whose memory jobs name (None: host
    /// memory only, for tests).
    pub fn start(dev: Option<&'static Device>, me: usize, peer: usize, out: Vec<Stream>, inc: Vec<Stream>) -> Result<Link> {
        let (lanes, interrupt) = tcp_lanes(peer, out, inc)?;
        Link::new(dev, me, peer, lanes, interrupt)
    }

    /// `spawn`, then `ready`.
    pub fn new(dev: Option<&'static Device>, me: usize, peer: usize, lanes: Vec<Lane>, interrupt: Interrupt) -> Result<Link> {
        let link = Link::spawn(dev, me, peer, lanes, interrupt, false)?;
        link.ready()?;
        Ok(link)
    }

    /// Starts two threads per lane (its sender and its receiver), which set up their CUDA side
    /// (`Carrier::prepare`); the link takes no job until `ready` has returned. Apart so that a
    /// communicator's links set up at once.
    /// `fit`: the communicator's link threads fit its machines' cores (`threads_fit`), so plain
    /// TCP lanes spin and stripe from `FIT_STRIPE_MIN` (`Spin`; measured on TCP only, so other
    /// transports keep the settings alone). Both ends of a link take the same transport.
    pub fn spawn(dev: Option<&'static Device>, me: usize, peer: usize, lanes: Vec<Lane>, interrupt: Interrupt, fit: bool) -> Result<Link> {
        if lanes.is_empty() {
            return Err(Error::internal(format!("network link to rank {peer} without lanes")));
        }
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f).map_err(|e| Error::io("cannot start a network thread", &e))
        };
        let inline = match lanes.first().map(|(s, r)| (s.socket(), r.socket())) {
            Some((Some(o), Some(i))) => {
                let clone = |s: &TcpStream| s.try_clone().map_err(|e| Error::io("cloning a socket", &e));
                Some((clone(o)?, clone(i)?))
            }
            _ => None,
        };
        let tcp = inline.is_some();
        let fit = fit && tcp;
        let (spin, stripe_min) = (Spin::for_links(fit), fit_stripe_min(fit));
        // Narrow jobs as a fit link carries every job (measured on TCP only, as `fit`).
        let narrow = Spin::for_links(tcp);
        let narrow_stripe_min = if tcp { narrow_stripe_min() } else { stripe_min };
        let seqs = lanes.iter().map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect();
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        let mut pending = Vec::new();
        for (i, (s, r)) in lanes.into_iter().enumerate() {
            let (stx, srx) = channel::<Queued>();
            let (rtx, rrx) = channel::<Queued>();
            let (sready, sdone) = channel();
            let (rready, rdone) = channel();
            threads.push(spawn(format!("oxccl-net{me}>{peer}.{i}"), Box::new(move || serve(dev, srx, s, sready, [spin, narrow])))?);
            threads.push(spawn(format!("oxccl-net{me}<{peer}.{i}"), Box::new(move || serve(dev, rrx, r, rready, [spin, narrow])))?);
            queues.push((Some(stx), Some(rtx)));
            pending.extend([sdone, rdone]);
        }
        Ok(Link { peer, lanes: queues, seqs, stripe_min, narrow_stripe_min, inline, interrupt, threads, pending: Mutex::new(pending) })
    }

    /// Waits until every thread has set up its CUDA side; the first failure is the link's.
    pub fn ready(&self) -> Result<()> {
        let peer = self.peer;
        for r in self.pending.lock().drain(..) {
            r.recv().map_err(|_| Error::internal(format!("a network thread for rank {peer} ended during set-up")))??;
        }
        Ok(())
    }

    /// The next sequence number of `lane` going `dir`.
    pub fn next_seq(&self, lane: usize, dir: Dir) -> u64 {
        let i = usize::from(dir == Dir::Recv);
        // Relaxed: only the proxy thread posts, and the channel or the proxy itself carries it on.
        self.seqs.get(lane).map_or(0, |s| s[i].fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Lane 0's sockets (write, read) when the proxy may carry small jobs on them itself.
    pub fn inline_sockets(&self) -> Option<(&TcpStream, &TcpStream)> {
        self.inline.as_ref().map(|(o, i)| (o, i))
    }

    /// Posts a send job, unwatched (`post_job` with `Dir::Send`).
    pub fn send(&self, job: Job) {
        self.post(job, true);
    }

    /// Posts a receive job, unwatched (`post_job` with `Dir::Recv`).
    pub fn recv(&self, job: Job) {
        self.post(job, false);
    }

    /// Posts a job going `dir`. `watch`: the caller follows its progress (`Landing::has`, the
    /// `Landing` returned): for a receive, which bytes have landed; for a send, which bytes of a
    /// GPU source have been copied out (so that range may be overwritten).
    pub fn post_job(&self, job: Job, dir: Dir, watch: bool) -> Option<Landing> {
        let send = dir == Dir::Send;
        if !watch {
            self.post(job, send);
            return None;
        }
        let parts: Vec<(u64, u64, Arc<AtomicU64>)> = self.stripes(&job).into_iter().map(|(o, n)| (o, n, Arc::new(AtomicU64::new(0)))).collect();
        let counters = parts.iter().map(|p| p.2.clone()).collect();
        self.post_parts(job, send, Some(counters));
        Some(Landing { parts })
    }

    fn post(&self, job: Job, send: bool) {
        self.post_parts(job, send, None);
    }

    /// The parts of `job` each lane carries: from its own threshold, else the link's (for its
    /// kind of job).
    fn stripes(&self, job: &Job) -> Vec<(u64, u64)> {
        let min = match (job.stripe_min, job.narrow) {
            (0, true) => self.narrow_stripe_min,
            (0, false) => self.stripe_min,
            (n, _) => n,
        };
        stripes(job.bytes, self.lanes.len(), min)
    }

    /// `landed`: one counter per stripe part (see `Job::landed`).
    fn post_parts(&self, job: Job, send: bool, landed: Option<Vec<Arc<AtomicU64>>>) {
        let parts = self.stripes(&job);
        job.done.add(parts.len() - 1);
        let dir = if send { Dir::Send } else { Dir::Recv };
        for (i, (lane, &(off, n))) in self.lanes.iter().zip(&parts).enumerate() {
            let mem = match job.mem {
                Mem::Dev(p) => Mem::Dev(p + off),
                // SAFETY: off + n <= job.bytes: within the job's host range.
                Mem::Host(p) => Mem::Host(unsafe { p.add(off as usize) }),
            };
            let landed = landed.as_ref().and_then(|v| v.get(i).cloned());
            let part = Job { mem, bytes: n, done: job.done.clone(), landed, gate: job.gate.clone(), stripe_min: job.stripe_min, narrow: job.narrow };
            post(if send { &lane.0 } else { &lane.1 }, self.next_seq(i, dir), part, self.peer);
        }
    }

    /// Unblocks every thread at once (abort): their blocking calls fail.
    pub fn interrupt(&self) {
        (self.interrupt)();
    }
}

fn post(q: &Option<Sender<Queued>>, seq: u64, job: Job, peer: usize) {
    let done = job.done.clone();
    if q.as_ref().is_none_or(|q| q.send((seq, job, super::lanetrace::stamp())).is_err()) {
        done.finish(Err(Error::remote(format!("the network link to rank {peer} is closed"))));
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Closing the queues ends the threads once idle; the shutdown ends a blocked one.
        self.lanes.clear();
        self.interrupt();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A thread's CUDA side: the device context, relaxed capture mode, its stream, and two pinned
/// buffers for carriers that stage through host memory (none for the others).
pub struct Staging {
    /// The thread's own non-blocking stream, for its staging copies.
    pub stream: OwnedStream,
    bufs: Vec<HostMapped>,
    // Dropped after the stream and buffers: the context stays current for their teardown.
    _relaxed: RelaxedCapture,
    _ctx: CtxGuard,
}

impl Staging {
    fn new(dev: &'static Device, buffers: bool) -> Result<Staging> {
        let ctx = CtxGuard::new(dev)?;
        let relaxed = RelaxedCapture::new()?;
        let stream = OwnedStream::new(dev)?;
        let bufs = if buffers { vec![HostMapped::zeroed(dev, CHUNK)?, HostMapped::zeroed(dev, CHUNK)?] } else { Vec::new() };
        Ok(Staging { _ctx: ctx, _relaxed: relaxed, stream, bufs })
    }

    /// Pinned buffer `i`, which `len` bytes must fit.
    fn buf(&self, i: usize, len: usize) -> Result<&HostMapped> {
        let b = self.bufs.get(i).ok_or_else(|| Error::internal("network staging without pinned buffers"))?;
        if len > b.size {
            return Err(Error::internal(format!("{len} bytes for a {} byte staging buffer", b.size)));
        }
        Ok(b)
    }

    /// Waits for the copies queued on the thread's stream.
    pub fn sync(&self) -> Result<()> {
        self.stream.sync("cuStreamSynchronize (network staging)")
    }

    /// Queues a copy of `len` bytes from device address `src` into pinned buffer `buf`, on the
    /// thread's stream (done after `sync`). Fails where `len` does not fit the buffer.
    pub fn to_host(&self, buf: usize, src: u64, len: usize) -> Result<()> {
        // SAFETY: the destination is our pinned buffer of at least len bytes (checked); src is device memory
        // of the plan's operation, valid while the user's kernel waits for this step.
        check(unsafe { cu::cuMemcpyDtoHAsync_v2(self.buf(buf, len)?.host.cast(), src, len, self.stream.raw) }, "cuMemcpyDtoHAsync (network send)")
    }

    /// Queues a copy of `len` bytes from pinned buffer `buf` to device address `dst`, on the
    /// thread's stream (done after `sync`). Fails where `len` does not fit the buffer.
    pub fn to_device(&self, buf: usize, dst: u64, len: usize) -> Result<()> {
        // SAFETY: as in to_host, the other way.
        check(unsafe { cu::cuMemcpyHtoDAsync_v2(dst, self.buf(buf, len)?.host.cast(), len, self.stream.raw) }, "cuMemcpyHtoDAsync (network receive)")
    }

    // The buffer is raw pinned memory, not data owned through &self; one thread uses it.
    /// The first `len` bytes of pinned buffer `buf`, for the host side of the thread; the
    /// stream's copies into or out of it must be synchronised first. Fails where `len` does not fit.
    #[allow(clippy::mut_from_ref)]
    pub fn slice(&self, buf: usize, len: usize) -> Result<&mut [u8]> {
        let b = self.buf(buf, len)?;
        // SAFETY: our pinned buffer, at least len bytes (checked), used by this thread only; the
        // stream's copies into or out of it are synchronised before the slice is touched.
        Ok(unsafe { std::slice::from_raw_parts_mut(b.host, len) })
    }
}

/// A job's staging chunks. (Quarter-job chunks, 64 KiB - 1 MiB, were measured slower from 512 KiB
/// to 8 MiB on 2 simulated hosts: BENCHMARKS.md of 2026-11-22, a865900.)
fn chunks(bytes: u64) -> impl Iterator<Item = (u64, usize)> {
    (0..bytes.div_ceil(CHUNK as u64)).map(move |k| (k * CHUNK as u64, (bytes - k * CHUNK as u64).min(CHUNK as u64) as usize))
}

/// A link thread's CUDA side: the staging, made by `prepare` when the link starts (a link
/// without a GPU, in tests, has none).
pub struct Cx {
    dev: Option<&'static Device>,
    st: Option<Staging>,
    /// How long a transfer spins on its socket before it blocks (`Spin::io`).
    pub spin: Duration,
}

impl Cx {
    /// The link's GPU; fails on a link without one (a job named GPU memory on a host-only link).
    pub fn device(&self) -> Result<&'static Device> {
        self.dev.ok_or_else(|| Error::internal("a network job names GPU memory on a host-only link"))
    }

    /// Makes the staging (with pinned buffers if `buffers`), once; nothing without a GPU.
    pub fn prepare(&mut self, buffers: bool) -> Result<()> {
        if let (Some(dev), None) = (self.dev, &self.st) {
            self.st = Some(Staging::new(dev, buffers).map_err(|e| e.context("network staging set-up"))?);
        }
        Ok(())
    }

    /// The thread's staging; fails on a link without a GPU, or where `prepare` has not made it.
    pub fn staging(&self) -> Result<&Staging> {
        self.device()?;
        self.st.as_ref().ok_or_else(|| Error::internal("network staging not set up when the link started"))
    }
}

/// A link thread: sets up its CUDA side and reports it on `ready`, then takes jobs in order
/// (numbered when posted); after the first failure every later job fails at once with it (the
/// byte stream is out of step). `[spin, narrow]`: how it spins for ordinary jobs and for narrow
/// ones (`Job::narrow`), on the queue after each too.
fn serve(dev: Option<&'static Device>, jobs: Receiver<Queued>, mut carrier: Box<dyn Carrier>, ready: Sender<Result<()>>, [spin, narrow]: [Spin; 2]) {
    let mut cx = Cx { dev, st: None, spin: spin.io };
    let set_up = carrier.prepare(&mut cx);
    let mut broken = set_up.as_ref().err().cloned();
    // The link may be gone already (its set-up failed on another thread).
    let _ = ready.send(set_up);
    let mut queue = spin.queue;
    let mut trace = super::lanetrace::LaneTrace::new();
    // The next job, and whether the thread blocked for it.
    let next = |queue: Duration| {
        let mut w = SpinWait::new(queue);
        loop {
            match jobs.try_recv() {
                Ok(j) => return Some((j, false)),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if w.idle() => {}
                Err(TryRecvError::Empty) => return jobs.recv().ok().map(|j| (j, true)),
            }
        }
    };
    while let Some(((seq, job, posted), blocked)) = next(queue) {
        let taken = trace.as_ref().map_or(0, |_| super::lanetrace::monotonic_ns());
        let s = if job.narrow { narrow } else { spin };
        (cx.spin, queue) = (s.io, s.queue);
        let r = match &broken {
            Some(e) => Err(e.clone()),
            // A panic fails this job (and the lane after it) instead of ending the thread with
            // the job never finished, which would leave the proxy waiting for it.
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| carrier.carry(&mut cx, seq, &job)))
                .unwrap_or_else(|p| Err(Error::internal(format!("network thread: internal error: {}", crate::error::panic_text(&*p))))),
        };
        if let Err(e) = &r {
            broken.get_or_insert(e.clone());
        } else if let Some(l) = &job.landed {
            // Release: the job's bytes are in memory before a watcher sees them counted.
            l.store(job.bytes, Ordering::Release);
        }
        if let Some(t) = &mut trace {
            t.add(posted, taken, blocked, job.bytes, r.is_err());
        }
        job.done.finish(r);
    }
    // The carrier's CUDA resources go before the thread's context guard (in cx).
    drop(carrier);
}

struct TcpSend {
    sock: Stream,
    peer: usize,
}

impl Carrier for TcpSend {
    fn prepare(&mut self, cx: &mut Cx) -> Result<()> {
        cx.prepare(true)
    }

    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let st = if matches!(job.mem, Mem::Dev(_)) { Some(cx.staging()?) } else { None };
        send_one(st, &mut self.sock, seq, job, cx.spin).map_err(|e| e.context(format!("sending to rank {}", self.peer)))
    }

    fn socket(&self) -> Option<&TcpStream> {
        self.sock.plain_tcp()
    }
}

struct TcpRecv {
    sock: Stream,
    peer: usize,
}

impl Carrier for TcpRecv {
    fn prepare(&mut self, cx: &mut Cx) -> Result<()> {
        cx.prepare(true)
    }

    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let st = if matches!(job.mem, Mem::Dev(_)) { Some(cx.staging()?) } else { None };
        recv_one(st, &mut self.sock, self.peer, seq, job, cx.spin)
    }

    fn socket(&self) -> Option<&TcpStream> {
        self.sock.plain_tcp()
    }
}

/// A frame header: magic, `word` (free for the transport), sequence number, length.
pub fn header(word: u32, seq: u64, len: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&word.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h
}

/// Checks a received header against what this rank expects (job `seq` of `len` bytes); returns
/// its `word`. A mismatch means the ranks called different operations.
pub fn check_header(h: &[u8; HEADER_BYTES], peer: usize, seq: u64, len: u64) -> Result<u32> {
    let word = |o: usize| u64::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3], h[o + 4], h[o + 5], h[o + 6], h[o + 7]]);
    let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let (their_seq, their_len) = (word(8), word(16));
    if magic != MAGIC || their_seq != seq || their_len != len {
        return Err(Error::invalid_usage(format!(
            "rank {peer} sent transfer #{their_seq} of {their_len} bytes where this rank expects #{seq} of {len} bytes{}: \
             the ranks called different operations (or different sizes)",
            if magic != MAGIC { " (not an oxccl frame)" } else { "" }
        )));
    }
    Ok(u32::from_le_bytes([h[4], h[5], h[6], h[7]]))
}

/// A socket error as the communicator reports it.
pub fn io_error(peer: usize, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::remote(format!("rank {peer} closed its network connection"))
    } else {
        Error::remote(format!("network I/O with rank {peer} failed: {e}"))
    }
}

fn send_one(st: Option<&Staging>, sock: &mut Stream, seq: u64, job: &Job, spin: Duration) -> Result<()> {
    let h = header(0, seq, job.bytes);
    let io = |e: std::io::Error| Error::remote(format!("network write failed: {e}"));
    let mut w = SpinWait::new(spin);
    write_full(sock, &h, &mut w).map_err(io)?;
    match job.mem {
        Mem::Host(p) => {
            // SAFETY: the plan's host arena range (see Job).
            let s = unsafe { std::slice::from_raw_parts(p, job.bytes as usize) };
            match &job.gate {
                None => write_full(sock, s, &mut w).map_err(io)?,
                Some(g) => {
                    for piece in s.chunks(g.chunk() as usize) {
                        g.wait(piece.as_ptr(), piece.len() as u64)?;
                        write_full(sock, piece, &mut w).map_err(io)?;
                    }
                }
            }
        }
        Mem::Dev(src) => {
            let st = st.ok_or_else(|| Error::internal("no staging for a GPU transfer"))?;
            let list: Vec<(u64, usize)> = chunks(job.bytes).collect();
            if let Some(&(off, len)) = list.first() {
                st.to_host(0, src + off, len)?;
            }
            for (k, &(_, len)) in list.iter().enumerate() {
                st.sync()?; // chunk k is in host memory
                if let Some(l) = &job.landed {
                    // Release: the copy out of chunk k is complete; its source may be rewritten.
                    l.store(list[k].0 + len as u64, Ordering::Release);
                }
                if let Some(&(off, n)) = list.get(k + 1) {
                    st.to_host((k + 1) % 2, src + off, n)?; // overlaps the write below
                }
                write_full(sock, st.slice(k % 2, len)?, &mut w).map_err(io)?;
            }
        }
    }
    Ok(())
}

fn recv_one(st: Option<&Staging>, sock: &mut Stream, peer: usize, seq: u64, job: &Job, spin: Duration) -> Result<()> {
    let io = |e: std::io::Error| io_error(peer, e);
    let mut w = SpinWait::new(spin);
    let mut h = [0u8; HEADER_BYTES];
    read_full(sock, &mut h, &mut w).map_err(io)?;
    check_header(&h, peer, seq, job.bytes)?;
    match job.mem {
        Mem::Host(p) => {
            // SAFETY: the plan's host arena range (see Job).
            let s = unsafe { std::slice::from_raw_parts_mut(p, job.bytes as usize) };
            match &job.landed {
                None => read_full(sock, s, &mut w).map_err(io)?,
                Some(landed) => {
                    let mut got = 0;
                    for piece in s.chunks_mut(LANDING_STEP) {
                        read_full(sock, piece, &mut w).map_err(io)?;
                        got += piece.len() as u64;
                        // Release: the piece is in memory before the watcher counts it.
                        landed.store(got, Ordering::Release);
                    }
                }
            }
        }
        Mem::Dev(dst) => {
            let st = st.ok_or_else(|| Error::internal("no staging for a GPU transfer"))?;
            for (k, (off, n)) in chunks(job.bytes).enumerate() {
                // Buffer k % 2 was last used by copy k - 2, which the sync before copy k - 1 ended.
                read_full(sock, st.slice(k % 2, n)?, &mut w).map_err(io)?;
                st.sync()?; // copy k - 1 done: at most one copy in flight
                st.to_device(k % 2, dst + off, n)?;
            }
            st.sync()?;
        }
    }
    Ok(())
}

/// `n` items split into `k` contiguous ranges as evenly as possible: (start, len) of range `i`.
pub fn split(n: u64, k: usize, i: usize) -> (u64, u64) {
    let (k, i) = (k as u64, i as u64);
    let (q, r) = (n / k, n % k);
    (i * q + i.min(r), q + u64::from(i < r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spinning reads and writes (OXCCL_NET_LANE_SPIN_US) carry a stream larger than the
    /// socket buffers, across a pause longer than their budget (so the blocking fallback runs),
    /// and a closed peer ends a read as end of file.
    #[test]
    fn spinning_reads_and_writes_carry_a_stream_across_pauses() {
        spinning_reads_and_writes(None);
    }

    /// ncclSetEncryption: the spinning calls over a TLS session (its non-blocking reads and
    /// writes, and the flush after the last write).
    #[test]
    fn spinning_reads_and_writes_over_tls() {
        spinning_reads_and_writes(Some(&crate::tls::test_keys()));
    }

    fn spinning_reads_and_writes(keys: Option<&crate::tls::Keys>) {
        let (mut a, mut b) = crate::tls::loopback_pairs(1, keys);
        let (mut a, mut b) = (a.remove(0), b.remove(0));
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            let mut w = SpinWait::new(Duration::from_micros(50));
            for (k, piece) in sent.chunks(1 << 20).enumerate() {
                if k == 3 {
                    std::thread::sleep(Duration::from_millis(20));
                }
                write_full(&mut a, piece, &mut w).unwrap();
            }
        });
        let mut got = vec![0u8; data.len()];
        let mut w = SpinWait::new(Duration::from_micros(50));
        read_full(&mut b, &mut got, &mut w).unwrap();
        writer.join().unwrap();
        assert!(got == data, "the bytes read differ from those written");
        let mut one = [0u8; 1];
        let e = read_full(&mut b, &mut one, &mut w).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
        // A zero budget never spins.
        assert!(!SpinWait::new(Duration::ZERO).idle());
    }

    #[test]
    fn threads_spin_where_every_machine_has_a_core_for_each() {
        // (host hash, machine, CPUs) per rank; 4 lanes: 8 threads per linked rank, 1 proxy.
        let sim = |hosts: &[u64], cpus: u32| hosts.iter().map(|&h| (h, 7, cpus)).collect::<Vec<_>>();
        // 2 simulated hosts x 1 on one 32-CPU machine: 2 x 9 threads.
        assert!(threads_fit(&sim(&[1, 2], 32), 4));
        assert!(!threads_fit(&sim(&[1, 2], 17), 4), "18 threads on 17 CPUs");
        // 2 x 2 on 64 CPUs: 4 x 17 = 68 (the layout whose spinning lost, BENCHMARKS.md of
        // 2026-11-27, 1464379).
        assert!(!threads_fit(&sim(&[1, 1, 2, 2], 64), 4));
        assert!(threads_fit(&sim(&[1, 1, 2, 2], 68), 4));
        // 4 x 1 on 64 CPUs: 4 x 25.
        assert!(!threads_fit(&sim(&[1, 2, 3, 4], 64), 4));
        // Two real machines, a rank each: 9 threads on each; one bound to a single core spins nowhere.
        assert!(threads_fit(&[(1, 10, 16), (2, 20, 16)], 4));
        assert!(!threads_fit(&[(1, 10, 16), (2, 20, 1)], 4));
        // A machine counts its fewest CPUs (ranks bound to parts of it).
        assert!(!threads_fit(&[(1, 10, 64), (2, 10, 8)], 4));
        // One lane: 3 threads a rank.
        assert!(threads_fit(&sim(&[1, 2], 6), 1));
        assert!(!threads_fit(&sim(&[1, 2], 5), 1));
        // The most lanes that fit.
        assert_eq!(fit_lanes(&sim(&[1, 2, 3, 4], 64), 4), 2);
        assert_eq!(fit_lanes(&sim(&[1, 1, 2, 2], 64), 4), 3);
        assert_eq!(fit_lanes(&sim(&[1, 2], 32), 4), 4);
        assert_eq!(fit_lanes(&sim(&[1, 2], 12), 4), 2, "2 x (4 + 1) = 10 <= 12 < 2 x (6 + 1)");
        assert_eq!(fit_lanes(&sim(&[1, 2], 5), 4), 4, "not even one lane fits: as many as asked");
        // Narrow collectives (Broadcast, Reduce) at 2 x 2 and 4 x 1 on 64 CPUs: 4 x 9 = 36, and 4
        // more for the root's third link at 4 x 1 (40).
        assert!(narrow_fit(&sim(&[1, 1, 2, 2], 36), 4));
        assert!(!narrow_fit(&sim(&[1, 1, 2, 2], 35), 4));
        assert!(narrow_fit(&sim(&[1, 2, 3, 4], 40), 4));
        assert!(!narrow_fit(&sim(&[1, 2, 3, 4], 39), 4));
        // 2 x 2 on the 32-core machine (ranks time-sharing its 2 GPUs): no.
        assert!(!narrow_fit(&sim(&[1, 1, 2, 2], 32), 4));
        // 8 real machines, a rank each: 9 + 5 x 4 = 29 threads where the root is.
        let eight = |cpus: u32| (1..=8u64).map(|h| (h, h * 10, cpus)).collect::<Vec<_>>();
        assert_eq!(fit_lanes(&eight(16), 4), 1, "8 machines of 16 cores, a rank each: 7 x 2 + 1");
        assert!(narrow_fit(&eight(29), 4));
        assert!(!narrow_fit(&eight(28), 4));
        // Wherever every link's threads fit, the narrow ones do.
        for (hosts, cpus) in [(&[1u64, 2][..], 18u32), (&[1, 1, 2, 2], 68), (&[1, 2, 3, 4], 100)] {
            assert!(threads_fit(&sim(hosts, cpus), 4) && narrow_fit(&sim(hosts, cpus), 4), "{hosts:?}");
        }
    }

    #[test]
    fn links_spin_by_default_only_where_threads_fit() {
        if ["OXCCL_NET_LANE_SPIN_US", "OXCCL_NET_QUEUE_SPIN_US"].iter().any(|n| crate::config::env(n).is_some()) {
            return; // set by hand: the settings win, as below
        }
        assert_eq!(Spin::for_links(true), Spin { queue: FIT_SPIN, io: FIT_SPIN });
        assert_eq!(Spin::for_links(false), Spin::default());
        assert_eq!(Spin::from_env(), Spin::default());
    }

    /// Two links joined by loopback sockets, host memory only.
    fn pair() -> (Link, Link) {
        pair_of(2)
    }

    /// Two ends of a link of `lanes` lanes over loopback.
    fn pair_of(lanes: usize) -> (Link, Link) {
        let [ao, ai, bo, bi] = lane_sockets(&std::net::TcpListener::bind("127.0.0.1:0").unwrap(), lanes);
        (Link::start(None, 0, 1, ao, ai).unwrap(), Link::start(None, 1, 0, bo, bi).unwrap())
    }

    /// The same over TLS sessions (ncclSetEncryption): the proxy carries nothing inline then.
    fn tls_pair_of(lanes: usize) -> (Link, Link) {
        let (ao, bi) = crate::tls::loopback_pairs(lanes, Some(&crate::tls::test_keys()));
        let (bo, ai) = crate::tls::loopback_pairs(lanes, Some(&crate::tls::test_keys()));
        let (a, b) = (Link::start(None, 0, 1, ao, ai).unwrap(), Link::start(None, 1, 0, bo, bi).unwrap());
        assert!(a.inline_sockets().is_none() && b.inline_sockets().is_none(), "no inline carrying over TLS");
        (a, b)
    }

    /// `n` lanes' loopback sockets through `l`: end a's outgoing and incoming, then end b's.
    fn lane_sockets(l: &std::net::TcpListener, n: usize) -> [Vec<Stream>; 4] {
        let a = l.local_addr().unwrap();
        let (mut ao, mut ai, mut bo, mut bi) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            ao.push(TcpStream::connect(a).unwrap().into());
            bi.push(l.accept().unwrap().0.into());
            bo.push(TcpStream::connect(a).unwrap().into());
            ai.push(l.accept().unwrap().0.into());
        }
        [ao, ai, bo, bi]
    }

    /// Records the order of its calls; `fail` makes its set-up fail.
    struct Probe {
        log: Arc<Mutex<Vec<&'static str>>>,
        fail: bool,
    }

    impl Carrier for Probe {
        fn prepare(&mut self, _: &mut Cx) -> Result<()> {
            self.log.lock().push("prepare");
            if self.fail {
                return Err(Error::system("no pinned memory"));
            }
            Ok(())
        }

        fn carry(&mut self, _: &mut Cx, _: u64, job: &Job) -> Result<()> {
            self.log.lock().push("carry");
            if job.bytes == 13 {
                panic!("carrier bug");
            }
            Ok(())
        }
    }

    #[test]
    fn a_link_is_ready_only_once_every_thread_set_up_and_reports_a_failed_one() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |fail| Box::new(Probe { log: log.clone(), fail }) as Box<dyn Carrier>;
        let nop: Interrupt = Arc::new(|| {});
        let link = Link::new(None, 0, 1, vec![(probe(false), probe(false)), (probe(false), probe(false))], nop.clone()).unwrap();
        assert_eq!(*log.lock(), vec!["prepare"; 4], "all four threads set up before new returns");
        let t = Tracker::new(1);
        link.send(Job { mem: Mem::Host(std::ptr::null_mut()), bytes: 0, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        t.wait(&|| None).unwrap();
        assert_eq!(log.lock().last(), Some(&"carry"));
        // A panicking carrier fails its job (and later ones on that lane), the thread lives on.
        let t = Tracker::new(2);
        link.send(Job { mem: Mem::Host(std::ptr::null_mut()), bytes: 13, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        link.send(Job { mem: Mem::Host(std::ptr::null_mut()), bytes: 0, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let e = t.wait(&|| None).unwrap_err();
        assert!(e.code == crate::error::ResultCode::InternalError && e.msg.contains("carrier bug"), "{e:?}");
        drop(link);
        let e = Link::new(None, 3, 5, vec![(probe(false), probe(false)), (probe(false), probe(true))], nop).err().expect("a failed set-up");
        assert!(e.msg.contains("no pinned memory"), "{}", e.msg);
    }

    #[test]
    fn stripes_cover_the_job() {
        assert_eq!(stripes(100, 4, 0), vec![(0, 100)]);
        assert_eq!(stripes(STRIPE_MIN * 4 + 2, 1, 0), vec![(0, STRIPE_MIN * 4 + 2)]);
        let s = stripes(STRIPE_MIN * 4 + 2, 4, 0);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].0, 0);
        assert!(s.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        assert_eq!(s[3].0 + s[3].1, STRIPE_MIN * 4 + 2);
        // A job's own threshold overrides the link's, either way.
        assert_eq!(stripes(STRIPE_MIN / 2, 4, 0), vec![(0, STRIPE_MIN / 2)]);
        assert_eq!(stripes(STRIPE_MIN / 2, 4, STRIPE_MIN / 4).len(), 4);
        assert_eq!(stripes(STRIPE_MIN, 4, STRIPE_MIN * 2), vec![(0, STRIPE_MIN)]);
    }

    #[test]
    fn host_transfers_arrive_in_order_both_ways_at_once() {
        host_transfers_both_ways(pair());
    }

    #[test]
    fn host_transfers_arrive_in_order_both_ways_at_once_over_tls() {
        host_transfers_both_ways(tls_pair_of(2));
    }

    fn host_transfers_both_ways((a, b): (Link, Link)) {
        // Larger than socket buffers both ways at once: needs the two threads per link.
        let n = 24 << 20;
        let mut src_a: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut src_b: Vec<u8> = (0..n).map(|i| (i % 241) as u8).collect();
        let mut dst_a = vec![0u8; n];
        let mut dst_b = vec![0u8; n];
        let small = [7u8; 3];
        let mut small_dst = [0u8; 3];
        let t = Tracker::new(6);
        let job = |p: *mut u8, len: usize| Job { mem: Mem::Host(p), bytes: len as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false };
        a.send(job(src_a.as_mut_ptr(), n));
        b.send(job(src_b.as_mut_ptr(), n));
        a.send(job(small.as_ptr() as *mut u8, 3));
        b.recv(job(dst_b.as_mut_ptr(), n));
        a.recv(job(dst_a.as_mut_ptr(), n));
        b.recv(job(small_dst.as_mut_ptr(), 3));
        t.wait(&|| None).unwrap();
        assert!(dst_b == src_a && dst_a == src_b);
        assert_eq!(small_dst, small);
    }

    #[test]
    fn a_gated_send_goes_only_as_its_chunks_are_flagged() {
        use crate::transport::progress::{Gate, Layout, CHUNK};
        let (a, b) = pair();
        // An "arena": two chunks of data (striped over both lanes), then their two flags.
        let n = 2 * CHUNK as usize;
        let mut arena: Vec<u8> = (0..n + 64).map(|i| (i % 251) as u8).collect();
        let mut next = n as u64;
        let layout = Layout::new(vec![(0, n as u64)], Vec::new(), CHUNK, &mut |k| {
            let o = next;
            next += k.div_ceil(16) * 16;
            o
        });
        let tag = 0x8000_0001u32;
        let flags = unsafe { arena.as_mut_ptr().add(layout.pre_flags as usize) } as usize;
        let set = |i: usize| unsafe { &*(flags as *const std::sync::atomic::AtomicU32).add(i) }.store(tag, Ordering::Release);
        set(0);
        let abort: &'static u32 = Box::leak(Box::new(0u32));
        let gate = Arc::new(Gate::new(&layout, arena.as_mut_ptr(), tag, abort));
        let want = arena[..n].to_vec();
        let mut dst = vec![0u8; n];
        let t = Tracker::new(1);
        let landing = b.post_job(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false }, Dir::Recv, true).unwrap();
        let ts = Tracker::new(1);
        a.post_job(Job { mem: Mem::Host(arena.as_mut_ptr()), bytes: n as u64, done: ts.clone(), landed: None, gate: Some(gate), stripe_min: 0, narrow: false }, Dir::Send, false);
        // The first chunk is flagged: it arrives. The second is not: nothing of it may.
        let t0 = std::time::Instant::now();
        while !landing.has(0, CHUNK) {
            assert!(t0.elapsed().as_secs() < 20, "the flagged chunk never arrived");
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!landing.has(CHUNK, CHUNK + 1), "an unflagged chunk was sent");
        assert_eq!(t.pending(), 1);
        set(1);
        t.wait(&|| None).unwrap();
        ts.wait(&|| None).unwrap();
        assert!(dst == want);
    }

    #[test]
    fn a_watched_receive_shows_its_bytes_only_once_they_landed() {
        watched_receive(2);
    }

    /// Three lanes (`OXCCL_NET_SOCKETS=fit` at 2 simulated hosts x 2 on 64 cores): parts of a
    /// power-of-two job that are not whole words, met on both ends alike.
    #[test]
    fn three_lanes_split_a_job_into_uneven_parts_both_ends_agree_on() {
        assert!(stripes(STRIPE_MIN * 2, 3, 0).iter().any(|&(o, n)| o % 4 != 0 || n % 4 != 0));
        watched_receive(3);
    }

    /// Striped, watched receives over TLS lanes.
    #[test]
    fn watched_striped_receives_over_tls() {
        watched_receive_on(tls_pair_of(3), 3);
    }

    fn watched_receive(lanes: usize) {
        watched_receive_on(pair_of(lanes), lanes);
    }

    fn watched_receive_on((a, b): (Link, Link), lanes: usize) {
        // Striped over every lane (a part each), each landing in several steps.
        let n = 3 * STRIPE_MIN as usize + 5;
        let mut src: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; n];
        let t = Tracker::new(1);
        let landing = b.post_job(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false }, Dir::Recv, true).unwrap();
        assert_eq!(landing.parts.len(), lanes);
        assert!(landing.has(0, 0), "an empty range is always there");
        assert!(!landing.has(0, 1) && !landing.has(n as u64 - 1, n as u64), "nothing sent yet");
        let ts = Tracker::new(1);
        let sent = a.post_job(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: n as u64, done: ts.clone(), landed: None, gate: None, stripe_min: 0, narrow: false }, Dir::Send, true).unwrap();
        // Watch the first part fill up, then the whole.
        let t0 = std::time::Instant::now();
        while !landing.has(0, LANDING_STEP as u64) {
            assert!(t0.elapsed() < Duration::from_secs(10), "the first piece never showed");
            std::thread::yield_now();
        }
        t.wait(&|| None).unwrap();
        ts.wait(&|| None).unwrap();
        assert!(landing.has(0, n as u64) && sent.has(0, n as u64));
        assert!(dst == src);
    }

    #[test]
    fn landing_checks_every_part_a_range_touches() {
        let part = |o: u64, n: u64, got: u64| (o, n, Arc::new(AtomicU64::new(got)));
        let l = Landing { parts: vec![part(0, 100, 100), part(100, 100, 30), part(200, 50, 0)] };
        assert!(l.has(0, 100) && l.has(50, 130) && l.has(100, 130));
        assert!(!l.has(50, 131), "byte 130 is byte 30 of the second part, not landed");
        assert!(!l.has(199, 201) && !l.has(240, 250));
        assert!(l.has(130, 130));
    }

    #[test]
    fn a_size_mismatch_and_a_closed_peer_are_errors() {
        let (a, b) = pair();
        let mut buf = vec![1u8; 64];
        let t = Tracker::new(2);
        a.send(Job { mem: Mem::Host(buf.as_mut_ptr()), bytes: 64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        b.recv(Job { mem: Mem::Host(buf.as_mut_ptr()), bytes: 32, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let e = t.wait(&|| None).unwrap_err();
        assert!(e.msg.contains("64 bytes") && e.msg.contains("32 bytes"), "{}", e.msg);
        // Later jobs on the failed direction fail at once.
        let t = Tracker::new(1);
        b.recv(Job { mem: Mem::Host(buf.as_mut_ptr()), bytes: 8, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        assert!(t.wait(&|| None).is_err());
        drop(b);
        let (a, b) = pair();
        drop(a);
        let t = Tracker::new(1);
        b.recv(Job { mem: Mem::Host(buf.as_mut_ptr()), bytes: 8, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let e = t.wait(&|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
    }

    #[test]
    fn links_whose_threads_fit_stripe_128_kib_jobs_and_others_narrow_ones() {
        if crate::config::env("OXCCL_NET_STRIPE_MIN").is_some() {
            return; // set by hand: it decides the threshold instead
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let n = FIT_STRIPE_MIN as usize;
        for (fit, narrow, parts) in [(true, false, 2), (false, false, 1), (false, true, 2), (true, true, 2)] {
            let [ao, ai, bo, bi] = lane_sockets(&l, 2);
            let link = |me, peer, o, i| {
                let (lanes, interrupt) = tcp_lanes(peer, o, i).unwrap();
                let k = Link::spawn(None, me, peer, lanes, interrupt, fit).unwrap();
                k.ready().unwrap();
                k
            };
            let (a, b) = (link(0, 1, ao, ai), link(1, 0, bo, bi));
            let mut src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let mut dst = vec![0u8; n];
            let t = Tracker::new(2);
            let job = |p: *mut u8| Job { mem: Mem::Host(p), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow };
            // Both ends split by the link's own threshold: FIT_STRIPE_MIN where the threads fit
            // or for narrow jobs (TCP links), else 512 KiB.
            let landing = b.post_job(job(dst.as_mut_ptr()), Dir::Recv, true).expect("watched");
            assert_eq!(landing.parts.len(), parts, "fit {fit} narrow {narrow}");
            a.send(job(src.as_mut_ptr()));
            t.wait(&|| None).unwrap();
            assert!(src == dst, "fit {fit} narrow {narrow}: the bytes differ");
        }
    }

    #[test]
    fn a_job_striped_below_the_link_threshold_arrives_whole() {
        let (a, b) = pair();
        // 100 KB, below the link's 512 KiB: split over both lanes at both ends by its own 64 KiB.
        let n = 100 << 10;
        let mut src: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; n];
        let t = Tracker::new(2);
        b.recv(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 64 << 10, narrow: false });
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 64 << 10, narrow: false });
        t.wait(&|| None).unwrap();
        assert!(src == dst);
        // Ends that split alike disagree only if their thresholds do: then it is an error, not
        // silently wrong data.
        let t = Tracker::new(2);
        b.recv(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: n as u64, done: t.clone(), landed: None, gate: None, stripe_min: 64 << 10, narrow: false });
        assert!(t.wait(&|| None).is_err());
    }

    #[test]
    fn chunking_covers_every_byte_once() {
        let v: Vec<(u64, usize)> = chunks(2 * CHUNK as u64 + 5).collect();
        assert_eq!(v, vec![(0, CHUNK), (CHUNK as u64, CHUNK), (2 * CHUNK as u64, 5)]);
        assert_eq!(chunks(0).count(), 0);
        assert_eq!(chunks(CHUNK as u64).count(), 1);
    }

    #[test]
    fn tracker_reports_the_first_failure_and_honours_stop() {
        let t = Tracker::new(2);
        t.finish(Err(Error::remote("first")));
        t.finish(Err(Error::remote("second")));
        assert_eq!(t.wait(&|| None).unwrap_err().msg, "first");
        let t = Tracker::new(1);
        let e = t.wait(&|| Some(Error::remote("aborted"))).unwrap_err();
        assert_eq!(e.msg, "aborted");
        let t = Tracker::new(1);
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.finish(Ok(())));
        assert!(t.wait(&|| None).is_ok());
        h.join().unwrap();
    }

    #[test]
    fn a_wait_past_a_second_notes_the_jobs_left_once() {
        let t = Tracker::new(3);
        t.finish(Ok(()));
        let t0 = std::time::Instant::now();
        let notes = std::cell::RefCell::new(Vec::new());
        let stop = || (t0.elapsed() > Duration::from_millis(1300)).then(|| Error::remote("aborted"));
        assert!(t.wait_noting(Duration::ZERO, &stop, &|left| notes.borrow_mut().push(left)).is_err());
        assert_eq!(notes.into_inner(), vec![2]);
        let quick = Tracker::new(0);
        quick.wait_noting(Duration::from_micros(50), &|| None, &|_| panic!("no note for a wait that did not last")).unwrap();
    }
}
