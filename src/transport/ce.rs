//! The copy-engine transport between two GPUs of one host (OXCCL_LOCAL_TRANSPORT=ce): a link's
//! lanes move data with cuMemcpyAsync across a CUDA IPC mapping, so the copy engines carry it and
//! no SM does. The lane's TCP connection (through the bootstrap, like the network links) carries
//! only 24-byte headers one way and 8-byte credits back.
//!
//! Per lane and direction the receiver owns a device ring of `SLOTS` slots of `CHUNK` bytes, which
//! the sender maps at set-up. A job goes chunk by chunk:
//!   sender:   wait for a free slot (credit), copy the chunk into the peer's slot, synchronise the
//!             copy, then send the header — so the data is in the peer's memory before the header
//!             leaves;
//!   receiver: read the header (checked like a TCP frame's), copy the slot to the destination
//!             (device memory, or the proxy's pinned arena), synchronise, return the credit — so
//!             the slot is read before the sender may overwrite it.
//! With two slots the sender's copy of chunk k+1 overlaps the receiver's copy of chunk k; large jobs
//! are also striped over the link's lanes (Link::post), which keeps several copy engines busy.
//! Both sides walk the slots in the same order, so a slot needs no number on the wire.

use std::io::{Read, Write};

use super::link::{check_header, header, io_error, prepare_sockets, shutdown_all, Carrier, Cx, Interrupt, Job, Lane, Mem, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::gpu::ipc::{self, ImportedBuffer, IPC_HANDLE_BYTES};
use crate::gpu::stream::copy_engine_async;
use crate::gpu::{check, cu, Device, DeviceBuffer};
use crate::tls::Stream;

/// Bytes per slot: large enough that a copy outlasts the per-chunk round trip.
pub const CHUNK: u64 = 4 << 20;
/// Slots of the receiver's ring, per lane and direction: two let one chunk's copy in overlap the
/// previous one's copy out.
pub const SLOTS: u64 = 2;

/// A job as (offset, bytes) chunks; a zero-byte job is one empty chunk, so it still carries a
/// header (and its sequence check).
pub fn chunks(bytes: u64) -> Vec<(u64, u64)> {
    if bytes == 0 {
        return vec![(0, 0)];
    }
    (0..bytes.div_ceil(CHUNK)).map(|k| (k * CHUNK, (bytes - k * CHUNK).min(CHUNK))).collect()
}

/// What a receiver tells its sender at set-up: its ring's address (valid as is in the same
/// process) and IPC handle (for another process).
fn publish(ring: &DeviceBuffer, same_process: bool, dev: &'static Device) -> Result<[u8; 8 + IPC_HANDLE_BYTES]> {
    let mut b = [0u8; 8 + IPC_HANDLE_BYTES];
    b[..8].copy_from_slice(&ring.ptr.to_le_bytes());
    if !same_process {
        b[8..].copy_from_slice(&ipc::export(dev, ring.ptr)?);
    }
    Ok(b)
}

/// Copy-engine lanes with `peer` over the bootstrap's sockets (`out` we write headers to and read
/// credits from, `inc` the other way). `peer_device`: the peer's device ordinal when it lives in
/// this process (no IPC then: a process cannot open its own handles), else None.
/// Collective for the pair: both ranks call it with their sockets after data_sockets returned.
pub fn lanes(dev: &'static Device, peer: usize, peer_device: Option<i32>, out: Vec<Stream>, inc: Vec<Stream>) -> Result<(Vec<Lane>, Interrupt)> {
    let socks = prepare_sockets("copy-engine", &out, &inc)?;
    let io = |e| io_error(peer, e).context("copy-engine link set-up");
    // Every receiving ring is published before any sender waits for its peer's: both ranks of the
    // pair write first, so neither waits on the other.
    let mut recvs = Vec::new();
    for mut s in inc {
        let ring = DeviceBuffer::zeroed(dev, (CHUNK * SLOTS) as usize)?;
        s.write_all(&publish(&ring, peer_device.is_some(), dev)?).map_err(io)?;
        recvs.push(CeRecv { sock: s, peer, ring: OwnRing { ring }, slot: 0 });
    }
    if let Some(d) = peer_device {
        dev.enable_peer_access(Device::get(d)?)?;
    }
    let mut lanes: Vec<Lane> = Vec::new();
    for (mut s, r) in out.into_iter().zip(recvs) {
        let mut b = [0u8; 8 + IPC_HANDLE_BYTES];
        s.read_exact(&mut b).map_err(io)?;
        let (dst, import) = if peer_device.is_some() {
            (u64::from_le_bytes(b[..8].try_into().map_err(|_| Error::internal("ring address"))?), None)
        } else {
            let h: [u8; IPC_HANDLE_BYTES] = b[8..].try_into().map_err(|_| Error::internal("IPC handle"))?;
            let imp = ImportedBuffer::open(dev, &h).map_err(|e| e.context(format!("mapping rank {peer}'s copy-engine ring")))?;
            (imp.ptr, Some(imp))
        };
        let send = CeSend::new(s, peer, PeerRing { dst, _import: import });
        lanes.push((Box::new(send), Box::new(r)));
    }
    Ok((lanes, shutdown_all(socks)))
}

/// How a lane's chunks get into the receiver's ring and out of it: CUDA copies on the GPUs
/// (`PeerRing`, `OwnRing`), or host memory in the CPU tests. Each call is complete when it
/// returns (the header or credit that follows must not overtake the bytes).
trait Put: Send + 'static {
    /// `n` bytes of `job` at `off` into slot `slot` of the peer's ring.
    fn put(&mut self, cx: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()>;
}

trait Take: Send + 'static {
    /// `n` bytes of slot `slot` of our ring into `job` at `off`.
    fn take(&mut self, cx: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()>;
}

/// The peer's ring as mapped here.
struct PeerRing {
    dst: u64,
    _import: Option<ImportedBuffer>,
}

impl Put for PeerRing {
    fn put(&mut self, cx: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()> {
        let st = cx.staging()?;
        let dst = self.dst + slot * CHUNK;
        match job.mem {
            // [src + off, + n) is the plan's device range (valid while the user's kernel waits for
            // this step); dst is a slot of CHUNK >= n bytes of the peer's ring, mapped for this
            // context, which is current (staging).
            Mem::Dev(src) => copy_engine_async(dst, src + off, n as usize, st.stream.raw)?,
            // SAFETY: as above; the source is the proxy's pinned arena range.
            Mem::Host(p) => check(
                unsafe { cu::cuMemcpyHtoDAsync_v2(dst, p.add(off as usize).cast(), n as usize, st.stream.raw) },
                "cuMemcpyHtoDAsync (copy-engine put)",
            )?,
        }
        st.sync()
    }
}

/// Our ring, which the peer writes.
struct OwnRing {
    ring: DeviceBuffer,
}

impl Take for OwnRing {
    fn take(&mut self, cx: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()> {
        let st = cx.staging()?;
        let src = self.ring.ptr + slot * CHUNK;
        match job.mem {
            // src is a slot of our ring holding n bytes (its header arrived); [dst + off, + n)
            // the plan's device range.
            Mem::Dev(dst) => copy_engine_async(dst + off, src, n as usize, st.stream.raw)?,
            // SAFETY: as above; the destination is the proxy's pinned arena range.
            Mem::Host(p) => check(
                unsafe { cu::cuMemcpyDtoHAsync_v2(p.add(off as usize).cast(), src, n as usize, st.stream.raw) },
                "cuMemcpyDtoHAsync (copy-engine receive)",
            )?,
        }
        st.sync()
    }
}

struct CeSend<P: Put> {
    sock: Stream,
    peer: usize,
    ring: P,
    /// Slots the receiver has freed and we have not filled.
    credits: u64,
    slot: u64,
}

impl<P: Put> CeSend<P> {
    fn new(sock: Stream, peer: usize, ring: P) -> CeSend<P> {
        CeSend { sock, peer, ring, credits: SLOTS, slot: 0 }
    }
}

impl<P: Put> Carrier for CeSend<P> {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let io = |e| io_error(self.peer, e);
        for (k, &(off, n)) in chunks(job.bytes).iter().enumerate() {
            while self.credits == 0 {
                let mut c = [0u8; 8];
                self.sock.read_exact(&mut c).map_err(io)?;
                self.credits += 1;
            }
            self.credits -= 1;
            let slot = self.slot;
            self.slot = (self.slot + 1) % SLOTS;
            if n > 0 {
                // The chunk is in the peer's memory before its header is sent.
                self.ring.put(cx, slot, job, off, n)?;
            }
            self.sock.write_all(&header(k as u32, seq, job.bytes)).map_err(io)?;
        }
        Ok(())
    }
}

struct CeRecv<T: Take> {
    sock: Stream,
    peer: usize,
    ring: T,
    slot: u64,
}

impl<T: Take> Carrier for CeRecv<T> {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let io = |e| io_error(self.peer, e);
        for (k, &(off, n)) in chunks(job.bytes).iter().enumerate() {
            let mut h = [0u8; HEADER_BYTES];
            self.sock.read_exact(&mut h).map_err(io)?;
            let their_k = check_header(&h, self.peer, seq, job.bytes)?;
            if their_k != k as u32 {
                return Err(Error::internal(format!("rank {}: copy-engine chunk {their_k} where {k} was expected", self.peer)));
            }
            let slot = self.slot;
            self.slot = (self.slot + 1) % SLOTS;
            if n > 0 {
                // The slot is read before the sender may fill it again.
                self.ring.take(cx, slot, job, off, n)?;
            }
            self.sock.write_all(&(k as u64).to_le_bytes()).map_err(io)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::link::{Link, Tracker};
    use std::sync::{Arc, Mutex};

    /// A ring in host memory, shared by a sender and the receiver it writes to.
    #[derive(Clone)]
    struct HostRing(Arc<Mutex<Vec<u8>>>);

    fn host(job: &Job) -> *mut u8 {
        match job.mem {
            Mem::Host(p) => p,
            Mem::Dev(_) => panic!("host memory only in these tests"),
        }
    }

    impl Put for HostRing {
        fn put(&mut self, _: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()> {
            let mut r = self.0.lock().unwrap();
            let at = (slot * CHUNK) as usize;
            // SAFETY: the test's job buffer holds job.bytes >= off + n bytes.
            let src = unsafe { std::slice::from_raw_parts(host(job).add(off as usize), n as usize) };
            r[at..at + n as usize].copy_from_slice(src);
            Ok(())
        }
    }

    impl Take for HostRing {
        fn take(&mut self, _: &mut Cx, slot: u64, job: &Job, off: u64, n: u64) -> Result<()> {
            let r = self.0.lock().unwrap();
            let at = (slot * CHUNK) as usize;
            // SAFETY: as in put.
            let dst = unsafe { std::slice::from_raw_parts_mut(host(job).add(off as usize), n as usize) };
            dst.copy_from_slice(&r[at..at + n as usize]);
            Ok(())
        }
    }

    /// Two ranks' copy-engine links over loopback sockets and host rings, `lanes` lanes each.
    fn pair(lanes: usize) -> (Link, Link) {
        pair_with(lanes, None)
    }

    /// `pair`, TLS sessions of `keys` when given (each socket carries headers one way and
    /// credits the other).
    fn pair_with(lanes: usize, keys: Option<&crate::tls::Keys>) -> (Link, Link) {
        let (a_outs, b_incs) = crate::tls::loopback_pairs(lanes, keys);
        let (b_outs, a_incs) = crate::tls::loopback_pairs(lanes, keys);
        let (mut la, mut lb): (Vec<Lane>, Vec<Lane>) = (Vec::new(), Vec::new());
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        for (((a_out, b_inc), b_out), a_inc) in a_outs.into_iter().zip(b_incs).zip(b_outs).zip(a_incs) {
            let ab = HostRing(Arc::new(Mutex::new(vec![0; (CHUNK * SLOTS) as usize])));
            let ba = HostRing(Arc::new(Mutex::new(vec![0; (CHUNK * SLOTS) as usize])));
            for s in [&a_out, &a_inc] {
                sa.push(s.try_clone().unwrap());
            }
            for s in [&b_out, &b_inc] {
                sb.push(s.try_clone().unwrap());
            }
            la.push((Box::new(CeSend::new(a_out, 1, ab.clone())), Box::new(CeRecv { sock: a_inc, peer: 1, ring: ba.clone(), slot: 0 })));
            lb.push((Box::new(CeSend::new(b_out, 0, ba)), Box::new(CeRecv { sock: b_inc, peer: 0, ring: ab, slot: 0 })));
        }
        (Link::new(None, 0, 1, la, shutdown_all(sa)).unwrap(), Link::new(None, 1, 0, lb, shutdown_all(sb)).unwrap())
    }

    fn job(t: &Arc<Tracker>, v: &mut [u8]) -> Job {
        Job { mem: Mem::Host(v.as_mut_ptr()), bytes: v.len() as u64, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false }
    }

    #[test]
    fn jobs_of_every_size_cross_both_ways_through_the_rings() {
        jobs_of_every_size(None);
    }

    #[test]
    fn jobs_of_every_size_cross_both_ways_over_tls() {
        jobs_of_every_size(Some(&crate::tls::test_keys()));
    }

    fn jobs_of_every_size(keys: Option<&crate::tls::Keys>) {
        for lanes in [1, 2] {
            let (a, b) = pair_with(lanes, keys);
            // Several chunks per lane wrap the two slots and need credits; 0 bytes is one header.
            for n in [0usize, 5, CHUNK as usize, 3 * CHUNK as usize + 7, 9 * CHUNK as usize + 1] {
                let mut src_a: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                let mut src_b: Vec<u8> = (0..n).map(|i| (i % 241) as u8 ^ 0x5a).collect();
                let (mut dst_a, mut dst_b) = (vec![0u8; n], vec![0u8; n]);
                let t = Tracker::new(4);
                a.send(job(&t, &mut src_a));
                b.send(job(&t, &mut src_b));
                b.recv(job(&t, &mut dst_b));
                a.recv(job(&t, &mut dst_a));
                t.wait(&|| None).unwrap();
                assert!(dst_b == src_a && dst_a == src_b, "{lanes} lanes, {n} bytes");
            }
        }
    }

    #[test]
    fn a_size_mismatch_and_a_closed_peer_are_errors() {
        let (a, b) = pair(1);
        let (mut x, mut y) = (vec![1u8; 64], vec![0u8; 32]);
        let t = Tracker::new(2);
        a.send(job(&t, &mut x));
        b.recv(job(&t, &mut y));
        let e = t.wait(&|| None).unwrap_err();
        assert!(e.msg.contains("64 bytes") && e.msg.contains("32 bytes"), "{}", e.msg);
        drop(b);
        let t = Tracker::new(1);
        a.recv(job(&t, &mut y));
        let e = t.wait(&|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
    }

    #[test]
    fn chunks_cover_every_byte_once_and_empty_jobs_have_one() {
        assert_eq!(chunks(0), vec![(0, 0)]);
        assert_eq!(chunks(5), vec![(0, 5)]);
        assert_eq!(chunks(CHUNK), vec![(0, CHUNK)]);
        assert_eq!(chunks(2 * CHUNK + 1), vec![(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, 1)]);
    }
}
