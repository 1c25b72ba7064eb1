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
    pub comm: Arc<Comm>,
    pub coll: Coll,
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub dtype: DataType,
    pub op: ResolvedOp,
    pub root: i32,
    pub stream: cu::CUstream,
}

// SAFETY: the stream is an opaque driver handle, valid from any thread; a task is never mutated
// after validation, so shared references are fine too.
unsafe impl Send for CollTask {}
unsafe impl Sync for CollTask {}

/// One ncclSend or ncclRecv.
#[derive(Clone, Copy, Debug)]
pub struct P2pOp {
    pub is_send: bool,
    pub peer: usize,
    pub buf: u64,
    pub bytes: u64,
    pub stream: cu::CUstream,
}

// SAFETY: as CollTask.
unsafe impl Send for P2pOp {}
