//! oxccl-gpu-check: verifies oxccl's AllReduce on this machine's GPUs against a host reference.
//!
//! One process, one thread driving every rank (as `nccl-tests -g N`), ranks spread round-robin
//! over the visible GPUs; several ranks may share a GPU (to test multi-rank paths on one GPU).
//! Every datatype and op (incl. PreMulSum with host and device scalars), in and out of place, odd
//! counts; optionally the same through CUDA graphs replayed with fresh data. Exit status 0 only if
//! every result is right.
//!
//! Usage: oxccl-gpu-check [--ranks N] [--max-count N] [--graph] [--quick] [--colls] [--split] [--proxy] [--hang] [--soak N [--seed S] [--concurrent]] [--leaks] [--chain]
//! (--colls: the other collectives and send/recv instead of AllReduce; see colls.rs;
//! --split: ncclCommSplit/Shrink/Revoke and collectives on the children; see split.rs;
//! --proxy: the PortChannel proxy FIFO under many concurrent GPU pushers; see proxy.rs;
//! --hang: a deliberately stuck send, its OXCCL_DEBUG_DUMP and a prompt ncclCommAbort; see hang.rs;
//! --soak N: N random operations of every kind, checked; see soak(); --seed S starts another sequence;
//! --concurrent: two communicators over the same GPUs, each soaked by its own thread at once;
//! --leaks: 200 init/destroy and 1,000 register/deregister cycles, memory flat; see leaks.rs;
//! --chain: 24 AllReduces per CUDA graph, fresh inputs on every replay, early launches; see chain.rs)

mod chain;
mod colls;
mod hang;
mod leaks;
mod proxy;
mod split;
mod values;

use std::ffi::c_void;
use std::time::Instant;

use oxccl::api::coll::ncclAllReduce;
use oxccl::api::comm::{ncclCommDestroy, ncclCommInitRank, ncclCommInitRankConfig, ncclGetUniqueId};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::redop::{ncclRedOpCreatePreMulSum, ncclRedOpDestroy};
use oxccl::api::types::{ncclComm_t, ncclUniqueId};
use oxccl::gpu::{self, cu, CtxGuard, Device};
use oxccl::types::DataType;
use oxccl::ResultCode;
use values::{avg_tolerance, decode_float, input_value, int_of, premul_scalar, reduce, CheckOp, Codec, Value};

struct Opts {
    ranks: usize,
    max_count: usize,
    graph: bool,
    quick: bool,
    colls: bool,
    split: bool,
    proxy: bool,
    hang: bool,
    /// --soak N: N random operations (every collective, send/recv, AllReduce with every op,
    /// some through CUDA graphs), each checked against the host reference.
    soak: usize,
    /// --seed S: the soak's random sequence (each seed gives another, reproducible one).
    seed: u64,
    /// --concurrent: the soak on two communicators over the same GPUs from two threads at once.
    concurrent: bool,
    /// --leaks: init/destroy and register/deregister cycles; memory must stay flat.
    leaks: bool,
    /// --chain: back-to-back AllReduces in one CUDA graph, each with its own fresh input (chain.rs).
    chain: bool,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts { ranks: 0, max_count: 1 << 22, graph: false, quick: false, colls: false, split: false, proxy: false, hang: false, soak: 0, seed: 0, concurrent: false, leaks: false, chain: false };
    let mut a = std::env::args().skip(1);
    while let Some(x) = a.next() {
        let mut val = || a.next().ok_or_else(|| format!("{x} needs a value"));
        match x.as_str() {
            "--ranks" => o.ranks = val()?.parse().map_err(|e| format!("--ranks: {e}"))?,
            "--max-count" => o.max_count = val()?.parse().map_err(|e| format!("--max-count: {e}"))?,
            "--graph" => o.graph = true,
            "--quick" => o.quick = true,
            "--colls" => o.colls = true,
            "--split" => o.split = true,
            "--proxy" => o.proxy = true,
            "--hang" => o.hang = true,
            "--leaks" => o.leaks = true,
            "--chain" => o.chain = true,
            "--soak" => o.soak = val()?.parse().map_err(|e| format!("--soak: {e}"))?,
            "--seed" => o.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--concurrent" => o.concurrent = true,
            "-h" | "--help" => {
                println!("usage: oxccl-gpu-check [--ranks N] [--max-count N] [--graph] [--quick] [--colls] [--split] [--proxy] [--hang] [--soak N [--seed S] [--concurrent]] [--leaks] [--chain]");
                std::process::exit(0)
            }
            _ => return Err(format!("unknown argument {x}")),
        }
    }
    Ok(o)
}

pub(crate) fn ck(rc: cu::CUresult, what: &str) -> Result<(), String> {
    gpu::check(rc, what).map_err(|e| e.msg)
}

pub(crate) fn nccl(rc: ResultCode, what: &str) -> Result<(), String> {
    if rc == ResultCode::Success {
        return Ok(());
    }
    // SAFETY: last_error_ptr returns a NUL-terminated string that lives for the process.
    let last = unsafe { std::ffi::CStr::from_ptr(oxccl::log::last_error_ptr()) };
    Err(format!("{what} failed: {rc:?} ({})", last.to_string_lossy()))
}

/// One communicator over `devs` (rank r on `devs[r]`), created in one group as nccl-tests -g does.
pub(crate) fn init_comms(devs: &[&'static Device]) -> Result<Vec<ncclComm_t>, String> {
    let n = devs.len();
    let mut id = ncclUniqueId { internal: [0; 128] };
    nccl(ncclGetUniqueId(&mut id), "ncclGetUniqueId")?;
    let mut comms = vec![std::ptr::null_mut(); n];
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for (r, d) in devs.iter().enumerate() {
        let _g = CtxGuard::new(d).map_err(|e| e.msg)?;
        nccl(ncclCommInitRank(&mut comms[r], n as i32, id, r as i32), "ncclCommInitRank")?;
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd (init)")?;
    Ok(comms)
}

// SAFETY: a Rank's handles (communicator, stream, device addresses) are usable from any thread;
// --concurrent shares each set of ranks with exactly one thread at a time.
unsafe impl Send for Rank {}
unsafe impl Sync for Rank {}

pub(crate) struct Rank {
    pub(crate) dev: &'static Device,
    pub(crate) comm: ncclComm_t,
    pub(crate) stream: cu::CUstream,
    pub(crate) send: cu::CUdeviceptr,
    pub(crate) recv: cu::CUdeviceptr,
    scalar: cu::CUdeviceptr,
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oxccl-gpu-check: {e}");
            std::process::exit(2)
        }
    };
    let ngpu = match gpu::ensure().and_then(|_| gpu::context::device_count()) {
        Ok(n) if n > 0 => n as usize,
        _ => {
            println!("oxccl-gpu-check: no CUDA GPU on this machine; nothing to check.");
            return;
        }
    };
    match run(&o, ngpu) {
        Ok(0) => println!("oxccl-gpu-check: all checks passed"),
        Ok(bad) => {
            println!("oxccl-gpu-check: {bad} check(s) FAILED");
            std::process::exit(1)
        }
        Err(e) => {
            eprintln!("oxccl-gpu-check: {e}");
            std::process::exit(1)
        }
    }
}

fn run(o: &Opts, ngpu: usize) -> Result<usize, String> {
    if o.hang {
        return hang::check(ngpu);
    }
    if o.leaks {
        return leaks::check(ngpu, o.ranks);
    }
    if o.proxy {
        let a = Device::get(0).map_err(|e| e.msg)?;
        let b = Device::get(if ngpu > 1 { 1 } else { 0 }).map_err(|e| e.msg)?;
        return Ok(proxy::check(a)? + proxy::check_copy_engine(a, b)?);
    }
    let nranks = if o.ranks == 0 { ngpu } else { o.ranks };
    if o.soak > 0 && o.concurrent {
        return concurrent_soak(o, nranks, ngpu);
    }
    let ranks = make_ranks(nranks, ngpu, o.max_count, None)?;
    println!("oxccl-gpu-check: {nranks} ranks on {ngpu} GPU(s), counts up to {}", o.max_count);

    if o.soak > 0 {
        let bad = soak(&ranks, o.soak, o.max_count, o.seed, "");
        for rk in &ranks {
            nccl(ncclCommDestroy(rk.comm), "ncclCommDestroy")?;
        }
        return Ok(bad);
    }
    if o.chain {
        let bad = chain::check(&ranks)?;
        for rk in &ranks {
            nccl(ncclCommDestroy(rk.comm), "ncclCommDestroy")?;
        }
        return Ok(bad);
    }
    if o.colls || o.split {
        let bad = if o.split {
            split::check_all(&ranks)? + split::check_nonblocking(&ranks)? + split::check_agreement(&ranks)?
        } else {
            colls::check_all(&ranks, o.max_count, o.quick)
        };
        for rk in &ranks {
            nccl(ncclCommDestroy(rk.comm), "ncclCommDestroy")?;
        }
        return Ok(bad);
    }
    let mut counts: Vec<usize> = vec![1, 2, 3, 5, 8, 13, 100, 257, 1000, 4099, 65537, 262147, 1048583, 4194319];
    if o.quick {
        counts = vec![1, 7, 1000, 65537, 1048583];
    }
    counts.retain(|&c| c <= o.max_count);
    let mut bad = 0;
    let t0 = Instant::now();
    for dt in DataType::ALL {
        let codec = Codec::new(dt);
        for op in CheckOp::ALL {
            for &count in &counts {
                for in_place in [false, true] {
                    let seed = (dt as u64) << 48 | (op as u64) << 40 | count as u64;
                    if let Err(e) = check_one(&ranks, &codec, op, count, in_place, seed, false) {
                        bad += 1;
                        println!("FAIL {} {} count {count} {}: {e}", dt.name(), op.name(), if in_place { "in-place" } else { "out-of-place" });
                    }
                }
            }
        }
        println!("  {:<7} done ({:.1} s)", dt.name(), t0.elapsed().as_secs_f64());
    }
    if o.graph {
        for dt in [DataType::Float32, DataType::Bfloat16, DataType::Int32] {
            let codec = Codec::new(dt);
            for op in [CheckOp::Sum, CheckOp::Avg, CheckOp::PreMulDevice] {
                for &count in &counts {
                    let seed = 0x6000 | (dt as u64) << 48 | (op as u64) << 40 | count as u64;
                    if let Err(e) = check_one(&ranks, &codec, op, count, false, seed, true) {
                        bad += 1;
                        println!("FAIL graph {} {} count {count}: {e}", dt.name(), op.name());
                    }
                }
            }
        }
        println!("  graphs done ({:.1} s)", t0.elapsed().as_secs_f64());
    }
    for rk in &ranks {
        nccl(ncclCommDestroy(rk.comm), "ncclCommDestroy")?;
    }
    Ok(bad)
}

/// Runs one AllReduce on every rank and compares every element with the reference. With `graph`,
/// captures it once per rank and replays the graph three times, each with fresh inputs.
/// The soak test: `iters` random operations, a quarter of them AllReduce (any op, one in eight
/// captured in a CUDA graph), the rest from colls::soak_one; prints every failure (the first 20)
/// and a summary; returns the number of failures.
fn soak(ranks: &[Rank], iters: usize, max_count: usize, seed: u64, label: &str) -> usize {
    // Seed 0 is the sequence of earlier versions; xorshift must never start at 0.
    let mut x: u64 = (0x005e_ed0f_0cc1_u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).max(1);
    let mut bad = 0;
    let t0 = Instant::now();
    for i in 0..iters {
        // xorshift64*: the same sequence every run, so a failure reproduces.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let (what, res) = if r.is_multiple_of(4) {
            let dt = DataType::ALL[((r >> 8) % 12) as usize];
            let op = CheckOp::ALL[((r >> 16) % 7) as usize];
            let bits = (usize::BITS - max_count.leading_zeros()) as u64;
            let count = ((1usize << ((r >> 24) % bits)) + ((r >> 40) % 4096) as usize).min(max_count);
            // Graph replays as the --graph check runs them (a host-immediate PreMulSum scalar
            // would be baked into the graph, which the replay-with-fresh-data check cannot use).
            let (in_place, graph) = ((r >> 56) & 1 == 1, (r >> 57).is_multiple_of(8) && op != CheckOp::PreMulHost);
            let what = format!("AllReduce {} {} count {count}{}{}", dt.name(), op.name(), if in_place { " in-place" } else { "" }, if graph { " graph" } else { "" });
            (what, check_one(ranks, &Codec::new(dt), op, count, in_place, r, graph))
        } else {
            colls::soak_one(ranks, r, max_count)
        };
        if let Err(e) = res {
            bad += 1;
            if bad <= 20 {
                println!("FAIL {label}soak #{i} {what}: {e}");
            }
        }
        if (i + 1) % 1000 == 0 {
            println!("  {label}soak {} of {iters} done ({bad} failed, {:.0} s)", i + 1, t0.elapsed().as_secs_f64());
        }
    }
    println!("  {label}soak: {iters} random operations, {bad} wrong ({:.0} s)", t0.elapsed().as_secs_f64());
    bad
}

/// `nranks` ranks over the GPUs (round-robin), one communicator created in one group, each rank
/// with its own stream and buffers for counts up to `max_count` of 8-byte elements; `max_ctas`
/// sets the communicator's maxCTAs.
fn make_ranks(nranks: usize, ngpu: usize, max_count: usize, max_ctas: Option<i32>) -> Result<Vec<Rank>, String> {
    let max_bytes = max_count * 8;
    let mut id = ncclUniqueId { internal: [0; 128] };
    nccl(ncclGetUniqueId(&mut id), "ncclGetUniqueId")?;
    let mut ranks = Vec::new();
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for r in 0..nranks {
        let dev = Device::get((r % ngpu) as i32).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let mut rk = Rank { dev, comm: std::ptr::null_mut(), stream: std::ptr::null_mut(), send: 0, recv: 0, scalar: 0 };
        let mut cfg = oxccl::config::config_initializer();
        if let Some(m) = max_ctas {
            cfg.maxCTAs = m;
        }
        nccl(ncclCommInitRankConfig(&mut rk.comm, nranks as i32, id, r as i32, &mut cfg), "ncclCommInitRankConfig")?;
        // SAFETY: out-pointers to fields; the device's context is current.
        unsafe {
            ck(cu::cuStreamCreate(&mut rk.stream, 1), "cuStreamCreate")?;
            ck(cu::cuMemAlloc_v2(&mut rk.send, max_bytes), "cuMemAlloc")?;
            ck(cu::cuMemAlloc_v2(&mut rk.recv, max_bytes), "cuMemAlloc")?;
            ck(cu::cuMemAlloc_v2(&mut rk.scalar, 8), "cuMemAlloc")?;
        }
        ranks.push(rk);
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd (init)")?;
    Ok(ranks)
}

/// Two communicators over the same GPUs, each soaked by its own host thread at the same time
/// (different seeds). Their kernels run concurrently on every GPU, in whatever order the two
/// threads happen to issue them, so each must be able to make progress while the other's blocks
/// occupy SMs: each communicator's maxCTAs is set to half the SMs (at most 32, NCCL's usual channel
/// count), as a user running communicators concurrently sets it (README).
fn concurrent_soak(o: &Opts, nranks: usize, ngpu: usize) -> Result<usize, String> {
    let sms = (0..ngpu).map(|d| Device::get(d as i32).map(|x| x.sm_count)).collect::<Result<Vec<_>, _>>().map_err(|e| e.msg)?;
    let cap = (sms.iter().copied().min().unwrap_or(2) / 2).clamp(1, 32);
    let a = make_ranks(nranks, ngpu, o.max_count, Some(cap))?;
    let b = make_ranks(nranks, ngpu, o.max_count, Some(cap))?;
    println!("oxccl-gpu-check: 2 communicators x {nranks} ranks on {ngpu} GPU(s), maxCTAs {cap} each, two threads, counts up to {}", o.max_count);
    let (bad_a, bad_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| soak(&a, o.soak, o.max_count, o.seed, "comm A "));
        let tb = s.spawn(|| soak(&b, o.soak, o.max_count, o.seed ^ 0xb, "comm B "));
        (ta.join(), tb.join())
    });
    let bad = bad_a.map_err(|_| "comm A's thread panicked".to_string())? + bad_b.map_err(|_| "comm B's thread panicked".to_string())?;
    for rk in a.iter().chain(&b) {
        nccl(ncclCommDestroy(rk.comm), "ncclCommDestroy")?;
    }
    Ok(bad)
}

fn check_one(ranks: &[Rank], codec: &Codec, op: CheckOp, count: usize, in_place: bool, seed: u64, graph: bool) -> Result<(), String> {
    let dt = codec.dt;
    let es = dt.size();
    let n = ranks.len();
    let mut ops = vec![op as i32; n];
    if matches!(op, CheckOp::PreMulHost | CheckOp::PreMulDevice) {
        for (r, rk) in ranks.iter().enumerate() {
            let mut s = vec![0u8; 8];
            if dt.is_float() {
                codec.encode_float(premul_scalar(r), &mut s);
            } else {
                codec.encode_int(premul_scalar(r) as i128, &mut s);
            }
            let mut raw: i32 = 0;
            if op == CheckOp::PreMulHost {
                nccl(ncclRedOpCreatePreMulSum(&mut raw, s.as_mut_ptr().cast(), dt as i32, 1, rk.comm), "ncclRedOpCreatePreMulSum")?;
            } else {
                let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
                // SAFETY: 8-byte device buffer, s has 8 bytes; synchronised before s is dropped.
                unsafe {
                    ck(cu::cuMemcpyHtoDAsync_v2(rk.scalar, s.as_ptr().cast(), 8, rk.stream), "cuMemcpyHtoDAsync")?;
                    ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
                }
                nccl(ncclRedOpCreatePreMulSum(&mut raw, rk.scalar as *mut c_void, dt as i32, 0, rk.comm), "ncclRedOpCreatePreMulSum")?;
            }
            ops[r] = raw;
        }
    }
    let rounds = if graph { 3 } else { 1 };
    let mut graphs: Vec<cu::CUgraphExec> = Vec::new();
    let mut result = Ok(());
    for round in 0..rounds {
        let seed = seed ^ (round as u64) << 32;
        // Inputs per rank, and the poisoned output.
        let mut inputs: Vec<Vec<Value>> = Vec::with_capacity(n);
        // Host work runs one thread per rank (each with its own Codec, which caches).
        let encoded = colls::per_rank(n, count, |r| {
            let codec = Codec::new(dt);
            let vals: Vec<Value> = (0..count).map(|i| input_value(dt, op, r, i, seed)).collect();
            let mut bytes = vec![0u8; count * es];
            for (i, v) in vals.iter().enumerate() {
                match v {
                    Value::F(f) => codec.encode_float(*f, &mut bytes[i * es..]),
                    Value::I(x) => codec.encode_int(*x, &mut bytes[i * es..]),
                }
            }
            (vals, bytes)
        });
        for (rk, (vals, bytes)) in ranks.iter().zip(encoded) {
            let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
            let dst = if in_place { rk.recv } else { rk.send };
            // Stream-ordered uploads: the rank's stream does not synchronise with the legacy stream,
            // and a copy from pageable memory may return before its DMA lands.
            // SAFETY: buffers hold max_count * 8 >= count * es bytes; `bytes` outlives the
            // synchronisation below.
            unsafe {
                if !in_place {
                    ck(cu::cuMemsetD8Async(rk.recv, 0xa5, count * es, rk.stream), "cuMemsetD8Async")?;
                }
                ck(cu::cuMemcpyHtoDAsync_v2(dst, bytes.as_ptr().cast(), bytes.len(), rk.stream), "cuMemcpyHtoDAsync")?;
                ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
            }
            inputs.push(vals);
        }
        if !graph {
            launch(ranks, &ops, count, dt, in_place)?;
        } else {
            if round == 0 {
                graphs = capture(ranks, || launch(ranks, &ops, count, dt, in_place))?;
            }
            for (rk, g) in ranks.iter().zip(&graphs) {
                let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
                // SAFETY: instantiated graph, valid stream.
                unsafe { ck(cu::cuGraphLaunch(*g, rk.stream), "cuGraphLaunch")? };
            }
        }
        const PARTS: usize = 8;
        let expect: Vec<Value> = colls::per_rank(PARTS, count, |t| {
            (count * t / PARTS..count * (t + 1) / PARTS).map(|i| reduce(dt, op, &inputs.iter().map(|v| v[i]).collect::<Vec<_>>())).collect::<Vec<_>>()
        })
        .concat();
        let mut outs = Vec::with_capacity(n);
        for rk in ranks {
            let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
            let mut out = vec![0u8; count * es];
            // SAFETY: synchronises the rank's stream, then copies count elements back.
            unsafe {
                ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
                ck(cu::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), rk.recv, out.len()), "cuMemcpyDtoH")?;
            }
            outs.push(out);
        }
        let verdicts = colls::per_rank(n, count, |r| compare(&Codec::new(dt), op, n, &expect, &outs[r]));
        if let Some((r, Err(e))) = verdicts.into_iter().enumerate().find(|(_, v)| v.is_err()) {
            result = Err(format!("rank {r} round {round}: {e}"));
        }
        if result.is_err() {
            break;
        }
    }
    for (rk, g) in ranks.iter().zip(&graphs) {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: destroys an instantiated graph that is no longer running (streams synchronised).
        unsafe { cu::cuGraphExecDestroy(*g) };
    }
    if matches!(op, CheckOp::PreMulHost | CheckOp::PreMulDevice) {
        for (rk, raw) in ranks.iter().zip(ops) {
            nccl(ncclRedOpDestroy(raw, rk.comm), "ncclRedOpDestroy")?;
        }
    }
    result
}

/// Captures what `issue` enqueues on every rank's stream (thread-local capture) and instantiates
/// one graph per rank. Every capture is ended before any graph is instantiated (instantiation is
/// not allowed while this thread still captures another stream), even after a failed `issue`, so
/// no stream is left capturing for the checks that follow.
pub(crate) fn capture(ranks: &[Rank], issue: impl FnOnce() -> Result<(), String>) -> Result<Vec<cu::CUgraphExec>, String> {
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: valid stream of the current context.
        unsafe { ck(cu::cuStreamBeginCapture_v2(rk.stream, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")? };
    }
    let issued = issue();
    let mut captured = Vec::with_capacity(ranks.len());
    let mut ended = Ok(());
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut g: cu::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above on this stream.
        ended = ended.and(ck(unsafe { cu::cuStreamEndCapture(rk.stream, &mut g) }, "cuStreamEndCapture"));
        captured.push(g);
    }
    let mut execs = Vec::with_capacity(ranks.len());
    for (rk, g) in ranks.iter().zip(captured) {
        if g.is_null() {
            continue;
        }
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut e: cu::CUgraphExec = std::ptr::null_mut();
        // SAFETY: instantiates a complete captured graph, then drops the template.
        let r = unsafe { ck(cu::cuGraphInstantiateWithFlags(&mut e, g, 0), "cuGraphInstantiate") };
        unsafe { cu::cuGraphDestroy(g) };
        match r {
            Ok(()) => execs.push(e),
            Err(err) => ended = ended.and(Err(err)),
        }
    }
    if let Err(e) = issued.and(ended) {
        for (rk, x) in ranks.iter().zip(execs) {
            if let Ok(_g) = CtxGuard::new(rk.dev) {
                // SAFETY: instantiated above, never launched.
                unsafe { cu::cuGraphExecDestroy(x) };
            }
        }
        return Err(e);
    }
    Ok(execs)
}

fn launch(ranks: &[Rank], ops: &[i32], count: usize, dt: DataType, in_place: bool) -> Result<(), String> {
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    let mut first = Ok(());
    for (rk, op) in ranks.iter().zip(ops) {
        let send = if in_place { rk.recv } else { rk.send };
        let r = nccl(
            ncclAllReduce(send as *const c_void, rk.recv as *mut c_void, count, dt as i32, *op, rk.comm, rk.stream.cast()),
            "ncclAllReduce",
        );
        first = first.and(r);
    }
    // Always close the group, so a failed call cannot leave this thread inside it.
    let end = nccl(ncclGroupEnd(), "ncclGroupEnd");
    first.and(end)
}

fn compare(codec: &Codec, op: CheckOp, n: usize, expect: &[Value], out: &[u8]) -> Result<(), String> {
    let dt = codec.dt;
    let es = dt.size();
    let mut wrong = 0usize;
    let mut first = None;
    for (i, e) in expect.iter().enumerate() {
        let got = &out[i * es..(i + 1) * es];
        let ok = match e {
            Value::F(f) => {
                let g = decode_float(dt, got);
                if op == CheckOp::Avg {
                    (g - f).abs() <= avg_tolerance(dt, n, *f)
                } else {
                    let mut want = [0u8; 8];
                    codec.encode_float(*f, &mut want);
                    got == &want[..es]
                }
            }
            Value::I(x) => int_of(dt, got) == *x,
        };
        if !ok {
            wrong += 1;
            if first.is_none() {
                let shown = match e {
                    Value::F(_) => format!("{}", decode_float(dt, got)),
                    Value::I(_) => format!("{}", int_of(dt, got)),
                };
                first = Some(format!("element {i}: got {shown}, expected {e:?}"));
            }
        }
    }
    match first {
        None => Ok(()),
        Some(f) => Err(format!("{wrong} of {} wrong; first {f}", expect.len())),
    }
}
