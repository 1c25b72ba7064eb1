//! Line timestamps: NCCL_DEBUG_TIMESTAMP_FORMAT, a strftime format (default "[%F %T] ", local
//! time) that may hold one "%Nf" (N = 1..9 digits of sub-seconds) and where '_' stands for a
//! space. Mirrors ncclDebugInit/ncclDebugLog in NCCL 2.28.9 src/debug.cc.

use std::ffi::{c_char, CString};

/// NCCL keeps the format in a 256-byte buffer; longer formats fall back to the default.
const FORMAT_CAP: usize = 256;
const DEFAULT_FORMAT: &str = "[%F %T] ";

/// A parsed timestamp format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampFormat {
    /// The strftime format; the sub-second digits, if any, are blanks to overwrite per line.
    format: Vec<u8>,
    /// (byte offset, digit count) of the sub-seconds inside `format`.
    subsec: Option<(usize, u32)>,
}

impl TimestampFormat {
    /// NCCL_DEBUG_TIMESTAMP_FORMAT's value, `None` when unset. An empty format turns timestamps off.
    pub fn parse(value: Option<&str>) -> TimestampFormat {
        let raw = value.unwrap_or(DEFAULT_FORMAT).as_bytes();
        let mut format = None;
        let mut subsec = None;
        let mut i = 0;
        while i < raw.len() {
            if raw[i] == b'%' && raw.get(i + 1) == Some(&b'%') {
                i += 2; // a literal '%': skip both
                continue;
            }
            let digit = raw.get(i + 1).copied().unwrap_or(0);
            if raw[i] == b'%' && (b'1'..=b'9').contains(&digit) && raw.get(i + 2) == Some(&b'f') {
                let digits = u32::from(digit - b'0');
                if digits as usize + raw.len() - 3 > FORMAT_CAP - 1 {
                    break; // won't fit: NCCL ignores the sub-seconds
                }
                let mut f = raw[..i].to_vec();
                f.resize(i + digits as usize, b' ');
                f.extend_from_slice(&raw[i + 3..]);
                format = Some(f);
                subsec = Some((i, digits));
                break;
            }
            i += 1;
        }
        let mut format = format.unwrap_or_else(|| {
            if raw.len() < FORMAT_CAP {
                raw.to_vec()
            } else {
                DEFAULT_FORMAT.as_bytes().to_vec()
            }
        });
        // "it is hard to put spaces in command line parameters"
        for b in format.iter_mut().filter(|b| **b == b'_') {
            *b = b' ';
        }
        TimestampFormat { format, subsec }
    }

    /// True when no timestamp is printed at all.
    pub fn is_empty(&self) -> bool {
        self.format.is_empty()
    }

    /// The timestamp for wall-clock time `secs`.`nanos`, in local time, at most `room - 1` bytes.
    pub fn render(&self, secs: i64, nanos: u32, room: usize) -> Vec<u8> {
        if self.is_empty() {
            return Vec::new();
        }
        match local_tm(secs) {
            Some(tm) => self.render_tm(&tm, nanos, room),
            None => Vec::new(),
        }
    }

    /// As `render`, for a broken-down time (the part tests can pin down).
    pub fn render_tm(&self, tm: &libc::tm, nanos: u32, room: usize) -> Vec<u8> {
        let mut fmt = self.format.clone();
        if let Some((at, digits)) = self.subsec {
            let scale = 10u64.pow(9 - digits);
            let text = format!("{:0width$}", u64::from(nanos.min(999_999_999)) / scale, width = digits as usize);
            if let Some(dst) = fmt.get_mut(at..at + digits as usize) {
                dst.copy_from_slice(&text.as_bytes()[..digits as usize]);
            }
        }
        let out = strftime(&fmt, tm, room);
        if out.is_empty() && !self.format.is_empty() {
            // Ran out of room (or the format printed nothing): NCCL falls back on the default.
            return strftime(DEFAULT_FORMAT.as_bytes(), tm, room);
        }
        out
    }
}

fn local_tm(secs: i64) -> Option<libc::tm> {
    let t = libc::time_t::try_from(secs).ok()?;
    // SAFETY: tm is plain data; localtime_r only writes into it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    ok.then_some(tm)
}

/// libc strftime into a buffer of `room` bytes (its NUL included); empty on failure.
fn strftime(format: &[u8], tm: &libc::tm, room: usize) -> Vec<u8> {
    let Ok(cfmt) = CString::new(format) else { return Vec::new() };
    if room == 0 {
        return Vec::new();
    }
    let mut buf = vec![0u8; room];
    // SAFETY: buf holds `room` bytes; cfmt is NUL-terminated; tm is a valid struct.
    let n = unsafe { libc::strftime(buf.as_mut_ptr() as *mut c_char, room, cfmt.as_ptr(), tm) };
    buf.truncate(n.min(room));
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tm() -> libc::tm {
        // 2025-03-04 05:06:07, set field by field so the test does not depend on TZ.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        tm.tm_year = 125;
        tm.tm_mon = 2;
        tm.tm_mday = 4;
        tm.tm_hour = 5;
        tm.tm_min = 6;
        tm.tm_sec = 7;
        tm
    }

    fn show(f: &TimestampFormat, nanos: u32) -> String {
        String::from_utf8_lossy(&f.render_tm(&tm(), nanos, 1024)).into_owned()
    }

    #[test]
    fn default_is_bracketed_date_time() {
        let f = TimestampFormat::parse(None);
        assert_eq!(show(&f, 0), "[2025-03-04 05:06:07] ");
    }

    #[test]
    fn subseconds_and_underscores() {
        let f = TimestampFormat::parse(Some("%T.%3f_"));
        assert_eq!(show(&f, 123_456_789), "05:06:07.123 ");
        let f = TimestampFormat::parse(Some("%6f"));
        assert_eq!(show(&f, 1_000), "000001");
        let f = TimestampFormat::parse(Some("%%3f"));
        assert_eq!(show(&f, 5), "%3f", "an escaped % is not a sub-second field");
    }

    #[test]
    fn empty_format_disables_and_overflow_falls_back() {
        assert!(TimestampFormat::parse(Some("")).is_empty());
        assert!(show(&TimestampFormat::parse(Some("")), 0).is_empty());
        let long = "x".repeat(300);
        assert_eq!(TimestampFormat::parse(Some(&long)), TimestampFormat::parse(None));
        // Too little room: falls back on the default, which does not fit either.
        let f = TimestampFormat::parse(Some("%F %T %F %T"));
        assert!(f.render_tm(&tm(), 0, 8).is_empty());
    }

    #[test]
    fn render_of_now_does_not_fail() {
        let f = TimestampFormat::parse(None);
        assert_eq!(f.render(1_700_000_000, 0, 1024).len(), "[2023-11-14 22:13:20] ".len());
    }
}
