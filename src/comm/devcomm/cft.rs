//! NCCL 2.32's CFT queries as NCCL 2.32.3 answers them where CFT is unavailable (its
//! libnccl.so.2, read off the disassembly: ncclTeamCft, ncclTeamCftMultimem, ncclGet*DeviceLeInfo,
//! with computeCftSize / computeCftMcSize, which give 1 unless every rank's driver and GPU have
//! CFT). Without CFT the flat CFT team and the CFT multimem team are each this rank alone; every
//! logical-endpoint query fails.

use crate::error::{Error, Result};
use crate::symmem::abi::ncclTeam_t;

/// NCCL_CFT_TEAM_FLAT.
pub const TEAM_FLAT: i32 = 0;
/// NCCL_CFT_TEAM_HIER_MULTIMEM.
pub const TEAM_HIER_MULTIMEM: i32 = 1;
/// NCCL_CFT_TEAM_HIER_LSA.
pub const TEAM_HIER_LSA: i32 = 2;

/// Ranks of the flat CFT team without CFT (NCCL's computeCftSize), and of the CFT multimem team
/// (computeCftMcSize).
const CFT_SIZE: i32 = 1;
/// This rank's index in them (its world rank modulo the size).
const CFT_SELF: i32 = 0;

/// NCCL 2.32.3's ncclTeamCft for `mode`, on a communicator whose LSA team has `lsa_size` ranks:
/// the flat team {1, 0, 1}; a hierarchical mode's outer factor of it by the multimem team
/// (size 1) or the LSA team, {cftSize / d, cftSelf / d, d}, C's integer division (so
/// {0, 0, lsaSize} for a larger LSA team); {0, 0, 0} for any other mode.
pub fn team(mode: i32, lsa_size: i32) -> ncclTeam_t {
    let outer = |d: i32| ncclTeam_t { nRanks: CFT_SIZE / d, rank: CFT_SELF / d, stride: d };
    match mode {
        TEAM_FLAT => ncclTeam_t { nRanks: CFT_SIZE, rank: CFT_SELF, stride: 1 },
        TEAM_HIER_MULTIMEM => outer(CFT_SIZE),
        TEAM_HIER_LSA => outer(lsa_size.max(1)),
        _ => ncclTeam_t { nRanks: 0, rank: 0, stride: 0 },
    }
}

/// NCCL 2.32.3's ncclTeamCftMultimem: {cftMcSize, cftMcSelf, 1}, this rank alone.
pub fn multimem_team() -> ncclTeam_t {
    ncclTeam_t { nRanks: CFT_SIZE, rank: CFT_SELF, stride: 1 }
}

/// What the ncclGet*DeviceLeInfo queries answer once their pointers are checked and the window
/// found: a window registered NCCL_WIN_GIN_ONLY has CFT disabled (ncclInvalidUsage); any other
/// fails because the communicator has no CFT (ncclInvalidArgument). NCCL's WARN texts; nothing
/// is written.
pub fn le_info(win_flags: i32) -> Result<(u32, usize)> {
    if win_flags & crate::comm::window::WIN_GIN_ONLY != 0 {
        return Err(Error::invalid_usage("CFT access is disabled because the window was not registered for CFT."));
    }
    Err(Error::invalid_argument("Using CFT query function without CFT support in the communicator."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    fn t(n: i32, r: i32, s: i32) -> ncclTeam_t {
        ncclTeam_t { nRanks: n, rank: r, stride: s }
    }

    /// Reproduces NCCL 2.32.3's disassembly with cftSize = cftMcSize = 1, cftSelf = 0.
    #[test]
    fn teams_as_nccl_2_32_3_answers_without_cft() {
        assert_eq!(team(TEAM_FLAT, 8), t(1, 0, 1));
        assert_eq!(team(TEAM_HIER_MULTIMEM, 8), t(1, 0, 1));
        assert_eq!(team(TEAM_HIER_LSA, 1), t(1, 0, 1));
        assert_eq!(team(TEAM_HIER_LSA, 2), t(0, 0, 2));
        assert_eq!(team(TEAM_HIER_LSA, 8), t(0, 0, 8));
        assert_eq!(team(3, 8), t(0, 0, 0));
        assert_eq!(team(-1, 8), t(0, 0, 0));
        assert_eq!(multimem_team(), t(1, 0, 1));
    }

    #[test]
    fn le_queries_fail_as_without_cft() {
        let e = le_info(0).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (ResultCode::InvalidArgument, "Using CFT query function without CFT support in the communicator."));
        assert_eq!(le_info(0x1 | 0x2 | 0x8).unwrap_err().code, ResultCode::InvalidArgument);
        let e = le_info(0x4).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (ResultCode::InvalidUsage, "CFT access is disabled because the window was not registered for CFT."));
    }
}
