//! Host time per enqueued operation, by stage (`OXCCL_HOST_PROFILE=1`): from the first NCCL call
//! of an operation (ncclGroupStart, or the collective itself outside a group) to the return of its
//! kernel launch. Sums are kept per process and printed to stderr at exit: the host cost split by
//! stage, where nccl-tests `-C 1` gives only the total. Off by default: then each
//! stage costs one test of a cached flag.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Where a call's time goes, in the order the stages run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Entry points up to group::submit: handle lookup, argument checks.
    Validate,
    /// From submit to the launch path: agreement and checksum checks, the group's End.
    Submit,
    /// Communicator state, context, launch lock, ordering behind another stream.
    Prepare,
    /// Algorithm selection and kernel arguments.
    Plan,
    /// The driver's launch call.
    Launch,
}

const STAGES: usize = 5;
const NAMES: [&str; STAGES] = [
    "validate (entry points, checks)",
    "submit (agreement, checksum, group end)",
    "prepare (state, context, lock, stream order)",
    "plan (selection, arguments)",
    "launch (cuLaunchKernel[Ex])",
];

static SUMS: [AtomicU64; STAGES] = [const { AtomicU64::new(0) }; STAGES];
static TOTAL: AtomicU64 = AtomicU64::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Start of the operation being enqueued, and the time of the last stage mark.
    static START: Cell<Option<Instant>> = const { Cell::new(None) };
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    static LAUNCHED: Cell<bool> = const { Cell::new(false) };
}

/// Whether profiling is on (OXCCL_HOST_PROFILE); the first call that finds it on arranges the report.
pub fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = crate::config::env_bool("OXCCL_HOST_PROFILE", false);
        if on {
            // SAFETY: registers a plain extern "C" function with no arguments.
            unsafe { libc::atexit(report) };
        }
        on
    })
}

/// An NCCL call that may start an operation: starts the clock unless one is running.
pub fn begin() {
    if on() && START.get().is_none() {
        let now = Instant::now();
        START.set(Some(now));
        LAST.set(Some(now));
        LAUNCHED.set(false);
    }
}

/// The end of `stage` (its time runs from the previous mark).
pub fn mark(stage: Stage) {
    if !on() {
        return;
    }
    if let Some(t) = LAST.get() {
        let now = Instant::now();
        SUMS[stage as usize].fetch_add(nanos(now - t), Ordering::Relaxed);
        LAST.set(Some(now));
        if stage == Stage::Launch {
            LAUNCHES.fetch_add(1, Ordering::Relaxed);
            LAUNCHED.set(true);
        }
    }
}

/// An NCCL call returns: unless a group is open, the operation is over; it counts if it launched.
pub fn end(group_open: bool) {
    if !on() || group_open {
        return;
    }
    if let Some(t0) = START.take() {
        if LAUNCHED.get() {
            TOTAL.fetch_add(nanos(t0.elapsed()), Ordering::Relaxed);
            OPS.fetch_add(1, Ordering::Relaxed);
        }
    }
    LAST.set(None);
    LAUNCHED.set(false);
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The per-stage averages, one line each.
pub fn summary() -> Vec<String> {
    let ops = OPS.load(Ordering::Relaxed);
    if ops == 0 {
        return vec!["no operation profiled".into()];
    }
    let us = |ns: u64| ns as f64 / ops as f64 / 1000.0;
    let mut v = vec![format!(
        "{ops} operations, {} launches, {:.3} us per operation",
        LAUNCHES.load(Ordering::Relaxed),
        us(TOTAL.load(Ordering::Relaxed))
    )];
    for (name, s) in NAMES.iter().zip(&SUMS) {
        v.push(format!("  {name}: {:.3} us", us(s.load(Ordering::Relaxed))));
    }
    v
}

extern "C" fn report() {
    for line in summary() {
        eprintln!("oxccl host profile (pid {}): {line}", std::process::id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_named_in_order() {
        for (i, s) in [Stage::Validate, Stage::Submit, Stage::Prepare, Stage::Plan, Stage::Launch].into_iter().enumerate() {
            assert_eq!(s as usize, i);
        }
        assert!(NAMES[Stage::Launch as usize].starts_with("launch"));
    }
}
