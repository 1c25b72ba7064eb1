//! How each operation of a communicator that spans hosts splits into stages, as one rank sees it:
//! stages on the host-local communicator (NVLink, MemoryChannels) and steps across hosts run by the
//! proxy over TCP. A pure function of the layout and the call, so every rank derives its part of
//! the same schedule and the pieces of each pair of ranks match without any negotiation.
//!
//! Hierarchy: ranks of one host form the local communicator; across hosts, rank (host h, local
//! index l) talks to its *partner* on host h', the rank with local index l mod L(h'). Reductions
//! reduce on each host first (the local stage applies pre-multiplication: PreMulSum, float
//! average), combine the hosts' partial results across hosts in host order (identical on every
//! rank), then spread the result on each host. Data that is only moved goes between partners and
//! is then forwarded on each host; AlltoAll, Gather, Scatter and point-to-point calls go straight
//! to their peer, over the local communicator or the network.

use crate::types::ResolvedOp;
use crate::types::Coll;
use crate::types::{DataType, RedOp};

use super::hostreduce::{Combine, HostOp};

mod colls;
mod direct;

use colls::{allgather, allreduce, broadcast, reduce, reducescatter};
pub use direct::{direct, split_direct, P2p};
use direct::{direct_all, direct_ops};

/// Which rank lives on which host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// This rank (in the whole communicator).
    pub me: usize,
    /// Host index of each rank; hosts are numbered in order of their lowest rank.
    pub host_of: Vec<usize>,
    /// Ranks of each host, ascending.
    pub hosts: Vec<Vec<usize>>,
    /// `DIRECT_MAX_BYTES` unless tuned (OXCCL_NET_BCAST_DIRECT_MAX, equal on every rank).
    pub bcast_direct_max: u64,
    /// The stripe threshold of a Broadcast's transfers from the root to the other hosts
    /// (`Phase::stripe_min`); 0 unless tuned (OXCCL_NET_BCAST_STRIPE_MIN, equal on every rank).
    pub bcast_stripe_min: u64,
    /// `CHAIN_MAX_BYTES` unless tuned (OXCCL_NET_BCAST_CHAIN_MAX, equal on every rank; 0: never).
    pub bcast_chain_max: u64,
    /// Broadcast across three hosts or more from this size goes along the chain of hosts in
    /// pieces (`chain_piece_bytes`); `u64::MAX` (never) unless tuned
    /// (OXCCL_NET_BCAST_PIPELINE_MIN, equal on every rank).
    pub bcast_pipeline_min: u64,
    /// `SCATTER_MIN_BYTES` unless tuned (OXCCL_NET_BCAST_SCATTER_MIN, equal on every rank;
    /// `u64::MAX`: never).
    pub bcast_scatter_min: u64,
    /// Reduce between two hosts of equal size from this size goes slice by slice, one per rank
    /// (`reduce_sliced`); `SLICE_MIN_BYTES` unless tuned (OXCCL_NET_REDUCE_SLICE_MIN, equal on
    /// every rank; `u64::MAX`: never).
    pub reduce_slice_min: u64,
    /// Reduce across three hosts or more from this size goes along the chain of hosts towards the
    /// root's in pieces (`reduce_chained`); `u64::MAX` (never) unless tuned
    /// (OXCCL_NET_REDUCE_PIPELINE_MIN, equal on every rank) or the hosts are apart
    /// (`pipeline_defaults`).
    pub reduce_pipeline_min: u64,
    /// AllReduce, ReduceScatter and AllGather across three hosts or more of one size from this
    /// size (the call's largest buffer) go around the ring of hosts (`ring`); `u64::MAX` (never)
    /// unless tuned (OXCCL_NET_RING_MIN, equal on every rank) or the hosts are apart
    /// (`ring_default`).
    pub ring_min: u64,
    /// Broadcast and Reduce phases are `Phase::narrow` (`link::narrow_fit`, or
    /// OXCCL_NET_NARROW; equal on every rank).
    pub narrow: bool,
}

impl Layout {
    /// From every rank's host hash (by rank).
    pub fn new(me: usize, host_hash: &[u64]) -> Layout {
        let mut seen: Vec<u64> = Vec::new();
        let mut hosts: Vec<Vec<usize>> = Vec::new();
        let mut host_of = Vec::with_capacity(host_hash.len());
        for (r, h) in host_hash.iter().enumerate() {
            let i = match seen.iter().position(|x| x == h) {
                Some(i) => i,
                None => {
                    seen.push(*h);
                    hosts.push(Vec::new());
                    seen.len() - 1
                }
            };
            hosts[i].push(r);
            host_of.push(i);
        }
        Layout { me, host_of, hosts, bcast_direct_max: DIRECT_MAX_BYTES, bcast_chain_max: CHAIN_MAX_BYTES, bcast_pipeline_min: u64::MAX, bcast_stripe_min: 0, bcast_scatter_min: SCATTER_MIN_BYTES, reduce_slice_min: SLICE_MIN_BYTES, reduce_pipeline_min: u64::MAX, ring_min: u64::MAX, narrow: false }
    }

    /// Ranks in the communicator.
    pub fn nranks(&self) -> usize {
        self.host_of.len()
    }
    /// Hosts in the communicator.
    pub fn nhosts(&self) -> usize {
        self.hosts.len()
    }
    /// This rank's host index.
    pub fn my_host(&self) -> usize {
        self.host_of[self.me]
    }
    /// Rank `r`'s index on its host (its rank in the local communicator).
    pub fn local_index(&self, r: usize) -> usize {
        self.hosts[self.host_of[r]].iter().position(|&x| x == r).unwrap_or(0)
    }
    /// Ranks on host `h`.
    pub fn local_size(&self, h: usize) -> usize {
        self.hosts[h].len()
    }
    /// The rank on host `h` that stands for local index `l` there.
    pub fn owner(&self, h: usize, l: usize) -> usize {
        self.hosts[h][l % self.hosts[h].len()]
    }
    /// Rank `r`'s partner on host `h`.
    pub fn partner(&self, r: usize, h: usize) -> usize {
        self.owner(h, self.local_index(r))
    }
    fn same_host(&self, r: usize) -> bool {
        self.host_of[r] == self.my_host()
    }
}

/// Where a cross-host transfer reads or writes: GPU memory, or the step's host arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// A device address.
    Dev(u64),
    /// A byte offset in the step's host arena.
    Host(u64),
}

/// One transfer with a rank on another host (as the layout counts hosts): the proxy sends `buf` to
/// `peer` or receives into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xfer {
    /// The other end (a rank of the communicator).
    pub peer: usize,
    /// Where the bytes are read (send) or written (receive).
    pub buf: Buf,
    /// Bytes to move.
    pub bytes: u64,
}

/// `out = inputs[0] (op) inputs[1] (op) ...`, accumulated in the host arena at `acc`, then written
/// to `out` (a device address, or left at `acc` when `out` is `Host(acc)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostReduce {
    /// The operands, combined in order.
    pub inputs: Vec<Buf>,
    /// Byte offset of the accumulator in the step's host arena.
    pub acc: u64,
    /// Where the result goes.
    pub out: Buf,
    /// Bytes of each operand and of the result.
    pub bytes: u64,
    /// The combining operation and its element type.
    pub op: HostOp,
}

/// Transfers that run concurrently, then reductions once all have landed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    /// Sends of the phase.
    pub sends: Vec<Xfer>,
    /// Receives of the phase.
    pub recvs: Vec<Xfer>,
    /// Host reductions over what the transfers brought (`pipeline` may start them as their inputs
    /// land).
    pub reduces: Vec<HostReduce>,
    /// Jobs of this phase at least this large are striped over every lane of their link; 0: the
    /// link's own threshold (OXCCL_NET_STRIPE_MIN). Both ends must split a job alike, so a plan
    /// sets it only where both ends' phases carry the job with the same value.
    pub stripe_min: u64,
    /// A phase of a collective that keeps few links busy at once (Broadcast, Reduce), planned
    /// where every machine has cores for their threads (`Layout::narrow`): plain TCP links spin
    /// for its jobs and stripe them from `link::FIT_STRIPE_MIN` (`link::Job::narrow`). Set alike
    /// on both ends of each transfer (the stripes must match).
    pub narrow: bool,
}

/// A copy between two GPU ranges of this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevCopy {
    /// Source device address.
    pub src: u64,
    /// Destination device address.
    pub dst: u64,
    /// Bytes to copy.
    pub bytes: u64,
}

/// One cross-host step: phases in order, with the host arena they need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The step's phases, run one after another.
    pub phases: Vec<Phase>,
    /// Bytes of host arena the step needs (`host` reserves them).
    pub arena_bytes: u64,
    /// Host address of the step's arena when its launch provided one (a step staged by its
    /// kernel, `stage`); 0: the proxy's own arena.
    pub pinned: u64,
    /// The second arena of the pair, less `pinned` (modulo 2^64); the kernel names which it used.
    pub pinned_flip: u64,
    /// Copies on this GPU that go with the step, disjoint from every range its phases touch, so
    /// they may run at any point of it: a rank alone on its host has no local stage to make them,
    /// and the step kernel does them within its own launch (else they are launched before it).
    /// Never the proxy's: `launch_step` takes them out.
    pub copies: Vec<DevCopy>,
    /// A staged step's arena ranges that its kernel and the proxy pass as LL16 packets
    /// (`packets`); empty: plain bytes.
    pub packets: Vec<super::packets::Range>,
    /// A pipelined staged step's arena copies and flags (`progress`); None: not pipelined.
    pub progress: Option<crate::transport::progress::Layout>,
}

impl Step {
    fn is_empty(&self) -> bool {
        self.copies.is_empty() && !self.has_work()
    }
    /// Whether the proxy has anything to do: a transfer or a reduction.
    pub fn has_work(&self) -> bool {
        self.phases.iter().any(|p| !p.sends.is_empty() || !p.recvs.is_empty() || !p.reduces.is_empty())
    }
    /// Reserves `bytes` of the host arena (16-byte aligned).
    pub fn host(&mut self, bytes: u64) -> u64 {
        let off = self.arena_bytes;
        self.arena_bytes += bytes.div_ceil(16) * 16;
        off
    }
}

/// One point-to-point operation on the local communicator (peer is a local rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalP2p {
    /// True for a send, false for a receive.
    pub is_send: bool,
    /// The peer's rank in the local communicator.
    pub peer: usize,
    /// Device address of the data.
    pub buf: u64,
    /// Bytes to move.
    pub bytes: u64,
}

/// One stage on the local communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalOp {
    /// A collective on the local communicator.
    Coll {
        /// The collective.
        coll: Coll,
        /// Device address of the send buffer.
        send: u64,
        /// Device address of the receive buffer.
        recv: u64,
        /// Elements, as NCCL's `count` argument.
        count: u64,
        /// Reduction op (reductions only).
        op: ResolvedOp,
        /// Root as a rank of the local communicator (its local index).
        root: usize,
    },
    /// A group of point-to-point operations on the local communicator.
    P2p(Vec<LocalP2p>),
}

/// One stage of a planned operation, run in order on the user's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A launch on the host-local communicator.
    Local(LocalOp),
    /// A cross-host step, carried out by the proxy (triggered by a step kernel).
    Net(Step),
}

/// One collective call as the planner takes it (`count` as NCCL's argument; `scratch` is device
/// memory of at least `scratch_bytes(...)` for ReduceScatter and Reduce).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// The collective.
    pub coll: Coll,
    /// Device address of the send buffer.
    pub send: u64,
    /// Device address of the receive buffer.
    pub recv: u64,
    /// Elements, as NCCL's `count` argument of the collective.
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction op (reductions only).
    pub op: ResolvedOp,
    /// Root rank in the communicator (Broadcast, Reduce, Gather, Scatter).
    pub root: usize,
    /// Device address of scratch of at least `scratch_bytes` (ReduceScatter and Reduce).
    pub scratch: u64,
}

/// Device scratch a call needs on this rank.
pub fn scratch_bytes(coll: Coll, count: u64, dtype: DataType, nranks: usize) -> u64 {
    let es = dtype.size() as u64;
    match coll {
        Coll::ReduceScatter => count * nranks as u64 * es,
        Coll::Reduce => count * es,
        _ => 0,
    }
}

pub use crate::transport::link::split;

/// The local stage's op and the cross-host combine for a reduction op over `nranks` ranks.
pub fn split_op(op: ResolvedOp, dtype: DataType, nranks: usize) -> (ResolvedOp, HostOp) {
    let host = |combine, postdiv| HostOp { dtype, combine, postdiv };
    match op.op {
        RedOp::Sum => (op, host(Combine::Sum, 0)),
        RedOp::Prod => (op, host(Combine::Prod, 0)),
        RedOp::Max => (op, host(Combine::Max, 0)),
        RedOp::Min => (op, host(Combine::Min, 0)),
        RedOp::PreMulSum => (op, host(Combine::Sum, 0)),
        RedOp::Avg if dtype.is_float() => {
            // Each input scaled by 1/nranks (the communicator's, not the host's), then summed.
            let scalar = super::hostreduce::scalar_bits(dtype, 1.0 / nranks as f64);
            (ResolvedOp { op: RedOp::PreMulSum, scalar, scalar_ptr: 0 }, host(Combine::Sum, 0))
        }
        RedOp::Avg => (ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 }, host(Combine::Sum, nranks as u64)),
    }
}

/// AllReduce slices up to this size cross hosts in one round (all to all) rather than two
/// (reduce-scatter, all-gather).
pub const ONESHOT_MAX_BYTES: u64 = 256 << 10;

/// AllReduce up to this size: every rank of a host exchanges the host's whole partial result with
/// its partners and combines it itself, so no host stage follows the step (the host stage's
/// results are bit-identical on every rank of a host, and every rank combines in host order).
/// Above it, slices are combined by their owners and spread on each host.
pub const FULL_EXCHANGE_MAX_BYTES: u64 = 64 << 10;

/// Broadcast across three hosts or more up to this size goes along a chain of hosts (each proxy
/// sends once) rather than from the root to every host (the root's proxy sends to each in turn).
/// Above it, a relay would store and forward a whole job, one hop after another; the root sends to
/// each. At 4 simulated hosts x 1 on H200 (three rounds; medians) the chain took 38 us at
/// 64 KB against 50 from the root, but 63 at 128 KB against 37, and 93 at 256 KB against 52 (NCCL
/// 45, 69, 112); 3 x 1 alike. Since the root's links stripe and spin as a narrow phase's, sending
/// to each host beats store-and-forward hops from 128 KiB (256 KiB before; BENCHMARKS.md of 2026-11-28,
/// d81e934). OXCCL_NET_BCAST_CHAIN_MAX tunes it.
pub const CHAIN_MAX_BYTES: u64 = 64 << 10;

/// The pieces of a Broadcast along the chain of hosts in pieces (`Layout::bcast_pipeline_min`):
/// at least `CHAIN_PIECE_MIN` bytes each and at most `CHAIN_PIECES_MAX` of them, a multiple of 16
/// bytes. Each is a phase on every relay, so a piece must outweigh a phase's cost (a few tens of
/// microseconds through the proxy) on the slowest link that would want pieces: 512 KiB is 40 us
/// at 100 Gbit/s.
fn chain_piece_bytes(bytes: u64) -> u64 {
    let n = (bytes / CHAIN_PIECE_MIN).clamp(2, CHAIN_PIECES_MAX);
    bytes.div_ceil(n).div_ceil(16) * 16
}
const CHAIN_PIECE_MIN: u64 = 512 << 10;
const CHAIN_PIECES_MAX: u64 = 16;

/// `bytes` cut into pieces of `piece` bytes (the last shorter): (offset, length) of each.
fn pieces_of(bytes: u64, piece: u64) -> Vec<(u64, u64)> {
    (0..bytes.div_ceil(piece)).map(|i| (i * piece, piece.min(bytes - i * piece))).collect()
}

/// Whether the hosts are apart: no network stack holds ranks of two hosts (`host_hash` and
/// `network`, `topo::network_hash`, per rank). Then each host has a network link of its own, which
/// a root sending to or receiving from every other host would load once per host, and which a
/// transfer from every host at once shares unevenly. Hosts simulated on one machine in one network
/// namespace share its loopback, which has no such limit; in namespaces of their own
/// (`bench/netsim.sh`) each has its own link, as on a cluster.
pub fn hosts_apart(host_hash: &[u64], network: &[u64]) -> bool {
    let ranks = || host_hash.iter().zip(network);
    ranks().all(|(h, m)| ranks().all(|(h2, m2)| m2 != m || h2 == h))
}

/// The chains in pieces' thresholds unless set: (Broadcast, Reduce) both from `PIPELINE_MIN_APART`
/// where the hosts are apart (`hosts_apart`), never otherwise. With
/// each simulated host's link limited to 10 Gbit/s (`bench/netsim.sh`, 4 hosts x 1 on one
/// H200), a 64 MB Broadcast from the root to every host took 151 ms, in pieces 51 (NCCL's ring 56);
/// at 512 KB 718 us against 265-297 (NCCL 338-379), at 256 KB 114-199 against 165-181. On one
/// machine's loopback the pieces gain nothing (BENCHMARKS.md of 2026-11-28, f347df5, and of
/// 2026-11-29, 0ec1268). Reduce's chain, same setting: 64 MB 51 ms against 114 received by the
/// root, 1 MB 410-422 us against 759-789 (NCCL 56 ms and 422-431 us).
pub fn pipeline_defaults(apart: bool) -> (u64, u64) {
    let min = if apart { PIPELINE_MIN_APART } else { u64::MAX };
    (min, min)
}
/// Bytes from which Broadcast and Reduce go along the chain of hosts in pieces where the hosts are
/// apart (`pipeline_defaults`).
pub const PIPELINE_MIN_APART: u64 = 512 << 10;

/// The ring's threshold unless set (`Layout::ring_min`): `RING_MIN_APART` where the hosts are
/// apart, never otherwise. On one loopback every host sending to every other at once is faster:
/// at 4 simulated hosts x 1 there (hostsim, GPU 0 under MPS), AllReduce 16 MB took 8250-9656 us
/// around the ring against 5885-6758, 64 MB 33258-36021 against 25876-27695 (two rounds).
/// At 4 simulated hosts x 1, 10 Gbit/s each, 4 MB took (us, out of place / in place) around the
/// ring against all at once: AllReduce 9841 / 4870 against 5214 / 5136, ReduceScatter 2144 /
/// 2144 against 2283 / 2307, AllGather 2168 / 2214 against 2340 / 2311 (NCCL about 4950, 2140,
/// 2140); at 2 MB neither won, and below it the links' burst lets all at once beat NCCL by 2x.
pub fn ring_default(apart: bool) -> u64 {
    if apart { RING_MIN_APART } else { u64::MAX }
}
/// Bytes (the call's largest buffer) from which AllReduce, ReduceScatter and AllGather go around
/// the ring of hosts where the hosts are apart (`ring_default`).
pub const RING_MIN_APART: u64 = 4 << 20;

/// Whether a call whose largest buffer is `bytes` goes around the ring of hosts: three hosts or
/// more, all of one size (so rank `i` of every host forms ring `i`), from `l.ring_min`.
///
/// Across hosts with links of their own, every host sending to every other at once (the all-pairs
/// form) leaves each link carrying transfers from several senders that end unevenly: the link
/// idles while the last of them finishes, and the calls' starts drift apart from rank to rank. At
/// 4 simulated hosts x 1, 10 Gbit/s each (`bench/netsim.sh`), 64 MB AllReduce took 90-98 ms
/// that way and ReduceScatter 46-49 (NCCL's ring 84 and 42; the links' bound about 82 and 41):
/// the traces showed each rank's receives ending 2-10 ms apart and starts up to 16 ms apart
/// (BENCHMARKS.md of 2026-11-29, c4e0b5a). Around a ring each link carries one transfer each way at a
/// time, as NCCL's ring does: 64 MB AllReduce then took 85-87 ms, ReduceScatter 42-43 and AllGather
/// 42 (NCCL 84, 42, 42), in every phase one part of the call's data over one link each way.
fn ring(l: &Layout, bytes: u64) -> bool {
    l.nhosts() > 2 && bytes > 0 && bytes >= l.ring_min && l.hosts.iter().all(|h| h.len() == l.hosts[0].len())
}

/// Broadcast between two hosts up to this size, with at most `DIRECT_MAX_PEERS` ranks on the
/// other host: the root sends to each of them, and they need no host stage after the step. Above
/// it the root's proxy sending each rank its own copy costs more than the host stage: at 2
/// simulated hosts x 2 on H200, 64 KB took 21.5-25.2 us through the partner against 28.0-37.9
/// direct (NCCL 22.4-24.2 in the same call), 32 KB 16.3-17.4 against 17.7-23.2; at 4-16 KB the
/// two were within a microsecond or two either way (BENCHMARKS.md of 2026-11-27, 1464379; 64 KiB before).
pub const DIRECT_MAX_BYTES: u64 = 16 << 10;
/// Most ranks off the root's host for the direct Broadcast (`DIRECT_MAX_BYTES`) and Reduce
/// (`REDUCE_DIRECT_MAX_BYTES`).
pub const DIRECT_MAX_PEERS: usize = 4;

/// Broadcast between two hosts from this size, where the message splits evenly over the ranks of
/// the other host: the root sends each of them its own slice, and that host's stage gathers the
/// slices, so the message crosses on several proxies, links and copy streams at once instead of one.
/// At 2 simulated hosts x 2 on H200, medians of 6 (us): 1 MB 131.6 against 182.9 sent whole, 4 MB
/// 229 against 360, 16 MB 808 against 1928, 128 MB 6543 against 10573 (NCCL's sockets 134, 879,
/// 3768, 27980); at 512 KB scattering lost (138 against 106), at 2 MB neither won (BENCHMARKS.md
/// of 2026-11-28, 10c9a0d).
pub const SCATTER_MIN_BYTES: u64 = 1 << 20;

/// Reduce between two hosts of equal size from this size, where the count splits evenly over a
/// host's ranks, goes slice by slice (`reduce_sliced`), the mirror of the scattered Broadcast. At
/// 2 simulated hosts x 2 on H200 (us, two rounds): 4 MB 302-346 against 379-438 sent whole, 16 MB
/// 881-977 against 1223-1335, 64 MB 4530-5339 against 6715-7046 (NCCL's sockets 811-966, 3479-4080,
/// 14632-16042); at 1 MB 140-166 against 153-193, at 256 KB neither won (BENCHMARKS.md of 2026-11-28,
/// 491a903).
pub const SLICE_MIN_BYTES: u64 = 1 << 20;

/// Reduce up to this size, with at most `DIRECT_MAX_PEERS` ranks on other hosts (any number of
/// hosts): each of them sends its input to the root, so no host stage comes before their step.
/// At 2 simulated hosts x 2 this took 0.5-1 us off 256 B-1 KB, nothing at 4 KB, and added 1 us at
/// 16 KB and 10 us at 64 KB, where the root's proxy receives and combines twice the bytes
/// (BENCHMARKS.md of 2026-11-26, a205a11).
pub const REDUCE_DIRECT_MAX_BYTES: u64 = 4 << 10;

/// The stages of one collective on rank `l.me`.
pub fn plan_coll(l: &Layout, c: &Call) -> Vec<Stage> {
    let mut st = plan_all_stages(l, c);
    drop_empty(&mut st);
    st
}

fn drop_empty(st: &mut Vec<Stage>) {
    st.retain(|s| match s {
        Stage::Net(step) => !step.is_empty(),
        Stage::Local(LocalOp::P2p(v)) => !v.is_empty(),
        Stage::Local(_) => true,
    });
}

/// `plan_coll` before empty stages are dropped (the same number of stages on every rank of a
/// host).
fn plan_all_stages(l: &Layout, c: &Call) -> Vec<Stage> {
    let mut st = match c.coll {
        Coll::AllReduce => allreduce(l, c),
        Coll::ReduceScatter => reducescatter(l, c),
        Coll::Reduce => reduce(l, c),
        Coll::AllGather => allgather(l, c),
        Coll::Broadcast => broadcast(l, c),
        Coll::AlltoAll | Coll::Gather | Coll::Scatter => direct_all(l, &direct_ops(l, c)),
    };
    if l.narrow && matches!(c.coll, Coll::Broadcast | Coll::Reduce) {
        // Every rank plans the same collective with the same layout, so both ends of each
        // transfer mark it alike.
        for s in &mut st {
            if let Stage::Net(step) = s {
                step.phases.iter_mut().for_each(|p| p.narrow = true);
            }
        }
    }
    st
}

/// Collectives planned as point-to-point operations (`direct`, as `plan_all_stages` does).
pub fn is_direct(coll: Coll) -> bool {
    matches!(coll, Coll::AlltoAll | Coll::Gather | Coll::Scatter)
}

fn local_coll(coll: Coll, send: u64, recv: u64, count: u64, op: ResolvedOp, root: usize) -> Stage {
    Stage::Local(LocalOp::Coll { coll, send, recv, count, op, root })
}

/// A stage with nothing to do (dropped by `plan_coll`), keeping stage numbers equal on every host.
fn no_stage() -> Stage {
    Stage::Local(LocalOp::P2p(Vec::new()))
}

/// Whether this rank's host stage of a reduction would only copy its input (it is alone on its
/// host and the op needs no scaling there), so the step reads the input itself: one launch less.
fn solo_reduction(l: &Layout, local_op: ResolvedOp) -> bool {
    l.local_size(l.my_host()) == 1 && local_op.op != RedOp::PreMulSum
}

/// The copy from `src` to `dst`, unless they are the same range.
fn copy_if_moved(src: u64, dst: u64, bytes: u64) -> Vec<DevCopy> {
    if src == dst || bytes == 0 {
        return Vec::new();
    }
    vec![DevCopy { src, dst, bytes }]
}

/// Whether the proxy carries a phase itself: each job at most `max` bytes, and all of them together
/// at most twice that (one thread moves them one after another; larger phases go to the links'
/// threads, which move several at once).
pub fn phase_fits(ph: &Phase, max: u64) -> bool {
    // A job the phase stripes (its own threshold below the link's) travels on every lane.
    let max = if ph.stripe_min > 0 { max.min(ph.stripe_min - 1) } else { max };
    let mut total = 0u64;
    for x in ph.sends.iter().chain(&ph.recvs) {
        if x.bytes > max {
            return false;
        }
        total = total.saturating_add(x.bytes);
    }
    total <= max.saturating_mul(2)
}

#[cfg(test)]
mod by_hand;
#[cfg(test)]
mod tests;
