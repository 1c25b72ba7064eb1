//! The proxy's side of a communicator spanning hosts: `NetHandler` carries out the steps the
//! step kernels trigger (kernels/colls/net_step.cu): moves each phase's data over the links (or itself,
//! inline, when small), combines partial results on the host where the step reduces, and bumps
//! the step's completion counter.

use super::*;

/// The proxy's side: runs steps.
pub(super) struct NetHandler {
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
    pub(super) fn new(
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
    fn per_peer_items_are_made_once_in_order_of_first_use() {
        let mut p = PerPeer::<Vec<u32>>::default();
        for (peer, v) in [(3, 1), (1, 2), (3, 3)] {
            p.get(peer, Vec::new).push(v);
        }
        assert_eq!((p.peers, p.items), (vec![3, 1], vec![vec![1, 3], vec![2]]));
    }
}
