//! The registry of live communicators: handles given to C are addresses of registered
//! `Arc<Comm>`s, resolved here on every API call, so a stale or forged handle is an error.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

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
