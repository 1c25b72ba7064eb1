//! Outgoing bootstrap connections: connect with retries until a deadline (the peer's listener may
//! not be up yet), run the TLS handshake when the communicator encrypts (src/tls), then write the
//! hello and frames with every write bounded by the same deadline.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use super::deadline::Deadline;
use super::wire::{Hello, FRAME_HEADER_BYTES};
use crate::error::{Error, Result};
use crate::tls::{Keys, Stream};

/// Longest single connect attempt; a black-holed SYN is retried rather than waited on for the
/// whole deadline, so aborts and deadlines are noticed.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// Cap on the retry sleep; also bounds how long an abort takes to be noticed while connecting.
const MAX_BACKOFF: Duration = Duration::from_millis(100);
/// Payloads up to this size go out in one write with their header (one TCP segment burst).
const COALESCE_BYTES: usize = 64 << 10;

/// Errors that mean "not there yet" (listener not up, SYN lost, transient routing) rather than
/// "this can never work".
fn retryable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::TimedOut
            | ErrorKind::WouldBlock
            | ErrorKind::Interrupted
            | ErrorKind::AddrInUse
            | ErrorKind::AddrNotAvailable
    ) || matches!(e.raw_os_error(), Some(libc::EHOSTUNREACH | libc::ENETUNREACH))
}

/// Whether a refused connection may just mean "not listening yet".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listening {
    /// The root in NCCL_COMM_ID mode starts with rank 0, possibly after the other ranks.
    MaybeNotYet,
    /// Ranks listen before they register, so by the time anyone has their address they listen;
    /// a refusal means they exited.
    Already,
}

/// Connects to `who` at `addr`, as a TLS client of `tls` when given (the handshake authenticates
/// the peer by the PSK: ncclRemoteError if it fails), and sends our hello.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open(
    addr: SocketAddr,
    listening: Listening,
    hello: &Hello,
    deadline: Deadline,
    who: &str,
    aborted: &dyn Fn() -> bool,
    tls: Option<&Keys>,
) -> Result<Stream> {
    let tcp = connect(addr, listening, deadline, who, aborted)?;
    let stream = Stream::wrap(tcp, tls, false)?;
    if stream.is_encrypted() {
        let Some(left) = deadline.remaining() else {
            bail!(SystemError, "timed out after {:?} connecting to {who} at {addr}", deadline.total());
        };
        stream.handshake(left, aborted).map_err(|e| e.context(format!("connecting to {who} at {addr}")))?;
    }
    write_all(&stream, &hello.encode(), deadline, who)?;
    Ok(stream)
}

fn connect(
    addr: SocketAddr,
    listening: Listening,
    deadline: Deadline,
    who: &str,
    aborted: &dyn Fn() -> bool,
) -> Result<TcpStream> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        ensure!(!aborted(), SystemError, "aborted while connecting to {who} at {addr}");
        let last = match deadline.remaining() {
            Some(left) => match TcpStream::connect_timeout(&addr, left.min(CONNECT_ATTEMPT)) {
                Ok(stream) => {
                    // Bootstrap messages are small request/response steps: latency, not batching.
                    stream.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", &e))?;
                    return Ok(stream);
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused && listening == Listening::Already => {
                    bail!(RemoteError, "{who} at {addr} refused the connection (has it exited?)")
                }
                Err(e) if retryable(&e) => e,
                Err(e) => return Err(Error::io(&format!("connecting to {who} at {addr}"), &e)),
            },
            None => std::io::Error::from(ErrorKind::TimedOut),
        };
        let Some(left) = deadline.remaining() else {
            bail!(
                SystemError,
                "timed out after {:?} connecting to {who} at {addr} (last error: {last})",
                deadline.total()
            );
        };
        thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Writes all of `buf` (and, on a TLS stream, the records it left: `flush`), failing once
/// `deadline` passes.
pub(crate) fn write_all(stream: &Stream, mut buf: &[u8], deadline: Deadline, who: &str) -> Result<()> {
    let mut stream = stream;
    loop {
        let Some(left) = deadline.remaining() else {
            bail!(SystemError, "timed out after {:?} sending to {who}", deadline.total());
        };
        stream.set_write_timeout(Some(left.max(Duration::from_millis(1)))).map_err(|e| Error::io("SO_SNDTIMEO", &e))?;
        let step = if buf.is_empty() { stream.flush().map(|()| 0) } else { stream.write(buf) };
        match step {
            Ok(0) if buf.is_empty() => return Ok(()),
            Ok(0) => bail!(RemoteError, "connection to {who} closed while sending"),
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => bail!(RemoteError, "connection to {who} failed while sending: {e}"),
        }
    }
}

/// Sends one frame: its header (from `encode_frame_header`, which validated the length), then
/// the payload.
pub(crate) fn send_frame(
    stream: &Stream,
    header: &[u8; FRAME_HEADER_BYTES],
    data: &[u8],
    deadline: Deadline,
    who: &str,
) -> Result<()> {
    if data.len() <= COALESCE_BYTES {
        write_all(stream, &[header.as_slice(), data].concat(), deadline, who)
    } else {
        write_all(stream, header, deadline, who)?;
        write_all(stream, data, deadline, who)
    }
}
