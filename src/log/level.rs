//! Debug levels and subsystems, and the parsers for NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
//! NCCL_DEBUG_TIMESTAMP_LEVELS (NCCL 2.28.9 src/debug.cc, ncclDebugInit).

/// `ncclDebugLogLevel`: the order matters, a message is shown when its level <= NCCL_DEBUG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// NCCL_DEBUG unset or NONE: nothing is printed.
    None = 0,
    /// NCCL_DEBUG=VERSION: the version line only.
    Version = 1,
    /// NCCL_DEBUG=WARN: failures, each with why.
    Warn = 2,
    /// NCCL_DEBUG=INFO: what the library decided and set up.
    Info = 3,
    /// NCCL_DEBUG=ABORT: as INFO, and a WARN aborts the process (NCCL's debugging aid).
    Abort = 4,
    /// NCCL_DEBUG=TRACE: every call and choice (NCCL_DEBUG_SUBSYS filters).
    Trace = 5,
}

/// `ncclDebugLogSubSys`: one bit each, in NCCL's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subsys {
    /// INIT: communicator creation and teardown.
    Init,
    /// COLL: collective calls and their algorithms.
    Coll,
    /// P2P: point-to-point calls and transfers.
    P2p,
    /// SHM: shared memory.
    Shm,
    /// NET: network transports.
    Net,
    /// GRAPH: topology.
    Graph,
    /// TUNING: algorithm and protocol choice.
    Tuning,
    /// ENV: environment variables read.
    Env,
    /// ALLOC: memory allocation.
    Alloc,
    /// CALL: API calls (at TRACE).
    Call,
    /// PROXY: the host proxy threads.
    Proxy,
    /// NVLS: NVLink SHARP (unused by oxccl).
    Nvls,
    /// BOOTSTRAP: rendezvous and out-of-band exchanges.
    Bootstrap,
    /// REG: buffer registration.
    Reg,
    /// PROFILE: profiling.
    Profile,
    /// RAS: reliability (unused by oxccl).
    Ras,
}

/// NCCL_ALL: the flags WARN and VERSION messages carry, so only an empty mask hides them.
pub const ALL_SUBSYS: u64 = !0;

/// NCCL's default mask when NCCL_DEBUG_SUBSYS is unset: INIT|BOOTSTRAP|ENV.
pub const DEFAULT_SUBSYS_MASK: u64 = Subsys::Init.bit() | Subsys::Bootstrap.bit() | Subsys::Env.bit();

const SUBSYS_NAMES: [(&str, Subsys); 16] = [
    ("INIT", Subsys::Init),
    ("COLL", Subsys::Coll),
    ("P2P", Subsys::P2p),
    ("SHM", Subsys::Shm),
    ("NET", Subsys::Net),
    ("GRAPH", Subsys::Graph),
    ("TUNING", Subsys::Tuning),
    ("ENV", Subsys::Env),
    ("ALLOC", Subsys::Alloc),
    ("CALL", Subsys::Call),
    ("PROXY", Subsys::Proxy),
    ("NVLS", Subsys::Nvls),
    ("BOOTSTRAP", Subsys::Bootstrap),
    ("REG", Subsys::Reg),
    ("PROFILE", Subsys::Profile),
    ("RAS", Subsys::Ras),
];

impl Subsys {
    /// The subsystem's bit in NCCL's mask (NCCL_INIT = 0x1 ... NCCL_RAS = 0x8000).
    pub const fn bit(self) -> u64 {
        1u64 << (self as u32)
    }

    /// The name NCCL_DEBUG_SUBSYS uses for it.
    pub fn name(self) -> &'static str {
        SUBSYS_NAMES[self as usize].0
    }
}

impl Level {
    /// Inverse of `as i32`, for values kept in atomics.
    pub fn from_i32(v: i32) -> Option<Level> {
        Some(match v {
            0 => Level::None,
            1 => Level::Version,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Abort,
            5 => Level::Trace,
            _ => return None,
        })
    }
}

/// NCCL_DEBUG: one of the level names, case-insensitive. Anything else (empty included) is
/// `None`: NCCL then leaves its level "uninitialised", which shows nothing.
pub fn parse_level(value: &str) -> Level {
    const NAMES: [(&str, Level); 5] = [
        ("VERSION", Level::Version),
        ("WARN", Level::Warn),
        ("INFO", Level::Info),
        ("ABORT", Level::Abort),
        ("TRACE", Level::Trace),
    ];
    NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(value))
        .map_or(Level::None, |&(_, l)| l)
}

/// NCCL_DEBUG_SUBSYS, `None` meaning unset. A comma list (empty items skipped, as strtok does;
/// no whitespace trimming, as in NCCL); a leading `^` starts from all bits and clears the
/// listed ones. Unknown names are ignored.
pub fn parse_subsys_mask(value: Option<&str>) -> u64 {
    let Some(value) = value else { return DEFAULT_SUBSYS_MASK };
    let (invert, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let mut mask = if invert { !0u64 } else { 0 };
    for item in list.split(',').filter(|s| !s.is_empty()) {
        let bits = if item.eq_ignore_ascii_case("ALL") {
            ALL_SUBSYS
        } else {
            SUBSYS_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(item))
                .map_or(0, |&(_, s)| s.bit())
        };
        if invert {
            mask &= !bits;
        } else {
            mask |= bits;
        }
    }
    mask
}

/// NCCL_DEBUG_TIMESTAMP_LEVELS, `None` meaning unset: a bitmap of `1 << level` for the levels
/// whose lines start with a timestamp. Default: WARN only. Same list syntax as the subsystems.
pub fn parse_timestamp_levels(value: Option<&str>) -> u32 {
    let Some(value) = value else { return 1 << Level::Warn as u32 };
    let (invert, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let mut levels = if invert { !0u32 } else { 0 };
    for item in list.split(',').filter(|s| !s.is_empty()) {
        let bits = if item.eq_ignore_ascii_case("ALL") {
            !0u32
        } else {
            match parse_level(item) {
                Level::None => 0, // NCCL: "Silently fail."
                l => 1u32 << l as u32,
            }
        };
        if invert {
            levels &= !bits;
        } else {
            levels |= bits;
        }
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_case_insensitively() {
        assert_eq!(parse_level("VERSION"), Level::Version);
        assert_eq!(parse_level("warn"), Level::Warn);
        assert_eq!(parse_level("Info"), Level::Info);
        assert_eq!(parse_level("abort"), Level::Abort);
        assert_eq!(parse_level("TRACE"), Level::Trace);
        assert_eq!(parse_level(""), Level::None);
        assert_eq!(parse_level("INFO "), Level::None);
        assert_eq!(parse_level("verbose"), Level::None);
        assert!(Level::Warn < Level::Info && Level::Abort < Level::Trace);
        for v in 0..6 {
            assert_eq!(Level::from_i32(v).map(|l| l as i32), Some(v));
        }
        assert_eq!(Level::from_i32(-1), None);
    }

    #[test]
    fn subsys_bits_match_nccl() {
        assert_eq!(Subsys::Init.bit(), 0x1);
        assert_eq!(Subsys::Env.bit(), 0x80);
        assert_eq!(Subsys::Call.bit(), 0x200);
        assert_eq!(Subsys::Bootstrap.bit(), 0x1000);
        assert_eq!(Subsys::Ras.bit(), 0x8000);
        assert_eq!(Subsys::Nvls.name(), "NVLS");
        assert_eq!(DEFAULT_SUBSYS_MASK, 0x1 | 0x1000 | 0x80);
    }

    #[test]
    fn subsys_lists() {
        assert_eq!(parse_subsys_mask(None), DEFAULT_SUBSYS_MASK);
        assert_eq!(parse_subsys_mask(Some("INIT,COLL")), 0x3);
        assert_eq!(parse_subsys_mask(Some("net,,graph")), 0x10 | 0x20);
        assert_eq!(parse_subsys_mask(Some("ALL")), !0);
        assert_eq!(parse_subsys_mask(Some("")), 0);
        assert_eq!(parse_subsys_mask(Some("BOGUS")), 0);
        assert_eq!(parse_subsys_mask(Some(" INIT")), 0, "no trimming, as strcasecmp");
        assert_eq!(parse_subsys_mask(Some("^COLL")), !0x2);
        assert_eq!(parse_subsys_mask(Some("^COLL,P2P")), !0x6);
        assert_eq!(parse_subsys_mask(Some("^")), !0);
        assert_eq!(parse_subsys_mask(Some("^ALL")), 0);
        assert_eq!(parse_subsys_mask(Some("INIT,^COLL")), 0x1, "^ only counts in front");
    }

    #[test]
    fn timestamp_level_lists() {
        assert_eq!(parse_timestamp_levels(None), 1 << 2);
        assert_eq!(parse_timestamp_levels(Some("INFO,WARN")), (1 << 3) | (1 << 2));
        assert_eq!(parse_timestamp_levels(Some("^WARN")), !(1 << 2));
        assert_eq!(parse_timestamp_levels(Some("ALL")), !0);
        assert_eq!(parse_timestamp_levels(Some("")), 0);
        assert_eq!(parse_timestamp_levels(Some("nonsense")), 0);
    }
}
