//! The bootstrap's wire formats as pure functions over bytes: socket addresses, the hello that
//! opens every connection, and message frames. No I/O here, so the decoders can be fuzzed directly.
//!
//! Hello (32 bytes, sent once by the connecting side):
//!   magic "OXCCLBS\0" (8) | version u16 LE | connection kind u8 | reserved u8 = 0 |
//!   sender rank u32 LE (ROOT_RANK for the root) | 128-bit secret from the unique id (16)
//! Frame (12-byte header, then `len` bytes of payload):
//!   channel u8 | reserved 3 bytes = 0 | tag u32 LE | len u32 LE
//! Socket address (24 bytes): family u8 (4 or 6) | reserved u8 = 0 | port u16 BE |
//!   IP (16; IPv4 in the first 4, rest 0) | IPv6 scope id u32 LE (0 for IPv4)

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::error::{Error, Result};

/// The 128-bit secret every connection must present.
pub(crate) type Secret = [u8; 16];

/// Rank number the root uses to identify itself in its hello.
pub(crate) const ROOT_RANK: u32 = u32::MAX;

/// Largest payload of a rank-to-rank message.
pub(crate) const MAX_MESSAGE: usize = 64 << 20;
/// Largest payload of a message to or from the root (a registration or a reply).
pub(crate) const MAX_ROOT_MESSAGE: usize = 4096;

pub(crate) const ADDR_BYTES: usize = 24;
pub(crate) const HELLO_BYTES: usize = 32;
pub(crate) const FRAME_HEADER_BYTES: usize = 12;

const HELLO_MAGIC: [u8; 8] = *b"OXCCLBS\0";
const PROTOCOL_VERSION: u16 = 1;

/// Bounds-checked little reader: every decoder goes through it, so a short or long input is an
/// error rather than a panic.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        if self.rest.len() < N {
            bail!(SystemError, "truncated message ({} bytes left, {N} needed)", self.rest.len());
        }
        let (head, tail) = self.rest.split_at(N);
        self.rest = tail;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn addr(&mut self) -> Result<SocketAddr> {
        decode_addr(&self.array()?)
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// Requires the input to be used up: trailing bytes mean a malformed message.
    pub(crate) fn finish(self) -> Result<()> {
        ensure!(self.rest.is_empty(), SystemError, "{} unexpected trailing bytes in message", self.rest.len());
        Ok(())
    }
}

pub(crate) fn encode_addr(addr: &SocketAddr) -> [u8; ADDR_BYTES] {
    let mut out = [0u8; ADDR_BYTES];
    out[2..4].copy_from_slice(&addr.port().to_be_bytes());
    match addr {
        SocketAddr::V4(a) => {
            out[0] = 4;
            out[4..8].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            out[0] = 6;
            out[4..20].copy_from_slice(&a.ip().octets());
            out[20..24].copy_from_slice(&a.scope_id().to_le_bytes());
        }
    }
    out
}

pub(crate) fn decode_addr(bytes: &[u8; ADDR_BYTES]) -> Result<SocketAddr> {
    let mut r = Reader::new(bytes);
    let [family, reserved] = r.array()?;
    let port = u16::from_be_bytes(r.array()?);
    let ip: [u8; 16] = r.array()?;
    let scope = r.u32()?;
    ensure!(reserved == 0, SystemError, "malformed socket address (reserved byte {reserved})");
    match family {
        4 => {
            let (v4, zeros) = ip.split_at(4);
            ensure!(zeros.iter().all(|&b| b == 0) && scope == 0, SystemError, "malformed IPv4 socket address");
            let v4 = Ipv4Addr::new(v4[0], v4[1], v4[2], v4[3]);
            Ok(SocketAddr::V4(SocketAddrV4::new(v4, port)))
        }
        6 => Ok(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))),
        _ => bail!(SystemError, "malformed socket address (family {family})"),
    }
}

/// What a connection is for, declared in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnKind {
    /// A rank registering with the root.
    Register = 1,
    /// The root answering a rank's registration.
    Reply = 2,
    /// A rank's connection to another rank, carrying all rank-to-rank traffic to that peer.
    Peer = 3,
    /// A data connection between two ranks (PortChannel over TCP, see data.rs): never carries
    /// bootstrap frames; after the hello comes the connection's number and the socket's index.
    Data = 4,
}

impl ConnKind {
    fn from_u8(v: u8) -> Option<ConnKind> {
        match v {
            1 => Some(ConnKind::Register),
            2 => Some(ConnKind::Reply),
            3 => Some(ConnKind::Peer),
            4 => Some(ConnKind::Data),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub kind: ConnKind,
    pub rank: u32,
    pub secret: Secret,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = [0u8; HELLO_BYTES];
        out[0..8].copy_from_slice(&HELLO_MAGIC);
        out[8..10].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        out[10] = self.kind as u8;
        out[12..16].copy_from_slice(&self.rank.to_le_bytes());
        out[16..32].copy_from_slice(&self.secret);
        out
    }

    /// Parses a hello's layout; the caller checks the secret and whether the sender is welcome.
    pub(crate) fn decode(bytes: &[u8; HELLO_BYTES]) -> Result<Hello> {
        let mut r = Reader::new(bytes);
        ensure!(r.array::<8>()? == HELLO_MAGIC, SystemError, "bad protocol magic");
        let version = u16::from_le_bytes(r.array()?);
        ensure!(version == PROTOCOL_VERSION, SystemError, "protocol version {version}, expected {PROTOCOL_VERSION}");
        let kind_byte = r.u8()?;
        let kind = ConnKind::from_u8(kind_byte)
            .ok_or_else(|| Error::system(format!("unknown connection kind {kind_byte}")))?;
        ensure!(r.u8()? == 0, SystemError, "nonzero reserved byte");
        let rank = r.u32()?;
        let secret = r.array()?;
        r.finish()?;
        Ok(Hello { kind, rank, secret })
    }
}

/// Compares secrets without an early exit, so timing does not reveal how much of a guess matched.
pub(crate) fn secrets_equal(a: &Secret, b: &Secret) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Which logical stream a frame belongs to; with the tag and the sender's rank it names the
/// receiver's queue. Internal collectives get their own channels so user tags span all of u32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Channel {
    Register = 1,
    Reply = 2,
    Ring = 3,
    Barrier = 4,
    Bcast = 5,
    P2p = 6,
    /// Liveness notices: a goodbye before an orderly close, or a report that a rank was lost.
    Notice = 7,
    /// Listen addresses for data connections (data.rs); the tag is the connection's number.
    Connect = 8,
}

impl Channel {
    fn from_u8(v: u8) -> Option<Channel> {
        Some(match v {
            1 => Channel::Register,
            2 => Channel::Reply,
            3 => Channel::Ring,
            4 => Channel::Barrier,
            5 => Channel::Bcast,
            6 => Channel::P2p,
            7 => Channel::Notice,
            8 => Channel::Connect,
            _ => return None,
        })
    }

    /// The only connection kind that may carry this channel.
    fn conn_kind(self) -> ConnKind {
        match self {
            Channel::Register => ConnKind::Register,
            Channel::Reply => ConnKind::Reply,
            Channel::Ring | Channel::Barrier | Channel::Bcast | Channel::P2p | Channel::Notice | Channel::Connect => ConnKind::Peer,
        }
    }

    pub(crate) fn max_len(self) -> usize {
        match self.conn_kind() {
            ConnKind::Register | ConnKind::Reply => MAX_ROOT_MESSAGE,
            ConnKind::Peer => MAX_MESSAGE,
            ConnKind::Data => 0,
        }
    }
}

pub(crate) fn encode_frame_header(channel: Channel, tag: u32, len: usize) -> Result<[u8; FRAME_HEADER_BYTES]> {
    ensure!(
        len <= channel.max_len(),
        InvalidArgument,
        "message of {len} bytes exceeds the {} byte limit",
        channel.max_len()
    );
    let len = u32::try_from(len).map_err(|_| Error::invalid_argument("message too large"))?;
    let mut out = [0u8; FRAME_HEADER_BYTES];
    out[0] = channel as u8;
    out[4..8].copy_from_slice(&tag.to_le_bytes());
    out[8..12].copy_from_slice(&len.to_le_bytes());
    Ok(out)
}

/// Validates a header against the connection it arrived on, before anything is allocated.
fn decode_frame_header(bytes: &[u8; FRAME_HEADER_BYTES], kind: ConnKind) -> Result<(Channel, u32, usize)> {
    let mut r = Reader::new(bytes);
    let channel_byte = r.u8()?;
    let channel = Channel::from_u8(channel_byte)
        .filter(|c| c.conn_kind() == kind)
        .ok_or_else(|| Error::system(format!("channel {channel_byte} not allowed on a {kind:?} connection")))?;
    ensure!(r.array::<3>()? == [0; 3], SystemError, "nonzero reserved bytes in frame header");
    let tag = r.u32()?;
    let len = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
    r.finish()?;
    ensure!(len <= channel.max_len(), SystemError, "frame of {len} bytes exceeds the {} byte limit", channel.max_len());
    Ok((channel, tag, len))
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub channel: Channel,
    pub tag: u32,
    pub body: Vec<u8>,
}

/// Incremental frame parser for one authenticated connection: takes bytes as they arrive and
/// yields whole frames. Payload memory grows with the bytes actually received (never with the
/// announced length alone), so a peer cannot make us allocate by merely claiming a large frame.
pub(crate) struct FrameDecoder {
    kind: ConnKind,
    header: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    /// Channel, tag and length of the frame whose payload is being received.
    current: Option<(Channel, u32, usize)>,
    body: Vec<u8>,
}

impl FrameDecoder {
    pub(crate) fn new(kind: ConnKind) -> FrameDecoder {
        FrameDecoder { kind, header: [0; FRAME_HEADER_BYTES], header_len: 0, current: None, body: Vec::new() }
    }

    /// True between frames: a connection closing here closed cleanly.
    pub(crate) fn is_idle(&self) -> bool {
        self.header_len == 0 && self.current.is_none()
    }

    #[cfg(test)]
    pub(crate) fn buffered_capacity(&self) -> usize {
        self.body.capacity()
    }

    pub(crate) fn feed(&mut self, mut data: &[u8], out: &mut Vec<Frame>) -> Result<()> {
        loop {
            match self.current {
                None => {
                    if data.is_empty() {
                        return Ok(());
                    }
                    let free = &mut self.header[self.header_len..];
                    let n = free.len().min(data.len());
                    let (head, tail) = data.split_at(n);
                    free[..n].copy_from_slice(head);
                    data = tail;
                    self.header_len += n;
                    if self.header_len == FRAME_HEADER_BYTES {
                        self.header_len = 0;
                        self.current = Some(decode_frame_header(&self.header, self.kind)?);
                    }
                }
                Some((channel, tag, len)) => {
                    let need = len - self.body.len();
                    if need == 0 {
                        out.push(Frame { channel, tag, body: std::mem::take(&mut self.body) });
                        self.current = None;
                        continue;
                    }
                    if data.is_empty() {
                        return Ok(());
                    }
                    let n = need.min(data.len());
                    let (head, tail) = data.split_at(n);
                    let wanted = self.body.len() + n;
                    if wanted > self.body.capacity() {
                        // Amortised doubling, capped at the frame length.
                        let target = wanted.max(self.body.capacity().saturating_mul(2)).min(len);
                        self.body.reserve_exact(target - self.body.len());
                    }
                    self.body.extend_from_slice(head);
                    data = tail;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift generator for the fuzz-style tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    fn frame_bytes(channel: Channel, tag: u32, body: &[u8]) -> Vec<u8> {
        let mut v = encode_frame_header(channel, tag, body.len()).expect("header").to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn addr_round_trip() {
        for s in ["127.0.0.1:5", "[::1]:65535", "[fe80::1%3]:80", "10.1.2.3:0"] {
            let a: SocketAddr = match s.parse() {
                Ok(a) => a,
                // Older std cannot parse a scope id; build that one by hand.
                Err(_) => SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().expect("ip"), 80, 0, 3)),
            };
            assert_eq!(decode_addr(&encode_addr(&a)).expect("decode"), a);
        }
        let mut bad = encode_addr(&"1.2.3.4:5".parse().expect("addr"));
        bad[0] = 5;
        assert!(decode_addr(&bad).is_err());
        bad[0] = 4;
        bad[10] = 1;
        assert!(decode_addr(&bad).is_err());
    }

    #[test]
    fn hello_round_trip_and_rejections() {
        let h = Hello { kind: ConnKind::Peer, rank: 7, secret: [9; 16] };
        let bytes = h.encode();
        assert_eq!(Hello::decode(&bytes).expect("decode"), h);
        for (i, v) in [(0usize, b'X'), (8, 2), (10, 0), (10, 9), (11, 1)] {
            let mut b = bytes;
            b[i] = v;
            assert!(Hello::decode(&b).is_err(), "byte {i} = {v} accepted");
        }
        assert!(secrets_equal(&[1; 16], &[1; 16]));
        assert!(!secrets_equal(&[1; 16], &[[1; 15].as_slice(), &[2]].concat().try_into().expect("16")));
    }

    #[test]
    fn frames_round_trip_in_any_chunking() {
        let mut stream = Vec::new();
        let bodies: Vec<Vec<u8>> = vec![vec![], vec![1], (0..=255).collect(), vec![7; 100_000]];
        for (i, b) in bodies.iter().enumerate() {
            stream.extend(frame_bytes(Channel::P2p, i as u32, b));
        }
        for chunk in [1, 5, 12, 13, 4096, stream.len()] {
            let mut d = FrameDecoder::new(ConnKind::Peer);
            let mut out = Vec::new();
            for c in stream.chunks(chunk) {
                d.feed(c, &mut out).expect("feed");
            }
            assert!(d.is_idle());
            let got: Vec<_> = out.iter().map(|f| (f.tag, f.body.clone())).collect();
            let want: Vec<_> = bodies.iter().enumerate().map(|(i, b)| (i as u32, b.clone())).collect();
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[test]
    fn frame_header_validation() {
        let mut out = Vec::new();
        // Oversized length: rejected from the header alone.
        let mut h = encode_frame_header(Channel::P2p, 0, 0).expect("header");
        h[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(FrameDecoder::new(ConnKind::Peer).feed(&h, &mut out).is_err());
        // Root connections have a much smaller limit.
        let h = encode_frame_header(Channel::P2p, 0, MAX_ROOT_MESSAGE + 1).expect("header");
        let mut h2 = h;
        h2[0] = Channel::Register as u8;
        assert!(FrameDecoder::new(ConnKind::Register).feed(&h2, &mut out).is_err());
        // A channel foreign to the connection kind.
        assert!(FrameDecoder::new(ConnKind::Register).feed(&frame_bytes(Channel::P2p, 0, b"x"), &mut out).is_err());
        assert!(encode_frame_header(Channel::Reply, 0, MAX_ROOT_MESSAGE + 1).is_err());
        assert!(encode_frame_header(Channel::P2p, 0, MAX_MESSAGE + 1).is_err());
        assert!(out.is_empty());
    }

    /// Random and corrupted byte streams: decoders must return errors, never panic, and never
    /// hold more payload memory than the frame limit (nor more than twice what was received).
    #[test]
    fn fuzz_decoders() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let valid: Vec<u8> = [
            frame_bytes(Channel::P2p, 1, b"hello"),
            frame_bytes(Channel::Ring, 2, &[0; 300]),
            frame_bytes(Channel::Barrier, 3, &[]),
        ]
        .concat();
        for round in 0..3000 {
            let kind = [ConnKind::Register, ConnKind::Reply, ConnKind::Peer][round % 3];
            let stream = if round % 2 == 0 {
                let n = rng.below(200);
                rng.bytes(n)
            } else {
                let mut s = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(s.len());
                    s[i] = rng.next() as u8;
                }
                s.truncate(rng.below(s.len() + 1));
                s
            };
            let mut d = FrameDecoder::new(kind);
            let mut out = Vec::new();
            let mut fed = 0usize;
            let mut rest = stream.as_slice();
            while !rest.is_empty() {
                let (c, r) = rest.split_at(1 + rng.below(rest.len()));
                rest = r;
                fed += c.len();
                if d.feed(c, &mut out).is_err() {
                    break;
                }
                assert!(d.buffered_capacity() <= MAX_MESSAGE);
                assert!(d.buffered_capacity() <= 2 * fed);
            }
            for f in &out {
                assert!(f.body.len() <= f.channel.max_len());
            }
            let mut hello = [0u8; HELLO_BYTES];
            for (dst, src) in hello.iter_mut().zip(stream.iter().chain(std::iter::repeat(&0))) {
                *dst = *src;
            }
            let _ = Hello::decode(&hello);
            let mut r = Reader::new(&stream);
            let _ = (r.u32(), r.addr(), r.u8());
        }
        // Corrupting a valid hello anywhere in its fixed fields is detected.
        let good = Hello { kind: ConnKind::Register, rank: 3, secret: [5; 16] }.encode();
        for i in 0..12 {
            let mut b = good;
            b[i] ^= 0x40;
            assert!(Hello::decode(&b).is_err(), "flip in byte {i} accepted");
        }
    }
}
