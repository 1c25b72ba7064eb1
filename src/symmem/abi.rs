//! The device API's structs as NCCL 2.28.9's nccl_device headers lay them out (x86_64). User
//! kernels compiled against those headers read them directly (`ncclGetLsaPointer`, barrier
//! sessions, `ncclFindWindow`), so every offset here is part of the ABI. The tests pin each one to
//! what `offsetof` printed for NCCL's own headers (a probe compiled with g++ against the v2.28.9-1
//! tag's src/include/nccl_device; the GPU test ffi-tests/devapi_gpu.cu asserts the same against
//! the installed headers).
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::c_int;

/// `struct ncclTeam` of nccl_device/core.h, returned by value from ncclTeamWorld and friends.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclTeam_t {
    /// Ranks in the team.
    pub nRanks: c_int,
    /// This rank's index in the team.
    pub rank: c_int,
    /// Distance in world ranks between consecutive members (1 for the world and LSA teams, the LSA
    /// team size for the rail team).
    pub stride: c_int,
}

/// NCCL_GIN_MAX_CONTEXTS.
pub const GIN_MAX_CONTEXTS: usize = 4;
/// Resource buffers are addressed in units of 128 bytes (`ncclGetResourceBufferOffset`).
pub const RESOURCE_UNIT: u64 = 128;
/// Entries of one `ncclDevCommWindowTable` block.
pub const TABLE_ENTRIES: usize = 32;

/// `struct ncclWindow_vidmem` of NCCL 2.28.9 and 2.29.x (NCCL 2.30's `ncclWindow_vidmem_v22902`):
/// the first 72 bytes of the descriptor an `ncclWindow_t` points at (abi232::ncclWindow_vidmem is
/// the whole, NCCL 2.32.3's), and the copy a 2.28.9 `ncclDevComm` carries inline. Peer `i`'s copy
/// of the window starts at `lsaFlatBase + i * stride4G * 4 GiB`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclWindow_vidmem_v22902 {
    /// `winHost`: the host-side window NCCL keeps beside the device copy; 0 here.
    pub winHost: u64,
    /// `lsaFlatBase`: LSA rank 0's copy of the window in the flat symmetric space (device address).
    pub lsaFlatBase: u64,
    /// `lsaRank`: this rank's index in its LSA team.
    pub lsaRank: c_int,
    /// `worldRank`: this rank in the communicator.
    pub worldRank: c_int,
    /// `stride4G`: distance between consecutive peers' copies, in units of 4 GiB.
    pub stride4G: u32,
    /// `mcOffset4K`: the window's offset in the rank's slot of the flat space, in 4 KiB units (the
    /// multicast offset in NCCL; no multicast here).
    pub mcOffset4K: u32,
    /// `ginOffset4K`: the window's offset in its allocation, in 4 KiB units (for GIN, which oxccl
    /// never enables).
    pub ginOffset4K: u32,
    /// The 4 bytes the C compiler leaves before `ginWins`, spelled out.
    pub _pad: u32,
    /// `ginWins`: one GIN window per GIN context; always 0 here (no GIN).
    pub ginWins: [u64; GIN_MAX_CONTEXTS],
}

/// `struct ncclLsaBarrierHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLsaBarrierHandle {
    /// Resource buffer handle of the barriers' words (offset in the resource window / 128).
    pub bufHandle: u32,
    /// Barriers in the buffer (NCCL's `nBarriers`).
    pub nBarriers: c_int,
}

/// `struct ncclGinBarrierHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclGinBarrierHandle {
    /// First GIN signal of the barriers.
    pub signal0: u32,
    /// Resource buffer handle of the barriers' words (offset in the resource window / 128).
    pub bufHandle: u32,
}

/// `struct ncclLLA2AHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLLA2AHandle {
    /// Resource buffer handle of the all-to-all's buffer (offset in the resource window / 128).
    pub bufHandle: u32,
    /// Slots per block and generation (`nSlots` of `ncclLLA2ACreateRequirement`).
    pub nSlots: u32,
}

/// `struct ncclDevComm`: passed by value to user kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclDevComm {
    /// This rank in the communicator (world team).
    pub rank: c_int,
    /// Ranks in the communicator.
    pub nRanks: c_int,
    /// `idivRcp32(nRanks)`, for the device side's fast division by `nRanks`.
    pub nRanks_rcp32: u32,
    /// This rank's index in its LSA team.
    pub lsaRank: c_int,
    /// Ranks in the LSA team.
    pub lsaSize: c_int,
    /// `idivRcp32(lsaSize)`.
    pub lsaSize_rcp32: u32,
    /// Device address of the first `ncclDevCommWindowTable` block (`ncclFindWindow` walks it).
    pub windowTable: u64,
    /// `ncclWindow_t` (device address of its `ncclWindow_vidmem`) of the resource window holding the
    /// barriers' and the caller's buffers; 0 when none was needed.
    pub resourceWindow: u64,
    /// A copy of the resource window's `ncclWindow_vidmem`, held in the struct itself.
    pub resourceWindow_inlined: ncclWindow_vidmem_v22902,
    /// `ncclMultimemHandle_t lsaMultimem` (its `mcBasePtr`): always NULL, no multicast here.
    pub lsaMultimem: u64,
    /// The LSA barriers in the resource window.
    pub lsaBarrier: ncclLsaBarrierHandle,
    /// The rail GIN barriers in the resource window (sized as NCCL sizes them; GIN stays off).
    pub railGinBarrier: ncclGinBarrierHandle,
    /// GIN contexts (`ginContextCount`); 0 here, oxccl has no GIN transport.
    pub ginContextCount: u8,
    /// GIN transport type per context (`ginTypes`); 0 here.
    pub ginTypes: [u8; 4],
    /// The 3 bytes the C compiler leaves before `ginHandles`, spelled out.
    pub _pad: [u8; 3],
    /// GIN context handles (`ginHandles`); 0 here.
    pub ginHandles: [u64; 4],
    /// First GIN signal of the communicator (`ginSignalBase`); 0 here.
    pub ginSignalBase: u32,
    /// GIN signals (`ginSignalCount`); 0 here.
    pub ginSignalCount: c_int,
    /// First GIN counter (`ginCounterBase`); 0 here.
    pub ginCounterBase: u32,
    /// GIN counters (`ginCounterCount`); 0 here.
    pub ginCounterCount: c_int,
    /// `ginSignalShadows`: device address of the (empty) GIN signal shadows, this rank's copy of the
    /// resource window past its buffers, where NCCL places them.
    pub ginSignalShadows: u64,
}

/// `struct ncclDevCommWindowTable::Entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableEntry {
    /// Start of the registered range as the caller addresses it (device address).
    pub base: u64,
    /// Bytes of the range.
    pub size: u64,
    /// The range's `ncclWindow_t` (device address of its `ncclWindow_vidmem`); 0 marks a free entry.
    pub window: u64,
}

/// `struct ncclDevCommWindowTable`: 32 entries and the next block (device pointers).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclDevCommWindowTable {
    /// The block's entries; free ones have `window == 0`.
    pub entries: [TableEntry; TABLE_ENTRIES],
    /// Device address of the next block; 0 for the last.
    pub next: u64,
}

/// `struct ncclDevCommRequirements` (read only).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevCommRequirements {
    /// Head of the caller's buffer requirements list (NULL: none).
    pub resourceRequirementsList: *mut ncclDevResourceRequirements,
    /// Head of the caller's team requirements list (NULL: none).
    pub teamRequirementsList: *mut ncclTeamRequirements,
    /// Multicast memory for the LSA team; refused (ncclInvalidArgument), oxccl never uses NVLS.
    pub lsaMultimem: bool,
    /// Barriers of both kinds: raises `lsaBarrierCount` and `railGinBarrierCount` to at least this.
    pub barrierCount: c_int,
    /// LSA barriers to allocate in the resource window.
    pub lsaBarrierCount: c_int,
    /// Rail GIN barriers to allocate in the resource window.
    pub railGinBarrierCount: c_int,
    /// LL all-to-all blocks (`lsaLLA2ABlockCount`); not read by oxccl.
    pub lsaLLA2ABlockCount: c_int,
    /// LL all-to-all slots (`lsaLLA2ASlotCount`); not read by oxccl.
    pub lsaLLA2ASlotCount: c_int,
    /// Forces GPU-initiated networking on; refused (ncclInvalidUsage), oxccl has no GIN transport.
    pub ginForceEnable: bool,
    /// GIN contexts wanted (`ginContextCount`); not read by oxccl.
    pub ginContextCount: c_int,
    /// GIN signals wanted; nonzero is refused (ncclInvalidUsage).
    pub ginSignalCount: c_int,
    /// GIN counters wanted; nonzero is refused (ncclInvalidUsage).
    pub ginCounterCount: c_int,
}

/// `struct ncclDevResourceRequirements`: a linked list the caller owns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevResourceRequirements {
    /// The next requirement (NULL: the last).
    pub next: *mut ncclDevResourceRequirements,
    /// Bytes of the buffer.
    pub bufferSize: usize,
    /// Alignment of the buffer in the resource window, in bytes (it lands at a multiple of
    /// max(128, this)).
    pub bufferAlign: usize,
    /// Where to write the buffer's handle (its offset in the resource window / 128); NULL: nowhere.
    pub outBufferHandle: *mut u32,
    /// GIN signals the buffer needs.
    pub ginSignalCount: c_int,
    /// GIN counters the buffer needs.
    pub ginCounterCount: c_int,
    /// Where to write the buffer's first GIN signal; NULL: nowhere.
    pub outGinSignalStart: *mut u32,
    /// Where to write the buffer's first GIN counter; NULL: nowhere.
    pub outGinCounterStart: *mut u32,
}

/// `struct ncclTeamRequirements`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclTeamRequirements {
    /// The next requirement (NULL: the last).
    pub next: *mut ncclTeamRequirements,
    /// The team the requirement is for.
    pub team: ncclTeam_t,
    /// Multicast memory for the team; refused (ncclInvalidArgument), oxccl never uses NVLS.
    pub multimem: bool,
    /// `ncclMultimemHandle_t*`.
    pub outMultimemHandle: *mut u64,
}

/// NCCL's `idivRcp32`: the reciprocal the device side divides by (`idivFast32`).
pub const fn idiv_rcp32(x: u32) -> u32 {
    (u32::MAX / x).wrapping_add(x.is_power_of_two() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Offsets printed by offsetof() for NCCL 2.28.9's headers (see the module note).
    #[test]
    fn layouts_match_nccl_2_28_9() {
        assert_eq!(size_of::<ncclWindow_vidmem_v22902>(), 72);
        assert_eq!(
            [
                offset_of!(ncclWindow_vidmem_v22902, lsaFlatBase),
                offset_of!(ncclWindow_vidmem_v22902, lsaRank),
                offset_of!(ncclWindow_vidmem_v22902, worldRank),
                offset_of!(ncclWindow_vidmem_v22902, stride4G),
                offset_of!(ncclWindow_vidmem_v22902, mcOffset4K),
                offset_of!(ncclWindow_vidmem_v22902, ginOffset4K),
                offset_of!(ncclWindow_vidmem_v22902, ginWins)
            ],
            [8, 16, 20, 24, 28, 32, 40]
        );
        assert_eq!(size_of::<ncclDevComm>(), 200);
        assert_eq!(
            [
                offset_of!(ncclDevComm, nRanks_rcp32),
                offset_of!(ncclDevComm, lsaRank),
                offset_of!(ncclDevComm, lsaSize),
                offset_of!(ncclDevComm, lsaSize_rcp32),
                offset_of!(ncclDevComm, windowTable),
                offset_of!(ncclDevComm, resourceWindow),
                offset_of!(ncclDevComm, resourceWindow_inlined),
                offset_of!(ncclDevComm, lsaMultimem),
                offset_of!(ncclDevComm, lsaBarrier),
                offset_of!(ncclDevComm, railGinBarrier),
                offset_of!(ncclDevComm, ginContextCount),
                offset_of!(ncclDevComm, ginTypes),
                offset_of!(ncclDevComm, ginHandles),
                offset_of!(ncclDevComm, ginSignalBase),
                offset_of!(ncclDevComm, ginSignalCount),
                offset_of!(ncclDevComm, ginCounterBase),
                offset_of!(ncclDevComm, ginCounterCount),
                offset_of!(ncclDevComm, ginSignalShadows)
            ],
            [8, 12, 16, 20, 24, 32, 40, 112, 120, 128, 136, 137, 144, 176, 180, 184, 188, 192]
        );
        assert_eq!(size_of::<ncclDevCommWindowTable>(), 776);
        assert_eq!(offset_of!(ncclDevCommWindowTable, next), 768);
        assert_eq!(size_of::<ncclDevCommRequirements>(), 56);
        assert_eq!(
            [
                offset_of!(ncclDevCommRequirements, teamRequirementsList),
                offset_of!(ncclDevCommRequirements, lsaMultimem),
                offset_of!(ncclDevCommRequirements, barrierCount),
                offset_of!(ncclDevCommRequirements, lsaBarrierCount),
                offset_of!(ncclDevCommRequirements, railGinBarrierCount),
                offset_of!(ncclDevCommRequirements, lsaLLA2ABlockCount),
                offset_of!(ncclDevCommRequirements, lsaLLA2ASlotCount),
                offset_of!(ncclDevCommRequirements, ginForceEnable),
                offset_of!(ncclDevCommRequirements, ginContextCount),
                offset_of!(ncclDevCommRequirements, ginSignalCount),
                offset_of!(ncclDevCommRequirements, ginCounterCount)
            ],
            [8, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52]
        );
        assert_eq!(size_of::<ncclDevResourceRequirements>(), 56);
        assert_eq!(
            [
                offset_of!(ncclDevResourceRequirements, bufferSize),
                offset_of!(ncclDevResourceRequirements, bufferAlign),
                offset_of!(ncclDevResourceRequirements, outBufferHandle),
                offset_of!(ncclDevResourceRequirements, ginSignalCount),
                offset_of!(ncclDevResourceRequirements, ginCounterCount),
                offset_of!(ncclDevResourceRequirements, outGinSignalStart),
                offset_of!(ncclDevResourceRequirements, outGinCounterStart)
            ],
            [8, 16, 24, 32, 36, 40, 48]
        );
        assert_eq!(size_of::<ncclTeamRequirements>(), 32);
        assert_eq!([offset_of!(ncclTeamRequirements, team), offset_of!(ncclTeamRequirements, multimem), offset_of!(ncclTeamRequirements, outMultimemHandle)], [8, 20, 24]);
        assert_eq!(size_of::<ncclLsaBarrierHandle>(), 8);
        assert_eq!(size_of::<ncclGinBarrierHandle>(), 8);
        assert_eq!(offset_of!(ncclGinBarrierHandle, bufHandle), 4);
        assert_eq!(size_of::<ncclLLA2AHandle>(), 8);
    }

    #[test]
    fn reciprocals_as_nccl_computes_them() {
        assert_eq!(idiv_rcp32(1), 0); // u32::MAX + 1 wraps, as in C
        assert_eq!(idiv_rcp32(2), (u32::MAX / 2) + 1);
        assert_eq!(idiv_rcp32(3), u32::MAX / 3);
        // idivFast32(x, y, rcp) = mulhi(x, rcp), corrected by one: exact for these.
        for y in [3u32, 5, 6, 7] {
            let r = idiv_rcp32(y) as u64;
            for x in [0u32, 1, 7, 100, 12345] {
                let q = ((x as u64 * r) >> 32) as u32;
                let q = if (q + 1) * y <= x { q + 1 } else { q };
                assert_eq!(q, x / y);
            }
        }
    }
}
