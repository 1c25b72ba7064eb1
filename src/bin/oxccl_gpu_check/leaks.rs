//! Leak check (`--leaks`): 200 init/destroy cycles of a communicator over every rank, then 1,000
//! register/deregister cycles (ncclCommRegister and ncclCommWindowRegister on ncclMemAlloc'd
//! buffers). GPU memory in use (cuMemGetInfo, per device) and host RSS are sampled after a few
//! warm-up cycles and at the end; growth beyond a small allowance fails. Prints the numbers.

use std::ffi::c_void;

use super::{ck, init_comms, nccl};
use oxccl::api::comm::ncclCommDestroy;
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::mem::{ncclCommDeregister, ncclCommRegister, ncclCommWindowDeregister, ncclCommWindowRegister, ncclMemAlloc, ncclMemFree};
use oxccl::api::types::{ncclComm_t, ncclWindow_t};
use oxccl::gpu::{cu, CtxGuard, Device};

const INIT_CYCLES: usize = 200;
const REG_CYCLES: usize = 1000;
const WARM: usize = 5;
/// Growth allowed between the warm sample and the end (allocator noise, lazily created state).
const ALLOWED_BYTES: i64 = 64 << 20;

fn rss_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64
}

/// GPU memory in use on each device.
fn gpu_used(devs: &[&'static Device]) -> Result<Vec<i64>, String> {
    devs.iter()
        .map(|d| {
            let _g = CtxGuard::new(d).map_err(|e| e.msg)?;
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: out-pointers to locals; the device's context is current.
            unsafe { ck(cu::cuMemGetInfo_v2(&mut free, &mut total), "cuMemGetInfo")? };
            Ok(total as i64 - free as i64)
        })
        .collect()
}

fn destroy_all(comms: &[ncclComm_t]) -> Result<(), String> {
    comms.iter().try_for_each(|&c| nccl(ncclCommDestroy(c), "ncclCommDestroy"))
}

pub fn check(ngpu: usize, nranks: usize) -> Result<usize, String> {
    let n = if nranks == 0 { ngpu } else { nranks };
    let devs: Vec<&'static Device> = (0..n).map(|r| Device::get((r % ngpu) as i32).map_err(|e| e.msg)).collect::<Result<_, _>>()?;
    let mut bad = 0;
    let report = |what: &str, warm: (i64, &[i64]), end: (i64, &[i64]), bad: &mut usize| {
        let gpu: Vec<String> = warm.1.iter().zip(end.1).map(|(a, b)| format!("{:+.1}", (b - a) as f64 / 1e6)).collect();
        println!("  {what}: host RSS {:+.1} MB, GPU memory per device [{}] MB (after {WARM} warm-up cycles -> end)", (end.0 - warm.0) as f64 / 1e6, gpu.join(", "));
        if end.0 - warm.0 > ALLOWED_BYTES || warm.1.iter().zip(end.1).any(|(a, b)| b - a > ALLOWED_BYTES) {
            println!("FAIL leaks: {what} grew by more than {} MB", ALLOWED_BYTES >> 20);
            *bad += 1;
        }
    };

    // Init/destroy cycles.
    let mut warm = (0, Vec::new());
    for i in 0..INIT_CYCLES {
        let comms = init_comms(&devs)?;
        destroy_all(&comms)?;
        if i + 1 == WARM {
            warm = (rss_bytes(), gpu_used(&devs)?);
        }
    }
    let end = (rss_bytes(), gpu_used(&devs)?);
    report(&format!("{INIT_CYCLES} init/destroy cycles of {n} ranks"), (warm.0, &warm.1), (end.0, &end.1), &mut bad);

    // Register/deregister cycles on one communicator.
    let comms = init_comms(&devs)?;
    let bytes = 8usize << 20;
    let mut bufs: Vec<*mut c_void> = Vec::new();
    for d in &devs {
        let _g = CtxGuard::new(d).map_err(|e| e.msg)?;
        let mut p = std::ptr::null_mut();
        nccl(ncclMemAlloc(&mut p, bytes), "ncclMemAlloc")?;
        bufs.push(p);
    }
    let mut warm = (0, Vec::new());
    for i in 0..REG_CYCLES {
        let mut handles = vec![std::ptr::null_mut(); n];
        let mut wins: Vec<ncclWindow_t> = vec![std::ptr::null_mut(); n];
        nccl(ncclGroupStart(), "ncclGroupStart")?;
        for r in 0..n {
            nccl(ncclCommRegister(comms[r], bufs[r], bytes, &mut handles[r]), "ncclCommRegister")?;
            nccl(ncclCommWindowRegister(comms[r], bufs[r], bytes, &mut wins[r], 1), "ncclCommWindowRegister")?;
        }
        nccl(ncclGroupEnd(), "ncclGroupEnd (register)")?;
        for r in 0..n {
            nccl(ncclCommDeregister(comms[r], handles[r]), "ncclCommDeregister")?;
            nccl(ncclCommWindowDeregister(comms[r], wins[r]), "ncclCommWindowDeregister")?;
        }
        if i + 1 == WARM {
            warm = (rss_bytes(), gpu_used(&devs)?);
        }
    }
    let end = (rss_bytes(), gpu_used(&devs)?);
    report(&format!("{REG_CYCLES} register/deregister cycles"), (warm.0, &warm.1), (end.0, &end.1), &mut bad);
    for (d, p) in devs.iter().zip(bufs) {
        let _g = CtxGuard::new(d).map_err(|e| e.msg)?;
        nccl(ncclMemFree(p), "ncclMemFree")?;
    }
    destroy_all(&comms)?;
    Ok(bad)
}
