//! Turning one validated operation into GPU work on the user's stream: algorithm choice, kernel
//! arguments, launch, and the ordering of a communicator's launches across streams. Nothing here is
//! per-call host state that a CUDA graph replay would miss: flags and semaphores live on the device.

use std::sync::Arc;

use crate::algo::{select_allreduce, AllReducePlan};
use crate::comm::{Comm, ResolvedOp, Ready};
use crate::device_abi::CollArgs;
use crate::error::{Error, Result};
use crate::gpu::module::launch;
use crate::gpu::stream::is_capturing;
use crate::gpu::{check, cu, CtxGuard};
use crate::log::Subsys;
use crate::types::{DataType, RedOp};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
}

/// One collective, validated, ready to launch.
#[derive(Clone)]
pub struct CollTask {
    pub comm: Arc<Comm>,
    pub coll: Coll,
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub dtype: DataType,
    pub op: ResolvedOp,
    pub stream: cu::CUstream,
}

// SAFETY: the stream is an opaque driver handle, valid from any thread.
unsafe impl Send for CollTask {}

/// Launches one task on its stream.
pub fn launch_task(t: &CollTask) -> Result<()> {
    let r = t.comm.ready()?;
    if t.comm.is_aborted() {
        return Err(Error::invalid_usage("communicator was aborted"));
    }
    let _ctx = CtxGuard::new(r.dev)?;
    let mut ls = r.launch.lock();
    // Kernels of one communicator share its scratch and counters: they must not overlap. Only a
    // stream switch costs anything: the new stream waits for what was issued on the previous one
    // (unless either is being captured, where cross-capture dependencies are not allowed).
    if let Some(prev) = ls.last_stream.filter(|&s| s != t.stream) {
        if !is_capturing(prev)? && !is_capturing(t.stream)? {
            ls.done.record(prev)?;
            ls.done.wait_on(t.stream)?;
        }
    }
    match t.coll {
        Coll::AllReduce => allreduce(r, t)?,
    }
    ls.last_stream = Some(t.stream);
    Ok(())
}

/// Single-rank copies at least this large use the copy engine.
const LOCAL_COPY_MIN_BYTES: u64 = 256 << 10;

fn allreduce(r: &Ready, t: &CollTask) -> Result<()> {
    if t.dtype.is_fp8() && !r.fp8_ok {
        return Err(Error::invalid_argument(format!(
            "{} reductions need compute capability 9.0 on every GPU of the communicator",
            t.dtype.name()
        )));
    }
    let bytes = t.count * t.dtype.size() as u64;
    if t.comm.nranks == 1 && t.op.op != RedOp::PreMulSum && (t.send == t.recv || bytes >= LOCAL_COPY_MIN_BYTES) {
        // One rank: every built-in op is the identity (avg multiplies by 1/1 exactly). Large
        // copies go to the copy engine; small ones take the one-pass kernel, whose launch is far
        // cheaper than a copy-engine transfer's set-up.
        return local_copy(t.recv, t.send, bytes, t.stream);
    }
    let plan: AllReducePlan = select_allreduce(t.count, t.dtype, &r.topo, &r.scratch, &r.tuning);
    nccl_trace!(
        Subsys::Coll,
        "AllReduce count {} {} {} -> {:?} grid {} block {}",
        t.count,
        t.dtype.name(),
        t.op.op.name(),
        plan.algo,
        plan.grid,
        plan.block
    );
    let args = CollArgs {
        comm: r.dev_comm,
        send: t.send,
        recv: t.recv,
        count: t.count,
        chunk_elems: plan.chunk_elems,
        scalar: t.op.scalar,
        scalar_ptr: t.op.scalar_ptr,
        root: 0,
        _pad0: 0,
    };
    launch(r.module.allreduce(plan.algo, t.dtype, t.op.op), plan.grid, plan.block, t.stream, &args)
}

/// The cost model's prediction for a task, in microseconds (ncclGroupSimulateEnd).
pub fn predict_us(t: &CollTask) -> Result<f64> {
    let r = t.comm.ready()?;
    let bytes = t.count * t.dtype.size() as u64;
    Ok(match t.coll {
        Coll::AllReduce => {
            let plan = select_allreduce(t.count, t.dtype, &r.topo, &r.scratch, &r.tuning);
            crate::algo::cost::allreduce_us(&plan, bytes, t.comm.nranks)
        }
    })
}

fn local_copy(dst: u64, src: u64, bytes: u64, stream: cu::CUstream) -> Result<()> {
    if dst == src || bytes == 0 {
        return Ok(());
    }
    // SAFETY: both ranges belong to the caller's device buffers of at least `bytes`.
    check(unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes as usize, stream) }, "cuMemcpyDtoDAsync")
}
