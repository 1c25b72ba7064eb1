//! The CUDA side of the transports: device memories as `MemAccess` (for host-staged transports
//! such as TCP), and the copy-engine transport between GPUs of one host (CUDA IPC or one process).

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::gpu::stream::OwnedStream;
use crate::gpu::{check, cu, CtxGuard, Device};
use crate::proxy::trigger::Request;
use crate::proxy::Handler;

use super::MemAccess;

/// A registered memory: device address and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Device address of its first byte.
    pub ptr: u64,
    /// Its length in bytes.
    pub size: u64,
}

fn region(table: &[Region], id: u16, off: u64, len: u64, what: &str) -> Result<u64> {
    let r = table.get(id as usize).ok_or_else(|| Error::invalid_usage(format!("{what}: unknown memory id {id}")))?;
    if off.checked_add(len).is_none_or(|end| end > r.size) {
        return Err(Error::invalid_usage(format!("{what}: {len} bytes at offset {off} exceed memory {id} ({} bytes)", r.size)));
    }
    Ok(r.ptr + off)
}

/// Device memories of this GPU, reached with copies the calling thread waits for (the proxy thread
/// or a receiver thread). Copies run on non-blocking streams of a small pool, never on the legacy
/// default stream: that one would wait for the user's kernels on blocking streams, among them
/// the kernel waiting for this very transfer.
pub struct DeviceMem {
    /// The GPU the memories are on; its context is made current for every copy.
    pub dev: &'static Device,
    /// The registered memories, indexed by memory id.
    pub mems: Vec<Region>,
    /// Device addresses of this GPU's inbound semaphores (`u64`).
    pub sems: Vec<u64>,
    streams: Mutex<Vec<OwnedStream>>,
}

impl DeviceMem {
    /// Memories `mems` and semaphores `sems` of `dev`, by id; the stream pool starts empty.
    pub fn new(dev: &'static Device, mems: Vec<Region>, sems: Vec<u64>) -> DeviceMem {
        DeviceMem { dev, mems, sems, streams: Mutex::new(Vec::new()) }
    }

    /// Runs `f` with the device's context current and a stream of the pool (made on demand, one
    /// per concurrent caller), then waits for that stream.
    fn on_stream(&self, what: &str, f: impl FnOnce(cu::CUstream) -> cu::CUresult) -> Result<()> {
        let _g = CtxGuard::new(self.dev)?;
        let s = match self.streams.lock().pop() {
            Some(s) => s,
            None => OwnedStream::new(self.dev)?,
        };
        let r = check(f(s.raw), what).and_then(|_| s.sync(what));
        self.streams.lock().push(s);
        r
    }
}

impl MemAccess for DeviceMem {
    fn read(&self, mem: u16, off: u64, dst: &mut [u8]) -> Result<()> {
        let src = region(&self.mems, mem, off, dst.len() as u64, "read")?;
        // SAFETY: `src` lies within a registered allocation (checked); dst is writable host memory,
        // and on_stream waits for the copy before returning.
        self.on_stream("cuMemcpyDtoHAsync", |st| unsafe { cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), st) })
    }

    fn write(&self, mem: u16, off: u64, src: &[u8]) -> Result<()> {
        let dst = region(&self.mems, mem, off, src.len() as u64, "write")?;
        // SAFETY: as in read; complete when on_stream returns, so a later signal follows it.
        self.on_stream("cuMemcpyHtoDAsync", |st| unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), st) })
    }

    fn signal(&self, sem: u16, value: u64) -> Result<()> {
        let addr = *self.sems.get(sem as usize).ok_or_else(|| Error::invalid_usage(format!("unknown semaphore id {sem}")))?;
        // SAFETY: a registered u64 semaphore; every earlier write completed before its call returned.
        self.on_stream("cuMemcpyHtoDAsync (semaphore)", |st| unsafe { cu::cuMemcpyHtoDAsync_v2(addr, (&value as *const u64).cast(), 8, st) })
    }
}

/// Copy-engine transport from this GPU to one peer GPU of the same host: puts are
/// cuMemcpyAsync on the connection's own stream, and signals are stream memory writes queued
/// after them, so stream order lands every put before the signal that follows it.
pub struct CopyEngine {
    stream: OwnedStream,
    /// This rank's memories (sources), and the peer's as mapped here (destinations).
    src: Vec<Region>,
    dst: Vec<Region>,
    /// The peer's inbound semaphores as mapped here, and the values last written.
    sems: Vec<u64>,
    values: Vec<u64>,
}

impl CopyEngine {
    /// A connection from `src` (this rank's memories) to `dst` and `sems` (the peer's memories
    /// and inbound semaphores, as mapped here), on a new non-blocking stream of `dev`. Fails where
    /// the stream cannot be made.
    pub fn new(dev: &'static Device, src: Vec<Region>, dst: Vec<Region>, sems: Vec<u64>) -> Result<CopyEngine> {
        // Non-blocking: the connection's copies never wait for the legacy default stream.
        let stream = OwnedStream::new(dev)?;
        let values = vec![0; sems.len()];
        Ok(CopyEngine { stream, src, dst, sems, values })
    }
}

impl Handler for CopyEngine {
    fn execute(&mut self, r: &Request) -> Result<()> {
        if r.is_data() && r.size > 0 {
            let n = u64::from(r.size);
            let s = region(&self.src, r.src_mem, u64::from(r.src_offset), n, "copy-engine put source")?;
            let d = region(&self.dst, r.dst_mem, u64::from(r.dst_offset), n, "copy-engine put destination")?;
            // SAFETY: both ranges lie within registered allocations (checked); the proxy thread has
            // the device's context current.
            check(unsafe { cu::cuMemcpyAsync(d, s, n as usize, self.stream.raw) }, "cuMemcpyAsync (put)")?;
        }
        if r.is_flag() {
            let i = r.semaphore as usize;
            let addr = *self.sems.get(i).ok_or_else(|| Error::invalid_usage(format!("unknown semaphore id {i}")))?;
            self.values[i] += 1;
            // SAFETY: a registered semaphore address; queued after the puts on the same stream.
            check(unsafe { cu::cuStreamWriteValue64_v2(self.stream.raw, addr, self.values[i], 0) }, "cuStreamWriteValue64 (signal)")?;
        }
        Ok(())
    }

    fn complete(&mut self) -> Result<()> {
        self.stream.sync("cuStreamSynchronize (flush)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_bounds_checked() {
        let t = [Region { ptr: 0x1000, size: 256 }];
        assert_eq!(region(&t, 0, 0, 256, "t").unwrap(), 0x1000);
        assert_eq!(region(&t, 0, 255, 1, "t").unwrap(), 0x10ff);
        assert!(region(&t, 0, 255, 2, "t").is_err());
        assert!(region(&t, 0, u64::MAX, 2, "t").is_err());
        assert!(region(&t, 1, 0, 0, "t").is_err());
    }
}
