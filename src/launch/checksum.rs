//! OXCCL_CHECKSUM=1: every transfer is checksummed, to diagnose data corruption. For each
//! operation, the sender hashes what it sends to each peer (before the launch) and the receiver
//! hashes what landed (after the kernels finished); the senders' hashes travel over the bootstrap
//! and each receiver compares. Hashes are per 1 MiB chunk and salted with (sender, receiver, the
//! transfer's ordinal between them, chunk index), so a chunk that arrives at the wrong offset or
//! from the wrong peer is caught even where the bytes themselves are intact. AllReduce has no
//! transfer the user can see: there every rank's output must be bit-identical (every algorithm
//! reduces in rank order 0..n-1), so ranks compare their outputs chunk by chunk. ReduceScatter and
//! Reduce outputs are the product of a reduction, not a copy of anything: they are not checked.
//!
//! Checking needs the host: streams are synchronized around every operation, so it is for
//! diagnosis, not production; work captured into CUDA graphs is not checked (a WARN says so once).
//! Off by default, and then it costs one branch per group. A mismatch is a WARN per corrupted chunk
//! on the receiving rank, and that rank's call returns ncclSystemError.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::comm::Comm;
use crate::comm::task::{CollTask, P2pOp};
use crate::types::Coll;
use crate::error::{Error, Result};
use crate::gpu::{check, cu, CtxGuard};
use crate::log::Subsys;

/// Hash granularity: corruption is reported per chunk.
pub const CHUNK: u64 = 1 << 20;
/// Bootstrap tag of the hash messages (per-pair ordering on one tag keeps groups apart).
const TAG: u32 = 0x4353_554d; // "CSUM"
/// At most this many corrupted chunks are named per call (the count is always given).
const MAX_NAMED: usize = 8;

/// A contiguous device region one transfer reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The rank at the other end (this rank for a local copy).
    pub peer: usize,
    /// Device address.
    pub ptr: u64,
    /// Length in bytes.
    pub bytes: u64,
}

/// What one operation moves, as one rank sees it: regions it sends to each peer, regions it
/// receives from each peer (itself included: local copies are transfers too), and for AllReduce
/// the output every rank must agree on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpMap {
    /// What this rank sends, per destination.
    pub outs: Vec<Region>,
    /// What this rank receives, per source.
    pub ins: Vec<Region>,
    /// AllReduce: the output (address, bytes) every rank must hold alike.
    pub agree: Option<(u64, u64)>,
}

/// The transfers of a collective (`bytes` per rank's piece, as NCCL's count argument).
pub fn coll_map(coll: Coll, me: usize, n: usize, root: usize, send: u64, recv: u64, bytes: u64) -> OpMap {
    let mut m = OpMap::default();
    let at = |base: u64, p: usize| base + p as u64 * bytes;
    match coll {
        Coll::AllGather => {
            m.outs = (0..n).map(|p| Region { peer: p, ptr: send, bytes }).collect();
            m.ins = (0..n).map(|p| Region { peer: p, ptr: at(recv, p), bytes }).collect();
        }
        Coll::AlltoAll => {
            m.outs = (0..n).map(|p| Region { peer: p, ptr: at(send, p), bytes }).collect();
            m.ins = (0..n).map(|p| Region { peer: p, ptr: at(recv, p), bytes }).collect();
        }
        Coll::Broadcast => {
            if me == root {
                m.outs = (0..n).map(|p| Region { peer: p, ptr: send, bytes }).collect();
            }
            m.ins.push(Region { peer: root, ptr: recv, bytes });
        }
        Coll::Gather => {
            m.outs.push(Region { peer: root, ptr: send, bytes });
            if me == root {
                m.ins = (0..n).map(|p| Region { peer: p, ptr: at(recv, p), bytes }).collect();
            }
        }
        Coll::Scatter => {
            if me == root {
                m.outs = (0..n).map(|p| Region { peer: p, ptr: at(send, p), bytes }).collect();
            }
            m.ins.push(Region { peer: root, ptr: recv, bytes });
        }
        Coll::AllReduce => m.agree = Some((recv, bytes)),
        Coll::ReduceScatter | Coll::Reduce => {}
    }
    m
}

/// The transfers of one communicator's point-to-point operations in a group, in posting order
/// (NCCL matches the k-th send from A to B with B's k-th receive from A).
pub fn p2p_map(ops: &[P2pOp]) -> OpMap {
    let mut m = OpMap::default();
    for o in ops {
        let r = Region { peer: o.peer, ptr: o.buf, bytes: o.bytes };
        if o.is_send {
            m.outs.push(r);
        } else {
            m.ins.push(r);
        }
    }
    m
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The salt of chunk `k` of the `ordinal`-th transfer from `src` to `dst`. AllReduce outputs use
/// src = dst = u32::MAX (they are compared between ranks, so neither rank may enter it).
pub fn salt(src: u32, dst: u32, ordinal: u32, k: u64) -> u64 {
    splitmix(splitmix((u64::from(src) << 32) | u64::from(dst)) ^ splitmix((u64::from(ordinal) << 40) ^ k))
}

/// A 64-bit hash of `data`, seeded by `salt` (word-at-a-time multiply-rotate; a diagnosis hash,
/// not a cryptographic one).
pub fn hash(salt: u64, data: &[u8]) -> u64 {
    const K: u64 = 0x9fb2_1c65_1e98_df25;
    let mut h = splitmix(salt ^ data.len() as u64);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(31);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(31);
    }
    splitmix(h)
}

/// Per-chunk hashes of one transfer's bytes.
pub fn hash_chunks(src: u32, dst: u32, ordinal: u32, data: &[u8]) -> Vec<u64> {
    data.chunks(CHUNK as usize).enumerate().map(|(k, c)| hash(salt(src, dst, ordinal, k as u64), c)).collect()
}

/// One hashed transfer: what it was (for the WARN) and its chunk hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashed {
    /// The transfer, as the WARN names it.
    pub what: String,
    /// One hash per chunk, in order.
    pub hashes: Vec<u64>,
}

/// What one rank tells a peer: the hashes of everything it sent to that peer in this group, and
/// its AllReduce outputs. `None` when this rank could not read its buffers (nothing to compare).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Per transfer to the peer, its chunk hashes.
    pub sent: Vec<Vec<u64>>,
    /// Per AllReduce of the group, its output's chunk hashes.
    pub agree: Vec<Vec<u64>>,
}

impl Message {
    /// The bytes sent over the bootstrap (a leading 0 for None).
    pub fn encode(m: Option<&Message>) -> Vec<u8> {
        let Some(m) = m else { return vec![0] };
        let mut b = vec![1u8];
        for list in [&m.sent, &m.agree] {
            b.extend_from_slice(&(list.len() as u64).to_le_bytes());
            for hs in list {
                b.extend_from_slice(&(hs.len() as u64).to_le_bytes());
                hs.iter().for_each(|h| b.extend_from_slice(&h.to_le_bytes()));
            }
        }
        b
    }

    /// Parses a peer's message; every length is checked against what is left, so a malformed one
    /// is an error, never a large allocation.
    pub fn decode(b: &[u8]) -> Result<Option<Message>> {
        let bad = || Error::system("OXCCL_CHECKSUM: malformed hash message from a peer");
        let (&kind, mut rest) = b.split_first().ok_or_else(bad)?;
        if kind == 0 && rest.is_empty() {
            return Ok(None);
        }
        if kind != 1 {
            return Err(bad());
        }
        let mut word = || -> Result<u64> {
            let (w, r) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            rest = r;
            Ok(u64::from_le_bytes(*w))
        };
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = word()?;
            for _ in 0..n {
                let len = word()?;
                // Each hash takes 8 bytes of what is left: bound before allocating.
                if len > (b.len() / 8) as u64 {
                    return Err(bad());
                }
                let hs = (0..len).map(|_| word()).collect::<Result<Vec<u64>>>()?;
                list.push(hs);
            }
        }
        if !rest.is_empty() {
            return Err(bad());
        }
        let [sent, agree] = lists;
        Ok(Some(Message { sent, agree }))
    }
}

/// One corrupted chunk, as the receiving rank reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The transfer.
    pub what: String,
    /// The chunk's index in it.
    pub chunk: u64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let start = self.chunk * CHUNK;
        write!(f, "{}: bytes {}..{} (chunk {}) differ", self.what, start, start + CHUNK, self.chunk)
    }
}

/// Compares what `peer` says it sent us (and its AllReduce outputs) with what we received (and
/// ours). Err when the two sides do not even describe the same transfers.
pub fn compare(peer: usize, got: &[Hashed], agree: &[Hashed], theirs: &Message) -> Result<Vec<Mismatch>> {
    if theirs.sent.len() != got.len() || theirs.agree.len() != agree.len() {
        return Err(Error::system(format!(
            "OXCCL_CHECKSUM: rank {peer} sent {} transfer(s) and {} AllReduce output(s) to compare, this rank expected {} and {}",
            theirs.sent.len(),
            theirs.agree.len(),
            got.len(),
            agree.len()
        )));
    }
    let mut out = Vec::new();
    let pairs = got.iter().zip(&theirs.sent).chain(agree.iter().zip(&theirs.agree));
    for (mine, hs) in pairs {
        if mine.hashes.len() != hs.len() {
            return Err(Error::system(format!(
                "OXCCL_CHECKSUM: {}: rank {peer} sent {} chunk(s), this rank received {}",
                mine.what,
                hs.len(),
                mine.hashes.len()
            )));
        }
        for (k, (a, b)) in mine.hashes.iter().zip(hs).enumerate() {
            if a != b {
                out.push(Mismatch { what: mine.what.clone(), chunk: k as u64 });
            }
        }
    }
    Ok(out)
}

/// Whether a group (or a single call) is checked: some operation's communicator has the mode on
/// and none of the streams is being captured.
pub fn wanted<'a>(ops: impl Iterator<Item = (&'a Arc<Comm>, cu::CUstream)>) -> bool {
    let mut any = false;
    for (c, s) in ops {
        let Ok(r) = c.ready() else { continue };
        if !r.checksum {
            continue;
        }
        any = true;
        let Ok(_ctx) = CtxGuard::new(r.dev) else { return false };
        if crate::gpu::stream::is_capturing(s).unwrap_or(true) {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                nccl_warn!("OXCCL_CHECKSUM: operations captured into CUDA graphs are not checksummed");
            }
            return false;
        }
    }
    any
}

/// A region to hash after its wave, with what it was.
struct Pending {
    region: Region,
    what: String,
    /// Salt fields: (src, dst, ordinal).
    salt: (u32, u32, u32),
    stream: cu::CUstream,
}

/// One communicator's hashes for a group.
struct Ledger {
    comm: Arc<Comm>,
    /// Per peer: hashes of what this rank sent it, in order.
    sent: Vec<Vec<Hashed>>,
    /// Per peer: hashes of what arrived from it, in order.
    got: Vec<Vec<Hashed>>,
    agree: Vec<Hashed>,
    pending_in: Vec<Pending>,
    pending_agree: Vec<Pending>,
    /// Per peer: transfers so far each way (the salts' ordinals).
    n_out: Vec<u32>,
    n_in: Vec<u32>,
    /// AllReduce outputs so far (their salts' ordinals; every peer compares them).
    n_agree: u32,
    /// A buffer could not be read: this rank has nothing to compare, and tells its peers so.
    broken: Option<Error>,
}

/// The checking of one group: hashes taken around each wave of launches, compared at `finish`.
#[derive(Default)]
pub struct Session {
    ledgers: Vec<Ledger>,
    ops: u32,
}

// SAFETY: streams are opaque driver handles; a session is used by the thread that ends the group.
unsafe impl Send for Session {}

impl Session {
    fn ledger(&mut self, comm: &Arc<Comm>) -> Option<&mut Ledger> {
        let r = comm.ready().ok()?;
        if !r.checksum {
            return None;
        }
        let i = match self.ledgers.iter().position(|l| Arc::ptr_eq(&l.comm, comm)) {
            Some(i) => i,
            None => {
                let n = comm.nranks;
                self.ledgers.push(Ledger {
                    comm: comm.clone(),
                    sent: vec![Vec::new(); n],
                    got: vec![Vec::new(); n],
                    agree: Vec::new(),
                    pending_in: Vec::new(),
                    pending_agree: Vec::new(),
                    n_out: vec![0; n],
                    n_in: vec![0; n],
                    n_agree: 0,
                    broken: None,
                });
                self.ledgers.len() - 1
            }
        };
        Some(&mut self.ledgers[i])
    }

    /// Before a collective is launched: hashes what it sends (after the stream's earlier work).
    pub fn before_coll(&mut self, t: &CollTask) {
        let (me, n) = (t.comm.rank, t.comm.nranks);
        let bytes = t.count * t.dtype.size() as u64;
        let map = coll_map(t.coll, me, n, t.root.max(0) as usize, t.send, t.recv, bytes);
        self.ops += 1;
        let what = format!("{:?} #{} ({} x {}, root {})", t.coll, self.ops, t.count, t.dtype.name(), t.root);
        self.before(&t.comm, &map, &what, t.stream);
    }

    /// Before one communicator's point-to-point batch is launched.
    pub fn before_p2p(&mut self, comm: &Arc<Comm>, ops: &[P2pOp]) {
        let Some(first) = ops.first() else { return };
        self.ops += 1;
        let what = format!("point-to-point batch #{}", self.ops);
        // Buffers of the batch's other streams: those streams are synchronized too.
        for o in ops.iter().filter(|o| o.stream != first.stream) {
            self.sync(comm, o.stream);
        }
        self.before(comm, &p2p_map(ops), &what, first.stream);
    }

    fn sync(&mut self, comm: &Arc<Comm>, stream: cu::CUstream) {
        let Some(l) = self.ledger(comm) else { return };
        if let Err(e) = sync_stream(comm, stream) {
            l.broken.get_or_insert(e);
        }
    }

    fn before(&mut self, comm: &Arc<Comm>, map: &OpMap, what: &str, stream: cu::CUstream) {
        let me = comm.rank as u32;
        let Some(l) = self.ledger(comm) else { return };
        if let Err(e) = sync_stream(comm, stream) {
            l.broken.get_or_insert(e);
        }
        for o in &map.outs {
            let ord = l.n_out[o.peer];
            l.n_out[o.peer] += 1;
            if l.broken.is_some() {
                continue;
            }
            match read(comm, o) {
                Ok(data) => l.sent[o.peer].push(Hashed {
                    what: format!("{what} from rank {me} to rank {}", o.peer),
                    hashes: hash_chunks(me, o.peer as u32, ord, &data),
                }),
                Err(e) => l.broken = Some(e),
            }
        }
        for i in &map.ins {
            let ord = l.n_in[i.peer];
            l.n_in[i.peer] += 1;
            let what = format!("{what} from rank {} to rank {me}", i.peer);
            l.pending_in.push(Pending { region: *i, what, salt: (i.peer as u32, me, ord), stream });
        }
        if let Some((ptr, bytes)) = map.agree {
            let ord = l.n_agree;
            l.n_agree += 1;
            let region = Region { peer: comm.rank, ptr, bytes };
            let what = format!("{what}: output of rank {me}");
            l.pending_agree.push(Pending { region, what, salt: (u32::MAX, u32::MAX, ord), stream });
        }
    }

    /// After a wave of launches: waits for them and hashes what they wrote.
    pub fn after_wave(&mut self) {
        for l in &mut self.ledgers {
            let pend: Vec<Pending> = l.pending_in.drain(..).chain(l.pending_agree.drain(..)).collect();
            let mut synced: Vec<cu::CUstream> = Vec::new();
            for p in pend {
                if !synced.contains(&p.stream) {
                    synced.push(p.stream);
                    if let Err(e) = sync_stream(&l.comm, p.stream) {
                        l.broken.get_or_insert(e);
                    }
                }
                if l.broken.is_some() {
                    continue;
                }
                if inject_here(&l.comm, &p) {
                    if let Err(e) = flip_byte(&l.comm, p.region.ptr + p.region.bytes / 2) {
                        l.broken.get_or_insert(e);
                    }
                }
                let (s, d, o) = p.salt;
                match read(&l.comm, &p.region) {
                    Ok(data) => {
                        let h = Hashed { what: p.what, hashes: hash_chunks(s, d, o, &data) };
                        if s == u32::MAX {
                            l.agree.push(h);
                        } else {
                            l.got[p.region.peer].push(h);
                        }
                    }
                    Err(e) => l.broken = Some(e),
                }
            }
        }
    }

    /// Exchanges the hashes with every peer this group moved data with and compares them. Every
    /// communicator sends before any receives (one thread may drive every rank).
    pub fn finish(self) -> Result<()> {
        let mut talks: Vec<Vec<usize>> = Vec::new();
        for l in &self.ledgers {
            let me = l.comm.rank;
            // Decided by the operations, not by what could be hashed: both sides of a pair must
            // agree on whether they talk even when one of them could not read its buffers.
            let peers: Vec<usize> =
                (0..l.comm.nranks).filter(|&p| p != me && (l.n_out[p] > 0 || l.n_in[p] > 0 || l.n_agree > 0)).collect();
            let r = l.comm.ready()?;
            for &p in &peers {
                let msg = Message { sent: l.sent[p].iter().map(|h| h.hashes.clone()).collect(), agree: l.agree.iter().map(|h| h.hashes.clone()).collect() };
                let body = Message::encode(l.broken.is_none().then_some(&msg));
                r.bootstrap.send(p, TAG, &body).map_err(|e| e.context(format!("OXCCL_CHECKSUM: sending hashes to rank {p}")))?;
            }
            talks.push(peers);
        }
        let mut first: Option<Error> = None;
        for (l, peers) in self.ledgers.iter().zip(talks) {
            if let Err(e) = l.check(&peers) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Ledger {
    fn check(&self, peers: &[usize]) -> Result<()> {
        let me = self.comm.rank;
        let r = self.comm.ready()?;
        let mut bad: Vec<Mismatch> = Vec::new();
        let mut unreadable = Vec::new();
        let mut shape: Option<Error> = None;
        // Every peer's message is drained, even when this rank cannot compare or one of them
        // disagrees: a message left behind would be taken for the next group's.
        for &p in peers {
            let b = r.bootstrap.recv(p, TAG).map_err(|e| e.context(format!("OXCCL_CHECKSUM: waiting for rank {p}'s hashes")))?;
            match Message::decode(&b) {
                Ok(Some(m)) if self.broken.is_none() => match compare(p, &self.got[p], &self.agree, &m) {
                    Ok(v) => bad.extend(v),
                    Err(e) => drop(shape.get_or_insert(e)),
                },
                Ok(Some(_)) => {}
                Ok(None) => unreadable.push(p),
                Err(e) => drop(shape.get_or_insert(e)),
            }
        }
        if let Some(e) = &self.broken {
            return Err(Error::new(e.code, format!("OXCCL_CHECKSUM: could not read this rank's buffers: {}", e.msg)));
        }
        // Transfers to itself are compared here, without a message.
        let own = Message { sent: self.sent[me].iter().map(|h| h.hashes.clone()).collect(), agree: Vec::new() };
        match compare(me, &self.got[me], &[], &own) {
            Ok(v) => bad.extend(v),
            Err(e) => drop(shape.get_or_insert(e)),
        }
        if let Some(e) = shape {
            nccl_warn!("{}", e.msg);
            return Err(e);
        }
        if !unreadable.is_empty() {
            nccl_info!(Subsys::Coll, "OXCCL_CHECKSUM: rank(s) {unreadable:?} could not read their buffers; their transfers are not compared");
        }
        if bad.is_empty() {
            return Ok(());
        }
        for m in bad.iter().take(MAX_NAMED) {
            nccl_warn!("OXCCL_CHECKSUM: corrupted data on rank {me}: {m}");
        }
        Err(Error::system(format!("OXCCL_CHECKSUM: {} corrupted chunk(s) of {} B on rank {me}, first: {}", bad.len(), CHUNK, bad[0])))
    }
}

fn sync_stream(comm: &Comm, stream: cu::CUstream) -> Result<()> {
    let r = comm.ready()?;
    let _ctx = CtxGuard::new(r.dev)?;
    // SAFETY: the caller's stream (0: the legacy stream of the current context).
    check(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize")
}

/// Copies a region to the host.
fn read(comm: &Comm, g: &Region) -> Result<Vec<u8>> {
    let mut v = vec![0u8; g.bytes as usize];
    if g.bytes == 0 {
        return Ok(v);
    }
    let r = comm.ready()?;
    let _ctx = CtxGuard::new(r.dev)?;
    // SAFETY: v holds g.bytes; the range was validated as the caller's buffer of that size.
    check(unsafe { cu::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), g.ptr, v.len()) }, "cuMemcpyDtoH (OXCCL_CHECKSUM)")?;
    Ok(v)
}

/// OXCCL_CHECKSUM_INJECT=<rank>: that rank flips one byte of the first non-empty region it
/// receives from another rank before hashing it: tests that a corruption is reported end to end.
fn inject_here(comm: &Comm, p: &Pending) -> bool {
    static DONE: AtomicBool = AtomicBool::new(false);
    let target = crate::config::env_i64("OXCCL_CHECKSUM_INJECT", -1);
    target == comm.rank as i64
        && p.region.peer != comm.rank
        && p.salt.0 != u32::MAX
        && p.region.bytes > 0
        && !DONE.swap(true, Ordering::Relaxed)
}

fn flip_byte(comm: &Comm, at: u64) -> Result<()> {
    let r = comm.ready()?;
    let _ctx = CtxGuard::new(r.dev)?;
    let mut b = [0u8; 1];
    // SAFETY: `at` lies inside a received region (its middle byte).
    check(unsafe { cu::cuMemcpyDtoH_v2(b.as_mut_ptr().cast(), at, 1) }, "cuMemcpyDtoH")?;
    b[0] ^= 0xff;
    // SAFETY: as above.
    check(unsafe { cu::cuMemcpyHtoD_v2(at, b.as_ptr().cast(), 1) }, "cuMemcpyHtoD")?;
    nccl_warn!("OXCCL_CHECKSUM_INJECT: flipped the byte at {at:#x} on rank {} (a test of the checker)", comm.rank);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates `n` ranks on host memory: each rank's send and recv buffers, a transfer function
    /// that copies according to the maps (optionally corrupted), and the whole hash/compare
    /// protocol with messages encoded and decoded.
    struct Sim {
        n: usize,
        send: Vec<Vec<u8>>,
        recv: Vec<Vec<u8>>,
    }

    const SEND: u64 = 0x1000_0000;
    const RECV: u64 = 0x2000_0000;

    impl Sim {
        fn new(n: usize, send_len: usize, recv_len: usize) -> Sim {
            let send = (0..n).map(|r| (0..send_len).map(|i| (i * 7 + r * 131 + 3) as u8).collect()).collect();
            Sim { n, send, recv: vec![vec![0u8; recv_len]; n] }
        }

        fn bytes(&self, rank: usize, g: &Region) -> &[u8] {
            let (buf, base) = if g.ptr >= RECV { (&self.recv[rank], RECV) } else { (&self.send[rank], SEND) };
            let off = (g.ptr - base) as usize;
            &buf[off..off + g.bytes as usize]
        }

        /// Moves every rank's outs into the matching ins (the k-th out from A to B into B's k-th
        /// in from A), then applies `damage` to the receive buffers.
        fn run(&mut self, maps: &[OpMap], damage: impl Fn(&mut Vec<Vec<u8>>)) -> Vec<Vec<Mismatch>> {
            let n = self.n;
            let mut sent: Vec<Vec<Vec<Hashed>>> = vec![vec![Vec::new(); n]; n];
            for (src, m) in maps.iter().enumerate() {
                let mut ord = vec![0u32; n];
                for o in &m.outs {
                    let h = hash_chunks(src as u32, o.peer as u32, ord[o.peer], self.bytes(src, o));
                    ord[o.peer] += 1;
                    sent[src][o.peer].push(Hashed { what: String::new(), hashes: h });
                }
            }
            for (dst, m) in maps.iter().enumerate() {
                let mut k = vec![0usize; n];
                for i in &m.ins {
                    let src = i.peer;
                    let o = maps[src].outs.iter().filter(|o| o.peer == dst).nth(k[src]).expect("matching send");
                    k[src] += 1;
                    let data = self.bytes(src, o).to_vec();
                    let off = (i.ptr - RECV) as usize;
                    self.recv[dst][off..off + data.len()].copy_from_slice(&data);
                }
            }
            damage(&mut self.recv);
            (0..n)
                .map(|dst| {
                    let mut bad = Vec::new();
                    let mut ord = vec![0u32; n];
                    let mut got: Vec<Vec<Hashed>> = vec![Vec::new(); n];
                    for i in &maps[dst].ins {
                        let h = hash_chunks(i.peer as u32, dst as u32, ord[i.peer], self.bytes(dst, i));
                        ord[i.peer] += 1;
                        got[i.peer].push(Hashed { what: format!("from {} to {dst}", i.peer), hashes: h });
                    }
                    for src in 0..n {
                        let msg = Message { sent: sent[src][dst].iter().map(|h| h.hashes.clone()).collect(), agree: vec![] };
                        let wire = Message::decode(&Message::encode(Some(&msg))).expect("decode").expect("hashes");
                        bad.extend(compare(src, &got[src], &[], &wire).expect("same transfers"));
                    }
                    bad
                })
                .collect()
        }
    }

    fn maps(coll: Coll, n: usize, root: usize, bytes: u64) -> Vec<OpMap> {
        (0..n).map(|me| coll_map(coll, me, n, root, SEND, RECV, bytes)).collect()
    }

    #[test]
    fn clean_transfers_of_every_moving_collective_compare_equal() {
        let n = 3;
        let bytes = 3 * CHUNK + 17;
        for coll in [Coll::AllGather, Coll::AlltoAll, Coll::Broadcast, Coll::Gather, Coll::Scatter] {
            let mut sim = Sim::new(n, (bytes * n as u64) as usize, (bytes * n as u64) as usize);
            let bad = sim.run(&maps(coll, n, 1, bytes), |_| {});
            assert!(bad.iter().all(Vec::is_empty), "{coll:?}: {bad:?}");
        }
    }

    #[test]
    fn a_flipped_byte_is_reported_by_its_receiver_at_its_chunk() {
        let n = 4;
        let bytes = 2 * CHUNK;
        let mut sim = Sim::new(n, (bytes * n as u64) as usize, (bytes * n as u64) as usize);
        // Rank 2's piece from rank 3 (AllGather: at 3 * bytes), second chunk.
        let at = (3 * bytes + CHUNK + 5) as usize;
        let bad = sim.run(&maps(Coll::AllGather, n, 0, bytes), |recv| recv[2][at] ^= 1);
        assert_eq!(bad[2], vec![Mismatch { what: "from 3 to 2".into(), chunk: 1 }]);
        assert!(bad.iter().enumerate().all(|(r, b)| r == 2 || b.is_empty()));
    }

    #[test]
    fn swapped_chunks_with_intact_bytes_are_caught() {
        // AlltoAll at 2 ranks: rank 0 receives its pieces in the wrong slots.
        let n = 2;
        let bytes = CHUNK;
        let mut sim = Sim::new(n, (bytes * 2) as usize, (bytes * 2) as usize);
        let bad = sim.run(&maps(Coll::AlltoAll, n, 0, bytes), |recv| {
            let (a, b) = recv[0].split_at_mut(bytes as usize);
            a.swap_with_slice(b);
        });
        assert_eq!(bad[0].len(), 2, "{:?}", bad[0]);
        assert!(bad[1].is_empty());
    }

    #[test]
    fn equal_bytes_in_another_transfer_still_differ_by_salt() {
        let data = vec![42u8; 1000];
        let a = hash_chunks(0, 1, 0, &data);
        assert_ne!(a, hash_chunks(1, 0, 0, &data), "direction");
        assert_ne!(a, hash_chunks(0, 2, 0, &data), "peer");
        assert_ne!(a, hash_chunks(0, 1, 1, &data), "ordinal");
        assert_eq!(a, hash_chunks(0, 1, 0, &data));
        assert_ne!(hash(salt(0, 1, 0, 0), &[1, 2, 3]), hash(salt(0, 1, 0, 1), &[1, 2, 3]), "chunk index");
        // Trailing zeros change the length, hence the hash.
        assert_ne!(hash(7, &[1, 2, 3]), hash(7, &[1, 2, 3, 0]));
    }

    #[test]
    fn point_to_point_sends_match_receives_in_posting_order() {
        let op = |is_send, peer, buf, bytes| P2pOp { is_send, peer, buf, bytes, stream: std::ptr::null_mut() };
        // Rank 0 sends two messages to rank 1; rank 1 receives them into two places.
        let m0 = p2p_map(&[op(true, 1, SEND, 100), op(true, 1, SEND + 100, 50)]);
        let m1 = p2p_map(&[op(false, 0, RECV + 500, 100), op(false, 0, RECV, 50)]);
        let mut sim = Sim::new(2, 200, 1000);
        let bad = sim.run(&[m0.clone(), m1.clone()], |_| {});
        assert!(bad.iter().all(Vec::is_empty));
        assert_eq!(sim.recv[1][500..600], sim.send[0][..100]);
        let bad = sim.run(&[m0, m1], |recv| recv[1][10] ^= 0x80);
        assert_eq!(bad[1].len(), 1);
        assert!(bad[1][0].what.contains("from 0 to 1"));
    }

    #[test]
    fn allreduce_outputs_are_compared_between_ranks_and_reduce_outputs_are_not() {
        let m = coll_map(Coll::AllReduce, 1, 4, 0, SEND, RECV, 64);
        assert_eq!(m.agree, Some((RECV, 64)));
        assert!(m.outs.is_empty() && m.ins.is_empty());
        for c in [Coll::Reduce, Coll::ReduceScatter] {
            assert_eq!(coll_map(c, 0, 4, 0, SEND, RECV, 64), OpMap::default());
        }
        let out = Hashed { what: "AllReduce #1: output of rank 0".into(), hashes: vec![1, 2, 3] };
        let peer = |hs: Vec<u64>| Message { sent: vec![], agree: vec![hs] };
        assert!(compare(1, &[], std::slice::from_ref(&out), &peer(vec![1, 2, 3])).expect("same shape").is_empty());
        let bad = compare(1, &[], &[out], &peer(vec![1, 9, 3])).expect("same shape");
        assert_eq!(bad, vec![Mismatch { what: "AllReduce #1: output of rank 0".into(), chunk: 1 }]);
    }

    #[test]
    fn differing_transfer_lists_are_an_error_not_a_mismatch() {
        let got = vec![Hashed { what: "x".into(), hashes: vec![1] }];
        let e = compare(1, &got, &[], &Message::default()).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::SystemError);
        let e = compare(1, &got, &[], &Message { sent: vec![vec![1, 2]], agree: vec![] }).unwrap_err();
        assert!(e.msg.contains("chunk"), "{}", e.msg);
    }

    #[test]
    fn messages_round_trip_and_malformed_ones_are_errors() {
        let m = Message { sent: vec![vec![1, 2], vec![]], agree: vec![vec![u64::MAX]] };
        assert_eq!(Message::decode(&Message::encode(Some(&m))).expect("ok"), Some(m.clone()));
        assert_eq!(Message::decode(&Message::encode(None)).expect("ok"), None);
        let good = Message::encode(Some(&m));
        for cut in 0..good.len() {
            assert!(Message::decode(&good[..cut]).is_err(), "truncated at {cut}");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(Message::decode(&extra).is_err());
        // A huge claimed length is refused before allocating.
        let mut huge = vec![1u8];
        huge.extend_from_slice(&1u64.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(Message::decode(&huge).is_err());
        assert!(Message::decode(&[2]).is_err());
        assert!(Message::decode(&[]).is_err());
    }
}
