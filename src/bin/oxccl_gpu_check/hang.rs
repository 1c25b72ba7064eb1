//! A deliberate hang: rank 0 sends 1 MiB that rank 1 never receives, so rank 0's kernel waits on
//! its peer forever. With OXCCL_DEBUG_DUMP=1 the stall must be dumped (a WARN naming the stuck
//! operation) within a few seconds, and ncclCommAbort must then return promptly and leave the
//! stream idle: the kernel saw the abort flag and exited.

use std::time::{Duration, Instant};

use super::{ck, init_comms, nccl};
use oxccl::api::comm::ncclCommAbort;
use oxccl::api::p2p::ncclSend;
use oxccl::gpu::{cu, CtxGuard, Device, DeviceBuffer};
use oxccl::types::DataType;

pub fn check(ngpu: usize) -> Result<usize, String> {
    std::env::set_var("OXCCL_DEBUG_DUMP", "1"); // read once, at the first communicator's init
    let devs = [Device::get(0).map_err(|e| e.msg)?, Device::get(if ngpu > 1 { 1 } else { 0 }).map_err(|e| e.msg)?];
    let comms = init_comms(&devs)?;
    let _g = CtxGuard::new(devs[0]).map_err(|e| e.msg)?;
    let buf = DeviceBuffer::zeroed(devs[0], 1 << 20).map_err(|e| e.msg)?;
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; device 0's context is current.
    unsafe { ck(cu::cuStreamCreate(&mut stream, 1), "cuStreamCreate")? };
    nccl(ncclSend(buf.ptr as *const _, 1 << 18, DataType::Float32 as i32, 1, comms[0], stream.cast()), "ncclSend")?;
    let mut bad = 0;
    std::thread::sleep(Duration::from_millis(3500));
    // SAFETY: NUL-terminated text owned by the library for the process's life.
    let last = unsafe { std::ffi::CStr::from_ptr(oxccl::log::last_error_ptr()) }.to_string_lossy().into_owned();
    if !last.contains("OXCCL_DEBUG_DUMP") || !last.contains("send 1048576 B to 1") {
        println!("FAIL hang: no dump of the stuck send after 3.5 s (last WARN: {last:?})");
        bad += 1;
    } else {
        println!("  hang dump:\n{last}");
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
    Ok(bad)
}
