//! ncclCommSplit, ncclCommShrink and ncclCommRevoke on the GPU: children made inside one group
//! (one thread splitting every rank's communicator, as PyTorch's new_group does per process),
//! checked for size and rank order, then used for AllReduce and the other collectives; a revoked
//! communicator must refuse new work.

use super::{check_one, nccl, Rank};
use crate::colls;
use crate::values::{CheckOp, Codec};
use oxccl::api::coll::ncclAllReduce;
use oxccl::api::comm::{ncclCommCount, ncclCommDestroy, ncclCommRevoke, ncclCommShrink, ncclCommSplit, ncclCommUserRank};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::types::ncclComm_t;
use oxccl::types::DataType;
use oxccl::ResultCode;

const NOCOLOR: i32 = -1;

/// Children of `parents` (one per parent rank; NULL where the rank gets none), made in one group.
fn make_children(parents: &[Rank], make: impl Fn(usize, ncclComm_t, &mut ncclComm_t) -> ResultCode) -> Result<Vec<ncclComm_t>, String> {
    let mut kids = vec![std::ptr::null_mut(); parents.len()];
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for (r, rk) in parents.iter().enumerate() {
        nccl(make(r, rk.comm, &mut kids[r]), "split/shrink")?;
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd (split/shrink)")?;
    Ok(kids)
}

/// Checks each child's size and rank against `want` (parent ranks in child rank order) and runs
/// AllReduce (and with `all`, every other collective) on it.
fn use_child(parents: &[Rank], kids: &[ncclComm_t], want: &[usize], all: bool, what: &str) -> Result<usize, String> {
    let mut ranks = Vec::new();
    for (child_rank, &p) in want.iter().enumerate() {
        let c = kids[p];
        if c.is_null() {
            return Err(format!("{what}: parent rank {p} got no child"));
        }
        let (mut n, mut r) = (0, 0);
        nccl(ncclCommCount(c, &mut n), "ncclCommCount")?;
        nccl(ncclCommUserRank(c, &mut r), "ncclCommUserRank")?;
        if (n as usize, r as usize) != (want.len(), child_rank) {
            return Err(format!("{what}: parent rank {p} is rank {r} of {n}, expected {child_rank} of {}", want.len()));
        }
        let pr = &parents[p];
        ranks.push(Rank { dev: pr.dev, comm: c, stream: pr.stream, send: pr.send, recv: pr.recv, scalar: pr.scalar });
    }
    let mut bad = 0;
    for dt in [DataType::Int32, DataType::Float32] {
        for count in [1usize, 1000, 262147] {
            if let Err(e) = check_one(&ranks, &Codec::new(dt), CheckOp::Sum, count, false, 0x5917 ^ count as u64, false) {
                println!("FAIL {what}: AllReduce {} count {count}: {e}", dt.name());
                bad += 1;
            }
        }
    }
    if all {
        bad += colls::check_all(&ranks, 1 << 16, true);
    }
    Ok(bad)
}

fn destroy(kids: &[ncclComm_t]) -> Result<(), String> {
    for &c in kids.iter().filter(|c| !c.is_null()) {
        nccl(ncclCommDestroy(c), "ncclCommDestroy (child)")?;
    }
    Ok(())
}

pub fn check_all(parents: &[Rank]) -> Result<usize, String> {
    let n = parents.len();
    let mut bad = 0;

    // Two colors by parity, keys reversing the order; then everyone but rank 0 (NOCOLOR).
    let kids = make_children(parents, |r, p, out| ncclCommSplit(p, (r % 2) as i32, -(r as i32), out, std::ptr::null_mut()))?;
    for color in 0..2usize.min(n) {
        let want: Vec<usize> = (0..n).rev().filter(|r| r % 2 == color).collect();
        bad += use_child(parents, &kids, &want, color == 0, &format!("split color {color}"))?;
    }
    destroy(&kids)?;
    if n > 1 {
        let kids = make_children(parents, |r, p, out| ncclCommSplit(p, if r == 0 { NOCOLOR } else { 7 }, 0, out, std::ptr::null_mut()))?;
        if !kids[0].is_null() {
            println!("FAIL split NOCOLOR: rank 0 got a communicator");
            bad += 1;
        }
        bad += use_child(parents, &kids, &(1..n).collect::<Vec<_>>(), false, "split NOCOLOR")?;
        destroy(&kids)?;
    }
    println!("  split done");

    // Shrink away the last rank (it takes no part, as a dead rank would not), then revoke.
    if n > 1 {
        let survivors = &parents[..n - 1];
        let kids = make_children(survivors, |_, p, out| {
            let mut excl = [(n - 1) as i32];
            ncclCommShrink(p, excl.as_mut_ptr(), 1, out, std::ptr::null_mut(), 0)
        })?;
        bad += use_child(survivors, &kids, &(0..n - 1).collect::<Vec<_>>(), false, "shrink")?;
        for &c in &kids {
            nccl(ncclCommRevoke(c, 0), "ncclCommRevoke")?;
        }
        let rk = &survivors[0];
        let rc = ncclAllReduce(rk.send as *const _, rk.recv as *mut _, 1, DataType::Float32 as i32, 0, kids[0], rk.stream.cast());
        if rc != ResultCode::InvalidUsage {
            println!("FAIL revoke: AllReduce on a revoked communicator returned {rc:?}, expected InvalidUsage");
            bad += 1;
        }
        destroy(&kids)?;
        println!("  shrink and revoke done");
    }
    // The parents are untouched by all of this.
    let all: Vec<usize> = (0..n).collect();
    let parent_comms: Vec<ncclComm_t> = parents.iter().map(|p| p.comm).collect();
    bad += use_child(parents, &parent_comms, &all, false, "parent after split/shrink")?;
    Ok(bad)
}
