use super::*;

#[test]
fn a_phase_fits_by_each_job_and_by_its_total() {
    let x = |bytes| Xfer { peer: 1, buf: Buf::Host(0), bytes };
    let ph = |sends: Vec<Xfer>, recvs: Vec<Xfer>| Phase { sends, recvs, reduces: vec![], stripe_min: 0, narrow: false };
    assert!(phase_fits(&ph(vec![x(100)], vec![x(100)]), 100));
    assert!(!phase_fits(&ph(vec![x(101)], vec![]), 100));
    assert!(!phase_fits(&ph(vec![x(100), x(100)], vec![x(1)]), 100), "201 bytes in all");
    assert!(phase_fits(&ph(vec![], vec![]), 0));
    assert!(!phase_fits(&ph(vec![x(1)], vec![]), 0));
    // A phase that stripes from 64 bytes: its 64-byte job goes to the lanes, not inline.
    let striped = |n: u64| Phase { stripe_min: 64, ..ph(vec![x(n)], vec![]) };
    assert!(phase_fits(&striped(63), 100));
    assert!(!phase_fits(&striped(64), 100));
}

#[test]
fn split_direct_takes_only_a_local_launch_and_a_step_with_work() {
    // 2 hosts x 2: rank 1 receives from rank 0 (same host) and sends to rank 2 (the other).
    let l = Layout::new(1, &[7, 7, 9, 9]);
    let ops = [P2p { is_send: false, peer: 0, buf: 0x100, bytes: 64 }, P2p { is_send: true, peer: 2, buf: 0x200, bytes: 64 }];
    let (local, step) = split_direct(direct(&l, &ops)).expect("both stages have work");
    assert_eq!(local, vec![LocalP2p { is_send: false, peer: 0, buf: 0x100, bytes: 64 }]);
    assert_eq!(step.phases[0].sends.len(), 1);
    assert_eq!(step.phases[0].sends[0].peer, 2);
    // Only one of them: the stages come back unchanged.
    for one in [&ops[..1], &ops[1..]] {
        let st = direct(&l, one);
        assert_eq!(split_direct(st.clone()), Err(st));
    }
    // Any other shape (a collective's plan) comes back too.
    let st = vec![Stage::Net(Step::default()), Stage::Local(LocalOp::P2p(vec![LocalP2p { is_send: true, peer: 0, buf: 0, bytes: 8 }]))];
    assert_eq!(split_direct(st.clone()), Err(st));
}

fn sum() -> ResolvedOp {
    ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 }
}

fn call(coll: Coll, count: u64, root: usize) -> Call {
    Call { coll, send: 0x1000_0000, recv: 0x2000_0000, count, dtype: DataType::Float32, op: sum(), root, scratch: 0x3000_0000 }
}

fn layouts() -> Vec<Vec<u64>> {
    vec![vec![7, 7, 9, 9], vec![1, 2, 3, 4], vec![5, 6, 5], vec![3, 3, 3, 8], vec![1, 2, 2, 1, 3], vec![4, 4, 4, 6, 6, 6], vec![2, 1, 3], vec![1, 1, 2, 3, 2, 3]]
}

fn steps(st: &[Stage]) -> Vec<&Step> {
    st.iter().filter_map(|s| if let Stage::Net(x) = s { Some(x) } else { None }).collect()
}

/// A Broadcast along the chain of hosts in pieces: a relay passes piece i on in the phase after
/// it arrives, each host's link carries the message once, and every rank ends with the root's
/// input (several uneven pieces, every root, in place or not, staged or not).
#[test]
fn broadcasts_along_the_chain_in_pieces() {
    let count = (3 * CHAIN_PIECE_MIN + 1000) / 8 + 3;
    let bytes = count * 8;
    let piece = chain_piece_bytes(bytes);
    assert_eq!((bytes.div_ceil(piece), piece % 16), (3, 0), "three pieces, the last shorter");
    assert_eq!((1u64 << 30).div_ceil(chain_piece_bytes(1 << 30)), CHAIN_PIECES_MAX);
    // 4 x 1, root 1: 1 -> 2 -> 3 -> 0. Rank 2 receives piece i in phase i and sends it on in
    // phase i + 1; the root sends piece i in phase i; rank 0 only receives.
    let hashes = [1, 2, 3, 4];
    let lay = |me| Layout { bcast_pipeline_min: 1 << 20, ..Layout::new(me, &hashes) };
    // `call` is float: the same bytes as `count` int64s, which the simulation below moves.
    let phases = |me| steps(&plan_coll(&lay(me), &call(Coll::Broadcast, bytes / 4, 1)))[0].phases.clone();
    let relay = phases(2);
    assert_eq!(relay.len(), 4);
    for (j, ph) in relay.iter().enumerate() {
        assert_eq!(ph.recvs.iter().map(|x| x.peer).collect::<Vec<_>>(), if j < 3 { vec![1] } else { vec![] });
        assert_eq!(ph.sends.iter().map(|x| x.peer).collect::<Vec<_>>(), if j > 0 { vec![3] } else { vec![] });
        if j > 0 {
            assert_eq!(ph.sends[0].buf, relay[j - 1].recvs[0].buf, "phase {j} passes on what phase {} received", j - 1);
        }
    }
    let sent = |me| phases(me).iter().flat_map(|p| p.sends.iter().map(|x| x.bytes)).sum::<u64>();
    assert_eq!((sent(1), sent(2), sent(3), sent(0)), (bytes, bytes, bytes, 0));
    assert_eq!(phases(0).len(), 3);
    // Below the threshold (and above `bcast_chain_max`) the root still sends to every host.
    let st = plan_coll(&lay(1), &call(Coll::Broadcast, (1 << 20) / 4 - 1, 1));
    assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![0, 2, 3]);
    for hashes in [vec![1u64, 2, 3, 4], vec![1, 2, 3], vec![3, 3, 5, 5, 7], vec![8, 9, 8, 10, 9]] {
        let n = hashes.len();
        let input = |r: usize| -> Vec<i64> { (0..count as i64).map(|i| (r as i64 + 1) * 1_000_000_000 + i).collect() };
        for root in 0..n {
            for (inplace, staged) in [(false, None), (true, None), (false, Some(u64::MAX)), (true, Some(1))] {
                let got = simulate(&hashes, Coll::Broadcast, count, root, inplace, staged, true, &input);
                for (r, got) in got.iter().enumerate() {
                    assert!(*got == input(root), "{hashes:?} root {root} rank {r} in-place {inplace} staged {staged:?}");
                }
            }
        }
    }
}

/// A Reduce along the chain of hosts in pieces: the first host sends piece i in phase i, a relay
/// combines piece i in phase i and passes the result on in phase i + 1, the root combines into
/// its output; every link carries the message once, and only the root divides an integer
/// average.
#[test]
fn reduces_along_the_chain_in_pieces() {
    let bytes = 3 * CHAIN_PIECE_MIN;
    // 4 x 1, root 1: 0 -> 3 -> 2 -> 1 (hops from the root's host: 3, 2, 1, 0).
    let hashes = [1, 2, 3, 4];
    let lay = |me| Layout { reduce_pipeline_min: 1 << 20, ..Layout::new(me, &hashes) };
    let mut c = call(Coll::Reduce, bytes / 4, 1);
    c.dtype = DataType::Int32;
    c.op = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
    let phases = |me| steps(&plan_coll(&lay(me), &c))[0].phases.clone();
    let peers = |v: &[Xfer]| v.iter().map(|x| x.peer).collect::<Vec<_>>();
    let (first, relay, last, root) = (phases(0), phases(3), phases(2), phases(1));
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|p| peers(&p.sends) == [3] && p.recvs.is_empty() && p.reduces.is_empty()));
    assert!(last.iter().all(|p| p.reduces.iter().all(|r| r.op.postdiv == 0)));
    assert_eq!((relay.len(), last.len(), root.len()), (4, 4, 3));
    for (j, ph) in relay.iter().enumerate() {
        assert_eq!(peers(&ph.recvs), if j < 3 { vec![0] } else { vec![] });
        assert_eq!(peers(&ph.sends), if j > 0 { vec![2] } else { vec![] });
        if j > 0 {
            assert_eq!(ph.sends[0].buf, relay[j - 1].reduces[0].out, "phase {j} passes on what phase {} combined", j - 1);
            assert_eq!(ph.sends[0].buf, Buf::Host(relay[j - 1].reduces[0].acc));
        }
        assert!(ph.reduces.iter().all(|r| r.op.postdiv == 0));
    }
    for (j, ph) in root.iter().enumerate() {
        assert_eq!((peers(&ph.recvs), ph.sends.len()), (vec![2], 0));
        assert_eq!(ph.reduces[0].out, Buf::Dev(c.recv + j as u64 * CHAIN_PIECE_MIN));
        assert_eq!(ph.reduces[0].op.postdiv, 4, "the root divides the integer average");
    }
    let sent = |me| phases(me).iter().flat_map(|p| p.sends.iter().map(|x| x.bytes)).sum::<u64>();
    assert_eq!((sent(0), sent(3), sent(2), sent(1)), (bytes, bytes, bytes, 0));
    // Below the threshold the root receives from every host at once.
    c.count = (1 << 20) / 4 - 4;
    let st = plan_coll(&lay(1), &c);
    assert_eq!(steps(&st)[0].phases.len(), 1);
    assert_eq!(peers(&steps(&st)[0].phases[0].recvs), vec![0, 2, 3]);
    // Two hosts never chain.
    let two = Layout { reduce_pipeline_min: 1, ..Layout::new(0, &[1, 2]) };
    assert_eq!(steps(&plan_coll(&two, &call(Coll::Reduce, bytes / 4, 1)))[0].phases.len(), 1);
}

/// Hosts are apart only when no machine holds ranks of two of them; only then do the chains in
/// pieces start by default.
#[test]
fn chains_in_pieces_by_default_only_between_machines() {
    assert!(hosts_apart(&[1, 2, 3], &[7, 8, 9]));
    assert!(hosts_apart(&[1, 1, 2, 2], &[7, 7, 8, 8]));
    assert!(!hosts_apart(&[1, 2, 3], &[7, 7, 7]), "simulated hosts on one machine");
    assert!(!hosts_apart(&[1, 1, 2, 3], &[7, 8, 8, 9]), "hosts 1 and 2 share machine 8");
    assert_eq!(pipeline_defaults(false), (u64::MAX, u64::MAX));
    assert_eq!(pipeline_defaults(true), (PIPELINE_MIN_APART, PIPELINE_MIN_APART));
    assert_eq!(Layout::new(0, &[1, 2, 3]).reduce_pipeline_min, u64::MAX);
}

/// Every collective's staged steps fit the step kernel's copy slots (device_abi::OX_NET_COPIES)
/// up to 16 hosts of 8 and 64 hosts of 1, so none needs the extra copy launches of a step with
/// more (net/mod.rs, `overflow`). AlltoAll, Gather and Scatter need contiguous slices joined
/// for that (at 8 x 8, 112 copies a step otherwise).
#[test]
fn staged_collectives_fit_the_step_kernels_copy_slots() {
    let slots = crate::device_abi::OX_NET_COPIES;
    for (h, l) in [(2usize, 1usize), (2, 8), (3, 8), (4, 1), (4, 8), (8, 1), (8, 8), (16, 8), (33, 1), (64, 1)] {
        let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
        for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            // Broadcast and Reduce also along the chain in pieces (up to `CHAIN_PIECES_MAX` a relay).
            let pipes: &[u64] = if matches!(coll, Coll::Broadcast | Coll::Reduce) { &[u64::MAX, 1] } else { &[u64::MAX] };
            for (count, &pipe) in [1u64, 1000, 1 << 20, 1 << 26].into_iter().flat_map(|c| pipes.iter().map(move |p| (c, p))) {
                for me in 0..h * l {
                    let st = plan_all_stages(&Layout { bcast_pipeline_min: pipe, reduce_pipeline_min: pipe, ..Layout::new(me, &hashes) }, &call(coll, count, 0));
                    for s in steps(&st) {
                        let carries = s.phases.iter().any(|p| !p.sends.is_empty() || !p.recvs.is_empty());
                        let Some(x) = crate::net::stage::stage_on_host(s, u64::MAX, usize::MAX, u64::MAX) else {
                            assert!(!carries, "{h} x {l} {coll:?} count {count} rank {me}: a step that carries data is not staged");
                            continue;
                        };
                        let n = x.pre.len() + x.post.len() + x.step.copies.len();
                        assert!(n <= slots, "{h} x {l} {coll:?} count {count} rank {me}: {n} copies");
                    }
                }
            }
        }
    }
}

/// Every collective's host-local point-to-point stage, cut into launches as enqueue::launch_p2p
/// cuts it on the host communicator (algo::batches), fits each launch's limits up to 16 hosts
/// of 8; both ends of every local pair cut alike. Uncut, AllGather's stage from 6 hosts of 8
/// holds more sends than one launch (a rank's block and the 5 it relays to each of 7 peers).
#[test]
fn local_stages_cut_into_launches_that_fit() {
    use crate::algo::batches::p2p_batches;
    use crate::device_abi::{OX_MAX_COPIES, OX_MAX_XFERS};
    let mut most = 0;
    for (h, l) in [(2usize, 2usize), (2, 8), (4, 8), (6, 8), (8, 8), (16, 8), (3, 5)] {
        let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
        for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            // Per global rank: its local stages' operations, and the launch of each.
            let per_rank: Vec<Vec<(Vec<LocalP2p>, Vec<usize>)>> = (0..h * l)
                .map(|me| {
                    let lay = Layout::new(me, &hashes);
                    let st = plan_all_stages(&lay, &call(coll, 1000, 0));
                    st.iter()
                        .filter_map(|s| if let Stage::Local(LocalOp::P2p(v)) = s { Some(v.clone()) } else { None })
                        .map(|v| {
                            let b = p2p_batches(lay.local_index(me), l, v.iter().map(|o| (o.is_send, o.peer)));
                            (v, b)
                        })
                        .collect()
                })
                .collect();
            for (me, stages) in per_rank.iter().enumerate() {
                let lme = me % l;
                for (k, (ops, b)) in stages.iter().enumerate() {
                    most = most.max(ops.iter().filter(|o| o.is_send && o.peer != lme).count());
                    for j in 0..=b.iter().copied().max().unwrap_or(0) {
                        let part = || ops.iter().zip(b).filter(move |(_, &x)| x == j).map(|(o, _)| o);
                        assert!(part().filter(|o| o.is_send && o.peer != lme).count() <= OX_MAX_XFERS, "{h} x {l} {coll:?} rank {me}");
                        assert!(part().filter(|o| !o.is_send && o.peer != lme).count() <= OX_MAX_XFERS, "{h} x {l} {coll:?} rank {me}");
                        assert!(part().filter(|o| o.is_send && o.peer == lme).count() <= OX_MAX_COPIES, "{h} x {l} {coll:?} rank {me}");
                    }
                    // The k-th message to a local peer sits in the same launch on both ends.
                    let host0 = me - lme;
                    for lp in (0..l).filter(|&lp| lp != lme) {
                        let mine: Vec<usize> = ops.iter().zip(b).filter(|(o, _)| o.is_send && o.peer == lp).map(|(_, &x)| x).collect();
                        let (theirs_ops, theirs_b) = &per_rank[host0 + lp][k];
                        let theirs: Vec<usize> = theirs_ops.iter().zip(theirs_b).filter(|(o, _)| !o.is_send && o.peer == lme).map(|(_, &x)| x).collect();
                        assert_eq!(mine, theirs, "{h} x {l} {coll:?}: rank {me} to local {lp}");
                    }
                }
            }
        }
    }
    assert!(most > OX_MAX_XFERS, "some local stage needs more than one launch ({most} sends at most)");
}

/// PyTorch's all_to_all_single with unequal splits is a group of a send and a receive per peer,
/// slices of one tensor each way, posted in rank order: at 8 x 8 its step fits the kernel's
/// copy slots too (56 remote slices each way join into one or two copies).
#[test]
fn a_grouped_all_to_all_stages_within_the_copy_slots() {
    let (h, l) = (8usize, 8usize);
    let hashes: Vec<u64> = (0..h * l).map(|r| (r / l) as u64 + 100).collect();
    for me in [0, 9, 63] {
        let ops: Vec<P2p> = (0..h * l)
            .flat_map(|p| {
                let off = 1000 * p as u64;
                [P2p { is_send: true, peer: p, buf: 0x1000_0000 + off, bytes: 1000 }, P2p { is_send: false, peer: p, buf: 0x2000_0000 + off, bytes: 1000 }]
            })
            .collect();
        let st = direct(&Layout::new(me, &hashes), &ops);
        let step = steps(&st)[0];
        let x = crate::net::stage::stage_on_host(step, u64::MAX, crate::device_abi::OX_NET_COPIES, u64::MAX).expect("staged");
        assert!(x.pre.len() <= 2 && x.post.len() <= 2, "rank {me}: {} and {} copies", x.pre.len(), x.post.len());
    }
}

/// Every cross-host byte stream matches: for each ordered pair (a, b), the sizes a sends to b,
/// in order, equal the sizes b receives from a, in order (phase by phase, step by step).
fn check_matching(hashes: &[u64], plan: &dyn Fn(&Layout) -> Vec<Stage>) {
    let n = hashes.len();
    let plans: Vec<Vec<Stage>> = (0..n).map(|me| plan(&Layout::new(me, hashes))).collect();
    for a in 0..n {
        for b in 0..n {
            let sent: Vec<u64> = steps(&plans[a]).iter().flat_map(|s| s.phases.iter()).flat_map(|p| p.sends.iter()).filter(|x| x.peer == b).map(|x| x.bytes).collect();
            let got: Vec<u64> = steps(&plans[b]).iter().flat_map(|s| s.phases.iter()).flat_map(|p| p.recvs.iter()).filter(|x| x.peer == a).map(|x| x.bytes).collect();
            assert_eq!(sent, got, "{hashes:?}: rank {a} -> rank {b}");
            if hashes[a] == hashes[b] {
                assert!(sent.is_empty(), "same-host ranks {a} and {b} must not use the network");
            }
            // Local point-to-point: sends of a to b (local ranks) match b's receives from a.
            let la = Layout::new(a, hashes);
            if hashes[a] == hashes[b] && a != b {
                let lp = |st: &Vec<Stage>, is_send: bool, peer: usize| -> Vec<u64> {
                    st.iter()
                        .filter_map(|s| if let Stage::Local(LocalOp::P2p(v)) = s { Some(v) } else { None })
                        .flatten()
                        .filter(|o| o.is_send == is_send && o.peer == peer)
                        .map(|o| o.bytes)
                        .collect()
                };
                assert_eq!(lp(&plans[a], true, la.local_index(b)), lp(&plans[b], false, la.local_index(a)), "{hashes:?}: local {a} -> {b}");
            }
        }
    }
}

#[test]
fn layout_and_partners() {
    let l = Layout::new(3, &[5, 5, 8, 5]);
    assert_eq!(l.hosts, vec![vec![0, 1, 3], vec![2]]);
    assert_eq!(l.local_index(3), 2);
    assert_eq!(l.partner(3, 1), 2);
    assert_eq!(l.partner(2, 0), 0);
    assert_eq!(split(10, 4, 0), (0, 3));
    assert_eq!(split(10, 4, 3), (8, 2));
    assert_eq!(split(1, 3, 2), (1, 0));
}

#[test]
fn every_collective_matches_pairwise_in_every_layout() {
    for hashes in layouts() {
        for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            for count in [0u64, 1, 3, 1000, 1 << 20] {
                for root in 0..hashes.len() {
                    check_matching(&hashes, &|l| plan_coll(l, &call(coll, count, root)));
                    if matches!(coll, Coll::Broadcast | Coll::Reduce) {
                        check_matching(&hashes, &|l| plan_coll(&Layout { bcast_scatter_min: 1, reduce_slice_min: 1, bcast_pipeline_min: 1, reduce_pipeline_min: 1, ..l.clone() }, &call(coll, count, root)));
                    }
                    if matches!(coll, Coll::AllReduce | Coll::ReduceScatter | Coll::AllGather) {
                        check_matching(&hashes, &|l| plan_coll(&Layout { ring_min: 1, ..l.clone() }, &call(coll, count, root)));
                    }
                }
            }
        }
    }
}

thread_local! {
    /// Copies out that combined on the "GPU" in `simulate` (this thread's tests).
    static COMBINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Simulates whole collectives on integers: local stages by definition, net steps by moving
/// bytes between the ranks' "device" vectors, staged or not, out-of-place and in-place; every
/// rank must end with what NCCL defines. Layouts include ranks alone on their host, whose
/// host stage is folded into the step (its input read directly, its copies in `Step::copies`).
#[test]
fn every_collective_computes_its_result_in_every_layout() {
    use Coll::*;
    COMBINED.with(|n| n.set(0));
    for hashes in layouts() {
        let n = hashes.len();
        for count in [1u64, 5, 64, 1001, 3000, 40_000] {
            let cn = count as usize;
            for coll in [AllReduce, ReduceScatter, Reduce, AllGather, Broadcast, AlltoAll, Gather, Scatter] {
                let in_len = match coll {
                    ReduceScatter | AlltoAll | Scatter => cn * n,
                    _ => cn,
                };
                let input = |r: usize| -> Vec<i64> { (0..in_len).map(|i| (r as i64 + 1) * 1_000_000 + i as i64).collect() };
                let inputs: Vec<Vec<i64>> = (0..n).map(input).collect();
                let sum: Vec<i64> = (0..in_len).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
                let rooted = matches!(coll, Reduce | Broadcast | Gather | Scatter);
                let inplace_ok = matches!(coll, AllReduce | ReduceScatter | Reduce | AllGather | Broadcast);
                for root in if rooted { 0..n } else { 0..1 } {
                    // Staged: None (not), with the proxy combining (u64::MAX), or the kernel
                    // combining wherever it can (from 1 byte).
                    for (inplace, staged) in [false, true].into_iter().flat_map(|i| [(i, None), (i, Some(u64::MAX)), (i, Some(1))]) {
                        if inplace && !inplace_ok {
                            continue;
                        }
                        // Sliced: also around the ring of hosts (AllReduce, ReduceScatter, AllGather).
                        for sliced in [false, matches!(coll, Broadcast | Reduce | AllReduce | ReduceScatter | AllGather)] {
                        let got = simulate(&hashes, coll, count, root, inplace, staged, sliced, &input);
                        for (r, got) in got.iter().enumerate() {
                            let want: Vec<i64> = match coll {
                                AllReduce => sum.clone(),
                                ReduceScatter => sum[r * cn..(r + 1) * cn].to_vec(),
                                Reduce if r == root => sum.clone(),
                                AllGather => inputs.concat(),
                                Broadcast => inputs[root].clone(),
                                AlltoAll => (0..n).flat_map(|p| inputs[p][r * cn..(r + 1) * cn].to_vec()).collect(),
                                Gather if r == root => inputs.concat(),
                                Scatter => inputs[root][r * cn..(r + 1) * cn].to_vec(),
                                _ => continue,
                            };
                            assert_eq!(*got, want, "{hashes:?} {coll:?} count {count} root {root} rank {r} in-place {inplace} staged {staged:?} sliced {sliced}");
                        }
                        }
                    }
                }
            }
        }
    }
    // The kernel's combining copies ran (2 x 1 AllReduce and Reduce take them, at least).
    assert!(COMBINED.with(|n| n.get()) > 0);
}

#[test]
fn ranks_alone_on_their_host_need_no_host_stage() {
    // Two hosts of one rank: every collective is one step (its copies inside), out-of-place too.
    for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
        for me in 0..2 {
            let st = plan_coll(&Layout::new(me, &[1, 2]), &call(coll, 1000, 0));
            assert!(matches!(st.as_slice(), [Stage::Net(_)]), "{coll:?} rank {me}: {st:?}");
        }
    }
    let st = plan_coll(&Layout::new(0, &[1, 2]), &call(Coll::AllGather, 1000, 0));
    let Stage::Net(s) = &st[0] else { unreachable!() };
    assert_eq!(s.copies, vec![DevCopy { src: 0x1000_0000, dst: 0x2000_0000, bytes: 4000 }]);
    // A scaling op keeps its host stage (it multiplies even a single rank's input).
    let mut c = call(Coll::AllReduce, 1000, 0);
    c.op = ResolvedOp { op: RedOp::PreMulSum, scalar: 1, scalar_ptr: 0 };
    assert_eq!(plan_coll(&Layout::new(0, &[1, 2]), &c).len(), 2);
    // Sends to self that do not pair up stay on the local communicator, which refuses them.
    let ops = [P2p { is_send: true, peer: 0, buf: 0, bytes: 8 }, P2p { is_send: false, peer: 1, buf: 64, bytes: 8 }];
    let st = direct(&Layout::new(0, &[1, 2]), &ops);
    assert!(matches!(&st[0], Stage::Local(LocalOp::P2p(v)) if v.len() == 1));
    let ops = [P2p { is_send: true, peer: 0, buf: 0, bytes: 8 }, P2p { is_send: false, peer: 0, buf: 64, bytes: 8 }];
    let st = direct(&Layout::new(0, &[1, 2]), &ops);
    assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.copies == vec![DevCopy { src: 0, dst: 64, bytes: 8 }] && !s.has_work()));
}

#[test]
fn small_broadcasts_chain_and_small_allreduces_end_with_the_step() {
    let hashes = [1, 2, 3, 4];
    for (count, most) in [(1000u64, 1usize), (CHAIN_MAX_BYTES / 4 + 1, 3)] {
        let sends: Vec<usize> = (0..4).map(|me| steps(&plan_coll(&Layout::new(me, &hashes), &call(Coll::Broadcast, count, 1))).iter().flat_map(|s| &s.phases).map(|p| p.sends.len()).sum()).collect();
        assert_eq!(*sends.iter().max().unwrap(), most, "count {count}: {sends:?}");
    }
    // OXCCL_NET_BCAST_CHAIN_MAX=0: the root sends to every host even a small message.
    let star = Layout { bcast_chain_max: 0, ..Layout::new(1, &hashes) };
    let st = plan_coll(&star, &call(Coll::Broadcast, 1000, 1));
    assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![0, 2, 3]);
    // Root 1: 1 -> 2 -> 3 -> 0; rank 2 receives from 1, then sends to 3.
    let st = plan_coll(&Layout::new(2, &hashes), &call(Coll::Broadcast, 1000, 1));
    let s = steps(&st)[0];
    assert_eq!((s.phases[0].recvs[0].peer, s.phases[1].sends[0].peer), (1, 3));
    // 2 hosts x 2: a small Broadcast goes from the root to both ranks of the other host, which
    // have nothing else to do; a larger one goes to the root's partner, which spreads it.
    let l3 = Layout::new(3, &[7, 7, 9, 9]);
    let st = plan_coll(&l3, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
    assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.phases[0].recvs[0].peer == 0), "{st:?}");
    let st = plan_coll(&Layout::new(0, &[7, 7, 9, 9]), &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
    assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(plan_coll(&l3, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4 + 1, 0)).len(), 1, "only the host stage");
    // OXCCL_NET_BCAST_DIRECT_MAX lowers the bound: the same small call goes through rank 2.
    let mut tuned = Layout::new(0, &[7, 7, 9, 9]);
    tuned.bcast_direct_max = 1024;
    let st = plan_coll(&tuned, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
    assert_eq!(steps(&st)[0].phases[0].sends.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2]);
    tuned.me = 3;
    assert_eq!(plan_coll(&tuned, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0)).len(), 1, "only the host stage");
    // OXCCL_NET_BCAST_STRIPE_MIN: the root's transfer to its partner and the partner's receive
    // carry the same threshold; direct and chained Broadcasts and other collectives keep 0.
    let big = call(Coll::Broadcast, (256 << 10) / 4, 0);
    for me in [0, 2] {
        let l = Layout { bcast_stripe_min: 128 << 10, ..Layout::new(me, &[7, 7, 9, 9]) };
        assert_eq!(steps(&plan_coll(&l, &big))[0].phases[0].stripe_min, 128 << 10, "rank {me}");
        let small = plan_coll(&l, &call(Coll::Broadcast, DIRECT_MAX_BYTES / 4, 0));
        assert!(steps(&small).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
        let ar = plan_coll(&l, &call(Coll::AllReduce, (1 << 20) / 4, 0));
        assert!(steps(&ar).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
    }
    // Narrow layouts mark every phase of a Broadcast or Reduce, at both ends, and nothing else.
    for me in [0, 2] {
        let l = Layout { narrow: true, ..Layout::new(me, &[7, 7, 9, 9]) };
        for (coll, marked) in [(Coll::Broadcast, true), (Coll::Reduce, true), (Coll::AllReduce, false), (Coll::AllGather, false), (Coll::AlltoAll, false)] {
            let st = plan_coll(&l, &call(coll, (256 << 10) / 4, 0));
            let phases: Vec<&Phase> = steps(&st).into_iter().flat_map(|s| &s.phases).collect();
            assert!(!phases.is_empty() && phases.iter().all(|p| p.narrow == marked), "rank {me} {coll:?}");
        }
        assert!(steps(&plan_coll(&Layout::new(me, &[7, 7, 9, 9]), &big)).iter().flat_map(|s| &s.phases).all(|p| !p.narrow));
    }
    let chain = Layout { bcast_stripe_min: 128 << 10, ..Layout::new(2, &hashes) };
    assert!(steps(&plan_coll(&chain, &call(Coll::Broadcast, 1000, 1))).iter().flat_map(|s| &s.phases).all(|p| p.stripe_min == 0));
    // From SCATTER_MIN_BYTES the root sends each rank of the other host half, which then gather
    // it; below, or when the halves would be unequal, the partner takes it whole.
    let sends = |count: u64, me: usize| -> Vec<(usize, u64)> {
        steps(&plan_coll(&Layout::new(me, &[7, 7, 9, 9]), &call(Coll::Broadcast, count, 0))).iter().flat_map(|s| &s.phases).flat_map(|p| &p.sends).map(|x| (x.peer, x.bytes)).collect()
    };
    let q = SCATTER_MIN_BYTES / 4;
    assert_eq!(sends(q, 0), vec![(2, 2 * q), (3, 2 * q)]);
    assert_eq!(sends(q - 2, 0), vec![(2, 4 * q - 8)]);
    assert_eq!(sends(q + 1, 0), vec![(2, 4 * q + 4)]);
    let st = plan_coll(&Layout::new(3, &[7, 7, 9, 9]), &call(Coll::Broadcast, q, 0));
    assert!(matches!(&st[1], Stage::Local(LocalOp::Coll { coll: Coll::AllGather, count, .. }) if *count == q / 2), "{st:?}");
    let off = Layout { bcast_scatter_min: u64::MAX, ..Layout::new(0, &[7, 7, 9, 9]) };
    assert_eq!(steps(&plan_coll(&off, &call(Coll::Broadcast, q, 0)))[0].phases[0].sends.len(), 1);
    // From SLICE_MIN_BYTES a Reduce between the two hosts goes slice by slice: rank 3 sends its
    // half of the other host's sums to rank 1; below, rank 2 sends them whole to the root.
    let rsends = |l: &Layout, count: u64| -> Vec<(usize, u64)> {
        steps(&plan_coll(l, &call(Coll::Reduce, count, 0))).iter().flat_map(|s| &s.phases).flat_map(|p| &p.sends).map(|x| (x.peer, x.bytes)).collect()
    };
    let s = SLICE_MIN_BYTES / 4;
    assert_eq!(rsends(&Layout::new(3, &[7, 7, 9, 9]), s), vec![(1, 2 * s)]);
    assert!(rsends(&Layout::new(3, &[7, 7, 9, 9]), s - 2).is_empty());
    assert_eq!(rsends(&Layout::new(2, &[7, 7, 9, 9]), s - 2), vec![(0, 4 * s - 8)]);
    let never = Layout { reduce_slice_min: u64::MAX, ..Layout::new(3, &[7, 7, 9, 9]) };
    assert!(rsends(&never, s).is_empty());
    // 2 hosts x 2: small AllReduce is the host stage and one step; larger ones spread slices.
    let l = Layout::new(0, &[7, 7, 9, 9]);
    assert_eq!(plan_coll(&l, &call(Coll::AllReduce, FULL_EXCHANGE_MAX_BYTES / 4, 0)).len(), 2);
    assert_eq!(plan_coll(&l, &call(Coll::AllReduce, FULL_EXCHANGE_MAX_BYTES / 4 + 1, 0)).len(), 4);
}

/// Runs plans on vectors of i64: device memory is one address space per rank (send at
/// element 0, recv at element `span`, scratch at 2 `span`; addresses are element indices * 8;
/// in-place calls as nccl-tests makes them). `staged`: every step as `stage::stage_on_host`
/// rewrites it, its copies made around it. Returns each rank's output.
#[allow(clippy::too_many_arguments)]
fn simulate(hashes: &[u64], coll: Coll, count: u64, root: usize, inplace: bool, staged: Option<u64>, sliced: bool, input: &dyn Fn(usize) -> Vec<i64>) -> Vec<Vec<i64>> {
    let n = hashes.len();
    // Each region holds the largest buffer of the call (count * n elements).
    let span = (count * n as u64).next_power_of_two();
    let (send0, recv0, scr) = (0u64, 8 * span, 16 * span);
    let calls: Vec<Call> = (0..n as u64)
        .map(|r| {
            let (send, recv) = match (inplace, coll) {
                (false, _) => (send0, recv0),
                (true, Coll::AllGather) => (recv0 + r * count * 8, recv0),
                (true, Coll::ReduceScatter) => (send0, send0 + r * count * 8),
                (true, _) => (recv0, recv0),
            };
            Call { coll, send, recv, count, dtype: DataType::Int64, op: sum(), root, scratch: scr }
        })
        .collect();
    let out_len = match coll {
        Coll::AllGather | Coll::AlltoAll | Coll::Gather => count * n as u64,
        _ => count,
    } as usize;
    let at = |a: u64| (a / 8) as usize;
    let mut dev: Vec<Vec<i64>> = (0..n).map(|_| vec![0i64; 3 * span as usize]).collect();
    for (r, d) in dev.iter_mut().enumerate() {
        let v = input(r);
        d[at(calls[r].send)..at(calls[r].send) + v.len()].copy_from_slice(&v);
    }
    // A Broadcast stripe threshold of its own, so that the check below that both ends of
    // every transfer split it alike has something to check.
    // `sliced`: Broadcasts between two hosts scattered, across more hosts along the chain in
    // pieces, and Reduces sliced, from the smallest size.
    let min = if sliced { 1 } else { u64::MAX };
    // Narrow Broadcasts and Reduces, so that the check covers that mark too.
    let tuned = |me: usize| Layout { bcast_stripe_min: 128 << 10, bcast_scatter_min: min, bcast_pipeline_min: min, reduce_slice_min: min, reduce_pipeline_min: min, ring_min: min, narrow: true, ..Layout::new(me, hashes) };
    let mut plans: Vec<Vec<Stage>> = (0..n).map(|me| plan_all_stages(&tuned(me), &calls[me])).collect();
    // A step's own copies may run at any point of it: disjoint from what its phases write,
    // and writing nothing its phases read.
    for p in &plans {
        for s in steps(p) {
            let ranges = |w: bool| -> Vec<(u64, u64)> {
                let mut v = Vec::new();
                for ph in &s.phases {
                    let rw = ph.sends.iter().map(|x| (false, x.buf, x.bytes)).chain(ph.recvs.iter().map(|x| (true, x.buf, x.bytes)));
                    let red = ph.reduces.iter().flat_map(|r| r.inputs.iter().map(|&b| (false, b, r.bytes)).chain([(true, r.out, r.bytes)]));
                    v.extend(rw.chain(red).filter_map(|(wr, b, n)| match b {
                        Buf::Dev(a) if wr == w || !w => Some((a, n)),
                        _ => None,
                    }));
                }
                v
            };
            let hit = |a: u64, n: u64, v: &[(u64, u64)]| v.iter().any(|&(b, m)| a < b + m && b < a + n);
            for c in &s.copies {
                assert!(!hit(c.dst, c.bytes, &ranges(false)) && !hit(c.src, c.bytes, &ranges(true)), "{hashes:?} {coll:?}: copy {c:?} meets the step");
            }
        }
    }
    // Per rank and stage: the kernel's copies of a staged step.
    let mut copies: Vec<Vec<Option<super::super::stage::Staged>>> = plans.iter().map(|p| vec![None; p.len()]).collect();
    if let Some(combine_min) = staged {
        for (r, p) in plans.iter_mut().enumerate() {
            for (i, st) in p.iter_mut().enumerate() {
                if let Stage::Net(step) = st {
                    let carries = step.phases.iter().any(|p| !p.sends.is_empty() || !p.recvs.is_empty());
                    let x = crate::net::stage::stage_on_host(step, u64::MAX, usize::MAX, combine_min);
                    // Today's plans never read what an earlier phase wrote: all can be staged.
                    assert_eq!(x.is_some(), carries, "{hashes:?} {coll:?} rank {r} stage {i}");
                    if let Some(x) = x {
                        assert_eq!(x.step.copies, step.copies);
                        *step = x.step.clone();
                        copies[r][i] = Some(x);
                    }
                }
            }
        }
    }
    let layouts: Vec<Layout> = (0..n).map(|me| Layout::new(me, hashes)).collect();
    let nstages = plans.iter().map(Vec::len).max().unwrap_or(0);
    // Stages line up by kind across ranks in these plans: run stage i everywhere.
    let mut arenas: Vec<Vec<i64>> = vec![Vec::new(); n];
    for i in 0..nstages {
        // Local collectives: gather each host's members' views.
        let mut next = dev.clone();
        for h in 0..layouts[0].nhosts() {
            let members = &layouts[0].hosts[h];
            let stage = |r: usize| plans[r].get(i);
            if let Some(Stage::Local(LocalOp::Coll { coll: lc, count: lcount, root: lroot, .. })) = stage(members[0]) {
                let sum: Vec<i64> = (0..*lcount as usize)
                    .map(|k| {
                        members
                            .iter()
                            .map(|&m| {
                                let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                dev[m][at(*ms) + k]
                            })
                            .sum()
                    })
                    .collect();
                for &r in members {
                    let Some(Stage::Local(LocalOp::Coll { recv, .. })) = stage(r) else { panic!("stage kinds differ") };
                    match lc {
                        Coll::AllReduce => next[r][at(*recv)..at(*recv) + sum.len()].copy_from_slice(&sum),
                        Coll::Reduce if layouts[0].hosts[h][*lroot] == r => next[r][at(*recv)..at(*recv) + sum.len()].copy_from_slice(&sum),
                        Coll::ReduceScatter => {
                            // Member k's block of every member's input, summed.
                            let k = members.iter().position(|&m| m == r).unwrap_or(0);
                            let lc = *lcount as usize;
                            let v: Vec<i64> = (0..lc)
                                .map(|i| {
                                    members
                                        .iter()
                                        .map(|&m| {
                                            let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                            dev[m][at(*ms) + k * lc + i]
                                        })
                                        .sum()
                                })
                                .collect();
                            next[r][at(*recv)..at(*recv) + lc].copy_from_slice(&v);
                        }
                        // Every member's block, in member order: at every rank, or at the root.
                        Coll::AllGather | Coll::Gather if *lc == Coll::AllGather || members[*lroot] == r => {
                            let mut v = Vec::new();
                            for &m in members {
                                let Some(Stage::Local(LocalOp::Coll { send: ms, .. })) = stage(m) else { unreachable!() };
                                v.extend_from_slice(&dev[m][at(*ms)..at(*ms) + *lcount as usize]);
                            }
                            next[r][at(*recv)..at(*recv) + v.len()].copy_from_slice(&v);
                        }
                        Coll::Broadcast => {
                            let src = members[*lroot];
                            let Some(Stage::Local(LocalOp::Coll { send: rs, .. })) = stage(src) else { unreachable!() };
                            let v = dev[src][at(*rs)..at(*rs) + *lcount as usize].to_vec();
                            next[r][at(*recv)..at(*recv) + v.len()].copy_from_slice(&v);
                        }
                        _ => {}
                    }
                }
            }
            // Local point-to-point: each (sender, receiver) pair in posting order; all reads
            // before any write, as within one launch.
            let mut msgs: Vec<(usize, usize, Vec<i64>)> = Vec::new();
            for &r in members {
                if let Some(Stage::Local(LocalOp::P2p(v))) = stage(r) {
                    for o in v.iter().filter(|o| o.is_send) {
                        msgs.push((r, members[o.peer], dev[r][at(o.buf)..at(o.buf) + (o.bytes / 8) as usize].to_vec()));
                    }
                }
            }
            for &r in members {
                if let Some(Stage::Local(LocalOp::P2p(v))) = stage(r) {
                    for o in v.iter().filter(|o| !o.is_send) {
                        let k = msgs.iter().position(|m| m.0 == members[o.peer] && m.1 == r).expect("local message");
                        let (_, _, d) = msgs.remove(k);
                        assert_eq!(d.len() as u64 * 8, o.bytes);
                        next[r][at(o.buf)..at(o.buf) + d.len()].copy_from_slice(&d);
                    }
                }
            }
            assert!(msgs.is_empty(), "unreceived local messages");
        }
        dev = next;
        // Net steps: the step's own copies (anywhere in the step: first here), then phase by
        // phase; data flows pairwise in order.
        for r in 0..n {
            if let Some(Stage::Net(s)) = plans[r].get(i) {
                arenas[r] = vec![0; (s.arena_bytes / 8) as usize + 1];
                for c in &s.copies {
                    let len = (c.bytes / 8) as usize;
                    let v = dev[r][at(c.src)..at(c.src) + len].to_vec();
                    dev[r][at(c.dst)..at(c.dst) + len].copy_from_slice(&v);
                }
            }
            for c in copies[r].get(i).into_iter().flatten().flat_map(|x| &x.pre) {
                let len = (c.bytes / 8) as usize;
                let v = dev[r][at(c.dev)..at(c.dev) + len].to_vec();
                arenas[r][at(c.host)..at(c.host) + len].copy_from_slice(&v);
            }
        }
        // Phases run as the proxies run them: a rank sends when it enters a phase and leaves
        // it once all its receives have arrived (then reduces); sends never block.
        // (from, to, data, how it is split: stripe_min and narrow)
        type Msg = (usize, usize, Vec<i64>, (u64, bool));
        let mut msgs: Vec<Msg> = Vec::new();
        let (mut cur, mut sent) = (vec![0usize; n], vec![false; n]);
        loop {
            let mut progress = false;
            for r in 0..n {
                let Some(Stage::Net(s)) = plans[r].get(i) else { continue };
                let Some(ph) = s.phases.get(cur[r]) else { continue };
                if !sent[r] {
                    for x in &ph.sends {
                        let len = (x.bytes / 8) as usize;
                        let v = match x.buf {
                            Buf::Dev(a) => dev[r][at(a)..at(a) + len].to_vec(),
                            Buf::Host(a) => arenas[r][at(a)..at(a) + len].to_vec(),
                        };
                        msgs.push((r, x.peer, v, (ph.stripe_min, ph.narrow)));
                    }
                    (sent[r], progress) = (true, true);
                }
                let ready = ph.recvs.iter().all(|x| {
                    let want = ph.recvs.iter().filter(|y| y.peer == x.peer).count();
                    msgs.iter().filter(|m| m.0 == x.peer && m.1 == r).count() >= want
                });
                if !ready {
                    continue;
                }
                for x in &ph.recvs {
                    let k = msgs.iter().position(|m| m.0 == x.peer && m.1 == r).expect("message");
                    let (_, _, v, stripe_min) = msgs.remove(k);
                    assert_eq!(v.len() as u64 * 8, x.bytes);
                    assert_eq!(stripe_min, (ph.stripe_min, ph.narrow), "{hashes:?} {coll:?}: ranks {} and {r} would split a transfer differently", x.peer);
                    match x.buf {
                        Buf::Dev(a) => dev[r][at(a)..at(a) + v.len()].copy_from_slice(&v),
                        Buf::Host(a) => arenas[r][at(a)..at(a) + v.len()].copy_from_slice(&v),
                    }
                }
                for red in &ph.reduces {
                    let len = (red.bytes / 8) as usize;
                    let mut acc = vec![0i64; len];
                    for inp in &red.inputs {
                        let v = match *inp {
                            Buf::Dev(a) => dev[r][at(a)..at(a) + len].to_vec(),
                            Buf::Host(a) => arenas[r][at(a)..at(a) + len].to_vec(),
                        };
                        for (x, y) in acc.iter_mut().zip(v) {
                            *x += y;
                        }
                    }
                    arenas[r][at(red.acc)..at(red.acc) + len].copy_from_slice(&acc);
                    if let Buf::Dev(o) = red.out {
                        dev[r][at(o)..at(o) + len].copy_from_slice(&acc);
                    }
                }
                (cur[r], sent[r], progress) = (cur[r] + 1, false, true);
            }
            if !progress {
                break;
            }
        }
        for r in 0..n {
            if let Some(Stage::Net(s)) = plans[r].get(i) {
                assert_eq!(cur[r], s.phases.len(), "{hashes:?} {coll:?}: rank {r} waits forever in stage {i}");
            }
        }
        assert!(msgs.is_empty(), "unreceived messages");
        for r in 0..n {
            for c in copies[r].get(i).into_iter().flatten().flat_map(|x| &x.post) {
                let len = (c.bytes / 8) as usize;
                let mut v = arenas[r][at(c.host)..at(c.host) + len].to_vec();
                if let Some(with) = c.with {
                    // Combined on the way out (the simulated op is a sum).
                    for (k, x) in v.iter_mut().enumerate() {
                        *x = x.wrapping_add(dev[r][at(with) + k]);
                    }
                    COMBINED.with(|n| n.set(n.get() + 1));
                }
                dev[r][at(c.dev)..at(c.dev) + len].copy_from_slice(&v);
            }
        }
    }
    (0..n).map(|r| dev[r][at(calls[r].recv)..at(calls[r].recv) + out_len].to_vec()).collect()
}

/// From `ring_min`, across three hosts or more of one size, AllReduce, ReduceScatter and
/// AllGather go around the ring of hosts: one transfer each way per phase, to the next host
/// and from the previous. Below it, or with hosts of different sizes, every host sends to
/// every other at once.
#[test]
fn large_calls_go_around_the_ring_of_hosts() {
    use Coll::*;
    let at = |me: usize, hashes: &[u64], min: u64| Layout { ring_min: min, ..Layout::new(me, hashes) };
    let peers = |st: &[Stage]| -> Vec<(Vec<usize>, Vec<usize>)> { steps(st)[0].phases.iter().map(|p| (p.sends.iter().map(|x| x.peer).collect(), p.recvs.iter().map(|x| x.peer).collect())).collect() };
    // Counts whose largest buffer is 1 MiB at 4 ranks.
    // Phases per host after the first: two for AllReduce (reduce-scatter, all-gather).
    for (coll, count, per) in [(AllReduce, 1u64 << 18, 2), (ReduceScatter, 1 << 16, 1), (AllGather, 1 << 16, 1)] {
        let st = plan_coll(&at(1, &[1, 2, 3, 4], 1 << 20), &call(coll, count, 0));
        assert_eq!(peers(&st), vec![(vec![2], vec![0]); 3 * per], "{coll:?}");
        // Rank 1 of each host of 3 x 2 (ranks 1, 3, 5) forms a ring of its own.
        let st = plan_coll(&at(3, &[1, 1, 2, 2, 3, 3], 1 << 20), &call(coll, count, 0));
        assert_eq!(peers(&st), vec![(vec![5], vec![1]); 2 * per], "{coll:?} 3 x 2");
        let pairs = peers(&plan_coll(&at(1, &[1, 2, 3, 4], 1 << 20), &call(coll, count - 1, 0)));
        assert_eq!(pairs[0], (vec![0, 2, 3], vec![0, 2, 3]), "{coll:?} below the threshold");
        let uneven = peers(&plan_coll(&at(2, &[1, 1, 2, 3], 1), &call(coll, count, 0)));
        assert!(uneven.len() == per && uneven[0].0.len() >= 2, "{coll:?} hosts of different sizes: {uneven:?}");
    }
    // The defaults: from RING_MIN_APART where the hosts are apart, never on one loopback.
    assert_eq!((ring_default(true), ring_default(false)), (RING_MIN_APART, u64::MAX));
    assert_eq!(Layout::new(0, &[1, 2, 3]).ring_min, u64::MAX);
}

#[test]
fn small_reduces_send_every_remote_input_to_the_root() {
    // 2 hosts x 2, root 1: ranks 2 and 3 send their own inputs to rank 1 at once (no host
    // stage first); rank 1 reduces with rank 0, then combines its result with both inputs.
    let hashes = [7, 7, 9, 9];
    let plan = |me: usize, c: &Call| plan_coll(&Layout::new(me, &hashes), c);
    let c = call(Coll::Reduce, REDUCE_DIRECT_MAX_BYTES / 4, 1);
    for me in [2, 3] {
        let st = plan(me, &c);
        assert!(matches!(st.as_slice(), [Stage::Net(s)] if s.phases[0].sends == vec![Xfer { peer: 1, buf: Buf::Dev(c.send), bytes: REDUCE_DIRECT_MAX_BYTES }]), "{st:?}");
    }
    let st = plan(1, &c);
    let [Stage::Local(LocalOp::Coll { coll: Coll::Reduce, root: 1, .. }), Stage::Net(s)] = st.as_slice() else { panic!("{st:?}") };
    assert_eq!(s.phases[0].recvs.iter().map(|x| x.peer).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.phases[0].reduces[0].inputs.len(), 3);
    assert!(matches!(plan(0, &c).as_slice(), [Stage::Local(_)]));
    // Larger, or a scaling op: each host reduces first and its representative (the root's
    // partner, rank 3) sends.
    let mut scaled = c;
    scaled.op = ResolvedOp { op: RedOp::PreMulSum, scalar: 1, scalar_ptr: 0 };
    for c in [call(Coll::Reduce, REDUCE_DIRECT_MAX_BYTES / 4 + 1, 1), scaled] {
        assert!(matches!(plan(2, &c).as_slice(), [Stage::Local(_)]));
        assert!(matches!(plan(3, &c).as_slice(), [Stage::Local(_), Stage::Net(s)] if s.phases[0].sends[0].buf == Buf::Dev(c.scratch)));
    }
    // Integer average: the inputs are summed and divided once, by every rank's count.
    let mut avg = c;
    avg.dtype = DataType::Int32;
    avg.op = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
    let st = plan(1, &avg);
    let [Stage::Local(LocalOp::Coll { op, .. }), Stage::Net(s)] = st.as_slice() else { panic!("{st:?}") };
    assert_eq!((op.op, s.phases[0].reduces[0].op.postdiv), (RedOp::Sum, 4));
}

#[test]
fn avg_splits_into_a_local_scale_and_a_host_sum() {
    let avg = ResolvedOp { op: RedOp::Avg, scalar: 0, scalar_ptr: 0 };
    let (lo, h) = split_op(avg, DataType::Float32, 4);
    assert_eq!(lo.op, RedOp::PreMulSum);
    assert_eq!(lo.scalar, u64::from(0.25f32.to_bits()));
    assert_eq!((h.combine, h.postdiv), (Combine::Sum, 0));
    let (lo, h) = split_op(avg, DataType::Int32, 3);
    assert_eq!((lo.op, h.postdiv), (RedOp::Sum, 3));
}
