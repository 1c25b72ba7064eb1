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
use crate::symmem::{SymMem, SymWindow};

/// NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size.
pub const WIN_COLL_SYMMETRIC: i32 = 0x01;

/// One registered window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Device address of this rank's buffer.
    pub base: u64,
    /// Its length in bytes.
    pub size: u64,
    /// The registration flags (`WIN_COLL_SYMMETRIC` or 0).
    pub flags: i32,
    /// Its registration handle (src/reg), 0 if it has none.
    pub reg: u64,
}

/// A registered window as the device-pointer queries see it (`Windows::view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowView {
    /// Device address of this rank's buffer (the user pointer it registered).
    pub base: u64,
    /// Its length in bytes.
    pub size: u64,
    /// Symmetric memory: (LSA rank 0's copy in the flat space, bytes between ranks' copies).
    pub flat: Option<(u64, u64)>,
}

impl WindowView {
    /// The address of byte `offset` of LSA rank `lsa_rank`'s copy, as NCCL's
    /// ncclDevrGetLsaRankPtr computes it (dev_runtime.cc): None where `offset` is outside the
    /// window or the rank is outside the LSA team (`lsa_size` ranks; a window without symmetric
    /// memory reaches this rank's own copy only, as LSA rank `me`).
    pub fn lsa_ptr(&self, offset: u64, lsa_rank: usize, lsa_size: usize, me: usize) -> Option<u64> {
        if offset >= self.size || lsa_rank >= lsa_size {
            return None;
        }
        match self.flat {
            Some((flat, stride)) => Some(flat + lsa_rank as u64 * stride + offset),
            None => (lsa_rank == me).then_some(self.base + offset),
        }
    }
}

/// A window and what backs its handle: symmetric memory (the handle is the device address of
/// its `ncclWindow_vidmem`, which kernels dereference) or nothing but a unique host address.
struct Entry {
    window: Window,
    sym: Option<SymWindow>,
    _anchor: Option<Box<u8>>,
}

#[derive(Default)]
struct State {
    list: Vec<(usize, Entry)>,
    sym: Option<SymMem>,
}

impl Drop for State {
    fn drop(&mut self) {
        // Windows before the space they are mapped in.
        for (_, e) in self.list.drain(..) {
            if let (Some(w), Some(sm)) = (e.sym, self.sym.as_mut()) {
                sm.release(w);
            }
        }
    }
}

/// Every window a communicator has registered, by handle, and its symmetric memory.
#[derive(Default)]
pub struct Windows(Mutex<State>);

impl Windows {
    /// Enters a window without symmetric memory; its handle is a fresh host address.
    pub fn insert(&self, w: Window) -> usize {
        let anchor = Box::new(0u8);
        let h = &*anchor as *const u8 as usize;
        self.0.lock().list.push((h, Entry { window: w, sym: None, _anchor: Some(anchor) }));
        h
    }

    /// Frees window `h` if this communicator registered it, returning what it was.
    pub fn remove(&self, h: usize) -> Result<Window> {
        let mut st = self.0.lock();
        let i = st
            .list
            .iter()
            .position(|(x, _)| *x == h)
            .ok_or_else(|| Error::invalid_usage(format!("unknown window {h:#x} (not registered with this communicator, or already deregistered)")))?;
        let (_, e) = st.list.swap_remove(i);
        if let (Some(w), Some(sm)) = (e.sym, st.sym.as_mut()) {
            sm.release(w);
        }
        Ok(e.window)
    }

    /// The window behind handle `h`, if this communicator registered it.
    pub fn get(&self, h: usize) -> Option<Window> {
        self.0.lock().list.iter().find(|(x, _)| *x == h).map(|(_, e)| e.window.clone())
    }

    /// Where window `h`'s copies lie, if this communicator registered it: this rank's buffer and
    /// size, and for a window in symmetric memory the flat-space address of LSA rank 0's copy
    /// and the stride between ranks' copies (None for a window without symmetric memory).
    pub fn view(&self, h: usize) -> Option<WindowView> {
        let st = self.0.lock();
        let (_, e) = st.list.iter().find(|(x, _)| *x == h)?;
        let flat = e.sym.as_ref().map(|s| (s.desc.lsaFlatBase, (s.desc.stride4G as u64) << 32));
        Some(WindowView { base: e.window.base, size: e.window.size, flat })
    }

    /// How many windows are registered.
    pub fn len(&self) -> usize {
        self.0.lock().list.len()
    }

    /// Whether no window is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where [ptr, ptr + len) lies in every rank's copy of a symmetric window registered with
    /// NCCL_WIN_COLL_SYMMETRIC: its address in slot 0 of the flat space and the stride between
    /// slots. None if no such window holds it.
    pub fn symmetric_span(&self, ptr: u64, len: u64) -> Option<(u64, u64)> {
        let st = self.0.lock();
        st.list.iter().find_map(|(_, e)| {
            let w = &e.window;
            let sym = e.sym.as_ref()?;
            let inside = w.flags & WIN_COLL_SYMMETRIC != 0 && ptr >= w.base && len <= w.size && ptr - w.base <= w.size - len;
            inside.then(|| (sym.desc.lsaFlatBase + (ptr - w.base), (sym.desc.stride4G as u64) << 32))
        })
    }

    /// Runs `f` on the communicator's symmetric memory, set up (collectively) on first use, and
    /// enters the window it returns, if any, under its device handle.
    pub fn with_sym<T>(&self, init: impl FnOnce() -> Result<SymMem>, f: impl FnOnce(&mut SymMem) -> Result<(T, Option<(Window, SymWindow)>)>) -> Result<(T, Option<usize>)> {
        let mut st = self.0.lock();
        if st.sym.is_none() {
            st.sym = Some(init()?);
        }
        let Some(sm) = st.sym.as_mut() else { return Err(Error::internal("symmetric memory missing")) };
        let (t, win) = f(sm)?;
        let h = win.map(|(window, sw)| {
            let h = sw.vidmem.ptr as usize;
            st.list.push((h, Entry { window, sym: Some(sw), _anchor: None }));
            h
        });
        Ok((t, h))
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

/// What a deferred window job does.
pub enum What {
    /// ncclCommWindowRegister of [base, base + size).
    Register {
        /// Device address of the caller's buffer.
        base: u64,
        /// Its length in bytes.
        size: u64,
        /// The caller's window flags (`WIN_COLL_SYMMETRIC` or 0).
        flags: i32,
    },
    /// ncclDevCommCreate.
    DevComm(Box<crate::comm::devcomm::Request>),
}

/// A deferred (or immediate) window registration or device communicator creation: collective,
/// run in call order per communicator.
pub struct WindowJob {
    /// The communicator it registers with.
    pub comm: Arc<Comm>,
    /// A window registration or a device communicator creation.
    pub what: What,
    /// Where the caller wants the result (an `ncclWindow_t*` or `ncclDevComm*` the caller keeps
    /// valid, as NCCL requires until the group ends).
    pub out: usize,
}

// SAFETY: `out` (and the request's output pointers) are addresses the caller vouches for until the
// job has run; nothing else is thread-bound.
unsafe impl Send for WindowJob {}

impl WindowJob {
    /// Runs the job (collective over the communicator) and writes its result to `out`. Fails
    /// where the communicator is not initialised or not usable, or the registration fails.
    pub fn run(self) -> Result<()> {
        let r = self.comm.ready()?;
        self.comm.check_usable()?;
        match self.what {
            What::Register { base, size, flags } => register(&self.comm, r, base, size, flags, self.out),
            What::DevComm(req) => crate::comm::devcomm::create(&self.comm, r, &req, self.out),
        }
    }
}

/// The communicator's symmetric memory, set up on first use (collective).
pub fn init_sym(comm: &Comm, r: &crate::comm::Ready) -> Result<SymMem> {
    SymMem::init(r.dev, &r.bootstrap, r.reg.key, comm.rank, comm.nranks)
}

fn register(comm: &Comm, r: &crate::comm::Ready, base: u64, size: u64, flags: i32, out: usize) -> Result<()> {
    agree(&r.bootstrap, size, flags)?;
    // A buffer that cannot be registered still makes a window; streams then use scratch.
    let reg = comm.register(base, size).unwrap_or_else(|e| {
        nccl_info!(crate::log::Subsys::Reg, "window {base:#x}: not registered ({})", e.msg);
        0
    });
    let window = Window { base, size, flags, reg };
    let h = match crate::symmem::unsupported(r.net.is_none()) {
        Some(why) => {
            nccl_info!(crate::log::Subsys::Reg, "window {base:#x}: no symmetric memory ({why}); the window serves collectives only");
            comm.windows.insert(window)
        }
        None => {
            let local = crate::symmem::Local::describe(r.dev, base, size).map(|l| {
                let at = l.as_ref().map_or(0, |l| l.at);
                (l, at)
            });
            let made = local.and_then(|(local, at)| {
                comm.windows.with_sym(
                    || init_sym(comm, r),
                    |sm| match sm.map_all(&r.bootstrap, local)? {
                        Ok(m) => Ok((None, Some((window.clone(), sm.window(m, at, base, size)?)))),
                        Err(why) => Ok((Some(why), None)),
                    },
                )
            });
            match made {
                Ok((_, Some(h))) => h,
                Ok((why, None)) => {
                    nccl_info!(
                        crate::log::Subsys::Reg,
                        "window {base:#x}: not in symmetric memory ({}); device kernels cannot use it, collectives can",
                        why.unwrap_or_default()
                    );
                    comm.windows.insert(window)
                }
                Err(e) => {
                    if reg != 0 {
                        let _ = comm.deregister(reg);
                    }
                    return Err(e);
                }
            }
        }
    };
    // SAFETY: the caller passed a non-NULL, writable ncclWindow_t* (checked at the call).
    unsafe { *(out as *mut usize) = h };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::WindowView;

    #[test]
    fn lsa_pointers_follow_nccls_lsa_rank_arithmetic() {
        let sym = WindowView { base: 0x7000_0000, size: 4096, flat: Some((0x1_0000_0000, 1 << 32)) };
        assert_eq!(sym.lsa_ptr(0, 0, 2, 1), Some(0x1_0000_0000));
        assert_eq!(sym.lsa_ptr(16, 1, 2, 1), Some(0x2_0000_0010));
        assert_eq!(sym.lsa_ptr(4095, 1, 2, 1), Some(0x2_0000_0fff));
        assert_eq!(sym.lsa_ptr(4096, 0, 2, 1), None, "offset at the end");
        assert_eq!(sym.lsa_ptr(0, 2, 2, 1), None, "rank outside the team");
        let plain = WindowView { base: 0x7000_0000, size: 4096, flat: None };
        assert_eq!(plain.lsa_ptr(8, 0, 1, 0), Some(0x7000_0008));
        assert_eq!(plain.lsa_ptr(8, 1, 1, 0), None);
    }

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
