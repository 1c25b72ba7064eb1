//! Checks of every operation besides AllReduce: AllGather, ReduceScatter, Broadcast, Reduce,
//! AlltoAll, Gather, Scatter and grouped Send/Recv (ring shift, all pairs, fan-out and fan-in, self, zero counts),
//! in and out of place where NCCL defines it, against a host reference. Positions an operation
//! must not write (a non-root's Reduce output) must keep their poison.

use std::ffi::c_void;

use oxccl::api::coll::{ncclAllGather, ncclAlltoAll, ncclBroadcast, ncclGather, ncclReduce, ncclReduceScatter, ncclScatter};
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::api::p2p::{ncclRecv, ncclSend};
use oxccl::gpu::{cu, CtxGuard};
use oxccl::types::DataType;

use super::values::{input_value, reduce, CheckOp, Codec, Value};
use super::{ck, nccl, Rank};

const POISON: u8 = 0xa5;

#[derive(Clone, Copy, Debug)]
enum Kind {
    AllGather,
    ReduceScatter(CheckOp),
    Broadcast(usize),
    Reduce(CheckOp, usize),
    AlltoAll,
    Gather(usize),
    Scatter(usize),
    Ring,
    AllPairs,
    /// Sends from the root to every other rank, each receiving from the root alone: at 3+ ranks
    /// the root's group goes through the exchange kernel while each receiver's single receive
    /// takes the one-shot point-to-point kernel, so one pair's packets cross the two kernels.
    FanOut(usize),
    /// The reverse: every other rank sends to the root, which receives them all.
    FanIn(usize),
    /// AllPairs with each block in `PIECES` sends and receives (self included): a group larger
    /// than one launch holds at any rank count, cut into several (algo::batches). Pieces of
    /// unequal and zero size where the count does not divide.
    Pieces,
}

/// Messages per pair and direction in `Kind::Pieces`: more than one exchange launch carries.
const PIECES: usize = 48;

fn op_raw(op: CheckOp) -> i32 {
    op as i32
}

/// Element counts of each rank's send and receive buffers.
fn sizes(k: Kind, n: usize, count: usize) -> (usize, usize) {
    match k {
        Kind::AllGather | Kind::Gather(_) | Kind::FanIn(_) => (count, n * count),
        Kind::ReduceScatter(_) | Kind::Scatter(_) => (n * count, count),
        Kind::AlltoAll | Kind::AllPairs | Kind::Pieces => (n * count, n * count),
        Kind::Broadcast(_) | Kind::Reduce(..) | Kind::Ring | Kind::FanOut(_) => (count, count),
    }
}

/// Where rank r's send data sits when the operation runs in place: an element offset into its
/// receive buffer (None: no in-place form).
fn in_place_offset(k: Kind, r: usize, count: usize) -> Option<usize> {
    match k {
        Kind::AllGather => Some(r * count),
        Kind::ReduceScatter(_) => Some(0), // recv = send + r*count: send starts r*count before recv
        Kind::Broadcast(_) | Kind::Reduce(..) => Some(0),
        Kind::Gather(root) if r == root => Some(r * count),
        Kind::Scatter(root) if r == root => Some(0),
        _ => None,
    }
}

/// Expected receive buffer of rank r (None = must not be written).
fn expect(k: Kind, dt: DataType, r: usize, n: usize, count: usize, inputs: &[Vec<Value>]) -> Vec<Option<Value>> {
    let (_, rl) = sizes(k, n, count);
    let mut out = vec![None; rl];
    match k {
        Kind::AllGather => {
            for p in 0..n {
                for i in 0..count {
                    out[p * count + i] = Some(inputs[p][i]);
                }
            }
        }
        Kind::ReduceScatter(op) => {
            for i in 0..count {
                let xs: Vec<Value> = (0..n).map(|p| inputs[p][r * count + i]).collect();
                out[i] = Some(reduce(dt, op, &xs));
            }
        }
        Kind::Broadcast(root) => (0..count).for_each(|i| out[i] = Some(inputs[root][i])),
        Kind::Reduce(op, root) => {
            if r == root {
                for i in 0..count {
                    let xs: Vec<Value> = (0..n).map(|p| inputs[p][i]).collect();
                    out[i] = Some(reduce(dt, op, &xs));
                }
            }
        }
        Kind::AlltoAll | Kind::AllPairs | Kind::Pieces => {
            for p in 0..n {
                for i in 0..count {
                    out[p * count + i] = Some(inputs[p][r * count + i]);
                }
            }
        }
        Kind::Gather(root) => {
            if r == root {
                for p in 0..n {
                    for i in 0..count {
                        out[p * count + i] = Some(inputs[p][i]);
                    }
                }
            }
        }
        Kind::Scatter(root) => (0..count).for_each(|i| out[i] = Some(inputs[root][r * count + i])),
        Kind::Ring => {
            let from = (r + n - 1) % n;
            (0..count).for_each(|i| out[i] = Some(inputs[from][i]));
        }
        Kind::FanOut(root) if r != root => (0..count).for_each(|i| out[i] = Some(inputs[root][i])),
        Kind::FanIn(root) if r == root => {
            for p in (0..n).filter(|&p| p != root) {
                (0..count).for_each(|i| out[p * count + i] = Some(inputs[p][i]));
            }
        }
        Kind::FanOut(_) | Kind::FanIn(_) => {}
    }
    out
}

fn launch(k: Kind, ranks: &[Rank], dt: DataType, count: usize, send: &[u64], recv: &[u64]) -> Result<(), String> {
    let n = ranks.len();
    let es = dt.size() as u64;
    let d = dt as i32;
    nccl(ncclGroupStart(), "ncclGroupStart")?;
    let mut first = Ok(());
    for (r, rk) in ranks.iter().enumerate() {
        let (s, v, st) = (send[r] as *const c_void, recv[r] as *mut c_void, rk.stream.cast());
        let res = match k {
            Kind::AllGather => nccl(ncclAllGather(s, v, count, d, rk.comm, st), "ncclAllGather"),
            Kind::ReduceScatter(op) => nccl(ncclReduceScatter(s, v, count, d, op_raw(op), rk.comm, st), "ncclReduceScatter"),
            Kind::Broadcast(root) => nccl(ncclBroadcast(s, v, count, d, root as i32, rk.comm, st), "ncclBroadcast"),
            Kind::Reduce(op, root) => {
                // Non-roots pass a NULL output when out of place: it must never be touched.
                let v = if r != root && send[r] != recv[r] { std::ptr::null_mut() } else { v };
                nccl(ncclReduce(s, v, count, d, op_raw(op), root as i32, rk.comm, st), "ncclReduce")
            }
            Kind::AlltoAll => nccl(ncclAlltoAll(s, v, count, d, rk.comm, st), "ncclAlltoAll"),
            Kind::Gather(root) => nccl(ncclGather(s, v, count, d, root as i32, rk.comm, st), "ncclGather"),
            Kind::Scatter(root) => nccl(ncclScatter(s, v, count, d, root as i32, rk.comm, st), "ncclScatter"),
            Kind::Ring => {
                let (to, from) = ((r + 1) % n, (r + n - 1) % n);
                nccl(ncclSend(s, count, d, to as i32, rk.comm, st), "ncclSend")
                    .and(nccl(ncclRecv(v, count, d, from as i32, rk.comm, st), "ncclRecv"))
            }
            Kind::AllPairs => {
                // Receives posted before sends on odd ranks: order within a group must not matter.
                // Zero-byte messages to every other peer ride along, as PyTorch posts them.
                let mut res = Ok(());
                let order: Vec<usize> = if r % 2 == 1 { (0..n).rev().collect() } else { (0..n).collect() };
                for p in order {
                    let so = (send[r] + p as u64 * count as u64 * es) as *const c_void;
                    let ro = (recv[r] + p as u64 * count as u64 * es) as *mut c_void;
                    res = res
                        .and(nccl(ncclRecv(ro, count, d, p as i32, rk.comm, st), "ncclRecv"))
                        .and(nccl(ncclSend(so, count, d, p as i32, rk.comm, st), "ncclSend"))
                        .and(nccl(ncclSend(so, 0, d, p as i32, rk.comm, st), "ncclSend(0)"))
                        .and(nccl(ncclRecv(ro, 0, d, p as i32, rk.comm, st), "ncclRecv(0)"));
                }
                res
            }
            Kind::Pieces => {
                // Odd ranks post each pair's receives before its sends, and take the peers in
                // reverse: only the order within a pair and direction matters.
                let mut res = Ok(());
                let order: Vec<usize> = if r % 2 == 1 { (0..n).rev().collect() } else { (0..n).collect() };
                for p in order {
                    for first_recv in [r % 2 == 1, r % 2 == 0] {
                        for j in 0..PIECES {
                            let (lo, hi) = (j * count / PIECES, (j + 1) * count / PIECES);
                            let at = (p * count + lo) as u64 * es;
                            res = res.and(if first_recv {
                                nccl(ncclRecv((recv[r] + at) as *mut c_void, hi - lo, d, p as i32, rk.comm, st), "ncclRecv")
                            } else {
                                nccl(ncclSend((send[r] + at) as *const c_void, hi - lo, d, p as i32, rk.comm, st), "ncclSend")
                            });
                        }
                    }
                }
                res
            }
            Kind::FanOut(root) if r == root => (0..n)
                .filter(|&p| p != root)
                .try_for_each(|p| nccl(ncclSend(s, count, d, p as i32, rk.comm, st), "ncclSend")),
            Kind::FanOut(root) => nccl(ncclRecv(v, count, d, root as i32, rk.comm, st), "ncclRecv"),
            Kind::FanIn(root) if r == root => (0..n).filter(|&p| p != root).try_for_each(|p| {
                let ro = (recv[r] + p as u64 * count as u64 * es) as *mut c_void;
                nccl(ncclRecv(ro, count, d, p as i32, rk.comm, st), "ncclRecv")
            }),
            Kind::FanIn(root) => nccl(ncclSend(s, count, d, root as i32, rk.comm, st), "ncclSend"),
        };
        first = first.and(res);
    }
    let end = nccl(ncclGroupEnd(), "ncclGroupEnd");
    first.and(end)
}

fn check_case(ranks: &[Rank], codec: &Codec, k: Kind, count: usize, in_place: bool, seed: u64) -> Result<(), String> {
    let dt = codec.dt;
    let es = dt.size();
    let n = ranks.len();
    let (sl, rl) = sizes(k, n, count);
    let op = match k {
        Kind::ReduceScatter(op) | Kind::Reduce(op, _) => op,
        _ => CheckOp::Max, // inputs for data movement: any values
    };
    // The host side (inputs, encoding, the reference, the comparison) is most of a soak's time:
    // it runs one thread per rank (a Codec caches, so each thread has its own).
    let encode = |r: usize| {
        let codec = Codec::new(dt);
        let vals: Vec<Value> = (0..sl).map(|i| input_value(dt, op, r, i, seed)).collect();
        let mut bytes = vec![0u8; sl * es];
        for (i, v) in vals.iter().enumerate() {
            match v {
                Value::F(f) => codec.encode_float(*f, &mut bytes[i * es..]),
                Value::I(x) => codec.encode_int(*x, &mut bytes[i * es..]),
            }
        }
        (vals, bytes)
    };
    let encoded: Vec<(Vec<Value>, Vec<u8>)> = per_rank(n, sl, encode);
    let mut inputs = Vec::with_capacity(n);
    let (mut send, mut recv) = (Vec::new(), Vec::new());
    for ((r, rk), (vals, bytes)) in ranks.iter().enumerate().zip(encoded) {
        let ip = if in_place { in_place_offset(k, r, count) } else { None };
        // In-place ReduceScatter: recv = send + r*count, so send = recv - r*count (recv buffer
        // placed r*count elements into the rank's big buffer).
        let (s, v) = match (k, ip) {
            (Kind::ReduceScatter(_), Some(_)) => (rk.recv, rk.recv + (r * count * es) as u64),
            (Kind::Scatter(_), Some(_)) => (rk.recv, rk.recv + (r * count * es) as u64),
            (_, Some(off)) => (rk.recv + (off * es) as u64, rk.recv),
            (_, None) => (rk.send, rk.recv),
        };
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: buffers hold max_count * 8 bytes, checked by the caller against n*count*es.
        // In place, send and receive both lie within the first max(rl, sl) elements of rk.recv.
        unsafe {
            ck(cu::cuMemsetD8Async(rk.recv, POISON, rl.max(sl) * es, rk.stream), "cuMemsetD8Async")?;
            ck(cu::cuMemcpyHtoDAsync_v2(s, bytes.as_ptr().cast(), bytes.len(), rk.stream), "cuMemcpyHtoDAsync")?;
            ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
        }
        inputs.push(vals);
        send.push(s);
        recv.push(v);
    }
    launch(k, ranks, dt, count, &send, &recv)?;
    let mut outputs = Vec::with_capacity(n);
    for (r, rk) in ranks.iter().enumerate() {
        let mut got = vec![0u8; rl * es];
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: synchronises the rank's stream, then reads back its receive buffer.
        unsafe {
            ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")?;
            ck(cu::cuMemcpyDtoH_v2(got.as_mut_ptr().cast(), recv[r], got.len()), "cuMemcpyDtoH")?;
        }
        outputs.push(got);
    }
    let verify = |r: usize| -> Result<(), String> {
        let codec = Codec::new(dt);
        let want = expect(k, dt, r, n, count, &inputs);
        let got = &outputs[r];
        let mut wrong = 0usize;
        let mut first = None;
        for (i, w) in want.iter().enumerate() {
            let b = &got[i * es..(i + 1) * es];
            let ok = match w {
                None => in_place || b.iter().all(|&x| x == POISON),
                Some(v) => {
                    let mut e = [0u8; 8];
                    match v {
                        Value::F(f) => codec.encode_float(*f, &mut e),
                        Value::I(x) => codec.encode_int(*x, &mut e),
                    }
                    b == &e[..es]
                }
            };
            if !ok {
                wrong += 1;
                first.get_or_insert(format!("element {i}: got {b:02x?}, expected {w:?}"));
            }
        }
        if wrong > 0 {
            return Err(format!("rank {r}: {wrong} of {rl} wrong; first {}", first.unwrap_or_default()));
        }
        Ok(())
    };
    per_rank(n, rl, verify).into_iter().collect()
}

/// `f(r)` for every rank, one thread each; results in rank order. Cases too small to be worth a
/// thread run inline.
pub fn per_rank<T: Send>(n: usize, elems: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if elems < 1 << 14 {
        return (0..n).map(f).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || f(r))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

/// Runs every case; returns the number of failures.
pub fn check_all(ranks: &[Rank], max_count: usize, quick: bool) -> usize {
    let n = ranks.len();
    let mut counts: Vec<usize> = if quick { vec![1, 7, 1000, 65537, 300007] } else { vec![1, 2, 7, 100, 1000, 4099, 65537, 300007, 1048583] };
    counts.retain(|&c| c * n <= max_count);
    let dts = if quick { vec![DataType::Int8, DataType::Float32] } else { vec![DataType::Int8, DataType::Int32, DataType::Float32, DataType::Float64, DataType::Bfloat16] };
    let last = n - 1;
    let mut kinds = vec![
        Kind::AllGather,
        Kind::ReduceScatter(CheckOp::Sum),
        Kind::ReduceScatter(CheckOp::PreMulDevice),
        Kind::Broadcast(0),
        Kind::Broadcast(last),
        Kind::Reduce(CheckOp::Sum, 0),
        Kind::Reduce(CheckOp::Max, last),
        Kind::AlltoAll,
        Kind::Gather(0),
        Kind::Gather(last),
        Kind::Scatter(0),
        Kind::Scatter(last),
        Kind::Ring,
        Kind::AllPairs,
        Kind::FanOut(0),
        Kind::FanIn(last),
        Kind::Pieces,
    ];
    kinds.retain(|k| !matches!(k, Kind::ReduceScatter(CheckOp::PreMulDevice)));
    let mut bad = 0;
    for dt in dts {
        let codec = Codec::new(dt);
        for &k in &kinds {
            for &count in &counts {
                for in_place in [false, true] {
                    if in_place && in_place_offset(k, 0, count).is_none() && in_place_offset(k, last, count).is_none() {
                        continue;
                    }
                    let seed = 0x9000 ^ (dt as u64) << 48 ^ (count as u64);
                    if let Err(e) = check_case(ranks, &codec, k, count, in_place, seed) {
                        bad += 1;
                        println!("FAIL {k:?} {} count {count} {}: {e}", dt.name(), if in_place { "in-place" } else { "out-of-place" });
                    }
                }
            }
        }
        println!("  colls {:<5} done", dt.name());
    }
    bad
}

/// One random case for the soak test (`--soak`): operation, root, reduction, datatype, count
/// (log-uniform up to `max_count` elements per rank buffer) and placement all drawn from `r`.
/// Returns a description of the case and its outcome.
pub fn soak_one(ranks: &[Rank], r: u64, max_count: usize) -> (String, Result<(), String>) {
    let n = ranks.len();
    let pick = |shift: u32, m: u64| ((r >> shift) % m.max(1)) as usize;
    let root = pick(4, n as u64);
    let op = [CheckOp::Sum, CheckOp::Prod, CheckOp::Max, CheckOp::Min][pick(8, 4)];
    let k = match pick(12, 11) {
        0 => Kind::AllGather,
        1 => Kind::ReduceScatter(op),
        2 => Kind::Broadcast(root),
        3 => Kind::Reduce(op, root),
        4 => Kind::AlltoAll,
        5 => Kind::Gather(root),
        6 => Kind::Scatter(root),
        7 => Kind::Ring,
        8 => Kind::FanOut(root),
        9 => Kind::FanIn(root),
        _ => Kind::AllPairs,
    };
    let reduces = matches!(k, Kind::ReduceScatter(_) | Kind::Reduce(..));
    // Reductions check bit-exact results on small integers; FP8 sums of those may round.
    let dts: Vec<DataType> = DataType::ALL.into_iter().filter(|d| !(reduces && d.is_fp8())).collect();
    let dt = dts[pick(20, dts.len() as u64)];
    let per_rank = (max_count / n).max(1);
    let bits = usize::BITS - per_rank.leading_zeros();
    let count = ((1usize << pick(28, bits as u64)) + pick(40, 1 << 12)).min(per_rank);
    let in_place = pick(56, 2) == 1 && (in_place_offset(k, 0, count).is_some() || in_place_offset(k, n - 1, count).is_some());
    let what = format!("{k:?} {} count {count} {}", dt.name(), if in_place { "in-place" } else { "out-of-place" });
    let res = check_case(ranks, &Codec::new(dt), k, count, in_place, r);
    (what, res)
}
