//! One-sided operations of NCCL 2.29+ (ncclPutSignal, ncclSignal, ncclWaitSignal) over windows in
//! symmetric memory: their argument checks, the signal area's layout, and the stream work.
//!
//! A put is a copy-engine copy from the caller's buffer straight into the peer's copy of the
//! window (its address in the flat symmetric space, src/symmem), then a signal. A signal is a
//! one-thread kernel (ox_ce_post, kernels/colls/ce_direct.cu) that adds one to the peer's counter
//! for (context, signal index, this rank) through the same flat mapping. A wait is a kernel
//! (ox_rma_wait, kernels/colls/rma.cu) that spins until a counter of this rank exceeds its
//! consumed count by the number asked for, then raises the consumed count. Counters and consumed
//! counts both live on the device: eager calls and CUDA graph replays (which signal and wait
//! again on every replay) share them, and the host bakes no count into a graph. NCCL's copy-engine
//! path (src/rma/rma_ce.cc, 2.30.7) instead writes host-tracked sequence numbers eagerly and runs
//! a separate ack handshake inside graphs; the observable semantics are the same: stream order, a
//! wait returns once that many more signals from the peer arrived than earlier waits took, and the
//! data of those puts is then visible to work after it on the stream.
//!
//! Each rank's signal area (allocated collectively with the communicator's first window in
//! symmetric memory, `Windows::ensure_rma`) holds `[ctx][sig][sender]` u64 counters, then the
//! consumed counts in the same layout.

use std::ffi::c_int;

use super::window::WindowView;
use super::Ready;
use crate::config::CommConfig;
use crate::device_abi::{CollArgs, RmaWaitArgs, OX_RMA_WAIT_MAX};
use crate::error::{Error, Result};
use crate::gpu::module::launch_pdl;
use crate::gpu::cu;

/// The WARN text where no symmetric memory backs a one-sided operation.
pub const NEEDS_SYMMETRIC: &str = "one-sided operations need a window in symmetric memory reachable by load/store from every rank \
     (ranks on one host with peer access, the window registered with ncclCommWindowRegister from ncclMemAlloc memory); \
     NCCL's proxy path for other peers is not implemented";

/// The shape of every rank's signal area: contexts, signal indices and ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaLayout {
    /// Contexts (numRmaCtx).
    pub ctxs: usize,
    /// Signal indices per context (numRmaSig).
    pub sigs: usize,
    /// Ranks of the communicator (senders).
    pub nranks: usize,
}

impl RmaLayout {
    /// The layout every rank uses, from every rank's (numRmaCtx, numRmaSig): the largest of each,
    /// so that any rank's valid (ctx, sigIdx) has a counter on every peer even where the ranks'
    /// configurations differ. None where no rank enables one-sided operations (numRmaCtx 0 everywhere).
    pub fn agreed(all: &[(i32, i32)]) -> Option<RmaLayout> {
        let ctxs = all.iter().map(|&(c, _)| c.max(0) as usize).max()?;
        let sigs = all.iter().map(|&(_, s)| s.max(1) as usize).max()?;
        (ctxs > 0).then_some(RmaLayout { ctxs, sigs, nranks: all.len() })
    }

    /// Index of the counter (and consumed count) of (`ctx`, `sig`, `sender`).
    pub fn slot(&self, ctx: usize, sig: usize, sender: usize) -> usize {
        (ctx * self.sigs + sig) * self.nranks + sender
    }

    /// Counters per rank.
    pub fn slots(&self) -> usize {
        self.ctxs * self.sigs * self.nranks
    }

    /// Bytes of one rank's area: its counters, then as many consumed counts. None on overflow.
    pub fn bytes(&self) -> Option<u64> {
        (self.ctxs as u64).checked_mul(self.sigs as u64)?.checked_mul(self.nranks as u64)?.checked_mul(16)
    }

    /// Its encoding for the agreement (this rank's numRmaCtx and numRmaSig).
    pub fn encode(ctxs: i32, sigs: i32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&ctxs.to_le_bytes());
        b[4..].copy_from_slice(&sigs.to_le_bytes());
        b
    }

    /// A peer's (numRmaCtx, numRmaSig) from `encode`'s bytes.
    pub fn decode(b: &[u8]) -> Option<(i32, i32)> {
        let c = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let s = i32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
        Some((c, s))
    }
}

/// Where every rank's signal area lies in the flat symmetric space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaArea {
    /// Rank 0's area (its address in the flat space).
    pub flat: u64,
    /// Bytes between two ranks' areas.
    pub stride: u64,
    /// The areas' layout.
    pub layout: RmaLayout,
}

impl RmaArea {
    /// Address (as mapped here) of `owner`'s counter of signals from `sender` on (`ctx`, `sig`).
    pub fn counter(&self, owner: usize, ctx: usize, sig: usize, sender: usize) -> u64 {
        self.counters(owner) + 8 * self.layout.slot(ctx, sig, sender) as u64
    }

    /// Address of `owner`'s first counter.
    pub fn counters(&self, owner: usize) -> u64 {
        self.flat + owner as u64 * self.stride
    }

    /// Address of `owner`'s first consumed count (after its counters).
    pub fn consumed(&self, owner: usize) -> u64 {
        self.counters(owner) + 8 * self.layout.slots() as u64
    }
}

/// One entry of a wait, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitDesc {
    /// The rank whose signals it waits for.
    pub peer: usize,
    /// Context.
    pub ctx: usize,
    /// Signal index.
    pub sig: usize,
    /// Signals to wait for (more than 0).
    pub count: u32,
}

/// What a one-sided operation does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RmaKind {
    /// ncclPutSignal: `bytes` from `src` to `dst` (the peer's copy of the window, in the flat
    /// space), then a signal.
    Put {
        /// Device address read.
        src: u64,
        /// Device address written (as mapped here).
        dst: u64,
        /// Bytes copied (0: the signal alone).
        bytes: u64,
        /// The target rank.
        peer: usize,
        /// Context.
        ctx: usize,
        /// Signal index.
        sig: usize,
    },
    /// ncclSignal.
    Signal {
        /// The target rank.
        peer: usize,
        /// Context.
        ctx: usize,
        /// Signal index.
        sig: usize,
    },
    /// ncclWaitSignal.
    Wait(Vec<WaitDesc>),
}

/// One validated one-sided operation and its stream.
#[derive(Clone, Debug)]
pub struct RmaOp {
    /// What it does.
    pub kind: RmaKind,
    /// The application's stream it is ordered on.
    pub stream: cu::CUstream,
}

// SAFETY: the stream is an opaque driver handle, valid from any thread (as CollTask's).
unsafe impl Send for RmaOp {}
unsafe impl Sync for RmaOp {}

impl RmaOp {
    /// The ranks the operation needs (liveness): its target, or the ranks it waits for.
    pub fn peers(&self) -> Vec<usize> {
        match &self.kind {
            RmaKind::Put { peer, .. } | RmaKind::Signal { peer, .. } => vec![*peer],
            RmaKind::Wait(d) => {
                let mut p: Vec<usize> = d.iter().map(|d| d.peer).collect();
                p.sort_unstable();
                p.dedup();
                p
            }
        }
    }

    /// Bytes it copies.
    pub fn bytes(&self) -> u64 {
        match &self.kind {
            RmaKind::Put { bytes, .. } => *bytes,
            _ => 0,
        }
    }

    /// A line for OXCCL_DEBUG_DUMP.
    pub fn describe(&self) -> String {
        match &self.kind {
            RmaKind::Put { bytes, peer, ctx, sig, .. } => format!("PutSignal {bytes} bytes to rank {peer} ctx {ctx} sigIdx {sig}"),
            RmaKind::Signal { peer, ctx, sig } => format!("Signal to rank {peer} ctx {ctx} sigIdx {sig}"),
            RmaKind::Wait(d) => format!("WaitSignal on {} descriptors", d.len()),
        }
    }
}

/// The communicator's one-sided limits, from its configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// numRmaCtx (0: one-sided operations disabled).
    pub ctxs: i32,
    /// numRmaSig.
    pub sigs: i32,
    /// Ranks.
    pub nranks: usize,
}

impl Limits {
    /// The limits of a communicator of `nranks` ranks configured as `cfg`.
    pub fn of(cfg: &CommConfig, nranks: usize) -> Limits {
        Limits { ctxs: cfg.num_rma_ctx, sigs: cfg.num_rma_sig, nranks }
    }

    /// ncclInvalidUsage where the communicator was created with numRmaCtx = 0.
    pub fn enabled(&self) -> Result<()> {
        if self.ctxs <= 0 {
            return Err(Error::invalid_usage("one-sided operations are disabled on this communicator (numRmaCtx / NCCL_NUM_RMA_CTX is 0)"));
        }
        Ok(())
    }

    /// (ctx, sigIdx) checked against numRmaCtx and numRmaSig (ncclInvalidArgument, as NCCL's
    /// rmaTaskAppend, src/enqueue.cc).
    pub fn ctx_sig(&self, ctx: c_int, sig: c_int) -> Result<(usize, usize)> {
        if ctx < 0 || ctx >= self.ctxs {
            return Err(Error::invalid_argument(format!("context {ctx} is invalid (must be in [0, {}))", self.ctxs)));
        }
        if sig < 0 || sig >= self.sigs {
            return Err(Error::invalid_argument(format!("signal index {sig} is invalid (must be in [0, {}))", self.sigs)));
        }
        Ok((ctx as usize, sig as usize))
    }

    /// A rank argument in [0, nranks).
    pub fn peer(&self, peer: c_int) -> Result<usize> {
        if peer < 0 || peer as usize >= self.nranks {
            return Err(Error::invalid_argument(format!("invalid peer {peer} (peer should be in the 0..{} range)", self.nranks)));
        }
        Ok(peer as usize)
    }

    /// ncclPutSignal's and ncclSignal's common arguments, in NCCL's order: the peer, then
    /// (as rmaTaskAppend) numRmaCtx, ctx, sigIdx and flags. Returns (peer, ctx, sig).
    pub fn signal_args(&self, peer: c_int, sig: c_int, ctx: c_int, flags: u32) -> Result<(usize, usize, usize)> {
        let peer = self.peer(peer)?;
        self.enabled()?;
        let (ctx, sig) = self.ctx_sig(ctx, sig)?;
        if flags != 0 {
            return Err(Error::invalid_argument(format!("flags {flags} is invalid (must be 0)")));
        }
        Ok((peer, ctx, sig))
    }

    /// ncclWaitSignal's descriptors, each (opCnt, peer, sigIdx, ctx), checked as NCCL 2.30.7's
    /// rmaTaskAppend does (an empty list and opCnt <= 0 are invalid arguments), plus the peer's
    /// range (NCCL indexes its per-rank arrays with it unchecked).
    pub fn wait_descs(&self, descs: &[(c_int, c_int, c_int, c_int)]) -> Result<Vec<WaitDesc>> {
        if descs.is_empty() {
            return Err(Error::invalid_argument("invalid arguments (nDesc must be above 0 and signalDescs not NULL)"));
        }
        self.enabled()?;
        descs
            .iter()
            .enumerate()
            .map(|(i, &(op_cnt, peer, sig, ctx))| {
                if op_cnt <= 0 {
                    return Err(Error::invalid_argument(format!("descriptor {i} has invalid opCnt {op_cnt}")));
                }
                let peer = self.peer(peer).map_err(|e| e.context(format!("descriptor {i}")))?;
                let (ctx, sig) = self.ctx_sig(ctx, sig).map_err(|e| e.context(format!("descriptor {i}")))?;
                Ok(WaitDesc { peer, ctx, sig, count: op_cnt as u32 })
            })
            .collect()
    }
}

/// The device address a put of `bytes` at `offset` writes in rank `peer`'s copy of a window:
/// `view` is the window as this rank registered it (None: not registered with this
/// communicator), `peer_size` the peer's size of it. ncclInvalidArgument for an unknown window
/// a window registered NCCL_WIN_GIN_ONLY (not for one-sided operations, NCCL 2.32.3's wording),
/// or a range past the peer's end; ncclInvalidUsage for a window without symmetric memory.
pub fn put_target(view: Option<WindowView>, peer_size: u64, peer: usize, offset: u64, bytes: u64) -> Result<u64> {
    let v = view.ok_or_else(|| Error::invalid_argument("peerWin is not a window registered with this communicator"))?;
    if v.flags & crate::comm::window::WIN_GIN_ONLY != 0 {
        return Err(Error::invalid_argument("ncclPutSignal requires a window registered for RMA (peerWin was registered with NCCL_WIN_GIN_ONLY)"));
    }
    let Some((flat, stride)) = v.flat else {
        return Err(Error::invalid_usage(format!("peerWin has no symmetric memory: {NEEDS_SYMMETRIC}")));
    };
    match offset.checked_add(bytes) {
        Some(end) if end <= peer_size => Ok(flat + peer as u64 * stride + offset),
        _ => Err(Error::invalid_argument(format!("peerWinOffset {offset} + {bytes} bytes is past the end of rank {peer}'s window ({peer_size} bytes)"))),
    }
}

/// The wait kernel's launches for `descs` on rank `me`: `OX_RMA_WAIT_MAX` descriptors each, in
/// order (one after another on the stream, so a list of any length waits for all of them).
pub fn wait_launches(area: &RmaArea, me: usize, dev_comm: u64, descs: &[WaitDesc]) -> Vec<RmaWaitArgs> {
    descs
        .chunks(OX_RMA_WAIT_MAX)
        .map(|chunk| {
            let mut a = RmaWaitArgs { comm: dev_comm, counters: area.counters(me), consumed: area.consumed(me), n: chunk.len() as u32, ..Default::default() };
            for (i, d) in chunk.iter().enumerate() {
                a.slots[i] = area.layout.slot(d.ctx, d.sig, d.peer) as u32;
                a.counts[i] = d.count;
            }
            a
        })
        .collect()
}

/// Issues `op` of rank `me` on its stream (the caller holds the communicator's launch lock with
/// its device current). Returns whether a wait came last (nothing may start early behind it).
pub fn issue(r: &Ready, area: &RmaArea, me: usize, op: &RmaOp) -> Result<bool> {
    let signal = |peer: usize, ctx: usize, sig: usize| {
        let args = CollArgs { recv: area.counter(peer, ctx, sig, me), ..Default::default() };
        launch_pdl(r.module.ce_post(), 1, 32, op.stream, &args, false)
    };
    match &op.kind {
        RmaKind::Put { src, dst, bytes, peer, ctx, sig } => {
            if *bytes > 0 {
                // The signal kernel after it on the stream starts once the copy has completed,
                // its writes landed in the peer's memory (as NCCL's copy-engine path relies on).
                crate::gpu::stream::copy_engine_async(*dst, *src, *bytes as usize, op.stream)?;
            }
            signal(*peer, *ctx, *sig)?;
            Ok(false)
        }
        RmaKind::Signal { peer, ctx, sig } => signal(*peer, *ctx, *sig).map(|_| false),
        RmaKind::Wait(descs) => {
            if r.dev_comm == 0 {
                return Err(Error::internal("the communicator has no device state for its abort flag"));
            }
            for args in wait_launches(area, me, r.dev_comm, descs) {
                let block = (args.n.div_ceil(32) * 32).max(32);
                launch_pdl(r.module.rma_wait(), 1, block, op.stream, &args, false)?;
            }
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    fn limits() -> Limits {
        Limits { ctxs: 2, sigs: 3, nranks: 4 }
    }

    #[test]
    fn the_layout_is_the_largest_every_rank_asked_for() {
        assert_eq!(RmaLayout::agreed(&[(1, 1), (1, 1)]), Some(RmaLayout { ctxs: 1, sigs: 1, nranks: 2 }));
        assert_eq!(RmaLayout::agreed(&[(2, 1), (1, 4), (0, 1)]), Some(RmaLayout { ctxs: 2, sigs: 4, nranks: 3 }));
        assert_eq!(RmaLayout::agreed(&[(0, 1), (0, 8)]), None, "disabled everywhere: no area");
        assert_eq!(RmaLayout::agreed(&[]), None);
        assert_eq!(RmaLayout::decode(&RmaLayout::encode(3, 7)), Some((3, 7)));
        assert_eq!(RmaLayout::decode(&[1, 2, 3]), None);
    }

    /// Every (ctx, sig, sender) has its own counter, the consumed counts follow the counters,
    /// and a peer's area is one stride further per rank.
    #[test]
    fn counters_do_not_overlap_and_areas_follow_the_stride() {
        let layout = RmaLayout { ctxs: 2, sigs: 3, nranks: 4 };
        assert_eq!(layout.bytes(), Some(2 * 3 * 4 * 16));
        let mut seen = std::collections::HashSet::new();
        for c in 0..2 {
            for s in 0..3 {
                for r in 0..4 {
                    let i = layout.slot(c, s, r);
                    assert!(i < layout.slots());
                    assert!(seen.insert(i), "slot {i} twice");
                }
            }
        }
        let area = RmaArea { flat: 0x10_0000_0000, stride: 1 << 32, layout };
        assert_eq!(area.counter(0, 0, 0, 0), 0x10_0000_0000);
        assert_eq!(area.counter(2, 1, 2, 3), 0x10_0000_0000 + (2 << 32) + 8 * ((3 + 2) * 4 + 3));
        assert_eq!(area.consumed(1), area.counters(1) + 8 * 24);
        assert!(area.counter(1, 1, 2, 3) < area.consumed(1), "the last counter is before the consumed counts");
        assert_eq!(area.consumed(1) + 8 * 24, area.counters(1) + layout.bytes().unwrap());
        assert_eq!(RmaLayout { ctxs: usize::MAX, sigs: 2, nranks: 2 }.bytes(), None);
    }

    /// A signal from rank s to rank d lands in the counter d's wait for s reads.
    #[test]
    fn a_signal_lands_where_the_peers_wait_looks() {
        let layout = RmaLayout { ctxs: 2, sigs: 3, nranks: 4 };
        let area = RmaArea { flat: 0x7000_0000_0000, stride: 1 << 34, layout };
        let descs = [WaitDesc { peer: 1, ctx: 1, sig: 2, count: 5 }, WaitDesc { peer: 3, ctx: 0, sig: 0, count: 1 }];
        let l = wait_launches(&area, 2, 0xdc, &descs);
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].comm, l[0].n, l[0].counters, l[0].consumed), (0xdc, 2, area.counters(2), area.consumed(2)));
        // Rank 1 signalling rank 2 on (1, 2) adds to this address:
        assert_eq!(l[0].counters + 8 * l[0].slots[0] as u64, area.counter(2, 1, 2, 1));
        assert_eq!(l[0].counters + 8 * l[0].slots[1] as u64, area.counter(2, 0, 0, 3));
        assert_eq!((l[0].counts[0], l[0].counts[1]), (5, 1));
    }

    #[test]
    fn long_wait_lists_launch_in_chunks_in_order() {
        let layout = RmaLayout { ctxs: 1, sigs: 1, nranks: 2 };
        let area = RmaArea { flat: 0, stride: 1 << 32, layout };
        let descs: Vec<WaitDesc> = (0..OX_RMA_WAIT_MAX * 2 + 3).map(|i| WaitDesc { peer: i % 2, ctx: 0, sig: 0, count: i as u32 + 1 }).collect();
        let l = wait_launches(&area, 0, 1, &descs);
        assert_eq!(l.iter().map(|a| a.n as usize).collect::<Vec<_>>(), vec![OX_RMA_WAIT_MAX, OX_RMA_WAIT_MAX, 3]);
        assert_eq!(l[2].counts[2], (OX_RMA_WAIT_MAX * 2 + 3) as u32);
        assert_eq!(l[1].slots[1], 1);
    }

    #[test]
    fn signal_arguments_are_checked_in_nccls_order() {
        let l = limits();
        assert_eq!(l.signal_args(3, 2, 1, 0).unwrap(), (3, 1, 2));
        assert_eq!(l.signal_args(0, 0, 0, 0).unwrap(), (0, 0, 0));
        for (peer, sig, ctx, flags, code, what) in [
            (4, 0, 0, 0, ResultCode::InvalidArgument, "peer = nranks"),
            (-1, 0, 0, 0, ResultCode::InvalidArgument, "peer < 0"),
            (0, 0, 2, 0, ResultCode::InvalidArgument, "ctx = numRmaCtx"),
            (0, 0, -1, 0, ResultCode::InvalidArgument, "ctx < 0"),
            (0, 3, 0, 0, ResultCode::InvalidArgument, "sigIdx = numRmaSig"),
            (0, -1, 0, 0, ResultCode::InvalidArgument, "sigIdx < 0"),
            (0, 0, 0, 1, ResultCode::InvalidArgument, "flags"),
        ] {
            assert_eq!(l.signal_args(peer, sig, ctx, flags).unwrap_err().code, code, "{what}");
        }
        let off = Limits { ctxs: 0, ..l };
        assert_eq!(off.signal_args(0, 0, 0, 0).unwrap_err().code, ResultCode::InvalidUsage, "numRmaCtx 0");
        assert_eq!(off.signal_args(9, 0, 0, 0).unwrap_err().code, ResultCode::InvalidArgument, "the peer is checked first");
    }

    #[test]
    fn wait_descriptors_are_checked() {
        let l = limits();
        let ok = l.wait_descs(&[(2, 3, 2, 1), (1, 0, 0, 0)]).unwrap();
        assert_eq!(ok, vec![WaitDesc { peer: 3, ctx: 1, sig: 2, count: 2 }, WaitDesc { peer: 0, ctx: 0, sig: 0, count: 1 }]);
        assert_eq!(l.wait_descs(&[]).unwrap_err().code, ResultCode::InvalidArgument, "empty");
        for (d, what) in [
            ((0, 0, 0, 0), "opCnt 0"),
            ((-1, 0, 0, 0), "opCnt < 0"),
            ((1, 4, 0, 0), "peer = nranks"),
            ((1, -1, 0, 0), "peer < 0"),
            ((1, 0, 3, 0), "sigIdx"),
            ((1, 0, 0, 2), "ctx"),
        ] {
            let e = l.wait_descs(&[(1, 0, 0, 0), d]).unwrap_err();
            assert_eq!(e.code, ResultCode::InvalidArgument, "{what}");
            assert!(e.msg.contains("descriptor 1"), "{what}: {}", e.msg);
        }
        assert_eq!(Limits { ctxs: 0, ..l }.wait_descs(&[(1, 0, 0, 0)]).unwrap_err().code, ResultCode::InvalidUsage);
    }

    #[test]
    fn puts_stay_inside_the_peers_window() {
        let v = WindowView { base: 0x7000_0000, size: 4096, flat: Some((0x1_0000_0000, 1 << 32)), flags: 1 };
        assert_eq!(put_target(Some(v), 4096, 1, 0, 4096).unwrap(), 0x2_0000_0000);
        assert_eq!(put_target(Some(v), 4096, 0, 4000, 96).unwrap(), 0x1_0000_0000 + 4000);
        assert_eq!(put_target(Some(v), 4096, 1, 4096, 0).unwrap(), 0x2_0000_1000, "an empty put at the end");
        assert_eq!(put_target(Some(v), 4096, 1, 4000, 97).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(put_target(Some(v), 4096, 1, u64::MAX, 2).unwrap_err().code, ResultCode::InvalidArgument, "overflow");
        assert_eq!(put_target(Some(v), 2048, 1, 2048, 1).unwrap_err().code, ResultCode::InvalidArgument, "the peer's size counts");
        assert_eq!(put_target(None, 4096, 1, 0, 8).unwrap_err().code, ResultCode::InvalidArgument, "unknown window");
        let plain = WindowView { flat: None, ..v };
        let e = put_target(Some(plain), 4096, 1, 0, 8).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert!(e.msg.contains("symmetric memory"), "{}", e.msg);
        let gin_only = WindowView { flags: crate::comm::window::WIN_GIN_ONLY, ..v };
        assert_eq!(put_target(Some(gin_only), 4096, 1, 0, 8).unwrap_err().code, ResultCode::InvalidArgument, "registered for GIN only");
        let strict = WindowView { flags: 0x2 | 0x8, ..v };
        assert!(put_target(Some(strict), 4096, 1, 0, 8).is_ok(), "the other 2.32 flags change nothing here");
    }
}
