//! The planners of the collectives across hosts: reductions (AllReduce, ReduceScatter, Reduce)
//! combine each host's partial result across hosts, then spread it; moves (AllGather,
//! Broadcast) go between partners and are forwarded on each host.

use super::*;

pub(super) fn allreduce(l: &Layout, c: &Call) -> Vec<Stage> {
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

pub(super) fn reducescatter(l: &Layout, c: &Call) -> Vec<Stage> {
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

pub(super) fn reduce(l: &Layout, c: &Call) -> Vec<Stage> {
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

pub(super) fn allgather(l: &Layout, c: &Call) -> Vec<Stage> {
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

pub(super) fn broadcast(l: &Layout, c: &Call) -> Vec<Stage> {
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
