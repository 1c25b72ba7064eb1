//! Windows (ncclCommWindowRegister): a buffer every rank of a communicator registers collectively.
//! Registration is a collective over the bootstrap: the ranks exchange what they register, and a
//! symmetric window (NCCL_WIN_COLL_SYMMETRIC) whose ranks disagree on the size is
//! ncclInvalidUsage on every rank, with a WARN naming them, instead of undefined behaviour later.
//! A window's buffer is also registered (src/reg), so peers write put streams straight into it,
//! as into any ncclCommRegister buffer; the handle is owned by the communicator, freed by
//! ncclCommWindowDeregister or when the communicator goes.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::bootstrap::Bootstrap;
use crate::comm::Comm;
use crate::error::{Error, Result};

/// NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size.
pub const WIN_COLL_SYMMETRIC: i32 = 0x01;

/// One registered window (the `ncclWindow_t` handle points at it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub base: u64,
    pub size: u64,
    pub flags: i32,
    /// Its registration handle (src/reg), 0 if it has none.
    pub reg: u64,
}

/// Every window a communicator has registered, by handle address.
#[derive(Default)]
pub struct Windows(Mutex<Vec<usize>>);

impl Windows {
    fn insert(&self, w: Window) -> usize {
        let h = Box::into_raw(Box::new(w)) as usize;
        self.0.lock().push(h);
        h
    }

    /// Frees window `h` if this communicator registered it, returning what it was.
    pub fn remove(&self, h: usize) -> Result<Window> {
        let mut v = self.0.lock();
        let i = v.iter().position(|&x| x == h).ok_or_else(|| Error::invalid_usage(format!("unknown window {h:#x} (not registered with this communicator, or already deregistered)")))?;
        v.swap_remove(i);
        // SAFETY: h came from Box::into_raw in insert and was just removed from the list, so it
        // is freed exactly once.
        Ok(*unsafe { Box::from_raw(h as *mut Window) })
    }

    /// The window behind handle `h`, if this communicator registered it.
    pub fn get(&self, h: usize) -> Option<Window> {
        let v = self.0.lock();
        // SAFETY: handles in the list point at live Windows (freed only after removal).
        v.contains(&h).then(|| unsafe { (*(h as *const Window)).clone() })
    }

    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        for h in self.0.get_mut().drain(..) {
            // SAFETY: as in remove: each listed handle is freed once, here.
            drop(unsafe { Box::from_raw(h as *mut Window) });
        }
    }
}

/// Validates the caller's flags (before anything is deferred).
pub fn check_flags(flags: i32) -> Result<()> {
    if flags & !WIN_COLL_SYMMETRIC != 0 {
        return Err(Error::invalid_argument(format!("window flags {flags:#x}: only NCCL_WIN_COLL_SYMMETRIC (0x1) is defined")));
    }
    Ok(())
}

/// The collective part: every rank learns what the others register; a symmetric window must have
/// one size and the same flags everywhere.
pub fn agree(bs: &Bootstrap, size: u64, flags: i32) -> Result<()> {
    let mut mine = [0u8; 12];
    mine[..8].copy_from_slice(&size.to_le_bytes());
    mine[8..].copy_from_slice(&flags.to_le_bytes());
    let all = bs.all_gather(&mine)?;
    let parsed: Vec<(u64, i32)> = all
        .iter()
        .map(|b| match b.as_slice() {
            [s @ .., f0, f1, f2, f3] if s.len() == 8 => {
                let mut sz = [0u8; 8];
                sz.copy_from_slice(s);
                Ok((u64::from_le_bytes(sz), i32::from_le_bytes([*f0, *f1, *f2, *f3])))
            }
            _ => Err(Error::system(format!("window registration: a peer sent {} bytes", b.len()))),
        })
        .collect::<Result<_>>()?;
    compare(&parsed)
}

/// Ok if the ranks' (size, flags) are compatible; else the error every rank reports.
pub fn compare(all: &[(u64, i32)]) -> Result<()> {
    let Some(&(_, f0)) = all.first() else { return Ok(()) };
    if all.iter().any(|&(_, f)| f != f0) {
        let flags: Vec<String> = all.iter().enumerate().map(|(r, (_, f))| format!("rank {r}: {f:#x}")).collect();
        return Err(Error::invalid_usage(format!("ncclCommWindowRegister: ranks pass different flags ({})", flags.join(", "))));
    }
    if f0 & WIN_COLL_SYMMETRIC != 0 && all.iter().any(|&(s, _)| s != all[0].0) {
        let sizes: Vec<String> = all.iter().enumerate().map(|(r, (s, _))| format!("rank {r}: {s}")).collect();
        return Err(Error::invalid_usage(format!("ncclCommWindowRegister: a symmetric window needs one size on every rank ({})", sizes.join(", "))));
    }
    Ok(())
}

/// A deferred (or immediate) registration: runs the collective, then writes the handle.
pub struct WindowJob {
    pub comm: Arc<Comm>,
    pub base: u64,
    pub size: u64,
    pub flags: i32,
    /// Where the caller wants the handle (an `ncclWindow_t*` the caller keeps valid, as NCCL
    /// requires until the group ends).
    pub out: usize,
}

// SAFETY: `out` is an address the caller vouches for until the job has run; nothing else is
// thread-bound.
unsafe impl Send for WindowJob {}

impl WindowJob {
    pub fn run(self) -> Result<()> {
        let r = self.comm.ready()?;
        self.comm.check_usable()?;
        agree(&r.bootstrap, self.size, self.flags)?;
        // A buffer that cannot be registered still makes a window; streams then use scratch.
        let reg = self.comm.register(self.base, self.size).unwrap_or_else(|e| {
            nccl_info!(crate::log::Subsys::Reg, "window {:#x}: not registered ({})", self.base, e.msg);
            0
        });
        let h = self.comm.windows.insert(Window { base: self.base, size: self.size, flags: self.flags, reg });
        // SAFETY: the caller passed a non-NULL, writable ncclWindow_t* (checked at the call).
        unsafe { *(self.out as *mut usize) = h };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn symmetric_windows_need_one_size_and_flags_must_match() {
        assert!(compare(&[(4096, 1), (4096, 1), (4096, 1)]).is_ok());
        assert!(compare(&[(4096, 0), (8192, 0)]).is_ok(), "non-symmetric windows may differ in size");
        let e = compare(&[(4096, 1), (8192, 1)]).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert!(e.msg.contains("rank 1: 8192"), "{}", e.msg);
        assert_eq!(compare(&[(4096, 1), (4096, 0)]).unwrap_err().code, ResultCode::InvalidUsage);
        assert!(check_flags(0).is_ok() && check_flags(1).is_ok());
        assert_eq!(check_flags(2).unwrap_err().code, ResultCode::InvalidArgument);
    }

    #[test]
    fn handles_are_freed_once_and_only_known_ones() {
        let w = Windows::default();
        let a = w.insert(Window { base: 0x1000, size: 4096, flags: 1, reg: 0 });
        let b = w.insert(Window { base: 0x9000, size: 8192, flags: 0, reg: 7 });
        assert_eq!(w.get(a).unwrap().size, 4096);
        assert_eq!(w.len(), 2);
        assert_eq!(w.remove(a).unwrap().reg, 0);
        assert_eq!(w.remove(b).unwrap().reg, 7, "the registration handle comes back to be released");
        let b = w.insert(Window { base: 0x9000, size: 8192, flags: 0, reg: 7 });
        assert_eq!(w.remove(a).unwrap_err().code, ResultCode::InvalidUsage, "twice");
        assert_eq!(w.remove(0xdead0).unwrap_err().code, ResultCode::InvalidUsage, "never registered");
        assert!(w.get(a).is_none());
        assert_eq!(w.get(b).unwrap().base, 0x9000);
        drop(w); // frees b
    }

    /// The collective over real bootstraps: agreement passes, a size mismatch fails everywhere.
    #[test]
    fn registration_is_collective_over_the_bootstrap() {
        let id = crate::bootstrap::get_unique_id().unwrap();
        let t = std::time::Duration::from_secs(20);
        let ranks: Vec<Bootstrap> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3).map(|r| s.spawn(move || Bootstrap::init(&id, r, 3, t).unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let run = |sizes: [u64; 3]| -> Vec<Result<()>> {
            std::thread::scope(|s| {
                let hs: Vec<_> = ranks.iter().zip(sizes).map(|(bs, sz)| s.spawn(move || agree(bs, sz, WIN_COLL_SYMMETRIC))).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        assert!(run([1 << 20; 3]).iter().all(Result::is_ok));
        let bad = run([1 << 20, 1 << 20, 1 << 21]);
        assert!(bad.iter().all(|r| r.as_ref().is_err_and(|e| e.code == ResultCode::InvalidUsage)), "every rank reports it");
    }
}
