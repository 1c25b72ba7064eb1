//! ncclCommSplit and ncclCommShrink: which parent ranks form a child communicator, and how the
//! child's rendezvous is set up over the parent's bootstrap.
//!
//! Split is collective over every parent rank: colors and keys are all-gathered on the parent's
//! bootstrap. Shrink cannot be (the excluded ranks are usually dead): every survivor derives the
//! same member list from the exclude list alone. Either way the child's first member starts a
//! fresh rendezvous root and sends its unique id to the other members point to point over the
//! parent's bootstrap (direct connections, so dead ranks are never waited for); then every member
//! initialises the child as ncclCommInitRank would.

use crate::bootstrap::{self, Bootstrap, UNIQUE_ID_BYTES};
use crate::comm::Comm;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// NCCL_SPLIT_NOCOLOR: the rank takes part in the split but gets no child.
pub const NOCOLOR: i32 = -1;

/// Bootstrap point-to-point tag of the child's unique id ("SPLT"); per (sender, receiver, tag)
/// messages arrive in order, so successive splits of one parent never mix their ids.
const ID_TAG: u32 = 0x5350_4c54;

/// A child communicator as one of its members sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    /// This member's rank in the child.
    pub rank: usize,
    /// Parent ranks of the members, in child rank order.
    pub members: Vec<usize>,
}

/// Split membership: the ranks of `me`'s color ordered by key, ties by parent rank; None for
/// NOCOLOR. `entries[r]` is parent rank r's (color, key).
pub fn split_members(entries: &[(i32, i32)], me: usize) -> Option<Child> {
    let color = entries.get(me)?.0;
    if color == NOCOLOR {
        return None;
    }
    let mut members: Vec<usize> = (0..entries.len()).filter(|&r| entries[r].0 == color).collect();
    members.sort_by_key(|&r| (entries[r].1, r));
    let rank = members.iter().position(|&r| r == me)?;
    Some(Child { rank, members })
}

/// Shrink membership: every parent rank not in `excluded`, renumbered densely in parent order.
pub fn shrink_members(nranks: usize, excluded: &[usize], me: usize) -> Result<Child> {
    if let Some(&bad) = excluded.iter().find(|&&r| r >= nranks) {
        return Err(Error::invalid_argument(format!("ncclCommShrink: excluded rank {bad} out of range (nranks {nranks})")));
    }
    if excluded.contains(&me) {
        return Err(Error::invalid_argument(format!("ncclCommShrink: rank {me} excludes itself")));
    }
    let members: Vec<usize> = (0..nranks).filter(|r| !excluded.contains(r)).collect();
    let rank = members.iter().position(|&r| r == me).ok_or_else(|| Error::internal("shrink: caller not a survivor"))?;
    Ok(Child { rank, members })
}

/// Validates a split color: NCCL accepts NOCOLOR or a non-negative color.
pub fn check_color(color: i32) -> Result<()> {
    if color < 0 && color != NOCOLOR {
        return Err(Error::invalid_argument(format!("ncclCommSplit: invalid color {color} (must be >= 0 or NCCL_SPLIT_NOCOLOR)")));
    }
    Ok(())
}

/// What a parent rank asks for.
#[derive(Clone, Debug)]
pub enum Request {
    /// ncclCommSplit, collective over every parent rank.
    Split {
        /// This rank's color: ranks of one color form one child; NOCOLOR: no child for it.
        color: i32,
        /// Orders the child's ranks (ties by parent rank).
        key: i32,
    },
    /// ncclCommShrink, over the surviving ranks only.
    Shrink {
        /// Parent ranks left out of the child, sorted, deduplicated.
        excluded: Vec<usize>,
        /// NCCL_SHRINK_ABORT: the parent is revoked (its kernels told to stop) before the child forms.
        abort_parent: bool,
    },
}

/// Runs one parent rank's part of a split or shrink and returns its initialised child (None:
/// NOCOLOR). `config`: the child's, or None to inherit the parent's.
pub fn run(parent: &Comm, req: &Request, config: Option<CommConfig>, connect: &super::cross_host::ConnectNet) -> Result<Option<Comm>> {
    let r = parent.ready()?;
    if parent.is_aborted() {
        return Err(Error::invalid_usage("cannot split or shrink an aborted communicator"));
    }
    let me = parent.rank;
    let child = match req {
        Request::Split { color, key } => {
            let entries = exchange_colors(&r.bootstrap, *color, *key).map_err(|e| e.context("ncclCommSplit: exchanging colors"))?;
            match split_members(&entries, me) {
                Some(c) => c,
                None => return Ok(None),
            }
        }
        Request::Shrink { excluded, abort_parent } => {
            if *abort_parent {
                parent.revoke();
            }
            shrink_members(parent.nranks, excluded, me)?
        }
    };
    let id = child_id(&r.bootstrap, &child)?;
    nccl_info!(
        Subsys::Init,
        "comm rank {me}/{}: child rank {}/{} (parent ranks {:?})",
        parent.nranks,
        child.rank,
        child.members.len(),
        child.members
    );
    let comm = Comm::new(child.rank, child.members.len(), parent.device, config.unwrap_or_else(|| parent.config.clone()));
    comm.init(&id, connect)?;
    Ok(Some(comm))
}

/// Every parent rank's (color, key), by parent rank. Collective over the parent.
pub fn exchange_colors(bs: &Bootstrap, color: i32, key: i32) -> Result<Vec<(i32, i32)>> {
    let mut blob = [0u8; 8];
    blob[..4].copy_from_slice(&color.to_le_bytes());
    blob[4..].copy_from_slice(&key.to_le_bytes());
    bs.all_gather(&blob)?.iter().map(|b| decode_color_key(b)).collect()
}

/// The child's unique id: the first member starts its root and sends the id to the others.
/// Collective over the child's members only.
pub fn child_id(bs: &Bootstrap, child: &Child) -> Result<[u8; UNIQUE_ID_BYTES]> {
    let leader = child.members[0];
    if bs.rank() == leader {
        let id = bootstrap::child_unique_id()?;
        for &m in &child.members[1..] {
            bs.send(m, ID_TAG, &id).map_err(|e| e.context(format!("sending the child's id to parent rank {m}")))?;
        }
        return Ok(id);
    }
    let b = bs.recv(leader, ID_TAG).map_err(|e| e.context(format!("waiting for the child's id from parent rank {leader}")))?;
    <[u8; UNIQUE_ID_BYTES]>::try_from(b.as_slice())
        .map_err(|_| Error::system(format!("child id of {} bytes from parent rank {leader}", b.len())))
}

fn decode_color_key(b: &[u8]) -> Result<(i32, i32)> {
    let b: &[u8; 8] = b.try_into().map_err(|_| Error::system(format!("color/key of {} bytes", b.len())))?;
    let word = |o: usize| i32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    Ok((word(0), word(4)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn split_orders_by_key_then_parent_rank_and_nocolor_gets_nothing() {
        // PyTorch's new_group: color = lowest member, key = group rank; non-members NOCOLOR.
        let e = [(0, 1), (NOCOLOR, 0), (0, 0), (5, 7), (0, 1), (5, -3)];
        assert_eq!(split_members(&e, 0), Some(Child { rank: 1, members: vec![2, 0, 4] }));
        assert_eq!(split_members(&e, 2), Some(Child { rank: 0, members: vec![2, 0, 4] }));
        assert_eq!(split_members(&e, 4), Some(Child { rank: 2, members: vec![2, 0, 4] }), "tie on key: parent rank");
        assert_eq!(split_members(&e, 1), None);
        assert_eq!(split_members(&e, 3), Some(Child { rank: 1, members: vec![5, 3] }));
        assert_eq!(split_members(&e, 9), None, "out of range");
        // One color for everyone with equal keys keeps the parent's order.
        let same = [(3, 0); 4];
        for r in 0..4 {
            assert_eq!(split_members(&same, r).unwrap(), Child { rank: r, members: vec![0, 1, 2, 3] });
        }
    }

    #[test]
    fn shrink_renumbers_survivors_densely() {
        assert_eq!(shrink_members(5, &[1, 3], 4).unwrap(), Child { rank: 2, members: vec![0, 2, 4] });
        assert_eq!(shrink_members(5, &[], 3).unwrap().rank, 3);
        assert_eq!(shrink_members(3, &[0, 1], 2).unwrap(), Child { rank: 0, members: vec![2] });
        assert_eq!(shrink_members(5, &[5], 0).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(shrink_members(5, &[2], 2).unwrap_err().code, ResultCode::InvalidArgument);
    }

    #[test]
    fn colors_below_nocolor_are_invalid() {
        assert!(check_color(0).is_ok());
        assert!(check_color(NOCOLOR).is_ok());
        assert!(check_color(i32::MAX).is_ok());
        assert_eq!(check_color(-2).unwrap_err().code, ResultCode::InvalidArgument);
    }

    /// The rendezvous part of a split, on threads with real bootstraps (no GPU needed): 5 parent
    /// ranks split into two colors and a NOCOLOR rank, each child bootstraps from the id its first
    /// member distributes, and an all-gather in each child shows exactly its members, in key order.
    #[test]
    fn split_rendezvous_builds_each_child_from_its_members() {
        let timeout = std::time::Duration::from_secs(20);
        let id = bootstrap::get_unique_id().expect("unique id");
        let colors = [(1, 0), (2, 5), (1, -1), (NOCOLOR, 0), (2, 5)];
        let results: Vec<Option<(usize, Vec<usize>)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..colors.len())
                .map(|r| {
                    s.spawn(move || {
                        let bs = Bootstrap::init(&id, r, colors.len(), timeout).expect("parent bootstrap");
                        let entries = exchange_colors(&bs, colors[r].0, colors[r].1).expect("colors");
                        let child = split_members(&entries, r)?;
                        let cid = child_id(&bs, &child).expect("child id");
                        let cbs = Bootstrap::init(&cid, child.rank, child.members.len(), timeout).expect("child bootstrap");
                        let seen = cbs.all_gather(&(r as u32).to_le_bytes()).expect("child all-gather");
                        let parents = seen.iter().map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).collect();
                        Some((child.rank, parents))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        });
        assert_eq!(results[0], Some((1, vec![2, 0])));
        assert_eq!(results[2], Some((0, vec![2, 0])));
        assert_eq!(results[1], Some((0, vec![1, 4])));
        assert_eq!(results[4], Some((1, vec![1, 4])));
        assert_eq!(results[3], None);
    }

    /// Shrink's rendezvous needs no excluded rank: rank 1 never shows up.
    #[test]
    fn shrink_rendezvous_ignores_excluded_ranks() {
        let timeout = std::time::Duration::from_secs(20);
        let id = bootstrap::get_unique_id().expect("unique id");
        let n = 4;
        let parents: Vec<Bootstrap> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n).map(|r| s.spawn(move || Bootstrap::init(&id, r, n, timeout).expect("parent"))).collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = [0usize, 2, 3]
                .into_iter()
                .map(|r| {
                    let bs = &parents[r];
                    s.spawn(move || {
                        let child = shrink_members(n, &[1], r).expect("members");
                        let cid = child_id(bs, &child).expect("child id");
                        let cbs = Bootstrap::init(&cid, child.rank, child.members.len(), timeout).expect("child");
                        cbs.all_gather(&[r as u8]).expect("all-gather").concat()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert!(got.iter().all(|g| g == &vec![0u8, 2, 3]));
    }

    #[test]
    fn color_key_round_trip() {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(-1i32).to_le_bytes());
        b[4..].copy_from_slice(&77i32.to_le_bytes());
        assert_eq!(decode_color_key(&b).unwrap(), (NOCOLOR, 77));
        assert!(decode_color_key(&b[..7]).is_err());
    }
}
