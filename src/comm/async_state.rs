//! ncclCommGetAsyncError's answer, shared by a communicator, its liveness watchdog and its
//! transports' error callbacks.
//!
//! Contract (NCCL's, src/init.cc and the nonblocking-communicator docs): after a call returned
//! ncclInProgress the application polls until the state is no longer ncclInProgress, and only then
//! may it read what the call writes (a split's or shrink's `newcomm`, which NCCL stores when the
//! job ends). So the state leaves ncclInProgress only when the operation ends: an error reported
//! while it runs (a peer lost, a transport failure) is held and becomes the state then, unless the
//! operation ends in an error of its own. Outside an operation the first error is kept.

use crate::error::{Error, Result, ResultCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

pub struct AsyncState {
    /// The raw ncclResult_t ncclCommGetAsyncError reports; read without the lock (every enqueue
    /// checks it), written only under it.
    state: AtomicI32,
    /// The first error reported while `state` was ncclInProgress.
    held: Mutex<Option<ResultCode>>,
}

impl AsyncState {
    pub fn new(code: ResultCode) -> AsyncState {
        AsyncState { state: AtomicI32::new(code as i32), held: Mutex::new(None) }
    }

    pub fn get(&self) -> ResultCode {
        ResultCode::from_raw(self.state.load(Ordering::Acquire)).unwrap_or(ResultCode::InternalError)
    }

    /// An asynchronous error: the state at once if it was ncclSuccess, held until the operation
    /// ends if one runs (ncclInProgress); ignored if an error is recorded already. Returns whether
    /// it was held (for the WARN that says when the state shows it).
    pub fn fail(&self, code: ResultCode) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match self.get() {
            ResultCode::Success => {
                self.state.store(code as i32, Ordering::Release);
                false
            }
            ResultCode::InProgress => {
                held.get_or_insert(code);
                true
            }
            _ => false,
        }
    }

    /// "now reports X", or when X shows if `fail` held it: the end of a WARN line.
    pub fn reports(code: ResultCode, held: bool) -> String {
        if held {
            format!("the communicator reports {} once the init, split, shrink or grow running on it ends", code.as_str())
        } else {
            format!("the communicator now reports {}", code.as_str())
        }
    }

    /// A nonblocking operation starts: ncclInProgress until `end`. Refused while another runs
    /// (ncclInvalidArgument, as NCCL's ncclCommEnsureReady) or after an error (that error).
    pub fn begin(&self) -> Result<()> {
        let _held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match self.get() {
            ResultCode::Success => {
                self.state.store(ResultCode::InProgress as i32, Ordering::Release);
                Ok(())
            }
            ResultCode::InProgress => Err(Error::invalid_argument(
                "communicator used before its previous nonblocking operation completed",
            )),
            code => Err(Error::new(code, "communicator is in an error state")),
        }
    }

    /// The operation (or a nonblocking init) ended: its own error, else an error held while it
    /// ran, else ncclSuccess. Nothing changes if the state was not ncclInProgress.
    pub fn end(&self, outcome: std::result::Result<(), ResultCode>) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let first = held.take();
        if self.get() == ResultCode::InProgress {
            let to = outcome.err().or(first).unwrap_or(ResultCode::Success);
            self.state.store(to as i32, Ordering::Release);
        }
    }

    /// Tests only: sets the state outright.
    #[cfg(test)]
    pub fn force(&self, code: ResultCode) {
        self.state.store(code as i32, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_error_is_kept_outside_an_operation() {
        let s = AsyncState::new(ResultCode::Success);
        assert!(!s.fail(ResultCode::SystemError), "shown at once");
        s.fail(ResultCode::RemoteError);
        assert_eq!(s.get(), ResultCode::SystemError);
        assert_eq!(s.begin().unwrap_err().code, ResultCode::SystemError, "no operation on a failed comm");
    }

    #[test]
    fn an_error_during_an_operation_waits_for_its_end() {
        let s = AsyncState::new(ResultCode::Success);
        s.begin().unwrap();
        assert_eq!(s.begin().unwrap_err().code, ResultCode::InvalidArgument, "second one");
        assert!(s.fail(ResultCode::RemoteError), "held");
        s.fail(ResultCode::SystemError);
        assert_eq!(s.get(), ResultCode::InProgress, "still running: the child is not written yet");
        s.end(Ok(()));
        assert_eq!(s.get(), ResultCode::RemoteError, "the first held error");
    }

    #[test]
    fn the_operations_own_error_wins_and_nothing_stays_held() {
        let s = AsyncState::new(ResultCode::Success);
        s.begin().unwrap();
        s.fail(ResultCode::RemoteError);
        s.end(Err(ResultCode::SystemError));
        assert_eq!(s.get(), ResultCode::SystemError);
        let t = AsyncState::new(ResultCode::Success);
        t.begin().unwrap();
        t.end(Ok(()));
        assert_eq!(t.get(), ResultCode::Success);
        t.begin().unwrap();
        t.end(Ok(()));
        assert_eq!(t.get(), ResultCode::Success, "a clean operation leaves nothing held for the next");
    }

    #[test]
    fn a_pending_init_ends_with_an_error_reported_during_it() {
        let s = AsyncState::new(ResultCode::InProgress);
        s.fail(ResultCode::RemoteError);
        assert_eq!(s.get(), ResultCode::InProgress);
        s.end(Ok(()));
        assert_eq!(s.get(), ResultCode::RemoteError);
    }

    #[test]
    fn end_outside_an_operation_changes_nothing() {
        let s = AsyncState::new(ResultCode::RemoteError);
        s.end(Ok(()));
        assert_eq!(s.get(), ResultCode::RemoteError);
    }

    #[test]
    fn errors_racing_the_end_are_never_lost() {
        for _ in 0..200 {
            let s = std::sync::Arc::new(AsyncState::new(ResultCode::Success));
            s.begin().unwrap();
            let t = {
                let s = s.clone();
                std::thread::spawn(move || s.fail(ResultCode::RemoteError))
            };
            s.end(Ok(()));
            t.join().unwrap();
            assert_eq!(s.get(), ResultCode::RemoteError);
        }
    }
}
