//! Host-side element encodings and the reference reduction, per datatype.
//!
//! Inputs are chosen so every reduction oxccl does is exact in the datatype (small integers for
//! floating types, any value for integer types with wrap-around), so results compare bit for bit;
//! only floating average is compared with a tolerance, as nccl-tests does.

use oxccl::types::DataType;

/// Ops the check runs. PreMul* use ncclRedOpCreatePreMulSum with a per-rank scalar (see
/// [`premul_scalar`]), as nccl-tests does: each rank scales its own input by its own scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "conform", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum CheckOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    PreMulHost,
    PreMulDevice,
}

impl CheckOp {
    pub const ALL: [CheckOp; 7] =
        [CheckOp::Sum, CheckOp::Prod, CheckOp::Max, CheckOp::Min, CheckOp::Avg, CheckOp::PreMulHost, CheckOp::PreMulDevice];
    pub fn name(self) -> &'static str {
        match self {
            CheckOp::Sum => "sum",
            CheckOp::Prod => "prod",
            CheckOp::Max => "max",
            CheckOp::Min => "min",
            CheckOp::Avg => "avg",
            CheckOp::PreMulHost => "premul-host",
            CheckOp::PreMulDevice => "premul-dev",
        }
    }
}

/// Rank r's PreMulSum scalar: 1 on even ranks, 2 on odd ones.
pub fn premul_scalar(rank: usize) -> f64 {
    (1 + rank % 2) as f64
}

/// A small deterministic generator (xorshift), so failures reproduce.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

pub fn is_signed_int(dt: DataType) -> bool {
    matches!(dt, DataType::Int8 | DataType::Int32 | DataType::Int64)
}

fn int_bits(dt: DataType) -> u32 {
    dt.size() as u32 * 8
}

/// Wraps an integer into the datatype's range, returned sign-extended (signed) or zero-extended.
pub fn wrap_int(dt: DataType, v: i128) -> i128 {
    let bits = int_bits(dt);
    let m = (v as u128) & (u128::MAX >> (128 - bits));
    if is_signed_int(dt) && (m >> (bits - 1)) & 1 == 1 {
        (m as i128) - (1i128 << bits)
    } else {
        m as i128
    }
}

// ---- floating encodings -----------------------------------------------------------------------

fn f16_decode(h: u16) -> f64 {
    let s = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    match e {
        0 => s * m * 2f64.powi(-24),
        31 => if m == 0.0 { s * f64::INFINITY } else { f64::NAN },
        _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

/// The fp16 code nearest to finite `v` (ties to the even code; past the largest finite value,
/// the largest finite value). Exact arithmetic: scaling by a power of two is exact in f64.
fn f16_encode(v: f64) -> u16 {
    let sign = if v.is_sign_negative() { 0x8000u16 } else { 0 };
    let a = v.abs();
    if a > 65504.0 {
        return sign | 0x7bff;
    }
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let code = if e < -14 {
        // Subnormal: whole multiples of 2^-24 (1024 of them is the smallest normal's code).
        (a * pow2(24)).round_ties_even() as u32
    } else {
        // [1024, 2048] units of the exponent's step; 2048 carries into the next exponent.
        let m = (a * pow2(10 - e)).round_ties_even() as u32;
        (((e + 15) as u32) << 10) + m - 1024
    };
    sign | code.min(0x7bff) as u16
}

fn fp8_decode(b: u8, e4m3: bool) -> f64 {
    let s = if b >> 7 == 1 { -1.0 } else { 1.0 };
    let (ebits, mbits, bias) = if e4m3 { (4, 3, 7) } else { (5, 2, 15) };
    let e = ((b >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (b & ((1 << mbits) - 1)) as f64;
    let mscale = (1 << mbits) as f64;
    if e4m3 && e == 15 && m as u8 == 7 {
        return f64::NAN;
    }
    if !e4m3 && e == 31 {
        return if m == 0.0 { s * f64::INFINITY } else { f64::NAN };
    }
    if e == 0 {
        s * (m / mscale) * 2f64.powi(1 - bias)
    } else {
        s * (1.0 + m / mscale) * 2f64.powi(e - bias)
    }
}

/// Every fp8 code decoded once (e4m3, e5m2): the conformance check decodes tens of millions.
/// Every fp16 code's value: one load instead of arithmetic per element (tens of millions).
fn f16_table() -> &'static [f64] {
    static T: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    T.get_or_init(|| (0..=u16::MAX).map(f16_decode).collect())
}

/// 2^k for k in f64's normal range, exactly (powi is a call per element).
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

fn fp8_table() -> &'static [[f64; 256]; 2] {
    static T: std::sync::OnceLock<[[f64; 256]; 2]> = std::sync::OnceLock::new();
    T.get_or_init(|| [0, 1].map(|k| std::array::from_fn(|c| fp8_decode(c as u8, k == 0))))
}

/// A cheap hash for the fp8 code cache: its keys are f64 bits, hashed per element of tens of
/// millions (SipHash made that the check's bottleneck).
#[derive(Default)]
struct BitsHasher(u64);

impl std::hash::Hasher for BitsHasher {
    fn finish(&self) -> u64 {
        // A splitmix finaliser: the keys' low bits are mostly zero, and hashbrown picks buckets
        // from the low bits.
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// Nearest code of a narrow float type by table search (ties to the even code).
fn encode_by_table(v: f64, codes: u32, decode: impl Fn(u32) -> f64) -> u32 {
    let mut best = 0;
    let mut best_d = f64::INFINITY;
    for c in 0..codes {
        let x = decode(c);
        if !x.is_finite() {
            continue;
        }
        let d = (x - v).abs();
        // Ties go to the even code, but a zero keeps its sign (+0 and -0 are both at distance 0).
        let sign_ok = x != 0.0 || x.is_sign_negative() == v.is_sign_negative();
        if d < best_d || (d == best_d && c % 2 == 0 && sign_ok) {
            best = c;
            best_d = d;
        }
    }
    best
}

/// Decodes one element to f64 (floating) or to its integer value as f64-free i128 via `int_of`.
pub fn decode_float(dt: DataType, b: &[u8]) -> f64 {
    match dt {
        DataType::Float32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DataType::Float64 => f64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        DataType::Float16 => f16_table()[u16::from_le_bytes([b[0], b[1]]) as usize],
        DataType::Bfloat16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64,
        DataType::Float8e4m3 => fp8_table()[0][b[0] as usize],
        DataType::Float8e5m2 => fp8_table()[1][b[0] as usize],
        _ => unreachable!("not a floating type"),
    }
}

pub fn int_of(dt: DataType, b: &[u8]) -> i128 {
    let mut raw = [0u8; 16];
    raw[..dt.size()].copy_from_slice(&b[..dt.size()]);
    wrap_int(dt, u128::from_le_bytes(raw) as i128)
}

/// Encoder for one datatype; fp8 encodings are tabled once, and fp8 codes of the few
/// distinct values the check uses are cached.
pub struct Codec {
    pub dt: DataType,
    table: Vec<(f64, u16)>,
    fp8_cache: std::cell::RefCell<std::collections::HashMap<u64, u8, std::hash::BuildHasherDefault<BitsHasher>>>,
}

impl Codec {
    pub fn new(dt: DataType) -> Codec {
        let table = match dt {
            // fp8: every finite code at the top 12 bits (sign, exponent, 3 mantissa bits) of its
            // value as f32, which tell every fp8 value apart: an exact value's code in one load.
            DataType::Float8e4m3 | DataType::Float8e5m2 => {
                let k = usize::from(dt == DataType::Float8e5m2);
                let mut t = vec![(f64::NAN, 0u16); 4096];
                for c in 0..256u16 {
                    let v = fp8_table()[k][c as usize];
                    if v.is_finite() && v != 0.0 {
                        t[((v as f32).to_bits() >> 20) as usize] = (v, c);
                    }
                }
                t
            }
            _ => Vec::new(),
        };
        Codec { dt, table, fp8_cache: Default::default() }
    }

    pub fn encode_float(&self, v: f64, out: &mut [u8]) {
        match self.dt {
            DataType::Float32 => out[..4].copy_from_slice(&(v as f32).to_le_bytes()),
            DataType::Float64 => out[..8].copy_from_slice(&v.to_le_bytes()),
            DataType::Bfloat16 => {
                let bits = (v as f32).to_bits();
                let r = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
                out[..2].copy_from_slice(&(r as u16).to_le_bytes());
            }
            DataType::Float16 if v == 0.0 => out[..2].copy_from_slice(&(if v.is_sign_negative() { 0x8000u16 } else { 0 }).to_le_bytes()),
            DataType::Float16 => out[..2].copy_from_slice(&f16_encode(v).to_le_bytes()),
            DataType::Float8e4m3 | DataType::Float8e5m2 if v == 0.0 => out[0] = if v.is_sign_negative() { 0x80 } else { 0 },
            DataType::Float8e4m3 | DataType::Float8e5m2 => {
                let (x, c) = self.table[((v as f32).to_bits() >> 20) as usize];
                if x == v {
                    out[0] = c as u8;
                    return;
                }
                let e4m3 = self.dt == DataType::Float8e4m3;
                out[0] = *self
                    .fp8_cache
                    .borrow_mut()
                    .entry(v.to_bits())
                    .or_insert_with(|| encode_by_table(v, 256, |c| fp8_table()[usize::from(!e4m3)][c as usize]) as u8);
            }
            _ => unreachable!("not a floating type"),
        }
    }

    pub fn encode_int(&self, v: i128, out: &mut [u8]) {
        let bytes = (wrap_int(self.dt, v) as u128).to_le_bytes();
        out[..self.dt.size()].copy_from_slice(&bytes[..self.dt.size()]);
    }
}

/// One rank's logical input value for element `i` under `op`, `nranks` ranks.
pub fn input_value(dt: DataType, op: CheckOp, rank: usize, i: usize, seed: u64) -> Value {
    let mut r = Rng::new(seed ^ ((rank as u64) << 40) ^ (i as u64).wrapping_mul(0x5851_f42d_4c95_7f2d));
    let x = r.next();
    if dt.is_float() {
        let v = match op {
            // Products of up to 4 values in {1, 2} stay <= 16, exact even in fp8.
            CheckOp::Prod => (1 + x % 2) as f64,
            CheckOp::Max | CheckOp::Min => (x % 9) as f64 - 4.0,
            _ => (x % 3) as f64,
        };
        Value::F(v)
    } else {
        Value::I(wrap_int(dt, x as i64 as i128))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    F(f64),
    I(i128),
}

/// The reference reduction of `inputs` (rank order) under `op`.
pub fn reduce(dt: DataType, op: CheckOp, inputs: &[Value]) -> Value {
    let n = inputs.len();
    if dt.is_float() {
        let xs: Vec<f64> = inputs.iter().map(|v| if let Value::F(f) = v { *f } else { 0.0 }).collect();
        Value::F(match op {
            CheckOp::Sum => xs.iter().sum(),
            CheckOp::Prod => xs.iter().product(),
            CheckOp::Max => xs.iter().cloned().fold(f64::MIN, f64::max),
            CheckOp::Min => xs.iter().cloned().fold(f64::MAX, f64::min),
            CheckOp::Avg => xs.iter().sum::<f64>() / n as f64,
            CheckOp::PreMulHost | CheckOp::PreMulDevice => xs.iter().enumerate().map(|(r, x)| x * premul_scalar(r)).sum(),
        })
    } else {
        let xs: Vec<i128> = inputs.iter().map(|v| if let Value::I(i) = v { *i } else { 0 }).collect();
        let w = |v: i128| wrap_int(dt, v);
        Value::I(match op {
            CheckOp::Sum => xs.iter().fold(0, |a, x| w(a + x)),
            CheckOp::Prod => xs.iter().fold(1, |a, x| w(a.wrapping_mul(*x))),
            CheckOp::Max => *xs.iter().max().expect("ranks"),
            CheckOp::Min => *xs.iter().min().expect("ranks"),
            CheckOp::Avg => {
                let s = xs.iter().fold(0, |a, x| w(a + x));
                w(s / n as i128)
            }
            CheckOp::PreMulHost | CheckOp::PreMulDevice => {
                xs.iter().enumerate().fold(0, |a, (r, x)| w(a + w(x * premul_scalar(r) as i128)))
            }
        })
    }
}

/// Tolerance for floating average (inputs are pre-multiplied by a rounded 1/n in the datatype).
pub fn avg_tolerance(dt: DataType, n: usize, expect: f64) -> f64 {
    let eps = match dt {
        DataType::Float64 => 2.3e-16,
        DataType::Float32 => 1.2e-7,
        DataType::Float16 => 9.8e-4,
        DataType::Bfloat16 => 7.9e-3,
        DataType::Float8e4m3 => 0.125,
        _ => 0.25,
    };
    2.0 * (n as f64 + 1.0) * eps * expect.abs().max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_floats_round_trip_small_integers() {
        for dt in [DataType::Float16, DataType::Bfloat16, DataType::Float8e4m3, DataType::Float8e5m2] {
            let c = Codec::new(dt);
            for v in [-4.0, -1.0, 0.0, 1.0, 2.0, 3.0, 8.0, 16.0] {
                let mut b = [0u8; 2];
                c.encode_float(v, &mut b);
                assert_eq!(decode_float(dt, &b), v, "{dt:?} {v}");
                if v == 0.0 {
                    assert!(!decode_float(dt, &b).is_sign_negative(), "{dt:?}: 0.0 encodes as -0");
                }
            }
        }
    }

    /// The fp8 fast paths (decode table, exact-value lookup) agree with the nearest-code search
    /// on every code and on values between codes, ties included.
    #[test]
    fn fp8_encoding_matches_the_table_search() {
        for (dt, e4m3) in [(DataType::Float8e4m3, true), (DataType::Float8e5m2, false)] {
            let c = Codec::new(dt);
            let search = |v: f64| encode_by_table(v, 256, |k| fp8_decode(k as u8, e4m3)) as u8;
            for code in 0..=255u8 {
                let v = fp8_decode(code, e4m3);
                assert_eq!(decode_float(dt, &[code]).to_bits(), v.to_bits(), "{dt:?} decode {code:#x}");
                if !v.is_finite() {
                    continue;
                }
                for x in [v, v * 1.01, v * 0.99, v + 1e-3, (v + fp8_decode(code.wrapping_add(1), e4m3)) / 2.0] {
                    if !x.is_finite() {
                        continue;
                    }
                    let mut b = [0u8; 1];
                    c.encode_float(x, &mut b);
                    assert_eq!(b[0], search(x), "{dt:?} encode {x} (near code {code:#x})");
                }
            }
        }
    }

    /// fp16 by arithmetic agrees with a search of every finite code: on each code's value, just
    /// above and below it, at the midpoints to its neighbours (ties to the even code), and past
    /// the largest finite value (the largest finite value).
    #[test]
    fn fp16_encoding_is_the_nearest_code() {
        let finite: Vec<(f64, u16)> = (0..=u16::MAX).map(|c| (f16_decode(c), c)).filter(|(v, _)| v.is_finite()).collect();
        let nearest = |x: f64| {
            let best = finite.iter().map(|&(v, _)| (v - x).abs()).fold(f64::INFINITY, f64::min);
            let mut at: Vec<u16> = finite.iter().filter(|&&(v, _)| (v - x).abs() == best && v.is_sign_negative() == x.is_sign_negative()).map(|&(_, c)| c).collect();
            at.sort_unstable();
            *at.iter().find(|c| *c % 2 == 0).unwrap_or(&at[0])
        };
        let mut points = vec![65504.0, 65519.0, 65520.0, 1e9, -65530.0, 2f64.powi(-25), 3.0 * 2f64.powi(-26), -2f64.powi(-24)];
        for code in (0..0x7c00u16).step_by(37).chain([0x0001, 0x03ff, 0x0400, 0x3c00, 0x3bff, 0x7bfe]) {
            let (v, next) = (f16_decode(code), f16_decode(code + 1));
            points.extend([v, -v, (v + next) / 2.0, -(v + next) / 2.0, v + (next - v) / 4.0, next - (next - v) / 4.0]);
        }
        for x in points.into_iter().filter(|x| *x != 0.0) {
            assert_eq!(f16_encode(x), nearest(x), "{x}");
        }
    }

    #[test]
    fn integer_wrap() {
        assert_eq!(wrap_int(DataType::Int8, 200), -56);
        assert_eq!(wrap_int(DataType::Uint8, -1), 255);
        assert_eq!(reduce(DataType::Int8, CheckOp::Avg, &[Value::I(-7), Value::I(2)]), Value::I(-2));
        assert_eq!(reduce(DataType::Uint8, CheckOp::Sum, &[Value::I(200), Value::I(100)]), Value::I(44));
    }
}
