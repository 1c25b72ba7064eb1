//! The tracing side: each shown message becomes a tracing `Event` handed to a subscriber this
//! module owns (a Registry with one Layer that writes NCCL-format lines).
//!
//! The event goes straight to that `Dispatch` (`Dispatch::event`); the thread's default
//! dispatcher is never set or read. We are a library inside someone else's process: a global
//! default would capture the host's events, and `dispatcher::with_default` panics ("RefCell
//! already borrowed") when called from inside another subscriber's callback on the same thread.
//! Building an event by hand needs a static callsite and `FieldSet::value_set`, which tracing
//! re-exports from tracing-core without documenting (its macros expand to them); they are
//! semver-stable in tracing-core 0.1, and a change would fail to compile, not misbehave.

use super::level::Level;
use super::process;
use super::state::{self, Record};
use once_cell::sync::Lazy;
use std::fmt;
use tracing::callsite::{Callsite, DefaultCallsite, Identifier};
use tracing::field::{display, Field, FieldSet, Value, Visit};
use tracing::metadata::Kind;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::Registry;

/// The events' target.
pub const TARGET: &str = "nccl";

/// The events' fields, in this order.
const FIELD_NAMES: &[&str] = &["nccl_level", "subsys", "call", "file", "line", "tid", "dev", "message"];

/// One static callsite per tracing level, as the `event!` macro would make.
macro_rules! nccl_callsite {
    ($callsite:ident, $meta:ident, $level:expr) => {
        static $meta: Metadata<'static> = Metadata::new(
            "nccl log line",
            TARGET,
            $level,
            Some(file!()),
            Some(line!()),
            Some(module_path!()),
            FieldSet::new(FIELD_NAMES, Identifier(&$callsite)),
            Kind::EVENT,
        );
        static $callsite: DefaultCallsite = DefaultCallsite::new(&$meta);
    };
}
nccl_callsite!(WARN_CALLSITE, WARN_META, tracing::Level::WARN);
nccl_callsite!(INFO_CALLSITE, INFO_META, tracing::Level::INFO);
nccl_callsite!(TRACE_CALLSITE, TRACE_META, tracing::Level::TRACE);

static DISPATCH: Lazy<Dispatch> = Lazy::new(|| Dispatch::new(Registry::default().with(NcclLayer)));

/// Sends one message (already known to pass the level and subsystem filters) as an event.
pub fn emit(level: Level, subsys: &'static str, call: bool, file: &'static str, line: u32, args: fmt::Arguments) {
    let tid = process::thread_id();
    let dev = process::thread_device();
    let callsite: &'static DefaultCallsite = match level {
        Level::Warn => &WARN_CALLSITE,
        Level::Trace => &TRACE_CALLSITE,
        Level::None | Level::Version | Level::Info | Level::Abort => &INFO_CALLSITE,
    };
    let meta = callsite.metadata();
    let fields = meta.fields();
    let mut names = fields.iter();
    let (Some(f_level), Some(f_subsys), Some(f_call), Some(f_file), Some(f_line), Some(f_tid), Some(f_dev), Some(f_msg)) = (
        names.next(),
        names.next(),
        names.next(),
        names.next(),
        names.next(),
        names.next(),
        names.next(),
        names.next(),
    ) else {
        return; // cannot happen: FIELD_NAMES has eight names
    };
    let nccl_level = level as i64;
    let message = display(args);
    let values: [(&Field, Option<&dyn Value>); 8] = [
        (&f_level, Some(&nccl_level)),
        (&f_subsys, Some(&subsys)),
        (&f_call, Some(&call)),
        (&f_file, Some(&file)),
        (&f_line, Some(&line)),
        (&f_tid, Some(&tid)),
        (&f_dev, Some(&dev)),
        (&f_msg, Some(&message)),
    ];
    let values = fields.value_set(&values);
    DISPATCH.event(&Event::new(meta, &values));
}

/// Writes the events of `emit` as NCCL lines.
struct NcclLayer;

impl<S: Subscriber> Layer<S> for NcclLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(level) = Level::from_i32(f.level as i32) else { return };
        state::write(&Record {
            level,
            call: f.call,
            file: &f.file,
            line: f.line,
            tid: f.tid,
            dev: f.dev,
            message: &f.message,
        });
    }
}

#[derive(Default)]
struct Fields {
    level: i64,
    call: bool,
    file: String,
    line: u32,
    tid: i32,
    dev: i32,
    message: String,
}

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "nccl_level" => self.level = value,
            "tid" => self.tid = i32::try_from(value).unwrap_or(-1),
            "dev" => self.dev = i32::try_from(value).unwrap_or(-1),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "line" {
            self.line = u32::try_from(value).unwrap_or(u32::MAX);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "call" {
            self.call = value;
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "file" {
            self.file.push_str(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            // `display(args)` forwards Debug to Display; a failing impl keeps what it wrote.
            let _ = fmt::write(&mut self.message, format_args!("{value:?}"));
        }
    }
}
