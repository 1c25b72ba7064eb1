//! `ncclConfig_t` as NCCL 2.28.9's nccl.h lays it out: the C struct this module parses into
//! `CommConfig` (comm_config.rs). It lives here, below api/, so the dependency points one way;
//! api/types.rs re-exports it for the C boundary.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint};

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

pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
