//! Programmatic dependent launch (PDL): whether a kernel launch may begin before the previous
//! kernel in its stream has finished (kernels/prims/pdl.cuh holds the device half of the contract).
//!
//! Why: a small collective is mostly launch latency. With PDL the next kernel's launch and block
//! scheduling overlap the current kernel, and it starts work as soon as the current kernel's
//! memory is visible, instead of a full launch after it.
//!
//! What may go wrong, and the rule that prevents it: an early-launched kernel's blocks hold SMs
//! while they wait. Every oxccl kernel waits before it touches memory and triggers its dependents
//! only after that wait, so at most two kernels of one communicator are resident at once: the
//! running one and the next, waiting. Their grids together must fit the communicator's block
//! budget (the SMs, capped by maxCTAs), which users size so that concurrent communicators fit on
//! the GPU side by side; a launch that would exceed it is an ordinary launch.
//!
//! The ring one-shot AllReduce bends that rule where [`early`] allows: inside a captured graph,
//! right behind its own kind, it reads its input and sends its packets before its wait
//! (kernels/colls/allreduce.cu). Small ones ([`entry`]) also trigger before their wait, as soon as the
//! launch before them has passed its own: three kernels of the communicator may then be resident,
//! which the launch behind counts (the host keeps `last_grid` at the two grids' sum).

use crate::types::{DataType, RedOp};

/// PDL needs compute capability 9.0 (griddepcontrol).
pub const MIN_CC_MAJOR: i32 = 9;
/// And a driver that captures programmatic dependencies into CUDA graphs (12.3), as NCCL asks.
pub const MIN_DRIVER: i32 = 12030;

/// Whether a kernel of `grid` blocks may be launched with programmatic stream serialization, on
/// a GPU of compute capability `cc_major` under a driver of CUDA version `driver`. `prev_grid` is
/// the grid of the communicator's previous kernel when it was launched on the same stream with
/// nothing of this communicator between (0 when the previous launch was on another stream, which
/// the new one then waits for through an event, or was no kernel); `budget` is the communicator's
/// block budget (Topology::sm_count).
pub fn allowed(enabled: bool, cc_major: i32, driver: i32, prev_grid: u32, grid: u32, budget: u32) -> bool {
    enabled && cc_major >= MIN_CC_MAJOR && driver >= MIN_DRIVER && prev_grid.saturating_add(grid) <= budget
}

/// Where a stream's capture stands just before a launch: the capture's id, and the graph node
/// the next captured work will depend on when it is exactly one (None: several, or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureTail {
    /// The capture's id.
    pub id: u64,
    /// The one graph node the next captured work will depend on (None: several, or none).
    pub only: Option<usize>,
}

/// The communicator's last ring one-shot AllReduce (OX_ONESHOT_RING), as captured: its stream,
/// capture, graph node, output range, grid and place in its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingAnchor {
    /// Its stream.
    pub stream: usize,
    /// Its capture's id.
    pub capture: u64,
    /// Its graph node.
    pub node: usize,
    /// Its output (address, bytes).
    pub recv: (u64, u64),
    /// Its grid.
    pub grid: u32,
    /// Its block size: with `grid`, its thread-to-packet map, which a chained launch must share.
    pub block: u32,
    /// Chain position (kernels/colls/allreduce.cu): 0 for a launch that was not early, the head.
    pub pos: u32,
    /// When it triggered at entry ([`entry`]): the output range of the launch before it, which
    /// may still be running when the next launch begins.
    pub before: Option<(u64, u64)>,
}

impl RingAnchor {
    /// The chain position of an early launch right behind this one; None past the longest chain
    /// (that launch then waits first and heads a new chain).
    pub fn next_pos(&self) -> Option<u32> {
        self.pos.checked_add(1).filter(|&p| p <= crate::device_abi::OX_ONESHOT_POS_MAX)
    }
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Whether a ring one-shot AllReduce may launch early (OX_ONESHOT_EARLY): read its input and send
/// its packets before its PDL wait (kernels/colls/allreduce.cu). Only where that cannot be told apart
/// from waiting first:
/// - the launch is programmatic (`pdl`) and early launches are `enabled` (OXCCL_ONESHOT_EARLY);
/// - the stream is being captured and the new node will depend on exactly one node, the
///   communicator's previous ring one-shot on this stream and capture (`anchor`): in a graph
///   nothing can run between the two, so the previous kernel is the only unfinished work the
///   early part could race with. Eagerly, anything the user enqueued in between could be;
/// - the input `send` (a byte range) does not overlap that kernel's output, nor, where that
///   kernel triggered at entry, the output of the one before it: the only memory those write
///   that this one reads before its wait (flags and ring slots have their own protocol);
/// - the PreMulSum scalar, if any, is not in device memory (it could be such an output too);
/// - the chain is not at its longest ([`RingAnchor::next_pos`]).
pub fn early(enabled: bool, pdl: bool, device_scalar: bool, stream: usize, tail: Option<CaptureTail>, anchor: Option<&RingAnchor>, send: (u64, u64)) -> bool {
    let (Some(tail), Some(a)) = (tail, anchor) else { return false };
    let disjoint = !overlap(send, a.recv) && !a.before.is_some_and(|b| overlap(send, b));
    right_behind(enabled, pdl, device_scalar, stream, tail, a) && disjoint
}

/// The conditions of [`early`] other than the input's: a programmatic launch, right behind the
/// anchor in the same capture, with room in the chain.
fn right_behind(enabled: bool, pdl: bool, device_scalar: bool, stream: usize, tail: CaptureTail, a: &RingAnchor) -> bool {
    enabled && pdl && !device_scalar && a.stream == stream && a.capture == tail.id && tail.only == Some(a.node) && a.next_pos().is_some()
}

/// Whether a ring one-shot whose input is the anchor's output may still launch early, chained
/// (OX_ONESHOT_CHAIN): each block reads its input once its twin block of the anchor has published
/// it (kernels/colls/allreduce.cu), which needs the input to be exactly the anchor's output and the
/// same grid and block (the same thread-to-packet map), besides everything [`early`] asks but
/// the input check. The launch before the anchor, which may still run where the anchor triggered
/// at entry, wrote that memory before the anchor's wait returned, so before the anchor wrote it.
#[allow(clippy::too_many_arguments)]
pub fn chained(enabled: bool, pdl: bool, device_scalar: bool, stream: usize, tail: Option<CaptureTail>, anchor: Option<&RingAnchor>, send: (u64, u64), grid: u32, block: u32) -> bool {
    let (Some(tail), Some(a)) = (tail, anchor) else { return false };
    right_behind(enabled, pdl, device_scalar, stream, tail, a) && send == a.recv && send.0 < send.1 && a.grid == grid && a.block == block
}

/// Whether a chained launch may have its packets sent by the anchor (OX_ONESHOT_PRESEND there,
/// OX_ONESHOT_PRESENT here): the anchor holds this launch's input, its own output, as it stores
/// it, and may send it as is only where this launch's pre() is the identity: not PreMulSum, not
/// Avg on a floating type (which pre-multiplies by 1/nranks). `enabled`: OXCCL_ONESHOT_PRESEND.
/// Each rank decides alone: its peers read packets of the same flag whoever wrote them.
pub fn presend(enabled: bool, chained: bool, op: RedOp, dtype: DataType) -> bool {
    let identity_pre = match op {
        RedOp::PreMulSum => false,
        RedOp::Avg => !dtype.is_float(),
        _ => true,
    };
    enabled && chained && identity_pre
}

/// Whether an early launch of `bytes` triggers at entry (OX_ONESHOT_ENTRY) rather than after its
/// wait: up to `max_bytes` (OXCCL_ONESHOT_ENTRY_BYTES; 0 never). Small launches are all latency,
/// and the next one's launch then overlaps this one's wait: 1.38-1.42 against 1.45-1.46 us a call
/// at 8-128 B, 2 ranks, in graphs (BENCHMARKS.md of 2026-11-26, 733ad23). From 1 KB it was slower
/// (1.56-1.71 against 1.51-1.62 at 1-8 KB), and the input must also avoid the output of the launch
/// two back, which nccl-tests' in-place calls at 32 KB overlap.
pub fn entry(early: bool, bytes: u64, max_bytes: u64) -> bool {
    early && bytes <= max_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor() -> RingAnchor {
        RingAnchor { stream: 7, capture: 3, node: 0x1000, recv: (0x2000, 0x3000), grid: 4, block: 512, pos: 0, before: None }
    }
    const TAIL: Option<CaptureTail> = Some(CaptureTail { id: 3, only: Some(0x1000) });

    #[test]
    fn presend_only_where_the_chained_launch_sends_its_input_as_is() {
        assert!(presend(true, true, RedOp::Sum, DataType::Float32));
        assert!(presend(true, true, RedOp::Max, DataType::Bfloat16));
        assert!(presend(true, true, RedOp::Avg, DataType::Int32), "integer avg divides after the sum");
        assert!(!presend(true, true, RedOp::Avg, DataType::Float16), "float avg scales each input");
        assert!(!presend(true, true, RedOp::PreMulSum, DataType::Int64), "per-rank scalar");
        assert!(!presend(true, false, RedOp::Sum, DataType::Float32), "not chained");
        assert!(!presend(false, true, RedOp::Sum, DataType::Float32), "OXCCL_ONESHOT_PRESEND=0");
    }

    #[test]
    fn early_behind_the_previous_captured_ring_launch_only() {
        let a = anchor();
        assert!(early(true, true, false, 7, TAIL, Some(&a), (0x4000, 0x5000)));
        assert!(early(true, true, false, 7, TAIL, Some(&a), (0x1000, 0x2000)), "ends where the output starts");
        assert!(!early(true, true, false, 7, None, Some(&a), (0x4000, 0x5000)), "eager: the user may have enqueued work between");
        assert!(!early(true, true, false, 7, TAIL, None, (0x4000, 0x5000)), "no ring launch before");
        assert!(!early(true, true, false, 8, TAIL, Some(&a), (0x4000, 0x5000)), "another stream");
        let other_capture = Some(CaptureTail { id: 4, only: Some(0x1000) });
        assert!(!early(true, true, false, 7, other_capture, Some(&a), (0x4000, 0x5000)), "another capture");
        let other_node = Some(CaptureTail { id: 3, only: Some(0x1100) });
        assert!(!early(true, true, false, 7, other_node, Some(&a), (0x4000, 0x5000)), "something was captured in between");
        let joined = Some(CaptureTail { id: 3, only: None });
        assert!(!early(true, true, false, 7, joined, Some(&a), (0x4000, 0x5000)), "several dependencies (an event join)");
    }

    #[test]
    fn never_early_on_its_predecessors_output_or_when_off() {
        let a = anchor();
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x2000, 0x3000)), "in place behind the previous call");
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x2fff, 0x4000)), "one byte of overlap");
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x1000, 0x2001)));
        assert!(!early(true, false, false, 7, TAIL, Some(&a), (0x4000, 0x5000)), "a plain launch waits for its predecessor anyway");
        assert!(!early(false, true, false, 7, TAIL, Some(&a), (0x4000, 0x5000)), "OXCCL_ONESHOT_EARLY=0");
        assert!(!early(true, true, true, 7, TAIL, Some(&a), (0x4000, 0x5000)), "a device scalar");
    }

    #[test]
    fn behind_an_entry_launch_the_input_also_avoids_the_output_before_it() {
        let a = RingAnchor { pos: 3, before: Some((0x6000, 0x7000)), ..anchor() };
        assert!(early(true, true, false, 7, TAIL, Some(&a), (0x4000, 0x5000)));
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x6800, 0x6900)), "the launch before the anchor may still write it");
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x2800, 0x2900)));
        assert!(early(true, true, false, 7, TAIL, Some(&a), (0x7000, 0x8000)), "ends are exclusive");
    }

    #[test]
    fn chained_only_on_exactly_the_previous_output_with_the_same_map() {
        let a = anchor();
        let c = |send, grid, block| chained(true, true, false, 7, TAIL, Some(&a), send, grid, block);
        assert!(c((0x2000, 0x3000), 4, 512), "in place behind an in-place call on the same buffer");
        assert!(!early(true, true, false, 7, TAIL, Some(&a), (0x2000, 0x3000)), "which plain early refuses");
        assert!(!c((0x2000, 0x2800), 4, 512), "a part of the output: another packet map");
        assert!(!c((0x2800, 0x3800), 4, 512), "overlapping, not equal");
        assert!(!c((0x2000, 0x3000), 8, 512), "another grid");
        assert!(!c((0x2000, 0x3000), 4, 256), "another block size");
        assert!(!c((0x2000, 0x2000), 4, 512), "empty");
        let before = RingAnchor { pos: 3, before: Some((0x2000, 0x3000)), ..anchor() };
        assert!(chained(true, true, false, 7, TAIL, Some(&before), (0x2000, 0x3000), 4, 512), "the launch two back wrote it before the anchor did");
        assert!(!chained(false, true, false, 7, TAIL, Some(&a), (0x2000, 0x3000), 4, 512), "OXCCL_ONESHOT_EARLY=0");
        assert!(!chained(true, false, false, 7, TAIL, Some(&a), (0x2000, 0x3000), 4, 512), "not programmatic");
        assert!(!chained(true, true, true, 7, TAIL, Some(&a), (0x2000, 0x3000), 4, 512), "a device scalar");
        assert!(!chained(true, true, false, 7, None, Some(&a), (0x2000, 0x3000), 4, 512), "eager");
        let joined = Some(CaptureTail { id: 3, only: None });
        assert!(!chained(true, true, false, 7, joined, Some(&a), (0x2000, 0x3000), 4, 512), "something else in between");
        let last = RingAnchor { pos: crate::device_abi::OX_ONESHOT_POS_MAX, ..anchor() };
        assert!(!chained(true, true, false, 7, TAIL, Some(&last), (0x2000, 0x3000), 4, 512), "chain at its longest");
    }

    #[test]
    fn chains_end_at_the_longest_position() {
        let max = crate::device_abi::OX_ONESHOT_POS_MAX;
        assert_eq!(anchor().next_pos(), Some(1));
        assert_eq!(RingAnchor { pos: max - 1, ..anchor() }.next_pos(), Some(max));
        let last = RingAnchor { pos: max, ..anchor() };
        assert_eq!(last.next_pos(), None);
        assert!(!early(true, true, false, 7, TAIL, Some(&last), (0x4000, 0x5000)), "the next launch heads a new chain");
    }

    #[test]
    fn only_small_early_launches_trigger_at_entry() {
        assert!(entry(true, 8, 8192));
        assert!(entry(true, 8192, 8192));
        assert!(!entry(true, 8193, 8192));
        assert!(!entry(false, 8, 8192), "a launch that waits first");
        assert!(!entry(true, 8, 0), "OXCCL_ONESHOT_ENTRY_BYTES=0");
    }

    #[test]
    fn small_back_to_back_kernels_overlap_on_hopper() {
        assert!(allowed(true, 9, 13000, 4, 4, 132));
        assert!(allowed(true, 10, 13000, 0, 132, 132), "after another stream or a copy the whole budget is free");
        assert!(allowed(true, 9, 13000, 66, 66, 132), "exactly the budget");
    }

    #[test]
    fn never_off_hopper_nor_when_disabled() {
        assert!(!allowed(true, 8, 13000, 4, 4, 132), "sm_80 has no griddepcontrol");
        assert!(!allowed(false, 9, 13000, 4, 4, 132));
        assert!(!allowed(true, 9, 12020, 4, 4, 132), "a driver before 12.3 cannot capture it in graphs");
        assert!(allowed(true, 9, 12030, 4, 4, 132));
    }

    #[test]
    fn two_resident_grids_stay_within_the_budget() {
        assert!(!allowed(true, 9, 13000, 128, 8, 132), "a large kernel still running leaves no room");
        assert!(!allowed(true, 9, 13000, 30, 4, 32), "maxCTAs 32: 30 + 4 blocks would exceed it");
        assert!(allowed(true, 9, 13000, 28, 4, 32));
        assert!(!allowed(true, 9, 13000, u32::MAX, 1, 132), "an unknown previous grid never overlaps");
    }
}
