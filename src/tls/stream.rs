//! `Stream`: a connected TCP socket that is either plain (every call goes straight to the
//! `TcpStream`, as before encryption existed) or a TLS 1.3 session over it (rustls).
//!
//! A TLS stream behaves like the socket it wraps, so the socket code above it stays as it was:
//! - Reads and writes follow the socket's own mode (blocking, non-blocking, SO_RCVTIMEO /
//!   SO_SNDTIMEO); `recv_nowait`/`send_nowait` are the one-call non-blocking forms (MSG_DONTWAIT).
//! - A read that returns WouldBlock leaves nothing decrypted behind, so `poll()` on the descriptor
//!   stays truthful; end of stream, with or without TLS's close_notify, reads as Ok(0), as on a
//!   plain socket (frame layers above detect truncation).
//! - A write takes plaintext only once earlier records are on the wire, and returns once it has
//!   pushed what the socket accepts: on a blocking socket, everything. What a non-blocking or
//!   timed-out write leaves is sent by the next write or by `flush` (a no-op on plain sockets),
//!   which `write_all` ends with and writers of single writes call after their last.
//! - Clones (`try_clone`) share the session: one lock per session, held for a call. Every oxccl
//!   socket carries one direction at a time (or one thread's request/response), so the lock never
//!   waits on a peer.
//! - `shutdown` acts on the socket, so aborts interrupt TLS streams as they do plain ones.
//!
//! Writes use MSG_NOSIGNAL: a closed peer is an error, never SIGPIPE in the application.

use std::io::{self, ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::Connection;

use super::psk::Keys;
use crate::error::{Error, Result};

/// Plaintext one write takes at most (16 records): large enough that the per-call costs vanish.
const WRITE_CHUNK: usize = 256 << 10;
/// Bytes one socket read of a TLS stream asks for. rustls reads 4 KiB at a time on its own;
/// reading more per call and feeding it records from memory took one loopback stream from about
/// 1.0 to 1.4 GB/s (tests::throughput_on_loopback; plaintext 3-4 GB/s on the same 2 cores).
const READ_CHUNK: usize = 256 << 10;
/// Longest single wait in a handshake, so aborts are noticed.
const HANDSHAKE_SLICE: Duration = Duration::from_millis(100);

/// A connected TCP socket, plain or TLS (module note).
pub struct Stream {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<Session>>>,
}

/// A TLS session and what it read from the socket but could not take yet.
struct Session {
    conn: Connection,
    /// Bytes read from the socket that rustls has not taken (it takes a record or two at a
    /// time); `taken` of them are gone. Empty, and unallocated, whenever a read returns
    /// WouldBlock, so poll() sees everything outstanding.
    input: Vec<u8>,
    taken: usize,
}

impl std::ops::Deref for Session {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

thread_local! {
    /// Where a thread's TLS socket reads land before rustls takes them (READ_CHUNK bytes).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:?}, {})", self.tcp, if self.tls.is_some() { "TLS" } else { "plain" })
    }
}

impl From<TcpStream> for Stream {
    fn from(tcp: TcpStream) -> Stream {
        Stream::plain(tcp)
    }
}

impl Stream {
    /// The socket as it is: no encryption.
    pub fn plain(tcp: TcpStream) -> Stream {
        Stream { tcp, tls: None }
    }

    /// `tcp` as `keys`'s TLS client (the side that connected); `handshake` completes it.
    pub fn client(tcp: TcpStream, keys: &Keys) -> Result<Stream> {
        let c = rustls::ClientConnection::new(keys.client.clone(), Keys::server_name())
            .map_err(|e| Error::system(format!("TLS: starting a client session: {e}")))?;
        Ok(Stream::with(tcp, Connection::Client(c)))
    }

    /// `tcp` as `keys`'s TLS server (the side that accepted); its handshake runs in `handshake`,
    /// or as it is read.
    pub fn server(tcp: TcpStream, keys: &Keys) -> Result<Stream> {
        let c = rustls::ServerConnection::new(keys.server.clone())
            .map_err(|e| Error::system(format!("TLS: starting a server session: {e}")))?;
        Ok(Stream::with(tcp, Connection::Server(c)))
    }

    /// `tcp` plain, or as the client (`server`: false) or server of `keys` when given.
    pub fn wrap(tcp: TcpStream, keys: Option<&Keys>, server: bool) -> Result<Stream> {
        match keys {
            None => Ok(Stream::plain(tcp)),
            Some(k) if server => Stream::server(tcp, k),
            Some(k) => Stream::client(tcp, k),
        }
    }

    fn with(tcp: TcpStream, mut conn: Connection) -> Stream {
        conn.set_buffer_limit(Some(2 * WRITE_CHUNK));
        Stream { tcp, tls: Some(Arc::new(Mutex::new(Session { conn, input: Vec::new(), taken: 0 }))) }
    }

    /// Whether the stream is TLS.
    pub fn is_encrypted(&self) -> bool {
        self.tls.is_some()
    }

    /// The socket itself when the stream is plain, for code that moves bytes on the descriptor
    /// directly (the proxy's inline transfers); None for TLS.
    pub fn plain_tcp(&self) -> Option<&TcpStream> {
        self.tls.is_none().then_some(&self.tcp)
    }

    /// Whether TLS records wait to be written (a poll loop then also waits for POLLOUT).
    pub fn wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.lock().wants_write())
    }

    /// Completes the TLS handshake within `within`, checking `aborted` at least every 100 ms;
    /// nothing for a plain stream. Works in any socket mode (it polls). Errors:
    /// ncclRemoteError when the peer fails it (another PSK, no TLS, closed), naming the cause;
    /// ncclSystemError on timeout or abort.
    pub fn handshake(&self, within: Duration, aborted: &dyn Fn() -> bool) -> Result<()> {
        let Some(tls) = &self.tls else { return Ok(()) };
        let end = Instant::now() + within;
        let mut io = Sock { fd: self.tcp.as_raw_fd(), flags: libc::MSG_DONTWAIT };
        let failed = |what: String| Error::remote(format!("TLS handshake failed: {what}"));
        loop {
            let mut c = tls.lock();
            let writing = c.wants_write();
            if !writing && !c.is_handshaking() {
                return Ok(());
            }
            let moved = if writing {
                c.write_tls(&mut io)
            } else {
                match c.read_tls(&mut io) {
                    Ok(0) => return Err(failed(format!("the peer closed the connection ({})", WHY_CLOSED))),
                    Ok(n) => match c.process_new_packets() {
                        Ok(_) => Ok(n),
                        Err(e) => {
                            let _ = flush_pending(&mut c, &mut io); // the alert, best effort
                            return Err(failed(explain(&e)));
                        }
                    },
                    Err(e) => Err(e),
                }
            };
            match moved {
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(failed(format!("{e} ({WHY_CLOSED})"))),
            }
            drop(c);
            ensure!(!aborted(), SystemError, "aborted during a TLS handshake");
            let left = end.saturating_duration_since(Instant::now());
            ensure!(!left.is_zero(), SystemError, "timed out after {within:?} in a TLS handshake");
            wait(io.fd, if writing { libc::POLLOUT } else { libc::POLLIN }, left.min(HANDSHAKE_SLICE));
        }
    }

    /// One non-blocking read (MSG_DONTWAIT for this call only): WouldBlock when nothing is there.
    pub fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut io = Sock { fd: self.tcp.as_raw_fd(), flags: libc::MSG_DONTWAIT };
        match &self.tls {
            None => io.read(buf),
            Some(t) => tls_read(&mut t.lock(), &mut io, buf),
        }
    }

    /// One non-blocking write (MSG_DONTWAIT for this call only): WouldBlock when nothing fit.
    /// On a TLS stream, call `flush` after the last one.
    pub fn send_nowait(&self, buf: &[u8]) -> io::Result<usize> {
        let mut io = Sock { fd: self.tcp.as_raw_fd(), flags: libc::MSG_DONTWAIT };
        match &self.tls {
            None => io.write(buf),
            Some(t) => tls_write(&mut t.lock(), &mut io, buf),
        }
    }

    /// Another handle on the same socket and session.
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(Stream { tcp: self.tcp.try_clone()?, tls: self.tls.clone() })
    }

    /// `TcpStream::shutdown`: on the socket, whatever the session (no close_notify).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }

    /// `TcpStream::set_nonblocking`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp.set_nonblocking(on)
    }

    /// `TcpStream::set_nodelay`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.tcp.set_nodelay(on)
    }

    /// `TcpStream::set_read_timeout` (SO_RCVTIMEO; TLS reads honour it too).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(t)
    }

    /// `TcpStream::set_write_timeout` (SO_SNDTIMEO; TLS writes honour it too).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(t)
    }

    /// `TcpStream::peer_addr`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.peer_addr()
    }

    /// `TcpStream::peek` on the socket's raw bytes (TLS records when encrypted): for liveness
    /// checks (0 is end of stream), not for data.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.peek(buf)
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.tcp).read(buf),
            Some(t) => tls_read(&mut t.lock(), &mut Sock { fd: self.tcp.as_raw_fd(), flags: 0 }, buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.tcp).write(buf),
            Some(t) => tls_write(&mut t.lock(), &mut Sock { fd: self.tcp.as_raw_fd(), flags: 0 }, buf),
        }
    }

    /// Sends what earlier writes left in the session (module note); nothing on a plain socket.
    fn flush(&mut self) -> io::Result<()> {
        match &self.tls {
            None => Ok(()),
            Some(t) => flush_pending(&mut t.lock(), &mut Sock { fd: self.tcp.as_raw_fd(), flags: 0 }),
        }
    }

    /// Writes all of `buf` and, on a TLS stream, flushes: when it returns, every byte is on the
    /// socket, as with a plain one (where it is `TcpStream::write_all`).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &self.tls {
            None => (&self.tcp).write_all(buf),
            Some(_) => {
                let mut rest = buf;
                while !rest.is_empty() {
                    match self.write(rest) {
                        Ok(0) => return Err(ErrorKind::WriteZero.into()),
                        Ok(n) => rest = &rest[n..],
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                self.flush()
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self).flush()
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        (&*self).write_all(buf)
    }
}

/// What a handshake cut short most likely means.
const WHY_CLOSED: &str = "does it encrypt with the same PSK? every process must call ncclSetEncryption alike";

/// A rustls failure as the user can act on it.
pub(super) fn explain(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(_) => {
            "the peer does not hold this process's pre-shared key (every process must call ncclSetEncryption with the same PSK)".into()
        }
        rustls::Error::AlertReceived(a) => {
            format!("the peer refused this process's key (alert {a:?}): its pre-shared key differs (ncclSetEncryption)")
        }
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::PeerIncompatible(_)
        | rustls::Error::PeerMisbehaved(_) => {
            format!("the peer does not speak oxccl's TLS ({e}): does it have encryption off? every process must call ncclSetEncryption alike")
        }
        _ => e.to_string(),
    }
}

/// Writes every pending TLS record (handshake messages, alerts, what earlier writes left).
fn flush_pending(c: &mut Connection, io: &mut Sock) -> io::Result<()> {
    while c.wants_write() {
        match c.write_tls(io) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Feeds rustls from `rest` until it has plaintext for `buf` or `rest` is used up, moving the
/// plaintext into `buf[*got..]`; the bytes rustls took are cut from the front of `rest`.
fn feed(c: &mut Connection, io: &mut Sock, rest: &mut &[u8], buf: &mut [u8], got: &mut usize) -> io::Result<()> {
    while !rest.is_empty() && *got < buf.len() {
        match c.read_tls(rest) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            // Its plaintext buffer is full: `buf` takes it on the caller's next turn.
            Err(e) if e.kind() == ErrorKind::Other => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Err(e) = c.process_new_packets() {
            let _ = flush_pending(c, io); // the alert, best effort
            return Err(io::Error::new(ErrorKind::InvalidData, format!("TLS: {}", explain(&e))));
        }
        match c.reader().read(&mut buf[*got..]) {
            Ok(n) => *got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::UnexpectedEof) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads TLS records until it has plaintext (module note): from what an earlier socket read
/// left, else from one socket read (never a second one once it has something to return).
fn tls_read(s: &mut Session, io: &mut Sock, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let mut got = 0;
    loop {
        // The handshake's replies (a server driven by its reads), alerts.
        flush_pending(&mut s.conn, io)?;
        match s.conn.reader().read(&mut buf[got..]) {
            // The end of the stream (close_notify), or `buf` full.
            Ok(0) => return Ok(got),
            Ok(n) => {
                got += n;
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            // The peer's socket closed without close_notify: end of stream, as on plain TCP.
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(got),
            Err(e) => return Err(e),
        }
        if s.taken < s.input.len() {
            let input = std::mem::take(&mut s.input);
            let mut rest = &input[s.taken..];
            let r = feed(&mut s.conn, io, &mut rest, buf, &mut got);
            if rest.is_empty() {
                s.taken = 0;
            } else {
                s.taken = input.len() - rest.len();
                s.input = input;
            }
            r?;
            continue;
        }
        if got > 0 {
            return Ok(got);
        }
        let n = SCRATCH.with(|scratch| -> io::Result<usize> {
            let mut scratch = scratch.borrow_mut();
            if scratch.len() < READ_CHUNK {
                scratch.resize(READ_CHUNK, 0);
            }
            let n = loop {
                match io.read(&mut scratch[..]) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    r => break r?,
                }
            };
            let mut rest = &scratch[..n];
            let r = feed(&mut s.conn, io, &mut rest, buf, &mut got);
            if !rest.is_empty() {
                s.input = rest.to_vec();
                s.taken = 0;
            }
            r.map(|()| n)
        })?;
        if n == 0 {
            // End of stream: rustls notes it, and the reader reports it on the next turn.
            s.conn.read_tls(&mut &[][..])?;
        }
    }
}

/// Takes up to WRITE_CHUNK of `buf` once earlier records are out, and pushes it (module note).
fn tls_write(c: &mut Connection, io: &mut Sock, buf: &[u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    flush_pending(c, io)?;
    // Plaintext written before the handshake ends would wait for it: finish it first.
    while c.is_handshaking() {
        match c.read_tls(io) {
            Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, format!("closed during the TLS handshake ({WHY_CLOSED})"))),
            Ok(_) => {
                if let Err(e) = c.process_new_packets() {
                    let _ = flush_pending(c, io);
                    return Err(io::Error::new(ErrorKind::InvalidData, format!("TLS: {}", explain(&e))));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        flush_pending(c, io)?;
    }
    let n = c.writer().write(&buf[..buf.len().min(WRITE_CHUNK)])?;
    match flush_pending(c, io) {
        Ok(()) => Ok(n),
        // Taken: the rest goes out with the next write or flush.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => Ok(n),
        Err(e) => Err(e),
    }
}

/// The socket as rustls reads and writes it: recv/send (sendmsg for several buffers) with `flags`
/// on top of the socket's own mode, and MSG_NOSIGNAL on writes.
struct Sock {
    fd: RawFd,
    flags: libc::c_int,
}

/// A socket call's result (negative: the thread's errno).
fn sys(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        sys(unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), self.flags) })
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of its length.
        sys(unsafe { libc::send(self.fd, buf.as_ptr().cast(), buf.len(), self.flags | libc::MSG_NOSIGNAL) })
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: IoSlice is ABI-compatible with iovec on Unix (std's guarantee); the slices
        // outlive the call; a zeroed msghdr is a valid "no address, no control data" header.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = bufs.len().min(1024) as _;
        // SAFETY: as above.
        sys(unsafe { libc::sendmsg(self.fd, &m, self.flags | libc::MSG_NOSIGNAL) })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Waits up to `t` for `events` on `fd` (either outcome: the caller simply tries again).
fn wait(fd: RawFd, events: libc::c_short, t: Duration) {
    let mut p = libc::pollfd { fd, events, revents: 0 };
    let ms = libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX).max(1);
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}
