//! The parameter registry behind NCCL 2.32's ncclParam* API: one table (`table.rs`) of every
//! NCCL_* setting oxccl reads, with its C type, default, description and whether NCCL's
//! documentation publishes it, and the values those settings have now.
//!
//! Scope follows NCCL's registry (NCCL 2.30.7 src/include/param/param_registry.h): NCCL's own
//! parameters, keyed by their full environment names (`NCCL_DEBUG`, never `DEBUG`). oxccl's
//! `OXCCL_*` tuning knobs are not NCCL parameters and stay out. NCCL 2.32.3 registers only its
//! ten NCCL_DEBUG*/param-system keys; every one of those is here with NCCL's type, so a program
//! written against NCCL reads them alike. The other NCCL_* settings oxccl reads are here too,
//! typed as NCCL's legacy `NCCL_PARAM`s are (int64_t) or as strings.
//!
//! Values are resolved at each query, as NCCL's uncached parameters are: the environment, then
//! the nccl.conf files (getenv/), then the default. A setting that oxccl's reader takes once
//! (say at the first communicator) is reported with its current value, which may differ from the
//! one that reader kept.

mod table;
mod text;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::ffi::CStr;

use parking_lot::Mutex;

use crate::getenv;
use crate::log::level::{self as log_level, Level};
use crate::log::Subsys;

pub use table::REGISTRY;

/// NCCL_PARAM_FLAG_PUBLISHED: documented in NCCL's environment-variable guide.
pub const FLAG_PUBLISHED: u64 = 1 << 0;
/// NCCL_PARAM_FLAG_DEPRECATED.
pub const FLAG_DEPRECATED: u64 = 1 << 1;
/// NCCL_PARAM_FLAG_CACHED: read once; later changes have no effect.
pub const FLAG_CACHED: u64 = 1 << 2;
/// NCCL_PARAM_FLAG_UNUSED: setting it has no effect (in oxccl).
pub const FLAG_UNUSED: u64 = 1 << 3;

/// NCCL's `ncclParamTypeId_t` (NCCL 2.30.7 src/include/param/common.h): the C type a parameter
/// holds; the typed getters accept only their own type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeId {
    /// int8_t.
    I8 = 1,
    /// int16_t.
    I16,
    /// int32_t.
    I32,
    /// int64_t.
    I64,
    /// uint8_t.
    U8,
    /// uint16_t.
    U16,
    /// uint32_t.
    U32,
    /// uint64_t.
    U64,
    /// bool.
    Bool,
    /// const char*.
    Cstr,
    /// Anything else (an enum such as ncclDebugLogLevel), readable only as bytes or text.
    Raw,
}

impl TypeId {
    /// The C type's name, for error messages.
    pub fn c_name(self) -> &'static str {
        match self {
            TypeId::I8 => "int8_t",
            TypeId::I16 => "int16_t",
            TypeId::I32 => "int32_t",
            TypeId::I64 => "int64_t",
            TypeId::U8 => "uint8_t",
            TypeId::U16 => "uint16_t",
            TypeId::U32 => "uint32_t",
            TypeId::U64 => "uint64_t",
            TypeId::Bool => "bool",
            TypeId::Cstr => "const char*",
            TypeId::Raw => "raw",
        }
    }
}

/// How a parameter's text becomes its value, each kind with its default. Each mirrors the rule
/// of the oxccl reader of that setting, so that the value reported is the one oxccl uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// int64_t in C syntax (10, 0x10, 010), as `config::env_i64` and NCCL's legacy parameters;
    /// empty or malformed text gives the default.
    Int(i64),
    /// bool in NCCL 2.32's syntax: 1/T/TRUE or 0/F/FALSE, any case; other text gives the default.
    Bool(bool),
    /// bool read as a C integer, non-zero being true; malformed text gives the default (oxccl's
    /// logger reads NCCL_WARN_ENABLE_DEBUG_INFO so, as NCCL 2.28 did).
    IntBool(bool),
    /// const char*; empty text counts as unset, as `config::env` treats it.
    Str(Option<&'static str>),
    /// const char* where empty text is a value (the logger's NCCL_DEBUG_FILE and
    /// NCCL_DEBUG_TIMESTAMP_FORMAT, where "" turns timestamps off; NCCL 2.32's strings).
    Text(Option<&'static str>),
    /// ncclDebugLogLevel, parsed by the logger's `parse_level`; unset is NCCL_LOG_NONE (0).
    DebugLevel,
    /// uint64_t NCCL_DEBUG_SUBSYS mask, parsed by the logger's `parse_subsys_mask`.
    SubsysMask,
    /// uint32_t bitmap of `1 << level`, parsed by the logger's `parse_timestamp_levels`; the
    /// default applies when unset.
    LevelMask(u32),
}

impl Kind {
    /// The C type NCCL gives a parameter of this kind.
    pub fn type_id(self) -> TypeId {
        match self {
            Kind::Int(_) => TypeId::I64,
            Kind::Bool(_) | Kind::IntBool(_) => TypeId::Bool,
            Kind::Str(_) | Kind::Text(_) => TypeId::Cstr,
            Kind::DebugLevel => TypeId::Raw,
            Kind::SubsysMask => TypeId::U64,
            Kind::LevelMask(_) => TypeId::U32,
        }
    }

    /// The type as NCCL's dump spells it (its `#type` in DEFINE_NCCL_PARAM).
    pub fn type_str(self) -> &'static str {
        match self {
            Kind::DebugLevel => "ncclDebugLogLevel",
            k => k.type_id().c_name(),
        }
    }

    /// The value when nothing sets the parameter.
    pub fn default_value(self) -> Value {
        match self {
            Kind::Int(d) => Value::I64(d),
            Kind::Bool(d) | Kind::IntBool(d) => Value::Bool(d),
            Kind::Str(d) | Kind::Text(d) => Value::Str(d.map(str::to_string)),
            Kind::DebugLevel => Value::Level(Level::None as i32),
            Kind::SubsysMask => Value::U64(log_level::parse_subsys_mask(None)),
            Kind::LevelMask(d) => Value::U32(d),
        }
    }

    /// The value `text` sets, or None when the reader would fall back to the default.
    pub fn parse(self, text: &str) -> Option<Value> {
        match self {
            Kind::Int(_) => getenv::parse_c_integer(text).ok().map(Value::I64),
            Kind::Bool(_) => parse_nccl_bool(text).map(Value::Bool),
            Kind::IntBool(_) => getenv::parse_c_integer(text).ok().map(|v| Value::Bool(v != 0)),
            Kind::Str(_) => (!text.is_empty()).then(|| Value::Str(Some(text.to_string()))),
            Kind::Text(_) => Some(Value::Str(Some(text.to_string()))),
            Kind::DebugLevel => match log_level::parse_level(text) {
                Level::None => None,
                l => Some(Value::Level(l as i32)),
            },
            Kind::SubsysMask => Some(Value::U64(log_level::parse_subsys_mask(Some(text)))),
            Kind::LevelMask(_) => Some(Value::U32(log_level::parse_timestamp_levels(Some(text)))),
        }
    }

    /// Whether an empty value counts as unset. The logger's own settings take "" as a value
    /// (an empty subsystem list is the empty mask); the other readers skip empty variables.
    fn empty_is_unset(self) -> bool {
        !matches!(self, Kind::SubsysMask | Kind::LevelMask(_) | Kind::Text(_))
    }
}

/// NCCL 2.32's bool parser (NCCL 2.30.7 src/include/param/parser_default.h): no trimming.
fn parse_nccl_bool(text: &str) -> Option<bool> {
    if text == "1" || text.eq_ignore_ascii_case("T") || text.eq_ignore_ascii_case("TRUE") {
        Some(true)
    } else if text == "0" || text.eq_ignore_ascii_case("F") || text.eq_ignore_ascii_case("FALSE") {
        Some(false)
    } else {
        None
    }
}

/// A parameter's value in its C type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// int64_t.
    I64(i64),
    /// uint32_t.
    U32(u32),
    /// uint64_t.
    U64(u64),
    /// bool.
    Bool(bool),
    /// const char*; None is NCCL's NULL default, read as "".
    Str(Option<String>),
    /// ncclDebugLogLevel (a C enum: 4 bytes).
    Level(i32),
}

impl Value {
    /// The bytes ncclParamGet copies: the C object's native representation; a string with its
    /// terminating NUL (a NULL string is the one byte "").
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Value::I64(v) => v.to_ne_bytes().to_vec(),
            Value::U32(v) => v.to_ne_bytes().to_vec(),
            Value::U64(v) => v.to_ne_bytes().to_vec(),
            Value::Bool(v) => vec![u8::from(*v)],
            Value::Str(s) => {
                let mut b = s.as_deref().unwrap_or("").as_bytes().to_vec();
                b.push(0);
                b
            }
            Value::Level(v) => v.to_ne_bytes().to_vec(),
        }
    }
}

/// Where a value came from, in NCCL's words for the dump's set_by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBy {
    /// Nothing set it, or what was set did not parse.
    Default,
    /// The environment or an nccl.conf file (NCCL's default env plugin applies both).
    EnvPlugin,
}

impl SetBy {
    /// NCCL's word for it ("Default", "EnvPlugin").
    pub fn word(self) -> &'static str {
        match self {
            SetBy::Default => "Default",
            SetBy::EnvPlugin => "EnvPlugin",
        }
    }
}

/// One registered parameter.
#[derive(Debug)]
pub struct Entry {
    /// The full key, NUL-terminated for the C API.
    pub key: &'static CStr,
    /// Type, parser and default.
    pub kind: Kind,
    /// FLAG_* bits.
    pub flags: u64,
    /// What it does in oxccl.
    pub desc: &'static str,
    /// False for NCCL_CONF_FILE, which only the environment can set (it names the files).
    pub conf_files: bool,
}

impl Entry {
    /// The key as text.
    pub fn name(&self) -> &'static str {
        // Keys are ASCII literals (tests check).
        std::str::from_utf8(self.key.to_bytes()).unwrap_or("")
    }

    /// Whether NCCL's documentation publishes it.
    pub fn published(&self) -> bool {
        self.flags & FLAG_PUBLISHED != 0
    }

    /// The value now: environment, nccl.conf files, default.
    pub fn resolve(&self) -> (Value, SetBy) {
        let text = if self.conf_files {
            getenv::raw_lookup(self.name())
        } else {
            std::env::var_os(self.name()).map(|v| v.to_string_lossy().into_owned())
        };
        self.resolve_text(text.as_deref())
    }

    /// The value that the raw text `text` (None: unset) gives.
    pub fn resolve_text(&self, text: Option<&str>) -> (Value, SetBy) {
        let text = text.filter(|t| !(t.is_empty() && self.kind.empty_is_unset()));
        match text.and_then(|t| self.kind.parse(t)) {
            Some(v) => (v, SetBy::EnvPlugin),
            None => (self.kind.default_value(), SetBy::Default),
        }
    }

    /// The value as NCCL's toString gives it (ncclParamGetParameter, ncclParamGetStr).
    pub fn text(&self, v: &Value) -> String {
        text::value_text(self.kind, v)
    }

    /// NCCL's three-line description of the parameter and its current value, for
    /// ncclParamDumpAll.
    pub fn dump(&self) -> String {
        let (value, set_by) = self.resolve();
        text::dump(self, &value, set_by)
    }
}

/// The registered parameter named exactly `key` (case and the NCCL_ prefix matter, as in NCCL).
pub fn find(key: &str) -> Option<&'static Entry> {
    REGISTRY.iter().find(|e| e.name() == key)
}

/// NCCL's ncclParamCheckFlag (NCCL 2.30.7 src/param/c_api.cc): the first lookup of a key by
/// the C API says at INFO (ENV) if setting it has no effect or if NCCL does not document it.
pub fn note_lookup(e: &'static Entry) {
    static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let first = SEEN.lock().insert(e.name());
    if !first {
        return;
    }
    if e.flags & FLAG_UNUSED != 0 {
        nccl_info!(Subsys::Env, "Warning: ENV {} is unused. Setting it has no effect.", e.name());
    } else if e.flags & FLAG_DEPRECATED != 0 {
        nccl_info!(Subsys::Env, "Warning: ENV {} is deprecated. It may be removed or become unused in future versions.", e.name());
    }
    if !e.published() {
        nccl_info!(Subsys::Env, "ENV: {} is private. Its function may change without notice across versions.", e.name());
    }
}

/// NCCL_PARAM_DUMP_ALL: whether listings include unpublished parameters. Read at each call (NCCL
/// does not cache it either).
pub fn show_all() -> bool {
    let entry = find("NCCL_PARAM_DUMP_ALL").expect("NCCL_PARAM_DUMP_ALL is registered");
    entry.resolve().0 == Value::Bool(true)
}

/// The parameters a listing shows: the published ones, or all with NCCL_PARAM_DUMP_ALL.
pub fn listed(show_all: bool) -> impl Iterator<Item = &'static Entry> {
    REGISTRY.iter().filter(move |e| show_all || e.published())
}

/// ncclParamDumpAll's text: a header line, then each listed parameter's dump and a blank line.
pub fn dump_all(show_all: bool) -> String {
    let mut out = String::from("=== ncclParam Registry Dump ===\n");
    for e in listed(show_all) {
        out.push_str(&e.dump());
        out.push('\n');
    }
    out
}
