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

pub use crate::config::abi::{ncclConfig_t, NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT};

/// `struct ncclSimInfo_v22200`, sizeof 24.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: c_float,
}

pub use crate::symmem::abi::ncclTeam_t;

pub const NCCL_SIM_INFO_MAGIC: c_uint = 0x7468_5283;
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
