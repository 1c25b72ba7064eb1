//! Which launches report their end on the communicator's done counter and which record an event
//! behind them (src/comm/completion.rs, kernels/prims/done.cuh).
//!
//! Each costs a different resource. An event costs the host about 0.25 us a launch (BENCHMARKS.md of 2026-11-27,
//! 2d19a1c); the count costs the kernel a release at GPU scope in every block after its last store,
//! on its critical path. On 4 H200 (BENCHMARKS.md of 2026-11-27, f3727bf), the 64 KB one-shot AllReduce (16 blocks)
//! took 5.59-5.62 us a call counted against 5.27-5.60 with an event, while at 16-32 KB counting
//! was ahead (5.04-5.37 against 5.25-5.83). So a launch counts where the host is the bottleneck
//! of back-to-back calls: small messages, two ranks (whose kernels are the shortest), or a process
//! driving several ranks of the communicator (one thread launches for all of them). Elsewhere the
//! GPU is: an event's host time hides behind the kernels, the release would not.

use super::Tuning;

/// Largest message (bytes per rank) counted at two ranks: at 2 ranks on H200 the one-shot
/// AllReduce up to 64 KB runs in about the host's time per call (4.0-4.6 us).
const COUNT_MAX_BYTES_TWO_RANKS: u64 = 64 << 10;
/// Largest message counted at three or more ranks: beyond it the kernel outlasts the host's time
/// per call and the release only adds to it.
const COUNT_MAX_BYTES: u64 = 32 << 10;

/// Whether an uncaptured launch of `bytes` (the largest message of the launch, per rank) on a
/// communicator of `nranks` ranks, `process_ranks` of them driven by this process, counts its
/// end rather than recording an event. OXCCL_COUNTED_LAUNCH=0/1 decides for every launch.
pub fn counts(bytes: u64, nranks: usize, process_ranks: usize, t: &Tuning) -> bool {
    if let Some(forced) = t.counted_launch {
        return forced;
    }
    process_ranks > 1 || bytes <= if nranks <= 2 { COUNT_MAX_BYTES_TWO_RANKS } else { COUNT_MAX_BYTES }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_launches_count_and_kernel_bound_ones_record_events() {
        let t = Tuning::default();
        // Four ranks, one per process: counted to 32 KiB, events beyond.
        assert!(counts(8, 4, 1, &t));
        assert!(counts(32 << 10, 4, 1, &t));
        assert!(!counts((32 << 10) + 1, 4, 1, &t));
        assert!(!counts(64 << 10, 4, 1, &t));
        assert!(!counts(1 << 30, 8, 1, &t));
        // Two ranks: counted to 64 KiB.
        assert!(counts(64 << 10, 2, 1, &t));
        assert!(!counts((64 << 10) + 1, 2, 1, &t));
        // One process driving several ranks launches for all of them: always counted.
        assert!(counts(64 << 20, 4, 4, &t));
        assert!(counts(64 << 20, 4, 2, &t));
    }

    #[test]
    fn the_environment_decides_for_every_launch() {
        let never = Tuning { counted_launch: Some(false), ..Tuning::default() };
        assert!(!counts(8, 2, 2, &never));
        let always = Tuning { counted_launch: Some(true), ..Tuning::default() };
        assert!(counts(1 << 30, 8, 1, &always));
    }
}
