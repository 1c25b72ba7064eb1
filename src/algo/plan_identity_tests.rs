//! The planners' answers over a grid of sizes, rank counts, shapes and host layouts, hashed: a
//! change of any selection, launch shape or cross-host schedule changes the hash. Restructuring
//! commits (moves between modules) must leave it as it is; a deliberate planner change updates
//! `GOLDEN` in the same commit and says why.

use std::fmt::Write;

use crate::algo::{self, Scratch, Topology, Tuning};
use crate::types::ResolvedOp;
use crate::types::Coll;
use crate::net::plan::{self, Call, Layout, P2p};
use crate::types::{DataType, RedOp};

/// FNV-1a of everything the grid printed (stable across Rust versions, unlike DefaultHasher).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

const SIZES: [u64; 12] = [1, 7, 64, 1000, 4096, 65_536 + 3, 262_144, 1 << 20, 3 << 20, 1 << 24, 1 << 27, 1 << 30];
const DTYPES: [DataType; 5] = [DataType::Int8, DataType::Float16, DataType::Float32, DataType::Float64, DataType::Bfloat16];

fn algo_table() -> String {
    let mut out = String::new();
    let tunings = [Tuning::default(), Tuning { ap128_off: true, ..Tuning::default() }];
    for t in &tunings {
        writeln!(out, "min_bytes {}", algo::ce_direct::min_bytes(t)).unwrap();
        for nranks in [1usize, 2, 3, 4, 8] {
            for sm_count in [16u32, 78, 132] {
                let topo = Topology { nranks, sm_count };
                let s = Scratch::for_ranks(nranks, t);
                writeln!(out, "{topo:?} {s:?} gather_cap {} exchange {:?}", algo::gather_chunk_cap(&s), algo::exchange_shape(&topo, &s)).unwrap();
                for &bytes in &SIZES {
                    for dt in DTYPES {
                        let count = bytes / dt.size() as u64;
                        let ar = algo::select_allreduce(count, dt, &topo, &s, t);
                        writeln!(out, "ar {bytes} {dt:?} {ar:?} {:?}", algo::cost::allreduce_us(&ar, bytes, nranks)).unwrap();
                        writeln!(out, "rs {:?}", algo::select_reducescatter(count, dt, &topo, &s, t)).unwrap();
                        writeln!(out, "r {:?}", algo::select_reduce(count, dt, &topo, &s, t)).unwrap();
                    }
                    writeln!(
                        out,
                        "b {bytes} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
                        algo::chain::ll128_shape(bytes, &topo, &s, t),
                        algo::chain::broadcast_oneshot(bytes, &topo, &s, t),
                        algo::chain::broadcast_ll128(bytes, &topo, &s, t),
                        algo::select_gather_oneshot(bytes, true, &topo, &s, t),
                        algo::select_gather_oneshot(bytes, false, &topo, &s, t),
                        algo::rooted_grid(bytes, &topo, &s),
                        algo::allgather_shape(bytes, &topo, &s),
                        algo::broadcast_relay(bytes, &topo, &s, t),
                        algo::symm::allgather(bytes, &topo, t),
                        (algo::counting::counts(bytes, nranks, 1, t), algo::counting::counts(bytes, nranks, nranks, t)),
                        algo::batches::per_pair(nranks),
                    )
                    .unwrap();
                    for me in 0..nranks {
                        let relay = algo::broadcast_relay(bytes, &topo, &s, t);
                        let spec = algo::broadcast_spec(me, 0, nranks, 0x1000_0000, 0x2000_0000, bytes, relay);
                        let plan = algo::plan_exchange(me, &spec, Some(algo::envlists::Func::Broadcast), &topo, &s, t);
                        writeln!(out, "bs {me} {spec:?} {:?} {:?}", plan.map(|p| format!("{p:?}")), algo::select_p2p_oneshot(&spec, &topo, &s, t)).unwrap();
                    }
                }
            }
        }
    }
    out
}

fn sum() -> ResolvedOp {
    ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 }
}

fn net_table() -> String {
    let mut out = String::new();
    let hosts: [&[u64]; 8] = [&[7, 7, 9, 9], &[1, 2, 3, 4], &[5, 6, 5], &[3, 3, 3, 8], &[1, 2, 2, 1, 3], &[4, 4, 4, 6, 6, 6], &[2, 1, 3], &[1, 1, 2, 3, 2, 3]];
    let colls = [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter];
    for op in [RedOp::Sum, RedOp::Max, RedOp::PreMulSum, RedOp::Avg] {
        for dt in [DataType::Float32, DataType::Int32, DataType::Bfloat16] {
            let r = ResolvedOp { op, scalar: 0x3f80_0000, scalar_ptr: 0 };
            writeln!(out, "split_op {r:?} {dt:?} {:?}", plan::split_op(r, dt, 4)).unwrap();
        }
    }
    writeln!(out, "defaults {:?} {:?} {} {}", plan::pipeline_defaults(false), plan::pipeline_defaults(true), plan::ring_default(false), plan::ring_default(true)).unwrap();
    for h in hosts {
        let n = h.len();
        for tuned in [false, true] {
            for me in 0..n {
                let mut l = Layout::new(me, h);
                if tuned {
                    l.ring_min = 1 << 20;
                    l.reduce_pipeline_min = 1 << 20;
                    l.bcast_pipeline_min = 1 << 20;
                    l.narrow = true;
                }
                for coll in colls {
                    for count in [1u64, 7, 1024, 65_539, 1 << 22, 1 << 26] {
                        for root in [0, n - 1] {
                            let c = Call { coll, send: 0x1000_0000, recv: 0x2000_0000, count, dtype: DataType::Float32, op: sum(), root, scratch: 0x3000_0000 };
                            writeln!(out, "{me} {coll:?} {count} {root} {} {:?}", plan::scratch_bytes(coll, count, DataType::Float32, n), plan::plan_coll(&l, &c)).unwrap();
                        }
                    }
                }
                let ops: Vec<P2p> = (0..n).filter(|&p| p != me).flat_map(|p| [P2p { is_send: true, peer: p, buf: 0x100 * p as u64, bytes: 4096 }, P2p { is_send: false, peer: p, buf: 0x8000 + p as u64, bytes: 64 }]).collect();
                writeln!(out, "direct {me} {:?}", plan::split_direct(plan::direct(&l, &ops))).unwrap();
            }
        }
    }
    out
}

/// The tables' hashes as the planners gave them at e5cf2af (2026-11-29): moving code between
/// modules must not change a plan.
const GOLDEN: (u64, u64) = (0xde8a_8782_b6d7_df96, 0x4cf4_ba42_e44f_242c);

#[test]
fn planner_tables_are_unchanged() {
    let got = (fnv(&algo_table()), fnv(&net_table()));
    assert_eq!(got, GOLDEN, "planner tables changed: got ({:#x}, {:#x})", got.0, got.1);
}
