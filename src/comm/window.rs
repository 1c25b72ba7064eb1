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
use crate::comm::rma::{RmaArea, RmaLayout};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::symmem::{SymMem, SymWindow};

/// NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size.
pub const WIN_COLL_SYMMETRIC: i32 = 0x01;
/// NCCL_WIN_STRICT_ORDERING (NCCL 2.30+): strict ordering of GIN writes over IB verbs (for GIN
/// VA signals). oxccl has no GIN: recorded in the descriptor, nothing else.
pub const WIN_STRICT_ORDERING: i32 = 0x02;
/// NCCL_WIN_GIN_ONLY (NCCL 2.32): registered for GIN only. As NCCL 2.32.3's
/// ncclDevrWinRegEnabled reads it, every other capability is off: the window gets no one-sided
/// (ncclPutSignal) use, which is refused, and its CFT queries are ncclInvalidUsage. Load/store
/// pointers and collectives are unaffected, as in NCCL.
pub const WIN_GIN_ONLY: i32 = 0x04;
/// NCCL_WIN_CFT_COUNTED (NCCL 2.32): use the counted CFT logical endpoints. oxccl has no CFT
/// (neither has NCCL on Hopper): the descriptor's `ucLeIdBase` is NCCL_LE_ID_INVALID either way.
pub const WIN_CFT_COUNTED: i32 = 0x08;
/// Every flag NCCL 2.32.3's nccl.h defines.
pub const WIN_FLAGS: i32 = WIN_COLL_SYMMETRIC | WIN_STRICT_ORDERING | WIN_GIN_ONLY | WIN_CFT_COUNTED;

/// One registered window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Device address of this rank's buffer.
    pub base: u64,
    /// Its length in bytes.
    pub size: u64,
    /// The registration flags (NCCL_WIN_*, `WIN_FLAGS`).
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
    /// The registration flags (NCCL_WIN_*).
    pub flags: i32,
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
    /// Every rank's size of the window, by rank, as the registration agreed (empty where not
    /// known: the device communicator's own windows, of one size everywhere).
    sizes: Vec<u64>,
    /// In symmetric memory: (LSA rank 0's copy in the flat space, stride), as `WindowView::flat`.
    flat: Option<(u64, u64)>,
}

#[derive(Default)]
struct State {
    list: Vec<(usize, Entry)>,
    sym: Option<SymMem>,
    /// The one-sided operations' signal area (comm::rma), once allocated.
    rma: Option<(SymWindow, RmaArea)>,
}

impl Drop for State {
    fn drop(&mut self) {
        // Windows before the space they are mapped in.
        for (_, e) in self.list.drain(..) {
            if let (Some(w), Some(sm)) = (e.sym, self.sym.as_mut()) {
                sm.release(w);
            }
        }
        if let (Some((w, _)), Some(sm)) = (self.rma.take(), self.sym.as_mut()) {
            sm.release(w);
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
        self.0.lock().list.push((h, Entry { window: w, sym: None, _anchor: Some(anchor), sizes: Vec::new(), flat: None }));
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
        Some(WindowView { base: e.window.base, size: e.window.size, flat: e.flat, flags: e.window.flags })
    }

    /// A window that looks as if it were in symmetric memory at `flat` (unit tests of what reads
    /// windows, without a GPU).
    #[cfg(test)]
    pub fn insert_symmetric(&self, w: Window, flat: (u64, u64), sizes: Vec<u64>) -> usize {
        let anchor = Box::new(0u8);
        let h = &*anchor as *const u8 as usize;
        self.0.lock().list.push((h, Entry { window: w, sym: None, _anchor: Some(anchor), sizes, flat: Some(flat) }));
        h
    }

    /// Records every rank's size of window `h` (by rank), as its registration agreed.
    pub fn set_sizes(&self, h: usize, sizes: Vec<u64>) {
        if let Some((_, e)) = self.0.lock().list.iter_mut().find(|(x, _)| *x == h) {
            e.sizes = sizes;
        }
    }

    /// Rank `peer`'s size of window `h`: as its registration agreed, else this rank's (a window
    /// whose size every rank shares). None for a window this communicator did not register.
    pub fn peer_size(&self, h: usize, peer: usize) -> Option<u64> {
        let st = self.0.lock();
        let (_, e) = st.list.iter().find(|(x, _)| *x == h)?;
        Some(e.sizes.get(peer).copied().unwrap_or(e.window.size))
    }

    /// Where the one-sided operations' signal areas lie, once allocated (`ensure_rma`).
    pub fn rma_area(&self) -> Option<RmaArea> {
        self.0.lock().rma.as_ref().map(|(_, a)| *a)
    }

    /// Collective, once the communicator has symmetric memory: allocates every rank's signal area
    /// for the one-sided operations (comm::rma), unless it exists. The ranks agree on its layout
    /// (the largest numRmaCtx and numRmaSig any of them asked for; none where all asked for 0
    /// contexts). Where the memory cannot be had on some rank, no rank gets an area (an INFO
    /// line says why) and the next registration tries again; the operations meanwhile fail with
    /// ncclInvalidUsage. Errors only where the bootstrap fails.
    pub fn ensure_rma(&self, bs: &Bootstrap, ctxs: i32, sigs: i32) -> Result<()> {
        let mut st = self.0.lock();
        if st.rma.is_some() || st.sym.is_none() {
            return Ok(());
        }
        let all = bs.all_gather(&RmaLayout::encode(ctxs, sigs))?;
        let all: Vec<(i32, i32)> = all
            .iter()
            .enumerate()
            .map(|(r, b)| RmaLayout::decode(b).ok_or_else(|| Error::system(format!("one-sided signal area: rank {r} sent {} bytes", b.len()))))
            .collect::<Result<_>>()?;
        let Some(layout) = RmaLayout::agreed(&all) else { return Ok(()) };
        let Some(bytes) = layout.bytes() else {
            nccl_info!(crate::log::Subsys::Reg, "one-sided signal area: {layout:?} is too large; one-sided operations are unavailable");
            return Ok(());
        };
        let Some(sm) = st.sym.as_mut() else { return Ok(()) };
        // alloc_window fails on every rank alike (its mapping is agreed); what follows it is
        // local, so the ranks agree once more before any of them keeps its area.
        let made = sm.alloc_window(bs, bytes);
        let ok = bs.all_gather(&[made.is_ok() as u8])?.iter().all(|b| b.first() == Some(&1));
        match made {
            Ok(w) if ok => {
                let area = RmaArea { flat: w.desc.lsaFlatBase, stride: (w.desc.stride4G as u64) << 32, layout };
                st.rma = Some((w, area));
            }
            Ok(w) => {
                sm.release(w);
                nccl_info!(crate::log::Subsys::Reg, "one-sided signal area: another rank could not set its area up; one-sided operations are unavailable for now");
            }
            Err(e) => nccl_info!(crate::log::Subsys::Reg, "one-sided signal area: {}; one-sided operations are unavailable for now", e.msg),
        }
        Ok(())
    }

    /// `view`, without waiting: None while another thread holds the list (a registration, which
    /// may be a collective waiting for other ranks).
    pub fn try_view(&self, h: usize) -> Option<Option<WindowView>> {
        let st = self.0.try_lock()?;
        let found = st.list.iter().find(|(x, _)| *x == h).map(|(_, e)| {
            let flat = e.sym.as_ref().map(|s| (s.desc.lsaFlatBase, (s.desc.stride4G as u64) << 32));
            WindowView { base: e.window.base, size: e.window.size, flat, flags: e.window.flags }
        });
        Some(found)
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
            let flat = Some((sw.desc.lsaFlatBase, (sw.desc.stride4G as u64) << 32));
            st.list.push((h, Entry { window, sym: Some(sw), _anchor: None, sizes: Vec::new(), flat }));
            h
        });
        Ok((t, h))
    }
}

/// Validates the caller's flags (before anything is deferred): NCCL 2.32.3's NCCL_WIN_* bits
/// (`WIN_FLAGS`) mean what they say; NCCL reads no other bit and refuses none (a flag of a newer
/// header works with it), so oxccl accepts them too and says at INFO that it ignores them.
pub fn check_flags(flags: i32) -> Result<()> {
    if flags & !WIN_FLAGS != 0 {
        nccl_info!(
            crate::log::Subsys::Reg,
            "window flags {flags:#x}: bits {:#x} are not NCCL 2.32.3's NCCL_WIN_* flags and are ignored, as NCCL ignores them",
            flags & !WIN_FLAGS
        );
    }
    Ok(())
}

/// The collective part: every rank learns what the others register; a symmetric window must have
/// one size and the same flags everywhere. Returns every rank's size, by rank.
pub fn agree(bs: &Bootstrap, size: u64, flags: i32) -> Result<Vec<u64>> {
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
    compare(&parsed)?;
    Ok(parsed.iter().map(|&(s, _)| s).collect())
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
        /// The caller's window flags (NCCL_WIN_*, checked by `check_flags`).
        flags: i32,
    },
    /// ncclDevCommCreate.
    DevComm(Box<crate::comm::devcomm::Request>),
    /// ncclCommSuspend with NCCL_SUSPEND_MEM (src/comm/suspend.rs).
    Suspend,
    /// ncclCommResume.
    Resume,
}

/// A deferred (or immediate) window registration, device communicator creation, suspend or
/// resume: collective, run in call order per communicator.
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
        match self.what {
            // Suspend and resume check the state themselves (a suspended communicator resumes).
            What::Suspend => return self.comm.suspend_memory(),
            What::Resume => return self.comm.resume_memory(),
            _ => {}
        }
        self.comm.check_usable()?;
        match self.what {
            What::Register { base, size, flags } => register(&self.comm, r, base, size, flags, self.out),
            What::DevComm(req) => crate::comm::devcomm::create(&self.comm, r, &req, self.out),
            What::Suspend | What::Resume => Ok(()),
        }
    }
}

/// The communicator's symmetric memory, set up on first use (collective).
pub fn init_sym(comm: &Comm, r: &crate::comm::Ready) -> Result<SymMem> {
    SymMem::init(r.dev, &r.bootstrap, r.reg.key, comm.rank, comm.nranks)
}

fn register(comm: &Comm, r: &crate::comm::Ready, base: u64, size: u64, flags: i32, out: usize) -> Result<()> {
    let sizes = agree(&r.bootstrap, size, flags)?;
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
                        Ok(m) => {
                            // The mapping is agreed; what follows is local, so the ranks agree once
                            // more: a rank failing alone must not leave the others waiting in the
                            // next collective step (the signal area's) for a rank that returned.
                            let w = sm.window(m, at, base, size, flags);
                            let all_ok = r.bootstrap.all_gather(&[w.is_ok() as u8])?.iter().all(|b| b.first() == Some(&1));
                            match w {
                                Ok(w) if all_ok => Ok((None, Some((window.clone(), w)))),
                                Ok(w) => {
                                    sm.release(w);
                                    Err(Error::system("symmetric window: another rank could not set its window up (see its WARN)"))
                                }
                                Err(e) => Err(e),
                            }
                        }
                        Err(why) => Ok((Some(why), None)),
                    },
                )
            });
            match made {
                Ok((_, Some(h))) => {
                    comm.windows.set_sizes(h, sizes);
                    // The one-sided operations' signals need symmetric memory too: allocated with
                    // the first window that has it, collectively as every rank registers it (the
                    // flags agree on every rank). A GIN-only window is not for one-sided
                    // operations: NCCL 2.32.3's ncclCommWindowRegister skips their setup for it.
                    if flags & WIN_GIN_ONLY == 0 {
                        comm.windows.ensure_rma(&r.bootstrap, comm.config.num_rma_ctx, comm.config.num_rma_sig)?;
                    }
                    h
                }
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
        let sym = WindowView { base: 0x7000_0000, size: 4096, flat: Some((0x1_0000_0000, 1 << 32)), flags: 1 };
        assert_eq!(sym.lsa_ptr(0, 0, 2, 1), Some(0x1_0000_0000));
        assert_eq!(sym.lsa_ptr(16, 1, 2, 1), Some(0x2_0000_0010));
        assert_eq!(sym.lsa_ptr(4095, 1, 2, 1), Some(0x2_0000_0fff));
        assert_eq!(sym.lsa_ptr(4096, 0, 2, 1), None, "offset at the end");
        assert_eq!(sym.lsa_ptr(0, 2, 2, 1), None, "rank outside the team");
        let plain = WindowView { base: 0x7000_0000, size: 4096, flat: None, flags: 0 };
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
        for f in 0..=0xf {
            assert!(check_flags(f).is_ok(), "NCCL 2.32.3's flags, any combination: {f:#x}");
        }
        assert!(check_flags(0x10).is_ok() && check_flags(-1).is_ok(), "other bits are ignored, as NCCL 2.32.3 ignores them");
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

    /// A peer's size is what the registration agreed, else this rank's; no area before one is made.
    #[test]
    fn peer_sizes_come_from_the_registration() {
        let w = Windows::default();
        let h = w.insert(Window { base: 0x1000, size: 4096, flags: 0, reg: 0 });
        assert_eq!(w.peer_size(h, 1), Some(4096), "sizes unknown: this rank's");
        w.set_sizes(h, vec![4096, 8192]);
        assert_eq!(w.peer_size(h, 1), Some(8192));
        assert_eq!(w.peer_size(h, 0), Some(4096));
        assert_eq!(w.peer_size(0xdead0, 0), None, "not registered");
        assert!(w.view(h).unwrap().flat.is_none());
        let s = w.insert_symmetric(Window { base: 0x9000, size: 4096, flags: 1, reg: 0 }, (1 << 40, 1 << 32), vec![4096; 2]);
        assert_eq!(w.view(s).unwrap().flat, Some((1 << 40, 1 << 32)));
        assert!(w.rma_area().is_none());
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
        let run = |sizes: [u64; 3]| -> Vec<Result<Vec<u64>>> {
            std::thread::scope(|s| {
                let hs: Vec<_> = ranks.iter().zip(sizes).map(|(bs, sz)| s.spawn(move || agree(bs, sz, WIN_COLL_SYMMETRIC))).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        assert!(run([1 << 20; 3]).iter().all(|r| r.as_ref().is_ok_and(|s| *s == vec![1 << 20; 3])), "every rank learns every size");
        let bad = run([1 << 20, 1 << 20, 1 << 21]);
        assert!(bad.iter().all(|r| r.as_ref().is_err_and(|e| e.code == ResultCode::InvalidUsage)), "every rank reports it");
    }
}
