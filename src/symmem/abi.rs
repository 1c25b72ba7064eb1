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
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// NCCL_GIN_MAX_CONTEXTS.
pub const GIN_MAX_CONTEXTS: usize = 4;
/// Resource buffers are addressed in units of 128 bytes (`ncclGetResourceBufferOffset`).
pub const RESOURCE_UNIT: u64 = 128;
/// Entries of one `ncclDevCommWindowTable` block.
pub const TABLE_ENTRIES: usize = 32;

/// `struct ncclWindow_vidmem`: what an `ncclWindow_t` points at, in device memory. Peer `i`'s
/// copy of the window starts at `lsaFlatBase + i * stride4G * 4 GiB`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclWindow_vidmem {
    pub winHost: u64,
    pub lsaFlatBase: u64,
    pub lsaRank: c_int,
    pub worldRank: c_int,
    pub stride4G: u32,
    pub mcOffset4K: u32,
    pub ginOffset4K: u32,
    pub _pad: u32,
    pub ginWins: [u64; GIN_MAX_CONTEXTS],
}

/// `struct ncclLsaBarrierHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLsaBarrierHandle {
    pub bufHandle: u32,
    pub nBarriers: c_int,
}

/// `struct ncclGinBarrierHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclGinBarrierHandle {
    pub signal0: u32,
    pub bufHandle: u32,
}

/// `struct ncclLLA2AHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLLA2AHandle {
    pub bufHandle: u32,
    pub nSlots: u32,
}

/// `struct ncclDevComm`: passed by value to user kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclDevComm {
    pub rank: c_int,
    pub nRanks: c_int,
    pub nRanks_rcp32: u32,
    pub lsaRank: c_int,
    pub lsaSize: c_int,
    pub lsaSize_rcp32: u32,
    pub windowTable: u64,
    pub resourceWindow: u64,
    pub resourceWindow_inlined: ncclWindow_vidmem,
    /// `ncclMultimemHandle_t lsaMultimem` (its `mcBasePtr`): always NULL, no multicast here.
    pub lsaMultimem: u64,
    pub lsaBarrier: ncclLsaBarrierHandle,
    pub railGinBarrier: ncclGinBarrierHandle,
    pub ginContextCount: u8,
    pub ginTypes: [u8; 4],
    pub _pad: [u8; 3],
    pub ginHandles: [u64; 4],
    pub ginSignalBase: u32,
    pub ginSignalCount: c_int,
    pub ginCounterBase: u32,
    pub ginCounterCount: c_int,
    pub ginSignalShadows: u64,
}

/// `struct ncclDevCommWindowTable::Entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableEntry {
    pub base: u64,
    pub size: u64,
    pub window: u64,
}

/// `struct ncclDevCommWindowTable`: 32 entries and the next block (device pointers).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclDevCommWindowTable {
    pub entries: [TableEntry; TABLE_ENTRIES],
    pub next: u64,
}

/// `struct ncclDevCommRequirements` (read only).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevCommRequirements {
    pub resourceRequirementsList: *mut ncclDevResourceRequirements,
    pub teamRequirementsList: *mut ncclTeamRequirements,
    pub lsaMultimem: bool,
    pub barrierCount: c_int,
    pub lsaBarrierCount: c_int,
    pub railGinBarrierCount: c_int,
    pub lsaLLA2ABlockCount: c_int,
    pub lsaLLA2ASlotCount: c_int,
    pub ginForceEnable: bool,
    pub ginContextCount: c_int,
    pub ginSignalCount: c_int,
    pub ginCounterCount: c_int,
}

/// `struct ncclDevResourceRequirements`: a linked list the caller owns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevResourceRequirements {
    pub next: *mut ncclDevResourceRequirements,
    pub bufferSize: usize,
    pub bufferAlign: usize,
    pub outBufferHandle: *mut u32,
    pub ginSignalCount: c_int,
    pub ginCounterCount: c_int,
    pub outGinSignalStart: *mut u32,
    pub outGinCounterStart: *mut u32,
}

/// `struct ncclTeamRequirements`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclTeamRequirements {
    pub next: *mut ncclTeamRequirements,
    pub team: ncclTeam_t,
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
        assert_eq!(size_of::<ncclWindow_vidmem>(), 72);
        assert_eq!(
            [
                offset_of!(ncclWindow_vidmem, lsaFlatBase),
                offset_of!(ncclWindow_vidmem, lsaRank),
                offset_of!(ncclWindow_vidmem, worldRank),
                offset_of!(ncclWindow_vidmem, stride4G),
                offset_of!(ncclWindow_vidmem, mcOffset4K),
                offset_of!(ncclWindow_vidmem, ginOffset4K),
                offset_of!(ncclWindow_vidmem, ginWins)
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
