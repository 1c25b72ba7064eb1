//! Mutual authentication by a pre-shared key, built from what rustls offers.
//!
//! NCCL 2.32 runs TLS 1.3 in external-PSK mode (psk_dhe_ke: the PSK authenticates, an ephemeral
//! (EC)DHE exchange keys the session; OpenSSL, src/misc/crypt.cc there). rustls has no external-PSK
//! API, so the key authenticates through certificates instead, as follows:
//!
//! 1. `seed = HKDF-SHA256(ikm = PSK, salt = none, info = DERIVE_LABEL)`, 32 bytes; the fixed label
//!    keeps this use of the PSK apart from any other (NCCL likewise derives its TLS PSK from the
//!    user's through HKDF-SHA256 with a label of its own).
//! 2. `(sk, pk) = Ed25519 key pair from seed` (RFC 8032: the seed is the private key). Every process
//!    holding the PSK derives the same pair; nobody without it can (HKDF is a PRF keyed by the
//!    PSK, and the pair reveals nothing of the PSK beyond what Ed25519 public keys reveal).
//! 3. Both ends present a self-signed certificate of `pk` (rcgen), the server as server, the client
//!    as client (client authentication is mandatory), and each accepts the handshake only if the
//!    peer's CertificateVerify, a signature over the handshake transcript, verifies under `pk`:
//!    `PeerKey` checks the signature against the derived key itself and ignores what the
//!    certificate claims, so nothing in it can be forged to matter.
//!
//! Why this is PSK authentication: CertificateVerify signs the transcript hash, which covers both
//! randoms and both ephemeral X25519 shares, with a context string that differs between client and
//! server (RFC 8446 section 4.4.3). Producing it requires `sk`, i.e. the PSK; it cannot be replayed
//! into another handshake nor reflected into the other role. So a completed handshake proves to each
//! side that the other holds the PSK, and the session keys come from the fresh X25519 exchange
//! (forward secrecy, as psk_dhe_ke gives). Like any group-shared PSK, it authenticates "a holder
//! of the key", not which one; NCCL's PSK mode is the same, and the bootstrap's own hello (its
//! secret and rank) still names the peer inside the channel. TLS 1.3 only, one suite
//! (TLS_AES_128_GCM_SHA256, NCCL's choice), X25519, no resumption, no 0-RTT.
//!
//! The construction is key pinning of a self-signed certificate, an established practice: WebRTC
//! pins the DTLS certificate by fingerprint (RFC 8827), libp2p's TLS handshake accepts exactly a
//! self-signed certificate carrying the expected peer key, Syncthing identifies devices by their
//! self-signed certificate. Deriving the pinned key from the PSK makes the pin something every
//! holder of the PSK can compute. It does not interoperate with NCCL's own TLS (neither does the
//! bootstrap protocol around it; oxccl ranks talk to oxccl ranks).

use std::sync::Arc;

use ring::hkdf;
use ring::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

use crate::error::{Error, Result};

/// HKDF `info` of step 1: names what the output is for, so it is never the key of anything else.
const DERIVE_LABEL: &[u8] = b"oxccl ncclSetEncryption PSK: Ed25519 peer key, v1";
/// The DNS name in the certificate and the one the client asks for (nobody checks it: the key is
/// what authenticates).
pub(super) const PEER_NAME: &str = "oxccl";
/// PKCS#8 v1 (RFC 8410) of an Ed25519 private key: this prefix, then the 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// The Ed25519 seed (private key) derived from `psk` (step 1).
fn derive_seed(psk: &[u8]) -> [u8; 32] {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(psk);
    let mut seed = [0u8; 32];
    // HKDF_SHA256 as the output type asks for 32 bytes, far below HKDF's 255 * 32 limit.
    let okm = prk.expand(&[DERIVE_LABEL], hkdf::HKDF_SHA256).expect("32 bytes of HKDF-SHA256 output");
    okm.fill(&mut seed).expect("32 bytes of HKDF-SHA256 output");
    seed
}

/// Everything a TLS session needs from one PSK: the rustls configurations of both roles, built
/// once per ncclSetEncryption and shared by every connection.
pub struct Keys {
    pub(super) client: Arc<ClientConfig>,
    pub(super) server: Arc<ServerConfig>,
    public: [u8; 32],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The public key only: nothing secret is printed.
        write!(f, "tls::Keys(peer key {:02x}{:02x}{:02x}{:02x}..)", self.public[0], self.public[1], self.public[2], self.public[3])
    }
}

impl Keys {
    /// Derives the key pair and certificate from `psk` (any length; ncclSetEncryption checks
    /// NCCL's minimum) and builds both configurations. ncclSystemError if a library refuses
    /// (which no valid input causes).
    pub fn from_psk(psk: &[u8]) -> Result<Keys> {
        let seed = derive_seed(psk);
        let public: [u8; 32] = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| Error::system("TLS: cannot make the Ed25519 key pair"))?
            .public_key()
            .as_ref()
            .try_into()
            .map_err(|_| Error::internal("TLS: Ed25519 public key size"))?;
        let pkcs8: Vec<u8> = ED25519_PKCS8_PREFIX.iter().chain(seed.iter()).copied().collect();
        let lib = |what: &str, e: &dyn std::fmt::Display| Error::system(format!("TLS: {what}: {e}"));
        let key_pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8.as_slice()), &rcgen::PKCS_ED25519)
            .map_err(|e| lib("loading the derived key", &e))?;
        let cert = rcgen::CertificateParams::new(vec![PEER_NAME.to_string()])
            .and_then(|p| p.self_signed(&key_pair))
            .map_err(|e| lib("making the certificate", &e))?
            .der()
            .clone();
        let key = || PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.clone()));
        let verifier = Arc::new(PeerKey { public });

        let versions = [&rustls::version::TLS13];
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(|e| lib("client configuration", &e))?
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_client_auth_cert(vec![cert.clone()], key())
            .map_err(|e| lib("client certificate", &e))?;
        client.resumption = rustls::client::Resumption::disabled();
        client.enable_sni = false;

        let mut server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(|e| lib("server configuration", &e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![cert], key())
            .map_err(|e| lib("server certificate", &e))?;
        // No tickets: they would sit unread in sockets that only ever carry one direction.
        server.send_tls13_tickets = 0;
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        Ok(Keys { client: Arc::new(client), server: Arc::new(server), public })
    }

    /// The client's name for the server (fixed; see PEER_NAME).
    pub(super) fn server_name() -> ServerName<'static> {
        ServerName::DnsName(rustls::pki_types::DnsName::try_from(PEER_NAME).expect("a valid DNS name").to_owned())
    }
}

/// ring's primitives restricted to NCCL's suite and one key exchange.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites = vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    p.kx_groups = vec![rustls::crypto::ring::kx_group::X25519];
    Arc::new(p)
}

/// Accepts a peer, in either role, exactly when its CertificateVerify verifies under the key
/// derived from the PSK (module note, step 3).
#[derive(Debug)]
struct PeerKey {
    public: [u8; 32],
}

impl PeerKey {
    fn check(&self, message: &[u8], scheme: SignatureScheme, signature: &[u8]) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        if scheme != SignatureScheme::ED25519 {
            return Err(rustls::Error::InvalidCertificate(CertificateError::BadSignature));
        }
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(message, signature)
            .map(|()| HandshakeSignatureValid::assertion())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadSignature))
    }
}

fn tls12_unused() -> rustls::Error {
    rustls::Error::General("oxccl's sockets use TLS 1.3 only".into())
}

impl ServerCertVerifier for PeerKey {
    /// The certificate is only the carrier of the signature checked below.
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        // Only TLS 1.3 is configured; this is never reached.
        Err(tls12_unused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        _cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.check(message, dss.scheme, dss.signature())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for PeerKey {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    /// As for the server: the signature below is the proof.
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(tls12_unused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        _cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.check(message, dss.scheme, dss.signature())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_key_depends_on_every_bit_of_the_psk_and_on_nothing_else() {
        let a = Keys::from_psk(b"0123456789abcdef0123456789abcdef").expect("keys");
        let again = Keys::from_psk(b"0123456789abcdef0123456789abcdef").expect("keys");
        let b = Keys::from_psk(b"0123456789abcdef0123456789abcdeg").expect("keys");
        assert_eq!(a.public, again.public, "deterministic: every rank derives the same key");
        assert_ne!(a.public, b.public, "one byte of difference changes the key");
        // The seed is not the PSK itself (HKDF with the label, not a copy).
        assert_ne!(&derive_seed(b"0123456789abcdef0123456789abcdef")[..], b"0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn a_signature_verifies_only_under_the_key_of_the_same_psk() {
        let seed = derive_seed(b"psk-one-0123456789abcdef0123456789");
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("pair");
        let sig = pair.sign(b"transcript");
        let ed = SignatureScheme::ED25519;
        let mine = PeerKey { public: pair.public_key().as_ref().try_into().expect("32") };
        assert!(mine.check(b"transcript", ed, sig.as_ref()).is_ok());
        assert!(mine.check(b"another transcript", ed, sig.as_ref()).is_err(), "bound to the transcript");
        let other = Keys::from_psk(b"psk-two-0123456789abcdef0123456789").expect("keys");
        assert!(PeerKey { public: other.public }.check(b"transcript", ed, sig.as_ref()).is_err(), "another PSK's key rejects it");
        assert!(mine.check(b"transcript", SignatureScheme::ECDSA_NISTP256_SHA256, sig.as_ref()).is_err());
    }
}
