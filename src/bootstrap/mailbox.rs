//! Where a rank's listener thread leaves incoming messages, keyed by (channel, sender, tag), and
//! where receivers wait for them. Queues are FIFO per key, which with one TCP stream per sender
//! gives in-order delivery per (sender, receiver, channel, tag).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::deadline::Deadline;
use super::listener::Event;
use super::wire::Channel;

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

#[derive(Default)]
struct State {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Ranks whose connection to us ended, with why. Cleared when that rank sends again.
    gone: HashMap<u32, String>,
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
            match event {
                Event::Frame { rank, frame } => {
                    st.gone.remove(&rank);
                    let key = Key { channel: frame.channel, rank, tag: frame.tag };
                    st.queues.entry(key).or_default().push_back(frame.body);
                }
                Event::Closed { rank, error } => {
                    let why = error.unwrap_or_else(|| "closed its connection".into());
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

    /// Fails every current and future wait.
    pub(crate) fn abort(&self) {
        self.state.lock().aborted = true;
        self.cv.notify_all();
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
