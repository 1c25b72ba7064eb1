//! MemoryChannel set-up: buffers, their exchange between ranks, and the `DevComm` built from them.

use crate::algo::Scratch;
use crate::bootstrap::Bootstrap;
use std::sync::Arc;

use crate::device_abi::{DevComm, RegEntry, RegOffer, OX_MAX_BLOCKS, OX_MAX_RANKS, OX_PRIV_FLAGS_OFF, OX_PRIV_PENDING_OFF, OX_PRIV_RING_CHAIN_OFF, OX_PRIV_RING_OUT_OFF, OX_REG_SLOTS};
use crate::error::{Error, Result};
use crate::gpu::ipc::{self, ImportedBuffer, IPC_HANDLE_BYTES};
use crate::gpu::context::{can_access, ordinal_by_bus_id};
use crate::gpu::suspendable::{PeerMapping, SuspendableBuffer};
use crate::gpu::{Device, DeviceBuffer, HostMapped};
use crate::bootstrap::topo::PeerInfo;
use crate::log::Subsys;
use std::os::fd::OwnedFd;

const ALIGN: u64 = 4096;
const SEM_BYTES: u64 = (OX_MAX_BLOCKS * OX_MAX_RANKS * 8) as u64;
/// u32 per (block, peer): LL flags, LL acknowledgements, pending one-way launches.
const FLAG_TABLE_BYTES: u64 = (OX_MAX_BLOCKS * OX_MAX_RANKS * 4) as u64;

fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Byte layout of a rank's shared buffer; identical on every rank (same scratch plan).
#[derive(Clone, Copy, Debug)]
struct SharedLayout {
    ll_off: u64,
    ap128_off: u64,
    ll128_off: u64,
    rs_off: u64,
    sem_off: u64,
    ack_off: u64,
    /// Zero-copy offers received (`RegOffer` per receiving rank) and answers (u32 per block and
    /// sender): kernels/colls/direct.cuh.
    offer_off: u64,
    accept_off: u64,
    /// The copy-engine direct path's counters (transport::ce_direct).
    ce_off: u64,
    total: u64,
}

const CE_COUNTER_BYTES: u64 = crate::transport::ce_direct::COUNTER_BYTES;
const OFFER_BYTES: u64 = (OX_MAX_RANKS * std::mem::size_of::<RegOffer>()) as u64;

impl SharedLayout {
    fn new(s: &Scratch, nranks: usize) -> SharedLayout {
        let ll_off = 0;
        let ap128_off = align_up(ll_off + s.ll_bytes() + Scratch::ring_bytes(nranks));
        let ll128_off = align_up(ap128_off + s.ap128_bytes());
        let rs_off = align_up(ll128_off + s.ll128_bytes());
        let sem_off = align_up(rs_off + s.rs_bytes(nranks));
        let ack_off = align_up(sem_off + SEM_BYTES);
        let offer_off = align_up(ack_off + FLAG_TABLE_BYTES);
        let accept_off = align_up(offer_off + OFFER_BYTES);
        let ce_off = align_up(accept_off + FLAG_TABLE_BYTES);
        SharedLayout { ll_off, ap128_off, ll128_off, rs_off, sem_off, ack_off, offer_off, accept_off, ce_off, total: align_up(ce_off + CE_COUNTER_BYTES) }
    }
}

/// Private buffer layout: the DevComm itself, LL flags (u32 per block and peer) and pending
/// one-way LL launches (u32 per block and peer), the ring one-shot's base table and chain word,
/// at the offsets kernels derive from the DevComm's address (OX_PRIV_*), then expected semaphore
/// counts.
const DEVCOMM_OFF: u64 = 0;
const FLAGS_OFF: u64 = DEVCOMM_OFF + OX_PRIV_FLAGS_OFF;
const PENDING_OFF: u64 = DEVCOMM_OFF + OX_PRIV_PENDING_OFF;
/// The ring one-shot's base table and chain word (OX_PRIV_RING_*), and the done counter
/// (OX_PRIV_DONE_OFF) on the next line, zeroed like the rest.
const RING_CHAIN_OFF: u64 = DEVCOMM_OFF + OX_PRIV_RING_CHAIN_OFF;
/// Then the ring one-shot's output words (OX_PRIV_RING_OUT_OFF), a u32 per block, zeroed.
const RING_OUT_OFF: u64 = DEVCOMM_OFF + OX_PRIV_RING_OUT_OFF;
const EXPECTED_OFF: u64 = RING_OUT_OFF + (OX_MAX_BLOCKS * 4) as u64;
const _: () = assert!(RING_OUT_OFF == RING_CHAIN_OFF + 256);
const PRIVATE_BYTES: u64 = EXPECTED_OFF + SEM_BYTES;

/// How a rank's shared buffer reaches peers of other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Share {
    /// Only peers of its own process (its pointer).
    Pointer,
    /// A CUDA IPC handle (cuMemAlloc memory: NCCL_CUMEM_ENABLE=0, or cuMem failed).
    Ipc([u8; IPC_HANDLE_BYTES]),
    /// A POSIX file descriptor sent over a Unix socket (cuMem memory, which ncclCommSuspend can
    /// give back and ncclCommResume maps again at the same address).
    Fd,
}

/// What a rank publishes about its shared buffer.
struct Published {
    ptr: u64,
    /// Bytes of the layout (equal on every rank).
    size: u64,
    /// Bytes of the allocation (the layout rounded up to the cuMem granularity).
    alloc: u64,
    share: Share,
}

impl Published {
    const BYTES: usize = 8 + 8 + 8 + 1 + IPC_HANDLE_BYTES;

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::BYTES);
        v.extend_from_slice(&self.ptr.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.alloc.to_le_bytes());
        let (kind, h) = match self.share {
            Share::Pointer => (0u8, [0; IPC_HANDLE_BYTES]),
            Share::Ipc(h) => (1, h),
            Share::Fd => (2, [0; IPC_HANDLE_BYTES]),
        };
        v.push(kind);
        v.extend_from_slice(&h);
        v
    }

    fn decode(b: &[u8]) -> Result<Published> {
        if b.len() != Self::BYTES {
            return Err(Error::internal(format!("channel info of {} bytes, expected {}", b.len(), Self::BYTES)));
        }
        let word = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let mut h = [0u8; IPC_HANDLE_BYTES];
        h.copy_from_slice(&b[25..25 + IPC_HANDLE_BYTES]);
        let share = match b[24] {
            0 => Share::Pointer,
            1 => Share::Ipc(h),
            2 => Share::Fd,
            k => return Err(Error::internal(format!("channel info with share kind {k}"))),
        };
        Ok(Published { ptr: word(0), size: word(8), alloc: word(16), share })
    }
}

/// This rank's shared buffer.
enum SharedBuf {
    /// cuMem memory ncclCommSuspend can give back.
    Suspendable(SuspendableBuffer),
    /// cuMemAlloc memory (NCCL_CUMEM_ENABLE=0, or cuMem failed): kept while suspended.
    Fixed(DeviceBuffer),
}

impl SharedBuf {
    fn ptr(&self) -> u64 {
        match self {
            SharedBuf::Suspendable(b) => b.ptr,
            SharedBuf::Fixed(b) => b.ptr,
        }
    }

    fn alloc_bytes(&self) -> u64 {
        match self {
            SharedBuf::Suspendable(b) => b.size as u64,
            SharedBuf::Fixed(b) => b.size as u64,
        }
    }
}

/// This rank's mapping of a peer's shared buffer (peers of this process need none).
enum PeerBuf {
    /// Kept for its Drop (cuIpcCloseMemHandle).
    Ipc { _map: ImportedBuffer },
    Fd { rank: usize, map: PeerMapping },
}

/// The Unix socket a rank receives its peers' descriptors on, for one exchange (`seq`) of one
/// communicator (`key`).
fn socket_name(key: u64, seq: u64, rank: usize) -> String {
    format!("oxccl-ch-{key:016x}-{seq}-{rank}")
}

const FD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends `mine` to every rank of `to` and receives a descriptor from every rank of `from`
/// (reg::uds::exchange_fds). `listener` is this rank's socket for exchange `seq`, bound before a
/// bootstrap exchange that the ranks of `from` join before sending (so it exists when they connect).
fn exchange_fds(listener: &OwnedFd, key: u64, seq: u64, me: usize, mine: Option<&OwnedFd>, to: &[usize], from: &[usize]) -> Result<Vec<(usize, OwnedFd)>> {
    use std::os::fd::AsRawFd;
    crate::reg::uds::exchange_fds(listener, |r| socket_name(key, seq, r), me, mine.map(|f| f.as_raw_fd()), to, from, FD_TIMEOUT, "channel buffers")
}

/// A rank's MemoryChannels to every peer of a one-host communicator: its shared buffer (LL, LL128
/// and reduce-scatter scratch, semaphores, zero-copy offers, copy-engine counters), which peers
/// reach through peer access or CUDA IPC handles, its private buffer holding the DevComm, and its
/// mappings of the peers' shared buffers.
pub struct MemoryChannels {
    /// Device address of this rank's DevComm (kernel argument).
    pub dev_comm: u64,
    /// Bytes of device memory this rank allocated for the communicator.
    pub device_bytes: u64,
    /// `RegEntry[nranks][OX_REG_SLOTS]` the kernels read (`DevComm::reg_table`); src/reg fills it.
    pub reg_table: Arc<crate::reg::Table>,
    /// Each rank's copy-engine direct counters, as mapped here (zeroed at init).
    pub ce_counters: Vec<u64>,
    /// Names this communicator's descriptor sockets (the bootstrap's instance key).
    key: u64,
    me: usize,
    /// Peers of other processes, to which a resume sends this rank's new descriptor.
    remote: Vec<usize>,
    /// Descriptor exchanges so far (the connect's is 0).
    seq: u64,
    // Drop order matters: unmap peers' memory before freeing ours.
    _imports: Vec<PeerBuf>,
    _private: DeviceBuffer,
    _shared: SharedBuf,
}

/// Whether every rank's attempt succeeded: `mine` with every other rank's answer (collective).
fn all_agree(bootstrap: &Bootstrap, mine: std::result::Result<(), String>) -> Result<std::result::Result<(), String>> {
    let all = bootstrap.all_gather(&[mine.is_ok() as u8])?;
    let bad: Vec<String> = all.iter().enumerate().filter(|(_, b)| b.first() != Some(&1)).map(|(r, _)| r.to_string()).collect();
    Ok(match mine {
        Err(e) => Err(e),
        Ok(()) if bad.is_empty() => Ok(()),
        Ok(()) => Err(format!("rank(s) {} could not share or map their buffers", bad.join(", "))),
    })
}

type Shared = (SharedBuf, Vec<PeerBuf>, [u64; OX_MAX_RANKS]);

/// One try (socket names `seq`) at allocating this rank's shared buffer (cuMem memory where
/// `cumem`, else cuMemAlloc) and mapping every peer's: collective, and every rank gets the same
/// answer; Ok(Err) says why the try failed somewhere (the caller tries again without cuMem).
#[allow(clippy::too_many_arguments)]
fn share(bootstrap: &Bootstrap, dev: &'static Device, peers: &[PeerInfo], remote: &[usize], key: u64, seq: u64, total: u64, cumem: bool) -> Result<std::result::Result<Shared, String>> {
    let me = bootstrap.rank();
    let mut shared = None;
    if cumem {
        match SuspendableBuffer::zeroed(dev, total as usize) {
            Ok(b) => shared = Some(SharedBuf::Suspendable(b)),
            Err(e) => nccl_info!(Subsys::Alloc, "channel buffers: cuMem allocation of {total} bytes failed ({}); using cuMemAlloc, which ncclCommSuspend cannot release", e.msg),
        }
    }
    let mut my_fd = None;
    if let (Some(SharedBuf::Suspendable(b)), false) = (&shared, remote.is_empty()) {
        my_fd = b.export();
        if my_fd.is_none() {
            nccl_info!(Subsys::Alloc, "channel buffers: cuMemExportToShareableHandle failed; using cuMemAlloc, which ncclCommSuspend cannot release");
            shared = None;
        }
    }
    let shared = match shared {
        Some(s) => s,
        None => SharedBuf::Fixed(DeviceBuffer::zeroed(dev, total as usize)?),
    };
    let share = match (&shared, &my_fd) {
        _ if remote.is_empty() => Share::Pointer,
        (_, Some(_)) => Share::Fd,
        (b, None) => Share::Ipc(ipc::export(dev, b.ptr())?),
    };
    // Bound before the gather, which every peer joins before it sends its descriptor.
    let listener = if cumem && !remote.is_empty() {
        match crate::reg::uds::listen(&socket_name(key, seq, me)) {
            Ok(l) => Ok(l),
            Err(e) => Err(format!("rank {me}: no local socket ({e})")),
        }
    } else {
        Err(String::new())
    };
    let mine = Published { ptr: shared.ptr(), size: total, alloc: shared.alloc_bytes(), share };
    let mut blob = mine.encode();
    blob.push((listener.is_ok() || !cumem || remote.is_empty()) as u8);
    let all = bootstrap.all_gather(&blob)?;
    let mut published = Vec::with_capacity(all.len());
    for (r, b) in all.iter().enumerate() {
        let (body, ok) = b.split_at(b.len().saturating_sub(1));
        if ok != [1] {
            // Every rank sees the same refusal in the same gather: none goes on to send.
            let why = listener.as_ref().err().filter(|_| r == me).cloned().unwrap_or_else(|| format!("rank {r} has no local socket"));
            return Ok(Err(why));
        }
        published.push(Published::decode(body)?);
    }
    for (r, p) in published.iter().enumerate() {
        if p.size != total {
            return Err(Error::internal(format!("rank {r} sized its channel buffers {} bytes, this rank {total} (different OXCCL_* tuning?)", p.size)));
        }
    }
    // Local from here on; the ranks agree on the outcome at the end.
    let mapped = (|| -> std::result::Result<(Vec<PeerBuf>, [u64; OX_MAX_RANKS]), Error> {
        let mut fds = match &listener {
            Ok(l) => {
                let from: Vec<usize> = remote.iter().copied().filter(|&r| published[r].share == Share::Fd).collect();
                exchange_fds(l, key, seq, me, my_fd.as_ref(), remote, &from)?
            }
            Err(_) => Vec::new(),
        };
        let mut imports = Vec::new();
        let mut bases = [0u64; OX_MAX_RANKS];
        for (r, p) in published.iter().enumerate() {
            bases[r] = if r == me {
                shared.ptr()
            } else if peers[r].same_process(&peers[me]) {
                check_p2p(dev, peers[r].device)?;
                dev.enable_peer_access(Device::get(peers[r].device)?)?;
                p.ptr
            } else {
                if let Some(ordinal) = ordinal_by_bus_id(&peers[r].bus_id_str()) {
                    check_p2p(dev, ordinal)?;
                }
                match p.share {
                    Share::Ipc(h) => {
                        let imp = ImportedBuffer::open(dev, &h).map_err(|e| e.context(format!("mapping rank {r}'s buffers")))?;
                        let base = imp.ptr;
                        imports.push(PeerBuf::Ipc { _map: imp });
                        base
                    }
                    Share::Fd => {
                        let i = fds.iter().position(|(g, _)| *g == r).ok_or_else(|| Error::internal(format!("no descriptor from rank {r}")))?;
                        let (_, fd) = fds.swap_remove(i);
                        let map = PeerMapping::map(dev, &fd, p.alloc as usize).map_err(|e| e.context(format!("mapping rank {r}'s buffers")))?;
                        let base = map.ptr;
                        imports.push(PeerBuf::Fd { rank: r, map });
                        base
                    }
                    Share::Pointer => return Err(Error::internal(format!("rank {r} of another process shared no handle"))),
                }
            };
        }
        Ok((imports, bases))
    })();
    // A peer that cannot be reached (no GPU peer access) fails the init as before; anything else
    // is agreed, so a failure on one rank sends every rank to the next try.
    if let Err(e) = &mapped {
        if e.code == crate::error::ResultCode::InvalidUsage {
            return Err(mapped.err().unwrap_or_else(|| Error::internal("mapping")));
        }
    }
    let agreed = all_agree(bootstrap, mapped.as_ref().map(|_| ()).map_err(|e| e.msg.clone()))?;
    match (agreed, mapped) {
        (Ok(()), Ok((imports, bases))) => Ok(Ok((shared, imports, bases))),
        (Err(why), _) => Ok(Err(why)),
        (Ok(()), Err(e)) => Err(e),
    }
}

impl MemoryChannels {
    /// Collective over the communicator: every rank calls it with the same `scratch`.
    pub fn connect(
        bootstrap: &Bootstrap,
        dev: &'static Device,
        peers: &[PeerInfo],
        scratch: &Scratch,
        abort_flag: &HostMapped,
    ) -> Result<MemoryChannels> {
        let me = bootstrap.rank();
        let n = peers.len();
        if n > OX_MAX_RANKS {
            return Err(Error::invalid_usage(format!(
                "oxccl connects at most {OX_MAX_RANKS} ranks on one host with MemoryChannel; this communicator has {n}"
            )));
        }
        let layout = SharedLayout::new(scratch, n);
        let private = DeviceBuffer::zeroed(dev, PRIVATE_BYTES as usize)?;
        // LL flags start at 1: a zeroed scratch must never look like a packet of the first call.
        private.fill_u32(FLAGS_OFF as usize, 1, OX_MAX_BLOCKS * OX_MAX_RANKS)?;

        let remote: Vec<usize> = (0..n).filter(|&r| !peers[r].same_process(&peers[me])).collect();
        let key = bootstrap.instance_key();
        // cuMem memory, so that ncclCommSuspend can give it back and ncclCommResume map it again
        // where every DevComm and captured graph points. Its descriptor travels over a Unix socket,
        // which peers of another network namespace cannot reach: there, and with
        // NCCL_CUMEM_ENABLE=0, cuMemAlloc memory shared by CUDA IPC (kept while suspended). Where
        // the descriptors fail to travel or map for another reason (another user, a driver that
        // refuses the import), every rank tries again that way.
        let same_net = remote.iter().all(|&r| peers[r].network == peers[me].network);
        let cumem = crate::config::env_bool("NCCL_CUMEM_ENABLE", true) && same_net;
        if crate::config::env_bool("NCCL_CUMEM_ENABLE", true) && !same_net {
            nccl_info!(Subsys::Alloc, "channel buffers: a peer runs in another network namespace; sharing cuMemAlloc memory by CUDA IPC, which ncclCommSuspend cannot release");
        }
        let (shared, imports, bases, seq) = match share(bootstrap, dev, peers, &remote, key, 0, layout.total, cumem)? {
            Ok((shared, imports, bases)) => (shared, imports, bases, 0),
            Err(why) => {
                nccl_info!(Subsys::Alloc, "channel buffers: {why}; sharing cuMemAlloc memory by CUDA IPC instead, which ncclCommSuspend cannot release");
                match share(bootstrap, dev, peers, &remote, key, 1, layout.total, false)? {
                    Ok((shared, imports, bases)) => (shared, imports, bases, 1),
                    Err(why) => return Err(Error::system(format!("channel buffers: {why}"))),
                }
            }
        };

        let reg_table = Arc::new(crate::reg::Table::new(dev, n * OX_REG_SLOTS * std::mem::size_of::<RegEntry>())?);
        let mut dc = DevComm {
            rank: me as i32,
            nranks: n as i32,
            ll_half_bytes: scratch.ll_half_bytes,
            rs_slot_bytes: scratch.rs_slot_bytes,
            rs_max_blocks: scratch.rs_max_blocks,
            _pad0: 0,
            ll128_half_bytes: scratch.ll128_half_bytes,
            ll128_off: layout.ll128_off - layout.ll_off,
            ap128_half_bytes: scratch.ap128_half_bytes,
            ap128_off: layout.ap128_off - layout.ll_off,
            ll_scratch: [0; OX_MAX_RANKS],
            rs_scratch: [0; OX_MAX_RANKS],
            sem_inbound: [0; OX_MAX_RANKS],
            ll_ack: [0; OX_MAX_RANKS],
            ll_flags: private.ptr + FLAGS_OFF,
            sem_expected: private.ptr + EXPECTED_OFF,
            ll_pending: private.ptr + PENDING_OFF,
            abort_flag: abort_flag.dev_ptr,
            reg_table: reg_table.dev_ptr(),
            reg_offer_off: layout.offer_off - layout.ll_off,
            reg_accept_off: layout.accept_off - layout.ll_off,
        };
        for (r, base) in bases.iter().enumerate().take(n) {
            dc.ll_scratch[r] = base + layout.ll_off;
            dc.rs_scratch[r] = base + layout.rs_off;
            dc.sem_inbound[r] = base + layout.sem_off;
            dc.ll_ack[r] = base + layout.ack_off;
        }
        // SAFETY: DevComm is plain old data (repr(C), integers only).
        let bytes = unsafe {
            std::slice::from_raw_parts((&dc as *const DevComm).cast::<u8>(), std::mem::size_of::<DevComm>())
        };
        private.write(DEVCOMM_OFF as usize, bytes)?;
        Ok(MemoryChannels {
            ce_counters: bases.iter().take(n).map(|b| b + layout.ce_off).collect(),
            dev_comm: private.ptr + DEVCOMM_OFF,
            device_bytes: shared.alloc_bytes() + PRIVATE_BYTES,
            reg_table,
            key,
            me,
            remote,
            seq,
            _imports: imports,
            _private: private,
            _shared: shared,
        })
    }

    /// Device bytes ncclCommSuspend gives back (the shared buffer, where it is cuMem memory).
    pub fn suspendable_bytes(&self) -> u64 {
        match &self._shared {
            SharedBuf::Suspendable(b) => b.size as u64,
            SharedBuf::Fixed(_) => 0,
        }
    }

    /// Device bytes kept while suspended: the private buffer, the registration table, and the
    /// shared buffer where it is cuMemAlloc memory.
    pub fn persistent_bytes(&self) -> u64 {
        let fixed = match &self._shared {
            SharedBuf::Suspendable(_) => 0,
            SharedBuf::Fixed(b) => b.size as u64,
        };
        PRIVATE_BYTES + fixed + self.reg_table.device_bytes()
    }

    /// Gives back the shared buffer's memory: unmaps the peers' buffers mapped here, then saves
    /// this rank's contents to host memory and releases its memory. Every rank calls it together,
    /// once no kernel or copy of the communicator runs on any of them (ncclCommSuspend's barrier).
    pub fn suspend(&mut self) -> Result<()> {
        for imp in &mut self._imports {
            if let PeerBuf::Fd { map, .. } = imp {
                map.unmap()?;
            }
        }
        if let SharedBuf::Suspendable(b) = &mut self._shared {
            b.suspend()?;
        }
        Ok(())
    }

    /// Undoes `suspend` at the same addresses, first half: new memory for this rank's shared
    /// buffer, with its saved contents, and the socket the peers' new descriptors arrive on
    /// (None: no peer of another process). Every rank then passes a bootstrap barrier before
    /// `resume_peers`, so every socket exists before any descriptor travels.
    pub fn resume_local(&mut self) -> Result<Option<OwnedFd>> {
        // First: every rank counts every try alike, failed ones included, so a retry's socket
        // names match.
        self.seq += 1;
        if let SharedBuf::Suspendable(b) = &mut self._shared {
            b.resume()?;
        }
        if self.remote.is_empty() {
            return Ok(None);
        }
        let l = crate::reg::uds::listen(&socket_name(self.key, self.seq, self.me)).map_err(|e| Error::system(format!("channel buffers: local socket: {e}")))?;
        Ok(Some(l))
    }

    /// Second half: sends this rank's new descriptor to its peers of other processes and maps
    /// theirs where their buffers were mapped before.
    pub fn resume_peers(&mut self, listener: Option<OwnedFd>) -> Result<()> {
        let Some(listener) = listener else { return Ok(()) };
        let mine = match &self._shared {
            SharedBuf::Suspendable(b) => Some(b.export().ok_or_else(|| Error::cuda("channel buffers: cuMemExportToShareableHandle failed on resume"))?),
            SharedBuf::Fixed(_) => None,
        };
        let from: Vec<usize> = self._imports.iter().filter_map(|i| if let PeerBuf::Fd { rank, .. } = i { Some(*rank) } else { None }).collect();
        let fds = exchange_fds(&listener, self.key, self.seq, self.me, mine.as_ref(), &self.remote, &from)?;
        for imp in &mut self._imports {
            if let PeerBuf::Fd { rank, map } = imp {
                let fd = fds.iter().find(|(r, _)| r == rank).map(|(_, f)| f).ok_or_else(|| Error::internal(format!("no descriptor from rank {rank} on resume")))?;
                map.remap(fd).map_err(|e| e.context(format!("mapping rank {rank}'s buffers again")))?;
            }
        }
        Ok(())
    }
}

impl MemoryChannels {
    /// Its allocations, for the communicator's teardown: this rank's mappings of its peers'
    /// buffers, its private buffer (only its own kernels touch it) and its shared buffer (which
    /// the peers' kernels write: freed only once they released it, src/comm/reaper.rs).
    pub fn into_parts(self) -> (Box<dyn Send>, DeviceBuffer, Box<dyn Send>) {
        let shared: Box<dyn Send> = match self._shared {
            SharedBuf::Suspendable(b) => Box::new(b),
            SharedBuf::Fixed(b) => Box::new(b),
        };
        (Box::new(self._imports), self._private, shared)
    }

    /// Bytes of this rank's shared buffer (for teardown's log line).
    pub fn shared_bytes(&self) -> u64 {
        self._shared.alloc_bytes()
    }
}

fn check_p2p(dev: &Device, peer: i32) -> Result<()> {
    if can_access(dev.ordinal, peer)? {
        Ok(())
    } else {
        Err(Error::invalid_usage(format!(
            "GPU {} ({}) cannot access GPU {peer} directly (no NVLink or PCIe peer access); \
             oxccl's MemoryChannel needs peer access between all GPUs of a host",
            dev.ordinal, dev.bus_id
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_round_trips() {
        for share in [Share::Pointer, Share::Ipc([7; IPC_HANDLE_BYTES]), Share::Fd] {
            let p = Published { ptr: 0x7f00_0000_1000, size: 123 << 20, alloc: 124 << 20, share };
            let q = Published::decode(&p.encode()).expect("decodes");
            assert_eq!((q.ptr, q.size, q.alloc, q.share), (p.ptr, p.size, p.alloc, p.share));
        }
        assert!(Published::decode(&[0; 3]).is_err());
        let mut bad = Published { ptr: 1, size: 2, alloc: 3, share: Share::Fd }.encode();
        bad[24] = 9;
        assert!(Published::decode(&bad).is_err(), "an unknown share kind is refused");
    }

    #[test]
    fn layout_regions_do_not_overlap() {
        let t = crate::algo::Tuning::default();
        for n in [1, 2, 3, 8, 32] {
            let s = Scratch::for_ranks(n, &t);
            let l = SharedLayout::new(&s, n);
            assert!(l.ll_off + s.ll_bytes() + Scratch::ring_bytes(n) <= l.ap128_off);
            assert!(l.ap128_off + s.ap128_bytes() <= l.ll128_off);
            assert_eq!(l.ap128_off % 128, 0);
            assert!(l.ll128_off + s.ll128_bytes() <= l.rs_off);
            assert_eq!(l.ll128_off % 128, 0);
            assert!(l.rs_off + s.rs_bytes(n) <= l.sem_off);
            assert!(l.sem_off + SEM_BYTES <= l.ack_off);
            assert!(l.ack_off + FLAG_TABLE_BYTES <= l.offer_off);
            assert!(l.offer_off + OFFER_BYTES <= l.accept_off);
            assert!(l.accept_off + FLAG_TABLE_BYTES <= l.ce_off);
            assert!(l.ce_off + CE_COUNTER_BYTES <= l.total && l.ce_off.is_multiple_of(8));
            assert_eq!(l.offer_off % 32, 0);
            assert_eq!(l.rs_off % 16, 0);
        }
        const { assert!(FLAGS_OFF >= DEVCOMM_OFF + std::mem::size_of::<DevComm>() as u64 && FLAGS_OFF.is_multiple_of(128)) };
        const { assert!(PENDING_OFF >= FLAGS_OFF + FLAG_TABLE_BYTES) };
        const { assert!(EXPECTED_OFF >= PENDING_OFF + FLAG_TABLE_BYTES && EXPECTED_OFF.is_multiple_of(8)) };
        use crate::device_abi::{OX_PRIV_DONE_OFF, OX_PRIV_RING_BASE_OFF};
        // The done counter has a line of its own after the chain word's, before the expected counts.
        const { assert!(DEVCOMM_OFF + OX_PRIV_DONE_OFF >= RING_CHAIN_OFF + 128 && DEVCOMM_OFF + OX_PRIV_DONE_OFF + 128 <= RING_OUT_OFF) };
        const { assert!(RING_OUT_OFF >= RING_CHAIN_OFF + 256 && RING_OUT_OFF.is_multiple_of(128)) };
        const { assert!(OX_PRIV_RING_BASE_OFF >= OX_PRIV_PENDING_OFF + FLAG_TABLE_BYTES && RING_CHAIN_OFF >= DEVCOMM_OFF + OX_PRIV_RING_BASE_OFF + FLAG_TABLE_BYTES) };
    }
}
