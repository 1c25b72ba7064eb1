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

/// Which rank lives on which host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
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

    pub fn nranks(&self) -> usize {
        self.host_of.len()
    }
    pub fn nhosts(&self) -> usize {
        self.hosts.len()
    }
    pub fn my_host(&self) -> usize {
        self.host_of[self.me]
    }
    /// Rank `r`'s index on its host (its rank in the local communicator).
    pub fn local_index(&self, r: usize) -> usize {
        self.hosts[self.host_of[r]].iter().position(|&x| x == r).unwrap_or(0)
    }
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
    Dev(u64),
    Host(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xfer {
    pub peer: usize,
    pub buf: Buf,
    pub bytes: u64,
}

/// `out = inputs[0] (op) inputs[1] (op) ...`, accumulated in the host arena at `acc`, then written
/// to `out` (a device address, or left at `acc` when `out` is `Host(acc)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostReduce {
    pub inputs: Vec<Buf>,
    pub acc: u64,
    pub out: Buf,
    pub bytes: u64,
    pub op: HostOp,
}

/// Transfers that run concurrently, then reductions once all have landed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    pub sends: Vec<Xfer>,
    pub recvs: Vec<Xfer>,
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
    pub src: u64,
    pub dst: u64,
    pub bytes: u64,
}

/// One cross-host step: phases in order, with the host arena they need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub phases: Vec<Phase>,
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
    pub is_send: bool,
    pub peer: usize,
    pub buf: u64,
    pub bytes: u64,
}

/// One stage on the local communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalOp {
    Coll { coll: Coll, send: u64, recv: u64, count: u64, op: ResolvedOp, root: usize },
    P2p(Vec<LocalP2p>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    Local(LocalOp),
    Net(Step),
}

/// One collective call as the planner takes it (`count` as NCCL's argument; `scratch` is device
/// memory of at least `scratch_bytes(...)` for ReduceScatter and Reduce).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub coll: Coll,
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub dtype: DataType,
    pub op: ResolvedOp,
    pub root: usize,
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
/// (`scripts/lab/netsim.sh`) each has its own link, as on a cluster.
pub fn hosts_apart(host_hash: &[u64], network: &[u64]) -> bool {
    let ranks = || host_hash.iter().zip(network);
    ranks().all(|(h, m)| ranks().all(|(h2, m2)| m2 != m || h2 == h))
}

/// The chains in pieces' thresholds unless set: (Broadcast, Reduce) both from `PIPELINE_MIN_APART`
/// where the hosts are apart (`hosts_apart`), never otherwise. With
/// each simulated host's link limited to 10 Gbit/s (`scripts/lab/netsim.sh`, 4 hosts x 1 on one
/// H200), a 64 MB Broadcast from the root to every host took 151 ms, in pieces 51 (NCCL's ring 56);
/// at 512 KB 718 us against 265-297 (NCCL 338-379), at 256 KB 114-199 against 165-181. On one
/// machine's loopback the pieces gain nothing (BENCHMARKS.md of 2026-11-28, f347df5, and of
/// 2026-11-29, 0ec1268). Reduce's chain, same setting: 64 MB 51 ms against 114 received by the
/// root, 1 MB 410-422 us against 759-789 (NCCL 56 ms and 422-431 us).
pub fn pipeline_defaults(apart: bool) -> (u64, u64) {
    let min = if apart { PIPELINE_MIN_APART } else { u64::MAX };
    (min, min)
}
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
pub const RING_MIN_APART: u64 = 4 << 20;

/// Whether a call whose largest buffer is `bytes` goes around the ring of hosts: three hosts or
/// more, all of one size (so rank `i` of every host forms ring `i`), from `l.ring_min`.
///
/// Across hosts with links of their own, every host sending to every other at once (the all-pairs
/// form) leaves each link carrying transfers from several senders that end unevenly: the link
/// idles while the last of them finishes, and the calls' starts drift apart from rank to rank. At
/// 4 simulated hosts x 1, 10 Gbit/s each (`scripts/lab/netsim.sh`), 64 MB AllReduce took 90-98 ms
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

fn allreduce(l: &Layout, c: &Call) -> Vec<Stage> {
    let es = c.dtype.size() as u64;
    let (local_op, hop) = split_op(c.op, c.dtype, l.nranks());
    let (me, mh, nh) = (l.me, l.my_host(), l.nhosts());
    // Where the host's partial result is: recv after the host stage, or the input itself.
    let solo = solo_reduction(l, local_op);
    let src = if solo { c.send } else { c.recv };
    let mut out = vec![if solo { no_stage() } else { local_coll(Coll::AllReduce, c.send, c.recv, c.count, local_op, 0) }];
    let bytes = c.count * es;
    if bytes <= FULL_EXCHANGE_MAX_BYTES && bytes > 0 {
        let mut step = Step::default();
        let mut ph = Phase::default();
        // My host's result to every rank that takes it from me, every other host's from my partner.
        for x in relayed_by(l, me) {
            ph.sends.push(Xfer { peer: x, buf: Buf::Dev(src), bytes });
        }
        let acc = step.host(bytes);
        let mut inputs = Vec::with_capacity(nh);
        for h in 0..nh {
            if h == mh {
                inputs.push(Buf::Dev(src));
            } else {
                let b = step.host(bytes);
                ph.recvs.push(Xfer { peer: l.partner(me, h), buf: Buf::Host(b), bytes });
                inputs.push(Buf::Host(b));
            }
        }
        ph.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(c.recv), bytes, op: hop });
        step.phases = vec![ph];
        out.push(Stage::Net(step));
        return out;
    }
    // Slice s of the locally reduced vector is combined across hosts by its owners, one per host.
    let nslices = l.hosts.iter().map(Vec::len).max().unwrap_or(1);
    let mut step = Step::default();
    if ring(l, bytes) {
        allreduce_ring(l, c, src, hop, nslices, &mut step);
    } else {
        allreduce_pairs(l, c, src, hop, nslices, &mut step);
    }
    out.push(Stage::Net(step));
    // Each slice's owner spreads the result on its host.
    if l.local_size(mh) > 1 {
        for s in 0..nslices.min(l.local_size(mh)) {
            // Slices s, s + L, s + 2L, ... share an owner here but are not contiguous: one
            // broadcast each.
            for t in (s..nslices).step_by(l.local_size(mh)) {
                let (start, len) = split(c.count, nslices, t);
                if len > 0 {
                    let p = c.recv + start * es;
                    out.push(local_coll(Coll::Broadcast, p, p, len, c.op, s));
                }
            }
        }
    }
    out
}

/// The cross-host step of a larger AllReduce, every host with every other at once: each slice's
/// owners exchange parts (reduce-scatter, one phase), combine their own part, and send it to the
/// others (all-gather, a second phase); small slices and two hosts in one round.
fn allreduce_pairs(l: &Layout, c: &Call, src: u64, hop: HostOp, nslices: usize, step: &mut Step) {
    let es = c.dtype.size() as u64;
    let (me, mh, nh) = (l.me, l.my_host(), l.nhosts());
    let (mut rs, mut ag) = (Phase::default(), Phase::default());
    for s in 0..nslices {
        if l.owner(mh, s) != me {
            continue;
        }
        let (start, len) = split(c.count, nslices, s);
        if len == 0 {
            continue;
        }
        let group: Vec<usize> = (0..nh).map(|h| l.owner(h, s)).collect();
        if nh == 2 || len * es <= ONESHOT_MAX_BYTES {
            // One round: the whole slice to every other owner, each combines all of them in host
            // order (identical results everywhere). Two hosts move the same bytes as with the
            // two-phase form, and small slices save a round trip.
            let (p, pb) = (c.recv + start * es, len * es);
            let ps = src + start * es;
            let acc = step.host(pb);
            let mut inputs = Vec::with_capacity(nh);
            for (j, &g) in group.iter().enumerate() {
                if j == mh {
                    inputs.push(Buf::Dev(ps));
                    continue;
                }
                let h = step.host(pb);
                rs.sends.push(Xfer { peer: g, buf: Buf::Dev(ps), bytes: pb });
                rs.recvs.push(Xfer { peer: g, buf: Buf::Host(h), bytes: pb });
                inputs.push(Buf::Host(h));
            }
            rs.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(p), bytes: pb, op: hop });
            continue;
        }
        let part = |j: usize| {
            let (a, n) = split(len, nh, j);
            (c.recv + (start + a) * es, n * es)
        };
        // The same part of the host's partial result.
        let part_src = |j: usize| part(j).0 - c.recv + src;
        let (mine, mbytes) = part(mh);
        let mut inputs = Vec::with_capacity(nh);
        let acc = if mbytes > 0 { step.host(mbytes) } else { 0 };
        for (j, &g) in group.iter().enumerate() {
            if j == mh {
                inputs.push(Buf::Dev(part_src(j)));
                continue;
            }
            let (p, pb) = part(j);
            if pb > 0 {
                rs.sends.push(Xfer { peer: g, buf: Buf::Dev(part_src(j)), bytes: pb });
                ag.recvs.push(Xfer { peer: g, buf: Buf::Dev(p), bytes: pb });
            }
            if mbytes > 0 {
                let h = step.host(mbytes);
                rs.recvs.push(Xfer { peer: g, buf: Buf::Host(h), bytes: mbytes });
                ag.sends.push(Xfer { peer: g, buf: Buf::Host(acc), bytes: mbytes });
                inputs.push(Buf::Host(h));
            }
        }
        if mbytes > 0 {
            rs.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(mine), bytes: mbytes, op: hop });
        }
    }
    step.phases = vec![rs, ag];
}

/// The cross-host step of a larger AllReduce around the ring of hosts (`ring`): slice `s` of the
/// locally reduced vector goes around ring `s` (rank `s` of every host) in `nh` parts. First
/// `nh - 1` phases of reduce-scatter: in phase k each owner sends its partial sum of one part to
/// the next host and combines the previous host's partial sum of another with its own, so part j
/// is complete at host j after the last; then `nh - 1` phases of all-gather, each passing on the
/// part received in the phase before. Every phase moves one part each way on one link.
fn allreduce_ring(l: &Layout, c: &Call, src: u64, hop: HostOp, nslices: usize, step: &mut Step) {
    let es = c.dtype.size() as u64;
    let (me, mh, nh) = (l.me, l.my_host(), l.nhosts());
    let mut phases = vec![Phase::default(); 2 * (nh - 1)];
    for s in (0..nslices).filter(|&s| l.owner(mh, s) == me) {
        let (start, len) = split(c.count, nslices, s);
        if len == 0 {
            continue;
        }
        let g = |h: usize| l.owner(h % nh, s);
        let (next, prev) = (g(mh + 1), g(mh + nh - 1));
        // Part j of the slice: its result range, and the same range of the host's partial result.
        let part = |j: usize| {
            let (a, n) = split(len, nh, j % nh);
            (c.recv + (start + a) * es, n * es)
        };
        let part_src = |j: usize| part(j).0 - c.recv + src;
        let carry = ring_reduce_scatter(&mut phases[..nh - 1], step, (mh, nh), (next, prev), &|j| (part_src(j), part(j).1), part(mh).0, hop);
        for (k, ph) in phases[nh - 1..].iter_mut().enumerate() {
            // Sends part mh - k (its own first), receives part mh - k - 1 into its result range.
            let ((sd, sb), (rd, rb)) = (part(mh + nh - k), part(mh + 2 * nh - k - 1));
            if sb > 0 {
                ph.sends.push(Xfer { peer: next, buf: if k == 0 { carry } else { Buf::Dev(sd) }, bytes: sb });
            }
            if rb > 0 {
                ph.recvs.push(Xfer { peer: prev, buf: Buf::Dev(rd), bytes: rb });
            }
        }
    }
    step.phases = phases;
}

fn reducescatter(l: &Layout, c: &Call) -> Vec<Stage> {
    let es = c.dtype.size() as u64;
    let bytes = c.count * es;
    let (local_op, hop) = split_op(c.op, c.dtype, l.nranks());
    let (me, mh) = (l.me, l.my_host());
    // Every rank of a host holds the host's partial sums of every block (in scratch; alone on its
    // host, the input is that).
    let solo = solo_reduction(l, local_op);
    let base = if solo { c.send } else { c.scratch };
    let mut out = vec![if solo { no_stage() } else { local_coll(Coll::AllReduce, c.send, c.scratch, c.count * l.nranks() as u64, local_op, 0) }];
    let mut step = Step::default();
    if ring(l, bytes * l.nranks() as u64) {
        // Ring i (rank i of every host) carries the blocks of its own ranks.
        let (mh, nh) = (l.my_host(), l.nhosts());
        let g = |h: usize| l.owner(h % nh, l.local_index(me));
        let mut phases = vec![Phase::default(); nh - 1];
        ring_reduce_scatter(&mut phases, &mut step, (mh, nh), (g(mh + 1), g(mh + nh - 1)), &|j| (base + g(j) as u64 * bytes, bytes), c.recv, hop);
        step.phases = phases;
        out.push(Stage::Net(step));
        return out;
    }
    let mut ph = Phase::default();
    if bytes > 0 {
        for b in 0..l.nranks() {
            if !l.same_host(b) && l.partner(b, mh) == me {
                ph.sends.push(Xfer { peer: b, buf: Buf::Dev(base + b as u64 * bytes), bytes });
            }
        }
        let mut inputs = Vec::new();
        for h in 0..l.nhosts() {
            if h == mh {
                inputs.push(Buf::Dev(base + me as u64 * bytes));
            } else {
                let buf = step.host(bytes);
                ph.recvs.push(Xfer { peer: l.partner(me, h), buf: Buf::Host(buf), bytes });
                inputs.push(Buf::Host(buf));
            }
        }
        let acc = step.host(bytes);
        ph.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(c.recv), bytes, op: hop });
    }
    step.phases.push(ph);
    out.push(Stage::Net(step));
    out
}

/// Reduce-scatter around a ring of hosts into `phases` (`nh - 1` of them), for the host
/// `mh` of `nh` whose ring neighbours are `next` and `prev`. Block j (of host j) is `block(j)`:
/// (where this host's partial result for it is on the GPU, its bytes). In phase k this host sends
/// its partial sum of block mh - 1 - k to the next host and combines the previous host's partial
/// sum of block mh - 2 - k with its own on the proxy's CPU, which in the last phase is its own
/// block, complete: written to `out` with `hop` (the integer average divided there, once).
/// Returns where the complete block also is, in the host arena, for an all-gather to send on (the
/// step kernel never combines it on its way out: `stage::on_gpu` refuses an accumulator read later).
fn ring_reduce_scatter(phases: &mut [Phase], step: &mut Step, (mh, nh): (usize, usize), (next, prev): (usize, usize), block: &dyn Fn(usize) -> (u64, u64), out: u64, hop: HostOp) -> Buf {
    let relay_op = HostOp { postdiv: 0, ..hop };
    // What the next phase sends: this host's own input for the first block it sends.
    let mut carry = Buf::Dev(block((mh + nh - 1) % nh).0);
    for (k, ph) in phases.iter_mut().enumerate() {
        let ((_, sb), (input, rb)) = (block((mh + nh - 1 - k) % nh), block((mh + 2 * nh - 2 - k) % nh));
        if sb > 0 {
            ph.sends.push(Xfer { peer: next, buf: carry, bytes: sb });
        }
        if rb > 0 {
            let (buf, acc) = (step.host(rb), step.host(rb));
            ph.recvs.push(Xfer { peer: prev, buf: Buf::Host(buf), bytes: rb });
            let (to, op) = if k == nh - 2 { (Buf::Dev(out), hop) } else { (Buf::Host(acc), relay_op) };
            ph.reduces.push(HostReduce { inputs: vec![Buf::Dev(input), Buf::Host(buf)], acc, out: to, bytes: rb, op });
            carry = Buf::Host(acc);
        }
    }
    carry
}

fn reduce(l: &Layout, c: &Call) -> Vec<Stage> {
    let es = c.dtype.size() as u64;
    let bytes = c.count * es;
    let (local_op, hop) = split_op(c.op, c.dtype, l.nranks());
    let (me, mh, root) = (l.me, l.my_host(), c.root);
    let rh = l.host_of[root];
    // Few ranks on other hosts and a small message: each of them sends its own input to the root,
    // at once, instead of reducing on its host first and sending through its representative. The
    // root combines its host's partial result with their inputs. Not for a scaling op (PreMulSum,
    // float average), whose scaling the host stage applies.
    let remote = l.nranks() - l.local_size(rh);
    if bytes > 0 && bytes <= REDUCE_DIRECT_MAX_BYTES && remote <= DIRECT_MAX_PEERS && local_op.op != RedOp::PreMulSum {
        return reduce_direct(l, c, local_op, hop);
    }
    if let Some(n) = reduce_slices(l, c) {
        return reduce_sliced(l, c, local_op, hop, n);
    }
    if l.nhosts() > 2 && bytes > 0 && bytes >= l.reduce_pipeline_min {
        return reduce_chained(l, c, local_op, hop);
    }
    // Each host reduces to its representative: the root itself, or the root's partner.
    let rep = |h: usize| if h == rh { root } else { l.partner(root, h) };
    let dst = if me == root { c.recv } else { c.scratch };
    // Where the host's partial result is on its representative (alone on its host: the input).
    let solo = solo_reduction(l, local_op);
    let part = if solo { c.send } else { dst };
    let mut out = vec![if solo { no_stage() } else { local_coll(Coll::Reduce, c.send, dst, c.count, local_op, l.local_index(rep(mh))) }];
    let mut step = Step::default();
    let mut ph = Phase::default();
    if bytes > 0 {
        if me == root {
            let mut inputs = Vec::new();
            for h in 0..l.nhosts() {
                if h == rh {
                    inputs.push(Buf::Dev(part));
                } else {
                    let buf = step.host(bytes);
                    ph.recvs.push(Xfer { peer: rep(h), buf: Buf::Host(buf), bytes });
                    inputs.push(Buf::Host(buf));
                }
            }
            let acc = step.host(bytes);
            ph.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(c.recv), bytes, op: hop });
        } else if mh != rh && rep(mh) == me {
            ph.sends.push(Xfer { peer: root, buf: Buf::Dev(part), bytes });
        }
    }
    step.phases.push(ph);
    out.push(Stage::Net(step));
    out
}

/// How many slices a Reduce goes in (`reduce_sliced`): two hosts of the same size n >= 2, at least
/// `l.reduce_slice_min` bytes, and a count that n divides; None otherwise.
fn reduce_slices(l: &Layout, c: &Call) -> Option<u64> {
    let bytes = c.count * c.dtype.size() as u64;
    let n = l.local_size(0) as u64;
    let fits = l.nhosts() == 2 && n >= 2 && l.local_size(1) as u64 == n && bytes > 0 && bytes >= l.reduce_slice_min;
    (fits && c.count.is_multiple_of(n)).then_some(n)
}

/// Reduce between two hosts of n ranks each, slice by slice: each host reduce-scatters its inputs
/// into n slices; rank k of the other host sends its slice to rank k of the root's host, which
/// combines the two; the root gathers the combined slices. n proxies, links and copy streams carry
/// the message at once, as in a scattered Broadcast (`SCATTER_MIN_BYTES`), instead of one
/// representative sending it whole to the root.
fn reduce_sliced(l: &Layout, c: &Call, local_op: ResolvedOp, hop: HostOp, n: u64) -> Vec<Stage> {
    let es = c.dtype.size() as u64;
    let slice = c.count / n;
    let sb = slice * es;
    let (me, mh, root) = (l.me, l.my_host(), c.root);
    let rh = l.host_of[root];
    let k = l.local_index(me);
    // This rank's slice of its host's partial result; the root's lies where the result goes.
    let mine = if me == root { c.recv + k as u64 * sb } else { c.scratch };
    let scatter = local_coll(Coll::ReduceScatter, c.send, mine, slice, local_op, 0);
    let mut step = Step::default();
    let mut ph = Phase::default();
    if mh != rh {
        ph.sends.push(Xfer { peer: l.owner(rh, k), buf: Buf::Dev(mine), bytes: sb });
        step.phases.push(ph);
        return vec![scatter, Stage::Net(step), no_stage()];
    }
    let b = step.host(sb);
    ph.recvs.push(Xfer { peer: l.owner(1 - rh, k), buf: Buf::Host(b), bytes: sb });
    // Host order, as every cross-host combination.
    let inputs = if rh == 0 { vec![Buf::Dev(mine), Buf::Host(b)] } else { vec![Buf::Host(b), Buf::Dev(mine)] };
    let acc = step.host(sb);
    ph.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(mine), bytes: sb, op: hop });
    step.phases.push(ph);
    vec![scatter, Stage::Net(step), local_coll(Coll::Gather, mine, c.recv, slice, c.op, l.local_index(root))]
}

/// Reduce across three hosts or more along the chain of hosts that ends at the root's, in pieces
/// (`chain_piece_bytes`), the mirror of a Broadcast's chain: each host reduces to its
/// representative, the first host's representative sends its partial result piece by piece, and each
/// representative after it combines a piece with its own and passes the result on in the next
/// phase, while the next piece arrives. Every host's link then carries the message once, where
/// the root receiving from every host loads its link once per other host. The root combines last,
/// into its output. Combined in chain order (deterministic; a Reduce's result is the root's alone).
fn reduce_chained(l: &Layout, c: &Call, local_op: ResolvedOp, hop: HostOp) -> Vec<Stage> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, mh, root) = (l.me, l.my_host(), c.root);
    let (rh, nh) = (l.host_of[root], l.nhosts());
    let rep = |h: usize| if h == rh { root } else { l.partner(root, h) };
    let dst = if me == root { c.recv } else { c.scratch };
    let solo = solo_reduction(l, local_op);
    let part = if solo { c.send } else { dst };
    let local = if solo { no_stage() } else { local_coll(Coll::Reduce, c.send, dst, c.count, local_op, l.local_index(rep(mh))) };
    let mut step = Step::default();
    if me == rep(mh) {
        // Hops from the root's host: data flows from `nh - 1` (the first) down to 0 (the root's).
        let d = (mh + nh - rh) % nh;
        let at = |k: usize| rep((rh + k) % nh);
        let pieces = pieces_of(bytes, chain_piece_bytes(bytes));
        // The integer average's division once, at the root.
        let relay_op = HostOp { postdiv: 0, ..hop };
        // Phase j: receive piece j and combine it (none on the first host), and send piece j - 1
        // on (piece j on the first host, which has its pieces at once; none on the root's).
        let lag = usize::from(d + 1 < nh);
        let mut phases: Vec<Phase> = (0..pieces.len() + lag).map(|_| Phase::default()).collect();
        for (i, &(off, n)) in pieces.iter().enumerate() {
            let mut out = Buf::Dev(part + off);
            if d + 1 < nh {
                let got = step.host(n);
                phases[i].recvs.push(Xfer { peer: at(d + 1), buf: Buf::Host(got), bytes: n });
                let acc = step.host(n);
                out = if d == 0 { Buf::Dev(c.recv + off) } else { Buf::Host(acc) };
                let op = if d == 0 { hop } else { relay_op };
                phases[i].reduces.push(HostReduce { inputs: vec![Buf::Dev(part + off), Buf::Host(got)], acc, out, bytes: n, op });
            }
            if d > 0 {
                phases[i + lag].sends.push(Xfer { peer: at(d - 1), buf: out, bytes: n });
            }
        }
        phases.retain(|p| !p.sends.is_empty() || !p.recvs.is_empty());
        step.phases = phases;
    }
    vec![local, Stage::Net(step)]
}

/// Reduce with every rank of the other hosts sending its input straight to the root (`reduce`
/// says when). Only the root's host has a host stage; the inputs are combined in rank order.
fn reduce_direct(l: &Layout, c: &Call, local_op: ResolvedOp, hop: HostOp) -> Vec<Stage> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, mh, root) = (l.me, l.my_host(), c.root);
    let rh = l.host_of[root];
    let mut step = Step::default();
    let mut ph = Phase::default();
    if mh != rh {
        ph.sends.push(Xfer { peer: root, buf: Buf::Dev(c.send), bytes });
        step.phases.push(ph);
        return vec![no_stage(), Stage::Net(step)];
    }
    // The root's host reduces to the root first (alone there, its input is that result).
    let solo = solo_reduction(l, local_op);
    let local = if solo { no_stage() } else { local_coll(Coll::Reduce, c.send, c.recv, c.count, local_op, l.local_index(root)) };
    if me == root {
        let mut inputs = vec![Buf::Dev(if solo { c.send } else { c.recv })];
        for r in (0..l.nranks()).filter(|&r| l.host_of[r] != rh) {
            let buf = step.host(bytes);
            ph.recvs.push(Xfer { peer: r, buf: Buf::Host(buf), bytes });
            inputs.push(Buf::Host(buf));
        }
        let acc = step.host(bytes);
        ph.reduces.push(HostReduce { inputs, acc, out: Buf::Dev(c.recv), bytes, op: hop });
    }
    step.phases.push(ph);
    vec![local, Stage::Net(step)]
}

/// Blocks of other hosts' ranks that `r` receives from across hosts (its partner role).
fn relayed_by(l: &Layout, r: usize) -> impl Iterator<Item = usize> + '_ {
    let h = l.host_of[r];
    (0..l.nranks()).filter(move |&x| l.host_of[x] != h && l.partner(x, h) == r)
}

fn allgather(l: &Layout, c: &Call) -> Vec<Stage> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, mh) = (l.me, l.my_host());
    let at = |r: usize| c.recv + r as u64 * bytes;
    if bytes == 0 {
        return Vec::new();
    }
    let phases = if ring(l, bytes * l.nranks() as u64) {
        // Around the ring of hosts (`ring`): in phase k the block of host mh - k goes to the next
        // host (my own first) and the block of host mh - k - 1 arrives; the same blocks as below.
        let nh = l.nhosts();
        let g = |h: usize| l.owner(h % nh, l.local_index(me));
        (0..nh - 1)
            .map(|k| Phase {
                sends: vec![Xfer { peer: g(mh + 1), buf: Buf::Dev(if k == 0 { c.send } else { at(g(mh + nh - k)) }), bytes }],
                recvs: vec![Xfer { peer: g(mh + nh - 1), buf: Buf::Dev(at(g(mh + 2 * nh - k - 1))), bytes }],
                ..Default::default()
            })
            .collect()
    } else {
        // Across hosts: my block to my partner on every other host; the blocks I relay arrive.
        let mut ph = Phase::default();
        for h in (0..l.nhosts()).filter(|&h| h != mh) {
            ph.sends.push(Xfer { peer: l.partner(me, h), buf: Buf::Dev(c.send), bytes });
        }
        for r in relayed_by(l, me) {
            ph.recvs.push(Xfer { peer: r, buf: Buf::Dev(at(r)), bytes });
        }
        vec![ph]
    };
    let mut step = Step { phases, ..Default::default() };
    if l.local_size(mh) == 1 {
        // Alone on the host: the only local work is my own block's copy.
        step.copies = copy_if_moved(c.send, at(me), bytes);
        return vec![Stage::Net(step), no_stage()];
    }
    // On the host: my block and the ones I relayed to every local peer; theirs from them.
    let mut ops = Vec::new();
    let mine: Vec<usize> = std::iter::once(me).chain(relayed_by(l, me)).collect::<Vec<_>>();
    let mut mine = mine;
    mine.sort_unstable();
    for (lp, &p) in l.hosts[mh].iter().enumerate() {
        if p == me {
            continue;
        }
        for &b in &mine {
            ops.push(LocalP2p { is_send: true, peer: lp, buf: if b == me { c.send } else { at(b) }, bytes });
        }
        let mut theirs: Vec<usize> = std::iter::once(p).chain(relayed_by(l, p)).collect();
        theirs.sort_unstable();
        for b in theirs {
            ops.push(LocalP2p { is_send: false, peer: lp, buf: at(b), bytes });
        }
    }
    if c.send != at(me) {
        let lme = l.local_index(me);
        ops.push(LocalP2p { is_send: true, peer: lme, buf: c.send, bytes });
        ops.push(LocalP2p { is_send: false, peer: lme, buf: at(me), bytes });
    }
    vec![Stage::Net(step), Stage::Local(LocalOp::P2p(ops))]
}

fn broadcast(l: &Layout, c: &Call) -> Vec<Stage> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, mh, root) = (l.me, l.my_host(), c.root);
    let (rh, nh) = (l.host_of[root], l.nhosts());
    // The rank that stands for host h: the root, or its partner there.
    let rep = |h: usize| if h == rh { root } else { l.partner(root, h) };
    let mut phases = vec![Phase::default()];
    // Two hosts, a small message and few ranks on the other host: the root sends to each of them,
    // so no host stage follows there.
    let direct = nh == 2 && bytes <= l.bcast_direct_max && l.nranks() - l.local_size(rh) <= DIRECT_MAX_PEERS;
    // Two hosts, a larger message and equal slices for every rank of the other host: scattered
    // to them, then gathered there (each slice's bytes).
    let scatter = (nh == 2 && !direct && bytes > 0 && bytes >= l.bcast_scatter_min)
        .then(|| l.local_size(1 - rh) as u64)
        .filter(|&n| n > 1 && c.count.is_multiple_of(n))
        .map(|n| bytes / n);
    if bytes > 0 && direct {
        if me == root {
            for &r in l.hosts.iter().enumerate().filter(|&(h, _)| h != rh).flat_map(|(_, v)| v) {
                phases[0].sends.push(Xfer { peer: r, buf: Buf::Dev(c.send), bytes });
            }
        } else if mh != rh {
            phases[0].recvs.push(Xfer { peer: root, buf: Buf::Dev(c.recv), bytes });
        }
    } else if let Some(slice) = scatter {
        // Each rank of the other host receives its own slice; several proxies and sockets carry
        // the message at once, and the host stage gathers the slices.
        phases[0].stripe_min = l.bcast_stripe_min;
        let oh = 1 - rh;
        if me == root {
            for (k, &r) in l.hosts[oh].iter().enumerate() {
                phases[0].sends.push(Xfer { peer: r, buf: Buf::Dev(c.send + k as u64 * slice), bytes: slice });
            }
        } else if mh == oh {
            let k = l.local_index(me) as u64;
            phases[0].recvs.push(Xfer { peer: root, buf: Buf::Dev(c.recv + k * slice), bytes: slice });
        }
    } else if bytes > 0 && nh > 2 && (bytes <= l.bcast_chain_max || bytes >= l.bcast_pipeline_min) {
        // Along a chain of the hosts from the root's: each representative receives from the one
        // before and passes it on, so no proxy sends more than once per call. From
        // `bcast_pipeline_min` in pieces: a relay passes piece i on while piece i + 1 arrives,
        // so every host's link carries the message once, at about the pace of one link.
        let pos = (mh + nh - rh) % nh;
        let at = |k: usize| rep((rh + k) % nh);
        if me == rep(mh) {
            let pieces = pieces_of(bytes, if bytes >= l.bcast_pipeline_min { chain_piece_bytes(bytes) } else { bytes });
            let src = if me == root { c.send } else { c.recv };
            // Phase j: receive piece j (but on the root) and send piece j - 1 (piece j on the
            // root, which has it all; none on the last host).
            let lag = usize::from(pos > 0);
            phases = (0..pieces.len() + lag).map(|_| Phase::default()).collect();
            for (i, &(off, n)) in pieces.iter().enumerate() {
                if pos > 0 {
                    phases[i].recvs.push(Xfer { peer: at(pos - 1), buf: Buf::Dev(c.recv + off), bytes: n });
                }
                if pos + 1 < nh {
                    phases[i + lag].sends.push(Xfer { peer: at(pos + 1), buf: Buf::Dev(src + off), bytes: n });
                }
            }
            phases.retain(|p| !p.sends.is_empty() || !p.recvs.is_empty());
        }
    } else if bytes > 0 {
        // The root's phase and each representative's carry the same job: one stripe threshold.
        phases[0].stripe_min = l.bcast_stripe_min;
        if me == root {
            for h in (0..nh).filter(|&h| h != rh) {
                phases[0].sends.push(Xfer { peer: rep(h), buf: Buf::Dev(c.send), bytes });
            }
        } else if mh != rh && rep(mh) == me {
            phases[0].recvs.push(Xfer { peer: root, buf: Buf::Dev(c.recv), bytes });
        }
    }
    let local_root = rep(mh);
    let send = if me == root { c.send } else { c.recv };
    if l.local_size(mh) == 1 || (direct && mh != rh) {
        // Alone on the host, or every rank here received from the root itself: the host stage is
        // the root's copy to its output, or nothing.
        let copies = copy_if_moved(send, c.recv, bytes);
        return vec![Stage::Net(Step { phases, copies, ..Default::default() }), no_stage()];
    }
    let local = match scatter {
        Some(slice) if mh != rh => {
            let n = l.local_size(mh) as u64;
            local_coll(Coll::AllGather, c.recv + l.local_index(me) as u64 * slice, c.recv, c.count / n, c.op, 0)
        }
        _ => local_coll(Coll::Broadcast, send, c.recv, c.count, c.op, l.local_index(local_root)),
    };
    vec![Stage::Net(Step { phases, ..Default::default() }), local]
}

/// Point-to-point operations with global peers (rank `me` may appear: a copy to self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2p {
    pub is_send: bool,
    pub peer: usize,
    pub buf: u64,
    pub bytes: u64,
}

fn direct_ops(l: &Layout, c: &Call) -> Vec<P2p> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, n, root) = (l.me, l.nranks(), c.root);
    let mut v = Vec::new();
    let pair = |v: &mut Vec<P2p>, peer: usize, send: u64, recv: u64| {
        v.push(P2p { is_send: true, peer, buf: send, bytes });
        v.push(P2p { is_send: false, peer, buf: recv, bytes });
    };
    match c.coll {
        Coll::AlltoAll => {
            for p in 0..n {
                pair(&mut v, p, c.send + p as u64 * bytes, c.recv + p as u64 * bytes);
            }
        }
        Coll::Gather if me == root => {
            for p in 0..n {
                if p == me {
                    pair(&mut v, p, c.send, c.recv + p as u64 * bytes);
                } else {
                    v.push(P2p { is_send: false, peer: p, buf: c.recv + p as u64 * bytes, bytes });
                }
            }
        }
        Coll::Gather => v.push(P2p { is_send: true, peer: root, buf: c.send, bytes }),
        Coll::Scatter if me == root => {
            for p in 0..n {
                if p == me {
                    pair(&mut v, p, c.send + p as u64 * bytes, c.recv);
                } else {
                    v.push(P2p { is_send: true, peer: p, buf: c.send + p as u64 * bytes, bytes });
                }
            }
        }
        Coll::Scatter => v.push(P2p { is_send: false, peer: root, buf: c.recv, bytes }),
        _ => {}
    }
    v
}

/// Point-to-point operations split by where the peer lives: the local communicator first (one
/// launch), then one step across hosts. Order per peer and direction is kept, so matching is NCCL's.
pub fn direct(l: &Layout, ops: &[P2p]) -> Vec<Stage> {
    let mut st = direct_all(l, ops);
    drop_empty(&mut st);
    st
}

/// `direct`'s two stages when both have work, as (local operations, cross-host step); else the
/// stages back. The two touch different peers' buffers (each operation is in one or the other),
/// so the step may be in flight while the local launch runs (OXCCL_NET_P2P_OVERLAP).
pub fn split_direct(stages: Vec<Stage>) -> std::result::Result<(Vec<LocalP2p>, Step), Vec<Stage>> {
    match <[Stage; 2]>::try_from(stages) {
        Ok([Stage::Local(LocalOp::P2p(v)), Stage::Net(step)]) if !v.is_empty() && !step.is_empty() => Ok((v, step)),
        Ok(two) => Err(two.into()),
        Err(other) => Err(other),
    }
}

/// `direct` before empty stages are dropped.
fn direct_all(l: &Layout, ops: &[P2p]) -> Vec<Stage> {
    let mut local = Vec::new();
    let mut ph = Phase::default();
    for o in ops {
        if o.bytes == 0 && o.peer != l.me {
            // Zero-byte operations still match on the local communicator; across hosts there is
            // nothing to move (both sides skip them alike).
            if !l.same_host(o.peer) {
                continue;
            }
        }
        if l.same_host(o.peer) {
            local.push(LocalP2p { is_send: o.is_send, peer: l.local_index(o.peer), buf: o.buf, bytes: o.bytes });
        } else {
            let x = Xfer { peer: o.peer, buf: Buf::Dev(o.buf), bytes: o.bytes };
            if o.is_send {
                ph.sends.push(x);
            } else {
                ph.recvs.push(x);
            }
        }
    }
    let mut step = Step { phases: vec![ph], ..Default::default() };
    if l.local_size(l.my_host()) == 1 {
        // Alone on the host, every local operation is with myself: the i-th send to self goes to
        // the i-th receive from self (as enqueue::launch_p2p pairs them), made by the step. A
        // group that does not pair up stays local, to be refused there with NCCL's error.
        let (s, r): (Vec<&LocalP2p>, Vec<&LocalP2p>) = local.iter().partition(|o| o.is_send);
        if s.len() == r.len() && s.iter().zip(&r).all(|(a, b)| a.bytes == b.bytes) {
            step.copies = s.iter().zip(&r).flat_map(|(a, b)| copy_if_moved(a.buf, b.buf, a.bytes)).collect();
            local.clear();
        }
    }
    vec![Stage::Local(LocalOp::P2p(local)), Stage::Net(step)]
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
mod tests {
    use super::*;

    #[test]
    fn a_phase_fits_by_each_job_and_by_its_total() {
        let x = |bytes| Xfer { peer: 1, buf: Buf::Host(0), bytes };
        let ph = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Phase { sends, recvs, reduces: vec![], stripe_min: 0, narrow: false };
        assert!(phase_fits(&ph(vec![x(100)], vec![x(100)]), 100));
        assert!(!phase_fits(&ph(vec![x(101)], vec![]), 100));
        assert!(!phase_fits(&ph(vec![x(100), x(100)], vec![x(1)]), 100), "201 bytes in all");
        assert!(phase_fits(&ph(vec![], vec![]), 0));
        assert!(!phase_fits(&ph(vec![x(1)], vec![]), 0));
        // A phase that stripes from 64 bytes: its 64-byte job goes to the lanes, not inline.
        let striped = |n: u64| Phase { stripe_min: 64, ..ph(vec![x(n)], vec![]) };
        assert!(phase_fits(&striped(63), 100));
        assert!(!phase_fits(&striped(64), 100));
    }

    #[test]
    fn split_direct_takes_only_a_local_launch_and_a_step_with_work() {
        // 2 hosts x 2: rank 1 receives from rank 0 (same host) and sends to rank 2 (the other).
        let l = Layout::new(1, &[7, 7, 9, 9]);
        let ops = [P2p { is_send: false, peer: 0, buf: 0x100, bytes: 64 }, P2p { is_send: true, peer: 2, buf: 0x200, bytes: 64 }];
        let (local, step) = split_direct(direct(&l, &ops)).expect("both stages have work");
        assert_eq!(local, vec![LocalP2p { is_send: false, peer: 0, buf: 0x100, bytes: 64 }]);
        assert_eq!(step.phases[0].sends.len(), 1);
        assert_eq!(step.phases[0].sends[0].peer, 2);
        // Only one of them: the stages come back unchanged.
        for one in [&ops[..1], &ops[1..]] {
            let st = direct(&l, one);
            assert_eq!(split_direct(st.clone()), Err(st));
        }
        // Any other shape (a collective's plan) comes back too.
        let st = vec![Stage::Net(Step::default()), Stage::Local(LocalOp::P2p(vec![LocalP2p { is_send: true, peer: 0, buf: 0, bytes: 8 }]))];
        assert_eq!(split_direct(st.clone()), Err(st));
    }

    fn sum() -> ResolvedOp {
        ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 }
    }

    fn call(coll: Coll, count: u64, root: usize) -> Call {
        Call { coll, send: 0x1000_0000, recv: 0x2000_0000, count, dtype: DataType::Float32, op: sum(), root, scratch: 0x3000_0000 }
    }

    fn layouts() -> Vec<Vec<u64>> {
        vec![vec![7, 7, 9, 9], vec![1, 2, 3, 4], vec![5, 6, 5], vec![3, 3, 3, 8], vec![1, 2, 2, 1, 3], vec![4, 4, 4, 6, 6, 6], vec![2, 1, 3], vec![1, 1, 2, 3, 2, 3]]
    }

    fn steps(st: &[Stage]) -> Vec<&Step> {
        st.iter().filter_map(|s| if let Stage::Net(x) = s { Some(x) } else { None }).collect()
    }

    /// A Broadcast along the chain of hosts in pieces: a relay passes piece i on in the phase after
    /// it arrives, each host's link carries the message once, and every rank ends with the root's
    /// input (several uneven pieces, every root, in place or not, staged or not).
    #[test]
    fn broadcasts_along_the_chain_in_pieces() {
        let count = (3 * CHAIN_PIECE_MIN + 1000) / 8 + 3;
        let bytes = count * 8;
        let piece = chain_piece_bytes(bytes);
        assert_eq!((bytes.div_ceil(piece), piece % 16), (3, 0), "three pieces, the last shorter");
        assert_eq!((1u64 << 30).div_ceil(chain_piece_bytes(1 << 30)), CHAIN_PIECES_MAX);
        // 4 x 1, root 1: 1 -> 2 -> 3 -> 0. Rank 2 receives piece i in phase i and sends it on in
        // phase i + 1; the root sends piece i in phase i; rank 0 only receives.
        let hashes = [1, 2, 3, 4];
        let lay = |me| Layout { bcast_pipeline_min: 1 << 20, ..Layout::new(me, &hashes) };
        // `call` is float: the same bytes as `count` int64s, which the simulation below moves.
        let phases = |me| steps(&plan_coll(&lay(me), &call(Coll::Broadcast, bytes / 4, 1)))[0].phases.clone();
        let relay = phases(2);
        assert_eq!(relay.len(), 4);
        for (j, ph) in relay.iter().enumerate() {
            assert_eq!(ph.recvs.iter().map(|x| x.peer).collect::<Vec<_>>(), if j < 3 { vec![1] } else { vec![] });
            assert_eq!(ph.sends.iter().map(|x| x.peer).collect::<Vec<_>>(), if j > 0 { vec![3] } else { vec![] });
            if j > 0 {
                assert_eq!(ph.sends[0].buf, relay[j - 1].recvs[0].buf, "phase {j} passes on what phase {} received", j - 1);
            }
        }
        let sent = |me| phases(me).iter().flat_map(|p| p.sends.iter().map(|x| x.bytes)).sum::<u64>();
        assert_eq!((sent(1), sent(2), sent(3), sent(0)), (bytes, bytes, bytes, 0));
        assert_eq!(phases(0).len(), 3);
        // Below the threshold (and above `bcast_chain_max`) the root still sends to every host.
        let st = plan_coll(&lay(1), &call(Coll::Broadcast, (1 << 20) / 4 - 1, 1));
        assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![0, 2, 3]);
        for hashes in [vec![1u64, 2, 3, 4], vec![1, 2, 3], vec![3, 3, 5, 5, 7], vec![8, 9, 8, 10, 9]] {
            let n = hashes.len();
            let input = |r: usize| -> Vec<i64> { (0..count as i64).map(|i| (r as i64 + 1) * 1_000_000_000 + i).collect() };
            for root in 0..n {
                for (inplace, staged) in [(false, None), (true, None), (false, Some(u64::MAX)), (true, Some(1))] {
                    let got = simulate(&hashes, Coll::Broadcast, count, root, inplace, staged, true, &input);
                    for (r, got) in got.iter().enumerate() {
                        assert!(*got == input(root), "{hashes:?} root {root} rank {r} in-place {inplace} staged {staged:?}");
                    }
                }
            }
        }
    }

    /// A Reduce along the chain of hosts in pieces: the first host sends piece i in phase i, a relay
    /// combines piece i in phase i and passes the result on in phase i + 1, the root combines into
    /// its output; every link carries the message once, and only the root divides an integer
    /// average.
    #[test]
    fn reduces_along_the_chain_in_pieces() {
        let bytes = 3 * CHAIN_PIECE_MIN;
        // 4 x 1, root 1: 0 -> 3 -> 2 -> 1 (hops from the root's host: 3, 2, 1, 0).
        let hashes = [1, 2, 3, 4];
        let lay = |me| Layout { reduce_pipeline_min: 1 << 20, ..Layout::new(me, &hashes) };
        let mut c = call(Coll::Reduce, bytes / 4, 1);
        c.dtype = DataType::Int32;
        c.op = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
        let phases = |me| steps(&plan_coll(&lay(me), &c))[0].phases.clone();
        let peers = |v: &[Xfer]| v.iter().map(|x| x.peer).collect::<Vec<_>>();
        let (first, relay, last, root) = (phases(0), phases(3), phases(2), phases(1));
        assert_eq!(first.len(), 3);
        assert!(first.iter().all(|p| peers(&p.sends) == [3] && p.recvs.is_empty() && p.reduces.is_empty()));
        assert!(last.iter().all(|p| p.reduces.iter().all(|r| r.op.postdiv == 0)));
        assert_eq!((relay.len(), last.len(), root.len()), (4, 4, 3));
        for (j, ph) in relay.iter().enumerate() {
            assert_eq!(peers(&ph.recvs), if j < 3 { vec![0] } else { vec![] });
            assert_eq!(peers(&ph.sends), if j > 0 { vec![2] } else { vec![] });
            if j > 0 {
                assert_eq!(ph.sends[0].buf, relay[j - 1].reduces[0].out, "phase {j} passes on what phase {} combined", j - 1);
                assert_eq!(ph.sends[0].buf, Buf::Host(relay[j - 1].reduces[0].acc));
            }
            assert!(ph.reduces.iter().all(|r| r.op.postdiv == 0));
        }
        for (j, ph) in root.iter().enumerate() {
            assert_eq!((peers(&ph.recvs), ph.sends.len()), (vec![2], 0));
            assert_eq!(ph.reduces[0].out, Buf::Dev(c.recv + j as u64 * CHAIN_PIECE_MIN));
            assert_eq!(ph.reduces[0].op.postdiv, 4, "the root divides the integer average");
        }
        let sent = |me| phases(me).iter().flat_map(|p| p.sends.iter().map(|x| x.bytes)).sum::<u64>();
        assert_eq!((sent(0), sent(3), sent(2), sent(1)), (bytes, bytes, bytes, 0));
        // Below the threshold the root receives from every host at once.
        c.count = (1 << 20) / 4 - 4;
        let st = plan_coll(&lay(1), &c);
        assert_eq!(steps(&st)[0].phases.len(), 1);
        assert_eq!(peers(&steps(&st)[0].phases[0].recvs), vec![0, 2, 3]);
        // Two hosts never chain.
        let two = Layout { reduce_pipeline_min: 1, ..Layout::new(0, &[1, 2]) };
        assert_eq!(steps(&plan_coll(&two, &call(Coll::Reduce, bytes / 4, 1)))[0].phases.len(), 1);
    }

    /// Hosts are apart only when no machine holds ranks of two of them; only then do the chains in
    /// pieces start by default.
    #[test]
    fn chains_in_pieces_by_default_only_between_machines() {
        assert!(hosts_apart(&[1, 2, 3], &[7, 8, 9]));
        assert!(hosts_apart(&[1, 1, 2, 2], &[7, 7, 8, 8]));
        assert!(!hosts_apart(&[1, 2, 3], &[7, 7, 7]), "simulated hosts on one machine");
        assert!(!hosts_apart(&[1, 1, 2, 3], &[7, 8, 8, 9]), "hosts 1 and 2 share machine 8");
        assert_eq!(pipeline_defaults(false), (u64::MAX, u64::MAX));
        assert_eq!(pipeline_defaults(true), (PIPELINE_MIN_APART, PIPELINE_MIN_APART));
        assert_eq!(Layout::new(0, &[1, 2, 3]).reduce_pipeline_min, u64::MAX);
    }

    /// Every collective's staged steps fit the step kernel's copy slots (device_abi::OX_NET_COPIES)
    /// up to 16 hosts of 8 and 64 hosts of 1, so none needs the extra copy launches of a step with
    /// more (net/mod.rs, `overflow`). AlltoAll, Gather and Scatter need contiguous slices joined
    /// for that (at 8 x 8, 112 copies a step otherwise).
    #[test]
    fn staged_collectives_fit_the_step_kernels_copy_slots() {
        let slots = crate::device_abi::OX_NET_COPIES;
        for (h, l) in [(2usize, 1usize), (2, 8), (3, 8), (4, 1), (4, 8), (8, 1), (8, 8), (16, 8), (33, 1), (64, 1)] {
            let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
            for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
                // Broadcast and Reduce also along the chain in pieces (up to `CHAIN_PIECES_MAX` a relay).
                let pipes: &[u64] = if matches!(coll, Coll::Broadcast | Coll::Reduce) { &[u64::MAX, 1] } else { &[u64::MAX] };
                for (count, &pipe) in [1u64, 1000, 1 << 20, 1 << 26].into_iter().flat_map(|c| pipes.iter().map(move |p| (c, p))) {
                    for me in 0..h * l {
                        let st = plan_all_stages(&Layout { bcast_pipeline_min: pipe, reduce_pipeline_min: pipe, ..Layout::new(me, &hashes) }, &call(coll, count, 0));
                        for s in steps(&st) {
                            let carries = s.phases.iter().any(|p| !p.sends.is_empty() || !p.recvs.is_empty());
                            let Some(x) = crate::net::stage::stage_on_host(s, u64::MAX, usize::MAX, u64::MAX) else {
                                assert!(!carries, "{h} x {l} {coll:?} count {count} rank {me}: a step that carries data is not staged");
                                continue;
                            };
                            let n = x.pre.len() + x.post.len() + x.step.copies.len();
                            assert!(n <= slots, "{h} x {l} {coll:?} count {count} rank {me}: {n} copies");
                        }
                    }
                }
            }
        }
    }

    /// Every collective's host-local point-to-point stage, cut into launches as enqueue::launch_p2p
    /// cuts it on the host communicator (algo::batches), fits each launch's limits up to 16 hosts
    /// of 8; both ends of every local pair cut alike. Uncut, AllGather's stage from 6 hosts of 8
    /// holds more sends than one launch (a rank's block and the 5 it relays to each of 7 peers).
    #[test]
    fn local_stages_cut_into_launches_that_fit() {
        use crate::algo::batches::p2p_batches;
        use crate::device_abi::{OX_MAX_COPIES, OX_MAX_XFERS};
        let mut most = 0;
        for (h, l) in [(2usize, 2usize), (2, 8), (4, 8), (6, 8), (8, 8), (16, 8), (3, 5)] {
            let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
            for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
                // Per global rank: its local stages' operations, and the launch of each.
                let per_rank: Vec<Vec<(Vec<LocalP2p>, Vec<usize>)>> = (0..h * l)
                    .map(|me| {
                        let lay = Layout::new(me, &hashes);
                        let st = plan_all_stages(&lay, &call(coll, 1000, 0));
                        st.iter()
                            .filter_map(|s| if let Stage::Local(LocalOp::P2p(v)) = s { Some(v.clone()) } else { None })
                            .map(|v| {
                                let b = p2p_batches(lay.local_index(me), l, v.iter().map(|o| (o.is_send, o.peer)));
                                (v, b)
                            })
                            .collect()
                    })
                    .collect();
                for (me, stages) in per_rank.iter().enumerate() {
                    let lme = me % l;
                    for (k, (ops, b)) in stages.iter().enumerate() {
                        most = most.max(ops.iter().filter(|o| o.is_send && o.peer != lme).count());
                        for j in 0..=b.iter().copied().max().unwrap_or(0) {
                            let part = || ops.iter().zip(b).filter(move |(_, &x)| x == j).map(|(o, _)| o);
                            assert!(part().filter(|o| o.is_send && o.peer != lme).count() <= OX_MAX_XFERS, "{h} x {l} {coll:?} rank {me}");
                            assert!(part().filter(|o| !o.is_send && o.peer != lme).count() <= OX_MAX_XFERS, "{h} x {l} {coll:?} rank {me}");
                            assert!(part().filter(|o| o.is_send && o.peer == lme).count() <= OX_MAX_COPIES, "{h} x {l} {coll:?} rank {me}");
                        }
                        // The k-th message to a local peer sits in the same launch on both ends.
                        let host0 = me - lme;
                        for lp in (0..l).filter(|&lp| lp != lme) {
                            let mine: Vec<usize> = ops.iter().zip(b).filter(|(o, _)| o.is_send && o.peer == lp).map(|(_, &x)| x).collect();
                            let (theirs_ops, theirs_b) = &per_rank[host0 + lp][k];
                            let theirs: Vec<usize> = theirs_ops.iter().zip(theirs_b).filter(|(o, _)| !o.is_send && o.peer == lme).map(|(_, &x)| x).collect();
                            assert_eq!(mine, theirs, "{h} x {l} {coll:?}: rank {me} to local {lp}");
                        }
                    }
                }
            }
        }
        assert!(most > OX_MAX_XFERS, "some local stage needs more than one launch ({most} sends at most)");
    }

    /// PyTorch's all_to_all_single with unequal splits is a group of a send and a receive per peer,
    /// slices of one tensor each way, posted in rank order: at 8 x 8 its step fits the kernel's
    /// copy slots too (56 remote slices each way join into one or two copies).
    #[test]
    fn a_grouped_all_to_all_stages_within_the_copy_slots() {
        let (h, l) = (8usize, 8usize);
        let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
        for me in [0, 9, 63] {
            let ops: Vec<P2p> = (0..h * l)
                .flat_map(|p| {
                    let off = 1000 * p as u64;
                    [P2p { is_send: true, peer: p, buf: 0x1000_0000 + off, bytes: 1000 }, P2p { is_send: false, peer: p, buf: 0x2000_0000 + off, bytes: 1000 }]
                })
                .collect();
            let st = direct(&Layout::new(me, &hashes), &ops);
            let step = steps(&st)[0];
            let x = crate::net::stage::stage_on_host(step, u64::MAX, crate::device_abi::OX_NET_COPIES, u64::MAX).expect("staged");
            assert!(x.pre.len() <= 2 && x.post.len() <= 2, "rank {me}: {} and {} copies", x.pre.len(), x.post.len());
        }
    }

    /// Every cross-host byte stream matches: for each ordered pair (a, b), the sizes a sends to b,
    /// in order, equal the sizes b receives from a, in order (phase by phase, step by step).
    fn check_matching(hashes: &[u64], plan: &dyn Fn(&Layout) -> Vec<Stage>) {
        let n = hashes.len();
        let plans: Vec<Vec<Stage>> = (0..n).map(|me| plan(&Layout::new(me, hashes))).collect();
        for a in 0..n {
            for b in 0..n {
                let sent: Vec<u64> = steps(&plans[a]).iter().flat_map(|s| s.phases.iter()).flat_map(|p| p.sends.iter()).filter(|x| x.peer == b).map(|x| x.bytes).collect();
                let got: Vec<u64> = steps(&plans[b]).iter().flat_map(|s| s.phases.iter()).flat_map(|p| p.recvs.iter()).filter(|x| x.peer == a).map(|x| x.bytes).collect();
                assert_eq!(sent, got, "{hashes:?}: rank {a} -> rank {b}");
                if hashes[a] == hashes[b] {
                    assert!(sent.is_empty(), "same-host ranks {a} and {b} must not use the network");
                }
                // Local point-to-point: sends of a to b (local ranks) match b's receives from a.
                let la = Layout::new(a, hashes);
                if hashes[a] == hashes[b] && a != b {
                    let lp = |st: &Vec<Stage>, is_send: bool, peer: usize| -> Vec<u64> {
                        st.iter()
                            .filter_map(|s| if let Stage::Local(LocalOp::P2p(v)) = s { Some(v) } else { None })
                            .flatten()
                            .filter(|o| o.is_send == is_send && o.peer == peer)
                            .map(|o| o.bytes)
                            .collect()
                    };
                    assert_eq!(lp(&plans[a], true, la.local_index(b)), lp(&plans[b], false, la.local_index(a)), "{hashes:?}: local {a} -> {b}");
                }
            }
        }
    }

    #[test]
    fn layout_and_partners() {
        let l = Layout::new(3, &[5, 5, 8, 5]);
        assert_eq!(l.hosts, vec![vec![0, 1, 3], vec![2]]);
        assert_eq!(l.local_index(3), 2);
        assert_eq!(l.partner(3, 1), 2);
        assert_eq!(l.partner(2, 0), 0);
        assert_eq!(split(10, 4, 0), (0, 3));
        assert_eq!(split(10, 4, 3), (8, 2));
        assert_eq!(split(1, 3, 2), (1, 0));
    }

    #[test]
    fn every_collective_matches_pairwise_in_every_layout() {
        for hashes in layouts() {
            for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
                for count in [0u64, 1, 3, 1000, 1 << 20] {
                    for root in 0..hashes.len() {
                        check_matching(&hashes, &|l| plan_coll(l, &call(coll, count, root)));
                        if matches!(coll, Coll::Broadcast | Coll::Reduce) {
                            check_matching(&hashes, &|l| plan_coll(&Layout { bcast_scatter_min: 1, reduce_slice_min: 1, bcast_pipeline_min: 1, reduce_pipeline_min: 1, ..l.clone() }, &call(coll, count, root)));
                        }
                        if matches!(coll, Coll::AllReduce | Coll::ReduceScatter | Coll::AllGather) {
                            check_matching(&hashes, &|l| plan_coll(&Layout { ring_min: 1, ..l.clone() }, &call(coll, count, root)));
                        }
                    }
                }
            }
        }
    }

    thread_local! {
        /// Copies out that combined on the "GPU" in `simulate` (this thread's tests).
        static COMBINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Simulates whole collectives on integers: local stages by definition, net steps by moving
    /// bytes between the ranks' "device" vectors, staged or not, out-of-place and in-place; every
    /// rank must end with what NCCL defines. Layouts include ranks alone on their host, whose
    /// host stage is folded into the step (its input read directly, its copies in `Step::copies`).
    #[test]
    fn every_collective_computes_its_result_in_every_layout() {
        use Coll::*;
        COMBINED.with(|n| n.set(0));
        for hashes in layouts() {
            let n = hashes.len();
            for count in [1u64, 5, 64, 1001, 3000, 40_000] {
                let cn = count as usize;
                for coll in [AllReduce, ReduceScatter, Reduce, AllGather, Broadcast, AlltoAll, Gather, Scatter] {
                    let in_len = match coll {
                        ReduceScatter | AlltoAll | Scatter => cn * n,
                        _ => cn,
                    };
                    let input = |r: usize| -> Vec<i64> { (0..in_len).map(|i| (r as i64 + 1) * 1_000_000 + i as i64).collect() };
                    let inputs: Vec<Vec<i64>> = (0..n).map(input).collect();
                    let sum: Vec<i64> = (0..in_len).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
                    let rooted = matches!(coll, Reduce | Broadcast | Gather | Scatter);
                    let inplace_ok = matches!(coll, AllReduce | ReduceScatter | Reduce | AllGather | Broadcast);
                    for root in if rooted { 0..n } else { 0..1 } {
                        // Staged: None (not), with the proxy combining (u64::MAX), or the kernel
                        // combining wherever it can (from 1 byte).
                        for (inplace, staged) in [false, true].into_iter().flat_map(|i| [(i, None), (i, Some(u64::MAX)), (i, Some(1))]) {
                            if inplace && !inplace_ok {
                                continue;
                            }
                            // Sliced: also around the ring of hosts (AllReduce, ReduceScatter, AllGather).
                            for sliced in [false, matches!(coll, Broadcast | Reduce | AllReduce | ReduceScatter | AllGather)] {
                            let got = simulate(&hashes, coll, count, root, inplace, staged, sliced, &input);
                            for (r, got) in got.iter().enumerate() {
                                let want: Vec<i64> = match coll {
                                    AllReduce => sum.clone(),
                                    ReduceScatter => sum[r * cn..(r + 1) * cn].to_vec(),
                                    Reduce if r == root => sum.clone(),
                                    AllGather => inputs.concat(),
                                    Broadcast => inputs[root].clone(),
                                    AlltoAll => (0..n).flat_map(|p| inputs[p][r * cn..(r + 1) * cn].to_vec()).collect(),
                                    Gather if r == root => inputs.concat(),
                                    Scatter => inputs[root][r * cn..(r + 1) * cn].to_vec(),
                                    _ => continue,
                                };
                                assert_eq!(*got, want, "{hashes:?} {coll:?} count {count} root {root} rank {r} in-place {inplace} staged {staged:?} sliced {sliced}");
                            }
                            }
                        }
                    }
                }
            }
        }
        // The kernel's combining copies ran (2 x 1 AllReduce and Reduce take them, at least).
        assert!(COMBINED.with(|n| n.get()) > 0);
    }

    #[test]
    fn ranks_alone_on_their_host_need_no_host_stage() {
        // Two hosts of one rank: every collective is one step (its copies inside), out-of-place too.
        for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            for me in 0..2 {
                let st = plan_coll(&Layout::new(me, &[1, 2]), &call(coll, 1000, 0));
                assert!(matches!(st.as_slice(), [Stage::Net(_)]), "{coll:?} rank {me}: {st:?}");
            }
        }
        let st = plan_coll(&Layout::new(0, &[1, 2]), &call(Coll::AllGather, 1000, 0));
        let Stage::Net(s) = &st[0] else { unreachable!() };
        assert_eq!(s.copies, vec![DevCopy { src: 0x1000_0000, dst: 0x2000_0000, bytes: 4000 }]);
        // A scaling op keeps its host stage (it multiplies even a single rank's input).
        let mut c = call(Coll::AllReduce, 1000, 0);
        c.op = ResolvedOp { op: RedOp::PreMulSum, scalar: 1, scalar_ptr: 0 };
        assert_eq!(plan_coll(&Layout::new(0, &[1, 2]), &c).len(), 2);
        // Sends to self that do not pair up stay on the local communicator, which refuses them.
        let ops = [P2p { is_send: true, peer: 0, buf: 0, bytes: 8 }, P2p { is_send: false, peer: 1, buf: 64, bytes: 8 }];
        let st = direct(&Layout::new(0, &[1, 2]), &ops);
        assert!(matches!(&st[0], Stage::Local(LocalOp::P2p(v)) if v.len() == 1));
        let ops = [P2p { is_send: true, peer: 0, buf: 0, bytes: 8 }, P2p { is_send: false, peer: 0, buf: 64, bytes: 8 }];
        let st = direct(&Layout::new(0, &[1, 2]), &ops);
        assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.copies == vec![DevCopy { src: 0, dst: 64, bytes: 8 }] && !s.has_work()));
    }

    #[test]
    fn small_broadcasts_chain_and_small_allreduces_end_with_the_step() {
        let hashes = [1, 2, 3, 4];
        for (count, most) in [(1000u64, 1usize), (CHAIN_MAX_BYTES / 4 + 1, 3)] {
            let sends: Vec<usize> = (0..4).map(|me| steps(&plan_coll(&Layout::new(me, &hashes), &call(Coll::Broadcast, count, 1))).iter().flat_map(|s| &s.phases).map(|p| p.sends.len()).sum()).collect();
            assert_eq!(*sends.iter().max().unwrap(), most, "count {count}: {sends:?}");
        }
        // OXCCL_NET_BCAST_CHAIN_MAX=0: the root sends to every host even a small message.
        let star = Layout { bcast_chain_max: 0, ..Layout::new(1, &hashes) };
        let st = plan_coll(&star, &call(Coll::Broadcast, 1000, 1));
        assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![0, 2, 3]);
        // Root 1: 1 -> 2 -> 3 -> 0; rank 2 receives from 1, then sends to 3.
        let st = plan_coll(&Layout::new(2, &hashes), &call(Coll::Broadcast, 1000, 1));
        let s = steps(&st)[0];
        assert_eq!((s.phases[0].recvs[0].peer, s.phases[1].sends[0].peer), (1, 3));
        // 2 hosts x 2: a small Broadcast goes from the root to both ranks of the other host, which
        // have nothing else to do; a larger one goes to the root's partner, which spreads it.
        let l3 = Layout::new(3, &[7, 7, 9, 9]);
        let st = plan_coll(&l3, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
        assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.phases[0].recvs[0].peer == 0), "{st:?}");
        let st = plan_coll(&Layout::new(0, &[7, 7, 9, 9]), &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
        assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(plan_coll(&l3, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4 + 1, 0)).len(), 1, "only the host stage");
        // OXCCL_NET_BCAST_DIRECT_MAX lowers the bound: the same small call goes through rank 2.
        let mut tuned = Layout::new(0, &[7, 7, 9, 9]);
        tuned.bcast_direct_max = 1024;
        let st = plan_coll(&tuned, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
        assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2]);
        tuned.me = 3;
        assert_eq!(plan_coll(&tuned, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0)).len(), 1, "only the host stage");
        // OXCCL_NET_BCAST_STRIPE_MIN: the root's transfer to its partner and the partner's receive
        // carry the same threshold; direct and chained Broadcasts and other collectives keep 0.
        let big = call(Coll::Broadcast, (256 << 10) / 4, 0);
        for me in [0, 2] {
            let l = Layout { bcast_stripe_min: 128 << 10, ..Layout::new(me, &[7, 7, 9, 9]) };
            assert_eq!(steps(&plan_coll(&l, &big))[0].phases[0].stripe_min, 128 << 10, "rank {me}");
            let small = plan_coll(&l, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
            assert!(steps(&small).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
            let ar = plan_coll(&l, &call(Coll::AllReduce, (1 << 20) / 4, 0));
            assert!(steps(&ar).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
        }
        // Narrow layouts mark every phase of a Broadcast or Reduce, at both ends, and nothing else.
        for me in [0, 2] {
            let l = Layout { narrow: true, ..Layout::new(me, &[7, 7, 9, 9]) };
            for (coll, marked) in [(Coll::Broadcast, true), (Coll::Reduce, true), (Coll::AllReduce, false), (Coll::AllGather, false), (Coll::AlltoAll, false)] {
                let st = plan_coll(&l, &call(coll, (256 << 10) / 4, 0));
                let phases: Vec<&Phase> = steps(&st).into_iter().flat_map(|s| &s.phases).collect();
                assert!(!phases.is_empty() && phases.iter().all(|p| p.narrow == marked), "rank {me} {coll:?}");
            }
            assert!(steps(&plan_coll(&Layout::new(me, &[7, 7, 9, 9]), &big)).iter().flat_map(|s| &s.phases).all(|p| !p.narrow));
        }
        let chain = Layout { bcast_stripe_min: 128 << 10, ..Layout::new(2, &hashes) };
        assert!(steps(&plan_coll(&chain, &call(Coll::Broadcast, 1000, 1))).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
        // From SCATTER_MIN_BYTES the root sends each rank of the other host half, which then gather
        // it; below, or when the halves would be unequal, the partner takes it whole.
        let sends = |count: u64, me: usize| -> Vec<(usize, u64)> {
            steps(&plan_coll(&Layout::new(me, &[7, 7, 9, 9]), &call(Coll::Broadcast, count, 0))).iter().flat_map(|s| &s.phases).flat_map(|p| &p.sends).map(|x| (x.peer, x.bytes)).collect()
        };
        let q = SCATTER_MIN_BYTES / 4;
        assert_eq!(sends(q, 0), vec![(2, 2 * q), (3, 2 * q)]);
        assert_eq!(sends(q - 2, 0), vec![(2, 4 * q - 8)]);
        assert_eq!(sends(q + 1, 0), vec![(2, 4 * q + 4)]);
        let st = plan_coll(&Layout::new(3, &[7, 7, 9, 9]), &call(Coll::Broadcast, q, 0));
        assert!(matches!(&st[1], Stage::Local(LocalOp::Coll { coll: Coll::AllGather, count, .. }) if *count == q / 2), "{st:?}");
        let off = Layout { bcast_scatter_min: u64::MAX, ..Layout::new(0, &[7, 7, 9, 9]) };
        assert_eq!(steps(&plan_coll(&off, &call(Coll::Broadcast, q, 0)))[0].phases[0].sends.len(), 1);
        // From SLICE_MIN_BYTES a Reduce between the two hosts goes slice by slice: rank 3 sends its
        // half of the other host's sums to rank 1; below, rank 2 sends them whole to the root.
        let rsends = |l: &Layout, count: u64| -> Vec<(usize, u64)> {
            steps(&plan_coll(l, &call(Coll::Reduce, count, 0))).iter().flat_map(|s| &s.phases).flat_map(|p| &p.sends).map(|x| (x.peer, x.bytes)).collect()
        };
        let s = SLICE_MIN_BYTES / 4;
        assert_eq!(rsends(&Layout::new(3, &[7, 7, 9, 9]), s), vec![(1, 2 * s)]);
        assert!(rsends(&Layout::new(3, &[7, 7, 9, 9]), s - 2).is_empty());
        assert_eq!(rsends(&Layout::new(2, &[7, 7, 9, 9]), s - 2), vec![(0, 4 * s - 8)]);
        let never = Layout { reduce_slice_min: u64::MAX, ..Layout::new(3, &[7, 7, 9, 9]) };
        assert!(rsends(&never, s).is_empty());
        // 2 hosts x 2: small AllReduce is the host stage and one step; larger ones spread slices.
        let l = Layout::new(0, &[7, 7, 9, 9]);
        assert_eq!(plan_coll(&l, &call(Coll::AllReduce, FULL_EXCHANGE_MAX_BYTES / 4, 0)).len(), 2);
        assert_eq!(plan_coll(&l, &call(Coll::AllReduce, FULL_EXCHANGE_MAX_BYTES / 4 + 1, 0)).len(), 4);
    }

    /// Runs plans on vectors of i64: device memory is one address space per rank (send at
    /// element 0, recv at element `span`, scratch at 2 `span`; addresses are element indices * 8;
    /// in-place calls as nccl-tests makes them). `staged`: every step as `stage::stage_on_host`
    /// rewrites it, its copies made around it. Returns each rank's output.
    #[allow(clippy::too_many_arguments)]
    fn simulate(hashes: &[u64], coll: Coll, count: u64, root: usize, inplace: bool, staged: Option<u64>, sliced: bool, input: &dyn Fn(usize) -> Vec<i64>) -> Vec<Vec<i64>> {
        let n = hashes.len();
        // Each region holds the largest buffer of the call (count * n elements).
        let span = (count * n as u64).next_power_of_two();
        let (send0, recv0, scr) = (0u64, 8 * span, 16 * span);
        let calls: Vec<Call> = (0..n as u64)
            .map(|r| {
                let (send, recv) = match (inplace, coll) {
                    (false, _) => (send0, recv0),
                    (true, Coll::AllGather) => (recv0 + r * count * 8, recv0),
                    (true, Coll::ReduceScatter) => (send0, send0 + r * count * 8),
                    (true, _) => (recv0, recv0),
                };
                Call { coll, send, recv, count, dtype: DataType::Int64, op: sum(), root, scratch: scr }
            })
            .collect();
        let out_len = match coll {
            Coll::AllGather | Coll::AlltoAll | Coll::Gather => count * n as u64,
            _ => count,
        } as usize;
        let at = |a: u64| (a / 8) as usize;
        let mut dev: Vec<Vec<i64>> = (0..n).map(|_| vec![0i64; 3 * span as usize]).collect();
        for (r, d) in dev.iter_mut().enumerate() {
            let v = input(r);
            d[at(calls[r].send)..at(calls[r].send) + v.len()].copy_from_slice(&v);
        }
        // A Broadcast stripe threshold of its own, so that the check below that both ends of
        // every transfer split it alike has something to check.
        // `sliced`: Broadcasts between two hosts scattered, across more hosts along the chain in
        // pieces, and Reduces sliced, from the smallest size.
        let min = if sliced { 1 } else { u64::MAX };
        // Narrow Broadcasts and Reduces, so that the check covers that mark too.
        let tuned = |me: usize| Layout { bcast_stripe_min: 128 << 10, bcast_scatter_min: min, bcast_pipeline_min: min, reduce_slice_min: min, reduce_pipeline_min: min, ring_min: min, narrow: true, ..Layout::new(me, hashes) };
        let mut plans: Vec<Vec<Stage>> = (0..n).map(|me| plan_all_stages(&tuned(me), &calls[me])).collect();
        // A step's own copies may run at any point of it: disjoint from what its phases write,
        // and writing nothing its phases read.
        for p in &plans {
            for s in steps(p) {
                let ranges = |w: bool| -> Vec<(u64, u64)> {
                    let mut v = Vec::new();
                    for ph in &s.phases {
                        let rw = ph.sends.iter().map(|x| (false, x.buf, x.bytes)).chain(ph.recvs.iter().map(|x| (true, x.buf, x.bytes)));
                        let red = ph.reduces.iter().flat_map(|r| r.inputs.iter().map(|&b| (false, b, r.bytes)).chain([(true, r.out, r.bytes)]));
                        v.extend(rw.chain(red).filter_map(|(wr, b, n)| match b {
                            Buf::Dev(a) if wr == w || !w => Some((a, n)),
                            _ => None,
                        }));
                    }
                    v
                };
                let hit = |a: u64, n: u64, v: &[(u64, u64)]| v.iter().any(|&(b, m)| a < b + m && b < a + n);
                for c in &s.copies {
                    assert!(!hit(c.dst, c.bytes, &ranges(false)) && !hit(c.src, c.bytes, &ranges(true)), "{hashes:?} {coll:?}: copy {c:?} meets the step");
                }
            }
        }
        // Per rank and stage: the kernel's copies of a staged step.
        let mut copies: Vec<Vec<Option<super::super::stage::Staged>>> = plans.iter().map(|p| vec![None; p.len()]).collect();
        if let Some(combine_min) = staged {
            for (r, p) in plans.iter_mut().enumerate() {
                for (i, st) in p.iter_mut().enumerate() {
                    if let Stage::Net(step) = st {
                        let carries = step.phases.iter().any(|p| !p.sends.is_empty() || !p.recvs.is_empty());
                        let x = crate::net::stage::stage_on_host(step, u64::MAX, usize::MAX, combine_min);
                        // Today's plans never read what an earlier phase wrote: all can be staged.
                        assert_eq!(x.is_some(), carries, "{hashes:?} {coll:?} rank {r} stage {i}");
                        if let Some(x) = x {
                            assert_eq!(x.step.copies, step.copies);
                            *step = x.step.clone();
                            copies[r][i] = Some(x);
                        }
                    }
                }
            }
        }
        let layouts: Vec<Layout> = (0..n).map(|me| Layout::new(me, hashes)).collect();
        let nstages = plans.iter().map(Vec::len).max().unwrap_or(0);
        // Stages line up by kind across ranks in these plans: run stage i everywhere.
        let mut arenas: Vec<Vec<i64>> = vec![Vec::new(); n];
        for i in 0..nstages {
            // Local collectives: gather each host's members' views.
            let mut next = dev.clone();
            for h in 0..layouts[0].nhosts() {
                let members = &layouts[0].hosts[h];
                let stage = |r: usize| plans[r].get(i);
                if let Some(Stage::Local(LocalOp::Coll { coll: lc, count: lcount, root: lroot, .. })) = stage(members[0]) {
                    let sum: Vec<i64> = (0..*lcount as usize)
                        .map(|k| {
                            members
                                .iter()
                                .map(|&m| {
                                    let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                    dev[m][at(*ms) + k]
                                })
                                .sum()
                        })
                        .collect();
                    for &r in members {
                        let Some(Stage::Local(LocalOp::Coll { recv, .. })) = stage(r) else { panic!("stage kinds differ") };
                        match lc {
                            Coll::AllReduce => next[r][at(*recv)..at(*recv) + sum.len()].copy_from_slice(&sum),
                            Coll::Reduce if layouts[0].hosts[h][*lroot] == r => next[r][at(*recv)..at(*recv) + sum.len()].copy_from_slice(&sum),
                            Coll::ReduceScatter => {
                                // Member k's block of every member's input, summed.
                                let k = members.iter().position(|&m| m == r).unwrap_or(0);
                                let lc = *lcount as usize;
                                let v: Vec<i64> = (0..lc)
                                    .map(|i| {
                                        members
                                            .iter()
                                            .map(|&m| {
                                                let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                                dev[m][at(*ms) + k * lc + i]
                                            })
                                            .sum()
                                    })
                                    .collect();
                                next[r][at(*recv)..at(*recv) + lc].copy_from_slice(&v);
                            }
                            // Every member's block, in member order: at every rank, or at the root.
                            Coll::AllGather | Coll::Gather if *lc == Coll::AllGather || members[*lroot] == r => {
                                let mut v = Vec::new();
                                for &m in members {
                                    let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                    v.extend_from_slice(&dev[m][at(*ms)..at(*ms) + *lcount as usize]);
                                }
                                next[r][at(*recv)..at(*recv) + v.len()].copy_from_slice(&v);
                            }
                            Coll::Broadcast => {
                                let src = members[*lroot];
                                let Some(Stage::Local(LocalOp::Coll { send: rs, .. })) = stage(src) else { unreachable!() };
                                let v = dev[src][at(*rs)..at(*rs) + *lcount as usize].to_vec();
                                next[r][at(*recv)..at(*recv) + v.len()].copy_from_slice(&v);
                            }
                            _ => {}
                        }
                    }
                }
                // Local point-to-point: each (sender, receiver) pair in posting order; all reads
                // before any write, as within one launch.
                let mut msgs: Vec<(usize, usize, Vec<i64>)> = Vec::new();
                for &r in members {
                    if let Some(Stage::Local(LocalOp::P2p(v))) = stage(r) {
                        for o in v.iter().filter(|o| o.is_send) {
                            msgs.push((r, members[o.peer], dev[r][at(o.buf)..at(o.buf) + (o.bytes / 8) as usize].to_vec()));
                        }
                    }
                }
                for &r in members {
                    if let Some(Stage::Local(LocalOp::P2p(v))) = stage(r) {
                        for o in v.iter().filter(|o| !o.is_send) {
                            let k = msgs.iter().position(|m| m.0 == members[o.peer] && m.1 == r).expect("local message");
                            let (_, _, d) = msgs.remove(k);
                            assert_eq!(d.len() as u64 * 8, o.bytes);
                            next[r][at(o.buf)..at(o.buf) + d.len()].copy_from_slice(&d);
                        }
                    }
                }
                assert!(msgs.is_empty(), "unreceived local messages");
            }
            dev = next;
            // Net steps: the step's own copies (anywhere in the step: first here), then phase by
            // phase; data flows pairwise in order.
            for r in 0..n {
                if let Some(Stage::Net(s)) = plans[r].get(i) {
                    arenas[r] = vec![0; (s.arena_bytes / 8) as usize + 1];
                    for c in &s.copies {
                        let len = (c.bytes / 8) as usize;
                        let v = dev[r][at(c.src)..at(c.src) + len].to_vec();
                        dev[r][at(c.dst)..at(c.dst) + len].copy_from_slice(&v);
                    }
                }
                for c in copies[r].get(i).into_iter().flatten().flat_map(|x| &x.pre) {
                    let len = (c.bytes / 8) as usize;
                    let v = dev[r][at(c.dev)..at(c.dev) + len].to_vec();
                    arenas[r][at(c.host)..at(c.host) + len].copy_from_slice(&v);
                }
            }
            // Phases run as the proxies run them: a rank sends when it enters a phase and leaves
            // it once all its receives have arrived (then reduces); sends never block.
            // (from, to, data, how it is split: stripe_min and narrow)
            type Msg = (usize, usize, Vec<i64>, (u64, bool));
            let mut msgs: Vec<Msg> = Vec::new();
            let (mut cur, mut sent) = (vec![0usize; n], vec![false; n]);
            loop {
                let mut progress = false;
                for r in 0..n {
                    let Some(Stage::Net(s)) = plans[r].get(i) else { continue };
                    let Some(ph) = s.phases.get(cur[r]) else { continue };
                    if !sent[r] {
                        for x in &ph.sends {
                            let len = (x.bytes / 8) as usize;
                            let v = match x.buf {
                                Buf::Dev(a) => dev[r][at(a)..at(a) + len].to_vec(),
                                Buf::Host(a) => arenas[r][at(a)..at(a) + len].to_vec(),
                            };
                            msgs.push((r, x.peer, v, (ph.stripe_min, ph.narrow)));
                        }
                        (sent[r], progress) = (true, true);
                    }
                    let ready = ph.recvs.iter().all(|x| {
                        let want = ph.recvs.iter().filter(|y| y.peer == x.peer).count();
                        msgs.iter().filter(|m| m.0 == x.peer && m.1 == r).count() >= want
                    });
                    if !ready {
                        continue;
                    }
                    for x in &ph.recvs {
                        let k = msgs.iter().position(|m| m.0 == x.peer && m.1 == r).expect("message");
                        let (_, _, v, stripe_min) = msgs.remove(k);
                        assert_eq!(v.len() as u64 * 8, x.bytes);
                        assert_eq!(stripe_min, (ph.stripe_min, ph.narrow), "{hashes:?} {coll:?}: ranks {} and {r} would split a transfer differently", x.peer);
                        match x.buf {
                            Buf::Dev(a) => dev[r][at(a)..at(a) + v.len()].copy_from_slice(&v),
                            Buf::Host(a) => arenas[r][at(a)..at(a) + v.len()].copy_from_slice(&v),
                        }
                    }
                    for red in &ph.reduces {
                        let len = (red.bytes / 8) as usize;
                        let mut acc = vec![0i64; len];
                        for inp in &red.inputs {
                            let v = match *inp {
                                Buf::Dev(a) => dev[r][at(a)..at(a) + len].to_vec(),
                                Buf::Host(a) => arenas[r][at(a)..at(a) + len].to_vec(),
                            };
                            for (x, y) in acc.iter_mut().zip(v) {
                                *x += y;
                            }
                        }
                        arenas[r][at(red.acc)..at(red.acc) + len].copy_from_slice(&acc);
                        if let Buf::Dev(o) = red.out {
                            dev[r][at(o)..at(o) + len].copy_from_slice(&acc);
                        }
                    }
                    (cur[r], sent[r], progress) = (cur[r] + 1, false, true);
                }
                if !progress {
                    break;
                }
            }
            for r in 0..n {
                if let Some(Stage::Net(s)) = plans[r].get(i) {
                    assert_eq!(cur[r], s.phases.len(), "{hashes:?} {coll:?}: rank {r} waits forever in stage {i}");
                }
            }
            assert!(msgs.is_empty(), "unreceived messages");
            for r in 0..n {
                for c in copies[r].get(i).into_iter().flatten().flat_map(|x| &x.post) {
                    let len = (c.bytes / 8) as usize;
                    let mut v = arenas[r][at(c.host)..at(c.host) + len].to_vec();
                    if let Some(with) = c.with {
                        // Combined on the way out (the simulated op is a sum).
                        for (k, x) in v.iter_mut().enumerate() {
                            *x = x.wrapping_add(dev[r][at(with) + k]);
                        }
                        COMBINED.with(|n| n.set(n.get() + 1));
                    }
                    dev[r][at(c.dev)..at(c.dev) + len].copy_from_slice(&v);
                }
            }
        }
        (0..n).map(|r| dev[r][at(calls[r].recv)..at(calls[r].recv) + out_len].to_vec()).collect()
    }

    /// From `ring_min`, across three hosts or more of one size, AllReduce, ReduceScatter and
    /// AllGather go around the ring of hosts: one transfer each way per phase, to the next host
    /// and from the previous. Below it, or with hosts of different sizes, every host sends to
    /// every other at once.
    #[test]
    fn large_calls_go_around_the_ring_of_hosts() {
        use Coll::*;
        let at = |me: usize, hashes: &[u64], min: u64| Layout { ring_min: min, ..Layout::new(me, hashes) };
        let peers = |st: &[Stage]| -> Vec<(Vec<usize>, Vec<usize>)> { steps(st)[0].phases.iter().map(|p| (p.sends.iter().map(|x| x.peer).collect(), p.recvs.iter().map(|x| x.peer).collect())).collect() };
        // Counts whose largest buffer is 1 MiB at 4 ranks.
        // Phases per host after the first: two for AllReduce (reduce-scatter, all-gather).
        for (coll, count, per) in [(AllReduce, 1u64 << 18, 2), (ReduceScatter, 1 << 16, 1), (AllGather, 1 << 16, 1)] {
            let st = plan_coll(&at(1, &[1, 2, 3, 4], 1 << 20), &call(coll, count, 0));
            assert_eq!(peers(&st), vec![(vec![2], vec![0]); 3 * per], "{coll:?}");
            // Rank 1 of each host of 3 x 2 (ranks 1, 3, 5) forms a ring of its own.
            let st = plan_coll(&at(3, &[1, 1, 2, 2, 3, 3], 1 << 20), &call(coll, count, 0));
            assert_eq!(peers(&st), vec![(vec![5], vec![1]); 2 * per], "{coll:?} 3 x 2");
            let pairs = peers(&plan_coll(&at(1, &[1, 2, 3, 4], 1 << 20), &call(coll, count - 1, 0)));
            assert_eq!(pairs[0], (vec![0, 2, 3], vec![0, 2, 3]), "{coll:?} below the threshold");
            let uneven = peers(&plan_coll(&at(2, &[1, 1, 2, 3], 1), &call(coll, count, 0)));
            assert!(uneven.len() == per && uneven[0].0.len() >= 2, "{coll:?} hosts of different sizes: {uneven:?}");
        }
        // The defaults: from RING_MIN_APART where the hosts are apart, never on one loopback.
        assert_eq!((ring_default(true), ring_default(false)), (RING_MIN_APART, u64::MAX));
        assert_eq!(Layout::new(0, &[1, 2, 3]).ring_min, u64::MAX);
    }

    #[test]
    fn small_reduces_send_every_remote_input_to_the_root() {
        // 2 hosts x 2, root 1: ranks 2 and 3 send their own inputs to rank 1 at once (no host
        // stage first); rank 1 reduces with rank 0, then combines its result with both inputs.
        let hashes = [7, 7, 9, 9];
        let plan = |me: usize, c: &Call| plan_coll(&Layout::new(me, &hashes), c);
        let c = call(Coll::Reduce, REDUCE_DIRECT_MAX_BYTES / 4, 1);
        for me in [2, 3] {
            let st = plan(me, &c);
            assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.phases[0].sends == vec![Xfer { peer: 1, buf: Buf::Dev(c.send), bytes: REDUCE_DIRECT_MAX_BYTES }]), "{st:?}");
        }
        let st = plan(1, &c);
        let [Stage::Local(LocalOp::Coll { coll: Coll::Reduce, root: 1, .. }), Stage::Net(s)] = st.as_slice() else { panic!("{st:?}") };
        assert_eq!(s.phases[0].recvs.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(s.phases[0].reduces[0].inputs.len(), 3);
        assert!(matches!(plan(0, &c).as_slice(), [Stage::Local(_)]));
        // Larger, or a scaling op: each host reduces first and its representative (the root's
        // partner, rank 3) sends.
        let mut scaled = c;
        scaled.op = ResolvedOp { op: RedOp::PreMulSum, scalar: 1, scalar_ptr: 0 };
        for c in [call(Coll::Reduce, REDUCE_DIRECT_MAX_BYTES / 4 + 1, 1), scaled] {
            assert!(matches!(plan(2, &c).as_slice(), [Stage::Local(_)]));
            assert!(matches!(plan(3, &c).as_slice(), [Stage::Local(_), Stage::Net(s)] if s.phases[0].sends[0].buf == Buf::Dev(c.scratch)));
        }
        // Integer average: the inputs are summed and divided once, by every rank's count.
        let mut avg = c;
        avg.dtype = DataType::Int32;
        avg.op = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
        let st = plan(1, &avg);
        let [Stage::Local(LocalOp::Coll { op, .. }), Stage::Net(s)] = st.as_slice() else { panic!("{st:?}") };
        assert_eq!((op.op, s.phases[0].reduces[0].op.postdiv), (RedOp::Sum, 4));
    }

    #[test]
    fn avg_splits_into_a_local_scale_and_a_host_sum() {
        let avg = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
        let (lo, h) = split_op(avg, DataType::Float32, 4);
        assert_eq!(lo.op, RedOp::PreMulSum);
        assert_eq!(lo.scalar, u64::from(0.25f32.to_bits()));
        assert_eq!((h.combine, h.postdiv), (Combine::Sum, 0));
        let (lo, h) = split_op(avg, DataType::Int32, 3);
        assert_eq!((lo.op, h.postdiv), (RedOp::Sum, 3));
    }
}

#[cfg(test)]
mod by_hand {
    use super::*;

    /// Host cost of planning one small cross-host call (plan, staging, packets), as the launch
    /// path does it: `cargo test --release -- --ignored planning_cost --nocapture`.
    #[test]
    #[ignore]
    fn planning_cost() {
        let l = Layout::new(0, &[1, 2]);
        let op = ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 };
        for coll in [Coll::AllGather, Coll::ReduceScatter, Coll::AllReduce] {
            let c = Call { coll, send: 0x1000_0000, recv: 0x2000_0000, count: 8, dtype: DataType::Float32, op, root: 0, scratch: 0x3000_0000 };
            let n = 200_000;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let st = plan_coll(std::hint::black_box(&l), std::hint::black_box(&c));
                for s in &st {
                    if let Stage::Net(step) = s {
                        if let Some(mut x) = crate::net::stage::stage_on_host(step, crate::transport::inline::DEFAULT_MAX, crate::device_abi::OX_NET_COPIES, u64::MAX) {
                            std::hint::black_box(crate::net::packets::reserve(&mut x, crate::net::packets::DEFAULT_MAX));
                        }
                    }
                }
                std::hint::black_box(st);
            }
            eprintln!("{coll:?} 32 B at 2 x 1: {:.3} us to plan", t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
    }
}
