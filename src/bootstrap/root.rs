//! The rendezvous root: a thread that collects one registration per rank (its nranks and listen
//! address), checks that they agree, and then tells each rank only the address of rank+1, so the
//! root's work and messages stay O(1) per rank; the ranks learn the rest over their ring. The root
//! serves one init and exits, or gives up at its deadline and tells the ranks that did register.
//!
//! Registration (rank -> root, channel Register, tag 0): nranks u32 LE | listen address (24).
//! Reply (root -> rank, channel Reply, tag 0):
//!   0 | address of rank+1 (24), or 1 | ncclResult_t u8 | UTF-8 reason.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::deadline::Deadline;
use super::listener::{Event, Listener, Role};
use super::socket::{self, Listening};
use super::wire::{
    encode_addr, encode_frame_header, Channel, ConnKind, Hello, Reader, Secret, MAX_ROOT_MESSAGE, ROOT_RANK,
};
use crate::error::{Error, Result, ResultCode};
use crate::log::Subsys;
use crate::tls::Keys;

/// How long the root tries to deliver one reply. Ranks are listening by the time they
/// register, so this only runs out for a rank that died meanwhile.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

const REPLY_OK: u8 = 0;
const REPLY_ERROR: u8 = 1;

/// Starts a root listening on `bind` (port 0 for an ephemeral one) for one init, encrypting its
/// connections with `tls` when given; returns the address it listens on and its thread (which
/// ends by itself; dropping the handle detaches it).
pub(crate) fn start(bind: SocketAddr, secret: Secret, timeout: Duration, tls: Option<Arc<Keys>>) -> Result<(SocketAddr, JoinHandle<()>)> {
    let listener = Listener::bind(bind, secret, Role::Root, tls.clone())?;
    let addr = listener.local_addr();
    let deadline = Deadline::after(timeout);
    nccl_info!(Subsys::Bootstrap, "Bootstrap: root listening on {addr}");
    let thread = thread::Builder::new()
        .name("oxccl-bs-root".into())
        .spawn(move || serve(listener, secret, deadline, tls))
        .map_err(|e| Error::io("bootstrap: cannot start the root thread", &e))?;
    Ok((addr, thread))
}

/// A rank's side: announce `rank` of `nranks`, listening on `listen`, to the root at `root`
/// (over TLS with `tls`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn register(
    root: SocketAddr,
    secret: Secret,
    rank: u32,
    nranks: u32,
    listen: SocketAddr,
    deadline: Deadline,
    aborted: &dyn Fn() -> bool,
    tls: Option<&Keys>,
) -> Result<()> {
    let hello = Hello { kind: ConnKind::Register, rank, secret };
    let stream = socket::open(root, Listening::MaybeNotYet, &hello, deadline, "the root", aborted, tls)?;
    let body = [nranks.to_le_bytes().as_slice(), &encode_addr(&listen)].concat();
    let header = encode_frame_header(Channel::Register, 0, body.len())?;
    socket::send_frame(&stream, &header, &body, deadline, "the root")
}

/// A rank's side: the root's reply, i.e. the listen address of rank+1 or the root's error.
pub(crate) fn decode_reply(bytes: &[u8]) -> Result<SocketAddr> {
    let mut r = Reader::new(bytes);
    match r.u8().map_err(|e| e.context("bootstrap: empty reply from the root"))? {
        REPLY_OK => {
            let next = r.addr();
            next.and_then(|next| r.finish().map(|()| next))
                .map_err(|e| e.context("bootstrap: malformed reply from the root"))
        }
        REPLY_ERROR => {
            let code = ResultCode::from_raw(i32::from(r.u8()?))
                .filter(|c| *c != ResultCode::Success)
                .unwrap_or(ResultCode::RemoteError);
            Err(Error::new(code, format!("bootstrap root: {}", String::from_utf8_lossy(r.rest()))))
        }
        status => bail!(SystemError, "bootstrap: malformed reply from the root (status {status})"),
    }
}

fn serve(mut listener: Listener, secret: Secret, deadline: Deadline, tls: Option<Arc<Keys>>) {
    let mut registry = Registry { secret, tls, ..Registry::default() };
    let mut events = Vec::new();
    loop {
        let Some(left) = deadline.remaining() else {
            registry.time_out(deadline.total());
            break;
        };
        if let Err(e) = listener.poll(left, &mut events) {
            registry.fail(ResultCode::SystemError, format!("the root's listener failed: {}", e.msg), None);
            break;
        }
        for event in events.drain(..) {
            // Closed events need no action: registration connections end after their message.
            if let Event::Frame { rank, frame } = event {
                registry.register(rank, &frame.body);
            }
        }
        if registry.finished() {
            break;
        }
    }
    nccl_info!(Subsys::Bootstrap, "Bootstrap: root on {} exiting", listener.local_addr());
}

#[derive(Default)]
struct Registry {
    secret: Secret,
    /// The keys replies are encrypted with (the root's communicator's setting).
    tls: Option<Arc<Keys>>,
    /// nranks as announced by the first registrant, and that registrant.
    expected: Option<(u32, u32)>,
    addrs: HashMap<u32, SocketAddr>,
    registrations: usize,
    /// Largest nranks any registrant announced: after a failure the root stays (until its
    /// deadline) to answer that many registrations, so late ranks get the error, not a timeout.
    most_ranks: u32,
    complete: bool,
    /// Once set, every registered and later rank gets this error.
    failure: Option<(ResultCode, String)>,
}

impl Registry {
    fn register(&mut self, rank: u32, body: &[u8]) {
        let mut r = Reader::new(body);
        let parsed = (|| {
            let nranks = r.u32()?;
            let addr = r.addr()?;
            r.finish()?;
            Ok::<_, Error>((nranks, addr))
        })();
        let (nranks, addr) = match parsed {
            Ok(p) => p,
            Err(e) => {
                nccl_warn!("bootstrap root: ignoring malformed registration from rank {rank}: {}", e.msg);
                return;
            }
        };
        self.registrations += 1;
        self.most_ranks = self.most_ranks.max(nranks);
        if let Some((code, msg)) = &self.failure {
            self.reply(rank, addr, &error_reply(*code, msg));
            return;
        }
        let (n, first) = *self.expected.get_or_insert((nranks, rank));
        let problem = if nranks != n {
            Some(format!("rank {rank} was initialised with nranks={nranks} but rank {first} with nranks={n}"))
        } else if rank >= n {
            Some(format!("rank {rank} is out of range for nranks={n}"))
        } else {
            self.addrs.get(&rank).map(|old| format!("rank {rank} registered twice (from {old} and from {addr})"))
        };
        if let Some(msg) = problem {
            self.fail(ResultCode::InvalidUsage, msg, Some((rank, addr)));
            return;
        }
        self.addrs.insert(rank, addr);
        nccl_info!(
            Subsys::Bootstrap,
            "Bootstrap: root: rank {rank}/{n} registered from {addr} ({}/{n})",
            self.addrs.len()
        );
        if self.addrs.len() == n as usize {
            self.send_ring(n);
        }
    }

    /// Fails the init, telling every registered rank and `also` (a registrant not in `addrs`).
    fn fail(&mut self, code: ResultCode, msg: String, also: Option<(u32, SocketAddr)>) {
        nccl_warn!("bootstrap root: {msg}");
        let reply = error_reply(code, &msg);
        for (&rank, &addr) in self.addrs.iter().chain(also.iter().map(|(r, a)| (r, a))) {
            self.reply(rank, addr, &reply);
        }
        self.failure = Some((code, msg));
    }

    /// All `n` (>= 1) ranks are here: tell each, in rank order, where rank+1 listens.
    fn send_ring(&mut self, n: u32) {
        for rank in 0..n {
            if let (Some(&addr), Some(&next)) = (self.addrs.get(&rank), self.addrs.get(&((rank + 1) % n))) {
                self.reply(rank, addr, &[[REPLY_OK].as_slice(), &encode_addr(&next)].concat());
            }
        }
        self.complete = true;
    }

    fn time_out(&mut self, waited: Duration) {
        if self.complete || self.failure.is_some() {
            return;
        }
        let Some((n, _)) = self.expected else {
            nccl_info!(Subsys::Bootstrap, "Bootstrap: root: no rank registered within {waited:?}");
            return;
        };
        // Name a few missing ranks; scanning stops early, so a huge nranks costs nothing.
        let missing: Vec<String> =
            (0..n).filter(|r| !self.addrs.contains_key(r)).take(3).map(|r| r.to_string()).collect();
        let arrived = self.addrs.len();
        let n_missing = (n as usize).saturating_sub(arrived);
        let who = match n_missing {
            1 => format!("rank {}", missing.join("")),
            k if k <= missing.len() => format!("ranks {}", missing.join(", ")),
            k => format!("ranks {} and {} more", missing.join(", "), k - missing.len()),
        };
        self.fail(
            ResultCode::SystemError,
            format!(
                "timed out after {waited:?} waiting for {who} to register with the root ({arrived}/{n} ranks arrived)"
            ),
            None,
        );
    }

    fn finished(&self) -> bool {
        self.complete || (self.failure.is_some() && self.registrations >= self.most_ranks as usize)
    }

    fn reply(&self, rank: u32, addr: SocketAddr, body: &[u8]) {
        let hello = Hello { kind: ConnKind::Reply, rank: ROOT_RANK, secret: self.secret };
        let deadline = Deadline::after(REPLY_TIMEOUT);
        let who = format!("rank {rank}");
        let sent = encode_frame_header(Channel::Reply, 0, body.len()).and_then(|header| {
            let s = socket::open(addr, Listening::Already, &hello, deadline, &who, &|| false, self.tls.as_deref())?;
            socket::send_frame(&s, &header, body, deadline, &who)
        });
        if let Err(e) = sent {
            nccl_warn!("bootstrap root: could not reply to rank {rank} at {addr}: {}", e.msg);
        }
    }
}

fn error_reply(code: ResultCode, msg: &str) -> Vec<u8> {
    let mut out = vec![REPLY_ERROR, code as u8];
    let mut end = msg.len().min(MAX_ROOT_MESSAGE - out.len());
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(msg.get(..end).unwrap_or_default().as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_codec() {
        let a: SocketAddr = "10.0.0.1:9".parse().expect("addr");
        let ok = [[REPLY_OK].as_slice(), &encode_addr(&a)].concat();
        assert_eq!(decode_reply(&ok).expect("ok"), a);
        let e = decode_reply(&error_reply(ResultCode::InvalidUsage, "nope")).expect_err("error reply");
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert!(e.msg.contains("nope"));
        let long = "é".repeat(10_000);
        assert!(error_reply(ResultCode::SystemError, &long).len() <= MAX_ROOT_MESSAGE);
        for bad in [&[][..], &[9], &ok[..10], &[ok.as_slice(), &[0]].concat()] {
            assert_eq!(decode_reply(bad).expect_err("malformed").code, ResultCode::SystemError);
        }
    }
}
