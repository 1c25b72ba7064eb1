//! The host side of NCCL's device API (nccl_device/*.h), for kernels compiled against NCCL
//! 2.28.9's headers and against the versioned ones of 2.29.2-2.32.3: device communicators over
//! symmetric memory (comm::devcomm, src/symmem), communicator properties, teams, window
//! queries, the requirement helpers, and NCCL 2.32's CFT queries as they answer without CFT.
//! The structs cross as NCCL lays them out (symmem::abi, symmem::abi232).

use std::ffi::{c_int, c_void};

use super::types::{ncclComm_t, ncclResult_t, ncclTeam_t};
use super::types::ncclWindow_t;
use super::{call, call_grouped, comm_arg, out};
use crate::comm::window::WindowView;
use crate::error::{Error, Result};
use std::sync::Arc;
use crate::comm::devcomm;
use crate::symmem::abi::{ncclDevCommRequirements, ncclDevResourceRequirements, ncclGinBarrierHandle, ncclLLA2AHandle, ncclLsaBarrierHandle, GIN_MAX_CONTEXTS};
use crate::symmem::abi232::ncclDevCommRequirements_v23203;

/// (rank, nranks, LSA team size, this rank's index in it), or None for a bad or unready handle.
fn teams_of(c: ncclComm_t) -> Option<(c_int, c_int, c_int, c_int)> {
    let c = comm_arg(c).ok()?;
    let r = c.ready().ok()?;
    let (size, me) = crate::symmem::lsa_team(&r.peers, c.rank);
    Some((c.rank as c_int, c.nranks as c_int, size as c_int, me as c_int))
}

/// Creates a device communicator: fills `*outDevComm` (an `ncclDevComm` of the caller's headers)
/// with what its kernels need to reach the LSA team's memory, and allocates the buffers `reqs`
/// asks for in a symmetric resource window. Collective over the communicator; inside a group it
/// runs at the outermost ncclGroupEnd, which returns its error. `outDevComm` and the
/// requirements' output pointers must stay valid until then.
///
/// `reqs` may come from any header oxccl serves, told apart by its first 16 bytes
/// (devcomm::classify): NCCL 2.28.9's unversioned struct (its `ncclDevComm`, 200 bytes), or a
/// versioned one from NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER (2.29.2-2.29.3, 2.29.5-2.29.7,
/// 2.30.x, 2.31.0-2.32.3: NCCL 2.32.3's compat table), whose `ncclDevComm` is written in that
/// version's layout (devcomm::versions); a versioned struct is read up to its `size`.
///
/// Returns ncclSuccess, or:
/// - ncclInvalidArgument: `comm` NULL, unknown or destroyed; `reqs` or `outDevComm` NULL; a
///   negative count; multicast memory asked for (`lsaMultimem`, a team's `multimem`: NVLS is
///   off); for versioned callers, CFT capabilities (`cftCaps`), GIN resources (signals,
///   counters, `barrierCount`, rail or world GIN barriers) or GIN itself (`ginConnectionType`,
///   `ginForceEnable`), as NCCL 2.32.3 answers on a machine without GIN and CFT;
/// - ncclInvalidUsage: a versioned struct not from NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER (bad
///   `magic`), a `version` newer than 2.32.3 ("NCCL library is too old", unless
///   NCCL_ENABLE_VERSION_CHECK=0) or one no compat entry serves; a 2.29 caller asking for GIN
///   (NCCL's "compiled with too old version"); a 2.28.9 caller asking for GIN; a communicator
///   without symmetric memory (several hosts, NCCL_WIN_ENABLE=0 or NCCL_CUMEM_ENABLE=0);
/// - the errors of the collective allocation and mapping (ncclUnhandledCudaError,
///   ncclSystemError, ncclRemoteError).
///
/// NCCL_DEV_API_JIT=1, or `useRuntimeVersion` from 2.31 headers, writes NCCL 2.32.3's layout
/// with version 2.32.3, as NCCL does (src/dev_runtime.cc, 2.30.7; 2.32.3's library).
#[no_mangle]
pub extern "C" fn ncclDevCommCreate(comm: ncclComm_t, reqs: *const c_void, outDevComm: *mut c_void) -> ncclResult_t {
    call_grouped("ncclDevCommCreate", || {
        let c = comm_arg(comm)?;
        if reqs.is_null() {
            return Err(Error::invalid_argument("ncclDevCommCreate : reqs argument is NULL"));
        }
        if outDevComm.is_null() {
            return Err(Error::invalid_argument("ncclDevCommCreate : outDevComm argument is NULL"));
        }
        // SAFETY: every requirements struct oxccl serves is at least 16 bytes.
        let head = unsafe { std::ptr::read_unaligned(reqs as *const [u8; 16]) };
        let req = match devcomm::classify(head) {
            // SAFETY: a non-NULL 2.28.9 ncclDevCommRequirements* from the caller.
            devcomm::Header::V22809 => unsafe { devcomm::Request::copy(&*(reqs as *const ncclDevCommRequirements)) }?,
            devcomm::Header::BadMagic => {
                return Err(Error::invalid_usage(
                    "Cannot create device communicator: ncclDevCommRequirements_t argument must be initialized via NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER",
                ))
            }
            devcomm::Header::Versioned => {
                let mut raw = ncclDevCommRequirements_v23203::initializer();
                let size = usize::from_le_bytes(head[..8].try_into().unwrap_or_default());
                let n = size.clamp(16, std::mem::size_of::<ncclDevCommRequirements_v23203>());
                // SAFETY: the caller's struct holds `size` bytes (at least the 16 read above);
                // raw is plain data whose bool-like fields are u8, so any bytes are valid.
                unsafe { std::ptr::copy_nonoverlapping(reqs as *const u8, (&mut raw as *mut ncclDevCommRequirements_v23203).cast::<u8>(), n) };
                let jit = crate::config::env_i64("NCCL_DEV_API_JIT", 0) == 1;
                // SAFETY: the caller's lists, readable for the call.
                unsafe { devcomm::Request::copy_versioned(&raw, jit) }?
            }
        };
        devcomm::check_supported(c.ready()?)?;
        let job = crate::comm::window::WindowJob { comm: c, what: crate::comm::window::What::DevComm(Box::new(req)), out: outDevComm as usize };
        crate::launch::group::submit_window(job)
    })
}

/// Frees a device communicator's resource window (local, as in NCCL). `devComm` may be of any
/// layout ncclDevCommCreate writes; as NCCL 2.32.3's ncclDevCommDestroy, one starting with
/// NCCL_API_MAGIC is versioned (2.30+) and its `version` is checked, any other is 2.28-2.29's.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown or destroyed; `devComm`
/// NULL), ncclInvalidUsage (a versioned `devComm` whose version oxccl does not serve; a resource
/// window this communicator does not hold, e.g. destroyed twice).
#[no_mangle]
pub extern "C" fn ncclDevCommDestroy(comm: ncclComm_t, devComm: *const c_void) -> ncclResult_t {
    call("ncclDevCommDestroy", || {
        let c = comm_arg(comm)?;
        if devComm.is_null() {
            return Err(Error::invalid_argument("ncclDevCommDestroy : devComm argument is NULL"));
        }
        // SAFETY: a non-NULL ncclDevComm* from the caller: every layout holds these 8 bytes.
        let head = unsafe { std::ptr::read_unaligned(devComm as *const [u32; 2]) };
        let at = devcomm::versions::resource_window_offset(head[0], head[1])?;
        // SAFETY: the resource window lies inside every layout (offset 32 or 40 of 200+ bytes).
        let rw = unsafe { std::ptr::read_unaligned((devComm as *const u8).add(at) as *const u64) };
        devcomm::destroy(&c, rw)
    })
}

/// Writes what `comm` offers the device API into `*props`, an `ncclCommProperties_t` from
/// NCCL_COMM_PROPERTIES_INITIALIZER of any header oxccl serves (2.29.2-2.32.3), as NCCL 2.32.3's
/// ncclCommQueryProperties (src/dev_runtime.cc in 2.30.7; 2.32.3's library): the fields its
/// `version` has, never past its `size`:
/// - rank, nRanks, cudaDev, nvmlDev (NVML's index: the GPU's place in PCI bus order);
/// - deviceApiSupport: the communicator has symmetric memory (one host, NCCL_WIN_ENABLE and
///   NCCL_CUMEM_ENABLE on); for 2.29 callers only where one LSA team spans the communicator;
/// - multimemSupport false (NVLS is off); ginType, railedGinType NCCL_GIN_TYPE_NONE;
///   ginConnectionType NCCL_GIN_CONNECTION_NONE; ginSupport all false (no GIN);
/// - nLsaTeams: ranks / LSA team size; hostRmaSupport: symmetric memory and numRmaCtx > 0
///   (ncclPutSignal and friends work);
/// - commHash: the key all ranks of the communicator share (Ready::key);
/// - ginMinStride: consecutive ranks per host (NCCL's contiguousRanksPerHost, INT_MAX where hosts
///   differ), NCCL's value without full GIN connectivity;
/// - devCommRuntimeVersionSize: 248, sizeof NCCL 2.32.3's ncclDevComm;
/// - cftSupport, cftMulticastSupport, cftCountedSupport false (no CFT).
///
/// Any thread; no GPU work. Returns ncclSuccess, or ncclInvalidArgument (`comm` NULL, unknown,
/// destroyed or still initialising; `props` NULL), ncclInvalidUsage (`magic` is not
/// NCCL_API_MAGIC: not from the initializer; a `version` newer than 2.32.3 or one oxccl does not
/// serve, with NCCL's WARN), or the communicator's asynchronous error.
#[no_mangle]
pub extern "C" fn ncclCommQueryProperties(comm: ncclComm_t, props: *mut c_void) -> ncclResult_t {
    call("ncclCommQueryProperties", || {
        let c = comm_arg(comm)?;
        if props.is_null() {
            return Err(Error::invalid_argument("ncclCommQueryProperties : props argument is NULL"));
        }
        crate::comm::grow::ensure_ready(&c)?;
        // SAFETY: every ncclCommProperties_t starts with size, magic and version (16 bytes).
        let head = unsafe { std::ptr::read_unaligned(props as *const [u8; 16]) };
        let size = usize::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let magic = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
        let version = i32::from_le_bytes(head[12..16].try_into().unwrap_or_default());
        if magic != crate::symmem::abi232::NCCL_API_MAGIC {
            return Err(Error::invalid_usage(
                "Cannot get communicator properties: ncclCommProperties_t argument must be initialized via NCCL_COMM_PROPERTIES_INITIALIZER",
            ));
        }
        let abi = devcomm::versions::compat(version)?;
        let p = devcomm::props::Properties::of(&c, c.ready()?);
        let len = size.min(std::mem::size_of::<crate::symmem::abi232::ncclCommProperties_v23203>());
        // SAFETY: the caller's struct holds `size` bytes; only the first `len` are written.
        let dst = unsafe { std::slice::from_raw_parts_mut(props as *mut u8, len) };
        devcomm::props::write(&p, version, abi, dst);
        Ok(())
    })
}

/// All ranks of the communicator.
#[no_mangle]
pub extern "C" fn ncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t {
    match std::panic::catch_unwind(|| comm_arg(comm).ok().map(|c| (c.rank, c.nranks))).ok().flatten() {
        Some((rank, n)) => ncclTeam_t { nRanks: n as c_int, rank: rank as c_int, stride: 1 },
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// Ranks sharing load/store access: consecutive ranks of one host, one size for every team
/// (symmem::lsa_team, as NCCL computes it).
#[no_mangle]
pub extern "C" fn ncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t {
    match std::panic::catch_unwind(|| teams_of(comm)).ok().flatten() {
        Some((_, _, size, me)) => ncclTeam_t { nRanks: size, rank: me, stride: 1 },
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// Ranks with this rank's index in every LSA team.
#[no_mangle]
pub extern "C" fn ncclTeamRail(comm: ncclComm_t) -> ncclTeam_t {
    match std::panic::catch_unwind(|| teams_of(comm)).ok().flatten() {
        Some((rank, n, size, _)) => ncclTeam_t { nRanks: n / size, rank: rank / size, stride: size },
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// The flat or hierarchical CFT team (`mode`, an ncclCftTeamMode_t), as NCCL 2.32.3's
/// ncclTeamCft answers where CFT is unavailable (oxccl has none): the flat team is this rank
/// alone {1, 0, 1}; NCCL_CFT_TEAM_HIER_MULTIMEM gives {1, 0, 1}; NCCL_CFT_TEAM_HIER_LSA gives
/// {1 / L, 0, L} for an LSA team of L ranks (C's division: {0, 0, L} above one); any other mode
/// {0, 0, 0}. {0, 0, 0} too for a NULL, unknown or uninitialised `comm` (NCCL returns it when its
/// device-runtime init fails). Any thread.
#[no_mangle]
pub extern "C" fn ncclTeamCft(comm: ncclComm_t, mode: c_int) -> ncclTeam_t {
    match std::panic::catch_unwind(|| teams_of(comm)).ok().flatten() {
        Some((_, _, size, _)) => devcomm::cft::team(mode, size),
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// The CFT multimem team, as NCCL 2.32.3's ncclTeamCftMultimem answers without CFT: this rank
/// alone, {1, 0, 1}; {0, 0, 0} for a NULL, unknown or uninitialised `comm`. Any thread.
#[no_mangle]
pub extern "C" fn ncclTeamCftMultimem(comm: ncclComm_t) -> ncclTeam_t {
    match std::panic::catch_unwind(|| teams_of(comm)).ok().flatten() {
        Some(_) => devcomm::cft::multimem_team(),
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// World rank of `rank` in `team` (NCCL's arithmetic, no checks).
#[no_mangle]
pub extern "C" fn ncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    match std::panic::catch_unwind(|| comm_arg(comm).ok().map(|c| c.rank as c_int)).ok().flatten() {
        Some(me) => me.wrapping_add(rank.wrapping_sub(team.rank).wrapping_mul(team.stride)),
        None => -1,
    }
}

/// LSA rank of `rank` in `team`.
#[no_mangle]
pub extern "C" fn ncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    match std::panic::catch_unwind(|| teams_of(comm)).ok().flatten() {
        Some((_, _, _, me)) => me.wrapping_add(rank.wrapping_sub(team.rank).wrapping_mul(team.stride)),
        None => -1,
    }
}

/// The buffer `nBarriers` LSA barriers of `team` need: three words a barrier plus one a barrier
/// and rank (NCCL's sizes: the device side indexes them so).
#[no_mangle]
pub extern "C" fn ncclLsaBarrierCreateRequirement(team: ncclTeam_t, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t {
    call("ncclLsaBarrierCreateRequirement", || {
        let (h, r) = outs(outHandle, outReq)?;
        let n = nBarriers.max(0) as usize;
        let h = h as *mut ncclLsaBarrierHandle;
        let req = zeroed_req(r);
        // SAFETY: non-NULL caller structs of these types (checked by outs).
        unsafe {
            (*h).nBarriers = nBarriers;
            (*req).bufferSize = (3 * n + n * team.nRanks.max(0) as usize) * 4;
            (*req).bufferAlign = 4;
            (*req).outBufferHandle = &mut (*h).bufHandle;
        }
        Ok(())
    })
}

/// The buffer and signals `nBarriers` GIN barriers need (a requirement only: creating a device
/// communicator that uses GIN is refused, see src/devcomm.rs).
#[no_mangle]
pub extern "C" fn ncclGinBarrierCreateRequirement(
    comm: ncclComm_t,
    team: ncclTeam_t,
    nBarriers: c_int,
    outHandle: *mut c_void,
    outReq: *mut c_void,
) -> ncclResult_t {
    call("ncclGinBarrierCreateRequirement", || {
        let _ = team;
        comm_arg(comm)?;
        let (h, r) = outs(outHandle, outReq)?;
        let h = h as *mut ncclGinBarrierHandle;
        let req = zeroed_req(r);
        // SAFETY: non-NULL caller structs of these types (checked by outs).
        unsafe {
            (*req).bufferSize = nBarriers.max(0) as usize * GIN_MAX_CONTEXTS * 4;
            (*req).bufferAlign = 4;
            (*req).outBufferHandle = &mut (*h).bufHandle;
            (*req).ginSignalCount = nBarriers;
            (*req).outGinSignalStart = &mut (*h).signal0;
        }
        Ok(())
    })
}

/// Slots an LL all-to-all needs for `maxElts` elements of up to `maxEltSize` bytes (NCCL's formula).
#[no_mangle]
pub extern "C" fn ncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int {
    maxElts.saturating_mul(maxEltSize.max(0).saturating_add(7) / 8)
}

/// The buffer an LL all-to-all of `nBlocks` blocks and `nSlots` slots needs: a 16-byte header and
/// two generations of slots per block.
#[no_mangle]
pub extern "C" fn ncclLLA2ACreateRequirement(nBlocks: c_int, nSlots: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t {
    call("ncclLLA2ACreateRequirement", || {
        let (h, r) = outs(outHandle, outReq)?;
        let h = h as *mut ncclLLA2AHandle;
        let req = zeroed_req(r);
        // SAFETY: non-NULL caller structs of these types (checked by outs).
        unsafe {
            (*h).nSlots = nSlots as u32;
            (*req).bufferSize = nBlocks.max(0) as usize * (1 + 2 * nSlots.max(0) as usize) * 16;
            (*req).bufferAlign = 16;
            (*req).outBufferHandle = &mut (*h).bufHandle;
        }
        Ok(())
    })
}

fn outs(h: *mut c_void, r: *mut c_void) -> crate::error::Result<(*mut c_void, *mut c_void)> {
    if h.is_null() || r.is_null() {
        return Err(crate::error::Error::invalid_argument("outHandle and outReq must not be NULL"));
    }
    Ok((h, r))
}

fn zeroed_req(r: *mut c_void) -> *mut ncclDevResourceRequirements {
    let req = r as *mut ncclDevResourceRequirements;
    // SAFETY: a non-NULL caller ncclDevResourceRequirements (checked by outs); all-zero is valid.
    unsafe { std::ptr::write_bytes(req, 0, 1) };
    req
}


/// The communicator that registered window `win`, and the window's view; ncclInvalidArgument
/// (NCCL's "Could not find communicator matching window") for any other handle.
fn window_of(win: ncclWindow_t) -> Result<(Arc<crate::comm::Comm>, WindowView)> {
    if win.is_null() {
        return Err(Error::invalid_argument("window argument is NULL"));
    }
    // Communicators whose window list is busy (a registration, possibly a collective waiting for
    // a rank this thread drives) are asked last, so a query about another communicator's window
    // never waits on them.
    let mut busy = Vec::new();
    for c in crate::comm::live() {
        match c.windows.try_view(win as usize) {
            Some(Some(v)) => return Ok((c, v)),
            Some(None) => {}
            None => busy.push(c),
        }
    }
    busy.into_iter()
        .find_map(|c| c.windows.view(win as usize).map(|v| (c, v)))
        .ok_or_else(|| Error::invalid_argument(format!("Could not find communicator matching window {win:p}")))
}

/// (LSA team size, this rank's index in it) of a window's communicator: symmetric memory spans
/// the LSA team; a window without it reaches this rank's copy only.
fn lsa_of(c: &crate::comm::Comm, v: &WindowView) -> Result<(usize, usize)> {
    if v.flat.is_none() {
        return Ok((1, 0));
    }
    let r = c.ready()?;
    Ok(crate::symmem::lsa_team(&r.peers, c.rank))
}

/// Stores in `*outPtr` the device address of byte `offset` of LSA rank `lsaRank`'s copy of
/// `window` (a load/store pointer this GPU may dereference), as NCCL's ncclGetLsaDevicePointer
/// (NCCL 2.29 dev_runtime.cc). Any thread; no stream work.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `window` or `outPtr` NULL, `window` not a
/// registered window of a live communicator, `lsaRank` outside [0, LSA team size) (a window
/// without symmetric memory has a team of one), or `offset` not below the window's size.
#[no_mangle]
pub extern "C" fn ncclGetLsaDevicePointer(window: ncclWindow_t, offset: usize, lsaRank: c_int, outPtr: *mut *mut c_void) -> ncclResult_t {
    call("ncclGetLsaDevicePointer", || {
        let out = out(outPtr, "outPtr")?;
        let (c, v) = window_of(window)?;
        let (size, me) = lsa_of(&c, &v)?;
        if lsaRank < 0 || lsaRank as usize >= size {
            return Err(Error::invalid_argument(format!("The provided lsaRank {lsaRank} is not in the valid lsaSize of [0,{size}] for the provided window {window:p}.")));
        }
        let p = v.lsa_ptr(offset as u64, lsaRank as usize, size, me).ok_or_else(|| Error::invalid_argument(format!("offset {offset} is outside window {window:p} of {} bytes", v.size)))?;
        *out = p as *mut c_void;
        Ok(())
    })
}

/// Stores in `*outPtr` the device address of byte `offset` of world rank `peer`'s copy of
/// `window`, or NULL where `peer` is not in this rank's LSA team (not reachable by load/store),
/// as NCCL's ncclGetPeerDevicePointer (NCCL 2.29 dev_runtime.cc). Any thread; no stream work.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `window` or `outPtr` NULL, `window` not a
/// registered window of a live communicator, `peer` outside [0, nranks), or `offset` not below
/// the window's size.
#[no_mangle]
pub extern "C" fn ncclGetPeerDevicePointer(window: ncclWindow_t, offset: usize, peer: c_int, outPtr: *mut *mut c_void) -> ncclResult_t {
    call("ncclGetPeerDevicePointer", || {
        let out = out(outPtr, "outPtr")?;
        let (c, v) = window_of(window)?;
        if peer < 0 || peer as usize >= c.nranks {
            return Err(Error::invalid_argument(format!("peer {peer} is not within valid range of ranks {}.", c.nranks)));
        }
        let (size, me) = lsa_of(&c, &v)?;
        // LSA teams are consecutive ranks: this rank's team starts `me` ranks below it.
        let lsa = peer as i64 - (c.rank as i64 - me as i64);
        *out = if (0..size as i64).contains(&lsa) {
            let p = v.lsa_ptr(offset as u64, lsa as usize, size, me).ok_or_else(|| Error::invalid_argument(format!("offset {offset} is outside window {window:p} of {} bytes", v.size)))?;
            p as *mut c_void
        } else {
            std::ptr::null_mut()
        };
        Ok(())
    })
}

/// Stores NULL in `*outPtr`: the multicast address of `window` for the LSA team, which exists
/// only with NVLS, and oxccl never uses NVLS (NCCL answers the same where NVLS is off:
/// ncclGetLsaMultimemDevicePointer, NCCL 2.29 dev_runtime.cc). Any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `window` or `outPtr` NULL, or `window` not a
/// registered window of a live communicator.
#[no_mangle]
pub extern "C" fn ncclGetLsaMultimemDevicePointer(window: ncclWindow_t, offset: usize, outPtr: *mut *mut c_void) -> ncclResult_t {
    let _ = offset;
    call("ncclGetLsaMultimemDevicePointer", || {
        let out = out(outPtr, "outPtr")?;
        window_of(window)?;
        *out = std::ptr::null_mut();
        Ok(())
    })
}

/// Stores NULL in `*outPtr`: the address of `window` in multicast object `multimem`, which only
/// NVLS makes, and oxccl never uses NVLS (NCCL answers the same where NVLS is off:
/// ncclGetMultimemDevicePointer, NCCL 2.29 dev_runtime.cc). Any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `window` or `outPtr` NULL, `multimem`'s
/// `mcBasePtr` NULL (checked first, as NCCL does), or `window` not a registered window of a live
/// communicator.
#[no_mangle]
pub extern "C" fn ncclGetMultimemDevicePointer(window: ncclWindow_t, offset: usize, multimem: ncclMultimemHandle_t, outPtr: *mut *mut c_void) -> ncclResult_t {
    let _ = offset;
    call("ncclGetMultimemDevicePointer", || {
        let out = out(outPtr, "outPtr")?;
        if window.is_null() {
            return Err(Error::invalid_argument("window argument is NULL"));
        }
        if multimem.mcBasePtr.is_null() {
            return Err(Error::invalid_argument(format!("MCBasePtr {:p} needs to be valid.", multimem.mcBasePtr)));
        }
        window_of(window)?;
        *out = std::ptr::null_mut();
        Ok(())
    })
}

/// The checks every CFT logical-endpoint query makes, in NCCL 2.32.3's order: `window`, `leId`,
/// `leOffset` non-NULL (ncclInvalidArgument, "`name` : `arg` argument is NULL"), `window` a
/// registered window (ncclInvalidArgument), then its answer without CFT (devcomm::cft::le_info).
fn le_query(name: &str, window: ncclWindow_t, le_id: *mut u32, le_offset: *mut usize) -> Result<()> {
    for (null, arg) in [(window.is_null(), "window"), (le_id.is_null(), "leId"), (le_offset.is_null(), "leOffset")] {
        if null {
            return Err(Error::invalid_argument(format!("{name} : {arg} argument is NULL")));
        }
    }
    let (_, v) = window_of(window)?;
    devcomm::cft::le_info(v.flags).map(|_| ())
}

/// The CFT logical endpoint and offset of byte `offset` of `window` in the CFT multicast
/// object, as NCCL 2.32.3's ncclGetMultimemDeviceLeInfo answers where CFT is unavailable (oxccl
/// has none): it always fails and writes nothing. Any thread.
///
/// Returns ncclInvalidArgument (`window`, `leId` or `leOffset` NULL; `window` not a registered
/// window; otherwise, "Using CFT query function without CFT support in the communicator."), or
/// ncclInvalidUsage for a window registered NCCL_WIN_GIN_ONLY ("CFT access is disabled because
/// the window was not registered for CFT.").
#[no_mangle]
pub extern "C" fn ncclGetMultimemDeviceLeInfo(window: ncclWindow_t, offset: usize, leId: *mut u32, leOffset: *mut usize) -> ncclResult_t {
    let _ = offset;
    call("ncclGetMultimemDeviceLeInfo", || le_query("ncclGetMultimemDeviceLeInfo", window, leId, leOffset))
}

/// The CFT logical endpoint and offset of byte `offset` of CFT peer `peerCft`'s copy of `window`
/// (`cftTeam`: the team `peerCft` counts in), as NCCL 2.32.3's ncclGetCftDeviceLeInfo answers
/// without CFT: it always fails, as ncclGetMultimemDeviceLeInfo does (same codes, same order of
/// checks), and writes nothing. Any thread.
#[no_mangle]
pub extern "C" fn ncclGetCftDeviceLeInfo(window: ncclWindow_t, offset: usize, peerCft: c_int, cftTeam: ncclTeam_t, leId: *mut u32, leOffset: *mut usize) -> ncclResult_t {
    let _ = (offset, peerCft, cftTeam);
    call("ncclGetCftDeviceLeInfo", || le_query("ncclGetCftDeviceLeInfo", window, leId, leOffset))
}

/// The CFT logical endpoint and offset of byte `offset` of world rank `peerWorld`'s copy of
/// `window`, as NCCL 2.32.3's ncclGetPeerDeviceLeInfo answers without CFT: it always fails, as
/// ncclGetMultimemDeviceLeInfo does (same codes, same order of checks; NCCL checks the peer only
/// with CFT), and writes nothing. Any thread.
#[no_mangle]
pub extern "C" fn ncclGetPeerDeviceLeInfo(window: ncclWindow_t, offset: usize, peerWorld: c_int, leId: *mut u32, leOffset: *mut usize) -> ncclResult_t {
    let _ = (offset, peerWorld);
    call("ncclGetPeerDeviceLeInfo", || le_query("ncclGetPeerDeviceLeInfo", window, leId, leOffset))
}

/// Stores in `*outUserPtr` the buffer `win` was registered with on this rank (ncclCommWindowRegister's
/// `buff`), as NCCL's ncclWinGetUserPtr (NCCL 2.29 dev_runtime.cc). Local; any thread.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `comm` or `outUserPtr` NULL, `comm` unknown or
/// destroyed, `win` NULL or not a window of `comm`.
#[no_mangle]
pub extern "C" fn ncclWinGetUserPtr(comm: ncclComm_t, win: ncclWindow_t, outUserPtr: *mut *mut c_void) -> ncclResult_t {
    call("ncclWinGetUserPtr", || {
        let c = comm_arg(comm)?;
        let out = out(outUserPtr, "outUserPtr")?;
        if win.is_null() {
            return Err(Error::invalid_argument("win argument is NULL"));
        }
        let v = c.windows.view(win as usize).ok_or_else(|| Error::invalid_argument(format!("{win:p} is not a window of this communicator")))?;
        *out = v.base as *mut c_void;
        Ok(())
    })
}

/// `ncclMultimemHandle_t` (nccl_device/impl/core__types.h): a multicast object's base address.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclMultimemHandle_t {
    /// Base of the multicast mapping.
    pub mcBasePtr: *mut c_void,
}


/// `ncclGinOutboxHandle` (nccl_device's GIN scratch types): filled by
/// ncclGinOutboxCreateRequirement, its buffer handle by ncclDevCommCreate.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclGinOutboxHandle {
    /// The outbox buffer's resource handle (`ncclDevResourceHandle`).
    pub bufHandle: u32,
    /// log2 of each block's slot size in bytes.
    pub size_log2: u32,
}

/// `ncclGinInboxA2AHandle` (nccl_device's GIN scratch types).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclGinInboxA2AHandle {
    /// The inbox buffer's resource handle (`ncclDevResourceHandle`).
    pub bufHandle: u32,
    /// First of its GIN signals (`ncclGinSignal_t`).
    pub signals: u32,
    /// log2 of each block's slot size in bytes.
    pub size_log2: u32,
    /// 2^32 / (peers in the team other than this rank), truncated to 32 bits.
    pub nPeers_rcp32: u32,
}

/// What NCCL 2.32.3's GIN scratch requirements ask for (read off its libnccl.so.2: bytes,
/// alignment and signals for each block count and size): (bytes, signals, the handle's
/// size_log2, nPeers_rcp32). None where NCCL's arithmetic leaves its domain (negative counts,
/// shifts past 30 bits, a team without peers, which NCCL divides by) or the size overflows.
fn gin_scratch(outbox: bool, n_blocks: c_int, size_log2: c_int, team_ranks: c_int) -> Option<(usize, c_int, u32, u32)> {
    if n_blocks < 0 || size_log2 > 30 || (!outbox && size_log2 < 0) {
        return None;
    }
    let blocks = n_blocks as usize;
    if outbox {
        // Slots of at least 128 bytes, plus 8 KiB and 128 bytes of bookkeeping a block.
        let log2 = size_log2.max(7) as u32;
        let bytes = blocks.checked_mul((1usize << log2) + 8192 + 128)?;
        return Some((bytes, 0, log2, 0));
    }
    let peers = team_ranks.checked_sub(1).filter(|&p| p > 0)? as u64;
    let slot = (1usize << size_log2).div_ceil(128) * 128 + 128;
    let bytes = blocks.checked_mul(slot)?;
    let signals = c_int::try_from(blocks.checked_mul(2048 + 4 * peers as usize)?).ok()?;
    Some((bytes, signals, size_log2 as u32, ((1u64 << 32) / peers) as u32))
}

/// Fills `*outReq` with the device resources a GIN outbox of `nBlocks` blocks of `2^size_log2`
/// bytes (at least 128) needs, as NCCL 2.32.3's ncclGinOutboxCreateRequirement does, and points
/// it at `outHandle` for ncclDevCommCreate to complete. The requirement is valid, but a device
/// communicator asking for GIN resources is ncclInvalidUsage in oxccl (no GIN transport), as in
/// NCCL without one. Any thread; no GPU work.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `outHandle` or `outReq` NULL, `nBlocks` negative,
/// `size_log2` above 30, or a size that overflows (inputs where NCCL's arithmetic overflows).
#[no_mangle]
pub extern "C" fn ncclGinOutboxCreateRequirement(nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinOutboxHandle, outReq: *mut c_void) -> ncclResult_t {
    call("ncclGinOutboxCreateRequirement", || {
        let (h, r) = outs(outHandle.cast(), outReq)?;
        let (bytes, _, log2, _) = gin_scratch(true, nBlocks, size_log2, 0).ok_or_else(|| Error::invalid_argument(format!("GIN outbox of {nBlocks} blocks of 2^{size_log2} bytes")))?;
        let h = h as *mut ncclGinOutboxHandle;
        let req = zeroed_req(r);
        // SAFETY: non-NULL caller structs of these types (checked by outs).
        unsafe {
            (*h).size_log2 = log2;
            (*req).bufferSize = bytes;
            (*req).bufferAlign = 128;
            (*req).outBufferHandle = &mut (*h).bufHandle;
        }
        Ok(())
    })
}

/// Fills `*outReq` with the device resources an all-to-all GIN inbox needs for `peers` (a team:
/// its ranks other than this one send to it), `nBlocks` blocks of `2^size_log2`-byte slots, as NCCL
/// 2.32.3's ncclGinInboxA2ACreateRequirement does (buffer, signals), and points it at
/// `outHandle`. As ncclGinOutboxCreateRequirement, a device communicator asking for it is
/// ncclInvalidUsage in oxccl (no GIN transport). Any thread; no GPU work.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `outHandle` or `outReq` NULL, `nBlocks` negative,
/// `size_log2` outside [0, 30], a team of fewer than 2 ranks (NCCL divides by zero there), or a
/// size that overflows.
#[no_mangle]
pub extern "C" fn ncclGinInboxA2ACreateRequirement(peers: ncclTeam_t, nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinInboxA2AHandle, outReq: *mut c_void) -> ncclResult_t {
    call("ncclGinInboxA2ACreateRequirement", || {
        let (h, r) = outs(outHandle.cast(), outReq)?;
        let (bytes, signals, log2, rcp) = gin_scratch(false, nBlocks, size_log2, peers.nRanks)
            .ok_or_else(|| Error::invalid_argument(format!("GIN inbox of {nBlocks} blocks of 2^{size_log2} bytes for a team of {} ranks", peers.nRanks)))?;
        let h = h as *mut ncclGinInboxA2AHandle;
        let req = zeroed_req(r);
        // SAFETY: non-NULL caller structs of these types (checked by outs).
        unsafe {
            (*h).size_log2 = log2;
            (*h).nPeers_rcp32 = rcp;
            (*req).bufferSize = bytes;
            (*req).bufferAlign = 128;
            (*req).outBufferHandle = &mut (*h).bufHandle;
            (*req).ginSignalCount = signals;
            (*req).outGinSignalStart = &mut (*h).signals;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calc_slots_matches_nccl() {
        assert_eq!(ncclLLA2ACalcSlots(32, 16), 64);
        assert_eq!(ncclLLA2ACalcSlots(10, 1), 10);
        assert_eq!(ncclLLA2ACalcSlots(10, 9), 20);
    }

    #[test]
    fn invalid_comm_gives_empty_team() {
        let t = ncclTeamWorld(std::ptr::null_mut());
        assert_eq!(t, ncclTeam_t { nRanks: 0, rank: 0, stride: 0 });
        assert_eq!(ncclTeamRankToWorld(std::ptr::null_mut(), t, 0), -1);
        assert_eq!(ncclTeamLsa(std::ptr::null_mut()), ncclTeam_t { nRanks: 0, rank: 0, stride: 0 });
    }

    /// The requirement helpers size buffers as NCCL 2.28.9's do and point the requirement's
    /// output at the handle, so ncclDevCommCreate fills the handle in.
    #[test]
    fn requirements_as_nccl_writes_them() {
        let mut h = ncclLsaBarrierHandle::default();
        let mut r: ncclDevResourceRequirements = unsafe { std::mem::zeroed() };
        let team = ncclTeam_t { nRanks: 4, rank: 1, stride: 1 };
        assert_eq!(ncclLsaBarrierCreateRequirement(team, 8, (&mut h as *mut ncclLsaBarrierHandle).cast(), (&mut r as *mut ncclDevResourceRequirements).cast()), ncclResult_t::Success);
        assert_eq!((h.nBarriers, r.bufferSize, r.bufferAlign), (8, (3 * 8 + 8 * 4) * 4, 4));
        assert_eq!(r.outBufferHandle, &mut h.bufHandle as *mut u32);
        let mut a = ncclLLA2AHandle::default();
        assert_eq!(ncclLLA2ACreateRequirement(2, 5, (&mut a as *mut ncclLLA2AHandle).cast(), (&mut r as *mut ncclDevResourceRequirements).cast()), ncclResult_t::Success);
        assert_eq!((a.nSlots, r.bufferSize, r.bufferAlign), (5, 2 * 11 * 16, 16));
        assert_eq!(r.outBufferHandle, &mut a.bufHandle as *mut u32);
        assert_eq!(ncclLLA2ACreateRequirement(2, 5, std::ptr::null_mut(), (&mut r as *mut ncclDevResourceRequirements).cast()), ncclResult_t::InvalidArgument);
    }

    #[test]
    fn gin_scratch_is_nccl_2_32_3s_arithmetic() {
        // (outbox?, blocks, log2, team ranks) -> (bytes, signals, log2, rcp), as NVIDIA's
        // libnccl.so.2 2.32.3 answered them (probed without a GPU, 2026-12-01).
        let cases = [
            ((true, 1, 10, 0), (9344, 0, 10, 0)),
            ((true, 4, 12, 0), (49664, 0, 12, 0)),
            ((true, 32, 16, 0), (2363392, 0, 16, 0)),
            ((true, 0, 10, 0), (0, 0, 10, 0)),
            ((true, 4, 0, 0), (33792, 0, 7, 0)),
            ((true, 4, -1, 0), (33792, 0, 7, 0)),
            ((true, 128, 20, 0), (135282688, 0, 20, 0)),
            ((false, 1, 10, 2), (1152, 2052, 10, 0)),
            ((false, 4, 12, 4), (16896, 8240, 12, 0x5555_5555)),
            ((false, 32, 16, 8), (2101248, 66432, 16, 0x2492_4924)),
            ((false, 4, 0, 3), (1024, 8224, 0, 0x8000_0000)),
            ((false, 128, 20, 16), (134234112, 269824, 20, 0x1111_1111)),
            ((false, 0, 10, 16), (0, 0, 10, 0x1111_1111)),
        ];
        for ((o, b, l, n), want) in cases {
            assert_eq!(gin_scratch(o, b, l, n), Some(want), "{o} {b} {l} {n}");
        }
        // Where NCCL overflows or divides by zero: refused.
        assert_eq!(gin_scratch(true, -1, 10, 0), None);
        assert_eq!(gin_scratch(true, 4, 31, 0), None);
        assert_eq!(gin_scratch(false, 4, -1, 3), None);
        assert_eq!(gin_scratch(false, 4, 12, 1), None);
        let mut h = ncclGinInboxA2AHandle::default();
        let mut r = [0u8; 64];
        let team = ncclTeam_t { nRanks: 4, rank: 1, stride: 1 };
        assert_eq!(ncclGinInboxA2ACreateRequirement(team, 4, 12, &mut h, r.as_mut_ptr().cast()), crate::error::ResultCode::Success);
        assert_eq!((h.size_log2, h.nPeers_rcp32), (12, 0x5555_5555));
        assert_eq!(ncclGinOutboxCreateRequirement(4, 12, std::ptr::null_mut(), r.as_mut_ptr().cast()), crate::error::ResultCode::InvalidArgument);
    }

    /// The CFT entry points through C, without an initialised communicator: NULL arguments and
    /// unknown windows first, as NCCL 2.32.3 checks them; then the answers without CFT, on a
    /// window registered with and without NCCL_WIN_GIN_ONLY. Nothing is ever written.
    #[test]
    fn cft_queries_answer_as_without_cft() {
        use crate::api::aliases::{pncclGetCftDeviceLeInfo, pncclGetMultimemDeviceLeInfo, pncclGetPeerDeviceLeInfo, pncclTeamCft, pncclTeamCftMultimem};
        use crate::comm::window::Window;
        use crate::comm::{register, unregister, Comm};
        use crate::error::ResultCode::{InvalidArgument as Arg, InvalidUsage as Usage};
        let zero = ncclTeam_t { nRanks: 0, rank: 0, stride: 0 };
        assert_eq!(ncclTeamCft(std::ptr::null_mut(), 0), zero);
        assert_eq!(pncclTeamCftMultimem(std::ptr::null_mut()), zero);
        let c = Arc::new(Comm::new(0, 2, 0, Default::default()));
        let comm = register(c.clone()) as ncclComm_t;
        assert_eq!(pncclTeamCft(comm, 0), zero, "not initialised: NCCL's failed-init answer");
        let win = c.windows.insert_symmetric(Window { base: 0x7000_0000, size: 4096, flags: 1, reg: 0 }, (1 << 40, 1 << 32), vec![4096; 2]) as ncclWindow_t;
        let gin = c.windows.insert_symmetric(Window { base: 0x9000_0000, size: 4096, flags: 0x4, reg: 0 }, (1 << 41, 1 << 32), vec![4096; 2]) as ncclWindow_t;
        let (mut id, mut off) = (0xdead_beefu32, 0x5555usize);
        let team = ncclTeam_t { nRanks: 1, rank: 0, stride: 1 };
        let calls = |w: ncclWindow_t, id: *mut u32, off: *mut usize| {
            [ncclGetMultimemDeviceLeInfo(w, 0, id, off), ncclGetCftDeviceLeInfo(w, 0, 0, team, id, off), ncclGetPeerDeviceLeInfo(w, 0, 1, id, off), pncclGetMultimemDeviceLeInfo(w, 8, id, off), pncclGetCftDeviceLeInfo(w, 8, 0, team, id, off), pncclGetPeerDeviceLeInfo(w, 8, 0, id, off)]
        };
        let (idp, offp) = (&mut id as *mut u32, &mut off as *mut usize);
        assert_eq!(calls(std::ptr::null_mut(), idp, offp), [Arg; 6], "window NULL");
        assert_eq!(calls(win, std::ptr::null_mut(), offp), [Arg; 6], "leId NULL");
        assert_eq!(calls(win, idp, std::ptr::null_mut()), [Arg; 6], "leOffset NULL");
        assert_eq!(calls(0x1234 as ncclWindow_t, idp, offp), [Arg; 6], "not a window");
        assert_eq!(calls(win, idp, offp), [Arg; 6], "no CFT in the communicator");
        assert_eq!(calls(gin, idp, offp), [Usage; 6], "GIN-only window");
        assert_eq!((id, off), (0xdead_beef, 0x5555), "nothing written");
        unregister(comm as usize);
    }

    /// ncclCommQueryProperties' argument checks through C (an uninitialised communicator is
    /// refused before the struct is read, as NCCL's ncclCommEnsureReady does).
    #[test]
    fn query_properties_checks_its_arguments() {
        use crate::comm::{register, unregister, Comm};
        use crate::error::ResultCode::InvalidArgument as Arg;
        let mut props = crate::symmem::abi232::ncclCommProperties_v23203 {
            size: 152,
            magic: crate::symmem::abi232::NCCL_API_MAGIC,
            version: 23203,
            rank: -7,
            nRanks: 0,
            cudaDev: 0,
            nvmlDev: 0,
            deviceApiSupport: 0,
            multimemSupport: 0,
            ginType: 0,
            nLsaTeams: 0,
            hostRmaSupport: 0,
            railedGinType: 0,
            commHash: 0,
            ginMinStride: 0,
            ginConnectionType: 0,
            ginSupport: [0; 64],
            devCommRuntimeVersionSize: 0,
            cftSupport: 0,
            cftMulticastSupport: 0,
            cftCountedSupport: 0,
        };
        let p = (&mut props as *mut crate::symmem::abi232::ncclCommProperties_v23203).cast::<c_void>();
        assert_eq!(ncclCommQueryProperties(std::ptr::null_mut(), p), Arg);
        let c = Arc::new(Comm::new(0, 2, 0, Default::default()));
        let comm = register(c.clone()) as ncclComm_t;
        assert_eq!(crate::api::aliases::pncclCommQueryProperties(comm, std::ptr::null_mut()), Arg);
        assert_ne!(ncclCommQueryProperties(comm, p), crate::error::ResultCode::Success, "not initialised");
        assert_eq!(props.rank, -7, "nothing written");
        unregister(comm as usize);
    }

    /// ncclDevCommCreate/Destroy's checks that need no GPU: NULL arguments, a versioned struct
    /// with a bad magic, unserved versions, GIN and CFT requests; destroy of each layout.
    #[test]
    fn dev_comm_entry_points_refuse_as_nccl() {
        use crate::comm::{register, unregister, Comm};
        use crate::error::ResultCode::{InvalidArgument as Arg, InvalidUsage as Usage};
        use crate::symmem::abi232::{ncclDevCommRequirements_v23203 as R, ncclDevComm_v23100};
        let c = Arc::new(Comm::new(0, 2, 0, Default::default()));
        let comm = register(c.clone()) as ncclComm_t;
        let mut out = [0u8; 256];
        let o = out.as_mut_ptr().cast::<c_void>();
        let create = |r: &R| ncclDevCommCreate(comm, (r as *const R).cast(), o);
        assert_eq!(ncclDevCommCreate(comm, std::ptr::null(), o), Arg);
        assert_eq!(ncclDevCommCreate(comm, (&R::initializer() as *const R).cast(), std::ptr::null_mut()), Arg);
        assert_eq!(create(&R { magic: 0, ..R::initializer() }), Usage, "not from the initializer");
        assert_eq!(create(&R { version: 23204, ..R::initializer() }), Usage, "too old a library");
        assert_eq!(create(&R { version: 22904, ..R::initializer() }), Usage, "no compat entry");
        assert_eq!(create(&R { cftCaps: 1, ..R::initializer() }), Arg, "CFT");
        assert_eq!(create(&R { ginConnectionType: 1, ..R::initializer() }), Arg, "GIN");
        assert_eq!(create(&R { barrierCount: 1, ..R::initializer() }), Arg, "hybrid barriers are GIN");
        assert_eq!(create(&R { version: 22902, size: 72, ginSignalCount: 1, ..R::initializer() }), Usage, "2.29.2 with GIN");
        // A valid request reaches the communicator, which is not initialised.
        assert_ne!(create(&R::initializer()), crate::error::ResultCode::Success);
        assert!(out.iter().all(|&b| b == 0), "nothing written");
        // Destroy: a versioned devComm without a resource window, a 2.28 one, bad versions.
        let dc = ncclDevComm_v23100 { magic: crate::symmem::abi232::NCCL_API_MAGIC, version: 23203, ..Default::default() };
        let dcp = (&dc as *const ncclDevComm_v23100).cast::<c_void>();
        assert_eq!(ncclDevCommDestroy(comm, dcp), crate::error::ResultCode::Success);
        let dc_old = ncclDevComm_v23100 { version: 23204, ..dc };
        assert_eq!(ncclDevCommDestroy(comm, (&dc_old as *const ncclDevComm_v23100).cast()), Usage);
        let d28 = crate::symmem::abi::ncclDevComm { rank: 1, resourceWindow: 0x1234, ..Default::default() };
        assert_eq!(ncclDevCommDestroy(comm, (&d28 as *const crate::symmem::abi::ncclDevComm).cast()), Usage, "not this communicator's window");
        assert_eq!(ncclDevCommDestroy(comm, std::ptr::null()), Arg);
        unregister(comm as usize);
    }
}
