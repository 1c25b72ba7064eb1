//! Planning of the exchange kernel (kernels/exchange.cu): transfer lists → `ExchangeArgs`.
//!
//! Everything here is decided per pair of ranks from that pair's own byte counts, which both ranks
//! of the pair know (a send's count equals the matching receive's), so both sides choose the same
//! mode, offsets, chunk and rounds even when the rest of their transfer lists differ.

use super::envlists::Func;
use super::{Scratch, Topology, Tuning};
use crate::device_abi::{
    ExchangeArgs, Xfer, OX_MAX_COPIES, OX_MAX_RANKS, OX_MAX_XFERS, OX_MODE_LL, OX_MODE_LL_ACK, OX_MODE_NONE,
    OX_MODE_PUT,
};
use crate::error::{Error, Result};

/// One transfer with a peer: local address (source of a send, destination of a receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub peer: usize,
    pub ptr: u64,
    pub bytes: u64,
}

/// A copy within this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalCopy {
    pub src: u64,
    pub dst: u64,
    pub bytes: u64,
}

/// What one rank moves in one exchange launch, sends and receives in posting order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExchangeSpec {
    pub sends: Vec<Transfer>,
    pub recvs: Vec<Transfer>,
    pub copies: Vec<LocalCopy>,
}

/// The launch: arguments (without the communicator pointer) and shape.
#[derive(Clone, Debug)]
pub struct ExchangePlan {
    pub args: ExchangeArgs,
    pub grid: u32,
    pub block: u32,
}

/// Largest stream one pair moves as packets (either direction), unless tuned.
const DEFAULT_LL_MAX_BYTES: u64 = 64 << 10;

/// The exchange kernel's launch shape: the same on every rank of a communicator (pairs that
/// move data in rounds pair block b with block b), one block per SM at most.
pub fn exchange_shape(topo: &Topology, scratch: &Scratch) -> (u32, u32) {
    (scratch.rs_max_blocks.min(topo.sm_count.max(1)).max(1), 1024)
}

fn pkts(bytes: u64) -> u64 {
    bytes.div_ceil(8)
}

fn align16(x: u64) -> u64 {
    x.div_ceil(16) * 16
}

/// `func`: the collective this exchange implements, if NCCL_PROTO can name it (AllGather,
/// Broadcast); point-to-point and AlltoAll/Gather/Scatter are not subject to it, as in NCCL.
pub fn plan_exchange(
    me: usize,
    spec: &ExchangeSpec,
    func: Option<Func>,
    topo: &Topology,
    scratch: &Scratch,
    t: &Tuning,
) -> Result<ExchangePlan> {
    let n = topo.nranks;
    if spec.sends.len() > OX_MAX_XFERS || spec.recvs.len() > OX_MAX_XFERS {
        return Err(Error::invalid_usage(format!(
            "one group posts {} sends and {} receives on one communicator; oxccl handles at most {OX_MAX_XFERS} of each per group",
            spec.sends.len(),
            spec.recvs.len()
        )));
    }
    if spec.copies.len() > OX_MAX_COPIES {
        return Err(Error::invalid_usage(format!(
            "one group posts {} sends to self on one communicator; oxccl handles at most {OX_MAX_COPIES} per group",
            spec.copies.len()
        )));
    }
    for x in spec.sends.iter().chain(spec.recvs.iter()) {
        if x.peer >= n || x.peer == me {
            return Err(Error::internal(format!("exchange transfer with peer {} (rank {me} of {n})", x.peer)));
        }
    }
    let (grid, block) = exchange_shape(topo, scratch);
    let ll_slot = (scratch.ll_half_bytes / n.max(1) as u64) & !15;
    let ll_max = t.exchange_ll_max_bytes.unwrap_or(DEFAULT_LL_MAX_BYTES);
    let (packets_ok, puts_ok) = func.map_or((true, true), |f| (t.allowed.packets[f as usize], t.allowed.puts[f as usize]));
    let mut a = ExchangeArgs::default();

    // Per-pair totals decide the mode.
    let mut send_bytes = [0u64; OX_MAX_RANKS];
    let mut recv_bytes = [0u64; OX_MAX_RANKS];
    let mut send_pkts = [0u64; OX_MAX_RANKS];
    let mut recv_pkts = [0u64; OX_MAX_RANKS];
    let mut send_aligned = [0u64; OX_MAX_RANKS];
    let mut recv_aligned = [0u64; OX_MAX_RANKS];
    for x in &spec.sends {
        send_bytes[x.peer] += x.bytes;
        send_pkts[x.peer] += pkts(x.bytes);
        send_aligned[x.peer] += align16(x.bytes);
    }
    for x in &spec.recvs {
        recv_bytes[x.peer] += x.bytes;
        recv_pkts[x.peer] += pkts(x.bytes);
        recv_aligned[x.peer] += align16(x.bytes);
    }
    for p in 0..n {
        let (s, r) = (send_bytes[p], recv_bytes[p]);
        a.mode[p] = if s == 0 && r == 0 {
            OX_MODE_NONE
        } else if packets_ok && (!puts_ok || s.max(r) <= ll_max) && send_pkts[p].max(recv_pkts[p]) * 16 <= ll_slot {
            // Both directions carry data: each side's receive waits for the other's packets,
            // so neither can run two launches ahead; otherwise acknowledge.
            if s > 0 && r > 0 {
                OX_MODE_LL
            } else {
                OX_MODE_LL_ACK
            }
        } else {
            let stream = send_aligned[p].max(recv_aligned[p]);
            let nb = grid as u64;
            let chunk = align16(stream.div_ceil(nb)).clamp(4096, scratch.rs_slot_bytes & !15);
            a.chunk[p] = chunk as u32;
            a.rounds[p] = stream.div_ceil(nb * chunk) as u32;
            OX_MODE_PUT
        };
    }

    // Stream positions, in posting order per peer and direction.
    let mut pos = [0u64; OX_MAX_RANKS];
    for (i, x) in spec.sends.iter().enumerate() {
        let put = a.mode[x.peer] == OX_MODE_PUT;
        a.sends[i] = Xfer { src: x.ptr, dst: 0, bytes: x.bytes, off: pos[x.peer], peer: x.peer as i32, _pad0: 0 };
        pos[x.peer] += if put { align16(x.bytes) } else { pkts(x.bytes) };
    }
    let mut pos = [0u64; OX_MAX_RANKS];
    for (i, x) in spec.recvs.iter().enumerate() {
        let put = a.mode[x.peer] == OX_MODE_PUT;
        a.recvs[i] = Xfer { src: 0, dst: x.ptr, bytes: x.bytes, off: pos[x.peer], peer: x.peer as i32, _pad0: 0 };
        pos[x.peer] += if put { align16(x.bytes) } else { pkts(x.bytes) };
    }
    for (i, c) in spec.copies.iter().enumerate() {
        a.copies[i] = Xfer { src: c.src, dst: c.dst, bytes: c.bytes, off: 0, peer: me as i32, _pad0: 0 };
    }
    a.nsend = spec.sends.len() as u32;
    a.nrecv = spec.recvs.len() as u32;
    a.ncopy = spec.copies.len() as u32;
    Ok(ExchangePlan { args: a, grid, block })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(n: usize) -> (Topology, Scratch, Tuning) {
        let t = Tuning::default();
        (Topology { nranks: n, sm_count: 132 }, Scratch::for_ranks(n, &t), t)
    }

    /// The two sides of every pair must derive identical mode, chunk, rounds and offsets.
    fn assert_pair_agrees(a: &ExchangePlan, me: usize, b: &ExchangePlan, peer: usize) {
        assert_eq!(a.args.mode[peer], b.args.mode[me], "mode");
        assert_eq!(a.args.chunk[peer], b.args.chunk[me], "chunk");
        assert_eq!(a.args.rounds[peer], b.args.rounds[me], "rounds");
        assert_eq!((a.grid, a.block), (b.grid, b.block), "launch shape");
        let sends: Vec<_> = a.args.sends[..a.args.nsend as usize].iter().filter(|x| x.peer as usize == peer).collect();
        let recvs: Vec<_> = b.args.recvs[..b.args.nrecv as usize].iter().filter(|x| x.peer as usize == me).collect();
        assert_eq!(sends.len(), recvs.len());
        for (s, r) in sends.iter().zip(recvs) {
            assert_eq!((s.off, s.bytes), (r.off, r.bytes), "offsets");
        }
    }

    #[test]
    fn asymmetric_point_to_point_pairs_agree() {
        // Rank 0 sends 1 GiB to 1; rank 1 sends 100 bytes to 2; rank 2 only receives.
        let (topo, s, t) = setup(3);
        let big = 1u64 << 30;
        let r0 = ExchangeSpec { sends: vec![Transfer { peer: 1, ptr: 0x1000, bytes: big }], ..Default::default() };
        let r1 = ExchangeSpec {
            sends: vec![Transfer { peer: 2, ptr: 0x2000, bytes: 100 }],
            recvs: vec![Transfer { peer: 0, ptr: 0x3000, bytes: big }],
            ..Default::default()
        };
        let r2 = ExchangeSpec { recvs: vec![Transfer { peer: 1, ptr: 0x4000, bytes: 100 }], ..Default::default() };
        let p0 = plan_exchange(0, &r0, None, &topo, &s, &t).unwrap();
        let p1 = plan_exchange(1, &r1, None, &topo, &s, &t).unwrap();
        let p2 = plan_exchange(2, &r2, None, &topo, &s, &t).unwrap();
        assert_pair_agrees(&p0, 0, &p1, 1);
        assert_pair_agrees(&p1, 1, &p2, 2);
        assert_eq!(p0.args.mode[1], OX_MODE_PUT);
        assert_eq!(p1.args.mode[2], OX_MODE_LL_ACK, "one-way packets acknowledge");
        assert_eq!(p0.args.mode[2], OX_MODE_NONE);
        assert!(p0.args.rounds[1] >= 1);
        let cap = p0.grid as u64 * p0.args.chunk[1] as u64 * p0.args.rounds[1] as u64;
        assert!(cap >= big, "rounds x blocks x chunk covers the stream");
    }

    #[test]
    fn several_sends_to_one_peer_are_concatenated_in_posting_order() {
        let (topo, s, t) = setup(2);
        let a = ExchangeSpec {
            sends: vec![
                Transfer { peer: 1, ptr: 0x10, bytes: 3 },
                Transfer { peer: 1, ptr: 0x20, bytes: 0 },
                Transfer { peer: 1, ptr: 0x30, bytes: 20 },
            ],
            recvs: vec![Transfer { peer: 1, ptr: 0x40, bytes: 5 }],
            ..Default::default()
        };
        let b = ExchangeSpec {
            sends: vec![Transfer { peer: 0, ptr: 0x50, bytes: 5 }],
            recvs: vec![
                Transfer { peer: 0, ptr: 0x60, bytes: 3 },
                Transfer { peer: 0, ptr: 0x70, bytes: 0 },
                Transfer { peer: 0, ptr: 0x80, bytes: 20 },
            ],
            ..Default::default()
        };
        let pa = plan_exchange(0, &a, None, &topo, &s, &t).unwrap();
        let pb = plan_exchange(1, &b, None, &topo, &s, &t).unwrap();
        assert_pair_agrees(&pa, 0, &pb, 1);
        assert_pair_agrees(&pb, 1, &pa, 0);
        assert_eq!(pa.args.mode[1], OX_MODE_LL, "both directions carry data");
        // Packets: 3 bytes take one packet, 0 bytes none, 20 bytes start at packet 1.
        assert_eq!([pa.args.sends[0].off, pa.args.sends[1].off, pa.args.sends[2].off], [0, 1, 1]);
    }

    #[test]
    fn put_offsets_are_sixteen_byte_aligned_and_chunks_fit_slots() {
        let (topo, s, t) = setup(4);
        let spec = ExchangeSpec {
            sends: vec![Transfer { peer: 3, ptr: 0, bytes: (1 << 20) + 3 }, Transfer { peer: 3, ptr: 0, bytes: 5 << 20 }],
            ..Default::default()
        };
        let p = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap();
        assert_eq!(p.args.mode[3], OX_MODE_PUT);
        assert_eq!(p.args.sends[1].off % 16, 0);
        assert!(p.args.chunk[3] as u64 <= s.rs_slot_bytes && p.args.chunk[3] % 16 == 0);
    }

    #[test]
    fn too_many_transfers_is_invalid_usage() {
        let (topo, s, t) = setup(2);
        let spec = ExchangeSpec { sends: vec![Transfer { peer: 1, ptr: 0, bytes: 8 }; OX_MAX_XFERS + 1], ..Default::default() };
        let e = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::InvalidUsage);
    }
}
