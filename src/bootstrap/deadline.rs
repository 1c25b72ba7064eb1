//! A point in time every bootstrap wait is bounded by, together with the timeout it came from
//! (for error messages that say how long we waited).

use std::time::{Duration, Instant};

/// Longest wait we represent; longer timeouts are clamped so `Instant` arithmetic cannot overflow.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    pub(crate) fn after(total: Duration) -> Deadline {
        let total = total.min(MAX_WAIT);
        let now = Instant::now();
        Deadline { at: now.checked_add(total).unwrap_or(now), total }
    }

    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// The timeout this deadline was made from.
    pub(crate) fn total(&self) -> Duration {
        self.total
    }

    /// Time left, or None once the deadline has passed.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.at.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }
}
