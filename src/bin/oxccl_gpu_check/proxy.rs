//! The proxy FIFO on a real GPU: 64 blocks x 256 threads each push 32 triggers concurrently into a
//! 512-slot FIFO in pinned host memory while the proxy thread consumes them; every block then
//! flushes. Every trigger must arrive exactly once, no push or flush may give up, and stopping the
//! proxy afterwards must be prompt.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ck;
use oxccl::device_abi::ProxyTestArgs;
use oxccl::gpu::module::launch;
use oxccl::gpu::{cu, CtxGuard, Device, DeviceBuffer, HostMapped};
use oxccl::proxy::fifo::{device_view, FifoHost, FifoWords};
use oxccl::proxy::trigger::Request;
use oxccl::proxy::{Handler, Placement, Proxy};
use parking_lot::Mutex;

struct Tally(Arc<Mutex<Vec<u8>>>);

impl Handler for Tally {
    fn execute(&mut self, r: &Request) -> oxccl::Result<()> {
        let (id, k) = ((r.size >> 16) as usize, (r.size & 0xffff) as usize);
        let mut seen = self.0.lock();
        if let Some(s) = seen.get_mut(id * PER_THREAD as usize + k) {
            *s = s.saturating_add(1);
        }
        Ok(())
    }
    fn complete(&mut self) -> oxccl::Result<()> {
        Ok(())
    }
}

const PER_THREAD: u32 = 32;

/// How long a check's kernels may run before the check reports a stall (they take milliseconds).
const STALL_SECS: f64 = 20.0;

/// Waits for `stream` at most `secs`, printing `progress` every 2 s; false if still busy then.
fn wait_stream(stream: cu::CUstream, secs: f64, progress: &dyn Fn() -> String) -> Result<bool, String> {
    let t0 = Instant::now();
    let mut next_report = 2.0;
    loop {
        // SAFETY: a live stream of the current context.
        match unsafe { cu::cuStreamQuery(stream) } {
            cu::CUresult::CUDA_SUCCESS => return Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => {}
            rc => ck(rc, "cuStreamQuery")?,
        }
        let t = t0.elapsed().as_secs_f64();
        if t > secs {
            return Ok(false);
        }
        if t > next_report {
            println!("  ... {t:.0} s: {}", progress());
            next_report += 2.0;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn check(dev: &'static Device) -> Result<usize, String> {
    let e = |e: oxccl::Error| e.msg;
    let _g = CtxGuard::new(dev).map_err(e)?;
    let size = 512u32;
    let host = HostMapped::zeroed(dev, FifoWords::bytes(size)).map_err(e)?;
    // SAFETY: a fresh, zeroed, page-aligned allocation of the right size that outlives the proxy.
    let words = unsafe { FifoWords::over(host.host, size) }.map_err(e)?;
    let head = DeviceBuffer::zeroed(dev, 8).map_err(e)?;
    let failures = DeviceBuffer::zeroed(dev, 8).map_err(e)?;
    let fifo = device_view(host.dev_ptr, head.ptr, size);
    let (blocks, threads) = (64u32, 256u32);
    let total = (blocks * threads * PER_THREAD) as usize;
    let seen = Arc::new(Mutex::new(vec![0u8; total]));
    let placement = Placement { device: Some(dev), cpus: oxccl::bootstrap::topo::local_cpus(&dev.bus_id) };
    let mut proxy = Proxy::start(
        "oxccl-proxy-check".into(),
        FifoHost::new(words),
        Box::new(Tally(seen.clone())),
        placement,
        Box::new(|err| println!("FAIL proxy error: {}", err.msg)),
    )
    .map_err(e)?;
    let module = dev.module().map_err(e)?;
    let args = ProxyTestArgs { fifo, failures: failures.ptr, per_thread: PER_THREAD, _pad0: 0 };
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the device's context is current.
    unsafe { ck(cu::cuStreamCreate(&mut stream, 1), "cuStreamCreate")? };
    let t0 = Instant::now();
    launch(module.proxy_selftest(), blocks, threads, stream, &args).map_err(e)?;
    let progress = || {
        format!(
            "tail {} of {total}+{blocks} pushes, flush_done {}, {} triggers seen",
            words.tail().load(Ordering::Acquire),
            words.flush_done().load(Ordering::Acquire),
            seen.lock().iter().filter(|&&c| c != 0).count()
        )
    };
    let mut bad = 0;
    if !wait_stream(stream, STALL_SECS, &progress)? {
        println!("FAIL proxy FIFO: kernel still running after {STALL_SECS} s ({}); stopping the proxy", progress());
        bad += 1;
        proxy.stop(); // releases every waiting GPU thread: the kernel must end now
        if !wait_stream(stream, 10.0, &progress)? {
            return Err("proxy FIFO: the kernel did not end after the proxy released its waiters".into());
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut gave_up = 0u32;
    // SAFETY: copies 4 bytes from a live device allocation into a local.
    unsafe { ck(cu::cuMemcpyDtoH_v2((&mut gave_up as *mut u32).cast(), failures.ptr, 4), "cuMemcpyDtoH")? };
    let t1 = Instant::now();
    proxy.stop();
    let stop_ms = t1.elapsed().as_secs_f64() * 1e3;
    // SAFETY: our stream, idle now.
    unsafe { ck(cu::cuStreamDestroy_v2(stream), "cuStreamDestroy")? };
    let seen = seen.lock();
    let missing = seen.iter().filter(|&&c| c == 0).count();
    let dup = seen.iter().filter(|&&c| c > 1).count();
    println!(
        "  proxy FIFO: {total} triggers from {} threads through {size} slots in {:.1} ms ({:.1} M/s); stop {:.2} ms",
        blocks * threads,
        secs * 1e3,
        total as f64 / secs / 1e6,
        stop_ms
    );
    for (what, n) in [("pushes/flushes that gave up", gave_up as usize), ("triggers missing", missing), ("triggers seen twice", dup)] {
        if n != 0 {
            println!("FAIL proxy FIFO: {n} {what}");
            bad += 1;
        }
    }
    if stop_ms > 500.0 {
        println!("FAIL proxy FIFO: stop took {stop_ms:.0} ms");
        bad += 1;
    }
    Ok(bad)
}

/// PortChannel over the copy engine: a kernel on GPU `a` puts 64 MiB to GPU `b` (the same GPU
/// when there is one) with put_with_signal_and_flush from 64 blocks, through the FIFO, the proxy
/// and a CopyEngine transport; a kernel on `b` waits for the 64 signals and checks every byte.
pub fn check_copy_engine(a: &'static Device, b: &'static Device) -> Result<usize, String> {
    use oxccl::device_abi::PortTestArgs;
    use oxccl::transport::cuda::{CopyEngine, Region};
    let e = |e: oxccl::Error| e.msg;
    let bytes: u64 = 64 << 20;
    let blocks = 64u32;
    if a.ordinal != b.ordinal {
        a.enable_peer_access(b).map_err(e)?;
    }
    let src = DeviceBuffer::zeroed(a, bytes as usize).map_err(e)?;
    let dst = DeviceBuffer::zeroed(b, bytes as usize).map_err(e)?;
    let sem = DeviceBuffer::zeroed(b, 8).map_err(e)?;
    let fails_a = DeviceBuffer::zeroed(a, 8).map_err(e)?;
    let fails_b = DeviceBuffer::zeroed(b, 8).map_err(e)?;
    let abort = HostMapped::zeroed(b, 64).map_err(e)?;
    let size = 512u32;
    let host = HostMapped::zeroed(a, FifoWords::bytes(size)).map_err(e)?;
    // SAFETY: as in `check`.
    let words = unsafe { FifoWords::over(host.host, size) }.map_err(e)?;
    let head = DeviceBuffer::zeroed(a, 8).map_err(e)?;
    let fifo = device_view(host.dev_ptr, head.ptr, size);
    let ce = CopyEngine::new(a, vec![Region { ptr: src.ptr, size: bytes }], vec![Region { ptr: dst.ptr, size: bytes }], vec![sem.ptr])
        .map_err(e)?;
    let placement = Placement { device: Some(a), cpus: oxccl::bootstrap::topo::local_cpus(&a.bus_id) };
    let mut proxy = Proxy::start("oxccl-proxy-ce".into(), FifoHost::new(words), Box::new(ce), placement, Box::new(|err| {
        println!("FAIL copy-engine proxy error: {}", err.msg)
    }))
    .map_err(e)?;
    let args = |mode: u32, failures: u64| PortTestArgs {
        fifo,
        src: src.ptr,
        dst: dst.ptr,
        bytes,
        sem: sem.ptr,
        failures,
        abort_flag: abort.dev_ptr,
        blocks,
        mode,
    };
    let stream = |d: &'static Device| -> Result<cu::CUstream, String> {
        let _g = CtxGuard::new(d).map_err(e)?;
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current.
        unsafe { ck(cu::cuStreamCreate(&mut s, 1), "cuStreamCreate")? };
        Ok(s)
    };
    let (sa, sb) = (stream(a)?, stream(b)?);
    let t0 = Instant::now();
    {
        let _g = CtxGuard::new(b).map_err(e)?;
        launch(b.module().map_err(e)?.port_selftest(), 1, 1024, sb, &args(1, fails_b.ptr)).map_err(e)?;
    }
    {
        let _g = CtxGuard::new(a).map_err(e)?;
        launch(a.module().map_err(e)?.port_selftest(), blocks, 256, sa, &args(0, fails_a.ptr)).map_err(e)?;
    }
    let mut bad = 0;
    let mut counts = [0u32; 2];
    for (i, (d, s, f)) in [(a, sa, &fails_a), (b, sb, &fails_b)].into_iter().enumerate() {
        let _g = CtxGuard::new(d).map_err(e)?;
        // SAFETY: our stream and a live 8-byte device allocation.
        let progress = || format!("FIFO tail {}, flush_done {}", words.tail().load(Ordering::Acquire), words.flush_done().load(Ordering::Acquire));
        if !wait_stream(s, STALL_SECS, &progress)? {
            println!("FAIL copy engine: GPU {}'s kernel still running after {STALL_SECS} s ({}); aborting", d.ordinal, progress());
            bad += 1;
            proxy.stop();
            // SAFETY: the abort word lives in mapped host memory that outlives the kernels.
            unsafe { (*abort.host.cast::<std::sync::atomic::AtomicU32>()).store(1, Ordering::Release) };
            if !wait_stream(s, 10.0, &progress)? {
                return Err("copy engine: a kernel did not end after stop and abort".into());
            }
        }
        // SAFETY: a live 8-byte device allocation; the stream is idle.
        unsafe { ck(cu::cuMemcpyDtoH_v2((&mut counts[i] as *mut u32).cast(), f.ptr, 4), "cuMemcpyDtoH")? };
    }
    let secs = t0.elapsed().as_secs_f64();
    proxy.stop();
    println!(
        "  PortChannel copy engine GPU {} -> GPU {}: {} MiB in {:.2} ms ({:.0} GB/s, including launch and checks)",
        a.ordinal,
        b.ordinal,
        bytes >> 20,
        secs * 1e3,
        bytes as f64 / secs / 1e9
    );
    if counts[0] != 0 {
        println!("FAIL copy engine: {} puts/flushes gave up", counts[0]);
        bad += 1;
    }
    if counts[1] != 0 {
        println!("FAIL copy engine: {} wrong bytes at the receiver", counts[1]);
        bad += 1;
    }
    Ok(bad)
}
