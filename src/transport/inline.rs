//! Small transfers carried by the proxy thread itself, on lane 0's TCP sockets.
//!
//! A posted job costs thread hand-offs: the proxy wakes a link thread, the peer's reading thread
//! wakes when the frame lands, and the proxy wakes again when the tracker counts the job done.
//! Each hand-off is a futex wake of a sleeping thread, tens of microseconds on an idle server
//! core, which is most of a small step. Here the proxy, already spinning, writes and reads the
//! frames with non-blocking calls (MSG_DONTWAIT: the flag is per call, so the link threads' blocking
//! sockets, which share the file description, are unaffected) until every frame of a phase has
//! gone and arrived.
//!
//! The frames are exactly the link threads' (`link::header`, then the payload, the whole job on
//! lane 0 since small jobs are not striped), numbered from the link's shared counters, so each end
//! decides alone whether it carries a job inline or posts it: the byte stream is the same.
//! Writes and reads are interleaved, so two ranks sending each other more than their socket buffers
//! hold still progress.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use std::sync::Arc;

use super::link::{check_header, header, io_error, stripe_min, HEADER_BYTES};
use super::progress::Gate;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// Jobs up to this size are carried inline by default (OXCCL_NET_INLINE_MAX). Since the threaded
/// path combines reductions as they land (`pipeline`), jobs of 512 KiB are faster there, striped:
/// same call at 2 simulated hosts x 1 on H100 (BENCHMARKS.md of 2026-11-25, e852477), inline
/// 256 KiB and striping from 512 KiB against 512 KiB and 1 MiB, at 512 KB: AllReduce 239 vs
/// 329 us, Reduce 131 vs 165, Broadcast 122 vs 170, Send/Recv 177 vs 257. (Before that pipeline,
/// 512 KiB beat 256 KiB at 2x2 and 4x1 on H200 x4, BENCHMARKS.md of 2026-11-22, 7c99e1f; not
/// re-measured there.)
pub const DEFAULT_MAX: u64 = 256 << 10;

/// Idle rounds (each a non-blocking call per socket, about a microsecond) the proxy spins on its
/// sockets after the last progress before it sleeps in poll(2): a peer that is late by more is
/// not a few microseconds away. Counted, not timed: reading a clock in the loop costs more than
/// a round on some virtual machines.
const SPIN_ROUNDS: u32 = 4096;
/// poll(2) timeout once sleeping: how often `stop` is asked then.
const POLL_MS: i32 = 2;

/// OXCCL_NET_INLINE_MAX: the largest job (bytes) the proxy carries itself; 0 turns this off.
/// Capped below the striping threshold, whose jobs travel on several lanes. Per rank: each end
/// decides alone (see the module note).
pub fn max_bytes() -> u64 {
    let cap = stripe_min() - 1;
    match crate::config::env("OXCCL_NET_INLINE_MAX") {
        None => DEFAULT_MAX.min(cap),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => {
                let n = n.min(cap);
                nccl_info!(Subsys::Net, "OXCCL_NET_INLINE_MAX set by environment to {n}");
                n
            }
            Err(_) => {
                nccl_warn!("OXCCL_NET_INLINE_MAX={v}: not a byte count, using {}", DEFAULT_MAX.min(cap));
                DEFAULT_MAX.min(cap)
            }
        },
    }
}

/// One outgoing frame: its header, and where its payload is (not copied: a pipelined step's
/// payload may still be arriving from the step kernel, `gate`).
struct OutFrame {
    hdr: [u8; HEADER_BYTES],
    ptr: *const u8,
    len: usize,
    /// The payload lies in a pipelined step's arena: only what the step kernel has flagged copied
    /// in may go (`Gate::ready_prefix`).
    gate: Option<Arc<Gate>>,
    /// Payload bytes known to be ready (so the gate is asked again only once they have gone).
    ready: usize,
}

/// Most iovecs per sendmsg: frames of a phase to one peer go out together.
const MAX_IOV: usize = 64;

/// One link's outgoing frames of a phase, in order.
pub struct Out {
    fd: RawFd,
    peer: usize,
    frames: Vec<OutFrame>,
    /// The frame being written, and bytes of it (header first) written.
    cur: usize,
    sent: usize,
}

impl Out {
    /// No frames yet, to be written on `sock` (lane 0's socket to rank `peer`).
    pub fn new(sock: &TcpStream, peer: usize) -> Out {
        Out { fd: sock.as_raw_fd(), peer, frames: Vec::new(), cur: 0, sent: 0 }
    }

    /// Appends job `seq`'s frame, its payload the `len` bytes at `ptr`; with `gate`, each byte goes
    /// only once the gate reports it copied in.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes until `exchange` returns, and nothing may write
    /// them meanwhile except the step kernel's copies that `gate` watches.
    pub unsafe fn frame_at(&mut self, seq: u64, ptr: *const u8, len: usize, gate: Option<Arc<Gate>>) {
        self.frames.push(OutFrame { hdr: header(0, seq, len as u64), ptr, len, gate, ready: 0 });
    }

    fn done(&self) -> bool {
        self.cur == self.frames.len()
    }

    /// Payload bytes of frame `k` that may go now.
    fn ready(&mut self, k: usize) -> usize {
        let f = &mut self.frames[k];
        if f.ready < f.len {
            f.ready = match &f.gate {
                None => f.len,
                // Only the bytes not yet known ready: fewer flags read while the proxy spins.
                // SAFETY: f.ready <= f.len, within the payload `frame_at` was given.
                Some(g) => f.ready + g.ready_prefix(unsafe { f.ptr.add(f.ready) }, (f.len - f.ready) as u64) as usize,
            };
        }
        f.ready
    }

    /// Whether the next bytes wait for the step kernel rather than the socket (its flags read
    /// again first).
    fn gated(&mut self) -> bool {
        if !self.done() {
            self.ready(self.cur);
        }
        self.waits_for_kernel()
    }

    /// `gated`, as of the flags last read.
    fn waits_for_kernel(&self) -> bool {
        self.frames.get(self.cur).is_some_and(|f| f.ready < f.len && self.sent >= HEADER_BYTES + f.ready)
    }

    /// Writes what the socket takes now (frames to this peer together, up to what their gates
    /// allow); true if anything went.
    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        while !self.done() {
            let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOV];
            let mut n_iov = 0;
            let mut at = self.sent;
            for k in self.cur..self.frames.len() {
                if n_iov + 2 > MAX_IOV {
                    break;
                }
                let ready = self.ready(k);
                let f = &self.frames[k];
                if at < HEADER_BYTES {
                    // SAFETY: within the frame's header.
                    iov[n_iov] = libc::iovec { iov_base: unsafe { f.hdr.as_ptr().add(at) } as *mut _, iov_len: HEADER_BYTES - at };
                    n_iov += 1;
                }
                let from = at.saturating_sub(HEADER_BYTES);
                if ready > from {
                    // SAFETY: within the payload the caller promised (`frame_at`), ready bytes of it.
                    iov[n_iov] = libc::iovec { iov_base: unsafe { f.ptr.add(from) } as *mut _, iov_len: ready - from };
                    n_iov += 1;
                }
                if ready < f.len {
                    break; // the rest of this frame, and the frames after it, wait for the kernel
                }
                at = 0;
            }
            if n_iov == 0 {
                break;
            }
            // SAFETY: a zeroed msghdr naming n_iov valid buffers (above); fd is a socket the
            // caller keeps open.
            let n = unsafe {
                let mut m: libc::msghdr = std::mem::zeroed();
                m.msg_iov = iov.as_mut_ptr();
                m.msg_iovlen = n_iov as _;
                libc::sendmsg(self.fd, &m, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            };
            match n {
                n if n > 0 => {
                    any = true;
                    self.advance(n as usize);
                }
                _ => match last_error() {
                    Some(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Some(e) => return Err(io_error(self.peer, e).context(format!("sending to rank {}", self.peer))),
                    None => break,
                },
            }
        }
        Ok(any)
    }

    /// `n` more bytes written, across frames.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let total = HEADER_BYTES + self.frames[self.cur].len;
            let step = n.min(total - self.sent);
            self.sent += step;
            n -= step;
            if self.sent == total {
                self.cur += 1;
                self.sent = 0;
            }
        }
    }

    /// Bytes of frames [from, to), headers included.
    fn bytes(&self, from: usize, to: usize) -> usize {
        self.frames[from..to].iter().map(|f| HEADER_BYTES + f.len).sum()
    }
}

/// A frame this rank expects: its sequence number and where its payload goes.
struct Expect {
    seq: u64,
    dst: *mut u8,
    len: usize,
}

/// One link's expected incoming frames, in order.
pub struct In {
    fd: RawFd,
    peer: usize,
    frames: Vec<Expect>,
    cur: usize,
    hdr: [u8; HEADER_BYTES],
    /// Bytes of the current frame received (header first).
    got: usize,
}

impl In {
    /// No frames expected yet, to be read from `sock` (lane 0's socket from rank `peer`).
    pub fn new(sock: &TcpStream, peer: usize) -> In {
        In { fd: sock.as_raw_fd(), peer, frames: Vec::new(), cur: 0, hdr: [0; HEADER_BYTES], got: 0 }
    }

    /// Expects job `seq` of `len` bytes next, its payload to land at `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and nothing else may touch that range, until
    /// `exchange` returns.
    pub unsafe fn expect(&mut self, seq: u64, dst: *mut u8, len: usize) {
        self.frames.push(Expect { seq, dst, len });
    }

    fn done(&self) -> bool {
        self.cur == self.frames.len()
    }

    /// Frames expected so far (the next `expect` is frame number `expected()`).
    pub fn expected(&self) -> usize {
        self.frames.len()
    }

    /// Payload bytes of frame `j` in memory (its header checked).
    pub fn landed(&self, j: usize) -> usize {
        match self.frames.get(j) {
            Some(f) if j < self.cur => f.len,
            // A header is checked in the call that completes it, before `progress` returns.
            Some(_) if j == self.cur => self.got.saturating_sub(HEADER_BYTES),
            _ => 0,
        }
    }

    /// Reads what has arrived; true if anything did. The header and the payload it announces are
    /// read by one call (two buffers): the length is known in advance, and a header that does not
    /// match fails the communicator whatever landed in the payload's place.
    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        while let Some(f) = self.frames.get(self.cur) {
            let total = HEADER_BYTES + f.len;
            if self.got < total {
                let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2];
                let mut n_iov = 0;
                if self.got < HEADER_BYTES {
                    // SAFETY: within the header buffer.
                    iov[0] = libc::iovec { iov_base: unsafe { self.hdr.as_mut_ptr().add(self.got) }.cast(), iov_len: HEADER_BYTES - self.got };
                    n_iov = 1;
                }
                let done = self.got.saturating_sub(HEADER_BYTES);
                if f.len > done {
                    // SAFETY: within the payload range `expect` was promised.
                    iov[n_iov] = libc::iovec { iov_base: unsafe { f.dst.add(done) }.cast(), iov_len: f.len - done };
                    n_iov += 1;
                }
                // SAFETY: a zeroed msghdr naming n_iov valid buffers (above); fd is a socket the
                // caller keeps open.
                let n = unsafe {
                    let mut m: libc::msghdr = std::mem::zeroed();
                    m.msg_iov = iov.as_mut_ptr();
                    m.msg_iovlen = n_iov as _;
                    libc::recvmsg(self.fd, &mut m, libc::MSG_DONTWAIT)
                };
                match n {
                    0 => return Err(Error::remote(format!("rank {} closed its network connection", self.peer))),
                    n if n > 0 => {
                        any = true;
                        let before = self.got;
                        self.got += n as usize;
                        if before < HEADER_BYTES && self.got >= HEADER_BYTES {
                            check_header(&self.hdr, self.peer, f.seq, f.len as u64)?;
                        }
                    }
                    _ => match last_error() {
                        Some(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Some(e) => return Err(io_error(self.peer, e)),
                        None => break,
                    },
                }
            }
            if self.got == total {
                self.cur += 1;
                self.got = 0;
            }
        }
        Ok(any)
    }
}

/// What a phase still waits for, peer by peer (the hang dump's text).
pub fn pending(outs: &[Out], ins: &[In]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for o in outs.iter().filter(|o| !o.done()) {
        let _ = write!(s, "{}sending to rank {}: {} of {} bytes written", if s.is_empty() { "" } else { "; " }, o.peer, o.bytes(0, o.cur) + o.sent, o.bytes(0, o.frames.len()));
        if o.waits_for_kernel() {
            s.push_str(" (the rest not yet copied in by the step kernel)");
        }
    }
    for i in ins.iter().filter(|i| !i.done()) {
        let _ = write!(
            s,
            "{}receiving from rank {}: frame {} of {}, {} bytes of it read",
            if s.is_empty() { "" } else { "; " },
            i.peer,
            i.cur + 1,
            i.frames.len(),
            i.got
        );
    }
    s
}

/// errno of a failed call, None for "would block".
fn last_error() -> Option<std::io::Error> {
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) => None,
        #[allow(unreachable_patterns)] // EWOULDBLOCK == EAGAIN on Linux
        Some(libc::EWOULDBLOCK) => None,
        _ => Some(e),
    }
}

/// Sends every `outs` frame and receives every `ins` frame, interleaved, until all are done; a
/// socket error or end of stream fails with the peer named, and `stop()` (asked between polls)
/// ends the wait with its error (abort).
pub fn exchange(outs: &mut [Out], ins: &mut [In], stop: &dyn Fn() -> Option<Error>) -> Result<()> {
    exchange_noting(outs, ins, stop, &|_| {})
}

/// `exchange`, telling `note` what is still outstanding (`pending`) each time the wait turns
/// long (the proxy keeps it for the hang dump, OXCCL_DEBUG_DUMP); nothing on the fast path.
pub fn exchange_noting(outs: &mut [Out], ins: &mut [In], stop: &dyn Fn() -> Option<Error>, note: &dyn Fn(String)) -> Result<()> {
    exchange_watching(outs, ins, stop, note, &mut |_| {})
}

/// `exchange_noting`, calling `landed` with the receivers each time bytes have arrived (a
/// pipelined step marks its results as they land: `In::landed`).
pub fn exchange_watching(outs: &mut [Out], ins: &mut [In], stop: &dyn Fn() -> Option<Error>, note: &dyn Fn(String), landed: &mut dyn FnMut(&[In])) -> Result<()> {
    let mut idle = 0u32;
    loop {
        let mut any = false;
        for o in outs.iter_mut() {
            any |= o.progress()?;
        }
        let mut got = false;
        for i in ins.iter_mut() {
            got |= i.progress()?;
        }
        if got {
            landed(ins);
        }
        if outs.iter().all(Out::done) && ins.iter().all(In::done) {
            return Ok(());
        }
        if any || got {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle.is_multiple_of(64) {
            if let Some(e) = stop() {
                return Err(e);
            }
        }
        if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
            continue;
        }
        if idle == SPIN_ROUNDS {
            note(pending(outs, ins));
        }
        if outs.iter_mut().any(Out::gated) {
            // Waiting for the step kernel's copies (microseconds), which poll(2) cannot see.
            std::thread::yield_now();
            if let Some(e) = stop() {
                return Err(e);
            }
            continue;
        }
        // Long wait (a late peer): sleep until a socket is ready, or a short timeout for `stop`.
        let mut fds: Vec<libc::pollfd> = outs
            .iter()
            .filter(|o| !o.done())
            .map(|o| libc::pollfd { fd: o.fd, events: libc::POLLOUT, revents: 0 })
            .chain(ins.iter().filter(|i| !i.done()).map(|i| libc::pollfd { fd: i.fd, events: libc::POLLIN, revents: 0 }))
            .collect();
        // SAFETY: fds is a valid array of fds.len() entries.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
        if let Some(e) = stop() {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::link::{Job, Link, Mem, Tracker};
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    /// Socket pairs a->b and b->a over loopback.
    fn sockets() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let ao = TcpStream::connect(a).unwrap();
        let bi = l.accept().unwrap().0;
        let bo = TcpStream::connect(a).unwrap();
        let ai = l.accept().unwrap().0;
        (ao, ai, bo, bi)
    }

    #[test]
    fn frames_cross_both_ways_beyond_socket_buffers() {
        let (ao, ai, bo, bi) = sockets();
        // More than loopback's socket buffers each way at once: needs the interleaving.
        let sizes = [0usize, 1, 4096, 8 << 20, 3];
        let data = |seed: usize, n: usize| -> Vec<u8> { (0..n).map(|i| ((i * 7 + seed) % 251) as u8).collect() };
        let t = std::thread::spawn(move || {
            let mut o = Out::new(&bo, 0);
            let mut i = In::new(&bi, 0);
            let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let src: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| data(k + 100, n)).collect();
            for (k, &n) in sizes.iter().enumerate() {
                // SAFETY: src outlives exchange, unchanged.
                unsafe { o.frame_at(k as u64 + 1, src[k].as_ptr(), n, None) };
                // SAFETY: dst[k] is n bytes and outlives exchange.
                unsafe { i.expect(k as u64 + 1, dst[k].as_mut_ptr(), n) };
            }
            exchange(&mut [o], &mut [i], &|| None).unwrap();
            dst
        });
        let mut o = Out::new(&ao, 1);
        let mut i = In::new(&ai, 1);
        let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let src: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| data(k, n)).collect();
        for (k, &n) in sizes.iter().enumerate() {
            // SAFETY: as above.
            unsafe { o.frame_at(k as u64 + 1, src[k].as_ptr(), n, None) };
            // SAFETY: as above.
            unsafe { i.expect(k as u64 + 1, dst[k].as_mut_ptr(), n) };
        }
        exchange(&mut [o], &mut [i], &|| None).unwrap();
        let theirs = t.join().unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            assert!(dst[k] == data(k + 100, n), "frame {k} a<-b");
            assert!(theirs[k] == data(k, n), "frame {k} b<-a");
        }
    }

    /// Round time of a small inline exchange between two threads over loopback (the floor of a
    /// small cross-host exchange step's proxy part): `cargo test --release -- --ignored
    /// inline_exchange_round --nocapture`.
    #[test]
    #[ignore]
    fn inline_exchange_round() {
        let (ao, ai, bo, bi) = sockets();
        for s in [&ao, &ai, &bo, &bi] {
            s.set_nodelay(true).unwrap(); // as the links' sockets are
        }
        let rounds = 20000u64;
        let side = move |o_s: TcpStream, i_s: TcpStream| {
            let (mut dst, src) = ([0u8; 32], [7u8; 32]);
            let t0 = Instant::now();
            for k in 1..=rounds {
                let mut o = Out::new(&o_s, 0);
                let mut i = In::new(&i_s, 0);
                // SAFETY: src and dst are 32 bytes and outlive exchange.
                unsafe { o.frame_at(k, src.as_ptr(), 32, None) };
                // SAFETY: as above.
                unsafe { i.expect(k, dst.as_mut_ptr(), 32) };
                exchange(&mut [o], &mut [i], &|| None).unwrap();
            }
            t0.elapsed()
        };
        let raw = move |o_s: TcpStream, i_s: TcpStream| {
            let mut buf = [0u8; 56];
            let t0 = Instant::now();
            for _ in 0..rounds {
                // SAFETY: valid buffers and sockets.
                unsafe { libc::send(o_s.as_raw_fd(), buf.as_ptr().cast(), 56, libc::MSG_NOSIGNAL) };
                let mut got = 0;
                while got < 56 {
                    // SAFETY: as above.
                    let n = unsafe { libc::recv(i_s.as_raw_fd(), buf.as_mut_ptr().add(got).cast(), 56 - got, libc::MSG_DONTWAIT) };
                    if n > 0 {
                        got += n as usize;
                    }
                }
            }
            t0.elapsed()
        };
        let (ao2, ai2, bo2, bi2) = (ao.try_clone().unwrap(), ai.try_clone().unwrap(), bo.try_clone().unwrap(), bi.try_clone().unwrap());
        let t = std::thread::spawn(move || raw(bo2, bi2));
        let a = raw(ao2, ai2);
        let b = t.join().unwrap();
        println!("raw send/recv of 56 bytes: {:.2} us a round", a.max(b).as_secs_f64() * 1e6 / rounds as f64);
        let t = std::thread::spawn(move || side(bo, bi));
        let a = side(ao, ai);
        let b = t.join().unwrap();
        println!("inline exchange of 32 bytes: {:.2} us a round", a.max(b).as_secs_f64() * 1e6 / rounds as f64);
    }

    #[test]
    fn a_wrong_frame_a_closed_peer_and_stop_are_errors() {
        let (ao, _ai, _bo, bi) = sockets();
        let mut o = Out::new(&ao, 1);
        let four = [1u8, 2, 3, 4];
        // SAFETY: four outlives exchange.
        unsafe { o.frame_at(1, four.as_ptr(), 4, None) };
        exchange(&mut [o], &mut [], &|| None).unwrap();
        let mut buf = [0u8; 8];
        let mut i = In::new(&bi, 0);
        // SAFETY: buf outlives exchange.
        unsafe { i.expect(1, buf.as_mut_ptr(), 8) };
        let e = exchange(&mut [], &mut [i], &|| None).unwrap_err();
        assert!(e.msg.contains("4 bytes") && e.msg.contains("8 bytes"), "{}", e.msg);

        let (ao, _ai, _bo, bi) = sockets();
        drop(ao);
        let mut i = In::new(&bi, 0);
        // SAFETY: as above.
        unsafe { i.expect(1, buf.as_mut_ptr(), 8) };
        let e = exchange(&mut [], &mut [i], &|| None).unwrap_err();
        assert_eq!(e.code, crate::error::ResultCode::RemoteError, "{}", e.msg);
        assert!(e.msg.contains("rank 0"), "{}", e.msg);

        let (_ao, _ai, _bo, bi) = sockets();
        let mut i = In::new(&bi, 0);
        // SAFETY: as above.
        unsafe { i.expect(1, buf.as_mut_ptr(), 8) };
        let t0 = Instant::now();
        let asked = std::cell::Cell::new(0u32);
        let stop = || {
            asked.set(asked.get() + 1);
            (t0.elapsed() > Duration::from_millis(30)).then(|| Error::remote("aborted"))
        };
        let e = exchange(&mut [], &mut [i], &stop).unwrap_err();
        assert_eq!(e.msg, "aborted");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_long_wait_is_noted_with_what_is_outstanding() {
        let (ao, _ai, _bo, bi) = sockets();
        // A peer that sends 8 bytes of a 12-byte frame, then goes quiet; nothing reads our frame.
        let mut head = header(0, 1, 12).to_vec();
        head.extend_from_slice(&[7; 8]);
        use std::io::Write;
        (&ao).write_all(&head).unwrap();
        let mut buf = [0u8; 12];
        let mut i = In::new(&bi, 3);
        // SAFETY: buf outlives exchange.
        unsafe { i.expect(1, buf.as_mut_ptr(), 12) };
        let (mut o, big) = (Out::new(&bi, 3), vec![0u8; 64 << 20]);
        // More than loopback's buffers take while nobody reads. SAFETY: big outlives exchange.
        unsafe { o.frame_at(1, big.as_ptr(), big.len(), None) };
        let t0 = Instant::now();
        let notes = std::cell::RefCell::new(Vec::new());
        let stop = || (t0.elapsed() > Duration::from_millis(300)).then(|| Error::remote("aborted"));
        let e = exchange_noting(&mut [o], &mut [i], &stop, &|s| notes.borrow_mut().push(s)).unwrap_err();
        assert_eq!(e.msg, "aborted");
        // Noted each time the wait turns long (the kernel may grow the socket's buffer, and the
        // send moves on a little); never on the spinning path.
        let notes = notes.into_inner();
        let last = notes.last().expect("a long wait is noted");
        assert!(notes.len() < 1000, "{} notes", notes.len());
        assert!(last.contains("sending to rank 3: ") && last.contains(&format!("of {} bytes written", big.len() + HEADER_BYTES)), "{last}");
        assert!(last.contains(&format!("receiving from rank 3: frame 1 of 1, {} bytes of it read", HEADER_BYTES + 8)), "{last}");
    }

    /// A frame from a pipelined step's arena goes only as far as the step kernel has copied in,
    /// and the receiver sees its payload land piece by piece (what the proxy marks for the kernel's
    /// copies out).
    #[test]
    fn a_gated_frame_goes_as_its_chunks_are_copied_in() {
        use crate::transport::progress::{Layout, MIN_CHUNK};
        use std::sync::atomic::{AtomicU32, Ordering};
        let c = MIN_CHUNK;
        let (ao, _ai, _bo, bi) = sockets();
        // An arena in plain memory: the kernel's pre-copy [0, 2c), then its two flags.
        let arena: &'static mut [u8] = Box::leak(vec![0u8; 2 * c as usize + 64].into_boxed_slice());
        let base = arena.as_mut_ptr();
        let l = Layout::new(vec![(0, 2 * c)], vec![], c, &mut |_| 2 * c);
        let tag = 0x8000_0001;
        let gate = Arc::new(Gate::new(&l, base, tag, Box::leak(Box::new(0u32))));
        let flag = |i: usize| unsafe { &*(base.add(l.pre_flags as usize) as *const AtomicU32).add(i) };
        let data: Vec<u8> = (0..2 * c as usize).map(|i| (i % 253) as u8).collect();
        let mut o = Out::new(&ao, 1);
        // SAFETY: the arena lives for the test; written below only "by the kernel" before its flag.
        unsafe { o.frame_at(9, base, 2 * c as usize, Some(gate.clone())) };
        let mut dst = vec![0u8; 2 * c as usize];
        let mut i = In::new(&bi, 0);
        // SAFETY: dst outlives the reads below.
        unsafe { i.expect(9, dst.as_mut_ptr(), dst.len()) };
        let drain = |o: &mut Out, i: &mut In, want: usize| {
            let t0 = Instant::now();
            while i.landed(0) < want && t0.elapsed() < Duration::from_secs(5) {
                o.progress().unwrap();
                i.progress().unwrap();
            }
        };
        // Nothing copied in: the header goes, no payload byte.
        drain(&mut o, &mut i, 1);
        assert_eq!((o.sent, i.landed(0)), (HEADER_BYTES, 0));
        assert!(o.gated());
        assert!(pending(std::slice::from_ref(&o), &[]).contains("not yet copied in by the step kernel"));
        // The first chunk: exactly it lands.
        arena_write(base, &data[..c as usize]);
        flag(0).store(tag, Ordering::Release);
        drain(&mut o, &mut i, c as usize);
        std::thread::sleep(Duration::from_millis(20));
        o.progress().unwrap();
        i.progress().unwrap();
        assert_eq!(i.landed(0), c as usize);
        assert_eq!(&dst[..c as usize], &data[..c as usize]);
        assert!(o.gated() && !o.done());
        // The second: the whole frame.
        arena_write(unsafe { base.add(c as usize) }, &data[c as usize..]);
        flag(1).store(tag, Ordering::Release);
        let mut calls = 0;
        exchange_watching(&mut [o], &mut [i], &|| None, &|_| {}, &mut |ins| {
            calls += 1;
            assert!(ins[0].landed(0) > c as usize);
        })
        .unwrap();
        assert!(calls > 0);
        assert!(dst == data);
    }

    fn arena_write(p: *mut u8, bytes: &[u8]) {
        // SAFETY: test arenas hold these bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }

    /// Jobs posted to a link's threads and frames carried inline share one numbering: each end may
    /// choose either way for any small job.
    #[test]
    fn inline_frames_and_posted_jobs_interleave_on_one_link() {
        let (ao, ai, bo, bi) = sockets();
        let a = Link::start(None, 0, 1, vec![ao.into()], vec![ai.into()]).unwrap();
        let b = Link::start(None, 1, 0, vec![bo.into()], vec![bi.into()]).unwrap();
        let mut src = [5u8; 16];
        let mut got = [[0u8; 16]; 3];
        // 1: posted on both ends.
        let t = Tracker::new(2);
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        b.recv(Job { mem: Mem::Host(got[0].as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        t.wait(&|| None).unwrap();
        // 2: inline sender, posted receiver.
        let t = Tracker::new(1);
        b.recv(Job { mem: Mem::Host(got[1].as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let (aw, _) = a.inline_sockets().unwrap();
        let mut o = Out::new(aw, 1);
        let six = [6u8; 16];
        // SAFETY: six outlives exchange.
        unsafe { o.frame_at(a.next_seq(0, crate::transport::link::Dir::Send), six.as_ptr(), 16, None) };
        exchange(&mut [o], &mut [], &|| None).unwrap();
        t.wait(&|| None).unwrap();
        // 3: posted sender, inline receiver.
        let t = Tracker::new(1);
        src = [7u8; 16];
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0, narrow: false });
        let (_, br) = b.inline_sockets().unwrap();
        let mut i = In::new(br, 0);
        // SAFETY: got[2] outlives exchange.
        unsafe { i.expect(b.next_seq(0, crate::transport::link::Dir::Recv), got[2].as_mut_ptr(), 16) };
        exchange(&mut [], &mut [i], &|| None).unwrap();
        t.wait(&|| None).unwrap();
        assert_eq!(got, [[5u8; 16], [6u8; 16], [7u8; 16]]);
    }
}
