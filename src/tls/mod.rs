//! Encryption of oxccl's TCP sockets (ncclSetEncryption, NCCL 2.32).
//!
//! What NCCL 2.32 specifies (nccl.h; user guide, "Configuring TCP encryption"; src/misc/crypt.cc):
//! a process-wide setting, either plaintext (the default) or TLS 1.3 authenticated by a pre-shared
//! key that every process of the job configures alike, before it creates a unique id or a
//! communicator. It covers the TCP sockets NCCL opens itself: the bootstrap (rendezvous root, rank
//! listeners, every out-of-band exchange) and the socket network transport. Transports that bypass
//! sockets (RDMA, NVLink, shared memory, GPU paths) stay outside it. NCCL has no environment
//! variable for it, nor does oxccl.
//!
//! Here: `set_psk` is ncclSetEncryption's effect, `current` what a new communicator (or unique id)
//! takes; a communicator keeps what it took for all of its connections, so changing the setting
//! later affects only communicators made afterwards (NCCL does not support changing it while
//! connections are live). Every socket the bootstrap makes (src/bootstrap: socket.rs connects,
//! listener.rs and data.rs accept) becomes a `Stream`: plain, exactly the socket as before, or a TLS
//! session whose handshake authenticates the peer by the PSK (psk.rs says how, and why that is
//! sound). The transports over those sockets (src/transport: link, tcp, copy engine, InfiniBand
//! set-up) read and write `Stream`s. A failed handshake (another PSK, a peer without encryption)
//! is ncclRemoteError where a rank connects and a WARN where it accepts, within the bootstrap
//! timeout.

mod psk;
mod stream;

use std::sync::Arc;

use parking_lot::RwLock;

pub use psk::Keys;
pub use stream::Stream;

use crate::error::Result;

/// Shortest PSK ncclSetEncryption accepts, in bytes (NCCL's ncclPskMinBytes).
pub const MIN_PSK_BYTES: usize = 32;

/// The process-wide setting: the keys of the PSK, or None for plaintext.
static CURRENT: RwLock<Option<Arc<Keys>>> = parking_lot::const_rwlock(None);

/// Makes `psk` (Some: TLS authenticated by it; None: plaintext) the setting for communicators and
/// unique ids created from now on. Derives the keys at once, so connections only share them.
/// ncclSystemError if the TLS library refuses to build them (no valid input causes that).
pub fn set_psk(psk: Option<&[u8]>) -> Result<()> {
    let keys = psk.map(Keys::from_psk).transpose()?.map(Arc::new);
    *CURRENT.write() = keys;
    Ok(())
}

/// The setting now: the keys to encrypt with, or None for plaintext.
pub fn current() -> Option<Arc<Keys>> {
    CURRENT.read().clone()
}

/// Whether `first` (a connection's first bytes) starts a TLS handshake record: a plaintext
/// listener then names the likely mistake (the peer encrypts, this process does not).
pub fn looks_like_tls(first: &[u8]) -> bool {
    matches!(first, [0x16, 0x03, 0x01..=0x04, ..])
}

/// Serializes the tests that change the process-wide setting (writers) against those that
/// create unique ids or communicators from it (readers).
#[cfg(test)]
static TEST_SETTING: RwLock<()> = parking_lot::const_rwlock(());

/// For a test that changes the process-wide setting: no test relying on it runs meanwhile.
#[cfg(test)]
pub(crate) fn tests_lock_setting() -> parking_lot::RwLockWriteGuard<'static, ()> {
    TEST_SETTING.write()
}

/// For a test that takes the process-wide setting (a unique id, Bootstrap::init): it stays.
#[cfg(test)]
pub(crate) fn tests_read_setting() -> parking_lot::RwLockReadGuard<'static, ()> {
    TEST_SETTING.read()
}

/// Test helper: keys of a fixed test PSK, made once.
#[cfg(test)]
pub(crate) fn test_keys() -> Arc<Keys> {
    static K: std::sync::OnceLock<Arc<Keys>> = std::sync::OnceLock::new();
    K.get_or_init(|| Arc::new(Keys::from_psk(b"transport-test-psk-0123456789abcdef").expect("keys"))).clone()
}

/// Test helper: `n` connected loopback pairs (the connecting ends, the accepted ends, index for
/// index), TLS sessions of `keys` with their handshakes done, or plain.
#[cfg(test)]
pub(crate) fn loopback_pairs(n: usize, keys: Option<&Keys>) -> (Vec<Stream>, Vec<Stream>) {
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = l.local_addr().expect("addr");
    let limit = std::time::Duration::from_secs(20);
    std::thread::scope(|s| {
        let accepted = s.spawn(|| {
            (0..n)
                .map(|_| {
                    let st = Stream::wrap(l.accept().expect("accept").0, keys, true).expect("server");
                    st.handshake(limit, &|| false).expect("server handshake");
                    st
                })
                .collect()
        });
        let connected = (0..n)
            .map(|_| {
                let st = Stream::wrap(TcpStream::connect(addr).expect("connect"), keys, false).expect("client");
                st.handshake(limit, &|| false).expect("client handshake");
                st
            })
            .collect();
        (connected, accepted.join().expect("acceptor"))
    })
}

#[cfg(test)]
mod tests;
