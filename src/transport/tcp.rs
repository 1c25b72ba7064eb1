//! TCP transport: host-staged transfers to one peer, striped over several sockets and pipelined
//! chunk by chunk.
//!
//! Sender (a proxy `Handler`): each data request is cut into chunks; the proxy thread stages a
//! chunk into host memory and hands it to the next socket's sender thread, then stages the next
//! one while the first is on the wire. A flag request becomes a signal frame carrying how many
//! data frames preceded it (across all sockets).
//! Receiver: one thread per socket writes each data chunk to its destination as soon as it has
//! arrived, and applies a signal only once every data frame before it has been written, so the
//! peer never sees a semaphore before its data.
//! Every frame header is validated before anything is allocated for it; a connection that breaks
//! or sends garbage fails the transport with ncclRemoteError naming the peer.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::MemAccess;
use crate::error::{Error, Result, ResultCode};
use crate::proxy::trigger::Request;
use crate::proxy::Handler;
use crate::tls::Stream;

/// Bytes per chunk (one frame's payload at most).
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Largest payload a receiver accepts in one frame.
const MAX_CHUNK: usize = 16 << 20;
/// Chunks queued per socket before the proxy thread waits (bounds staging memory).
const QUEUE_DEPTH: usize = 4;
const HEADER_BYTES: usize = 32;
const MAGIC: u16 = 0x7c0d;
const KIND_DATA: u8 = 1;
const KIND_SIGNAL: u8 = 2;

/// Frame header: magic u16 | kind u8 | pad u8 | id u16 (memory or semaphore) | pad u16 | len u32 |
/// pad u32 | a u64 (data: offset; signal: value) | b u64 (signal: data frames before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: u8,
    id: u16,
    len: u32,
    a: u64,
    b: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        h[2] = self.kind;
        h[4..6].copy_from_slice(&self.id.to_le_bytes());
        h[8..12].copy_from_slice(&self.len.to_le_bytes());
        h[16..24].copy_from_slice(&self.a.to_le_bytes());
        h[24..32].copy_from_slice(&self.b.to_le_bytes());
        h
    }

    fn decode(h: &[u8; HEADER_BYTES]) -> Result<Header> {
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or([0; 8]));
        if u16_at(0) != MAGIC || h[3] != 0 || u16_at(6) != 0 || u32_at(12) != 0 {
            return Err(Error::remote("malformed frame header"));
        }
        let hd = Header { kind: h[2], id: u16_at(4), len: u32_at(8), a: u64_at(16), b: u64_at(24) };
        match hd.kind {
            KIND_DATA if hd.len as usize <= MAX_CHUNK => Ok(hd),
            KIND_SIGNAL if hd.len == 0 => Ok(hd),
            _ => Err(Error::remote(format!("bad frame (kind {}, {} bytes)", hd.kind, hd.len))),
        }
    }
}

/// The first error of a connection's threads, shared with whoever reports it.
#[derive(Default)]
struct Failure(Mutex<Option<Error>>);

impl Failure {
    fn set(&self, e: Error) {
        self.0.lock().get_or_insert(e);
    }
    fn get(&self) -> Option<Error> {
        self.0.lock().clone()
    }
}

/// Sending side of a connection to one peer.
pub struct TcpSender {
    peer: usize,
    mem: Arc<dyn MemAccess>,
    chunk: usize,
    queues: Vec<SyncSender<Vec<u8>>>,
    threads: Vec<JoinHandle<()>>,
    socks: Vec<Stream>,
    next: usize,
    data_frames: u64,
    sem_values: Vec<u64>,
    failure: Arc<Failure>,
}

impl TcpSender {
    /// `socks`: connected streams to `peer`'s receiver (one thread each).
    pub fn new(peer: usize, socks: Vec<Stream>, mem: Arc<dyn MemAccess>, chunk: usize) -> Result<TcpSender> {
        if socks.is_empty() || chunk == 0 || chunk > MAX_CHUNK {
            return Err(Error::invalid_argument(format!("TCP sender: {} sockets, chunk {chunk}", socks.len())));
        }
        let failure = Arc::new(Failure::default());
        let (mut queues, mut threads, mut keep) = (Vec::new(), Vec::new(), Vec::new());
        for (i, s) in socks.into_iter().enumerate() {
            let _ = s.set_nodelay(true);
            keep.push(s.try_clone().map_err(|e| Error::io("TCP sender: cloning a socket", &e))?);
            let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_DEPTH);
            let f = failure.clone();
            let t = std::thread::Builder::new()
                .name(format!("oxccl-tcp-tx{peer}.{i}"))
                .spawn(move || send_loop(s, rx, &f, peer))
                .map_err(|e| Error::io("TCP sender: starting a thread", &e))?;
            queues.push(tx);
            threads.push(t);
        }
        Ok(TcpSender { peer, mem, chunk, queues, threads, socks: keep, next: 0, data_frames: 0, sem_values: Vec::new(), failure })
    }

    fn check(&self) -> Result<()> {
        match self.failure.get() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn enqueue(&mut self, socket: usize, frame: Vec<u8>) -> Result<()> {
        self.queues[socket]
            .send(frame)
            .map_err(|_| self.failure.get().unwrap_or_else(|| Error::remote(format!("connection to rank {} closed", self.peer))))
    }
}

fn send_loop(mut s: Stream, rx: Receiver<Vec<u8>>, failure: &Failure, peer: usize) {
    for frame in rx {
        if let Err(e) = s.write_all(&frame) {
            failure.set(Error::new(ResultCode::RemoteError, format!("sending to rank {peer}: {e}")));
            let _ = s.shutdown(Shutdown::Both);
            return;
        }
    }
}

impl Handler for TcpSender {
    fn execute(&mut self, r: &Request) -> Result<()> {
        self.check()?;
        if r.is_data() {
            let mut done = 0usize;
            let total = r.size as usize;
            while done < total {
                let n = self.chunk.min(total - done);
                let mut frame = vec![0u8; HEADER_BYTES + n];
                self.mem.read(r.src_mem, u64::from(r.src_offset) + done as u64, &mut frame[HEADER_BYTES..])?;
                let h = Header { kind: KIND_DATA, id: r.dst_mem, len: n as u32, a: u64::from(r.dst_offset) + done as u64, b: 0 };
                frame[..HEADER_BYTES].copy_from_slice(&h.encode());
                let s = self.next;
                self.next = (self.next + 1) % self.queues.len();
                self.enqueue(s, frame)?;
                self.data_frames += 1;
                done += n;
            }
        }
        if r.is_flag() {
            let sem = r.semaphore as usize;
            if self.sem_values.len() <= sem {
                self.sem_values.resize(sem + 1, 0);
            }
            self.sem_values[sem] += 1;
            let h = Header { kind: KIND_SIGNAL, id: r.semaphore, len: 0, a: self.sem_values[sem], b: self.data_frames };
            self.enqueue(0, h.encode().to_vec())?;
        }
        Ok(())
    }

    /// Every source byte was staged before `execute` returned, so the source may be reused:
    /// only a failure remains to report.
    fn complete(&mut self) -> Result<()> {
        self.check()
    }

    /// Shuts the sockets down: a send blocked on a peer that stopped reading fails at once,
    /// which ends the sending threads and fails a blocked `execute`.
    fn interrupter(&self) -> Option<crate::proxy::Interrupt> {
        let socks: Vec<Stream> = self.socks.iter().filter_map(|s| s.try_clone().ok()).collect();
        let failure = self.failure.clone();
        let peer = self.peer;
        Some(Box::new(move || {
            failure.set(Error::system(format!("connection to rank {peer} aborted")));
            for s in &socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        }))
    }
}

impl Drop for TcpSender {
    fn drop(&mut self) {
        self.queues.clear(); // the threads drain what is queued, then exit
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for s in &self.socks {
            let _ = s.shutdown(Shutdown::Write);
        }
    }
}

/// Receiving side of a connection from one peer.
pub struct TcpReceiver {
    socks: Vec<Stream>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    state: Arc<RecvState>,
}

#[derive(Default)]
struct RecvState {
    applied: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
    failure: Failure,
}

impl TcpReceiver {
    /// Starts one thread per socket. `on_error` hears about the first failure (a broken or
    /// misbehaving connection), named with the peer's rank.
    pub fn start(peer: usize, socks: Vec<Stream>, mem: Arc<dyn MemAccess>, on_error: Arc<dyn Fn(Error) + Send + Sync>) -> Result<TcpReceiver> {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(RecvState::default());
        let (mut threads, mut keep) = (Vec::new(), Vec::new());
        for (i, s) in socks.into_iter().enumerate() {
            keep.push(s.try_clone().map_err(|e| Error::io("TCP receiver: cloning a socket", &e))?);
            let (mem, stop, state, on_error) = (mem.clone(), stop.clone(), state.clone(), on_error.clone());
            let t = std::thread::Builder::new()
                .name(format!("oxccl-tcp-rx{peer}.{i}"))
                .spawn(move || {
                    if let Err(e) = recv_loop(s, mem.as_ref(), &state, &stop) {
                        if !stop.load(Ordering::Acquire) {
                            let e = Error::new(e.code, format!("connection from rank {peer}: {}", e.msg));
                            state.failure.set(e.clone());
                            on_error(e);
                        }
                        stop.store(true, Ordering::Release);
                        state.cv.notify_all();
                    }
                })
                .map_err(|e| Error::io("TCP receiver: starting a thread", &e))?;
            threads.push(t);
        }
        Ok(TcpReceiver { socks: keep, threads, stop, state })
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<Error> {
        self.state.failure.get()
    }

    /// Waits until the peer closed every socket cleanly (tests, orderly shutdown).
    pub fn join(mut self) -> Option<Error> {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.state.failure.get()
    }
}

impl Drop for TcpReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.state.cv.notify_all();
        for s in &self.socks {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Ok(()) on a clean close between frames.
fn recv_loop(mut s: Stream, mem: &dyn MemAccess, st: &RecvState, stop: &AtomicBool) -> Result<()> {
    let mut buf = Vec::new();
    loop {
        let mut h = [0u8; HEADER_BYTES];
        match read_full(&mut s, &mut h)? {
            0 => return Ok(()),
            n if n < HEADER_BYTES => return Err(Error::remote("connection closed inside a frame header")),
            _ => {}
        }
        let hd = Header::decode(&h)?;
        if hd.kind == KIND_DATA {
            buf.resize(hd.len as usize, 0);
            if read_full(&mut s, &mut buf)? < buf.len() {
                return Err(Error::remote("connection closed inside a frame"));
            }
            mem.write(hd.id, hd.a, &buf).map_err(|e| Error::remote(format!("peer's data frame rejected: {}", e.msg)))?;
            st.applied.fetch_add(1, Ordering::AcqRel);
            let _g = st.lock.lock();
            st.cv.notify_all();
        } else {
            // Every data frame the peer sent before this signal must be written first.
            let mut g = st.lock.lock();
            while st.applied.load(Ordering::Acquire) < hd.b {
                if stop.load(Ordering::Acquire) {
                    return Err(Error::remote("stopped while a signal waited for its data"));
                }
                st.cv.wait_for(&mut g, Duration::from_millis(50));
            }
            drop(g);
            mem.signal(hd.id, hd.a).map_err(|e| Error::remote(format!("peer's signal rejected: {}", e.msg)))?;
        }
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(s: &mut Stream, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::new(ResultCode::RemoteError, format!("receive failed: {e}"))),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::super::HostMem;
    use super::*;
    use crate::device_abi::{OX_TRIGGER_DATA, OX_TRIGGER_FLAG, OX_TRIGGER_SYNC};
    use crate::proxy::fifo::{FifoHost, HeapFifo};
    use crate::proxy::{Placement, Proxy};
    use std::sync::atomic::AtomicU64;

    fn sockets(n: usize) -> (Vec<Stream>, Vec<Stream>) {
        crate::tls::loopback_pairs(n, None)
    }

    /// The same over TLS sessions.
    fn tls_sockets(n: usize) -> (Vec<Stream>, Vec<Stream>) {
        crate::tls::loopback_pairs(n, Some(&crate::tls::test_keys()))
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed ^ (i >> 13) as u8)).collect()
    }

    /// A signal checker: records, per signal, whether the destination already held the data.
    struct Checked {
        inner: HostMem,
        expect: Vec<u8>,
        ok_at_signal: Mutex<Vec<(u64, bool)>>,
    }
    impl MemAccess for Checked {
        fn read(&self, m: u16, o: u64, d: &mut [u8]) -> Result<()> {
            self.inner.read(m, o, d)
        }
        fn write(&self, m: u16, o: u64, s: &[u8]) -> Result<()> {
            self.inner.write(m, o, s)
        }
        fn signal(&self, sem: u16, v: u64) -> Result<()> {
            let ok = *self.inner.mems[0].lock() == self.expect;
            self.ok_at_signal.lock().push((v, ok));
            self.inner.signal(sem, v)
        }
    }

    #[test]
    fn striped_pipelined_transfer_through_the_proxy_signals_after_the_data() {
        striped_pipelined_transfer(sockets(4));
    }

    /// ncclSetEncryption: the same transfer over TLS sessions.
    #[test]
    fn striped_pipelined_transfer_over_tls() {
        striped_pipelined_transfer(tls_sockets(4));
    }

    fn striped_pipelined_transfer((out, inn): (Vec<Stream>, Vec<Stream>)) {
        let size = 24 << 20; // 24 chunks of 1 MiB over 4 sockets
        let src = Arc::new(HostMem::new(&[size], 0));
        let data = pattern(size, 5);
        src.write(0, 0, &data).unwrap();
        let dst = Arc::new(Checked { inner: HostMem::new(&[size], 2), expect: data.clone(), ok_at_signal: Mutex::new(Vec::new()) });
        let rx = TcpReceiver::start(1, inn, dst.clone(), Arc::new(|e| panic!("receiver error: {e:?}"))).unwrap();
        let tx = TcpSender::new(1, out, src.clone(), DEFAULT_CHUNK).unwrap();
        let fifo = Arc::new(HeapFifo::new(16).unwrap());
        let head = AtomicU64::new(0);
        let mut proxy =
            Proxy::start("tcp-test".into(), FifoHost::new(fifo.words), Box::new(tx), Placement::default(), Box::new(|e| panic!("{e:?}")))
                .unwrap();
        // putWithSignal of the whole buffer in two halves (the second half signals), then a flush.
        let half = (size / 2) as u32;
        let put = |off: u32, kind: u64| {
            Request { kind, size: half, src_offset: off, dst_offset: off, semaphore: 1, ..Default::default() }.encode().unwrap()
        };
        fifo.words.push_like_device(&head, put(0, OX_TRIGGER_DATA)).unwrap();
        fifo.words.push_like_device(&head, put(half, OX_TRIGGER_DATA | OX_TRIGGER_FLAG)).unwrap();
        let pos = fifo.words.push_like_device(&head, Request { kind: OX_TRIGGER_SYNC, ..Default::default() }.encode().unwrap()).unwrap();
        assert!(fifo.words.flush_like_device(pos));
        proxy.stop();
        drop(proxy); // drops the sender: queued frames drain, sockets close
        assert!(rx.join().is_none());
        assert_eq!(*dst.inner.mems[0].lock(), data, "destination bytes");
        assert_eq!(*dst.inner.sems[1].lock(), 1);
        assert_eq!(*dst.ok_at_signal.lock(), vec![(1, true)], "the signal came after all 24 chunks were written");
    }

    #[test]
    fn signals_count_up_per_semaphore_and_zero_byte_puts_work() {
        let src = Arc::new(HostMem::new(&[64], 0));
        let dst = Arc::new(HostMem::new(&[64], 3));
        let (out, inn) = sockets(2);
        let rx = TcpReceiver::start(0, inn, dst.clone(), Arc::new(|e| panic!("{e:?}"))).unwrap();
        let mut tx = TcpSender::new(0, out, src, 16).unwrap();
        for i in 0..5u16 {
            tx.execute(&Request { kind: OX_TRIGGER_DATA | OX_TRIGGER_FLAG, size: 0, semaphore: 1 + (i % 2), ..Default::default() }).unwrap();
        }
        tx.complete().unwrap();
        drop(tx);
        assert!(rx.join().is_none());
        assert_eq!((*dst.sems[1].lock(), *dst.sems[2].lock()), (3, 2));
    }

    #[test]
    fn garbage_and_truncation_fail_the_connection_naming_the_peer() {
        for bad in [vec![0xffu8; HEADER_BYTES], {
            let mut h = Header { kind: KIND_DATA, id: 0, len: 100, a: 0, b: 0 }.encode().to_vec();
            h.extend_from_slice(&[1, 2, 3]); // then close mid-frame
            h
        }, Header { kind: KIND_DATA, id: 0, len: (MAX_CHUNK + 1) as u32, a: 0, b: 0 }.encode().to_vec(), Header { kind: KIND_DATA, id: 9, len: 4, a: 0, b: 0 }.encode().iter().copied().chain([0; 4]).collect()]
        {
            let dst = Arc::new(HostMem::new(&[64], 1));
            let (mut out, inn) = sockets(1);
            let errors = Arc::new(Mutex::new(Vec::new()));
            let e2 = errors.clone();
            let rx = TcpReceiver::start(7, inn, dst, Arc::new(move |e| e2.lock().push(e))).unwrap();
            out[0].write_all(&bad).unwrap();
            drop(out);
            let f = rx.join().expect("the connection failed");
            assert_eq!(f.code, ResultCode::RemoteError);
            assert!(f.msg.contains("rank 7"), "{f:?}");
            assert_eq!(errors.lock().len(), 1);
        }
    }

    #[test]
    fn a_dead_receiver_turns_into_a_remote_error_at_the_sender() {
        a_dead_receiver(sockets(2));
        a_dead_receiver(tls_sockets(2));
    }

    fn a_dead_receiver((out, inn): (Vec<Stream>, Vec<Stream>)) {
        let src = Arc::new(HostMem::new(&[8 << 20], 0));
        drop(inn);
        let mut tx = TcpSender::new(3, out, src, 1 << 16).unwrap();
        let r = Request { kind: OX_TRIGGER_DATA, size: 8 << 20, ..Default::default() };
        let mut err = None;
        for _ in 0..50 {
            if let Err(e) = tx.execute(&r).and_then(|()| tx.complete()) {
                err = Some(e);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = err.expect("sending to a closed peer fails");
        assert_eq!(e.code, ResultCode::RemoteError);
        assert!(e.msg.contains("rank 3"), "{e:?}");
    }

    /// A peer that stops reading fills the sockets and the queues, blocking the proxy inside
    /// execute; Proxy::abort must still return at once.
    #[test]
    fn abort_returns_while_a_hung_peer_blocks_the_sender() {
        let size = 8 << 20;
        let src = Arc::new(HostMem::new(&[size], 0));
        let (out, inn) = sockets(2); // `inn` is kept open and never read: a hung peer
        let tx = TcpSender::new(5, out, src, 1 << 20).unwrap();
        let fifo = Arc::new(HeapFifo::new(64).unwrap());
        let errors = Arc::new(Mutex::new(Vec::new()));
        let e2 = errors.clone();
        let mut proxy =
            Proxy::start("tcp-hung".into(), FifoHost::new(fifo.words), Box::new(tx), Placement::default(), Box::new(move |e| e2.lock().push(e)))
                .unwrap();
        let head = AtomicU64::new(0);
        for _ in 0..32 {
            let r = Request { kind: OX_TRIGGER_DATA, size: size as u32, ..Default::default() };
            fifo.words.push_like_device(&head, r.encode().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(500)); // long enough for the sockets to fill
        let t0 = std::time::Instant::now();
        proxy.abort();
        assert!(t0.elapsed() < Duration::from_secs(2), "abort took {:?}", t0.elapsed());
        assert_ne!(fifo.words.stop().load(Ordering::Acquire), 0, "device waiters released");
        drop(inn);
    }

    #[test]
    fn headers_round_trip() {
        let h = Header { kind: KIND_SIGNAL, id: 1023, len: 0, a: u64::MAX, b: 77 };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[3] = 1;
        assert!(Header::decode(&bad).is_err());
    }
}
