//! A bootstrap listener: one non-blocking socket plus the connections it accepted, driven by
//! `poll()` from a single thread. Each connection must first present a valid hello within
//! HELLO_TIMEOUT (when the communicator encrypts, after a TLS handshake that its reads drive,
//! within the same time); after that its frames are decoded as they arrive and handed out as
//! events.
//! Reading eagerly means a sender never waits for its receiver to call recv, and a slow, idle or
//! hostile connection never holds up the others.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{secrets_equal, ConnKind, Frame, FrameDecoder, Hello, Secret, HELLO_BYTES, ROOT_RANK};
use crate::error::{Error, Result};
use crate::log::Subsys;
use crate::tls::{self, Keys, Stream};

/// How long a new connection may take to send its hello. Real peers send it right after
/// connecting; anything slower is a scanner or a stuck client.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Unauthenticated connections held at once; beyond this new ones are refused, so a connection
/// flood cannot exhaust file descriptors.
const MAX_UNAUTHENTICATED: usize = 256;
const READ_CHUNK: usize = 64 << 10;

/// Who may connect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Role {
    /// The rendezvous root: ranks register.
    Root,
    /// Rank listener of a communicator of `nranks`: the root replies, peers connect.
    Rank { nranks: u32 },
}

impl Role {
    fn admits(self, hello: &Hello) -> std::result::Result<(), String> {
        let ok = match (self, hello.kind) {
            (Role::Root, ConnKind::Register) => hello.rank != ROOT_RANK,
            (Role::Rank { .. }, ConnKind::Reply) => hello.rank == ROOT_RANK,
            (Role::Rank { nranks }, ConnKind::Peer) => hello.rank < nranks,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("unexpected {:?} connection from rank {}", hello.kind, hello.rank))
        }
    }
}

#[derive(Debug)]
pub(crate) enum Event {
    /// A whole message from an authenticated `rank`.
    Frame { rank: u32, frame: Frame },
    /// An authenticated connection from `rank` ended; `error` is None for a clean close between frames.
    Closed { rank: u32, error: Option<String> },
}

enum State {
    AwaitingHello { buf: [u8; HELLO_BYTES], len: usize, deadline: Instant },
    Open { rank: u32, decoder: FrameDecoder },
}

struct Conn {
    stream: Stream,
    peer: SocketAddr,
    state: State,
}

/// What servicing a connection concluded.
enum Outcome {
    Keep,
    /// Drop it; for an authenticated connection an event says so.
    Drop,
}

pub(crate) struct Listener {
    socket: TcpListener,
    addr: SocketAddr,
    secret: Secret,
    role: Role,
    /// TLS server keys when the communicator encrypts.
    tls: Option<Arc<Keys>>,
    conns: Vec<Conn>,
    buf: Vec<u8>,
}

impl Listener {
    /// Listens on `addr`; with `tls`, every accepted connection is a TLS server session of it.
    pub(crate) fn bind(addr: SocketAddr, secret: Secret, role: Role, tls: Option<Arc<Keys>>) -> Result<Listener> {
        let socket =
            TcpListener::bind(addr).map_err(|e| Error::io(&format!("bootstrap: cannot listen on {addr}"), &e))?;
        socket.set_nonblocking(true).map_err(|e| Error::io("bootstrap: O_NONBLOCK", &e))?;
        let addr = socket.local_addr().map_err(|e| Error::io("bootstrap: getsockname", &e))?;
        Ok(Listener { socket, addr, secret, role, tls, conns: Vec::new(), buf: vec![0; READ_CHUNK] })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits up to `timeout` for activity, then accepts, authenticates and reads whatever is
    /// ready, appending to `events`.
    pub(crate) fn poll(&mut self, timeout: Duration, events: &mut Vec<Event>) -> Result<()> {
        let now = Instant::now();
        // Wake for the earliest hello deadline so idle connections are dropped on time.
        let wait = self
            .conns
            .iter()
            .filter_map(|c| match c.state {
                State::AwaitingHello { deadline, .. } => Some(deadline.saturating_duration_since(now)),
                State::Open { .. } => None,
            })
            .fold(timeout, Duration::min);
        // A TLS handshake reply the socket could not take yet waits for POLLOUT.
        let mut fds: Vec<libc::pollfd> = std::iter::once((self.socket.as_raw_fd(), false))
            .chain(self.conns.iter().map(|c| (c.stream.as_raw_fd(), c.stream.wants_write())))
            .map(|(fd, out)| libc::pollfd { fd, events: if out { libc::POLLIN | libc::POLLOUT } else { libc::POLLIN }, revents: 0 })
            .collect();
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX).max(i32::from(!wait.is_zero()));
        let nfds = libc::nfds_t::try_from(fds.len()).map_err(|_| Error::system("bootstrap: too many connections"))?;
        // SAFETY: `fds` is a live, correctly sized array of pollfd for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(Error::io("bootstrap: poll", &e));
        }

        let now = Instant::now();
        let conns = std::mem::take(&mut self.conns);
        let mut kept = Vec::with_capacity(conns.len());
        for (mut conn, pfd) in conns.into_iter().zip(fds.iter().skip(1)) {
            let outcome = if pfd.revents != 0 { self.service(&mut conn, events) } else { Outcome::Keep };
            match (outcome, &conn.state) {
                (Outcome::Keep, State::AwaitingHello { deadline, .. }) if *deadline <= now => {
                    nccl_warn!(
                        "bootstrap: rejected connection from {} to {}: no valid hello within {:?}",
                        conn.peer,
                        self.addr,
                        HELLO_TIMEOUT
                    );
                }
                (Outcome::Keep, _) => kept.push(conn),
                (Outcome::Drop, _) => {}
            }
        }
        self.conns = kept;

        if fds.first().is_some_and(|l| l.revents != 0) {
            self.accept_all();
        }
        Ok(())
    }

    fn accept_all(&mut self) {
        loop {
            match self.socket.accept() {
                Ok((stream, peer)) => {
                    let pending = self.conns.iter().filter(|c| matches!(c.state, State::AwaitingHello { .. })).count();
                    if pending >= MAX_UNAUTHENTICATED {
                        nccl_warn!(
                            "bootstrap: rejected connection from {peer} to {}: too many unauthenticated connections",
                            self.addr
                        );
                        continue;
                    }
                    // Accepted sockets do not inherit O_NONBLOCK on Linux.
                    if let Err(e) = stream.set_nonblocking(true) {
                        nccl_warn!("bootstrap: dropping connection from {peer}: O_NONBLOCK: {e}");
                        continue;
                    }
                    let stream = match Stream::wrap(stream, self.tls.as_deref(), true) {
                        Ok(s) => s,
                        Err(e) => {
                            nccl_warn!("bootstrap: dropping connection from {peer}: {}", e.msg);
                            continue;
                        }
                    };
                    let deadline = Instant::now() + HELLO_TIMEOUT;
                    let state = State::AwaitingHello { buf: [0; HELLO_BYTES], len: 0, deadline };
                    self.conns.push(Conn { stream, peer, state });
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    // E.g. out of file descriptors: the pending connection stays queued and
                    // poll() reports it again on the next call.
                    nccl_warn!("bootstrap: accept on {} failed: {e}", self.addr);
                    return;
                }
            }
        }
    }

    /// Reads everything available on `conn`.
    fn service(&mut self, conn: &mut Conn, events: &mut Vec<Event>) -> Outcome {
        loop {
            let (n, read_error) = match (&conn.stream).read(&mut self.buf) {
                Ok(n) => (n, None),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Outcome::Keep,
                Err(e) => (0, Some(e.to_string())),
            };
            let data = self.buf.get(..n).unwrap_or_default();
            if n > 0 {
                if let Err(reason) = consume(conn, data, &self.secret, self.role, events) {
                    return self.close(conn, reason, events);
                }
                continue;
            }
            // End of stream or a read error.
            let reason = match (&conn.state, read_error) {
                (State::Open { rank, decoder }, None) if decoder.is_idle() => {
                    nccl_info!(
                        Subsys::Bootstrap,
                        "Bootstrap: {} at {} closed its connection",
                        sender(*rank),
                        conn.peer
                    );
                    events.push(Event::Closed { rank: *rank, error: None });
                    return Outcome::Drop;
                }
                (State::Open { .. }, None) => "closed in the middle of a message".to_string(),
                (State::AwaitingHello { .. }, None) => "closed before sending a hello".to_string(),
                (_, Some(e)) => e,
            };
            return self.close(conn, reason, events);
        }
    }

    /// Drops a connection that failed, warning once and reporting it if it was authenticated.
    fn close(&self, conn: &Conn, reason: String, events: &mut Vec<Event>) -> Outcome {
        match conn.state {
            State::AwaitingHello { .. } => {
                nccl_warn!("bootstrap: rejected connection from {} to {}: {reason}", conn.peer, self.addr);
            }
            State::Open { rank, .. } => {
                nccl_warn!(
                    "bootstrap: connection from {} at {} to {} failed: {reason}",
                    sender(rank),
                    conn.peer,
                    self.addr
                );
                events.push(Event::Closed { rank, error: Some(reason) });
            }
        }
        Outcome::Drop
    }
}

/// Feeds newly read bytes to a connection: completes and checks its hello, then decodes frames.
/// Nothing after the hello is looked at until the hello has been accepted.
fn consume(
    conn: &mut Conn,
    mut data: &[u8],
    secret: &Secret,
    role: Role,
    events: &mut Vec<Event>,
) -> std::result::Result<(), String> {
    if let State::AwaitingHello { buf, len, .. } = &mut conn.state {
        // `len` < HELLO_BYTES while awaiting the hello, and `n` fits both slices.
        let n = (HELLO_BYTES - *len).min(data.len());
        let (head, tail) = data.split_at(n);
        buf[*len..*len + n].copy_from_slice(head);
        *len += n;
        data = tail;
        if *len < HELLO_BYTES {
            return Ok(());
        }
        let hello = Hello::decode(buf).map_err(|e| {
            if !conn.stream.is_encrypted() && tls::looks_like_tls(buf) {
                "a TLS handshake: the peer encrypts (ncclSetEncryption) but this process does not; every process must call ncclSetEncryption alike".to_string()
            } else {
                format!("bad hello: {}", e.msg)
            }
        })?;
        if !secrets_equal(&hello.secret, secret) {
            return Err("wrong secret (a different unique id?)".into());
        }
        role.admits(&hello)?;
        nccl_info!(
            Subsys::Bootstrap,
            "Bootstrap: accepted {:?} connection from {} at {}",
            hello.kind,
            sender(hello.rank),
            conn.peer
        );
        conn.state = State::Open { rank: hello.rank, decoder: FrameDecoder::new(hello.kind) };
    }
    if let State::Open { rank, decoder } = &mut conn.state {
        let mut frames = Vec::new();
        let result = decoder.feed(data, &mut frames);
        events.extend(frames.into_iter().map(|frame| Event::Frame { rank: *rank, frame }));
        result.map_err(|e| e.msg)?;
    }
    Ok(())
}

/// How log lines name the sender of an authenticated connection.
pub(crate) fn sender(rank: u32) -> String {
    if rank == ROOT_RANK {
        "the root".into()
    } else {
        format!("rank {rank}")
    }
}
