//! The process-wide logger state: the level and subsystem mask that the hot path reads with two
//! atomic loads, and behind a mutex the settings and the open sink. Initialised lazily on first
//! use, re-initialised after `reset_debug_init`, as ncclDebugInit in NCCL 2.28.9 src/debug.cc.

use super::level::Level;
use super::line::{format_line, LineInfo, LINE_CAP};
use super::process;
use super::settings::Settings;
use super::sink::Sink;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const UNINITIALISED: i32 = -1;
/// `ncclResetDebugInit` was called: the next use re-reads the settings and reopens the sink.
const RESET_TRIGGERED: i32 = -2;

static LEVEL: AtomicI32 = AtomicI32::new(UNINITIALISED);
static MASK: AtomicU64 = AtomicU64::new(0);
static LOGGER: Mutex<Option<Logger>> = Mutex::new(None);

struct Logger {
    settings: Settings,
    sink: Sink,
    host: String,
    pid: i32,
    /// TRACE lines show milliseconds since this instant.
    epoch: Instant,
}

thread_local! {
    // Set while this thread is inside the logger: a log call made from there (say, by a Display
    // impl, or by code the logger calls) is dropped instead of re-entering a held lock.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks the thread as inside the logger until dropped (also on unwinding).
pub struct Busy(());

impl Busy {
    /// `None` if the thread is already inside the logger (or is being torn down).
    pub fn enter() -> Option<Busy> {
        let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
        // `then`, not `then_some`: a Busy built and dropped here would clear the flag.
        entered.then(|| Busy(()))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

/// Whether a message of `level` with subsystem `flags` is shown. The caller holds `Busy` (needed
/// for the first call, which initialises the logger).
pub fn passes(_busy: &Busy, level: Level, flags: u64) -> bool {
    let current = initialised_level();
    level != Level::None && current >= level as i32 && MASK.load(Ordering::Relaxed) & flags != 0
}

/// The hot-path test once initialised: `None` while the logger still needs initialising.
#[inline]
pub fn passes_fast(level: Level, flags: u64) -> Option<bool> {
    let current = LEVEL.load(Ordering::Acquire);
    if current < 0 {
        return None;
    }
    Some(level != Level::None && current >= level as i32 && MASK.load(Ordering::Relaxed) & flags != 0)
}

/// The current level (initialising the logger if needed; the caller holds `Busy`).
pub fn level(_busy: &Busy) -> Level {
    Level::from_i32(initialised_level()).unwrap_or(Level::None)
}

fn initialised_level() -> i32 {
    let current = LEVEL.load(Ordering::Acquire);
    if current >= 0 {
        return current;
    }
    initialise();
    LEVEL.load(Ordering::Acquire)
}

fn initialise() {
    let mut slot = LOGGER.lock();
    if LEVEL.load(Ordering::Acquire) >= 0 {
        return; // another thread did it while we waited
    }
    // A reset drops the old logger here, which closes its file.
    *slot = None;
    // The settings come from the environment, then nccl.conf; those lookups never log.
    let settings = Settings::from_lookup(crate::getenv::raw_lookup);
    let host = process::short_hostname();
    let pid = process::pid();
    let sink = Sink::open(settings.debug_file.as_deref(), &host, pid);
    MASK.store(settings.mask, Ordering::Relaxed);
    let level = settings.level as i32;
    *slot = Some(Logger { settings, sink, host, pid, epoch: Instant::now() });
    LEVEL.store(level, Ordering::Release);
}

/// Starts a re-initialisation: the next log call re-reads NCCL_DEBUG* (ncclResetDebugInit).
pub fn reset() {
    let _slot = LOGGER.lock();
    LEVEL.store(RESET_TRIGGERED, Ordering::Release);
}

/// One message to write, as the tracing layer hands it over.
pub struct Record<'a> {
    pub level: Level,
    pub call: bool,
    pub file: &'a str,
    pub line: u32,
    pub tid: i32,
    pub dev: i32,
    pub message: &'a str,
}

/// Formats and writes one line (the caller has already checked `passes`).
pub fn write(rec: &Record) {
    let mut slot = LOGGER.lock();
    let Some(logger) = slot.as_mut() else { return };
    let timestamp = if logger.settings.timestamped(rec.level) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        let room = if rec.level == Level::Warn { LINE_CAP - 1 } else { LINE_CAP };
        logger.settings.timestamp_format.render(secs, now.subsec_nanos(), room)
    } else {
        Vec::new()
    };
    let info = LineInfo {
        level: rec.level,
        call: rec.call,
        timestamp: &timestamp,
        host: &logger.host,
        pid: logger.pid,
        tid: rec.tid,
        dev: rec.dev,
        file: rec.file,
        line: rec.line,
        elapsed_ms: logger.epoch.elapsed().as_secs_f64() * 1000.0,
    };
    let line = format_line(&info, rec.message);
    logger.sink.write_line(&line);
    if rec.level == Level::Warn && logger.settings.warn_enables_info {
        LEVEL.store(Level::Info as i32, Ordering::Release);
    }
}
