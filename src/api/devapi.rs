//! The host side of NCCL 2.28's device API (nccl_device/*.h). oxccl has no device-initiated
//! communication API: creating a device communicator answers ncclInvalidUsage with a WARN, as NCCL
//! does where symmetric memory is unsupported. Pure queries answer truthfully.

use std::ffi::{c_int, c_void};

use super::types::{ncclComm_t, ncclResult_t, ncclTeam_t};
use super::{call, comm_arg, not_yet};

fn team_of(c: ncclComm_t) -> Option<ncclTeam_t> {
    let c = comm_arg(c).ok()?;
    Some(ncclTeam_t { nRanks: c.nranks as c_int, rank: c.rank as c_int, stride: 1 })
}

#[no_mangle]
pub extern "C" fn ncclDevCommCreate(comm: ncclComm_t, reqs: *const c_void, outDevComm: *mut c_void) -> ncclResult_t {
    call("ncclDevCommCreate", || {
        let _ = (reqs, outDevComm);
        comm_arg(comm)?;
        Err(not_yet("ncclDevCommCreate (the NCCL device API)"))
    })
}

#[no_mangle]
pub extern "C" fn ncclDevCommDestroy(comm: ncclComm_t, devComm: *const c_void) -> ncclResult_t {
    call("ncclDevCommDestroy", || {
        let _ = devComm;
        comm_arg(comm)?;
        Err(not_yet("ncclDevCommDestroy (the NCCL device API)"))
    })
}

/// All ranks of the communicator.
#[no_mangle]
pub extern "C" fn ncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t {
    std::panic::catch_unwind(|| team_of(comm)).ok().flatten().unwrap_or(ncclTeam_t { nRanks: 0, rank: 0, stride: 0 })
}

/// Ranks sharing load/store access (one host): every rank of an oxccl communicator.
#[no_mangle]
pub extern "C" fn ncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t {
    ncclTeamWorld(comm)
}

/// Ranks with this rank's local index on every host: with one host, this rank alone.
#[no_mangle]
pub extern "C" fn ncclTeamRail(comm: ncclComm_t) -> ncclTeam_t {
    match std::panic::catch_unwind(|| team_of(comm)).ok().flatten() {
        Some(t) => ncclTeam_t { nRanks: 1, rank: 0, stride: t.nRanks },
        None => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// World rank of `rank` in `team`: teams here are arithmetic progressions from this rank's base.
#[no_mangle]
pub extern "C" fn ncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    match std::panic::catch_unwind(|| team_of(comm)).ok().flatten() {
        Some(w) => w.rank + (rank - team.rank) * team.stride,
        None => -1,
    }
}

/// LSA rank of `rank` in `team`: the LSA team is the world team.
#[no_mangle]
pub extern "C" fn ncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    ncclTeamRankToWorld(comm, team, rank)
}

#[no_mangle]
pub extern "C" fn ncclLsaBarrierCreateRequirement(team: ncclTeam_t, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t {
    call("ncclLsaBarrierCreateRequirement", || {
        let _ = (team, nBarriers, outHandle, outReq);
        Err(not_yet("ncclLsaBarrierCreateRequirement (the NCCL device API)"))
    })
}

#[no_mangle]
pub extern "C" fn ncclGinBarrierCreateRequirement(
    comm: ncclComm_t,
    team: ncclTeam_t,
    nBarriers: c_int,
    outHandle: *mut c_void,
    outReq: *mut c_void,
) -> ncclResult_t {
    call("ncclGinBarrierCreateRequirement", || {
        let _ = (team, nBarriers, outHandle, outReq);
        comm_arg(comm)?;
        Err(not_yet("ncclGinBarrierCreateRequirement (the NCCL device API)"))
    })
}

/// Slots an LL all-to-all needs for `maxElts` elements of up to `maxEltSize` bytes (NCCL's formula).
#[no_mangle]
pub extern "C" fn ncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int {
    maxElts.saturating_mul(maxEltSize.max(0).saturating_add(7) / 8)
}

#[no_mangle]
pub extern "C" fn ncclLLA2ACreateRequirement(nBlocks: c_int, nSlots: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> ncclResult_t {
    call("ncclLLA2ACreateRequirement", || {
        let _ = (nBlocks, nSlots, outHandle, outReq);
        Err(not_yet("ncclLLA2ACreateRequirement (the NCCL device API)"))
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
    }
}
