//! Communicators that span hosts: PortChannel over TCP.
//!
//! Ranks of one host form a *local* communicator (an ordinary oxccl communicator: MemoryChannels
//! over NVLink). Across hosts, each rank has a TCP link to every rank of the other hosts
//! (`link`), and a proxy thread (`crate::proxy`) that carries out cross-host *steps*. Every
//! operation is planned (`plan`, a pure function) into stages on the user's stream: launches on
//! the local communicator, and steps. A step is one tiny kernel (kernels/net_step.cu) that pushes
//! a trigger naming the step's plan into the proxy's FIFO and waits on a host-to-device counter;
//! the proxy moves the data (GPU -> pinned host -> socket -> pinned host -> GPU, chunk-pipelined),
//! combines partial results on the host where the step reduces (`hostreduce`), then bumps the
//! counter. Because the stream itself waits, the stages need no host synchronisation, and the
//! same launches work inside CUDA graphs: a captured step's plan is kept for every replay.

pub mod hostreduce;
pub mod packets;
pub mod pipeline;
pub mod plan;
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

use self::settings::{DEFAULT_SOCKETS, bcast_direct_max, bcast_stripe_min, narrow_setting, p2p_overlap, plan_bytes, plan_min, sockets_per_link, step_blocks, threshold};

/// Data connection number of the network links (per pair of ranks; see Bootstrap::data_sockets).
const NET_CONN: u32 = 0x4e45_5400;
/// FIFO slots: each step kernel has one trigger in flight, and a communicator's kernels run one
/// at a time, so a few slots are plenty.
const FIFO_SLOTS: u32 = 64;

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
fn net_lanes(s: &Setup<'_>, p: usize, mut out: Vec<std::net::TcpStream>, mut inc: Vec<std::net::TcpStream>) -> Result<(Vec<link::Lane>, link::Interrupt)> {
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
fn net_lanes(_s: &Setup<'_>, p: usize, out: Vec<std::net::TcpStream>, inc: Vec<std::net::TcpStream>) -> Result<(Vec<link::Lane>, link::Interrupt)> {
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
    pub coll: fn(&CollTask) -> Result<()>,
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
                    let t = CollTask { comm: self.local.clone(), coll, send, recv, count, dtype, op, root: root as i32, stream };
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

/// The proxy's side: runs steps.
struct NetHandler {
    dev: &'static Device,
    me: usize,
    links: Arc<Links>,
    plans: Arc<Mutex<Plans>>,
    done: Arc<HostMapped>,
    abort_flag: Arc<HostMapped>,
    stream: OwnedStream,
    /// A copy was issued on `stream` since the last synchronisation: only then does `sync` call
    /// the driver (a staged step makes no CUDA call at all, see `stage`).
    copied: std::sync::atomic::AtomicBool,
    /// Host memory of the steps (received partial results, accumulators) and for device inputs
    /// of a reduction; pinned, grown on demand.
    arena: Vec<HostMapped>,
    tmp: Vec<HostMapped>,
    /// Staging of inline phases' GPU sources and destinations (see `run_inline`).
    outbox: Vec<HostMapped>,
    inbox: Vec<HostMapped>,
    /// How this thread carries a phase, ordinary ([0]) or narrow ([1], `Phase::narrow`): jobs up
    /// to the first size it carries itself (`inline`; 0: never), and it spins the second waiting
    /// for the link threads' jobs (`link::Spin::io`).
    carry: [(u64, std::time::Duration); 2],
    status: Arc<NetStatus>,
    relaxed: Option<RelaxedCapture>,
    /// OXCCL_NET_PROFILE=1: where steps spend their time, printed when the communicator goes.
    profile: Option<Profile>,
    /// OXCCL_NET_TRACE=DIR: per-step timestamps on the machine's monotonic clock, written to
    /// DIR/oxccl-net-trace.<pid>.txt when the communicator goes (see `Trace`).
    trace: Option<Trace>,
    /// Threaded phases combine their inputs as they land (`pipeline`); OXCCL_NET_PIPELINE=0: after
    /// all transfers, as before (for comparison).
    pipeline: bool,
    /// Threads that help the proxy combine large reductions (`hostreduce::helpers`).
    helpers: usize,
    /// Seconds of host combining in the current phase's reductions (profiling only).
    combining: f64,
}

/// Time per step by size class (bytes moved, powers of 4): steps, total, transfers, reductions,
/// and the host combining within those reductions (the rest of them is copies to and from the GPU).
#[derive(Default)]
struct Profile {
    rows: std::collections::BTreeMap<u32, [f64; 5]>,
}

impl Profile {
    /// `step`: a whole step's row (its total), else a phase's.
    fn add(&mut self, step: bool, bytes: u64, total: f64, xfer: f64, reduce: f64, combine: f64) {
        let class = if bytes == 0 { 0 } else { (64 - bytes.leading_zeros()).div_ceil(2) };
        let r = self.rows.entry(class + if step { 100 } else { 0 }).or_default();
        r[0] += 1.0;
        r[1] += total;
        r[2] += xfer;
        r[3] += reduce;
        r[4] += combine;
    }
}

impl NetHandler {
    #[allow(clippy::too_many_arguments)]
    fn new(
        dev: &'static Device,
        me: usize,
        links: Arc<Links>,
        plans: Arc<Mutex<Plans>>,
        done: Arc<HostMapped>,
        abort_flag: Arc<HostMapped>,
        carry: [(u64, std::time::Duration); 2],
        status: Arc<NetStatus>,
        local_ranks: usize,
    ) -> Result<NetHandler> {
        // Not the legacy stream: the user's kernel that waits for this step may run on a blocking one.
        let stream = OwnedStream::new(dev)?;
        // The pinned buffers at their smallest (1 MiB, `grow`) now, before any step kernel spins:
        // CUDA allocations inside a step are what deadlocked the driver at 8 ranks (link.rs). A
        // step needing more still grows them then, on this one thread.
        let mut bufs = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for b in &mut bufs {
            grow(dev, b, 1)?;
        }
        let [arena, tmp, outbox, inbox] = bufs;
        Ok(NetHandler {
            dev,
            me,
            links,
            plans,
            done,
            abort_flag,
            stream,
            copied: std::sync::atomic::AtomicBool::new(false),
            arena,
            tmp,
            outbox,
            inbox,
            carry,
            status,
            relaxed: None,
            profile: crate::config::env("OXCCL_NET_PROFILE").filter(|v| v.trim() == "1").map(|_| Profile::default()),
            trace: trace_dir().map(|dir| Trace { dir, rows: Vec::new(), exchange: (0, 0) }),
            combining: 0.0,
            pipeline: crate::config::env("OXCCL_NET_PIPELINE").is_none_or(|v| v.trim() != "0"),
            helpers: hostreduce::helpers(crate::bootstrap::topo::cpus(), local_ranks),
        })
    }

    fn stopped(&self) -> Option<Error> {
        // SAFETY: the abort flag's first word, written by ncclCommAbort and the watchdog.
        let v = unsafe { std::ptr::read_volatile(self.abort_flag.host.cast::<u32>()) };
        (v != 0).then(|| Error::remote(format!("rank {}: communicator aborted during a cross-host step", self.me)))
    }

    fn link(&self, peer: usize) -> Result<&Link> {
        self.links.get(peer).and_then(Option::as_ref).ok_or_else(|| Error::internal(format!("no network link to rank {peer}")))
    }

    /// `second`: a staged step whose kernel used the second of its pair of arenas.
    fn run(&mut self, step: &Step, second: bool, mut prog: Option<&mut Prog>) -> Result<()> {
        // A staged step's arena came with its launch (the kernel fills and empties it).
        let arena = match step.pinned {
            0 => grow(self.dev, &mut self.arena, step.arena_bytes)?,
            _ => staged_arena(step, second),
        };
        for (k, ph) in step.phases.iter().enumerate() {
            let n = ph.sends.len() + ph.recvs.len();
            let inline = n > 0 && self.inline_ok(ph);
            // The threaded path combines as the inputs land where the phase allows (`pipeline`).
            let pipe = (n > 0 && !inline && self.pipeline).then(|| pipeline::plan(ph)).flatten();
            let mut preloaded = false;
            if n > 0 && pipe.is_none() {
                // A reduction's first device input goes to its accumulator while the transfers
                // run (the planner never makes it a receive's destination or the accumulator a
                // send's source in the same phase).
                for red in &ph.reduces {
                    if let (Some(&Buf::Dev(p)), true) = (red.inputs.first(), red.bytes > 0) {
                        // SAFETY: [acc, acc + bytes) is reserved in the arena grown above.
                        let acc = unsafe { arena.add(red.acc as usize) };
                        self.copied.store(true, Ordering::Relaxed);
                        check(unsafe { cu::cuMemcpyDtoHAsync_v2(acc.cast(), p, red.bytes as usize, self.stream.raw) }, "cuMemcpyDtoHAsync (reduction input)")?;
                        preloaded = true;
                    }
                }
            }
            // Clocks only when profiling: this is the proxy's per-step path.
            let t0 = self.profile.is_some().then(std::time::Instant::now);
            self.combining = 0.0;
            if let Some(pipe) = &pipe {
                let t1 = self.run_pipelined(arena, k, ph, pipe, prog.as_deref_mut())?;
                if let (Some(p), Some(t0)) = (self.profile.as_mut(), t0) {
                    let bytes = ph.sends.iter().chain(&ph.recvs).map(|x| x.bytes).sum();
                    let t1 = t1.unwrap_or(t0);
                    p.add(false, bytes, 0.0, (t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64(), self.combining);
                }
                continue;
            }
            if inline {
                self.run_inline(arena, k, ph, preloaded, prog.as_deref_mut())?;
            } else if n > 0 {
                let t = Tracker::new(n);
                match prog.as_deref_mut() {
                    None => {
                        self.post_phase(arena, ph, &t, &[], &[], None)?;
                        self.wait_phase(k, ph, &t)?;
                    }
                    Some(p) => self.run_marking(arena, k, ph, &t, p)?,
                }
                self.sync()?;
            }
            let t1 = self.profile.is_some().then(std::time::Instant::now);
            if let (Some(p), false) = (prog.as_deref(), ph.reduces.is_empty()) {
                // The reductions may read pre-copied inputs.
                p.gate.wait_all()?;
            }
            for red in &ph.reduces {
                self.reduce(arena, red, n > 0)?;
                if let (Some(p), Buf::Host(o)) = (prog.as_deref_mut(), red.out) {
                    p.marker.mark(&p.gate, o, o + red.bytes);
                }
            }
            if let (Some(p), Some(t0), Some(t1)) = (self.profile.as_mut(), t0, t1) {
                let bytes = ph.sends.iter().chain(&ph.recvs).map(|x| x.bytes).sum();
                p.add(false, bytes, 0.0, (t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64(), self.combining);
            }
        }
        if let Some(p) = prog {
            p.marker.finish(&p.gate)?;
        }
        Ok(())
    }

    /// A phase of a pipelined step on the link threads: its sends go as the kernel's copies come
    /// (`Gate`), and the receives into result ranges are marked as they land (`Marker`).
    fn run_marking(&self, arena: *mut u8, k: usize, ph: &Phase, t: &Arc<Tracker>, p: &mut Prog) -> Result<()> {
        let watched: Vec<bool> = ph.recvs.iter().map(|x| matches!(x.buf, Buf::Host(_))).collect();
        let landings = self.post_phase(arena, ph, t, &watched, &[], Some(&p.gate))?;
        let mut seen: Vec<Vec<u64>> = landings.recvs.iter().map(|l| l.as_ref().map_or(Vec::new(), |l| vec![0; l.progress().count()])).collect();
        let (mut idle, t0, mut noted) = (0u32, std::time::Instant::now(), false);
        while t.pending() > 0 {
            if let Some(e) = t.failed().or_else(|| self.stopped()) {
                return Err(e);
            }
            // Spinning, then yielding, never sleeping: a sleep (tens of microseconds) would pace
            // the results' flags below the wire's speed (a 256 KiB chunk lands in about that).
            idle = if p.mark_landed(ph, &landings, &mut seen) { 0 } else { idle.wrapping_add(1) };
            if idle < 4096 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
                if idle % 4096 == 0 && !noted && t0.elapsed() >= std::time::Duration::from_secs(1) {
                    // As `wait_phase` does, for the hang dump (sends may wait for the kernel's copies).
                    noted = true;
                    self.note_phase(k, ph, t.pending());
                }
            }
        }
        self.wait_phase(k, ph, t)?;
        p.mark_landed(ph, &landings, &mut seen);
        Ok(())
    }

    /// Hands a phase's jobs to the link threads, receives first (a peer's data can be written as
    /// soon as it arrives). Receives marked in `watched` are posted so that their bytes can be
    /// used as they land, sends in `watched_sends` so that their source's reading can be followed:
    /// their `Landing`s are returned, by number.
    fn post_phase(&self, arena: *mut u8, ph: &Phase, t: &Arc<Tracker>, watched: &[bool], watched_sends: &[bool], gate: Option<&Arc<progress::Gate>>) -> Result<Landings> {
        let mem = |b: Buf| match b {
            Buf::Dev(p) => Mem::Dev(p),
            // SAFETY: the plan reserved this range of the arena (grown by `run`).
            Buf::Host(o) => Mem::Host(unsafe { arena.add(o as usize) }),
        };
        let post = |v: &[plan::Xfer], dir: Dir, watched: &[bool]| -> Result<Vec<Option<link::Landing>>> {
            v.iter()
                .enumerate()
                .map(|(i, x)| {
                    // A send from the arena of a pipelined step waits for the kernel's copies.
                    let gate = if dir == Dir::Send && matches!(x.buf, Buf::Host(_)) { gate.cloned() } else { None };
                    let job = Job { mem: mem(x.buf), bytes: x.bytes, done: t.clone(), landed: None, gate, stripe_min: ph.stripe_min, narrow: ph.narrow };
                    Ok(self.link(x.peer)?.post_job(job, dir, watched.get(i).copied().unwrap_or(false)))
                })
                .collect()
        };
        let recvs = post(&ph.recvs, Dir::Recv, watched)?;
        let sends = post(&ph.sends, Dir::Send, watched_sends)?;
        Ok(Landings { recvs, sends })
    }

    /// Waits for every job of phase `k` (noting what is outstanding for the hang dump).
    fn wait_phase(&self, k: usize, ph: &Phase, t: &Tracker) -> Result<()> {
        t.wait_noting(self.carry[usize::from(ph.narrow)].1, &|| self.stopped(), &|left| self.note_phase(k, ph, left))
    }

    /// Notes for the hang dump what phase `k` still waits for: `left` link transfers.
    fn note_phase(&self, k: usize, ph: &Phase, left: usize) {
        let n = ph.sends.len() + ph.recvs.len();
        let peers = |v: &[plan::Xfer]| v.iter().map(|x| x.peer).collect::<Vec<_>>();
        self.status.note(format!(
            "phase {k}: {left} link transfers outstanding (a striped job counts once per lane) of {n} jobs: sends to ranks {:?}, receives from ranks {:?}",
            peers(&ph.sends),
            peers(&ph.recvs)
        ))
    }

    /// A threaded phase whose reductions run as their inputs land (`pipeline`): GPU inputs copied
    /// to the host while the jobs run, each piece combined once every received input has it and
    /// its result copied to the GPU at once (or, for a result range the phase's transfers use,
    /// after they end). Returns when the transfers ended, for the profile.
    fn run_pipelined(&mut self, arena: *mut u8, k: usize, ph: &Phase, pipe: &pipeline::Pipe, mut prog: Option<&mut Prog>) -> Result<Option<std::time::Instant>> {
        use pipeline::Src;
        let tmp = if pipe.tmp_bytes > 0 { grow(self.dev, &mut self.tmp, pipe.tmp_bytes)? } else { std::ptr::null_mut() };
        for (red, r) in ph.reduces.iter().zip(&pipe.reductions) {
            for s in &r.inputs {
                if let (Src::Dev { dev, tmp: slot }, true) = (*s, red.bytes > 0) {
                    // SAFETY: the accumulator's range of the arena, or the scratch slot grown above.
                    let dst = unsafe { slot.map_or(arena.add(red.acc as usize), |o| tmp.add(o as usize)) };
                    self.copied.store(true, Ordering::Relaxed);
                    check(unsafe { cu::cuMemcpyDtoHAsync_v2(dst.cast(), dev, red.bytes as usize, self.stream.raw) }, "cuMemcpyDtoHAsync (reduction input)")?;
                }
            }
        }
        let t = Tracker::new(ph.sends.len() + ph.recvs.len());
        let landings = self.post_phase(arena, ph, &t, &pipe.watched, &pipe.watched_sends, prog.as_deref().map(|p| &p.gate))?;
        if let Some(p) = prog.as_deref() {
            // The reductions may read pre-copied inputs.
            p.gate.wait_all()?;
        }
        // The GPU inputs are on the host (the transfers go on meanwhile).
        self.sync()?;
        let pieces: Vec<(usize, u64, u64)> = ph.reduces.iter().enumerate().flat_map(|(i, r)| pipeline::pieces(r.bytes).map(move |(a, b)| (i, a, b))).collect();
        let landed = |s: &Src, a: u64, b: u64| match *s {
            Src::Landing { recv, skip, .. } => landings.recvs.get(recv).and_then(Option::as_ref).is_none_or(|l| l.has(skip + a, skip + b)),
            Src::Ready(_) | Src::Dev { .. } => true,
        };
        // Whether piece [a, b) of reduction i may be written to its GPU range now.
        let writable = |i: usize, a: u64, b: u64| match (&pipe.reductions[i].out, ph.reduces[i].out) {
            (pipeline::Out::Early, _) => true,
            (pipeline::Out::AfterSends(v), Buf::Dev(out)) => v.iter().all(|&k| {
                let x = &ph.sends[k];
                match (x.buf, landings.sends.get(k).and_then(Option::as_ref)) {
                    (Buf::Dev(q), Some(l)) => pipeline::read_before(out, a, b, q, x.bytes).is_none_or(|(lo, hi)| l.has(lo, hi)),
                    _ => false,
                }
            }),
            _ => false,
        };
        let (arena_at, tmp_at) = (arena as usize, tmp as usize);
        // One piece: the accumulator's range from the first input, the others combined in host
        // order (every host makes the same result bit for bit).
        let work = |&(i, a, b): &(usize, u64, u64)| {
            let (red, r) = (&ph.reduces[i], &pipe.reductions[i]);
            let len = (b - a) as usize;
            // SAFETY: each piece is a distinct range of its accumulator (accumulators are disjoint
            // from each other and from every input range: `pipeline::plan`), reserved in the
            // arena, and one thread claims it (`Claims`).
            let acc = unsafe { std::slice::from_raw_parts_mut((arena_at + (red.acc + a) as usize) as *mut u8, len) };
            let srcs: Vec<Option<&[u8]>> = r
                .inputs
                .iter()
                .map(|s| {
                    let at = match *s {
                        Src::Ready(o) | Src::Landing { at: o, .. } => Some(arena_at + (o + a) as usize),
                        Src::Dev { tmp: Some(o), .. } => Some(tmp_at + (o + a) as usize),
                        Src::Dev { tmp: None, .. } => None, // already in the accumulator
                    };
                    // SAFETY: an input range of the arena or scratch, landed or copied (checked by
                    // `landed` and the synchronisation above), not written while it is combined.
                    at.map(|p| unsafe { std::slice::from_raw_parts(p as *const u8, len) })
                })
                .collect();
            hostreduce::reduce_into(&red.op, acc, &srcs);
        };
        let clock = self.profile.is_some();
        let combining_ns = std::sync::atomic::AtomicU64::new(0);
        // A pipelined step's results stay in the arena (Out::Host): each piece is marked final for
        // its kernel as it is made, where `copy_out` would copy it to the GPU.
        let marking = prog.is_some();
        let copied: Vec<bool> = pieces.iter().map(|&(i, _, _)| matches!(pipe.reductions[i].out, pipeline::Out::Early | pipeline::Out::AfterSends(_)) || (marking && pipe.reductions[i].out == pipeline::Out::Host)).collect();
        let landed_n = |n: usize| {
            let (i, a, b) = pieces[n];
            pipe.reductions[i].inputs.iter().all(|s| landed(s, a, b))
        };
        let combine_n = |n: usize| {
            let c0 = clock.then(std::time::Instant::now);
            work(&pieces[n]);
            combining_ns.fetch_add(c0.map_or(0, |c| c.elapsed().as_nanos() as u64), Ordering::Relaxed);
        };
        let writable_n = |n: usize| {
            let (i, a, b) = pieces[n];
            (marking && pipe.reductions[i].out == pipeline::Out::Host) || writable(i, a, b)
        };
        let stream = self.stream.raw;
        let mut copy_out = |n: usize| {
            let (i, a, b) = pieces[n];
            let red = &ph.reduces[i];
            let Buf::Dev(dst) = red.out else {
                if let (Some(p), Buf::Host(o)) = (prog.as_deref_mut(), red.out) {
                    p.marker.mark(&p.gate, o + a, o + b);
                }
                return Ok(());
            };
            // SAFETY: the piece's range of the accumulator, final; dst the plan's device range,
            // which no transfer reads any more (`writable`).
            let src = unsafe { arena.add((red.acc + a) as usize) };
            self.copied.store(true, Ordering::Relaxed);
            check(unsafe { cu::cuMemcpyHtoDAsync_v2(dst + a, src.cast(), (b - a) as usize, stream) }, "cuMemcpyHtoDAsync (reduction result)")
        };
        // A piece takes one core about as long as the wire takes to bring it: more pieces at once
        // need helpers (the proxy thread combines too, and alone issues the CUDA copies).
        let bytes: u64 = ph.reduces.iter().map(|r| r.bytes).sum();
        let helpers = if bytes >= 4 * pipeline::PIECE { self.helpers } else { 0 };
        let mut t_xfer = None;
        let mut tick = || {
            if clock && t_xfer.is_none() && t.pending() == 0 {
                t_xfer = Some(std::time::Instant::now());
            }
        };
        let parts = pipeline::Pieces { landed: &landed_n, combine: &combine_n, copied: &copied, writable: &writable_n };
        let r = pipeline::drive(&parts, helpers, &mut copy_out, &mut tick, &|| t.failed().or_else(|| self.stopped()), &|left| {
            self.status.note(format!("phase {k}: {left} pieces of its reductions wait for received data or for sends to read their range"))
        });
        self.combining += combining_ns.load(Ordering::Relaxed) as f64 * 1e-9;
        r?;
        self.wait_phase(k, ph, &t)?;
        if let Some(p) = prog {
            p.mark_received(ph);
        }
        let t1 = t_xfer.or_else(|| clock.then(std::time::Instant::now));
        for (red, r) in ph.reduces.iter().zip(&pipe.reductions) {
            if let (Buf::Dev(out), pipeline::Out::AtEnd, true) = (red.out, &r.out, red.bytes > 0) {
                // SAFETY: the accumulator, final; out the plan's device range, which no transfer uses now.
                let src = unsafe { arena.add(red.acc as usize) };
                self.copied.store(true, Ordering::Relaxed);
                check(unsafe { cu::cuMemcpyHtoDAsync_v2(out, src.cast(), red.bytes as usize, self.stream.raw) }, "cuMemcpyHtoDAsync (reduction result)")?;
            }
        }
        self.sync()?;
        Ok(t1)
    }

    /// Whether this thread carries the phase itself: small enough (`plan::phase_fits`) and every
    /// link plain TCP.
    fn inline_ok(&self, ph: &Phase) -> bool {
        let max = self.carry[usize::from(ph.narrow)].0;
        max > 0
            && plan::phase_fits(ph, max)
            && ph.sends.iter().chain(&ph.recvs).all(|x| self.links.get(x.peer).and_then(Option::as_ref).is_some_and(|l| l.inline_sockets().is_some()))
    }

    /// A phase of small jobs on this thread (see `inline`): GPU sources copied to the pinned
    /// outbox with one synchronisation (which also covers `run`'s reduction preloads, `preloaded`),
    /// the frames written and read without blocking, GPU destinations copied from the inbox with
    /// one more. A staged step (`stage`) has no GPU buffers left: no CUDA call at all. In a
    /// pipelined step (`prog`) the sends from the arena go as the kernel's copies come (`Gate`),
    /// and the receives into it are marked as they land, so that the copies in, the wire and the
    /// copies out overlap on this one thread too.
    fn run_inline(&mut self, arena: *mut u8, k: usize, ph: &Phase, preloaded: bool, prog: Option<&mut Prog>) -> Result<()> {
        let dev_bytes = |v: &[plan::Xfer]| v.iter().filter(|x| matches!(x.buf, Buf::Dev(_))).map(|x| x.bytes.div_ceil(16) * 16).sum::<u64>();
        let outbox = grow(self.dev, &mut self.outbox, dev_bytes(&ph.sends))?;
        let inbox = grow(self.dev, &mut self.inbox, dev_bytes(&ph.recvs))?;
        // Where each job's bytes are on the host: the arena, or its slot in the outbox / inbox.
        let place = |v: &[plan::Xfer], base: *mut u8| -> Vec<*mut u8> {
            let mut off = 0u64;
            v.iter()
                .map(|x| match x.buf {
                    // SAFETY: the plan reserved this range of the arena (grown by `run`).
                    Buf::Host(o) => unsafe { arena.add(o as usize) },
                    Buf::Dev(_) => {
                        // SAFETY: the box was grown to the sum of these slots.
                        let p = unsafe { base.add(off as usize) };
                        off += x.bytes.div_ceil(16) * 16;
                        p
                    }
                })
                .collect()
        };
        let (src, dst) = (place(&ph.sends, outbox), place(&ph.recvs, inbox));
        let mut copies = preloaded;
        for (x, &h) in ph.sends.iter().zip(&src) {
            if let Buf::Dev(p) = x.buf {
                // SAFETY: h is an outbox slot of x.bytes; p the plan's device range.
                self.copied.store(true, Ordering::Relaxed);
                check(unsafe { cu::cuMemcpyDtoHAsync_v2(h.cast(), p, x.bytes as usize, self.stream.raw) }, "cuMemcpyDtoHAsync (network send)")?;
                copies = true;
            }
        }
        if copies {
            self.sync()?;
        }
        // One writer and one reader per peer, every job of the phase framed on them in order.
        let (mut outs, mut ins) = (PerPeer::<inline::Out>::default(), PerPeer::<inline::In>::default());
        for (x, &h) in ph.sends.iter().zip(&src) {
            let link = self.link(x.peer)?;
            let (w, _) = link.inline_sockets().ok_or_else(|| Error::internal("inline phase on a link without sockets"))?;
            let gate = match (x.buf, prog.as_deref()) {
                (Buf::Host(_), Some(p)) => Some(p.gate.clone()),
                _ => None,
            };
            // SAFETY: h holds x.bytes (the arena range, written meanwhile only by the step
            // kernel's copies the gate watches, or the outbox slot synchronised above), alive
            // until exchange returns.
            unsafe { outs.get(x.peer, || inline::Out::new(w, x.peer)).frame_at(link.next_seq(0, Dir::Send), h, x.bytes as usize, gate) };
        }
        // A pipelined step's receives into the arena: (receiver, frame, arena offset, bytes marked).
        let mut watched: Vec<(usize, usize, u64, u64)> = Vec::new();
        for (x, &h) in ph.recvs.iter().zip(&dst) {
            let link = self.link(x.peer)?;
            let (_, r) = link.inline_sockets().ok_or_else(|| Error::internal("inline phase on a link without sockets"))?;
            let i = ins.get(x.peer, || inline::In::new(r, x.peer));
            let frame = i.expected();
            // SAFETY: h is x.bytes of the arena or the inbox, untouched until exchange returns.
            unsafe { i.expect(link.next_seq(0, Dir::Recv), h, x.bytes as usize) };
            if let (Buf::Host(o), true) = (x.buf, prog.is_some()) {
                let at = ins.peers.iter().position(|&p| p == x.peer).unwrap_or(0);
                watched.push((at, frame, o, 0));
            }
        }
        let (mut outs, mut ins) = (outs.items, ins.items);
        let x0 = self.trace.is_some().then(monotonic_ns);
        // Marks what has landed of each watched receive since the last call.
        let mut mark = |ins: &[inline::In], p: &mut Prog| {
            for w in watched.iter_mut() {
                let got = ins.get(w.0).map_or(0, |i| i.landed(w.1)) as u64;
                if got > w.3 {
                    p.marker.mark(&p.gate, w.2 + w.3, w.2 + got);
                    w.3 = got;
                }
            }
            p.marker.publish(&p.gate);
        };
        let stop = || self.stopped();
        let note = |what: String| self.status.note(format!("phase {k} (inline): {what}"));
        match prog {
            None => inline::exchange_noting(&mut outs, &mut ins, &stop, &note)?,
            Some(p) => {
                inline::exchange_watching(&mut outs, &mut ins, &stop, &note, &mut |ins| mark(ins, p))?;
                // Every frame has landed: what the last round brought.
                mark(&ins, p);
            }
        }
        if let (Some(t), Some(x0)) = (self.trace.as_mut(), x0) {
            t.exchange = (x0, monotonic_ns());
        }
        let mut copies = false;
        for (x, &h) in ph.recvs.iter().zip(&dst) {
            if let Buf::Dev(p) = x.buf {
                // SAFETY: h holds the x.bytes just received; p the plan's device range.
                self.copied.store(true, Ordering::Relaxed);
                check(unsafe { cu::cuMemcpyHtoDAsync_v2(p, h.cast(), x.bytes as usize, self.stream.raw) }, "cuMemcpyHtoDAsync (network receive)")?;
                copies = true;
            }
        }
        if copies {
            self.sync()?;
        }
        Ok(())
    }

    /// `first_loaded`: a first device input is already in the accumulator (see `run`).
    fn reduce(&mut self, arena: *mut u8, r: &HostReduce, first_loaded: bool) -> Result<()> {
        let n = r.bytes as usize;
        // Device inputs after the first go to scratch, one slot each, copied before combining.
        let extra = r.inputs.iter().skip(1).filter(|b| matches!(b, Buf::Dev(_))).count();
        let tmp = if extra > 0 { grow(self.dev, &mut self.tmp, r.bytes.div_ceil(16) * 16 * extra as u64)? } else { std::ptr::null_mut() };
        // SAFETY: the plan reserved [acc, acc + bytes) of the arena, disjoint from its inputs.
        let acc = unsafe { std::slice::from_raw_parts_mut(arena.add(r.acc as usize), n) };
        let mut slot = 0usize;
        let mut srcs: Vec<Option<&[u8]>> = Vec::with_capacity(r.inputs.len());
        for (i, inp) in r.inputs.iter().enumerate() {
            srcs.push(match *inp {
                Buf::Dev(_) if i == 0 && first_loaded => None,
                Buf::Dev(p) if i == 0 => {
                    self.to_host(acc.as_mut_ptr(), p, n)?;
                    None
                }
                Buf::Dev(p) => {
                    // SAFETY: slot `slot` of the scratch grown above for `extra` inputs.
                    let t = unsafe { tmp.add(slot * (r.bytes.div_ceil(16) * 16) as usize) };
                    slot += 1;
                    self.to_host(t, p, n)?;
                    // SAFETY: t holds n bytes just copied in, untouched until this reduction ends.
                    Some(unsafe { std::slice::from_raw_parts(t as *const u8, n) })
                }
                // SAFETY: a range of the arena the plan reserved, disjoint from acc.
                Buf::Host(o) => Some(unsafe { std::slice::from_raw_parts(arena.add(o as usize) as *const u8, n) }),
            });
        }
        let t = self.profile.is_some().then(std::time::Instant::now);
        hostreduce::reduce_into_parallel(&r.op, acc, &srcs);
        self.combining += t.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if let Buf::Dev(out) = r.out {
            // SAFETY: acc is pinned host memory of n bytes; out is the plan's device range.
            self.copied.store(true, Ordering::Relaxed);
            check(unsafe { cu::cuMemcpyHtoDAsync_v2(out, acc.as_ptr().cast(), n, self.stream.raw) }, "cuMemcpyHtoDAsync (reduction result)")?;
            self.sync()?;
        }
        Ok(())
    }

    fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<()> {
        // SAFETY: dst is pinned host memory of at least n bytes; src the plan's device range.
        self.copied.store(true, Ordering::Relaxed);
        check(unsafe { cu::cuMemcpyDtoHAsync_v2(dst.cast(), src, n, self.stream.raw) }, "cuMemcpyDtoHAsync (reduction input)")?;
        self.sync()
    }

    fn sync(&self) -> Result<()> {
        if !self.copied.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        self.stream.sync("cuStreamSynchronize (cross-host step)")
    }
}

/// A pipelined staged step's flags while the proxy runs it (`progress`).
struct Prog {
    gate: Arc<progress::Gate>,
    marker: progress::Marker,
}

impl Prog {
    /// Marks the arena ranges of every receive of a phase that has ended.
    fn mark_received(&mut self, ph: &Phase) {
        for x in &ph.recvs {
            if let Buf::Host(o) = x.buf {
                self.marker.mark(&self.gate, o, o + x.bytes);
            }
        }
    }

    /// Marks the arena ranges of receives that have landed since the last call (`seen`: bytes
    /// already marked per receive and stripe part), and publishes what is final.
    fn mark_landed(&mut self, ph: &Phase, landings: &Landings, seen: &mut [Vec<u64>]) -> bool {
        let mut any = false;
        for (k, (x, l)) in ph.recvs.iter().zip(&landings.recvs).enumerate() {
            let (Buf::Host(o), Some(l)) = (x.buf, l) else { continue };
            for (j, (off, _, got)) in l.progress().enumerate() {
                let Some(last) = seen.get_mut(k).and_then(|v| v.get_mut(j)) else { continue };
                if got > *last {
                    self.marker.mark(&self.gate, o + off + *last, o + off + got);
                    *last = got;
                    any = true;
                }
            }
        }
        self.marker.publish(&self.gate);
        any
    }
}

/// A phase's watched transfers (`NetHandler::post_phase`), by receive and send number.
struct Landings {
    recvs: Vec<Option<link::Landing>>,
    sends: Vec<Option<link::Landing>>,
}

/// One item per peer, in order of first use.
struct PerPeer<T> {
    peers: Vec<usize>,
    items: Vec<T>,
}

impl<T> Default for PerPeer<T> {
    fn default() -> Self {
        PerPeer { peers: Vec::new(), items: Vec::new() }
    }
}

impl<T> PerPeer<T> {
    /// `peer`'s item, made by `new` on first use.
    fn get(&mut self, peer: usize, new: impl FnOnce() -> T) -> &mut T {
        let k = match self.peers.iter().position(|&p| p == peer) {
            Some(k) => k,
            None => {
                self.peers.push(peer);
                self.items.push(new());
                self.items.len() - 1
            }
        };
        &mut self.items[k]
    }
}

/// Pinned host memory of at least `bytes` (contents not kept). A larger buffer is added rather
/// than the old one freed: cuMemFreeHost synchronises the device, and the user's kernel waiting
/// for this very step would never finish. The older buffers go with the handler (the doubling
/// bounds them by the largest).
fn grow(dev: &'static Device, bufs: &mut Vec<HostMapped>, bytes: u64) -> Result<*mut u8> {
    let bytes = bytes.max(1) as usize;
    if bufs.last().is_none_or(|m| m.size < bytes) {
        bufs.push(HostMapped::zeroed(dev, bytes.max(1 << 20).next_power_of_two())?);
    }
    Ok(bufs.last().map_or(std::ptr::null_mut(), |m| m.host))
}

/// Per-step timestamps (OXCCL_NET_TRACE), for lining up the ranks of a simulated multi-host run on
/// one machine, whose processes share CLOCK_MONOTONIC: where a small exchange waits, and for whom.
/// One line per step: bytes moved, then ns at which the proxy took the trigger, had the kernel's
/// packets, started and ended the (last) inline exchange, and finished the step. At most
/// `TRACE_ROWS` steps are kept.
struct Trace {
    dir: String,
    rows: Vec<[u64; 6]>,
    exchange: (u64, u64),
}

const TRACE_ROWS: usize = 200_000;

impl Trace {
    fn add(&mut self, row: [u64; 6]) {
        if self.rows.len() < TRACE_ROWS {
            self.rows.push(row);
        }
        self.exchange = (0, 0);
    }
}

/// Bytes a step sends and receives in all (profile and trace size classes).
fn step_bytes(step: &Step) -> u64 {
    step.phases.iter().flat_map(|ph| ph.sends.iter().chain(&ph.recvs)).map(|x| x.bytes).sum()
}

impl Drop for NetHandler {
    fn drop(&mut self) {
        if let Some(t) = &self.trace {
            let path = std::path::Path::new(t.dir.trim()).join(format!("oxccl-net-trace.{}.txt", std::process::id()));
            let mut out = format!("# rank {} bytes seen unpacked exchange_start exchange_end done (ns, CLOCK_MONOTONIC)\n", self.me);
            for r in &t.rows {
                out.push_str(&format!("{} {} {} {} {} {}\n", r[0], r[1], r[2], r[3], r[4], r[5]));
            }
            if let Err(e) = std::fs::write(&path, out) {
                nccl_warn!("OXCCL_NET_TRACE: cannot write {}: {e}", path.display());
            }
        }
        let Some(p) = &self.profile else { return };
        let mut out = format!("oxccl net profile, rank {} (us per item; a phase's bytes class is 4^k):\n", self.me);
        for (class, r) in &p.rows {
            let n = r[0].max(1.0);
            if *class >= 100 {
                out.push_str(&format!("  steps  <= 4^{:<2} B: {:>8} avg total {:>9.1}\n", class - 100, r[0], r[1] * 1e6 / n));
            } else {
                out.push_str(&format!(
                    "  phases <= 4^{class:<2} B: {:>8} avg transfers {:>9.1} avg reductions {:>9.1} (combining {:>9.1})\n",
                    r[0],
                    r[2] * 1e6 / n,
                    r[3] * 1e6 / n,
                    r[4] * 1e6 / n
                ));
            }
        }
        // Waiting for a CPU is where a step's rare milliseconds may go.
        out.push_str(&crate::diag::schedstat::report(crate::diag::schedstat::threads(), 12));
        eprint!("{out}");
    }
}

impl Handler for NetHandler {
    fn expecting(&self) -> bool {
        self.plans.lock().eager > 0
    }

    fn execute(&mut self, r: &Request) -> Result<()> {
        self.status.started.fetch_add(1, Ordering::Relaxed);
        let step = self.plans.lock().take(r.size)?;
        if self.relaxed.is_none() && step.pinned == 0 {
            // Once, on the proxy thread, before its first CUDA copy (a staged step makes none,
            // and no driver call at all: `stage`): its copies and allocations must not fail
            // because the application is capturing a graph on another thread.
            self.relaxed = Some(RelaxedCapture::new()?);
        }
        let t0 = self.profile.is_some().then(std::time::Instant::now);
        // The kernel names the arena it used in the trigger's source-offset field (bit 0), and
        // its packets' flag above it.
        let second = r.src_offset & 1 == 1;
        let (flag, arena) = (packets::flag(r.src_offset), staged_arena(&step, second));
        let t_seen = self.trace.is_some().then(monotonic_ns);
        if !step.packets.is_empty() {
            // SAFETY: the ranges lie in the staged arena, reserved by `launch_step`, alive with Net.
            unsafe { packets::unpack(arena, &step.packets, flag, &|| self.stopped()) }.map_err(|e| e.context(format!("rank {}: cross-host step", self.me)))?;
        }
        let t_unpacked = self.trace.is_some().then(monotonic_ns);
        // A pipelined step's flags carry the same tag as packets would (`progress`).
        let mut prog = step.progress.as_ref().map(|l| Prog {
            gate: Arc::new(progress::Gate::new(l, arena, flag, self.abort_flag.host.cast::<u32>().cast_const())),
            marker: progress::Marker::new(l, arena, flag),
        });
        self.run(&step, second, prog.as_mut()).map_err(|e| e.context(format!("rank {}: cross-host step", self.me)))?;
        if let (Some(p), Some(t0)) = (self.profile.as_mut(), t0) {
            p.add(true, step_bytes(&step), t0.elapsed().as_secs_f64(), 0.0, 0.0, 0.0);
        }
        // SAFETY: the first word of `done`, host-mapped; only this thread writes it.
        let done = unsafe { &*self.done.host.cast::<AtomicU64>() };
        // Release: every copy into GPU memory completed (synchronised) before the kernel sees this.
        done.fetch_add(1, Ordering::Release);
        if !step.packets.is_empty() {
            // Last: a kernel that saw these has the whole step behind it (packets.rs).
            // SAFETY: as for `unpack` above.
            unsafe { packets::pack(arena, &step.packets, flag) };
        }
        if let (Some(t), Some(seen), Some(unpacked)) = (self.trace.as_mut(), t_seen, t_unpacked) {
            t.add([step_bytes(&step), seen, unpacked, t.exchange.0, t.exchange.1, monotonic_ns()]);
        }
        Ok(())
    }

    fn complete(&mut self) -> Result<()> {
        Ok(())
    }

    fn interrupter(&self) -> Option<crate::proxy::Interrupt> {
        let links = self.links.clone();
        Some(Box::new(move || links.iter().flatten().for_each(Link::interrupt)))
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
    fn per_peer_items_are_made_once_in_order_of_first_use() {
        let mut p = PerPeer::<Vec<u32>>::default();
        for (peer, v) in [(3, 1), (1, 2), (3, 3)] {
            p.get(peer, Vec::new).push(v);
        }
        assert_eq!((p.peers, p.items), (vec![3, 1], vec![vec![1, 3], vec![2]]));
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
