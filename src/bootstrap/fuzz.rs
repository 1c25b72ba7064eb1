//! Randomised robustness tests (a fuzz harness that runs in CI without extra tooling): every parser
//! that sees bytes from the network or the caller gets random and mutated-valid input, and a live
//! rank gets random connections. The properties: no panic, no allocation beyond what arrived
//! (frames) or a fixed bound, no hang, and legitimate traffic still works afterwards.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::id::{parse_comm_id, UniqueId, UNIQUE_ID_BYTES};
use super::root::decode_reply;
use super::wire::{decode_addr, encode_addr, ConnKind, FrameDecoder, Hello, ADDR_BYTES, HELLO_BYTES, MAX_MESSAGE};
use super::Bootstrap;

/// xorshift64*: deterministic, so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
    /// A valid encoding with a few bytes flipped, truncated or extended.
    fn mutate(&mut self, valid: &[u8]) -> Vec<u8> {
        let mut v = valid.to_vec();
        for _ in 0..=self.below(3) {
            match self.below(4) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len() as u64) as usize;
                    v[i] ^= 1 << self.below(8);
                }
                1 => v.truncate(self.below(v.len() as u64 + 1) as usize),
                2 => v.push(self.next() as u8),
                _ if !v.is_empty() => {
                    let i = self.below(v.len() as u64) as usize;
                    v[i] = self.next() as u8;
                }
                _ => {}
            }
        }
        v
    }
}

fn fixed<const N: usize>(v: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = v.len().min(N);
    a[..n].copy_from_slice(&v[..n]);
    a
}

#[test]
fn parsers_survive_random_and_mutated_input() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let id = UniqueId { root: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 4242), secret: [7; 16] }.encode();
    let hello = Hello { kind: ConnKind::Peer, rank: 3, secret: [9; 16] }.encode();
    let addr = encode_addr(&"[fe80::1%2]:77".parse().expect("addr"));
    let reply_ok = [&[0u8][..], &addr].concat();
    for _ in 0..200_000 {
        let len = rng.below(160) as usize;
        let raw = rng.bytes(len);
        let _ = UniqueId::decode(&fixed::<UNIQUE_ID_BYTES>(&rng.mutate(&id)));
        let _ = UniqueId::decode(&fixed::<UNIQUE_ID_BYTES>(&raw));
        let _ = Hello::decode(&fixed::<HELLO_BYTES>(&rng.mutate(&hello)));
        let _ = Hello::decode(&fixed::<HELLO_BYTES>(&raw));
        let _ = decode_addr(&fixed::<ADDR_BYTES>(&rng.mutate(&addr)));
        let _ = decode_reply(&rng.mutate(&reply_ok));
        let _ = decode_reply(&raw);
        let _ = parse_comm_id(&String::from_utf8_lossy(&raw));
        let _ = crate::bootstrap::topo::PeerInfo::decode(&raw);
    }
    // Environment and configuration text the user controls: NCCL_PROTO/NCCL_ALGO lists, integers,
    // conf files, NCCL_DEBUG values.
    let alphabet = b"LLSimple128^,:;=#\n \tRingTreeNVLSallreduceAllGather0x-+9";
    for _ in 0..100_000 {
        let n = rng.below(40) as usize;
        let text: String = (0..n).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char).collect();
        let _ = crate::algo::envlists::Allowed::from_values(Some(&text), Some(&text));
        let _ = crate::getenv::parse_c_integer(&text);
        let _ = crate::getenv::conf_file_values(&text);
        let _ = crate::log::level::parse_level(&text);
        let _ = crate::log::level::parse_subsys_mask(Some(&text));
    }
    // Strings shaped like NCCL_COMM_ID values.
    for s in ["", ":", "[", "[]:1", "[::1", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:99999", "[::1%]:5", "[::1%9999999999]:5", "a:b:c", "🙂:80"] {
        assert!(parse_comm_id(s).is_err(), "{s:?} accepted");
    }
}

/// Frames arrive in arbitrary pieces: whatever the bytes, the decoder never holds more payload
/// memory than twice the bytes it was given (nor more than one frame's limit), and never panics.
#[test]
fn frame_decoder_memory_follows_received_bytes() {
    let mut rng = Rng(42);
    for round in 0..3000 {
        let kind = [ConnKind::Register, ConnKind::Reply, ConnKind::Peer][round % 3];
        let mut d = FrameDecoder::new(kind);
        let mut out = Vec::new();
        let mut fed = 0usize;
        for _ in 0..rng.below(20) {
            let n = rng.below(64) as usize;
            let mut piece = rng.bytes(n);
            if rng.below(4) == 0 && piece.len() >= 12 {
                // A plausible header: valid channel byte, random length.
                piece[0] = (1 + rng.below(6)) as u8;
                piece[1..4].fill(0);
            }
            fed += piece.len();
            if d.feed(&piece, &mut out).is_err() {
                break;
            }
            // Amortised doubling may hold up to twice what arrived, never more.
            assert!(d.buffered_capacity() <= (2 * fed).min(MAX_MESSAGE), "holds {} after {fed} bytes", d.buffered_capacity());
        }
    }
}

/// A live rank keeps working while random bytes and half-valid hellos hit its listener.
/// A live two-rank communicator's bootstraps.
fn two_ranks() -> Vec<Bootstrap> {
    let timeout = Duration::from_secs(30);
    let id = super::get_unique_id().expect("id");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|r| s.spawn(move || Bootstrap::init(&id, r, 2, timeout).expect("init"))).collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    })
}

#[test]
fn random_connections_do_not_disturb_a_rank() {
    let ranks = two_ranks();
    let mut rng = Rng(7);
    let target = ranks[0].listen;
    let hello = Hello { kind: ConnKind::Peer, rank: 1, secret: [0; 16] }.encode();
    let mut conns = Vec::new();
    for i in 0..64 {
        let Ok(mut s) = TcpStream::connect(target) else { continue };
        let n = rng.below(300) as usize;
        let bytes = if i % 2 == 0 { rng.bytes(n) } else { rng.mutate(&hello) };
        let _ = s.write_all(&bytes);
        conns.push(s);
    }
    // Legitimate traffic still flows both ways, within the normal timeout.
    std::thread::scope(|s| {
        let a = s.spawn(|| ranks[0].all_gather(&[1, 2, 3]).expect("all-gather rank 0"));
        let b = s.spawn(|| ranks[1].all_gather(&[4, 5, 6]).expect("all-gather rank 1"));
        assert_eq!(a.join().expect("thread"), vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(b.join().expect("thread"), vec![vec![1, 2, 3], vec![4, 5, 6]]);
    });
    drop(conns);
}

/// Data-connection admission (data.rs) with random and mutated hellos: never a panic or a hang,
/// and only an exact valid one is admitted.
#[test]
fn data_socket_admission_survives_random_and_mutated_hellos() {
    let ranks = two_ranks();
    let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listener");
    let addr = l.local_addr().expect("addr");
    let mut valid = Hello { kind: ConnKind::Data, rank: 1, secret: ranks[0].secret }.encode().to_vec();
    valid.extend_from_slice(&3u32.to_le_bytes()); // connection 3
    valid.extend_from_slice(&1u32.to_le_bytes()); // socket 1 of 2
    let mut rng = Rng(0xdada);
    let mut admitted = 0;
    for i in 0..200 {
        let bytes = match i % 3 {
            0 => {
                let n = rng.below(64) as usize;
                rng.bytes(n)
            }
            1 => rng.mutate(&valid),
            _ => valid.clone(),
        };
        let mut c = TcpStream::connect(addr).expect("connect");
        let _ = c.write_all(&bytes);
        drop(c.shutdown(std::net::Shutdown::Write));
        let (s, _) = l.accept().expect("accept");
        if let Ok((index, _)) = ranks[0].admit(s, 1, 3, 2, Duration::from_millis(200)) {
            // What follows the 40 header bytes is the transport's, not the admission's.
            assert!(index == 1 && bytes.starts_with(&valid), "only a valid hello is admitted: {bytes:?}");
            admitted += 1;
        }
    }
    assert!(admitted >= 66, "every valid hello admitted ({admitted})");
}
