//! How the kernel scheduled this process's threads, from /proc/self/task (Linux): per thread, its
//! CPU time, the time it was runnable but waited for a CPU, and its context switches, voluntary
//! (it blocked) and forced (it was preempted). Printed with OXCCL_NET_PROFILE's table: at 4
//! simulated hosts on one machine a cross-host step sometimes takes milliseconds instead of tens
//! of microseconds, and waiting for a CPU is the first suspect. Measuring only: it
//! reads a few small files per thread, once.

/// One thread's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSched {
    /// The thread's name (/proc/self/task/*/comm).
    pub name: String,
    /// Nanoseconds on a CPU.
    pub run_ns: u64,
    /// Nanoseconds runnable on a run queue, not running.
    pub wait_ns: u64,
    /// Times it gave up its CPU by blocking.
    pub voluntary: u64,
    /// Times it was preempted.
    pub forced: u64,
}

/// `/proc/<pid>/task/<tid>/schedstat`: "run_ns wait_ns timeslices".
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    Some((it.next()?.ok()?, it.next()?.ok()?))
}

/// `/proc/<pid>/task/<tid>/status`: the voluntary and nonvoluntary context switch lines.
pub fn parse_switches(text: &str) -> (u64, u64) {
    let field = |key: &str| {
        text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
    };
    (field("voluntary_ctxt_switches:"), field("nonvoluntary_ctxt_switches:"))
}

/// Every thread of this process that can be read (threads may end while we read: skipped).
pub fn threads() -> Vec<ThreadSched> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let p = e.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
        let (Some(name), Some((run_ns, wait_ns))) = (read("comm"), read("schedstat").as_deref().and_then(parse_schedstat)) else {
            continue;
        };
        let (voluntary, forced) = read("status").as_deref().map_or((0, 0), parse_switches);
        out.push(ThreadSched { name: name.trim().to_string(), run_ns, wait_ns, voluntary, forced });
    }
    out
}

/// The report: totals, then the `top` threads that waited longest for a CPU.
pub fn report(mut v: Vec<ThreadSched>, top: usize) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let (run, wait, vol, forced) = v.iter().fold((0, 0, 0, 0), |a, t| (a.0 + t.run_ns, a.1 + t.wait_ns, a.2 + t.voluntary, a.3 + t.forced));
    let mut out = format!(
        "  threads {}: on a CPU {:.1} ms, runnable waiting for one {:.1} ms, blocked {} times, preempted {} times\n",
        v.len(),
        ms(run),
        ms(wait),
        vol,
        forced
    );
    v.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(b.run_ns.cmp(&a.run_ns)));
    for t in v.iter().take(top) {
        out.push_str(&format!(
            "    {:<16} run {:>9.1} ms wait {:>8.2} ms blocked {:>8} preempted {:>6}\n",
            t.name,
            ms(t.run_ns),
            ms(t.wait_ns),
            t.voluntary,
            t.forced
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_files() {
        assert_eq!(parse_schedstat("123456 7890 42\n"), Some((123456, 7890)));
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
        let status = "Name:\toxccl-net0>1.0\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1500\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_switches(status), (1500, 7));
        assert_eq!(parse_switches("Name:\tx\n"), (0, 0));
    }

    #[test]
    fn reads_this_process_and_sorts_by_waiting() {
        // This test's own thread is among them, with some CPU time.
        let v = threads();
        if std::path::Path::new("/proc/self/task").exists() {
            assert!(!v.is_empty());
            assert!(v.iter().any(|t| t.run_ns > 0));
        }
        let mk = |name: &str, wait_ns| ThreadSched { name: name.into(), run_ns: 2_000_000, wait_ns, voluntary: 3, forced: 1 };
        let r = report(vec![mk("a", 1_000_000), mk("b", 5_000_000), mk("c", 0)], 2);
        assert!(r.starts_with("  threads 3: on a CPU 6.0 ms, runnable waiting for one 6.0 ms, blocked 9 times, preempted 3 times\n"), "{r}");
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].trim_start().starts_with("b ") && lines[2].trim_start().starts_with("a "), "{r}");
    }
}
