//! Copy-engine direct transfers between ranks of a communicator that are separate processes on
//! one host: the sender's copy engine writes straight into the receiver's buffer, which the
//! receiver shares for the transfer through CUDA IPC. One copy engine moves 391-396 GB/s each way
//! over an NV18 pair, where SM copies top out at 365-373 (BENCHMARKS.md of 2026-11-26, cf9da02),
//! and that margin is what large Broadcast, Send/Recv, Gather and Scatter need over NCCL. At 4
//! ranks a ring of copy engines moves 386.5 GB/s a GPU where SM copies reach 359 (BENCHMARKS.md of
//! 2026-11-26, 049c93f).
//!
//! Everything is per pair of ranks (a `Link`: a Unix socket made at init, counters, mappings);
//! a launch takes the path for the pairs algo::ce_direct::pairs names, both ranks of a pair
//! alike. Per launch:
//! 1. Host handshake with every such pair: each rank tells the other whether it is capturing a
//!    CUDA graph and, for a receive, its destination's allocation (buffer id, range, offset) with
//!    a CUDA IPC handle (cudaMalloc memory) or, the first time, its cuMem file descriptor
//!    (ncclMemAlloc memory), and which of the peer's buffers it has mapped. Both then know
//!    whether the pair's transfers go by copy engine: not where only one of them captures (and
//!    from then on never: the capturing rank's replays cannot answer the other's handshakes,
//!    so both stop handshaking, `PairState::mixed`), nor
//!    for memory that cannot be shared (pools); where both capture, the counters of step 2 are
//!    device-counted (`GraphCounter`), as a replay would repeat host-written values. The
//!    sender maps the destination (cached per buffer id) and, unless both offers show it mapped
//!    already (`certain`), both exchange whether that worked. Every offer of a launch goes out
//!    before any is read (`handshake_all`), so ranks that handshake with several peers never
//!    wait on each other in a cycle. Pairs that do not agree, and transfers with peers the path
//!    does not take, are moved by the exchange kernel, planned for the whole launch with those
//!    pairs' modes left in and the agreed pairs' set to none (`Fallback::without`).
//!    By default the calling thread handshakes and issues everything (`run`), so its call
//!    returns only once the peers made their matching calls. With OXCCL_CE_DIRECT_ASYNC=1 a
//!    worker thread per communicator handshakes instead (`submit`), in call order, so a call
//!    returns at once, as NCCL's does (a program may make a rank's next call wait on the host for
//!    something the peer does after its own call returned). The call then puts on the user's
//!    stream everything that needs no answer from the peers (an event, the receives' counters, a
//!    gate for the worker's part); the worker's stream, behind the event, copies, then runs the
//!    kernel for whatever the copy engines do not move. Not the default: the user's stream
//!    waits for stream work the worker has yet to issue, and the worker's driver calls can stall
//!    behind an application thread blocked in a synchronous copy that waits for that very stream
//!    (PyTorch's `.cpu()`: stalls of seconds and hangs at 4 ranks, BENCHMARKS.md of
//!    2026-11-27, 25ab531). Issuing no stream work from another thread after the call returns would
//!    need the second of the two calls to move the data (push or pull), with the ranks agreeing
//!    which call came second; not built.
//! 2. Stream order with two counters per pair in each rank's channel buffer (`ready`: the peer's
//!    buffer may take my next copy; `done`: the peer's copy into me finished):
//!    ```text
//!    receiver: write peer.ready[me] = #receives   (its stream reached the receive: dst writable)
//!    sender:   wait  my.ready[peer] >= #sends; copy-engine copy; write peer.done[me] = #sends
//!    receiver: wait  my.done[peer] >= #receives
//!    ```
//!    A rank writes every `ready` of a launch before it waits for anything, so no ring of ranks
//!    waits for itself: a sender's wait depends only on the head of the receiver's stream.
//!    With the worker, the senders' lines and the kernel run on the worker's stream and the
//!    user's stream waits for a third counter, `gate`, which the worker writes after them (see
//!    `submit`).
//!    Writes are cuStreamWriteValue64 with its full memory barrier (the copy lands before the
//!    count); waits are a one-thread kernel (kernels/colls/ce_direct.cu) that also watches the abort
//!    flag, so ncclCommAbort releases them. Local copies (an out-of-place root's own piece) run
//!    beside the transfers on a side stream, by SMs (kernels/colls/ce_direct.cu): on this GPU's copy
//!    engines they shared the transfer's and cost out-of-place Broadcast, Scatter and AllGather
//!    4-10% (BENCHMARKS.md of 2026-11-26, cf9da02).
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::algo::{ExchangeSpec, LocalCopy, Transfer};
use crate::device_abi::{CollArgs, ExchangeArgs, OX_MAX_RANKS, OX_MODE_NONE};
use crate::error::{Error, Result};
use crate::gpu::ipc::{ImportedBuffer, IPC_HANDLE_BYTES};
use crate::gpu::module::{launch_pdl, Kernel};
use crate::gpu::stream::{capture_active, capture_deps, copy_engine_async, is_capturing, set_capture_deps, Event, OwnedStream, RelaxedCapture};
use crate::gpu::{check, cu, Device};
use crate::log::Subsys;
use crate::reg::export::{describe, VmmImport};
use crate::reg::uds;
use crate::reg::wire::Kind;

/// Mappings of the peer's buffers kept at most; beyond, new buffers take the SM path.
const MAX_IMPORTS: usize = 64;
/// Buffer ids whose descriptor the peer already has (cuMem memory: the fd goes once).
const MAX_SENT: usize = 64;
/// How long a handshake message may take to come (the peer's matching call) when the caller
/// waits for it; the worker waits as long as kernels would (until an abort).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(600);
const NO_TIMEOUT: Duration = Duration::MAX;

/// Blocks of a local copy: enough that a root's own piece is done before its transfer (out of
/// place matched in place within 1% on H200 x2 (BENCHMARKS.md of 2026-11-26, cf9da02), so the copy
/// never lengthened a call), with most SMs left to whatever else runs.
const COPY_BLOCKS: u32 = 32;

/// The path's kernels (kernels/colls/ce_direct.cu).
#[derive(Clone, Copy)]
pub struct Kernels {
    /// One thread waiting for a counter to reach a value, or for the abort flag.
    pub wait: Kernel,
    /// One thread adding one to a peer's counter (inside CUDA graphs).
    pub post: Kernel,
    /// The SM copy that runs a launch's local copies beside the transfers, on a side stream.
    pub copy: Kernel,
}

/// Offsets of the counters in a rank's counter area (u64 each). `ready(p)` and `done(p)` are
/// written by peer p; `gate` only by this rank's worker (OXCCL_CE_DIRECT_ASYNC), for its own
/// stream.
pub const fn ready_off(peer: usize) -> u64 {
    16 * peer as u64
}
/// Offset of `done(peer)`: peer p's copies into this rank that have finished.
pub const fn done_off(peer: usize) -> u64 {
    16 * peer as u64 + 8
}
/// Offset of `gate`, after every peer's pair of counters.
pub const GATE_OFF: u64 = 16 * OX_MAX_RANKS as u64;
/// The device-counted counters of transfers inside CUDA graphs (`graph_off`), after `gate`.
const GRAPH_OFF: u64 = GATE_OFF + 8;
/// Bytes of a rank's counter area (in its channel buffer).
pub const COUNTER_BYTES: u64 = GRAPH_OFF + 32 * OX_MAX_RANKS as u64;

/// The four device-counted counters a rank keeps per peer for transfers captured in CUDA graphs,
/// apart from the host-counted ones (a replay cannot repeat host-written values): the peer adds
/// one to `GraphCounter::Ready` as its stream reaches each receive from this rank and to
/// `GraphCounter::Done` after each of its copies into this rank; this rank's own waits count its
/// sends to and receives from the peer in `Sent` and `Received` (kernels/colls/ce_direct.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphCounter {
    /// The peer's receives from this rank its stream reached (written by the peer).
    Ready = 0,
    /// The peer's copies into this rank that finished (written by the peer).
    Done = 1,
    /// This rank's captured sends to the peer that its waits counted.
    Sent = 2,
    /// This rank's captured receives from the peer that its waits counted.
    Received = 3,
}

/// Offset of a graph counter concerning `peer` in a rank's counter area.
pub const fn graph_off(peer: usize, c: GraphCounter) -> u64 {
    GRAPH_OFF + 32 * peer as u64 + 8 * c as u64
}

/// What one rank tells the other before a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// This rank's stream is capturing a CUDA graph: the pair takes the path only if the peer's
    /// is too and both count on the device (`graph`).
    pub capturing: bool,
    /// While capturing: this rank moves the pair's transfers with device-counted counters
    /// (`GraphCounter`), as `run` does; the worker (`submit`) does not.
    pub graph: bool,
    /// Bytes this rank sends to the peer in this launch (0: none).
    pub send_bytes: u64,
    /// Bytes this rank receives from the peer in this launch (0: none).
    pub recv_bytes: u64,
    /// The destination of this rank's receive, if it has one and can share it.
    pub dst: Option<Dest>,
    /// Ids of the peer's buffers this rank has mapped, most recently used first (0: none), filled
    /// in as the handshake starts: where each transfer's destination is among its sender's, both
    /// ranks know the mapping holds and skip the second exchange (`certain`).
    pub mapped: [u64; MAPPED_IDS],
}

/// Mapped ids an offer lists: enough for a loop over a few buffers.
pub const MAPPED_IDS: usize = 4;

/// How the peer maps a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// cudaMalloc memory: its CUDA IPC handle.
    Ipc([u8; IPC_HANDLE_BYTES]),
    /// cuMem memory whose file descriptor travels with this message.
    Fd,
    /// cuMem memory the peer mapped before (by `id`).
    Known,
}

/// A receive buffer as the peer can map it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation for the process's lifetime.
    pub id: u64,
    /// The allocation's base and size in the receiver's address space (stale mappings are found
    /// by a new id over the same range).
    pub base: u64,
    /// The allocation's size in bytes.
    pub size: u64,
    /// Where the receive starts in the allocation, in bytes from its base.
    pub offset: u64,
    /// How the sender can map the allocation.
    pub share: Share,
}

impl Offer {
    /// Bytes of an encoded offer.
    pub const BYTES: usize = 2 + 8 * 6 + 1 + IPC_HANDLE_BYTES + 8 * MAPPED_IDS;

    /// The offer as sent on the pair's socket: `BYTES` bytes, integers little-endian (a file
    /// descriptor, for `Share::Fd`, travels beside it).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::BYTES);
        v.push(self.capturing as u8 | (self.graph as u8) << 1);
        v.push(self.dst.is_some() as u8);
        let d = self.dst.unwrap_or(Dest { id: 0, base: 0, size: 0, offset: 0, share: Share::Known });
        for w in [self.send_bytes, self.recv_bytes, d.id, d.base, d.size, d.offset] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        let (kind, h) = match d.share {
            Share::Ipc(h) => (0, h),
            Share::Fd => (1, [0; IPC_HANDLE_BYTES]),
            Share::Known => (2, [0; IPC_HANDLE_BYTES]),
        };
        v.push(kind);
        v.extend_from_slice(&h);
        for id in self.mapped {
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    /// The offer `encode` made; fails on a message of another length or with invalid flags.
    pub fn decode(b: &[u8]) -> Result<Offer> {
        const KIND: usize = 2 + 8 * 6;
        if b.len() != Self::BYTES || b[0] > 3 || b[1] > 1 || b[KIND] > 2 {
            return Err(Error::internal(format!("copy-engine handshake: malformed offer of {} bytes", b.len())));
        }
        let w = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[2 + 8 * i..10 + 8 * i]);
            u64::from_le_bytes(a)
        };
        let mut h = [0u8; IPC_HANDLE_BYTES];
        h.copy_from_slice(&b[KIND + 1..KIND + 1 + IPC_HANDLE_BYTES]);
        let mut mapped = [0u64; MAPPED_IDS];
        for (i, m) in mapped.iter_mut().enumerate() {
            let at = KIND + 1 + IPC_HANDLE_BYTES + 8 * i;
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            *m = u64::from_le_bytes(a);
        }
        let share = match b[KIND] {
            0 => Share::Ipc(h),
            1 => Share::Fd,
            _ => Share::Known,
        };
        let dst = (b[1] == 1).then_some(Dest { id: w(2), base: w(3), size: w(4), offset: w(5), share });
        Ok(Offer { capturing: b[0] & 1 == 1, graph: b[0] & 2 == 2, send_bytes: w(0), recv_bytes: w(1), dst, mapped })
    }
}

/// Whether the path can run once both offers are known: the same answer on both ranks (the
/// test is symmetric in the two offers). The launches must mirror each other (my send is the
/// peer's receive, of the same size): where they do not (say both ranks post a send first, as
/// separate operations), neither takes the path and the kernels behave as NCCL's would. Inside
/// CUDA graphs only where both ranks capture and both count on the device: one rank's host counts
/// and the other's device counts never meet.
pub fn agreed(mine: &Offer, theirs: &Offer) -> bool {
    let sides = |a: &Offer, b: &Offer| a.send_bytes == b.recv_bytes && (a.recv_bytes == 0 || a.dst.is_some());
    let modes = mine.capturing == theirs.capturing && (!mine.capturing || (mine.graph && theirs.graph));
    modes && (mine.send_bytes | mine.recv_bytes) != 0 && sides(mine, theirs) && sides(theirs, mine)
}

/// Whether both ranks know, from the two offers alone, that every transfer's sender has its
/// destination mapped already, so that the exchange of mapping results can be skipped. Symmetric
/// in the two offers, like `agreed`, and meant for offers that agree.
pub fn certain(mine: &Offer, theirs: &Offer) -> bool {
    let holds = |sender: &Offer, receiver: &Offer| {
        sender.send_bytes == 0 || receiver.dst.is_some_and(|d| d.id != 0 && sender.mapped.contains(&d.id))
    };
    holds(mine, theirs) && holds(theirs, mine)
}

enum Mapping {
    Ipc(ImportedBuffer),
    Vmm(VmmImport),
}

impl Mapping {
    fn ptr(&self) -> u64 {
        match self {
            Mapping::Ipc(m) => m.ptr,
            Mapping::Vmm(m) => m.ptr,
        }
    }
}

struct Import {
    id: u64,
    base: u64,
    size: u64,
    map: Mapping,
}

/// One pair's host-side state, taken by the thread that handshakes (the caller, or the worker).
#[derive(Default)]
struct PairState {
    /// Transfers this rank made into the peer, and the peer into this rank (the counters' values).
    sent: u64,
    received: u64,
    /// The peer's buffers mapped here, oldest first, most recently used last.
    imports: Vec<Import>,
    /// A handshake found one rank capturing a CUDA graph and the other not. The capturing rank's
    /// replays have no host part, so they cannot answer the handshakes of the other's later
    /// calls; both ranks learnt it from that one handshake, in call order, and from then on
    /// skip the pair's handshakes and leave its transfers to the exchange kernel.
    mixed: bool,
}

#[derive(Default)]
struct State {
    /// Per peer (index = rank; unused where there is no link).
    pairs: Vec<PairState>,
    stats: Stats,
}

/// Host time the path spends per launch, logged at INFO when the communicator goes.
#[derive(Default)]
struct Stats {
    handshakes: u64,
    handshake_ns: u64,
    issues: u64,
    issue_ns: u64,
}

/// The pair's socket (non-blocking seqpacket: one message per send, a descriptor may ride along).
struct Wire {
    sock: OwnedFd,
    peer: usize,
}

impl Wire {
    fn send(&self, msg: &[u8], fd: Option<RawFd>) -> Result<()> {
        uds::send(&self.sock, msg, fd).map_err(|e| self.io_error(e))
    }

    /// A socket failure: the peer's end going away is the peer's failure (ncclRemoteError).
    fn io_error(&self, e: std::io::Error) -> Error {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
        let msg = format!("copy-engine handshake with rank {}: {e}", self.peer);
        if matches!(e.kind(), BrokenPipe | ConnectionAborted | ConnectionReset) {
            Error::remote(msg)
        } else {
            Error::system(msg)
        }
    }

    /// The peer's next message (and descriptor), waiting for its matching call until `aborted`
    /// or `timeout`.
    fn recv(&self, aborted: &dyn Fn() -> bool, timeout: Duration) -> Result<(Vec<u8>, Option<OwnedFd>)> {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            match uds::recv(&self.sock, Offer::BYTES) {
                Ok(uds::Received::Msg(m, fd)) => return Ok((m, fd)),
                Ok(uds::Received::Empty) => {}
                Ok(uds::Received::Closed) => return Err(Error::remote(format!("copy-engine handshake: rank {} closed its connection", self.peer))),
                Err(e) => return Err(self.io_error(e)),
            }
            spins += 1;
            if spins > 2000 {
                if aborted() {
                    return Err(Error::remote(format!("copy-engine handshake with rank {}: communicator aborted", self.peer)));
                }
                if t0.elapsed() > timeout {
                    return Err(Error::remote(format!("copy-engine handshake: rank {} made no matching call in {} s", self.peer, timeout.as_secs())));
                }
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What one handshake decided, the same on both ranks as to whether the path runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Some: the path runs; the address here of the peer's destination (0 if this rank only
    /// receives). None: both ranks run the kernels.
    pub target: Option<u64>,
    /// The peer mapped this rank's destination (it need not be sent its descriptor again).
    pub peer_mapped: bool,
}

/// One rank's side of one pair's handshake in a launch.
struct Party<'a> {
    wire: &'a Wire,
    mine: Offer,
    fd: Option<RawFd>,
}

/// The handshakes of one launch with each of its pairs: every offer goes out before any is read,
/// then, for each pair that `agreed`, the sender maps the peer's destination (`map`, given the
/// pair's index and the descriptor that came with the offer) and, unless `certain`, both say
/// whether that worked, again all sends before any read. Sends never wait (a few hundred bytes
/// into a socket buffer), so ranks handshaking with several peers in any order cannot wait on
/// each other in a cycle. One verdict per party, in order. `mixed[i]` is set as soon as party
/// i's offer shows one rank capturing and the other not, so that it holds even where a later
/// step fails (the peer, whose step may not fail, learns it from the same offers).
fn handshake_all(
    parties: &[Party],
    aborted: &dyn Fn() -> bool,
    timeout: Duration,
    mut map: impl FnMut(usize, &Dest, Option<OwnedFd>) -> Option<u64>,
    mixed: &mut [bool],
) -> Result<Vec<Verdict>> {
    for p in parties {
        p.wire.send(&p.mine.encode(), p.fd)?;
    }
    let mut theirs = Vec::with_capacity(parties.len());
    for (i, p) in parties.iter().enumerate() {
        let (msg, fd) = p.wire.recv(aborted, timeout)?;
        let offer = Offer::decode(&msg)?;
        mixed[i] = p.mine.capturing != offer.capturing;
        theirs.push((offer, fd));
    }
    let mut out = Vec::with_capacity(parties.len());
    let mut second = Vec::new();
    for (i, (p, (their, their_fd))) in parties.iter().zip(theirs).enumerate() {
        let mine = &p.mine;
        if !agreed(mine, &their) {
            nccl_trace!(
                Subsys::P2p,
                "copy-engine direct with rank {}: not this time (capturing {} / {}, device counts {} / {}, shareable {} / {})",
                p.wire.peer,
                mine.capturing,
                their.capturing,
                mine.graph,
                their.graph,
                mine.dst.is_some(),
                their.dst.is_some()
            );
            out.push(Verdict { target: None, peer_mapped: false });
            continue;
        }
        let target = match their.dst.filter(|_| mine.send_bytes > 0) {
            Some(d) => map(i, &d, their_fd),
            None => Some(0),
        };
        if certain(mine, &their) {
            // The peer skips the second exchange too: a cached mapping cannot fail.
            if target.is_none() {
                return Err(Error::internal("copy-engine handshake: a mapping both ranks knew of is gone"));
            }
            out.push(Verdict { target, peer_mapped: mine.dst.is_some() });
            continue;
        }
        p.wire.send(&[target.is_some() as u8], None)?;
        second.push(i);
        out.push(Verdict { target, peer_mapped: false });
    }
    for i in second {
        let p = &parties[i];
        let peer_ok = p.wire.recv(aborted, timeout)?.0.first() == Some(&1);
        let v = &mut out[i];
        if !peer_ok || v.target.is_none() {
            nccl_trace!(Subsys::P2p, "copy-engine direct with rank {}: a mapping failed, the SM path moves it", p.wire.peer);
        }
        *v = Verdict { target: v.target.filter(|_| peer_ok), peer_mapped: peer_ok && p.mine.dst.is_some() };
    }
    Ok(out)
}

/// One pair's handshake (`handshake_all` with one party).
#[cfg(test)]
fn handshake(
    wire: &Wire,
    mine: &Offer,
    fd: Option<RawFd>,
    aborted: &dyn Fn() -> bool,
    timeout: Duration,
    mut map: impl FnMut(&Dest, Option<OwnedFd>) -> Option<u64>,
) -> Result<Verdict> {
    let v = handshake_all(&[Party { wire, mine: *mine, fd }], aborted, timeout, |_, d, fd| map(d, fd), &mut [false])?;
    Ok(v[0])
}

/// The path between this rank and its peers in other processes of the host. With
/// OXCCL_CE_DIRECT_ASYNC=1 the handshakes run on a worker thread (`submit`), so that a call
/// returns at once, as NCCL's does; else on the calling thread (`run`).
pub struct CeDirect {
    inner: Arc<Inner>,
    worker: Option<Worker>,
}

/// The exchange kernel's launch for a whole launch's transfers, made for whatever the copy
/// engines do not move.
pub struct Fallback {
    /// The exchange kernel.
    pub kernel: Kernel,
    /// Thread blocks of the launch.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Its arguments, with a mode, rounds and chunk per peer.
    pub args: Box<ExchangeArgs>,
}

impl Fallback {
    /// This launch without the pairs whose transfers the copy engines move: their mode becomes
    /// none, which the kernel skips in every phase (no packets, no put rounds or syncs, no
    /// flags, no offers), as for a pair with nothing to move. The grid stays, so block b still
    /// pairs with block b on every peer. None if no pair is left: the launch's local copies then
    /// run beside the copy-engine copies (`fork_copies`) instead of in the kernel.
    fn without(mut self, peers: impl Iterator<Item = usize>) -> Option<Fallback> {
        for p in peers {
            self.args.mode[p] = OX_MODE_NONE;
            self.args.rounds[p] = 0;
            self.args.chunk[p] = 0;
            self.args.offer[p] = 0;
        }
        self.args.mode.iter().any(|&m| m != OX_MODE_NONE).then_some(self)
    }
}

/// One pair's part of a launch.
struct Part {
    peer: usize,
    offer: Offer,
    fd: Option<OwnedFd>,
    send: Option<Transfer>,
    recv: Option<Transfer>,
    /// This launch's counts for the pair (worker mode: `Link::sent`, `Link::received`).
    sent: u64,
    received: u64,
}

/// One launch handed to the worker, in call order.
struct Op {
    parts: Vec<Part>,
    copies: Vec<LocalCopy>,
    kernels: Kernels,
    dev_comm: u64,
    /// The worker's part of the launch. None: the caller already runs the kernel (it captures a
    /// graph, or cannot share any receive buffer), and the worker only tells the peers.
    work: Option<Work>,
}

struct Work {
    /// Recorded on the user's stream where the launch stands in it.
    at: Event,
    /// The kernel for the whole launch, less the pairs that agree.
    fallback: Fallback,
    /// The gate count the user's stream waits for, when the worker's stream has work the user's
    /// stream must wait for (a send, local copies, transfers outside the path); None for bare
    /// receives, whose stream waits for their `done` counts instead (the peers' copies, or the
    /// worker after the kernel).
    gate: Option<u64>,
}

/// Launches waiting for the worker, in call order, and its stop flag.
struct Queue<T> {
    ops: Mutex<std::collections::VecDeque<T>>,
    more: parking_lot::Condvar,
    stop: AtomicBool,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue { ops: Mutex::new(Default::default()), more: parking_lot::Condvar::new(), stop: AtomicBool::new(false) }
    }

    fn push(&self, op: T) {
        self.ops.lock().push_back(op);
        self.more.notify_one();
    }

    /// Asks the worker to finish what is queued and exit.
    fn stop(&self) {
        // The flag under the lock: a worker between its check and its wait cannot miss it.
        let _ops = self.ops.lock();
        self.stop.store(true, Ordering::Release);
        self.more.notify_all();
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The next launch, waiting for one; None once stopped with nothing left, or once `flagged`
    /// (looked at every 10 ms while idle).
    fn next(&self, flagged: &dyn Fn() -> bool) -> Option<T> {
        let mut ops = self.ops.lock();
        loop {
            if let Some(op) = ops.pop_front() {
                return Some(op);
            }
            if self.stopping() || flagged() {
                return None;
            }
            self.more.wait_for(&mut ops, Duration::from_millis(10));
        }
    }

    /// Serves launches in order until stopped and drained, until `flagged` while idle, or until
    /// one fails (a panic counts as a failure): the first failure, if any.
    fn serve_all(&self, mut serve: impl FnMut(T) -> Result<()>, flagged: &dyn Fn() -> bool) -> Result<()> {
        while let Some(op) = self.next(flagged) {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(op)))
                .unwrap_or_else(|_| Err(Error::internal("copy-engine direct worker panicked")))?;
        }
        Ok(())
    }
}

struct Worker {
    queue: Arc<Queue<Op>>,
    /// Gate counts handed out (the caller holds the launch lock, so in call order).
    issued: AtomicU64,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for CeDirect {
    fn drop(&mut self) {
        self.stop();
        let st = self.inner.state.lock();
        let s = &st.stats;
        if s.handshakes > 0 {
            nccl_info!(
                Subsys::P2p,
                "copy-engine direct: {} handshakes, {:.1} us each; {} launches' stream work issued, {:.1} us each (host time)",
                s.handshakes,
                s.handshake_ns as f64 / s.handshakes as f64 / 1e3,
                s.issues,
                s.issue_ns as f64 / s.issues.max(1) as f64 / 1e3
            );
        }
    }
}

/// The path's end of one pair.
struct Link {
    wire: Wire,
    /// The peer's counter area, as mapped here.
    theirs: u64,
    /// Ids of this rank's buffers the peer has mapped (it said so): read by the caller as it
    /// describes a receive, so never held across a handshake.
    known: Mutex<Vec<u64>>,
    /// With the worker: sends and receives of every launch the path takes for the pair, counted
    /// by the caller in call order (the launch lock), so on both ranks alike whatever the
    /// handshake then says.
    sent: AtomicU64,
    received: AtomicU64,
}

struct Inner {
    dev: &'static Device,
    me: usize,
    /// Per peer (index = rank): the pair's link, where the two ranks connected one.
    links: Vec<Option<Link>>,
    /// This rank's counter area (device address).
    mine: u64,
    /// The communicator's abort flag (host memory): a handshake wait gives up once it is set.
    abort: std::sync::Arc<crate::gpu::HostMapped>,
    /// The pairs' counts and mappings: taken by the thread that handshakes (the caller, or the
    /// worker across its wait for the peers).
    state: Mutex<State>,
    side: OwnedStream,
    fork: Event,
    join: Event,
    /// Events for the worker's launches, reused: one is back here once the worker's stream waits
    /// on it (a wait takes the event's state when it is queued).
    events: Mutex<Vec<Event>>,
    /// Local copies by copy engine instead of the SM copy kernel (the ZERO CTA policy:
    /// algo::policy).
    local_by_engine: bool,
    /// Smallest transfer moved inside CUDA graphs, by device-counted counters
    /// (algo::ce_direct::graph_min_bytes); None (OXCCL_CE_DIRECT_GRAPH=0): a capturing rank
    /// offers no graph path and the pair takes the exchange kernel.
    graph_min: Option<u64>,
    /// Fails the communicator (`connect`'s `fatal`).
    fatal: Box<dyn Fn(Error) + Send + Sync>,
}

// SAFETY: the events and stream are driver handles usable from any thread; State is behind a lock.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

impl CeDirect {
    /// Collective over the communicator (every rank calls it at init): connects a socket for
    /// each pair of ranks that `candidate` allows on both sides (separate processes of one host).
    /// `counters`: every rank's counter area as mapped here (COUNTER_BYTES, zeroed at init). A
    /// pair keeps its link only if both ranks connected it; None where no pair did.
    /// `fatal`: called where a launch fails after its pairs agreed (the pairs' counts are then
    /// apart for good; the caller fails the communicator).
    /// `async_errors`: Some to start the worker thread (OXCCL_CE_DIRECT_ASYNC), which reports a
    /// failure through it. `local_by_engine`: local copies beside the transfers by copy engine
    /// (the ZERO CTA policy), else by `COPY_BLOCKS` blocks of SM copies. `graph_min`: the path
    /// inside CUDA graphs for pairs whose transfers are all at least this large
    /// (algo::ce_direct::graph_min_bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        boot: &crate::bootstrap::Bootstrap,
        dev: &'static Device,
        comm_key: u64,
        counters: &[u64],
        candidate: &[bool],
        abort: Arc<crate::gpu::HostMapped>,
        fatal: Box<dyn Fn(Error) + Send + Sync>,
        async_errors: Option<Box<dyn Fn(Error) + Send + Sync>>,
        local_by_engine: bool,
        graph_min: Option<u64>,
    ) -> Result<Option<CeDirect>> {
        let (me, n) = (boot.rank(), boot.nranks());
        let name = |lo: usize, hi: usize| format!("oxccl-ce-{comm_key:016x}-{lo}-{hi}");
        let wanted = |p: usize| p != me && p < n && candidate.get(p).copied().unwrap_or(false);
        // The lower rank of a pair listens, the higher connects: all listeners exist before the
        // barrier, and a connection waits in the listener's backlog until it is accepted.
        let listeners: Vec<(usize, Option<OwnedFd>)> = (me + 1..n).filter(|&p| wanted(p)).map(|p| (p, uds::listen(&name(me, p)).ok())).collect();
        boot.barrier()?;
        let mut socks: Vec<Option<OwnedFd>> = (0..n).map(|_| None).collect();
        for p in (0..me).filter(|&p| wanted(p)) {
            socks[p] = uds::connect(&name(p, me), Duration::from_secs(10)).ok().filter(|s| uds::set_nonblocking(s).is_ok());
        }
        for (p, l) in listeners {
            socks[p] = l.and_then(|l| {
                let until = Instant::now() + Duration::from_secs(10);
                loop {
                    match uds::accept(&l) {
                        Ok(Some(s)) => break Some(s),
                        Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_micros(100)),
                        _ => break None,
                    }
                }
            });
        }
        let mine: Vec<u8> = socks.iter().map(|s| s.is_some() as u8).collect();
        let all = boot.all_gather(&mine)?;
        let both = |p: usize| socks[p].is_some() && all.get(p).and_then(|v| v.get(me)) == Some(&1);
        let keep: Vec<bool> = (0..n).map(both).collect();
        if !keep.iter().any(|&k| k) {
            nccl_info!(Subsys::Init, "copy-engine direct: no socket to any peer; large transfers use SM copies");
            return Ok(None);
        }
        let links: Vec<Option<Link>> = socks
            .into_iter()
            .enumerate()
            .map(|(p, s)| {
                s.filter(|_| keep[p]).map(|sock| Link {
                    wire: Wire { sock, peer: p },
                    theirs: counters[p],
                    known: Mutex::new(Vec::new()),
                    sent: AtomicU64::new(0),
                    received: AtomicU64::new(0),
                })
            })
            .collect();
        let linked: Vec<usize> = (0..n).filter(|&p| keep[p]).collect();
        nccl_info!(Subsys::Init, "copy-engine direct: linked to ranks {linked:?}");
        let _g = crate::gpu::CtxGuard::new(dev)?;
        let inner = Arc::new(Inner {
            dev,
            me,
            links,
            mine: counters[me],
            abort,
            state: Mutex::new(State { pairs: (0..n).map(|_| PairState::default()).collect(), stats: Stats::default() }),
            side: OwnedStream::new(dev)?,
            fork: Event::new()?,
            join: Event::new()?,
            events: Mutex::new(Vec::new()),
            local_by_engine,
            graph_min,
            fatal,
        });
        let worker = match async_errors {
            None => None,
            Some(on_error) => {
                let queue = Arc::new(Queue::new());
                let (i, q) = (inner.clone(), queue.clone());
                let thread = std::thread::Builder::new()
                    .name("oxccl-ce-direct".into())
                    .spawn(move || i.work(&q, on_error))
                    .map_err(|e| Error::system(format!("copy-engine direct: cannot start its worker thread: {e}")))?;
                Some(Worker { queue, issued: AtomicU64::new(0), thread: Mutex::new(Some(thread)) })
            }
        };
        Ok(Some(CeDirect { inner, worker }))
    }

    /// Whether this rank has a link with `peer` (the same answer on both ranks of the pair).
    pub fn linked(&self, peer: usize) -> bool {
        self.inner.links.get(peer).is_some_and(|l| l.is_some())
    }

    /// Whether launches go through `submit` (the worker) rather than `run`.
    pub fn is_async(&self) -> bool {
        self.worker.is_some()
    }

    /// Ends the worker thread, if any: it finishes what is queued (a destroy has waited for the
    /// streams, whose gates needed it) or, once the communicator's abort flag is set, gives up on
    /// the peers and exits (the wait kernels let go on the same flag). ncclCommAbort calls it
    /// after setting the flag and before it waits for the streams.
    pub fn stop(&self) {
        if let Some(w) = &self.worker {
            w.queue.stop();
            if let Some(t) = w.thread.lock().take() {
                let _ = t.join();
            }
        }
    }

    /// Kernels or copies of the communicator may still run: its mappings of the peers' buffers
    /// (and the rest of the path's state) stay for good.
    pub fn leak(&self) {
        std::mem::forget(self.inner.clone());
    }

    /// Moves `spec` on `stream`: the transfers with `peers` (algo::ce_direct::pairs, all linked)
    /// by copy engine where the handshake agrees, the rest by `fallback` (the exchange kernel
    /// for all of `spec`), on both ranks of each pair alike. The caller holds the launch lock
    /// with the device's context current.
    pub fn run(&self, kernels: Kernels, dev_comm: u64, spec: &ExchangeSpec, peers: &[usize], fallback: Fallback, stream: cu::CUstream) -> Result<()> {
        self.inner.run(kernels, dev_comm, spec, peers, fallback, stream)
    }

    /// The worker's form of `run`: returns at once, leaving the handshakes to the worker. Every
    /// launch counts, per pair in `peers`, its send and/or receive on both ranks. Gives
    /// `fallback` back when this rank already knows that no pair can agree (it captures a graph,
    /// or cannot share any receive buffer): the caller launches it, and the worker tells the
    /// peers. Otherwise the user's stream gets, in order:
    /// ```text
    /// event at                        (the worker's stream starts here)
    /// write peer.ready[me] = #recv    (each receive: dst writable, as in `run`)
    /// wait  my.gate >= #gate          (sends, local copies or other transfers: the worker's part)
    /// wait  my.done[peer] >= #recv    (each receive: the peer's copy, or the worker's kernel)
    /// ```
    /// Bare receives thus cost the stream no more than `run`'s; the worker, once the peers'
    /// offers are in, runs the sends' copies and the kernel (`serve`). The caller holds the
    /// launch lock with the device's context current.
    pub fn submit(
        &self,
        kernels: Kernels,
        dev_comm: u64,
        spec: &ExchangeSpec,
        peers: &[usize],
        fallback: Fallback,
        stream: cu::CUstream,
    ) -> Result<Option<Fallback>> {
        let Some(w) = &self.worker else { return Err(Error::internal("copy-engine direct: submit without a worker")) };
        let inner = &*self.inner;
        let capturing = is_capturing(stream)?;
        // Under capture the worker would issue stream work outside the graph: it offers no graph
        // path, so the pair falls back to the kernel.
        let mut parts = inner.parts(spec, peers, capturing, false)?;
        // Taken before the counts move: a failure after them would leave the ranks' counts apart.
        let at = match inner.events.lock().pop() {
            Some(e) => e,
            None => Event::new()?,
        };
        for pt in &mut parts {
            let l = inner.link(pt.peer)?;
            let count = |c: &AtomicU64, on: bool| if on { c.fetch_add(1, Ordering::Relaxed) + 1 } else { 0 };
            pt.sent = count(&l.sent, pt.send.is_some());
            pt.received = count(&l.received, pt.recv.is_some());
        }
        let copies = real_copies(&spec.copies);
        // No pair can agree, whatever the peers offer. Their counts still moved: their waits are
        // released by their workers (after their kernels), and later ones wait for later counts.
        if parts.iter().all(|pt| capturing || (pt.recv.is_some() && pt.offer.dst.is_none())) {
            inner.events.lock().push(at);
            w.queue.push(Op { parts, copies, kernels, dev_comm, work: None });
            return Ok(Some(fallback));
        }
        at.record(stream)?;
        for pt in parts.iter().filter(|pt| pt.recv.is_some()) {
            let l = inner.link(pt.peer)?;
            inner.write(l.theirs + ready_off(inner.me), pt.received, stream, "cuStreamWriteValue64 (ready)")?;
        }
        // Transfers with peers outside the path leave the kernel work on the worker's stream.
        let outside = spec.sends.iter().chain(&spec.recvs).any(|x| !peers.contains(&x.peer));
        let gate = (parts.iter().any(|pt| pt.send.is_some()) || !copies.is_empty() || outside).then(|| w.issued.fetch_add(1, Ordering::Relaxed) + 1);
        let waits: Vec<(usize, u64)> = parts.iter().filter(|pt| pt.recv.is_some()).map(|pt| (pt.peer, pt.received)).collect();
        w.queue.push(Op { parts, copies, kernels, dev_comm, work: Some(Work { at, fallback, gate }) });
        if let Some(g) = gate {
            inner.wait(kernels, dev_comm, inner.mine + GATE_OFF, g, stream)?;
        }
        for (p, received) in waits {
            inner.wait(kernels, dev_comm, inner.mine + done_off(p), received, stream)?;
        }
        Ok(None)
    }
}

/// Local copies that move bytes.
fn real_copies(copies: &[LocalCopy]) -> Vec<LocalCopy> {
    copies.iter().filter(|c| c.bytes > 0 && c.src != c.dst).copied().collect()
}

impl Inner {
    fn link(&self, peer: usize) -> Result<&Link> {
        self.links.get(peer).and_then(|l| l.as_ref()).ok_or_else(|| Error::internal(format!("copy-engine direct: no link with rank {peer}")))
    }

    /// This rank's part of a launch for each of `peers`: its send to and receive from the peer
    /// (at most one each: algo::ce_direct::pairs) and its offer, the receive described for
    /// sharing unless capturing without the graph path (`graph`, meaningful only while
    /// capturing; per pair, only for transfers of at least `graph_min`). Counts are left at 0.
    fn parts(&self, spec: &ExchangeSpec, peers: &[usize], capturing: bool, graph: bool) -> Result<Vec<Part>> {
        let mut parts = Vec::with_capacity(peers.len());
        for &p in peers {
            let l = self.link(p)?;
            let send = spec.sends.iter().find(|x| x.peer == p).copied();
            let recv = spec.recvs.iter().find(|x| x.peer == p).copied();
            let size = |x: Option<Transfer>| x.map_or(0, |t| t.bytes);
            let graph = capturing && graph && crate::algo::ce_direct::takes_in_graph(size(send), size(recv), self.graph_min);
            let (dst, fd) = match recv {
                Some(r) if !capturing || graph => self.describe(l, r)?,
                _ => (None, None),
            };
            let offer = Offer { capturing, graph, send_bytes: size(send), recv_bytes: size(recv), dst, mapped: [0; MAPPED_IDS] };
            parts.push(Part { peer: p, offer, fd, send, recv, sent: 0, received: 0 });
        }
        Ok(parts)
    }

    fn run(&self, kernels: Kernels, dev_comm: u64, spec: &ExchangeSpec, peers: &[usize], fallback: Fallback, stream: cu::CUstream) -> Result<()> {
        let capturing = is_capturing(stream)?;
        // Describing and mapping buffers while this stream, or another thread's in global mode,
        // captures: relaxed mode, so that those driver calls neither fail nor invalidate a graph.
        let _relaxed = RelaxedCapture::new()?;
        // An invalidated capture offers no graph path: the peer's graph must not wait for
        // copies this rank's graph will never hold.
        let graph = self.graph_min.is_some() && capturing && capture_active(stream)?;
        let parts = self.parts(spec, peers, capturing, graph)?;
        let mut st = self.state.lock();
        let aborted = || self.abort.load_u64(0) != 0;
        let verdicts = self.agree(&mut st, &parts, &aborted, HANDSHAKE_TIMEOUT)?;
        let t0 = Instant::now();
        let agreed: Vec<(&Part, u64)> = parts.iter().zip(&verdicts).filter_map(|(pt, v)| v.target.map(|t| (pt, t))).collect();
        let rest = fallback.without(agreed.iter().map(|(pt, _)| pt.peer));
        let issued = self.issue(kernels, dev_comm, spec, &agreed, rest, capturing, &mut st, stream);
        if let Err(e) = &issued {
            // The peers count this launch's transfers already: a replay or the next call would
            // pair the k-th send with another receive. Nothing may run on this communicator.
            if !agreed.is_empty() {
                (self.fatal)(e.clone().context("copy-engine direct: a launch failed after its pairs agreed"));
            }
        }
        issued?;
        st.stats.issues += 1;
        st.stats.issue_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// `run`'s stream work once the pairs have agreed (`agreed`: each pair and its destination);
    /// `rest`: the exchange kernel for what the copy engines do not take.
    #[allow(clippy::too_many_arguments)]
    fn issue(
        &self,
        kernels: Kernels,
        dev_comm: u64,
        spec: &ExchangeSpec,
        agreed: &[(&Part, u64)],
        rest: Option<Fallback>,
        capturing: bool,
        st: &mut State,
        stream: cu::CUstream,
    ) -> Result<()> {
        // The kernel, if any, carries the local copies; else they go beside the copies: on the side
        // stream, or, inside a graph, as branches of the capture (a side stream joined to the
        // capture would stay in it until the capture ends, where this communicator's next eager
        // launch would find it).
        let copies = if rest.is_some() { Vec::new() } else { real_copies(&spec.copies) };
        let branches = if capturing { self.branch_copies(kernels, &copies, stream)? } else { Vec::new() };
        if !capturing {
            self.fork_copies(kernels, &copies, stream)?;
        }
        let wait = |counter: u64, value: u64| self.wait(kernels, dev_comm, counter, value, stream);
        // Every `ready` first: a sender's wait below must never depend on this stream's own later work.
        // Inside a graph the same lines count on the device (`GraphCounter`), and the host's
        // counts stay as they were.
        let mut recvs = Vec::new();
        for (pt, _) in agreed.iter().filter(|(pt, _)| pt.recv.is_some()) {
            let theirs = self.link(pt.peer)?.theirs;
            if capturing {
                self.post(kernels, theirs + graph_off(self.me, GraphCounter::Ready), stream)?;
                recvs.push((pt.peer, 0));
                continue;
            }
            let ps = &mut st.pairs[pt.peer];
            ps.received += 1;
            self.write(theirs + ready_off(self.me), ps.received, stream, "cuStreamWriteValue64 (ready)")?;
            recvs.push((pt.peer, ps.received));
        }
        for &(pt, target) in agreed.iter() {
            let Some(s) = pt.send else { continue };
            if capturing {
                self.send_in_graph(kernels, dev_comm, pt.peer, target, s, stream)?;
                continue;
            }
            let ps = &mut st.pairs[pt.peer];
            ps.sent += 1;
            self.send(kernels, dev_comm, pt.peer, ps.sent, target, s, stream)?;
        }
        if let Some(fb) = rest {
            launch_pdl(fb.kernel, fb.grid, fb.block, stream, &*fb.args, false)?;
        }
        for (p, received) in recvs {
            if capturing {
                self.wait_next(kernels, dev_comm, p, GraphCounter::Done, GraphCounter::Received, stream)?;
            } else {
                wait(self.mine + done_off(p), received)?;
            }
        }
        if !branches.is_empty() {
            set_capture_deps(stream, &branches, true)?;
        } else if !copies.is_empty() && !capturing {
            self.join.wait_on(stream)?;
        }
        Ok(())
    }

    /// The sender's line of the protocol for its `count`-th copy to `peer`: wait for the peer's
    /// `ready`, copy by copy engine into `target` (the peer's buffer as mapped here), then
    /// write the peer's `done`, all in `stream`'s order.
    #[allow(clippy::too_many_arguments)]
    fn send(&self, kernels: Kernels, dev_comm: u64, peer: usize, count: u64, target: u64, s: Transfer, stream: cu::CUstream) -> Result<()> {
        self.wait(kernels, dev_comm, self.mine + ready_off(peer), count, stream)?;
        copy_engine_async(target, s.ptr, s.bytes as usize, stream)?;
        self.write(self.link(peer)?.theirs + done_off(self.me), count, stream, "cuStreamWriteValue64 (done)")
    }

    /// `send` inside a CUDA graph: wait for the peer's next `Ready` (this rank's `Sent` count,
    /// raised by the wait), copy, then add one to the peer's `Done`, all on the device.
    fn send_in_graph(&self, kernels: Kernels, dev_comm: u64, peer: usize, target: u64, s: Transfer, stream: cu::CUstream) -> Result<()> {
        self.wait_next(kernels, dev_comm, peer, GraphCounter::Ready, GraphCounter::Sent, stream)?;
        copy_engine_async(target, s.ptr, s.bytes as usize, stream)?;
        self.post(kernels, self.link(peer)?.theirs + graph_off(self.me, GraphCounter::Done), stream)
    }

    /// Makes `stream` wait, inside a CUDA graph, until this rank's counter `what` of `peer`
    /// reaches its own count `own` of that peer, raised by one first (kernels/colls/ce_direct.cu).
    #[allow(clippy::too_many_arguments)]
    fn wait_next(&self, kernels: Kernels, dev_comm: u64, peer: usize, what: GraphCounter, own: GraphCounter, stream: cu::CUstream) -> Result<()> {
        let args = CollArgs { comm: dev_comm, send: self.mine + graph_off(peer, what), recv: self.mine + graph_off(peer, own), ..Default::default() };
        launch_pdl(kernels.wait, 1, 32, stream, &args, false)
    }

    /// Adds one to a peer's counter (its address as mapped here) in `stream`'s order, on the
    /// device: the graph form of `write`.
    fn post(&self, kernels: Kernels, counter: u64, stream: cu::CUstream) -> Result<()> {
        let args = CollArgs { recv: counter, ..Default::default() };
        launch_pdl(kernels.post, 1, 32, stream, &args, false)
    }

    /// Makes `stream` wait until this rank's counter at `counter` reaches `value`: a one-thread
    /// kernel (kernels/colls/ce_direct.cu) that also lets go on an abort. (cuStreamWaitValue64 in its
    /// place was measured slower, 1-30% at 2-64 MB (2026-11-26, acd1c4b), and only the value
    /// releases it.)
    fn wait(&self, kernels: Kernels, dev_comm: u64, counter: u64, value: u64, stream: cu::CUstream) -> Result<()> {
        let args = CollArgs { comm: dev_comm, send: counter, count: value, ..Default::default() };
        launch_pdl(kernels.wait, 1, 32, stream, &args, false)
    }

    /// The worker thread: serves queued launches in call order until stopped (after the queue
    /// drains) or a launch fails (reported through `on_error`, which also aborts the
    /// communicator, so the gates and every kernel waiting on the pair let go).
    fn work(&self, q: &Queue<Op>, on_error: Box<dyn Fn(Error) + Send + Sync>) {
        // Relaxed capture mode: mapping a peer's buffer here must neither fail nor invalidate a
        // graph the application captures meanwhile in global mode on another thread.
        let setup = crate::gpu::CtxGuard::new(self.dev).and_then(|g| Ok((g, RelaxedCapture::new()?, OwnedStream::new(self.dev)?)));
        let (_ctx, _relaxed, stream) = match setup {
            Ok(x) => x,
            Err(e) => return on_error(e.context("copy-engine direct worker")),
        };
        // A stop (the communicator going away) ends a wait for the peer: by then the streams were
        // waited for, so every launch that gates one was served, and what is left only tells the
        // peer about kernels it runs anyway.
        let flagged = || self.abort.load_u64(0) != 0;
        let aborted = || flagged() || q.stopping();
        if let Err(e) = q.serve_all(|op| self.serve(op, stream.raw, &aborted), &flagged) {
            // After a stop or an abort the failure is the communicator's end, not news.
            if !aborted() {
                on_error(e);
            }
        }
    }

    /// One queued launch: the handshakes, then the worker's part of it on its stream, behind the
    /// caller's event: the agreed sends' copies (each waits for the peer's `ready`, then writes
    /// its `done`), then the kernel for everything else with the local copies (or the local
    /// copies beside the sends, where nothing else is left), then this rank's own `done` for
    /// each receive of a pair that did not agree (the peer will not write it); last the gate.
    fn serve(&self, op: Op, work: cu::CUstream, aborted: &dyn Fn() -> bool) -> Result<()> {
        let mut st = self.state.lock();
        nccl_trace!(Subsys::P2p, "ce worker: handshake start, peers {:?}", op.parts.iter().map(|p| p.peer).collect::<Vec<_>>());
        let verdicts = self.agree(&mut st, &op.parts, aborted, NO_TIMEOUT)?;
        nccl_trace!(Subsys::P2p, "ce worker: handshake done {:?}", verdicts);
        let Some(Work { at, fallback, gate }) = op.work else { return Ok(()) };
        let t0 = Instant::now();
        let rest = fallback.without(op.parts.iter().zip(&verdicts).filter(|(_, v)| v.target.is_some()).map(|(pt, _)| pt.peer));
        let copies = if rest.is_some() { Vec::new() } else { op.copies };
        let own_done: Vec<&Part> = op.parts.iter().zip(&verdicts).filter(|(pt, v)| v.target.is_none() && pt.recv.is_some()).map(|(pt, _)| pt).collect();
        let sends: Vec<(&Part, u64)> = op.parts.iter().zip(&verdicts).filter_map(|(pt, v)| v.target.filter(|_| pt.send.is_some()).map(|t| (pt, t))).collect();
        if gate.is_some() || rest.is_some() || !own_done.is_empty() {
            at.wait_on(work)?;
        }
        self.fork_copies(op.kernels, &copies, work)?;
        for (pt, target) in sends {
            let Some(s) = pt.send else { continue };
            self.send(op.kernels, op.dev_comm, pt.peer, pt.sent, target, s, work)?;
        }
        if let Some(fb) = rest {
            launch_pdl(fb.kernel, fb.grid, fb.block, work, &*fb.args, false)?;
        }
        for pt in own_done {
            // The peer will not write it: this rank releases its own receive, after the kernel.
            self.write(self.mine + done_off(pt.peer), pt.received, work, "cuStreamWriteValue64 (own done)")?;
        }
        if !copies.is_empty() {
            self.join.wait_on(work)?;
        }
        self.events.lock().push(at);
        if let Some(g) = gate {
            self.write(self.mine + GATE_OFF, g, work, "cuStreamWriteValue64 (gate)")?;
        }
        nccl_trace!(Subsys::P2p, "ce worker: enqueued, gate {:?}", gate);
        st.stats.issues += 1;
        st.stats.issue_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Writes `value` to a counter (this rank's, or a peer's as mapped here) in `stream`'s
    /// order. The default flags put a full memory barrier before the write: whatever the stream
    /// did before (a copy into the peer, kernels) is visible before the count.
    fn write(&self, counter: u64, value: u64, stream: cu::CUstream, what: &str) -> Result<()> {
        // SAFETY: the address is a counter of a channel buffer (this rank's or a peer's, mapped
        // here for the communicator's lifetime).
        check(unsafe { cu::cuStreamWriteValue64_v2(stream, counter, value, 0) }, what)
    }

    /// Local copies (already filtered) inside a CUDA graph, as `fork_copies` makes them, each a
    /// branch off `stream`'s capture: the work captured next depends on what it depended on
    /// before, not on the copies. Returns the branches' last nodes, which the caller joins back
    /// (`set_capture_deps`, add) where the launch ends. Serial on the stream, a 32 MiB copy
    /// added its own time to an out-of-place AllGather (139.5 against 107.4 us in place, 64 MB,
    /// 2 x H200, 2026-11-30).
    fn branch_copies(&self, kernels: Kernels, copies: &[LocalCopy], stream: cu::CUstream) -> Result<Vec<cu::CUgraphNode>> {
        if copies.is_empty() {
            return Ok(Vec::new());
        }
        let base = capture_deps(stream)?;
        let mut ends = Vec::new();
        let branched = copies.iter().try_for_each(|c| {
            set_capture_deps(stream, &base, false)?;
            if self.local_by_engine {
                copy_engine_async(c.dst, c.src, c.bytes as usize, stream)?;
            } else {
                let args = CollArgs { send: c.src, recv: c.dst, count: c.bytes, ..Default::default() };
                launch_pdl(kernels.copy, COPY_BLOCKS, 512, stream, &args, false)?;
            }
            ends.extend(capture_deps(stream)?);
            Ok(())
        });
        // The stream goes on from where it stood, failure or not; joined by the caller.
        set_capture_deps(stream, &base, false)?;
        branched.map(|()| ends)
    }

    /// Local copies (already filtered) on the side stream, forked from `stream`; the caller joins
    /// (`join`) where the launch ends.
    fn fork_copies(&self, kernels: Kernels, copies: &[LocalCopy], stream: cu::CUstream) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        self.fork.record(stream)?;
        self.fork.wait_on(self.side.raw)?;
        for c in copies {
            if self.local_by_engine {
                copy_engine_async(c.dst, c.src, c.bytes as usize, self.side.raw)?;
                continue;
            }
            let args = CollArgs { send: c.src, recv: c.dst, count: c.bytes, ..Default::default() };
            launch_pdl(kernels.copy, COPY_BLOCKS, 512, self.side.raw, &args, false)?;
        }
        self.join.record(self.side.raw)
    }

    /// The handshakes for a launch's parts (and their descriptors), and the bookkeeping of which
    /// of this rank's buffers each peer has mapped. One verdict per part, in order. Pairs once
    /// found capturing on one side only (`PairState::mixed`) do not handshake: the kernels.
    fn agree(&self, st: &mut State, parts: &[Part], aborted: &dyn Fn() -> bool, timeout: Duration) -> Result<Vec<Verdict>> {
        let live: Vec<&Part> = parts.iter().filter(|pt| !st.pairs[pt.peer].mixed).collect();
        let mut parties = Vec::with_capacity(live.len());
        for pt in &live {
            let mut mapped = [0u64; MAPPED_IDS];
            for (m, i) in mapped.iter_mut().zip(st.pairs[pt.peer].imports.iter().rev()) {
                *m = i.id;
            }
            parties.push(Party { wire: &self.link(pt.peer)?.wire, mine: Offer { mapped, ..pt.offer }, fd: pt.fd.as_ref().map(|f| f.as_raw_fd()) });
        }
        let t0 = Instant::now();
        let mut mixed = vec![false; live.len()];
        let handshaken = if parties.is_empty() {
            Ok(Vec::new())
        } else {
            handshake_all(
                &parties,
                aborted,
                timeout,
                |i, d, fd| {
                    let pt = live[i];
                    let bytes = pt.offer.send_bytes;
                    self.map(&mut st.pairs[pt.peer], pt.peer, d, fd, bytes)
                },
                &mut mixed,
            )
        };
        // Even where the handshake failed later: the peer saw the same offers.
        for (pt, _) in live.iter().zip(&mixed).filter(|(_, &m)| m) {
            st.pairs[pt.peer].mixed = true;
            nccl_info!(
                Subsys::P2p,
                "copy-engine direct with rank {}: one of the two captures a CUDA graph where the other calls eagerly; this pair's transfers take the SM path from now on (a replay cannot answer a handshake)",
                pt.peer
            );
        }
        let mut handshaken = handshaken?.into_iter();
        if !parties.is_empty() {
            st.stats.handshakes += 1;
            st.stats.handshake_ns += t0.elapsed().as_nanos() as u64;
        }
        let mut verdicts = Vec::with_capacity(parts.len());
        for pt in parts {
            if !live.iter().any(|l| l.peer == pt.peer) {
                verdicts.push(Verdict { target: None, peer_mapped: false });
                continue;
            }
            let v = handshaken.next().ok_or_else(|| Error::internal("copy-engine handshake: a verdict is missing"))?;
            verdicts.push(v);
        }
        for (pt, v) in parts.iter().zip(&verdicts) {
            let Some(d) = pt.offer.dst else { continue };
            // The peer has this buffer mapped now, or must be sent its descriptor again.
            let mut known = self.link(pt.peer)?.known.lock();
            known.retain(|&k| k != d.id);
            if v.peer_mapped {
                if known.len() == MAX_SENT {
                    known.remove(0);
                }
                known.push(d.id);
            }
        }
        Ok(verdicts)
    }

    /// The receive buffer as the peer can map it, and the descriptor to send with it; None if
    /// it cannot be shared (not device memory, a pool, or the transfer would leave it).
    fn describe(&self, link: &Link, r: Transfer) -> Result<(Option<Dest>, Option<OwnedFd>)> {
        let (mut base, mut size): (cu::CUdeviceptr, usize) = (0, 0);
        let mut id: u64 = 0;
        // SAFETY: out-pointers to locals of the attributes' types; the driver validates the address.
        let ok = unsafe {
            cu::cuMemGetAddressRange_v2(&mut base, &mut size, r.ptr) == cu::CUresult::CUDA_SUCCESS
                && cu::cuPointerGetAttribute((&mut id as *mut u64).cast(), cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID, r.ptr)
                    == cu::CUresult::CUDA_SUCCESS
        };
        let offset = r.ptr.wrapping_sub(base);
        if !ok || r.ptr < base || offset.checked_add(r.bytes).is_none_or(|end| end > size as u64) {
            return Ok((None, None));
        }
        let dest = |share| Some(Dest { id, base, size: size as u64, offset, share });
        if link.known.lock().contains(&id) {
            return Ok((dest(Share::Known), None));
        }
        let Some(alloc) = describe(self.dev, r.ptr, r.bytes)? else { return Ok((None, None)) };
        Ok(match alloc.share_with(false, -1) {
            Some((Kind::Ipc, _)) => (dest(Share::Ipc(alloc.ipc)), None),
            // The descriptor is the allocation's own: duplicated so it outlives `alloc`.
            // SAFETY: `fd` is the allocation's descriptor, open while `alloc` lives.
            Some((Kind::Fd, Some(fd))) => match unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned() {
                Ok(f) => (dest(Share::Fd), Some(f)),
                Err(_) => (None, None),
            },
            _ => (None, None),
        })
    }

    /// The address here of a peer's destination, mapping its allocation if new; None if it
    /// cannot be mapped. A new buffer id over the range of a cached mapping means the peer freed
    /// that allocation, which it can only do once its stream has waited for our copies into it:
    /// that mapping is closed.
    fn map(&self, st: &mut PairState, peer: usize, d: &Dest, fd: Option<OwnedFd>, bytes: u64) -> Option<u64> {
        if d.offset.checked_add(bytes).is_none_or(|end| end > d.size) {
            return None;
        }
        if let Some(i) = st.imports.iter().position(|m| m.id == d.id) {
            // Most recently used last: the offers list the last few.
            let m = st.imports.remove(i);
            let at = m.map.ptr() + d.offset;
            st.imports.push(m);
            return Some(at);
        }
        let before = st.imports.len();
        st.imports.retain(|m| m.base + m.size <= d.base || d.base + d.size <= m.base);
        nccl_trace!(Subsys::P2p, "ce map: new buffer {} of rank {peer}, {} stale mappings closed", d.id, before - st.imports.len());
        if st.imports.len() == MAX_IMPORTS {
            return None;
        }
        let mapped = match (d.share, fd) {
            (Share::Ipc(h), _) => ImportedBuffer::open(self.dev, &h).map(Mapping::Ipc),
            (Share::Fd, Some(fd)) => VmmImport::map(self.dev, &fd, d.size).map(Mapping::Vmm),
            _ => Err(Error::internal("no descriptor for an allocation not mapped before")),
        };
        match mapped {
            Ok(map) => {
                let at = map.ptr() + d.offset;
                st.imports.push(Import { id: d.id, base: d.base, size: d.size, map });
                Some(at)
            }
            Err(e) => {
                nccl_info!(Subsys::P2p, "copy-engine direct: could not map rank {peer}'s buffer ({}); the SM path moves it", e.msg);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(id: u64) -> Dest {
        Dest { id, base: 0x7f00_0000_0000, size: 1 << 30, offset: 4096, share: Share::Ipc([id as u8; IPC_HANDLE_BYTES]) }
    }

    #[test]
    fn the_worker_queue_serves_in_order_drains_on_stop_and_ends_on_failure() {
        // In call order, across a wait for the next launch.
        let q = Arc::new(Queue::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (q2, s2) = (q.clone(), seen.clone());
        let t = std::thread::spawn(move || {
            q2.serve_all(
                |x: u32| {
                    s2.lock().push(x);
                    Ok(())
                },
                &|| false,
            )
        });
        for x in 0..3 {
            q.push(x);
        }
        std::thread::sleep(Duration::from_millis(20));
        q.push(3);
        q.stop();
        q.push(4); // queued before the worker looked again: still served (a stop drains)
        assert!(t.join().unwrap().is_ok());
        let got = seen.lock().clone();
        assert!(got == [0, 1, 2, 3] || got == [0, 1, 2, 3, 4], "{got:?}");

        // A stop releases a worker waiting on an empty queue.
        let q = Arc::new(Queue::<u32>::new());
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.serve_all(|_| Ok(()), &|| false));
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        q.stop();
        assert!(t.join().unwrap().is_ok());
        assert!(t0.elapsed() < Duration::from_secs(2));

        // An abort flag seen while idle ends the worker too, with no stop.
        let q = Arc::new(Queue::<u32>::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (q2, f2) = (q.clone(), flag.clone());
        let t = std::thread::spawn(move || q2.serve_all(|_| Ok(()), &|| f2.load(Ordering::Acquire)));
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        flag.store(true, Ordering::Release);
        assert!(t.join().unwrap().is_ok());
        assert!(t0.elapsed() < Duration::from_secs(2));

        // The first failure ends the worker and is returned; so is a panic, as a failure.
        let q = Queue::new();
        for x in [1u32, 2, 3] {
            q.push(x);
        }
        let mut served = Vec::new();
        let e = q
            .serve_all(
                |x| {
                    if x == 2 {
                        return Err(Error::remote("peer gone"));
                    }
                    served.push(x);
                    Ok(())
                },
                &|| false,
            )
            .unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError);
        assert_eq!(served, [1]);
        let q = Queue::new();
        q.push(7u32);
        let e = q.serve_all(|_| panic!("bug"), &|| false).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::InternalError);
    }

    #[test]
    fn offers_round_trip_and_reject_garbage() {
        let fd = Dest { share: Share::Fd, ..dest(8) };
        let known = Dest { share: Share::Known, ..dest(9) };
        let o = |capturing, send_bytes, recv_bytes, dst| Offer { capturing, graph: capturing, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let listed = Offer { mapped: [9, 8, 0, u64::MAX], ..o(false, 5, 6, Some(dest(7))) };
        let worker_capture = Offer { graph: false, ..o(true, 1, 0, None) };
        for o in [o(false, 5, 6, Some(dest(7))), o(true, 1, 0, None), worker_capture, o(false, 0, 3, Some(fd)), o(false, 0, 1 << 40, Some(known)), listed] {
            let b = o.encode();
            assert_eq!(b.len(), Offer::BYTES);
            assert_eq!(Offer::decode(&b).unwrap(), o);
        }
        assert!(Offer::decode(&[0; 3]).is_err());
        let mut b = o(false, 1, 0, None).encode();
        b[0] = 4;
        assert!(Offer::decode(&b).is_err());
    }

    #[test]
    fn both_ranks_reach_the_same_verdict() {
        let o = |capturing, send_bytes, recv_bytes, dst: Option<Dest>| Offer { capturing, graph: capturing, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let d = Some(dest(1));
        // (rank a's offer, rank b's offer, expected): every verdict is checked from both sides.
        let cases = [
            (o(false, 64, 0, None), o(false, 0, 64, d), true),    // a sends, b shares its buffer
            (o(false, 64, 0, None), o(false, 0, 64, None), false), // b's buffer cannot be shared
            (o(true, 64, 0, None), o(false, 0, 64, d), false),    // a captures a graph, b does not
            (o(false, 64, 0, None), o(true, 0, 64, d), false),    // b captures a graph, a does not
            (o(true, 64, 0, None), o(true, 0, 64, d), true),      // both capture: device counts
            (o(true, 64, 64, d), o(true, 64, 64, d), true),       // both capture, both ways
            (Offer { graph: false, ..o(true, 64, 0, None) }, o(true, 0, 64, d), false), // a's worker cannot
            (o(true, 64, 0, None), Offer { graph: false, ..o(true, 0, 64, d) }, false), // b's worker cannot
            (o(false, 64, 64, d), o(false, 64, 64, d), true),     // both ways
            (o(false, 64, 64, d), o(false, 64, 64, None), false), // one way cannot be shared
            (o(false, 64, 0, None), o(false, 64, 0, None), false), // both send first: no pairing
            (o(false, 0, 64, d), o(false, 0, 64, d), false),      // both receive first
            (o(false, 64, 0, None), o(false, 0, 32, d), false),   // sizes differ
            (o(false, 0, 0, None), o(false, 0, 0, None), false),  // nothing to move
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(agreed(a, b), *want, "case {i}, a's view");
            assert_eq!(agreed(b, a), *want, "case {i}, b's view");
        }
    }

    /// The graph counters follow the host-counted ones and the gate inside the counter area,
    /// apart from each other for every peer.
    #[test]
    fn graph_counters_fit_the_counter_area_and_never_overlap() {
        let mut offs = vec![GATE_OFF];
        for p in 0..OX_MAX_RANKS {
            offs.extend([ready_off(p), done_off(p)]);
            for c in [GraphCounter::Ready, GraphCounter::Done, GraphCounter::Sent, GraphCounter::Received] {
                offs.push(graph_off(p, c));
            }
        }
        assert!(offs.iter().all(|&o| o % 8 == 0 && o + 8 <= COUNTER_BYTES));
        let n = offs.len();
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len(), n, "two counters share an offset");
    }

    #[test]
    fn a_known_mapping_is_certain_from_both_sides() {
        let o = |send_bytes, recv_bytes, dst: Option<Dest>, mapped| Offer { capturing: false, graph: false, send_bytes, recv_bytes, dst, mapped };
        let (d3, d5) = (Some(dest(3)), Some(dest(5)));
        // (rank a's offer, rank b's offer, expected)
        let cases = [
            (o(64, 0, None, [3, 0, 0, 0]), o(0, 64, d3, [0; 4]), true),  // a sends into b's 3, mapped
            (o(64, 0, None, [4, 0, 0, 0]), o(0, 64, d3, [0; 4]), false), // a has another buffer of b's
            (o(64, 0, None, [0; 4]), o(0, 64, d3, [0; 4]), false),       // a has nothing mapped
            (o(64, 64, d5, [0, 0, 0, 3]), o(64, 64, d3, [5, 0, 0, 0]), true), // both ways, both mapped
            (o(64, 64, d5, [3, 0, 0, 0]), o(64, 64, d3, [0; 4]), false),  // only one way mapped
            (o(0, 64, d5, [0; 4]), o(64, 0, None, [0, 5, 0, 0]), true),  // b sends into a's 5
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(certain(a, b), *want, "case {i}, a's view");
            assert_eq!(certain(b, a), *want, "case {i}, b's view");
        }
        // An id 0 (no buffer) never matches an empty slot.
        let zero = Some(Dest { id: 0, ..dest(0) });
        assert!(!certain(&o(64, 0, None, [0; 4]), &o(0, 64, zero, [0; 4])));
    }

    /// A connected pair of the sockets the path uses (non-blocking seqpacket).
    fn wires() -> (Wire, Wire) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: plain syscall writing two descriptors into a local array.
        let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: fresh descriptors from socketpair, owned here.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        (Wire { sock: a, peer: 1 }, Wire { sock: b, peer: 0 })
    }

    /// Both ranks' handshakes, each in its own thread: (rank a's verdict, rank b's, whether each
    /// map closure ran). `a_maps` / `b_maps`: what each rank's mapping returns.
    fn pair(a: Offer, b: Offer, b_fd: Option<RawFd>, a_maps: Option<u64>, b_maps: Option<u64>) -> (Verdict, Verdict, bool, bool) {
        let (wa, wb) = wires();
        let never = || false;
        std::thread::scope(|s| {
            let ta = s.spawn(|| {
                let mut ran = false;
                let v = handshake(&wa, &a, None, &never, Duration::from_secs(5), |d, fd| {
                    ran = true;
                    assert_eq!(d, &b.dst.unwrap(), "the peer's destination arrives intact");
                    assert_eq!(fd.is_some(), b_fd.is_some(), "a descriptor comes exactly when one was sent");
                    a_maps
                })
                .unwrap();
                (v, ran)
            });
            let tb = s.spawn(|| {
                let mut ran = false;
                let v = handshake(&wb, &b, b_fd, &never, Duration::from_secs(5), |_, _| {
                    ran = true;
                    b_maps
                })
                .unwrap();
                (v, ran)
            });
            let ((va, ra), (vb, rb)) = (ta.join().unwrap(), tb.join().unwrap());
            (va, vb, ra, rb)
        })
    }

    #[test]
    fn handshakes_over_a_socket_pair_agree_on_both_ranks() {
        let o = |capturing, send_bytes, recv_bytes, dst: Option<Dest>| Offer { capturing, graph: capturing, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let d = Some(dest(3));
        // a sends 64 bytes into b's shared buffer: a gets its mapping, b only receives.
        let (va, vb, ra, rb) = pair(o(false, 64, 0, None), o(false, 0, 64, d), None, Some(0xabc0), None);
        assert_eq!((va, vb), (Verdict { target: Some(0xabc0), peer_mapped: false }, Verdict { target: Some(0), peer_mapped: true }));
        assert!(ra && !rb, "only the sender maps");
        // a cannot map it: both run the kernels, and b will send its descriptor again.
        let (va, vb, ..) = pair(o(false, 64, 0, None), o(false, 0, 64, d), None, None, None);
        assert_eq!((va.target, vb.target, vb.peer_mapped), (None, None, false));
        // Launches that do not mirror each other (both send first): nobody maps, both fall back.
        let (va, vb, ra, rb) = pair(o(false, 64, 0, None), o(false, 64, 0, None), None, Some(1), Some(1));
        assert_eq!((va.target, vb.target, ra, rb), (None, None, false, false));
        // A graph capture on one side: both fall back.
        let (va, vb, ra, _) = pair(o(false, 64, 0, None), o(true, 0, 64, d), None, Some(1), None);
        assert_eq!((va.target, vb.target, ra), (None, None, false));
        // Both ways: each maps the other's buffer; one failure sends both to the kernels.
        let (va, vb, ..) = pair(o(false, 64, 64, d), o(false, 64, 64, d), None, Some(0x10), Some(0x20));
        assert_eq!((va.target, vb.target), (Some(0x10), Some(0x20)));
        let (va, vb, ..) = pair(o(false, 64, 64, d), o(false, 64, 64, d), None, Some(0x10), None);
        assert_eq!((va.target, vb.target), (None, None));
        // a lists b's buffer as mapped: both skip the second exchange (were only one to skip it,
        // the other would wait for it and fail), and a still takes its address from its cache.
        let listed = Offer { mapped: [7, 3, 0, 0], ..o(false, 64, 0, None) };
        let (va, vb, ra, rb) = pair(listed, o(false, 0, 64, d), None, Some(0xc0), None);
        assert_eq!((va, vb), (Verdict { target: Some(0xc0), peer_mapped: false }, Verdict { target: Some(0), peer_mapped: true }));
        assert!(ra && !rb);
        // A cache that fails what both ranks took as mapped is a bug, reported as one.
        let (wa, wb) = wires();
        std::thread::scope(|s| {
            let tb = s.spawn(|| handshake(&wb, &o(false, 0, 64, d), None, &|| false, Duration::from_secs(5), |_, _| None));
            let ea = handshake(&wa, &listed, None, &|| false, Duration::from_secs(5), |_, _| None).unwrap_err();
            assert_eq!(ea.code, crate::error::ResultCode::InternalError);
            assert!(tb.join().unwrap().unwrap().target.is_some(), "b believes the copy runs: a must not run the kernels silently");
        });
    }

    /// Both ranks learn from the offers alone that one of them captures, even where the
    /// handshake then fails on one side (a mapping both took as cached is gone); both capturing,
    /// one without device counts, is not mixed.
    #[test]
    fn one_rank_capturing_marks_the_pair_mixed_on_both_ranks() {
        let o = |capturing, graph, send_bytes, recv_bytes, dst: Option<Dest>| Offer { capturing, graph, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let d = Some(dest(3));
        let run = |a: Offer, b: Offer, a_maps: Option<u64>| {
            let (wa, wb) = wires();
            std::thread::scope(|s| {
                let tb = s.spawn(|| {
                    let mut m = [false];
                    let ok = handshake_all(&[Party { wire: &wb, mine: b, fd: None }], &|| false, Duration::from_secs(5), |_, _, _| Some(1), &mut m).is_ok();
                    (m[0], ok)
                });
                let mut m = [false];
                let ok = handshake_all(&[Party { wire: &wa, mine: a, fd: None }], &|| false, Duration::from_secs(5), |_, _, _| a_maps, &mut m).is_ok();
                ((m[0], ok), tb.join().unwrap())
            })
        };
        assert_eq!(run(o(false, false, 64, 0, None), o(true, true, 0, 64, d), Some(1)), ((true, true), (true, true)), "one captures");
        assert_eq!(run(o(true, true, 64, 0, None), o(true, false, 0, 64, d), Some(1)), ((false, true), (false, true)), "both capture");
        // a handshakes with b (who captures) and c (whose buffer a lists as mapped, but a's
        // cache fails): a's handshake errs after the offers, yet both a and b hold the flag.
        let (wab, wba) = wires();
        let (wac, wca) = wires();
        std::thread::scope(|s| {
            let tb = s.spawn(|| {
                let mut m = [false];
                let _ = handshake_all(&[Party { wire: &wba, mine: o(true, true, 0, 64, d), fd: None }], &|| false, Duration::from_secs(5), |_, _, _| Some(1), &mut m);
                m[0]
            });
            let tc = s.spawn(|| {
                let known = Offer { dst: Some(Dest { share: Share::Known, ..dest(3) }), ..o(false, false, 0, 64, None) };
                let _ = handshake_all(&[Party { wire: &wca, mine: known, fd: None }], &|| false, Duration::from_secs(5), |_, _, _| Some(1), &mut [false]);
            });
            let listed = Offer { mapped: [3, 0, 0, 0], ..o(false, false, 64, 0, None) };
            let parties = [Party { wire: &wab, mine: o(false, false, 64, 0, None), fd: None }, Party { wire: &wac, mine: listed, fd: None }];
            let mut m = [false; 2];
            let r = handshake_all(&parties, &|| false, Duration::from_secs(5), |_, _, _| None, &mut m);
            assert!(r.is_err(), "the cached mapping is gone");
            assert_eq!(m, [true, false], "a marks the pair with b all the same");
            assert!(tb.join().unwrap(), "and so does b");
            tc.join().unwrap();
        });
    }

    #[test]
    fn a_ring_of_ranks_handshakes_with_both_neighbours_in_any_order() {
        // 4 ranks, each sending to the next and receiving from the previous: every rank's two
        // handshakes, in opposite orders on odd and even ranks, with one pair (3 -> 0) declining
        // because 0's receive cannot be shared. Sequential blocking handshakes could wait in a
        // cycle here; handshake_all must not.
        let n = 4;
        let mut next: Vec<Option<Wire>> = (0..n).map(|_| None).collect();
        let mut prev: Vec<Option<Wire>> = (0..n).map(|_| None).collect();
        for r in 0..n {
            let (a, b) = wires();
            next[r] = Some(Wire { peer: (r + 1) % n, ..a });
            prev[(r + 1) % n] = Some(Wire { peer: r, ..b });
        }
        let o = |send_bytes, recv_bytes, dst: Option<Dest>| Offer { capturing: false, graph: false, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let got: Vec<Vec<Verdict>> = std::thread::scope(|s| {
            let ts: Vec<_> = (0..n)
                .map(|r| {
                    let (nx, pv) = (next[r].as_ref().unwrap(), prev[r].as_ref().unwrap());
                    s.spawn(move || {
                        let send = Party { wire: nx, mine: o(64, 0, None), fd: None };
                        let recv = Party { wire: pv, mine: o(0, 64, (r != 0).then(|| dest(10 + r as u64))), fd: None };
                        let parties = if r % 2 == 0 { vec![send, recv] } else { vec![recv, send] };
                        let mut mixed = [true; 2];
                        let mut v = handshake_all(
                            &parties,
                            &|| false,
                            Duration::from_secs(5),
                            |i, d, _| {
                                assert_eq!(parties[i].mine.send_bytes, 64, "only the sender maps");
                                Some(d.id * 0x100)
                            },
                            &mut mixed,
                        )
                        .unwrap();
                        assert_eq!(mixed, [false; 2], "nobody captures");
                        if r % 2 == 1 {
                            v.reverse();
                        }
                        v // [send verdict, receive verdict]
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (r, v) in got.iter().enumerate() {
            let to = (r + 1) % n;
            let want_send = (to != 0).then(|| (10 + to as u64) * 0x100);
            assert_eq!(v[0].target, want_send, "rank {r}'s send to {to}");
            assert_eq!(v[1].target.is_some(), r != 0, "rank {r}'s receive");
        }
    }

    #[test]
    fn a_fallback_without_the_agreed_pairs_keeps_the_rest() {
        use crate::device_abi::{OX_MODE_LL, OX_MODE_PUT};
        let mut args = ExchangeArgs::default();
        args.mode[1] = OX_MODE_PUT;
        args.rounds[1] = 3;
        args.chunk[1] = 4096;
        args.offer[1] = 7;
        args.mode[2] = OX_MODE_LL;
        let fb = |args: ExchangeArgs| Fallback { kernel: Kernel(std::ptr::null_mut()), grid: 8, block: 512, args: Box::new(args) };
        let rest = fb(args).without([1].into_iter()).expect("pair 2 is left");
        assert_eq!((rest.args.mode[1], rest.args.rounds[1], rest.args.chunk[1], rest.args.offer[1]), (OX_MODE_NONE, 0, 0, 0));
        assert_eq!((rest.args.mode[2], rest.grid), (OX_MODE_LL, 8));
        assert!(fb(args).without([1, 2].into_iter()).is_none(), "nothing left");
    }

    #[test]
    fn a_cumem_descriptor_travels_with_the_offer() {
        let mut p = [0; 2];
        // SAFETY: plain syscall writing two descriptors into a local array.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let fd_dest = Dest { share: Share::Fd, ..dest(4) };
        let o = |send_bytes, recv_bytes, dst| Offer { capturing: false, graph: false, send_bytes, recv_bytes, dst, mapped: [0; MAPPED_IDS] };
        let (va, vb, ra, _) = pair(o(64, 0, None), o(0, 64, Some(fd_dest)), Some(p[1]), Some(0x40), None);
        assert_eq!((va.target, vb.target, ra), (Some(0x40), Some(0), true));
        // SAFETY: the pipe's ends, closed once.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }

    #[test]
    fn a_handshake_gives_up_on_abort_and_on_a_closed_peer() {
        let (wa, wb) = wires();
        let o = Offer { capturing: false, graph: false, send_bytes: 64, recv_bytes: 0, dst: None, mapped: [0; MAPPED_IDS] };
        let t0 = Instant::now();
        let e = handshake(&wa, &o, None, &|| true, Duration::from_secs(60), |_, _| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError);
        assert!(t0.elapsed() < Duration::from_secs(5));
        drop(wb);
        let e = handshake(&wa, &o, None, &|| false, Duration::from_secs(60), |_, _| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
    }

}
