//! Operations on a communicator, validated: what the launch path (launch/enqueue) and the
//! cross-host executor (net) take. They live with the communicator they hold, below both.

use std::sync::Arc;

use super::Comm;
use crate::gpu::cu;
use crate::types::{Coll, DataType, ResolvedOp};

/// One collective, validated, ready to launch. `count` is NCCL's count argument (per rank for
/// AllGather, ReduceScatter, AlltoAll, Gather, Scatter).
#[derive(Clone)]
pub struct CollTask {
    /// The communicator it runs on.
    pub comm: Arc<Comm>,
    /// Which collective.
    pub coll: Coll,
    /// Device address of the send buffer (sendbuff).
    pub send: u64,
    /// Device address of the receive buffer (recvbuff); equal to `send` when in place.
    pub recv: u64,
    /// NCCL's count argument, in elements of `dtype`.
    pub count: u64,
    /// The element type.
    pub dtype: DataType,
    /// The reduction op in kernel form (Sum, unused, for collectives that do not reduce).
    pub op: ResolvedOp,
    /// The root rank of a rooted collective (Broadcast, Reduce, Gather, Scatter); unused by the others.
    pub root: i32,
    /// The application's stream the collective is ordered on.
    pub stream: cu::CUstream,
    /// The call's ncclCollConfig_t (the nccl*Config collectives), where it shapes the launch;
    /// None for the plain calls (their path allocates nothing for it).
    pub config: Option<Box<crate::algo::collcfg::CallConfig>>,
}

// SAFETY: the stream is an opaque driver handle, valid from any thread; a task is never mutated
// after validation, so shared references are fine too.
unsafe impl Send for CollTask {}
unsafe impl Sync for CollTask {}

/// One ncclSend or ncclRecv.
#[derive(Clone, Copy, Debug)]
pub struct P2pOp {
    /// ncclSend (true) or ncclRecv (false).
    pub is_send: bool,
    /// The peer's rank in the communicator.
    pub peer: usize,
    /// Device address of the buffer sent from or received into.
    pub buf: u64,
    /// Bytes to move (count times the datatype's size).
    pub bytes: u64,
    /// The application's stream the operation is ordered on.
    pub stream: cu::CUstream,
}

// SAFETY: as CollTask.
unsafe impl Send for P2pOp {}
