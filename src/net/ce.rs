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
use std::net::TcpStream;

use super::link::{check_header, header, io_error, prepare_sockets, shutdown_all, Carrier, Cx, Interrupt, Job, Lane, Mem, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::gpu::ipc::{self, ImportedBuffer, IPC_HANDLE_BYTES};
use crate::gpu::stream::copy_engine_async;
use crate::gpu::{check, cu, Device, DeviceBuffer};

/// Bytes per slot: large enough that a copy outlasts the per-chunk round trip.
pub const CHUNK: u64 = 4 << 20;
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
pub fn lanes(dev: &'static Device, peer: usize, peer_device: Option<i32>, out: Vec<TcpStream>, inc: Vec<TcpStream>) -> Result<(Vec<Lane>, Interrupt)> {
    let socks = prepare_sockets("copy-engine", &out, &inc)?;
    let io = |e| io_error(peer, e).context("copy-engine link set-up");
    // Every receiving ring is published before any sender waits for its peer's: both ranks of the
    // pair write first, so neither waits on the other.
    let mut recvs = Vec::new();
    for mut s in inc {
        let ring = DeviceBuffer::zeroed(dev, (CHUNK * SLOTS) as usize)?;
        s.write_all(&publish(&ring, peer_device.is_some(), dev)?).map_err(io)?;
        recvs.push(CeRecv { sock: s, peer, ring, slot: 0 });
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
        let send = CeSend { sock: s, peer, dst, _import: import, credits: SLOTS, slot: 0 };
        lanes.push((Box::new(send), Box::new(r)));
    }
    Ok((lanes, shutdown_all(socks)))
}

struct CeSend {
    sock: TcpStream,
    peer: usize,
    /// The peer's ring as mapped here.
    dst: u64,
    _import: Option<ImportedBuffer>,
    /// Slots the receiver has freed and we have not filled.
    credits: u64,
    slot: u64,
}

impl Carrier for CeSend {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let io = |e| io_error(self.peer, e);
        let st = cx.staging()?;
        for (k, &(off, n)) in chunks(job.bytes).iter().enumerate() {
            while self.credits == 0 {
                let mut c = [0u8; 8];
                self.sock.read_exact(&mut c).map_err(io)?;
                self.credits += 1;
            }
            self.credits -= 1;
            let dst = self.dst + self.slot * CHUNK;
            self.slot = (self.slot + 1) % SLOTS;
            if n > 0 {
                match job.mem {
                    // [src + off, + n) is the plan's device range (valid while the user's kernel
                    // waits for this step); dst is a slot of CHUNK >= n bytes of the peer's ring,
                    // mapped for this context, which is current (staging).
                    Mem::Dev(src) => copy_engine_async(dst, src + off, n as usize, st.stream.raw)?,
                    // SAFETY: as above; the source is the proxy's pinned arena range.
                    Mem::Host(p) => check(
                        unsafe { cu::cuMemcpyHtoDAsync_v2(dst, p.add(off as usize).cast(), n as usize, st.stream.raw) },
                        "cuMemcpyHtoDAsync (copy-engine put)",
                    )?,
                }
                // The chunk is in the peer's memory before its header is sent.
                st.sync()?;
            }
            self.sock.write_all(&header(k as u32, seq, job.bytes)).map_err(io)?;
        }
        Ok(())
    }
}

struct CeRecv {
    sock: TcpStream,
    peer: usize,
    ring: DeviceBuffer,
    slot: u64,
}

impl Carrier for CeRecv {
    fn carry(&mut self, cx: &mut Cx, seq: u64, job: &Job) -> Result<()> {
        let io = |e| io_error(self.peer, e);
        let st = cx.staging()?;
        for (k, &(off, n)) in chunks(job.bytes).iter().enumerate() {
            let mut h = [0u8; HEADER_BYTES];
            self.sock.read_exact(&mut h).map_err(io)?;
            let their_k = check_header(&h, self.peer, seq, job.bytes)?;
            if their_k != k as u32 {
                return Err(Error::internal(format!("rank {}: copy-engine chunk {their_k} where {k} was expected", self.peer)));
            }
            let src = self.ring.ptr + self.slot * CHUNK;
            self.slot = (self.slot + 1) % SLOTS;
            if n > 0 {
                match job.mem {
                    // src is a slot of our ring holding n bytes (its header arrived); [dst + off,
                    // + n) the plan's device range.
                    Mem::Dev(dst) => copy_engine_async(dst + off, src, n as usize, st.stream.raw)?,
                    // SAFETY: as above; the destination is the proxy's pinned arena range.
                    Mem::Host(p) => check(
                        unsafe { cu::cuMemcpyDtoHAsync_v2(p.add(off as usize).cast(), src, n as usize, st.stream.raw) },
                        "cuMemcpyDtoHAsync (copy-engine receive)",
                    )?,
                }
                // The slot is read before the sender may fill it again.
                st.sync()?;
            }
            self.sock.write_all(&(k as u64).to_le_bytes()).map_err(io)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_byte_once_and_empty_jobs_have_one() {
        assert_eq!(chunks(0), vec![(0, 0)]);
        assert_eq!(chunks(5), vec![(0, 5)]);
        assert_eq!(chunks(CHUNK), vec![(0, CHUNK)]);
        assert_eq!(chunks(2 * CHUNK + 1), vec![(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, 1)]);
    }
}
