//! ncclCommSplit, ncclCommShrink and ncclCommRevoke on the GPU: children made inside one group
//! (one thread splitting every rank's communicator, as PyTorch's new_group does per process),
//! checked for size and rank order, then used for AllReduce and the other collectives; a revoked
//! communicator must refuse new work. Then the same with nonblocking communicators: the group
//! returns ncclInProgress, each communicator reports progress, and split children appear when
//! ready.

use super::{check_one, init_comms, nccl, Rank};
use crate::colls;
use crate::values::{CheckOp, Codec};
use oxccl::api::coll::ncclAllReduce;
use oxccl::api::comm::{
    ncclCommCount, ncclCommDestroy, ncclCommGetAsyncError, ncclCommInitRankConfig, ncclCommRevoke, ncclCommShrink,
    ncclCommSplit, ncclCommUserRank, ncclGetUniqueId,
};
use oxccl::api::types::ncclUniqueId;
use oxccl::config::config_initializer;
use oxccl::gpu::CtxGuard;
use std::time::{Duration, Instant};
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

/// Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress.
fn wait_ready(c: ncclComm_t, what: &str) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let mut st = ResultCode::InProgress;
        nccl(ncclCommGetAsyncError(c, &mut st), "ncclCommGetAsyncError")?;
        match st {
            ResultCode::InProgress if t0.elapsed() < Duration::from_secs(120) => std::thread::sleep(Duration::from_millis(1)),
            ResultCode::Success => return Ok(()),
            other => return Err(format!("{what}: async state {other:?}")),
        }
    }
}

pub fn check_nonblocking(template: &[Rank]) -> Result<usize, String> {
    let n = template.len();
    let mut id = ncclUniqueId { internal: [0; 128] };
    nccl(ncclGetUniqueId(&mut id), "ncclGetUniqueId")?;
    let mut comms = vec![std::ptr::null_mut(); n];
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for (r, rk) in template.iter().enumerate() {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut cfg = config_initializer();
        cfg.blocking = 0;
        nccl(ncclCommInitRankConfig(&mut comms[r], n as i32, id, r as i32, &mut cfg), "ncclCommInitRankConfig (nonblocking)")?;
    }
    let rc = ncclGroupEnd();
    let mut bad = 0;
    if rc != ResultCode::InProgress && rc != ResultCode::Success {
        return Err(format!("nonblocking init: ncclGroupEnd returned {rc:?}"));
    }
    for &c in &comms {
        wait_ready(c, "nonblocking init")?;
    }
    let ranks: Vec<Rank> = template
        .iter()
        .zip(&comms)
        .map(|(t, &c)| Rank { dev: t.dev, comm: c, stream: t.stream, send: t.send, recv: t.recv, scalar: t.scalar })
        .collect();
    bad += use_child(&ranks, &comms, &(0..n).collect::<Vec<_>>(), false, "nonblocking comm")?;

    // Split: every parent shows InProgress until its child is ready; *newcomm appears then.
    let mut kids = vec![std::ptr::null_mut(); n];
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for (r, &c) in comms.iter().enumerate() {
        nccl(ncclCommSplit(c, 0, (n - r) as i32, &mut kids[r], std::ptr::null_mut()), "ncclCommSplit (nonblocking)")?;
    }
    let rc = ncclGroupEnd();
    if rc != ResultCode::InProgress && rc != ResultCode::Success {
        return Err(format!("nonblocking split: ncclGroupEnd returned {rc:?}"));
    }
    for &c in &comms {
        wait_ready(c, "parent of a nonblocking split")?;
    }
    for &k in &kids {
        if k.is_null() {
            return Err("nonblocking split: parent ready but no child written".into());
        }
        wait_ready(k, "nonblocking split child")?;
    }
    bad += use_child(&ranks, &kids, &(0..n).rev().collect::<Vec<_>>(), false, "nonblocking split child")?;
    destroy(&kids)?;
    destroy(&comms)?;
    println!("  nonblocking done");
    Ok(bad)
}

/// OXCCL_CHECK on the GPU: communicators created with it on run a matching AllReduce normally,
/// and a group where one rank passes another count fails with ncclInvalidUsage, launching nothing.
pub fn check_agreement(template: &[Rank]) -> Result<usize, String> {
    let n = template.len();
    if n < 2 {
        return Ok(0);
    }
    std::env::set_var("OXCCL_CHECK", "1"); // read at communicator init
    let comms = init_comms(&template.iter().map(|rk| rk.dev).collect::<Vec<_>>());
    std::env::remove_var("OXCCL_CHECK");
    let comms = comms?;
    let mut bad = use_child(template, &comms, &(0..n).collect::<Vec<_>>(), false, "OXCCL_CHECK, agreeing ranks")?;
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    for (r, rk) in template.iter().enumerate() {
        let count = if r == n - 1 { 1000 } else { 1024 };
        let rc = ncclAllReduce(rk.send as *const _, rk.recv as *mut _, count, DataType::Float32 as i32, 0, comms[r], rk.stream.cast());
        nccl(rc, "ncclAllReduce (deferred)")?;
    }
    let rc = ncclGroupEnd();
    if rc != ResultCode::InvalidUsage {
        println!("FAIL OXCCL_CHECK: mismatched counts gave {rc:?}, expected InvalidUsage");
        bad += 1;
    }
    destroy(&comms)?;
    println!("  OXCCL_CHECK done");
    Ok(bad)
}
