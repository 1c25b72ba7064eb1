//! When each link thread took and finished each of its jobs (OXCCL_NET_TRACE), beside the proxy's
//! per-step trace: at 4 simulated hosts x 1, a step of 128 KB sometimes takes hundreds of
//! microseconds instead of 20, and the proxy's trace cannot say whether a thread woke late, a
//! socket stalled, or the peer was late (BENCHMARKS.md of 2026-11-28, f347df5). One line per job,
//! appended to `oxccl-net-lanes.<pid>.txt` when the thread ends: the thread's name
//! (`oxccl-net<me>><peer>.<lane>` sends, `<` receives), then CLOCK_MONOTONIC ns when the proxy
//! posted the job, when the thread took it and when it finished it, its bytes, and flags (1: the
//! thread had blocked waiting for it, 2: it failed). Off (one cached test per job) unless
//! OXCCL_NET_TRACE is set.

use std::io::Write;
use std::sync::OnceLock;

use parking_lot::Mutex;

/// Jobs kept per thread at most.
const ROWS: usize = 100_000;

/// OXCCL_NET_TRACE's directory, read once.
fn dir() -> Option<&'static str> {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    DIR.get_or_init(trace_dir).as_deref()
}

/// The clock when tracing, else 0 (no clock read).
pub fn stamp() -> u64 {
    if dir().is_some() {
        monotonic_ns()
    } else {
        0
    }
}

/// A link thread's rows; written out when dropped (the thread ends).
pub struct LaneTrace {
    rows: Vec<[u64; 5]>,
}

impl LaneTrace {
    pub fn new() -> Option<LaneTrace> {
        dir().map(|_| LaneTrace { rows: Vec::new() })
    }

    pub fn add(&mut self, posted: u64, taken: u64, blocked: bool, bytes: u64, failed: bool) {
        if self.rows.len() < ROWS {
            self.rows.push([posted, taken, monotonic_ns(), bytes, u64::from(blocked) | (u64::from(failed) << 1)]);
        }
    }
}

/// Lines of one thread as written (`name` then the five numbers).
pub fn format(name: &str, rows: &[[u64; 5]]) -> String {
    rows.iter().map(|r| format!("{name} {} {} {} {} {}\n", r[0], r[1], r[2], r[3], r[4])).collect()
}

impl Drop for LaneTrace {
    fn drop(&mut self) {
        let Some(d) = dir() else { return };
        // One thread appends at a time, each its whole block.
        static FILE: Mutex<()> = Mutex::new(());
        let _g = FILE.lock();
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let path = std::path::Path::new(d.trim()).join(format!("oxccl-net-lanes.{}.txt", std::process::id()));
        let r = std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| f.write_all(format(&name, &self.rows).as_bytes()));
        if let Err(e) = r {
            nccl_warn!("OXCCL_NET_TRACE: cannot write {}: {e}", path.display());
        }
    }
}

/// OXCCL_NET_TRACE's directory, if set.
pub(crate) fn trace_dir() -> Option<String> {
    crate::config::env("OXCCL_NET_TRACE").filter(|v| !v.trim().is_empty())
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: out-pointer to a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_job_after_the_name() {
        let s = format("oxccl-net0>1.2", &[[1, 2, 3, 4, 1], [5, 6, 7, 8, 2]]);
        assert_eq!(s, "oxccl-net0>1.2 1 2 3 4 1\noxccl-net0>1.2 5 6 7 8 2\n");
    }
}
