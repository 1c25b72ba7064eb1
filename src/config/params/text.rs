//! Parameters as text: NCCL's toString of each type and the dump format of ncclParamDumpAll
//! (NCCL 2.30.7 src/include/param/param.h dump(), parser_*.h toString and desc). Names are the
//! ones oxccl's logger accepts, so that a value's text reads back to the same value.

use super::{Entry, Kind, SetBy, Value, FLAG_CACHED, FLAG_DEPRECATED, FLAG_PUBLISHED, FLAG_UNUSED};

/// NCCL_DEBUG's levels (ncclDebugLogLevel values), with NCCL 2.32.3's descriptions.
const LEVELS: [(&str, i32, &str); 5] = [
    ("VERSION", 1, "Prints NCCL version information only."),
    ("WARN", 2, "Prints error messages."),
    ("INFO", 3, "Prints debug information."),
    ("ABORT", 4, "Like INFO, and a WARN aborts the process."),
    ("TRACE", 5, "Prints replayable trace information on all calls."),
];

/// NCCL_DEBUG_SUBSYS's names and bits (ncclDebugLogSubSys), with NCCL 2.32.3's descriptions.
const SUBSYS: [(&str, u64, &str); 17] = [
    ("INIT", 0x1, "NCCL and comm initialization (included in default)"),
    ("COLL", 0x2, "Collective operations"),
    ("P2P", 0x4, "Peer-to-peer transport"),
    ("SHM", 0x8, "Shared memory transport"),
    ("NET", 0x10, "Network transport"),
    ("GRAPH", 0x20, "Graph search and topology"),
    ("TUNING", 0x40, "Algorithm tuning"),
    ("ENV", 0x80, "Parameter settings by config file or environment (included in default)"),
    ("ALLOC", 0x100, "Device memory allocation"),
    ("CALL", 0x200, "API call tracing"),
    ("PROXY", 0x400, "Proxy thread operations"),
    ("NVLS", 0x800, "NVLink SHARP operations"),
    ("BOOTSTRAP", 0x1000, "Bootstrap network (included in default)"),
    ("REG", 0x2000, "Buffer registration"),
    ("PROFILE", 0x4000, "Profiling"),
    ("RAS", 0x8000, "Reliability, availability, serviceability"),
    ("ALL", !0, "All categories"),
];

/// Level bitmaps (`1 << level`): NCCL_DEBUG_TIMESTAMP_LEVELS and NCCL_DEBUG_LEVELS. oxccl's ALL
/// sets every bit.
const LEVEL_BITS: [(&str, u64, &str); 6] = [
    ("VERSION", 1 << 1, "NCCL version information"),
    ("WARN", 1 << 2, "Error messages"),
    ("INFO", 1 << 3, "Debug messages"),
    ("ABORT", 1 << 4, "Like INFO, and a WARN aborts the process"),
    ("TRACE", 1 << 5, "Replayable trace messages"),
    ("ALL", u32::MAX as u64, "All messages"),
];

/// NCCL's bitset toString: an option equal to the whole value (ALL) names it, else the set
/// single-bit options in table order, joined by commas; "NONE" when none is set.
fn bitset_text(value: u64, options: &[(&str, u64, &str)]) -> String {
    if let Some((name, _, _)) = options.iter().find(|o| o.1 == value) {
        return name.to_string();
    }
    let names: Vec<&str> = options
        .iter()
        .filter(|o| o.1.is_power_of_two() && value & o.1 == o.1)
        .map(|o| o.0)
        .collect();
    if names.is_empty() {
        "NONE".to_string()
    } else {
        names.join(",")
    }
}

/// "Comma-separated list of:" and one indented line per option, as NCCL's bitset parsers say.
fn options_text(head: &str, options: &[(&str, impl Copy, &str)]) -> String {
    let mut s = head.to_string();
    for (name, _, desc) in options {
        s.push_str("\n        ");
        s.push_str(name);
        s.push_str(" - ");
        s.push_str(desc);
    }
    s
}

/// The value as NCCL's parsers' toString write it.
pub fn value_text(kind: Kind, v: &Value) -> String {
    match (kind, v) {
        (Kind::SubsysMask, Value::U64(m)) => bitset_text(*m, &SUBSYS),
        (Kind::LevelMask(_), Value::U32(m)) => bitset_text(u64::from(*m), &LEVEL_BITS),
        (_, Value::I64(n)) => n.to_string(),
        (_, Value::U32(n)) => n.to_string(),
        (_, Value::U64(n)) => n.to_string(),
        (_, Value::Bool(b)) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        (_, Value::Str(s)) => s.clone().unwrap_or_default(),
        (_, Value::Level(l)) => LEVELS.iter().find(|o| o.1 == *l).map_or("<unknown>", |o| o.0).to_string(),
    }
}

/// What the parameter accepts (NCCL's parser `desc`).
fn accepted(kind: Kind) -> String {
    match kind {
        Kind::Int(_) => "Integer (C syntax: 10, 0x10, 010)".to_string(),
        Kind::Bool(_) => "Boolean: 1/T/TRUE or 0/F/FALSE".to_string(),
        Kind::IntBool(_) => "Integer: 0 is FALSE, any other value TRUE".to_string(),
        Kind::Str(_) | Kind::Text(_) => "String".to_string(),
        Kind::DebugLevel => options_text("One of:", &LEVELS),
        Kind::SubsysMask => options_text("Comma-separated list (a leading ^ removes them from ALL) of:", &SUBSYS),
        Kind::LevelMask(_) => options_text("Comma-separated list (a leading ^ removes them from ALL) of:", &LEVEL_BITS),
    }
}

/// NCCL's flagsStr: "Private" unless published, then the other flags, comma-separated.
fn flags_text(flags: u64) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if flags & FLAG_PUBLISHED == 0 {
        parts.push("Private");
    }
    for (bit, name) in [(FLAG_DEPRECATED, "Deprecated"), (FLAG_CACHED, "Cached"), (FLAG_UNUSED, "Unused")] {
        if flags & bit != 0 {
            parts.push(name);
        }
    }
    parts.join(", ")
}

/// NCCL's dump() of one parameter: "KEY (type) [flags] desc", the value with where it came from
/// and the default, then what it accepts; empty values read "<unset>".
pub fn dump(e: &Entry, value: &Value, set_by: SetBy) -> String {
    let shown = |s: String| if s.is_empty() { "<unset>".to_string() } else { s };
    format!(
        "{} ({}) [{}] {}\n    Current value={} set_by={} default={}\n    Accepted value: {}\n",
        e.name(),
        e.kind.type_str(),
        flags_text(e.flags),
        e.desc,
        shown(e.text(value)),
        set_by.word(),
        shown(e.text(&e.kind.default_value())),
        accepted(e.kind),
    )
}

#[cfg(test)]
pub(super) fn bitset_text_for_tests(value: u64, levels: bool) -> String {
    bitset_text(value, if levels { &LEVEL_BITS } else { &SUBSYS })
}

#[cfg(test)]
pub(super) fn flags_text_for_tests(flags: u64) -> String {
    flags_text(flags)
}
