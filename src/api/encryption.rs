//! ncclSetEncryption (NCCL 2.32): TLS for the TCP sockets of communicators made afterwards.

use std::ffi::{c_char, c_int, c_uint, CStr};

use super::call;
use super::types::ncclResult_t;
use crate::error::{Error, Result};
use crate::log::Subsys;
use crate::tls;

/// `ncclEncryptionConfig_t::mode`: plaintext (NCCL_ENCRYPTION_MODE_NONE).
pub const NCCL_ENCRYPTION_MODE_NONE: c_int = 0;
/// `ncclEncryptionConfig_t::mode`: TLS 1.3 authenticated by `psk` (NCCL_ENCRYPTION_MODE_PSK).
pub const NCCL_ENCRYPTION_MODE_PSK: c_int = 1;
/// `ncclEncryptionConfig_t::magic` as NCCL_ENCRYPTION_CONFIG_INITIALIZER sets it (NCCL_API_MAGIC).
pub const NCCL_ENCRYPTION_CONFIG_MAGIC: c_uint = 0xcafe_beef;

/// `struct ncclEncryptionConfig_v23200` (NCCL 2.32.3's nccl.h), sizeof 32 on LP64.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclEncryptionConfig_t {
    /// sizeof the caller's struct (NCCL_ENCRYPTION_CONFIG_INITIALIZER sets it).
    pub size: usize,
    /// NCCL_API_MAGIC, set by the initializer.
    pub magic: c_uint,
    /// NCCL_VERSION_CODE the caller was built against.
    pub version: c_uint,
    /// An `ncclEncryptionMode_t`: NCCL_ENCRYPTION_MODE_NONE (0) or NCCL_ENCRYPTION_MODE_PSK (1).
    pub mode: c_int,
    /// With NCCL_ENCRYPTION_MODE_PSK: the pre-shared key, a NUL-terminated string of at least 32
    /// bytes; NULL (NCCL_CONFIG_UNDEF_PTR) otherwise.
    pub psk: *const c_char,
}

/// What a valid configuration asks for: None (plaintext) or the PSK's bytes.
fn parse(config: *const ncclEncryptionConfig_t) -> Result<Option<Vec<u8>>> {
    if config.is_null() {
        // NCCL (src/misc/crypt.cc): NULL is the initializer's configuration, i.e. plaintext.
        return Ok(None);
    }
    // NCCL copies min(size, sizeof) bytes of the caller's struct over its initializer: a caller
    // built against an older header may pass a shorter struct, so nothing past `size` is read.
    // SAFETY: a non-null pointer from C points at least to the struct's `size` field (the C
    // contract), and then to `size` bytes.
    let size = unsafe { std::ptr::read_unaligned(config as *const usize) };
    let mut raw = ncclEncryptionConfig_t { size, magic: 0, version: 0, mode: NCCL_ENCRYPTION_MODE_NONE, psk: std::ptr::null() };
    let n = size.min(std::mem::size_of::<ncclEncryptionConfig_t>());
    // SAFETY: `n` bytes of the caller's struct are readable (above) and `raw` has at least `n`;
    // the struct is integers and a raw pointer, any bit pattern valid.
    unsafe { std::ptr::copy_nonoverlapping(config as *const u8, &mut raw as *mut ncclEncryptionConfig_t as *mut u8, n) };
    if raw.magic != NCCL_ENCRYPTION_CONFIG_MAGIC {
        return Err(Error::invalid_argument("config not initialized via NCCL_ENCRYPTION_CONFIG_INITIALIZER"));
    }
    let (mode, psk) = (raw.mode, raw.psk);
    match mode {
        NCCL_ENCRYPTION_MODE_NONE => Ok(None),
        NCCL_ENCRYPTION_MODE_PSK => {
            if psk.is_null() {
                return Err(Error::invalid_argument("NCCL_ENCRYPTION_MODE_PSK requires config->psk"));
            }
            // SAFETY: a non-null psk is a NUL-terminated string (the header's contract).
            let key = unsafe { CStr::from_ptr(psk) }.to_bytes();
            if key.len() < tls::MIN_PSK_BYTES {
                return Err(Error::invalid_argument(format!("config->psk must be at least {} bytes", tls::MIN_PSK_BYTES)));
            }
            Ok(Some(key.to_vec()))
        }
        m => Err(Error::invalid_argument(format!("config->mode={m} is not a supported encryption mode"))),
    }
}

/// Configures process-wide encryption of the TCP sockets oxccl opens for communicators: with
/// `mode` NCCL_ENCRYPTION_MODE_PSK, TLS 1.3 whose handshake authenticates both ends by the
/// pre-shared key `psk` (a NUL-terminated string of at least 32 bytes; oxccl copies it); with
/// NCCL_ENCRYPTION_MODE_NONE, or `config` NULL, plaintext (the default). As in NCCL 2.32
/// (src/misc/crypt.cc), a config whose `size` ends before a field leaves that field at the
/// initializer's value, and `version` is not checked.
///
/// It covers the bootstrap (the rendezvous root, rank listeners, every out-of-band exchange) and
/// the sockets of the cross-host network transport and of its set-up (InfiniBand lanes exchange
/// their endpoints over them, then move data by RDMA, which it does not cover; NCCL's boundary
/// too). Call it before ncclGetUniqueId and before creating communicators, with the same PSK in
/// every process of the job: a unique id or communicator keeps the setting in force when it was
/// created, so a later call affects only later ones. Between processes configured differently
/// the TLS handshake fails: the connecting rank's init returns ncclRemoteError naming the cause,
/// the accepting one logs a WARN and drops the connection, and a rank waiting on it fails at the
/// bootstrap timeout (OXCCL_BOOTSTRAP_TIMEOUT). Any thread; calls are serialized.
///
/// The PSK must be random (32 bytes or more from a cryptographic generator, as NCCL's guide asks),
/// not a passphrase: each listener presents a public key derived from the PSK to whoever
/// connects, so a guessable PSK could be found offline.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `config->magic` is not NCCL_API_MAGIC (not made
/// by NCCL_ENCRYPTION_CONFIG_INITIALIZER), `mode` is neither NONE nor PSK, or PSK mode with `psk`
/// NULL or shorter than 32 bytes; ncclSystemError if the TLS library cannot build its keys.
#[no_mangle]
pub extern "C" fn ncclSetEncryption(config: *const ncclEncryptionConfig_t) -> ncclResult_t {
    call("ncclSetEncryption", || {
        let psk = parse(config)?;
        tls::set_psk(psk.as_deref())?;
        let what = if psk.is_some() { "TLS 1.3 with a pre-shared key" } else { "plaintext" };
        nccl_info!(Subsys::Init, "ncclSetEncryption: TCP sockets of new communicators: {what}");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    fn initializer() -> ncclEncryptionConfig_t {
        ncclEncryptionConfig_t {
            size: std::mem::size_of::<ncclEncryptionConfig_t>(),
            magic: NCCL_ENCRYPTION_CONFIG_MAGIC,
            version: 23203,
            mode: NCCL_ENCRYPTION_MODE_NONE,
            psk: std::ptr::null(),
        }
    }

    #[test]
    fn layout_matches_nccl_2_32() {
        assert_eq!(std::mem::size_of::<ncclEncryptionConfig_t>(), 32);
        assert_eq!(std::mem::offset_of!(ncclEncryptionConfig_t, magic), 8);
        assert_eq!(std::mem::offset_of!(ncclEncryptionConfig_t, version), 12);
        assert_eq!(std::mem::offset_of!(ncclEncryptionConfig_t, mode), 16);
        assert_eq!(std::mem::offset_of!(ncclEncryptionConfig_t, psk), 24);
    }

    #[test]
    fn validation_follows_nccl() {
        let long = c"0123456789abcdef0123456789abcdef";
        let short = c"0123456789abcdef0123456789abcde";
        let psk = |mode, p: *const c_char| ncclEncryptionConfig_t { mode, psk: p, ..initializer() };
        assert_eq!(parse(std::ptr::null()).expect("NULL is plaintext"), None);
        assert_eq!(parse(&initializer()).expect("the initializer"), None);
        assert_eq!(parse(&psk(NCCL_ENCRYPTION_MODE_PSK, long.as_ptr())).expect("32 bytes"), Some(long.to_bytes().to_vec()));
        let bad = |c: ncclEncryptionConfig_t| parse(&c).expect_err("invalid").code;
        assert_eq!(bad(ncclEncryptionConfig_t { magic: 0, ..initializer() }), ResultCode::InvalidArgument);
        assert_eq!(bad(psk(NCCL_ENCRYPTION_MODE_PSK, std::ptr::null())), ResultCode::InvalidArgument);
        assert_eq!(bad(psk(NCCL_ENCRYPTION_MODE_PSK, c"".as_ptr())), ResultCode::InvalidArgument);
        assert_eq!(bad(psk(NCCL_ENCRYPTION_MODE_PSK, short.as_ptr())), ResultCode::InvalidArgument);
        assert_eq!(bad(psk(2, long.as_ptr())), ResultCode::InvalidArgument);
        assert_eq!(bad(psk(-1, long.as_ptr())), ResultCode::InvalidArgument);
        // A struct from an older header that ends before `psk`: PSK mode without a key.
        assert_eq!(bad(ncclEncryptionConfig_t { size: 24, ..psk(NCCL_ENCRYPTION_MODE_PSK, long.as_ptr()) }), ResultCode::InvalidArgument);
        // ... and one that ends before `mode` is plaintext whatever follows.
        assert_eq!(parse(&ncclEncryptionConfig_t { size: 16, ..psk(NCCL_ENCRYPTION_MODE_PSK, long.as_ptr()) }).expect("short"), None);
        // Callers' buffers exactly `size` bytes long: 16 bytes hold the magic (plaintext); 8 do
        // not, so the magic counts as absent.
        let sixteen: [u64; 2] = [16, u64::from(NCCL_ENCRYPTION_CONFIG_MAGIC)];
        assert_eq!(parse(sixteen.as_ptr().cast()).expect("16-byte struct"), None);
        let eight: [u64; 1] = [8];
        assert_eq!(parse(eight.as_ptr().cast()).expect_err("8-byte struct").code, ResultCode::InvalidArgument);
    }

    #[test]
    fn the_entry_point_sets_and_clears_the_process_wide_setting() {
        let _only_us = tls::tests_lock_setting();
        let long = c"0123456789abcdef0123456789abcdef";
        let cfg = ncclEncryptionConfig_t { mode: NCCL_ENCRYPTION_MODE_PSK, psk: long.as_ptr(), ..initializer() };
        assert_eq!(ncclSetEncryption(&cfg), ResultCode::Success);
        assert!(tls::current().is_some());
        // A rejected call changes nothing.
        assert_eq!(ncclSetEncryption(&ncclEncryptionConfig_t { magic: 1, ..initializer() }), ResultCode::InvalidArgument);
        assert!(tls::current().is_some());
        assert_eq!(ncclSetEncryption(std::ptr::null()), ResultCode::Success);
        assert!(tls::current().is_none());
        assert_eq!(ncclSetEncryption(&cfg), ResultCode::Success);
        assert_eq!(ncclSetEncryption(&initializer()), ResultCode::Success);
        assert!(tls::current().is_none());
    }
}
