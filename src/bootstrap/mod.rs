//! TCP bootstrap, used while communicators are being created (never on a hot path).
//!
//! `get_unique_id` starts a rendezvous root thread (see root.rs) and returns an id naming it plus a
//! random secret. Each rank then listens on its own ephemeral port, registers with the root, and
//! learns from it only where rank+1 listens; the ranks then ring-all-gather every listen address,
//! after which any rank can reach any other. Every connection starts with an authenticated hello
//! (wire.rs); each rank's listener runs on a background thread that accepts, authenticates and
//! reads eagerly (listener.rs) into per-(channel, sender, tag) queues (mailbox.rs), so sends never
//! wait for the receiver to call recv, and a bad connection cannot stall good ones. Each rank keeps
//! one outgoing connection per peer; tags are multiplexed on it, which keeps file descriptors
//! O(peers) and makes TCP's ordering give per-(sender, receiver, tag) ordering. Every wait is
//! bounded by the timeout given to `init`. When ncclSetEncryption configured a PSK at the time a
//! unique id or communicator is made, every one of its connections (to the root, between ranks,
//! data sockets) is TLS authenticated by it (src/tls).

mod data;
mod deadline;
mod id;
mod iface;
mod listener;
mod mailbox;
mod root;
mod socket;
pub mod topo;
mod wire;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
/// The same suite with every connection TLS (tests.rs tells its two copies apart).
#[cfg(test)]
#[path = "tests.rs"]
#[allow(clippy::duplicate_mod)] // on purpose: the suite runs once plaintext, once encrypted
mod tests_tls;
#[cfg(test)]
mod tls_tests;

use std::fmt;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;

pub use self::data::{DataSockets, MAX_DATA_SOCKETS};
use self::deadline::Deadline;
use self::id::UniqueId;
use self::listener::{Listener, Role};
use self::mailbox::{Key, Mailbox, WaitError, NOTICE_ALIVE, NOTICE_BYE, NOTICE_LOST, NOTICE_RELEASED};
pub use self::mailbox::Loss;
use self::socket::Listening;
use self::wire::{decode_addr, encode_addr, Channel, ConnKind, Hello, Secret, ADDR_BYTES, ROOT_RANK};
use crate::error::{Error, Result};
use crate::log::Subsys;
use crate::tls::{self, Keys, Stream};

pub use self::id::{parse_comm_id, UNIQUE_ID_BYTES};

/// How often the listener thread checks whether it should stop; bounds how long abort() and
/// drop take to shut it down.
const LISTENER_TICK: Duration = Duration::from_millis(50);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a liveness notice may take to send.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a release notice may take (it is sent as a communicator's memory goes, on the
/// thread that drops it).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest `abandon` spends connecting to the peers it has no connection to, all together.
const ABANDON_TIMEOUT: Duration = Duration::from_secs(5);

/// Bootstrap timeout from OXCCL_BOOTSTRAP_TIMEOUT (seconds, float allowed), default 300 s.
pub fn default_timeout() -> Duration {
    match crate::config::env("OXCCL_BOOTSTRAP_TIMEOUT") {
        None => DEFAULT_TIMEOUT,
        Some(v) => parse_timeout(&v).unwrap_or_else(|| {
            nccl_warn!("OXCCL_BOOTSTRAP_TIMEOUT={v} is not a positive number of seconds; using {DEFAULT_TIMEOUT:?}");
            DEFAULT_TIMEOUT
        }),
    }
}

fn parse_timeout(s: &str) -> Option<Duration> {
    let secs: f64 = s.trim().parse().ok()?;
    if secs > 0.0 {
        Duration::try_from_secs_f64(secs).ok()
    } else {
        None
    }
}

/// ncclGetUniqueId. Without NCCL_COMM_ID: starts a rendezvous root thread in this process (which
/// need not be a rank) on the chosen interface, lasting for one init or `default_timeout()`, and
/// returns an id with a random secret and the root's address. With NCCL_COMM_ID: the id encodes
/// that address and a secret derived from it (every rank may compute such an id itself, so it
/// cannot be secret); no root is started here, rank 0 hosts it in `Bootstrap::init`.
pub fn get_unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    if let Some(addr) = id::comm_id_from_env()? {
        return Ok(UniqueId::from_comm_id(addr).encode());
    }
    child_unique_id()
}

/// A unique id served by a fresh root in this process, whatever NCCL_COMM_ID says: for
/// communicators derived from another (split, shrink), whose first member distributes the id.
pub fn child_unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    let bind = iface::bootstrap_listen_addr(None)?;
    Ok(unique_id_with_root(bind, default_timeout(), tls::current())?.0)
}

/// Whether `id` is a well-formed unique id (as `get_unique_id` makes them): InvalidArgument if not.
/// Lets a caller refuse a foreign or corrupt id before anything waits on it.
pub fn check_unique_id(id: &[u8; UNIQUE_ID_BYTES]) -> Result<()> {
    UniqueId::decode(id).map(|_| ())
}

/// Starts a root on `bind` (encrypting with `tls` when given) and returns its id, plus the root
/// thread (dropping it detaches).
fn unique_id_with_root(bind: SocketAddr, timeout: Duration, tls: Option<Arc<Keys>>) -> Result<([u8; UNIQUE_ID_BYTES], JoinHandle<()>)> {
    let secret = id::random_secret()?;
    let (root, thread) = root::start(bind, secret, timeout, tls)?;
    Ok((UniqueId { root, secret }.encode(), thread))
}

/// State shared with the listener thread.
#[derive(Default)]
struct Shared {
    mailbox: Mailbox,
    stop: AtomicBool,
}

/// One rank's connection to the other ranks of a communicator during initialisation.
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    timeout: Duration,
    secret: Secret,
    /// Where our listener listens (with its port).
    listen: SocketAddr,
    /// Every rank's listen address, by rank (filled at the end of init).
    peers: Vec<SocketAddr>,
    /// The TLS keys every connection of this communicator uses (None: plaintext), as
    /// ncclSetEncryption had set them when it was created.
    tls: Option<Arc<Keys>>,
    /// Our connection to each rank, opened on first use.
    out: Vec<Mutex<Option<Arc<Stream>>>>,
    /// Every outgoing socket, so abort() can shut down one a sender is blocked on (weak: a
    /// socket dropped after an error closes at once).
    abort_handles: Mutex<Vec<Weak<Stream>>>,
    shared: Arc<Shared>,
    listener_thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bootstrap(rank {}/{}, listening on {})", self.rank, self.nranks, self.listen)
    }
}

impl Bootstrap {
    /// Connects rank `rank` of `nranks` through the root named by `id`. If NCCL_COMM_ID is set and
    /// rank == 0, this rank first hosts the root at the id's address (for this one init). Every
    /// wait is bounded by `timeout`; a rank that never arrives gives an Error, never a hang.
    pub fn init(id: &[u8; UNIQUE_ID_BYTES], rank: usize, nranks: usize, timeout: Duration) -> Result<Bootstrap> {
        // Only an id made from NCCL_COMM_ID names a root nobody has started yet (a split's child
        // id names a root its first member already runs).
        let host_root = rank == 0 && id::comm_id_from_env()?.is_some_and(|a| UniqueId::from_comm_id(a).encode() == *id);
        Bootstrap::init_with(id, rank, nranks, timeout, host_root, None, tls::current())
    }

    /// `init` with the environment's choices made explicit: whether to host the root at the id's
    /// address, where to listen (an IP with port 0, and scope id for IPv6 link-local; None:
    /// choose by NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY), and the TLS keys (None: plaintext).
    fn init_with(
        id: &[u8; UNIQUE_ID_BYTES],
        rank: usize,
        nranks: usize,
        timeout: Duration,
        host_root: bool,
        listen_on: Option<SocketAddr>,
        tls: Option<Arc<Keys>>,
    ) -> Result<Bootstrap> {
        let id = UniqueId::decode(id)?;
        ensure!(rank < nranks, InvalidArgument, "bootstrap: rank {rank} out of range for nranks {nranks}");
        let n32 = u32::try_from(nranks)
            .ok()
            .filter(|&n| n < ROOT_RANK)
            .ok_or_else(|| Error::invalid_argument(format!("bootstrap: nranks {nranks} too large")))?;
        let deadline = Deadline::after(timeout);
        if host_root {
            // The root thread ends by itself after this init or at its deadline.
            root::start(id.root, id.secret, timeout, tls.clone())?;
        }
        let listen_on = match listen_on {
            Some(addr) => addr,
            None => iface::bootstrap_listen_addr(Some(id.root.ip()))?,
        };
        let listener = Listener::bind(listen_on, id.secret, Role::Rank { nranks: n32 }, tls.clone())?;
        let listen = listener.local_addr();
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let listener_thread = thread::Builder::new()
            .name(format!("oxccl-bs-{rank}"))
            .spawn(move || run_listener(listener, &thread_shared))
            .map_err(|e| Error::io("bootstrap: cannot start the listener thread", &e))?;
        let mut bs = Bootstrap {
            rank,
            nranks,
            timeout,
            secret: id.secret,
            listen,
            peers: Vec::new(),
            tls,
            out: (0..nranks).map(|_| Mutex::new(None)).collect(),
            abort_handles: Mutex::new(Vec::new()),
            shared,
            listener_thread: Some(listener_thread),
        };
        nccl_info!(Subsys::Bootstrap, "Bootstrap: rank {rank}/{nranks} listening on {listen}, root at {}", id.root);

        // rank < nranks, which fits u32 (checked above).
        root::register(id.root, id.secret, rank as u32, n32, listen, deadline, &|| false, bs.tls.as_deref())
            .map_err(|e| e.context(format!("bootstrap: rank {rank}/{nranks} registering")))?;
        let reply = bs.wait(Key { channel: Channel::Reply, rank: ROOT_RANK, tag: 0 }, deadline, || {
            format!("the root at {} to answer (it does once all {nranks} ranks have registered)", id.root)
        })?;
        let next = root::decode_reply(&reply)?;
        let table = bs.ring_all_gather(next, &encode_addr(&listen))?;
        bs.peers = table
            .iter()
            .map(|b| {
                let b: &[u8; ADDR_BYTES] = b.as_slice().try_into().map_err(|_| Error::system("bad length"))?;
                decode_addr(b)
            })
            .collect::<Result<_>>()
            .map_err(|e| e.context("bootstrap: malformed listen address from the address all-gather"))?;
        nccl_info!(Subsys::Bootstrap, "Bootstrap: rank {rank}/{nranks} connected (next rank at {next})");
        Ok(bs)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The communicator's rank count.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// The IP address (port 0; IPv6 scope kept) this rank's bootstrap listens on, for logging and
    /// topology (equal across ranks of one host).
    pub fn local_addr(&self) -> SocketAddr {
        let mut a = self.listen;
        a.set_port(0);
        a
    }

    /// The same on every rank of this communicator and different for any other, even one made
    /// from the same unique id (NCCL_COMM_ID): its secret and every rank's listen address.
    pub fn instance_key(&self) -> u64 {
        let mut b = self.secret.to_vec();
        for p in &self.peers {
            b.extend_from_slice(&encode_addr(p));
        }
        crate::bootstrap::topo::fnv1a(&b)
    }

    /// Ring all-gather of equal-sized per-rank blobs; returns nranks blobs in rank order.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let next = (self.rank + 1) % self.nranks;
        self.ring_all_gather(self.peer_addr(next)?, mine)
    }

    /// Dissemination barrier: log2(nranks) rounds, each sending to rank+2^k and waiting for rank-2^k.
    pub fn barrier(&self) -> Result<()> {
        let (n, r) = (self.nranks, self.rank);
        let (mut dist, mut round) = (1usize, 0u32);
        while dist < n {
            let (to, from) = ((r + dist) % n, (r + n - dist) % n);
            self.send_to(to, self.peer_addr(to)?, Channel::Barrier, round, &[])?;
            self.wait(self.key(Channel::Barrier, from, round), Deadline::after(self.timeout), || {
                format!("rank {from}'s barrier message (round {round})")
            })?;
            dist *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Broadcast `data` from `root`; non-roots pass anything and receive root's bytes.
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        ensure!(
            root < self.nranks,
            InvalidArgument,
            "bootstrap: broadcast root {root} out of range for nranks {}",
            self.nranks
        );
        if self.rank != root {
            return self.wait(self.key(Channel::Bcast, root, 0), Deadline::after(self.timeout), || {
                format!("the broadcast from rank {root}")
            });
        }
        for i in 1..self.nranks {
            let peer = (root + i) % self.nranks;
            self.send_to(peer, self.peer_addr(peer)?, Channel::Bcast, 0, data)?;
        }
        Ok(data.to_vec())
    }

    /// Tagged point-to-point send. Messages of one (sender, receiver, tag) arrive in order. Never
    /// waits for the receiver to call recv: its listener thread reads and queues what arrives.
    pub fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        self.send_to(peer, self.peer_addr(peer)?, Channel::P2p, tag, data)
    }

    /// Receives the next message `peer` sent us with `tag`.
    pub fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        ensure!(peer < self.nranks, InvalidArgument, "bootstrap: peer {peer} out of range for nranks {}", self.nranks);
        self.wait(self.key(Channel::P2p, peer, tag), Deadline::after(self.timeout), || {
            format!("rank {peer}'s message with tag {tag}")
        })
    }

    /// Orderly shutdown: tells every peer this rank is connected to that its connections are about
    /// to close on purpose (so they do not take it for a crash). Best effort, bounded; lost ranks
    /// are skipped (a write to a hung one could wait for the notice timeout).
    pub fn say_goodbye(&self) {
        for (p, slot) in self.out.iter().enumerate() {
            if p != self.rank && !self.shared.mailbox.is_lost(p as u32) && slot.lock().is_some() {
                let _ = self.notice(p, &[NOTICE_BYE]);
            }
        }
        self.shared.mailbox.close();
    }

    /// This rank's communicator init failed: makes sure every peer holds a connection from this
    /// rank, so that each sees it gone when this Bootstrap is dropped (just after), and a wait for
    /// this rank's message fails there at once. A peer learns that a rank ended only from a
    /// connection of its own closing, and during init a rank is connected to few peers (its ring
    /// neighbour, its barrier partners so far): the others waited out the whole bootstrap timeout
    /// (300 s) for it, and ranks waiting on those in turn. Each peer that fails so gives up in
    /// turn, so the failure spreads along what every rank waits for. Bounded; best effort.
    pub fn abandon(&self) {
        let deadline = Deadline::after(self.timeout.min(ABANDON_TIMEOUT));
        for (p, slot) in self.out.iter().enumerate().filter(|&(p, _)| p != self.rank) {
            let Ok(addr) = self.peer_addr(p) else { return }; // init did not get that far
            let mut slot = slot.lock();
            if slot.is_none() && !self.shared.mailbox.is_aborted() {
                // A peer that exited refuses at once; nothing is sent but the hello.
                *slot = self.connect(p, addr, deadline).ok();
            }
        }
    }

    /// Tells `peer` that this rank's kernels and copies are done with its memory and that this
    /// rank's mappings of it are closed, so it may free what it shared (src/comm/reaper.rs). Sent as
    /// the communicator goes: unless it aborted, a new connection says goodbye first. Works after
    /// `abort` too (on a fresh connection, since abort shut the old ones down). Bounded.
    pub fn send_released(&self, peer: usize) -> Result<()> {
        let addr = self.peer_addr(peer)?;
        let header = wire::encode_frame_header(Channel::Notice, 0, 1)?;
        let slot = self.out.get(peer).ok_or_else(|| Error::invalid_argument(format!("bootstrap: peer {peer} out of range")))?;
        let mut slot = slot.lock();
        let deadline = Deadline::after(self.timeout.min(RELEASE_TIMEOUT));
        let who = format!("rank {peer}");
        let aborted = self.shared.mailbox.is_aborted();
        if let Some(s) = slot.take().filter(|_| !aborted) {
            if socket::send_frame(&s, &header, &[NOTICE_RELEASED], deadline, &who).is_ok() {
                *slot = Some(s);
                return Ok(());
            }
        }
        let hello = Hello { kind: ConnKind::Peer, rank: self.rank as u32, secret: self.secret };
        let stream = socket::open(addr, Listening::Already, &hello, deadline, &who, &|| false, self.tls.as_deref())?;
        if !aborted {
            // A new connection, whose end must not look like a crash: this rank is leaving.
            socket::send_frame(&stream, &header, &[NOTICE_BYE], deadline, &who)?;
        }
        socket::send_frame(&stream, &header, &[NOTICE_RELEASED], deadline, &who)?;
        if aborted {
            // Nothing else goes out after an abort: shut it now (any notice still queued is
            // delivered before the end of the stream).
            let _ = stream.shutdown(Shutdown::Write);
        } else {
            *slot = Some(Arc::new(stream));
        }
        Ok(())
    }

    /// Whether `peer` sent `send_released`.
    pub fn released_by(&self, peer: usize) -> bool {
        self.shared.mailbox.released(peer as u32)
    }

    /// Whether `peer` said goodbye.
    pub fn left(&self, peer: usize) -> bool {
        self.shared.mailbox.left(peer as u32)
    }

    /// Tells every other rank (but `lost`) that `lost` is gone. Best effort, bounded per peer.
    pub fn report_loss(&self, lost: usize) {
        let mut body = [NOTICE_LOST, 0, 0, 0, 0];
        body[1..].copy_from_slice(&(lost as u32).to_le_bytes());
        for p in (0..self.nranks).filter(|&p| p != self.rank && p != lost) {
            if let Err(e) = self.notice(p, &body) {
                nccl_info!(Subsys::Bootstrap, "Bootstrap: telling rank {p} that rank {lost} is lost failed: {}", e.msg);
            }
        }
    }

    /// The next rank lost without a goodbye, first seen here or reported by another rank; None at
    /// `timeout`, or once this rank said goodbye or aborted.
    pub fn wait_loss(&self, timeout: Duration) -> Option<Loss> {
        self.shared.mailbox.take_loss(Deadline::after(timeout))
    }

    /// Heartbeats, for peers that hang without closing their sockets (stopped, frozen, cut off):
    /// call `heartbeat` every second or so, which tells the next rank of the ring this one is
    /// alive, and `check_heartbeat`, which declares the previous rank lost (queued for
    /// `wait_loss`, like a closed connection) if nothing arrived from it for `timeout` since
    /// `since` (when watching started). Each rank is watched by exactly one other, so the cost
    /// is one small message per rank per interval, off every hot path.
    pub fn heartbeat(&self) {
        if self.nranks > 1 {
            self.heartbeat_to((self.rank + 1) % self.nranks);
        }
    }

    /// A heartbeat to `next` (the watchdog skips lost ranks in the ring: liveness::ring_neighbours).
    pub fn heartbeat_to(&self, next: usize) {
        if let Err(e) = self.notice(next, &[NOTICE_ALIVE]) {
            nccl_info!(Subsys::Bootstrap, "Bootstrap: heartbeat to rank {next} failed: {}", e.msg);
        }
    }

    /// See `heartbeat`; true when this call declared the previous rank lost.
    pub fn check_heartbeat(&self, since: std::time::Instant, timeout: Duration) -> bool {
        if self.nranks < 2 {
            return false;
        }
        self.check_heartbeat_of((self.rank + self.nranks - 1) % self.nranks, since, timeout)
    }

    /// `check_heartbeat` for the rank `prev` that sends this rank its heartbeats.
    pub fn check_heartbeat_of(&self, prev: usize, since: std::time::Instant, timeout: Duration) -> bool {
        if self.nranks < 2 || timeout.is_zero() || prev == self.rank {
            return false;
        }
        self.shared.mailbox.check_silence(prev as u32, since, timeout)
    }

    /// False once this rank said goodbye or aborted: nothing more to watch for.
    pub fn watching(&self) -> bool {
        self.shared.mailbox.watching()
    }

    fn notice(&self, peer: usize, body: &[u8]) -> Result<()> {
        // Liveness traffic must not hang on a dead peer for the full bootstrap timeout.
        self.send_within(peer, self.peer_addr(peer)?, Channel::Notice, 0, body, self.timeout.min(NOTICE_TIMEOUT))
    }

    /// Makes every current and future wait on this Bootstrap return an error promptly, and shuts
    /// this rank's connections down (the peers see it gone). The listener stays until the
    /// Bootstrap is dropped: the peers' release notices (`send_released`) still arrive.
    pub fn abort(&self) {
        nccl_info!(Subsys::Bootstrap, "Bootstrap: rank {}/{} aborting", self.rank, self.nranks);
        self.shared.mailbox.abort();
        for s in self.abort_handles.lock().iter().filter_map(Weak::upgrade) {
            // Errors only mean the socket is already gone.
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn key(&self, channel: Channel, rank: usize, tag: u32) -> Key {
        // Callers pass ranks below nranks, which fits u32 (checked in init).
        Key { channel, rank: rank as u32, tag }
    }

    fn peer_addr(&self, peer: usize) -> Result<SocketAddr> {
        self.peers.get(peer).copied().ok_or_else(|| {
            Error::invalid_argument(format!("bootstrap: peer {peer} out of range for nranks {}", self.nranks))
        })
    }

    fn wait(&self, key: Key, deadline: Deadline, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
        self.shared.mailbox.take(key, deadline).map_err(|e| {
            let me = format!("bootstrap: rank {}/{}", self.rank, self.nranks);
            match e {
                WaitError::TimedOut => {
                    Error::system(format!("{me} timed out after {:?} waiting for {}", deadline.total(), what()))
                }
                WaitError::Aborted => Error::system(format!("{me} aborted while waiting for {}", what())),
                WaitError::Gone(why) => Error::remote(format!(
                    "{me} was waiting for {} but the connection from {} ended: {why}",
                    what(),
                    listener::sender(key.rank)
                )),
                WaitError::Failed(why) => Error::system(format!("{me} cannot receive {}: {why}", what())),
            }
        })
    }

    /// Ring all-gather with the next rank's address given (during init the table is not known yet).
    fn ring_all_gather(&self, next_addr: SocketAddr, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (n, r) = (self.nranks, self.rank);
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let mut blobs = vec![Vec::new(); n];
        blobs[r] = mine.to_vec();
        for step in 0..n - 1 {
            // Forward what arrived in the previous step (our own blob first). Sending before
            // receiving cannot deadlock: the receiver's listener queues whatever arrives.
            let (send_idx, recv_idx) = ((r + n - step) % n, (r + n - step - 1) % n);
            self.send_to(next, next_addr, Channel::Ring, 0, &blobs[send_idx])?;
            let got = self.wait(self.key(Channel::Ring, prev, 0), Deadline::after(self.timeout), || {
                format!("rank {prev}'s all-gather data for rank {recv_idx} (step {}/{})", step + 1, n - 1)
            })?;
            ensure!(
                got.len() == mine.len(),
                InvalidUsage,
                "bootstrap: all-gather blob sizes differ: rank {r} has {} bytes, rank {recv_idx} has {}",
                mine.len(),
                got.len()
            );
            blobs[recv_idx] = got;
        }
        Ok(blobs)
    }

    /// Sends one frame to `peer` (at `addr`), connecting on first use.
    fn send_to(&self, peer: usize, addr: SocketAddr, channel: Channel, tag: u32, data: &[u8]) -> Result<()> {
        self.send_within(peer, addr, channel, tag, data, self.timeout)
    }

    fn send_within(&self, peer: usize, addr: SocketAddr, channel: Channel, tag: u32, data: &[u8], timeout: Duration) -> Result<()> {
        ensure!(
            !self.shared.mailbox.is_aborted(),
            SystemError,
            "bootstrap: rank {}/{} aborted; cannot send to rank {peer}",
            self.rank,
            self.nranks
        );
        let context = || format!("bootstrap: rank {}/{}", self.rank, self.nranks);
        // Validated before the connection is touched, so a bad argument does not cost it.
        let header = wire::encode_frame_header(channel, tag, data.len()).map_err(|e| e.context(context()))?;
        let slot = self.out.get(peer).ok_or_else(|| {
            Error::invalid_argument(format!("bootstrap: peer {peer} out of range for nranks {}", self.nranks))
        })?;
        let mut slot = slot.lock();
        let deadline = Deadline::after(timeout);
        let who = format!("rank {peer}");
        // Taken out while in use: if sending fails the connection is dropped and the next send
        // reconnects rather than writing after a partial frame.
        let stream = match slot.take() {
            Some(s) => s,
            None => self.connect(peer, addr, deadline)?,
        };
        socket::send_frame(&stream, &header, data, deadline, &who).map_err(|e| e.context(context()))?;
        *slot = Some(stream);
        Ok(())
    }

    fn connect(&self, peer: usize, addr: SocketAddr, deadline: Deadline) -> Result<Arc<Stream>> {
        let hello = Hello { kind: ConnKind::Peer, rank: self.rank as u32, secret: self.secret };
        let aborted = || self.shared.mailbox.is_aborted();
        let stream = socket::open(addr, Listening::Already, &hello, deadline, &format!("rank {peer}"), &aborted, self.tls.as_deref())
            .map_err(|e| e.context(format!("bootstrap: rank {}/{}", self.rank, self.nranks)))?;
        let stream = Arc::new(stream);
        let mut handles = self.abort_handles.lock();
        handles.retain(|h| h.strong_count() > 0);
        handles.push(Arc::downgrade(&stream));
        drop(handles);
        // An abort that raced with the connect has missed this socket.
        ensure!(
            !aborted(),
            SystemError,
            "bootstrap: rank {}/{} aborted while connecting to rank {peer}",
            self.rank,
            self.nranks
        );
        nccl_info!(
            Subsys::Bootstrap,
            "Bootstrap: rank {}/{} connected to rank {peer} at {addr}",
            self.rank,
            self.nranks
        );
        Ok(stream)
    }
}

/// Test helper for other modules: `nranks` ranks of one communicator on loopback, initialised
/// concurrently.
#[cfg(test)]
pub(crate) fn local_ranks(nranks: usize) -> Vec<Bootstrap> {
    tests::init_all(nranks, Duration::from_secs(20))
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.listener_thread.take() {
            // A panic there has nothing left for us to clean up.
            let _ = t.join();
        }
    }
}

/// The listener thread: accept, authenticate, read, and queue into the mailbox until stopped.
fn run_listener(mut listener: Listener, shared: &Shared) {
    let mut events = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        if let Err(e) = listener.poll(LISTENER_TICK, &mut events) {
            nccl_warn!("bootstrap: listener on {} failed: {}", listener.local_addr(), e.msg);
            shared.mailbox.fail(e.msg);
            return;
        }
        shared.mailbox.deliver(events.drain(..));
    }
}
