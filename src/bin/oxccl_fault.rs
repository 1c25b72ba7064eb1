//! oxccl-fault: fault injection. Kills one rank (SIGKILL) of a running job and measures how long the
//! survivors take to see ncclRemoteError / ncclSystemError and how long ncclCommAbort then takes.
//!
//! The parent process creates the unique id and starts one child process per rank (ranks spread
//! over the visible GPUs); a chosen victim kills itself at a chosen point of a scenario:
//!   init       - while the communicator is being created (0-1.5 s after start; a victim that
//!                dies before registering is caught by the bootstrap timeout, set to bound/3)
//!   allreduce  - in a loop of small AllReduces (4 KiB)
//!   bigreduce  - in a loop of large AllReduces (16 MiB; across hosts, the proxy combines them as
//!                they arrive)
//!   allgather  - in a loop of large AllGathers (64 MiB per rank)
//!   sendrecv   - in a loop of ring send/recv groups (1 MiB)
//!   graph      - in a loop of CUDA graph replays of an AllReduce (1 MiB)
//!   stop       - the victim is SIGSTOPped in an AllReduce loop instead: it hangs with its
//!                sockets open, so only the heartbeats (OXCCL_HEARTBEAT_TIMEOUT, set to 5 s
//!                here) can tell; it is SIGKILLed once the survivors are done
//! Survivors poll their stream and ncclCommGetAsyncError as a framework's watchdog would, then
//! abort. A case passes when every survivor saw an error and aborted within the bound; a survivor
//! still running at the bound is a hang: it is killed and the case fails.
//!
//! --ranks-per-host P simulates hosts: rank r gets NCCL_HOSTID=oxccl-fault-host-(r / P), so ranks
//! of different "hosts" talk over oxccl's network links (scripts/hostsim.sh does the same for
//! MPI jobs).
//!
//! Usage: oxccl-fault [--ranks 2,4] [--scenarios init,allreduce,...] [--bound-secs 30] [--seed N]
//!                    [--ranks-per-host P]
//! Exit status 0 only if every case passed. Prints a Markdown table of the measurements.

use std::ffi::c_void;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oxccl::api::coll::{ncclAllGather, ncclAllReduce};
use oxccl::api::comm::{ncclCommAbort, ncclCommGetAsyncError, ncclCommInitRank, ncclGetUniqueId};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::p2p::{ncclRecv, ncclSend};
use oxccl::api::types::{ncclComm_t, ncclUniqueId};
use oxccl::gpu::{self, cu, CtxGuard, Device, DeviceBuffer};
use oxccl::types::DataType;
use oxccl::ResultCode;

const SCENARIOS: [&str; 7] = ["init", "allreduce", "bigreduce", "allgather", "sendrecv", "graph", "stop"];

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC is system-wide, so parent and children agree.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = if args.first().map(String::as_str) == Some("--child") {
        match child(&args[1..]) {
            Ok(()) => 0,
            Err(e) => {
                println!("CHILD-ERROR {e}");
                3
            }
        }
    } else {
        match parent(&args) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("oxccl-fault: {e}");
                2
            }
        }
    };
    std::process::exit(code);
}

// ---- parent ----------------------------------------------------------------------------------

struct Opts {
    ranks: Vec<usize>,
    scenarios: Vec<String>,
    bound: Duration,
    seed: u64,
    per_host: Option<usize>,
}

fn opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { ranks: vec![2, 4], scenarios: SCENARIOS.iter().map(|s| s.to_string()).collect(), bound: Duration::from_secs(30), seed: 1, per_host: None };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--ranks" => o.ranks = val()?.split(',').map(|x| x.trim().parse().map_err(|e| format!("--ranks: {e}"))).collect::<Result<_, _>>()?,
            "--scenarios" => o.scenarios = val()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--bound-secs" => o.bound = Duration::from_secs(val()?.parse().map_err(|e| format!("--bound-secs: {e}"))?),
            "--seed" => o.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--ranks-per-host" => o.per_host = Some(val()?.parse().ok().filter(|&p: &usize| p > 0).ok_or("--ranks-per-host: a positive integer")?),
            "-h" | "--help" => {
                println!("usage: oxccl-fault [--ranks 2,4] [--scenarios {}] [--bound-secs 30] [--seed N] [--ranks-per-host P]", SCENARIOS.join(","));
                std::process::exit(0)
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if let Some(s) = o.scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        return Err(format!("unknown scenario {s}"));
    }
    if o.ranks.iter().any(|&n| n < 2) {
        return Err("--ranks: every job needs at least 2 ranks".into());
    }
    Ok(o)
}

/// A small deterministic generator (xorshift), so a seed reproduces the victims and kill points.
struct Rng(u64);
impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

struct Outcome {
    rank: usize,
    /// Survivor: error code seen, ms from the kill to the error, ms the abort took.
    result: Option<(i32, f64, f64)>,
    note: String,
}

fn parent(args: &[String]) -> Result<bool, String> {
    let o = opts(args)?;
    match gpu::ensure().and_then(|_| gpu::context::device_count()) {
        Ok(n) if n > 0 => {}
        _ => {
            println!("oxccl-fault: no CUDA GPU on this machine; nothing to inject faults into.");
            return Ok(true);
        }
    }
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let mut rng = Rng(o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut all_ok = true;
    println!("| scenario | ranks | victim | kill after | survivors' time to error (ms) | abort (ms) | result |");
    println!("|---|---:|---:|---:|---|---|---|");
    for &n in &o.ranks {
        for sc in &o.scenarios {
            let victim = rng.next(n as u64) as usize;
            // Init: anywhere from before the victim reaches the bootstrap to the end of setup.
            let kill_ms = if sc == "init" { rng.next(1500) } else { 200 + rng.next(800) };
            let (ok, line) = run_case(&exe, n, sc, victim, kill_ms, o.bound, o.per_host)?;
            all_ok &= ok;
            println!("{line}");
        }
    }
    Ok(all_ok)
}

fn run_case(exe: &std::path::Path, n: usize, sc: &str, victim: usize, kill_ms: u64, bound: Duration, per_host: Option<usize>) -> Result<(bool, String), String> {
    let mut id = ncclUniqueId { internal: [0; 128] };
    if ncclGetUniqueId(&mut id) != ResultCode::Success {
        return Err("ncclGetUniqueId failed".into());
    }
    let hex: String = id.internal.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    let mut kids: Vec<Child> = Vec::new();
    for r in 0..n {
        let mut c = Command::new(exe);
        if let Some(p) = per_host {
            c.env("NCCL_HOSTID", format!("oxccl-fault-host-{}", r / p));
        }
        let c = c
            .args(["--child", &r.to_string(), &n.to_string(), sc, &hex, &victim.to_string(), &kill_ms.to_string()])
            // A rank that dies before it registers is only noticed by the others' bootstrap
            // timeout (default 300 s): shorten it so init cases end well within the bound.
            .env("OXCCL_BOOTSTRAP_TIMEOUT", format!("{}", (bound.as_secs() / 3).max(5)))
            .env("OXCCL_HEARTBEAT_TIMEOUT", "5")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting rank {r}: {e}"))?;
        kids.push(c);
    }
    // Each child's stdout on its own thread: lines tagged with the time they arrived.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
    for (r, k) in kids.iter_mut().enumerate() {
        let out = k.stdout.take();
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Some(out) = out {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send((r, line));
                }
            }
        });
    }
    drop(tx);
    let t0 = Instant::now();
    let mut kill_ns: Option<u64> = None;
    let mut outcomes: Vec<Outcome> = (0..n).map(|rank| Outcome { rank, result: None, note: String::new() }).collect();
    let mut done = vec![false; n];
    let mut hung = false;
    let mut lines: Vec<(usize, String)> = Vec::new();
    loop {
        lines.extend(rx.try_iter());
        for (r, k) in kids.iter_mut().enumerate() {
            if !done[r] {
                if let Ok(Some(_)) = k.try_wait() {
                    done[r] = true;
                }
            }
        }
        if sc == "stop" && (0..n).filter(|&r| r != victim).all(|r| done[r]) && !done[victim] {
            // The stopped victim never exits by itself.
            let _ = kids[victim].kill();
            let _ = kids[victim].wait();
            done[victim] = true;
        }
        if done.iter().all(|&d| d) {
            std::thread::sleep(Duration::from_millis(50)); // the readers' last lines
            lines.extend(rx.try_iter());
            break;
        }
        if t0.elapsed() > bound + Duration::from_millis(kill_ms) {
            hung = true;
            for (r, k) in kids.iter_mut().enumerate() {
                if !done[r] {
                    let _ = k.kill();
                    let _ = k.wait();
                    outcomes[r].note.push_str("still running at the bound (hang); ");
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // The victim's KILL line first: survivors' times are measured from it.
    for (_, line) in &lines {
        if let Some(v) = line.strip_prefix("KILL ") {
            kill_ns = v.trim().parse().ok();
        }
    }
    for (r, line) in &lines {
        if let Some(rest) = line.strip_prefix("RESULT ") {
            let v: Vec<f64> = rest.split_whitespace().filter_map(|x| x.split('=').nth(1)).filter_map(|x| x.parse().ok()).collect();
            if let [code, err_ns, abort_ms] = v[..] {
                let since = kill_ns.map_or(f64::NAN, |k| (err_ns - k as f64) / 1e6);
                outcomes[*r].result = Some((code as i32, since, abort_ms));
            }
        } else if !line.starts_with("KILL ") {
            outcomes[*r].note.push_str(&format!("{line}; "));
        }
    }
    let survivors: Vec<&Outcome> = outcomes.iter().filter(|o| o.rank != victim).collect();
    let errs: Vec<String> = survivors.iter().map(|o| o.result.map_or("-".into(), |(_, t, _)| format!("{t:.0}"))).collect();
    let aborts: Vec<String> = survivors.iter().map(|o| o.result.map_or("-".into(), |(_, _, a)| format!("{a:.0}"))).collect();
    let codes_ok = survivors.iter().all(|o| {
        o.result.is_some_and(|(c, t, _)| (c == ResultCode::RemoteError as i32 || c == ResultCode::SystemError as i32) && t < bound.as_secs_f64() * 1e3)
    });
    let ok = !hung && kill_ns.is_some() && codes_ok;
    let mut verdict = if ok { "PASS".to_string() } else { "FAIL".to_string() };
    if kill_ns.is_none() {
        verdict.push_str(" (the victim never reached its kill point)");
    }
    for o in &outcomes {
        if !o.note.is_empty() {
            verdict.push_str(&format!("; rank {}: {}", o.rank, o.note.trim_end_matches("; ")));
        }
        if let Some((c, _, _)) = o.result {
            if c != ResultCode::RemoteError as i32 && c != ResultCode::SystemError as i32 {
                verdict.push_str(&format!("; rank {} saw code {c}", o.rank));
            }
        }
    }
    let line = format!("| {sc} | {n} | {victim} | {kill_ms} ms | {} | {} | {verdict} |", errs.join(", "), aborts.join(", "));
    Ok((ok, line))
}

// ---- child -----------------------------------------------------------------------------------

fn ck(rc: cu::CUresult, what: &str) -> Result<(), String> {
    gpu::check(rc, what).map_err(|e| e.msg)
}

fn child(a: &[String]) -> Result<(), String> {
    let [rank, n, sc, hex, victim, kill_ms] = a else { return Err("child arguments".into()) };
    let p = |s: &str| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
    let (rank, n, victim, kill_ms) = (p(rank)?, p(n)?, p(victim)?, p(kill_ms)? as u64);
    let mut id = ncclUniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        let byte = hex.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("bad unique id")?;
        *b = byte as _;
    }
    gpu::ensure().map_err(|e| e.msg)?;
    let ngpu = gpu::context::device_count().map_err(|e| e.msg)?.max(1) as usize;
    let dev = Device::get((rank % ngpu) as i32).map_err(|e| e.msg)?;
    let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
    let is_victim = rank == victim;
    let stop_instead = sc == "stop";
    let die = move || -> ! {
        println!("KILL {}", now_ns());
        if stop_instead {
            // SAFETY: plain libc calls. SIGSTOP freezes every thread with the sockets open;
            // the parent SIGKILLs the process afterwards.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::kill(libc::getpid(), libc::SIGSTOP);
            }
        }
        // SAFETY: plain libc calls; the process ends here.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort()
    };
    if is_victim && sc == "init" {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(kill_ms));
            die()
        });
    }
    let mut comm: ncclComm_t = std::ptr::null_mut();
    let rc = ncclCommInitRank(&mut comm, n as i32, id, rank as i32);
    if rc != ResultCode::Success {
        // Init itself saw the failure: report it as the error (nothing to abort if no comm).
        let t = now_ns();
        let t1 = Instant::now();
        if !comm.is_null() {
            ncclCommAbort(comm);
        }
        println!("RESULT code={} err_ns={t} abort_ms={:.3}", rc as i32, t1.elapsed().as_secs_f64() * 1e3);
        return Ok(());
    }
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the context is current.
    unsafe { ck(cu::cuStreamCreate(&mut stream, 1), "cuStreamCreate")? };
    let (count, bytes_out) = match sc.as_str() {
        "allgather" => (16usize << 20, (16usize << 20) * 4 * n),
        "sendrecv" | "graph" => (256 << 10, 1 << 20),
        "bigreduce" => (4 << 20, 16 << 20),
        _ => (1024, 4096),
    };
    let send = DeviceBuffer::zeroed(dev, count * 4).map_err(|e| e.msg)?;
    let recv = DeviceBuffer::zeroed(dev, bytes_out.max(count * 4)).map_err(|e| e.msg)?;
    let f32 = DataType::Float32 as i32;
    let (sp, rp) = (send.ptr as *const c_void, recv.ptr as *mut c_void);
    let s = stream.cast();
    let enqueue = |sc: &str| -> ResultCode {
        match sc {
            "allgather" => ncclAllGather(sp, rp, count, f32, comm, s),
            "sendrecv" => {
                ncclGroupStart();
                ncclSend(sp, count, f32, ((rank + 1) % n) as i32, comm, s);
                ncclRecv(rp, count, f32, ((rank + n - 1) % n) as i32, comm, s);
                ncclGroupEnd()
            }
            _ => ncclAllReduce(sp, rp, count, f32, 0, comm, s),
        }
    };
    let mut graph: Option<cu::CUgraphExec> = None;
    if sc == "graph" {
        let mut g: cu::CUgraph = std::ptr::null_mut();
        let mut e: cu::CUgraphExec = std::ptr::null_mut();
        // SAFETY: capture on our stream of one enqueue, then instantiate; all out-pointers local.
        unsafe {
            ck(cu::cuStreamBeginCapture_v2(stream, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")?;
            let rc = enqueue("allreduce");
            ck(cu::cuStreamEndCapture(stream, &mut g), "cuStreamEndCapture")?;
            if rc != ResultCode::Success {
                return Err(format!("capturing the AllReduce: {rc:?}"));
            }
            ck(cu::cuGraphInstantiateWithFlags(&mut e, g, 0), "cuGraphInstantiate")?;
            cu::cuGraphDestroy(g);
        }
        graph = Some(e);
    }
    let loop_start = Instant::now();
    loop {
        if is_victim && loop_start.elapsed() >= Duration::from_millis(kill_ms) {
            die();
        }
        let rc = match graph {
            // SAFETY: an instantiated graph and our stream.
            Some(e) => {
                if unsafe { cu::cuGraphLaunch(e, stream) } == cu::CUresult::CUDA_SUCCESS {
                    ResultCode::Success
                } else {
                    ResultCode::UnhandledCudaError
                }
            }
            None => enqueue(sc),
        };
        // Poll as a watchdog does: the stream, and the communicator's asynchronous error.
        let mut err = rc;
        while err == ResultCode::Success {
            let mut st = ResultCode::Success;
            if ncclCommGetAsyncError(comm, &mut st) != ResultCode::Success {
                err = ResultCode::InternalError;
                break;
            }
            if st != ResultCode::Success && st != ResultCode::InProgress {
                err = st;
                break;
            }
            // SAFETY: our stream.
            match unsafe { cu::cuStreamQuery(stream) } {
                cu::CUresult::CUDA_SUCCESS => break,
                cu::CUresult::CUDA_ERROR_NOT_READY => std::thread::sleep(Duration::from_micros(100)),
                _ => err = ResultCode::UnhandledCudaError,
            }
        }
        if err != ResultCode::Success {
            let t = now_ns();
            let t1 = Instant::now();
            ncclCommAbort(comm);
            println!("RESULT code={} err_ns={t} abort_ms={:.3}", err as i32, t1.elapsed().as_secs_f64() * 1e3);
            return Ok(());
        }
    }
}
