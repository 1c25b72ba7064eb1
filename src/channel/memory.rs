//! MemoryChannel set-up: buffers, their exchange between ranks, and the `DevComm` built from them.

use crate::algo::Scratch;
use crate::bootstrap::Bootstrap;
use std::sync::Arc;

use crate::device_abi::{DevComm, RegEntry, RegOffer, OX_MAX_BLOCKS, OX_MAX_RANKS, OX_PRIV_FLAGS_OFF, OX_PRIV_PENDING_OFF, OX_PRIV_RING_CHAIN_OFF, OX_PRIV_RING_OUT_OFF, OX_REG_SLOTS};
use crate::error::{Error, Result};
use crate::gpu::ipc::{self, ImportedBuffer, IPC_HANDLE_BYTES};
use crate::gpu::context::{can_access, ordinal_by_bus_id};
use crate::gpu::{Device, DeviceBuffer, HostMapped};
use crate::bootstrap::topo::PeerInfo;

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

/// What a rank publishes about its shared buffer.
struct Published {
    ptr: u64,
    size: u64,
    ipc: Option<[u8; IPC_HANDLE_BYTES]>,
}

impl Published {
    const BYTES: usize = 8 + 8 + 1 + IPC_HANDLE_BYTES;

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::BYTES);
        v.extend_from_slice(&self.ptr.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.push(self.ipc.is_some() as u8);
        v.extend_from_slice(&self.ipc.unwrap_or([0; IPC_HANDLE_BYTES]));
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
        h.copy_from_slice(&b[17..17 + IPC_HANDLE_BYTES]);
        Ok(Published { ptr: word(0), size: word(8), ipc: (b[16] != 0).then_some(h) })
    }
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
    // Drop order matters: unmap peers' memory before freeing ours.
    _imports: Vec<ImportedBuffer>,
    _private: DeviceBuffer,
    _shared: DeviceBuffer,
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
        let shared = DeviceBuffer::zeroed(dev, layout.total as usize)?;
        let private = DeviceBuffer::zeroed(dev, PRIVATE_BYTES as usize)?;
        // LL flags start at 1: a zeroed scratch must never look like a packet of the first call.
        private.fill_u32(FLAGS_OFF as usize, 1, OX_MAX_BLOCKS * OX_MAX_RANKS)?;

        let needs_ipc = peers.iter().any(|p| !p.same_process(&peers[me]));
        let ipc_handle = if needs_ipc { Some(ipc::export(dev, shared.ptr)?) } else { None };
        let mine = Published { ptr: shared.ptr, size: layout.total, ipc: ipc_handle };
        let all = bootstrap.all_gather(&mine.encode())?;

        let mut imports = Vec::new();
        let mut bases = [0u64; OX_MAX_RANKS];
        for (r, blob) in all.iter().enumerate() {
            let p = Published::decode(blob)?;
            if p.size != layout.total {
                return Err(Error::internal(format!(
                    "rank {r} sized its channel buffers {} bytes, this rank {} (different OXCCL_* tuning?)",
                    p.size, layout.total
                )));
            }
            bases[r] = if r == me {
                shared.ptr
            } else if peers[r].same_process(&peers[me]) {
                check_p2p(dev, peers[r].device)?;
                dev.enable_peer_access(Device::get(peers[r].device)?)?;
                p.ptr
            } else {
                if let Some(ordinal) = ordinal_by_bus_id(&peers[r].bus_id_str()) {
                    check_p2p(dev, ordinal)?;
                }
                let h = p.ipc.ok_or_else(|| Error::internal(format!("rank {r} published no IPC handle")))?;
                let imp = ImportedBuffer::open(dev, &h).map_err(|e| e.context(format!("mapping rank {r}'s buffers")))?;
                let base = imp.ptr;
                imports.push(imp);
                base
            };
        }

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
            device_bytes: layout.total + PRIVATE_BYTES,
            reg_table,
            _imports: imports,
            _private: private,
            _shared: shared,
        })
    }
}

impl MemoryChannels {
    /// Its allocations, for the communicator's teardown: this rank's mappings of its peers'
    /// buffers, its private buffer (only its own kernels touch it) and its shared buffer (which
    /// the peers' kernels write: freed only once they released it, src/comm/reaper.rs).
    pub fn into_parts(self) -> (Vec<ImportedBuffer>, DeviceBuffer, DeviceBuffer) {
        (self._imports, self._private, self._shared)
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
        let p = Published { ptr: 0x7f00_0000_1000, size: 123 << 20, ipc: Some([7; IPC_HANDLE_BYTES]) };
        let q = Published::decode(&p.encode()).expect("decodes");
        assert_eq!((q.ptr, q.size, q.ipc), (p.ptr, p.size, p.ipc));
        let none = Published { ptr: 1, size: 2, ipc: None };
        assert!(Published::decode(&none.encode()).expect("decodes").ipc.is_none());
        assert!(Published::decode(&[0; 3]).is_err());
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
