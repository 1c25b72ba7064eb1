//! Input data and the host reference. Inputs of reducing operations are drawn so that every
//! reduction is exact in the datatype whatever order a library reduces in (small integers for
//! floating sums, powers of two for products and PreMulSum scalars, any bits for integers, whose
//! arithmetic wraps), so results compare bit for bit. The exceptions are floating average over a
//! rank count that is not a power of two (1/n is rounded) and are compared with a tolerance.

use oxccl::types::DataType;
use rayon::prelude::*;

use crate::case::{layout, output_rule, scalar_value, AllocSpec, Kind, Op, OpCase, OpExt, Source};
use crate::values::{decode_float, int_of, wrap_int, Codec};

/// Elements per piece of the host work spread over the cores (rayon): buffers reach tens of
/// millions of elements, and the host side, not the GPUs, set the fuzzer's pace. Each piece
/// encodes with a Codec of its own (a Codec is not Sync; fp16's table costs about a millisecond).
const PIECE: usize = 1 << 16;

/// splitmix64: one well-mixed word per (stream, index).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The stream of random words for one (case seed, operation, rank, replay, purpose).
pub fn stream(seed: u64, op: usize, rank: usize, replay: usize, what: u64) -> u64 {
    mix(seed ^ mix((op as u64) << 48 ^ (rank as u64) << 32 ^ (replay as u64) << 16 ^ what))
}

/// Significand bits (with the implicit one) of a floating type: integers up to 2^p are exact.
fn precision(dt: DataType) -> u32 {
    match dt {
        DataType::Float16 => 11,
        DataType::Bfloat16 => 8,
        DataType::Float32 => 24,
        DataType::Float64 => 53,
        DataType::Float8e4m3 => 4,
        DataType::Float8e5m2 => 3,
        _ => 64,
    }
}

/// What values one operation's inputs take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Domain {
    /// Raw bytes (data movement: only copies are checked).
    Bytes,
    /// Any value of an integer type.
    IntBits,
    /// Integers in [-l, l] (floating sums, averages, PreMulSum).
    Small(i64),
    /// -2, -1, 1, 2 and sometimes 0 (floating products).
    PowersOfTwo,
    /// Any finite value but -0 (floating max and min: exact in any order).
    Finite,
}

/// The inputs' domain, and whether the reference is exact (else: a tolerance).
pub fn domain(o: &OpCase, n: usize) -> (Domain, bool) {
    let dt = o.dt();
    if !o.kind.reduces() {
        return (Domain::Bytes, true);
    }
    if !dt.is_float() {
        return (Domain::IntBits, true);
    }
    let limit = 1i64 << precision(dt).min(62);
    let n = n as i64;
    let small = |div: i64| {
        let l = limit / div;
        (Domain::Small(l.clamp(1, 1 << 20)), l >= 1)
    };
    match o.op {
        Op::Prod => (Domain::PowersOfTwo, true),
        Op::Max | Op::Min => (Domain::Finite, true),
        Op::Sum => small(n),
        // x / n is exact when n is a power of two.
        Op::Avg => {
            let (d, exact) = small(n);
            (d, exact && (n & (n - 1)) == 0)
        }
        // |scalar| <= 2 for fp8, else <= 4 with quarters: room for the scaled values' sums.
        Op::PreMulHost | Op::PreMulDevice => small(if dt.is_fp8() { 2 * n } else { 16 * n }),
    }
}

/// Rank `rank`'s send buffer of `o` (elements `len`), for replay `replay`.
#[allow(clippy::too_many_arguments)]
pub fn input(seed: u64, opi: usize, o: &OpCase, n: usize, rank: usize, replay: usize, len: u64, codec: &Codec) -> Vec<u8> {
    let dt = o.dt();
    let es = dt.size();
    let (dom, _) = domain(o, n);
    let base = stream(seed, opi, rank, replay, 1);
    let mut out = vec![0u8; len as usize * es];
    if dom == Domain::Bytes || dom == Domain::IntBits {
        fill_random(&mut out, base);
        return out;
    }
    let fill = |first: usize, block: &mut [u8], codec: &Codec| {
        for (j, e) in block.chunks_exact_mut(es).enumerate() {
            let i = first + j;
            let x = mix(base ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
            let v = match dom {
                Domain::Small(l) => ((x % (2 * l as u64 + 1)) as i64 - l) as f64,
                Domain::PowersOfTwo => [2.0, -1.0, 1.0, -2.0, 1.0, 2.0, -1.0, 1.0, 2.0, 1.0, -2.0, 1.0, -1.0, 2.0, 1.0, 0.0][(x % 16) as usize],
                Domain::Finite => finite(dt, x),
                Domain::Bytes | Domain::IntBits => unreachable!(),
            };
            codec.encode_float(v, e);
        }
    };
    if (len as usize) <= PIECE {
        fill(0, &mut out, codec);
    } else {
        out.par_chunks_mut(PIECE * es).enumerate().for_each(|(p, block)| fill(p * PIECE, block, &Codec::new(dt)));
    }
    out
}

/// A finite value of `dt` from random bits (never NaN, infinite or -0).
fn finite(dt: DataType, mut x: u64) -> f64 {
    loop {
        let b = x.to_le_bytes();
        let v = decode_float(dt, &b);
        if v.is_finite() && !(v == 0.0 && v.is_sign_negative()) {
            return v;
        }
        x = mix(x);
    }
}

pub fn fill_random(out: &mut [u8], seed: u64) {
    out.par_chunks_mut(8 * PIECE).enumerate().for_each(|(p, block)| {
        for (j, c) in block.chunks_mut(8).enumerate() {
            let i = p * PIECE + j;
            let w = mix(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
    });
}

/// Every allocation of rank `rank` for `o` as it is uploaded before the operation: a random
/// pattern, with the send buffer (or each transfer's) holding the input.
#[allow(clippy::too_many_arguments)]
pub fn initial_images(seed: u64, opi: usize, o: &OpCase, n: usize, rank: usize, replay: usize, codec: &Codec) -> Vec<Vec<u8>> {
    let es = o.dt().size() as u64;
    let l = layout(o, n, rank);
    let mut imgs: Vec<Vec<u8>> = l
        .allocs
        .iter()
        .enumerate()
        .map(|(a, s)| {
            let mut v = vec![0u8; s.bytes(es) as usize];
            fill_random(&mut v, stream(seed, opi, rank, replay, 100 + a as u64));
            v
        })
        .collect();
    let mut put = |(a, at, len): (usize, u64, u64), data: &[u8]| {
        let start = (l.allocs[a].start(es) + at * es) as usize;
        imgs[a][start..start + (len * es) as usize].copy_from_slice(data);
    };
    if o.kind == Kind::SendRecv {
        for &(t, buf) in &l.sends {
            put(buf, &transfer_data(seed, opi, t, o, replay));
        }
    } else if let Some(s) = l.send {
        put(s, &input(seed, opi, o, n, rank, replay, s.2, codec));
    }
    imgs
}

/// The data transfer `t` of a SendRecv carries.
pub fn transfer_data(seed: u64, opi: usize, t: usize, o: &OpCase, replay: usize) -> Vec<u8> {
    let mut v = vec![0u8; (o.transfers[t].count * o.dt().size() as u64) as usize];
    fill_random(&mut v, stream(seed, opi, t, replay, 2));
    v
}

/// What one allocation must hold afterwards, and which of its byte ranges may differ within a
/// tolerance (floating average), per element.
pub struct Expected {
    pub image: Vec<u8>,
    /// Byte range of the output compared with a tolerance, if any, and each element's tolerance.
    pub approx: Option<(usize, usize, Vec<f64>)>,
}

/// Unit roundoff of a floating type.
fn eps(dt: DataType) -> f64 {
    match dt {
        DataType::Float64 => f64::EPSILON / 2.0,
        DataType::Float32 => f32::EPSILON as f64 / 2.0,
        DataType::Float16 => 2f64.powi(-11),
        DataType::Bfloat16 => 2f64.powi(-8),
        DataType::Float8e4m3 => 2f64.powi(-4),
        _ => 2f64.powi(-3),
    }
}

/// How far a floating reduction of `n` rounded terms whose magnitudes sum to `mag` may land from
/// the exact sum, in any order: each of the n pre-multiplications (x * rounded 1/n, or x * s) and
/// n - 1 additions rounds once, each by at most eps times the magnitude so far; twice that, plus
/// the smallest subnormal step. The magnitudes, not the result, bound it: terms may cancel.
fn tolerance(dt: DataType, n: usize, mag: f64) -> f64 {
    2.0 * (2 * n) as f64 * eps(dt) * mag + 2f64.powi(-24)
}

/// The expected final images of rank `rank`'s allocations for `o` (replay `replay`).
#[allow(clippy::too_many_arguments)]
pub fn expected_images(seed: u64, opi: usize, o: &OpCase, n: usize, rank: usize, replay: usize, codec: &Codec) -> Vec<Expected> {
    let dt = o.dt();
    let es = dt.size() as u64;
    let l = layout(o, n, rank);
    let init = initial_images(seed, opi, o, n, rank, replay, codec);
    let mut out: Vec<Expected> = init.into_iter().map(|image| Expected { image, approx: None }).collect();
    let at = |allocs: &[AllocSpec], (a, off, _): (usize, u64, u64)| (allocs[a].start(es) + off * es) as usize;
    if o.kind == Kind::SendRecv {
        for &(t, buf) in &l.recvs {
            let data = transfer_data(seed, opi, t, o, replay);
            let s = at(&l.allocs, buf);
            out[buf.0].image[s..s + data.len()].copy_from_slice(&data);
        }
        return out;
    }
    let (Some(rule), Some(recv)) = (output_rule(o, n, rank), l.recv) else { return out };
    // Every rank's send buffer (the sources), generated as that rank generates it.
    let sends: Vec<Vec<u8>> = (0..n)
        .map(|q| {
            let (len, _) = crate::case::send_recv_len(o, n, q);
            input(seed, opi, o, n, q, replay, len, codec)
        })
        .collect();
    let (_, exact) = domain(o, n);
    let start = at(&l.allocs, recv);
    let e = es as usize;
    let fill = |first: usize, block: &mut [u8], codec: &Codec| {
        let mut tol = Vec::new();
        for (j, elem) in block.chunks_exact_mut(e).enumerate() {
            match rule((first + j) as u64) {
                Source::Copy { src, idx } => elem.copy_from_slice(&sends[src][idx as usize * e..(idx as usize + 1) * e]),
                Source::Reduce { idx } => {
                    let mag = reduce_elem(o, n, &sends, idx as usize, codec, elem);
                    if !exact {
                        tol.push(tolerance(dt, n, mag));
                    }
                }
            }
        }
        tol
    };
    let region = &mut out[recv.0].image[start..start + recv.2 as usize * e];
    let tol = if (recv.2 as usize) <= PIECE {
        fill(0, region, codec)
    } else {
        let pieces: Vec<Vec<f64>> = region.par_chunks_mut(PIECE * e).enumerate().map(|(p, block)| fill(p * PIECE, block, &Codec::new(dt))).collect();
        pieces.concat()
    };
    if !exact {
        out[recv.0].approx = Some((start, start + recv.2 as usize * e, tol));
    }
    out
}

/// The reference reduction of element `idx` over every rank's send buffer, encoded; returns the
/// sum of the terms' magnitudes (floating types; 0 for integers).
fn reduce_elem(o: &OpCase, n: usize, sends: &[Vec<u8>], idx: usize, codec: &Codec, out: &mut [u8]) -> f64 {
    let dt = o.dt();
    let e = dt.size();
    let elem = |q: usize| &sends[q][idx * e..(idx + 1) * e];
    if dt.is_float() {
        let pre = |q: usize| {
            let x = decode_float(dt, elem(q));
            match o.op {
                Op::Avg => x / n as f64,
                Op::PreMulHost | Op::PreMulDevice => x * scalar_value(dt, o.scalars[q]),
                _ => x,
            }
        };
        let mut acc = pre(0);
        let mut mag = acc.abs();
        for q in 1..n {
            let x = pre(q);
            mag += x.abs();
            acc = match o.op {
                Op::Prod => acc * x,
                Op::Max => acc.max(x),
                Op::Min => acc.min(x),
                _ => acc + x,
            };
        }
        codec.encode_float(acc, out);
        mag
    } else {
        let w = |v: i128| wrap_int(dt, v);
        let pre = |q: usize| {
            let x = int_of(dt, elem(q));
            if o.op.premul() {
                w(x * scalar_value(dt, o.scalars[q]) as i128)
            } else {
                x
            }
        };
        let mut acc = pre(0);
        for q in 1..n {
            let x = pre(q);
            acc = match o.op {
                Op::Prod => w(acc.wrapping_mul(x)),
                Op::Max => acc.max(x),
                Op::Min => acc.min(x),
                _ => w(acc + x),
            };
        }
        if o.op == Op::Avg {
            acc = w(acc / n as i128); // truncating toward zero, as NCCL's FuncSumPostDiv
        }
        codec.encode_int(acc, out);
        0.0
    }
}

/// Compares an allocation read back with what it must hold; describes the first differences.
pub fn compare(o: &OpCase, n: usize, got: &[u8], exp: &Expected, alloc: &AllocSpec, what: &str) -> Option<String> {
    let dt = o.dt();
    let e = dt.size();
    let start = alloc.start(e as u64) as usize;
    // Almost every comparison is of equal bytes: one memcmp answers it.
    if got == &exp.image[..] {
        return None;
    }
    let mut bad = 0usize;
    let mut first = Vec::new();
    let mut i = 0;
    let _ = n;
    while i < got.len() {
        let (lo, hi, tol) = exp.approx.as_ref().map_or((usize::MAX, usize::MAX, &[][..]), |(a, b, t)| (*a, *b, &t[..]));
        if i >= lo && i < hi {
            let (g, x) = (decode_float(dt, &got[i..i + e]), decode_float(dt, &exp.image[i..i + e]));
            // NaN is never within the tolerance.
            if matches!((g - x).abs().partial_cmp(&tol[(i - lo) / e]), Some(std::cmp::Ordering::Greater) | None) {
                bad += 1;
                if first.len() < 4 {
                    first.push(format!("element {} = {g}, expected {x}", (i - start) / e));
                }
            }
            i += e;
            continue;
        }
        if got[i] != exp.image[i] {
            bad += 1;
            if first.len() < 4 {
                let place = if i < start {
                    format!("guard byte {} before the buffer", start - i)
                } else if i >= start + (alloc.len as usize) * e {
                    format!("guard byte {} past the end", i - start - alloc.len as usize * e)
                } else {
                    format!("element {} (byte {})", (i - start) / e, (i - start) % e)
                };
                first.push(format!("{place}: {:#04x}, expected {:#04x}", got[i], exp.image[i]));
            }
        }
        i += 1;
    }
    (bad > 0).then(|| format!("{what}: {bad} wrong ({})", first.join("; ")))
}

/// FNV-1a over bytes: the digest of an output the two libraries' runs compare.
pub fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Mode, Transfer};

    fn op(kind: Kind, dtype: DataType, o: Op, count: u64, n: usize) -> OpCase {
        OpCase {
            kind,
            dtype: dtype as i32,
            op: o,
            count,
            root: n - 1,
            in_place: false,
            comm: 0,
            soff: (0..n as u8).collect(),
            roff: (0..n as u8).rev().collect(),
            scalars: (0..n as u8).collect(),
            transfers: vec![],
            mem: crate::case::Mem::Plain,
            cfg: None,
            unreg: 0,
            side: 0,
        }
    }

    /// The exact domains keep every partial sum exact: the reference in rank order equals the
    /// one in reverse order, for every float type, op and rank count.
    #[test]
    fn exact_domains_do_not_depend_on_reduction_order() {
        let _ = Mode::Eager;
        for dt in [DataType::Float16, DataType::Bfloat16, DataType::Float32, DataType::Float64, DataType::Float8e4m3, DataType::Float8e5m2] {
            let codec = Codec::new(dt);
            for o in Op::ALL {
                for n in 1..=8 {
                    let c = op(Kind::AllReduce, dt, o, 300, n);
                    let (_, exact) = domain(&c, n);
                    if !exact {
                        // Up to 4 ranks only a rounded 1/n is inexact; beyond, fp8 runs out of
                        // room for PreMulSum's scaled sums too (compared with a tolerance).
                        assert!((o == Op::Avg && (n & (n - 1)) != 0) || (n > 4 && dt.is_fp8()), "{dt:?} {o:?} n={n}");
                        continue;
                    }
                    let sends: Vec<Vec<u8>> = (0..n).map(|q| input(7, 0, &c, n, q, 0, 300, &codec)).collect();
                    let e = dt.size();
                    for i in 0..300 {
                        let vals: Vec<f64> = (0..n)
                            .map(|q| {
                                let x = decode_float(dt, &sends[q][i * e..(i + 1) * e]);
                                match o {
                                    Op::Avg => x / n as f64,
                                    Op::PreMulHost | Op::PreMulDevice => x * scalar_value(dt, c.scalars[q]),
                                    _ => x,
                                }
                            })
                            .collect();
                        // Each partial sum and product, in either order, must be representable.
                        for order in [vals.clone(), vals.iter().rev().cloned().collect()] {
                            let mut acc = order[0];
                            for &x in &order[1..] {
                                acc = match o {
                                    Op::Prod => acc * x,
                                    Op::Max => acc.max(x),
                                    Op::Min => acc.min(x),
                                    _ => acc + x,
                                };
                                let mut b = [0u8; 8];
                                codec.encode_float(acc, &mut b[..e]);
                                assert_eq!(decode_float(dt, &b[..e]), acc, "{dt:?} {o:?} n={n}: {acc} is not exact");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Floating average over 3 ranks: terms that cancel leave a small result whose error is that
    /// of the large terms (seen on the GPU: f16, -5.28125 against -5.33203125 from terms near 200).
    #[test]
    fn average_tolerance_follows_the_terms() {
        let dt = DataType::Float16;
        let codec = Codec::new(dt);
        let c = op(Kind::AllReduce, dt, Op::Avg, 1, 3);
        let enc = |v: f64| {
            let mut b = vec![0u8; 2];
            codec.encode_float(v, &mut b);
            b
        };
        let sends = vec![enc(600.0), enc(-616.0), enc(0.0)];
        let mut out = [0u8; 2];
        let mag = reduce_elem(&c, 3, &sends, 0, &codec, &mut out);
        assert!((mag - (600.0 + 616.0) / 3.0).abs() < 1e-9, "{mag}");
        assert!(tolerance(dt, 3, mag) > 0.06, "half the ulp of 200 in f16 per term");
        assert!(tolerance(DataType::Float64, 3, 1.0) < 1e-6);
    }

    #[test]
    fn reference_reductions() {
        let codec = Codec::new(DataType::Int8);
        let mut c = op(Kind::AllReduce, DataType::Int8, Op::Avg, 1, 2);
        let sends = vec![vec![(-7i8) as u8], vec![2u8]];
        let mut out = [0u8];
        reduce_elem(&c, 2, &sends, 0, &codec, &mut out);
        assert_eq!(out[0] as i8, -2, "integer average truncates toward zero");
        c.op = Op::PreMulHost;
        c.scalars = vec![3, 5]; // x3 and x-3
        reduce_elem(&c, 2, &sends, 0, &codec, &mut out);
        assert_eq!(out[0] as i8, -21 - 6);
        let codec = Codec::new(DataType::Uint8);
        let c = op(Kind::AllReduce, DataType::Uint8, Op::Prod, 1, 2);
        reduce_elem(&c, 2, &[vec![16], vec![17]], 0, &codec, &mut out);
        assert_eq!(out[0], (16u32 * 17 % 256) as u8);
    }

    /// Rank 1's AllGather output holds every rank's input in rank order, its guards and its send
    /// buffer untouched; a wrong byte anywhere is found and placed.
    #[test]
    fn expected_images_and_compare() {
        let dt = DataType::Float32;
        let codec = Codec::new(dt);
        let n = 3;
        let c = op(Kind::AllGather, dt, Op::Sum, 5, n);
        let exp = expected_images(1, 0, &c, n, 1, 0, &codec);
        let l = layout(&c, n, 1);
        let recv_start = l.allocs[1].start(4) as usize;
        for q in 0..n {
            let data = input(1, 0, &c, n, q, 0, 5, &codec);
            assert_eq!(&exp[1].image[recv_start + q * 20..recv_start + q * 20 + 20], &data[..]);
        }
        let init = initial_images(1, 0, &c, n, 1, 0, &codec);
        assert_eq!(init[0], exp[0].image, "the send buffer keeps its input");
        assert_eq!(compare(&c, n, &exp[1].image, &exp[1], &l.allocs[1], "recv"), None);
        let mut got = exp[1].image.clone();
        got[recv_start + 20 * 3 + 1] ^= 1; // the guard right past the end
        let msg = compare(&c, n, &got, &exp[1], &l.allocs[1], "recv").unwrap();
        assert!(msg.contains("guard byte 1 past the end"), "{msg}");
        let mut got = exp[1].image.clone();
        got[recv_start + 4 * 7] ^= 0x80;
        let msg = compare(&c, n, &got, &exp[1], &l.allocs[1], "recv").unwrap();
        assert!(msg.contains("element 7 (byte 0)"), "{msg}");
    }

    #[test]
    fn sendrecv_images_carry_the_transfer() {
        let dt = DataType::Int32;
        let codec = Codec::new(dt);
        let mut c = op(Kind::SendRecv, dt, Op::Sum, 0, 2);
        c.transfers = vec![Transfer { src: 0, dst: 1, count: 9, soff: 3, roff: 1 }, Transfer { src: 1, dst: 1, count: 2, soff: 0, roff: 0 }];
        let sent = initial_images(5, 0, &c, 2, 0, 0, &codec);
        let got = expected_images(5, 0, &c, 2, 1, 0, &codec);
        assert_eq!(got.len(), 3, "rank 1 receives twice and sends to itself once");
        let data = &sent[0][(64 + 3 * 4) as usize..(64 + 12 * 4) as usize];
        assert_eq!(&got[0].image[(64 + 4)..(64 + 4 + 36)], data);
    }
}
