use super::text::{bitset_text_for_tests as bits, flags_text_for_tests as flags_text};
use super::*;
use crate::log::settings::Settings;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

fn entry(key: &str) -> &'static Entry {
    find(key).unwrap_or_else(|| panic!("{key} is not registered"))
}

#[test]
fn keys_are_sorted_unique_and_prefixed() {
    for w in REGISTRY.windows(2) {
        assert!(w[0].name() < w[1].name(), "{} before {}", w[0].name(), w[1].name());
    }
    for e in REGISTRY {
        assert!(e.name().starts_with("NCCL_") && e.name().bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'), "{}", e.name());
        assert!(!e.desc.is_empty(), "{} has no description", e.name());
        assert_eq!(e.conf_files, e.name() != "NCCL_CONF_FILE", "{}", e.name());
    }
}

/// NCCL 2.32.3's own registry (what its libnccl.so.2 lists with NCCL_PARAM_DUMP_ALL=1): the same
/// keys, C types and published flags here, so a program reads them alike from both.
#[test]
fn nccl_2_32_keys_have_nccls_types_and_flags() {
    let nccl = [
        ("NCCL_DEBUG", TypeId::Raw, "ncclDebugLogLevel", true),
        ("NCCL_DEBUG_FILE", TypeId::Cstr, "const char*", true),
        ("NCCL_DEBUG_LEVELS", TypeId::U32, "uint32_t", true),
        ("NCCL_DEBUG_SUBSYS", TypeId::U64, "uint64_t", true),
        ("NCCL_DEBUG_TIMESTAMP_FORMAT", TypeId::Cstr, "const char*", true),
        ("NCCL_DEBUG_TIMESTAMP_LEVELS", TypeId::U32, "uint32_t", true),
        ("NCCL_NO_CACHE", TypeId::Cstr, "const char*", false),
        ("NCCL_PARAM_DUMP_ALL", TypeId::Bool, "bool", false),
        ("NCCL_SET_THREAD_NAME", TypeId::Bool, "bool", true),
        ("NCCL_WARN_ENABLE_DEBUG_INFO", TypeId::Bool, "bool", false),
    ];
    for (key, ty, ty_str, published) in nccl {
        let e = entry(key);
        assert_eq!(e.kind.type_id(), ty, "{key}");
        assert_eq!(e.kind.type_str(), ty_str, "{key}");
        assert_eq!(e.published(), published, "{key}");
    }
}

#[test]
fn lookup_is_exact() {
    assert!(find("NCCL_DEBUG").is_some());
    for bad in ["DEBUG", "nccl_debug", "NCCL_DEBUG ", "NCCL_DEBU", "", "NCCL_SURELY_NOT_A_PARAM", "OXCCL_CHECK"] {
        assert!(find(bad).is_none(), "{bad:?}");
    }
}

#[test]
fn integers_take_c_syntax_and_fall_back_on_junk() {
    let e = entry("NCCL_IB_TIMEOUT");
    assert_eq!(e.resolve_text(None), (Value::I64(20), SetBy::Default));
    assert_eq!(e.resolve_text(Some("0x10")), (Value::I64(16), SetBy::EnvPlugin));
    assert_eq!(e.resolve_text(Some(" -3 ")), (Value::I64(-3), SetBy::EnvPlugin));
    assert_eq!(e.resolve_text(Some("12abc")), (Value::I64(20), SetBy::Default));
    assert_eq!(e.resolve_text(Some("")), (Value::I64(20), SetBy::Default));
    let undef = entry("NCCL_COMM_BLOCKING").resolve_text(None).0;
    assert_eq!(undef, Value::I64(i64::from(i32::MIN)));
}

#[test]
fn booleans_take_nccls_words_only() {
    let e = entry("NCCL_PARAM_DUMP_ALL");
    for (text, v) in [("1", true), ("t", true), ("TRUE", true), ("True", true), ("0", false), ("f", false), ("FALSE", false)] {
        assert_eq!(e.resolve_text(Some(text)), (Value::Bool(v), SetBy::EnvPlugin), "{text}");
    }
    // As NCCL 2.32.3: anything else (even "2", "yes", " 1") is the default.
    for text in ["2", "yes", " 1", "", "on"] {
        assert_eq!(e.resolve_text(Some(text)), (Value::Bool(false), SetBy::Default), "{text}");
    }
    let w = entry("NCCL_WARN_ENABLE_DEBUG_INFO");
    assert_eq!(w.resolve_text(Some("0x1")).0, Value::Bool(true), "read as the logger does: a C integer");
    assert_eq!(w.resolve_text(Some("2")).0, Value::Bool(true));
    assert_eq!(w.resolve_text(Some("T")), (Value::Bool(false), SetBy::Default));
}

#[test]
fn strings_empty_is_unset_except_where_the_logger_takes_it() {
    let e = entry("NCCL_SOCKET_IFNAME");
    assert_eq!(e.resolve_text(Some("")), (Value::Str(None), SetBy::Default));
    assert_eq!(e.resolve_text(Some("eth0")), (Value::Str(Some("eth0".into())), SetBy::EnvPlugin));
    let f = entry("NCCL_DEBUG_TIMESTAMP_FORMAT");
    assert_eq!(f.resolve_text(None), (Value::Str(Some("[%F %T] ".into())), SetBy::Default));
    assert_eq!(f.resolve_text(Some("")), (Value::Str(Some(String::new())), SetBy::EnvPlugin), "\"\" turns timestamps off");
}

#[test]
fn debug_settings_parse_as_the_logger_does() {
    let d = entry("NCCL_DEBUG");
    assert_eq!(d.resolve_text(None), (Value::Level(0), SetBy::Default));
    assert_eq!(d.resolve_text(Some("info")), (Value::Level(3), SetBy::EnvPlugin));
    assert_eq!(d.resolve_text(Some("bogus")), (Value::Level(0), SetBy::Default));
    let s = entry("NCCL_DEBUG_SUBSYS");
    assert_eq!(s.resolve_text(None).0, Value::U64(0x1081));
    assert_eq!(s.resolve_text(Some("INIT,COLL")).0, Value::U64(0x3));
    assert_eq!(s.resolve_text(Some("")), (Value::U64(0), SetBy::EnvPlugin), "an empty list is the empty mask");
    assert_eq!(s.resolve_text(Some("^INIT")).0, Value::U64(!1));
    let t = entry("NCCL_DEBUG_TIMESTAMP_LEVELS");
    assert_eq!(t.resolve_text(None), (Value::U32(1 << 2), SetBy::Default));
    assert_eq!(t.resolve_text(Some("INFO,WARN")).0, Value::U32(0xc));
    assert_eq!(entry("NCCL_DEBUG_LEVELS").resolve_text(None).0, Value::U32(0));
}

/// The registry's NCCL_DEBUG* values are the logger's own (log/settings.rs) for any text.
#[test]
fn debug_values_equal_the_loggers_settings() {
    let cases: [&[(&str, &str)]; 6] = [
        &[],
        &[("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_SUBSYS", "^COLL,P2P"), ("NCCL_WARN_ENABLE_DEBUG_INFO", "1")],
        &[("NCCL_DEBUG", "trace"), ("NCCL_DEBUG_SUBSYS", ""), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "ALL")],
        &[("NCCL_DEBUG", "nonsense"), ("NCCL_DEBUG_SUBSYS", "BOGUS,NET"), ("NCCL_WARN_ENABLE_DEBUG_INFO", "junk")],
        &[("NCCL_DEBUG", ""), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "^WARN"), ("NCCL_WARN_ENABLE_DEBUG_INFO", "0")],
        &[("NCCL_DEBUG", "ABORT"), ("NCCL_DEBUG_TIMESTAMP_LEVELS", ""), ("NCCL_WARN_ENABLE_DEBUG_INFO", "")],
    ];
    for vars in cases {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let get = |k: &str| map.get(k).map(|v| v.to_string());
        let s = Settings::from_lookup(get);
        let value = |k: &str| entry(k).resolve_text(map.get(k).copied()).0;
        assert_eq!(value("NCCL_DEBUG"), Value::Level(s.level as i32), "{vars:?}");
        assert_eq!(value("NCCL_DEBUG_SUBSYS"), Value::U64(s.mask), "{vars:?}");
        assert_eq!(value("NCCL_DEBUG_TIMESTAMP_LEVELS"), Value::U32(s.timestamp_levels), "{vars:?}");
        assert_eq!(value("NCCL_WARN_ENABLE_DEBUG_INFO"), Value::Bool(s.warn_enables_info), "{vars:?}");
    }
}

#[test]
fn text_matches_nccls_to_string() {
    // Strings NCCL 2.32.3 itself gives for these values.
    assert_eq!(bits(0x1081, false), "INIT,ENV,BOOTSTRAP");
    assert_eq!(bits(!0, false), "ALL");
    assert_eq!(bits(0, false), "NONE");
    assert_eq!(bits(0x3, false), "INIT,COLL");
    assert_eq!(bits(!1 & 0xffff, false), "COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,CALL,PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS");
    assert_eq!(bits(0xc, true), "WARN,INFO");
    assert_eq!(bits(0x4, true), "WARN");
    assert_eq!(bits(0, true), "NONE");
    assert_eq!(bits(u64::from(u32::MAX), true), "ALL", "oxccl's ALL sets every bit");
    let d = entry("NCCL_DEBUG");
    assert_eq!(d.text(&Value::Level(0)), "<unknown>");
    assert_eq!(d.text(&Value::Level(3)), "INFO");
    assert_eq!(d.text(&Value::Level(5)), "TRACE");
    let b = entry("NCCL_SET_THREAD_NAME");
    assert_eq!(b.text(&Value::Bool(true)), "TRUE");
    assert_eq!(b.text(&Value::Bool(false)), "FALSE");
    assert_eq!(entry("NCCL_IB_GID_INDEX").text(&Value::I64(-1)), "-1");
    assert_eq!(entry("NCCL_DEBUG_FILE").text(&Value::Str(None)), "");
    // Every value's text parses back to it (the names are ones oxccl's parsers accept).
    // (Inverted lists name only the known bits, as in NCCL, so they do not read back.)
    for (key, text) in [("NCCL_DEBUG_SUBSYS", "INIT,ENV,BOOTSTRAP"), ("NCCL_DEBUG_SUBSYS", "ALL"), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO,WARN"), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "ALL"), ("NCCL_DEBUG", "WARN")] {
        let e = entry(key);
        let v = e.resolve_text(Some(text)).0;
        assert_eq!(e.resolve_text(Some(&e.text(&v))).0, v, "{key}={text}");
    }
}

#[test]
fn bytes_are_the_c_objects() {
    assert_eq!(Value::I64(-2).to_bytes(), (-2i64).to_ne_bytes());
    assert_eq!(Value::U32(7).to_bytes(), 7u32.to_ne_bytes());
    assert_eq!(Value::U64(0x1081).to_bytes(), 0x1081u64.to_ne_bytes());
    assert_eq!(Value::Bool(true).to_bytes(), [1]);
    assert_eq!(Value::Level(3).to_bytes(), 3i32.to_ne_bytes());
    assert_eq!(Value::Str(Some("[%F %T] ".into())).to_bytes(), b"[%F %T] \0");
    assert_eq!(Value::Str(None).to_bytes(), [0], "NULL reads as the empty string, as NCCL's");
}

#[test]
fn flags_read_as_nccls() {
    assert_eq!(flags_text(FLAG_PUBLISHED), "");
    assert_eq!(flags_text(0), "Private");
    assert_eq!(flags_text(FLAG_PUBLISHED | FLAG_CACHED), "Cached");
    assert_eq!(flags_text(FLAG_UNUSED), "Private, Unused");
}

#[test]
fn dump_has_nccls_layout() {
    let e = entry("NCCL_PARAM_DUMP_ALL");
    assert_eq!(
        text::dump(e, &Value::Bool(true), SetBy::EnvPlugin),
        "NCCL_PARAM_DUMP_ALL (bool) [Private] Print all parameters including private ones\n    Current value=TRUE set_by=EnvPlugin default=FALSE\n    Accepted value: Boolean: 1/T/TRUE or 0/F/FALSE\n"
    );
    let f = entry("NCCL_DEBUG_FILE");
    let d = text::dump(f, &Value::Str(None), SetBy::Default);
    assert!(d.starts_with("NCCL_DEBUG_FILE (const char*) [] Set the NCCL debug"), "{d}");
    assert!(d.contains("\n    Current value=<unset> set_by=Default default=<unset>\n    Accepted value: String\n"), "{d}");
    let s = text::dump(entry("NCCL_DEBUG_SUBSYS"), &Value::U64(0x1081), SetBy::Default);
    assert!(s.contains("Current value=INIT,ENV,BOOTSTRAP set_by=Default default=INIT,ENV,BOOTSTRAP\n"), "{s}");
    assert!(s.contains("\n        INIT - NCCL and comm initialization"), "{s}");
}

#[test]
fn listings_show_published_unless_all() {
    let published: Vec<&str> = listed(false).map(Entry::name).collect();
    assert!(published.contains(&"NCCL_DEBUG") && !published.contains(&"NCCL_PARAM_DUMP_ALL"));
    assert_eq!(listed(true).count(), REGISTRY.len());
    assert!(published.len() < REGISTRY.len());
    let text = dump_all(false);
    assert!(text.starts_with("=== ncclParam Registry Dump ===\nNCCL_"), "{text}");
    assert_eq!(text.matches("\n    Current value=").count(), published.len());
    assert!(text.ends_with("\n\n"), "each entry is followed by a blank line, as NCCL's printf(\"%s\\n\")");
    assert_eq!(dump_all(true).matches("\n    Current value=").count(), REGISTRY.len());
}

/// One `reader("NCCL_KEY"[, default])` call in oxccl's non-test source.
#[derive(Debug)]
struct Read {
    file: String,
    reader: String,
    key: String,
    default: Option<String>,
}

/// Functions through which oxccl reads a setting by name (config::env*, comm_env's `param`, the
/// logger's `get`, the IB transport's `env_u8`, getenv's own lookups).
const READERS: [&str; 9] = ["env", "env_i64", "env_bool", "env_u8", "param", "get", "var_os", "raw_lookup", "lookup"];

/// Every `reader("NCCL_…"…)` in src/ outside tests, the binaries and this registry.
fn reads() -> Vec<Read> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for ent in std::fs::read_dir(&d).unwrap() {
            let p = ent.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in files {
        let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if rel.starts_with("bin/") || rel.starts_with("config/params/") || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (at, _) in code.match_indices("(\"NCCL_") {
            let before = &code[..at];
            let reader = before.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap();
            let rest = &code[at + 2..];
            let key_len = rest.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap();
            if !rest[key_len..].starts_with('"') || !READERS.contains(&reader) {
                continue; // a message, not a lookup
            }
            let after = &rest[key_len + 1..];
            let default = after.strip_prefix(", ").map(|d| d[..d.find(')').unwrap()].trim().to_string());
            out.push(Read { file: rel.clone(), reader: reader.to_string(), key: rest[..key_len].to_string(), default });
        }
    }
    out
}

/// Every NCCL_* setting oxccl reads is registered, with the default its reader uses; and every
/// registered setting that is not marked unused is read somewhere.
#[test]
fn registry_matches_the_readers() {
    let reads = reads();
    assert!(reads.len() > 30, "the scan found too little: {reads:?}");
    let undef = i64::from(crate::config::abi::NCCL_CONFIG_UNDEF_INT);
    for r in &reads {
        let e = find(&r.key).unwrap_or_else(|| panic!("{} reads {} ({}), which is not registered", r.file, r.key, r.reader));
        let expected = match (r.reader.as_str(), r.default.as_deref()) {
            ("env_i64" | "env_u8", Some(d)) => Some(Kind::Int(d.parse().unwrap_or_else(|_| panic!("{r:?}: default is not a literal")))),
            ("env_bool", Some("true")) => Some(Kind::Int(1)),
            ("env_bool", Some("false")) => Some(Kind::Int(0)),
            ("param", None) => Some(Kind::Int(undef)),
            ("env" | "raw_lookup" | "lookup" | "var_os" | "get", None) => None,
            _ => panic!("{r:?}: unexpected reader form"),
        };
        if let Some(k) = expected {
            assert_eq!(e.kind, k, "{} reads {} with default {:?}", r.file, r.key, r.default);
        }
    }
    // Registered but read by no reader: the registry's own flag, and NCCL's keys oxccl ignores.
    let read: BTreeSet<&str> = reads.iter().map(|r| r.key.as_str()).collect();
    let unread: Vec<&str> = REGISTRY.iter().map(Entry::name).filter(|k| !read.contains(k)).collect();
    assert_eq!(unread, ["NCCL_DEBUG_LEVELS", "NCCL_NO_CACHE", "NCCL_PARAM_DUMP_ALL", "NCCL_SET_THREAD_NAME"]);
    for k in unread {
        assert_eq!(entry(k).flags & FLAG_UNUSED != 0, k != "NCCL_PARAM_DUMP_ALL", "{k}");
    }
}
