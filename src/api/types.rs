//! The C types of nccl.h as Rust sees them at the boundary.
//!
//! Enum-typed parameters arrive as plain `c_int`: C may pass any value, and a Rust enum holding an
//! undeclared value would be undefined behaviour. cbindgen does not emit these definitions; the
//! header's prelude (cbindgen.toml) spells them exactly as NCCL 2.32.3 does, and the ABI facts test
//! (ffi-tests/) checks both against NCCL's own header.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

pub use crate::error::ResultCode as ncclResult_t;
/// `ncclResult_t` received from C (any int may arrive); the header spells it ncclResult_t.
pub type ncclResultArg_t = c_int;

/// `ncclDataType_t` as received (any int may arrive; `types::DataType::from_raw` validates it).
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t` as received: a built-in op below ncclNumOps, or one ncclRedOpCreatePreMulSum made.
pub type ncclRedOp_t = c_int;
/// `ncclCommMemStat_t` as received (any int may arrive; ncclCommMemStats validates it).
pub type ncclCommMemStat_t = c_int;
/// `ncclScalarResidence_t` as received: ncclScalarDevice (0) or ncclScalarHostImmediate (1).
pub type ncclScalarResidence_t = c_int;

/// The opaque communicator type behind `ncclComm_t`. Handles are validated against the live-comm
/// registry before use (see `comm::registry`), never dereferenced blindly.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}
/// A communicator handle as C holds it.
pub type ncclComm_t = *mut ncclComm;

/// The opaque window type behind `ncclWindow_t`.
#[repr(C)]
pub struct ncclWindow_vidmem {
    _private: [u8; 0],
}
/// A window handle as C holds it.
pub type ncclWindow_t = *mut ncclWindow_vidmem;

/// `cudaStream_t` (a `CUstream`); 0 is the legacy default stream.
pub type cudaStream_t = *mut c_void;

/// Size of `ncclUniqueId`, in bytes.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// The rendezvous id every rank of a new communicator is given (ncclGetUniqueId).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Opaque to the application: oxccl's bootstrap address and a random key.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

pub use crate::config::abi::{ncclConfig_t, NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT};
pub use crate::config::coll_config::{ncclCollConfig_t, ncclConfigExt_t};

/// `struct ncclSimInfo_v22200`, sizeof 24.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclSimInfo_t {
    /// sizeof the caller's struct (NCCL_SIM_INFO_INITIALIZER sets it).
    pub size: usize,
    /// NCCL_SIM_INFO_MAGIC, set by the initializer.
    pub magic: c_uint,
    /// NCCL_VERSION_CODE the caller was built against.
    pub version: c_uint,
    /// Out: the group's predicted time in microseconds (ncclGroupSimulateEnd).
    pub estimatedTime: c_float,
}

pub use crate::symmem::abi::ncclTeam_t;

/// `ncclWaitSignalDesc_t` (NCCL 2.29+), sizeof 16: one entry of ncclWaitSignal's list, waiting
/// for `opCnt` more signals from rank `peer` on signal `sigIdx` of context `ctx`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclWaitSignalDesc_t {
    /// Signals to wait for (NCCL requires more than 0).
    pub opCnt: c_int,
    /// The rank that sends them.
    pub peer: c_int,
    /// Signal index, below the communicator's numRmaSig.
    pub sigIdx: c_int,
    /// Context, below the communicator's numRmaCtx.
    pub ctx: c_int,
}

/// `ncclSimInfo_t::magic` as NCCL_SIM_INFO_INITIALIZER sets it.
pub const NCCL_SIM_INFO_MAGIC: c_uint = 0x7468_5283;
/// ncclCommSplit's color for ranks that join no child.
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// ncclNumOps: the built-in reduction ops' count.
pub const NCCL_NUM_OPS: c_int = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn config_layout_is_nccls() {
        assert_eq!(size_of::<ncclConfig_t>(), 120);
        assert_eq!(offset_of!(ncclConfig_t, magic), 8);
        assert_eq!(offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(offset_of!(ncclConfig_t, netName), 32);
        assert_eq!(offset_of!(ncclConfig_t, splitShare), 40);
        assert_eq!(offset_of!(ncclConfig_t, commName), 48);
        assert_eq!(offset_of!(ncclConfig_t, collnetEnable), 56);
        assert_eq!(offset_of!(ncclConfig_t, nvlsCTAs), 68);
        assert_eq!(offset_of!(ncclConfig_t, nvlinkCentricSched), 76);
        assert_eq!(offset_of!(ncclConfig_t, graphUsageMode), 80);
        assert_eq!(offset_of!(ncclConfig_t, nvlsHostMode), 112);
        assert_eq!(size_of::<ncclSimInfo_t>(), 24);
        assert_eq!(offset_of!(ncclSimInfo_t, estimatedTime), 16);
        assert_eq!(size_of::<ncclUniqueId>(), 128);
        assert_eq!(size_of::<ncclTeam_t>(), 12);
        assert_eq!(size_of::<ncclWaitSignalDesc_t>(), 16);
        assert_eq!(offset_of!(ncclWaitSignalDesc_t, peer), 4);
        assert_eq!(offset_of!(ncclWaitSignalDesc_t, sigIdx), 8);
        assert_eq!(offset_of!(ncclWaitSignalDesc_t, ctx), 12);
    }
}
