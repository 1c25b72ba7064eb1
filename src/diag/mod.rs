//! Hang diagnosis. With `OXCCL_DEBUG_DUMP=<seconds>`, a monitor thread looks at every live
//! communicator once a second; when one has had work outstanding on its stream for that long
//! without issuing anything new, it WARNs a dump of that communicator: identity and state, the
//! last operations issued, whether the stream is still busy, and the device-side LL flags and
//! semaphore counters per peer (read through a separate non-blocking stream, so the dump works
//! while kernels spin). Comparing the dumps of all ranks shows which rank is behind and on which
//! peer a kernel waits. Off by default; then nothing is recorded.

pub mod agreement;
pub mod hostprof;
pub mod schedstat;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Operations remembered per communicator.
pub const RECENT_OPS: usize = 16;

/// OXCCL_DEBUG_DUMP: seconds of no progress before a dump; None when unset or invalid.
pub fn dump_after() -> Option<Duration> {
    static V: OnceLock<Option<Duration>> = OnceLock::new();
    *V.get_or_init(|| parse_seconds(crate::config::env("OXCCL_DEBUG_DUMP")?.as_str()))
}

fn parse_seconds(s: &str) -> Option<Duration> {
    let v: f64 = s.trim().parse().ok()?;
    (v > 0.0).then(|| Duration::try_from_secs_f64(v).ok()).flatten()
}

/// One issued operation.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// Its number on the communicator (from 1).
    pub seq: u64,
    /// What it was (collective, count, datatype, stream).
    pub what: String,
    /// When it was issued.
    pub at: Instant,
}

/// Per-communicator record of issued work and of when it last progressed.
#[derive(Default)]
pub struct Progress {
    /// Operations issued so far.
    pub issued: u64,
    /// The last `RECENT_OPS` of them.
    pub recent: VecDeque<OpRecord>,
    /// (issued count, since when) of the current busy stretch; the count a dump was made for.
    busy_since: Option<(u64, Instant)>,
    dumped_for: Option<u64>,
}

impl Progress {
    /// Records an issued operation.
    pub fn note(&mut self, what: String) {
        self.issued += 1;
        if self.recent.len() == RECENT_OPS {
            self.recent.pop_front();
        }
        self.recent.push_back(OpRecord { seq: self.issued, what, at: Instant::now() });
    }

    /// Called once a second by the monitor with whether the stream is busy: true when a dump is
    /// due (busy with no new operation for `after`, once per stall).
    pub fn stalled(&mut self, busy: bool, now: Instant, after: Duration) -> bool {
        if !busy {
            self.busy_since = None;
            return false;
        }
        match self.busy_since {
            Some((n, t)) if n == self.issued => {
                if now.duration_since(t) >= after && self.dumped_for != Some(n) {
                    self.dumped_for = Some(n);
                    return true;
                }
                false
            }
            _ => {
                self.busy_since = Some((self.issued, now));
                false
            }
        }
    }

    /// The dump's text: the count issued and the recent operations with their ages.
    pub fn describe(&self, now: Instant) -> String {
        let mut s = format!("{} operations issued; last {}:", self.issued, self.recent.len());
        for r in &self.recent {
            let _ = write!(s, "\n    #{} {} ({:.1} s ago)", r.seq, r.what, now.duration_since(r.at).as_secs_f64());
        }
        s
    }
}

/// How long a dump waits for its copy of the device state. A copy that has not ended by then
/// waits behind the stall itself (under MPS, behind a copy-engine direct copy that waited for a
/// peer which never came); the dump says so and the monitor goes on.
pub const DEVICE_READ_LIMIT: Duration = Duration::from_secs(5);

/// Why [`bounded`] has no result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// Still running at the limit; the thread is left to finish, or to block, alone.
    TimedOut(Duration),
    /// It panicked.
    Failed,
    /// No thread could be started.
    NoThread,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unanswered::TimedOut(d) => write!(
                f,
                "no answer in {d:?}: a copy from the device waits behind the stall too (under MPS, a copy-engine direct \
                 copy waiting for its peer holds up the server's other copies; OXCCL_CE_DIRECT_MIN_BYTES=0 lets the read \
                 through), so look at the other ranks' dumps"
            ),
            Unanswered::Failed => f.write_str("the read failed (panicked)"),
            Unanswered::NoThread => f.write_str("no thread to read it"),
        }
    }
}

/// Runs `f` on a thread of its own and waits up to `limit` for its result.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Result<T, Unanswered> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("oxccl-dump-read".into())
        .spawn(move || {
            // Nobody may be listening any more (timed out): nothing to do then.
            let _ = tx.send(f());
        })
        .map_err(|_| Unanswered::NoThread)?;
    rx.recv_timeout(limit).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => Unanswered::TimedOut(limit),
        std::sync::mpsc::RecvTimeoutError::Disconnected => Unanswered::Failed,
    })
}

/// Values by index as runs of equal values: "0-63: 11, 64-127: 10".
pub fn runs(v: &[u64]) -> String {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=v.len() {
        if i == v.len() || v[i] != v[start] {
            out.push(if i - 1 == start { format!("{start}: {}", v[start]) } else { format!("{start}-{}: {}", i - 1, v[start]) });
            start = i;
        }
    }
    out.join(", ")
}

/// Starts the monitor thread once (when OXCCL_DEBUG_DUMP is set): once a second it calls `visit`
/// with the threshold; the communicator layer hands in the walk over its live communicators, so
/// this module depends on nothing above it.
pub fn start_monitor(visit: impl Fn(Duration) + Send + 'static) {
    static STARTED: OnceLock<()> = OnceLock::new();
    let Some(after) = dump_after() else { return };
    STARTED.get_or_init(|| {
        let _ = std::thread::Builder::new().name("oxccl-dump".into()).spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            visit(after);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_reported_once_after_the_threshold() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        let after = Duration::from_secs(5);
        p.note("AllReduce".into());
        assert!(!p.stalled(true, t0, after), "first sight of a busy stream starts the clock");
        assert!(!p.stalled(true, t0 + Duration::from_secs(4), after));
        assert!(p.stalled(true, t0 + Duration::from_secs(5), after));
        assert!(!p.stalled(true, t0 + Duration::from_secs(9), after), "once per stall");
        p.note("Broadcast".into());
        assert!(!p.stalled(true, t0 + Duration::from_secs(10), after), "new work restarts the clock");
        assert!(p.stalled(true, t0 + Duration::from_secs(15), after));
        assert!(!p.stalled(false, t0 + Duration::from_secs(16), after));
        for i in 0..40 {
            p.note(format!("op {i}"));
        }
        assert_eq!(p.recent.len(), RECENT_OPS);
        assert!(p.describe(Instant::now()).contains("#42 op 39"));
    }

    #[test]
    fn bounded_returns_a_result_in_time_and_gives_up_on_a_blocked_call() {
        assert_eq!(bounded(Duration::from_secs(5), || 7), Ok(7));
        let t = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // Blocks until the test lets it go, like a copy behind a hung kernel (for 10 s at most:
        // a `bounded` that waited for it would return Ok(false) and fail the test, not hang it).
        let r = bounded(Duration::from_millis(50), move || rx.recv_timeout(Duration::from_secs(10)).is_ok());
        assert_eq!(r, Err(Unanswered::TimedOut(Duration::from_millis(50))));
        assert!(t.elapsed() < Duration::from_secs(5), "gave up at the limit");
        assert!(r.unwrap_err().to_string().contains("no answer in 50ms"));
        drop(tx);
        let panicking = || -> u32 { panic!("read failed") };
        assert_eq!(bounded(Duration::from_secs(5), panicking), Err(Unanswered::Failed));
    }

    #[test]
    fn runs_of_equal_values() {
        assert_eq!(runs(&[11, 11, 11, 10, 10, 7]), "0-2: 11, 3-4: 10, 5: 7");
        assert_eq!(runs(&[3]), "0: 3");
        assert_eq!(runs(&[]), "");
        assert_eq!(runs(&[1, 2, 1]), "0: 1, 1: 2, 2: 1");
    }

    #[test]
    fn dump_threshold_parsing() {
        assert_eq!(parse_seconds("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_seconds("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_seconds("0"), None);
        assert_eq!(parse_seconds("x"), None);
    }
}
