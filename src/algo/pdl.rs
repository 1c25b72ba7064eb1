//! Programmatic dependent launch (PDL): whether a kernel launch may begin before the previous
//! kernel in its stream has finished (kernels/pdl.cuh holds the device half of the contract).
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

#[cfg(test)]
mod tests {
    use super::*;

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
