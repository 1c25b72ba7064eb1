//! Where lines go. NCCL writes to C's `stdout` (not stderr) unless NCCL_DEBUG_FILE names a file
//! it can create; writing through the same `FILE*` keeps our lines in order with the
//! application's own printf output, as NCCL's are. I/O errors are ignored.
//! (A Rust host writing through std::io::stdout is not ordered with them, as with NCCL.)

use std::fs::File;
use std::io::Write;

extern "C" {
    // glibc's (and musl's) `FILE *stdout`; read at each write since a program may reassign it.
    static mut stdout: *mut libc::FILE;
}

/// NCCL bounds the expanded NCCL_DEBUG_FILE path by PATH_MAX.
const PATH_MAX: usize = 4096;

pub enum Sink {
    Stdout,
    /// Opened for writing (truncated, as fopen "w"); one write per line, as NCCL's line buffering.
    File(File),
}

impl Sink {
    /// The file named by the expanded NCCL_DEBUG_FILE template, or stdout if it cannot be created.
    pub fn open(template: Option<&str>, host: &str, pid: i32) -> Sink {
        let Some(template) = template else { return Sink::Stdout };
        let path = expand_debug_path(template, host, pid);
        if path.is_empty() {
            return Sink::Stdout;
        }
        File::create(&path).map_or(Sink::Stdout, Sink::File)
    }

    pub fn write_line(&mut self, line: &[u8]) {
        match self {
            Sink::Stdout => {
                // SAFETY: reading the pointer value of C's stdout; fwrite locks the FILE itself and
                // accepts any byte buffer of the given length.
                unsafe {
                    let out = stdout;
                    if !out.is_null() {
                        libc::fwrite(line.as_ptr() as *const libc::c_void, 1, line.len(), out);
                        // NCCL leaves stdout's buffering alone; flushing per line keeps the
                        // order with the app's printf (same FILE) and loses nothing on abort().
                        libc::fflush(out);
                    }
                }
            }
            Sink::File(f) => {
                let _ = f.write_all(line);
            }
        }
    }
}

/// NCCL_DEBUG_FILE expansion: %h = host name, %p = pid, %% = '%', any other %X kept as is.
pub fn expand_debug_path(template: &str, host: &str, pid: i32) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('h') => out.push_str(host),
            Some('p') => out.push_str(&pid.to_string()),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
        if out.len() >= PATH_MAX {
            break;
        }
    }
    if out.len() > PATH_MAX {
        let mut end = PATH_MAX;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_expansion() {
        assert_eq!(expand_debug_path("/tmp/nccl.%h.%p.log", "node1", 42), "/tmp/nccl.node1.42.log");
        assert_eq!(expand_debug_path("a%%b%xc%", "h", 1), "a%b%xc%");
        assert_eq!(expand_debug_path("", "h", 1), "");
        assert_eq!(expand_debug_path(&"p".repeat(5000), "h", 1).len(), PATH_MAX);
    }

    #[test]
    fn unopenable_file_falls_back_to_stdout() {
        assert!(matches!(Sink::open(Some("/nonexistent-dir/x/%p"), "h", 1), Sink::Stdout));
        assert!(matches!(Sink::open(None, "h", 1), Sink::Stdout));
    }

    #[test]
    fn file_sink_writes_lines() {
        let dir = std::env::temp_dir().join(format!("oxccl-sink-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let template = format!("{}/dbg.%h.%p", dir.display());
        let mut sink = Sink::open(Some(&template), "hostA", 7);
        assert!(matches!(sink, Sink::File(_)));
        sink.write_line(b"one\n");
        sink.write_line(b"two\n");
        drop(sink);
        let text = std::fs::read_to_string(dir.join("dbg.hostA.7")).expect("debug file");
        assert_eq!(text, "one\ntwo\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
