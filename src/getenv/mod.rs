//! What `getenv` gives NCCL after its configuration files were applied: the process environment
//! first, then the nccl.conf files, and the C integer syntax NCCL's parameters use. Nothing here
//! logs: the logger reads its own settings through it, and config/ (which reports what it read)
//! logs through the logger, so this layer sits below both.

mod c_integer;
mod conf_file;

pub use c_integer::{parse_c_integer, IntError};
pub use conf_file::conf_file_values;

/// Where a value came from, for the "set by ..." INFO line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The process environment.
    Environment,
    /// An nccl.conf configuration file.
    ConfigFile,
}

impl Source {
    /// The source in words, as the INFO line names it.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Environment => "environment",
            Source::ConfigFile => "configuration file",
        }
    }
}

/// The raw value and its source, empty values included. Never logs (the logger uses it).
pub fn lookup(name: &str) -> Option<(String, Source)> {
    if let Some(v) = std::env::var_os(name) {
        return Some((v.to_string_lossy().into_owned(), Source::Environment));
    }
    conf_file::file_value(name).map(|v| (v.to_string(), Source::ConfigFile))
}

/// The raw value, empty values included, without logging: what `getenv` gives NCCL after its
/// configuration files were applied.
pub fn raw_lookup(name: &str) -> Option<String> {
    lookup(name).map(|(v, _)| v)
}
