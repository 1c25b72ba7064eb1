//! A deliberate hang: rank 0 sends 256 MiB that rank 1 never receives, so rank 0's kernel waits on
//! its peer forever (a smaller send fits the put scratch and completes without its receiver: a
//! 1 MiB one did, and the check then waited for a dump of nothing). With OXCCL_DEBUG_DUMP=1 the
//! stall must be dumped (WARN lines naming the stuck operation) within a few seconds, and
//! ncclCommAbort must then return promptly and leave the stream idle: the kernel saw the abort
//! flag and exited. The dump is one WARN per line, so it is looked for in the WARN log
//! (NCCL_DEBUG_FILE, set here), not in ncclGetLastError's last line.

use std::time::{Duration, Instant};

use super::{ck, init_comms, nccl};
use oxccl::api::comm::ncclCommAbort;
use oxccl::api::p2p::ncclSend;
use oxccl::gpu::{cu, CtxGuard, Device, DeviceBuffer};
use oxccl::types::DataType;

pub fn check(ngpu: usize) -> Result<usize, String> {
    std::env::set_var("OXCCL_DEBUG_DUMP", "1"); // read once, at the first communicator's init
    let log = std::env::temp_dir().join(format!("oxccl-gpu-check-hang.{}.log", std::process::id()));
    let level = std::env::var("NCCL_DEBUG").unwrap_or_default().to_ascii_uppercase();
    if !matches!(level.as_str(), "INFO" | "TRACE") {
        std::env::set_var("NCCL_DEBUG", "WARN");
    }
    std::env::set_var("NCCL_DEBUG_FILE", &log);
    oxccl::log::reset_debug_init(); // the settings above take effect at the next log line
    let devs = [Device::get(0).map_err(|e| e.msg)?, Device::get(if ngpu > 1 { 1 } else { 0 }).map_err(|e| e.msg)?];
    let comms = init_comms(&devs)?;
    let _g = CtxGuard::new(devs[0]).map_err(|e| e.msg)?;
    const BYTES: usize = 256 << 20;
    let buf = DeviceBuffer::zeroed(devs[0], BYTES).map_err(|e| e.msg)?;
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; device 0's context is current.
    unsafe { ck(cu::cuStreamCreate(&mut stream, 1), "cuStreamCreate")? };
    nccl(ncclSend(buf.ptr as *const _, BYTES / 4, DataType::Float32 as i32, 1, comms[0], stream.cast()), "ncclSend")?;
    let stuck = format!("send {BYTES} B to 1");
    let mut bad = 0;
    // The monitor looks once a second and dumps after 1 s without progress: expected after 1-2 s.
    let sent = Instant::now();
    let dumped = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("OXCCL_DEBUG_DUMP") && text.contains(&stuck) {
            break Some(text);
        }
        if sent.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    match dumped {
        Some(text) => println!("  hang dump after {:.1} s:\n{text}", sent.elapsed().as_secs_f64()),
        None => {
            println!("FAIL hang: no dump of the stuck send in 10 s (WARN log {}: {:?})", log.display(), std::fs::read_to_string(&log).unwrap_or_default());
            bad += 1;
        }
    }
    // SAFETY: our stream.
    if unsafe { cu::cuStreamQuery(stream) } != cu::CUresult::CUDA_ERROR_NOT_READY {
        println!("FAIL hang: the send completed without its receiver; this check needs a larger one");
        bad += 1;
    }
    let t0 = Instant::now();
    for &c in &comms {
        nccl(ncclCommAbort(c), "ncclCommAbort")?;
    }
    let took = t0.elapsed();
    // SAFETY: our stream.
    let idle = unsafe { cu::cuStreamQuery(stream) } != cu::CUresult::CUDA_ERROR_NOT_READY;
    println!("  aborting the hung communicators took {:.0} ms; stream idle afterwards: {idle}", took.as_secs_f64() * 1e3);
    if took > Duration::from_secs(15) || !idle {
        println!("FAIL hang: abort took {took:?}, stream idle {idle}");
        bad += 1;
    }
    let _ = std::fs::remove_file(&log);
    Ok(bad)
}
