//! Where a rank's listener thread leaves incoming messages, keyed by (channel, sender, tag), and
//! where receivers wait for them. Queues are FIFO per key, which with one TCP stream per sender
//! gives in-order delivery per (sender, receiver, channel, tag).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::deadline::Deadline;
use super::listener::Event;
use super::wire::{Channel, ROOT_RANK};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub channel: Channel,
    pub rank: u32,
    pub tag: u32,
}

/// Why a wait ended without a message.
#[derive(Debug)]
pub(crate) enum WaitError {
    TimedOut,
    Aborted,
    /// The sender's connection ended (cleanly or not) and nothing is queued from it.
    Gone(String),
    /// The listener thread stopped working.
    Failed(String),
}

/// A rank that is gone without saying goodbye: seen here first (its connection to us ended), or
/// reported by another rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The rank gone.
    pub rank: u32,
    /// How it was noticed, for the WARN.
    pub why: String,
    /// The rank that reported it, where this one did not see it itself.
    pub reported_by: Option<u32>,
}

/// Notice payloads.
pub(crate) const NOTICE_BYE: u8 = 1;
pub(crate) const NOTICE_LOST: u8 = 2;
/// A heartbeat: the sender is alive (see Bootstrap::heartbeat).
pub(crate) const NOTICE_ALIVE: u8 = 3;
/// The sender's kernels and copies are done with this rank's memory and its mappings of it are
/// closed: this rank may free what it shared (src/comm/reaper.rs).
pub(crate) const NOTICE_RELEASED: u8 = 4;

#[derive(Default)]
struct State {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Ranks whose connection to us ended, with why. Cleared when that rank sends again.
    gone: HashMap<u32, String>,
    /// Ranks that said goodbye: their connections ending is orderly.
    leaving: HashSet<u32>,
    /// Ranks that released this rank's memory (NOTICE_RELEASED).
    released: HashSet<u32>,
    losses: VecDeque<Loss>,
    /// Ranks already reported as lost (each is reported once).
    lost: HashSet<u32>,
    /// When each rank's last frame (of any kind, heartbeats included) arrived.
    heard: HashMap<u32, Instant>,
    /// Ends wait_loss (the owner is shutting down).
    closing: bool,
    aborted: bool,
    failed: Option<String>,
}

#[derive(Default)]
pub(crate) struct Mailbox {
    state: Mutex<State>,
    cv: Condvar,
}

impl Mailbox {
    pub(crate) fn deliver(&self, events: impl Iterator<Item = Event>) {
        let mut st = self.state.lock();
        let mut any = false;
        for event in events {
            any = true;
            if let Event::Frame { rank, .. } = &event {
                st.heard.insert(*rank, Instant::now());
            }
            match event {
                Event::Frame { rank, frame } if frame.channel == Channel::Notice => match frame.body.as_slice() {
                    [NOTICE_BYE] => {
                        st.leaving.insert(rank);
                    }
                    [NOTICE_ALIVE] => {} // only its arrival time matters
                    [NOTICE_RELEASED] => {
                        st.released.insert(rank);
                    }
                    [NOTICE_LOST, a, b, c, d] => {
                        let lost = u32::from_le_bytes([*a, *b, *c, *d]);
                        if st.lost.insert(lost) {
                            st.losses.push_back(Loss { rank: lost, why: format!("was reported lost by rank {rank}"), reported_by: Some(rank) });
                        }
                    }
                    _ => {} // unknown notices from an authenticated peer: ignored
                },
                Event::Frame { rank, frame } => {
                    st.gone.remove(&rank);
                    let key = Key { channel: frame.channel, rank, tag: frame.tag };
                    st.queues.entry(key).or_default().push_back(frame.body);
                }
                Event::Closed { rank, error } => {
                    let why = error.unwrap_or_else(|| "closed its connection".into());
                    // The root's reply connection ends by design once init is done.
                    if rank != ROOT_RANK && !st.leaving.contains(&rank) && st.lost.insert(rank) {
                        st.losses.push_back(Loss {
                            rank,
                            why: format!("closed its connection without a goodbye ({why}): the process died or aborted"),
                            reported_by: None,
                        });
                    }
                    st.gone.insert(rank, why);
                }
            }
        }
        if any {
            self.cv.notify_all();
        }
    }

    /// Waits until a message for `key` is queued and returns it.
    pub(crate) fn take(&self, key: Key, deadline: Deadline) -> Result<Vec<u8>, WaitError> {
        let mut st = self.state.lock();
        loop {
            if st.aborted {
                return Err(WaitError::Aborted);
            }
            if let Some(queue) = st.queues.get_mut(&key) {
                if let Some(msg) = queue.pop_front() {
                    if queue.is_empty() {
                        st.queues.remove(&key);
                    }
                    return Ok(msg);
                }
            }
            if let Some(why) = st.gone.get(&key.rank) {
                return Err(WaitError::Gone(why.clone()));
            }
            if let Some(why) = &st.failed {
                return Err(WaitError::Failed(why.clone()));
            }
            if Instant::now() >= deadline.at() {
                return Err(WaitError::TimedOut);
            }
            self.cv.wait_until(&mut st, deadline.at());
        }
    }

    /// Waits until a rank is lost (see `Loss`), `closing` is set, or `deadline` passes.
    pub(crate) fn take_loss(&self, deadline: Deadline) -> Option<Loss> {
        let mut st = self.state.lock();
        loop {
            if let Some(l) = st.losses.pop_front() {
                return Some(l);
            }
            if st.closing || st.aborted || Instant::now() >= deadline.at() {
                return None;
            }
            self.cv.wait_until(&mut st, deadline.at());
        }
    }

    /// Declares `rank` lost if nothing (not even a heartbeat) arrived from it for `timeout`,
    /// counting from `since` if it never sent anything; a rank that said goodbye or is already
    /// lost is left alone. The loss is queued for `take_loss` like any other; returns whether
    /// this call declared it.
    pub(crate) fn check_silence(&self, rank: u32, since: Instant, timeout: Duration) -> bool {
        let mut st = self.state.lock();
        let last = st.heard.get(&rank).copied().map_or(since, |h| h.max(since));
        let silent = last.elapsed();
        if silent < timeout || st.leaving.contains(&rank) || st.closing || st.aborted || !st.lost.insert(rank) {
            return false;
        }
        st.losses.push_back(Loss {
            rank,
            why: format!("sent nothing, not even a heartbeat, for {:.1} s: it is hung or stopped, or its host or network is down", silent.as_secs_f64()),
            reported_by: None,
        });
        self.cv.notify_all();
        true
    }

    /// Whether `rank` sent NOTICE_RELEASED.
    pub(crate) fn released(&self, rank: u32) -> bool {
        self.state.lock().released.contains(&rank)
    }

    /// Whether `rank` said goodbye.
    pub(crate) fn left(&self, rank: u32) -> bool {
        self.state.lock().leaving.contains(&rank)
    }

    pub(crate) fn watching(&self) -> bool {
        let st = self.state.lock();
        !st.closing && !st.aborted
    }

    /// Ends every wait for losses (the owner is shutting down).
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.cv.notify_all();
    }

    /// Fails every current and future wait.
    pub(crate) fn abort(&self) {
        self.state.lock().aborted = true;
        self.cv.notify_all();
    }

    /// Whether `rank` was reported or seen lost.
    pub(crate) fn is_lost(&self, rank: u32) -> bool {
        self.state.lock().lost.contains(&rank)
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.state.lock().aborted
    }

    /// Records that no more messages will arrive because the listener thread failed.
    pub(crate) fn fail(&self, why: String) {
        self.state.lock().failed = Some(why);
        self.cv.notify_all();
    }
}
