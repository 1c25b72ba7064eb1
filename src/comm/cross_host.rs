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
    pub bs: &'a Bootstrap,
    pub dev: &'static Device,
    pub me: usize,
    pub peers: &'a [PeerInfo],
    pub device: i32,
    pub config: &'a CommConfig,
    /// The transports chosen (select::choose), equal on every rank.
    pub paths: Paths,
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
    fn launch_coll(&self, r: &Ready, t: &CollTask) -> Result<()>;
    fn launch_p2p(&self, r: &Ready, ops: &[P2pOp], stream: cu::CUstream) -> Result<()>;
    fn describe(&self, read: &dyn Fn(u64) -> Result<u64>) -> String;
    fn describe_host(&self) -> String;
    fn shutdown(&self, abort: bool);
}
