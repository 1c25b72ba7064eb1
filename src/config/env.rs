//! NCCL_* / OXCCL_* settings: the process environment first, then the nccl.conf files. A variable
//! present in the environment hides the files even when empty (NCCL's setenv(.., 0) would not
//! overwrite it); empty values then count as unset, as NCCL's parameters treat them.

use crate::getenv::{lookup, parse_c_integer, IntError};
use crate::log::{self, Level, Subsys};
use parking_lot::Mutex;
use std::collections::BTreeSet;

/// The setting's value; `None` when unset or empty. Logs once per name at INFO (ENV).
pub fn env(name: &str) -> Option<String> {
    let (value, source) = lookup(name)?;
    if value.is_empty() {
        return None;
    }
    if log::enabled(Level::Info, Subsys::Env) && first_time(&LOGGED, name) {
        nccl_info!(Subsys::Env, "{} set by {} to {}", name, source.describe(), value);
    }
    Some(value)
}

/// An integer setting (C syntax: 10, 0x10, 010). Unset → `default`; malformed → WARN once, `default`.
pub fn env_i64(name: &str, default: i64) -> i64 {
    env(name).map_or(default, |v| parse_param(name, &v, default))
}

/// A 0/1 setting read as NCCL's integer parameters are: any non-zero integer is true.
pub fn env_bool(name: &str, default: bool) -> bool {
    env_i64(name, i64::from(default)) != 0
}

/// Parses an integer setting's value; a malformed one gives a WARN (once per name) and `default`.
pub fn parse_param(name: &str, value: &str, default: i64) -> i64 {
    match parse_c_integer(value) {
        Ok(v) => v,
        Err(e) => {
            if first_time(&WARNED, name) {
                let why = match e {
                    IntError::NoDigits => "not a number",
                    IntError::TrailingJunk => "trailing characters",
                    IntError::Overflow => "out of range",
                };
                nccl_warn!("Invalid value {} for {} ({}), using default {}.", value, name, why, default);
            }
            default
        }
    }
}

static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// True the first time `name` is seen in `set`. The lock is released before the caller logs.
fn first_time(set: &Mutex<BTreeSet<String>>, name: &str) -> bool {
    let mut set = set.lock();
    if set.contains(name) {
        return false;
    }
    set.insert(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getenv::Source;

    // The process environment is shared by parallel tests: only read names no one sets.

    #[test]
    fn unset_names_give_defaults() {
        assert_eq!(env("OXCCL_TEST_SURELY_UNSET_1"), None);
        assert_eq!(env_i64("OXCCL_TEST_SURELY_UNSET_1", 17), 17);
        assert!(env_bool("OXCCL_TEST_SURELY_UNSET_1", true));
        assert!(!env_bool("OXCCL_TEST_SURELY_UNSET_1", false));
    }

    #[test]
    fn environment_is_seen() {
        // PATH is set in any test environment.
        assert_eq!(lookup("PATH").map(|(_, s)| s), Some(Source::Environment));
        assert!(env("PATH").is_some());
    }

    #[test]
    fn malformed_values_fall_back() {
        assert_eq!(parse_param("OXCCL_TEST_P", "0x20", 1), 32);
        assert_eq!(parse_param("OXCCL_TEST_P", "twelve", 1), 1);
        assert_eq!(parse_param("OXCCL_TEST_P", "12abc", -5), -5);
        assert_eq!(parse_param("OXCCL_TEST_P", "99999999999999999999", 3), 3);
    }

    #[test]
    fn first_time_is_once_per_name() {
        let set = Mutex::new(BTreeSet::new());
        assert!(first_time(&set, "A"));
        assert!(!first_time(&set, "A"));
        assert!(first_time(&set, "B"));
    }
}
