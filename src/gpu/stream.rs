//! Streams (the user's), events, and stream-capture state.

use cudarc::driver::sys as cu;

use super::driver::check;
use crate::error::Result;

/// True while `stream` is being captured into a CUDA graph.
pub fn is_capturing(stream: cu::CUstream) -> Result<bool> {
    let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: out-pointer to a local; stream is the caller's (0 is the legacy stream).
    check(unsafe { cu::cuStreamIsCapturing(stream, &mut st) }, "cuStreamIsCapturing")?;
    Ok(st != cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// True while `stream`'s capture is active (not invalidated): work issued now joins a graph that
/// can still be instantiated.
pub fn capture_active(stream: cu::CUstream) -> Result<bool> {
    let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: out-pointer to a local; stream is the caller's (0 is the legacy stream).
    check(unsafe { cu::cuStreamIsCapturing(stream, &mut st) }, "cuStreamIsCapturing")?;
    Ok(st == cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE)
}

/// `stream`'s active capture: its id, graph and, where the capture has exactly one tail node,
/// that node; None when it is not capturing.
fn active_capture(stream: cu::CUstream) -> Result<Option<(u64, cu::CUgraph, Option<usize>)>> {
    let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: cu::cuuint64_t = 0;
    let mut graph: cu::CUgraph = std::ptr::null_mut();
    let mut deps: *const cu::CUgraphNode = std::ptr::null();
    let mut n: usize = 0;
    // SAFETY: out-pointers to locals; the edge data is optional (null: not wanted). The driver
    // owns the dependency array, valid until the next call on the stream; read at once.
    check(
        unsafe { cu::cuStreamGetCaptureInfo_v3(stream, &mut st, &mut id, &mut graph, &mut deps, std::ptr::null_mut(), &mut n) },
        "cuStreamGetCaptureInfo",
    )?;
    if st != cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return Ok(None);
    }
    // SAFETY: n entries at deps (n == 1 checked).
    let only = if n == 1 && !deps.is_null() { Some(unsafe { *deps } as usize) } else { None };
    Ok(Some((id, graph, only)))
}

/// Where `stream`'s capture stands (algo::pdl::CaptureTail), or None when it is not capturing.
pub fn capture_tail(stream: cu::CUstream) -> Result<Option<crate::algo::pdl::CaptureTail>> {
    Ok(active_capture(stream)?.map(|(id, _, only)| crate::algo::pdl::CaptureTail { id, only }))
}

/// The id and graph of `stream`'s active capture, or None when it is not capturing.
pub fn capture_graph(stream: cu::CUstream) -> Result<Option<(u64, cu::CUgraph)>> {
    Ok(active_capture(stream)?.filter(|(_, g, _)| !g.is_null()).map(|(id, g, _)| (id, g)))
}

/// The nodes that `stream`'s next captured work will depend on (empty when it is not capturing).
pub fn capture_deps(stream: cu::CUstream) -> Result<Vec<cu::CUgraphNode>> {
    let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const cu::CUgraphNode = std::ptr::null();
    let mut n: usize = 0;
    // SAFETY: out-pointers to locals; the optional outputs are null. The driver owns the array,
    // valid until the next call on the stream: copied at once.
    check(
        unsafe { cu::cuStreamGetCaptureInfo_v3(stream, &mut st, std::ptr::null_mut(), std::ptr::null_mut(), &mut deps, std::ptr::null_mut(), &mut n) },
        "cuStreamGetCaptureInfo",
    )?;
    if st != cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || deps.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: n nodes at deps, as the driver reported.
    Ok(unsafe { std::slice::from_raw_parts(deps, n) }.to_vec())
}

/// Replaces (`add` false) or extends (`add` true) the nodes that `stream`'s next captured work
/// depends on: with `capture_deps`, captured work can branch off the stream and join it later
/// without a side stream, which would stay in the capture until it ends.
pub fn set_capture_deps(stream: cu::CUstream, deps: &[cu::CUgraphNode], add: bool) -> Result<()> {
    let flags = if add {
        cu::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_ADD_CAPTURE_DEPENDENCIES
    } else {
        cu::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES
    };
    let mut deps = deps.to_vec();
    let nodes = if deps.is_empty() { std::ptr::null_mut() } else { deps.as_mut_ptr() };
    // SAFETY: deps.len() nodes of the stream's capture graph (null for none); null edge data
    // means default edges.
    check(
        unsafe { cu::cuStreamUpdateCaptureDependencies_v2(stream, nodes, std::ptr::null(), deps.len(), flags as u32) },
        "cuStreamUpdateCaptureDependencies",
    )
}

/// Switches this thread to relaxed stream-capture mode for a scope: set-up work (allocations,
/// synchronous copies) must not fail because another thread is capturing a graph.
pub struct RelaxedCapture {
    prev: cu::CUstreamCaptureMode,
}

impl RelaxedCapture {
    /// Switches this thread to relaxed capture mode until the guard drops.
    pub fn new() -> Result<RelaxedCapture> {
        let mut mode = cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges the thread's mode with a valid enum value.
        check(unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) }, "cuThreadExchangeStreamCaptureMode")?;
        Ok(RelaxedCapture { prev: mode })
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let mut mode = self.prev;
        // SAFETY: restores the mode saved at construction.
        unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// An event, created in the current context: without timing (`new`), or with it (`timed`, for
/// measuring only: such an event costs more to record).
pub struct Event {
    /// The driver's handle.
    pub raw: cu::CUevent,
}

// SAFETY: CUevent handles may be used from any thread.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    /// An event without timing, in the current context.
    pub fn new() -> Result<Event> {
        Event::with_flags(cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
    }
    /// An event with timing (for measuring between two), in the current context.
    pub fn timed() -> Result<Event> {
        Event::with_flags(0)
    }
    fn with_flags(flags: u32) -> Result<Event> {
        let mut raw: cu::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the caller has the right context current.
        check(unsafe { cu::cuEventCreate(&mut raw, flags) }, "cuEventCreate")?;
        Ok(Event { raw })
    }
    /// Waits on the host until the recorded work has completed.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid event.
        check(unsafe { cu::cuEventSynchronize(self.raw) }, "cuEventSynchronize")
    }
    /// Milliseconds from this event to `later`, both `timed`, recorded and complete.
    pub fn ms_until(&self, later: &Event) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: valid events, out-pointer to a local.
        check(unsafe { cu::cuEventElapsedTime_v2(&mut ms, self.raw, later.raw) }, "cuEventElapsedTime")?;
        Ok(ms)
    }
    /// Records the event at `stream`'s current end.
    pub fn record(&self, stream: cu::CUstream) -> Result<()> {
        // SAFETY: valid event and stream of the current context.
        check(unsafe { cu::cuEventRecord(self.raw, stream) }, "cuEventRecord")
    }
    /// Makes `stream` wait for the work this event captured.
    pub fn wait_on(&self, stream: cu::CUstream) -> Result<()> {
        // SAFETY: valid event and stream.
        check(unsafe { cu::cuStreamWaitEvent(stream, self.raw, 0) }, "cuStreamWaitEvent")
    }
    /// Ok(true) once the recorded work has completed.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: valid event.
        match unsafe { cu::cuEventQuery(self.raw) } {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => check(rc, "cuEventQuery").map(|_| false),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        unsafe { cu::cuEventDestroy_v2(self.raw) };
    }
}

/// A non-blocking stream of oxccl's own (proxy and transport threads): never the legacy default
/// stream, which waits for the application's blocking streams and so could wait for a kernel
/// that waits for us. Synchronised and destroyed on drop.
pub struct OwnedStream {
    dev: &'static super::Device,
    /// The driver's handle.
    pub raw: cu::CUstream,
}

// SAFETY: stream handles are usable from any thread with the device's context current.
unsafe impl Send for OwnedStream {}

impl OwnedStream {
    /// A non-blocking stream on `dev`.
    pub fn new(dev: &'static super::Device) -> Result<OwnedStream> {
        let _g = super::CtxGuard::new(dev)?;
        let mut raw: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current.
        check(unsafe { cu::cuStreamCreate(&mut raw, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }, "cuStreamCreate")?;
        Ok(OwnedStream { dev, raw })
    }

    /// Waits for everything queued on the stream (the caller has the device's context current).
    pub fn sync(&self, what: &str) -> Result<()> {
        // SAFETY: our own stream.
        check(unsafe { cu::cuStreamSynchronize(self.raw) }, what)
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        if let Ok(_g) = super::CtxGuard::new(self.dev) {
            // SAFETY: our stream, destroyed once; teardown errors are ignored (the context may be
            // going away).
            unsafe {
                let _ = cu::cuStreamSynchronize(self.raw);
                let _ = cu::cuStreamDestroy_v2(self.raw);
            }
        }
    }
}

/// Whether `stream` names the legacy default stream: NULL (0) or CU_STREAM_LEGACY (0x1).
pub fn is_legacy(stream: cu::CUstream) -> bool {
    (stream as usize) <= 1
}

/// An asynchronous device-to-device copy (same GPU, or a peer's memory mapped here) that asks the
/// driver for a copy engine. A plain cuMemcpyAsync between two device addresses may run as a copy
/// *kernel*; a kernel queued by a proxy thread can then wait in a hardware queue it shares with
/// the user's stream (CUDA_DEVICE_MAX_CONNECTIONS), behind work that waits for the very kernel
/// that waits for this proxy: a deadlock. Copy-engine work does not queue behind kernels.
/// Falls back to cuMemcpyAsync on drivers without cuMemcpyBatchAsync (before CUDA 12.8), on the
/// legacy default stream, which cuMemcpyBatchAsync refuses, and on a capturing stream, where
/// cuMemcpyBatchAsync is not supported (NCCL's src/ce_coll.cc does the same): the graph's memcpy
/// node is then ordered by the graph's edges, not by a hardware queue a proxy shares.
pub fn copy_engine_async(dst: cu::CUdeviceptr, src: cu::CUdeviceptr, n: usize, stream: cu::CUstream) -> Result<()> {
    static BATCH: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let batch = *BATCH.get_or_init(|| {
        // cudarc panics when the driver lacks the symbol; a zero-count call only loads it.
        std::panic::catch_unwind(|| {
            // SAFETY: count 0: the driver rejects the call without reading any pointer.
            unsafe {
                cu::cuMemcpyBatchAsync_v2(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                )
            }
        })
        .is_ok()
    });
    // cuMemcpyBatchAsync refuses the legacy NULL stream (CUDA_ERROR_INVALID_VALUE): PyTorch issues
    // a blocking collective on the current stream, by default that one. A copy there is in the
    // application's own stream order, never a proxy's, so a plain copy is as safe.
    if !batch || is_legacy(stream) || is_capturing(stream)? {
        // SAFETY: the caller guarantees both ranges are valid device memory for this context.
        return check(unsafe { cu::cuMemcpyAsync(dst, src, n, stream) }, "cuMemcpyAsync");
    }
    let none = cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID, id: 0 };
    let mut attrs = cu::CUmemcpyAttributes {
        // Stream order: the source is read after earlier work on the stream, like cuMemcpyAsync.
        srcAccessOrder: cu::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: none,
        dstLocHint: none,
        flags: cu::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE as u32,
    };
    let (mut d, mut s, mut len, mut idx) = (dst, src, n, 0usize);
    // SAFETY: one copy described by locals that outlive the call; the caller guarantees the ranges.
    check(
        unsafe { cu::cuMemcpyBatchAsync_v2(&mut d, &mut s, &mut len, 1, &mut attrs, &mut idx, 1, stream) },
        "cuMemcpyBatchAsync",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_default_stream_is_told_apart() {
        assert!(is_legacy(std::ptr::null_mut()));
        assert!(is_legacy(1usize as cu::CUstream), "CU_STREAM_LEGACY");
        assert!(!is_legacy(2usize as cu::CUstream), "CU_STREAM_PER_THREAD is not the legacy stream");
        assert!(!is_legacy(0x7f00_0000_1000usize as cu::CUstream));
    }
}
