//! The C types of nccl.h as Rust sees them at the boundary.
//!
//! Enum-typed parameters arrive as plain `c_int`: C may pass any value, and a Rust enum holding an
//! undeclared value would be undefined behaviour. cbindgen does not emit these definitions; the
//! header's prelude (cbindgen.toml) spells them exactly as NCCL 2.28.9 does, and the ABI facts test
//! (ffi-tests/) checks both against NCCL's own header.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

pub use crate::error::ResultCode as ncclResult_t;
/// `ncclResult_t` received from C (any int may arrive); the header spells it ncclResult_t.
pub type ncclResultArg_t = c_int;

pub type ncclDataType_t = c_int;
pub type ncclRedOp_t = c_int;
pub type ncclScalarResidence_t = c_int;

/// The opaque communicator type behind `ncclComm_t`. Handles are validated against the live-comm
/// registry before use (see `comm::registry`), never dereferenced blindly.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}
pub type ncclComm_t = *mut ncclComm;

/// The opaque window type behind `ncclWindow_t`.
#[repr(C)]
pub struct ncclWindow_vidmem {
    _private: [u8; 0],
}
pub type ncclWindow_t = *mut ncclWindow_vidmem;

/// `cudaStream_t` (a `CUstream`); 0 is the legacy default stream.
pub type cudaStream_t = *mut c_void;

pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `struct ncclConfig_v22800`, sizeof 80 on x86-64.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
}

/// `struct ncclSimInfo_v22200`, sizeof 24.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: c_float,
}

/// `struct ncclTeam` of nccl_device/core.h, returned by value from ncclTeamWorld and friends.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclTeam_t {
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;
pub const NCCL_SIM_INFO_MAGIC: c_uint = 0x7468_5283;
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
pub const NCCL_NUM_OPS: c_int = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn config_layout_is_nccls() {
        assert_eq!(size_of::<ncclConfig_t>(), 80);
        assert_eq!(offset_of!(ncclConfig_t, magic), 8);
        assert_eq!(offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(offset_of!(ncclConfig_t, netName), 32);
        assert_eq!(offset_of!(ncclConfig_t, splitShare), 40);
        assert_eq!(offset_of!(ncclConfig_t, commName), 48);
        assert_eq!(offset_of!(ncclConfig_t, collnetEnable), 56);
        assert_eq!(offset_of!(ncclConfig_t, nvlsCTAs), 68);
        assert_eq!(offset_of!(ncclConfig_t, nvlinkCentricSched), 76);
        assert_eq!(size_of::<ncclSimInfo_t>(), 24);
        assert_eq!(offset_of!(ncclSimInfo_t, estimatedTime), 16);
        assert_eq!(size_of::<ncclUniqueId>(), 128);
        assert_eq!(size_of::<ncclTeam_t>(), 12);
    }
}
