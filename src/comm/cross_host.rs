//! The cross-host part of a communicator spanning hosts (net::Net), as the communicator holds it.
//! That part builds and drives a host-local `Comm` of its own, so the communicator reaches it
//! through this trait and the constructor `Comm::init` is handed: the dependency points from net
//! to comm, never back.

use std::sync::Arc;

use super::task::{CollTask, P2pOp};
use super::{Comm, Ready};
use crate::bootstrap::topo::PeerInfo;
use crate::bootstrap::Bootstrap;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::gpu::{cu, Device, HostMapped};
use crate::transport::select::Paths;

/// What set-up needs from the communicator being initialised.
pub struct Setup<'a> {
    /// The communicator's bootstrap: the host-local communicator's id and the links' sockets come through it.
    pub bs: &'a Bootstrap,
    /// The CUDA device this rank runs on.
    pub dev: &'static Device,
    /// This rank's index in the communicator.
    pub me: usize,
    /// Every rank's init information, indexed by rank.
    pub peers: &'a [PeerInfo],
    /// CUDA device ordinal of this rank (the host-local communicator's).
    pub device: i32,
    /// The communicator's configuration.
    pub config: &'a CommConfig,
    /// The transports chosen (select::choose), equal on every rank.
    pub paths: Paths,
    /// The communicator's host-mapped abort flag, which the kernels and the proxy poll.
    pub abort_flag: Arc<HostMapped>,
    /// Called once if the proxy fails (the communicator records the error and stops kernels).
    pub on_error: Box<dyn Fn(Error) + Send>,
}

/// Builds the cross-host part at init (net::connect, with the launch path's entry points).
pub type ConnectNet = dyn Fn(Setup<'_>) -> Result<Arc<dyn CrossHost>> + Sync;

/// What the communicator asks of its cross-host part (net::Net's methods of the same names).
pub trait CrossHost: Send + Sync {
    /// This host's ranks (oxccl's own communicator; never handed to the user).
    fn local(&self) -> &Arc<Comm>;
    /// Launches one collective on `t.stream` (called inside the communicator's launch lock).
    fn launch_coll(&self, r: &Ready, t: &CollTask) -> Result<()>;
    /// Launches a group's point-to-point operations on `stream` (inside the launch lock).
    fn launch_p2p(&self, r: &Ready, ops: &[P2pOp], stream: cu::CUstream) -> Result<()>;
    /// The cross-host steps' state for the hang dump; `read` copies a device word (without
    /// waiting for the communicator's streams).
    fn describe(&self, read: &dyn Fn(u64) -> Result<u64>) -> String;
    /// The part of `describe` the host knows without the driver, printed first by the hang dump.
    fn describe_host(&self) -> String;
    /// Stops the proxy and closes the links; `abort`: without waiting for anything, and the local
    /// communicator is aborted too, else destroyed.
    fn shutdown(&self, abort: bool);
}
