//! Data connections between two ranks, for PortChannel over TCP (transport/tcp.rs): sockets of
//! their own, set up through the bootstrap and authenticated like it. Each side listens on an
//! ephemeral port of the bootstrap's interface (so NCCL_SOCKET_IFNAME applies), the two exchange
//! those addresses on Channel::Connect, then each opens `nsocks` sockets to the other: a hello with
//! the communicator's secret, then the connection's number and the socket's index. Incoming
//! sockets that do not present exactly that (another communicator, a stranger, a duplicate) are
//! closed and ignored; only a wait past the bootstrap timeout fails. When the communicator
//! encrypts, each socket is a TLS session (the connecting rank its client) before its hello; a
//! handshake needs both ends at once, so the rank then accepts on a second thread while it
//! connects (plaintext keeps the one thread: the kernel completes TCP handshakes unattended).

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::deadline::Deadline;
use super::socket::{self, Listening};
use super::wire::{decode_addr, encode_addr, secrets_equal, Channel, ConnKind, Hello, ADDR_BYTES, HELLO_BYTES};
use super::Bootstrap;
use crate::error::{Error, Result};
use crate::log::Subsys;
use crate::tls::Stream;

/// Sockets per direction and peer, at most (NCCL's cap on sockets per connection).
pub const MAX_DATA_SOCKETS: usize = 64;
/// What follows the hello on a data socket: connection number, socket index (u32 LE each).
const DATA_HEADER_BYTES: usize = 8;
/// Longest wait for one incoming socket's hello, so a silent stranger cannot stall the accept.
const HELLO_WAIT: Duration = Duration::from_secs(2);
/// The same under ncclSetEncryption: the TLS handshake before the hello takes round trips and
/// signature checks on both hosts, and a refused socket is never sent again (the init then fails
/// at its deadline), so a loaded host gets longer.
const HELLO_WAIT_TLS: Duration = Duration::from_secs(15);

/// One data connection's sockets with a peer, in socket-index order.
#[derive(Debug)]
pub struct DataSockets {
    /// Sockets this rank opened: it writes, the peer reads.
    pub outgoing: Vec<Stream>,
    /// Sockets the peer opened: the peer writes, this rank reads.
    pub incoming: Vec<Stream>,
}

impl Bootstrap {
    /// Opens data connection number `conn` with `peer`: `nsocks` sockets each way. Both ranks must
    /// call it with the same `conn` and `nsocks` (numbers are per pair; reusing one while it is
    /// being set up mixes the two). Bounded by the bootstrap timeout.
    pub fn data_sockets(&self, peer: usize, conn: u32, nsocks: usize) -> Result<DataSockets> {
        ensure!(peer < self.nranks && peer != self.rank, InvalidArgument, "data connection from rank {} to rank {peer} of {}", self.rank, self.nranks);
        ensure!((1..=MAX_DATA_SOCKETS).contains(&nsocks), InvalidArgument, "{nsocks} sockets per data connection (1..={MAX_DATA_SOCKETS})");
        let deadline = Deadline::after(self.timeout);
        let who = format!("rank {peer}'s data listener");
        let listener = TcpListener::bind(SocketAddr::new(self.listen.ip(), 0)).map_err(|e| Error::io("binding a data listener", &e))?;
        listener.set_nonblocking(true).map_err(|e| Error::io("O_NONBLOCK on a data listener", &e))?;
        let mine = listener.local_addr().map_err(|e| Error::io("data listener address", &e))?;
        self.send_to(peer, self.peer_addr(peer)?, Channel::Connect, conn, &encode_addr(&mine))?;
        let theirs = self.wait(self.key(Channel::Connect, peer, conn), deadline, || format!("rank {peer}'s data listener address"))?;
        let theirs: &[u8; ADDR_BYTES] = theirs
            .as_slice()
            .try_into()
            .map_err(|_| Error::system(format!("rank {peer} sent a data listener address of {} bytes", theirs.len())))?;
        let theirs = decode_addr(theirs)?;

        let (outgoing, incoming) = if self.tls.is_none() {
            // Connect first: the peer's kernel completes our handshakes into its backlog before it
            // accepts, so both ranks connecting at once cannot deadlock.
            let outgoing = self.connect_data(theirs, conn, nsocks, deadline, &who)?;
            (outgoing, self.accept_data(&listener, peer, conn, nsocks, deadline, &|| false)?)
        } else {
            // Each TLS handshake needs the peer's accepting side to answer: accept meanwhile.
            // Accepting stops once connecting failed (the peer fails its side in turn).
            let failed = AtomicBool::new(false);
            std::thread::scope(|s| {
                let accepting = s.spawn(|| self.accept_data(&listener, peer, conn, nsocks, deadline, &|| failed.load(Ordering::Relaxed)));
                let outgoing = self.connect_data(theirs, conn, nsocks, deadline, &who);
                failed.store(outgoing.is_err(), Ordering::Relaxed);
                let incoming = accepting.join().unwrap_or_else(|_| Err(Error::internal("the data socket accepting thread panicked")));
                Ok::<_, Error>((outgoing?, incoming?))
            })?
        };
        nccl_info!(Subsys::Bootstrap, "Bootstrap: rank {} data connection {conn} with rank {peer}: {nsocks} sockets each way via {theirs}{}", self.rank, if self.tls.is_some() { " (TLS)" } else { "" });
        Ok(DataSockets { outgoing, incoming })
    }

    /// Opens our `nsocks` sockets of connection `conn` to the peer's data listener at `theirs`.
    fn connect_data(&self, theirs: SocketAddr, conn: u32, nsocks: usize, deadline: Deadline, who: &str) -> Result<Vec<Stream>> {
        let hello = Hello { kind: ConnKind::Data, rank: self.rank as u32, secret: self.secret };
        let mut outgoing = Vec::with_capacity(nsocks);
        for i in 0..nsocks {
            let s = socket::open(theirs, Listening::Already, &hello, deadline, who, &|| self.shared.mailbox.is_aborted(), self.tls.as_deref())?;
            let mut hdr = [0u8; DATA_HEADER_BYTES];
            hdr[..4].copy_from_slice(&conn.to_le_bytes());
            hdr[4..].copy_from_slice(&(i as u32).to_le_bytes());
            socket::write_all(&s, &hdr, deadline, who)?;
            outgoing.push(s);
        }
        Ok(outgoing)
    }

    /// Accepts `peer`'s `nsocks` sockets of connection `conn` on `listener`, in index order, until
    /// the deadline, an abort, or `give_up`.
    fn accept_data(&self, listener: &TcpListener, peer: usize, conn: u32, nsocks: usize, deadline: Deadline, give_up: &dyn Fn() -> bool) -> Result<Vec<Stream>> {
        let mut incoming: Vec<Option<Stream>> = (0..nsocks).map(|_| None).collect();
        let mut have = 0;
        while have < nsocks {
            ensure!(!self.shared.mailbox.is_aborted() && !give_up(), SystemError, "aborted while accepting rank {peer}'s data sockets");
            let Some(left) = deadline.remaining() else {
                bail!(SystemError, "timed out after {:?} waiting for rank {peer}'s data sockets ({have} of {nsocks} arrived)", deadline.total());
            };
            match listener.accept() {
                Ok((s, from)) => match self.admit(s, peer, conn, nsocks, left.min(if self.tls.is_some() { HELLO_WAIT_TLS } else { HELLO_WAIT })) {
                    Ok((i, s)) if incoming[i].is_none() => {
                        incoming[i] = Some(s);
                        have += 1;
                    }
                    Ok((i, _)) => nccl_info!(Subsys::Bootstrap, "Bootstrap: second data socket {i} from rank {peer} ({from}) closed"),
                    Err(e) => nccl_info!(Subsys::Bootstrap, "Bootstrap: data socket from {from} refused: {}", e.msg),
                },
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(Error::io("accepting a data socket", &e)),
            }
        }
        Ok(incoming.into_iter().flatten().collect())
    }

    /// Completes the TLS handshake of an incoming data socket when the communicator encrypts,
    /// then reads and checks its hello and header; returns its index.
    pub(super) fn admit(&self, s: TcpStream, peer: usize, conn: u32, nsocks: usize, wait: Duration) -> Result<(usize, Stream)> {
        s.set_nonblocking(false).map_err(|e| Error::io("blocking mode", &e))?;
        let s = Stream::wrap(s, self.tls.as_deref(), true)?;
        s.handshake(wait, &|| self.shared.mailbox.is_aborted())?;
        s.set_read_timeout(Some(wait.max(Duration::from_millis(1)))).map_err(|e| Error::io("SO_RCVTIMEO", &e))?;
        let mut buf = [0u8; HELLO_BYTES + DATA_HEADER_BYTES];
        (&s).read_exact(&mut buf).map_err(|e| Error::system(format!("no complete hello: {e}")))?;
        let hello_bytes: &[u8; HELLO_BYTES] = buf[..HELLO_BYTES].try_into().map_err(|_| Error::internal("hello size"))?;
        let hello = Hello::decode(hello_bytes)?;
        ensure!(secrets_equal(&hello.secret, &self.secret), SystemError, "wrong secret (another communicator, or not oxccl)");
        ensure!(hello.kind == ConnKind::Data && hello.rank as usize == peer, SystemError, "a {:?} connection from rank {}, expected data from rank {peer}", hello.kind, hello.rank);
        let word = |o: usize| u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let (their_conn, index) = (word(HELLO_BYTES), word(HELLO_BYTES + 4) as usize);
        ensure!(their_conn == conn && index < nsocks, SystemError, "data socket {index} of connection {their_conn}, expected one of {nsocks} of connection {conn}");
        s.set_read_timeout(None).map_err(|e| Error::io("SO_RCVTIMEO", &e))?;
        s.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", &e))?;
        Ok((index, s))
    }
}
