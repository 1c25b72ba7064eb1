//! The text of one log line, byte for byte as NCCL 2.28.9's ncclDebugLog (src/debug.cc) builds
//! it. Users' scripts grep these lines ("NCCL WARN", "NCCL INFO"), so the layout is the contract.

use super::level::Level;
use std::io::Write;

/// NCCL formats into a 1024-byte buffer: at most 1023 bytes of text, then the newline.
/// Longest line written, in bytes (NCCL's buffer size); longer ones are cut.
pub const LINE_CAP: usize = 1024;

/// Everything a line shows besides the message.
#[derive(Clone, Copy, Debug)]
pub struct LineInfo<'a> {
    /// The message's level.
    pub level: Level,
    /// A TRACE of the CALL subsystem: NCCL prints these as "NCCL CALL", without device.
    pub call: bool,
    /// The rendered timestamp, empty when this level has none.
    pub timestamp: &'a [u8],
    /// This host's name.
    pub host: &'a str,
    /// Process id.
    pub pid: i32,
    /// Thread id (gettid).
    pub tid: i32,
    /// The current CUDA device, or -1.
    pub dev: i32,
    /// The source file of the message (TRACE lines show it).
    pub file: &'a str,
    /// Its line.
    pub line: u32,
    /// TRACE lines show milliseconds since the logger was initialised.
    pub elapsed_ms: f64,
}

/// Builds the line, ending in '\n':
/// - WARN:  `\n[ts]host:pid:tid [dev] file:line NCCL WARN msg`
/// - INFO:  `[ts]host:pid:tid [dev] NCCL INFO msg`
/// - TRACE: `[ts]host:pid:tid [dev] ms file:line NCCL TRACE msg`; CALL: `host:pid:tid NCCL CALL msg`
/// - VERSION: `[ts]msg`; ABORT: `[ts]host:pid:tid msg` (NCCL adds no tag for it)
pub fn format_line(info: &LineInfo, msg: &str) -> Vec<u8> {
    let mut buf: Vec<u8> = Vec::with_capacity(128 + msg.len().min(LINE_CAP));
    if info.level == Level::Warn {
        buf.push(b'\n'); // WARNs come with an extra newline at the beginning.
    }
    buf.extend_from_slice(info.timestamp);
    // Writes into a Vec cannot fail.
    if info.level != Level::Version {
        let _ = write!(buf, "{}:{}:{} ", info.host, info.pid, info.tid);
    }
    let _ = match info.level {
        Level::Warn => write!(buf, "[{}] {}:{} NCCL WARN ", info.dev, info.file, info.line),
        Level::Info => write!(buf, "[{}] NCCL INFO ", info.dev),
        Level::Trace if info.call => write!(buf, "NCCL CALL "),
        Level::Trace => write!(
            buf,
            "[{}] {:.6} {}:{} NCCL TRACE ",
            info.dev, info.elapsed_ms, info.file, info.line
        ),
        Level::None | Level::Version | Level::Abort => Ok(()),
    };
    buf.extend_from_slice(msg.as_bytes());
    buf.truncate(LINE_CAP - 1);
    buf.push(b'\n');
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(level: Level) -> LineInfo<'static> {
        LineInfo {
            level,
            call: false,
            timestamp: b"",
            host: "node7",
            pid: 4242,
            tid: 4250,
            dev: 3,
            file: "init.rs",
            line: 77,
            elapsed_ms: 12.5,
        }
    }

    fn text(i: &LineInfo, msg: &str) -> String {
        String::from_utf8(format_line(i, msg)).expect("utf8")
    }

    #[test]
    fn info_line() {
        assert_eq!(text(&info(Level::Info), "Bootstrap : Using eth0"), "node7:4242:4250 [3] NCCL INFO Bootstrap : Using eth0\n");
    }

    #[test]
    fn warn_line_has_leading_newline_timestamp_and_location() {
        let mut i = info(Level::Warn);
        i.timestamp = b"[2025-03-04 05:06:07] ";
        assert_eq!(
            text(&i, "Cuda failure 'out of memory'"),
            "\n[2025-03-04 05:06:07] node7:4242:4250 [3] init.rs:77 NCCL WARN Cuda failure 'out of memory'\n"
        );
    }

    #[test]
    fn trace_and_call_lines() {
        assert_eq!(text(&info(Level::Trace), "x"), "node7:4242:4250 [3] 12.500000 init.rs:77 NCCL TRACE x\n");
        let mut c = info(Level::Trace);
        c.call = true;
        assert_eq!(text(&c, "ncclAllReduce"), "node7:4242:4250 NCCL CALL ncclAllReduce\n");
    }

    #[test]
    fn version_line_is_bare() {
        assert_eq!(text(&info(Level::Version), "NCCL version 2.28.9+cuda13.0"), "NCCL version 2.28.9+cuda13.0\n");
    }

    #[test]
    fn long_lines_are_cut_at_1023_bytes_plus_newline() {
        let line = format_line(&info(Level::Info), &"a".repeat(5000));
        assert_eq!(line.len(), LINE_CAP);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line[LINE_CAP - 2], b'a');
    }
}
