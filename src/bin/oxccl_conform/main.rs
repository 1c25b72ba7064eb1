//! oxccl-conform: the differential conformance fuzzer (docs/testing.md).
//!
//! Draws random cases from a seed over the NCCL contract: every collective and groups of
//! sends/receives, groups mixing them over two communicators, all 12 datatypes, every op with
//! PreMulSum's host and device scalars, counts at and around every threshold of oxccl's selectors
//! and chunk plans, 1 to `--max-ranks` ranks as processes and as several ranks per process (and
//! several per GPU), roots, NCCL's in-place forms, send and receive buffers at independent
//! element offsets with guard bytes around them, eager / CUDA graphs replayed with fresh inputs /
//! nonblocking communicators, and aborts at random points. Every byte of every buffer is checked
//! against a host reference; with `--nccl-lib`, NVIDIA's NCCL runs the same cases in the same
//! call against the same reference (where it fails and oxccl passes, a note says so). A failure is shrunk to a minimal case and printed as a one-line
//! reproduction (`--case '<json>'`).
//!
//! The library under test is opened by path (`--lib`, default liboxccl.so beside this binary), so
//! the same program drives NCCL. Ranks run in child processes of this one (see exec.rs).

mod case;
mod data;
mod exec;
mod gen;
mod nccl;
#[allow(dead_code)]
#[path = "../oxccl_gpu_check/values.rs"]
mod values;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use case::{Case, Kind, Mem, Mode};
use gen::{Boundaries, Space};
use oxccl::gpu::cu;

#[derive(Parser, Debug)]
#[command(name = "oxccl-conform", about = "Differential conformance fuzzer for NCCL-compatible libraries (docs/testing.md)")]
struct Cli {
    /// The library under test (default: liboxccl.so beside this program).
    #[arg(long)]
    lib: Option<String>,
    /// NVIDIA's libnccl.so.2: runs the same cases for comparison (where NCCL can: no aborts, at
    /// most one rank per GPU in a process; ranks sharing a GPU get NCCL_HOSTIDs of their own).
    #[arg(long)]
    nccl_lib: Option<String>,
    /// Every process of the library under test is a host of its own (NCCL_HOSTID), so ranks of
    /// different processes meet over the network path (TCP sockets, or InfiniBand where the
    /// machine has it and NCCL_IB_DISABLE is unset), as on several machines.
    #[arg(long)]
    hosts: bool,
    /// Compare with NCCL on every Nth case only.
    #[arg(long, default_value_t = 1)]
    nccl_every: u32,
    /// The random sequence's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cases to run (per seed; see --keep-going).
    #[arg(long, default_value_t = 300)]
    cases: u32,
    /// After a failure, go on with the next seed until --cases cases ran in all.
    #[arg(long)]
    keep_going: bool,
    /// Stop drawing new cases after this many seconds.
    #[arg(long)]
    time_limit: Option<u64>,
    /// Most ranks of a case.
    #[arg(long, default_value_t = 4)]
    max_ranks: usize,
    /// Layouts as PROCSxRANKS_PER_PROC (default: every one up to --max-ranks).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<String>,
    /// Kinds to draw (allreduce, reducescatter, reduce, allgather, broadcast, alltoall, gather,
    /// scatter, sendrecv; default all).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Modes to draw (eager, graph, nonblocking; default all).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// Buffer kinds to draw (plain, nccl_alloc, registered, nccl_alloc_registered, managed, pool,
    /// pool_registered, chunked, chunked_registered; default all, plain half the time).
    #[arg(long, value_delimiter = ',')]
    mems: Vec<String>,
    /// Percent of cases of 2+ ranks that abort.
    #[arg(long, default_value_t = 4)]
    abort_pct: u32,
    /// Percent of collectives posted with a per-collective config (NCCL 2.32.3's nccl*Config: CTA
    /// bounds and policy, algorithm selection, launch-completion event); 0 never.
    #[arg(long, default_value_t = 20)]
    collcfg_pct: u32,
    /// Percent of cases (without an abort) whose communicators are suspended and resumed before
    /// the work (NCCL 2.29+'s ncclCommSuspend / ncclCommResume; graphs captured before); 0 never.
    #[arg(long, default_value_t = 10)]
    suspend_pct: u32,
    /// Largest buffer of one operation on one rank, bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_bytes: u64,
    /// Most operations in one group.
    #[arg(long, default_value_t = 4)]
    max_group: usize,
    /// Most operations in a coalesced group (one kind, datatype, op and communicator; one case in
    /// six): past 16, oxccl's grouped launches split.
    #[arg(long, default_value_t = 18)]
    max_coalesced: usize,
    /// Seconds a case's streams may take before it counts as a hang.
    #[arg(long, default_value_t = 60)]
    case_timeout: u64,
    /// Most shrinking steps after a failure.
    #[arg(long, default_value_t = 150)]
    shrink_iters: u32,
    /// Most seconds spent shrinking one failure (a hang costs a timeout per step).
    #[arg(long, default_value_t = 120)]
    shrink_secs: u64,
    /// Run this one case (a reproduction line) and nothing else.
    #[arg(long)]
    case: Option<String>,
    /// Run every case of this file (one reproduction line each; `#` starts a comment line).
    #[arg(long)]
    case_file: Option<String>,
    /// Folder for the ranks' logs (stderr, the libraries' own output) and the failures.
    #[arg(long, default_value = "conform-out")]
    out: String,
    /// Print the counts the selectors' boundaries give and exit.
    #[arg(long)]
    list_boundaries: bool,
    /// With --case: time, without a GPU, the host side the case costs process 0's executor (each
    /// of its ranks' uploaded images and reference, per replay, and the comparison) and exit.
    #[arg(long)]
    time_host: bool,
    /// Print the reproduction lines of the first --cases cases --seed draws on a machine of GPUS
    /// GPUs of SMS SMs each (as "GPUS,SMS", e.g. "2,132" for 2 x H200), without running them, and
    /// exit: finds the case behind an executor's "abort case <id>" line (the id is the case's
    /// `seed`) after a run that was cut off.
    #[arg(long, value_name = "GPUS,SMS")]
    list_cases: Option<String>,
    #[arg(long, hide = true)]
    child: bool,
    #[arg(long, hide = true, default_value_t = 0)]
    proc_index: usize,
    #[arg(long, hide = true, default_value_t = 1)]
    procs: usize,
    #[arg(long, hide = true, default_value_t = 1)]
    per_proc: usize,
    #[arg(long, hide = true, default_value_t = 1)]
    ngpus: usize,
}

fn main() {
    let cli = Cli::parse();
    if cli.child {
        let code = match exec::Exec::new(&lib_path(&cli), cli.proc_index, cli.procs, cli.per_proc, cli.ngpus, Duration::from_secs(cli.case_timeout))
            .and_then(|mut e| e.serve())
        {
            Ok(()) => 0,
            Err(e) => {
                exec::say(&format!("FATAL {}", e.replace('\n', " ")));
                3
            }
        };
        std::process::exit(code);
    }
    if cli.time_host {
        let Some(line) = cli.case.as_deref() else {
            eprintln!("oxccl-conform: --time-host needs --case");
            std::process::exit(2);
        };
        match case::Case::from_line(line) {
            Ok(c) => {
                let t = Instant::now();
                exec::host_side(&c);
                println!(
                    "host side of process 0 ({} rank(s), {} replay(s)): {:.2} s; the deadline allows {} s for it",
                    c.per_proc,
                    c.replays.max(1),
                    t.elapsed().as_secs_f64(),
                    host_work_secs(&c)
                );
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("oxccl-conform: {e}");
                std::process::exit(2);
            }
        }
    }
    std::process::exit(match parent(&cli) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("oxccl-conform: {e}");
            2
        }
    });
}

fn lib_path(cli: &Cli) -> String {
    cli.lib.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.with_file_name("liboxccl.so").to_string_lossy().into_owned()
    })
}

fn gpus() -> Result<(usize, u32), String> {
    let mut n = 0;
    let mut sms = 0;
    // Without libcuda.so the driver bindings would panic at the first call: ask first.
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cu::is_culib_present() } {
        return Err("no CUDA driver (libcuda.so not found)".into());
    }
    // SAFETY: out-pointers to locals.
    unsafe {
        if cu::cuInit(0) != cu::CUresult::CUDA_SUCCESS || cu::cuDeviceGetCount(&mut n) != cu::CUresult::CUDA_SUCCESS || n == 0 {
            return Err("no CUDA device".into());
        }
        cu::cuDeviceGetAttribute(&mut sms, cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
    }
    Ok((n as usize, sms.max(1) as u32))
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    serde_json::from_str(&format!("\"{}\"", s.trim().to_lowercase())).map_err(|_| format!("unknown kind {s}"))
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    serde_json::from_str(&format!("\"{}\"", s.trim().to_lowercase())).map_err(|_| format!("unknown mode {s}"))
}

fn parse_mem(s: &str) -> Result<Mem, String> {
    serde_json::from_str(&format!("\"{}\"", s.trim().to_lowercase())).map_err(|_| format!("unknown buffer kind {s}"))
}

fn space(cli: &Cli, ngpus: usize, sms: u32) -> Result<Space, String> {
    let layouts = if cli.layouts.is_empty() {
        let mut v = Vec::new();
        for n in 1..=cli.max_ranks.max(1) {
            for k in 1..=n {
                if n % k == 0 {
                    v.push((n / k, k));
                }
            }
        }
        v
    } else {
        cli.layouts
            .iter()
            .map(|l| {
                let (p, k) = l.split_once('x').ok_or_else(|| format!("layout {l}: want PROCSxRANKS"))?;
                Ok((p.parse().map_err(|_| format!("layout {l}"))?, k.parse().map_err(|_| format!("layout {l}"))?))
            })
            .collect::<Result<Vec<(usize, usize)>, String>>()?
    };
    Ok(Space {
        ngpus,
        sms,
        layouts,
        kinds: if cli.kinds.is_empty() { Kind::ALL.to_vec() } else { cli.kinds.iter().map(|k| parse_kind(k)).collect::<Result<_, _>>()? },
        modes: if cli.modes.is_empty() { vec![Mode::Eager, Mode::Graph, Mode::NonBlocking] } else { cli.modes.iter().map(|m| parse_mode(m)).collect::<Result<_, _>>()? },
        mems: if cli.mems.is_empty() { Mem::ALL.to_vec() } else { cli.mems.iter().map(|m| parse_mem(m)).collect::<Result<_, _>>()? },
        abort_pct: cli.abort_pct,
        collcfg_pct: cli.collcfg_pct,
        suspend_pct: cli.suspend_pct,
        max_bytes: cli.max_bytes,
        max_group: cli.max_group,
        max_coalesced: cli.max_coalesced,
    })
}

// ---- executors ------------------------------------------------------------------------------

/// A group of executor processes for one library and layout.
struct Group {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    rx: Receiver<(usize, Option<String>)>,
}

enum Verdict {
    /// Every rank matched the reference (its digests, printed by the executors, are not compared:
    /// two libraries that both match the reference byte for byte agree).
    Pass,
    Fail(String),
    /// The reference library could not start this layout (it is not compared there).
    Skip,
}

impl Group {
    fn spawn(cli: &Cli, lib: &str, tag: &str, procs: usize, per: usize, ngpus: usize, host_ids: bool) -> Result<Group, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let (tx, rx) = channel();
        let mut children = Vec::new();
        let mut stdins = Vec::new();
        let log = Arc::new(Mutex::new(
            File::options().create(true).append(true).open(format!("{}/{tag}-{procs}x{per}.log", cli.out)).map_err(|e| e.to_string())?,
        ));
        for p in 0..procs {
            let mut cmd = Command::new(&exe);
            cmd.args(["--child", "--lib", lib])
                .args(["--proc-index", &p.to_string(), "--procs", &procs.to_string(), "--per-proc", &per.to_string(), "--ngpus", &ngpus.to_string()])
                .args(["--case-timeout", &cli.case_timeout.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(File::options().create(true).append(true).open(format!("{}/{tag}-{procs}x{per}.p{p}.stderr", cli.out)).map_err(|e| e.to_string())?);
            if host_ids {
                cmd.env("NCCL_HOSTID", format!("oxccl-conform-host-{p}"));
            }
            let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
            stdins.push(child.stdin.take().expect("piped"));
            let out = child.stdout.take().expect("piped");
            let (tx, log) = (tx.clone(), log.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    match line.strip_prefix("@@OXC ") {
                        Some(m) => {
                            if tx.send((p, Some(m.to_string()))).is_err() {
                                break;
                            }
                        }
                        None => {
                            let _ = writeln!(log.lock().expect("log"), "[p{p}] {line}");
                        }
                    }
                }
                let _ = tx.send((p, None));
            });
            children.push(child);
        }
        let mut g = Group { children, stdins, rx };
        let mut ready = 0;
        let deadline = Instant::now() + Duration::from_secs(cli.case_timeout + 60);
        while ready < procs {
            let e = match g.next(deadline) {
                Ok((_, m)) if m == "READY" => {
                    ready += 1;
                    continue;
                }
                Ok((p, m)) => format!("{tag} {procs}x{per}: process {p} said {m:?} while starting"),
                Err(e) => e,
            };
            // The others may be inside a communicator's initialisation, waiting for the one
            // that failed: they would hold their GPU contexts until the library's timeout.
            g.kill();
            return Err(e);
        }
        Ok(g)
    }

    fn send_all(&mut self, line: &str) {
        for s in &mut self.stdins {
            let _ = writeln!(s, "{line}");
            let _ = s.flush();
        }
    }

    /// The next message that is not an id to relay; Err on EOF or timeout.
    fn next(&mut self, deadline: Instant) -> Result<(usize, String), String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((p, Some(m))) if m.starts_with("ID ") => {
                    if p == 0 {
                        self.send_all(&m);
                    }
                }
                Ok((p, Some(m))) => return Ok((p, m)),
                Ok((p, None)) => return Err(format!("process {p} exited")),
                Err(RecvTimeoutError::Timeout) => return Err("hang: no answer before the deadline".into()),
                Err(RecvTimeoutError::Disconnected) => return Err("every process exited".into()),
            }
        }
    }

    fn run(&mut self, case: &Case, timeout: Duration) -> (Verdict, bool) {
        self.send_all(&format!("CASE {}", case.to_line()));
        let procs = self.children.len();
        let mut results: Vec<Option<Result<(), String>>> = vec![None; procs];
        let mut at_barrier = 0;
        let deadline = Instant::now() + timeout;
        while results.iter().any(Option::is_none) {
            match self.next(deadline) {
                Ok((_, m)) if m == "BARRIER" => {
                    at_barrier += 1;
                    if at_barrier == procs {
                        at_barrier = 0;
                        self.send_all("GO");
                    }
                }
                Ok((p, m)) if m.starts_with("RESULT ok") => results[p] = Some(Ok(())),
                Ok((p, m)) if m.starts_with("RESULT fail ") => results[p] = Some(Err(m["RESULT fail ".len()..].to_string())),
                Ok((p, m)) if m.starts_with("FATAL ") => return (Verdict::Fail(format!("process {p}: {}", &m[6..])), false),
                Ok((p, m)) => return (Verdict::Fail(format!("process {p} said {m:?}")), false),
                Err(e) => return (Verdict::Fail(e), false),
            }
        }
        let fails: Vec<String> = results.iter().filter_map(|r| r.as_ref().and_then(|r| r.as_ref().err().cloned())).collect();
        if fails.is_empty() {
            (Verdict::Pass, true)
        } else {
            (Verdict::Fail(fails.join(" | ")), true)
        }
    }

    fn kill(mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }

    fn quit(mut self) {
        self.send_all("QUIT");
        let t = Instant::now();
        for c in &mut self.children {
            while t.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }
}

/// Executor groups by (library, layout), started on first use and restarted after a fatal case.
struct Pool<'a> {
    cli: &'a Cli,
    ngpus: usize,
    groups: HashMap<(bool, usize, usize), Group>,
    /// Keys, least recently used first.
    lru: Vec<(bool, usize, usize)>,
    /// Layouts the reference library failed to start.
    refused: Vec<(bool, usize, usize)>,
}

/// Most executor groups kept at once: every process holds a CUDA context, and an MPS server
/// serves at most 48 clients per GPU.
const MAX_GROUPS: usize = 6;

impl Pool<'_> {
    fn run(&mut self, nccl: bool, case: &Case) -> Verdict {
        let key = (nccl, case.procs, case.per_proc);
        self.lru.retain(|k| *k != key);
        self.lru.push(key);
        if !self.groups.contains_key(&key) {
            while self.groups.len() >= MAX_GROUPS {
                let old = self.lru.iter().copied().find(|k| self.groups.contains_key(k)).expect("a live group");
                self.lru.retain(|k| *k != old);
                self.groups.remove(&old).expect("live").quit();
            }
            let (lib, tag) = if nccl { (self.cli.nccl_lib.clone().unwrap_or_default(), "nccl") } else { (lib_path(self.cli), "oxccl") };
            // NCCL refuses two ranks of one host on one GPU; as simulated hosts it runs them.
            let host_ids = (nccl && case.nranks() > self.ngpus) || (!nccl && self.cli.hosts);
            if self.refused.contains(&key) {
                return Verdict::Skip;
            }
            let mut spawned = Group::spawn(self.cli, &lib, tag, case.procs, case.per_proc, self.ngpus, host_ids);
            // A client killed with kernels running (a hung case's processes) can leave the MPS
            // server refusing new clients for a while (seen as "MPS server is not ready", or as
            // CUDA_ERROR_UNKNOWN from the executor's first context, before the library under test
            // ran): wait for it before giving up on the run.
            for _ in 0..6 {
                match &spawned {
                    Err(e) if e.contains("MPS server is not ready") || e.contains("FATAL cuDevicePrimaryCtxRetain") => {
                        println!("  note: the GPU refused a new client ({e}); starting {tag} {}x{} again in 5 s", case.procs, case.per_proc);
                        std::thread::sleep(Duration::from_secs(5));
                        spawned = Group::spawn(self.cli, &lib, tag, case.procs, case.per_proc, self.ngpus, host_ids);
                    }
                    _ => break,
                }
            }
            match spawned {
                Ok(g) => {
                    self.groups.insert(key, g);
                }
                Err(e) if nccl => {
                    println!("  note: NCCL cannot run {}x{}: {e}; not compared there", case.procs, case.per_proc);
                    self.refused.push(key);
                    return Verdict::Skip;
                }
                Err(e) => return Verdict::Fail(format!("starting the ranks: {e}")),
            }
        }
        // An abort case adds its own bounded waits (20 s drains, re-initialisation); a large
        // case adds its host reference (tens of millions of elements per rank and replay).
        let timeout = Duration::from_secs(self.cli.case_timeout + if case.abort.is_some() { 90 } else { 20 } + host_work_secs(case));
        let g = self.groups.get_mut(&key).expect("just inserted");
        let (v, alive) = g.run(case, timeout);
        if !alive {
            self.groups.remove(&key).expect("present").kill();
        }
        v
    }

    fn close(&mut self) {
        for (_, g) in self.groups.drain() {
            g.quit();
        }
    }
}

/// A bound on the seconds one executor spends on a case's host side: generating every rank's
/// inputs and the reference for each of its ranks and replays, about 10 million elements a
/// second on one core.
fn host_work_secs(case: &Case) -> u64 {
    let n = (case.procs * case.per_proc) as u64;
    let elems: u64 = case.ops.iter().map(|o| o.count * (n + 2)).sum();
    elems * case.per_proc as u64 * case.replays.max(1) as u64 / 10_000_000
}

/// NCCL can run the case: no aborts (whose outcome is a property, not a result), ranks of one
/// process on distinct GPUs.
fn nccl_can_run(case: &Case, ngpus: usize) -> bool {
    case.abort.is_none() && case.per_proc <= ngpus
}

#[derive(Default)]
struct Tally {
    cases: u64,
    nccl_cases: u64,
    by_kind: BTreeMap<String, u64>,
    failures: Vec<String>,
    nccl_notes: Vec<String>,
}

fn record(t: &mut Tally, case: &Case) {
    t.cases += 1;
    for o in &case.ops {
        *t.by_kind.entry(format!("{:?}", o.kind)).or_default() += 1;
        if o.mem != Mem::Plain {
            *t.by_kind.entry(format!("buffers {:?}", o.mem)).or_default() += 1;
        }
    }
    *t.by_kind.entry(format!("mode {:?}", case.mode)).or_default() += 1;
    *t.by_kind.entry(format!("{} ranks", case.nranks())).or_default() += 1;
    if case.abort.is_some() {
        *t.by_kind.entry("abort".into()).or_default() += 1;
    }
    if case.ops.len() > 1 {
        *t.by_kind.entry("groups of 2+".into()).or_default() += 1;
    }
    if case.default_stream {
        *t.by_kind.entry("default stream".into()).or_default() += 1;
    }
    if case.suspend {
        *t.by_kind.entry("suspend".into()).or_default() += 1;
    }
    if case.ops.iter().any(|o| o.unreg != 0) {
        *t.by_kind.entry("registered on some ranks".into()).or_default() += 1;
    }
    if case.ops.iter().any(|o| o.side != 0) {
        *t.by_kind.entry("second stream".into()).or_default() += 1;
    }
    if case.capture_mode == 1 {
        *t.by_kind.entry("global capture".into()).or_default() += 1;
    }
    if case.mixed_capture {
        *t.by_kind.entry("mixed capture".into()).or_default() += 1;
    }
}

fn parent(cli: &Cli) -> Result<bool, String> {
    std::fs::create_dir_all(&cli.out).map_err(|e| format!("{}: {e}", cli.out))?;
    let listing = cli
        .list_cases
        .as_deref()
        .map(|v| {
            let (g, s) = v.split_once(',').ok_or_else(|| format!("--list-cases {v}: want GPUS,SMS"))?;
            Ok::<_, String>((g.parse().map_err(|_| format!("--list-cases {v}"))?, s.parse().map_err(|_| format!("--list-cases {v}"))?))
        })
        .transpose()?;
    let (ngpus, sms) = match listing {
        Some(gs) => gs,
        None if cli.list_boundaries => (1, 132),
        None => gpus()?,
    };
    let sp = Arc::new(space(cli, ngpus, sms)?);
    if cli.list_boundaries {
        let b = Boundaries::probe(&sp);
        for &(p, k) in &sp.layouts {
            for kind in &sp.kinds {
                println!("{:?} {} ranks, 4-byte elements: {:?}", kind, p * k, b.get(*kind, 4, p * k));
            }
        }
        return Ok(true);
    }
    let lib = lib_path(cli);
    println!("oxccl-conform: library {lib}{}", cli.nccl_lib.as_ref().map_or(String::new(), |n| format!(", reference NCCL {n}")));
    println!("  {ngpus} GPU(s) of {sms} SMs; layouts {:?}; modes {:?}; buffers {:?}; abort {}%", sp.layouts, sp.modes, sp.mems, sp.abort_pct);
    let pool = RefCell::new(Pool { cli, ngpus, groups: HashMap::new(), lru: Vec::new(), refused: Vec::new() });
    let tally = RefCell::new(Tally::default());
    let nccl_turn = RefCell::new(0u32);
    let mps_down = RefCell::new(false);
    // One case, checked (and compared with NCCL when it can run it): Err(why) when oxccl fails.
    let check = |case: &Case, compare: bool| -> Result<(), String> {
        let v = pool.borrow_mut().run(false, case);
        let compare = compare && cli.nccl_lib.is_some() && nccl_can_run(case, ngpus) && {
            let mut k = nccl_turn.borrow_mut();
            *k += 1;
            (*k).is_multiple_of(cli.nccl_every.max(1))
        };
        if compare {
            tally.borrow_mut().nccl_cases += 1;
            let nv = pool.borrow_mut().run(true, case);
            match (&v, &nv) {
                (Verdict::Pass, Verdict::Fail(e)) => {
                    let m = format!("NCCL fails where oxccl passes: {e}\n    case: {}", case.to_line());
                    println!("  note: {m}");
                    tally.borrow_mut().nccl_notes.push(m);
                }
                (Verdict::Fail(_), Verdict::Fail(e)) => {
                    let m = format!("NCCL fails too (a reference or contract question): {e}\n    case: {}", case.to_line());
                    println!("  note: {m}");
                    tally.borrow_mut().nccl_notes.push(m);
                }
                _ => {}
            }
        }
        if let Verdict::Fail(e) = &v {
            if e.contains("MPS server is not ready") {
                // A client faulted and took the MPS server down: nothing after this means anything.
                println!("oxccl-conform: the GPU's MPS server failed (a client faulted earlier); stopping: every later case would fail");
                *mps_down.borrow_mut() = true;
            }
        }
        match v {
            Verdict::Pass | Verdict::Skip => Ok(()),
            Verdict::Fail(e) => Err(e),
        }
    };
    let repro = |case: &Case| format!("{} --lib {lib} --case '{}'", std::env::args().next().unwrap_or_default(), case.to_line());

    let listed: Option<Vec<(String, String)>> = match (&cli.case, &cli.case_file) {
        (Some(line), _) => Some(vec![("case".into(), line.clone())]),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("{f}: {e}"))?
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map(|(i, l)| (format!("{f}:{}", i + 1), l.trim().to_string()))
                .collect(),
        ),
        (None, None) => None,
    };
    if let Some(cases) = listed {
        let mut all = true;
        for (name, line) in cases {
            let case = Case::from_line(&line).map_err(|e| format!("{name}: {e}"))?;
            record(&mut tally.borrow_mut(), &case);
            let t = Instant::now();
            match check(&case, true) {
                Ok(()) => println!("PASS {name} ({:.1} s)", t.elapsed().as_secs_f64()),
                Err(e) => {
                    all = false;
                    println!("FAIL {name}: {e}");
                }
            }
        }
        pool.borrow_mut().close();
        for n in &tally.borrow().nccl_notes {
            println!("  NCCL: {n}");
        }
        return Ok(all);
    }

    let t0 = Instant::now();
    let bounds = Arc::new(Boundaries::probe(&sp));
    println!("  {} boundary counts from oxccl's selectors ({:.1} s)", bounds.len(), t0.elapsed().as_secs_f64());
    let strategy = gen::case_strategy(sp.clone(), bounds);
    if listing.is_some() {
        // The runner of the loop below with the same configuration and seed, so the same draws.
        let config = PtConfig { cases: cli.cases, failure_persistence: None, ..PtConfig::default() };
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&cli.seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        let listed = runner.run(&strategy, |case| {
            println!("{:016x} {}", case.seed, case.to_line());
            Ok(())
        });
        return listed.map(|()| true).map_err(|e| format!("listing cases: {e}"));
    }
    let deadline = cli.time_limit.map(|s| t0 + Duration::from_secs(s));
    let out_of_time = || deadline.is_some_and(|d| Instant::now() > d) || *mps_down.borrow();
    let mut seed = cli.seed;
    let mut ok = true;
    let mut fails = File::create(format!("{}/failures.txt", cli.out)).map_err(|e| e.to_string())?;
    loop {
        let before = tally.borrow().cases;
        let left = if cli.keep_going { (cli.cases as u64).saturating_sub(before) } else { cli.cases as u64 };
        if left == 0 || out_of_time() {
            break;
        }
        let config = PtConfig {
            cases: left as u32,
            max_shrink_iters: cli.shrink_iters,
            max_shrink_time: (cli.shrink_secs * 1000).min(u32::MAX as u64) as u32,
            max_global_rejects: 100_000,
            failure_persistence: None,
            ..PtConfig::default()
        };
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        let shrinking = RefCell::new(false);
        let result = runner.run(&strategy, |case| {
            if out_of_time() {
                return Err(TestCaseError::reject("time limit"));
            }
            let first = !*shrinking.borrow();
            if first {
                record(&mut tally.borrow_mut(), &case);
                let n = tally.borrow().cases;
                if n % 50 == 0 {
                    println!("  {n} cases ({:.0} s)", t0.elapsed().as_secs_f64());
                }
            }
            check(&case, first).map_err(|e| {
                if first {
                    println!("  case failed (seed {seed}), shrinking: {e}\n    {}", case.to_line());
                }
                *shrinking.borrow_mut() = true;
                TestCaseError::fail(e)
            })
        });
        match result {
            Ok(()) => {}
            Err(TestError::Fail(why, case)) => {
                ok = false;
                let m = format!("FAIL (seed {seed}): {why}\n  minimal case: {}\n  reproduce: {}", case.to_line(), repro(&case));
                println!("{m}");
                let _ = writeln!(fails, "{m}\n");
                tally.borrow_mut().failures.push(m);
            }
            Err(TestError::Abort(why)) => {
                if !out_of_time() {
                    return Err(format!("the runner stopped: {why}"));
                }
            }
        }
        if !cli.keep_going {
            break;
        }
        seed += 1;
    }
    pool.borrow_mut().close();
    let t = tally.borrow();
    println!("\n{} cases in {:.0} s ({} compared with NCCL); seeds {}..={seed}", t.cases, t0.elapsed().as_secs_f64(), t.nccl_cases, cli.seed);
    println!("  covered: {}", t.by_kind.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "));
    for n in &t.nccl_notes {
        println!("  NCCL: {n}");
    }
    println!("{} failure(s)", t.failures.len());
    Ok(ok && t.failures.is_empty())
}
