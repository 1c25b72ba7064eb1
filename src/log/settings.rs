//! The logger's settings, read from the NCCL_DEBUG* variables through a lookup function (the
//! process environment, then nccl.conf, in production) so that parsing stays testable.

use super::level::{self, Level};
use super::timestamp::TimestampFormat;

#[derive(Clone, Debug)]
pub struct Settings {
    /// NCCL_DEBUG.
    pub level: Level,
    /// NCCL_DEBUG_SUBSYS as a bit mask.
    pub mask: u64,
    /// NCCL_DEBUG_TIMESTAMP_LEVELS: bit `1 << level` set = lines of that level get a timestamp.
    pub timestamp_levels: u32,
    /// NCCL_DEBUG_TIMESTAMP_FORMAT.
    pub timestamp_format: TimestampFormat,
    /// NCCL_WARN_ENABLE_DEBUG_INFO: after the first printed WARN, raise the level to INFO.
    pub warn_enables_info: bool,
    /// NCCL_DEBUG_FILE's template (%h, %p), kept only when the level is above VERSION, as NCCL
    /// opens no file otherwise.
    pub debug_file: Option<String>,
}

impl Settings {
    /// `get` returns a variable's raw value, `Some("")` for a variable set to nothing.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Settings {
        let level = get("NCCL_DEBUG").map_or(Level::None, |v| level::parse_level(&v));
        let warn_enables_info = get("NCCL_WARN_ENABLE_DEBUG_INFO")
            .filter(|v| !v.is_empty())
            .and_then(|v| crate::getenv::parse_c_integer(&v).ok())
            .is_some_and(|v| v != 0);
        Settings {
            level,
            mask: level::parse_subsys_mask(get("NCCL_DEBUG_SUBSYS").as_deref()),
            timestamp_levels: level::parse_timestamp_levels(get("NCCL_DEBUG_TIMESTAMP_LEVELS").as_deref()),
            timestamp_format: TimestampFormat::parse(get("NCCL_DEBUG_TIMESTAMP_FORMAT").as_deref()),
            warn_enables_info,
            debug_file: get("NCCL_DEBUG_FILE").filter(|_| level > Level::Version),
        }
    }

    /// Whether lines of `level` start with a timestamp.
    pub fn timestamped(&self, level: Level) -> bool {
        self.timestamp_levels & (1u32 << level as u32) != 0 && !self.timestamp_format.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Settings {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_lookup(|n| map.get(n).cloned())
    }

    #[test]
    fn unset_means_silent_with_nccl_defaults() {
        let s = settings(&[]);
        assert_eq!(s.level, Level::None);
        assert_eq!(s.mask, level::DEFAULT_SUBSYS_MASK);
        assert!(s.timestamped(Level::Warn));
        assert!(!s.timestamped(Level::Info));
        assert!(!s.warn_enables_info);
        assert_eq!(s.debug_file, None);
    }

    #[test]
    fn reads_every_variable() {
        let s = settings(&[
            ("NCCL_DEBUG", "info"),
            ("NCCL_DEBUG_SUBSYS", "^INIT"),
            ("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO"),
            ("NCCL_DEBUG_TIMESTAMP_FORMAT", ""),
            ("NCCL_WARN_ENABLE_DEBUG_INFO", "0x1"),
            ("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p"),
        ]);
        assert_eq!(s.level, Level::Info);
        assert_eq!(s.mask, !1u64);
        assert!(!s.timestamped(Level::Info), "an empty format turns timestamps off");
        assert!(s.warn_enables_info);
        assert_eq!(s.debug_file.as_deref(), Some("/tmp/nccl.%h.%p"));
    }

    #[test]
    fn debug_file_needs_a_level_above_version() {
        let s = settings(&[("NCCL_DEBUG", "VERSION"), ("NCCL_DEBUG_FILE", "/tmp/x")]);
        assert_eq!(s.debug_file, None);
        let s = settings(&[("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_FILE", "/tmp/x")]);
        assert_eq!(s.debug_file.as_deref(), Some("/tmp/x"));
    }
}
