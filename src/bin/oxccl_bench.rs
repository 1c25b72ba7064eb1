//! oxccl-bench: every collective across every GPU of this machine, with oxccl and, where it is
//! installed, NVIDIA's NCCL in the same run, side by side. One communicator per GPU driven from
//! one thread (as `nccl-tests -g N` does); the first call of every size is checked. Without a GPU it says so and
//! exits successfully.
//!
//! Each library runs in a child process of its own (`--worker LIB`), opened by path through
//! NCCL's C ABI, so both run the same code. The parent prints one table per collective (time and
//! bus bandwidth of each library and their ratios) and writes `results.json` in the format of
//! `nccl-tests-harness/harness.py compare`, which `harness.py report` turns into a summary and
//! PNG plots (scripts/bench.sh does).
//!
//! NCCL is found as PyTorch finds it (the `nvidia-nccl` Python package), or named by `--nccl PATH`
//! or OXCCL_BENCH_NCCL; `--nccl none` runs oxccl alone.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use oxccl::gpu::{self, cu, CtxGuard, Device};

const USAGE: &str = "usage: oxccl-bench [--colls LIST] [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N] \
[--dtype f32|bf16] [--lib PATH] [--nccl PATH|none] [--out DIR]
  --iters    timed calls per size (default 100; their mean is reported)
  --warmup   untimed calls per size before them (default 20)
  --colls    comma list of allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv (default all)
  --lib      the oxccl library (default: liboxccl.so beside this program)
  --nccl     NVIDIA's libnccl.so.2 to compare with (default: $OXCCL_BENCH_NCCL, else the nvidia-nccl
             Python package's, as PyTorch finds it); none: oxccl alone
  --out      folder for results.json (default target/bench)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    AlltoAll,
    SendRecv,
}

impl Coll {
    const ALL: [Coll; 7] = [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::Reduce, Coll::AlltoAll, Coll::SendRecv];

    fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "allreduce",
            Coll::AllGather => "allgather",
            Coll::ReduceScatter => "reducescatter",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AlltoAll => "alltoall",
            Coll::SendRecv => "sendrecv",
        }
    }

    /// nccl-tests' bus-bandwidth factor at `n` ranks (its doc/PERFORMANCE.md).
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::AlltoAll => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce | Coll::SendRecv => 1.0,
        }
    }
}

#[derive(Clone)]
struct Opts {
    colls: Vec<Coll>,
    min_bytes: usize,
    max_bytes: usize,
    iters: usize,
    warmup: usize,
    bf16: bool,
    lib: Option<String>,
    nccl: Option<String>,
    out: String,
    worker: Option<String>,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        colls: Coll::ALL.to_vec(),
        min_bytes: 8,
        max_bytes: 256 << 20,
        iters: 100,
        warmup: 20,
        bf16: false,
        lib: None,
        nccl: None,
        out: "target/bench".into(),
        worker: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--colls" => {
                o.colls = val()?
                    .split(',')
                    .map(|s| Coll::ALL.into_iter().find(|c| c.name() == s.trim()).ok_or_else(|| format!("unknown collective {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--min-bytes" => o.min_bytes = parse_size(&val()?)?,
            "--max-bytes" => o.max_bytes = parse_size(&val()?)?,
            "--iters" => o.iters = val()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--warmup" => o.warmup = val()?.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--dtype" => {
                o.bf16 = match val()?.as_str() {
                    "f32" | "float" => false,
                    "bf16" => true,
                    d => return Err(format!("unknown dtype {d}")),
                }
            }
            "--lib" => o.lib = Some(val()?),
            "--nccl" => o.nccl = Some(val()?),
            "--out" => o.out = val()?,
            "--worker" => o.worker = Some(val()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.iters == 0 || o.min_bytes > o.max_bytes {
        return Err("--iters must be at least 1 and --min-bytes at most --max-bytes".into());
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
    let r = match &opts.worker {
        Some(lib) => worker(&opts, lib, ndev),
        None => parent(&opts, ndev),
    };
    if let Err(e) = r {
        eprintln!("oxccl-bench: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: runs each library's worker, then the side-by-side tables.

/// One measured size: time per call (us, the slowest rank), bus bandwidth (GB/s), checked.
#[derive(Clone, Copy)]
struct Row {
    bytes: usize,
    us: f64,
    busbw: f64,
    ok: bool,
}

fn beside_me(name: &str) -> Option<PathBuf> {
    let p = std::env::current_exe().ok()?.parent()?.join(name);
    p.is_file().then_some(p)
}

/// NVIDIA's NCCL as PyTorch loads it: the nvidia-nccl Python package's library.
fn nccl_from_python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], 'lib', 'libnccl.so.2'))"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && p.is_file()).then_some(p)
}

fn parent(o: &Opts, ndev: i32) -> Result<(), String> {
    let lib = match &o.lib {
        Some(l) => PathBuf::from(l),
        None => beside_me("liboxccl.so").ok_or("liboxccl.so is not beside this program: build with `cargo build --release` or pass --lib")?,
    };
    let asked = o.nccl.clone().or_else(|| std::env::var("OXCCL_BENCH_NCCL").ok());
    let nccl = match asked.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => nccl_from_python(),
    };
    match &nccl {
        Some(p) => println!("# NVIDIA's NCCL: {} (runs second, in a process of its own)", p.display()),
        None if asked.is_some() => println!("# oxccl alone (NCCL: none)"),
        None => println!("# NVIDIA's NCCL not found (no nvidia-nccl Python package; set OXCCL_BENCH_NCCL or --nccl): oxccl alone"),
    }
    if ndev == 1 {
        println!("# one GPU: one rank per collective, so this shows each library's own cost, not communication between GPUs");
    }
    let ours = run_worker(o, &lib, "oxccl")?;
    let theirs = match &nccl {
        Some(p) => match run_worker(o, p, "NCCL") {
            Ok(rows) => Some(rows),
            Err(e) => {
                println!("# NVIDIA's NCCL could not run ({e}): oxccl alone");
                None
            }
        },
        None => None,
    };
    let n = ndev as usize;
    let dtype = if o.bf16 { "bfloat16" } else { "float" };
    let mut json = Vec::new();
    let mut wrong = 0;
    for &c in &o.colls {
        let mine: Vec<Row> = ours.iter().filter(|(x, _)| *x == c).map(|(_, r)| *r).collect();
        let other: Vec<Row> = theirs.as_ref().map_or(Vec::new(), |t| t.iter().filter(|(x, _)| *x == c).map(|(_, r)| *r).collect());
        println!("\n## {} {dtype}, {n} GPU(s)\n", c.name());
        println!("| bytes | oxccl us | NCCL us | time ratio | oxccl busbw | NCCL busbw | busbw ratio | check |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---|");
        let mut rows = Vec::new();
        for m in &mine {
            let t = other.iter().find(|r| r.bytes == m.bytes);
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let tr = t.map(|t| m.us / t.us);
            let br = t.filter(|t| t.busbw > 0.0).map(|t| m.busbw / t.busbw);
            let check = match t {
                Some(t) if !t.ok => if m.ok { "ok (NCCL WRONG)" } else { "WRONG (both)" },
                _ => if m.ok { "ok" } else { "WRONG" },
            };
            wrong += usize::from(!m.ok);
            println!(
                "| {} | {:.2} | {} | {} | {:.2} | {} | {} | {check} |",
                m.bytes,
                m.us,
                f(t.map(|t| t.us)),
                f(tr),
                m.busbw,
                f(t.map(|t| t.busbw)),
                f(br)
            );
            let j = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("null".to_string(), |v| format!("{v}"));
            rows.push(format!(
                "{{\"bytes\": {}, \"type\": \"{dtype}\", \"oxccl_us\": {}, \"nccl_us\": {}, \"time_ratio\": {}, \"oxccl_busbw\": {}, \"nccl_busbw\": {}, \"busbw_ratio\": {}}}",
                m.bytes,
                j(Some(m.us)),
                j(t.map(|t| t.us)),
                j(tr),
                j(Some(m.busbw)),
                j(t.map(|t| t.busbw)),
                j(br)
            ));
        }
        let all_ok = mine.iter().all(|r| r.ok);
        json.push(format!(
            "{{\"name\": \"{}-g{n}-{dtype}\", \"mode\": \"g{n}\", \"args\": [], \"oxccl_ok\": {all_ok}, \"rows\": [\n  {}\n]}}",
            c.name(),
            rows.join(",\n  ")
        ));
    }
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out))?;
    let path = Path::new(&o.out).join("results.json");
    std::fs::write(&path, format!("[\n{}\n]\n", json.join(",\n"))).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("\n# results: {} (time ratio < 1 and busbw ratio > 1: oxccl faster)", path.display());
    if wrong > 0 {
        return Err(format!("{wrong} size(s) gave wrong results with oxccl"));
    }
    Ok(())
}

/// Runs one library's worker, echoing its rows as they come.
fn run_worker(o: &Opts, lib: &Path, label: &str) -> Result<Vec<(Coll, Row)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let colls: Vec<&str> = o.colls.iter().map(|c| c.name()).collect();
    let mut child = Command::new(exe)
        .arg("--worker")
        .arg(lib)
        .args(["--colls", &colls.join(","), "--min-bytes", &o.min_bytes.to_string(), "--max-bytes", &o.max_bytes.to_string()])
        .args(["--iters", &o.iters.to_string(), "--warmup", &o.warmup.to_string(), "--dtype", if o.bf16 { "bf16" } else { "f32" }])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the {label} worker: {e}"))?;
    let stdout = child.stdout.take().ok_or("no worker stdout")?;
    let mut rows = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading the {label} worker: {e}"))?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["ROW", c, bytes, us, busbw, ok] => {
                let coll = Coll::ALL.into_iter().find(|x| x.name() == *c).ok_or_else(|| format!("worker row: {line}"))?;
                let row = Row {
                    bytes: bytes.parse().map_err(|_| format!("worker row: {line}"))?,
                    us: us.parse().map_err(|_| format!("worker row: {line}"))?,
                    busbw: busbw.parse().map_err(|_| format!("worker row: {line}"))?,
                    ok: *ok == "ok",
                };
                println!("  {label:>5} {:<13} {:>11} B {:>10.2} us {:>8.2} GB/s {}", c, row.bytes, row.us, row.busbw, if row.ok { "ok" } else { "WRONG" });
                rows.push((coll, row));
            }
            _ => println!("  {label:>5} {line}"),
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for the {label} worker: {e}"))?;
    if !status.success() {
        return Err(format!("the {label} worker failed ({status})"));
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// The worker: one library, every collective, every size.

type Comm = *mut c_void;
type Stream = *mut c_void;

/// The library's entry points (NCCL 2.28's C ABI), resolved by name: the few the bench calls, not
/// oxccl-conform's loader (src/bin/oxccl_conform/nccl.rs), which needs every 2.28 function and the
/// `conform` feature; here NCCLs before 2.28.3 (no ncclAlltoAll) still run.
struct Lib {
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    destroy: unsafe extern "C" fn(Comm) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
    reduce_scatter: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    broadcast: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, Comm, Stream) -> c_int,
    /// NCCL 2.28.3 and later; older NCCLs (PyTorch's wheels up to 2.9) have none.
    all_to_all: Option<unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int>,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
}

impl Lib {
    fn open(path: &str) -> Result<Lib, String> {
        let c = CString::new(path).map_err(|_| "library path with a NUL byte")?;
        // SAFETY: a NUL-terminated path; the handle is kept for the process (never closed).
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated message.
            let e = unsafe { libc::dlerror() };
            let msg = if e.is_null() { "unknown error".into() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned() };
            return Err(format!("dlopen {path}: {msg}"));
        }
        /// The symbol `name` as a function pointer of type `F`.
        ///
        /// # Safety
        /// `F` must be the type of the function the library exports under `name`.
        unsafe fn sym<F: Copy>(h: *mut c_void, path: &str, name: &str) -> Result<F, String> {
            let n = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, n.as_ptr()) };
            if p.is_null() {
                return Err(format!("{path} has no {name}"));
            }
            // SAFETY: the caller names the function's type; a function pointer is pointer-sized.
            Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
        }
        // SAFETY: each symbol is the NCCL 2.28 function of that name, with the signature above.
        unsafe {
            Ok(Lib {
                get_version: sym(h, path, "ncclGetVersion")?,
                error_string: sym(h, path, "ncclGetErrorString")?,
                init_all: sym(h, path, "ncclCommInitAll")?,
                destroy: sym(h, path, "ncclCommDestroy")?,
                group_start: sym(h, path, "ncclGroupStart")?,
                group_end: sym(h, path, "ncclGroupEnd")?,
                all_reduce: sym(h, path, "ncclAllReduce")?,
                all_gather: sym(h, path, "ncclAllGather")?,
                reduce_scatter: sym(h, path, "ncclReduceScatter")?,
                broadcast: sym(h, path, "ncclBroadcast")?,
                reduce: sym(h, path, "ncclReduce")?,
                all_to_all: sym(h, path, "ncclAlltoAll").ok(),
                send: sym(h, path, "ncclSend")?,
                recv: sym(h, path, "ncclRecv")?,
            })
        }
    }

    fn check(&self, rc: c_int, what: &str) -> Result<(), String> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static NUL-terminated string for any code.
        let s = unsafe { CStr::from_ptr((self.error_string)(rc)) }.to_string_lossy();
        Err(format!("{what} returned {rc} ({s})"))
    }
}

fn ck(rc: cu::CUresult, what: &str) -> Result<(), String> {
    gpu::check(rc, what).map_err(|e| e.msg)
}

struct Rank {
    dev: &'static Device,
    stream: cu::CUstream,
    send: cu::CUdeviceptr,
    recv: cu::CUdeviceptr,
    start: cu::CUevent,
    stop: cu::CUevent,
}

/// Element `i` of rank `r`'s send buffer: small integers, so every sum is exact in float and
/// bfloat16 at up to 16 ranks, whatever the order.
fn input(r: usize, i: usize) -> f32 {
    (r + 1 + i % 5) as f32
}

fn worker(o: &Opts, path: &str, ndev: i32) -> Result<(), String> {
    let lib = Lib::open(path)?;
    let mut version = 0;
    // SAFETY: an out-pointer to a local.
    lib.check(unsafe { (lib.get_version)(&mut version) }, "ncclGetVersion")?;
    let n = ndev as usize;
    let es: usize = if o.bf16 { 2 } else { 4 };
    let dtype: c_int = if o.bf16 { 9 } else { 7 };
    let max_count = o.max_bytes.div_ceil(es).max(n);
    println!("{path}: NCCL version code {version}, {n} GPU(s), {}", if o.bf16 { "bfloat16" } else { "float" });
    let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); n];
    // SAFETY: room for one communicator per device; NULL devlist means devices 0..n.
    lib.check(unsafe { (lib.init_all)(comms.as_mut_ptr(), ndev, std::ptr::null()) }, "ncclCommInitAll")?;
    let mut ranks = Vec::with_capacity(n);
    for (r, d) in (0..ndev).enumerate() {
        let dev = Device::get(d).map_err(|e| e.msg)?;
        let _g = CtxGuard::new(dev).map_err(|e| e.msg)?;
        let mut rk = Rank { dev, stream: std::ptr::null_mut(), send: 0, recv: 0, start: std::ptr::null_mut(), stop: std::ptr::null_mut() };
        let mut host = Vec::with_capacity(max_count * es);
        for i in 0..max_count {
            let v = input(r, i);
            if o.bf16 {
                host.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes());
            } else {
                host.extend_from_slice(&v.to_le_bytes());
            }
        }
        // SAFETY: out-pointers to locals; the buffers hold max_count elements.
        unsafe {
            ck(cu::cuStreamCreate(&mut rk.stream, 1), "cuStreamCreate")?;
            ck(cu::cuMemAlloc_v2(&mut rk.send, max_count * es), "cuMemAlloc")?;
            ck(cu::cuMemAlloc_v2(&mut rk.recv, max_count * es), "cuMemAlloc")?;
            ck(cu::cuMemcpyHtoDAsync_v2(rk.send, host.as_ptr().cast(), host.len(), rk.stream), "cuMemcpyHtoDAsync")?;
            // Waited for: from pageable memory the copy may land after the call returns.
            ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
            ck(cu::cuEventCreate(&mut rk.start, 0), "cuEventCreate")?;
            ck(cu::cuEventCreate(&mut rk.stop, 0), "cuEventCreate")?;
        }
        ranks.push(rk);
    }
    for &c in &o.colls {
        if c == Coll::AlltoAll && lib.all_to_all.is_none() {
            println!("{path} has no ncclAlltoAll (NCCL before 2.28.3): alltoall skipped");
            continue;
        }
        let mut bytes = o.min_bytes.max(es);
        while bytes <= o.max_bytes {
            // nccl-tests' sizes: the whole buffer of a rank (AllGather's output, ReduceScatter's
            // and AlltoAll's input), a multiple of the rank count where it is split.
            let split = matches!(c, Coll::AllGather | Coll::ReduceScatter | Coll::AlltoAll);
            let count = if split { bytes / es / n } else { bytes / es };
            if count > 0 {
                let row = measure(&lib, o, c, &comms, &ranks, count, dtype, es)?;
                let bytes = if split { count * n * es } else { count * es };
                let algbw = bytes as f64 / row.0 / 1e3;
                println!("ROW {} {bytes} {:.3} {:.3} {}", c.name(), row.0, algbw * c.bus_factor(n), if row.1 { "ok" } else { "WRONG" });
                std::io::stdout().flush().ok();
            }
            bytes *= 2;
        }
    }
    for c in comms {
        // SAFETY: communicators made above, their work finished.
        lib.check(unsafe { (lib.destroy)(c) }, "ncclCommDestroy")?;
    }
    // Wrong results are in the rows: the parent reports them with everything else.
    Ok(())
}

/// Issues `c` once on every rank, in one group. `count`: elements per rank's slice where the
/// collective splits its buffer, else per buffer.
fn issue(lib: &Lib, c: Coll, comms: &[Comm], ranks: &[Rank], count: usize, dtype: c_int) -> Result<(), String> {
    let n = ranks.len();
    // SAFETY: no preconditions.
    lib.check(unsafe { (lib.group_start)() }, "ncclGroupStart")?;
    for (r, rk) in ranks.iter().enumerate() {
        let (s, d, st, cm) = (rk.send as *const c_void, rk.recv as *mut c_void, rk.stream.cast::<c_void>(), comms[r]);
        // SAFETY: device buffers of max_count elements each, which every call stays within.
        let rc = unsafe {
            match c {
                Coll::AllReduce => (lib.all_reduce)(s, d, count, dtype, 0, cm, st),
                Coll::AllGather => (lib.all_gather)(s, d, count, dtype, cm, st),
                Coll::ReduceScatter => (lib.reduce_scatter)(s, d, count, dtype, 0, cm, st),
                Coll::Broadcast => (lib.broadcast)(s, d, count, dtype, 0, cm, st),
                Coll::Reduce => (lib.reduce)(s, d, count, dtype, 0, 0, cm, st),
                Coll::AlltoAll => match lib.all_to_all {
                    Some(f) => f(s, d, count, dtype, cm, st),
                    None => return Err("no ncclAlltoAll".into()),
                },
                Coll::SendRecv => {
                    let rc = (lib.send)(s, count, dtype, ((r + 1) % n) as c_int, cm, st);
                    if rc != 0 {
                        rc
                    } else {
                        (lib.recv)(d, count, dtype, ((r + n - 1) % n) as c_int, cm, st)
                    }
                }
            }
        };
        lib.check(rc, c.name())?;
    }
    // SAFETY: closes the group opened above.
    lib.check(unsafe { (lib.group_end)() }, "ncclGroupEnd")
}

/// Checks the result once, issues `o.warmup` calls, then times `o.iters` calls: (us per call on the slowest rank, correct).
#[allow(clippy::too_many_arguments)]
fn measure(lib: &Lib, o: &Opts, c: Coll, comms: &[Comm], ranks: &[Rank], count: usize, dtype: c_int, es: usize) -> Result<(f64, bool), String> {
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: the receive buffer holds max_count elements, at least recv_len; poisoned so that
        // unwritten output shows.
        unsafe { ck(cu::cuMemsetD8Async(rk.recv, 0xff, recv_len(c, count, ranks.len()) * es, rk.stream), "cuMemsetD8Async")? };
    }
    issue(lib, c, comms, ranks, count, dtype)?;
    let ok = check(c, ranks, count, es, o.bf16)?;
    // A single timed pass of 20 calls after 3 untimed ones put 8 B AllReduce at 19 us where the
    // next sizes took 7 (2 x H200, 2026-11-30): now 20 and 100, as the harness's perf runs (-w 20 -n 100).
    for _ in 0..o.warmup {
        issue(lib, c, comms, ranks, count, dtype)?;
    }
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: a live event and stream.
        unsafe { ck(cu::cuEventRecord(rk.start, rk.stream), "cuEventRecord")? };
    }
    for _ in 0..o.iters {
        issue(lib, c, comms, ranks, count, dtype)?;
    }
    let mut us = 0.0f64;
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut ms = 0.0f32;
        // SAFETY: live events of this context, recorded on the rank's stream.
        unsafe {
            ck(cu::cuEventRecord(rk.stop, rk.stream), "cuEventRecord")?;
            ck(cu::cuEventSynchronize(rk.stop), "cuEventSynchronize")?;
            ck(cu::cuEventElapsedTime_v2(&mut ms, rk.start, rk.stop), "cuEventElapsedTime")?;
        }
        us = us.max(ms as f64 * 1e3 / o.iters as f64);
    }
    Ok((us, ok))
}

/// Elements of a rank's receive buffer that `c` writes.
fn recv_len(c: Coll, count: usize, n: usize) -> usize {
    match c {
        Coll::AllGather | Coll::AlltoAll => count * n,
        _ => count,
    }
}

/// Reads every rank's output back and compares it with what the collective must give.
fn check(c: Coll, ranks: &[Rank], count: usize, es: usize, bf16: bool) -> Result<bool, String> {
    let n = ranks.len();
    let sum = |i: usize| (0..n).map(|q| input(q, i)).sum::<f32>();
    for (r, rk) in ranks.iter().enumerate() {
        if c == Coll::Reduce && r != 0 {
            continue; // only the root's output is defined
        }
        let len = recv_len(c, count, n);
        let mut host = vec![0u8; len * es];
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: the receive buffer holds at least `len` elements.
        unsafe {
            ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
            ck(cu::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), rk.recv, host.len()), "cuMemcpyDtoH")?;
        }
        let good = host.chunks_exact(es).enumerate().all(|(i, b)| {
            let got = if bf16 { f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) } else { f32::from_le_bytes([b[0], b[1], b[2], b[3]]) };
            let want = match c {
                Coll::AllReduce | Coll::Reduce => sum(i),
                Coll::ReduceScatter => sum(r * count + i),
                Coll::AllGather => input(i / count, i % count),
                Coll::Broadcast => input(0, i),
                Coll::AlltoAll => input(i / count, r * count + i % count),
                Coll::SendRecv => input((r + n - 1) % n, i),
            };
            got == want
        });
        if !good {
            return Ok(false);
        }
    }
    Ok(true)
}
