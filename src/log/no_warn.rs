//! NCCL's NOWARN(expr, flags): while probing something that may legitimately fail, code can turn
//! its WARNs into INFOs of a given subsystem (which also keeps them out of ncclGetLastError).

use super::level::{Level, Subsys};
use std::cell::Cell;

thread_local! {
    // 0 = WARNs stay WARNs; else the subsystem bits the demoted INFOs carry.
    static NO_WARN: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` with this thread's WARNs demoted to INFO of `sub`; nests, and restores on unwind.
pub fn no_warn<R>(sub: Subsys, f: impl FnOnce() -> R) -> R {
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = NO_WARN.try_with(|n| n.set(self.0));
        }
    }
    let _restore = Restore(NO_WARN.try_with(|n| n.replace(sub.bit())).unwrap_or(0));
    f()
}

/// The level and flags a message really has on this thread.
pub fn demote(level: Level, flags: u64) -> (Level, u64) {
    let no_warn = NO_WARN.try_with(Cell::get).unwrap_or(0);
    if level == Level::Warn && no_warn != 0 {
        (Level::Info, no_warn)
    } else {
        (level, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demotes_only_inside_and_nests() {
        assert_eq!(demote(Level::Warn, !0), (Level::Warn, !0));
        no_warn(Subsys::Net, || {
            assert_eq!(demote(Level::Warn, !0), (Level::Info, Subsys::Net.bit()));
            assert_eq!(demote(Level::Info, 1), (Level::Info, 1));
            no_warn(Subsys::Init, || assert_eq!(demote(Level::Warn, !0), (Level::Info, 1)));
            assert_eq!(demote(Level::Warn, !0), (Level::Info, Subsys::Net.bit()));
        });
        assert_eq!(demote(Level::Warn, !0), (Level::Warn, !0));
    }
}
