//! End-to-end bootstrap tests: ranks as threads on 127.0.0.1. This file is compiled twice
//! (bootstrap/mod.rs): as `tests`, every connection plaintext, and as `tests_tls`, every
//! connection TLS authenticated by a test PSK (`keys`), so the whole suite runs both ways.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::sync::{Once, OnceLock};
use std::time::Instant;

use super::listener::HELLO_TIMEOUT;
use super::wire::{encode_frame_header, FRAME_HEADER_BYTES};
use super::*;
use crate::error::ResultCode;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LOCAL_ANY_PORT: SocketAddr = SocketAddr::new(LOCAL, 0);
const TIMEOUT: Duration = Duration::from_secs(20);

/// 32 ranks all-to-all in one process hold ~2000 sockets; lift the soft fd limit to the hard one.
fn raise_fd_limit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: plain getrlimit/setrlimit on a local struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    });
}

/// This copy's encryption: the test PSK's keys in `tests_tls`, None (plaintext) in `tests`.
pub(super) fn keys() -> Option<Arc<Keys>> {
    static KEYS: OnceLock<Arc<Keys>> = OnceLock::new();
    module_path!()
        .ends_with("tests_tls")
        .then(|| KEYS.get_or_init(|| Arc::new(Keys::from_psk(b"bootstrap-test-psk-0123456789abcdef").expect("keys"))).clone())
}

/// A client connection to `addr` as this copy's ranks make them (TLS handshake done when
/// encrypted), for tests that speak the wire protocol by hand.
fn dial(addr: SocketAddr) -> Stream {
    let s = Stream::wrap(TcpStream::connect(addr).expect("connect"), keys().as_deref(), false).expect("stream");
    s.handshake(TIMEOUT, &|| false).expect("TLS handshake");
    s
}

fn local_root(timeout: Duration) -> ([u8; UNIQUE_ID_BYTES], JoinHandle<()>) {
    unique_id_with_root(LOCAL_ANY_PORT, timeout, keys()).expect("start root")
}

fn init_local(id: &[u8; UNIQUE_ID_BYTES], rank: usize, nranks: usize, timeout: Duration) -> Result<Bootstrap> {
    Bootstrap::init_with(id, rank, nranks, timeout, false, Some(LOCAL_ANY_PORT), keys())
}

/// Initialises all ranks concurrently (init blocks until everyone registered).
pub(super) fn init_all(nranks: usize, timeout: Duration) -> Vec<Bootstrap> {
    raise_fd_limit();
    let (id, _root) = local_root(timeout);
    thread::scope(|s| {
        let handles: Vec<_> = (0..nranks).map(|r| s.spawn(move || init_local(&id, r, nranks, timeout))).collect();
        handles.into_iter().map(|h| h.join().expect("rank thread").expect("init")).collect()
    })
}

/// Runs `f` for every rank on its own thread.
fn on_all<T: Send>(ranks: &[Bootstrap], f: impl Fn(&Bootstrap) -> T + Sync) -> Vec<T> {
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = ranks.iter().map(|bs| s.spawn(move || f(bs))).collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

fn blob(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (rank * 31 + k * 7) as u8).collect()
}

fn p2p_msg(src: usize, dst: usize, tag: u32) -> Vec<u8> {
    format!("{src}->{dst}#{tag}").into_bytes()
}

/// Every operation, checked, from one rank's point of view.
fn exercise(bs: &Bootstrap, tags: &[u32]) {
    let (r, n) = (bs.rank(), bs.nranks());
    let all = bs.all_gather(&blob(r, 40)).expect("all_gather");
    assert_eq!(all.len(), n);
    for (i, b) in all.iter().enumerate() {
        assert_eq!(b, &blob(i, 40), "rank {r}: all_gather blob {i}");
    }
    bs.barrier().expect("barrier");
    bs.barrier().expect("barrier");

    for root in [n - 1, 0] {
        let payload = blob(root + 100, 1000);
        let mine: &[u8] = if r == root { &payload } else { b"ignored" };
        assert_eq!(bs.broadcast(root, mine).expect("broadcast"), payload, "rank {r}: broadcast from {root}");
    }

    // Ring shift with an empty and a 1 MiB message.
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    bs.send(next, 1, &[]).expect("send empty");
    bs.send(next, 1, &blob(r, 1 << 20)).expect("send 1 MiB");
    assert!(bs.recv(prev, 1).expect("recv empty").is_empty());
    assert!(bs.recv(prev, 1).expect("recv 1 MiB") == blob(prev, 1 << 20), "rank {r}: 1 MiB from {prev}");

    // All pairs (self included) with several tags; everything is sent before anything is
    // received, which only works because sends never wait for the receiver.
    for &tag in tags {
        for p in 0..n {
            bs.send(p, tag, &p2p_msg(r, p, tag)).expect("send");
        }
    }
    for &tag in tags.iter().rev() {
        for p in (0..n).rev() {
            assert_eq!(bs.recv(p, tag).expect("recv"), p2p_msg(p, r, tag), "rank {r}: from {p} tag {tag}");
        }
    }

    // In order per (sender, receiver, tag).
    for i in 0..5u8 {
        bs.send(next, 42, &[i]).expect("send seq");
    }
    for i in 0..5u8 {
        assert_eq!(bs.recv(prev, 42).expect("recv seq"), [i]);
    }
    bs.barrier().expect("final barrier");
}

fn run_collectives(nranks: usize, tags: &[u32]) {
    let ranks = init_all(nranks, TIMEOUT);
    for (r, bs) in ranks.iter().enumerate() {
        assert_eq!((bs.rank(), bs.nranks()), (r, nranks));
        assert_eq!(bs.local_addr(), LOCAL_ANY_PORT);
    }
    on_all(&ranks, |bs| exercise(bs, tags));
    // Every connection the ranks opened is encrypted exactly when this copy encrypts.
    for bs in &ranks {
        for s in bs.out.iter().filter_map(|slot| slot.lock().clone()) {
            assert_eq!(s.is_encrypted(), keys().is_some());
        }
    }
}

#[test]
fn collectives_1_rank() {
    run_collectives(1, &[0, 9]);
}

#[test]
fn collectives_2_ranks() {
    run_collectives(2, &[0, 9, u32::MAX]);
}

#[test]
fn collectives_3_ranks() {
    run_collectives(3, &[0, 9, u32::MAX]);
}

#[test]
fn collectives_8_ranks() {
    run_collectives(8, &[0, 9, u32::MAX]);
}

#[test]
fn collectives_32_ranks() {
    run_collectives(32, &[0, 9, u32::MAX]);
}

#[test]
fn bootstrap_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Bootstrap>();
}

#[test]
fn two_communicators_interleaved() {
    raise_fd_limit();
    let n = 4;
    let (id_a, _ra) = local_root(TIMEOUT);
    let (id_b, _rb) = local_root(TIMEOUT);
    thread::scope(|s| {
        for r in 0..n {
            s.spawn(move || {
                let a = init_local(&id_a, r, n, TIMEOUT).expect("init a");
                let b = init_local(&id_b, r, n, TIMEOUT).expect("init b");
                for round in 0..3 {
                    let ga = a.all_gather(&blob(r, 8)).expect("a all_gather");
                    let gb = b.all_gather(&blob(r + 50, 12)).expect("b all_gather");
                    assert_eq!(ga, (0..n).map(|i| blob(i, 8)).collect::<Vec<_>>());
                    assert_eq!(gb, (0..n).map(|i| blob(i + 50, 12)).collect::<Vec<_>>());
                    a.send((r + 1) % n, round, b"a").expect("a send");
                    b.send((r + n - 1) % n, round, b"b").expect("b send");
                    assert_eq!(b.recv((r + 1) % n, round).expect("b recv"), b"b");
                    assert_eq!(a.recv((r + n - 1) % n, round).expect("a recv"), b"a");
                    assert_eq!(b.broadcast(1, &[r as u8]).expect("b bcast"), [1]);
                    a.barrier().expect("a barrier");
                }
            });
        }
    });
}

#[test]
fn missing_rank_gets_root_timeout_error_and_root_exits() {
    // The root gives up first, so the ranks get its precise message rather than their own timeout.
    let (id, root) = local_root(Duration::from_millis(1500));
    let start = Instant::now();
    let errors: Vec<Error> = thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|r| s.spawn(move || init_local(&id, r, 3, Duration::from_secs(4)))).collect();
        hs.into_iter().map(|h| h.join().expect("thread").expect_err("init must fail")).collect()
    });
    assert!(start.elapsed() < Duration::from_secs(4), "took {:?}", start.elapsed());
    for e in &errors {
        assert_eq!(e.code, ResultCode::SystemError, "{e:?}");
        assert!(e.msg.contains("waiting for rank 2 to register with the root (2/3 ranks arrived)"), "{e:?}");
    }
    wait_finished(&root, Duration::from_secs(3));
}

#[test]
fn missing_rank_times_out_at_the_rank() {
    let (id, root) = local_root(Duration::from_secs(3));
    let start = Instant::now();
    let e = init_local(&id, 0, 2, Duration::from_secs(1)).expect_err("init must fail");
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
    assert_eq!(e.code, ResultCode::SystemError, "{e:?}");
    assert!(e.msg.contains("timed out after 1s waiting for the root"), "{e:?}");
    // With nobody else arriving, the root thread still ends at its own deadline.
    wait_finished(&root, Duration::from_secs(5));
}

fn wait_finished(thread: &JoinHandle<()>, within: Duration) {
    let start = Instant::now();
    while !thread.is_finished() {
        assert!(start.elapsed() < within, "root thread still running after {within:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Two ranks whose registrations conflict: both get the root's InvalidUsage promptly. The root
/// then waits for the largest announced nranks to register (to tell them too), or its deadline.
fn conflicting_registrations(a: (usize, usize), b: (usize, usize), expect: &str) {
    let (id, root) = local_root(Duration::from_secs(3));
    let start = Instant::now();
    let errors: Vec<Error> = thread::scope(|s| {
        let hs: Vec<_> =
            [a, b].into_iter().map(|(rank, nranks)| s.spawn(move || init_local(&id, rank, nranks, TIMEOUT))).collect();
        hs.into_iter().map(|h| h.join().expect("thread").expect_err("init must fail")).collect()
    });
    assert!(start.elapsed() < Duration::from_millis(2500), "took {:?}", start.elapsed());
    for e in &errors {
        assert_eq!(e.code, ResultCode::InvalidUsage, "{e:?}");
        assert!(e.msg.contains(expect), "{e:?}");
    }
    wait_finished(&root, Duration::from_secs(5));
}

#[test]
fn nranks_mismatch_is_an_error() {
    conflicting_registrations((0, 2), (1, 3), "nranks=");
}

#[test]
fn duplicate_rank_is_an_error() {
    conflicting_registrations((0, 2), (0, 2), "registered twice");
}

#[test]
fn invalid_arguments() {
    let (id, _root) = local_root(Duration::from_secs(1));
    for (rank, nranks) in [(0, 0), (2, 2), (5, 1)] {
        let e = init_local(&id, rank, nranks, TIMEOUT).expect_err("bad rank");
        assert_eq!(e.code, ResultCode::InvalidArgument, "{e:?}");
    }
    let e = init_local(&[7; UNIQUE_ID_BYTES], 0, 1, TIMEOUT).expect_err("bad id");
    assert_eq!(e.code, ResultCode::InvalidArgument);

    let ranks = init_all(2, TIMEOUT);
    let bs = &ranks[0];
    assert_eq!(bs.send(2, 0, b"x").expect_err("peer").code, ResultCode::InvalidArgument);
    assert_eq!(bs.recv(2, 0).expect_err("peer").code, ResultCode::InvalidArgument);
    assert_eq!(bs.broadcast(2, b"x").expect_err("root").code, ResultCode::InvalidArgument);
    let huge = vec![0u8; wire::MAX_MESSAGE + 1];
    assert_eq!(bs.send(1, 0, &huge).expect_err("size").code, ResultCode::InvalidArgument);
    // Unequal all-gather blobs are caught on both sides.
    let errs = on_all(&ranks, |bs| bs.all_gather(&blob(0, 4 + 4 * bs.rank())).expect_err("sizes"));
    for e in errs {
        assert_eq!(e.code, ResultCode::InvalidUsage, "{e:?}");
    }
}

#[test]
fn abort_unblocks_recv() {
    let ranks = init_all(2, Duration::from_secs(60));
    let bs = &ranks[1];
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let e = bs.recv(0, 5).expect_err("aborted recv");
            (e, Instant::now())
        });
        thread::sleep(Duration::from_millis(200));
        let aborted_at = Instant::now();
        bs.abort();
        let (e, returned_at) = waiter.join().expect("waiter");
        // Waiters are woken directly; the margin only absorbs scheduling delays on a loaded machine.
        assert!(returned_at.duration_since(aborted_at) < Duration::from_millis(500));
        assert!(e.msg.contains("aborted while waiting for rank 0's message with tag 5"), "{e:?}");
    });
    assert!(bs.recv(0, 1).is_err());
    assert!(bs.send(0, 1, b"x").is_err());
    assert!(bs.barrier().is_err());
}

#[test]
fn peer_exit_fails_recv_promptly() {
    let mut ranks = init_all(2, Duration::from_secs(60));
    ranks[0].send(1, 3, b"last words").expect("send");
    drop(ranks.remove(0));
    let bs = &ranks[0];
    let start = Instant::now();
    assert_eq!(bs.recv(0, 3).expect("queued message"), b"last words");
    let e = bs.recv(0, 3).expect_err("peer is gone");
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    assert_eq!(e.code, ResultCode::RemoteError, "{e:?}");
    assert!(e.msg.contains("connection from rank 0 ended"), "{e:?}");
}

/// A rank whose init fails gives up (`abandon`, then drops its Bootstrap): every peer fails at
/// once, also those it never connected to and those waiting on a peer that waits on it. This is
/// a 2 x 2 init where rank 3 failed before the barrier: ranks 0 and 1 wait on rank 3, rank 2 on
/// rank 0; only rank 0 held a connection from rank 3 (the ring's), so without `abandon` ranks 1
/// and 2 waited out the whole timeout.
#[test]
fn a_rank_that_gives_up_fails_every_peer_promptly() {
    let timeout = Duration::from_secs(60);
    let mut ranks = init_all(4, timeout);
    on_all(&ranks, |bs| {
        bs.all_gather(&[bs.rank() as u8]).expect("all_gather");
    });
    let failed = ranks.pop().expect("rank 3");
    let t0 = Instant::now();
    let waiters: Vec<_> = ranks
        .into_iter()
        .map(|bs| {
            thread::spawn(move || {
                let r = bs.barrier();
                if r.is_err() {
                    bs.abandon(); // as Comm::init does
                }
                r
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    failed.abandon();
    drop(failed);
    for (r, h) in waiters.into_iter().enumerate() {
        let e = h.join().expect("rank thread").expect_err("rank 3 failed");
        // Seen gone while waiting ("the connection from rank N ended"), or refused while sending.
        assert_eq!(e.code, ResultCode::RemoteError, "rank {r}: {e:?}");
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?} (timeout {timeout:?})", t0.elapsed());
}

/// Raw clients that must be dropped without disturbing the real ranks (when encrypted, they
/// hold the PSK: the hello checks behind the handshake are what is tested).
fn hostile_clients(target: SocketAddr, secret: Secret, kind: ConnKind) -> Vec<(&'static str, Stream)> {
    let connect = || dial(target);
    let hello = |kind, rank, secret| Hello { kind, rank, secret }.encode();
    let mut clients = Vec::new();
    let mut send = |name, bytes: Vec<u8>| {
        let mut s = connect();
        s.write_all(&bytes).expect("write");
        clients.push((name, s));
    };
    let mut wrong = secret;
    wrong[0] ^= 1;
    let mut oversized = encode_frame_header(Channel::P2p, 0, 0).expect("header");
    oversized[FRAME_HEADER_BYTES - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    send("wrong secret", [hello(kind, 1, wrong).as_slice(), &[0; 64]].concat());
    send("garbage", (0..200u32).map(|i| (i * 37 + 11) as u8).collect());
    send("oversized length prefix", [&[0xff; 4][..], &[0; 60]].concat());
    send("wrong kind", hello(ConnKind::Reply, 1, secret).to_vec());
    send("rank out of range", hello(ConnKind::Peer, 999, secret).to_vec());
    send("partial hello", hello(kind, 1, secret)[..10].to_vec());
    if kind == ConnKind::Register {
        // Authenticated, then an oversized frame: the root just drops it. (A rank treats a broken
        // connection from an authenticated peer as that peer failing; see the test below.)
        let mut header = oversized;
        header[0] = Channel::Register as u8;
        send("valid hello, oversized frame", [hello(kind, 1, secret).as_slice(), &header].concat());
    }
    clients.push(("idle", connect()));
    drop(connect()); // connect and close at once, like a port scanner
    if keys().is_some() {
        // Strangers to TLS: plaintext with a valid hello, and silence at the TCP level.
        let mut plain = TcpStream::connect(target).expect("connect");
        plain.write_all(&hello(kind, 1, secret)).expect("write");
        clients.push(("plaintext hello to a TLS listener", Stream::plain(plain)));
        clients.push(("idle before the TLS handshake", Stream::plain(TcpStream::connect(target).expect("connect"))));
    }
    clients
}

/// Each hostile client must see its connection closed, the idle ones after the hello deadline.
fn assert_all_dropped(clients: Vec<(&'static str, Stream)>) {
    for (name, mut s) in clients {
        s.set_read_timeout(Some(HELLO_TIMEOUT + Duration::from_secs(3))).expect("timeout");
        let mut buf = [0u8; 16];
        let mut first = s.read(&mut buf);
        if keys().is_some() && !s.is_encrypted() && matches!(first, Ok(n) if n > 0 && buf[0] == 0x15) {
            // A plaintext client of a TLS listener: a TLS alert (content type 21), then the end.
            first = s.read(&mut buf);
        }
        match first {
            Ok(0) => {}
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut => {}
            other => panic!("{name}: connection not dropped: {other:?}"),
        }
    }
}

#[test]
fn hostile_connections_to_root_are_dropped() {
    let (id, root) = local_root(TIMEOUT);
    let decoded = UniqueId::decode(&id).expect("id");
    let clients = hostile_clients(decoded.root, decoded.secret, ConnKind::Register);
    thread::sleep(Duration::from_millis(100));
    let ranks: Vec<Bootstrap> = thread::scope(|s| {
        let hs: Vec<_> = (0..3).map(|r| s.spawn(move || init_local(&id, r, 3, TIMEOUT))).collect();
        hs.into_iter().map(|h| h.join().expect("thread").expect("init despite hostile clients")).collect()
    });
    on_all(&ranks, |bs| exercise(bs, &[1]));
    assert_all_dropped(clients);
    wait_finished(&root, Duration::from_secs(5));
}

#[test]
fn hostile_connections_to_rank_are_dropped() {
    let ranks = init_all(3, TIMEOUT);
    let clients = hostile_clients(ranks[0].listen, ranks[0].secret, ConnKind::Peer);
    // Also a real rank of another communicator connecting with its own (different) secret.
    let other = init_all(1, TIMEOUT);
    let e = other[0].send_to(0, ranks[0].listen, Channel::P2p, 0, b"wrong comm");
    assert!(e.is_ok(), "the stranger's write itself succeeds; the receiver drops it");
    thread::sleep(Duration::from_millis(100));
    on_all(&ranks, |bs| exercise(bs, &[0, 5]));
    assert_all_dropped(clients);
}

#[test]
fn corrupt_frame_from_authenticated_peer_fails_its_receives() {
    let ranks = init_all(2, Duration::from_secs(60));
    let mut header = encode_frame_header(Channel::P2p, 0, 0).expect("header");
    header[FRAME_HEADER_BYTES - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let hello = Hello { kind: ConnKind::Peer, rank: 1, secret: ranks[0].secret }.encode();
    let mut s = dial(ranks[0].listen);
    s.write_all(&[hello.as_slice(), &header].concat()).expect("write");
    let start = Instant::now();
    let e = ranks[0].recv(1, 0).expect_err("broken peer connection");
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    assert_eq!(e.code, ResultCode::RemoteError, "{e:?}");
    assert!(e.msg.contains("exceeds"), "{e:?}");
    assert_all_dropped(vec![("oversized frame", s)]);
}

#[test]
fn comm_id_mode_end_to_end() {
    // NCCL_COMM_ID names a fixed port. Find a free one (test only: the library itself never
    // binds, releases and rebinds).
    let port = TcpListener::bind((LOCAL, 0)).expect("probe").local_addr().expect("addr").port();
    let addr = parse_comm_id(&format!("127.0.0.1:{port}")).expect("parse");
    let id = UniqueId::from_comm_id(addr).encode();
    let n = 3;
    thread::scope(|s| {
        for r in (0..n).rev() {
            // Rank 0 starts last, so the others retry until its root is listening.
            s.spawn(move || {
                let bs = Bootstrap::init_with(&id, r, n, TIMEOUT, r == 0, Some(LOCAL_ANY_PORT), keys()).expect("init");
                let all = bs.all_gather(&blob(r, 16)).expect("all_gather");
                assert_eq!(all, (0..n).map(|i| blob(i, 16)).collect::<Vec<_>>());
                bs.barrier().expect("barrier");
            });
            thread::sleep(Duration::from_millis(50));
        }
    });
}

#[test]
fn ipv6_link_local_keeps_its_scope() {
    let Some(link_local) = iface::list_interfaces()
        .expect("getifaddrs")
        .into_iter()
        .find(|i| matches!(i.ip, IpAddr::V6(ip) if ip.segments()[0] & 0xffc0 == 0xfe80) && i.scope_id != 0)
    else {
        return; // no IPv6 link-local interface on this machine
    };
    let addr = link_local.listen_addr();
    let (id, _root) = unique_id_with_root(addr, TIMEOUT, keys()).expect("root on link-local");
    assert!(
        matches!(UniqueId::decode(&id).expect("id").root, SocketAddr::V6(a) if a.scope_id() == link_local.scope_id)
    );
    thread::scope(|s| {
        for r in 0..2 {
            s.spawn(move || {
                let bs = Bootstrap::init_with(&id, r, 2, TIMEOUT, false, Some(addr), keys()).expect("init");
                assert_eq!(bs.local_addr(), addr);
                assert_eq!(bs.all_gather(&[r as u8]).expect("all_gather"), vec![vec![0], vec![1]]);
            });
        }
    });
}

#[test]
fn public_api_end_to_end() {
    // Goes through the environment (NCCL_COMM_ID, NCCL_SOCKET_IFNAME, ...) and the process-wide
    // encryption setting as the C API does; this copy's setting is made process-wide meanwhile.
    let _setting = crate::tls::tests_lock_setting();
    crate::tls::set_psk(keys().is_some().then_some(b"bootstrap-test-psk-0123456789abcdef".as_slice())).expect("setting");
    struct Plaintext;
    impl Drop for Plaintext {
        fn drop(&mut self) {
            let _ = crate::tls::set_psk(None);
        }
    }
    let _restore = Plaintext;
    let id = get_unique_id().expect("get_unique_id");
    thread::scope(|s| {
        for r in 0..2 {
            s.spawn(move || {
                let bs = Bootstrap::init(&id, r, 2, TIMEOUT).expect("init");
                assert_eq!(bs.all_gather(&[r as u8]).expect("all_gather"), vec![vec![0], vec![1]]);
                assert_eq!(bs.broadcast(1, &[9, r as u8]).expect("bcast"), [9, 1]);
            });
        }
    });
}

#[test]
fn timeout_parsing() {
    assert_eq!(parse_timeout("2.5"), Some(Duration::from_millis(2500)));
    assert_eq!(parse_timeout(" 300 "), Some(Duration::from_secs(300)));
    for bad in ["", "0", "-1", "abc", "nan", "inf", "1e300"] {
        assert_eq!(parse_timeout(bad), None, "{bad}");
    }
}

#[test]
fn a_rank_that_dies_is_detected_and_reported_to_the_others() {
    let mut ranks = init_all(3, TIMEOUT);
    // Rank 0 dies (its sockets close without a goodbye). Rank 1 holds rank 0's ring connection.
    drop(ranks.remove(0));
    let t0 = Instant::now();
    let loss = ranks[0].wait_loss(Duration::from_secs(5)).expect("rank 1 notices");
    assert_eq!((loss.rank, loss.reported_by), (0, None), "{loss:?}");
    assert!(loss.why.contains("without a goodbye"), "{loss:?}");
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    ranks[0].report_loss(0);
    let heard = ranks[1].wait_loss(Duration::from_secs(5)).expect("rank 2 hears about it");
    assert_eq!((heard.rank, heard.reported_by), (0, Some(1)), "{heard:?}");
    assert!(ranks[1].wait_loss(Duration::from_millis(200)).is_none(), "reported once");
}

#[test]
fn an_orderly_goodbye_is_not_a_loss() {
    let mut ranks = init_all(3, TIMEOUT);
    on_all(&ranks, |bs| exercise(bs, &[1]));
    ranks[0].say_goodbye();
    drop(ranks.remove(0));
    for bs in &ranks {
        assert_eq!(bs.wait_loss(Duration::from_millis(300)), None);
    }
    // Saying goodbye ends this rank's own wait at once.
    ranks[0].say_goodbye();
    let t0 = Instant::now();
    assert_eq!(ranks[0].wait_loss(Duration::from_secs(10)), None);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

/// Data connections: every pair of 3 ranks opens 3 sockets each way; bytes written on a rank's
/// outgoing socket i arrive on the peer's incoming socket i, in both directions.
#[test]
fn data_sockets_connect_every_pair_index_for_index() {
    let ranks = init_all(3, TIMEOUT);
    let conns = on_all(&ranks, |bs| {
        (0..3).filter(|&p| p != bs.rank()).map(|p| (p, bs.data_sockets(p, 5, 3).expect("data sockets"))).collect::<Vec<_>>()
    });
    for (me, mine) in conns.iter().enumerate() {
        for (peer, socks) in mine {
            assert_eq!((socks.outgoing.len(), socks.incoming.len()), (3, 3));
            assert!(socks.outgoing.iter().chain(&socks.incoming).all(|s| s.is_encrypted() == keys().is_some()));
            for (i, mut s) in socks.outgoing.iter().enumerate() {
                s.write_all(&[me as u8, *peer as u8, i as u8]).unwrap();
            }
        }
    }
    for (me, mine) in conns.iter().enumerate() {
        for (peer, socks) in mine {
            for (i, mut s) in socks.incoming.iter().enumerate() {
                let mut b = [0u8; 3];
                s.read_exact(&mut b).unwrap();
                assert_eq!(b, [*peer as u8, me as u8, i as u8], "rank {me} socket {i} from {peer}");
            }
        }
    }
}

/// An incoming data socket is admitted only with the communicator's secret, the expected peer,
/// connection number and an index in range.
#[test]
fn data_sockets_refuse_strangers() {
    let ranks = init_all(2, TIMEOUT);
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let attempt = |hello: Hello, conn: u32, index: u32| {
        // The client on a thread of its own: a TLS handshake needs both ends at once.
        let client = thread::spawn(move || {
            let mut c = dial(addr);
            let mut b = hello.encode().to_vec();
            b.extend_from_slice(&conn.to_le_bytes());
            b.extend_from_slice(&index.to_le_bytes());
            c.write_all(&b).unwrap();
            c
        });
        let (s, _) = l.accept().unwrap();
        let r = ranks[0].admit(s, 1, 9, 2, Duration::from_secs(1)).map(|(i, _)| i);
        drop(client.join().expect("client"));
        r
    };
    let good = Hello { kind: ConnKind::Data, rank: 1, secret: ranks[0].secret };
    assert_eq!(attempt(good, 9, 1).unwrap(), 1);
    assert!(attempt(Hello { secret: [0; 16], ..good }, 9, 1).unwrap_err().msg.contains("secret"));
    assert!(attempt(Hello { rank: 0, ..good }, 9, 1).is_err(), "not the peer");
    assert!(attempt(Hello { kind: ConnKind::Peer, ..good }, 9, 1).is_err(), "not a data socket");
    assert!(attempt(good, 8, 1).is_err(), "another connection");
    assert!(attempt(good, 9, 2).is_err(), "index out of range");
    // A stranger that connects and says nothing is dropped after the hello wait.
    let _silent = std::net::TcpStream::connect(addr).unwrap();
    let (s, _) = l.accept().unwrap();
    let t0 = Instant::now();
    assert!(ranks[0].admit(s, 1, 9, 2, Duration::from_millis(200)).is_err());
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(ranks[0].data_sockets(0, 1, 1).unwrap_err().code, ResultCode::InvalidArgument, "to itself");
    assert_eq!(ranks[0].data_sockets(1, 1, 0).unwrap_err().code, ResultCode::InvalidArgument, "no sockets");
}

/// PortChannel over TCP between two bootstrapped ranks: rank 0's proxy executes put-with-signal
/// triggers over the data sockets into rank 1's memory, which sees every byte before the signal.
#[test]
fn port_channel_over_tcp_between_bootstrapped_ranks() {
    use crate::device_abi::{OX_TRIGGER_DATA, OX_TRIGGER_FLAG, OX_TRIGGER_SYNC};
    use crate::proxy::fifo::{FifoHost, HeapFifo};
    use crate::proxy::trigger::Request;
    use crate::proxy::{Placement, Proxy};
    use crate::transport::tcp::{TcpReceiver, TcpSender};
    use crate::transport::{HostMem, MemAccess};
    use std::sync::atomic::AtomicU64;

    let ranks = init_all(2, TIMEOUT);
    let size = 6 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i * 13 + i / 4099) as u8).collect();
    let socks = on_all(&ranks, |bs| bs.data_sockets(1 - bs.rank(), 0, 4).expect("data sockets"));
    let mut socks = socks.into_iter();
    let (s0, s1) = (socks.next().unwrap(), socks.next().unwrap());
    let src = Arc::new(HostMem::new(&[size], 0));
    src.write(0, 0, &data).unwrap();
    let dst = Arc::new(HostMem::new(&[size], 1));
    let rx = TcpReceiver::start(0, s1.incoming, dst.clone(), Arc::new(|e| panic!("receiver: {e:?}"))).unwrap();
    let tx = TcpSender::new(1, s0.outgoing, src, 1 << 20).unwrap();
    let fifo = Arc::new(HeapFifo::new(8).unwrap());
    let mut proxy = Proxy::start("tcp-e2e".into(), FifoHost::new(fifo.words), Box::new(tx), Placement::default(), Box::new(|e| panic!("{e:?}"))).unwrap();
    let head = AtomicU64::new(0);
    let put = Request { kind: OX_TRIGGER_DATA | OX_TRIGGER_FLAG, size: size as u32, semaphore: 0, ..Default::default() };
    fifo.words.push_like_device(&head, put.encode().unwrap()).unwrap();
    let pos = fifo.words.push_like_device(&head, Request { kind: OX_TRIGGER_SYNC, ..Default::default() }.encode().unwrap()).unwrap();
    assert!(fifo.words.flush_like_device(pos), "flushed");
    proxy.stop();
    drop(proxy);
    assert!(rx.join().is_none());
    assert_eq!(*dst.mems[0].lock(), data);
    assert_eq!(*dst.sems[0].lock(), 1);
}

/// Heartbeats: a rank that stops sending them but keeps its sockets open (a hung process) is
/// declared lost by the next rank of the ring after the silence timeout; ranks that keep beating
/// are never declared lost, and a rank that said goodbye is left alone.
#[test]
fn a_silent_rank_is_lost_by_heartbeat_and_beating_ranks_are_not() {
    let ranks = init_all(3, TIMEOUT);
    let since = Instant::now();
    let silence = Duration::from_millis(1500);
    let beat_until = |bs: &Bootstrap, d: Duration| {
        let t0 = Instant::now();
        while t0.elapsed() < d {
            bs.heartbeat();
            bs.check_heartbeat(since, silence);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // All beating for longer than the timeout: nobody lost.
    on_all(&ranks, |bs| beat_until(bs, Duration::from_millis(2000)));
    for bs in &ranks {
        assert_eq!(bs.wait_loss(Duration::from_millis(10)), None, "rank {}", bs.rank());
    }
    // Rank 1 hangs (silent, sockets open); ranks 0 and 2 keep beating and checking.
    let t0 = Instant::now();
    let watchers: Vec<&Bootstrap> = vec![&ranks[0], &ranks[2]];
    std::thread::scope(|s| {
        for bs in watchers {
            s.spawn(move || beat_until(bs, Duration::from_millis(2500)));
        }
    });
    let loss = ranks[2].wait_loss(Duration::from_secs(1)).expect("rank 2 watches rank 1");
    assert_eq!((loss.rank, loss.reported_by), (1, None), "{loss:?}");
    assert!(loss.why.contains("heartbeat"), "{loss:?}");
    assert!(t0.elapsed() >= silence && t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(ranks[0].wait_loss(Duration::from_millis(10)), None, "rank 0 watches rank 2, which beats");
    assert!(!ranks[2].check_heartbeat(since, silence), "declared once");
    // A rank that says goodbye and goes quiet is not lost by silence.
    ranks[2].say_goodbye();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ranks[0].check_heartbeat(since, Duration::from_millis(100)), "rank 2 said goodbye");
}

/// Waits (bounded) until `cond` holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(5), "{what}: not within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Release notices (src/comm/reaper.rs): sent as a communicator's memory goes, which after an abort is
/// when its kernels stopped, so they must get through an aborted sender and into an aborted
/// receiver, whose listener stays until the Bootstrap is dropped.
#[test]
fn release_notices_cross_aborted_ranks() {
    let ranks = init_all(3, TIMEOUT);
    on_all(&ranks, |bs| exercise(bs, &[1]));
    assert!(!ranks[1].released_by(0));
    ranks[0].abort();
    ranks[1].abort();
    ranks[0].send_released(1).expect("sent after the sender's abort");
    eventually("rank 1 hears rank 0's release", || ranks[1].released_by(0));
    ranks[1].send_released(0).expect("sent after both aborted");
    ranks[2].send_released(0).expect("sent by a rank that did not abort");
    eventually("rank 0 hears both", || ranks[0].released_by(1) && ranks[0].released_by(2));
    assert!(!ranks[2].released_by(0), "only where sent");
    // The abort was a loss for rank 2 (rank 0's connection ended without a goodbye), reported once.
    let l = ranks[2].wait_loss(Duration::from_secs(5)).expect("rank 2 sees rank 0 or 1 gone");
    assert!(l.rank == 0 || l.rank == 1, "{l:?}");
}

/// The heartbeat ring around a lost rank: rank 2 beats to rank 0 instead of lost rank 1, and
/// rank 0 watches rank 2, which is then not declared lost for silence.
#[test]
fn heartbeats_skip_a_lost_rank() {
    let ranks = init_all(3, TIMEOUT);
    let silence = Duration::from_millis(800);
    let since = Instant::now();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        ranks[2].heartbeat_to(0);
        ranks[0].heartbeat_to(2);
        assert!(!ranks[0].check_heartbeat_of(2, since, silence));
        assert!(!ranks[2].check_heartbeat_of(0, since, silence));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Rank 1 sent nothing: rank 2, watching it, declares it lost.
    assert!(ranks[2].check_heartbeat_of(1, since, silence));
    assert_eq!(ranks[2].wait_loss(Duration::from_secs(1)).map(|l| l.rank), Some(1));
    assert!(!ranks[0].check_heartbeat_of(0, since, silence), "a rank never watches itself");
}
