//! Communicators that span hosts: PortChannel over TCP.
//!
//! Ranks of one host form a *local* communicator (an ordinary oxccl communicator: MemoryChannels
//! over NVLink). Across hosts, each rank has a TCP link to every rank of the other hosts
//! (`link`), and a proxy thread (`crate::proxy`) that carries out cross-host *steps*. Every
//! operation is planned (`plan`, a pure function) into stages on the user's stream: launches on
//! the local communicator, and steps. A step is one tiny kernel (kernels/colls/net_step.cu) that pushes
//! a trigger naming the step's plan into the proxy's FIFO and waits on a host-to-device counter;
//! the proxy moves the data (GPU -> pinned host -> socket -> pinned host -> GPU, chunk-pipelined),
//! combines partial results on the host where the step reduces (`hostreduce`), then bumps the
//! counter. Because the stream itself waits, the stages need no host synchronisation, and the
//! same launches work inside CUDA graphs: a captured step's plan is kept for every replay.

pub mod hostreduce;
pub mod packets;
pub mod pipeline;
pub mod plan;
mod executor;
mod settings;
pub mod stage;
mod streamtrace;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

#[cfg(feature = "ib")]
use crate::transport::ib;
use crate::transport::lanetrace::{monotonic_ns, trace_dir};
use crate::transport::link::{self, Dir, Job, Link, Mem, Tracker};
use crate::transport::{ce, inline, progress};
use self::plan::{Buf, Call, HostReduce, Layout, LocalOp, Phase, Stage, Step};
use crate::transport::select::{LocalPath, NetWant};
use crate::comm::cross_host::{ConnectNet, CrossHost, Setup};
use crate::comm::task::{CollTask, P2pOp};
use crate::comm::{Comm, Ready};
use crate::device_abi::{FifoDevice, NetCopy, NetStepArgs, OX_NET_COPIES, OX_NET_STEP_COMPLETE, OX_NET_STEP_ISSUE, OX_NET_STEP_PRE, OX_NET_STEP_WAIT};
use crate::error::{Error, Result};
use crate::gpu::module::launch;
use crate::gpu::stream::{is_capturing, OwnedStream, RelaxedCapture};
use crate::gpu::{check, cu, Device, DeviceBuffer, HostMapped};
use crate::log::Subsys;
use crate::proxy::fifo::{FifoHost, FifoWords};
use crate::proxy::trigger::Request;
use crate::proxy::{Handler, Placement, Proxy};
use crate::types::DataType;

use self::executor::NetHandler;
use self::settings::{DEFAULT_SOCKETS, bcast_direct_max, bcast_stripe_min, narrow_setting, p2p_overlap, plan_bytes, plan_min, sockets_per_link, step_blocks, threshold};

/// Data connection number of the network links (per pair of ranks; see Bootstrap::data_sockets).
const NET_CONN: u32 = 0x4e45_5400;
/// FIFO slots: each step kernel has one trigger in flight, and a communicator's kernels run one
/// at a time, so a few slots are plenty.
const FIFO_SLOTS: u32 = 64;

/// One rank's links, indexed by peer rank: a link to every rank of the other hosts (as the layout
/// counts hosts), None for the ranks of this host.
pub type Links = Vec<Option<Link>>;

/// `NetStepArgs::combine` for a reduction the step kernel combines (`stage::on_gpu` takes only these
/// ops, without the integer average's division).
fn combine_code(op: &hostreduce::HostOp) -> u32 {
    use crate::device_abi::{OX_NET_COMBINE_MAX, OX_NET_COMBINE_MIN, OX_NET_COMBINE_PROD, OX_NET_COMBINE_SUM};
    let code = match op.combine {
        hostreduce::Combine::Sum => OX_NET_COMBINE_SUM,
        hostreduce::Combine::Prod => OX_NET_COMBINE_PROD,
        hostreduce::Combine::Max => OX_NET_COMBINE_MAX,
        hostreduce::Combine::Min => OX_NET_COMBINE_MIN,
    };
    1 + op.dtype as u32 + 16 * code
}

/// Blocks of a staged step kernel: one per 32 KiB of its larger side, up to `max`
/// (OXCCL_NET_STEP_BLOCKS; 32 beyond the inline size), and with `chunk` (a pipelined step) at
/// least one per chunk up to 32, so that chunks are copied side by side. Never more than `cap`,
/// the communicator's block budget (SMs, or maxCTAs below 64): its block 0 waits for every other
/// block to arrive, and users size maxCTAs so that concurrent communicators' kernels fit on the
/// GPU side by side (chunks and copies are shared among however many blocks there are).
fn staged_grid(pre: u64, post: u64, max: u32, chunk: Option<u64>, cap: u32) -> u32 {
    let bytes = pre.max(post);
    let max = if bytes > inline::DEFAULT_MAX { max.max(32) } else { max.max(1) };
    let grid = bytes.div_ceil(32 << 10).clamp(1, u64::from(max));
    let grid = chunk.map_or(grid, |c| grid.max(bytes.div_ceil(c.max(1)).min(32)));
    grid.min(u64::from(cap)).max(1) as u32
}

/// Lanes to a rank on another host when InfiniBand may be used (NCCL_NET=IB, or found).
#[cfg(feature = "ib")]
fn net_lanes(s: &Setup<'_>, p: usize, mut out: Vec<crate::tls::Stream>, mut inc: Vec<crate::tls::Stream>) -> Result<(Vec<link::Lane>, link::Interrupt)> {
    use std::io::{Read, Write};
    let found = ib::open()?;
    // Both ends must pick the same transport: InfiniBand only where both hosts have it.
    let (o, i) = match (out.first_mut(), inc.first_mut()) {
        (Some(o), Some(i)) => (o, i),
        _ => return Err(Error::internal("network link without sockets")),
    };
    let io = |e| link::io_error(p, e).context("choosing the network transport");
    o.write_all(&[u8::from(found.is_some())]).map_err(io)?;
    let mut theirs = [0u8; 1];
    i.read_exact(&mut theirs).map_err(io)?;
    match (found.filter(|_| theirs[0] == 1), s.paths.net) {
        (Some(ibn), _) => ibn.lanes(s.dev, s.me, p, out, inc),
        (None, NetWant::Ib) => Err(Error::invalid_usage("NCCL_NET=IB: no active InfiniBand/RoCE port found (see NCCL_IB_HCA)")),
        (None, _) => link::tcp_lanes(p, out, inc),
    }
}

/// Without the `ib` feature `select::choose` never asks for InfiniBand.
#[cfg(not(feature = "ib"))]
fn net_lanes(_s: &Setup<'_>, p: usize, out: Vec<crate::tls::Stream>, inc: Vec<crate::tls::Stream>) -> Result<(Vec<link::Lane>, link::Interrupt)> {
    link::tcp_lanes(p, out, inc)
}

/// Plans the proxy runs, by number. Steps of graph captures stay for every replay; others are
/// removed when run, and their numbers reused.
#[derive(Default)]
struct Plans {
    slots: Vec<Option<(Arc<Step>, bool)>>,
    free: Vec<u32>,
    /// Plans of eager launches not taken yet: each one's trigger is on its way (the proxy does not
    /// nap meanwhile, `Handler::expecting`).
    eager: usize,
}

impl Plans {
    fn insert(&mut self, step: Step, keep: bool) -> Result<u32> {
        if !keep {
            self.eager += 1;
            link::burst::add(1);
        }
        let e = Some((Arc::new(step), keep));
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = e;
            return Ok(i);
        }
        let i = u32::try_from(self.slots.len()).map_err(|_| Error::internal("too many cross-host plans"))?;
        self.slots.push(e);
        Ok(i)
    }

    fn take(&mut self, i: u32) -> Result<Arc<Step>> {
        let slot = self.slots.get_mut(i as usize).ok_or_else(|| Error::internal(format!("unknown cross-host plan {i}")))?;
        let (step, keep) = slot.clone().ok_or_else(|| Error::internal(format!("cross-host plan {i} already ran")))?;
        if !keep {
            *slot = None;
            self.free.push(i);
            self.uncount(1);
        }
        Ok(step)
    }

    /// `n` eager plans taken or dropped (never more than were counted).
    fn uncount(&mut self, n: usize) {
        let n = n.min(self.eager);
        self.eager -= n;
        link::burst::add(-(n as isize));
    }

    fn remove(&mut self, i: u32) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            if let Some((_, keep)) = s.take() {
                self.free.push(i);
                if !keep {
                    self.uncount(1);
                }
            }
        }
    }
}

impl Drop for Plans {
    fn drop(&mut self) {
        // Launched steps whose triggers never came (an aborted communicator) end no burst.
        self.uncount(self.eager);
    }
}

/// What the proxy is doing, for the hang dump (OXCCL_DEBUG_DUMP): a count bumped as each step
/// starts, and a description written only where a phase's wait turns long.
#[derive(Default)]
struct NetStatus {
    /// Steps the proxy has started (the running one's FIFO position is this minus one).
    started: AtomicU64,
    /// The last long wait: the `started` count it belongs to, and what it waits for.
    wait: Mutex<(u64, String)>,
}

impl NetStatus {
    fn note(&self, what: String) {
        *self.wait.lock() = (self.started.load(Ordering::Relaxed), what);
    }
}

/// The cross-host part of a communicator.
pub struct Net {
    /// Where every rank sits (hosts, this rank's host) and the cross-host thresholds the planner uses.
    pub layout: Layout,
    /// This host's ranks (oxccl's own communicator; never handed to the user).
    pub local: Arc<Comm>,
    links: Mutex<Option<Arc<Links>>>,
    proxy: Mutex<Option<Proxy>>,
    plans: Arc<Mutex<Plans>>,
    fifo: FifoDevice,
    _fifo_mem: HostMapped,
    _head: DeviceBuffer,
    issued: DeviceBuffer,
    done: Arc<HostMapped>,
    /// Device scratch for ReduceScatter and Reduce; grown, never shrunk or freed before the
    /// communicator (graphs may hold earlier buffers).
    scratch: Mutex<Vec<DeviceBuffer>>,
    /// Host arenas of staged steps (`stage`), host-mapped: [0] every staged step's, [1] the
    /// second of a detached step's pair, made only once one comes (a large step's arena is as
    /// large as its data); each grown like `scratch`. A
    /// communicator's step kernels run one after another, and a step uses its arena from its
    /// kernel's start until the proxy has finished it (a detached send outlives its kernel).
    /// Detached steps alternate between the pair by the parity of their number (counted on the
    /// device, so graph replays alternate too): such a kernel waits only for the step before the
    /// previous one before it writes its arena, so it fills one while the proxy still sends from
    /// the other. Other staged steps use the first and wait for every earlier step.
    mailboxes: Mutex<[Vec<HostMapped>; 2]>,
    /// Steps whose jobs are at most this size are staged by their kernel (`stage::max_bytes`).
    stage_max: u64,
    /// OXCCL_NET_STAGE_PIPELINE(_MIN): staged steps moving more than this either way flag their
    /// copies chunk by chunk (`progress`); None: none does.
    pipe_min: Option<u64>,
    /// Ranks whose link the proxy can carry jobs on itself (plain TCP).
    inline_peer: Vec<bool>,
    /// OXCCL_NET_P2P_OVERLAP (on by default): a group's point-to-point work on this host runs
    /// while its cross-host step is in flight (`plan::split_direct`) instead of before it: 2 x 2
    /// Send/Recv 64 B-256 KB took 14-67 us against 20-96 one after the other (BENCHMARKS.md
    /// of 2026-11-26, 5822b1b). Ranks need not agree (an issued step never waits for anything of the
    /// peer's).
    p2p_overlap: bool,
    /// OXCCL_NET_STEP_BLOCKS: most blocks a staged step kernel spreads its copies over.
    step_blocks: u32,
    /// This rank's block budget (`topo::block_budget`: SMs, or maxCTAs below 64), which no step
    /// kernel exceeds.
    block_cap: u32,
    /// Payload bytes per direction up to which a staged step uses packets (`packets`); 0: never.
    packets_max: u64,
    /// Smallest reduction a staged step's kernel combines on its way out (`stage::combine_min`).
    combine_min: u64,
    dev: &'static Device,
    status: Arc<NetStatus>,
    /// OXCCL_NET_TRACE: when the streams reached each launch of the cross-host calls.
    stream_trace: Option<Mutex<streamtrace::StreamTrace>>,
    /// The launch path's entry points, for the stages on the host-local communicator.
    launch: Launch,
}

/// The launch path's entry points (launch::enqueue's launch_task and launch_p2p), handed in at
/// init: the stages of a cross-host call on the host-local communicator are ordinary launches,
/// and net sits below the launch path.
#[derive(Clone, Copy)]
pub struct Launch {
    /// Launches one collective on the host-local communicator (launch_task).
    pub coll: fn(&CollTask) -> Result<()>,
    /// Launches a group of point-to-point operations on a communicator (launch_p2p).
    pub p2p: fn(&Arc<Comm>, &[P2pOp]) -> Result<()>,
}

/// Builds the cross-host part of a communicator (`Comm::init`'s `ConnectNet`).
pub fn connect(s: Setup<'_>, launch: Launch) -> Result<Arc<dyn CrossHost>> {
    Ok(Arc::new(Net::connect(s, launch)?))
}

impl CrossHost for Net {
    fn local(&self) -> &Arc<Comm> {
        &self.local
    }
    fn launch_coll(&self, r: &Ready, t: &CollTask) -> Result<()> {
        Net::launch_coll(self, r, t)
    }
    fn launch_p2p(&self, r: &Ready, ops: &[P2pOp], stream: cu::CUstream) -> Result<()> {
        Net::launch_p2p(self, r, ops, stream)
    }
    fn describe(&self, read: &dyn Fn(u64) -> Result<u64>) -> String {
        Net::describe(self, read)
    }
    fn describe_host(&self) -> String {
        Net::describe_host(self)
    }
    fn shutdown(&self, abort: bool) {
        Net::shutdown(self, abort)
    }
}

impl Net {
    /// Builds the cross-host part (collective over the whole communicator): the host-local
    /// communicator, a link to every rank of the other hosts, the proxy and its FIFO.
    pub fn connect(s: Setup<'_>, launch: Launch) -> Result<Net> {
        // With peer GPU memory ruled out on a host (copy engine, host staging), every rank is planned
        // as a host of its own and only the links tell hosts apart.
        let hashes: Vec<u64> = match s.paths.local {
            LocalPath::Memory => s.peers.iter().map(|p| p.host_hash).collect(),
            LocalPath::CopyEngine | LocalPath::Host => (0..s.peers.len() as u64).collect(),
        };
        let mut layout = Layout::new(s.me, &hashes);
        if let Some(v) = bcast_direct_max()? {
            layout.bcast_direct_max = v;
        }
        if let Some(v) = plan_bytes("OXCCL_NET_BCAST_CHAIN_MAX")? {
            layout.bcast_chain_max = v;
        }
        let networks: Vec<u64> = s.peers.iter().map(|p| p.network).collect();
        let apart = plan::hosts_apart(&hashes, &networks);
        let (bcast_pipe, reduce_pipe) = plan::pipeline_defaults(apart);
        layout.bcast_pipeline_min = plan_min("OXCCL_NET_BCAST_PIPELINE_MIN", bcast_pipe)?;
        layout.reduce_pipeline_min = plan_min("OXCCL_NET_REDUCE_PIPELINE_MIN", reduce_pipe)?;
        layout.ring_min = plan_min("OXCCL_NET_RING_MIN", plan::ring_default(apart))?;
        layout.bcast_stripe_min = bcast_stripe_min()?;
        layout.bcast_scatter_min = plan_min("OXCCL_NET_BCAST_SCATTER_MIN", plan::SCATTER_MIN_BYTES)?;
        layout.reduce_slice_min = plan_min("OXCCL_NET_REDUCE_SLICE_MIN", plan::SLICE_MIN_BYTES)?;
        let mh = layout.my_host();
        // The local communicator first: every rank does this before any link, and it involves
        // only this host's ranks.
        let members = layout.hosts[mh].clone();
        let child = crate::comm::split::Child { rank: layout.local_index(s.me), members: members.clone() };
        let id = crate::comm::split::child_id(s.bs, &child).map_err(|e| e.context("setting up the host-local communicator"))?;
        let mut cfg = s.config.clone();
        cfg.blocking = true; // driven by oxccl itself, from within this init
        // The policy the whole communicator agreed on (algo::policy::agree), not this rank's ask.
        cfg.cta_policy = crate::algo::policy::agree(&s.peers.iter().map(|p| p.cta_policy).collect::<Vec<_>>()).0.raw();
        // Its kernels run alongside every other rank's on a shared GPU, not only this host's:
        // it keeps to the whole communicator's block budget (topo::share_gpus) when that is lower.
        if let Some(b) = s.peers.iter().map(|p| p.sm_count).min().filter(|&b| b < crate::config::MAX_CHANNELS) {
            cfg.max_ctas = cfg.max_ctas.min(b.max(1));
        }
        let local = Comm::new(child.rank, members.len(), s.device, cfg);
        let connect: &ConnectNet = &move |s| connect(s, launch);
        local.init(&id, connect).map_err(|e| e.context("initialising the host-local communicator"))?;
        let local = Arc::new(local);

        // Links to every rank of the other hosts, in ascending peer order: pairs are then set up
        // in one global order ((min, max) lexicographic), so no cycle of ranks can wait on each
        // other.
        // Whether the TCP links' threads spin (and stripe from 128 KiB, `Link::spawn`), and with
        // `fit` how many lanes: from what every rank told the others, so every rank decides alike
        // (the stripes must match).
        let ranks: Vec<(u64, u64, u32)> = s.peers.iter().zip(&hashes).map(|(p, &h)| (h, p.machine, p.cpus)).collect();
        let nsocks = match sockets_per_link()? {
            Some(n) => n,
            None => {
                let n = link::fit_lanes(&ranks, DEFAULT_SOCKETS);
                nccl_info!(Subsys::Net, "OXCCL_NET_SOCKETS=fit: {n} lanes per link");
                n
            }
        };
        let fit = link::threads_fit(&ranks, nsocks);
        // Broadcast and Reduce keep few links busy at once: their jobs spin and stripe alike
        // where the cores allow those few (`Phase::narrow`), or as set (equal on every rank).
        layout.narrow = narrow_setting()?.unwrap_or_else(|| link::narrow_fit(&ranks, nsocks));
        let mut links: Links = (0..layout.nranks()).map(|_| None).collect();
        for (p, slot) in links.iter_mut().enumerate() {
            if layout.host_of[p] == mh {
                continue;
            }
            let ds = s.bs.data_sockets(p, NET_CONN, nsocks).map_err(|e| e.context(format!("connecting to rank {p}")))?;
            let (peer, me) = (&s.peers[p], &s.peers[s.me]);
            let (lanes, interrupt) = if peer.same_host(me) && s.paths.local == LocalPath::CopyEngine {
                let peer_device = peer.same_process(me).then_some(peer.device);
                ce::lanes(s.dev, p, peer_device, ds.outgoing, ds.incoming)?
            } else if !peer.same_host(me) && s.paths.net != NetWant::Socket {
                net_lanes(&s, p, ds.outgoing, ds.incoming)?
            } else {
                link::tcp_lanes(p, ds.outgoing, ds.incoming)?
            };
            *slot = Some(Link::spawn(Some(s.dev), s.me, p, lanes, interrupt, fit)?);
        }
        // Every link thread's CUDA staging exists before the first step kernel can run (link.rs).
        for (p, l) in links.iter().enumerate() {
            if let Some(l) = l {
                l.ready().map_err(|e| e.context(format!("setting up the network link to rank {p}")))?;
            }
        }
        let links = Arc::new(links);

        let fifo_mem = HostMapped::zeroed(s.dev, FifoWords::bytes(FIFO_SLOTS))?;
        // SAFETY: fresh, zeroed, page-aligned memory of the right size, owned by Net, which stops
        // the proxy (the FIFO's only host user) before freeing it.
        let words = unsafe { FifoWords::over(fifo_mem.host, FIFO_SLOTS) }?;
        let head = DeviceBuffer::zeroed(s.dev, 8)?;
        let issued = DeviceBuffer::zeroed(s.dev, 24)?;
        let done = Arc::new(HostMapped::zeroed(s.dev, 64)?);
        let fifo = crate::proxy::fifo::device_view(fifo_mem.dev_ptr, head.ptr, FIFO_SLOTS);
        let plans = Arc::new(Mutex::new(Plans::default()));
        let inline_peer: Vec<bool> = links.iter().map(|l| l.as_ref().is_some_and(|l| l.inline_sockets().is_some())).collect();
        // The proxy spins waiting for its link threads where they spin: all links plain TCP.
        let tcp = links.iter().zip(&inline_peer).all(|(l, &t)| l.is_none() || t);
        let (spin, stripe_min) = (link::Spin::for_links(fit && tcp), link::fit_stripe_min(fit));
        // Jobs the TCP links (the only ones carried inline) stripe travel on every lane, not inline.
        let inline_max = if stripe_min > 0 { inline::max_bytes().min(stripe_min - 1) } else { inline::max_bytes() };
        // Narrow phases' jobs: as where the threads fit (`link::Job::narrow`).
        let narrow = (inline_max.min(link::narrow_stripe_min() - 1), link::Spin::for_links(tcp).io);
        let status = Arc::new(NetStatus::default());
        let handler = NetHandler::new(s.dev, s.me, links.clone(), plans.clone(), done.clone(), s.abort_flag.clone(), [(inline_max, spin.io), narrow], status.clone(), members.len())?;
        let placement = Placement { device: Some(s.dev), cpus: crate::bootstrap::topo::local_cpus(&s.dev.bus_id) };
        let proxy = Proxy::start(format!("oxccl-netproxy{}", s.me), FifoHost::new(words), Box::new(handler), placement, s.on_error)?;
        nccl_info!(
            Subsys::Net,
            "rank {}: {}; {} hosts {:?}; {} local ranks over NVLink, links to {} ranks; link threads spin {:?} (queue {:?}), TCP links stripe from {}; Broadcast and Reduce {}; along the chain of hosts in pieces from {} and {} bytes; AllReduce, ReduceScatter and AllGather around the ring of hosts from {} bytes",
            s.me,
            s.paths.describe(),
            layout.nhosts(),
            layout.hosts,
            members.len(),
            links.iter().filter(|l| l.is_some()).count(),
            spin.io,
            spin.queue,
            if stripe_min > 0 { stripe_min } else { link::stripe_min() },
            if layout.narrow { format!("spin {:?} and stripe from {} on TCP links (narrow)", narrow.1, link::narrow_stripe_min()) } else { "as the rest".to_string() },
            threshold(layout.bcast_pipeline_min),
            threshold(layout.reduce_pipeline_min),
            threshold(layout.ring_min)
        );
        Ok(Net {
            layout,
            local,
            links: Mutex::new(Some(links)),
            proxy: Mutex::new(Some(proxy)),
            plans,
            fifo,
            _fifo_mem: fifo_mem,
            _head: head,
            issued,
            done,
            scratch: Mutex::new(Vec::new()),
            mailboxes: Mutex::new([Vec::new(), Vec::new()]),
            stage_max: stage::max_bytes(),
            pipe_min: progress::threshold(),
            inline_peer,
            p2p_overlap: p2p_overlap(),
            step_blocks: step_blocks(),
            block_cap: s.peers.get(s.me).map_or(1, |p| p.sm_count.max(1) as u32),
            packets_max: packets::max_bytes(),
            combine_min: stage::combine_min(packets::max_bytes()),
            dev: s.dev,
            status,
            stream_trace: trace_dir().map(|d| Mutex::new(streamtrace::StreamTrace::new(d))),
            launch,
        })
    }

    /// Records `m` on `stream` when OXCCL_NET_TRACE is set (`streamtrace`).
    fn mark(&self, m: streamtrace::Mark, stream: cu::CUstream) {
        if let Some(t) = &self.stream_trace {
            t.lock().mark(m, stream);
        }
    }

    /// The cross-host steps' state for the hang dump: how many the kernels handed over, the proxy
    /// started and finished, and what a long-waiting step waits for. `read` copies a device word
    /// (without waiting for the communicator's streams).
    pub fn describe(&self, read: &dyn Fn(u64) -> Result<u64>) -> String {
        let issued = read(self.issued.ptr).map_or_else(|e| format!("? ({})", e.msg), |v| v.to_string());
        format!("cross-host steps: {issued} started by kernels, {}", self.describe_host())
    }

    /// The part of `describe` the host knows without the driver (the hang dump prints it first:
    /// reading the device can wait behind the very stall it is about).
    pub fn describe_host(&self) -> String {
        // SAFETY: the first word of `done`, host-mapped, written by the proxy thread.
        let done = unsafe { &*self.done.host.cast::<AtomicU64>() }.load(Ordering::Acquire);
        let started = self.status.started.load(Ordering::Relaxed);
        let mut s = format!("{started} by the proxy, {done} finished");
        let (at, what) = self.status.wait.lock().clone();
        if at == started && started > done && !what.is_empty() {
            s.push_str(&format!("; step at FIFO position {} waits: {what}", started - 1));
        }
        s
    }

    /// Stops the proxy and closes the links; `abort`: without waiting for anything (kernels were
    /// told to stop), and the local communicator is aborted too, else destroyed.
    pub fn shutdown(&self, abort: bool) {
        if abort {
            if let Some(l) = self.links.lock().as_ref() {
                l.iter().flatten().for_each(Link::interrupt);
            }
            self.local.abort();
        }
        if let Some(mut p) = self.proxy.lock().take() {
            if abort {
                p.abort();
            } else {
                // Detached sends (launch_step) may still be queued or running: carry them out.
                p.finish();
            }
        }
        drop(self.links.lock().take());
        if !abort {
            // Every call's work has finished (the caller waited for its streams, and the proxy
            // for its steps), so every event has a time.
            if let Some(t) = &self.stream_trace {
                t.lock().write(self.dev, self.layout.me);
            }
            if let Err(e) = self.local.destroy() {
                nccl_warn!("destroying the host-local communicator: {}", e.msg);
            }
        }
    }

    fn scratch(&self, bytes: u64) -> Result<u64> {
        let mut v = self.scratch.lock();
        if let Some(b) = v.last().filter(|b| b.size as u64 >= bytes) {
            return Ok(b.ptr);
        }
        let _relaxed = RelaxedCapture::new()?;
        let size = bytes.max(1 << 20).next_power_of_two() as usize;
        let b = DeviceBuffer::zeroed(self.dev, size)?;
        let p = b.ptr;
        v.push(b);
        Ok(p)
    }

    /// One collective (inside the communicator's launch lock).
    pub fn launch_coll(&self, r: &Ready, t: &CollTask) -> Result<()> {
        let scratch = match plan::scratch_bytes(t.coll, t.count, t.dtype, self.layout.nranks()) {
            0 => 0,
            b => self.scratch(b)?,
        };
        let call = Call { coll: t.coll, send: t.send, recv: t.recv, count: t.count, dtype: t.dtype, op: t.op, root: t.root as usize, scratch };
        let stages = plan::plan_coll(&self.layout, &call);
        nccl_trace!(Subsys::Net, "{:?} count {} {}: {} stages", t.coll, t.count, t.dtype.name(), stages.len());
        if plan::is_direct(t.coll) {
            return self.run_direct(r, stages, t.dtype, t.stream);
        }
        self.run_stages(r, stages, t.dtype, t.stream)
    }

    /// A group's point-to-point operations (inside the communicator's launch lock).
    pub fn launch_p2p(&self, r: &Ready, ops: &[P2pOp], stream: cu::CUstream) -> Result<()> {
        let ops: Vec<plan::P2p> = ops.iter().map(|o| plan::P2p { is_send: o.is_send, peer: o.peer, buf: o.buf, bytes: o.bytes }).collect();
        self.run_direct(r, plan::direct(&self.layout, &ops), DataType::Uint8, stream)
    }

    /// Point-to-point stages (`plan::direct`); with OXCCL_NET_P2P_OVERLAP the step goes first, its
    /// kernel returning once the proxy has it, the local launch runs while the proxy moves the
    /// data, and a completion kernel then waits for the step.
    fn run_direct(&self, r: &Ready, stages: Vec<Stage>, dtype: DataType, stream: cu::CUstream) -> Result<()> {
        let stages = if self.p2p_overlap { plan::split_direct(stages) } else { Err(stages) };
        let (local, step) = match stages {
            Ok(two) => two,
            Err(stages) => return self.run_stages(r, stages, dtype, stream),
        };
        use streamtrace::Mark;
        self.mark(Mark::Begin, stream);
        let complete = self.launch_step(r, step, stream, true)?;
        self.mark(Mark::Step, stream);
        let ops: Vec<P2pOp> = local.iter().map(|o| P2pOp { is_send: o.is_send, peer: o.peer, buf: o.buf, bytes: o.bytes, stream }).collect();
        (self.launch.p2p)(&self.local, &ops)?;
        self.mark(Mark::Local, stream);
        if let Some((args, (grid, block))) = complete {
            launch(r.module.net_step(), grid, block, stream, &args)?;
            self.mark(Mark::Complete, stream);
        }
        Ok(())
    }

    fn run_stages(&self, r: &Ready, stages: Vec<Stage>, dtype: DataType, stream: cu::CUstream) -> Result<()> {
        use streamtrace::Mark;
        self.mark(Mark::Begin, stream);
        for s in stages {
            match s {
                Stage::Local(LocalOp::Coll { coll, send, recv, count, op, root }) => {
                    let t = CollTask { comm: self.local.clone(), coll, send, recv, count, dtype, op, root: root as i32, stream, config: None };
                    (self.launch.coll)(&t)?;
                    self.mark(Mark::Local, stream);
                }
                Stage::Local(LocalOp::P2p(v)) => {
                    let ops: Vec<P2pOp> = v.iter().map(|o| P2pOp { is_send: o.is_send, peer: o.peer, buf: o.buf, bytes: o.bytes, stream }).collect();
                    (self.launch.p2p)(&self.local, &ops)?;
                    self.mark(Mark::Local, stream);
                }
                Stage::Net(step) => {
                    self.launch_step(r, step, stream, false)?;
                    self.mark(Mark::Step, stream);
                }
            }
        }
        Ok(())
    }

    /// The host arenas for a staged step: (host address, device address) of each, at least
    /// `bytes` long; the second only for a detached step (`pair`), else null.
    fn mailbox(&self, bytes: u64, pair: bool) -> Result<[(*mut u8, u64); 2]> {
        let mut v = self.mailboxes.lock();
        let get = |list: &mut Vec<HostMapped>| -> Result<(*mut u8, u64)> {
            if let Some(m) = list.last().filter(|m| m.size as u64 >= bytes) {
                return Ok((m.host, m.dev_ptr));
            }
            let _relaxed = RelaxedCapture::new()?;
            let m = HostMapped::zeroed(self.dev, bytes.max(1 << 16).next_power_of_two() as usize)?;
            let r = (m.host, m.dev_ptr);
            list.push(m);
            Ok(r)
        };
        let [first, second] = &mut *v;
        Ok([get(first)?, if pair { get(second)? } else { (std::ptr::null_mut(), 0) }])
    }

    /// Launches a step's kernel. With `split`, a step that would wait for the proxy is only
    /// issued, and the completion launch (its arguments and block size) is returned for the caller
    /// to make once independent work is on the stream; None where nothing is left to wait for.
    fn launch_step(&self, r: &Ready, mut step: Step, stream: cu::CUstream, split: bool) -> Result<Option<(NetStepArgs, (u32, u32))>> {
        let keep = is_capturing(stream)?;
        let mut args = NetStepArgs {
            fifo: self.fifo,
            plan: 0,
            done: self.done.dev_ptr,
            issued: self.issued.ptr,
            abort_flag: r.abort_flag.dev_ptr,
            npre: 0,
            npost: 0,
            detach: 0,
            arena_copies: 0,
            packets: 0,
            pipe: 0,
            combine: 0,
            pad: 0,
            flip: 0,
            pre_flags: 0,
            post_flags: 0,
            copies: Default::default(),
        };
        // Staged on TCP links (every job within stage_max); the proxy then carries each phase
        // itself or through the link threads (NetHandler::inline_ok), touching host memory only.
        let tcp = self.stage_max > 0 && step.phases.iter().flat_map(|p| p.sends.iter().chain(&p.recvs)).all(|x| self.inline_peer.get(x.peer).copied().unwrap_or(false));
        // Copies beyond the step kernel's slots, made in launches of their own (`overflow`).
        let mut extra: (Vec<NetStepArgs>, Vec<NetStepArgs>) = (Vec::new(), Vec::new());
        let (step, shape) = match tcp.then(|| stage::stage_on_host(&step, self.stage_max, usize::MAX, self.combine_min)).flatten() {
            Some(mut st) => {
                // More copies than the kernel's slots (a group's many separate buffers): extra
                // launches make them, plainly (no packets, no pipelining).
                let many = st.pre.len() + st.post.len() + st.step.copies.len() > OX_NET_COPIES;
                // Small steps pass their data as packets (their arena grows by the packet areas).
                let pk = packets::reserve(&mut st, if many { 0 } else { self.packets_max });
                // A large step without packets pipelines its copies (`progress`): its flags are
                // reserved in the arena after everything else.
                let moved = |v: &[stage::HostCopy]| v.iter().map(|c| c.bytes).sum::<u64>();
                let most = moved(&st.pre).max(moved(&st.post));
                if !many && pk.is_empty() && self.pipe_min.is_some_and(|min| most > min) {
                    let span = |v: &[stage::HostCopy]| v.iter().map(|c| (c.host, c.bytes)).collect();
                    let (pre, post) = (span(&st.pre), span(&st.post));
                    st.step.progress = Some(progress::Layout::new(pre, post, progress::chunk_for(most), &mut |n| st.step.host(n)));
                }
                let detach = st.sends_only();
                let [(host, dev), (host1, dev1)] = self.mailbox(st.step.arena_bytes, detach)?;
                // The kernel's side of each arena copy: the packets when there are, else the plain range.
                let at = |i: usize, host: u64| dev + pk.get(i).map_or(host, |r| r.packets);
                let pre = st.pre.iter().enumerate().map(|(i, c)| NetCopy { src: c.dev, dst: at(i, c.host), bytes: c.bytes, with: 0 });
                let post = st.post.iter().enumerate().map(|(i, c)| NetCopy { src: at(st.pre.len() + i, c.host), dst: c.dev, bytes: c.bytes, with: c.with.unwrap_or(0) });
                // A step that only sends has all it needs in the arena once its kernel pushed it:
                // the kernel returns then, and the stream goes on while the proxy sends. The next
                // staged step's kernel waits for the proxy before it refills the arena, later
                // steps' completion implies this one's, errors reach the communicator's async
                // error, and a graceful teardown drains the proxy (Proxy::finish). (`detach`, above.)
                // The step's GPU-to-GPU copies: before the hand-over in a detached kernel, else
                // after it, so a kernel without pre-copies still pushes at once.
                let own = st.step.copies.iter().map(|c| NetCopy { src: c.src, dst: c.dst, bytes: c.bytes, with: 0 });
                let (npre, npost) = match detach {
                    true => (st.pre.len() + st.step.copies.len(), st.post.len()),
                    false => (st.pre.len(), st.post.len() + st.step.copies.len()),
                };
                // Straight into the kernel's argument slots: no allocation on the launch path. The
                // arena side of the pre- and post-copies moves with the arena a step uses.
                let copies = own
                    .clone()
                    .filter(|_| detach)
                    .map(|c| (c, false))
                    .chain(pre.map(|c| (c, true)))
                    .chain(post.map(|c| (c, true)))
                    .chain(own.filter(|_| !detach).map(|c| (c, false)));
                args.detach = u32::from(detach);
                // Only a detached step alternates: its kernel fills one arena while the proxy still
                // sends the step before from the other. Others keep to the first, as every step
                // did before (alternating cost exchanges 2-3 us a step at 2 simulated hosts,
                // where a kernel waits for its own step anyway). The first arena's other users
                // have all finished when a detached step writes it: steps that wait for the proxy
                // before their kernel ends, and detached steps two or more before it.
                args.flip = if detach { dev1.wrapping_sub(dev) } else { 0 };
                if many {
                    let list: Vec<(NetCopy, bool)> = copies.collect();
                    extra = overflow(&args, &list, npre);
                } else {
                    for (k, (slot, (c, arena))) in args.copies.iter_mut().zip(copies).enumerate() {
                        *slot = c;
                        args.arena_copies |= u32::from(arena) << k;
                    }
                    (args.npre, args.npost) = (npre as u32, npost as u32);
                }
                args.packets = u32::from(!pk.is_empty());
                // Combining copies out are never packets: they carry more than packets do.
                debug_assert!(pk.is_empty() || st.combine.is_none());
                args.combine = st.combine.map_or(0, |op| combine_code(&op));
                if let Some(l) = &st.step.progress {
                    (args.pipe, args.pre_flags, args.post_flags) = (l.chunk as u32, dev + l.pre_flags, dev + l.post_flags);
                }
                let flip = if detach { (host1 as u64).wrapping_sub(host as u64) } else { 0 };
                let (npre, npost) = (args.npre as usize, args.npost as usize);
                let bytes = |v: &[NetCopy]| v.iter().map(|c| c.bytes).sum::<u64>();
                let (pre_b, post_b) = (bytes(&args.copies[..npre]), bytes(&args.copies[npre..npre + npost]));
                let grid = staged_grid(pre_b, post_b, self.step_blocks, st.step.progress.as_ref().map(|l| l.chunk), self.block_cap);
                (Step { pinned: host as u64, pinned_flip: flip, copies: Vec::new(), packets: pk, ..st.step }, (grid, 512))
            }
            None => {
                // The copies go first, as the host stage they stand for would (a rank alone on its
                // host: the local communicator is itself, and it pairs sends to self in order).
                let copies = std::mem::take(&mut step.copies);
                if !copies.is_empty() {
                    let ops: Vec<P2pOp> = copies
                        .iter()
                        .flat_map(|c| [(true, c.src), (false, c.dst)].map(|(is_send, buf)| P2pOp { is_send, peer: 0, buf, bytes: c.bytes, stream }))
                        .collect();
                    (self.launch.p2p)(&self.local, &ops)?;
                }
                if !step.has_work() {
                    return Ok(None);
                }
                (step, (1, 32))
            }
        };
        let id = self.plans.lock().insert(step, keep)?;
        args.plan = u64::from(id);
        let mut complete = None;
        // A step with results to wait for hands over here and finishes in a completion launch
        // after the local work (a pipelined one copies its results out there as they come); one
        // with extra launches waits here, its copies out following at once.
        if split && args.detach == OX_NET_STEP_WAIT && extra.1.is_empty() {
            let mut done = args;
            done.detach = OX_NET_STEP_COMPLETE;
            args.detach = OX_NET_STEP_ISSUE;
            complete = Some((done, shape));
        }
        let go = |a: &NetStepArgs| {
            let bytes = |v: &[NetCopy]| v.iter().map(|c| c.bytes).sum::<u64>();
            let grid = staged_grid(bytes(&a.copies[..a.npre as usize]), bytes(&a.copies[..a.npost as usize]), self.step_blocks, None, self.block_cap);
            launch(r.module.net_step(), grid, 512, stream, a)
        };
        // Once a pre launch has run, the step must follow (the kernels count on it): a failed
        // launch here is a broken stream, reported as the call's error.
        extra.0.iter().try_for_each(&go).inspect_err(|_| self.plans.lock().remove(id))?;
        launch(r.module.net_step(), shape.0, shape.1, stream, &args).inspect_err(|_| self.plans.lock().remove(id))?;
        extra.1.iter().try_for_each(&go)?;
        Ok(complete)
    }
}

/// A staged step's copies (kernel order: `list[..npre]` in, the rest out; `true`: the host side is
/// in the arena) for more than a kernel's `OX_NET_COPIES` slots: launches of `OX_NET_STEP_PRE`
/// making the copies in, to run before the step kernel, and completion launches making the copies
/// out, after it (`npre` = 0: their wait for the step the kernel waited for returns at once), at
/// most `OX_NET_COPIES` each, in order. `step` is the step kernel's
/// arguments, which keep no copies (its kernel hands over and waits, or returns when detached).
fn overflow(step: &NetStepArgs, list: &[(NetCopy, bool)], npre: usize) -> (Vec<NetStepArgs>, Vec<NetStepArgs>) {
    let (ins, outs) = list.split_at(npre.min(list.len()));
    let part = |chunk: &[(NetCopy, bool)], mode: u32| {
        let mut a = NetStepArgs { detach: mode, npre: 0, npost: 0, arena_copies: 0, packets: 0, pipe: 0, ..*step };
        for (k, (c, arena)) in chunk.iter().enumerate() {
            a.copies[k] = *c;
            a.arena_copies |= u32::from(*arena) << k;
        }
        let n = chunk.len() as u32;
        (a.npre, a.npost) = if mode == OX_NET_STEP_PRE { (n, 0) } else { (0, n) };
        a
    };
    (ins.chunks(OX_NET_COPIES).map(|c| part(c, OX_NET_STEP_PRE)).collect(), outs.chunks(OX_NET_COPIES).map(|c| part(c, OX_NET_STEP_COMPLETE)).collect())
}

/// The host arena a staged step's kernel used (the second of the pair when `second`); null for
/// a step that is not staged.
fn staged_arena(step: &Step, second: bool) -> *mut u8 {
    match step.pinned {
        0 => std::ptr::null_mut(),
        p if second => p.wrapping_add(step.pinned_flip) as *mut u8,
        p => p as *mut u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_beyond_the_kernels_slots_go_in_order_into_launches_before_and_after_the_step() {
        let c = |i: u64| NetCopy { src: i, dst: 1000 + i, bytes: 16, with: 0 };
        // 70 copies in (the odd ones with an arena side), 40 out.
        let list: Vec<(NetCopy, bool)> = (0..110).map(|i| (c(i), i % 2 == 1)).collect();
        let step = NetStepArgs { plan: 7, flip: 4096, detach: OX_NET_STEP_WAIT, ..Default::default() };
        let (pre, post) = overflow(&step, &list, 70);
        assert_eq!(pre.iter().map(|a| a.npre).collect::<Vec<_>>(), vec![32, 32, 6]);
        assert_eq!(post.iter().map(|a| a.npost).collect::<Vec<_>>(), vec![32, 8]);
        assert!(pre.iter().all(|a| a.detach == OX_NET_STEP_PRE && a.npost == 0));
        assert!(post.iter().all(|a| a.detach == OX_NET_STEP_COMPLETE && a.npre == 0));
        // Every copy once, in order, with its arena bit, and the step's other arguments kept.
        let mut seen = Vec::new();
        for a in pre.iter().chain(&post) {
            assert_eq!((a.plan, a.flip, a.packets, a.pipe), (7, 4096, 0, 0));
            let n = (a.npre + a.npost) as usize;
            for k in 0..n {
                assert_eq!(a.arena_copies >> k & 1 == 1, a.copies[k].src % 2 == 1, "arena bit of copy {}", a.copies[k].src);
                seen.push(a.copies[k].src);
            }
            assert_eq!(a.arena_copies.checked_shr(n as u32).unwrap_or(0), 0, "no bits past the copies");
        }
        assert_eq!(seen, (0..110).collect::<Vec<_>>());
        // A step that only sends has nothing after it.
        let (pre, post) = overflow(&step, &list[..40], 40);
        assert_eq!((pre.len(), post.len()), (2, 0));
    }

    #[test]
    fn staged_steps_take_a_block_per_32_kib_of_copies_up_to_the_setting() {
        let all = 132;
        assert_eq!(staged_grid(0, 0, 8, None, all), 1, "a step with no copies still runs one block");
        assert_eq!(staged_grid(256 << 10, 256 << 10, 1, None, all), 1, "the default keeps one block up to the inline size");
        assert_eq!(staged_grid(64 << 10, 0, 8, None, all), 2);
        assert_eq!(staged_grid(33 << 10, 100 << 10, 32, None, all), 4, "the larger side decides");
        assert_eq!(staged_grid(200 << 10, 0, 4, None, all), 4);
        assert_eq!(staged_grid(8, 8, 0, None, all), 1, "never no block");
        assert_eq!(staged_grid(4 << 20, 0, 1, None, all), 32, "32 beyond the inline size whatever the setting");
        assert_eq!(staged_grid(200 << 10, 0, 1, Some(32 << 10), all), 7, "a block per chunk of a pipelined step, beyond the setting");
        assert_eq!(staged_grid(400 << 10, 0, 1, Some(1 << 20), all), 13, "not fewer than by size");
        assert_eq!(staged_grid(64 << 20, 0, 1, Some(32 << 10), all), 32, "at most 32 for the chunks");
        // maxCTAs: every step kernel within the communicator's block budget.
        assert_eq!(staged_grid(4 << 20, 0, 1, None, 8), 8);
        assert_eq!(staged_grid(400 << 10, 0, 1, Some(32 << 10), 4), 4);
        assert_eq!(staged_grid(8, 0, 32, None, 0), 1, "never no block");
        // Beyond the inline size, up to 32 blocks whatever the setting (more if it says so).
        assert_eq!(staged_grid((256 << 10) + 1, 0, 1, None, all), 9);
        assert_eq!(staged_grid(1 << 20, 0, 1, None, all), 32);
        assert_eq!(staged_grid(0, 64 << 20, 8, None, all), 32);
        assert_eq!(staged_grid(0, 64 << 20, 48, None, all), 48);
    }

    #[test]
    fn plans_keep_captured_steps_and_recycle_the_others() {
        let mut p = Plans::default();
        let a = p.insert(Step::default(), false).unwrap();
        let b = p.insert(Step::default(), true).unwrap();
        assert_ne!(a, b);
        assert!(p.take(a).is_ok());
        assert!(p.take(a).is_err(), "an eager step runs once");
        assert!(p.take(b).is_ok() && p.take(b).is_ok(), "a captured step runs at every replay");
        let c = p.insert(Step::default(), false).unwrap();
        assert_eq!(c, a, "numbers are reused");
        p.remove(c);
        assert!(p.take(c).is_err());
        assert!(p.take(99).is_err());
    }

    #[test]
    fn plans_count_the_eager_steps_whose_triggers_are_on_their_way() {
        let mut p = Plans::default();
        let kept = p.insert(Step::default(), true).unwrap();
        assert_eq!(p.eager, 0, "a captured step may never be replayed");
        let (a, b) = (p.insert(Step::default(), false).unwrap(), p.insert(Step::default(), false).unwrap());
        assert_eq!(p.eager, 2);
        p.take(a).unwrap();
        p.take(kept).unwrap();
        assert_eq!(p.eager, 1, "taking a captured step leaves the count");
        p.remove(b); // its launch failed: no trigger comes
        assert_eq!(p.eager, 0);
        p.remove(b);
        p.remove(kept);
        assert_eq!(p.eager, 0, "removing twice, or a captured step, counts nothing");
    }
}
