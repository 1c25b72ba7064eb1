//! oxccl-bench: AllReduce across every GPU of this machine, one communicator per GPU driven from
//! one thread (as `nccl-tests -g N` does). Checks every result, then prints time and bus bandwidth
//! per size. Without a GPU it says so and exits successfully.
//!
//! Usage: oxccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--dtype f32|bf16]

use std::ffi::c_void;
use std::time::Instant;

use oxccl::api::coll::ncclAllReduce;
use oxccl::api::comm::{ncclCommDestroy, ncclCommInitAll};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::types::ncclComm_t;
use oxccl::gpu::{self, cu, CtxGuard, Device};
use oxccl::ResultCode;

struct Opts {
    min_bytes: usize,
    max_bytes: usize,
    iters: usize,
    bf16: bool,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts { min_bytes: 8, max_bytes: 256 << 20, iters: 20, bf16: false };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--min-bytes" => o.min_bytes = parse_size(&val()?)?,
            "--max-bytes" => o.max_bytes = parse_size(&val()?)?,
            "--iters" => o.iters = val()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--dtype" => o.bf16 = match val()?.as_str() {
                "f32" | "float" => false,
                "bf16" => true,
                d => return Err(format!("unknown dtype {d}")),
            },
            "-h" | "--help" => {
                println!("usage: oxccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--dtype f32|bf16]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.chars().last() {
        Some('K') | Some('k') => (&s[..s.len() - 1], 1 << 10),
        Some('M') | Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().map(|n| n * mul).map_err(|e| format!("bad size {s}: {e}"))
}

fn ck(rc: cu::CUresult, what: &str) -> Result<(), String> {
    gpu::check(rc, what).map_err(|e| e.msg)
}

fn nccl(rc: ResultCode, what: &str) -> Result<(), String> {
    if rc == ResultCode::Success {
        Ok(())
    } else {
        // SAFETY: last_error_ptr returns a NUL-terminated string that lives for the process.
        let last = unsafe { std::ffi::CStr::from_ptr(oxccl::log::last_error_ptr()) };
        Err(format!("{what} failed: {rc:?} ({})", last.to_string_lossy()))
    }
}

fn main() {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oxccl-bench: {e}");
            std::process::exit(2);
        }
    };
    let ndev = match gpu::ensure().and_then(|_| gpu::context::device_count()) {
        Ok(n) if n > 0 => n,
        Ok(_) => {
            println!("oxccl-bench: no CUDA GPU on this machine; nothing to benchmark.");
            return;
        }
        Err(e) => {
            println!("oxccl-bench: no usable CUDA driver on this machine ({}); nothing to benchmark.", e.msg);
            return;
        }
    };
    if let Err(e) = run(&opts, ndev) {
        eprintln!("oxccl-bench: {e}");
        std::process::exit(1);
    }
}

struct Rank {
    dev: &'static Device,
    stream: cu::CUstream,
    send: cu::CUdeviceptr,
    recv: cu::CUdeviceptr,
    start: cu::CUevent,
    stop: cu::CUevent,
}

fn run(o: &Opts, ndev: i32) -> Result<(), String> {
    let n = ndev as usize;
    let es: usize = if o.bf16 { 2 } else { 4 };
    let max_count = (o.max_bytes / es).max(1);
    let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); n];
    nccl(ncclCommInitAll(comms.as_mut_ptr(), ndev, std::ptr::null()), "ncclCommInitAll")?;
    let mut ranks = Vec::with_capacity(n);
    for d in 0..ndev {
        let dev = Device::get(d).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let mut r = Rank { dev, stream: std::ptr::null_mut(), send: 0, recv: 0, start: std::ptr::null_mut(), stop: std::ptr::null_mut() };
        unsafe {
            ck(cu::cuStreamCreate(&mut r.stream, 1), "cuStreamCreate")?;
            ck(cu::cuMemAlloc_v2(&mut r.send, max_count * es), "cuMemAlloc")?;
            ck(cu::cuMemAlloc_v2(&mut r.recv, max_count * es), "cuMemAlloc")?;
            ck(cu::cuEventCreate(&mut r.start, 0), "cuEventCreate")?;
            ck(cu::cuEventCreate(&mut r.stop, 0), "cuEventCreate")?;
        }
        ranks.push(r);
    }
    let dtype = if o.bf16 { 9 } else { 7 };
    println!("# oxccl {} AllReduce sum, {} GPU(s), one thread, {}", oxccl::OXCCL_VERSION, n, if o.bf16 { "bf16" } else { "float" });
    println!("# {:>12} {:>12} {:>10} {:>10} {:>10} {:>6}", "size(B)", "count", "time(us)", "algbw", "busbw", "check");
    let mut bytes = o.min_bytes.max(es);
    let mut failures = 0;
    while bytes <= o.max_bytes {
        let count = bytes / es;
        // Rank r contributes r+1 everywhere: the sum is n(n+1)/2, exact in float and bf16 for n <= 16.
        for (r, rk) in ranks.iter().enumerate() {
            let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
            let v = (r + 1) as f32;
            // On the rank's own stream: it does not synchronise with the legacy stream.
            unsafe {
                if o.bf16 {
                    let bits = (v.to_bits() >> 16) as u16;
                    ck(cu::cuMemsetD16Async(rk.send, bits, count, rk.stream), "cuMemsetD16Async")?;
                } else {
                    ck(cu::cuMemsetD32Async(rk.send, v.to_bits(), count, rk.stream), "cuMemsetD32Async")?;
                }
                ck(cu::cuMemsetD8Async(rk.recv, 0xff, count * es, rk.stream), "cuMemsetD8Async")?;
            }
        }
        let all = |ranks: &[Rank]| -> Result<(), String> {
            nccl(ncclGroupStart(), "ncclGroupStart")?;
            for (r, rk) in ranks.iter().enumerate() {
                nccl(
                    ncclAllReduce(rk.send as *const c_void, rk.recv as *mut c_void, count, dtype, 0, comms[r], rk.stream.cast()),
                    "ncclAllReduce",
                )?;
            }
            nccl(ncclGroupEnd(), "ncclGroupEnd")
        };
        all(&ranks)?;
        let ok = check(&ranks, count, es, n)?;
        if !ok {
            failures += 1;
        }
        for _ in 0..3 {
            all(&ranks)?;
        }
        for rk in &ranks {
            let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
            unsafe { ck(cu::cuEventRecord(rk.start, rk.stream), "cuEventRecord")? };
        }
        let t0 = Instant::now();
        for _ in 0..o.iters {
            all(&ranks)?;
        }
        let mut us = 0.0f64;
        for rk in &ranks {
            let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
            unsafe {
                ck(cu::cuEventRecord(rk.stop, rk.stream), "cuEventRecord")?;
                ck(cu::cuEventSynchronize(rk.stop), "cuEventSynchronize")?;
                let mut ms = 0.0f32;
                ck(cu::cuEventElapsedTime_v2(&mut ms, rk.start, rk.stop), "cuEventElapsedTime")?;
                us = us.max(ms as f64 * 1e3 / o.iters as f64);
            }
        }
        let _ = t0;
        let algbw = bytes as f64 / us / 1e3;
        let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
        println!(
            "  {:>12} {:>12} {:>10.2} {:>10.2} {:>10.2} {:>6}",
            bytes,
            count,
            us,
            algbw,
            busbw,
            if ok { "ok" } else { "WRONG" }
        );
        bytes *= 4;
    }
    for c in comms {
        nccl(ncclCommDestroy(c), "ncclCommDestroy")?;
    }
    if failures > 0 {
        return Err(format!("{failures} size(s) gave wrong results"));
    }
    Ok(())
}

fn check(ranks: &[Rank], count: usize, es: usize, n: usize) -> Result<bool, String> {
    let expect = (n * (n + 1) / 2) as f32;
    let mut host = vec![0u8; count * es];
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        unsafe {
            ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
            ck(cu::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), rk.recv, count * es), "cuMemcpyDtoH")?;
        }
        let good = host.chunks_exact(es).all(|c| {
            let v = if es == 2 {
                f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)
            } else {
                f32::from_le_bytes([c[0], c[1], c[2], c[3]])
            };
            v == expect
        });
        if !good {
            return Ok(false);
        }
    }
    Ok(true)
}
