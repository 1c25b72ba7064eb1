//! The `pncclX` aliases of every `ncclX` (NCCL's profiling interface: a profiler defines ncclX
//! and forwards to pncclX). Each forwards to the real function; the argument lists below are
//! checked by the compiler against the functions they call.
// ncclResetDebugInit is deprecated in NCCL's header (and so in ours); its alias still forwards.
#![allow(deprecated)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::coll::*;
use super::comm::*;
use super::devapi::*;
use super::encryption::*;
use super::group::*;
use super::mem::*;
use super::p2p::*;
use super::param::*;
use super::redop::*;
use super::rma::*;
use super::types::*;
use super::version::*;

macro_rules! profiling_aliases {
    ($( $alias:ident => $target:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
        $(
            #[doc = concat!("`", stringify!($alias), "`: NCCL's profiling alias of `", stringify!($target), "`.")]
            #[no_mangle]
            pub extern "C" fn $alias($($arg: $ty),*) -> $ret {
                $target($($arg),*)
            }
        )*
    };
}

profiling_aliases! {
    pncclMemAlloc => ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t;
    pncclMemFree => ncclMemFree(ptr: *mut c_void) -> ncclResult_t;
    pncclGetVersion => ncclGetVersion(version: *mut c_int) -> ncclResult_t;
    pncclGetUniqueId => ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t;
    pncclSetEncryption => ncclSetEncryption(config: *const ncclEncryptionConfig_t) -> ncclResult_t;
    pncclCommInitRankConfig => ncclCommInitRankConfig(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int, config: *mut ncclConfig_t) -> ncclResult_t;
    pncclCommInitRank => ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t;
    pncclCommInitAll => ncclCommInitAll(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t;
    pncclCommInitRankScalable => ncclCommInitRankScalable(newcomm: *mut ncclComm_t, nranks: c_int, myrank: c_int, nId: c_int, commIds: *mut ncclUniqueId, config: *mut ncclConfig_t) -> ncclResult_t;
    pncclCommFinalize => ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t;
    pncclCommDestroy => ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
    pncclCommAbort => ncclCommAbort(comm: ncclComm_t) -> ncclResult_t;
    pncclCommRevoke => ncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t;
    pncclCommSplit => ncclCommSplit(comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t) -> ncclResult_t;
    pncclCommShrink => ncclCommShrink(comm: ncclComm_t, excludeRanksList: *mut c_int, excludeRanksCount: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t, shrinkFlags: c_int) -> ncclResult_t;
    pncclCommGetUniqueId => ncclCommGetUniqueId(comm: ncclComm_t, uniqueId: *mut ncclUniqueId) -> ncclResult_t;
    pncclCommGrow => ncclCommGrow(comm: ncclComm_t, nRanks: c_int, uniqueId: *const ncclUniqueId, rank: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t) -> ncclResult_t;
    pncclGetErrorString => ncclGetErrorString(result: ncclResultArg_t) -> *const c_char;
    pncclGetLastError => ncclGetLastError(comm: ncclComm_t) -> *const c_char;
    pncclResetDebugInit => ncclResetDebugInit() -> ();
    pncclCommGetAsyncError => ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t;
    pncclCommCount => ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
    pncclCommCuDevice => ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t;
    pncclCommUserRank => ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;
    pncclCommRegister => ncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t;
    pncclCommDeregister => ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t;
    pncclCommWindowRegister => ncclCommWindowRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, win: *mut ncclWindow_t, winFlags: c_int) -> ncclResult_t;
    pncclCommWindowDeregister => ncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t;
    pncclCommSuspend => ncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t;
    pncclCommResume => ncclCommResume(comm: ncclComm_t) -> ncclResult_t;
    pncclCommMemStats => ncclCommMemStats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> ncclResult_t;
    pncclRedOpCreatePreMulSum => ncclRedOpCreatePreMulSum(op: *mut ncclRedOp_t, scalar: *mut c_void, datatype: ncclDataType_t, residence: ncclScalarResidence_t, comm: ncclComm_t) -> ncclResult_t;
    pncclRedOpDestroy => ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t;
    pncclReduce => ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclBcast => ncclBcast(buff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclBroadcast => ncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclAllReduce => ncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclReduceScatter => ncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclAllGather => ncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclAlltoAll => ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclGather => ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclScatter => ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclAllReduceConfig => ncclAllReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclBroadcastConfig => ncclBroadcastConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclReduceConfig => ncclReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclAllGatherConfig => ncclAllGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclReduceScatterConfig => ncclReduceScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclAlltoAllConfig => ncclAlltoAllConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclGatherConfig => ncclGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclScatterConfig => ncclScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
    pncclSend => ncclSend(sendbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclRecv => ncclRecv(recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclPutSignal => ncclPutSignal(localbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int, peerWin: ncclWindow_t, peerWinOffset: usize, sigIdx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclSignal => ncclSignal(peer: c_int, sigIdx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclWaitSignal => ncclWaitSignal(nDesc: c_int, signalDescs: *mut ncclWaitSignalDesc_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
    pncclGroupStart => ncclGroupStart() -> ncclResult_t;
    pncclGroupEnd => ncclGroupEnd() -> ncclResult_t;
    pncclGroupSimulateEnd => ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t;
    pncclDevCommCreate => ncclDevCommCreate(comm: ncclComm_t, reqs: *const c_void, outDevComm: *mut c_void) -> ncclResult_t;
    pncclDevCommDestroy => ncclDevCommDestroy(comm: ncclComm_t, devComm: *const c_void) -> ncclResult_t;
    pncclTeamWorld => ncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t;
    pncclTeamLsa => ncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t;
    pncclTeamRail => ncclTeamRail(comm: ncclComm_t) -> ncclTeam_t;
    pncclTeamCft => ncclTeamCft(comm: ncclComm_t, mode: c_int) -> ncclTeam_t;
    pncclTeamCftMultimem => ncclTeamCftMultimem(comm: ncclComm_t) -> ncclTeam_t;
    pncclCommQueryProperties => ncclCommQueryProperties(comm: ncclComm_t, props: *mut c_void) -> ncclResult_t;
    pncclGetMultimemDeviceLeInfo => ncclGetMultimemDeviceLeInfo(window: ncclWindow_t, offset: usize, leId: *mut c_uint, leOffset: *mut usize) -> ncclResult_t;
    pncclGetCftDeviceLeInfo => ncclGetCftDeviceLeInfo(window: ncclWindow_t, offset: usize, peerCft: c_int, cftTeam: ncclTeam_t, leId: *mut c_uint, leOffset: *mut usize) -> ncclResult_t;
    pncclGetPeerDeviceLeInfo => ncclGetPeerDeviceLeInfo(window: ncclWindow_t, offset: usize, peerWorld: c_int, leId: *mut c_uint, leOffset: *mut usize) -> ncclResult_t;
    pncclGetLsaDevicePointer => ncclGetLsaDevicePointer(window: ncclWindow_t, offset: usize, lsaRank: c_int, outPtr: *mut *mut c_void) -> ncclResult_t;
    pncclGetPeerDevicePointer => ncclGetPeerDevicePointer(window: ncclWindow_t, offset: usize, peer: c_int, outPtr: *mut *mut c_void) -> ncclResult_t;
    pncclGetLsaMultimemDevicePointer => ncclGetLsaMultimemDevicePointer(window: ncclWindow_t, offset: usize, outPtr: *mut *mut c_void) -> ncclResult_t;
    pncclGetMultimemDevicePointer => ncclGetMultimemDevicePointer(window: ncclWindow_t, offset: usize, multimem: ncclMultimemHandle_t, outPtr: *mut *mut c_void) -> ncclResult_t;
    pncclGinOutboxCreateRequirement => ncclGinOutboxCreateRequirement(nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinOutboxHandle, outReq: *mut c_void) -> ncclResult_t;
    pncclGinInboxA2ACreateRequirement => ncclGinInboxA2ACreateRequirement(peers: ncclTeam_t, nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinInboxA2AHandle, outReq: *mut c_void) -> ncclResult_t;
    pncclWinGetUserPtr => ncclWinGetUserPtr(comm: ncclComm_t, win: ncclWindow_t, outUserPtr: *mut *mut c_void) -> ncclResult_t;
    pncclTeamRankToWorld => ncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int;
    pncclTeamRankToLsa => ncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int;
    pncclLsaBarrierCreateRequirement => ncclLsaBarrierCreateRequirement(team: ncclTeam_t, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t;
    pncclGinBarrierCreateRequirement => ncclGinBarrierCreateRequirement(comm: ncclComm_t, team: ncclTeam_t, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t;
    pncclLLA2ACalcSlots => ncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int;
    pncclLLA2ACreateRequirement => ncclLLA2ACreateRequirement(nBlocks: c_int, nSlots: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t;
    pncclParamBind => ncclParamBind(out: *mut ncclParamHandle_t, key: *const c_char) -> ncclResult_t;
    pncclParamGetI8 => ncclParamGetI8(h: ncclParamHandle_t, out: *mut i8) -> ncclResult_t;
    pncclParamGetI16 => ncclParamGetI16(h: ncclParamHandle_t, out: *mut i16) -> ncclResult_t;
    pncclParamGetI32 => ncclParamGetI32(h: ncclParamHandle_t, out: *mut i32) -> ncclResult_t;
    pncclParamGetI64 => ncclParamGetI64(h: ncclParamHandle_t, out: *mut i64) -> ncclResult_t;
    pncclParamGetU8 => ncclParamGetU8(h: ncclParamHandle_t, out: *mut u8) -> ncclResult_t;
    pncclParamGetU16 => ncclParamGetU16(h: ncclParamHandle_t, out: *mut u16) -> ncclResult_t;
    pncclParamGetU32 => ncclParamGetU32(h: ncclParamHandle_t, out: *mut u32) -> ncclResult_t;
    pncclParamGetU64 => ncclParamGetU64(h: ncclParamHandle_t, out: *mut u64) -> ncclResult_t;
    pncclParamGetStr => ncclParamGetStr(h: ncclParamHandle_t, out: *mut *const c_char) -> ncclResult_t;
    pncclParamGet => ncclParamGet(h: ncclParamHandle_t, out: *mut c_void, maxLen: c_int, len: *mut c_int) -> ncclResult_t;
    pncclParamGetParameter => ncclParamGetParameter(key: *const c_char, value: *mut *const c_char, valueLen: *mut c_int) -> ncclResult_t;
    pncclParamGetAllParameterKeys => ncclParamGetAllParameterKeys(table: *mut *mut *const c_char, tableLen: *mut c_int) -> ncclResult_t;
    pncclParamDumpAll => ncclParamDumpAll() -> ();
}
