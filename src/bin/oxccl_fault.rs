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
//! Two scenarios abort instead of killing, each run in every variant (a row each); a child says
//! `CHECK fail ...` for anything wrong and `DONE` at its end, and a case passes when every rank
//! got there within the bound with no failed check:
//!   abort-pending   - after a warm-up AllReduce, one rank posts an operation its peers never
//!                     join (a 64 MiB AllReduce from rank 0, or a 64 MiB ncclRecv by rank 1 from
//!                     rank 0), eagerly or as a CUDA graph replay, on a blocking or nonblocking
//!                     communicator; the idle ranks abort first (after 300 ms), the poster after
//!                     800 ms. Every rank's stream and context must then synchronise without error
//!                     (a graph is replayed once more after the abort), and a new communicator on
//!                     the same GPUs must AllReduce correctly. Variants: {allreduce,recv} x
//!                     {eager,graph} x {blocking,nonblocking}.
//!   abort-idle-peer - PyTorch's test_abort_pg: after a warm-up AllReduce, rank 0 posts an
//!                     AllReduce nobody joins and aborts. The others, with nothing pending on rank
//!                     0, must keep ncclCommGetAsyncError == ncclSuccess (3 s), exchange
//!                     send/recv between ranks 1 and 2 when there are 3 ranks or more, then see a
//!                     new AllReduce (which needs rank 0) fail with ncclRemoteError within 10 s,
//!                     and tear down within 5 s: ncclCommDestroy, or ncclCommFinalize and
//!                     ncclCommDestroy.
//!                     Variants: destroy, finalize.
//!   abort-several   - PyTorch aborting its process groups one after another: every rank holds
//!                     two communicators, A (made first) and B; rank 0 posts an AllReduce on B
//!                     that nobody joins (1 MiB: a kernel, not a copy-engine handshake) and then
//!                     aborts A and then B. ncclCommAbort(A) must not wait for B's kernel (a free
//!                     synchronises the device; it hung for good), both aborts within 15 s, rank
//!                     0's stream and context then clean. The others: with `survivors` they keep
//!                     ncclSuccess on both for 2 s, then finalize and destroy both within 5 s;
//!                     with `all` they abort A and B too. Variants: survivors, all.
//! Ranks may share a GPU (rank r takes GPU r % count; under MPS every rank may use the one GPU).
//!
//! --ranks-per-host P simulates hosts: rank r gets NCCL_HOSTID=oxccl-fault-host-(r / P), so ranks
//! of different "hosts" talk over oxccl's network links (scripts/hostsim.sh does the same for
//! MPI jobs).
//!
//! Usage: oxccl-fault [--ranks 2,4] [--scenarios init,allreduce,...] [--bound-secs 30] [--seed N]
//!                    [--ranks-per-host P]
//! (the default scenarios are the kill ones; the abort-* ones are asked by name)
//! Exit status 0 only if every case passed. Prints a Markdown table of the measurements.

use std::ffi::c_void;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oxccl::api::coll::{ncclAllGather, ncclAllReduce};
use oxccl::api::comm::{ncclCommAbort, ncclCommDestroy, ncclCommFinalize, ncclCommGetAsyncError, ncclCommInitRank, ncclCommInitRankConfig, ncclGetUniqueId};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::p2p::{ncclRecv, ncclSend};
use oxccl::api::types::{ncclComm_t, ncclUniqueId};
use oxccl::gpu::{self, cu, CtxGuard, Device, DeviceBuffer};
use oxccl::types::DataType;
use oxccl::ResultCode;

const SCENARIOS: [&str; 7] = ["init", "allreduce", "bigreduce", "allgather", "sendrecv", "graph", "stop"];
/// Scenarios that abort rather than kill (asked by name), with their variants.
const ABORT_SCENARIOS: [&str; 3] = ["abort-pending", "abort-idle-peer", "abort-several"];

fn variants(sc: &str) -> Vec<String> {
    match sc {
        "abort-pending" => {
            let mut v = Vec::new();
            for op in ["allreduce", "recv"] {
                for mode in ["eager", "graph"] {
                    for b in ["blocking", "nonblocking"] {
                        v.push(format!("{op}-{mode}-{b}"));
                    }
                }
            }
            v
        }
        "abort-idle-peer" => vec!["destroy".into(), "finalize".into()],
        "abort-several" => vec!["survivors".into(), "all".into()],
        _ => Vec::new(),
    }
}

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

/// Each child's stdout read on a thread of its own, as (rank, line) in arrival order.
fn read_lines(kids: &mut [Child]) -> std::sync::mpsc::Receiver<(usize, String)> {
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
    rx
}

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
                println!("usage: oxccl-fault [--ranks 2,4] [--scenarios {},{}] [--bound-secs 30] [--seed N] [--ranks-per-host P]", SCENARIOS.join(","), ABORT_SCENARIOS.join(","));
                std::process::exit(0)
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if let Some(s) = o.scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str()) && !ABORT_SCENARIOS.contains(&s.as_str())) {
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
            if ABORT_SCENARIOS.contains(&sc.as_str()) {
                for v in variants(sc) {
                    let (ok, line) = run_abort_case(&exe, n, sc, &v, o.bound, o.per_host)?;
                    all_ok &= ok;
                    println!("{line}");
                }
                continue;
            }
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
    let rx = read_lines(&mut kids);
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

/// A fresh unique id, as hex for a child's command line.
fn new_id_hex() -> Result<String, String> {
    let mut id = ncclUniqueId { internal: [0; 128] };
    if ncclGetUniqueId(&mut id) != ResultCode::Success {
        return Err("ncclGetUniqueId failed".into());
    }
    Ok(id.internal.iter().map(|b| format!("{:02x}", *b as u8)).collect())
}

/// One abort scenario's variant: every rank a child, checks reported by the children.
fn run_abort_case(exe: &std::path::Path, n: usize, sc: &str, variant: &str, bound: Duration, per_host: Option<usize>) -> Result<(bool, String), String> {
    let (hex, hex2) = (new_id_hex()?, new_id_hex()?);
    let mut kids: Vec<Child> = Vec::new();
    for r in 0..n {
        let mut c = Command::new(exe);
        if let Some(p) = per_host {
            c.env("NCCL_HOSTID", format!("oxccl-fault-host-{}", r / p));
        }
        let c = c
            .args(["--child", &r.to_string(), &n.to_string(), sc, &hex, variant, "0"])
            .env("OXCCL_FAULT_ID2", &hex2)
            .env("OXCCL_BOOTSTRAP_TIMEOUT", format!("{}", (bound.as_secs() / 3).max(5)))
            .env("OXCCL_HEARTBEAT_TIMEOUT", "5")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting rank {r}: {e}"))?;
        kids.push(c);
    }
    let rx = read_lines(&mut kids);
    let t0 = Instant::now();
    let mut status: Vec<Option<i32>> = vec![None; n];
    let mut hung = false;
    loop {
        for (r, k) in kids.iter_mut().enumerate() {
            if status[r].is_none() {
                if let Ok(Some(st)) = k.try_wait() {
                    status[r] = Some(st.code().unwrap_or(-1));
                }
            }
        }
        if status.iter().all(Option::is_some) {
            std::thread::sleep(Duration::from_millis(50)); // the readers' last lines
            break;
        }
        if t0.elapsed() > bound {
            hung = true;
            for (r, k) in kids.iter_mut().enumerate() {
                if status[r].is_none() {
                    let _ = k.kill();
                    let _ = k.wait();
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let lines: Vec<(usize, String)> = rx.try_iter().collect();
    let mut notes = Vec::new();
    let mut times = Vec::new();
    let mut ok = !hung;
    for (r, st) in status.iter().enumerate() {
        let mine: Vec<&String> = lines.iter().filter(|(k, _)| *k == r).map(|(_, l)| l).collect();
        let done = mine.iter().any(|l| l.as_str() == "DONE");
        for l in &mine {
            if let Some(f) = l.strip_prefix("CHECK fail ") {
                ok = false;
                notes.push(format!("rank {r}: {f}"));
            } else if let Some(t) = l.strip_prefix("TIME ") {
                times.push(format!("r{r} {t}"));
            } else if let Some(e) = l.strip_prefix("CHILD-ERROR ") {
                ok = false;
                notes.push(format!("rank {r}: {e}"));
            }
        }
        match *st {
            None => notes.push(format!("rank {r}: still running at the bound (hang)")),
            Some(0) if done => {}
            Some(c) => {
                ok = false;
                notes.push(format!("rank {r}: exit {c}{}", if done { "" } else { " before DONE" }));
            }
        }
    }
    let mut verdict = if ok { "PASS".to_string() } else { "FAIL".to_string() };
    for note in &notes {
        verdict.push_str(&format!("; {note}"));
    }
    Ok((ok, format!("| {sc} | {n} | - | {variant} | {} | - | {verdict} |", times.join(", "))))
}

// ---- child -----------------------------------------------------------------------------------

fn ck(rc: cu::CUresult, what: &str) -> Result<(), String> {
    gpu::check(rc, what).map_err(|e| e.msg)
}

fn parse_id(hex: &str) -> Result<ncclUniqueId, String> {
    let mut id = ncclUniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        let byte = hex.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("bad unique id")?;
        *b = byte as _;
    }
    Ok(id)
}

fn child(a: &[String]) -> Result<(), String> {
    let [rank, n, sc, hex, victim, kill_ms] = a else { return Err("child arguments".into()) };
    let p = |s: &str| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
    let id = parse_id(hex)?;
    if ABORT_SCENARIOS.contains(&sc.as_str()) {
        let (rank, n) = (p(rank)?, p(n)?);
        let id2 = parse_id(&std::env::var("OXCCL_FAULT_ID2").map_err(|_| "OXCCL_FAULT_ID2 not set")?)?;
        return match sc.as_str() {
            "abort-pending" => abort::pending(rank, n, victim, id, id2),
            "abort-several" => abort::several(rank, n, victim, id, id2),
            _ => abort::idle_peer(rank, n, victim, id),
        };
    }
    let (rank, n, victim, kill_ms) = (p(rank)?, p(n)?, p(victim)?, p(kill_ms)? as u64);
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

/// The children of the abort scenarios (see the header).
mod abort {
    use super::*;

    /// 64 MiB of f32: large enough that no path completes it without the peer.
    const BIG: usize = 16 << 20;
    const SMALL: usize = 1 << 18;

    fn check(ok: bool, what: &str) -> bool {
        if !ok {
            println!("CHECK fail {what}");
        }
        ok
    }

    fn nccl(rc: ResultCode, what: &str) -> Result<(), String> {
        if rc == ResultCode::Success {
            Ok(())
        } else {
            Err(format!("{what}: {rc:?}"))
        }
    }

    /// A nonblocking call's outcome: polled until the communicator is no longer in progress.
    fn settle(comm: ncclComm_t, rc: ResultCode) -> ResultCode {
        if rc != ResultCode::InProgress {
            return rc;
        }
        let t0 = Instant::now();
        loop {
            let mut st = ResultCode::InProgress;
            if ncclCommGetAsyncError(comm, &mut st) != ResultCode::Success {
                return ResultCode::InternalError;
            }
            if st != ResultCode::InProgress || t0.elapsed() > Duration::from_secs(60) {
                return st;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn init(rank: usize, n: usize, id: ncclUniqueId, blocking: bool) -> Result<ncclComm_t, String> {
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let mut cfg = oxccl::config::config_initializer();
        cfg.blocking = blocking as i32;
        let rc = ncclCommInitRankConfig(&mut comm, n as i32, id, rank as i32, &mut cfg);
        nccl(settle(comm, rc), "ncclCommInitRankConfig")?;
        Ok(comm)
    }

    fn new_stream() -> Result<cu::CUstream, String> {
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the caller's context is current.
        unsafe { ck(cu::cuStreamCreate(&mut s, 1), "cuStreamCreate")? };
        Ok(s)
    }

    /// The stream drains without error (no sticky error from an illegal access).
    fn stream_clean(stream: cu::CUstream, what: &str) -> bool {
        // SAFETY: our stream.
        let rc = unsafe { cu::cuStreamSynchronize(stream) };
        check(rc == cu::CUresult::CUDA_SUCCESS, &format!("{what}: cuStreamSynchronize returned {rc:?}"))
    }

    fn context_clean(what: &str) -> bool {
        // SAFETY: the context is current on this thread.
        let rc = unsafe { cu::cuCtxSynchronize() };
        check(rc == cu::CUresult::CUDA_SUCCESS, &format!("{what}: cuCtxSynchronize returned {rc:?}"))
    }

    fn fill(buf: &DeviceBuffer, count: usize, v: f32) -> Result<(), String> {
        let bytes: Vec<u8> = std::iter::repeat_n(v.to_le_bytes(), count).flatten().collect();
        buf.write(0, &bytes).map_err(|e| e.msg)
    }

    fn read(buf: &DeviceBuffer, count: usize) -> Result<Vec<f32>, String> {
        let mut bytes = vec![0u8; count * 4];
        buf.read(0, &mut bytes).map_err(|e| e.msg)?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// An AllReduce of SMALL floats, rank r giving r + 1: every element must be n(n+1)/2.
    fn allreduce_checked(comm: ncclComm_t, stream: cu::CUstream, dev: &'static Device, rank: usize, n: usize, what: &str) -> Result<(), String> {
        let (send, recv) = (DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?, DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?);
        fill(&send, SMALL, (rank + 1) as f32)?;
        let rc = ncclAllReduce(send.ptr as *const c_void, recv.ptr as *mut c_void, SMALL, DataType::Float32 as i32, 0, comm, stream.cast());
        nccl(settle(comm, rc), &format!("{what}: ncclAllReduce"))?;
        if !stream_clean(stream, what) {
            return Err(format!("{what}: the stream failed"));
        }
        let want = (n * (n + 1) / 2) as f32;
        let got = read(&recv, SMALL)?;
        match got.iter().position(|&v| v != want) {
            None => Ok(()),
            Some(i) => Err(format!("{what}: element {i} is {} where {want} was expected", got[i])),
        }
    }

    /// What the posting thread did: the call's result and the graph it instantiated, if any.
    struct Posted {
        rc: ResultCode,
        exec: Option<usize>,
        note: Option<String>,
    }

    /// Posts the operation nobody joins, on a thread of its own: a copy-engine handshake holds the
    /// call until the peer's matching call or the abort.
    fn post(dev: &'static Device, comm: usize, stream: usize, send: u64, recv: u64, op: String, graph: bool) -> std::thread::JoinHandle<Posted> {
        std::thread::spawn(move || {
            let Ok(_g) = CtxGuard::new(dev) else { return Posted { rc: ResultCode::InternalError, exec: None, note: Some("no context".into()) } };
            let (comm, stream) = (comm as ncclComm_t, stream as cu::CUstream);
            let call = || match op.as_str() {
                "recv" => ncclRecv(recv as *mut c_void, BIG, DataType::Float32 as i32, 0, comm, stream.cast()),
                _ => ncclAllReduce(send as *const c_void, recv as *mut c_void, BIG, DataType::Float32 as i32, 0, comm, stream.cast()),
            };
            if !graph {
                return Posted { rc: call(), exec: None, note: None };
            }
            let mut g: cu::CUgraph = std::ptr::null_mut();
            let mut e: cu::CUgraphExec = std::ptr::null_mut();
            // SAFETY: capture of one call on our stream, then instantiate and replay; out-pointers local.
            unsafe {
                if cu::cuStreamBeginCapture_v2(stream, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != cu::CUresult::CUDA_SUCCESS {
                    return Posted { rc: ResultCode::InternalError, exec: None, note: Some("cuStreamBeginCapture failed".into()) };
                }
                let rc = call();
                let end = cu::cuStreamEndCapture(stream, &mut g);
                if end != cu::CUresult::CUDA_SUCCESS || g.is_null() {
                    return Posted { rc, exec: None, note: Some(format!("capture ended with {end:?}")) };
                }
                let inst = cu::cuGraphInstantiateWithFlags(&mut e, g, 0);
                cu::cuGraphDestroy(g);
                if inst != cu::CUresult::CUDA_SUCCESS {
                    return Posted { rc, exec: None, note: Some(format!("cuGraphInstantiate: {inst:?}")) };
                }
                let launched = cu::cuGraphLaunch(e, stream);
                let note = (launched != cu::CUresult::CUDA_SUCCESS).then(|| format!("cuGraphLaunch: {launched:?}"));
                Posted { rc, exec: Some(e as usize), note }
            }
        })
    }

    /// abort-pending: see the header. `variant`: {allreduce,recv}-{eager,graph}-{blocking,nonblocking}.
    pub fn pending(rank: usize, n: usize, variant: &str, id: ncclUniqueId, id2: ncclUniqueId) -> Result<(), String> {
        let parts: Vec<&str> = variant.split('-').collect();
        let [op, mode, blocking] = parts[..] else { return Err(format!("variant {variant}")) };
        let (graph, blocking) = (mode == "graph", blocking == "blocking");
        gpu::ensure().map_err(|e| e.msg)?;
        let ngpu = gpu::context::device_count().map_err(|e| e.msg)?.max(1) as usize;
        let dev = Device::get((rank % ngpu) as i32).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let comm = init(rank, n, id, blocking)?;
        let stream = new_stream()?;
        allreduce_checked(comm, stream, dev, rank, n, "warm-up AllReduce")?;
        let poster = if op == "recv" { 1 } else { 0 };
        let send = DeviceBuffer::zeroed(dev, BIG * 4).map_err(|e| e.msg)?;
        let recv = DeviceBuffer::zeroed(dev, BIG * 4).map_err(|e| e.msg)?;
        let posted = (rank == poster).then(|| post(dev, comm as usize, stream as usize, send.ptr, recv.ptr, op.to_string(), graph));
        // The idle ranks abort first: freeing their memory must wait for the poster's kernel, which still writes it.
        std::thread::sleep(Duration::from_millis(if rank == poster { 800 } else { 300 }));
        if rank == poster && !graph {
            // (Not while the thread may still capture on it: a query would end the capture.)
            // SAFETY: our stream.
            let busy = unsafe { cu::cuStreamQuery(stream) } == cu::CUresult::CUDA_ERROR_NOT_READY;
            println!("TIME stuck-before-abort={busy}");
        }
        let t0 = Instant::now();
        let rc = ncclCommAbort(comm);
        println!("TIME abort={:.0}ms", t0.elapsed().as_secs_f64() * 1e3);
        check(rc == ResultCode::Success || rc == ResultCode::InProgress, &format!("ncclCommAbort returned {rc:?}"));
        let mut exec = None;
        if let Some(h) = posted {
            let p = h.join().map_err(|_| "the posting thread panicked")?;
            println!("TIME posted={:?}{}", p.rc, p.note.map(|n| format!(" ({n})")).unwrap_or_default());
            exec = p.exec;
        }
        stream_clean(stream, "the stuck stream after the abort");
        if let Some(e) = exec {
            // A replay after the abort: its kernels exit at once, on memory the graph still holds.
            // SAFETY: our instantiated graph and stream.
            let rc = unsafe { cu::cuGraphLaunch(e as cu::CUgraphExec, stream) };
            check(rc == cu::CUresult::CUDA_SUCCESS, &format!("replay after the abort: cuGraphLaunch {rc:?}"));
            stream_clean(stream, "a replay after the abort");
            // SAFETY: ours, destroyed once; the communicator it held goes with it.
            unsafe { cu::cuGraphExecDestroy(e as cu::CUgraphExec) };
        }
        context_clean("after the abort");
        // A new communicator on the same GPUs works.
        let comm2 = init(rank, n, id2, true)?;
        let r = allreduce_checked(comm2, stream, dev, rank, n, "AllReduce on a new communicator");
        check(r.is_ok(), &r.err().unwrap_or_default());
        check(ncclCommDestroy(comm2) == ResultCode::Success, "destroying the new communicator");
        context_clean("at the end");
        println!("DONE");
        Ok(())
    }

    /// abort-idle-peer: see the header. `variant`: destroy or finalize.
    pub fn idle_peer(rank: usize, n: usize, variant: &str, id: ncclUniqueId) -> Result<(), String> {
        gpu::ensure().map_err(|e| e.msg)?;
        let ngpu = gpu::context::device_count().map_err(|e| e.msg)?.max(1) as usize;
        let dev = Device::get((rank % ngpu) as i32).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let comm = init(rank, n, id, true)?;
        let stream = new_stream()?;
        allreduce_checked(comm, stream, dev, rank, n, "warm-up AllReduce")?;
        let f32 = DataType::Float32 as i32;
        if rank == 0 {
            let send = DeviceBuffer::zeroed(dev, BIG * 4).map_err(|e| e.msg)?;
            let recv = DeviceBuffer::zeroed(dev, BIG * 4).map_err(|e| e.msg)?;
            nccl(ncclAllReduce(send.ptr as *const c_void, recv.ptr as *mut c_void, BIG, f32, 0, comm, stream.cast()), "the AllReduce nobody joins")?;
            std::thread::sleep(Duration::from_millis(300));
            let t0 = Instant::now();
            check(ncclCommAbort(comm) == ResultCode::Success, "ncclCommAbort");
            println!("TIME abort={:.0}ms", t0.elapsed().as_secs_f64() * 1e3);
            stream_clean(stream, "rank 0's stream after its abort");
            println!("DONE");
            return Ok(());
        }
        // Nothing pending needs rank 0: its abort must not show here.
        let async_error = || {
            let mut st = ResultCode::InternalError;
            ncclCommGetAsyncError(comm, &mut st);
            st
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            let st = async_error();
            if !check(st == ResultCode::Success, &format!("ncclCommGetAsyncError is {st:?} {:.0} ms in, with nothing pending on rank 0", t0.elapsed().as_secs_f64() * 1e3)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Ranks 1 and 2 still talk to each other.
        if n >= 3 && rank <= 2 {
            let peer = 3 - rank;
            let (send, recv) = (DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?, DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?);
            fill(&send, SMALL, (rank + 1) as f32)?;
            ncclGroupStart();
            ncclSend(send.ptr as *const c_void, SMALL, f32, peer as i32, comm, stream.cast());
            ncclRecv(recv.ptr as *mut c_void, SMALL, f32, peer as i32, comm, stream.cast());
            let rc = ncclGroupEnd();
            if check(rc == ResultCode::Success, &format!("send/recv with rank {peer} after rank 0 aborted: {rc:?}")) && stream_clean(stream, "send/recv") {
                let got = read(&recv, SMALL)?;
                check(got.iter().all(|&v| v == (peer + 1) as f32), &format!("send/recv with rank {peer}: wrong data"));
            }
            let st = async_error();
            check(st == ResultCode::Success, &format!("ncclCommGetAsyncError is {st:?} after the send/recv"));
        }
        // Work that needs rank 0 fails: refused at once, or while it waits.
        let t1 = Instant::now();
        let (send, recv) = (DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?, DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?);
        let rc = ncclAllReduce(send.ptr as *const c_void, recv.ptr as *mut c_void, SMALL, f32, 0, comm, stream.cast());
        let mut seen = rc;
        while seen == ResultCode::Success && t1.elapsed() < Duration::from_secs(10) {
            seen = async_error();
            std::thread::sleep(Duration::from_millis(5));
        }
        println!("TIME needs-rank-0={:?}@{:.0}ms", rc, t1.elapsed().as_secs_f64() * 1e3);
        check(seen == ResultCode::RemoteError, &format!("an AllReduce needing the aborted rank 0 gave {seen:?}, not ncclRemoteError within 10 s"));
        stream_clean(stream, "the stream after the refused AllReduce");
        // Teardown is bounded whatever rank 0 did.
        let t2 = Instant::now();
        if variant == "finalize" {
            let rc = ncclCommFinalize(comm);
            let rc = settle(comm, rc);
            check(t2.elapsed() < Duration::from_secs(5), &format!("ncclCommFinalize took {:?} ({rc:?})", t2.elapsed()));
        }
        let rc = ncclCommDestroy(comm);
        let took = t2.elapsed();
        println!("TIME teardown={:.0}ms", took.as_secs_f64() * 1e3);
        check(rc == ResultCode::Success, &format!("ncclCommDestroy returned {rc:?}"));
        check(took < Duration::from_secs(5), &format!("teardown took {took:?}"));
        context_clean("at the end");
        println!("DONE");
        Ok(())
    }
    /// abort-several: see the header. `variant`: survivors or all.
    pub fn several(rank: usize, n: usize, variant: &str, id_a: ncclUniqueId, id_b: ncclUniqueId) -> Result<(), String> {
        gpu::ensure().map_err(|e| e.msg)?;
        let ngpu = gpu::context::device_count().map_err(|e| e.msg)?.max(1) as usize;
        let dev = Device::get((rank % ngpu) as i32).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let a = init(rank, n, id_a, true)?;
        let b = init(rank, n, id_b, true)?;
        let stream = new_stream()?;
        allreduce_checked(a, stream, dev, rank, n, "warm-up AllReduce on A")?;
        allreduce_checked(b, stream, dev, rank, n, "warm-up AllReduce on B")?;
        let f32 = DataType::Float32 as i32;
        let (send, recv) = (DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?, DeviceBuffer::zeroed(dev, SMALL * 4).map_err(|e| e.msg)?);
        if rank == 0 {
            nccl(ncclAllReduce(send.ptr as *const c_void, recv.ptr as *mut c_void, SMALL, f32, 0, b, stream.cast()), "the AllReduce on B nobody joins")?;
        }
        std::thread::sleep(Duration::from_millis(300));
        if rank == 0 || variant == "all" {
            let t0 = Instant::now();
            let rc_a = ncclCommAbort(a);
            let t_a = t0.elapsed();
            let rc_b = ncclCommAbort(b);
            println!("TIME abort-a={:.0}ms abort-b={:.0}ms", t_a.as_secs_f64() * 1e3, (t0.elapsed() - t_a).as_secs_f64() * 1e3);
            check(rc_a == ResultCode::Success && rc_b == ResultCode::Success, &format!("ncclCommAbort returned {rc_a:?} and {rc_b:?}"));
            check(t0.elapsed() < Duration::from_secs(15), &format!("aborting A and then B took {:?}", t0.elapsed()));
            stream_clean(stream, "the stream after the aborts");
            context_clean("after the aborts");
            println!("DONE");
            return Ok(());
        }
        // Nothing pending needs rank 0 on either communicator.
        let t0 = Instant::now();
        'poll: while t0.elapsed() < Duration::from_secs(2) {
            for (c, name) in [(a, "A"), (b, "B")] {
                let mut st = ResultCode::InternalError;
                ncclCommGetAsyncError(c, &mut st);
                if !check(st == ResultCode::Success, &format!("ncclCommGetAsyncError on {name} is {st:?} with nothing pending on rank 0")) {
                    break 'poll;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let t1 = Instant::now();
        for c in [a, b] {
            let rc = ncclCommFinalize(c);
            settle(c, rc);
            let rc = ncclCommDestroy(c);
            check(rc == ResultCode::Success, &format!("ncclCommDestroy returned {rc:?}"));
        }
        println!("TIME teardown={:.0}ms", t1.elapsed().as_secs_f64() * 1e3);
        check(t1.elapsed() < Duration::from_secs(5), &format!("finalize and destroy of A and B took {:?}", t1.elapsed()));
        context_clean("at the end");
        println!("DONE");
        Ok(())
    }
}
