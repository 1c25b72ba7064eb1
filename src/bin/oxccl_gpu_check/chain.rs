//! --chain: back-to-back AllReduces captured into one CUDA graph per rank, the pattern in which
//! oxccl launches ring one-shot AllReduces early (algo::pdl::early, kernels/colls/allreduce.cu): each
//! reads its input and sends its packets while the previous one still runs. nccl-tests cannot
//! catch a stale packet there (every iteration reduces the same data), so every operation here
//! has its own input, fresh on every replay, and the chain mixes in an input that is the previous
//! operation's output (which goes early only chained: it waits for that operation's blocks to
//! publish their output, or that operation sends its packets for it), into another buffer or in
//! place over it, several in a row, in-place calls, and messages
//! beyond the ring (the LL halves). Every output of every replay is checked; the check also fails
//! if no launch went early, or none chained, since then it tested nothing new.

use std::ffi::c_void;

use oxccl::api::coll::ncclAllReduce;
use oxccl::api::group::{ncclGroupEnd, ncclGroupStart};
use oxccl::gpu::{cu, CtxGuard};

use crate::{ck, nccl, Rank};

/// Operations per graph.
const OPS: usize = 24;
/// Graph replays (after one eager pass of the same sequence).
const REPLAYS: usize = 6;
/// Counts of the ring-sized operations (int32: up to 64 KiB, the ring's payload).
const SIZES: [usize; 7] = [1, 2, 7, 64, 1000, 4099, 16384];
/// A count beyond the ring (80 KB): the one-shot through the LL halves.
const BIG: usize = 20000;
/// Elements of each buffer.
const CAP: usize = 20480;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// in(j) -> out(j).
    Fresh,
    /// out(j-1) -> out(j): the input is the previous call's output (early only chained).
    Chained,
    /// out(j-1) -> out(j-1): the same, in place (nccl-tests' largest in-place size); out(j) unused.
    Again,
    /// out(j) -> out(j).
    InPlace,
    /// in(j) -> out(j), BIG elements.
    Big,
}

/// Per 8 operations: a chain of four behind a fresh one (twice in place, then twice into a new
/// buffer), so that chained launches follow chained ones, whose anchors pre-sent their packets.
fn kind(j: usize) -> Kind {
    match j % 8 {
        1 | 2 => Kind::Again,
        3 | 4 => Kind::Chained,
        5 => Kind::InPlace,
        6 => Kind::Big,
        _ => Kind::Fresh,
    }
}

fn count(j: usize) -> usize {
    match kind(j) {
        Kind::Big => BIG,
        Kind::Chained | Kind::Again => count(j - 1),
        _ => SIZES[(j * 5 + 3) % SIZES.len()],
    }
}

fn input(r: usize, j: usize, i: usize, round: usize) -> i32 {
    (r as i32 + 1) * 1000 + (j * 7 + i % 97 + round * 13) as i32
}

struct Bufs {
    base: cu::CUdeviceptr,
}

impl Bufs {
    fn input(&self, j: usize) -> cu::CUdeviceptr {
        self.base + (2 * j * CAP * 4) as u64
    }
    fn output(&self, j: usize) -> cu::CUdeviceptr {
        self.base + ((2 * j + 1) * CAP * 4) as u64
    }
    fn send(&self, j: usize) -> cu::CUdeviceptr {
        match kind(j) {
            Kind::Fresh | Kind::Big => self.input(j),
            Kind::Chained | Kind::Again => self.recv(j - 1),
            Kind::InPlace => self.output(j),
        }
    }
    fn recv(&self, j: usize) -> cu::CUdeviceptr {
        if kind(j) == Kind::Again {
            self.recv(j - 1)
        } else {
            self.output(j)
        }
    }
}

/// Expected output of every operation (the same on every rank).
fn expected(n: usize, round: usize) -> Vec<Vec<i32>> {
    let mut out: Vec<Vec<i32>> = Vec::with_capacity(OPS);
    for j in 0..OPS {
        let c = count(j);
        let v = if matches!(kind(j), Kind::Chained | Kind::Again) {
            out[j - 1][..c].iter().map(|x| x.wrapping_mul(n as i32)).collect()
        } else {
            (0..c).map(|i| (0..n).map(|r| input(r, j, i, round)).sum()).collect()
        };
        out.push(v);
    }
    out
}

fn issue(ranks: &[Rank], bufs: &[Bufs]) -> Result<(), String> {
    for j in 0..OPS {
        nccl(ncclGroupStart(), "ncclGroupStart")?;
        let mut first = Ok(());
        for (rk, b) in ranks.iter().zip(bufs) {
            let rc = ncclAllReduce(b.send(j) as *const c_void, b.recv(j) as *mut c_void, count(j), 2 /* int32 */, 0 /* sum */, rk.comm, rk.stream.cast());
            first = first.and(nccl(rc, "ncclAllReduce"));
        }
        let end = nccl(ncclGroupEnd(), "ncclGroupEnd");
        first.and(end)?;
    }
    Ok(())
}

/// Uploads round `round`'s inputs and poisons every output that is not an input.
fn prepare(ranks: &[Rank], bufs: &[Bufs], round: usize) -> Result<(), String> {
    for (r, (rk, b)) in ranks.iter().zip(bufs).enumerate() {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut host: Vec<Vec<u8>> = Vec::new();
        for j in 0..OPS {
            let c = count(j);
            let bytes: Vec<u8> = (0..c).flat_map(|i| input(r, j, i, round).to_le_bytes()).collect();
            let dst = match kind(j) {
                Kind::InPlace => b.output(j),
                Kind::Again => continue, // its buffer is the previous operation's output
                Kind::Chained => {
                    // SAFETY: the output buffer holds CAP >= c elements.
                    unsafe { ck(cu::cuMemsetD8Async(b.output(j), 0xa5, c * 4, rk.stream), "cuMemsetD8Async")? };
                    continue;
                }
                _ => {
                    // SAFETY: as above.
                    unsafe { ck(cu::cuMemsetD8Async(b.output(j), 0xa5, c * 4, rk.stream), "cuMemsetD8Async")? };
                    b.input(j)
                }
            };
            // SAFETY: the buffer holds CAP >= c elements; `bytes` is kept in `host` until the
            // stream is synchronised below.
            unsafe { ck(cu::cuMemcpyHtoDAsync_v2(dst, bytes.as_ptr().cast(), bytes.len(), rk.stream), "cuMemcpyHtoDAsync")? };
            host.push(bytes);
        }
        // SAFETY: valid stream.
        unsafe { ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")? };
    }
    Ok(())
}

fn verify(ranks: &[Rank], bufs: &[Bufs], round: usize, label: &str) -> Result<usize, String> {
    let want = expected(ranks.len(), round);
    let mut bad = 0;
    for (r, (rk, b)) in ranks.iter().zip(bufs).enumerate() {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        // SAFETY: valid stream.
        unsafe { ck(cu::cuStreamSynchronize(rk.stream), "cuStreamSynchronize")? };
        for (j, w) in want.iter().enumerate() {
            if j + 1 < OPS && kind(j + 1) == Kind::Again {
                continue; // its output was the next operation's input and output
            }
            let mut got = vec![0u8; w.len() * 4];
            // SAFETY: reads w.len() <= CAP elements of the output buffer.
            unsafe { ck(cu::cuMemcpyDtoH_v2(got.as_mut_ptr().cast(), b.recv(j), got.len()), "cuMemcpyDtoH")? };
            let wrong: Vec<usize> = (0..w.len()).filter(|&i| i32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap_or_default()) != w[i]).collect();
            if let Some(&i) = wrong.first() {
                bad += 1;
                let g = i32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap_or_default());
                println!("FAIL chain {label} rank {r} op {j} ({} elements): {} wrong, first at {i}: {g} instead of {}", w.len(), wrong.len(), w[i]);
            }
        }
    }
    Ok(bad)
}

pub fn check(ranks: &[Rank]) -> Result<usize, String> {
    let mut bufs = Vec::with_capacity(ranks.len());
    for rk in ranks {
        let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
        let mut base: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the device's context is current.
        unsafe { ck(cu::cuMemAlloc_v2(&mut base, 2 * OPS * CAP * 4), "cuMemAlloc")? };
        bufs.push(Bufs { base });
    }
    let result = run(ranks, &bufs);
    for (rk, b) in ranks.iter().zip(&bufs) {
        if let Ok(_g) = CtxGuard::new(rk.dev) {
            // SAFETY: allocated above; every stream using it was synchronised.
            unsafe { cu::cuMemFree_v2(b.base) };
        }
    }
    result
}

fn run(ranks: &[Rank], bufs: &[Bufs]) -> Result<usize, String> {
    let mut bad = 0;
    prepare(ranks, bufs, 0)?;
    issue(ranks, bufs)?;
    bad += verify(ranks, bufs, 0, "eager")?;

    let before = (oxccl::launch::enqueue::early_launches(), oxccl::launch::enqueue::chained_launches(), oxccl::launch::enqueue::present_launches());
    let execs = crate::capture(ranks, || issue(ranks, bufs))?;
    let early = oxccl::launch::enqueue::early_launches() - before.0;
    let chained = oxccl::launch::enqueue::chained_launches() - before.1;
    let present = oxccl::launch::enqueue::present_launches() - before.2;
    let replays = (|| -> Result<usize, String> {
        let mut bad = 0;
        for round in 1..=REPLAYS {
            prepare(ranks, bufs, round)?;
            for (rk, e) in ranks.iter().zip(&execs) {
                let _g = CtxGuard::new(rk.dev).map_err(|e| e.msg)?;
                // SAFETY: instantiated graph, valid stream.
                unsafe { ck(cu::cuGraphLaunch(*e, rk.stream), "cuGraphLaunch")? };
            }
            bad += verify(ranks, bufs, round, &format!("replay {round}"))?;
        }
        Ok(bad)
    })();
    for (rk, e) in ranks.iter().zip(&execs) {
        if let Ok(_g) = CtxGuard::new(rk.dev) {
            // SAFETY: streams synchronised in verify (or the replay failed before launching).
            unsafe {
                cu::cuStreamSynchronize(rk.stream);
                cu::cuGraphExecDestroy(*e)
            };
        }
    }
    bad += replays?;
    let zero = |k: &str| std::env::var(k).is_ok_and(|v| v.trim() == "0");
    let off = zero("OXCCL_ONESHOT_EARLY") || zero("OXCCL_PDL");
    println!("  chain: {OPS} AllReduces per graph, {REPLAYS} replays, {early} early launches captured, {chained} of them chained, {present} pre-sent");
    if early == 0 && !off {
        println!("FAIL chain: no launch was early (expected {} per rank)", OPS / 2);
        bad += 1;
    }
    if chained == 0 && !off {
        println!("FAIL chain: no launch was chained (expected {} per rank)", OPS / 2);
        bad += 1;
    }
    // Every chained launch here is an int32 sum, whose packets its anchor sends (algo::pdl::presend).
    let want_present = if zero("OXCCL_ONESHOT_PRESEND") { 0 } else { chained };
    if present != want_present {
        println!("FAIL chain: {present} launches pre-sent, expected {want_present}");
        bad += 1;
    }
    Ok(bad)
}
