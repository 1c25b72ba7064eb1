//! The device API's structs as NCCL 2.32.3's nccl_device headers lay them out (x86_64), and the
//! older versioned layouts NCCL 2.32.3 still serves (its src/devcomm/devcomm_v*.cc compat table).
//! Kernels compiled against those headers read the `ncclDevComm` and the `ncclWindow_vidmem` an
//! `ncclWindow_t` points at, so every offset is ABI.
//!
//! How the numbers in the tests were obtained (2026-12-01): a probe printing `offsetof`/`sizeof`
//! of every field, compiled with g++ -std=c++17 -DNCCL_GIN_GDAKI_ENABLE=0 against
//! - NCCL 2.32.3's installed headers (pip nvidia-nccl-cu13 2.32.3: include/nccl.h,
//!   nccl_device.h) with the CUDA 13 headers of .tools/cuda for `-I`;
//! - the v2.29.2-1, v2.29.3-1, v2.29.7-1, v2.30.3-1 and v2.30.7-1 tags of NVIDIA/nccl
//!   (src/include/nccl_device, nccl.h.in with its version filled in).
//!
//! The versioned requirement and property structs of every release are prefixes of 2.32.3's
//! (checked by the same probes: 2.29.2-3 end at 72 and 40 bytes, 2.29.7 at 88 and 56, 2.30.x at
//! 96 and 56), except that 2.29.2-3's `ginType` is one byte at offset 34.
//!
//! C `bool` fields that callers fill are `u8` here: a caller's struct is copied byte for byte, and
//! a byte other than 0 or 1 must not become an invalid Rust `bool`.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::c_int;

use super::abi::{ncclDevComm, ncclDevResourceRequirements, ncclGinBarrierHandle, ncclLsaBarrierHandle, ncclTeamRequirements};

/// NCCL_API_MAGIC: the `magic` of versioned structs (nccl.h).
pub const NCCL_API_MAGIC: u32 = 0xcafe_beef;
/// NCCL_LE_ID_INVALID: no CFT logical endpoint ((ncclCftLeId_t)-1, nccl_device/impl/core__types.h).
pub const NCCL_LE_ID_INVALID: u32 = u32::MAX;
/// NCCL_GIN_MAX_CONNECTIONS.
pub const GIN_MAX_CONNECTIONS: usize = 4;

/// `struct ncclWindow_vidmem` of NCCL 2.32.3: what an `ncclWindow_t` points at, in device memory.
/// Its first 72 bytes are NCCL 2.28-2.29's window (`winFlags` sits where they had padding), so
/// one descriptor serves kernels compiled against any of those headers. Peer `i`'s copy of the
/// window starts at `lsaFlatBase + i * stride4G * 4 GiB`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclWindow_vidmem {
    /// `winHost`: the host-side window NCCL keeps beside the device copy; 0 here.
    pub winHost: u64,
    /// `lsaFlatBase`: LSA rank 0's copy of the window in the flat symmetric space.
    pub lsaFlatBase: u64,
    /// `lsaRank`: this rank's index in its LSA team.
    pub lsaRank: c_int,
    /// `worldRank`: this rank in the communicator.
    pub worldRank: c_int,
    /// `stride4G`: distance between consecutive peers' copies, in units of 4 GiB.
    pub stride4G: u32,
    /// `mcOffset4K`: the window's offset in the rank's slot of the flat space, in 4 KiB units.
    pub mcOffset4K: u32,
    /// `ginOffset4K`: the window's offset in its allocation, in 4 KiB units.
    pub ginOffset4K: u32,
    /// `winFlags`: the flags the window was registered with (NCCL_WIN_*).
    pub winFlags: u32,
    /// `ginWinsDefaultBackend`: one GIN window per GIN connection; 0 here (no GIN).
    pub ginWinsDefaultBackend: [u64; GIN_MAX_CONNECTIONS],
    /// `ginMultiSegmentWins`: GIN windows of a multi-segment buffer; NULL here.
    pub ginMultiSegmentWins: u64,
    /// `numSegments`: GIN segments; 0 here, as NCCL leaves it without GIN.
    pub numSegments: c_int,
    /// `cftFlatRank`: this rank in the flat CFT team; 0 without CFT (a team of one).
    pub cftFlatRank: c_int,
    /// `ucLeIdBase`: first unicast CFT logical endpoint; NCCL_LE_ID_INVALID without CFT.
    pub ucLeIdBase: u32,
    /// The 4 bytes the C compiler leaves at the end, spelled out.
    pub _pad: u32,
}

impl ncclWindow_vidmem {
    /// The window as NCCL 2.28-2.29 lay it out (the first 72 bytes; the padding where 2.32 has
    /// `winFlags` is 0): the copy a 2.28.9 `ncclDevComm` carries inline.
    pub fn v22902(&self) -> super::abi::ncclWindow_vidmem_v22902 {
        super::abi::ncclWindow_vidmem_v22902 {
            winHost: self.winHost,
            lsaFlatBase: self.lsaFlatBase,
            lsaRank: self.lsaRank,
            worldRank: self.worldRank,
            stride4G: self.stride4G,
            mcOffset4K: self.mcOffset4K,
            ginOffset4K: self.ginOffset4K,
            _pad: 0,
            ginWins: self.ginWinsDefaultBackend,
        }
    }
}

/// `ncclResourceWindow_vidmem_t` of NCCL 2.31-2.32: the part of the resource window a kernel
/// addresses resource buffers with, inlined in the `ncclDevComm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclResourceWindow_vidmem {
    /// The resource window's `lsaFlatBase`.
    pub lsaFlatBase: u64,
    /// Its `stride4G`.
    pub stride4G: u32,
    /// Its `mcOffset4K`.
    pub mcOffset4K: u32,
}

/// `struct ncclCftBarrierHandle` (NCCL 2.32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclCftBarrierHandle {
    /// Resource buffer handle of the barriers' words.
    pub bufHandle: u32,
    /// Barriers in the buffer.
    pub nBarriers: c_int,
}

/// `struct ncclDevComm` of NCCL 2.31.0-2.32.3 (NCCL's compat entry v23100): passed by value to
/// user kernels. In NCCL 2.32 the GIN barrier handles' second word is `unused`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclDevComm_v23100 {
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// The NCCL version the kernel was compiled against (the requirements' `version`).
    pub version: u32,
    /// This rank in the communicator.
    pub rank: c_int,
    /// Ranks in the communicator.
    pub nRanks: c_int,
    /// `idivRcp32(nRanks)`.
    pub nRanks_rcp32: u32,
    /// This rank's index in its LSA team.
    pub lsaRank: c_int,
    /// Ranks in the LSA team.
    pub lsaSize: c_int,
    /// `idivRcp32(lsaSize)`.
    pub lsaSize_rcp32: u32,
    /// Device address of the first `ncclDevCommWindowTable` block.
    pub windowTable: u64,
    /// `ncclWindow_t` of the resource window; 0 when none was needed.
    pub resourceWindow: u64,
    /// The resource window's addressing fields.
    pub resourceWindow_inlined: ncclResourceWindow_vidmem,
    /// GIN barrier across the world (or the custom-stride team) for `barrierCount`.
    pub hybridDenseGinBarrier: ncclGinBarrierHandle,
    /// `ncclMultimemHandle_t lsaMultimem` (its `mcBasePtr`): NULL, no multicast here.
    pub lsaMultimem: u64,
    /// The LSA barriers (`lsaBarrierCount`).
    pub lsaBarrier: ncclLsaBarrierHandle,
    /// The rail GIN barriers (`railGinBarrierCount`).
    pub railGinBarrier: ncclGinBarrierHandle,
    /// GIN connections; 0 (no GIN).
    pub ginConnectionCount: u8,
    /// GIN backend index; 0.
    pub backendIndex: u8,
    /// GIN transport type per connection; 0.
    pub ginNetDeviceTypes: [u8; GIN_MAX_CONNECTIONS],
    /// The 2 bytes the C compiler leaves before `ginHandles`.
    pub _pad0: [u8; 2],
    /// GIN connection handles; 0.
    pub ginHandles: [u64; GIN_MAX_CONNECTIONS],
    /// GIN signals; 0.
    pub ginSignalCount: c_int,
    /// GIN counters; 0.
    pub ginCounterCount: c_int,
    /// Device address of the (empty) GIN signal shadows, past the resource buffers.
    pub ginSignalShadows: u64,
    /// GIN contexts; 0.
    pub ginContextCount: u32,
    /// GIN connection stride; 0 (NCCL sets it only with GIN).
    pub ginConnectionStride: c_int,
    /// GIN context stride; 0.
    pub ginContextStride: c_int,
    /// `ginStrongLegacySignals` (bool); 0.
    pub ginStrongLegacySignals: u8,
    /// The 3 bytes the C compiler leaves before `abortFlag`.
    pub _pad1: [u8; 3],
    /// Device-visible `uint32_t*` the LSA and GIN waits poll: nonzero aborts them.
    pub abortFlag: u64,
    /// LSA half of the hybrid barriers (`barrierCount`).
    pub hybridLsaBarrier: ncclLsaBarrierHandle,
    /// Rail GIN half of the hybrid barriers.
    pub hybridRailGinBarrier: ncclGinBarrierHandle,
    /// World GIN barriers (`worldGinBarrierCount`).
    pub worldGinBarrier: ncclGinBarrierHandle,
    /// `idivRcp32(ginConnectionStride)`; 0.
    pub ginConnectionStride_rcp32: u32,
    /// This rank in the flat CFT team (0: a team of one without CFT).
    pub cftRank: c_int,
    /// Ranks in the flat CFT team (1 without CFT).
    pub cftSize: c_int,
    /// This rank in the CFT multimem team (0 without CFT).
    pub cftMultimemRank: c_int,
    /// Ranks in the CFT multimem team (1 without CFT).
    pub cftMultimemSize: c_int,
    /// `2^32 / cftMultimemSize` truncated to 32 bits (0 for 1), as NCCL computes it.
    pub cftMultimemSize_rcp32: u32,
    /// Unicast CFT logical endpoint base; NCCL_LE_ID_INVALID without CFT.
    pub ucLeId: u32,
    /// Multicast CFT logical endpoint; NCCL_LE_ID_INVALID without CFT.
    pub mcLeId: u32,
    /// CFT barriers; none.
    pub cftBarrier: ncclCftBarrierHandle,
    /// CFT multimem barriers; none.
    pub cftMultimemBarrier: ncclCftBarrierHandle,
}

/// The inlined resource window of NCCL 2.30's `ncclDevComm` (64 bytes; NCCL 2.30.3 had the
/// whole 72-byte window there, with the fields a kernel reads at the same offsets).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclResourceWindow_vidmem_v23000 {
    /// `reserved1` (the window's `winHost`).
    pub reserved1: u64,
    /// `lsaFlatBase`.
    pub lsaFlatBase: u64,
    /// `reserved2` (`lsaRank`, `worldRank`).
    pub reserved2: [u32; 2],
    /// `stride4G`.
    pub stride4G: u32,
    /// `mcOffset4K`.
    pub mcOffset4K: u32,
    /// `reserved3`.
    pub reserved3: [u64; 4],
}

/// `struct ncclDevComm` of NCCL 2.30.0-2.30.7 (compat entry v23000).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclDevComm_v23000 {
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// The version the kernel was compiled against.
    pub version: u32,
    /// This rank.
    pub rank: c_int,
    /// Ranks.
    pub nRanks: c_int,
    /// `idivRcp32(nRanks)`.
    pub nRanks_rcp32: u32,
    /// LSA rank.
    pub lsaRank: c_int,
    /// LSA team size.
    pub lsaSize: c_int,
    /// `idivRcp32(lsaSize)`.
    pub lsaSize_rcp32: u32,
    /// First window table block.
    pub windowTable: u64,
    /// The resource window.
    pub resourceWindow: u64,
    /// Its addressing fields.
    pub resourceWindow_inlined: ncclResourceWindow_vidmem_v23000,
    /// `hybridWorldGinBarrier`.
    pub hybridWorldGinBarrier: ncclGinBarrierHandle,
    /// `lsaMultimem.mcBasePtr`.
    pub lsaMultimem: u64,
    /// LSA barriers.
    pub lsaBarrier: ncclLsaBarrierHandle,
    /// Rail GIN barriers.
    pub railGinBarrier: ncclGinBarrierHandle,
    /// GIN connections.
    pub ginConnectionCount: u8,
    /// GIN types.
    pub ginNetDeviceTypes: [u8; GIN_MAX_CONNECTIONS],
    /// Padding.
    pub _pad0: [u8; 3],
    /// GIN handles.
    pub ginHandles: [u64; GIN_MAX_CONNECTIONS],
    /// GIN signals.
    pub ginSignalCount: c_int,
    /// GIN counters.
    pub ginCounterCount: c_int,
    /// GIN signal shadows.
    pub ginSignalShadows: u64,
    /// GIN contexts.
    pub ginContextCount: u32,
    /// `ginConnectionsRailed` (bool).
    pub ginConnectionsRailed: u8,
    /// `ginStrongLegacySignals` (bool).
    pub ginStrongLegacySignals: u8,
    /// `ginContextsRailed` (bool).
    pub ginContextsRailed: u8,
    /// Padding.
    pub _pad1: u8,
    /// Abort flag.
    pub abortFlag: u64,
    /// Hybrid LSA barriers.
    pub hybridLsaBarrier: ncclLsaBarrierHandle,
    /// Hybrid rail GIN barriers.
    pub hybridRailGinBarrier: ncclGinBarrierHandle,
    /// World GIN barriers.
    pub worldGinBarrier: ncclGinBarrierHandle,
}

/// `struct ncclDevComm` of NCCL 2.29.5-2.29.7 (compat entry v22907): unversioned, 2.28's 200
/// bytes and four more fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclDevComm_v22907 {
    /// The 2.28.9 / 2.29.2 layout (`ginContextCount` there is `ginConnectionCount`).
    pub base: ncclDevComm,
    /// GIN contexts.
    pub ginContextCount: u32,
    /// First GIN context.
    pub ginContextBase: u32,
    /// `ginIsRailed` (bool).
    pub ginIsRailed: u8,
    /// Padding.
    pub _pad: [u8; 7],
    /// Abort flag.
    pub abortFlag: u64,
}

/// `struct ncclDevCommRequirements` of NCCL 2.32.3 (read as bytes; older versions are prefixes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevCommRequirements_v23203 {
    /// `sizeof` the caller's struct (from NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER).
    pub size: usize,
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// NCCL_VERSION_CODE of the caller's headers.
    pub version: u32,
    /// Buffer requirements.
    pub resourceRequirementsList: *mut ncclDevResourceRequirements,
    /// Team requirements.
    pub teamRequirementsList: *mut ncclTeamRequirements,
    /// Multicast memory for the LSA team (bool).
    pub lsaMultimem: u8,
    /// Hybrid (LSA + GIN) barriers.
    pub barrierCount: c_int,
    /// LSA barriers.
    pub lsaBarrierCount: c_int,
    /// Rail GIN barriers.
    pub railGinBarrierCount: c_int,
    /// LL all-to-all blocks (not read).
    pub lsaLLA2ABlockCount: c_int,
    /// LL all-to-all slots (not read).
    pub lsaLLA2ASlotCount: c_int,
    /// Deprecated: GIN with full connections (bool).
    pub ginForceEnable: u8,
    /// GIN contexts wanted (a hint).
    pub ginContextCount: c_int,
    /// GIN signals wanted.
    pub ginSignalCount: c_int,
    /// GIN counters wanted.
    pub ginCounterCount: c_int,
    /// `ncclGinConnectionType_t`.
    pub ginConnectionType: c_int,
    /// Exclusive GIN contexts (bool).
    pub ginExclusiveContexts: u8,
    /// GIN queue depth.
    pub ginQueueDepth: c_int,
    /// GIN traffic class.
    pub ginTrafficClass: c_int,
    /// World GIN barriers.
    pub worldGinBarrierCount: c_int,
    /// Strong GIN signals needed (bool).
    pub ginStrongSignalsRequired: u8,
    /// GIN VA signals needed (bool).
    pub ginVaSignalsRequired: u8,
    /// Stride for NCCL_GIN_CONNECTION_CUSTOM_STRIDE.
    pub ginCustomStride: c_int,
    /// `ncclGinType_t` wanted.
    pub ginType: c_int,
    /// The device code is JIT-compiled for the library's own version (bool).
    pub useRuntimeVersion: u8,
    /// `ncclCftCap_t` bits.
    pub cftCaps: c_int,
    /// CFT barriers.
    pub cftBarrierCount: c_int,
}

impl ncclDevCommRequirements_v23203 {
    /// NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER of NCCL 2.32.3 (what a shorter, older struct's
    /// missing fields read as: NCCL 2.32.3's deepCopyDevCommRequirements starts from it).
    pub fn initializer() -> Self {
        ncclDevCommRequirements_v23203 {
            size: std::mem::size_of::<Self>(),
            magic: NCCL_API_MAGIC,
            version: 23203,
            resourceRequirementsList: std::ptr::null_mut(),
            teamRequirementsList: std::ptr::null_mut(),
            lsaMultimem: 0,
            barrierCount: 0,
            lsaBarrierCount: 0,
            railGinBarrierCount: 0,
            lsaLLA2ABlockCount: 0,
            lsaLLA2ASlotCount: 0,
            ginForceEnable: 0,
            ginContextCount: 4,
            ginSignalCount: 0,
            ginCounterCount: 0,
            ginConnectionType: 0,
            ginExclusiveContexts: 0,
            ginQueueDepth: 0,
            ginTrafficClass: i32::MIN,
            worldGinBarrierCount: 0,
            ginStrongSignalsRequired: 1,
            ginVaSignalsRequired: 1,
            ginCustomStride: 1,
            ginType: 0,
            useRuntimeVersion: 0,
            cftCaps: 0,
            cftBarrierCount: 0,
        }
    }
}

/// `ncclCommProperties_t` of NCCL 2.32.3 (written field by field, only within the caller's
/// `size`; older versions are prefixes, but for 2.29.2-3's one-byte `ginType` at offset 34).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclCommProperties_v23203 {
    /// `sizeof` the caller's struct.
    pub size: usize,
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// NCCL_VERSION_CODE of the caller's headers.
    pub version: u32,
    /// This rank.
    pub rank: c_int,
    /// Ranks.
    pub nRanks: c_int,
    /// CUDA device ordinal.
    pub cudaDev: c_int,
    /// NVML device index.
    pub nvmlDev: c_int,
    /// Device communicators can be created (bool).
    pub deviceApiSupport: u8,
    /// NVLink multicast is available (bool).
    pub multimemSupport: u8,
    /// `ncclGinType_t` of the GIN backend.
    pub ginType: c_int,
    /// LSA teams in the communicator.
    pub nLsaTeams: c_int,
    /// One-sided host operations work (bool).
    pub hostRmaSupport: u8,
    /// `ncclGinType_t` of railed GIN.
    pub railedGinType: c_int,
    /// The communicator's hash.
    pub commHash: u64,
    /// Smallest GIN connection stride.
    pub ginMinStride: c_int,
    /// `ncclGinConnectionType_t` available.
    pub ginConnectionType: c_int,
    /// `ginSupport[i]`: GIN type i is available (bool).
    pub ginSupport: [u8; 64],
    /// Bytes of the library's own `ncclDevComm` (for `useRuntimeVersion`).
    pub devCommRuntimeVersionSize: usize,
    /// CFT is available (bool).
    pub cftSupport: u8,
    /// CFT multicast is available (bool).
    pub cftMulticastSupport: u8,
    /// Counted CFT is available (bool).
    pub cftCountedSupport: u8,
}

/// Offset of `ginType` in NCCL 2.29.2-2.29.3's `ncclCommProperties` (a one-byte enum there).
pub const PROPS_V22902_GIN_TYPE: usize = 34;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// offsetof/sizeof printed by the probe for NCCL 2.32.3's headers (see the module note).
    #[test]
    fn layouts_match_nccl_2_32_3() {
        assert_eq!(size_of::<ncclWindow_vidmem>(), 96);
        assert_eq!(
            [
                offset_of!(ncclWindow_vidmem, lsaFlatBase),
                offset_of!(ncclWindow_vidmem, lsaRank),
                offset_of!(ncclWindow_vidmem, worldRank),
                offset_of!(ncclWindow_vidmem, stride4G),
                offset_of!(ncclWindow_vidmem, mcOffset4K),
                offset_of!(ncclWindow_vidmem, ginOffset4K),
                offset_of!(ncclWindow_vidmem, winFlags),
                offset_of!(ncclWindow_vidmem, ginWinsDefaultBackend),
                offset_of!(ncclWindow_vidmem, ginMultiSegmentWins),
                offset_of!(ncclWindow_vidmem, numSegments),
                offset_of!(ncclWindow_vidmem, cftFlatRank),
                offset_of!(ncclWindow_vidmem, ucLeIdBase),
            ],
            [8, 16, 20, 24, 28, 32, 36, 40, 72, 80, 84, 88]
        );
        assert_eq!(size_of::<ncclResourceWindow_vidmem>(), 16);
        assert_eq!([offset_of!(ncclResourceWindow_vidmem, stride4G), offset_of!(ncclResourceWindow_vidmem, mcOffset4K)], [8, 12]);
        assert_eq!(size_of::<ncclCftBarrierHandle>(), 8);
        assert_eq!(size_of::<ncclDevComm_v23100>(), 248);
        assert_eq!(
            [
                offset_of!(ncclDevComm_v23100, version),
                offset_of!(ncclDevComm_v23100, rank),
                offset_of!(ncclDevComm_v23100, nRanks),
                offset_of!(ncclDevComm_v23100, nRanks_rcp32),
                offset_of!(ncclDevComm_v23100, lsaRank),
                offset_of!(ncclDevComm_v23100, lsaSize),
                offset_of!(ncclDevComm_v23100, lsaSize_rcp32),
                offset_of!(ncclDevComm_v23100, windowTable),
                offset_of!(ncclDevComm_v23100, resourceWindow),
                offset_of!(ncclDevComm_v23100, resourceWindow_inlined),
                offset_of!(ncclDevComm_v23100, hybridDenseGinBarrier),
                offset_of!(ncclDevComm_v23100, lsaMultimem),
                offset_of!(ncclDevComm_v23100, lsaBarrier),
                offset_of!(ncclDevComm_v23100, railGinBarrier),
                offset_of!(ncclDevComm_v23100, ginConnectionCount),
                offset_of!(ncclDevComm_v23100, backendIndex),
                offset_of!(ncclDevComm_v23100, ginNetDeviceTypes),
                offset_of!(ncclDevComm_v23100, ginHandles),
                offset_of!(ncclDevComm_v23100, ginSignalCount),
                offset_of!(ncclDevComm_v23100, ginCounterCount),
                offset_of!(ncclDevComm_v23100, ginSignalShadows),
                offset_of!(ncclDevComm_v23100, ginContextCount),
                offset_of!(ncclDevComm_v23100, ginConnectionStride),
                offset_of!(ncclDevComm_v23100, ginContextStride),
                offset_of!(ncclDevComm_v23100, ginStrongLegacySignals),
                offset_of!(ncclDevComm_v23100, abortFlag),
                offset_of!(ncclDevComm_v23100, hybridLsaBarrier),
                offset_of!(ncclDevComm_v23100, hybridRailGinBarrier),
                offset_of!(ncclDevComm_v23100, worldGinBarrier),
                offset_of!(ncclDevComm_v23100, ginConnectionStride_rcp32),
                offset_of!(ncclDevComm_v23100, cftRank),
                offset_of!(ncclDevComm_v23100, cftSize),
                offset_of!(ncclDevComm_v23100, cftMultimemRank),
                offset_of!(ncclDevComm_v23100, cftMultimemSize),
                offset_of!(ncclDevComm_v23100, cftMultimemSize_rcp32),
                offset_of!(ncclDevComm_v23100, ucLeId),
                offset_of!(ncclDevComm_v23100, mcLeId),
                offset_of!(ncclDevComm_v23100, cftBarrier),
                offset_of!(ncclDevComm_v23100, cftMultimemBarrier),
            ],
            [
                4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 72, 80, 88, 96, 97, 98, 104, 136, 140, 144, 152, 156, 160, 164, 168, 176, 184, 192, 200, 204, 208,
                212, 216, 220, 224, 228, 232, 240
            ]
        );
        assert_eq!(size_of::<ncclDevCommRequirements_v23203>(), 120);
        assert_eq!(
            [
                offset_of!(ncclDevCommRequirements_v23203, magic),
                offset_of!(ncclDevCommRequirements_v23203, version),
                offset_of!(ncclDevCommRequirements_v23203, resourceRequirementsList),
                offset_of!(ncclDevCommRequirements_v23203, teamRequirementsList),
                offset_of!(ncclDevCommRequirements_v23203, lsaMultimem),
                offset_of!(ncclDevCommRequirements_v23203, barrierCount),
                offset_of!(ncclDevCommRequirements_v23203, lsaBarrierCount),
                offset_of!(ncclDevCommRequirements_v23203, railGinBarrierCount),
                offset_of!(ncclDevCommRequirements_v23203, lsaLLA2ABlockCount),
                offset_of!(ncclDevCommRequirements_v23203, lsaLLA2ASlotCount),
                offset_of!(ncclDevCommRequirements_v23203, ginForceEnable),
                offset_of!(ncclDevCommRequirements_v23203, ginContextCount),
                offset_of!(ncclDevCommRequirements_v23203, ginSignalCount),
                offset_of!(ncclDevCommRequirements_v23203, ginCounterCount),
                offset_of!(ncclDevCommRequirements_v23203, ginConnectionType),
                offset_of!(ncclDevCommRequirements_v23203, ginExclusiveContexts),
                offset_of!(ncclDevCommRequirements_v23203, ginQueueDepth),
                offset_of!(ncclDevCommRequirements_v23203, ginTrafficClass),
                offset_of!(ncclDevCommRequirements_v23203, worldGinBarrierCount),
                offset_of!(ncclDevCommRequirements_v23203, ginStrongSignalsRequired),
                offset_of!(ncclDevCommRequirements_v23203, ginVaSignalsRequired),
                offset_of!(ncclDevCommRequirements_v23203, ginCustomStride),
                offset_of!(ncclDevCommRequirements_v23203, ginType),
                offset_of!(ncclDevCommRequirements_v23203, useRuntimeVersion),
                offset_of!(ncclDevCommRequirements_v23203, cftCaps),
                offset_of!(ncclDevCommRequirements_v23203, cftBarrierCount),
            ],
            [8, 12, 16, 24, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93, 96, 100, 104, 108, 112]
        );
        assert_eq!(size_of::<ncclCommProperties_v23203>(), 152);
        assert_eq!(
            [
                offset_of!(ncclCommProperties_v23203, magic),
                offset_of!(ncclCommProperties_v23203, version),
                offset_of!(ncclCommProperties_v23203, rank),
                offset_of!(ncclCommProperties_v23203, nRanks),
                offset_of!(ncclCommProperties_v23203, cudaDev),
                offset_of!(ncclCommProperties_v23203, nvmlDev),
                offset_of!(ncclCommProperties_v23203, deviceApiSupport),
                offset_of!(ncclCommProperties_v23203, multimemSupport),
                offset_of!(ncclCommProperties_v23203, ginType),
                offset_of!(ncclCommProperties_v23203, nLsaTeams),
                offset_of!(ncclCommProperties_v23203, hostRmaSupport),
                offset_of!(ncclCommProperties_v23203, railedGinType),
                offset_of!(ncclCommProperties_v23203, commHash),
                offset_of!(ncclCommProperties_v23203, ginMinStride),
                offset_of!(ncclCommProperties_v23203, ginConnectionType),
                offset_of!(ncclCommProperties_v23203, ginSupport),
                offset_of!(ncclCommProperties_v23203, devCommRuntimeVersionSize),
                offset_of!(ncclCommProperties_v23203, cftSupport),
                offset_of!(ncclCommProperties_v23203, cftMulticastSupport),
                offset_of!(ncclCommProperties_v23203, cftCountedSupport),
            ],
            [8, 12, 16, 20, 24, 28, 32, 33, 36, 40, 44, 48, 56, 64, 68, 72, 136, 144, 145, 146]
        );
    }

    /// The older layouts NCCL 2.32.3 serves, as the probes printed them for the v2.29.7-1 and
    /// v2.30.7-1 (and v2.30.3-1, whose offsets from `lsaMultimem` on are the same) headers.
    #[test]
    fn compat_layouts_match_their_headers() {
        assert_eq!(size_of::<ncclDevComm_v22907>(), 224);
        assert_eq!(
            [offset_of!(ncclDevComm_v22907, ginContextCount), offset_of!(ncclDevComm_v22907, ginContextBase), offset_of!(ncclDevComm_v22907, ginIsRailed), offset_of!(ncclDevComm_v22907, abortFlag)],
            [200, 204, 208, 216]
        );
        assert_eq!(size_of::<ncclResourceWindow_vidmem_v23000>(), 64);
        assert_eq!(size_of::<ncclDevComm_v23000>(), 240);
        assert_eq!(
            [
                offset_of!(ncclDevComm_v23000, rank),
                offset_of!(ncclDevComm_v23000, windowTable),
                offset_of!(ncclDevComm_v23000, resourceWindow),
                offset_of!(ncclDevComm_v23000, resourceWindow_inlined),
                offset_of!(ncclDevComm_v23000, hybridWorldGinBarrier),
                offset_of!(ncclDevComm_v23000, lsaMultimem),
                offset_of!(ncclDevComm_v23000, lsaBarrier),
                offset_of!(ncclDevComm_v23000, railGinBarrier),
                offset_of!(ncclDevComm_v23000, ginConnectionCount),
                offset_of!(ncclDevComm_v23000, ginNetDeviceTypes),
                offset_of!(ncclDevComm_v23000, ginHandles),
                offset_of!(ncclDevComm_v23000, ginSignalCount),
                offset_of!(ncclDevComm_v23000, ginCounterCount),
                offset_of!(ncclDevComm_v23000, ginSignalShadows),
                offset_of!(ncclDevComm_v23000, ginContextCount),
                offset_of!(ncclDevComm_v23000, ginConnectionsRailed),
                offset_of!(ncclDevComm_v23000, ginStrongLegacySignals),
                offset_of!(ncclDevComm_v23000, ginContextsRailed),
                offset_of!(ncclDevComm_v23000, abortFlag),
                offset_of!(ncclDevComm_v23000, hybridLsaBarrier),
                offset_of!(ncclDevComm_v23000, hybridRailGinBarrier),
                offset_of!(ncclDevComm_v23000, worldGinBarrier),
            ],
            [8, 32, 40, 48, 112, 120, 128, 136, 144, 145, 152, 184, 188, 192, 200, 204, 205, 206, 208, 216, 224, 232]
        );
        // 2.30.7's ncclResourceWindow_vidmem_t keeps lsaFlatBase, stride4G and mcOffset4K where
        // the 72-byte window had them.
        assert_eq!(
            [
                offset_of!(ncclResourceWindow_vidmem_v23000, lsaFlatBase),
                offset_of!(ncclResourceWindow_vidmem_v23000, stride4G),
                offset_of!(ncclResourceWindow_vidmem_v23000, mcOffset4K)
            ],
            [8, 24, 28]
        );
    }

    #[test]
    fn the_initializer_is_nccl_2_32_3s() {
        let i = ncclDevCommRequirements_v23203::initializer();
        assert_eq!((i.size, i.magic, i.version, i.ginContextCount, i.ginTrafficClass, i.ginStrongSignalsRequired, i.ginVaSignalsRequired, i.ginCustomStride), (120, NCCL_API_MAGIC, 23203, 4, i32::MIN, 1, 1, 1));
    }
}
