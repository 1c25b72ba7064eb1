//! TLS streams over loopback: sessions carry data both ways in every socket mode, the wire never
//! shows the plaintext, and every mismatch (another PSK, a plaintext peer, a silent peer) fails
//! the handshake with a clear error in bounded time.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::error::ResultCode;

const PSK_A: &[u8] = b"test-psk-A-0123456789abcdef0123456789";
const PSK_B: &[u8] = b"test-psk-B-0123456789abcdef0123456789";
const LIMIT: Duration = Duration::from_secs(10);

fn keys(psk: &'static [u8]) -> Arc<Keys> {
    static A: OnceLock<Arc<Keys>> = OnceLock::new();
    static B: OnceLock<Arc<Keys>> = OnceLock::new();
    let cell = if psk == PSK_A { &A } else { &B };
    cell.get_or_init(|| Arc::new(Keys::from_psk(psk).expect("keys"))).clone()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    (c, l.accept().expect("accept").0)
}

/// Handshakes a client with `ck` against a server with `sk` (None: that side plain and silent
/// but for reading); returns both sides' results and streams.
fn handshake(ck: Option<Arc<Keys>>, sk: Option<Arc<Keys>>) -> ((Result<()>, Stream), (Result<()>, Stream)) {
    let (c, s) = tcp_pair();
    let server = thread::spawn(move || {
        let s = Stream::wrap(s, sk.as_deref(), true).expect("server");
        (s.handshake(LIMIT, &|| false), s)
    });
    let c = Stream::wrap(c, ck.as_deref(), false).expect("client");
    let cr = c.handshake(LIMIT, &|| false);
    if !c.is_encrypted() {
        // A plaintext "client": what a bootstrap hello would look like, then done.
        (&c).write_all(&[0x4f; 64]).expect("plain write");
        let _ = c.shutdown(Shutdown::Write);
    }
    ((cr, c), server.join().expect("server thread"))
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ salt).collect()
}

#[test]
fn sessions_carry_data_both_ways_blocking_and_nonblocking() {
    let ((cr, c), (sr, s)) = handshake(Some(keys(PSK_A)), Some(keys(PSK_A)));
    cr.expect("client handshake");
    sr.expect("server handshake");
    assert!(c.is_encrypted() && s.is_encrypted() && c.plain_tcp().is_none());

    // Blocking, larger than any socket buffer, both directions at once.
    let up = pattern(8 << 20, 1);
    let down = pattern(3 << 20, 2);
    let (c2, s2) = (c.try_clone().expect("clone"), s.try_clone().expect("clone"));
    let (up2, down2) = (up.clone(), down.clone());
    let writer = thread::spawn(move || {
        (&c2).write_all(&up2).expect("client write");
        (&c2).flush().expect("flush");
        (&s2).write_all(&down2).expect("server write");
        (&s2).flush().expect("flush");
    });
    let mut got_up = vec![0u8; up.len()];
    (&s).read_exact(&mut got_up).expect("server read");
    let mut got_down = vec![0u8; down.len()];
    (&c).read_exact(&mut got_down).expect("client read");
    writer.join().expect("writer");
    assert!(got_up == up && got_down == down, "bytes differ after the round trip");

    // Non-blocking per call (the link threads' spin mode): WouldBlock when empty, data after.
    let mut b = [0u8; 16];
    assert_eq!(s.recv_nowait(&mut b).expect_err("nothing sent yet").kind(), ErrorKind::WouldBlock);
    let msg = pattern(1 << 20, 3);
    let msg2 = msg.clone();
    let c3 = c.try_clone().expect("clone");
    let writer = thread::spawn(move || {
        let mut off = 0;
        while off < msg2.len() {
            match c3.send_nowait(&msg2[off..]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => thread::yield_now(),
                Err(e) => panic!("send_nowait: {e}"),
            }
        }
        (&c3).flush().expect("flush");
    });
    let mut got = vec![0u8; msg.len()];
    let mut off = 0;
    while off < got.len() {
        match s.recv_nowait(&mut got[off..]) {
            Ok(0) => panic!("end of stream"),
            Ok(n) => off += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) => panic!("recv_nowait: {e}"),
        }
    }
    writer.join().expect("writer");
    assert!(got == msg);

    // The peer's socket closing is the end of the stream, as on plain TCP.
    drop(c);
    assert_eq!((&s).read(&mut b).expect("end of stream"), 0);
}

/// A non-blocking reader that sees WouldBlock has nothing decrypted left behind (poll stays
/// truthful): after WouldBlock, data is announced by POLLIN.
#[test]
fn would_block_means_poll_is_truthful() {
    let ((cr, c), (sr, s)) = handshake(Some(keys(PSK_A)), Some(keys(PSK_A)));
    cr.and(sr).expect("handshakes");
    s.set_nonblocking(true).expect("nonblocking");
    (&c).write_all(&pattern(100_000, 4)).expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 7000];
    let end = Instant::now() + LIMIT;
    while got.len() < 100_000 {
        assert!(Instant::now() < end, "stalled at {} bytes", got.len());
        match (&s).read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd.
                let r = unsafe { libc::poll(&mut p, 1, 5000) };
                assert_eq!(r, 1, "poll must announce the rest of the data");
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    assert_eq!(got, pattern(100_000, 4));
}

use std::os::fd::AsRawFd;

#[test]
fn different_psks_fail_both_sides_with_remote_error_naming_the_key() {
    let t = Instant::now();
    let ((cr, _c), (sr, _s)) = handshake(Some(keys(PSK_A)), Some(keys(PSK_B)));
    let (ce, se) = (cr.expect_err("client must fail"), sr.expect_err("server must fail"));
    assert!(t.elapsed() < LIMIT, "failed promptly, not at the timeout");
    assert_eq!(ce.code, ResultCode::RemoteError, "{}", ce.msg);
    assert_eq!(se.code, ResultCode::RemoteError, "{}", se.msg);
    assert!(ce.msg.contains("pre-shared key"), "client: {}", ce.msg);
    assert!(se.msg.contains("pre-shared key"), "server: {}", se.msg);
}

#[test]
fn a_plaintext_peer_fails_the_handshake_on_either_side() {
    // Plaintext connector, TLS acceptor: the acceptor sees no TLS.
    let (_, (sr, _s)) = handshake(None, Some(keys(PSK_A)));
    let e = sr.expect_err("a plaintext client cannot complete a handshake");
    assert_eq!(e.code, ResultCode::RemoteError);
    assert!(e.msg.contains("does not speak") && e.msg.contains("ncclSetEncryption"), "{}", e.msg);

    // TLS connector, plaintext acceptor that reads the hello, finds garbage and drops it.
    let (c, s) = tcp_pair();
    let acceptor = thread::spawn(move || {
        let mut first = [0u8; 5];
        (&s).read_exact(&mut first).expect("client hello");
        assert!(looks_like_tls(&first), "a TLS ClientHello starts with a handshake record");
        drop(s);
    });
    let c = Stream::client(c, &keys(PSK_A)).expect("client");
    let e = c.handshake(LIMIT, &|| false).expect_err("nobody answers in TLS");
    acceptor.join().expect("acceptor");
    assert_eq!(e.code, ResultCode::RemoteError);
    assert!(e.msg.contains("ncclSetEncryption"), "{}", e.msg);
}

#[test]
fn a_silent_peer_times_out_and_an_abort_stops_the_wait() {
    let (c, _silent) = tcp_pair();
    let c = Stream::client(c, &keys(PSK_A)).expect("client");
    let t = Instant::now();
    let e = c.handshake(Duration::from_millis(300), &|| false).expect_err("silent");
    assert_eq!(e.code, ResultCode::SystemError);
    assert!(e.msg.contains("timed out"), "{}", e.msg);
    assert!(t.elapsed() < Duration::from_secs(3));

    let (c, _silent) = tcp_pair();
    let c = Stream::client(c, &keys(PSK_A)).expect("client");
    let start = Instant::now();
    let e = c.handshake(LIMIT, &|| start.elapsed() > Duration::from_millis(200)).expect_err("aborted");
    assert!(e.msg.contains("aborted") && start.elapsed() < Duration::from_secs(3), "{}", e.msg);
}

/// Relays `a` <-> `b` through a recording proxy; returns what crossed, both ways.
fn relay(a: TcpStream, b: TcpStream) -> Arc<StdMutex<Vec<u8>>> {
    let seen = Arc::new(StdMutex::new(Vec::new()));
    for (mut from, mut to) in [(a.try_clone().expect("clone"), b.try_clone().expect("clone")), (b, a)] {
        let seen = seen.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
                seen.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }
    seen
}

/// Sends a recognisable message from a client to a server through a sniffing relay; returns
/// what the wire carried.
fn sniff(k: Option<Arc<Keys>>, message: &[u8]) -> Vec<u8> {
    let (c, relay_in) = tcp_pair();
    let (relay_out, s) = tcp_pair();
    let seen = relay(relay_in, relay_out);
    let sk = k.clone();
    let server = thread::spawn(move || {
        let s = Stream::wrap(s, sk.as_deref(), true).expect("server");
        s.handshake(LIMIT, &|| false).expect("server handshake");
        let mut got = Vec::new();
        (&s).read_to_end(&mut got).expect("read");
        got
    });
    let c = Stream::wrap(c, k.as_deref(), false).expect("client");
    c.handshake(LIMIT, &|| false).expect("client handshake");
    (&c).write_all(message).expect("write");
    (&c).flush().expect("flush");
    c.shutdown(Shutdown::Write).expect("shutdown");
    assert_eq!(server.join().expect("server"), message, "delivered intact through the relay");
    let wire = seen.lock().expect("lock").clone();
    wire
}

#[test]
fn the_wire_never_shows_the_plaintext_when_encrypted() {
    let message: Vec<u8> = b"NCCL-UNIQUE-SECRET-".iter().copied().cycle().take(4096).collect();
    let needle = &message[..19];
    let contains = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    let plain = sniff(None, &message);
    assert!(contains(&plain), "the test can see plaintext when there is some");
    let tls = sniff(Some(keys(PSK_A)), &message);
    assert!(!contains(&tls), "plaintext visible on an encrypted connection");
    assert!(tls.len() > message.len(), "records and a handshake crossed the wire");
    assert!(looks_like_tls(&tls), "a TLS handshake opened the connection");
    // Nothing of the PSK crosses either.
    assert!(!tls.windows(16).any(|w| w == &PSK_A[..16]));
}

/// Loopback throughput, plaintext against TLS, one stream, 512 MiB each way; prints MB/s.
/// `cargo test --release --lib tls::tests::throughput -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn throughput_on_loopback() {
    let total: usize = 512 << 20;
    for k in [None, Some(keys(PSK_A))] {
        let (mut cs, mut ss) = loopback_pairs(1, k.as_deref());
        let (c, s) = (cs.remove(0), ss.remove(0));
        let reader = thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < total {
                got += (&s).read(&mut buf).expect("read");
            }
        });
        let chunk = vec![7u8; 1 << 20];
        let t = Instant::now();
        for _ in 0..total / chunk.len() {
            (&c).write_all(&chunk).expect("write");
        }
        (&c).flush().expect("flush");
        reader.join().expect("reader");
        let s = t.elapsed().as_secs_f64();
        println!("{}: {:.0} MB/s", if k.is_some() { "TLS  " } else { "plain" }, total as f64 / s / 1e6);
    }
}

#[test]
fn the_setting_is_process_wide_and_replaceable() {
    let _only_us = tests_lock_setting();
    assert!(current().is_none(), "plaintext by default");
    set_psk(Some(PSK_A)).expect("set");
    let a = current().expect("keys");
    set_psk(Some(PSK_A)).expect("set again");
    assert_eq!(format!("{:?}", current().expect("keys")), format!("{a:?}"), "the same PSK gives the same key");
    set_psk(None).expect("clear");
    assert!(current().is_none());
}
