//! Ranks configured differently (another PSK, or no encryption against encryption) fail their
//! init cleanly: the rank whose handshake fails at once with ncclRemoteError naming the cause,
//! the others within the bootstrap timeout, never a hang. (tests.rs runs the whole suite with
//! encryption on and off; this is what only mixed settings show.)

use std::net::{IpAddr, Ipv4Addr};
use std::thread;
use std::time::Instant;

use super::*;
use crate::error::ResultCode;

const LOCAL_ANY_PORT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

fn keys(psk: &[u8]) -> Option<Arc<Keys>> {
    Some(Arc::new(Keys::from_psk(psk).expect("keys")))
}

/// A root and rank 0 with `shared`, rank 1 with `odd`, both ranks within `timeout`; returns
/// their results and how long the slower took.
fn mixed(shared: Option<Arc<Keys>>, odd: Option<Arc<Keys>>, timeout: Duration) -> (Result<Bootstrap>, Result<Bootstrap>, Duration) {
    let (id, _root) = unique_id_with_root(LOCAL_ANY_PORT, timeout, shared.clone()).expect("root");
    let t = Instant::now();
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| Bootstrap::init_with(&id, 0, 2, timeout, false, Some(LOCAL_ANY_PORT), shared.clone()));
        let b = s.spawn(|| {
            let r = Bootstrap::init_with(&id, 1, 2, timeout, false, Some(LOCAL_ANY_PORT), odd.clone());
            (r, t.elapsed())
        });
        (a.join().expect("rank 0"), b.join().expect("rank 1"))
    });
    let (b, b_took) = b;
    assert!(b_took < timeout / 2 || b.is_err(), "rank 1 took {b_took:?}");
    (a, b, t.elapsed())
}

#[test]
fn a_rank_with_another_psk_fails_at_once_and_the_others_within_the_timeout() {
    let timeout = Duration::from_secs(4);
    let (a, b, took) = mixed(keys(b"job-psk-0123456789abcdef0123456789ab"), keys(b"not-the-job-psk-0123456789abcdef0123"), timeout);
    let eb = b.expect_err("rank 1 cannot register");
    assert_eq!(eb.code, ResultCode::RemoteError, "{eb:?}");
    assert!(eb.msg.contains("pre-shared key") && eb.msg.contains("the root"), "{eb:?}");
    let ea = a.expect_err("rank 0 cannot complete without rank 1");
    assert!(matches!(ea.code, ResultCode::SystemError | ResultCode::RemoteError), "{ea:?}");
    assert!(took < timeout + Duration::from_secs(3), "took {took:?}");
}

#[test]
fn an_encrypting_rank_among_plaintext_ones_fails_at_once_naming_the_setting() {
    let timeout = Duration::from_secs(4);
    let (a, b, took) = mixed(None, keys(b"job-psk-0123456789abcdef0123456789ab"), timeout);
    let eb = b.expect_err("rank 1 cannot register");
    assert_eq!(eb.code, ResultCode::RemoteError, "{eb:?}");
    assert!(eb.msg.contains("ncclSetEncryption"), "{eb:?}");
    assert!(a.is_err(), "rank 0 cannot complete without rank 1");
    assert!(took < timeout + Duration::from_secs(3), "took {took:?}");
}

#[test]
fn a_plaintext_rank_among_encrypting_ones_fails_within_the_timeout() {
    // Its plaintext registration is dropped by the root (with a WARN); it learns of nothing
    // until its own wait for the root's reply times out.
    let timeout = Duration::from_secs(3);
    let (id, _root) = unique_id_with_root(LOCAL_ANY_PORT, timeout, keys(b"job-psk-0123456789abcdef0123456789ab")).expect("root");
    let t = Instant::now();
    let e = Bootstrap::init_with(&id, 1, 2, timeout, false, Some(LOCAL_ANY_PORT), None).expect_err("plaintext to a TLS root");
    assert!(matches!(e.code, ResultCode::SystemError | ResultCode::RemoteError), "{e:?}");
    assert!(t.elapsed() < timeout + Duration::from_secs(2), "took {:?}", t.elapsed());
}
