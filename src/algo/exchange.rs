//! Planning of the exchange kernel (kernels/colls/exchange.cu): transfer lists → `ExchangeArgs`.
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
    /// The other rank.
    pub peer: usize,
    /// This rank's buffer: read for a send, written for a receive.
    pub ptr: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// A send: forwards what this peer sends this rank in the same exchange, one round later
    /// (the receive from it must be the pair's only one, at stream position 0, and so must this
    /// send). A receive: marks a forwarded stream (the value is the original sender).
    pub relay: Option<usize>,
}

/// A copy within this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalCopy {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Length in bytes.
    pub bytes: u64,
}

/// What one rank moves in one exchange launch, sends and receives in posting order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExchangeSpec {
    /// Sends, in posting order.
    pub sends: Vec<Transfer>,
    /// Receives, in posting order.
    pub recvs: Vec<Transfer>,
    /// Copies within this rank.
    pub copies: Vec<LocalCopy>,
    /// Put rounds' chunk (bytes per block per round), the same for every pair: required when
    /// there are relays (so pieces line up between a stream and its forwarding) and then every
    /// pair moves by puts. Every rank must pass the same value.
    pub put_chunk: Option<u64>,
    /// Blocks of this launch, if fewer than the exchange shape's (`rooted_grid`). Every rank must
    /// pass the same value: pairs match block b with block b.
    pub grid: Option<u32>,
    /// Largest put chunk (bytes per block per round) of pairs whose chunk is not fixed
    /// (`gather_chunk_cap`); at least 4 KiB. Both sides of a pair must pass the same value.
    pub chunk_cap: Option<u64>,
    /// Threads per block of a launch that puts, if not the default (`allgather_shape`); a rank's
    /// own choice (its peers need not agree), below OXCCL_EXCHANGE_THREADS.
    pub threads: Option<u32>,
    /// The operation the transfers serve, for the copy-engine direct path's thresholds
    /// (algo::ce_direct::min_bytes_for). The same on every rank.
    pub traffic: super::ce_direct::Traffic,
}

/// The launch: arguments (without the communicator pointer) and shape.
#[derive(Clone, Debug)]
pub struct ExchangePlan {
    /// The kernel's arguments (kernels/colls/exchange.cu).
    pub args: ExchangeArgs,
    /// Thread blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
}

/// Largest stream one pair moves as packets (either direction), unless tuned: packets cost twice
/// the bytes but no round trip, and win up to about 1.5 MiB of a rank's traffic (H200, AllGather,
/// AlltoAll and Broadcast swept at 2 and 4 ranks, BENCHMARKS.md). At 2 ranks a 2 MiB stream's
/// single put round took 30.4-31.1 us in every binary it serves (AllGather, AlltoAll, Gather,
/// Scatter at 4 MB, Send/Recv at 2 MB), as packets 18.6-21.4 (2 x H200, BENCHMARKS.md of
/// 2026-11-28, 2bbec39), so packets go to 2 MiB there; 4 MiB streams take the copy engines or puts
/// as before.
fn default_ll_max_bytes(nranks: usize) -> u64 {
    if nranks <= 2 {
        2 << 20
    } else {
        512 << 10
    }
}

/// Largest AllGather / AlltoAll piece (bytes per pair of ranks) the one-shot gather kernel takes
/// by default (the scratch's capacity bounds it further). On H200 x4 and x2 it beat the exchange
/// kernel at every piece measured, 16 B-256 KiB, eager and under graphs (AllGather np4 at 256 KiB
/// pieces: 10.4 us against 14.0; np2 at 256 KiB: 5.2 against 8.5; BENCHMARKS.md of 2026-11-22,
/// 7750d95). Above 4 ranks it has not run yet (no 8-GPU machine since it was written): the exchange
/// kernel keeps those until it is measured there.
fn default_gather_oneshot_max(nranks: u64) -> u64 {
    if nranks <= 4 {
        256 << 10
    } else {
        0
    }
}

/// AllGather (`allgather`) or AlltoAll of `piece` bytes per pair of ranks on one host: the one-shot
/// gather kernel's launch shape when it takes the call (the same on every rank: it depends only on
/// values every rank shares), else None and the exchange kernel moves it. The kernel moves the
/// one-shot AllReduce's packets, so it shares that kernel's capacity and launch shape.
pub fn select_gather_oneshot(piece: u64, allgather: bool, topo: &Topology, scratch: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    let n = topo.nranks as u64;
    if n < 2 || piece == 0 || (allgather && !t.allowed.packets[Func::AllGather as usize]) {
        return None;
    }
    let max = t.gather_oneshot_max_bytes.unwrap_or_else(|| default_gather_oneshot_max(n)).min(super::allreduce::oneshot_capacity(scratch, n));
    (piece <= max).then(|| super::allreduce::ll_shape(piece.div_ceil(8), topo.sm_count, t))
}

/// Largest transfer the one-shot point-to-point kernel takes by default: the gather kernel's limit
/// (it still won at 128 KB, the largest size measured; none above 4 ranks until measured there).
fn default_p2p_oneshot_max(nranks: usize) -> u64 {
    default_gather_oneshot_max(nranks as u64)
}

/// Largest transfer the one-shot point-to-point kernel moves (OXCCL_P2P_ONESHOT_MAX_BYTES, at most
/// what the exchange kernel sends as packets): a lone send or receive up to it is one hop of
/// packets.
pub fn p2p_oneshot_max(nranks: usize, t: &Tuning) -> u64 {
    let ll_max = t.exchange_ll_max_bytes.unwrap_or_else(|| default_ll_max_bytes(nranks));
    t.p2p_oneshot_max_bytes.unwrap_or_else(|| default_p2p_oneshot_max(nranks)).min(ll_max)
}

/// A group's point-to-point transfers (`spec`, as `enqueue::p2p` builds it) that the one-shot
/// point-to-point kernel (kernels/colls/p2p_oneshot.cu) moves: at most one send and one receive, each
/// non-empty and with another rank, no send to self; its launch shape, else None (the exchange
/// kernel). Each pair must be one `plan_exchange` would move as packets too, whatever else the
/// peer's group holds: the peer may run the exchange kernel for its side, and the two kernels'
/// packets agree only there. That decision depends on the pair's own byte counts, which both
/// sides see alike.
pub fn select_p2p_oneshot(spec: &ExchangeSpec, topo: &Topology, scratch: &Scratch, t: &Tuning) -> Option<(u32, u32)> {
    let n = topo.nranks;
    if n < 2 || !spec.copies.is_empty() || spec.sends.len() > 1 || spec.recvs.len() > 1 || spec.put_chunk.is_some() {
        return None;
    }
    let all = || spec.sends.iter().chain(&spec.recvs);
    if all().next().is_none() || all().any(|x| x.bytes == 0 || x.relay.is_some() || x.peer >= n) {
        return None;
    }
    // plan_exchange's packet condition for a pair without a fixed chunk (packets and puts allowed:
    // NCCL_PROTO does not apply to point-to-point).
    let ll_slot = (scratch.ll_half_bytes / n as u64) & !15;
    let max = p2p_oneshot_max(n, t);
    if all().any(|x| x.bytes > max || pkts(x.bytes) * 16 > ll_slot) {
        return None;
    }
    let most = all().map(|x| pkts(x.bytes)).max().unwrap_or(1);
    Some(super::allreduce::ll_shape(most, topo.sm_count, t))
}

/// The exchange kernel's launch shape: the same on every rank of a communicator (pairs that
/// move data in rounds pair block b with block b), one block per SM at most. Packet-only
/// launches use it too: sizing their grid to the work measured slower at 8 B-64 KiB on H200 x4
/// (geometric mean time ratio to NCCL 1.45 with 1 block, 0.86 with 16, 0.83 with this grid), as
/// each thread then serialises more packets and more peers.
pub fn exchange_shape(topo: &Topology, scratch: &Scratch) -> (u32, u32) {
    (scratch.rs_max_blocks.min(topo.sm_count.max(1)).max(1), 1024)
}

/// Put launches at 2 ranks whose largest stream is at most this use SMALL_BLOCK_THREADS threads a
/// block. With puts alone (packets and copy engines off), every 256 threads more cost about 3.5 us
/// at every size from 1 to 16 MB (2 x H200, us, 256 / 1024 threads / NCCL: Send/Recv 4 MB 27.15 /
/// 37.37 / 32.50, 16 MB 66.80 / 74.66 / 80.75; AlltoAll 16 MB 41.80 / 49.89 / 55.25; Gather 8 MB
/// 26.28 / 37.02 / 20.66; BENCHMARKS.md of 2026-11-28, 2bbec39). Larger streams and more ranks keep
/// 1024 (not measured there).
const SMALL_BLOCK_PUT_MAX_BYTES: u64 = 16 << 20;
const SMALL_BLOCK_THREADS: u32 = 256;

/// The exchange kernel's block size: only the grid pairs blocks between ranks, so the block size
/// may be tuned (OXCCL_EXCHANGE_THREADS) without the peers agreeing. Packet-only launches use
/// 256 threads: on H200 x4 at 8 B-32 KiB that took 5.2-5.6 us where 1024 took 5.7-6.8 (Broadcast;
/// AlltoAll 6.3-6.9 against 7.0-8.0), as a block's packet reads then wait on fewer stragglers.
fn exchange_threads(t: &Tuning, packet_only: bool, wanted: Option<u32>) -> u32 {
    t.exchange_threads.unwrap_or(match wanted {
        _ if packet_only => 256,
        Some(b) => b,
        None => 1024,
    })
}

/// Blocks of a Scatter's launch (each non-root rank's stream is `per_rank_bytes` long), or None
/// for the exchange shape's. Where the shape's grid would move the streams in exactly two put
/// rounds, half the blocks move them in four: with two rounds the first round's puts and the last
/// round's copy-out are each half the message and overlap nothing. H200 x4, us, default grid /
/// half / NCCL 2.28.9: Scatter 342.3 / 298.4 / 284.4 at 128 MiB; at 256 MiB (four rounds
/// already) half the grid loses (579.1 against 558.2). Gather gains nothing from it (300.8 /
/// 299.9 / 269.7 at 128 MiB) and takes smaller chunks instead (`gather_chunk_cap`).
pub fn rooted_grid(per_rank_bytes: u64, topo: &Topology, scratch: &Scratch) -> Option<u32> {
    let (grid, _) = exchange_shape(topo, scratch);
    let nb = grid as u64;
    let stream = align16(per_rank_bytes);
    let chunk = put_chunk(stream, nb, scratch);
    (grid >= 2 && stream.div_ceil(nb * chunk) == 2).then_some(grid / 2)
}

/// The put chunk of a pair whose chunk is not fixed: its `stream` bytes over `nb` blocks in one
/// round where a scratch slot holds that, else in slot-sized rounds; at least 4 KiB.
fn put_chunk(stream: u64, nb: u64, scratch: &Scratch) -> u64 {
    align16(stream.div_ceil(nb)).clamp(4096, scratch.rs_slot_bytes & !15)
}

/// Largest put chunk of a Gather: half a scratch slot, so the root's copy-out of one round
/// overlaps more of the next round's puts (H200 x4, us, whole slot / half / NCCL 2.28.9: 168.8 /
/// 155.1 / 138.0 at 64 MiB, 300.8 / 288.5 / 269.7 at 128 MiB, 571.2 / 561.9 / 537.2 at 256 MiB).
/// Below `grid` x half a slot per rank the chunk is smaller anyway.
pub fn gather_chunk_cap(scratch: &Scratch) -> u64 {
    ((scratch.rs_slot_bytes / 2) & !15).max(4096)
}

/// Smallest piece (bytes per rank) of an AllGather that `allgather_shape` changes at 4 ranks:
/// measured from there (128 MB at 4 ranks) only.
const ALLGATHER_SMALL_CHUNK_MIN_PIECE: u64 = 32 << 20;
const ALLGATHER_LARGE_THREADS: u32 = 896;

/// An AllGather's put chunk cap and block size at 4 ranks from 32 MiB a rank: chunks of at most
/// half a slot (more rounds, so one round's copy-out overlaps more of the next round's puts, as
/// for Gather) and blocks of 896 threads. Other rank counts are unmeasured and keep the defaults
/// (at 8 ranks a half slot is 32 KiB, and 32 KiB chunks lost at 4). Busbw GB/s at 128 / 256 / 512 MB, 4 ranks:
/// - H200 x4 (BENCHMARKS.md of 2026-11-26, 4c5fee8): 303.6 / 322.4 / 330.4 before; 313.7 / 325.4 /
///   331.3 with half-slot chunks and 512 threads; NCCL 2.28.9 291.8 / 305.6 / 316.4.
/// - H100 x4 (the same entry; repeated 3-4 times, within 1%): half-slot chunks with 512 threads
///   314 / 327 / 332; with 896 threads 315-316 / 333 / 338-339; 640, 768, 832, 960 and 1024
///   threads all in between or below; NCCL 288 / 305.5 / 318.
///
/// The cap is a function of the size and the rank count, so every rank passes the same one.
pub fn allgather_shape(piece_bytes: u64, topo: &Topology, scratch: &Scratch) -> (Option<u64>, Option<u32>) {
    if topo.nranks == 4 && piece_bytes >= ALLGATHER_SMALL_CHUNK_MIN_PIECE {
        (Some(gather_chunk_cap(scratch)), Some(ALLGATHER_LARGE_THREADS))
    } else {
        (None, None)
    }
}

/// Smallest Broadcast relayed (3+ ranks), unless tuned. Below it the root's three-fold sending
/// costs less than the relay's extra rounds (H200 x4, BENCHMARKS.md).
const DEFAULT_RELAY_MIN_BYTES: u64 = 4 << 20;
/// Put rounds of a relayed Broadcast: the forwarding lags one round, so more rounds waste less of
/// the root's link, while each round costs a semaphore sync (several microseconds when pieces
/// are small). One round per RELAY_BYTES_PER_BLOCK_ROUND of piece per block, within 2..=12
/// (measured: 4 rounds best at 64 MiB, 8-12 at 128 MiB, 2 at 16 MiB).
const RELAY_BYTES_PER_BLOCK_ROUND: u64 = 40 << 10;
const RELAY_MAX_ROUNDS: u64 = 12;

/// Put rounds of a relay (Broadcast, Reduce) whose pieces are `piece_bytes` long.
pub fn relay_rounds(piece_bytes: u64, grid: u32, t: &Tuning) -> u64 {
    t.relay_rounds.map_or_else(|| (piece_bytes / (grid as u64 * RELAY_BYTES_PER_BLOCK_ROUND)).clamp(2, RELAY_MAX_ROUNDS), u64::from)
}

/// Broadcast by relay: the root sends one piece of the message to each other rank, which forward
/// their pieces to each other one put round later, so the root sends the message once instead of
/// once per rank. Returns the piece length (a multiple of 16) and the fixed put chunk, or None
/// for a direct broadcast. The same on every rank.
pub fn broadcast_relay(bytes: u64, topo: &Topology, scratch: &Scratch, t: &Tuning) -> Option<(u64, u64)> {
    let n = topo.nranks as u64;
    let min = t.relay_min_bytes.unwrap_or(DEFAULT_RELAY_MIN_BYTES);
    if n < 3 || min == 0 || bytes < min || !t.allowed.puts[Func::Broadcast as usize] {
        return None;
    }
    let piece = align16(bytes.div_ceil(n - 1));
    let (grid, _) = exchange_shape(topo, scratch);
    let rounds = relay_rounds(piece, grid, t);
    let chunk = align16(piece.div_ceil(grid as u64 * rounds)).clamp(1024, scratch.rs_slot_bytes & !15);
    Some((piece, chunk))
}

/// A Broadcast's transfers as rank `me` sees them; `relay` from `broadcast_relay`.
pub fn broadcast_spec(me: usize, root: usize, n: usize, send: u64, recv: u64, bytes: u64, relay: Option<(u64, u64)>) -> ExchangeSpec {
    let mut s = ExchangeSpec::default();
    let x = |peer: usize, ptr: u64, bytes: u64, relay: Option<usize>| Transfer { peer, ptr, bytes, relay };
    let holders: Vec<usize> = (0..n).filter(|&p| p != root).collect();
    match relay {
        Some((piece, chunk)) if bytes > 0 => {
            // The root sends piece i to the i-th other rank, which forwards it to the rest.
            let span = |i: usize| {
                let lo = (i as u64 * piece).min(bytes);
                (lo, (lo + piece).min(bytes) - lo)
            };
            s.put_chunk = Some(chunk);
            if me == root {
                for (i, &p) in holders.iter().enumerate() {
                    let (lo, len) = span(i);
                    s.sends.push(x(p, send + lo, len, None));
                }
            } else {
                let mine = holders.iter().position(|&p| p == me).unwrap_or(0);
                let (lo, len) = span(mine);
                s.recvs.push(x(root, recv + lo, len, None));
                for (i, &p) in holders.iter().enumerate().filter(|&(_, &p)| p != me) {
                    s.sends.push(x(p, recv + lo, len, Some(root)));
                    let (plo, plen) = span(i);
                    s.recvs.push(x(p, recv + plo, plen, Some(root)));
                }
            }
        }
        _ if me == root => s.sends.extend(holders.iter().map(|&p| x(p, send, bytes, None))),
        _ => s.recvs.push(x(root, recv, bytes, None)),
    }
    if me == root && send != recv && bytes > 0 {
        s.copies.push(LocalCopy { src: send, dst: recv, bytes });
    }
    s
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
    // Groups are cut to fit (algo::batches); collectives' specs stay within these by construction.
    if spec.sends.len() > OX_MAX_XFERS || spec.recvs.len() > OX_MAX_XFERS {
        return Err(Error::internal(format!(
            "an exchange launch of {} sends and {} receives; one launch carries at most {OX_MAX_XFERS} of each",
            spec.sends.len(),
            spec.recvs.len()
        )));
    }
    if spec.copies.len() > OX_MAX_COPIES {
        return Err(Error::internal(format!("an exchange launch of {} sends to self; one launch carries at most {OX_MAX_COPIES}", spec.copies.len())));
    }
    for x in spec.sends.iter().chain(spec.recvs.iter()) {
        if x.peer >= n || x.peer == me {
            return Err(Error::internal(format!("exchange transfer with peer {} (rank {me} of {n})", x.peer)));
        }
    }
    let (grid, _) = exchange_shape(topo, scratch);
    let grid = spec.grid.map_or(grid, |g| g.clamp(1, grid));
    let ll_slot = (scratch.ll_half_bytes / n.max(1) as u64) & !15;
    let ll_max = t.exchange_ll_max_bytes.unwrap_or_else(|| default_ll_max_bytes(n));
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
    let mut relayed = [false; OX_MAX_RANKS];
    for x in spec.sends.iter().chain(spec.recvs.iter()) {
        if x.relay.is_some() {
            relayed[x.peer] = true;
        }
    }
    check_relays(me, spec)?;
    for p in 0..n {
        let (s, r) = (send_bytes[p], recv_bytes[p]);
        a.mode[p] = if s == 0 && r == 0 {
            OX_MODE_NONE
        } else if let Some(c) = spec.put_chunk {
            // Fixed chunk (relays): every pair puts, pieces aligned across pairs; a pair with a
            // relay in either direction takes one more round (its first carries nothing).
            let c = align16(c.max(16)).min(scratch.rs_slot_bytes & !15);
            let stream = send_aligned[p].max(recv_aligned[p]);
            a.chunk[p] = c as u32;
            a.rounds[p] = (stream.div_ceil(grid as u64 * c) + u64::from(relayed[p])) as u32;
            OX_MODE_PUT
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
            let chunk = put_chunk(stream, nb, scratch);
            let chunk = spec.chunk_cap.map_or(chunk, |cap| chunk.min(align16(cap).max(4096)));
            a.chunk[p] = chunk as u32;
            a.rounds[p] = stream.div_ceil(nb * chunk) as u32;
            OX_MODE_PUT
        };
    }

    // Stream positions, in posting order per peer and direction.
    let mut pos = [0u64; OX_MAX_RANKS];
    for (i, x) in spec.sends.iter().enumerate() {
        let put = a.mode[x.peer] == OX_MODE_PUT;
        let relay = x.relay.map_or(0, |r| r as i32 + 1);
        a.sends[i] = Xfer { src: x.ptr, dst: 0, bytes: x.bytes, off: pos[x.peer], peer: x.peer as i32, relay };
        pos[x.peer] += if put { align16(x.bytes) } else { pkts(x.bytes) };
    }
    let mut pos = [0u64; OX_MAX_RANKS];
    for (i, x) in spec.recvs.iter().enumerate() {
        let put = a.mode[x.peer] == OX_MODE_PUT;
        let relay = x.relay.map_or(0, |r| r as i32 + 1);
        a.recvs[i] = Xfer { src: 0, dst: x.ptr, bytes: x.bytes, off: pos[x.peer], peer: x.peer as i32, relay };
        pos[x.peer] += if put { align16(x.bytes) } else { pkts(x.bytes) };
    }
    for (i, c) in spec.copies.iter().enumerate() {
        a.copies[i] = Xfer { src: c.src, dst: c.dst, bytes: c.bytes, off: 0, peer: me as i32, relay: 0 };
    }
    a.nsend = spec.sends.len() as u32;
    a.nrecv = spec.recvs.len() as u32;
    a.ncopy = spec.copies.len() as u32;
    // Packet-only launches may use another grid (a packet carries its own flag; flags and
    // acknowledgements are kept per block slot for any grid): a tuning knob, for measuring.
    let packet_only = (0..n).all(|p| a.mode[p] != OX_MODE_PUT);
    let grid = match t.exchange_ll_blocks {
        Some(b) if packet_only => b.clamp(1, grid),
        _ => grid,
    };
    let largest = spec.sends.iter().chain(&spec.recvs).map(|x| x.bytes).max().unwrap_or(0);
    let wanted = spec.threads.or_else(|| (n == 2 && !packet_only && largest <= SMALL_BLOCK_PUT_MAX_BYTES).then_some(SMALL_BLOCK_THREADS));
    let block = exchange_threads(t, packet_only, wanted);
    Ok(ExchangePlan { args: a, grid, block })
}

/// The receives of a planned launch this rank may offer for zero-copy writes (kernels/colls/direct.cuh),
/// as (peer, destination, bytes): put pairs of two or more rounds (round 0 always goes through
/// scratch), a non-empty receive that is the pair's only one, neither forwarded to this rank nor
/// forwarded on by it (a forward reads its piece from this rank's scratch).
pub fn offer_candidates(a: &ExchangeArgs) -> Vec<(usize, u64, u64)> {
    let sends = &a.sends[..a.nsend as usize];
    let recvs = &a.recvs[..a.nrecv as usize];
    recvs
        .iter()
        .filter(|x| {
            let p = x.peer as usize;
            a.mode[p] == OX_MODE_PUT
                && a.rounds[p] >= 2
                && x.bytes > 0
                && x.relay == 0
                && recvs.iter().filter(|y| y.peer == x.peer).count() == 1
                && !sends.iter().any(|s| s.relay == x.peer + 1)
        })
        .map(|x| (x.peer as usize, x.dst, x.bytes))
        .collect()
}

/// A relay send forwards, piece for piece, the only stream its source sends this rank, so both
/// must be their pair's only transfer in that direction, and the chunk must be fixed.
fn check_relays(me: usize, spec: &ExchangeSpec) -> Result<()> {
    let only = |v: &[Transfer], peer: usize| v.iter().filter(|x| x.peer == peer).count() == 1;
    for x in &spec.sends {
        let Some(src) = x.relay else { continue };
        let from = spec.recvs.iter().find(|r| r.peer == src);
        let ok = spec.put_chunk.is_some()
            && src != me
            && only(&spec.sends, x.peer)
            && only(&spec.recvs, src)
            && from.is_some_and(|r| r.relay.is_none() && r.bytes >= x.bytes);
        if !ok {
            return Err(Error::internal(format!("rank {me}: relay to {} of the stream from {src} is malformed", x.peer)));
        }
    }
    for x in &spec.recvs {
        if x.relay.is_some() && (spec.put_chunk.is_none() || !only(&spec.recvs, x.peer)) {
            return Err(Error::internal(format!("rank {me}: forwarded stream from {} is malformed", x.peer)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_multi_round_receives_are_offered() {
        let (topo, s, t) = setup(4);
        let big = 64 << 20;
        // AlltoAll-like: one big receive from each peer, put mode, many rounds: all offered.
        let spec = ExchangeSpec {
            sends: (1..4).map(|p| Transfer { peer: p, ptr: 0x1000_0000 * p as u64, bytes: big, relay: None }).collect(),
            recvs: (1..4).map(|p| Transfer { peer: p, ptr: 0x9000_0000 + 0x1000_0000 * p as u64, bytes: big, relay: None }).collect(),
            ..Default::default()
        };
        let plan = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap();
        let got = offer_candidates(&plan.args);
        assert_eq!(got.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(got[0], (1, 0xa000_0000, big));
        // Small: packets, or a single put round: nothing offered.
        for bytes in [4096, 1 << 20] {
            let spec = ExchangeSpec { recvs: vec![Transfer { peer: 1, ptr: 0x9000, bytes, relay: None }], ..Default::default() };
            let plan = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap();
            assert!(plan.args.mode[1] != OX_MODE_PUT || plan.args.rounds[1] < 2);
            assert!(offer_candidates(&plan.args).is_empty(), "{bytes} bytes");
        }
        // Two receives from one peer (grouped p2p): neither is offered.
        let spec = ExchangeSpec {
            recvs: vec![
                Transfer { peer: 1, ptr: 0x9000_0000, bytes: big, relay: None },
                Transfer { peer: 1, ptr: 0xa000_0000, bytes: big, relay: None },
            ],
            ..Default::default()
        };
        assert!(offer_candidates(&plan_exchange(0, &spec, None, &topo, &s, &t).unwrap().args).is_empty());
        // A relay (Broadcast): the forwarded stream and the stream this rank forwards are not.
        let spec = ExchangeSpec {
            sends: vec![Transfer { peer: 2, ptr: 0, bytes: big, relay: Some(0) }],
            recvs: vec![Transfer { peer: 0, ptr: 0x9000_0000, bytes: big, relay: None }],
            put_chunk: Some(1 << 20),
            ..Default::default()
        };
        assert!(offer_candidates(&plan_exchange(1, &spec, None, &topo, &s, &t).unwrap().args).is_empty());
        let spec = ExchangeSpec {
            recvs: vec![Transfer { peer: 1, ptr: 0x9000_0000, bytes: big, relay: Some(0) }],
            put_chunk: Some(1 << 20),
            ..Default::default()
        };
        assert!(offer_candidates(&plan_exchange(2, &spec, None, &topo, &s, &t).unwrap().args).is_empty());
    }

    /// Put launches at 2 ranks take small blocks up to 16 MiB streams; packet launches, larger
    /// streams, more ranks and a shape's own block size are unchanged; the setting still wins.
    #[test]
    fn small_blocks_for_mid_size_puts_at_two_ranks() {
        let block = |n: usize, bytes: u64, t: &Tuning| {
            let (topo, s, _) = setup(n);
            let spec = ExchangeSpec {
                sends: (1..n).map(|p| Transfer { peer: p, ptr: 0x1000, bytes, relay: None }).collect(),
                recvs: (1..n).map(|p| Transfer { peer: p, ptr: 0x9000_0000, bytes, relay: None }).collect(),
                ..Default::default()
            };
            let plan = plan_exchange(0, &spec, None, &topo, &s, t).unwrap();
            (plan.args.mode[1], plan.block)
        };
        let t = Tuning::default();
        assert_eq!(block(2, 4 << 20, &t), (OX_MODE_PUT, SMALL_BLOCK_THREADS));
        assert_eq!(block(2, 16 << 20, &t), (OX_MODE_PUT, SMALL_BLOCK_THREADS));
        assert_eq!(block(2, 32 << 20, &t), (OX_MODE_PUT, 1024));
        assert_eq!(block(4, 4 << 20, &t), (OX_MODE_PUT, 1024));
        assert_eq!(block(2, 1 << 20, &t).1, 256, "packets: 256 anyway");
        let t = Tuning { exchange_threads: Some(768), ..Tuning::default() };
        assert_eq!(block(2, 4 << 20, &t).1, 768);
    }

    fn setup(n: usize) -> (Topology, Scratch, Tuning) {
        let t = Tuning::default();
        (Topology { nranks: n, sm_count: 132 }, Scratch::for_ranks(n, &t), t)
    }

    /// The two sides of every pair must derive identical mode, chunk, rounds and offsets.
    fn assert_pair_agrees(a: &ExchangePlan, me: usize, b: &ExchangePlan, peer: usize) {
        assert_eq!(a.args.mode[peer], b.args.mode[me], "mode");
        assert_eq!(a.args.chunk[peer], b.args.chunk[me], "chunk");
        assert_eq!(a.args.rounds[peer], b.args.rounds[me], "rounds");
        // Blocks pair up by index; their thread counts may differ (exchange_threads).
        assert_eq!(a.grid, b.grid, "grid");
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
        let r0 = ExchangeSpec { sends: vec![Transfer { peer: 1, ptr: 0x1000, bytes: big, relay: None }], ..Default::default() };
        let r1 = ExchangeSpec {
            sends: vec![Transfer { peer: 2, ptr: 0x2000, bytes: 100, relay: None }],
            recvs: vec![Transfer { peer: 0, ptr: 0x3000, bytes: big, relay: None }],
            ..Default::default()
        };
        let r2 = ExchangeSpec { recvs: vec![Transfer { peer: 1, ptr: 0x4000, bytes: 100, relay: None }], ..Default::default() };
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
                Transfer { peer: 1, ptr: 0x10, bytes: 3, relay: None },
                Transfer { peer: 1, ptr: 0x20, bytes: 0, relay: None },
                Transfer { peer: 1, ptr: 0x30, bytes: 20, relay: None },
            ],
            recvs: vec![Transfer { peer: 1, ptr: 0x40, bytes: 5, relay: None }],
            ..Default::default()
        };
        let b = ExchangeSpec {
            sends: vec![Transfer { peer: 0, ptr: 0x50, bytes: 5, relay: None }],
            recvs: vec![
                Transfer { peer: 0, ptr: 0x60, bytes: 3, relay: None },
                Transfer { peer: 0, ptr: 0x70, bytes: 0, relay: None },
                Transfer { peer: 0, ptr: 0x80, bytes: 20, relay: None },
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

    /// Scatter: half the grid exactly where the full one would take two put rounds; the smaller
    /// grid still covers every stream and both sides of each pair agree.
    #[test]
    fn scatter_halves_the_grid_where_the_full_one_takes_two_rounds() {
        let (topo, s, t) = setup(4);
        let (full, _) = exchange_shape(&topo, &s);
        assert_eq!(rooted_grid(32 << 20, &topo, &s), Some(full / 2), "Scatter 128 MiB on 4 ranks");
        assert_eq!(rooted_grid(16 << 20, &topo, &s), None, "one round");
        assert_eq!(rooted_grid(64 << 20, &topo, &s), None, "four rounds");
        assert_eq!(rooted_grid(1000, &topo, &s), None);
        let per = (32u64 << 20) - 48;
        let g = rooted_grid(per, &topo, &s);
        assert!(g.is_some());
        let root = ExchangeSpec {
            sends: (1..4).map(|p| Transfer { peer: p, ptr: 0x1000 * p as u64, bytes: per, relay: None }).collect(),
            grid: g,
            ..Default::default()
        };
        let leaf = ExchangeSpec { recvs: vec![Transfer { peer: 0, ptr: 0x9000, bytes: per, relay: None }], grid: g, ..Default::default() };
        let pr = plan_exchange(0, &root, None, &topo, &s, &t).unwrap();
        let pl = plan_exchange(2, &leaf, None, &topo, &s, &t).unwrap();
        assert_eq!(pr.grid, full / 2);
        assert_pair_agrees(&pr, 0, &pl, 2);
        assert_eq!(pr.args.rounds[2], 4);
        assert!(pr.grid as u64 * pr.args.chunk[2] as u64 * pr.args.rounds[2] as u64 >= per);
    }

    /// Gather: chunks of at most half a slot, more rounds to cover the stream, pairs agree.
    #[test]
    fn gather_chunks_are_capped_at_half_a_slot() {
        let (topo, s, t) = setup(4);
        let cap = gather_chunk_cap(&s);
        assert_eq!(cap, s.rs_slot_bytes / 2);
        let per = (32u64 << 20) + 5;
        let leaf = ExchangeSpec { sends: vec![Transfer { peer: 0, ptr: 0x1000, bytes: per, relay: None }], chunk_cap: Some(cap), ..Default::default() };
        let root = ExchangeSpec {
            recvs: (1..4).map(|p| Transfer { peer: p, ptr: 0x10_0000 * p as u64, bytes: per, relay: None }).collect(),
            chunk_cap: Some(cap),
            ..Default::default()
        };
        let pl = plan_exchange(3, &leaf, None, &topo, &s, &t).unwrap();
        let pr = plan_exchange(0, &root, None, &topo, &s, &t).unwrap();
        assert_pair_agrees(&pl, 3, &pr, 0);
        assert_eq!(pl.args.chunk[0] as u64, cap);
        assert!(pl.grid as u64 * cap * pl.args.rounds[0] as u64 >= per);
        let uncapped = plan_exchange(3, &ExchangeSpec { chunk_cap: None, ..leaf.clone() }, None, &topo, &s, &t).unwrap();
        assert_eq!(uncapped.args.chunk[0] as u64, s.rs_slot_bytes);
        // Small streams: unchanged.
        let small = ExchangeSpec { sends: vec![Transfer { peer: 0, ptr: 0x1000, bytes: 4 << 20, relay: None }], chunk_cap: Some(cap), ..Default::default() };
        let a = plan_exchange(3, &small, None, &topo, &s, &t).unwrap();
        let b = plan_exchange(3, &ExchangeSpec { chunk_cap: None, ..small.clone() }, None, &topo, &s, &t).unwrap();
        assert_eq!((a.args.chunk[0], a.args.rounds[0]), (b.args.chunk[0], b.args.rounds[0]));
    }

    /// AllGather from 32 MiB a rank at 4 ranks: half-slot chunks (pairs agree) and 896 threads,
    /// which OXCCL_EXCHANGE_THREADS overrides; smaller pieces and other rank counts keep the defaults.
    #[test]
    fn large_allgathers_take_half_slot_chunks_and_896_threads() {
        let (topo, s, mut t) = setup(4);
        let piece = 32u64 << 20;
        assert_eq!(allgather_shape(piece, &topo, &s), (Some(s.rs_slot_bytes / 2), Some(896)));
        assert_eq!(allgather_shape(piece - 1, &topo, &s), (None, None));
        for n in [3, 8] {
            let (topo_n, s_n, _) = setup(n);
            assert_eq!(allgather_shape(piece, &topo_n, &s_n), (None, None), "{n} ranks");
        }
        let spec = |me: usize| {
            let (cap, threads) = allgather_shape(piece, &topo, &s);
            let others = (0..4).filter(move |&p| p != me);
            ExchangeSpec {
                sends: others.clone().map(|p| Transfer { peer: p, ptr: 0x1000, bytes: piece, relay: None }).collect(),
                recvs: others.map(|p| Transfer { peer: p, ptr: 0x1000_0000 * (p as u64 + 1), bytes: piece, relay: None }).collect(),
                chunk_cap: cap,
                threads,
                ..Default::default()
            }
        };
        let (p0, p2) = (plan_exchange(0, &spec(0), None, &topo, &s, &t).unwrap(), plan_exchange(2, &spec(2), None, &topo, &s, &t).unwrap());
        assert_pair_agrees(&p0, 0, &p2, 2);
        assert_eq!((p0.args.chunk[2] as u64, p0.block), (s.rs_slot_bytes / 2, 896));
        assert!(p0.grid as u64 * p0.args.chunk[2] as u64 * p0.args.rounds[2] as u64 >= piece);
        t.exchange_threads = Some(1024);
        assert_eq!(plan_exchange(0, &spec(0), None, &topo, &s, &t).unwrap().block, 1024);
    }

    #[test]
    fn put_offsets_are_sixteen_byte_aligned_and_chunks_fit_slots() {
        let (topo, s, t) = setup(4);
        let spec = ExchangeSpec {
            sends: vec![Transfer { peer: 3, ptr: 0, bytes: (1 << 20) + 3, relay: None }, Transfer { peer: 3, ptr: 0, bytes: 5 << 20, relay: None }],
            ..Default::default()
        };
        let p = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap();
        assert_eq!(p.args.mode[3], OX_MODE_PUT);
        assert_eq!(p.args.sends[1].off % 16, 0);
        assert!(p.args.chunk[3] as u64 <= s.rs_slot_bytes && p.args.chunk[3].is_multiple_of(16));
    }

    /// Relayed Broadcast on 3-5 ranks, any root: every pair agrees, every byte of the message
    /// reaches every non-root exactly once (from the root or forwarded), and forwarded pairs take
    /// one more round than the root's.
    #[test]
    fn relayed_broadcast_pairs_agree_and_cover_the_message() {
        for n in [3usize, 4, 5] {
            let (topo, s, t) = setup(n);
            for bytes in [(4u64 << 20) + 3, 64 << 20, 100_000_007] {
                let relay = broadcast_relay(bytes, &topo, &s, &t);
                assert!(relay.is_some(), "n={n} bytes={bytes}");
                for root in 0..n {
                    let specs: Vec<ExchangeSpec> = (0..n).map(|me| broadcast_spec(me, root, n, 0x1000, 0x1000, bytes, relay)).collect();
                    let plans: Vec<ExchangePlan> = (0..n).map(|me| plan_exchange(me, &specs[me], Some(Func::Broadcast), &topo, &s, &t).unwrap()).collect();
                    for a in 0..n {
                        for b in 0..n {
                            if a != b {
                                assert_pair_agrees(&plans[a], a, &plans[b], b);
                            }
                        }
                    }
                    for me in (0..n).filter(|&m| m != root) {
                        let mut got: Vec<(u64, u64)> = specs[me].recvs.iter().map(|r| (r.ptr - 0x1000, r.bytes)).collect();
                        got.sort();
                        let mut at = 0;
                        for (lo, len) in got {
                            assert_eq!(lo, at, "n={n} root={root} me={me}: contiguous");
                            at += len;
                        }
                        assert_eq!(at, bytes);
                        let from_root = plans[me].args.rounds[root];
                        for p in (0..n).filter(|&p| p != root && p != me) {
                            // One round more than the longer of the two pieces takes from the root.
                            let longer = from_root.max(plans[p].args.rounds[root]);
                            assert_eq!(plans[me].args.rounds[p], longer + 1, "forwarding lags one round");
                            assert_eq!(plans[me].args.chunk[p], plans[me].args.chunk[root], "pieces line up");
                        }
                    }
                }
            }
            assert!(broadcast_relay(4096, &topo, &s, &t).is_none(), "small broadcasts go direct");
        }
        let (topo, s, t) = setup(2);
        assert!(broadcast_relay(64 << 20, &topo, &s, &t).is_none(), "two ranks: nothing to forward");
    }

    #[test]
    fn malformed_relays_are_refused() {
        let (topo, s, t) = setup(4);
        let mut spec = broadcast_spec(1, 0, 4, 0, 0, 8 << 20, broadcast_relay(8 << 20, &topo, &s, &t));
        spec.put_chunk = None;
        assert!(plan_exchange(1, &spec, None, &topo, &s, &t).is_err(), "no fixed chunk");
        let mut spec = broadcast_spec(1, 0, 4, 0, 0, 8 << 20, broadcast_relay(8 << 20, &topo, &s, &t));
        spec.recvs.retain(|r| r.peer != 0);
        assert!(plan_exchange(1, &spec, None, &topo, &s, &t).is_err(), "forwarding what never arrives");
    }

    #[test]
    fn launch_shape_knobs() {
        let (topo, s, t) = setup(4);
        let t = Tuning { exchange_threads: Some(256), exchange_ll_blocks: Some(16), ..t };
        let small = plan_exchange(0, &broadcast_spec(0, 0, 4, 0x10, 0x20, 64, None), None, &topo, &s, &t).unwrap();
        assert_eq!((small.grid, small.block), (16, 256));
        let big = plan_exchange(0, &broadcast_spec(0, 0, 4, 0x10, 0x20, 64 << 20, None), None, &topo, &s, &t).unwrap();
        assert_eq!((big.grid, big.block), (exchange_shape(&topo, &s).0, 256), "puts keep the paired grid");
        let t = Tuning::default();
        let small = plan_exchange(0, &broadcast_spec(0, 0, 4, 0x10, 0x20, 64, None), None, &topo, &s, &t).unwrap();
        assert_eq!((small.grid, small.block), (exchange_shape(&topo, &s).0, 256), "packet-only default");
        let big = plan_exchange(0, &broadcast_spec(0, 0, 4, 0x10, 0x20, 64 << 20, None), None, &topo, &s, &t).unwrap();
        assert_eq!(big.block, 1024, "put launches default");
    }

    #[test]
    fn the_one_shot_p2p_kernel_takes_only_pairs_the_exchange_moves_as_packets() {
        let x = |peer, bytes| Transfer { peer, ptr: 0x1000, bytes, relay: None };
        let spec = |sends: Vec<Transfer>, recvs: Vec<Transfer>| ExchangeSpec { sends, recvs, ..Default::default() };
        for n in [2usize, 3, 4, 8] {
            let (topo, s, mut t) = setup(n);
            let (next, prev) = (1 % n, n - 1);
            let ring = spec(vec![x(next, 4096)], vec![x(prev, 4096)]);
            if n > 4 {
                assert_eq!(select_p2p_oneshot(&ring, &topo, &s, &t), None, "off above 4 ranks until measured");
                t.p2p_oneshot_max_bytes = Some(256 << 10);
            }
            let (grid, block) = select_p2p_oneshot(&ring, &topo, &s, &t).expect("a ring step");
            assert!(grid >= 1 && block >= 64);
            assert!(select_p2p_oneshot(&spec(vec![x(next, 8)], vec![]), &topo, &s, &t).is_some(), "a lone send");
            assert!(select_p2p_oneshot(&spec(vec![], vec![x(prev, 8)]), &topo, &s, &t).is_some(), "a lone receive");
            // Not for it: nothing, an empty transfer, two sends, a send to self, a relay.
            assert_eq!(select_p2p_oneshot(&spec(vec![], vec![]), &topo, &s, &t), None);
            assert_eq!(select_p2p_oneshot(&spec(vec![x(next, 0)], vec![x(prev, 8)]), &topo, &s, &t), None);
            assert_eq!(select_p2p_oneshot(&spec(vec![x(next, 8), x(next, 8)], vec![]), &topo, &s, &t), None);
            let mut with_self = ring.clone();
            with_self.copies.push(LocalCopy { src: 1, dst: 2, bytes: 8 });
            assert_eq!(select_p2p_oneshot(&with_self, &topo, &s, &t), None);
            assert_eq!(select_p2p_oneshot(&spec(vec![Transfer { relay: Some(0), ..x(next, 8) }], vec![]), &topo, &s, &t), None);
            // The interoperability invariant: wherever it takes a group, the exchange kernel would
            // move each of its pairs as packets at offset 0, even inside a peer's larger group
            // (the peer then runs the exchange kernel for its side).
            let limit = t.p2p_oneshot_max_bytes.unwrap_or_else(|| default_p2p_oneshot_max(n));
            for bytes in [1u64, 8, 100, 4096, 64 << 10, limit, limit + 1, 1 << 20, 64 << 20] {
                for g in [spec(vec![x(next, bytes)], vec![x(prev, bytes)]), spec(vec![x(next, bytes)], vec![x(next, bytes / 2 + 1)])] {
                    let Some(_) = select_p2p_oneshot(&g, &topo, &s, &t) else {
                        assert!(bytes > 4096, "{bytes} B at {n} ranks refused");
                        continue;
                    };
                    assert!(bytes <= limit, "{bytes} B taken past the limit {limit}");
                    // A peer's group also holds transfers with third ranks (never more with us: a
                    // pair's transfers match on both sides).
                    let mut peer_group = g.clone();
                    let ours: Vec<usize> = g.sends.iter().chain(&g.recvs).map(|x| x.peer).collect();
                    if let Some(third) = (1..n).find(|p| !ours.contains(p)) {
                        peer_group.sends.push(x(third, 32 << 20)); // a big put
                    }
                    for plan in [plan_exchange(0, &g, None, &topo, &s, &t).unwrap(), plan_exchange(0, &peer_group, None, &topo, &s, &t).unwrap()] {
                        for xf in plan.args.sends[..g.sends.len()].iter().chain(&plan.args.recvs[..g.recvs.len()]) {
                            let m = plan.args.mode[xf.peer as usize];
                            assert!(m == OX_MODE_LL || m == OX_MODE_LL_ACK, "{bytes} B to {}: mode {m}", xf.peer);
                            assert_eq!(xf.off, 0);
                        }
                    }
                }
            }
            t.p2p_oneshot_max_bytes = Some(0);
            assert_eq!(select_p2p_oneshot(&ring, &topo, &s, &t), None, "0 turns it off");
        }
    }

    #[test]
    fn a_launch_beyond_the_parameter_block_is_refused() {
        let (topo, s, t) = setup(2);
        let spec = ExchangeSpec { sends: vec![Transfer { peer: 1, ptr: 0, bytes: 8, relay: None }; OX_MAX_XFERS + 1], ..Default::default() };
        let e = plan_exchange(0, &spec, None, &topo, &s, &t).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::InternalError);
    }

    #[test]
    fn the_one_shot_gather_has_a_default_limit_and_is_bounded_by_its_scratch() {
        for n in [2usize, 4, 8] {
            let (topo, s, mut t) = setup(n);
            let def = default_gather_oneshot_max(n as u64).min(super::super::allreduce::oneshot_capacity(&s, n as u64));
            if n <= 4 {
                assert!(def >= 16 << 10, "on by default at {n} ranks");
                assert!(select_gather_oneshot(def, true, &topo, &s, &t).is_some(), "n={n}");
            } else {
                assert_eq!(def, 0, "off above 4 ranks until measured there");
            }
            assert_eq!(select_gather_oneshot(def + 1, true, &topo, &s, &t), None, "n={n}");
            t.gather_oneshot_max_bytes = Some(0);
            assert_eq!(select_gather_oneshot(8, true, &topo, &s, &t), None, "0 turns it off (n={n})");
            t.gather_oneshot_max_bytes = Some(64 << 10);
            let (grid, block) = select_gather_oneshot(8, true, &topo, &s, &t).expect("8 bytes");
            assert!((4..=64).contains(&grid) && block == 512, "the one-shot AllReduce's shape: {grid} x {block}");
            assert!(select_gather_oneshot(64 << 10, false, &topo, &s, &t).is_some(), "AlltoAll, n={n}");
            assert_eq!(select_gather_oneshot((64 << 10) + 1, true, &topo, &s, &t), None, "above the limit");
            assert_eq!(select_gather_oneshot(0, true, &topo, &s, &t), None, "nothing to move");
            // Past the scratch a source region holds, the exchange kernel moves it whatever the limit.
            t.gather_oneshot_max_bytes = Some(u64::MAX);
            let cap = ((s.ll_half_bytes / n as u64) & !15) / 2;
            assert!(select_gather_oneshot(cap, true, &topo, &s, &t).is_some());
            assert_eq!(select_gather_oneshot(cap + 1, true, &topo, &s, &t), None);
            // NCCL_PROTO without packets for AllGather leaves it to the exchange kernel; AlltoAll has no
            // NCCL function name and keeps the one-shot kernel.
            t.allowed = crate::algo::envlists::Allowed::from_values(Some("Simple"), None).unwrap();
            assert_eq!(select_gather_oneshot(8, true, &topo, &s, &t), None);
            assert!(select_gather_oneshot(8, false, &topo, &s, &t).is_some());
        }
        let (topo, s, mut t) = setup(1);
        t.gather_oneshot_max_bytes = Some(64 << 10);
        assert_eq!(select_gather_oneshot(8, true, &topo, &s, &t), None, "one rank: the exchange's local copy");
    }
}
