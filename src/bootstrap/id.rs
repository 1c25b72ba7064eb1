//! The unique id (`ncclUniqueId`, 128 opaque bytes) and NCCL_COMM_ID parsing.
//!
//! Layout: magic "OXID" (4) | format u8 = 1 | reserved 3 bytes = 0 | root address (24, see
//! wire.rs) | 128-bit secret (16) | zero padding up to 128 bytes.
//!
//! A normal id carries a random secret. With NCCL_COMM_ID every rank may compute the id itself,
//! so it cannot carry a secret: the "secret" is then derived deterministically from the address
//! and only guards against mixing up communicators and stray connections, not against attackers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, ToSocketAddrs};

use super::wire::{decode_addr, encode_addr, Reader, Secret, ADDR_BYTES};
use crate::error::{Error, Result};

/// Size of `ncclUniqueId`, in bytes.
pub const UNIQUE_ID_BYTES: usize = 128;

const ID_MAGIC: [u8; 4] = *b"OXID";
const ID_FORMAT: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UniqueId {
    pub root: SocketAddr,
    pub secret: Secret,
}

impl UniqueId {
    pub(crate) fn encode(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut out = [0u8; UNIQUE_ID_BYTES];
        out[0..4].copy_from_slice(&ID_MAGIC);
        out[4] = ID_FORMAT;
        out[8..8 + ADDR_BYTES].copy_from_slice(&encode_addr(&self.root));
        out[32..48].copy_from_slice(&self.secret);
        out
    }

    pub(crate) fn decode(bytes: &[u8; UNIQUE_ID_BYTES]) -> Result<UniqueId> {
        let invalid = |what: &str| Error::invalid_argument(format!("bootstrap: invalid unique id ({what})"));
        let mut r = Reader::new(bytes);
        let head: [u8; 8] = r.array()?;
        if head[0..4] != ID_MAGIC {
            return Err(invalid("not produced by ncclGetUniqueId"));
        }
        if head[4] != ID_FORMAT || head[5..8] != [0; 3] {
            return Err(invalid("unknown format"));
        }
        let root = decode_addr(&r.array()?).map_err(|_| invalid("bad root address"))?;
        let secret = r.array()?;
        if r.rest().iter().any(|&b| b != 0) {
            return Err(invalid("nonzero padding"));
        }
        Ok(UniqueId { root, secret })
    }

    /// The id NCCL_COMM_ID mode uses: the address and a secret derived from it.
    pub(crate) fn from_comm_id(root: SocketAddr) -> UniqueId {
        UniqueId { root, secret: derived_secret(&root) }
    }
}

/// A fresh random secret from the kernel's CSPRNG.
pub(crate) fn random_secret() -> Result<Secret> {
    let mut secret = [0u8; 16];
    let mut filled = 0;
    while filled < secret.len() {
        let rest = &mut secret[filled..];
        // SAFETY: the pointer and length describe the writable `rest` slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("bootstrap: getrandom", &e));
            }
        } else {
            filled += n.unsigned_abs();
        }
    }
    Ok(secret)
}

/// Deterministic 128 bits from the address (two FNV-1a 64 passes with different bases), stable
/// across processes, builds and library versions of the same protocol.
fn derived_secret(addr: &SocketAddr) -> Secret {
    let fnv = |basis: u64| {
        b"oxccl NCCL_COMM_ID"
            .iter()
            .chain(encode_addr(addr).iter())
            .fold(basis, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    };
    let mut out = [0u8; 16];
    out[0..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    out[8..16].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_le_bytes());
    out
}

/// NCCL_COMM_ID, parsed, if set.
pub(crate) fn comm_id_from_env() -> Result<Option<SocketAddr>> {
    crate::config::env("NCCL_COMM_ID").map(|s| parse_comm_id(&s).map_err(|e| e.context("NCCL_COMM_ID"))).transpose()
}

/// Parses `<ipv4>:<port>`, `[<ipv6>]:<port>` (optionally `[<ipv6>%<scope>]`, scope a number or
/// an interface name) or `<hostname>:<port>`. The port must be nonzero: the root binds it.
/// Hostnames resolve through the system resolver, preferring IPv4 so all ranks pick alike.
pub fn parse_comm_id(s: &str) -> Result<SocketAddr> {
    let bad = |why: &str| Error::invalid_argument(format!("bootstrap: invalid address '{s}': {why}"));
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
        let port = after.strip_prefix(':').ok_or_else(|| bad("expected ':<port>' after ']'"))?;
        (host, port)
    } else {
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("expected <host>:<port>"))?;
        if host.contains(':') {
            return Err(bad("IPv6 addresses must be written [addr]:port"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or_else(|| bad("port must be 1-65535"))?;

    if s.starts_with('[') {
        let (ip, scope) = match host.split_once('%') {
            Some((ip, scope)) => (ip, parse_scope(scope).ok_or_else(|| bad("unknown IPv6 scope"))?),
            None => (host, 0),
        };
        let ip: Ipv6Addr = ip.parse().map_err(|_| bad("not an IPv6 address"))?;
        return Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(SocketAddr::new(IpAddr::V4(ip), port));
    }
    let hostname_ok = host.len() <= 253
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if !hostname_ok {
        return Err(bad("not an IPv4 address or a hostname"));
    }
    let addrs: Vec<SocketAddr> =
        (host, port).to_socket_addrs().map_err(|e| bad(&format!("cannot resolve: {e}")))?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| bad("hostname has no addresses"))
}

fn parse_scope(scope: &str) -> Option<u32> {
    if let Ok(n) = scope.parse() {
        return Some(n);
    }
    let name = std::ffi::CString::new(scope).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn parse_comm_id_forms() {
        assert_eq!(parse_comm_id("10.0.0.1:1234").expect("v4"), "10.0.0.1:1234".parse().expect("addr"));
        assert_eq!(parse_comm_id("[::1]:80").expect("v6"), "[::1]:80".parse().expect("addr"));
        let scoped = parse_comm_id("[fe80::1%7]:80").expect("scoped");
        assert!(matches!(scoped, SocketAddr::V6(a) if a.scope_id() == 7 && a.port() == 80));
        assert_eq!(parse_comm_id("[fe80::1%lo]:80").expect("named scope").port(), 80);
        let local = parse_comm_id("localhost:4242").expect("hostname");
        assert!(local.ip().is_loopback());
        assert_eq!(local.port(), 4242);
    }

    #[test]
    fn parse_comm_id_rejects_malformed() {
        for s in [
            "",
            ":",
            "1.2.3.4",
            "1.2.3.4:",
            ":80",
            "1.2.3.4:0",
            "1.2.3.4:65536",
            "1.2.3.4:-1",
            "1.2.3.4:http",
            "::1:80",
            "[::1]",
            "[::1]80",
            "[::1:80",
            "[1.2.3.4]:80",
            "[fe80::1%nosuchif0]:80",
            "bad host:80",
            "a..b:80",
            "host_name:80",
            "[]:80",
            "1.2.3.4:80 ",
        ] {
            let e = parse_comm_id(s).expect_err(s);
            assert_eq!(e.code, ResultCode::InvalidArgument, "{s}: {e}");
        }
    }

    #[test]
    fn id_round_trip_and_validation() {
        let id = UniqueId { root: "127.0.0.1:99".parse().expect("addr"), secret: random_secret().expect("rng") };
        assert_eq!(UniqueId::decode(&id.encode()).expect("decode"), id);
        assert_ne!(random_secret().expect("rng"), id.secret);
        for corrupt in [0usize, 4, 6, 8, 100] {
            let mut b = id.encode();
            b[corrupt] ^= 0xff;
            let e = UniqueId::decode(&b).expect_err("corrupt id");
            assert_eq!(e.code, ResultCode::InvalidArgument);
        }
        assert!(UniqueId::decode(&[0; UNIQUE_ID_BYTES]).is_err());
        let a: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
        assert_eq!(UniqueId::from_comm_id(a), UniqueId::from_comm_id(a));
        assert_ne!(
            UniqueId::from_comm_id(a).secret,
            UniqueId::from_comm_id("10.0.0.1:5001".parse().expect("addr")).secret
        );
    }
}
