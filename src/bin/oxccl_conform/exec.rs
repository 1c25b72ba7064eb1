//! The executor: one child process holding `per_proc` ranks of every layout's communicators, run
//! by the parent over stdin/stdout (lines starting with `@@OXC `; anything else on stdout is the
//! library's own output and is logged). It runs each case it is sent on its ranks, checks every
//! byte of every buffer it allocated against the host reference, and answers with a verdict.
//!
//! Messages, child to parent: `ID <hex>` (process 0: unique ids for everybody), `READY`,
//! `BARRIER`, `RESULT ok <digest per rank>` / `RESULT fail <why>`, `FATAL <why>` (then it exits:
//! an error that may have left the process or its GPU state unusable). Parent to child:
//! `ID <hex>`, `CASE <json>`, `GO` (after a barrier), `QUIT`.

use std::borrow::Cow;
use std::ffi::{c_int, c_void};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use oxccl::gpu::cu;

use crate::case::{layout, scalar_value, Allocator, CallCfg, Case, Kind, Mem, Mode, Op, OpCase, OpExt, Stop, SELECTIONS};
use crate::data::{compare, digest, expected_images, initial_images};
use crate::nccl::{coll_config_initializer, CollConfig, Comm, Config, Nccl, UniqueId, IN_PROGRESS, SHRINK_ABORT, SUCCESS};
use crate::values::Codec;

/// Communicator slots per rank: (CTA policy 0, 1, 2) x (blocking, nonblocking) x (comm 0, comm 1).
const SLOTS: usize = 18;
/// The longest one ncclCommAbort or ncclCommRevoke of a stopping rank may take (kernels told to
/// stop leave within microseconds of starting; the rest is slack for a loaded machine).
const STOP_CALL_BOUND: Duration = Duration::from_secs(5);

/// The communicator slot of a case's operation: (CTA policy, nonblocking, comm 0 or 1).
/// A case's per-collective config as the library takes it (`event`: the rank's CUevent, or 0).
fn call_config(c: &CallCfg, event: usize) -> CollConfig {
    const UNSET: c_int = c_int::MIN;
    let mut cc = coll_config_initializer();
    let set = |v: u8| if v == 0 { UNSET } else { c_int::from(v) };
    cc.maxCTAs = set(c.max_ctas);
    cc.minCTAs = set(c.min_ctas);
    cc.CTAPolicy = if c.policy == 0 { UNSET } else { c_int::from(c.policy) - 1 };
    // SELECTIONS are static strings; NUL-terminated copies live as long as the process.
    static TEXTS: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let texts = TEXTS.get_or_init(|| SELECTIONS.iter().map(|s| std::ffi::CString::new(*s).expect("no NUL")).collect());
    cc.algSelection = if c.sel == 0 { std::ptr::null() } else { texts[c.sel as usize].as_ptr() };
    cc.forceAlgSelection = c_int::from(c.force);
    cc.userProfilerTag = 0x0c0f_fee0 | u64::from(c.sel);
    cc.launchCompletionEvent = event as *mut c_void;
    cc
}

fn slot_of(cta_policy: u8, nonblocking: bool, comm: u8) -> usize {
    cta_policy as usize * 6 + nonblocking as usize * 3 + comm as usize
}

/// Operation `o` as rank `g` of an `n`-rank job sees it: in its communicator's numbering, with
/// that communicator's size and g's rank in it. Communicator 1 of every slot is split from
/// communicator 0 with the ranks reversed (ncclCommSplit, key n - 1 - g), so a rank's number is
/// not its place in the job; communicator 2 is split by parity (color g % 2, key g: ranks 0, 2,
/// 4, ... and 1, 3, ...), so each half runs the operation on its own sub-communicator, roots and
/// peers taken modulo its size, as PyTorch's and Megatron's process groups do. Cases speak of
/// communicator ranks.
fn view(o: &OpCase, n: usize, g: usize) -> (Cow<'_, OpCase>, usize, usize) {
    match o.comm {
        1 => (Cow::Borrowed(o), n, n - 1 - g),
        2 => {
            let m = half_size(n, g);
            let mut v = o.clone();
            v.root %= m;
            for t in &mut v.transfers {
                t.src %= m;
                t.dst %= m;
            }
            (Cow::Owned(v), m, g / 2)
        }
        _ => (Cow::Borrowed(o), n, g),
    }
}

/// Ranks of an `n`-rank job with rank `g`'s parity: the size of g's communicator 2.
fn half_size(n: usize, g: usize) -> usize {
    (n + 1 - g % 2) / 2
}

/// Rank `g`'s color and key in the split that makes communicator `c` (1 or 2) of a slot.
fn split_of(c: usize, n: usize, g: usize) -> (c_int, c_int) {
    if c == 1 {
        (0, (n - 1 - g) as c_int)
    } else {
        ((g % 2) as c_int, g as c_int)
    }
}

/// How slot `s`'s communicators are made: (blocking, CTA policy); `slot_of`'s inverse.
fn slot_config(s: usize) -> (bool, u8) {
    (s % 6 < 3, (s / 6) as u8)
}

pub fn say(msg: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "@@OXC {msg}");
    let _ = o.flush();
}

/// What the executor of process 0 computes on the host for `case`, without a GPU (`--time-host`):
/// every local rank's uploaded images and expected images per replay, and the comparison of
/// read-back buffers with the latter (here the expected images themselves).
pub fn host_side(case: &Case) {
    let n = case.nranks();
    for replay in 0..case.replays.max(1) as usize {
        for (opi, o) in case.ops.iter().enumerate() {
            let codec = Codec::new(o.dt());
            for rank in 0..case.per_proc {
                let (ov, m, me) = view(o, n, rank);
                std::hint::black_box(initial_images(case.seed, opi, &ov, m, me, replay, &codec));
                let l = layout(&ov, m, me);
                for (a, e) in expected_images(case.seed, opi, &ov, m, me, replay, &codec).iter().enumerate() {
                    std::hint::black_box(compare(&ov, m, &e.image, e, &l.allocs[a], "self"));
                }
            }
        }
    }
}

/// Where an abort case is, on stderr (the `<layout>.p<N>.stderr` file of --out): a case that
/// hangs shows its last step there.
fn step(case: &Case, what: &str) {
    eprintln!("abort case {:016x}: {what}", case.seed);
}

fn cu_check(rc: cu::CUresult, what: &str) -> Result<(), String> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {}", cu_name(rc)))
    }
}

pub fn cu_name(rc: cu::CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: out-pointer; the driver returns a static string or an error.
    unsafe { cu::cuGetErrorString(rc, &mut p) };
    if p.is_null() {
        format!("{rc:?}")
    } else {
        // SAFETY: a static NUL-terminated string from the driver.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

struct Rank {
    rank: usize,
    dev: cu::CUdevice,
    ctx: cu::CUcontext,
    stream: cu::CUstream,
    /// The second stream, for operations a case posts there (`OpCase::side`).
    side: cu::CUstream,
    comms: [Comm; SLOTS],
}

pub struct Exec {
    nccl: Nccl,
    proc_: usize,
    nranks: usize,
    ranks: Vec<Rank>,
    stdin: std::sync::Mutex<Box<dyn BufRead + Send>>,
    case_timeout: Duration,
}

/// One device allocation of the case.
struct Alloc {
    ptr: cu::CUdeviceptr,
    bytes: u64,
    /// `Mem::Chunked`: the reserved range its chunks are mapped into (0 otherwise), and the bytes
    /// of it mapped (from its start).
    va: cu::CUdeviceptr,
    reserved: usize,
    mapped: usize,
    /// `Mem::Pool`: the stream it was allocated on, and is freed on.
    stream: usize,
}

impl Alloc {
    /// `bytes` from `mem`'s allocator on the current context (device `dev`); `stream` is the
    /// rank's stream (pool allocations are stream-ordered; this waits for it).
    fn new(mem: Mem, bytes: u64, dev: cu::CUdevice, stream: cu::CUstream) -> Result<Alloc, String> {
        let mut a = Alloc { ptr: 0, bytes, va: 0, reserved: 0, mapped: 0, stream: 0 };
        let b = bytes as usize;
        // SAFETY (every call below): out-pointers to locals; the current context is the rank's.
        match mem.allocator() {
            Allocator::CuMem => cu_check(unsafe { cu::cuMemAlloc_v2(&mut a.ptr, b) }, "cuMemAlloc")?,
            Allocator::NcclMem | Allocator::Window => unreachable!("ncclMemAlloc goes through the library"),
            Allocator::Managed => cu_check(
                unsafe { cu::cuMemAllocManaged(&mut a.ptr, b, cu::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32) },
                "cuMemAllocManaged",
            )?,
            Allocator::Pool => {
                // The pool keeps freed blocks (PyTorch's cudaMallocAsync backend sets the same
                // threshold), so a later case's allocation gets a freed block's address back.
                let mut pool = std::ptr::null_mut();
                let mut keep = u64::MAX;
                cu_check(unsafe { cu::cuDeviceGetDefaultMemPool(&mut pool, dev) }, "cuDeviceGetDefaultMemPool")?;
                cu_check(
                    unsafe { cu::cuMemPoolSetAttribute(pool, cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut keep as *mut u64).cast()) },
                    "cuMemPoolSetAttribute",
                )?;
                cu_check(unsafe { cu::cuMemAllocAsync(&mut a.ptr, b, stream) }, "cuMemAllocAsync")?;
                a.stream = stream as usize;
                // Waited for within a bound, as every other stream wait here: a stream still busy
                // with an earlier case's hung work fails this case instead of the executor.
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    // SAFETY: the rank's live stream.
                    match unsafe { cu::cuStreamQuery(stream) } {
                        cu::CUresult::CUDA_SUCCESS => break,
                        cu::CUresult::CUDA_ERROR_NOT_READY if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(50)),
                        cu::CUresult::CUDA_ERROR_NOT_READY => return Err("hang: the stream did not drain within 20 s of cuMemAllocAsync".into()),
                        rc => return Err(format!("cuMemAllocAsync: the stream reports {}", cu_name(rc))),
                    }
                }
            }
            Allocator::Chunked => a.chunked(dev)?,
        }
        Ok(a)
    }

    /// Maps chunks of the allocation granularity back to back and places the buffer so that it
    /// ends in a later chunk than it starts in once it is at least 512 bytes: its last half (up
    /// to a chunk) lies past the first chunk boundary.
    fn chunked(&mut self, dev: cu::CUdevice) -> Result<(), String> {
        // SAFETY: a zeroed CUmemAllocationProp is valid; the fields that matter are set below.
        let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location = cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev };
        prop.requestedHandleTypes = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        let mut gran = 0usize;
        let g = cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
        // SAFETY: out-pointer to a local; prop initialised.
        cu_check(unsafe { cu::cuMemGetAllocationGranularity(&mut gran, &prop, g) }, "cuMemGetAllocationGranularity")?;
        let gran = gran.max(4096);
        let tail = ((self.bytes as usize / 2) & !255).clamp(256, gran);
        let lead = gran - tail;
        let chunks = (lead + self.bytes as usize).div_ceil(gran).max(1);
        let span = chunks * gran;
        let mut va = 0;
        // SAFETY: out-pointer to a local.
        cu_check(unsafe { cu::cuMemAddressReserve(&mut va, span, gran, 0, 0) }, "cuMemAddressReserve")?;
        self.va = va;
        self.reserved = span;
        for k in 0..chunks {
            let mut h = 0;
            // SAFETY: out-pointer to a local; prop initialised.
            let rc = unsafe { cu::cuMemCreate(&mut h, gran, &prop, 0) };
            if rc != cu::CUresult::CUDA_SUCCESS {
                self.free();
                return Err(format!("cuMemCreate: {}", cu_name(rc)));
            }
            // SAFETY: [va + k*gran, +gran) is reserved and unmapped; h covers gran bytes. The
            // mapping keeps the memory once the handle is released.
            let rc = unsafe { cu::cuMemMap(va + (k * gran) as u64, gran, 0, h, 0) };
            unsafe { cu::cuMemRelease(h) };
            if rc != cu::CUresult::CUDA_SUCCESS {
                self.free();
                return Err(format!("cuMemMap: {}", cu_name(rc)));
            }
            self.mapped += gran;
        }
        let access = cu::CUmemAccessDesc { location: prop.location, flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        // SAFETY: the whole range is mapped; one descriptor.
        let rc = unsafe { cu::cuMemSetAccess(va, span, &access, 1) };
        if rc != cu::CUresult::CUDA_SUCCESS {
            self.free();
            return Err(format!("cuMemSetAccess: {}", cu_name(rc)));
        }
        self.ptr = va + lead as u64;
        Ok(())
    }

    /// Frees an allocation `new` made (the current context is its rank's); no pending work uses it.
    fn free(&self) {
        // SAFETY: made by `new` as its fields say; nothing uses it any more.
        unsafe {
            if self.va != 0 {
                if self.mapped != 0 {
                    cu::cuMemUnmap(self.va, self.mapped);
                }
                cu::cuMemAddressFree(self.va, self.reserved);
            } else if self.stream != 0 {
                // Stream-ordered, so the pool hands the block to the next case's allocation.
                cu::cuMemFreeAsync(self.ptr, self.stream as cu::CUstream);
            } else if self.ptr != 0 {
                cu::cuMemFree_v2(self.ptr);
            }
        }
    }
}

/// A rank's part of one operation: its allocations (made as `mem` says, with their registration
/// handles), and its PreMulSum op.
struct Part {
    allocs: Vec<Alloc>,
    mem: Mem,
    handles: Vec<usize>,
    op: c_int,
    scalar: Option<cu::CUdeviceptr>,
    /// The operation's launchCompletionEvent on this rank (a CUevent; 0: none).
    event: usize,
    /// `Mem::Window`: the one ncclMemAlloc allocation holding `allocs` (0: none), its bytes (the
    /// same on every rank), and its window (an ncclWindow_t; 0 until registered or once
    /// deregistered).
    base: u64,
    win_bytes: u64,
    window: usize,
}

/// Raw handles a thread may carry (the driver and NCCL handles are valid from any thread).
struct Sendable<T>(T);
// SAFETY: see above; the executor never touches them concurrently from two threads but for abort,
// which NCCL allows from another thread.
unsafe impl<T> Send for Sendable<T> {}
unsafe impl<T> Sync for Sendable<T> {}

impl Exec {
    pub fn new(lib: &str, proc_: usize, procs: usize, per_proc: usize, ngpus: usize, case_timeout: Duration) -> Result<Exec, String> {
        let nccl = Nccl::open(lib)?;
        if proc_ == 0 {
            eprintln!("oxccl-conform executor: {lib}, NCCL version code {}", nccl.version());
        }
        // SAFETY: cuInit has no preconditions.
        cu_check(unsafe { cu::cuInit(0) }, "cuInit")?;
        let mut ranks = Vec::new();
        for l in 0..per_proc {
            let rank = proc_ * per_proc + l;
            let mut dev = 0;
            let mut ctx = std::ptr::null_mut();
            let mut stream = std::ptr::null_mut();
            let mut side = std::ptr::null_mut();
            // SAFETY: out-pointers to locals; the ordinal is below the device count.
            unsafe {
                cu_check(cu::cuDeviceGet(&mut dev, (rank % ngpus.max(1)) as c_int), "cuDeviceGet")?;
                cu_check(cu::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
                cu_check(cu::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
                cu_check(cu::cuStreamCreate(&mut stream, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32), "cuStreamCreate")?;
                cu_check(cu::cuStreamCreate(&mut side, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32), "cuStreamCreate")?;
            }
            ranks.push(Rank { rank, dev, ctx, stream, side, comms: [std::ptr::null_mut(); SLOTS] });
        }
        Ok(Exec {
            nccl,
            proc_,
            nranks: procs * per_proc,
            ranks,
            stdin: std::sync::Mutex::new(Box::new(std::io::BufReader::new(std::io::stdin()))),
            case_timeout,
        })
    }

    fn read_line(&self) -> Result<String, String> {
        let mut s = String::new();
        match self.stdin.lock().map_err(|_| "stdin lock poisoned")?.read_line(&mut s) {
            Ok(0) => Err("the parent went away".into()),
            Ok(_) => Ok(s.trim_end().to_string()),
            Err(e) => Err(format!("reading stdin: {e}")),
        }
    }

    fn expect(&self, word: &str) -> Result<String, String> {
        let l = self.read_line()?;
        l.strip_prefix(word).map(|r| r.trim().to_string()).ok_or_else(|| format!("expected {word}, got {l:?}"))
    }

    pub fn barrier(&self) -> Result<(), String> {
        say("BARRIER");
        self.expect("GO").map(|_| ())
    }

    fn set_ctx(&self, i: usize) {
        // SAFETY: a retained primary context.
        unsafe { cu::cuCtxSetCurrent(self.ranks[i].ctx) };
    }

    /// Creates every rank's communicators, SLOTS of them (ids from process 0, through the parent).
    pub fn init_comms(&mut self) -> Result<(), String> {
        if self.proc_ == 0 {
            let mut hex = String::new();
            for s in 0..SLOTS {
                let mut id = UniqueId([0; 128]);
                // Only communicator 0 of a slot is made from an id (1 and 2 are split from it):
                // each id holds a rendezvous root open in the library until its timeout.
                if s % 3 == 0 {
                    // SAFETY: out-pointer to a local id.
                    let rc = unsafe { (self.nccl.get_unique_id)(&mut id) };
                    if rc != SUCCESS {
                        return Err(self.nccl.describe("ncclGetUniqueId", rc, std::ptr::null_mut()));
                    }
                }
                hex.extend(id.0.iter().map(|b| format!("{b:02x}")));
            }
            say(&format!("ID {hex}"));
        }
        let hex = self.expect("ID")?;
        if hex.len() != SLOTS * 256 {
            return Err("bad ID line".into());
        }
        let byte = |i: usize| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string());
        for s in 0..SLOTS {
            let mut id = UniqueId([0; 128]);
            for (k, b) in id.0.iter_mut().enumerate() {
                *b = byte(s * 128 + k)?;
            }
            let (blocking, policy) = slot_config(s);
            if s == 0 && self.nranks == 1 {
                // A one-rank job's first communicator as single-process programs make it.
                let mut ord = 0;
                // SAFETY: the current context is this rank's; out-pointers to locals.
                unsafe { cu::cuCtxGetDevice(&mut ord) };
                let mut comm: Comm = std::ptr::null_mut();
                // SAFETY: room for one handle, a one-entry device list.
                let rc = unsafe { (self.nccl.comm_init_all)(&mut comm, 1, &ord) };
                if rc != SUCCESS {
                    return Err(self.nccl.describe("ncclCommInitAll", rc, comm));
                }
                self.ranks[0].comms[0] = comm;
                continue;
            }
            // SAFETY: group calls have no preconditions.
            unsafe { (self.nccl.group_start)() };
            for i in 0..self.ranks.len() {
                self.set_ctx(i);
                let mut cfg = Config::with_policy(blocking, policy);
                let mut comm: Comm = std::ptr::null_mut();
                let rank = self.ranks[i].rank;
                let c = s % 3;
                if c != 0 {
                    // Communicators 1 and 2: split from communicator 0 of the slot (ready: waited
                    // for when it was made), as `view` says. In a group the library writes the
                    // handle at ncclGroupEnd, or, nonblocking, once the parent leaves
                    // ncclInProgress: into the rank's slot, which outlives both.
                    let (color, key) = split_of(c, self.nranks, rank);
                    self.ranks[i].comms[s] = std::ptr::null_mut();
                    let out: *mut Comm = &mut self.ranks[i].comms[s];
                    // SAFETY: a live parent; `out` stays valid (self.ranks is not resized); the
                    // config is read during the call.
                    let rc = unsafe { (self.nccl.comm_split)(self.ranks[i].comms[s - c], color, key, out, &mut cfg) };
                    if rc != SUCCESS && rc != IN_PROGRESS {
                        return Err(self.nccl.describe("ncclCommSplit", rc, self.ranks[i].comms[s - c]));
                    }
                    continue;
                } else {
                    // SAFETY: out-pointer and config are locals; the id is by value.
                    let rc = unsafe { (self.nccl.comm_init_rank_config)(&mut comm, self.nranks as c_int, id, rank as c_int, &mut cfg) };
                    if rc != SUCCESS && rc != IN_PROGRESS {
                        return Err(self.nccl.describe("ncclCommInitRankConfig", rc, comm));
                    }
                }
                self.ranks[i].comms[s] = comm;
            }
            // SAFETY: closes the group opened above.
            let rc = unsafe { (self.nccl.group_end)() };
            if rc != SUCCESS && rc != IN_PROGRESS {
                return Err(self.nccl.describe("ncclGroupEnd (init)", rc, std::ptr::null_mut()));
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            if s % 3 != 0 {
                for i in 0..self.ranks.len() {
                    let parent = self.ranks[i].comms[s - s % 3];
                    let st = self.settle(parent, deadline);
                    if st == IN_PROGRESS {
                        return Err(format!("rank {}: hang: ncclCommSplit for slot {s} still in progress after 120 s", self.ranks[i].rank));
                    }
                    if st != SUCCESS {
                        return Err(self.nccl.describe(&format!("rank {}: ncclCommSplit for slot {s}: the parent's state", self.ranks[i].rank), st, parent));
                    }
                    // SAFETY: the library may have written it from its own thread.
                    self.ranks[i].comms[s] = unsafe { std::ptr::read_volatile(&self.ranks[i].comms[s]) };
                    if self.ranks[i].comms[s].is_null() {
                        return Err(format!("rank {}: ncclCommSplit gave no communicator on slot {s}", self.ranks[i].rank));
                    }
                }
            }
            let comms: Vec<Comm> = self.ranks.iter().map(|r| r.comms[s]).collect();
            self.wait_async(&comms, deadline, "init")?;
        }
        Ok(())
    }

    /// Polls ncclCommGetAsyncError until no communicator is in progress; every one must succeed.
    fn wait_async(&self, comms: &[Comm], deadline: Instant, what: &str) -> Result<(), String> {
        for &c in comms {
            match self.settle(c, deadline) {
                SUCCESS => {}
                IN_PROGRESS => return Err(format!("{what}: still ncclInProgress after the deadline")),
                st => return Err(self.nccl.describe(&format!("{what}: async state"), st, c)),
            }
        }
        Ok(())
    }

    /// Polls `c`'s asynchronous state until it is not ncclInProgress (or the deadline passed)
    /// and returns it: a nonblocking communicator's revoke, shrink or finalize completes there.
    fn settle(&self, c: Comm, deadline: Instant) -> c_int {
        loop {
            let mut st: c_int = 0;
            // SAFETY: a live communicator; out-pointer to a local.
            let rc = unsafe { (self.nccl.comm_get_async_error)(c, &mut st) };
            // A failing query answers for the state (an unknown handle is not in progress).
            if rc != SUCCESS {
                return rc;
            }
            if st != IN_PROGRESS || Instant::now() > deadline {
                return st;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits for every local rank's two streams and its context's legacy default stream (where a
    /// case with `default_stream` issued its work), each within the deadline.
    fn sync_streams(&self, deadline: Instant) -> Result<(), String> {
        for (i, r) in self.ranks.iter().enumerate() {
            self.sync_stream(r, deadline)?;
            self.set_ctx(i);
            self.sync_query(r, r.side, deadline)?;
            self.sync_query(r, std::ptr::null_mut(), deadline)?;
        }
        Ok(())
    }

    fn sync_stream(&self, r: &Rank, deadline: Instant) -> Result<(), String> {
        self.sync_query(r, r.stream, deadline)
    }

    /// Polls `stream` (of rank `r`'s context; NULL: the current context's legacy stream) until it
    /// drains, an error, or the deadline.
    fn sync_query(&self, r: &Rank, stream: cu::CUstream, deadline: Instant) -> Result<(), String> {
        loop {
            // SAFETY: a live stream, or the current context's legacy stream.
            let rc = unsafe { cu::cuStreamQuery(stream) };
            if rc == cu::CUresult::CUDA_SUCCESS {
                return Ok(());
            }
            if rc != cu::CUresult::CUDA_ERROR_NOT_READY {
                return Err(format!("rank {}: stream: {}", r.rank, cu_name(rc)));
            }
            if Instant::now() > deadline {
                return Err(format!("rank {}: hang: the stream did not drain within {:?}", r.rank, self.case_timeout));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Copies `src` into local rank `i`'s device memory at `dst` (its context current), on the
    /// rank's stream, and returns once the copy is complete. Not cuMemcpyHtoD: from pageable
    /// memory it may return before its DMA has landed (CUDA's "API synchronization behavior"), and
    /// it runs on the legacy stream, which work on our non-blocking streams does not wait for, so
    /// a kernel launched next could read the allocation's previous contents. A graph replay did
    /// (4 ranks on one GPU, AllGather in place: peers got rank 0's previous input past element 4480).
    fn upload_to(&self, i: usize, dst: cu::CUdeviceptr, src: &[u8]) -> Result<(), String> {
        let r = &self.ranks[i];
        // SAFETY: `dst` holds at least `src.len()` bytes; `src` outlives the copy (waited for below).
        cu_check(unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), r.stream) }, "cuMemcpyHtoDAsync")?;
        self.sync_stream(r, Instant::now() + self.case_timeout)
    }

    /// Runs one case and answers with its verdict. Errors are fatal (the caller exits).
    pub fn run(&mut self, case: &Case) -> Result<(), String> {
        if case.nranks() != self.nranks {
            return Err(format!("a case for {} ranks sent to an executor of {}", case.nranks(), self.nranks));
        }
        let mut parts: Vec<Vec<Part>> = Vec::new(); // [op][local rank]
        for (opi, o) in case.ops.iter().enumerate() {
            let codec = Codec::new(o.dt());
            let mut v = Vec::new();
            for i in 0..self.ranks.len() {
                self.set_ctx(i);
                v.push(self.prepare(case, opi, o, i, &codec)?);
            }
            parts.push(v);
        }
        if let Err(e) = self.register_windows(case, &mut parts) {
            self.release(case, parts, true);
            say(&format!("RESULT fail {e}"));
            return Ok(());
        }
        let res = if case.abort.is_some() { self.run_abort(case, &parts) } else { self.run_checked(case, &parts) };
        // After an abort the communicators are gone: their PreMulSum ops with them. After a fatal
        // error kernels may still use the buffers: they are leaked (the executor exits).
        let destroy_ops = case.abort.is_none();
        if res.is_ok() {
            self.release(case, parts, destroy_ops);
        }
        match res {
            Ok(Ok(digests)) => {
                say(&format!("RESULT ok {}", digests.iter().map(|d| format!("{d:016x}")).collect::<Vec<_>>().join(" ")));
                Ok(())
            }
            Ok(Err(mismatch)) => {
                say(&format!("RESULT fail {mismatch}"));
                Ok(())
            }
            Err(fatal) => Err(fatal),
        }
    }

    fn slot(case: &Case, o: &OpCase) -> usize {
        slot_of(case.cta_policy, case.mode == Mode::NonBlocking, o.comm)
    }

    /// Registers every `Mem::Window` operation's allocation as a symmetric window: one group per
    /// operation over the process's ranks (ncclCommWindowRegister is collective; in a group its
    /// handle is written at ncclGroupEnd, or on a nonblocking communicator once it leaves
    /// ncclInProgress), operations in case order on every rank. A failure fails the case (the
    /// parts are released as they are: windows registered so far included).
    fn register_windows(&self, case: &Case, parts: &mut [Vec<Part>]) -> Result<(), String> {
        const NCCL_WIN_COLL_SYMMETRIC: c_int = 1;
        let deadline = Instant::now() + self.case_timeout;
        for (o, v) in case.ops.iter().zip(parts.iter_mut()) {
            if o.mem != Mem::Window {
                continue;
            }
            let slot = Self::slot(case, o);
            // SAFETY: no preconditions.
            unsafe { (self.nccl.group_start)() };
            let mut failed = None;
            for (i, p) in v.iter_mut().enumerate() {
                self.set_ctx(i);
                let comm = self.ranks[i].comms[slot];
                let out: *mut usize = &mut p.window;
                // SAFETY: the allocation holds win_bytes; `out` (in `parts`, not moved until the
                // parts are released) outlives the group and the communicator's completion.
                let rc = unsafe { (self.nccl.comm_window_register)(comm, p.base as *mut c_void, p.win_bytes as usize, out.cast(), NCCL_WIN_COLL_SYMMETRIC) };
                if rc != SUCCESS && rc != IN_PROGRESS {
                    failed.get_or_insert_with(|| self.nccl.describe(&format!("rank {}: ncclCommWindowRegister", self.ranks[i].rank), rc, comm));
                }
            }
            // SAFETY: closes the group.
            let rc = unsafe { (self.nccl.group_end)() };
            if rc != SUCCESS && rc != IN_PROGRESS {
                failed.get_or_insert_with(|| self.nccl.describe("ncclGroupEnd of ncclCommWindowRegister", rc, std::ptr::null_mut()));
            }
            for (i, p) in v.iter_mut().enumerate() {
                let comm = self.ranks[i].comms[slot];
                let st = self.settle(comm, deadline);
                // SAFETY: the library may have written it from its own thread.
                p.window = unsafe { std::ptr::read_volatile(&p.window) };
                if st != SUCCESS {
                    failed.get_or_insert_with(|| self.nccl.describe(&format!("rank {}: ncclCommWindowRegister: the communicator's state", self.ranks[i].rank), st, comm));
                } else if p.window == 0 {
                    failed.get_or_insert_with(|| format!("rank {}: ncclCommWindowRegister gave no window", self.ranks[i].rank));
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    fn prepare(&self, case: &Case, opi: usize, o: &OpCase, i: usize, codec: &Codec) -> Result<Part, String> {
        let g = self.ranks[i].rank;
        let (ov, n, r) = view(o, self.nranks, g);
        let es = o.dt().size() as u64;
        let l = layout(&ov, n, r);
        let imgs = initial_images(case.seed, opi, &ov, n, r, 0, codec);
        let comm = self.ranks[i].comms[Self::slot(case, o)];
        let mut part =
            Part { allocs: Vec::new(), mem: o.mem, handles: Vec::new(), op: o.op.raw().unwrap_or(0), scalar: None, event: 0, base: 0, win_bytes: 0, window: 0 };
        // `Mem::Window`: allocation k of every rank at the same offset of its window (the
        // symmetric kernels address a peer's buffer at this rank's offset), each as large as the
        // largest rank's; the window the same size on every rank.
        let mut win_at = Vec::new();
        if o.mem == Mem::Window {
            let all: Vec<crate::case::Layout> = (0..n).map(|k| layout(&ov, n, k)).collect();
            let mut end = 0u64;
            // Over the most allocations any rank has (a root and the others differ), so that
            // every rank sums the same sizes.
            for k in 0..all.iter().map(|x| x.allocs.len()).max().unwrap_or(0) {
                win_at.push(end);
                end += all.iter().filter_map(|x| x.allocs.get(k)).map(|a| a.bytes(es).div_ceil(256) * 256).max().unwrap_or(0);
            }
            part.win_bytes = end.max(1).div_ceil(4096) * 4096;
            let mut p = std::ptr::null_mut();
            // SAFETY: out-pointer to a local; the current context is the rank's device's.
            let rc = unsafe { (self.nccl.mem_alloc)(&mut p, part.win_bytes as usize) };
            if rc != SUCCESS {
                return Err(self.nccl.describe("ncclMemAlloc (window)", rc, std::ptr::null_mut()));
            }
            part.base = p as u64;
        }
        if o.cfg.is_some_and(|c| c.event) {
            let mut e = std::ptr::null_mut();
            // SAFETY: out-pointer to a local; the current context is the rank's.
            cu_check(unsafe { cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }, "cuEventCreate")?;
            part.event = e as usize;
        }
        for (k, (a, img)) in l.allocs.iter().zip(&imgs).enumerate() {
            let bytes = a.bytes(es);
            let alloc = if o.mem == Mem::Window {
                // Inside the window's allocation; freed with it.
                Alloc { ptr: part.base + win_at[k], bytes, va: 0, reserved: 0, mapped: 0, stream: 0 }
            } else if o.mem.allocator() == Allocator::NcclMem {
                let mut p = std::ptr::null_mut();
                // SAFETY: out-pointer to a local; the current context is the rank's device's.
                let rc = unsafe { (self.nccl.mem_alloc)(&mut p, bytes as usize) };
                if rc != SUCCESS {
                    self.release_part_on(part, Some(comm));
                    return Err(self.nccl.describe("ncclMemAlloc", rc, std::ptr::null_mut()));
                }
                Alloc { ptr: p as cu::CUdeviceptr, bytes, va: 0, reserved: 0, mapped: 0, stream: 0 }
            } else {
                match Alloc::new(o.mem, bytes, self.ranks[i].dev, self.ranks[i].stream) {
                    Ok(a) => a,
                    Err(e) => {
                        self.release_part_on(part, Some(comm));
                        return Err(e);
                    }
                }
            };
            let ptr = alloc.ptr;
            part.allocs.push(alloc);
            self.upload_to(i, ptr, &img[..bytes as usize])?;
            if o.mem.registered() && !(g < 16 && o.unreg >> g & 1 == 1) {
                let mut h = std::ptr::null_mut();
                // SAFETY: a live allocation of `bytes`; out-pointer to a local.
                let rc = unsafe { (self.nccl.comm_register)(comm, ptr as *mut c_void, bytes as usize, &mut h) };
                // Local and synchronous in NCCL, nonblocking communicators included.
                if rc != SUCCESS || h.is_null() {
                    self.release_part_on(part, Some(comm));
                    return Err(self.nccl.describe("ncclCommRegister", rc, comm));
                }
                part.handles.push(h as usize);
            }
        }
        if o.kind.reduces() && o.op.premul() {
            let dt = o.dt();
            let mut s = [0u8; 8];
            let v = scalar_value(dt, ov.scalars[r]);
            if dt.is_float() {
                codec.encode_float(v, &mut s[..dt.size()]);
            } else {
                codec.encode_int(v as i128, &mut s[..dt.size()]);
            }
            let (ptr, residence) = if o.op == Op::PreMulDevice {
                let mut d = 0;
                // SAFETY: out-pointer to a local.
                cu_check(unsafe { cu::cuMemAlloc_v2(&mut d, 8) }, "cuMemAlloc")?;
                self.upload_to(i, d, &s)?;
                part.scalar = Some(d);
                (d as *mut c_void, 0)
            } else {
                (s.as_mut_ptr().cast(), 1)
            };
            // SAFETY: out-pointer; the scalar is read now (host) or by the kernels (device).
            let rc = unsafe { (self.nccl.redop_create_premulsum)(&mut part.op, ptr, o.dtype, residence, comm) };
            if rc != SUCCESS {
                return Err(self.nccl.describe("ncclRedOpCreatePreMulSum", rc, comm));
            }
        }
        Ok(part)
    }

    fn release(&self, case: &Case, mut parts: Vec<Vec<Part>>, destroy_ops: bool) {
        if destroy_ops {
            // Windows are deregistered as registered: an operation's on every local rank in one
            // group (NCCL may make it collective), operations in the same order on every rank.
            let deadline = Instant::now() + self.case_timeout;
            for (o, v) in case.ops.iter().zip(parts.iter_mut()) {
                if o.mem != Mem::Window {
                    continue;
                }
                // SAFETY: no preconditions.
                unsafe { (self.nccl.group_start)() };
                for (i, p) in v.iter_mut().enumerate() {
                    self.set_ctx(i);
                    if p.window != 0 {
                        // SAFETY: a window of this communicator; the case's work has completed.
                        unsafe { (self.nccl.comm_window_deregister)(self.ranks[i].comms[Self::slot(case, o)], p.window as *mut c_void) };
                        p.window = 0;
                    }
                }
                // SAFETY: closes the group.
                unsafe { (self.nccl.group_end)() };
                for i in 0..v.len() {
                    self.settle(self.ranks[i].comms[Self::slot(case, o)], deadline);
                }
            }
        }
        for (o, v) in case.ops.iter().zip(parts) {
            for (i, p) in v.into_iter().enumerate() {
                self.set_ctx(i);
                let comm = self.ranks[i].comms[Self::slot(case, o)];
                if destroy_ops && o.kind.reduces() && o.op.premul() {
                    // SAFETY: an op created on this communicator; its work has completed.
                    unsafe { (self.nccl.redop_destroy)(p.op, comm) };
                }
                // After an abort the registrations went with their communicator.
                self.release_part_on(p, destroy_ops.then_some(comm));
            }
        }
    }

    /// Frees one part's memory (the current context is its rank's), deregistering first where
    /// it was registered and `dereg` is still its communicator.
    fn release_part_on(&self, p: Part, dereg: Option<Comm>) {
        if let Some(comm) = dereg {
            for &h in &p.handles {
                // SAFETY: a handle ncclCommRegister gave on this communicator; no work uses it.
                unsafe { (self.nccl.comm_deregister)(comm, h as *mut c_void) };
            }
        }
        if p.base != 0 {
            if let (Some(comm), true) = (dereg, p.window != 0) {
                // A window `release` did not deregister with its peers' (a part given up before
                // the case ran never registers one).
                // SAFETY: a window of this communicator; no work uses it.
                unsafe { (self.nccl.comm_window_deregister)(comm, p.window as *mut c_void) };
            }
            // SAFETY: allocated by ncclMemAlloc; its allocs lie inside; no work uses it.
            unsafe { (self.nccl.mem_free)(p.base as *mut c_void) };
        } else {
            for a in &p.allocs {
                if p.mem.allocator() == Allocator::NcclMem {
                    // SAFETY: allocated by ncclMemAlloc; no work that uses it is pending.
                    unsafe { (self.nccl.mem_free)(a.ptr as *mut c_void) };
                } else {
                    a.free();
                }
            }
        }
        if let Some(s) = p.scalar {
            // SAFETY: allocated by cuMemAlloc; no work that uses it is pending.
            unsafe { cu::cuMemFree_v2(s) };
        }
        if p.event != 0 {
            // SAFETY: created by cuEventCreate in `prepare`; no pending work records it.
            unsafe { cu::cuEventDestroy_v2(p.event as cu::CUevent) };
        }
    }

    /// Issues the group of local ranks `who` (all if None): one call per (operation, rank), in a
    /// group unless it is one plain call.
    fn issue(&self, case: &Case, parts: &[Vec<Part>], who: Option<&[bool]>) -> Result<(), String> {
        let nb = case.mode == Mode::NonBlocking;
        let ok = |rc: c_int| rc == SUCCESS || (nb && rc == IN_PROGRESS);
        let grouped = case.ops.len() > 1 || self.ranks.len() > 1 || case.ops.iter().any(|o| o.kind == Kind::SendRecv);
        if grouped {
            // SAFETY: no preconditions.
            unsafe { (self.nccl.group_start)() };
        }
        let mut first_err = None;
        for (opi, o) in case.ops.iter().enumerate() {
            for (i, rk) in self.ranks.iter().enumerate() {
                if who.is_some_and(|w| !w[rk.rank]) {
                    continue;
                }
                self.set_ctx(i);
                let p = &parts[opi][i];
                let comm = rk.comms[Self::slot(case, o)];
                let (ov, m, me) = view(o, self.nranks, rk.rank);
                let l = layout(&ov, m, me);
                let es = o.dt().size() as u64;
                let ptr = |b: Option<(usize, u64, u64)>| {
                    b.map_or(0, |(a, off, _)| p.allocs[a].ptr + crate::case::GUARD + (l.allocs[a].off + off) * es) as *mut c_void
                };
                let (s, r) = (ptr(l.send), ptr(l.recv));
                let st = if case.default_stream {
                    std::ptr::null_mut()
                } else if rk.rank < 16 && o.side >> rk.rank & 1 == 1 {
                    rk.side
                } else {
                    rk.stream
                };
                let (c, dt, root) = (o.count as usize, o.dtype, ov.root as c_int);
                let n = &self.nccl;
                let cfg = o.cfg.map(|cc| call_config(&cc, p.event));
                // SAFETY: every pointer is within an allocation of this rank sized for the call;
                // the config outlives the call.
                let rc = unsafe {
                    match (n.config.as_ref(), cfg.as_ref()) {
                        (Some(f), Some(cc)) if o.kind != Kind::SendRecv => match o.kind {
                            Kind::AllReduce => (f.all_reduce)(s, r, c, dt, p.op, comm, st, cc),
                            Kind::ReduceScatter => (f.reduce_scatter)(s, r, c, dt, p.op, comm, st, cc),
                            Kind::Reduce => (f.reduce)(s, r, c, dt, p.op, root, comm, st, cc),
                            Kind::AllGather => (f.all_gather)(s, r, c, dt, comm, st, cc),
                            Kind::AlltoAll => (f.alltoall)(s, r, c, dt, comm, st, cc),
                            Kind::Broadcast => (f.broadcast)(s, r, c, dt, root, comm, st, cc),
                            Kind::Gather => (f.gather)(s, r, c, dt, root, comm, st, cc),
                            _ => (f.scatter)(s, r, c, dt, root, comm, st, cc),
                        },
                        _ => match o.kind {
                            Kind::AllReduce => (n.all_reduce)(s, r, c, dt, p.op, comm, st),
                            Kind::ReduceScatter => (n.reduce_scatter)(s, r, c, dt, p.op, comm, st),
                            Kind::Reduce => (n.reduce)(s, r, c, dt, p.op, root, comm, st),
                            Kind::AllGather => (n.all_gather)(s, r, c, dt, comm, st),
                            Kind::AlltoAll => (n.alltoall)(s, r, c, dt, comm, st),
                            Kind::Broadcast => (n.broadcast)(s, r, c, dt, root, comm, st),
                            Kind::Gather => (n.gather)(s, r, c, dt, root, comm, st),
                            Kind::Scatter => (n.scatter)(s, r, c, dt, root, comm, st),
                            Kind::SendRecv => {
                                let mut rc = SUCCESS;
                                let (mut si, mut ri) = (l.sends.iter(), l.recvs.iter());
                                for t in &ov.transfers {
                                    if t.src == me {
                                        let (_, b) = si.next().expect("a send per transfer from this rank");
                                        rc = (n.send)(ptr(Some(*b)), t.count as usize, dt, t.dst as c_int, comm, st);
                                        if !ok(rc) {
                                            break;
                                        }
                                    }
                                    if t.dst == me {
                                        let (_, b) = ri.next().expect("a receive per transfer to this rank");
                                        rc = (n.recv)(ptr(Some(*b)), t.count as usize, dt, t.src as c_int, comm, st);
                                        if !ok(rc) {
                                            break;
                                        }
                                    }
                                }
                                rc
                            }
                        },
                    }
                };
                if !ok(rc) && first_err.is_none() {
                    first_err = Some(n.describe(&format!("rank {} op {opi} {:?}", rk.rank, o.kind), rc, comm));
                }
            }
        }
        if grouped {
            // SAFETY: closes the group opened above.
            let rc = unsafe { (self.nccl.group_end)() };
            if !ok(rc) && first_err.is_none() {
                first_err = Some(self.nccl.describe("ncclGroupEnd", rc, std::ptr::null_mut()));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// ncclCommSuspend(NCCL_SUSPEND_MEM) then ncclCommResume on every communicator of `comms`,
    /// each as one group (a process's ranks call together). A library without them skips it.
    fn suspend_resume(&self, comms: &[Comm], deadline: Instant) -> Result<(), String> {
        let Some(f) = &self.nccl.suspend else { return Ok(()) };
        for (what, resume) in [("ncclCommSuspend", false), ("ncclCommResume", true)] {
            // SAFETY: group calls, and live communicators of this process.
            let rc = unsafe { (self.nccl.group_start)() };
            if rc != SUCCESS {
                return Err(self.nccl.describe("ncclGroupStart", rc, std::ptr::null_mut()));
            }
            let mut first = None;
            for &c in comms {
                // SAFETY: a live communicator.
                let rc = unsafe { if resume { (f.resume)(c) } else { (f.suspend)(c, 1) } };
                if rc != SUCCESS && first.is_none() {
                    first = Some(self.nccl.describe(what, rc, c));
                }
            }
            // SAFETY: closes the group opened above.
            let rc = unsafe { (self.nccl.group_end)() };
            if let Some(m) = first {
                return Err(m);
            }
            if rc != SUCCESS && rc != IN_PROGRESS {
                return Err(self.nccl.describe(&format!("ncclGroupEnd after {what}"), rc, std::ptr::null_mut()));
            }
            self.wait_async(comms, deadline, what)?;
        }
        Ok(())
    }

    fn used_comms(&self, case: &Case) -> Vec<Comm> {
        let mut v = Vec::new();
        for r in &self.ranks {
            for o in &case.ops {
                let c = r.comms[Self::slot(case, o)];
                if !v.contains(&c) {
                    v.push(c);
                }
            }
        }
        v
    }

    /// Eager, nonblocking or graph-replayed: run and check every replay. Ok(Err) is a wrong
    /// result (the executor goes on); Err is fatal.
    fn run_checked(&self, case: &Case, parts: &[Vec<Part>]) -> Result<Result<Vec<u64>, String>, String> {
        let deadline = || Instant::now() + self.case_timeout;
        let comms = self.used_comms(case);
        if case.mode == Mode::Graph && !case.captures(self.proc_) {
            return self.run_uncaptured(case, parts, &comms);
        }
        if case.mode != Mode::Graph {
            if case.suspend {
                self.suspend_resume(&comms, deadline())?;
            }
            self.issue(case, parts, None)?;
            self.wait_async(&comms, deadline(), "group")?;
            self.sync_streams(deadline())?;
            self.wait_async(&comms, deadline(), "after the group")?;
            if let Err(m) = self.events_done(case, parts) {
                return Ok(Err(m));
            }
            return self.check(case, parts, 0);
        }
        let mut graphs = Vec::new();
        for (i, r) in self.ranks.iter().enumerate() {
            self.set_ctx(i);
            // SAFETY: a live stream of this context.
            cu_check(
                unsafe { cu::cuStreamBeginCapture_v2(r.stream, case.capture_mode()) },
                "cuStreamBeginCapture",
            )?;
        }
        let issued = self.issue(case, parts, None);
        // Every capture ends before any graph is instantiated: a thread may not instantiate while
        // one of its captures is open.
        let mut captured = Vec::new();
        for (i, r) in self.ranks.iter().enumerate() {
            self.set_ctx(i);
            let mut g = std::ptr::null_mut();
            // SAFETY: ends the capture begun above; out-pointer to a local.
            cu_check(unsafe { cu::cuStreamEndCapture(r.stream, &mut g) }, "cuStreamEndCapture")?;
            captured.push(g);
        }
        issued?;
        for (i, g) in captured.into_iter().enumerate() {
            self.set_ctx(i);
            let mut e = std::ptr::null_mut();
            // SAFETY: a captured graph; out-pointer to a local.
            cu_check(unsafe { cu::cuGraphInstantiateWithFlags(&mut e, g, 0) }, "cuGraphInstantiate")?;
            graphs.push((g, e));
        }
        if case.suspend {
            self.suspend_resume(&comms, deadline())?;
        }
        let mut digests = Vec::new();
        let mut verdict = Ok(());
        for replay in 0..case.replays.max(1) as usize {
            // Replay 0 too: a library that did the work at capture instead of in the graph
            // would otherwise pass.
            self.upload(case, parts, replay)?;
            for (i, (r, (_, e))) in self.ranks.iter().zip(&graphs).enumerate() {
                self.set_ctx(i);
                // SAFETY: an instantiated graph; the stream is live.
                cu_check(unsafe { cu::cuGraphLaunch(*e, r.stream) }, "cuGraphLaunch")?;
            }
            self.sync_streams(deadline()).map_err(|e| format!("replay {replay}: {e}"))?;
            self.wait_async(&comms, deadline(), "after a replay")?;
            match self.check(case, parts, replay)? {
                Ok(d) => digests = d,
                Err(m) => {
                    verdict = Err(format!("replay {replay}: {m}"));
                    break;
                }
            }
        }
        if verdict.is_ok() && case.burst() > 0 {
            for (i, (r, (_, e))) in self.ranks.iter().zip(&graphs).enumerate() {
                self.set_ctx(i);
                for _ in 0..case.burst() {
                    // SAFETY: an instantiated graph; the stream is live.
                    cu_check(unsafe { cu::cuGraphLaunch(*e, r.stream) }, "cuGraphLaunch")?;
                }
            }
            self.sync_streams(deadline()).map_err(|e| format!("{} replays back to back: {e}", case.burst()))?;
            self.wait_async(&comms, deadline(), "after back-to-back replays")?;
            if let Err(m) = self.check(case, parts, case.replays.max(1) as usize - 1)? {
                verdict = Err(format!("{} replays back to back: {m}", case.burst()));
            }
        }
        for (i, (g, e)) in graphs.into_iter().enumerate() {
            self.set_ctx(i);
            // SAFETY: the graphs' work has completed.
            unsafe {
                cu::cuGraphExecDestroy(e);
                cu::cuGraphDestroy(g);
            }
        }
        Ok(verdict.map(|_| digests))
    }

    /// A graph case's process that does not capture (`Case::mixed_capture`): the operations
    /// called once per replay of its peers' graphs, each time with that replay's inputs, then
    /// `burst` times back to back, as the peers replay.
    fn run_uncaptured(&self, case: &Case, parts: &[Vec<Part>], comms: &[Comm]) -> Result<Result<Vec<u64>, String>, String> {
        let deadline = || Instant::now() + self.case_timeout;
        let mut digests = Vec::new();
        for replay in 0..case.replays.max(1) as usize {
            if replay > 0 {
                self.upload(case, parts, replay)?;
            }
            self.issue(case, parts, None)?;
            self.sync_streams(deadline()).map_err(|e| format!("call {replay} (peers replaying): {e}"))?;
            self.wait_async(comms, deadline(), "after a call")?;
            match self.check(case, parts, replay)? {
                Ok(d) => digests = d,
                Err(m) => return Ok(Err(format!("call {replay} (peers replaying): {m}"))),
            }
        }
        if case.burst() > 0 {
            for _ in 0..case.burst() {
                self.issue(case, parts, None)?;
            }
            self.sync_streams(deadline()).map_err(|e| format!("{} calls back to back (peers replaying): {e}", case.burst()))?;
            self.wait_async(comms, deadline(), "after back-to-back calls")?;
            if let Err(m) = self.check(case, parts, case.replays.max(1) as usize - 1)? {
                return Ok(Err(format!("{} calls back to back (peers replaying): {m}", case.burst())));
            }
        }
        Ok(Ok(digests))
    }

    /// After the group's streams synchronised, every launch-completion event has completed
    /// without an error (the call recorded it, or left it unrecorded, which also queries done).
    fn events_done(&self, case: &Case, parts: &[Vec<Part>]) -> Result<(), String> {
        for (opi, v) in parts.iter().enumerate() {
            for (i, p) in v.iter().enumerate().filter(|(_, p)| p.event != 0) {
                self.set_ctx(i);
                // SAFETY: an event created in `prepare`.
                let rc = unsafe { cu::cuEventQuery(p.event as cu::CUevent) };
                if rc != cu::CUresult::CUDA_SUCCESS {
                    return Err(format!("rank {} op {opi} {:?}: launchCompletionEvent queried {}", self.ranks[i].rank, case.ops[opi].kind, cu_name(rc)));
                }
            }
        }
        Ok(())
    }

    /// Uploads every allocation's initial image of `replay` (fresh inputs, fresh pattern).
    fn upload(&self, case: &Case, parts: &[Vec<Part>], replay: usize) -> Result<(), String> {
        for (opi, o) in case.ops.iter().enumerate() {
            let codec = Codec::new(o.dt());
            for (i, rk) in self.ranks.iter().enumerate() {
                self.set_ctx(i);
                let (ov, m, me) = view(o, self.nranks, rk.rank);
                let imgs = initial_images(case.seed, opi, &ov, m, me, replay, &codec);
                for (a, img) in parts[opi][i].allocs.iter().zip(&imgs) {
                    // The allocation holds `img.len()` bytes; nothing runs on it now.
                    self.upload_to(i, a.ptr, img)?;
                }
            }
        }
        Ok(())
    }

    /// Reads back every allocation and compares it with the reference; digests per local rank.
    fn check(&self, case: &Case, parts: &[Vec<Part>], replay: usize) -> Result<Result<Vec<u64>, String>, String> {
        let mut digests = vec![0u64; self.ranks.len()];
        let mut wrong = Vec::new();
        for (opi, o) in case.ops.iter().enumerate() {
            let codec = Codec::new(o.dt());
            for (i, rk) in self.ranks.iter().enumerate() {
                self.set_ctx(i);
                let (ov, m, me) = view(o, self.nranks, rk.rank);
                let l = layout(&ov, m, me);
                let exp = expected_images(case.seed, opi, &ov, m, me, replay, &codec);
                for (a, (alloc, e)) in parts[opi][i].allocs.iter().zip(&exp).enumerate() {
                    let mut got = vec![0u8; alloc.bytes as usize];
                    // SAFETY: reads the allocation back into a buffer of its size.
                    cu_check(unsafe { cu::cuMemcpyDtoH_v2(got.as_mut_ptr().cast(), alloc.ptr, got.len()) }, "cuMemcpyDtoH")?;
                    digests[i] = digests[i].rotate_left(5) ^ digest(&got);
                    let what = format!("rank {me} of communicator {} op {opi} {:?} buffer {a}", o.comm, o.kind);
                    if let Some(m) = compare(&ov, m, &got, e, &l.allocs[a], &what) {
                        wrong.push(m);
                    }
                }
            }
        }
        Ok(if wrong.is_empty() { Ok(digests) } else { Err(wrong.join(" | ")) })
    }

    /// An abort case: the posting ranks issue the group on a thread of their own (a call may wait
    /// for a peer that never comes), every process meets at a barrier, waits `delay_us`, and the
    /// aborting ranks call ncclCommAbort on every communicator. Then every stream must drain
    /// without error, the context must be clean, new communicators must work, and ranks that did
    /// not abort (`posters_only`) must have seen no error and destroy in bounded time.
    fn run_abort(&mut self, case: &Case, parts: &[Vec<Part>]) -> Result<Result<Vec<u64>, String>, String> {
        let a = case.abort.clone().expect("an abort case");
        let aborts = |rank: usize| !a.posters_only || a.posts[rank];
        let mut wrong = Vec::new();
        // ShrinkAbort: per local stopping rank, its new communicator per slot.
        let mut shrunk: Vec<(usize, [Comm; SLOTS])> = Vec::new();
        let me: &Exec = self;
        // Graphs made by the issuer, as (local rank, graph, exec) addresses: destroyed once the
        // streams have drained (a graph holds its communicators until it goes).
        let made = std::thread::scope(|sc| -> Result<Vec<(usize, usize, usize)>, String> {
            let (shared, parts) = (Sendable(me), Sendable(parts));
            let graph = case.mode == Mode::Graph;
            let posts = &a.posts;
            let issuer = sc.spawn(move || {
                let (shared, parts) = (shared, parts);
                let ex: &Exec = shared.0;
                if !graph {
                    return (ex.issue(case, parts.0, Some(posts)).err(), Vec::new());
                }
                // Captured, then launched once.
                let mut errs = None;
                for (i, r) in ex.ranks.iter().enumerate().filter(|(_, r)| posts[r.rank]) {
                    ex.set_ctx(i);
                    // SAFETY: a live stream.
                    unsafe { cu::cuStreamBeginCapture_v2(r.stream, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) };
                }
                let e = ex.issue(case, parts.0, Some(posts)).err();
                let mut graphs = Vec::new();
                for (i, r) in ex.ranks.iter().enumerate().filter(|(_, r)| posts[r.rank]) {
                    ex.set_ctx(i);
                    let mut g = std::ptr::null_mut();
                    // SAFETY: ends the capture; out-pointer to a local.
                    unsafe { cu::cuStreamEndCapture(r.stream, &mut g) };
                    graphs.push((i, r, g));
                }
                step(case, &format!("captured ({})", e.as_deref().unwrap_or("ok")));
                let mut made = Vec::new();
                for (i, r, g) in graphs {
                    ex.set_ctx(i);
                    let mut x = std::ptr::null_mut();
                    // SAFETY: a captured graph; out-pointer to a local. Destroyed by the caller
                    // once the stream drained: its launch may still be queued when this returns.
                    unsafe {
                        if e.is_none() && cu::cuGraphInstantiateWithFlags(&mut x, g, 0) == cu::CUresult::CUDA_SUCCESS {
                            let rc = cu::cuGraphLaunch(x, r.stream);
                            if rc != cu::CUresult::CUDA_SUCCESS {
                                errs = Some(format!("cuGraphLaunch: {}", cu_name(rc)));
                            }
                        }
                    }
                    made.push((i, g as usize, x as usize));
                }
                step(case, "graphs launched");
                (e.or(errs), made)
            });
            // The issue may block in a call that waits for a peer; give it a moment, not forever.
            let t0 = Instant::now();
            while !issuer.is_finished() && t0.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            me.barrier()?;
            std::thread::sleep(Duration::from_micros(a.delay_us as u64));
            step(case, &format!("stopping ({:?}; the issuer {} back)", a.how, if issuer.is_finished() { "is" } else { "is not" }));
            let t_abort = Instant::now();
            // ShrinkAbort shrinks once the issuing thread is back: at once if it already is (the
            // shrink then stops the kernels still waiting), else after a revoke brings it back
            // (NCCL documents only abort as safe while another thread is inside a call).
            let revoke_first = a.how == Stop::ShrinkAbort && !issuer.is_finished();
            for (i, r) in me.ranks.iter().enumerate() {
                if !aborts(r.rank) || (a.how == Stop::ShrinkAbort && !revoke_first) {
                    continue;
                }
                me.set_ctx(i);
                for (s, &c) in r.comms.iter().enumerate() {
                    // SAFETY: a live communicator; abort and revoke may run while another thread
                    // is in a call.
                    let t_call = Instant::now();
                    let (rc, what) = match a.how {
                        Stop::Abort => (unsafe { (me.nccl.comm_abort)(c) }, "ncclCommAbort"),
                        _ => (unsafe { (me.nccl.comm_revoke)(c, 0) }, "ncclCommRevoke"),
                    };
                    // Each call within seconds: its kernels leave at once, or once they start (a
                    // launch queued behind another communicator's waiting kernel on the stream).
                    if t_call.elapsed() > STOP_CALL_BOUND {
                        wrong.push(format!("rank {}: {what} of communicator slot {s} took {:?}", r.rank, t_call.elapsed()));
                    }
                    // Slots 2 and 3 of each policy's four are nonblocking: a revoke completes later.
                    if rc != SUCCESS && !(rc == IN_PROGRESS && s % 4 >= 2) {
                        wrong.push(me.nccl.describe(&format!("rank {}: {what}", r.rank), rc, std::ptr::null_mut()));
                    }
                }
            }
            let abort_time = t_abort.elapsed();
            if abort_time > Duration::from_secs(15) {
                wrong.push(format!("stopping the communicators ({:?}) took {abort_time:?}", a.how));
            }
            step(case, "stopped");
            // The issuing thread must come back once its communicators are aborted.
            let t1 = Instant::now();
            while !issuer.is_finished() {
                if t1.elapsed() > Duration::from_secs(20) {
                    // Leaving the scope would wait for it forever: report and end the process.
                    say(&format!("FATAL a call still had not returned 20 s after stopping the communicators ({:?})", a.how));
                    std::process::exit(3);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            step(case, "the issuer is back");
            Ok(issuer.join().map(|(_, made)| made).unwrap_or_default())
        })?;
        if a.how == Stop::ShrinkAbort {
            shrunk = self.shrink_stopping(&aborts, &mut wrong);
        }
        // Revoked or shrunk-from parents (and the shrunk communicators, once they computed a
        // correct AllReduce) are destroyed by their ranks, in bounded time.
        if a.how != Stop::Abort {
            if a.how == Stop::ShrinkAbort {
                // Each new communicator holds its parent's stopping ranks: on communicator 2, those
                // of the rank's parity.
                let stopping = |g: usize, s: usize| (0..self.nranks).filter(|&r| aborts(r) && (s % 3 != 2 || r % 2 == g % 2)).count() as i32;
                for s in 0..SLOTS {
                    let members: Vec<(usize, Comm, i32)> =
                        shrunk.iter().filter(|(_, c)| !c[s].is_null()).map(|&(i, c)| (i, c[s], stopping(self.ranks[i].rank, s))).collect();
                    if members.len() == shrunk.len() && !members.is_empty() {
                        if let Err(e) = self.check_allreduce(&members, "a communicator made by ncclCommShrink(NCCL_SHRINK_ABORT)") {
                            wrong.push(e);
                        }
                    }
                }
            }
            for (i, r) in self.ranks.iter().enumerate().filter(|(_, r)| aborts(r.rank)) {
                self.set_ctx(i);
                let t = Instant::now();
                let new = shrunk.iter().find(|(j, _)| *j == i).map(|(_, c)| *c).unwrap_or([std::ptr::null_mut(); SLOTS]);
                for c in new.into_iter().chain(r.comms).filter(|c| !c.is_null()) {
                    // A nonblocking revoke completes before the communicator can be destroyed.
                    self.settle(c, Instant::now() + Duration::from_secs(10));
                    // SAFETY: a live communicator whose work has ended or been revoked.
                    let rc = unsafe { (self.nccl.comm_destroy)(c) };
                    if rc != SUCCESS {
                        wrong.push(self.nccl.describe(&format!("rank {}: ncclCommDestroy after {:?}", r.rank, a.how), rc, std::ptr::null_mut()));
                    }
                }
                if t.elapsed() > Duration::from_secs(10) {
                    wrong.push(format!("rank {}: ncclCommDestroy after {:?} took {:?}", r.rank, a.how, t.elapsed()));
                }
            }
        }
        // Survivors with nothing pending: no error for a while, then destroy in bounded time.
        let survivors: Vec<usize> = (0..self.ranks.len()).filter(|&i| !aborts(self.ranks[i].rank)).collect();
        if !survivors.is_empty() {
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                for &i in &survivors {
                    for &c in &self.ranks[i].comms {
                        let mut st = 0;
                        // SAFETY: a live communicator.
                        unsafe { (self.nccl.comm_get_async_error)(c, &mut st) };
                        if st != SUCCESS {
                            let m = format!("rank {} (nothing pending) sees async error {st} after a peer aborted", self.ranks[i].rank);
                            if !wrong.contains(&m) {
                                wrong.push(m);
                            }
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            for &i in &survivors {
                self.set_ctx(i);
                let t = Instant::now();
                for &c in &self.ranks[i].comms {
                    // SAFETY: a live communicator with no pending work: finalize, then destroy.
                    let rc = unsafe { (self.nccl.comm_finalize)(c) };
                    if rc != SUCCESS && rc != IN_PROGRESS {
                        wrong.push(self.nccl.describe(&format!("rank {}: ncclCommFinalize after a peer aborted", self.ranks[i].rank), rc, c));
                    }
                    // A nonblocking finalize completes before the destroy (NCCL refuses it before).
                    let st = self.settle(c, t + Duration::from_secs(10));
                    if st != SUCCESS {
                        wrong.push(self.nccl.describe(&format!("rank {}: ncclCommFinalize after a peer aborted: async state", self.ranks[i].rank), st, c));
                    }
                    // SAFETY: as above.
                    unsafe { (self.nccl.comm_destroy)(c) };
                }
                if t.elapsed() > Duration::from_secs(10) {
                    wrong.push(format!("rank {}: ncclCommFinalize and Destroy after a peer aborted took {:?}", self.ranks[i].rank, t.elapsed()));
                }
            }
        }
        step(case, "survivors done");
        // Every stream drains without error; no sticky error in the context.
        let drain = Instant::now() + Duration::from_secs(20);
        for (i, r) in self.ranks.iter().enumerate() {
            self.set_ctx(i);
            for stream in [r.stream, r.side] {
                loop {
                    // SAFETY: a live stream.
                    let rc = unsafe { cu::cuStreamQuery(stream) };
                    if rc == cu::CUresult::CUDA_SUCCESS {
                        break;
                    }
                    if rc != cu::CUresult::CUDA_ERROR_NOT_READY {
                        return Err(format!("rank {}: after ncclCommAbort the stream reports {}", r.rank, cu_name(rc)));
                    }
                    if Instant::now() > drain {
                        return Err(format!("rank {}: the stream did not drain within 20 s of ncclCommAbort", r.rank));
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            // SAFETY: current context is this rank's.
            let rc = unsafe { cu::cuCtxSynchronize() };
            if rc != cu::CUresult::CUDA_SUCCESS {
                return Err(format!("rank {}: after ncclCommAbort the context reports {}", r.rank, cu_name(rc)));
            }
        }
        step(case, "drained");
        for (i, g, x) in made {
            self.set_ctx(i);
            // SAFETY: graphs made above; their work has drained.
            unsafe {
                if x != 0 {
                    cu::cuGraphExecDestroy(x as cu::CUgraphExec);
                }
                if g != 0 {
                    cu::cuGraphDestroy(g as cu::CUgraph);
                }
            }
        }
        for r in &mut self.ranks {
            r.comms = [std::ptr::null_mut(); SLOTS];
        }
        // New communicators on the same GPUs must work.
        step(case, "graphs destroyed; new communicators");
        self.init_comms()?;
        self.sanity()?;
        step(case, "done");
        Ok(if wrong.is_empty() { Ok(vec![]) } else { Err(wrong.join(" | ")) })
    }

    /// ncclCommShrink(NCCL_SHRINK_ABORT) of every slot's communicator over the stopping ranks
    /// (the others excluded), one group per slot for this process's stopping ranks; returns
    /// each local stopping rank's new communicators (null where the shrink failed).
    fn shrink_stopping(&self, stops: &dyn Fn(usize) -> bool, wrong: &mut Vec<String>) -> Vec<(usize, [Comm; SLOTS])> {
        let mut out: Vec<(usize, [Comm; SLOTS])> =
            self.ranks.iter().enumerate().filter(|(_, r)| stops(r.rank)).map(|(i, _)| (i, [std::ptr::null_mut(); SLOTS])).collect();
        let n = self.nranks;
        for s in 0..SLOTS {
            // SAFETY: no preconditions.
            unsafe { (self.nccl.group_start)() };
            for (i, new) in out.iter_mut() {
                self.set_ctx(*i);
                let r = &self.ranks[*i];
                // The ranks that go on, of this rank's communicator, as it numbers them (`view`).
                let mut exclude: Vec<c_int> = (0..n)
                    .filter(|&g| !stops(g))
                    .filter_map(|g| match s % 3 {
                        0 => Some(g),
                        1 => Some(n - 1 - g),
                        _ => (g % 2 == r.rank % 2).then_some(g / 2),
                    })
                    .map(|x| x as c_int)
                    .collect();
                // SAFETY: a live parent; the list outlives the call (NCCL sorts it in place);
                // out-pointer into `out`; a NULL config inherits the parent's.
                let rc = unsafe {
                    (self.nccl.comm_shrink)(r.comms[s], exclude.as_mut_ptr(), exclude.len() as c_int, &mut new[s], std::ptr::null_mut(), SHRINK_ABORT)
                };
                if rc != SUCCESS && rc != IN_PROGRESS {
                    wrong.push(self.nccl.describe(&format!("rank {}: ncclCommShrink(NCCL_SHRINK_ABORT)", r.rank), rc, r.comms[s]));
                }
            }
            // SAFETY: closes the group.
            let rc = unsafe { (self.nccl.group_end)() };
            if rc != SUCCESS && rc != IN_PROGRESS {
                wrong.push(self.nccl.describe("ncclGroupEnd of ncclCommShrink", rc, std::ptr::null_mut()));
            }
            // A nonblocking shrink completes in the background: NCCL writes the new handle once
            // the parent's state leaves ncclInProgress.
            let deadline = Instant::now() + self.case_timeout;
            for (i, new) in out.iter_mut() {
                // The parent leaves ncclInProgress only once the shrink ended and wrote the handle
                // (an error it saw meanwhile is its state after that).
                let st = self.settle(self.ranks[*i].comms[s], deadline);
                // SAFETY: the library may have written it from its own thread.
                new[s] = unsafe { std::ptr::read_volatile(&new[s]) };
                if new[s].is_null() {
                    wrong.push(format!(
                        "rank {}: ncclCommShrink(NCCL_SHRINK_ABORT) gave no communicator on slot {s} (the parent's state: {st})",
                        self.ranks[*i].rank
                    ));
                } else if let Err(e) = self.wait_async(&[new[s]], deadline, "ncclCommShrink") {
                    wrong.push(e);
                }
            }
        }
        out
    }

    /// An in-place int32 AllReduce of 1024 elements over `members` (local rank, communicator, its
    /// size), in one group, each rank contributing 1: every element must be the size.
    fn check_allreduce(&self, members: &[(usize, Comm, i32)], what: &str) -> Result<(), String> {
        let mut bufs = Vec::new();
        // SAFETY: no preconditions.
        unsafe { (self.nccl.group_start)() };
        for &(i, c, n) in members {
            self.set_ctx(i);
            let mut p = 0;
            // SAFETY: out-pointer to a local.
            cu_check(unsafe { cu::cuMemAlloc_v2(&mut p, 4096) }, "cuMemAlloc")?;
            let bytes: Vec<u8> = [1i32; 1024].iter().flat_map(|x| x.to_ne_bytes()).collect();
            self.upload_to(i, p, &bytes)?;
            // SAFETY: a 4 KiB allocation, filled above.
            let rc = unsafe { (self.nccl.all_reduce)(p as *const c_void, p as *mut c_void, 1024, 2, 0, c, self.ranks[i].stream) };
            bufs.push((i, p, n));
            if rc != SUCCESS && rc != IN_PROGRESS {
                // SAFETY: closes the group opened above.
                unsafe { (self.nccl.group_end)() };
                return Err(self.nccl.describe(&format!("{what}: ncclAllReduce"), rc, c));
            }
        }
        // SAFETY: closes the group.
        let rc = unsafe { (self.nccl.group_end)() };
        if rc != SUCCESS && rc != IN_PROGRESS {
            return Err(self.nccl.describe(&format!("{what}: ncclGroupEnd"), rc, std::ptr::null_mut()));
        }
        let comms: Vec<Comm> = members.iter().map(|&(_, c, _)| c).collect();
        self.wait_async(&comms, Instant::now() + self.case_timeout, what)?;
        self.sync_streams(Instant::now() + self.case_timeout)?;
        let mut bad = None;
        for (i, p, n) in bufs {
            self.set_ctx(i);
            let mut v = vec![0i32; 1024];
            // SAFETY: reads back the 4 KiB allocated above, then frees it.
            unsafe {
                cu_check(cu::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), p, 4096), "cuMemcpyDtoH")?;
                cu::cuMemFree_v2(p);
            }
            if let Some(x) = v.iter().find(|&&x| x != n) {
                bad.get_or_insert(format!("{what} computed {x} instead of {n}"));
            }
        }
        bad.map_or(Ok(()), Err)
    }

    /// An AllReduce of every rank's rank + 1 on every communicator slot.
    fn sanity(&self) -> Result<(), String> {
        let n = self.nranks as i32;
        for s in 0..SLOTS {
            let mut bufs = Vec::new();
            // SAFETY: no preconditions.
            unsafe { (self.nccl.group_start)() };
            for (i, r) in self.ranks.iter().enumerate() {
                self.set_ctx(i);
                let v = vec![r.rank as i32 + 1; 1024];
                let mut p = 0;
                // SAFETY: out-pointer to a local.
                cu_check(unsafe { cu::cuMemAlloc_v2(&mut p, 4096) }, "cuMemAlloc")?;
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
                self.upload_to(i, p, &bytes)?;
                // SAFETY: a 4 KiB allocation, filled above.
                unsafe { (self.nccl.all_reduce)(p as *const c_void, p as *mut c_void, 1024, 2, 0, r.comms[s], r.stream) };
                bufs.push(p);
            }
            // SAFETY: closes the group.
            unsafe { (self.nccl.group_end)() };
            let comms: Vec<Comm> = self.ranks.iter().map(|r| r.comms[s]).collect();
            self.wait_async(&comms, Instant::now() + self.case_timeout, "sanity")?;
            self.sync_streams(Instant::now() + self.case_timeout)?;
            for (i, p) in bufs.into_iter().enumerate() {
                self.set_ctx(i);
                let mut v = vec![0i32; 1024];
                // SAFETY: reads back the 4 KiB allocated above, then frees it.
                unsafe {
                    cu_check(cu::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), p, 4096), "cuMemcpyDtoH")?;
                    cu::cuMemFree_v2(p);
                }
                // The sum of rank + 1 over the communicator's ranks (on communicator 2, those of
                // this rank's parity).
                let g = self.ranks[i].rank as i32;
                let want: i32 = (0..n).filter(|&k| s % 3 != 2 || k % 2 == g % 2).map(|k| k + 1).sum();
                if v.iter().any(|&x| x != want) {
                    return Err(format!("a new communicator (slot {s}) after the abort computed {} instead of {want}", v[0]));
                }
            }
        }
        Ok(())
    }

    /// ncclCommAbort on every communicator, then a bounded wait for the streams.
    fn abort_all(&self) {
        for (i, r) in self.ranks.iter().enumerate() {
            self.set_ctx(i);
            for &c in r.comms.iter().filter(|c| !c.is_null()) {
                // SAFETY: a live communicator.
                unsafe { (self.nccl.comm_abort)(c) };
            }
        }
        let _ = self.sync_streams(Instant::now() + Duration::from_secs(10));
    }

    /// The executor's loop: init, then cases until QUIT.
    pub fn serve(&mut self) -> Result<(), String> {
        self.init_comms()?;
        say("READY");
        loop {
            let line = self.read_line()?;
            if line == "QUIT" {
                break;
            }
            let json = line.strip_prefix("CASE ").ok_or_else(|| format!("unexpected {line:?}"))?;
            let case = Case::from_line(json)?;
            if let Err(e) = self.run(&case) {
                // Stop this process's kernels before it goes: killed with kernels spinning on
                // their peers, an MPS client can take the MPS server (and every rank on the GPU)
                // down with it.
                self.abort_all();
                return Err(e);
            }
        }
        for r in &self.ranks {
            for &c in &r.comms {
                // SAFETY: live communicators with no pending work.
                unsafe { (self.nccl.comm_destroy)(c) };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (policy, mode, comm) a case can draw has a slot of its own, made with that
    /// policy and blocking mode.
    #[test]
    fn slots_cover_every_policy_mode_and_comm_once() {
        let mut seen = std::collections::HashSet::new();
        for policy in 0..=2u8 {
            for nonblocking in [false, true] {
                for comm in 0..=2u8 {
                    let s = slot_of(policy, nonblocking, comm);
                    assert!(s < SLOTS && seen.insert(s), "slot {s}");
                    assert_eq!(slot_config(s), (!nonblocking, policy));
                }
            }
        }
        assert_eq!(seen.len(), SLOTS);
    }

    /// On every communicator, the ranks that share it (same split color) number themselves
    /// 0..size once each, in the order ncclCommSplit's keys give, and an operation's root and
    /// peers as the communicator sees them are its ranks.
    #[test]
    fn views_number_each_communicator_as_its_split_does() {
        let mut o = OpCase {
            kind: Kind::SendRecv,
            dtype: 7,
            op: Op::Sum,
            count: 0,
            root: 0,
            in_place: false,
            comm: 0,
            soff: vec![0; 5],
            roff: vec![0; 5],
            scalars: vec![0; 5],
            transfers: vec![crate::case::Transfer { src: 0, dst: 0, count: 1, soff: 0, roff: 0 }],
            mem: Mem::Plain,
            cfg: None,
            unreg: 0,
            side: 0,
        };
        for n in 1..=5usize {
            o.root = n - 1;
            o.transfers[0].src = n - 1;
            o.transfers[0].dst = n / 2;
            for c in 0..=2u8 {
                o.comm = c;
                // color -> (key, rank in the communicator, its size) of each member.
                let mut members: std::collections::BTreeMap<c_int, Vec<(c_int, usize, usize)>> = Default::default();
                for g in 0..n {
                    let (v, m, me) = view(&o, n, g);
                    assert!(v.root < m && v.transfers.iter().all(|t| t.src < m && t.dst < m), "n {n} comm {c} rank {g}");
                    let (color, key) = if c == 0 { (0, g as c_int) } else { split_of(c as usize, n, g) };
                    members.entry(color).or_default().push((key, me, m));
                }
                for (color, mut v) in members {
                    v.sort();
                    let size = v.len();
                    for (k, &(_, me, m)) in v.iter().enumerate() {
                        assert_eq!((me, m), (k, size), "n {n} comm {c} color {color}: rank by key order");
                    }
                }
            }
        }
    }
}
