//! Reductions on the host, for the cross-host steps: partial results of other hosts arrive in host
//! memory over TCP, so the proxy combines them there instead of copying them to the GPU first.
//!
//! Semantics follow kernels/prims/reduce.cuh element by element: integers wrap, float max/min return the
//! non-NaN operand, half and bfloat16 round once per operation, as sm_90's native 16-bit
//! arithmetic does (computed in f32 and rounded once, which "bfloat16 and half in f32" shows is
//! the exact result rounded; the general path computes in f64), FP8 goes through half as NCCL's does
//! (one rounding to half, then a saturating one to FP8). Pre-multiplication (PreMulSum, float
//! average) never happens here: the local stage applies it before any host sees the data.

use crate::types::DataType;

/// The combining part of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Sum (`ncclSum`; PreMulSum and `ncclAvg` combine with it too).
    Sum,
    /// Product (`ncclProd`).
    Prod,
    /// Maximum (`ncclMax`).
    Max,
    /// Minimum (`ncclMin`).
    Min,
}

/// One reduction: combine, then (integer average only) divide by `postdiv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostOp {
    /// Element type of the operands.
    pub dtype: DataType,
    /// How two elements combine.
    pub combine: Combine,
    /// Integer average's divisor (the communicator's size); 0 or 1: none.
    pub postdiv: u64,
}

/// A binary floating-point format narrower than f64.
#[derive(Clone, Copy, Debug)]
struct Mini {
    /// Exponent and stored mantissa bits.
    e: u32,
    m: u32,
    /// IEEE-like: the all-ones exponent holds inf and NaN. Otherwise (e4m3) only all-ones is NaN.
    ieee: bool,
    /// Out-of-range results saturate to the largest finite value (NCCL's FP8 conversions).
    satfinite: bool,
}

const F16: Mini = Mini { e: 5, m: 10, ieee: true, satfinite: false };
const BF16: Mini = Mini { e: 8, m: 7, ieee: true, satfinite: false };
const E4M3: Mini = Mini { e: 4, m: 3, ieee: false, satfinite: true };
const E5M2: Mini = Mini { e: 5, m: 2, ieee: true, satfinite: true };

fn pow2(k: i32) -> f64 {
    // 2^k for the exponents used here (|k| < 1000), built exactly.
    f64::from_bits(((k + 1023) as u64) << 52)
}

impl Mini {
    fn bias(self) -> i32 {
        (1 << (self.e - 1)) - 1
    }
    fn exp_ones(self) -> u32 {
        (1 << self.e) - 1
    }
    fn max_finite(self) -> f64 {
        let emax = self.bias() + if self.ieee { 0 } else { 1 };
        // e4m3's top mantissa pattern at the top exponent is NaN: one ulp less.
        let mant = if self.ieee { 2.0 - pow2(-(self.m as i32)) } else { 2.0 - pow2(1 - self.m as i32) };
        mant * pow2(emax)
    }
    fn nan(self) -> u32 {
        if self.ieee {
            (self.exp_ones() << self.m) | (1 << (self.m - 1))
        } else {
            (self.exp_ones() << self.m) | ((1 << self.m) - 1)
        }
    }

    fn decode(self, bits: u32) -> f64 {
        let sign = if bits >> (self.e + self.m) & 1 == 1 { -1.0 } else { 1.0 };
        let exp = (bits >> self.m) & self.exp_ones();
        let mant = bits & ((1 << self.m) - 1);
        if self.ieee && exp == self.exp_ones() {
            return if mant == 0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if !self.ieee && exp == self.exp_ones() && mant == (1 << self.m) - 1 {
            return f64::NAN;
        }
        let frac = mant as f64 * pow2(-(self.m as i32));
        if exp == 0 {
            sign * frac * pow2(1 - self.bias())
        } else {
            sign * (1.0 + frac) * pow2(exp as i32 - self.bias())
        }
    }

    /// Rounds to nearest, ties to even.
    fn encode(self, x: f64) -> u32 {
        let sign_bit = if x.is_sign_negative() { 1u32 << (self.e + self.m) } else { 0 };
        if x.is_nan() {
            return self.nan();
        }
        let a = x.abs();
        let max = self.max_finite();
        let overflow = || {
            if self.satfinite {
                sign_bit | self.encode_finite(max)
            } else if self.ieee {
                sign_bit | (self.exp_ones() << self.m)
            } else {
                self.nan()
            }
        };
        if a.is_infinite() {
            return overflow();
        }
        if a == 0.0 {
            return sign_bit;
        }
        let emin = 1 - self.bias();
        let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
        let q = pow2(e - self.m as i32);
        let r = (a / q).round_ties_even() * q;
        if r > max {
            return overflow();
        }
        sign_bit | self.encode_finite(r)
    }

    /// Bits of a non-negative value that is exactly representable.
    fn encode_finite(self, r: f64) -> u32 {
        let emin = 1 - self.bias();
        if r < pow2(emin) {
            return (r / pow2(emin - self.m as i32)) as u32;
        }
        let e = ((r.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let mant = (r / pow2(e - self.m as i32)) as u32 - (1 << self.m);
        (((e + self.bias()) as u32) << self.m) | mant
    }
}

/// `v` (an f32 value) rounded to `dt`, as little-endian bytes in the low bytes of a u64: the
/// scalar of a PreMulSum that the local stage applies (1/nranks for a float average).
pub fn scalar_bits(dt: DataType, v: f64) -> u64 {
    match dt {
        DataType::Float16 => u64::from(F16.encode(v as f32 as f64)),
        DataType::Bfloat16 => u64::from(BF16.encode(v as f32 as f64)),
        DataType::Float8e4m3 => u64::from(E4M3.encode(F16.decode(F16.encode(v as f32 as f64)))),
        DataType::Float8e5m2 => u64::from(E5M2.encode(F16.decode(F16.encode(v as f32 as f64)))),
        DataType::Float32 => u64::from((v as f32).to_bits()),
        DataType::Float64 => v.to_bits(),
        _ => 0,
    }
}

fn fmax(a: f64, b: f64) -> f64 {
    a.max(b) // the non-NaN one, as fmax and __hmax
}
fn fmin(a: f64, b: f64) -> f64 {
    a.min(b)
}

fn combine_f64(c: Combine, a: f64, b: f64) -> f64 {
    match c {
        Combine::Sum => a + b,
        Combine::Prod => a * b,
        Combine::Max => fmax(a, b),
        Combine::Min => fmin(a, b),
    }
}

/// `acc` and `x` as slices of `T` when both are aligned for it (the proxy's arena ranges are) and
/// the host is little-endian (the wire's order), so loops over them vectorise; None otherwise.
fn typed<'a, T: Copy>(acc: &'a mut [u8], x: &'a [u8]) -> Option<(&'a mut [T], &'a [T])> {
    if !cfg!(target_endian = "little") {
        return None;
    }
    // SAFETY: T is a primitive integer or float here: every bit pattern is a valid value.
    let (pa, a, sa) = unsafe { acc.align_to_mut::<T>() };
    // SAFETY: as above.
    let (px, b, sx) = unsafe { x.align_to::<T>() };
    (pa.is_empty() && sa.is_empty() && px.is_empty() && sx.is_empty() && a.len() == b.len()).then_some((a, b))
}

/// `a[i] = f(a[i], b[i])`, the op chosen once outside the loop.
macro_rules! zip_apply {
    ($a:expr, $b:expr, $c:expr, $sum:expr, $prod:expr, $max:expr, $min:expr) => {{
        match $c {
            Combine::Sum => $a.iter_mut().zip($b).for_each(|(a, b)| *a = $sum(*a, *b)),
            Combine::Prod => $a.iter_mut().zip($b).for_each(|(a, b)| *a = $prod(*a, *b)),
            Combine::Max => $a.iter_mut().zip($b).for_each(|(a, b)| *a = $max(*a, *b)),
            Combine::Min => $a.iter_mut().zip($b).for_each(|(a, b)| *a = $min(*a, *b)),
        }
    }};
}

macro_rules! ints {
    ($acc:expr, $x:expr, $t:ty, $c:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        if let Some((a, b)) = typed::<$t>($acc, $x) {
            zip_apply!(a, b, $c, <$t>::wrapping_add, <$t>::wrapping_mul, <$t>::max, <$t>::min);
            return;
        }
        for (a, x) in $acc.chunks_exact_mut(N).zip($x.chunks_exact(N)) {
            let (va, vx) = (<$t>::from_le_bytes(a.try_into().unwrap_or_default()), <$t>::from_le_bytes(x.try_into().unwrap_or_default()));
            let r = match $c {
                Combine::Sum => va.wrapping_add(vx),
                Combine::Prod => va.wrapping_mul(vx),
                Combine::Max => va.max(vx),
                Combine::Min => va.min(vx),
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

macro_rules! floats {
    ($acc:expr, $x:expr, $t:ty, $c:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        if let Some((a, b)) = typed::<$t>($acc, $x) {
            zip_apply!(a, b, $c, |p: $t, q: $t| p + q, |p: $t, q: $t| p * q, <$t>::max, <$t>::min);
            return;
        }
        for (a, x) in $acc.chunks_exact_mut(N).zip($x.chunks_exact(N)) {
            let (va, vx) = (<$t>::from_le_bytes(a.try_into().unwrap_or_default()), <$t>::from_le_bytes(x.try_into().unwrap_or_default()));
            let r: $t = match $c {
                Combine::Sum => va + vx,
                Combine::Prod => va * vx,
                Combine::Max => va.max(vx),
                Combine::Min => va.min(vx),
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

// ---- bfloat16 and half in f32 ----------------------------------------------------------------
// The typed loops below compute one operation of two 16-bit floats in f32 and round the f32
// result once to the format, with the results of the exact f64 path (tested bit for bit on every
// value of both formats against chosen partners and on random pairs; every pair of sums and
// products in `sixteen_bit_exhaustive`, run by hand) in a fraction of its time (build machine,
// 2 MiB: bfloat16 sum 9.4 -> 0.5 ns an element; half sum 10.8 -> 4.4; eight lanes at a time
// (`ops_simd`) about 0.2 for both):
// widening is exact; a product (at most 16 or 22 significant bits, never below f32's range for
// half, and exact in f32's subnormals wherever a bfloat16 rounding point is near) and max/min are
// exact in f32; a sum is exact in f32 unless one operand's lowest bit lies 24 or more bits below
// the other's top bit, and then the smaller one is too small to reach the 16-bit format's rounding
// bit, so the f32 result is never exactly on a 16-bit midpoint the exact sum is not on (its
// dropped bits are all zeros or, after a borrow, all ones). Rounding the f32 result is then
// rounding the exact one.

/// Whether the exact value `s + err` lies beyond `s` (away from zero); `err != 0`.
#[inline]
fn beyond(s: f32, err: f32) -> bool {
    (s.to_bits() ^ err.to_bits()) >> 31 == 0
}

#[inline]
fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// bfloat16 of the exact value `s + err` (`s` not NaN; `err`: only its sign counts, 0 if exact).
#[inline]
fn bf16_round(s: f32, err: f32) -> u16 {
    let b = s.to_bits();
    let (hi, low) = (b >> 16, b & 0xffff);
    let up = if low == 0x8000 && err != 0.0 { beyond(s, err) } else { low > 0x8000 || (low == 0x8000 && hi & 1 == 1) };
    (hi + u32::from(up)) as u16
}

/// One operation of two 16-bit floats in f32 (see above: the result is the exact one rounded).
#[inline]
fn op_f32(c: Combine, x: f32, y: f32) -> f32 {
    match c {
        Combine::Sum => x + y,
        Combine::Prod => x * y,
        Combine::Max => x.max(y),
        Combine::Min => x.min(y),
    }
}

fn bf16_op(c: Combine, a: u16, b: u16) -> u16 {
    let r = op_f32(c, bf16_to_f32(a), bf16_to_f32(b));
    if r.is_nan() {
        return BF16.nan() as u16;
    }
    bf16_round(r, 0.0)
}

/// Half widened to f32, exactly: a normal half's exponent is rebiased (127 - 15 = 112), a
/// subnormal is its integer significand times 2^-24 (no f32 subnormal is ever an operand: x86
/// takes a slow assist for those), all-ones exponents are inf and NaN.
#[inline]
fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let (sign, em) = ((h & 0x8000) << 16, h & 0x7fff);
    let v = if em < 0x400 {
        (em as f32 * f32::from_bits(0x3380_0000)).to_bits() // 2^-24
    } else if em < 0x7c00 {
        (em << 13) + (112 << 23)
    } else {
        0x7f80_0000 | (em & 0x3ff) << 13
    };
    f32::from_bits(v | sign)
}

/// Half of the exact value `s + err` (`s` finite; `err`: only its sign counts, 0 if exact), to
/// nearest, ties to even, overflow to infinity.
#[inline]
fn f16_round(s: f32, err: f32) -> u16 {
    let b = s.to_bits();
    let sign = (b >> 16) & 0x8000;
    let abs = b & 0x7fff_ffff;
    if abs >= 0x3880_0000 {
        // |s| >= 2^-14, a normal half or beyond: rebias the exponent (112 << 23) and keep 10
        // mantissa bits; the 13 dropped ones decide the rounding (0x1000 is the midpoint).
        let (h, rem) = ((abs - 0x3800_0000) >> 13, abs & 0x1fff);
        let up = if rem == 0x1000 && err != 0.0 { beyond(s, err) } else { rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) };
        return (sign | (h + u32::from(up)).min(0x7c00)) as u16;
    }
    let e = ((b >> 23) & 0xff) as i32 - 127;
    if e < -25 {
        return sign as u16;
    }
    let sig = (b & 0x7f_ffff) | 0x80_0000;
    let shift = if e >= -14 { 13 } else { (-1 - e) as u32 };
    let mut h = if e >= -14 { (((e + 15) as u32) << 10) | ((sig >> 13) & 0x3ff) } else { sig >> shift };
    let (rem, half) = (sig & ((1 << shift) - 1), 1u32 << (shift - 1));
    let up = if rem == half && err != 0.0 { beyond(s, err) } else { rem > half || (rem == half && h & 1 == 1) };
    h += u32::from(up);
    (sign | h.min(0x7c00)) as u16
}

fn f16_op(c: Combine, a: u16, b: u16) -> u16 {
    let r = op_f32(c, f16_to_f32(a), f16_to_f32(b));
    if r.is_nan() {
        return F16.nan() as u16;
    }
    if r.is_infinite() {
        return ((r.to_bits() >> 16) & 0x8000 | 0x7c00) as u16;
    }
    f16_round(r, 0.0)
}

/// `bf16_op` / `f16_op` eight elements at a time where the CPU can (x86-64, asked at run time:
/// AVX2 for bfloat16, AVX and F16C for half); returns how many leading elements it did (a
/// multiple of 8, 0 without those features). Same results as the scalar ops (every pair of every
/// op tested): widening is exact, the op is the same f32 operation (`op_8`), NaN lanes become the
/// canonical NaN before narrowing, and narrowing rounds once to nearest even as `bf16_round` /
/// `f16_round` do (bfloat16 by the integer carry of `bf16_round`; half by `vcvtps2ph`, with
/// subnormals and overflow to infinity). Half values and their sums and products are never f32
/// subnormals, so the denormal modes do not matter for half.
#[cfg(target_arch = "x86_64")]
fn ops_simd(half: bool, c: Combine, a: &mut [u16], b: &[u16]) -> usize {
    use std::arch::is_x86_feature_detected as has;
    if half && has!("avx") && has!("f16c") {
        // SAFETY: the CPU has AVX and F16C.
        return unsafe { f16_ops_8(c, a, b) };
    }
    if !half && has!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { bf16_ops_8(c, a, b) };
    }
    0
}

/// `op_f32` on eight lanes, NaN results made the canonical NaN (which narrows to the formats'
/// canonical NaNs: 0x7fc0 and 0x7e00). vmaxps/vminps return their second operand when the two
/// are equal (+0 and -0) or either is NaN: with x second, equal operands give x as f32::max/min
/// do, and where x is NaN y is taken instead.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn op_8(c: Combine, x: std::arch::x86_64::__m256, y: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let r = match c {
        Combine::Sum => _mm256_add_ps(x, y),
        Combine::Prod => _mm256_mul_ps(x, y),
        Combine::Max => _mm256_blendv_ps(_mm256_max_ps(y, x), y, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)),
        Combine::Min => _mm256_blendv_ps(_mm256_min_ps(y, x), y, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)),
    };
    _mm256_blendv_ps(r, _mm256_set1_ps(f32::from_bits(0x7fc0_0000)), _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f16_ops_8(c: Combine, a: &mut [u16], b: &[u16]) -> usize {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len()) / 8 * 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= both lengths; unaligned 16-byte loads and stores.
        let (pa, pb) = unsafe { (a.as_mut_ptr().add(i).cast::<__m128i>(), b.as_ptr().add(i).cast::<__m128i>()) };
        let (x, y) = unsafe { (_mm256_cvtph_ps(_mm_loadu_si128(pa)), _mm256_cvtph_ps(_mm_loadu_si128(pb))) };
        let r = op_8(c, x, y);
        // SAFETY: as above.
        unsafe { _mm_storeu_si128(pa, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r)) };
    }
    n
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bf16_ops_8(c: Combine, a: &mut [u16], b: &[u16]) -> usize {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len()) / 8 * 8;
    let widen = |h: __m128i| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= both lengths; unaligned 16-byte loads and stores.
        let (pa, pb) = unsafe { (a.as_mut_ptr().add(i).cast::<__m128i>(), b.as_ptr().add(i).cast::<__m128i>()) };
        let (x, y) = unsafe { (widen(_mm_loadu_si128(pa)), widen(_mm_loadu_si128(pb))) };
        let r = _mm256_castps_si256(op_8(c, x, y));
        // bf16_round without a midpoint error: adding 0x7fff plus the kept part's lowest bit
        // carries into the kept half exactly when it rounds up (ties to even); infinities and the
        // canonical NaN pass unchanged, the largest finite values round up to infinity.
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(r), _mm256_set1_epi32(1));
        let h = _mm256_srli_epi32::<16>(_mm256_add_epi32(r, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))));
        // Eight 32-bit lanes of at most 0xffff to eight u16: pack within each 128-bit half, then
        // take the two halves' low quadwords.
        let p = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(h, h));
        // SAFETY: as above.
        unsafe { _mm_storeu_si128(pa, _mm256_castsi256_si128(p)) };
    }
    n
}

/// The f32 nearest to `x` and the sign of what it leaves out (0 when exact): all the 16-bit
/// rounding functions need of an f64, since every bfloat16 and half value and every midpoint
/// between two of them is an f32. With the two encoders below it checks `bf16_round` and
/// `f16_round` against `Mini::encode` on any f64, midpoints and values just off them included
/// (which the 16-bit operations never produce, so their own tests cannot reach those branches).
#[cfg(test)]
fn f32_and_err(x: f64) -> (f32, f32) {
    let f = x as f32;
    let err = if f.is_infinite() || f64::from(f) == x { 0.0 } else { (x - f64::from(f)).signum() as f32 };
    (f, err)
}

/// bfloat16 to nearest, ties to even, from an f64, without `Mini::encode`'s general (slow) path.
/// Same results as `BF16.encode` (tested).
#[cfg(test)]
fn bf16_encode(x: f64) -> u32 {
    if x.is_nan() {
        return BF16.nan();
    }
    let (f, err) = f32_and_err(x);
    u32::from(bf16_round(f, err))
}

/// IEEE half to nearest, ties to even (overflow to infinity), from an f64. Same results as
/// `F16.encode` (tested); the reference for `f16_round`.
#[cfg(test)]
fn f16_encode(x: f64) -> u32 {
    if x.is_nan() {
        return F16.nan();
    }
    let (f, err) = f32_and_err(x);
    if f.is_infinite() {
        return (f.to_bits() >> 16) & 0x8000 | 0x7c00;
    }
    u32::from(f16_round(f, err))
}

fn minis16(acc: &mut [u8], x: &[u8], f: Mini, c: Combine) {
    if f.e == BF16.e && f.m == BF16.m {
        if let Some((a, b)) = typed::<u16>(acc, x) {
            #[cfg(target_arch = "x86_64")]
            let (a, b) = {
                let done = ops_simd(false, c, a, b);
                (&mut a[done..], &b[done..])
            };
            // One loop per op, so the op's match folds away inside each.
            zip_apply!(a, b, c, |p, q| bf16_op(Combine::Sum, p, q), |p, q| bf16_op(Combine::Prod, p, q), |p, q| bf16_op(Combine::Max, p, q), |p, q| bf16_op(Combine::Min, p, q));
            return;
        }
    }
    if f.e == F16.e && f.m == F16.m {
        if let Some((a, b)) = typed::<u16>(acc, x) {
            #[cfg(target_arch = "x86_64")]
            let (a, b) = {
                let done = ops_simd(true, c, a, b);
                (&mut a[done..], &b[done..])
            };
            zip_apply!(a, b, c, |p, q| f16_op(Combine::Sum, p, q), |p, q| f16_op(Combine::Prod, p, q), |p, q| f16_op(Combine::Max, p, q), |p, q| f16_op(Combine::Min, p, q));
            return;
        }
    }
    for (a, x) in acc.chunks_exact_mut(2).zip(x.chunks_exact(2)) {
        let va = f.decode(u32::from(u16::from_le_bytes([a[0], a[1]])));
        let vx = f.decode(u32::from(u16::from_le_bytes([x[0], x[1]])));
        let r = f.encode(combine_f64(c, va, vx)) as u16;
        a.copy_from_slice(&r.to_le_bytes());
    }
}

/// One FP8 element: widened to half (exact), combined in half (one rounding), narrowed with
/// saturation, as the kernels do.
fn fp8_one(f: Mini, c: Combine, a: u8, x: u8) -> u8 {
    let h = F16.decode(F16.encode(combine_f64(c, f.decode(u32::from(a)), f.decode(u32::from(x)))));
    f.encode(h) as u8
}

/// FP8 results of every (acc, x) pair for one format and op, `fp8_one` run once per pair (about a
/// millisecond, once per process): the loop is then a load per element, where `fp8_one` costs
/// tens of nanoseconds (a 2 MiB combine took 40 ms; at 2 simulated hosts x 1, a 4 KB FP8
/// ReduceScatter took 178 us a call against 22 for bfloat16; BENCHMARKS.md of 2026-11-26, a205a11). Built for a
/// combine of `FP8_TABLE_MIN` elements or more, or once smaller ones of this format and op have
/// added up to `FP8_TABLE_AFTER` elements (by then they cost about what the table does); used by
/// every combine once built. None: not (yet) worth building.
fn fp8_table(f: Mini, c: Combine, n: usize) -> Option<&'static [u8]> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static TABLES: [std::sync::OnceLock<Box<[u8]>>; 8] = [const { std::sync::OnceLock::new() }; 8];
    static SEEN: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
    let k = usize::from(f.m == E5M2.m) * 4
        + match c {
            Combine::Sum => 0,
            Combine::Prod => 1,
            Combine::Max => 2,
            Combine::Min => 3,
        };
    if let Some(t) = TABLES[k].get() {
        return Some(t);
    }
    fp8_table_due(n, SEEN[k].fetch_add(n, Ordering::Relaxed))
        .then(|| &**TABLES[k].get_or_init(|| (0..=u16::MAX).map(|i| fp8_one(f, c, (i >> 8) as u8, i as u8)).collect()))
}

/// Whether a combine of `n` elements builds the table, after `before` elements combined without it.
fn fp8_table_due(n: usize, before: usize) -> bool {
    n >= FP8_TABLE_MIN || before.saturating_add(n) >= FP8_TABLE_AFTER
}

/// A combine this large builds the table at once.
const FP8_TABLE_MIN: usize = 4096;
/// Smaller combines of one format and op build it once they have added up to this many elements.
const FP8_TABLE_AFTER: usize = 1 << 16;

fn fp8s(acc: &mut [u8], x: &[u8], f: Mini, c: Combine) {
    if let Some(t) = fp8_table(f, c, acc.len()) {
        for (a, &x) in acc.iter_mut().zip(x) {
            *a = t[usize::from(*a) << 8 | usize::from(x)];
        }
        return;
    }
    for (a, &x) in acc.iter_mut().zip(x) {
        *a = fp8_one(f, c, *a, x);
    }
}

/// `acc[i] = acc[i] (op) x[i]` over whole elements of `op.dtype` (both slices equally long).
pub fn combine(op: &HostOp, acc: &mut [u8], x: &[u8]) {
    let c = op.combine;
    match op.dtype {
        DataType::Int8 => ints!(acc, x, i8, c),
        DataType::Uint8 => ints!(acc, x, u8, c),
        DataType::Int32 => ints!(acc, x, i32, c),
        DataType::Uint32 => ints!(acc, x, u32, c),
        DataType::Int64 => ints!(acc, x, i64, c),
        DataType::Uint64 => ints!(acc, x, u64, c),
        DataType::Float32 => floats!(acc, x, f32, c),
        DataType::Float64 => floats!(acc, x, f64, c),
        DataType::Float16 => minis16(acc, x, F16, c),
        DataType::Bfloat16 => minis16(acc, x, BF16, c),
        DataType::Float8e4m3 => fp8s(acc, x, E4M3, c),
        DataType::Float8e5m2 => fp8s(acc, x, E5M2, c),
    }
}

macro_rules! divide {
    ($acc:expr, $t:ty, $n:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        let n = $n as $t;
        for a in $acc.chunks_exact_mut(N) {
            let v = <$t>::from_le_bytes(a.try_into().unwrap_or_default());
            // C division truncates toward zero, as Rust's; n >= 2 here, so no overflow.
            a.copy_from_slice(&(v / n).to_le_bytes());
        }
    }};
}

/// Integer average's final division (no-op for other types or divisors below 2).
pub fn post(op: &HostOp, acc: &mut [u8]) {
    if op.postdiv < 2 {
        return;
    }
    match op.dtype {
        DataType::Int8 => divide!(acc, i8, op.postdiv),
        DataType::Uint8 => divide!(acc, u8, op.postdiv),
        DataType::Int32 => divide!(acc, i32, op.postdiv),
        DataType::Uint32 => divide!(acc, u32, op.postdiv),
        DataType::Int64 => divide!(acc, i64, op.postdiv),
        DataType::Uint64 => divide!(acc, u64, op.postdiv),
        _ => {}
    }
}

/// Bytes of the accumulator combined with every input before the next block: small enough to stay
/// in the core's cache between inputs, so that a first input copied in (and the integer average's
/// division) costs no extra trip to memory.
const BLOCK: usize = 16 << 10;

/// `acc = srcs[0] (op) srcs[1] (op) ...`, then `post`, block by block. A `None` source is already in
/// `acc` (the first only); every slice is as long as `acc`.
pub fn reduce_into(op: &HostOp, acc: &mut [u8], srcs: &[Option<&[u8]>]) {
    for (k, a) in acc.chunks_mut(BLOCK).enumerate() {
        let r = k * BLOCK..k * BLOCK + a.len();
        for (j, s) in srcs.iter().enumerate() {
            match (j, s) {
                (0, Some(x)) => a.copy_from_slice(&x[r.clone()]),
                (_, Some(x)) => combine(op, a, &x[r.clone()]),
                (_, None) => {}
            }
        }
        post(op, a);
    }
}

/// `reduce_into` spread over threads for large buffers (the proxy waits for it).
pub fn reduce_into_parallel(op: &HostOp, acc: &mut [u8], srcs: &[Option<&[u8]>]) {
    const MIN_PER_THREAD: usize = 1 << 20;
    let threads = max_threads().min(acc.len() / MIN_PER_THREAD);
    if threads < 2 {
        return reduce_into(op, acc, srcs);
    }
    let es = op.dtype.size();
    let per = (acc.len() / es).div_ceil(threads) * es;
    std::thread::scope(|sc| {
        for (t, a) in acc.chunks_mut(per).enumerate() {
            let off = t * per;
            let part: Vec<Option<&[u8]>> = srcs.iter().map(|s| s.map(|x| &x[off..off + a.len()])).collect();
            sc.spawn(move || reduce_into(op, a, &part));
        }
    });
}

/// Threads a host combine may spread over: the CPUs this process may use, at most 8.
pub fn max_threads() -> usize {
    crate::bootstrap::topo::cpus().min(8)
}

/// Helper threads a rank's proxy may use to combine pieces as they land (`pipeline`), with
/// `local_ranks` ranks on its host doing the same: at most 3, and together with the proxies at
/// most half the CPUs (the application's own threads need the rest).
pub fn helpers(cpus: usize, local_ranks: usize) -> usize {
    (cpus / (2 * local_ranks.max(1))).saturating_sub(1).min(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dtype: DataType, combine: Combine) -> HostOp {
        HostOp { dtype, combine, postdiv: 0 }
    }

    #[test]
    fn reducing_block_by_block_equals_copying_then_combining() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Finite values for the float types: keep exponents away from all-ones.
                    (seed >> 33) as u8 & 0x3f
                })
                .collect()
        };
        for dtype in [DataType::Float32, DataType::Bfloat16, DataType::Float16, DataType::Int64, DataType::Uint8, DataType::Float8e4m3] {
            for combine_op in [Combine::Sum, Combine::Max, Combine::Prod] {
                for postdiv in [0, 3] {
                    let op = HostOp { dtype, combine: combine_op, postdiv };
                    // Not a multiple of the block, and over the parallel threshold once.
                    for n in [dtype.size() * 7, BLOCK * 3 + dtype.size() * 5, (3 << 20) + BLOCK / 2] {
                        let n = n / dtype.size() * dtype.size();
                        let (a, b, c) = (bytes(n), bytes(n), bytes(n));
                        let mut want = a.clone();
                        combine(&op, &mut want, &b);
                        combine(&op, &mut want, &c);
                        post(&op, &mut want);
                        let mut got = vec![0u8; n];
                        reduce_into_parallel(&op, &mut got, &[Some(&a), Some(&b), Some(&c)]);
                        assert!(got == want, "{dtype:?} {combine_op:?} postdiv {postdiv} n {n}");
                        // The first input already in place.
                        let mut got = a.clone();
                        reduce_into(&op, &mut got, &[None, Some(&b), Some(&c)]);
                        assert!(got == want, "{dtype:?} {combine_op:?} postdiv {postdiv} n {n}, first in place");
                    }
                }
            }
        }
    }

    #[test]
    fn combine_helpers_leave_half_the_cpus() {
        assert_eq!(helpers(32, 1), 3);
        assert_eq!(helpers(32, 8), 1);
        assert_eq!(helpers(16, 8), 0);
        assert_eq!(helpers(2, 1), 0);
        assert_eq!(helpers(8, 1), 3);
        assert_eq!(helpers(1, 0), 0);
    }

    #[test]
    fn minifloat_encodings_match_known_values() {
        assert_eq!(F16.encode(1.0), 0x3c00);
        assert_eq!(F16.encode(-2.0), 0xc000);
        assert_eq!(F16.encode(65504.0), 0x7bff);
        assert_eq!(F16.encode(65520.0), 0x7c00, "rounds up to inf");
        assert_eq!(F16.encode(pow2(-24)), 0x0001, "smallest subnormal");
        assert_eq!(F16.encode(pow2(-26)), 0x0000, "below half the smallest: zero");
        assert_eq!(F16.encode(1.0 + pow2(-11)), 0x3c00, "tie to even (down)");
        assert_eq!(F16.encode(1.0 + 3.0 * pow2(-11)), 0x3c02, "tie to even (up)");
        assert_eq!(BF16.encode(1.0), 0x3f80);
        assert_eq!(BF16.encode(3.0e38), 0x7f62);
        assert_eq!(E4M3.encode(448.0), 0x7e);
        assert_eq!(E4M3.encode(1000.0), 0x7e, "saturates");
        assert_eq!(E4M3.encode(-1000.0), 0xfe);
        assert_eq!(E4M3.encode(1.0), 0x38);
        assert_eq!(E4M3.encode(pow2(-9)), 0x01, "smallest subnormal");
        assert_eq!(E5M2.encode(57344.0), 0x7b);
        assert_eq!(E5M2.encode(1e9), 0x7b, "saturates");
        assert_eq!(E5M2.encode(1.0), 0x3c);
        assert!(E4M3.decode(0x7f).is_nan());
        assert_eq!(E4M3.decode(0x7e), 448.0);
        // Every encoding decodes and re-encodes to itself (NaNs aside).
        for f in [F16, BF16] {
            for b in 0..=0xffffu32 {
                let v = f.decode(b);
                if !v.is_nan() {
                    assert_eq!(f.encode(v), b, "{f:?} {b:#x}");
                }
            }
        }
        for f in [E4M3, E5M2] {
            for b in 0..=0xffu32 {
                let v = f.decode(b);
                if !v.is_nan() && !v.is_infinite() {
                    assert_eq!(f.encode(v), b, "{f:?} {b:#x}");
                }
            }
        }
    }

    #[test]
    fn integer_ops_wrap_and_average_truncates() {
        let mut a = 100i8.to_le_bytes().to_vec();
        combine(&op(DataType::Int8, Combine::Sum), &mut a, &100i8.to_le_bytes());
        assert_eq!(a, (-56i8).to_le_bytes());
        let mut a: Vec<u8> = [-7i32, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        post(&HostOp { dtype: DataType::Int32, combine: Combine::Sum, postdiv: 2 }, &mut a);
        assert_eq!(a, [-3i32, 4].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
        let mut a = u64::MAX.to_le_bytes().to_vec();
        combine(&op(DataType::Uint64, Combine::Prod), &mut a, &2u64.to_le_bytes());
        assert_eq!(a, (u64::MAX - 1).to_le_bytes());
        let mut a = 3u32.to_le_bytes().to_vec();
        combine(&op(DataType::Uint32, Combine::Min), &mut a, &5u32.to_le_bytes());
        assert_eq!(a, 3u32.to_le_bytes());
    }

    #[test]
    fn float_ops_follow_the_kernels() {
        let mut a = f32::NAN.to_le_bytes().to_vec();
        combine(&op(DataType::Float32, Combine::Max), &mut a, &2.5f32.to_le_bytes());
        assert_eq!(a, 2.5f32.to_le_bytes(), "max returns the non-NaN operand");
        // Half: 2048 + 1 rounds back to 2048 (ties to even), 2048 + 3 to 2052.
        let h = |v: f64| (F16.encode(v) as u16).to_le_bytes();
        let mut a = h(2048.0).to_vec();
        combine(&op(DataType::Float16, Combine::Sum), &mut a, &h(1.0));
        assert_eq!(a, h(2048.0));
        combine(&op(DataType::Float16, Combine::Sum), &mut a, &h(3.0));
        assert_eq!(a, h(2052.0));
        // FP8 e4m3: 448 + 448 saturates to 448 rather than becoming NaN.
        let mut a = vec![0x7eu8];
        combine(&op(DataType::Float8e4m3, Combine::Sum), &mut a, &[0x7e]);
        assert_eq!(a, [0x7e]);
        // bf16 products round once.
        let b = |v: f64| (BF16.encode(v) as u16).to_le_bytes();
        let mut a = b(3.0).to_vec();
        combine(&op(DataType::Bfloat16, Combine::Prod), &mut a, &b(1.0 / 3.0));
        assert_eq!(BF16.decode(u32::from(u16::from_le_bytes([a[0], a[1]]))), BF16.decode(BF16.encode(3.0 * BF16.decode(BF16.encode(1.0 / 3.0)))));
    }

    /// A small deterministic generator for test data.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// The typed (vectorised) loops give the bytes the byte-wise ones give: the same data run
    /// aligned (fast) and one byte off (byte-wise).
    #[test]
    fn typed_fast_paths_equal_the_bytewise_ones() {
        let n = 4096;
        let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
        for dt in [DataType::Int8, DataType::Uint8, DataType::Int32, DataType::Uint32, DataType::Int64, DataType::Uint64, DataType::Float32, DataType::Float64, DataType::Float16, DataType::Bfloat16] {
            for c in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
                let a0: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
                let x0: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
                // Aligned: backed by u64s.
                let mut aw = vec![0u64; n / 8];
                let mut xw = vec![0u64; n / 8];
                // SAFETY: n bytes of u64 storage.
                let (a1, x1) = unsafe { (std::slice::from_raw_parts_mut(aw.as_mut_ptr().cast::<u8>(), n), std::slice::from_raw_parts_mut(xw.as_mut_ptr().cast::<u8>(), n)) };
                a1.copy_from_slice(&a0);
                x1.copy_from_slice(&x0);
                // One byte off.
                let mut ab = vec![0u8; n + 1];
                let mut xb = vec![0u8; n + 1];
                ab[1..].copy_from_slice(&a0);
                xb[1..].copy_from_slice(&x0);
                combine(&op(dt, c), a1, x1);
                combine(&op(dt, c), &mut ab[1..], &xb[1..]);
                assert!(a1 == &ab[1..], "{dt:?} {c:?}");
            }
        }
    }

    /// The FP8 tables hold `fp8_one` of every pair, in (acc, x) order, and a large combine (which
    /// uses them) gives what element-wise calls give.
    #[test]
    fn fp8_tables_equal_the_element_wise_path() {
        let mut rnd = xorshift(0x51_7cc1_b727_220a);
        for (dt, f) in [(DataType::Float8e4m3, E4M3), (DataType::Float8e5m2, E5M2)] {
            for c in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
                let t = fp8_table(f, c, FP8_TABLE_MIN).expect("a large combine builds the table");
                for i in 0..=u16::MAX {
                    let (a, x) = ((i >> 8) as u8, i as u8);
                    assert_eq!(t[usize::from(i)], fp8_one(f, c, a, x), "{dt:?} {c:?} {a:#x} {x:#x}");
                }
                let a0: Vec<u8> = (0..FP8_TABLE_MIN * 2).map(|_| rnd() as u8).collect();
                let x0: Vec<u8> = (0..FP8_TABLE_MIN * 2).map(|_| rnd() as u8).collect();
                let mut a1 = a0.clone();
                combine(&op(dt, c), &mut a1, &x0);
                let want: Vec<u8> = a0.iter().zip(&x0).map(|(&a, &x)| fp8_one(f, c, a, x)).collect();
                assert_eq!(a1, want, "{dt:?} {c:?}");
            }
        }
        // Saturation survives the table: e4m3 448 + 448 stays 448.
        let mut a = vec![0x7e; FP8_TABLE_MIN];
        combine(&op(DataType::Float8e4m3, Combine::Sum), &mut a, &vec![0x7e; FP8_TABLE_MIN]);
        assert!(a.iter().all(|&v| v == 0x7e));
        // Small combines build it too once they add up to what it costs; then every combine uses it.
        assert!(!fp8_table_due(16, 0));
        assert!(!fp8_table_due(2048, FP8_TABLE_AFTER - 2049));
        assert!(fp8_table_due(2048, FP8_TABLE_AFTER - 2048));
        assert!(fp8_table_due(FP8_TABLE_MIN, 0));
        assert!(fp8_table(E4M3, Combine::Sum, 1).is_some(), "built above: used for one element");
        let mut a = vec![0x38u8; 3];
        combine(&op(DataType::Float8e4m3, Combine::Sum), &mut a, &[0x38; 3]);
        assert_eq!(a, vec![fp8_one(E4M3, Combine::Sum, 0x38, 0x38); 3], "1 + 1 through the table");
    }

    #[test]
    fn f16_fast_paths_equal_the_general_ones() {
        for h in 0..=u16::MAX {
            let (fast, slow) = (f64::from(f16_to_f32(h)), F16.decode(u32::from(h)));
            assert!(fast.to_bits() == slow.to_bits() || (fast.is_nan() && slow.is_nan()), "{h:#x}");
        }
        let mut rnd = xorshift(0x3c6e_f372_fe94_f82b);
        let d = |b: u64| F16.decode((b & 0xffff) as u32);
        for _ in 0..300_000 {
            let (p, q) = (d(rnd()), d(rnd()));
            for v in [p + q, p * q, p - q, fmax(p, q), fmin(p, q)] {
                assert_eq!(f16_encode(v), F16.encode(v), "{v:e}");
            }
        }
        // Midpoints and just off them (normal and subnormal), the overflow edge, tiny values.
        let ulp = pow2(-10);
        for v in [
            1.0 + ulp / 2.0,
            1.0 + ulp / 2.0 + pow2(-40),
            1.0 + ulp / 2.0 - pow2(-40),
            1.0 + 1.5 * ulp,
            pow2(-24) * 1.5,
            pow2(-24) * 2.5,
            pow2(-24) * 2.5 + pow2(-60),
            pow2(-25),
            pow2(-25) + pow2(-70),
            pow2(-26),
            pow2(-14) - pow2(-25),
            65504.0,
            65519.99,
            65520.0,
            65520.0 - pow2(-30),
            1e6,
            -65520.0,
            0.0,
            -0.0,
            1e-300,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(f16_encode(v), F16.encode(v), "{v:e}");
        }
    }

    #[test]
    fn bf16_fast_encoding_equals_the_general_one() {
        let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
        let d = |b: u64| BF16.decode((b & 0xffff) as u32);
        for _ in 0..200_000 {
            let (p, q) = (d(rnd()), d(rnd()));
            for v in [p + q, p * q, p - q] {
                assert_eq!(bf16_encode(v), BF16.encode(v), "{v:e}");
            }
        }
        // Exact halfway points, just off them, huge and tiny values.
        for v in [1.0 + pow2(-8), 1.0 + pow2(-8) + pow2(-40), 1.0 + pow2(-8) - pow2(-40), 1.0 + 3.0 * pow2(-8), 3.4e38, 3.39e38, -3.4e38, 1e-45, 1e-40, pow2(-133), pow2(-134), 0.0, -0.0] {
            assert_eq!(bf16_encode(v), BF16.encode(v), "{v:e}");
        }
    }

    /// `bf16_op` / `f16_op` against one operation of the general path (decode to f64, combine,
    /// `Mini::encode`), bit for bit: every value of the format against partners chosen for the
    /// edges (zeros, subnormals, the normal boundary, the largest finite, infinities, NaNs, the
    /// value's own neighbours and negation: exact cancellations and midpoints), then random pairs.
    #[test]
    fn sixteen_bit_ops_equal_the_general_path() {
        let ops = [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min];
        for (f, fast, partners) in [
            (BF16, bf16_op as fn(Combine, u16, u16) -> u16, [0x0000u16, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x0081, 0x00ff, 0x1f80, 0x2000, 0x3f80, 0xbf80, 0x3f81, 0x3b80, 0x4b80, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0c00, 0x3400]),
            (F16, f16_op as fn(Combine, u16, u16) -> u16, [0x0000u16, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x0401, 0x07ff, 0x1000, 0x1400, 0x3c00, 0xbc00, 0x3c01, 0x2400, 0x5400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfc01, 0x0200, 0x6800]),
        ] {
            let slow = |c: Combine, a: u16, b: u16| f.encode(combine_f64(c, f.decode(u32::from(a)), f.decode(u32::from(b)))) as u16;
            for a in 0..=u16::MAX {
                let mine = [a, a ^ 0x8000, a.wrapping_add(1), a.wrapping_sub(1), a.wrapping_add(0x80) ^ 0x8000];
                for &b in partners.iter().chain(&mine) {
                    for c in ops {
                        assert_eq!(fast(c, a, b), slow(c, a, b), "{c:?} {a:#06x} {b:#06x}");
                        assert_eq!(fast(c, b, a), slow(c, b, a), "{c:?} {b:#06x} {a:#06x}");
                    }
                }
            }
            let mut rnd = xorshift(0x6a09_e667_f3bc_c908);
            for _ in 0..400_000 {
                let r = rnd();
                let (a, b) = (r as u16, (r >> 16) as u16);
                // Half the pairs with close exponents, where sums round and cancel.
                let b = if r >> 63 == 1 { (a & 0xfc00) | (b & 0x83ff) } else { b };
                for c in ops {
                    assert_eq!(fast(c, a, b), slow(c, a, b), "{c:?} {a:#06x} {b:#06x}");
                }
            }
        }
    }

    /// `combine` on bfloat16 and half buffers (eight at a time where the CPU can, and the scalar
    /// tail) equals `bf16_op` / `f16_op` element by element: a spread of accumulators (the edges
    /// of both formats among them) against every value, buffers of odd length.
    #[test]
    fn sixteen_bit_buffers_equal_the_elementwise_op() {
        let every: Vec<u8> = (0..=u16::MAX).flat_map(|v| v.to_le_bytes()).collect();
        let edges = [0x0000, 0x8000, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7bff, 0x7f7f, 0xff80, 0x7fc0, 0xffc1, 0x0080];
        for (dt, op16) in [(DataType::Float16, f16_op as fn(Combine, u16, u16) -> u16), (DataType::Bfloat16, bf16_op)] {
            for c in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
                let op = HostOp { dtype: dt, combine: c, postdiv: 0 };
                for a in (0..=u16::MAX).step_by(251).chain(edges) {
                    let n = 65536 - usize::from(a % 7); // odd lengths leave a tail for the scalar loop
                    let mut acc: Vec<u8> = std::iter::repeat_n(a.to_le_bytes(), n).flatten().collect();
                    combine(&op, &mut acc, &every[..2 * n]);
                    for (b, got) in acc.chunks_exact(2).enumerate() {
                        let got = u16::from_le_bytes([got[0], got[1]]);
                        assert_eq!(got, op16(c, a, b as u16), "{dt:?} {c:?} {a:#06x} {b:#06x}");
                    }
                }
            }
        }
    }

    #[test]
    fn scalars_round_to_the_datatype() {
        assert_eq!(scalar_bits(DataType::Float32, 0.25), u64::from(0.25f32.to_bits()));
        assert_eq!(scalar_bits(DataType::Float16, 0.25), 0x3400);
        assert_eq!(scalar_bits(DataType::Bfloat16, 0.5), 0x3f00);
        assert_eq!(scalar_bits(DataType::Float8e4m3, 0.5), 0x30);
        assert_eq!(scalar_bits(DataType::Float64, 1.0 / 3.0), (1.0f64 / 3.0).to_bits());
    }
}

/// Run by hand (`--ignored`): the exhaustive 16-bit check and the combine timings.
#[cfg(test)]
mod by_hand {
    use super::*;

    /// Every pair of both 16-bit formats for every op against the f64 computation rounded by
    /// `bf16_encode` / `f16_encode` (themselves tested against `Mini::encode`), directly and
    /// through `combine` (the eight-lane paths): 2^32 pairs per case, minutes on the build machine.
    /// `cargo test --release -- --ignored sixteen_bit_exhaustive --nocapture`.
    #[test]
    #[ignore]
    fn sixteen_bit_exhaustive() {
        for c in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
            std::thread::scope(|s| {
                for part in 0..4u32 {
                    s.spawn(move || {
                        for a in (part * 0x4000)..((part + 1) * 0x4000) {
                            let a = a as u16;
                            let (xa, ha) = (BF16.decode(u32::from(a)), f64::from(f16_to_f32(a)));
                            let every: Vec<u8> = (0..=u16::MAX).flat_map(|v| v.to_le_bytes()).collect();
                            let buffer = |dtype| {
                                let mut acc: Vec<u8> = std::iter::repeat_n(a.to_le_bytes(), 65536).flatten().collect();
                                combine(&HostOp { dtype, combine: c, postdiv: 0 }, &mut acc, &every);
                                acc
                            };
                            let (acc, bacc) = (buffer(DataType::Float16), buffer(DataType::Bfloat16));
                            for b in 0..=u16::MAX {
                                let want = bf16_encode(combine_f64(c, xa, BF16.decode(u32::from(b)))) as u16;
                                assert_eq!(bf16_op(c, a, b), want, "bf16 {c:?} {a:#06x} {b:#06x}");
                                let got = u16::from_le_bytes([bacc[2 * b as usize], bacc[2 * b as usize + 1]]);
                                assert_eq!(got, want, "bf16 buffer {c:?} {a:#06x} {b:#06x}");
                                let want = f16_encode(combine_f64(c, ha, f64::from(f16_to_f32(b)))) as u16;
                                assert_eq!(f16_op(c, a, b), want, "f16 {c:?} {a:#06x} {b:#06x}");
                                let got = u16::from_le_bytes([acc[2 * b as usize], acc[2 * b as usize + 1]]);
                                assert_eq!(got, want, "f16 buffer {c:?} {a:#06x} {b:#06x}");
                            }
                        }
                    });
                }
            });
            println!("{c:?}: every pair equal");
        }
    }

    /// Not a test: per-element time of `combine` per datatype and op (2 MiB buffers), for
    /// comparing implementations on one machine (FP8: through its pair table, built by the first
    /// run). `cargo test --release -- --ignored combine_speed --nocapture`.
    #[test]
    #[ignore]
    fn combine_speed() {
        let n = 2 << 20;
        // Values of gradients: normal numbers of either sign around 1e-3..1.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut val = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2.0
        };
        let vals: Vec<(f64, f64)> = (0..n / 2).map(|_| (val(), val())).collect();
        for dt in [DataType::Float32, DataType::Bfloat16, DataType::Float16, DataType::Float8e4m3, DataType::Float8e5m2] {
            let enc = |v: f64| -> Vec<u8> {
                match dt {
                    DataType::Float32 => (v as f32).to_le_bytes().to_vec(),
                    DataType::Bfloat16 => (BF16.encode(v) as u16).to_le_bytes().to_vec(),
                    DataType::Float8e4m3 => vec![E4M3.encode(v) as u8],
                    DataType::Float8e5m2 => vec![E5M2.encode(v) as u8],
                    _ => (F16.encode(v) as u16).to_le_bytes().to_vec(),
                }
            };
            let es = dt.size();
            let acc0: Vec<u8> = vals.iter().take(n / es).flat_map(|v| enc(v.0)).collect();
            let x: Vec<u8> = vals.iter().take(n / es).flat_map(|v| enc(v.1)).collect();
            for c in [Combine::Sum, Combine::Prod, Combine::Max] {
                let op = HostOp { dtype: dt, combine: c, postdiv: 0 };
                let mut acc = acc0.clone();
                let mut per = f64::MAX;
                for _ in 0..5 {
                    acc.copy_from_slice(&acc0);
                    let t = std::time::Instant::now();
                    combine(&op, &mut acc, &x);
                    per = per.min(t.elapsed().as_secs_f64());
                }
                let ns = |t: f64| t * 1e9 / (n / es) as f64;
                println!("{:?} {:?}: {:.0} us per 2 MiB, {:.2} ns per element", dt, c, per * 1e6, ns(per));
            }
        }
    }
}
