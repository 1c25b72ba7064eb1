//! Calls that go straight to their peer (AlltoAll, Gather, Scatter, point-to-point), over the
//! local communicator or the network.

use super::*;

/// Point-to-point operations with global peers (rank `me` may appear: a copy to self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2p {
    /// True for a send, false for a receive.
    pub is_send: bool,
    /// The peer's rank in the whole communicator.
    pub peer: usize,
    /// Device address of the data.
    pub buf: u64,
    /// Bytes to move.
    pub bytes: u64,
}

pub(super) fn direct_ops(l: &Layout, c: &Call) -> Vec<P2p> {
    let bytes = c.count * c.dtype.size() as u64;
    let (me, n, root) = (l.me, l.nranks(), c.root);
    let mut v = Vec::new();
    let pair = |v: &mut Vec<P2p>, peer: usize, send: u64, recv: u64| {
        v.push(P2p { is_send: true, peer, buf: send, bytes });
        v.push(P2p { is_send: false, peer, buf: recv, bytes });
    };
    match c.coll {
        Coll::AlltoAll => {
            for p in 0..n {
                pair(&mut v, p, c.send + p as u64 * bytes, c.recv + p as u64 * bytes);
            }
        }
        Coll::Gather if me == root => {
            for p in 0..n {
                if p == me {
                    pair(&mut v, p, c.send, c.recv + p as u64 * bytes);
                } else {
                    v.push(P2p { is_send: false, peer: p, buf: c.recv + p as u64 * bytes, bytes });
                }
            }
        }
        Coll::Gather => v.push(P2p { is_send: true, peer: root, buf: c.send, bytes }),
        Coll::Scatter if me == root => {
            for p in 0..n {
                if p == me {
                    pair(&mut v, p, c.send + p as u64 * bytes, c.recv);
                } else {
                    v.push(P2p { is_send: true, peer: p, buf: c.send + p as u64 * bytes, bytes });
                }
            }
        }
        Coll::Scatter => v.push(P2p { is_send: false, peer: root, buf: c.recv, bytes }),
        _ => {}
    }
    v
}

/// Point-to-point operations split by where the peer lives: the local communicator first (one
/// launch), then one step across hosts. Order per peer and direction is kept, so matching is NCCL's.
pub fn direct(l: &Layout, ops: &[P2p]) -> Vec<Stage> {
    let mut st = direct_all(l, ops);
    drop_empty(&mut st);
    st
}

/// `direct`'s two stages when both have work, as (local operations, cross-host step); else the
/// stages back. The two touch different peers' buffers (each operation is in one or the other),
/// so the step may be in flight while the local launch runs (OXCCL_NET_P2P_OVERLAP).
pub fn split_direct(stages: Vec<Stage>) -> std::result::Result<(Vec<LocalP2p>, Step), Vec<Stage>> {
    match <[Stage; 2]>::try_from(stages) {
        Ok([Stage::Local(LocalOp::P2p(v)), Stage::Net(step)]) if !v.is_empty() && !step.is_empty() => Ok((v, step)),
        Ok(two) => Err(two.into()),
        Err(other) => Err(other),
    }
}

/// `direct` before empty stages are dropped.
pub(super) fn direct_all(l: &Layout, ops: &[P2p]) -> Vec<Stage> {
    let mut local = Vec::new();
    let mut ph = Phase::default();
    for o in ops {
        if o.bytes == 0 && o.peer != l.me {
            // Zero-byte operations still match on the local communicator; across hosts there is
            // nothing to move (both sides skip them alike).
            if !l.same_host(o.peer) {
                continue;
            }
        }
        if l.same_host(o.peer) {
            local.push(LocalP2p { is_send: o.is_send, peer: l.local_index(o.peer), buf: o.buf, bytes: o.bytes });
        } else {
            let x = Xfer { peer: o.peer, buf: Buf::Dev(o.buf), bytes: o.bytes };
            if o.is_send {
                ph.sends.push(x);
            } else {
                ph.recvs.push(x);
            }
        }
    }
    let mut step = Step { phases: vec![ph], ..Default::default() };
    if l.local_size(l.my_host()) == 1 {
        // Alone on the host, every local operation is with myself: the i-th send to self goes to
        // the i-th receive from self (as enqueue::launch_p2p pairs them), made by the step. A
        // group that does not pair up stays local, to be refused there with NCCL's error.
        let (s, r): (Vec<&LocalP2p>, Vec<&LocalP2p>) = local.iter().partition(|o| o.is_send);
        if s.len() == r.len() && s.iter().zip(&r).all(|(a, b)| a.bytes == b.bytes) {
            step.copies = s.iter().zip(&r).flat_map(|(a, b)| copy_if_moved(a.buf, b.buf, a.bytes)).collect();
            local.clear();
        }
    }
    vec![Stage::Local(LocalOp::P2p(local)), Stage::Net(step)]
}
