//! InfiniBand / RoCE lanes for cross-host links (cargo feature `ib`).
//!
//! `open()` finds the active ports of the RDMA devices (NCCL_IB_HCA filters them) once per
//! process; `IbNet::lanes` turns a link's TCP socket pairs into lanes whose data moves by RDMA.
//! The sockets stay: they carry the set-up exchange and then only watch the peer (a closed socket
//! means the peer is gone; the interrupt shuts them down).
//!
//! Per lane and direction, one reliable-connected queue pair at each end. The receiver owns a
//! ring of `SLOTS` slots (pinned host memory, registered); a job is cut into messages of up to
//! `CHUNK` bytes, message k going to slot k % SLOTS, each an RDMA write with immediate (the
//! immediate is k) of [frame header | payload]. The receiver learns of a message from the receive
//! completion the immediate produces, checks the header (sequence number and job length, as the
//! TCP lanes do: a mismatch means the ranks called different operations), copies the payload out
//! (memcpy to host memory, cuMemcpyHtoDAsync to GPU memory), re-posts the receive and returns a
//! credit: an RDMA write of its count of consumed messages into a word the sender polls. The
//! sender writes message k only once the receiver consumed message k - SLOTS (same slot) and its
//! own write of k - SLOTS (same send buffer) completed.
//!
//! GPU memory is sent through the sender's registered pinned buffers (cuMemcpyDtoHAsync), or,
//! with GPUDirect RDMA (nvidia-peermem loaded), read by the NIC straight from the GPU: a large
//! job's device range is registered for that job and the write gathers [header | GPU payload].
//! The receiving side always lands in host memory.
//!
//! The protocol is written against `Wire` (what a connected queue pair offers), so that the unit
//! tests can run it over an in-memory fake; `Verbs` is the real one.
//!
//! Not tested on RDMA hardware (none was available): the verbs calls follow rdma-core's
//! documentation and NCCL's usage.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::os::raw::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;
use once_cell::sync::OnceCell;

use super::hca::HcaFilter;
use super::link::{check_header, header, io_error, prepare_sockets, shutdown_all, Carrier, Cx, Interrupt, Job, Lane, Mem, Staging, CHUNK, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::gpu::{check, cu, CtxGuard, Device, HostMapped};
use crate::log::Subsys;
use crate::tls::Stream;

// ---------------------------------------------------------------------------------------------
// The protocol's arithmetic (pure).

/// Ring slots per lane and direction (and send buffers at the sender).
pub const SLOTS: usize = 4;
/// Each slot starts with this much room for the frame header (HEADER_BYTES used), so that the
/// payload is 64-byte aligned.
pub const SLOT_HDR: usize = 64;
/// One slot: header room and one chunk.
pub const SLOT_BYTES: usize = SLOT_HDR + CHUNK;
/// Jobs of GPU memory at least this large are read by the NIC directly when GPUDirect RDMA is
/// available: below it, registering the range costs more than the copy it saves.
const GDR_MIN: u64 = 4 << 20;
/// Credit writes the receiver has in flight at most (it waits for completions beyond).
const CREDIT_WRS: u64 = 2 * SLOTS as u64;
/// Completion queue entries: a sender has SLOTS writes in flight, a receiver SLOTS receives and
/// CREDIT_WRS credit writes.
const CQ_DEPTH: c_int = 4 * SLOTS as c_int;

/// Messages a job of `bytes` takes: one per chunk, and one (header only) for an empty job, so
/// that every job is checked.
pub fn messages(bytes: u64) -> u64 {
    bytes.div_ceil(CHUNK as u64).max(1)
}

/// Message `m` of a job of `bytes`: its offset in the job and its payload length.
pub fn piece(bytes: u64, m: u64) -> (u64, usize) {
    let off = m * CHUNK as u64;
    (off, bytes.saturating_sub(off).min(CHUNK as u64) as usize)
}

/// The ring slot (and send buffer) of message number `k` of a lane direction.
pub fn slot(k: u64) -> usize {
    (k % SLOTS as u64) as usize
}

/// Whether the sender may write message `k`: the receiver consumed message k - SLOTS (which used
/// the same slot), and the sender's own write of it completed (it used the same send buffer).
pub fn may_write(k: u64, consumed: u64, completed: u64) -> bool {
    k < consumed.saturating_add(SLOTS as u64) && k < completed.saturating_add(SLOTS as u64)
}

// ---------------------------------------------------------------------------------------------
// Endpoints: what the two ends of a lane direction exchange over its socket.

const EP_MAGIC: u32 = 0x4249_584f; // "OXIB"
const EP_VERSION: u16 = 1;
/// Bytes of an encoded `Endpoint` on the socket.
pub const ENDPOINT_BYTES: usize = 64;
/// Written on each socket once both queue pairs are ready to send.
const READY: u8 = 0x52;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// Which end of a lane direction a rank is.
pub enum Role {
    /// Writes into the peer's ring.
    Sender = 0,
    /// Owns the ring and returns credits.
    Receiver = 1,
}

/// One end of a lane direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// This end's role.
    pub role: Role,
    /// IBV_LINK_LAYER_*: both ends must agree (InfiniBand addresses by LID, RoCE by GID).
    pub link_layer: u8,
    /// The port's active MTU (enum ibv_mtu); the connection uses the smaller of the two.
    pub mtu: u8,
    /// The port's LID (InfiniBand addressing).
    pub lid: u16,
    /// The port's GID at the chosen index (RoCE addressing).
    pub gid: [u8; 16],
    /// The queue pair number.
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Receiver: its ring; sender: its credit word.
    pub addr: u64,
    /// Remote key of `addr`'s registration.
    pub rkey: u32,
    /// Receiver: slots in its ring and bytes per slot (the sender checks they are its own).
    pub slots: u32,
    /// Receiver: bytes per slot (see `slots`).
    pub slot_bytes: u32,
}

impl Endpoint {
    /// The `ENDPOINT_BYTES` sent on the socket (magic, version, then the fields, little-endian).
    pub fn encode(&self) -> [u8; ENDPOINT_BYTES] {
        let mut b = [0u8; ENDPOINT_BYTES];
        b[0..4].copy_from_slice(&EP_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&EP_VERSION.to_le_bytes());
        b[6] = self.role as u8;
        b[7] = self.link_layer;
        b[8] = self.mtu;
        b[10..12].copy_from_slice(&self.lid.to_le_bytes());
        b[12..16].copy_from_slice(&self.qpn.to_le_bytes());
        b[16..20].copy_from_slice(&self.psn.to_le_bytes());
        b[20..24].copy_from_slice(&self.rkey.to_le_bytes());
        b[24..40].copy_from_slice(&self.gid);
        b[40..48].copy_from_slice(&self.addr.to_le_bytes());
        b[48..52].copy_from_slice(&self.slots.to_le_bytes());
        b[52..56].copy_from_slice(&self.slot_bytes.to_le_bytes());
        b
    }

    /// Decodes the endpoint `peer` sent, which must have role `role`.
    pub fn decode(b: &[u8; ENDPOINT_BYTES], peer: usize, role: Role) -> Result<Endpoint> {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u32_at(0) != EP_MAGIC || u16_at(4) != EP_VERSION {
            return Err(Error::invalid_usage(format!(
                "rank {peer} answered the InfiniBand set-up with something else (magic {:#x}, version {}): \
                 do all ranks use the same oxccl build and network transport?",
                u32_at(0),
                u16_at(4)
            )));
        }
        let their_role = match b[6] {
            0 => Role::Sender,
            1 => Role::Receiver,
            r => return Err(Error::internal(format!("rank {peer} sent an InfiniBand endpoint of unknown role {r}"))),
        };
        if their_role != role {
            return Err(Error::internal(format!("rank {peer} sent a {their_role:?} endpoint where a {role:?} was expected")));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[24..40]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[40..48]);
        Ok(Endpoint {
            role,
            link_layer: b[7],
            mtu: b[8],
            lid: u16_at(10),
            gid,
            qpn: u32_at(12),
            psn: u32_at(16),
            addr: u64::from_le_bytes(addr),
            rkey: u32_at(20),
            slots: u32_at(48),
            slot_bytes: u32_at(52),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Port choice (pure parts).

/// A GID table entry's RoCE version, from sysfs (ports/N/gid_attrs/types/I).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidKind {
    /// "RoCE v2".
    RoceV2,
    /// "IB/RoCE v1" or "RoCE v1".
    RoceV1,
    /// Anything else.
    Unknown,
}

impl GidKind {
    /// Parses the sysfs file's text.
    pub fn from_sysfs(text: &str) -> GidKind {
        match text.trim() {
            "RoCE v2" => GidKind::RoceV2,
            "IB/RoCE v1" | "RoCE v1" => GidKind::RoceV1,
            _ => GidKind::Unknown,
        }
    }
}

/// The GID index to use on a RoCE port when NCCL_IB_GID_INDEX is not set, from the table's
/// entries (index, gid, kind). As NCCL's defaults (NCCL_IB_ROCE_VERSION_NUM=2,
/// NCCL_IB_ADDR_FAMILY=AF_INET), RoCE v2 with an IPv4-mapped address first; then v2 with a global
/// IPv6 address, then v1 likewise, then any non-zero entry, link-local ones (fe80::) last. None:
/// the table has no usable entry.
pub fn pick_gid(entries: &[(u8, [u8; 16], GidKind)]) -> Option<u8> {
    let rank = |gid: &[u8; 16], kind: GidKind| -> Option<u8> {
        if gid.iter().all(|&b| b == 0) {
            return None;
        }
        let v4 = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
        let link_local = gid[0] == 0xfe && gid[1] & 0xc0 == 0x80;
        Some(match (kind, v4, link_local) {
            (GidKind::RoceV2, true, _) => 0,
            (GidKind::RoceV2, false, false) => 1,
            (GidKind::RoceV1 | GidKind::Unknown, true, _) => 2,
            (GidKind::RoceV1 | GidKind::Unknown, false, false) => 3,
            (_, _, true) => 4,
        })
    };
    entries.iter().filter_map(|(i, g, k)| rank(g, *k).map(|r| (r, *i))).min().map(|(_, i)| i)
}

/// IBV_QPF_GRH_REQUIRED, a bit of ibv_port_attr.flags (rdma-core's verbs_api.h; not in the
/// bindings).
const QPF_GRH_REQUIRED: u8 = 1;

/// Whether a port's connections must carry a global route header: RoCE always (it addresses by
/// GID); InfiniBand when the port's flags say IBV_QPF_GRH_REQUIRED (man ibv_query_port: "the
/// applications must create all AH with GRH configured"; NCCL's ncclIbQpRtr does so).
pub fn needs_grh(ethernet: bool, port_flags: u8) -> bool {
    ethernet || port_flags & QPF_GRH_REQUIRED != 0
}

/// The NICs nearest a GPU in the PCI tree: those whose sysfs device path shares the most leading
/// components with the GPU's. All of them when the GPU's path (or every NIC's) is unknown.
pub fn nearest(gpu: Option<&Path>, nics: &[Option<PathBuf>]) -> Vec<usize> {
    let score = |nic: &Option<PathBuf>| match (gpu, nic) {
        (Some(g), Some(n)) => g.components().zip(n.components()).take_while(|(a, b)| a == b).count(),
        _ => 0,
    };
    let best = nics.iter().map(score).max().unwrap_or(0);
    (0..nics.len()).filter(|&i| score(&nics[i]) == best).collect()
}

// ---------------------------------------------------------------------------------------------
// What the carriers need from a connected queue pair.

/// One gather entry of a write.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sge {
    /// Local address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Local key of the registration holding `addr`.
    pub lkey: u32,
}

/// A work completion, reduced to what the protocol checks.
#[derive(Clone, Debug)]
pub struct Completion {
    /// The work request's id, as posted.
    pub wr_id: u64,
    /// A receive (an incoming write with immediate); else one of our writes.
    pub recv: bool,
    /// A receive's immediate value.
    pub imm: u32,
    /// A receive's byte count.
    pub len: u32,
    /// The failure, described; None: success.
    pub error: Option<String>,
}

/// A device range registered for one job (GPUDirect RDMA); deregistered when dropped.
pub struct GpuMr {
    /// Local key for `Sge`s in the range.
    pub lkey: u32,
    /// Start of the registered range.
    pub base: u64,
    _keep: Box<dyn Send>,
}

/// A connected queue pair with its registered local memory: the sender's SLOTS send buffers or
/// the receiver's ring (SLOTS slots of SLOT_BYTES each), and a credit word.
pub trait Wire: Send + 'static {
    /// The local memory (SLOTS * SLOT_BYTES bytes) and its lkey.
    fn mem(&self) -> *mut u8;
    /// The local key of `mem`.
    fn lkey(&self) -> u32;
    /// Sender: posts a signaled RDMA write with immediate `imm` of `sges` into the receiver's
    /// slot `slot`.
    fn write_slot(&mut self, wr_id: u64, sges: &[Sge], slot: usize, imm: u32) -> Result<()>;
    /// Receiver: posts a signaled RDMA write of `consumed` into the sender's credit word.
    fn write_credit(&mut self, wr_id: u64, consumed: u64) -> Result<()>;
    /// Receiver: posts one receive (taken by one incoming write with immediate).
    fn post_recv(&mut self) -> Result<()>;
    /// Appends the completions available now.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()>;
    /// Sender: the receiver's count of consumed messages, as last written into our credit word.
    fn credits(&self) -> u64;
    /// Registers `[ptr, ptr + len)` of GPU memory for the NIC to read; None if it cannot.
    fn register_gpu(&mut self, ptr: u64, len: u64) -> Option<GpuMr>;
}

// ---------------------------------------------------------------------------------------------
// Waiting: poll, back off, watch for abort and for the peer going away.

/// Spins briefly, then yields, then sleeps up to 200 us between polls: a message is usually
/// microseconds away, but a lane may idle for long.
struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        self.0 = self.0.saturating_add(1);
        match self.0 {
            0..=63 => std::hint::spin_loop(),
            64..=127 => std::thread::yield_now(),
            n => std::thread::sleep(Duration::from_micros(u64::from((n - 127).min(200)))),
        }
    }
}

/// A carrier's view of the outside while it waits: the abort flag and the lane's socket.
struct Watch {
    sock: Stream,
    stop: Arc<AtomicBool>,
    peer: usize,
    checked: Instant,
}

impl Watch {
    /// `sock` must be non-blocking (it is only peeked at).
    fn new(sock: Stream, stop: Arc<AtomicBool>, peer: usize) -> Watch {
        Watch { sock, stop, peer, checked: Instant::now() }
    }

    /// Called when a wait made no progress: fails on abort or when the peer's socket closed
    /// (checked every few ms), else backs off.
    fn idle(&mut self, b: &mut Backoff) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(Error::remote(format!("the InfiniBand link to rank {} was interrupted", self.peer)));
        }
        if self.checked.elapsed() >= Duration::from_millis(10) {
            self.checked = Instant::now();
            let mut byte = [0u8; 1];
            match self.sock.peek(&mut byte) {
                Ok(0) => return Err(io_error(self.peer, std::io::ErrorKind::UnexpectedEof.into())),
                Ok(_) | Err(_) if self.stop.load(Ordering::Relaxed) => {
                    return Err(Error::remote(format!("the InfiniBand link to rank {} was interrupted", self.peer)))
                }
                // The peer never writes after set-up; stray bytes are left alone.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(self.peer, e)),
            }
        }
        b.snooze();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The sending and the receiving carrier.

/// A carrier side that polls its completion queue: `wait` spins on `reap` until `ready`, backing
/// off and watching the peer (`Watch::idle`) while nothing completes.
trait Reap: Sized {
    /// Takes the completions that arrived; true if there were any.
    fn reap(&mut self) -> Result<bool>;
    fn watch(&mut self) -> &mut Watch;

    fn wait(&mut self, ready: impl Fn(&Self) -> bool) -> Result<()> {
        let mut b = Backoff(0);
        loop {
            if self.reap()? {
                b = Backoff(0);
            }
            if ready(self) {
                return Ok(());
            }
            if let Err(e) = self.watch().idle(&mut b) {
                // A last look: what completed before the peer left (or the abort) still counts.
                self.reap()?;
                return if ready(self) { Ok(()) } else { Err(e) };
            }
        }
    }
}

struct Sender<W: Wire> {
    w: W,
    peer: usize,
    watch: Watch,
    /// Messages posted and completed (in order: a send queue completes in order).
    posted: u64,
    completed: u64,
    /// GPUDirect RDMA still worth trying (cleared after a failed registration).
    gdr: bool,
    cqes: Vec<Completion>,
}

impl<W: Wire> Reap for Sender<W> {
    fn reap(&mut self) -> Result<bool> {
        self.cqes.clear();
        self.w.poll(&mut self.cqes)?;
        for c in &self.cqes {
            if let Some(e) = &c.error {
                return Err(Error::remote(format!("RDMA write to rank {} failed: {e}", self.peer)));
            }
            if c.recv || c.wr_id != self.completed {
                return Err(Error::internal(format!(
                    "InfiniBand link to rank {}: unexpected completion (receive: {}, id {}, expected write {})",
                    self.peer, c.recv, c.wr_id, self.completed
                )));
            }
            self.completed += 1;
        }
        Ok(!self.cqes.is_empty())
    }

    fn watch(&mut self) -> &mut Watch {
        &mut self.watch
    }
}

impl<W: Wire> Sender<W> {
    fn new(w: W, watch: Watch, gdr: bool) -> Sender<W> {
        let peer = watch.peer;
        Sender { w, peer, watch, posted: 0, completed: 0, gdr, cqes: Vec::new() }
    }


    fn send(&mut self, st: Option<&Staging>, seq: u64, job: &Job) -> Result<()> {
        // GPUDirect RDMA: the job's range registered for this job only (it is the user's memory,
        // which may be freed after), read by the NIC in place.
        let gpu = match job.mem {
            Mem::Dev(p) if self.gdr && job.bytes >= GDR_MIN => {
                let r = self.w.register_gpu(p, job.bytes);
                if r.is_none() {
                    self.gdr = false;
                    nccl_info!(Subsys::Net, "NET/IB : GPU memory registration failed; staging GPU data through host memory for rank {}", self.peer);
                }
                r
            }
            _ => None,
        };
        self.send_messages(st, seq, job, gpu.as_ref())?;
        // Done when the receiver's NIC acknowledged every write (as NCCL completes a send): a
        // failure is then this job's, and a registration is no longer read when it goes.
        let posted = self.posted;
        self.wait(|s| s.completed == posted)
    }

    fn send_messages(&mut self, st: Option<&Staging>, seq: u64, job: &Job, gpu: Option<&GpuMr>) -> Result<()> {
        let (base, lkey) = (self.w.mem(), self.w.lkey());
        for m in 0..messages(job.bytes) {
            let k = self.posted;
            let (off, len) = piece(job.bytes, m);
            self.wait(|s| may_write(k, s.w.credits(), s.completed))?;
            let j = slot(k);
            // SAFETY: send buffer j lies within the wire's SLOTS * SLOT_BYTES bytes, and is free:
            // the write that last used it (k - SLOTS) completed (may_write).
            let buf = unsafe { base.add(j * SLOT_BYTES) };
            let h = header(m as u32, seq, job.bytes);
            // SAFETY: HEADER_BYTES <= SLOT_HDR bytes at the start of buffer j.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), buf, HEADER_BYTES) };
            let mut sges = [Sge { addr: buf as u64, len: SLOT_HDR as u32, lkey }, Sge::default()];
            let mut nsge = 1;
            match job.mem {
                _ if len == 0 => {}
                Mem::Host(p) => {
                    // SAFETY: [off, off + len) is within the job's host range (see Job), and the
                    // payload part of buffer j holds CHUNK >= len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(p.add(off as usize), buf.add(SLOT_HDR), len) };
                    sges[0].len += len as u32;
                }
                Mem::Dev(src) => match gpu {
                    Some(g) => {
                        sges[1] = Sge { addr: src + off, len: len as u32, lkey: g.lkey };
                        nsge = 2;
                    }
                    None => {
                        let st = st.ok_or_else(|| Error::internal("no staging for a GPU transfer"))?;
                        // SAFETY: the destination is buffer j's payload (CHUNK >= len bytes of
                        // pinned memory); the source is the job's device range, valid while the
                        // step waits for this transfer.
                        check(
                            unsafe { cu::cuMemcpyDtoHAsync_v2(buf.add(SLOT_HDR).cast(), src + off, len, st.stream.raw) },
                            "cuMemcpyDtoHAsync (InfiniBand send)",
                        )?;
                        st.sync()?;
                        sges[0].len += len as u32;
                    }
                },
            }
            self.w.write_slot(k, &sges[..nsge], j, k as u32)?;
            self.posted += 1;
        }
        Ok(())
    }
}

struct Receiver<W: Wire> {
    w: W,
    peer: usize,
    watch: Watch,
    /// Messages consumed (copied out and their slot handed back) and arrived.
    consumed: u64,
    arrived: u64,
    /// Bytes written by each arrived, unconsumed message, by slot.
    lens: [u32; SLOTS],
    credits_posted: u64,
    credits_done: u64,
    cqes: Vec<Completion>,
}

impl<W: Wire> Reap for Receiver<W> {
    fn reap(&mut self) -> Result<bool> {
        self.cqes.clear();
        self.w.poll(&mut self.cqes)?;
        for c in &self.cqes {
            if let Some(e) = &c.error {
                return Err(Error::remote(format!("RDMA transfer from rank {} failed: {e}", self.peer)));
            }
            if c.recv {
                // Receives complete in order, and the sender numbers its writes alike.
                if c.imm != self.arrived as u32 || self.arrived >= self.consumed + SLOTS as u64 {
                    return Err(Error::remote(format!(
                        "rank {} wrote message {} where this rank expects {} (slots in use: {})",
                        self.peer,
                        c.imm,
                        self.arrived as u32,
                        self.arrived - self.consumed
                    )));
                }
                self.lens[slot(self.arrived)] = c.len;
                self.arrived += 1;
            } else {
                if c.wr_id != self.credits_done {
                    return Err(Error::internal(format!("InfiniBand link to rank {}: credit write {} completed, expected {}", self.peer, c.wr_id, self.credits_done)));
                }
                self.credits_done += 1;
            }
        }
        Ok(!self.cqes.is_empty())
    }

    fn watch(&mut self) -> &mut Watch {
        &mut self.watch
    }
}

impl<W: Wire> Receiver<W> {
    /// `w` must have SLOTS receives posted.
    fn new(w: W, watch: Watch) -> Receiver<W> {
        let peer = watch.peer;
        Receiver { w, peer, watch, consumed: 0, arrived: 0, lens: [0; SLOTS], credits_posted: 0, credits_done: 0, cqes: Vec::new() }
    }


    fn recv(&mut self, st: Option<&Staging>, seq: u64, job: &Job) -> Result<()> {
        let base = self.w.mem();
        for m in 0..messages(job.bytes) {
            let k = self.consumed;
            self.wait(|s| s.arrived > k)?;
            let j = slot(k);
            // SAFETY: slot j lies within the ring; message k arrived there (its completion was
            // reaped) and the sender writes nothing more into it before our credit.
            let buf = unsafe { base.add(j * SLOT_BYTES) };
            let mut h = [0u8; HEADER_BYTES];
            // SAFETY: the first HEADER_BYTES of slot j.
            unsafe { std::ptr::copy_nonoverlapping(buf, h.as_mut_ptr(), HEADER_BYTES) };
            let word = check_header(&h, self.peer, seq, job.bytes)?;
            let (off, len) = piece(job.bytes, m);
            if u64::from(word) != m || self.lens[j] as usize != SLOT_HDR + len {
                return Err(Error::remote(format!(
                    "rank {} sent part {word} of {} bytes of transfer #{seq} where this rank expects part {m} of {} bytes",
                    self.peer,
                    (self.lens[j] as usize).saturating_sub(SLOT_HDR),
                    len
                )));
            }
            match job.mem {
                _ if len == 0 => {}
                Mem::Host(p) => {
                    // SAFETY: [off, off + len) is within the job's host range (see Job); the
                    // slot's payload holds len bytes (checked against the completion above).
                    unsafe { std::ptr::copy_nonoverlapping(buf.add(SLOT_HDR), p.add(off as usize), len) };
                }
                Mem::Dev(dst) => {
                    let st = st.ok_or_else(|| Error::internal("no staging for a GPU transfer"))?;
                    // SAFETY: the source is the slot's payload (pinned, len bytes), the
                    // destination the job's device range; synchronised before the slot is reused.
                    check(
                        unsafe { cu::cuMemcpyHtoDAsync_v2(dst + off, buf.add(SLOT_HDR).cast(), len, st.stream.raw) },
                        "cuMemcpyHtoDAsync (InfiniBand receive)",
                    )?;
                    st.sync()?;
                }
            }
            // The slot is free again: re-arm its receive, then tell the sender.
            self.w.post_recv()?;
            self.consumed += 1;
            let posted = self.credits_posted;
            self.wait(|s| posted - s.credits_done < CREDIT_WRS)?;
            self.w.write_credit(posted, self.consumed)?;
            self.credits_posted += 1;
        }
        Ok(())
    }
}

struct IbSend<W: Wire>(Sender<W>);
struct IbRecv<W: Wire>(Receiver<W>);

impl<W: Wire> Carrier for IbSend<W> {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let st = if matches!(job.mem, Mem::Dev(_)) { Some(cx.staging()?) } else { None };
        self.0.send(st, seq, job).map_err(|e| e.context(format!("sending to rank {} over InfiniBand", self.0.peer)))
    }
}

impl<W: Wire> Carrier for IbRecv<W> {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let st = if matches!(job.mem, Mem::Dev(_)) { Some(cx.staging()?) } else { None };
        self.0.recv(st, seq, job)
    }
}

// ---------------------------------------------------------------------------------------------
// Devices and ports.

/// An opened RDMA device and its protection domain (shared by all its ports' lanes).
struct Hca {
    name: String,
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
}

// SAFETY: verbs contexts and protection domains may be used from any thread (libibverbs locks
// internally where needed); Hca only hands the pointers to verbs calls.
unsafe impl Send for Hca {}
unsafe impl Sync for Hca {}

impl Drop for Hca {
    fn drop(&mut self) {
        // SAFETY: both were created by this Hca; every object made from them (queue pairs, memory
        // regions) holds an Arc of it, so none is left.
        unsafe {
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            ffi::ibv_close_device(self.ctx);
        }
    }
}

/// An active port the transport may use.
struct Port {
    hca: Arc<Hca>,
    num: u8,
    link_layer: u8,
    lid: u16,
    mtu: u8,
    gid_index: u8,
    gid: [u8; 16],
    /// Connections carry a global route header (`needs_grh`).
    grh: bool,
    /// The device's PCI path in sysfs (to find the NIC nearest a GPU).
    pci: Option<PathBuf>,
}

impl Port {
    fn ethernet(&self) -> bool {
        u32::from(self.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET
    }

    fn describe(&self) -> String {
        format!("{}:{}/{}", self.hca.name, self.num, if self.ethernet() { "RoCE" } else { "IB" })
    }
}

/// The RDMA ports this process may use (see `open`).
pub struct IbNet {
    ports: Vec<Port>,
    /// GPUDirect RDMA: nvidia-peermem is loaded and NCCL_NET_GDR_READ is not 0.
    gdr: bool,
}

static NET: OnceCell<Result<Option<Arc<IbNet>>>> = OnceCell::new();

/// The usable RDMA ports (active, allowed by NCCL_IB_HCA), found once per process. Ok(None) when
/// there are none: no device, no active port, or every one filtered out (logged at INFO).
pub fn open() -> Result<Option<Arc<IbNet>>> {
    NET.get_or_init(probe).clone()
}

fn probe() -> Result<Option<Arc<IbNet>>> {
    let filter = match crate::config::env("NCCL_IB_HCA") {
        Some(spec) => HcaFilter::parse(&spec)?,
        None => HcaFilter::default(),
    };
    let mut n: c_int = 0;
    // SAFETY: out-pointer to a local; the list is freed below, after every device was opened.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        nccl_info!(Subsys::Net, "NET/IB : No device found ({})", std::io::Error::last_os_error());
        return Ok(None);
    }
    let mut ports = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds n device pointers.
        let d = unsafe { *list.add(i) };
        if let Some(hca) = open_hca(d) {
            ports.extend(active_ports(&hca, &filter));
        }
    }
    // SAFETY: returned by ibv_get_device_list; the opened contexts stay valid after it.
    unsafe { ffi::ibv_free_device_list(list) };
    if ports.is_empty() {
        nccl_info!(Subsys::Net, "NET/IB : No usable port ({} devices{})", n, if filter.entries.is_empty() { String::new() } else { ", NCCL_IB_HCA applied".to_string() });
        return Ok(None);
    }
    let peermem = ["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version", "/sys/module/nv_peer_mem/version"]
        .iter()
        .any(|p| Path::new(p).exists());
    let gdr = peermem && crate::config::env_i64("NCCL_NET_GDR_READ", 1) != 0;
    let net = IbNet { ports, gdr };
    nccl_info!(Subsys::Net, "NET/IB : Using {}; GPUDirect RDMA {}", net.describe(), if gdr { "enabled" } else if peermem { "disabled (NCCL_NET_GDR_READ=0)" } else { "unavailable (nvidia-peermem not loaded)" });
    Ok(Some(Arc::new(net)))
}

fn open_hca(d: *mut ffi::ibv_device) -> Option<Arc<Hca>> {
    // SAFETY: d comes from the device list, still alive; the name is a NUL-terminated string
    // owned by the device.
    let name = unsafe { std::ffi::CStr::from_ptr(ffi::ibv_get_device_name(d)) }.to_string_lossy().into_owned();
    // SAFETY: as above.
    let ctx = unsafe { ffi::ibv_open_device(d) };
    if ctx.is_null() {
        nccl_info!(Subsys::Net, "NET/IB : cannot open {name}: {}", std::io::Error::last_os_error());
        return None;
    }
    // Owned from here: dropping it closes the device.
    let mut hca = Hca { name, ctx, pd: std::ptr::null_mut() };
    // SAFETY: an open context.
    hca.pd = unsafe { ffi::ibv_alloc_pd(ctx) };
    if hca.pd.is_null() {
        nccl_info!(Subsys::Net, "NET/IB : cannot allocate a protection domain on {}: {}", hca.name, std::io::Error::last_os_error());
        return None;
    }
    Some(Arc::new(hca))
}

fn active_ports(hca: &Arc<Hca>, filter: &HcaFilter) -> Vec<Port> {
    let mut attr = ffi::ibv_device_attr::default();
    // SAFETY: an open context and an out-pointer to a local.
    if unsafe { ffi::ibv_query_device(hca.ctx, &mut attr) } != 0 {
        nccl_info!(Subsys::Net, "NET/IB : ibv_query_device({}) failed", hca.name);
        return Vec::new();
    }
    let pci = std::fs::canonicalize(format!("/sys/class/infiniband/{}/device", hca.name)).ok();
    let mut ports = Vec::new();
    for num in 1..=attr.phys_port_cnt {
        if !filter.allows(&hca.name, num) {
            continue;
        }
        let mut pa = ffi::ibv_port_attr::default();
        // SAFETY: pa is a whole struct ibv_port_attr, as verbs.h's inline wrapper passes it; the
        // exported ibv_query_port writes no more than that (rdma-core 55: only its _compat_
        // prefix, state .. flags, which holds every field read here; the rest stays zero).
        if unsafe { ffi::ibv_query_port(hca.ctx, num, (&mut pa as *mut ffi::ibv_port_attr).cast()) } != 0 {
            continue;
        }
        if pa.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
            continue;
        }
        let ethernet = u32::from(pa.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET;
        if !ethernet && u32::from(pa.link_layer) != ffi::IBV_LINK_LAYER_INFINIBAND && u32::from(pa.link_layer) != ffi::IBV_LINK_LAYER_UNSPECIFIED {
            continue;
        }
        if !ethernet && pa.lid == 0 {
            nccl_info!(Subsys::Net, "NET/IB : {}:{} has no LID (no subnet manager?); skipped", hca.name, num);
            continue;
        }
        let Some((gid_index, gid)) = port_gid(hca, num, &pa, ethernet) else { continue };
        let link_layer = if ethernet { ffi::IBV_LINK_LAYER_ETHERNET } else { ffi::IBV_LINK_LAYER_INFINIBAND } as u8;
        ports.push(Port { hca: hca.clone(), num, link_layer, lid: pa.lid, mtu: pa.active_mtu as u8, gid_index, gid, grh: needs_grh(ethernet, pa.flags), pci: pci.clone() });
    }
    ports
}

fn query_gid(hca: &Hca, port: u8, index: u8) -> Option<[u8; 16]> {
    let mut gid = ffi::ibv_gid { raw: [0; 16] };
    // SAFETY: an open context; out-pointer to a local.
    if unsafe { ffi::ibv_query_gid(hca.ctx, port, c_int::from(index), &mut gid) } != 0 {
        return None;
    }
    // SAFETY: every bit pattern is a valid [u8; 16].
    Some(unsafe { gid.raw })
}

/// The port's GID and its index: NCCL_IB_GID_INDEX if set, else (RoCE) `pick_gid`'s choice; on
/// InfiniBand, index 0 (unused by the connection, which addresses by LID).
fn port_gid(hca: &Hca, num: u8, pa: &ffi::ibv_port_attr, ethernet: bool) -> Option<(u8, [u8; 16])> {
    let forced = crate::config::env_i64("NCCL_IB_GID_INDEX", -1);
    let len = pa.gid_tbl_len.clamp(0, 256) as usize;
    if forced >= 0 {
        let i = u8::try_from(forced).ok().filter(|&i| (i as usize) < len);
        let Some(i) = i else {
            nccl_warn!("NCCL_IB_GID_INDEX={forced} is outside {}:{}'s GID table ({len} entries); port skipped", hca.name, num);
            return None;
        };
        return query_gid(hca, num, i).map(|g| (i, g));
    }
    if !ethernet {
        return Some((0, query_gid(hca, num, 0).unwrap_or([0; 16])));
    }
    let entries: Vec<(u8, [u8; 16], GidKind)> = (0..len)
        .filter_map(|i| {
            let i = u8::try_from(i).ok()?;
            let gid = query_gid(hca, num, i)?;
            let kind = std::fs::read_to_string(format!("/sys/class/infiniband/{}/ports/{num}/gid_attrs/types/{i}", hca.name))
                .map_or(GidKind::Unknown, |t| GidKind::from_sysfs(&t));
            Some((i, gid, kind))
        })
        .collect();
    match pick_gid(&entries) {
        Some(i) => entries.iter().find(|e| e.0 == i).map(|e| (i, e.1)),
        None => {
            nccl_info!(Subsys::Net, "NET/IB : {}:{} (RoCE) has no usable GID; skipped", hca.name, num);
            None
        }
    }
}

impl IbNet {
    /// The ports in use, NCCL style: "mlx5_0:1/IB, mlx5_1:1/RoCE".
    pub fn describe(&self) -> String {
        self.ports.iter().map(Port::describe).collect::<Vec<_>>().join(", ")
    }

    /// The port of each of `lanes` lanes for GPU `dev`: the ports nearest the GPU, in turn
    /// (starting at the GPU's ordinal, so GPUs sharing them spread out).
    fn ports_for(&self, dev: &Device, lanes: usize) -> Vec<usize> {
        let gpu = std::fs::canonicalize(format!("/sys/bus/pci/devices/{}", dev.bus_id.to_ascii_lowercase())).ok();
        let pcis: Vec<Option<PathBuf>> = self.ports.iter().map(|p| p.pci.clone()).collect();
        let near = nearest(gpu.as_deref(), &pcis);
        let start = usize::try_from(dev.ordinal).unwrap_or(0);
        (0..lanes).map(|i| near[(start + i) % near.len()]).collect()
    }

    /// Lanes to rank `peer` over RDMA, one per socket pair (`out` sockets are this rank's
    /// sending side, `inc` its receiving side, as for TCP lanes; both lists equally long). The
    /// sockets carry the set-up exchange (both ranks must call this for each other), then watch
    /// the peer. `dev`: the GPU whose memory jobs name. The interrupt fails every blocked carrier.
    pub fn lanes(&self, dev: &'static Device, me: usize, peer: usize, out: Vec<Stream>, inc: Vec<Stream>) -> Result<(Vec<Lane>, Interrupt)> {
        let socks = prepare_sockets("InfiniBand", &out, &inc)?;
        let picks = self.ports_for(dev, out.len());
        let stop = Arc::new(AtomicBool::new(false));
        let mut lanes: Vec<Lane> = Vec::new();
        for (i, (mut o, mut n)) in out.into_iter().zip(inc).enumerate() {
            let port = &self.ports[picks[i]];
            let mut snd = Verbs::new(port, dev, Role::Sender)?;
            let mut rcv = Verbs::new(port, dev, Role::Receiver)?;
            // Every write before any read: the peer does the same, so neither waits on the other
            // (the messages are far smaller than a socket buffer).
            let io = |e: std::io::Error| io_error(peer, e).context("InfiniBand set-up");
            o.write_all(&snd.local.encode()).map_err(io)?;
            n.write_all(&rcv.local.encode()).map_err(io)?;
            let mut b = [0u8; ENDPOINT_BYTES];
            o.read_exact(&mut b).map_err(io)?;
            let their_rcv = Endpoint::decode(&b, peer, Role::Receiver)?;
            n.read_exact(&mut b).map_err(io)?;
            let their_snd = Endpoint::decode(&b, peer, Role::Sender)?;
            snd.connect(their_rcv, peer)?;
            rcv.connect(their_snd, peer)?;
            // Both of our queue pairs accept writes now; once the peer says the same, neither
            // side's first write can reach a queue pair not yet ready.
            o.write_all(&[READY]).map_err(io)?;
            n.write_all(&[READY]).map_err(io)?;
            let mut r = [0u8; 2];
            o.read_exact(&mut r[..1]).map_err(io)?;
            n.read_exact(&mut r[1..]).map_err(io)?;
            if r != [READY; 2] {
                return Err(Error::remote(format!("rank {peer} failed the InfiniBand set-up")));
            }
            for s in [&o, &n] {
                s.set_nonblocking(true).map_err(|e| Error::io("non-blocking mode", &e))?;
            }
            nccl_trace!(Subsys::Net, "NET/IB : rank {me} lane {i} to rank {peer} on {} (qp {} -> {}, {} -> {})", port.describe(), snd.local.qpn, snd.remote.qpn, rcv.remote.qpn, rcv.local.qpn);
            let s = Sender::new(snd, Watch::new(o, stop.clone(), peer), self.gdr);
            let r = Receiver::new(rcv, Watch::new(n, stop.clone(), peer));
            lanes.push((Box::new(IbSend(s)), Box::new(IbRecv(r))));
        }
        nccl_info!(Subsys::Net, "NET/IB : rank {me} connected to rank {peer} over {} lanes ({})", lanes.len(), picks.iter().map(|&p| self.ports[p].describe()).collect::<Vec<_>>().join(", "));
        let shut = shutdown_all(socks);
        let interrupt: Interrupt = Arc::new(move || {
            stop.store(true, Ordering::Relaxed);
            shut();
        });
        Ok((lanes, interrupt))
    }
}

// ---------------------------------------------------------------------------------------------
// The real wire: a queue pair and its memory.

fn errno_text() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A registered memory region, deregistered when dropped.
struct Mr(*mut ffi::ibv_mr);

impl Mr {
    /// Registers `[addr, addr + len)` of the port's protection domain.
    fn new(port_name: &str, pd: *mut ffi::ibv_pd, addr: *mut c_void, len: usize, access: ffi::ibv_access_flags) -> Result<Mr> {
        // SAFETY: pd is live (its Hca is kept by the owner of this Mr); the range is memory the
        // caller owns for the Mr's lifetime.
        let mr = unsafe { ffi::ibv_reg_mr(pd, addr, len, access.0 as c_int) };
        if mr.is_null() {
            return Err(Error::system(format!("ibv_reg_mr of {len} bytes on {port_name} failed: {}", errno_text())));
        }
        Ok(Mr(mr))
    }

    fn lkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.0).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by Mr::new, deregistered once.
        unsafe { ffi::ibv_dereg_mr(self.0) };
    }
}

// SAFETY: a registration may be released from any thread.
unsafe impl Send for Mr {}

/// A completion queue and a queue pair on it, destroyed in that order's reverse.
struct Qp {
    qp: *mut ffi::ibv_qp,
    cq: *mut ffi::ibv_cq,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: both were created for this Qp; the QP goes before the CQ it completes to.
        unsafe {
            if !self.qp.is_null() {
                ffi::ibv_destroy_qp(self.qp);
            }
            ffi::ibv_destroy_cq(self.cq);
        }
    }
}

/// Resources of a `Verbs`, dropped (in field order: the queue pair, then the registrations,
/// then the memory they cover) with the device's CUDA context current.
struct Res {
    _qp: Qp,
    _mem_mr: Mr,
    _credit_mr: Mr,
    _mem: HostMapped,
    _credit: HostMapped,
    hca: Arc<Hca>,
}

/// One end of a lane direction over verbs.
struct Verbs {
    res: Option<Res>,
    dev: &'static Device,
    /// Raw copies of what `res` owns, for the data path.
    qp: *mut ffi::ibv_qp,
    cq: *mut ffi::ibv_cq,
    mem: *mut u8,
    lkey: u32,
    credit: *mut u8,
    credit_lkey: u32,
    port: u8,
    gid_index: u8,
    ethernet: bool,
    grh: bool,
    local: Endpoint,
    remote: Endpoint,
    peer: usize,
    wcs: Vec<ffi::ibv_wc>,
}

// SAFETY: a queue pair, its CQ and memory are used by one carrier thread at a time; verbs objects
// may be used from any thread.
unsafe impl Send for Verbs {}

/// 24 random bits (a queue pair's first packet sequence number).
fn random_psn() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() & 0x00ff_ffff) as u32
}

fn env_u8(name: &str, default: u8) -> u8 {
    let v = crate::config::env_i64(name, i64::from(default));
    u8::try_from(v).unwrap_or_else(|_| {
        nccl_warn!("{name}={v} is out of range; using {default}");
        default
    })
}

impl Verbs {
    fn new(port: &Port, dev: &'static Device, role: Role) -> Result<Verbs> {
        let hca = port.hca.clone();
        let name = port.describe();
        let fail = |what: &str| Error::system(format!("NET/IB : {what} on {name} failed: {}", errno_text()));
        // SAFETY: an open context; no completion channel.
        let cq = unsafe { ffi::ibv_create_cq(hca.ctx, CQ_DEPTH, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(fail("ibv_create_cq"));
        }
        let mut qp = Qp { qp: std::ptr::null_mut(), cq };
        let mut init = ffi::ibv_qp_init_attr {
            send_cq: cq,
            recv_cq: cq,
            cap: ffi::ibv_qp_cap {
                max_send_wr: if role == Role::Sender { SLOTS as u32 } else { CREDIT_WRS as u32 },
                max_recv_wr: if role == Role::Receiver { SLOTS as u32 } else { 1 },
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: a live PD and CQ; init is a valid attribute block.
        qp.qp = unsafe { ffi::ibv_create_qp(hca.pd, &mut init) };
        if qp.qp.is_null() {
            return Err(fail("ibv_create_qp"));
        }
        // To INIT: remote writes allowed (the receiver's ring, the sender's credit word).
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port.num,
            qp_access_flags: (ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE).0,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX | ffi::ibv_qp_attr_mask::IBV_QP_PORT | ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        // SAFETY: a live QP and a valid attribute block.
        let rc = unsafe { ffi::ibv_modify_qp(qp.qp, &mut a, mask.0 as c_int) };
        if rc != 0 {
            return Err(Error::system(format!("NET/IB : ibv_modify_qp(INIT) on {name} failed: {}", std::io::Error::from_raw_os_error(rc))));
        }
        let mem = HostMapped::zeroed(dev, SLOTS * SLOT_BYTES)?;
        let credit = HostMapped::zeroed(dev, 64)?;
        let rw = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        let mem_mr = Mr::new(&name, hca.pd, mem.host.cast(), mem.size, if role == Role::Receiver { rw } else { ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE })?;
        let credit_mr = Mr::new(&name, hca.pd, credit.host.cast(), credit.size, if role == Role::Sender { rw } else { ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE })?;
        // SAFETY: a live QP.
        let qpn = unsafe { (*qp.qp).qp_num };
        let (addr, rkey) = match role {
            Role::Sender => (credit.host as u64, credit_mr.rkey()),
            Role::Receiver => (mem.host as u64, mem_mr.rkey()),
        };
        let local = Endpoint {
            role,
            link_layer: port.link_layer,
            mtu: port.mtu,
            lid: port.lid,
            gid: port.gid,
            qpn,
            psn: random_psn(),
            addr,
            rkey,
            slots: SLOTS as u32,
            slot_bytes: SLOT_BYTES as u32,
        };
        let mut v = Verbs {
            qp: qp.qp,
            cq,
            mem: mem.host,
            lkey: mem_mr.lkey(),
            credit: credit.host,
            credit_lkey: credit_mr.lkey(),
            port: port.num,
            gid_index: port.gid_index,
            ethernet: port.ethernet(),
            grh: port.grh,
            local,
            remote: local,
            peer: usize::MAX,
            wcs: vec![ffi::ibv_wc::default(); CQ_DEPTH as usize],
            dev,
            res: Some(Res { _qp: qp, _mem_mr: mem_mr, _credit_mr: credit_mr, _mem: mem, _credit: credit, hca }),
        };
        if role == Role::Receiver {
            // Armed before the endpoint is sent, so the first write always finds a receive.
            for _ in 0..SLOTS {
                v.post_recv()?;
            }
        }
        Ok(v)
    }

    /// To RTR and RTS, connected to the peer's end `remote`.
    fn connect(&mut self, remote: Endpoint, peer: usize) -> Result<()> {
        if (remote.link_layer == ffi::IBV_LINK_LAYER_ETHERNET as u8) != self.ethernet {
            return Err(Error::invalid_usage(format!(
                "rank {peer}'s RDMA port is {}, this rank's is {}: they cannot connect",
                if self.ethernet { "InfiniBand" } else { "RoCE" },
                if self.ethernet { "RoCE" } else { "InfiniBand" }
            )));
        }
        if self.local.role == Role::Sender && (remote.slots as usize != SLOTS || remote.slot_bytes as usize != SLOT_BYTES) {
            return Err(Error::invalid_usage(format!(
                "rank {peer} has {} InfiniBand slots of {} bytes, this rank {SLOTS} of {SLOT_BYTES}: different oxccl builds?",
                remote.slots, remote.slot_bytes
            )));
        }
        self.remote = remote;
        self.peer = peer;
        let fail = |state: &str, rc: c_int| Error::system(format!("NET/IB : ibv_modify_qp({state}) for rank {peer} failed: {}", std::io::Error::from_raw_os_error(rc)));
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: ffi::ibv_mtu::from(self.local.mtu.min(remote.mtu).max(ffi::IBV_MTU_256 as u8)),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ffi::ibv_ah_attr { dlid: remote.lid, sl: env_u8("NCCL_IB_SL", 0), src_path_bits: 0, port_num: self.port, ..Default::default() },
            ..Default::default()
        };
        // RoCE routes by GID (no LIDs on Ethernet); an InfiniBand port flagged
        // IBV_QPF_GRH_REQUIRED also needs the GRH, else the RTR transition is refused.
        if self.grh {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
            a.ah_attr.grh.sgid_index = self.gid_index;
            a.ah_attr.grh.hop_limit = 255;
            if self.ethernet {
                a.ah_attr.grh.traffic_class = env_u8("NCCL_IB_TC", 0);
            }
        }
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_AV
            | ffi::ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ffi::ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ffi::ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ffi::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: a live QP in INIT and a valid attribute block.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, &mut a, mask.0 as c_int) };
        if rc != 0 {
            return Err(fail("RTR", rc));
        }
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: self.local.psn,
            // NCCL's defaults: 4.096 us * 2^20 (about 4 s) per try, 7 tries; RNR retried forever.
            timeout: env_u8("NCCL_IB_TIMEOUT", 20),
            retry_cnt: env_u8("NCCL_IB_RETRY_CNT", 7),
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ffi::ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ffi::ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: a live QP in RTR and a valid attribute block.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, &mut a, mask.0 as c_int) };
        if rc != 0 {
            return Err(fail("RTS", rc));
        }
        Ok(())
    }

    fn post_send(&mut self, mut wr: ffi::ibv_send_wr, what: &str) -> Result<()> {
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a live QP; post_send is the provider's entry point (what verbs.h's inline
        // ibv_post_send calls); wr and its gather list outlive the call (the NIC reads the
        // gathered memory later, which the carriers keep until the completion).
        let rc = unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_send {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(Error::remote(format!("posting an RDMA {what} to rank {} failed: {}", self.peer, std::io::Error::from_raw_os_error(rc))));
        }
        Ok(())
    }
}

impl Wire for Verbs {
    fn mem(&self) -> *mut u8 {
        self.mem
    }

    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn write_slot(&mut self, wr_id: u64, sges: &[Sge], slot: usize, imm: u32) -> Result<()> {
        let mut list: Vec<ffi::ibv_sge> = sges.iter().map(|s| ffi::ibv_sge { addr: s.addr, length: s.len, lkey: s.lkey }).collect();
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: list.as_mut_ptr(),
            num_sge: list.len() as c_int,
            opcode: ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: self.remote.addr + (slot * SLOT_BYTES) as u64, rkey: self.remote.rkey };
        self.post_send(wr, "write")
    }

    fn write_credit(&mut self, wr_id: u64, consumed: u64) -> Result<()> {
        // The source word may be rewritten while an earlier credit write is in flight: the
        // count only grows, so the sender sees it late at worst, never wrong (an aligned 8-byte
        // store is read whole).
        // SAFETY: the first 8 bytes of our 64-byte pinned credit block, 8-aligned.
        unsafe { std::ptr::write_volatile(self.credit.cast::<u64>(), consumed) };
        let mut sge = ffi::ibv_sge { addr: self.credit as u64, length: 8, lkey: self.credit_lkey };
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: self.remote.addr, rkey: self.remote.rkey };
        self.post_send(wr, "credit write")
    }

    fn post_recv(&mut self) -> Result<()> {
        // No gather list: a write with immediate places its data itself; the receive only
        // yields the completion.
        let mut wr = ffi::ibv_recv_wr { wr_id: 0, next: std::ptr::null_mut(), sg_list: std::ptr::null_mut(), num_sge: 0 };
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: a live QP; post_recv is the provider's entry point (verbs.h's inline
        // ibv_post_recv calls it); wr outlives the call.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_recv {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(Error::remote(format!("posting an RDMA receive for rank {} failed: {}", self.peer, std::io::Error::from_raw_os_error(rc))));
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        // SAFETY: a live CQ; poll_cq is the provider's entry point (verbs.h's inline
        // ibv_poll_cq); wcs has room for the entries asked for.
        let n = unsafe {
            let ctx = (*self.cq).context;
            match (*ctx).ops.poll_cq {
                Some(f) => f(self.cq, self.wcs.len() as c_int, self.wcs.as_mut_ptr()),
                None => -libc::ENOSYS,
            }
        };
        if n < 0 {
            return Err(Error::remote(format!("ibv_poll_cq failed ({n})")));
        }
        for wc in &self.wcs[..n as usize] {
            let error = wc.error().map(|(status, vendor)| {
                // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
                let text = unsafe { std::ffi::CStr::from_ptr(ffi::ibv_wc_status_str(status)) }.to_string_lossy().into_owned();
                format!("status {status} ({text}), vendor error {vendor:#x}")
            });
            out.push(Completion {
                wr_id: wc.wr_id(),
                recv: error.is_none() && wc.opcode() & ffi::ibv_wc_opcode::IBV_WC_RECV != 0,
                imm: u32::from_be(wc.imm_data),
                len: wc.len() as u32,
                error,
            });
        }
        // The CPU reads slots and the credit word after this: nothing of them before the poll.
        fence(Ordering::Acquire);
        Ok(())
    }

    fn credits(&self) -> u64 {
        // SAFETY: the first 8 bytes of our 64-byte pinned credit block, 8-aligned; written by the
        // NIC (volatile: outside the compiler's view).
        let v = unsafe { std::ptr::read_volatile(self.credit.cast::<u64>()) };
        fence(Ordering::Acquire);
        v
    }

    fn register_gpu(&mut self, ptr: u64, len: u64) -> Option<GpuMr> {
        // Page-aligned, as NCCL registers: still within the allocation, whose GPU pages are
        // larger.
        let page = 4096u64;
        let base = ptr & !(page - 1);
        let end = (ptr + len).div_ceil(page) * page;
        let hca = self.res.as_ref()?.hca.clone();
        let mr = Mr::new(&hca.name, hca.pd, base as *mut c_void, (end - base) as usize, ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE).ok()?;
        Some(GpuMr { lkey: mr.lkey(), base, _keep: Box::new((mr, hca)) })
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // cuMemFreeHost wants the context current; the carrier's thread may never have made it so.
        let _ctx = CtxGuard::new(self.dev).ok();
        drop(self.res.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::link::{Link, Tracker};
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use std::net::TcpListener;

    #[test]
    fn message_arithmetic() {
        assert_eq!(messages(0), 1);
        assert_eq!(messages(1), 1);
        assert_eq!(messages(CHUNK as u64), 1);
        assert_eq!(messages(CHUNK as u64 + 1), 2);
        assert_eq!(piece(0, 0), (0, 0));
        assert_eq!(piece(5, 0), (0, 5));
        let b = 2 * CHUNK as u64 + 7;
        assert_eq!((0..messages(b)).map(|m| piece(b, m)).collect::<Vec<_>>(), vec![(0, CHUNK), (CHUNK as u64, CHUNK), (2 * CHUNK as u64, 7)]);
        assert_eq!((0..10).map(slot).collect::<Vec<_>>(), vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        // Fresh: the first SLOTS messages may go, the next waits for a credit and a completion.
        let s = SLOTS as u64;
        assert!((0..s).all(|k| may_write(k, 0, 0)));
        assert!(!may_write(s, 0, 0));
        assert!(!may_write(s, 1, 0), "its send buffer is still being read");
        assert!(!may_write(s, 0, 1), "its slot is still unconsumed");
        assert!(may_write(s, 1, 1));
        assert!(may_write(u64::MAX - 1, u64::MAX, u64::MAX));
    }

    #[test]
    fn endpoints_round_trip() {
        let e = Endpoint {
            role: Role::Receiver,
            link_layer: ffi::IBV_LINK_LAYER_ETHERNET as u8,
            mtu: ffi::IBV_MTU_4096 as u8,
            lid: 0x1234,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3],
            qpn: 0x00ab_cdef,
            psn: 0x0012_3456,
            addr: 0x7f00_dead_beef_0040,
            rkey: 0xfeed_f00d,
            slots: SLOTS as u32,
            slot_bytes: SLOT_BYTES as u32,
        };
        let b = e.encode();
        assert_eq!(Endpoint::decode(&b, 3, Role::Receiver).unwrap(), e);
        let s = Endpoint { role: Role::Sender, ..e };
        assert_eq!(Endpoint::decode(&s.encode(), 3, Role::Sender).unwrap(), s);
        // The wrong role, a foreign message, another version: errors naming the peer.
        assert!(Endpoint::decode(&b, 3, Role::Sender).is_err());
        let mut bad = b;
        bad[0] ^= 1;
        let err = Endpoint::decode(&bad, 3, Role::Receiver).unwrap_err();
        assert!(err.msg.contains("rank 3"), "{}", err.msg);
        let mut bad = b;
        bad[4] = 9;
        assert!(Endpoint::decode(&bad, 3, Role::Receiver).is_err());
        let mut bad = b;
        bad[6] = 7;
        assert!(Endpoint::decode(&bad, 3, Role::Receiver).is_err());
    }

    #[test]
    fn gid_choice() {
        let zero = [0u8; 16];
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 9];
        let v6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        use GidKind::*;
        // A typical mlx5 RoCE table: v1 and v2 of the link-local address, then of the IPv4 one.
        let t = [(0, link_local, RoceV1), (1, link_local, RoceV2), (2, v4, RoceV1), (3, v4, RoceV2)];
        assert_eq!(pick_gid(&t), Some(3));
        assert_eq!(pick_gid(&[(0, link_local, RoceV2), (1, v6, RoceV2), (2, v4, RoceV1)]), Some(1));
        assert_eq!(pick_gid(&[(0, link_local, RoceV1), (1, v4, Unknown)]), Some(1));
        assert_eq!(pick_gid(&[(0, zero, RoceV2), (1, link_local, RoceV1)]), Some(1));
        assert_eq!(pick_gid(&[(0, zero, RoceV2)]), None);
        assert_eq!(pick_gid(&[]), None);
        assert_eq!(GidKind::from_sysfs("RoCE v2\n"), RoceV2);
        assert_eq!(GidKind::from_sysfs("IB/RoCE v1\n"), RoceV1);
        assert_eq!(GidKind::from_sysfs(""), Unknown);
    }

    #[test]
    fn global_route_header() {
        // RoCE always; InfiniBand only when the port requires it (IBV_QPF_GRH_REQUIRED = 1).
        assert!(needs_grh(true, 0));
        assert!(!needs_grh(false, 0));
        assert!(needs_grh(false, 1));
        assert!(!needs_grh(false, 0xfe), "other port flags do not ask for a GRH");
    }

    #[test]
    fn nearest_nic_by_pci_path() {
        let p = |s: &str| Some(PathBuf::from(s));
        let gpu = PathBuf::from("/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0");
        let nics = [p("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"), p("/sys/devices/pci0000:17/0000:17:00.0/0000:18:01.0/0000:1a:00.0"), None];
        assert_eq!(nearest(Some(&gpu), &nics), vec![1]);
        // Two equally near: both, in order; unknown GPU: all.
        let twin = [nics[1].clone(), nics[0].clone(), nics[1].clone()];
        assert_eq!(nearest(Some(&gpu), &twin), vec![0, 2]);
        assert_eq!(nearest(None, &nics), vec![0, 1, 2]);
        assert!(nearest(Some(&gpu), &[]).is_empty());
    }

    #[test]
    fn open_without_devices_is_not_an_error() {
        // CI and this project's machines have no RDMA device: Ok(None); with one, Ok(Some).
        let a = open().expect("open() must not fail for lack of devices");
        let b = open().unwrap();
        assert_eq!(a.is_some(), b.is_some());
        if let (Some(a), Some(b)) = (a, b) {
            assert!(Arc::ptr_eq(&a, &b), "one per process");
            assert!(!a.describe().is_empty());
        }
    }

    // --- The protocol over an in-memory wire ---------------------------------------------------

    /// Heap bytes used through raw pointers only (as a NIC would).
    struct RawBuf(*mut u8, usize);

    impl RawBuf {
        fn new(len: usize) -> RawBuf {
            RawBuf(Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>(), len)
        }
    }

    impl Drop for RawBuf {
        fn drop(&mut self) {
            // SAFETY: made by RawBuf::new from a boxed slice of this length, freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.0, self.1)) });
        }
    }

    // SAFETY: only raw pointers into it are handed out; the protocol (checked by the fake) keeps
    // the sender and the receiver off the same bytes at the same time, and the state mutex
    // orders their accesses.
    unsafe impl Send for RawBuf {}
    unsafe impl Sync for RawBuf {}

    /// What the two ends of a fake lane direction share: the receiver's ring, its receive
    /// completions, the sender's credit word and each end's write completions.
    struct Shared {
        ring: RawBuf,
        st: Mutex<FakeState>,
    }

    #[derive(Default)]
    struct FakeState {
        recvs_posted: u64,
        written: u64,
        credits: u64,
        to_receiver: VecDeque<Completion>,
        to_sender: VecDeque<Completion>,
        /// Fail every write from now on with this text.
        fail: Option<String>,
    }

    struct Fake {
        sh: Arc<Shared>,
        sender: bool,
        bufs: RawBuf,
    }

    fn fake_pair() -> (Fake, Fake) {
        let sh = Arc::new(Shared { ring: RawBuf::new(SLOTS * SLOT_BYTES), st: Mutex::new(FakeState::default()) });
        let s = Fake { sh: sh.clone(), sender: true, bufs: RawBuf::new(SLOTS * SLOT_BYTES) };
        let mut r = Fake { sh, sender: false, bufs: RawBuf::new(0) };
        for _ in 0..SLOTS {
            r.post_recv().unwrap();
        }
        (s, r)
    }

    fn ok(wr_id: u64, recv: bool, imm: u32, len: u32) -> Completion {
        Completion { wr_id, recv, imm, len, error: None }
    }

    impl Wire for Fake {
        fn mem(&self) -> *mut u8 {
            if self.sender { self.bufs.0 } else { self.sh.ring.0 }
        }

        fn lkey(&self) -> u32 {
            1
        }

        fn write_slot(&mut self, wr_id: u64, sges: &[Sge], slot: usize, imm: u32) -> Result<()> {
            let mut st = self.sh.st.lock();
            if let Some(e) = st.fail.clone() {
                st.to_sender.push_back(Completion { error: Some(e), ..ok(wr_id, false, 0, 0) });
                return Ok(());
            }
            // The protocol's promises, checked: a receive is posted, the slot is free.
            assert!(st.recvs_posted > 0, "write without a posted receive (RNR)");
            assert!(st.written < st.credits + SLOTS as u64, "write into an unconsumed slot");
            assert_eq!(slot, super::slot(st.written));
            let mut at = slot * SLOT_BYTES;
            for s in sges {
                assert!(at + s.len as usize <= (slot + 1) * SLOT_BYTES);
                // SAFETY: the gather entry points into the sender's buffers (tests send host
                // memory only); the ring range is free (asserted above) and in bounds.
                unsafe { std::ptr::copy_nonoverlapping(s.addr as *const u8, self.sh.ring.0.add(at), s.len as usize) };
                at += s.len as usize;
            }
            st.recvs_posted -= 1;
            st.written += 1;
            let len = (at - slot * SLOT_BYTES) as u32;
            st.to_receiver.push_back(ok(0, true, imm, len));
            st.to_sender.push_back(ok(wr_id, false, 0, 0));
            Ok(())
        }

        fn write_credit(&mut self, wr_id: u64, consumed: u64) -> Result<()> {
            let mut st = self.sh.st.lock();
            assert!(consumed >= st.credits);
            st.credits = consumed;
            st.to_receiver.push_back(ok(wr_id, false, 0, 0));
            Ok(())
        }

        fn post_recv(&mut self) -> Result<()> {
            self.sh.st.lock().recvs_posted += 1;
            Ok(())
        }

        fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()> {
            let mut st = self.sh.st.lock();
            let q = if self.sender { &mut st.to_sender } else { &mut st.to_receiver };
            out.extend(q.drain(..));
            Ok(())
        }

        fn credits(&self) -> u64 {
            self.sh.st.lock().credits
        }

        fn register_gpu(&mut self, _: u64, _: u64) -> Option<GpuMr> {
            None
        }
    }

    /// Connected loopback sockets: (a's end, b's end).
    fn sockets() -> (Stream, Stream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let b = l.accept().unwrap().0;
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a.into(), b.into())
    }

    struct Pair {
        a: Link,
        b: Link,
        /// a -> b's shared state (to inject failures), and b's side of the lane socket.
        ab: Arc<Shared>,
        b_socks: Vec<Stream>,
    }

    /// Links a (rank 0) and b (rank 1) with `n` fake lanes each way.
    fn pair(n: usize) -> Pair {
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        let stop_a = Arc::new(AtomicBool::new(false));
        let stop_b = Arc::new(AtomicBool::new(false));
        let (mut a_socks, mut b_socks) = (Vec::new(), Vec::new());
        let mut ab = None;
        for _ in 0..n {
            let (s1, r1) = fake_pair(); // a -> b
            let (s2, r2) = fake_pair(); // b -> a
            ab.get_or_insert(s1.sh.clone());
            let (ao, bi) = sockets();
            let (bo, ai) = sockets();
            a_socks.extend([ao.try_clone().unwrap(), ai.try_clone().unwrap()]);
            b_socks.extend([bo.try_clone().unwrap(), bi.try_clone().unwrap()]);
            la.push((Box::new(IbSend(Sender::new(s1, Watch::new(ao, stop_a.clone(), 1), false))) as Box<dyn Carrier>, Box::new(IbRecv(Receiver::new(r2, Watch::new(ai, stop_a.clone(), 1)))) as Box<dyn Carrier>));
            lb.push((Box::new(IbSend(Sender::new(s2, Watch::new(bo, stop_b.clone(), 0), false))) as Box<dyn Carrier>, Box::new(IbRecv(Receiver::new(r1, Watch::new(bi, stop_b.clone(), 0)))) as Box<dyn Carrier>));
        }
        let interrupt = |stop: Arc<AtomicBool>, socks: Vec<Stream>| -> Interrupt {
            let shut = shutdown_all(socks);
            Arc::new(move || {
                stop.store(true, Ordering::Relaxed);
                shut();
            })
        };
        let ia = interrupt(stop_a, a_socks);
        let ib = interrupt(stop_b, b_socks.iter().map(|s| s.try_clone().unwrap()).collect());
        Pair { a: Link::new(None, 0, 1, la, ia).unwrap(), b: Link::new(None, 1, 0, lb, ib).unwrap(), ab: ab.unwrap(), b_socks }
    }

    fn pattern(n: usize, salt: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7 + salt) % 251) as u8).collect()
    }

    #[test]
    fn host_transfers_arrive_both_ways() {
        for lanes in [1, 2] {
            let p = pair(lanes);
            // Empty, small, exactly a chunk, several chunks (more messages than slots, striped).
            let sizes = [0usize, 5, CHUNK, 3 * CHUNK + 11, 9 * CHUNK + 1];
            let mut srcs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i)).collect();
            let mut back: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i + 100)).collect();
            let mut dst_b: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let mut dst_a: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let t = Tracker::new(4 * sizes.len());
            let job = |v: &mut Vec<u8>| Job { mem: Mem::Host(v.as_mut_ptr()), bytes: v.len() as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false };
            for i in 0..sizes.len() {
                p.b.recv(job(&mut dst_b[i]));
                p.a.recv(job(&mut dst_a[i]));
                p.a.send(job(&mut srcs[i]));
                p.b.send(job(&mut back[i]));
            }
            t.wait(&|| None).unwrap();
            assert!(dst_b == srcs, "a -> b over {lanes} lanes");
            assert!(dst_a == back, "b -> a over {lanes} lanes");
        }
    }

    #[test]
    fn a_size_mismatch_is_an_error_and_breaks_the_direction() {
        let p = pair(1);
        let mut src = pattern(64, 0);
        let mut dst = vec![0u8; 32];
        let t = Tracker::new(2);
        p.a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        p.b.recv(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: 32, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let e = t.wait(&|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::InvalidUsage, "{}", e.msg);
        assert!(e.msg.contains("64 bytes") && e.msg.contains("32 bytes"), "{}", e.msg);
        let t = Tracker::new(1);
        p.b.recv(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: 32, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        assert!(t.wait(&|| None).is_err(), "later jobs of a broken direction fail at once");
    }

    #[test]
    fn a_failed_write_names_the_peer() {
        let p = pair(1);
        p.ab.st.lock().fail = Some("status 12 (transport retry counter exceeded)".into());
        let mut src = pattern(100, 0);
        let t = Tracker::new(1);
        p.a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 100, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let e = t.wait(&|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
        assert!(e.msg.contains("RDMA write to rank 1 failed") && e.msg.contains("retry counter"), "{}", e.msg);
    }

    #[test]
    fn a_closed_peer_and_an_interrupt_end_a_wait() {
        // b's sockets close (its process died): a's receive, waiting for data, fails.
        let p = pair(1);
        let mut dst = vec![0u8; 16];
        let t = Tracker::new(1);
        p.a.recv(Job { mem: Mem::Host(dst.as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        for s in &p.b_socks {
            s.shutdown(std::net::Shutdown::Both).unwrap();
        }
        let e = t.wait(&|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
        assert!(e.msg.contains("rank 1"), "{}", e.msg);
        // An interrupt (abort) ends a blocked send: no credit ever comes for the fifth message.
        let p = pair(1);
        let mut src = pattern((SLOTS + 1) * CHUNK, 0);
        let t = Tracker::new(1);
        p.a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: src.len() as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        std::thread::sleep(Duration::from_millis(50));
        p.a.interrupt();
        let e = t.wait(&|| None).unwrap_err();
        assert!(e.msg.contains("interrupted") || e.msg.contains("closed"), "{}", e.msg);
        drop(p);
    }
}
