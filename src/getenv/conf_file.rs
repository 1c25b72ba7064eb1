//! nccl.conf files (NCCL 2.28.9 src/misc/param.cc, initEnvFunc/setEnvFile): NCCL_CONF_FILE if
//! set, else ~/.nccl.conf (home from the password database, as NCCL), then /etc/nccl.conf. NCCL
//! applies them with setenv(.., 0), so the environment wins, the first file wins over the second,
//! and within a file the first line for a name wins. We keep the values in a table instead of
//! calling setenv: changing the environment under a running multithreaded host is unsafe.

use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// NCCL copies names and values into 1024-byte buffers.
const MAX_LEN: usize = 1023;

/// The KEY=VALUE pairs of one file's text, in order. A line whose first non-blank character is
/// '#' is a comment; a line without '=' is skipped; the value is everything after the first '='.
/// Keys and values are trimmed (NCCL does not trim, so "KEY = V" would set "KEY " there).
pub fn conf_file_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            if line.starts_with('#') {
                return None;
            }
            let (key, value) = line.split_once('=')?;
            let key = cut(key.trim());
            if key.is_empty() {
                return None; // setenv("") fails in NCCL
            }
            Some((key.to_string(), cut(value.trim()).to_string()))
        })
        .collect()
}

/// Cuts to NCCL's 1023 bytes, on a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_LEN {
        return s;
    }
    let mut end = MAX_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Merges files in precedence order: a name keeps the first value seen.
pub fn merge_files<'a>(texts: impl IntoIterator<Item = &'a str>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for text in texts {
        for (k, v) in conf_file_values(text) {
            map.entry(k).or_insert(v);
        }
    }
    map
}

/// All files' values, read once per process on first use. Loading never logs: the logger reads
/// its own settings through here.
static FILE_VALUES: Lazy<HashMap<String, String>> = Lazy::new(|| {
    let user = match std::env::var_os("NCCL_CONF_FILE").filter(|v| !v.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => home_dir().map(|home| home.join(".nccl.conf")),
    };
    let texts: Vec<String> = user
        .into_iter()
        .chain(std::iter::once(PathBuf::from("/etc/nccl.conf")))
        .filter_map(|path| std::fs::read(path).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect();
    merge_files(texts.iter().map(String::as_str))
});

/// The value the configuration files give `name`, if any.
pub fn file_value(name: &str) -> Option<&'static str> {
    FILE_VALUES.get(name).map(String::as_str)
}

/// The user's home directory from the password database (getpwuid(getuid())->pw_dir).
fn home_dir() -> Option<PathBuf> {
    let mut size = 4096usize;
    loop {
        let mut buf = vec![0u8; size];
        // SAFETY: passwd is plain data; getpwuid_r writes strings into `buf` (of `size` bytes) and
        // points the passwd fields into it; we read them before `buf` is dropped.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwuid_r(libc::getuid(), &mut pwd, buf.as_mut_ptr() as *mut libc::c_char, size, &mut result)
        };
        if rc == libc::ERANGE && size < (1 << 20) {
            size *= 4;
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
        return Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        conf_file_values(text)
    }

    fn p(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn parses_key_value_lines() {
        let text = "# comment\nNCCL_DEBUG=INFO\n  NCCL_SOCKET_IFNAME = eth0 \r\n\nnot a pair\n=novalue\nNCCL_ALGO=^NVLS=x\n   # indented comment\nNCCL_EMPTY=\n";
        assert_eq!(
            pairs(text),
            vec![p("NCCL_DEBUG", "INFO"), p("NCCL_SOCKET_IFNAME", "eth0"), p("NCCL_ALGO", "^NVLS=x"), p("NCCL_EMPTY", "")]
        );
    }

    #[test]
    fn inline_hash_is_part_of_the_value_as_in_nccl() {
        assert_eq!(pairs("NCCL_X=1 # note"), vec![p("NCCL_X", "1 # note")]);
    }

    #[test]
    fn long_values_are_cut_to_1023_bytes() {
        let text = format!("K={}", "v".repeat(2000));
        assert_eq!(pairs(&text)[0].1.len(), MAX_LEN);
        let text = format!("K={}", "é".repeat(600));
        assert!(pairs(&text)[0].1.len() <= MAX_LEN);
    }

    #[test]
    fn first_value_wins_within_and_across_files() {
        let map = merge_files(["A=1\nA=2\nB=user", "B=etc\nC=etc"]);
        assert_eq!(map.get("A").map(String::as_str), Some("1"));
        assert_eq!(map.get("B").map(String::as_str), Some("user"));
        assert_eq!(map.get("C").map(String::as_str), Some("etc"));
    }

    #[test]
    fn home_dir_resolves() {
        assert!(home_dir().is_some());
    }
}
