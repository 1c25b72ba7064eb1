//! End-to-end tests of the logger: macros → enabled() → tracing event → layer → sink. The logger
//! reads the process environment once, so each scenario runs in a child process (this test
//! binary, re-run on one ignored test) with its own NCCL_DEBUG* variables.

use super::*;
use crate::error::Error;
use std::fmt;
use std::process::Command;

const CHILD_VAR: &str = "OXCCL_LOG_TEST_CHILD";

/// Runs `test` (an ignored test of this module) in a child with `vars`; returns its stdout.
fn run_child(test: &str, vars: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", &format!("log::pipeline_tests::{test}"), "--ignored", "--nocapture", "--test-threads=1"]);
    for v in ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_CONF_FILE"] {
        cmd.env_remove(v);
    }
    cmd.env("NCCL_CONF_FILE", "/nonexistent/oxccl-test.conf");
    cmd.env(CHILD_VAR, "1");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {test} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "child {test} did not run:\n{stdout}");
    stdout
}

fn in_child() -> bool {
    std::env::var_os(CHILD_VAR).is_some()
}

/// A Display impl that logs while being formatted: the logger must drop the inner calls.
struct Reenter;

impl fmt::Display for Reenter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        nccl_info!(Subsys::Init, "inner info");
        nccl_warn!("inner warn");
        f.write_str("outer text")
    }
}

/// A foreign subscriber whose event handler logs through us. There, `dispatcher::with_default`
/// would panic ("RefCell already borrowed"); our events go straight to our own Dispatch instead.
struct Forwarder;

impl tracing::Subscriber for Forwarder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        nccl_info!(Subsys::Init, "forwarded from a foreign subscriber");
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn info_to_file() {
    let dir = std::env::temp_dir().join(format!("oxccl-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let template = format!("{}/nccl.%h.%p.log", dir.display());
    run_child("child_info_to_file", &[("NCCL_DEBUG", "info"), ("NCCL_DEBUG_SUBSYS", "INIT,ENV"), ("NCCL_DEBUG_FILE", &template)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "run by info_to_file in a child process"]
fn child_info_to_file() {
    if !in_child() {
        return;
    }
    set_thread_device(3);
    assert!(enabled(Level::Info, Subsys::Init));
    assert!(enabled(Level::Info, Subsys::Env));
    assert!(!enabled(Level::Info, Subsys::Coll), "COLL is not in the mask");
    assert!(!enabled(Level::Trace, Subsys::Init), "TRACE is above INFO");
    assert!(enabled(Level::Warn, Subsys::Coll), "WARNs carry all subsystems");
    assert!(!enabled(Level::None, Subsys::Init));

    nccl_info!(Subsys::Init, "hello {}", 42);
    nccl_info!(Subsys::Coll, "hidden coll line");
    nccl_warn!("boom {}", 7);
    assert_eq!(last_error(), "boom 7");
    nccl_info!(Subsys::Init, "{}", Reenter);
    warn_error(&Error::invalid_argument("bad argument"));
    assert_eq!(last_error(), "bad argument");
    no_warn(Subsys::Net, || nccl_warn!("demoted warn"));
    assert_eq!(last_error(), "bad argument", "a demoted WARN is not recorded");
    version_banner();
    version_banner();
    tracing::dispatcher::with_default(&tracing::Dispatch::new(Forwarder), || tracing::info!("host app event"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..50 {
                    nccl_info!(Subsys::Init, "thread {t} line {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("logging thread");
    }

    let host = process::short_hostname();
    let pid = process::pid();
    let tid = process::thread_id();
    let path = std::env::var("NCCL_DEBUG_FILE").expect("file template").replace("%h", &host).replace("%p", &pid.to_string());
    let text = std::fs::read_to_string(&path).expect("debug file written");
    let prefix = format!("{host}:{pid}:{tid} [3] ");
    assert!(text.contains(&format!("{prefix}NCCL INFO hello 42\n")), "{text}");
    assert!(!text.contains("hidden coll line"));
    assert!(text.contains(&format!("] {prefix}log/pipeline_tests.rs:")), "{text}");
    assert!(text.contains(" NCCL WARN boom 7\n"));
    assert!(text.contains("\n\n["), "WARN lines start with an empty line then the timestamp");
    assert!(text.contains(&format!("{prefix}NCCL INFO outer text\n")));
    assert!(!text.contains("inner"), "re-entrant calls are dropped");
    assert!(text.contains(" pipeline_tests.rs:") && text.contains(" NCCL WARN bad argument\n"));
    assert!(!text.contains("demoted warn"), "demoted to an INFO of NET, which is not in the mask");
    assert!(text.contains(&format!("{prefix}NCCL INFO forwarded from a foreign subscriber\n")), "{text}");
    let banner = format!("NCCL INFO NCCL version 2.32.3+cuda13.0 (oxccl {}: NCCL's whole host API of that version)\n", crate::OXCCL_VERSION);
    assert_eq!(text.matches(&banner).count(), 1, "{text}");
    for t in 0..4 {
        for i in 0..50 {
            assert!(text.contains(&format!(" [0] NCCL INFO thread {t} line {i}\n")), "thread {t} line {i}");
        }
    }

    // After a reset the settings are read again and the file reopened (truncated, as fopen "w").
    reset_debug_init();
    nccl_info!(Subsys::Init, "after reset");
    let text = std::fs::read_to_string(&path).expect("debug file rewritten");
    assert_eq!(text, format!("{prefix}NCCL INFO after reset\n"));
}

#[test]
fn warn_to_stdout() {
    let out = run_child("child_warn_to_stdout", &[("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "^ALL")]);
    assert!(out.contains("NCCL version 2.32.3+cuda13.0 (oxccl "), "bare banner at WARN:\n{out}");
    assert!(!out.contains("NCCL INFO"), "{out}");
    let warn = out.lines().find(|l| l.contains("NCCL WARN")).expect("a WARN line on stdout");
    assert!(warn.ends_with(" NCCL WARN to stdout 1"), "{warn}");
    assert!(!warn.starts_with('['), "timestamps were turned off: {warn}");
}

#[test]
#[ignore = "run by warn_to_stdout in a child process"]
fn child_warn_to_stdout() {
    if !in_child() {
        return;
    }
    assert!(!enabled(Level::Info, Subsys::Init));
    assert!(enabled(Level::Warn, Subsys::Init));
    version_banner_for_rank(0);
    nccl_info!(Subsys::Init, "not shown");
    nccl_warn!("to stdout {}", 1);
}

#[test]
fn unset_is_silent_but_keeps_last_error() {
    let out = run_child("child_unset", &[]);
    assert!(!out.contains("NCCL"), "{out}");
}

#[test]
#[ignore = "run by unset_is_silent_but_keeps_last_error in a child process"]
fn child_unset() {
    if !in_child() {
        return;
    }
    assert!(!enabled(Level::Warn, Subsys::Init));
    assert!(!enabled(Level::Version, Subsys::Init));
    assert_eq!(last_error(), "");
    nccl_warn!("kept {}", "anyway");
    version_banner();
    let text = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) };
    assert_eq!(text.to_str(), Ok("kept anyway"));
}
