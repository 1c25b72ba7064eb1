//! `ncclCollConfig_t`, NCCL 2.32.3's per-collective configuration (the trailing argument of the
//! nccl*Config collectives): the C struct as nccl.h lays it out, and its parsing as NCCL 2.32.3's
//! ncclParseCollConfig (config/collconfig.cc) does it, read off its library: the defaults of
//! NCCL_COLLCONFIG_INITIALIZER with a zero magic, the caller's first min(size, 72) bytes copied
//! over them, then three checks in this order, each ncclInvalidArgument with NCCL's message:
//! the magic, forceAlgSelection (0 or 1), CTAPolicy (unset, or 0-3). `version` is not read (NCCL
//! reads none: the struct has one version so far), nor is the `ext` list (NCCL ignores every
//! extension). Fields out of range that NCCL ignores with an INFO line (the CTA counts, the
//! cluster size) and the algorithm selection are judged later, against the communicator and the
//! collective (algo::collcfg).
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::mem::size_of;

use super::abi::{NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT as UNDEF};
use crate::error::{Error, Result};

/// `struct ncclConfigExt`: one vendor option of `ncclCollConfig_t::ext` (oxccl, like NCCL, reads
/// none of them).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfigExt_t {
    /// The next option, or NULL.
    pub next: *mut ncclConfigExt_t,
    /// The option's vendor and id.
    pub key: ncclConfigExtKey,
    /// The option's value (`int i`, `const char* s` or `void* raw`).
    pub val: *mut c_void,
}

/// `ncclConfigExt_t::key`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfigExtKey {
    /// The vendor's own number.
    pub vendorId: c_int,
    /// The option within the vendor's.
    pub optionId: c_int,
}

/// `struct ncclCollConfig_v23200` (sizeof 72 on x86-64), what NCCL_COLLCONFIG_INITIALIZER fills.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclCollConfig_t {
    /// sizeof the caller's struct: how many of its bytes are read.
    pub size: usize,
    /// NCCL_API_MAGIC (0xcafebeef).
    pub magic: c_uint,
    /// NCCL_VERSION_CODE the caller was built against (not read).
    pub version: c_uint,
    /// Vendor options (not read).
    pub ext: *mut ncclConfigExt_t,
    /// Fewest thread blocks (1-64; unset: the collective's own choice).
    pub minCTAs: c_int,
    /// Most thread blocks (1-64, at most the communicator's maxCTAs).
    pub maxCTAs: c_int,
    /// NVLS thread blocks (1-64): validated; oxccl has no NVLS.
    pub nvlsCTAs: c_int,
    /// Thread-block cluster size (0-8): validated; oxccl launches no clusters.
    pub cgaClusterSize: c_int,
    /// The algorithms this call may use (NCCL's names); NULL or empty: automatic.
    pub algSelection: *const c_char,
    /// 1 (the default): a selection that cannot be honoured is an error; 0: automatic instead.
    pub forceAlgSelection: c_int,
    /// NCCL_CTA_POLICY_* flags for this call; unset: the communicator's.
    pub CTAPolicy: c_int,
    /// An opaque tag shown with the call's INFO COLL line.
    pub userProfilerTag: u64,
    /// A CUDA event recorded once the call's kernel has launched, or NULL.
    pub launchCompletionEvent: *mut c_void,
}

/// The bytes NCCL reads from a caller's struct at most.
pub const COLL_CONFIG_BYTES: usize = size_of::<ncclCollConfig_t>();
/// NCCL_VERSION(2,32,3), as the initializer stamps it.
const INITIALIZER_VERSION: c_uint = 23203;
/// NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO: the largest CTAPolicy value.
pub const CTA_POLICY_MAX: c_int = 3;

/// NCCL_COLLCONFIG_INITIALIZER.
pub fn coll_config_initializer() -> ncclCollConfig_t {
    ncclCollConfig_t {
        size: COLL_CONFIG_BYTES,
        magic: NCCL_CONFIG_MAGIC,
        version: INITIALIZER_VERSION,
        ext: std::ptr::null_mut(),
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        nvlsCTAs: UNDEF,
        cgaClusterSize: UNDEF,
        algSelection: std::ptr::null(),
        forceAlgSelection: 1,
        CTAPolicy: UNDEF,
        userProfilerTag: 0,
        launchCompletionEvent: std::ptr::null_mut(),
    }
}

/// A parsed ncclCollConfig_t: the caller's values, checked as ncclParseCollConfig checks them,
/// copied out so that nothing of the caller's is read after the call returns (a group launches
/// later). Integer fields keep NCCL_CONFIG_UNDEF_INT for "unset".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollConfigArgs {
    /// `minCTAs`.
    pub min_ctas: i32,
    /// `maxCTAs`.
    pub max_ctas: i32,
    /// `nvlsCTAs`.
    pub nvls_ctas: i32,
    /// `cgaClusterSize`.
    pub cga_cluster_size: i32,
    /// `algSelection`'s text; None for NULL.
    pub alg_selection: Option<String>,
    /// `forceAlgSelection` (checked to be 0 or 1).
    pub force: bool,
    /// `CTAPolicy` (checked: unset or 0-3).
    pub cta_policy: i32,
    /// `userProfilerTag`.
    pub tag: u64,
    /// `launchCompletionEvent` as an address; 0 for NULL.
    pub event: usize,
}

/// The environment settings that take precedence over a call's config in NCCL 2.32.3 (each None
/// when unset or malformed): NCCL_CTA_POLICY, NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_NVLS_NCHANNELS,
/// NCCL_CGA_CLUSTER_SIZE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvCtas {
    /// NCCL_CTA_POLICY (any value: the communicator's policy stands).
    pub cta_policy: Option<i64>,
    /// NCCL_MIN_CTAS.
    pub min_ctas: Option<i64>,
    /// NCCL_MAX_CTAS.
    pub max_ctas: Option<i64>,
    /// NCCL_NVLS_NCHANNELS.
    pub nvls_ctas: Option<i64>,
    /// NCCL_CGA_CLUSTER_SIZE.
    pub cga_cluster_size: Option<i64>,
}

/// The process's `EnvCtas`, read once (NCCL caches its parameters too).
pub fn env_ctas() -> &'static EnvCtas {
    static ONCE: std::sync::OnceLock<EnvCtas> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let undef = i64::from(UNDEF);
        let get = |name: &str| super::env(name).map(|_| super::env_i64(name, undef)).filter(|&v| v != undef);
        EnvCtas {
            cta_policy: get("NCCL_CTA_POLICY"),
            min_ctas: get("NCCL_MIN_CTAS"),
            max_ctas: get("NCCL_MAX_CTAS"),
            nvls_ctas: get("NCCL_NVLS_NCHANNELS"),
            cga_cluster_size: get("NCCL_CGA_CLUSTER_SIZE"),
        }
    })
}

/// NCCL's memcpy of the caller's bytes over the initializer's defaults with a zero magic, so a
/// struct too short to hold the magic is rejected.
pub fn overlay(caller: &[u8]) -> ncclCollConfig_t {
    let mut raw = coll_config_initializer();
    raw.magic = 0;
    let n = caller.len().min(COLL_CONFIG_BYTES);
    // SAFETY: ncclCollConfig_t is integers and raw pointers (any bit pattern valid; its one
    // padding-free layout is checked by the size test below) and `n` is at most its size.
    unsafe { std::ptr::copy_nonoverlapping(caller.as_ptr(), &mut raw as *mut ncclCollConfig_t as *mut u8, n) };
    raw
}

/// ncclParseCollConfig: None for a NULL config (the plain call); else the caller's values, or
/// ncclInvalidArgument for a bad magic, a forceAlgSelection other than 0 or 1, or a CTAPolicy
/// other than unset or 0-3 (NCCL's messages, NCCL's order).
pub fn parse_coll_config(config: *const ncclCollConfig_t) -> Result<Option<CollConfigArgs>> {
    if config.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-NULL config points to a caller's struct of at least `size` bytes (nccl.h's
    // contract); `size` itself is always there.
    let size = unsafe { std::ptr::read_unaligned(config as *const usize) };
    let n = size.min(COLL_CONFIG_BYTES);
    // SAFETY: as above, `n` bytes of the caller's struct are readable.
    let bytes = unsafe { std::slice::from_raw_parts(config as *const u8, n) };
    let raw = overlay(bytes);
    check(&raw)?;
    let alg_selection = (!raw.algSelection.is_null()).then(|| {
        // SAFETY: a non-NULL algSelection is a NUL-terminated string the caller keeps valid for
        // the call (nccl.h); it is copied here.
        unsafe { CStr::from_ptr(raw.algSelection) }.to_string_lossy().into_owned()
    });
    Ok(Some(CollConfigArgs {
        min_ctas: raw.minCTAs,
        max_ctas: raw.maxCTAs,
        nvls_ctas: raw.nvlsCTAs,
        cga_cluster_size: raw.cgaClusterSize,
        alg_selection,
        force: raw.forceAlgSelection == 1,
        cta_policy: raw.CTAPolicy,
        tag: raw.userProfilerTag,
        event: raw.launchCompletionEvent as usize,
    }))
}

/// ncclParseCollConfig's checks on the overlaid struct.
fn check(raw: &ncclCollConfig_t) -> Result<()> {
    if raw.magic != NCCL_CONFIG_MAGIC {
        return Err(Error::invalid_argument(format!("ncclCollConfig_t magic mismatch (got {:#x}, expected {:#x})", raw.magic, NCCL_CONFIG_MAGIC)));
    }
    if raw.forceAlgSelection != 0 && raw.forceAlgSelection != 1 {
        return Err(Error::invalid_argument(format!("config->forceAlgSelection={} is invalid, accepted values are 0 or 1", raw.forceAlgSelection)));
    }
    if raw.CTAPolicy != UNDEF && !(0..=CTA_POLICY_MAX).contains(&raw.CTAPolicy) {
        return Err(Error::invalid_argument(format!("config->CTAPolicy={} is invalid, accepted values are [1, {CTA_POLICY_MAX}]", raw.CTAPolicy)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;
    use std::mem::offset_of;

    #[test]
    fn layout_is_nccl_2_32_3s() {
        assert_eq!(COLL_CONFIG_BYTES, 72);
        assert_eq!(offset_of!(ncclCollConfig_t, ext), 16);
        assert_eq!(offset_of!(ncclCollConfig_t, minCTAs), 24);
        assert_eq!(offset_of!(ncclCollConfig_t, algSelection), 40);
        assert_eq!(offset_of!(ncclCollConfig_t, forceAlgSelection), 48);
        assert_eq!(offset_of!(ncclCollConfig_t, CTAPolicy), 52);
        assert_eq!(offset_of!(ncclCollConfig_t, userProfilerTag), 56);
        assert_eq!(offset_of!(ncclCollConfig_t, launchCompletionEvent), 64);
        assert_eq!(size_of::<ncclConfigExt_t>(), 24);
    }

    fn parse(c: &ncclCollConfig_t) -> Result<Option<CollConfigArgs>> {
        parse_coll_config(c)
    }

    #[test]
    fn null_is_the_plain_call_and_the_initializer_is_all_defaults() {
        assert_eq!(parse_coll_config(std::ptr::null()).unwrap(), None);
        let a = parse(&coll_config_initializer()).unwrap().unwrap();
        assert_eq!(
            a,
            CollConfigArgs { min_ctas: UNDEF, max_ctas: UNDEF, nvls_ctas: UNDEF, cga_cluster_size: UNDEF, alg_selection: None, force: true, cta_policy: UNDEF, tag: 0, event: 0 }
        );
    }

    #[test]
    fn checks_come_in_nccls_order_with_its_messages() {
        let mut c = coll_config_initializer();
        c.magic = 1;
        c.forceAlgSelection = 2;
        let e = parse(&c).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidArgument);
        assert_eq!(e.msg, "ncclCollConfig_t magic mismatch (got 0x1, expected 0xcafebeef)");
        c.magic = NCCL_CONFIG_MAGIC;
        c.CTAPolicy = 4;
        assert_eq!(parse(&c).unwrap_err().msg, "config->forceAlgSelection=2 is invalid, accepted values are 0 or 1");
        c.forceAlgSelection = -1;
        assert_eq!(parse(&c).unwrap_err().msg, "config->forceAlgSelection=-1 is invalid, accepted values are 0 or 1");
        c.forceAlgSelection = 0;
        assert_eq!(parse(&c).unwrap_err().msg, "config->CTAPolicy=4 is invalid, accepted values are [1, 3]");
        c.CTAPolicy = -1;
        assert_eq!(parse(&c).unwrap_err().code, ResultCode::InvalidArgument);
        for ok in [0, 1, 2, 3, UNDEF] {
            c.CTAPolicy = ok;
            assert_eq!(parse(&c).unwrap().unwrap().cta_policy, ok);
        }
        // Out-of-range counts are not parse errors (NCCL ignores them later, with an INFO line).
        c.maxCTAs = -5;
        c.minCTAs = 1000;
        c.cgaClusterSize = 99;
        assert!(parse(&c).is_ok());
    }

    #[test]
    fn only_the_callers_size_is_read() {
        // NCCL 2.32.3 (probed): size 8 or 0 leaves the magic unread, a mismatch; size 16 reads
        // the magic and nothing after it; `version` is never consulted.
        let mut c = coll_config_initializer();
        c.forceAlgSelection = 7;
        c.version = 1;
        for (size, ok) in [(0, false), (8, false), (16, true), (48, true), (52, false), (72, false), (4096, false)] {
            c.size = size;
            assert_eq!(parse(&c).is_ok(), ok, "size {size}");
        }
        c.size = 16;
        assert!(parse(&c).unwrap().unwrap().force, "fields past the size keep their defaults");
        let zero: ncclCollConfig_t = unsafe { std::mem::zeroed() };
        assert!(parse(&zero).unwrap_err().msg.contains("magic mismatch (got 0x0"));
    }

    #[test]
    fn strings_and_events_are_copied_out() {
        let text = c"RING_LL, TREE";
        let mut c = coll_config_initializer();
        c.algSelection = text.as_ptr();
        c.userProfilerTag = 0x1234;
        c.launchCompletionEvent = 0x5000 as *mut c_void;
        let a = parse(&c).unwrap().unwrap();
        assert_eq!(a.alg_selection.as_deref(), Some("RING_LL, TREE"));
        assert_eq!((a.tag, a.event), (0x1234, 0x5000));
    }
}
