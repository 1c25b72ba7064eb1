//! PortChannel's proxy: a CPU thread that consumes the triggers GPU threads push into a FIFO in
//! pinned host memory and carries them out through a transport (copy engine, TCP, RDMA).
//!
//! One proxy thread per communicator device: its triggers all come from one GPU, it sets that
//! GPU's context once at start (before any CUDA call), is pinned to the CPUs nearest the GPU, and
//! never captures graphs. It spins while work arrives and backs off when idle. Stopping (or a
//! transport error) releases every GPU thread waiting on the FIFO, so no kernel spins forever.

pub mod fifo;
pub mod trigger;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use self::fifo::FifoHost;
use self::trigger::Request;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// What carries out requests: a transport.
pub trait Handler: Send {
    /// Starts (or performs) a data and/or flag request. May return before the data has moved.
    fn execute(&mut self, r: &Request) -> Result<()>;
    /// Completes everything executed so far; a sync trigger's flush waits for this.
    fn complete(&mut self) -> Result<()>;
    /// Something another thread can call to make a blocked `execute`/`complete` fail at once
    /// (a transport stuck writing to a hung peer); `Proxy::abort` uses it. None: never blocks.
    fn interrupter(&self) -> Option<Interrupt> {
        None
    }
    /// Whether work was handed to this handler whose trigger has not come yet (an eager launch
    /// on its way to the GPU): an idle proxy then yields rather than naps, so the trigger is taken
    /// as it lands instead of up to a nap later.
    fn expecting(&self) -> bool {
        false
    }
}

/// See `Handler::interrupter`.
pub type Interrupt = Box<dyn Fn() + Send + Sync>;

/// How the proxy thread is placed.
#[derive(Default)]
pub struct Placement {
    /// The GPU whose context the thread makes current before anything else.
    pub device: Option<&'static crate::gpu::Device>,
    /// CPUs to run on (those local to the GPU), if known.
    pub cpus: Option<Vec<usize>>,
}

/// A proxy thread serving one FIFO: it polls the triggers kernels post and carries them out
/// through a `Handler` (a transport), until stopped.
pub struct Proxy {
    stop: Arc<AtomicBool>,
    /// With `stop`: carry out what is already in the FIFO first (`finish`).
    drain: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    interrupt: Option<Interrupt>,
}

/// Idle polls before the thread yields, and before it sleeps.
const SPIN_POLLS: u32 = 2000;
const YIELD_POLLS: u32 = 4000;
const IDLE_SLEEP: Duration = Duration::from_micros(50);

/// OXCCL_PROXY_YIELD_US: how long (us) an idle proxy keeps yielding, after its spinning polls,
/// before it naps (`IDLE_SLEEP`, 100 us or so with the kernel's timer slack); unset, it naps after
/// `YIELD_POLLS` polls, a few hundred microseconds to a few ms depending on what else the core
/// runs. A trigger that arrives during a nap waits for its end: a cross-host sender whose steps
/// come every few hundred microseconds took them 50-200 us late (in traces). Per rank (tuning,
/// measuring).
fn yield_budget() -> Option<Duration> {
    let v = crate::config::env("OXCCL_PROXY_YIELD_US")?;
    match v.trim().parse::<u64>() {
        Ok(n) => {
            nccl_info!(Subsys::Proxy, "OXCCL_PROXY_YIELD_US set by environment to {n}");
            Some(Duration::from_micros(n.min(10_000_000)))
        }
        Err(_) => {
            nccl_warn!("OXCCL_PROXY_YIELD_US={v}: expected microseconds, ignored");
            None
        }
    }
}

impl Proxy {
    /// Starts the proxy thread. `on_error` gets a transport failure (the communicator turns it
    /// into its async error); the FIFO's waiters are released then, as on stop.
    pub fn start(
        name: String,
        mut fifo: FifoHost,
        mut handler: Box<dyn Handler>,
        placement: Placement,
        on_error: Box<dyn Fn(Error) + Send>,
    ) -> Result<Proxy> {
        let stop = Arc::new(AtomicBool::new(false));
        let drain = Arc::new(AtomicBool::new(false));
        let (flag, drain_flag) = (stop.clone(), drain.clone());
        let interrupt = handler.interrupter();
        let yield_for = yield_budget();
        // OXCCL_PROXY_EXPECT=0: nap even with a trigger on its way (the policy before de67c84,
        // 2026-11-27, for comparison).
        let expect = crate::config::env("OXCCL_PROXY_EXPECT").is_none_or(|v| v.trim() != "0");
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let _ctx = match placement.device.map(crate::gpu::CtxGuard::new).transpose() {
                    Ok(g) => g,
                    Err(e) => {
                        fifo.release();
                        on_error(e.context("proxy thread: setting the device"));
                        return;
                    }
                };
                if let Some(cpus) = &placement.cpus {
                    crate::bootstrap::topo::bind_current_thread(cpus);
                }
                // A panic in a handler fails the communicator like any other error: the thread
                // still releases the FIFO's waiters below instead of leaving kernels spinning.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut fifo, handler.as_mut(), &flag, &drain_flag, yield_for, expect)))
                    .unwrap_or_else(|p| Err(Error::internal(format!("proxy thread: internal error: {}", crate::error::panic_text(&*p)))));
                if let Err(e) = r {
                    nccl_warn!("proxy: {}", e.msg);
                    on_error(e);
                }
                // Stopped or failed: nothing will consume the FIFO any more.
                fifo.release();
            })
            .map_err(|e| Error::io("cannot start the proxy thread", &e))?;
        Ok(Proxy { stop, drain, thread: Some(thread), interrupt })
    }

    /// Graceful stop: carries out every trigger already pushed, then stops as `stop` does. For a
    /// teardown after the GPU work finished, when a kernel may have handed over work it does not
    /// wait for (a detached cross-host send, `net`).
    pub fn finish(&mut self) {
        self.drain.store(true, Ordering::Release);
        self.stop();
    }

    /// Abort: interrupts a transport blocked on a hung peer, then stops. Always returns promptly.
    pub fn abort(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(f) = &self.interrupt {
            f();
        }
        self.stop();
    }

    /// Stops the thread and waits for it; idempotent. GPU threads waiting on the FIFO are released.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What an idle proxy does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Idle {
    Spin,
    Yield,
    Nap,
}

/// After `idle` empty polls, having yielded for `yielded` (with a budget): spin first, then yield
/// (for `budget`, or up to `YIELD_POLLS` polls without one), then nap; never nap while a trigger
/// is `expecting`.
fn idle_action(idle: u32, yielded: Option<Duration>, budget: Option<Duration>, expecting: bool) -> Idle {
    if idle < SPIN_POLLS {
        return Idle::Spin;
    }
    let yielding = expecting || match (budget, yielded) {
        (Some(b), Some(y)) => y < b,
        (Some(_), None) => true,
        (None, _) => idle < YIELD_POLLS,
    };
    if yielding {
        Idle::Yield
    } else {
        Idle::Nap
    }
}

fn run(fifo: &mut FifoHost, handler: &mut dyn Handler, stop: &AtomicBool, drain: &AtomicBool, yield_for: Option<Duration>, expect: bool) -> Result<()> {
    let mut idle = 0u32;
    // With a yield budget: when the spinning polls ended (the naps start once it has passed).
    let mut yielding_since: Option<std::time::Instant> = None;
    loop {
        let next = fifo.poll();
        if stop.load(Ordering::Acquire) && (next.is_none() || !drain.load(Ordering::Acquire)) {
            nccl_trace!(Subsys::Proxy, "proxy: stopping at FIFO position {}", fifo.position());
            return Ok(());
        }
        let Some(t) = next else {
            idle = idle.saturating_add(1);
            let yielded = (idle >= SPIN_POLLS && yield_for.is_some()).then(|| yielding_since.get_or_insert_with(std::time::Instant::now).elapsed());
            let expecting = expect && idle >= SPIN_POLLS && handler.expecting();
            match idle_action(idle, yielded, yield_for, expecting) {
                Idle::Spin => std::hint::spin_loop(),
                Idle::Yield => std::thread::yield_now(),
                Idle::Nap => std::thread::sleep(IDLE_SLEEP),
            }
            continue;
        };
        idle = 0;
        yielding_since = None;
        let r = Request::decode(&t);
        let pos = fifo.position();
        if r.is_data() || r.is_flag() {
            handler.execute(&r).map_err(|e| e.context(format!("proxy: request at FIFO position {pos}")))?;
        }
        fifo.pop();
        if r.is_sync() {
            handler.complete().map_err(|e| e.context(format!("proxy: flush at FIFO position {pos}")))?;
            fifo.complete_through(pos + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fifo::HeapFifo;
    use super::*;
    use crate::device_abi::{OX_TRIGGER_DATA, OX_TRIGGER_FLAG, OX_TRIGGER_SYNC};
    use parking_lot::Mutex;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    #[test]
    fn an_idle_proxy_spins_then_yields_then_naps() {
        let ms = Duration::from_millis;
        // By poll count without a budget (the default).
        assert_eq!(idle_action(0, None, None, false), Idle::Spin);
        assert_eq!(idle_action(SPIN_POLLS, None, None, false), Idle::Yield);
        assert_eq!(idle_action(YIELD_POLLS, None, None, false), Idle::Nap);
        // With OXCCL_PROXY_YIELD_US: by time yielded, whatever the count.
        assert_eq!(idle_action(SPIN_POLLS - 1, Some(ms(0)), Some(ms(1)), false), Idle::Spin);
        assert_eq!(idle_action(YIELD_POLLS * 100, Some(ms(0)), Some(ms(1)), false), Idle::Yield);
        assert_eq!(idle_action(YIELD_POLLS * 100, None, Some(ms(1)), false), Idle::Yield);
        assert_eq!(idle_action(SPIN_POLLS, Some(ms(2)), Some(ms(1)), false), Idle::Nap);
        // A trigger on its way: no nap, however long the wait.
        assert_eq!(idle_action(u32::MAX, None, None, true), Idle::Yield);
        assert_eq!(idle_action(SPIN_POLLS, Some(ms(2)), Some(ms(1)), true), Idle::Yield);
        assert_eq!(idle_action(0, None, None, true), Idle::Spin);
    }

    /// Records requests; `complete` marks everything executed so far as done.
    #[derive(Clone, Default)]
    struct Recorder {
        log: Arc<Mutex<Vec<(Request, bool)>>>,
        fail_at: Option<u32>,
        /// A request size whose execution panics.
        panic_at: Option<u32>,
        /// Time each execute takes.
        slow: Duration,
    }

    impl Handler for Recorder {
        fn execute(&mut self, r: &Request) -> Result<()> {
            if Some(r.size) == self.fail_at {
                return Err(Error::remote("peer 3 closed the connection"));
            }
            if Some(r.size) == self.panic_at {
                panic!("slot {} out of range", r.size);
            }
            std::thread::sleep(self.slow);
            self.log.lock().push((*r, false));
            Ok(())
        }
        fn complete(&mut self) -> Result<()> {
            self.log.lock().iter_mut().for_each(|e| e.1 = true);
            Ok(())
        }
    }

    fn req(kind: u64, size: u32) -> crate::device_abi::Trigger {
        Request { kind, size, semaphore: 1, ..Default::default() }.encode().unwrap()
    }

    #[test]
    fn proxy_executes_in_order_and_a_flush_waits_for_completion() {
        let f = Arc::new(HeapFifo::new(8).unwrap());
        let head = AtomicU64::new(0);
        let rec = Recorder::default();
        let mut p = Proxy::start("test-proxy".into(), FifoHost::new(f.words), Box::new(rec.clone()), Placement::default(), Box::new(|_| {}))
            .unwrap();
        for size in 1..=40 {
            f.words.push_like_device(&head, req(if size % 2 == 0 { OX_TRIGGER_DATA } else { OX_TRIGGER_DATA | OX_TRIGGER_FLAG }, size)).unwrap();
        }
        let pos = f.words.push_like_device(&head, req(OX_TRIGGER_SYNC, 0)).unwrap();
        assert!(f.words.flush_like_device(pos), "flush completes");
        let log = rec.log.lock().clone();
        assert_eq!(log.len(), 40);
        assert!(log.iter().enumerate().all(|(i, (r, done))| r.size == i as u32 + 1 && *done), "in order, all completed before the flush returned");
        p.stop();
        assert_ne!(f.words.stop().load(Ordering::Acquire), 0, "stop releases device waiters");
    }

    #[test]
    fn stop_is_prompt_when_idle_and_releases_a_flusher() {
        let f = Arc::new(HeapFifo::new(4).unwrap());
        let mut p = Proxy::start("test-proxy".into(), FifoHost::new(f.words), Box::new(Recorder::default()), Placement::default(), Box::new(|_| {}))
            .unwrap();
        std::thread::sleep(Duration::from_millis(30)); // long enough to be in the sleeping backoff
        let f2 = f.clone();
        let waiter = std::thread::spawn(move || f2.words.flush_like_device(1000));
        let t0 = Instant::now();
        p.stop();
        assert!(t0.elapsed() < Duration::from_millis(500), "stop took {:?}", t0.elapsed());
        assert!(!waiter.join().unwrap(), "the waiting GPU thread was released, not completed");
    }

    /// `finish` carries out what was pushed before it; `stop` does not wait for it.
    #[test]
    fn finish_drains_the_fifo_and_stop_does_not() {
        for drain in [true, false] {
            let f = Arc::new(HeapFifo::new(16).unwrap());
            let head = AtomicU64::new(0);
            let rec = Recorder { slow: Duration::from_millis(20), ..Default::default() };
            let log = rec.log.clone();
            let mut p = Proxy::start("test-proxy".into(), FifoHost::new(f.words), Box::new(rec), Placement::default(), Box::new(|_| {})).unwrap();
            for size in 1..=8 {
                f.words.push_like_device(&head, req(OX_TRIGGER_DATA, size)).unwrap();
            }
            if drain {
                p.finish();
                assert_eq!(log.lock().len(), 8, "every pushed trigger carried out");
            } else {
                p.stop();
                assert!(log.lock().len() < 8, "stop does not drain");
            }
        }
    }

    /// A handler's error, or its panic, reaches the error callback once, with its code, and the
    /// GPU thread waiting on a flush is released.
    #[test]
    fn a_failing_or_panicking_handler_reports_and_releases() {
        let cases = [
            (Recorder { fail_at: Some(7), ..Default::default() }, 7, crate::error::ResultCode::RemoteError, "peer 3"),
            (Recorder { panic_at: Some(5), ..Default::default() }, 5, crate::error::ResultCode::InternalError, "slot 5 out of range"),
        ];
        for (rec, size, code, text) in cases {
            let f = Arc::new(HeapFifo::new(4).unwrap());
            let head = AtomicU64::new(0);
            let errors = Arc::new(Mutex::new(Vec::new()));
            let e2 = errors.clone();
            let _p = Proxy::start("test-proxy".into(), FifoHost::new(f.words), Box::new(rec), Placement::default(), Box::new(move |e| e2.lock().push(e))).unwrap();
            f.words.push_like_device(&head, req(OX_TRIGGER_DATA, size)).unwrap();
            let pos = f.words.push_like_device(&head, req(OX_TRIGGER_SYNC, 0)).unwrap();
            assert!(!f.words.flush_like_device(pos), "the flush is released, not completed");
            let errs = errors.lock();
            assert_eq!(errs.len(), 1);
            assert_eq!(errs[0].code, code);
            assert!(errs[0].msg.contains(text), "{:?}", errs[0]);
        }
    }
}
