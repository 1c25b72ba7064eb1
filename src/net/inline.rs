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

use super::link::{check_header, header, io_error, stripe_min, HEADER_BYTES};
use super::plan::Phase;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// Jobs up to this size are carried inline by default (OXCCL_NET_INLINE_MAX). Since the threaded
/// path combines reductions as they land (`pipeline`), jobs of 512 KiB are faster there, striped:
/// same call at 2 simulated hosts x 1 on H100 (session 29, s29d), inline 256 KiB and striping from
/// 512 KiB against 512 KiB and 1 MiB, at 512 KB: AllReduce 239 vs 329 us, Reduce 131 vs 165,
/// Broadcast 122 vs 170, Send/Recv 177 vs 257. (Before that pipeline, 512 KiB beat 256 KiB at
/// 2x2 and 4x1 on H200 x4, session 23; not re-measured there.)
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

/// One link's outgoing frames of a phase, concatenated.
pub struct Out {
    fd: RawFd,
    peer: usize,
    buf: Vec<u8>,
    off: usize,
}

impl Out {
    pub fn new(sock: &TcpStream, peer: usize) -> Out {
        Out { fd: sock.as_raw_fd(), peer, buf: Vec::new(), off: 0 }
    }

    /// Appends job `seq`'s frame.
    pub fn frame(&mut self, seq: u64, payload: &[u8]) {
        self.buf.extend_from_slice(&header(0, seq, payload.len() as u64));
        self.buf.extend_from_slice(payload);
    }

    fn done(&self) -> bool {
        self.off == self.buf.len()
    }

    /// Writes what the socket takes now; true if anything went.
    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        while !self.done() {
            let rest = &self.buf[self.off..];
            // SAFETY: a valid buffer of rest.len() bytes; fd is a socket the caller keeps open.
            let n = unsafe { libc::send(self.fd, rest.as_ptr().cast(), rest.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            match n {
                n if n > 0 => {
                    self.off += n as usize;
                    any = true;
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
        let _ = write!(s, "{}sending to rank {}: {} of {} bytes written", if s.is_empty() { "" } else { "; " }, o.peer, o.off, o.buf.len());
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
    let mut idle = 0u32;
    loop {
        let mut any = false;
        for o in outs.iter_mut() {
            any |= o.progress()?;
        }
        for i in ins.iter_mut() {
            any |= i.progress()?;
        }
        if outs.iter().all(Out::done) && ins.iter().all(In::done) {
            return Ok(());
        }
        if any {
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
    use crate::net::link::{Job, Link, Mem, Tracker};
    use crate::net::plan::{Buf, Xfer};
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    #[test]
    fn a_phase_fits_by_each_job_and_by_its_total() {
        let x = |bytes| Xfer { peer: 1, buf: Buf::Host(0), bytes };
        let ph = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Phase { sends, recvs, reduces: vec![], stripe_min: 0 };
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
            for (k, &n) in sizes.iter().enumerate() {
                o.frame(k as u64 + 1, &data(k + 100, n));
                // SAFETY: dst[k] is n bytes and outlives exchange.
                unsafe { i.expect(k as u64 + 1, dst[k].as_mut_ptr(), n) };
            }
            exchange(&mut [o], &mut [i], &|| None).unwrap();
            dst
        });
        let mut o = Out::new(&ao, 1);
        let mut i = In::new(&ai, 1);
        let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        for (k, &n) in sizes.iter().enumerate() {
            o.frame(k as u64 + 1, &data(k, n));
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
            let mut dst = [0u8; 32];
            let t0 = Instant::now();
            for k in 1..=rounds {
                let mut o = Out::new(&o_s, 0);
                let mut i = In::new(&i_s, 0);
                o.frame(k, &[7u8; 32]);
                // SAFETY: dst is 32 bytes and outlives exchange.
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
        o.frame(1, &[1, 2, 3, 4]);
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
        o.frame(1, &big); // more than loopback's buffers take while nobody reads
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

    /// Jobs posted to a link's threads and frames carried inline share one numbering: each end may
    /// choose either way for any small job.
    #[test]
    fn inline_frames_and_posted_jobs_interleave_on_one_link() {
        let (ao, ai, bo, bi) = sockets();
        let a = Link::start(None, 0, 1, vec![ao], vec![ai]).unwrap();
        let b = Link::start(None, 1, 0, vec![bo], vec![bi]).unwrap();
        let mut src = [5u8; 16];
        let mut got = [[0u8; 16]; 3];
        // 1: posted on both ends.
        let t = Tracker::new(2);
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0 });
        b.recv(Job { mem: Mem::Host(got[0].as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0 });
        t.wait(&|| None).unwrap();
        // 2: inline sender, posted receiver.
        let t = Tracker::new(1);
        b.recv(Job { mem: Mem::Host(got[1].as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0 });
        let (aw, _) = a.inline_sockets().unwrap();
        let mut o = Out::new(aw, 1);
        o.frame(a.next_seq(0, crate::net::link::Dir::Send), &[6u8; 16]);
        exchange(&mut [o], &mut [], &|| None).unwrap();
        t.wait(&|| None).unwrap();
        // 3: posted sender, inline receiver.
        let t = Tracker::new(1);
        src = [7u8; 16];
        a.send(Job { mem: Mem::Host(src.as_mut_ptr()), bytes: 16, done: t.clone(), landed: None, gate: None, stripe_min: 0 });
        let (_, br) = b.inline_sockets().unwrap();
        let mut i = In::new(br, 0);
        // SAFETY: got[2] outlives exchange.
        unsafe { i.expect(b.next_seq(0, crate::net::link::Dir::Recv), got[2].as_mut_ptr(), 16) };
        exchange(&mut [], &mut [i], &|| None).unwrap();
        t.wait(&|| None).unwrap();
        assert_eq!(got, [[5u8; 16], [6u8; 16], [7u8; 16]]);
    }
}
