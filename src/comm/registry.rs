//! The registry of live communicators: handles given to C are addresses of registered
//! `Arc<Comm>`s, resolved here on every API call, so a stale or forged handle is an error.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use super::Comm;
use crate::error::{Error, Result};

/// Every live communicator (a snapshot).
pub fn live() -> Vec<Arc<Comm>> {
    REGISTRY.read().as_ref().map(|m| m.values().cloned().collect()).unwrap_or_default()
}

static REGISTRY: RwLock<Option<HashMap<usize, Arc<Comm>>>> = RwLock::new(None);

/// Registers a communicator and returns its handle value.
pub fn register(comm: Arc<Comm>) -> usize {
    let key = Arc::as_ptr(&comm) as usize;
    REGISTRY.write().get_or_insert_with(HashMap::new).insert(key, comm);
    key
}

/// The communicator behind a handle, if it is live.
pub fn lookup(handle: usize) -> Result<Arc<Comm>> {
    REGISTRY
        .read()
        .as_ref()
        .and_then(|m| m.get(&handle).cloned())
        .ok_or_else(|| Error::invalid_argument(format!("invalid communicator {handle:#x} (never created, or destroyed)")))
}

/// Removes a handle; the communicator is freed when the last in-flight user drops it.
pub fn unregister(handle: usize) -> Option<Arc<Comm>> {
    REGISTRY.write().as_mut().and_then(|m| m.remove(&handle))
}

/// Communicators whose handle is gone (aborted, or destroyed after a revoke) but whose kernels,
/// told to stop, may not have left yet: one queued behind another communicator's kernel on its
/// stream starts, and leaves, only once that one ends. Their memory waits for them
/// (`Comm::hold_until_stopped`), and a free of any other memory of the process waits too
/// (`when_idle`), as it does for live communicators.
static DRAINING: Mutex<Vec<Weak<Comm>>> = parking_lot::const_mutex(Vec::new());

pub(super) fn drain(comm: &Arc<Comm>) {
    let mut d = DRAINING.lock();
    d.retain(|w| w.strong_count() > 0);
    if !d.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(comm))) {
        d.push(Arc::downgrade(comm));
    }
}

/// The communicators `drain` was given that still exist (their memory is not yet released).
pub(super) fn draining() -> Vec<Arc<Comm>> {
    let mut d = DRAINING.lock();
    d.retain(|w| w.strong_count() > 0);
    d.iter().filter_map(Weak::upgrade).collect()
}
