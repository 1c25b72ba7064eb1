// Reduction operators on single elements and on packed words.
//
// An op is applied as: pre(x) on every input as it enters the reduction, combine(a, b) to
// accumulate, post(acc) once on the result. Sum/prod/max/min have identity pre/post. Avg on
// floating types pre-multiplies each input by 1/nranks (computed in float; double for double, as
// NCCL does); avg on integers sums with wrap-around and divides once, truncating toward zero.
#pragma once
#include "common.cuh"

// ---- per-type arithmetic -------------------------------------------------------------------
// Integer add/mul go through the unsigned type: wrap-around is defined there, not for signed.
template <typename T, typename U>
struct IntArith {
  static OX_DEV T add(T a, T b) { return (T)(U)((U)a + (U)b); }
  static OX_DEV T mul(T a, T b) { return (T)(U)((U)a * (U)b); }
  static OX_DEV T max(T a, T b) { return a > b ? a : b; }
  static OX_DEV T min(T a, T b) { return a < b ? a : b; }
};

template <typename T> struct Arith;
template <> struct Arith<int8_t> : IntArith<int8_t, uint32_t> {};
template <> struct Arith<uint8_t> : IntArith<uint8_t, uint32_t> {};
template <> struct Arith<int32_t> : IntArith<int32_t, uint32_t> {};
template <> struct Arith<uint32_t> : IntArith<uint32_t, uint32_t> {};
template <> struct Arith<int64_t> : IntArith<int64_t, uint64_t> {};
template <> struct Arith<uint64_t> : IntArith<uint64_t, uint64_t> {};

template <> struct Arith<float> {
  static OX_DEV float add(float a, float b) { return a + b; }
  static OX_DEV float mul(float a, float b) { return a * b; }
  static OX_DEV float max(float a, float b) { return fmaxf(a, b); }
  static OX_DEV float min(float a, float b) { return fminf(a, b); }
  static OX_DEV float scale_of(float s) { return s; }
};
template <> struct Arith<double> {
  static OX_DEV double add(double a, double b) { return a + b; }
  static OX_DEV double mul(double a, double b) { return a * b; }
  static OX_DEV double max(double a, double b) { return fmax(a, b); }
  static OX_DEV double min(double a, double b) { return fmin(a, b); }
};
template <> struct Arith<__half> {
  static OX_DEV __half add(__half a, __half b) { return __hadd(a, b); }
  static OX_DEV __half mul(__half a, __half b) { return __hmul(a, b); }
  static OX_DEV __half max(__half a, __half b) { return __hmax(a, b); }
  static OX_DEV __half min(__half a, __half b) { return __hmin(a, b); }
  static OX_DEV __half scale_of(float s) { return __float2half(s); }
};
template <> struct Arith<__nv_bfloat16> {
  static OX_DEV __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
  static OX_DEV __nv_bfloat16 mul(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul(a, b); }
  static OX_DEV __nv_bfloat16 max(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
  static OX_DEV __nv_bfloat16 min(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
  static OX_DEV __nv_bfloat16 scale_of(float s) { return __float2bfloat16(s); }
};
// FP8 arithmetic goes through half, as NCCL's does: exact widening, one rounding back (saturating
// to the finite range).
template <typename F8>
struct Fp8Arith {
  static OX_DEV F8 add(F8 a, F8 b) { return F8(__hadd(__half(a), __half(b))); }
  static OX_DEV F8 mul(F8 a, F8 b) { return F8(__hmul(__half(a), __half(b))); }
  static OX_DEV F8 max(F8 a, F8 b) { return F8(__hmax(__half(a), __half(b))); }
  static OX_DEV F8 min(F8 a, F8 b) { return F8(__hmin(__half(a), __half(b))); }
};
template <> struct Arith<__nv_fp8_e4m3> : Fp8Arith<__nv_fp8_e4m3> {};
template <> struct Arith<__nv_fp8_e5m2> : Fp8Arith<__nv_fp8_e5m2> {};

// ---- operators -----------------------------------------------------------------------------
template <typename T>
struct OpSum {
  OX_DEV OpSum(const CollArgs&, int) {}
  OX_DEV T pre(T x) const { return x; }
  OX_DEV T combine(T a, T b) const { return Arith<T>::add(a, b); }
  OX_DEV T post(T x) const { return x; }
};
template <typename T>
struct OpProd {
  OX_DEV OpProd(const CollArgs&, int) {}
  OX_DEV T pre(T x) const { return x; }
  OX_DEV T combine(T a, T b) const { return Arith<T>::mul(a, b); }
  OX_DEV T post(T x) const { return x; }
};
template <typename T>
struct OpMax {
  OX_DEV OpMax(const CollArgs&, int) {}
  OX_DEV T pre(T x) const { return x; }
  OX_DEV T combine(T a, T b) const { return Arith<T>::max(a, b); }
  OX_DEV T post(T x) const { return x; }
};
template <typename T>
struct OpMin {
  OX_DEV OpMin(const CollArgs&, int) {}
  OX_DEV T pre(T x) const { return x; }
  OX_DEV T combine(T a, T b) const { return Arith<T>::min(a, b); }
  OX_DEV T post(T x) const { return x; }
};

// Integer average: wrap-around sum, then C division (truncating toward zero).
template <typename T>
struct OpAvgInt {
  T n;
  OX_DEV OpAvgInt(const CollArgs&, int nranks) : n((T)nranks) {}
  OX_DEV T pre(T x) const { return x; }
  OX_DEV T combine(T a, T b) const { return Arith<T>::add(a, b); }
  OX_DEV T post(T x) const { return (T)(x / n); }
};
template <typename T> struct OpAvg;
template <> struct OpAvg<int8_t> : OpAvgInt<int8_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<uint8_t> : OpAvgInt<uint8_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<int32_t> : OpAvgInt<int32_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<uint32_t> : OpAvgInt<uint32_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<int64_t> : OpAvgInt<int64_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<uint64_t> : OpAvgInt<uint64_t> { using OpAvgInt::OpAvgInt; };
template <> struct OpAvg<float> {
  float s;
  OX_DEV OpAvg(const CollArgs&, int nranks) : s(1.0f / (float)nranks) {}
  OX_DEV float pre(float x) const { return x * s; }
  OX_DEV float combine(float a, float b) const { return a + b; }
  OX_DEV float post(float x) const { return x; }
};
template <> struct OpAvg<double> {
  double s;
  OX_DEV OpAvg(const CollArgs&, int nranks) : s(1.0 / (double)nranks) {}
  OX_DEV double pre(double x) const { return x * s; }
  OX_DEV double combine(double a, double b) const { return a + b; }
  OX_DEV double post(double x) const { return x; }
};
template <typename H>
struct OpAvgHalfLike {
  H s;
  OX_DEV OpAvgHalfLike(const CollArgs&, int nranks) : s(Arith<H>::scale_of(1.0f / (float)nranks)) {}
  OX_DEV H pre(H x) const { return Arith<H>::mul(x, s); }
  OX_DEV H combine(H a, H b) const { return Arith<H>::add(a, b); }
  OX_DEV H post(H x) const { return x; }
};
template <> struct OpAvg<__half> : OpAvgHalfLike<__half> { using OpAvgHalfLike::OpAvgHalfLike; };
template <> struct OpAvg<__nv_bfloat16> : OpAvgHalfLike<__nv_bfloat16> { using OpAvgHalfLike::OpAvgHalfLike; };
template <typename F8>
struct OpAvgFp8 {
  __half s;
  OX_DEV OpAvgFp8(const CollArgs&, int nranks) : s(__float2half(1.0f / (float)nranks)) {}
  OX_DEV F8 pre(F8 x) const { return F8(__hmul(__half(x), s)); }
  OX_DEV F8 combine(F8 a, F8 b) const { return Arith<F8>::add(a, b); }
  OX_DEV F8 post(F8 x) const { return x; }
};
template <> struct OpAvg<__nv_fp8_e4m3> : OpAvgFp8<__nv_fp8_e4m3> { using OpAvgFp8::OpAvgFp8; };
template <> struct OpAvg<__nv_fp8_e5m2> : OpAvgFp8<__nv_fp8_e5m2> { using OpAvgFp8::OpAvgFp8; };

// PreMulSum: every input multiplied by a user scalar of the datatype, then summed. The scalar is
// either in the kernel arguments (host-immediate, copied when the op was created) or read from
// device memory while the kernel runs (ncclScalarDevice).
template <typename T>
struct OpPreMulSum {
  T s;
  OX_DEV OpPreMulSum(const CollArgs& a, int) {
    if (a.scalar_ptr) {
      s = *reinterpret_cast<const T*>(a.scalar_ptr);
    } else {
      memcpy(&s, &a.scalar, sizeof(T));
    }
  }
  OX_DEV T pre(T x) const { return Arith<T>::mul(x, s); }
  OX_DEV T combine(T a, T b) const { return Arith<T>::add(a, b); }
  OX_DEV T post(T x) const { return x; }
};

// ---- packed words --------------------------------------------------------------------------
// A pack (uint64_t or uint4) seen as sizeof(P)/sizeof(T) elements of T.
template <typename T, typename P>
struct Lanes {
  static constexpr int N = sizeof(P) / sizeof(T);
  T v[N];
};

template <typename T, typename P>
OX_DEV Lanes<T, P> ox_unpack(const P& p) {
  Lanes<T, P> l;
  memcpy(&l, &p, sizeof(P));
  return l;
}
template <typename T, typename P>
OX_DEV P ox_pack(const Lanes<T, P>& l) {
  P p;
  memcpy(&p, &l, sizeof(P));
  return p;
}

template <typename T, typename Op, typename P>
OX_DEV P ox_pre(const Op& op, const P& x) {
  Lanes<T, P> l = ox_unpack<T>(x);
#pragma unroll
  for (int i = 0; i < Lanes<T, P>::N; ++i) l.v[i] = op.pre(l.v[i]);
  return ox_pack<T>(l);
}
template <typename T, typename Op, typename P>
OX_DEV P ox_combine(const Op& op, const P& a, const P& b) {
  Lanes<T, P> la = ox_unpack<T>(a);
  const Lanes<T, P> lb = ox_unpack<T>(b);
#pragma unroll
  for (int i = 0; i < Lanes<T, P>::N; ++i) la.v[i] = op.combine(la.v[i], lb.v[i]);
  return ox_pack<T>(la);
}
template <typename T, typename Op, typename P>
OX_DEV P ox_post(const Op& op, const P& x) {
  Lanes<T, P> l = ox_unpack<T>(x);
#pragma unroll
  for (int i = 0; i < Lanes<T, P>::N; ++i) l.v[i] = op.post(l.v[i]);
  return ox_pack<T>(l);
}

// Copies `n` elements with pre() applied (block-cooperative). For ops whose pre() is the identity
// the compiler reduces this to a plain vectorised copy.
template <typename T, typename Op>
OX_DEV void ox_copy_pre(const Op& op, T* dst, const T* src, uint64_t n, uint32_t tid, uint32_t nthreads) {
  uint64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint64_t words = n * sizeof(T) / 16;
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint64_t w = tid;
    // Four independent 16-byte loads in flight per thread before the first store.
    for (; w + 3 * (uint64_t)nthreads < words; w += 4 * (uint64_t)nthreads) {
      const uint4 v0 = s[w], v1 = s[w + nthreads], v2 = s[w + 2 * (uint64_t)nthreads], v3 = s[w + 3 * (uint64_t)nthreads];
      d[w] = ox_pre<T>(op, v0);
      d[w + nthreads] = ox_pre<T>(op, v1);
      d[w + 2 * (uint64_t)nthreads] = ox_pre<T>(op, v2);
      d[w + 3 * (uint64_t)nthreads] = ox_pre<T>(op, v3);
    }
    for (; w < words; w += nthreads) d[w] = ox_pre<T>(op, s[w]);
    done = words * 16 / sizeof(T);
  }
  for (uint64_t e = done + tid; e < n; e += nthreads) dst[e] = op.pre(src[e]);
}

// One step of a chain reduction (block-cooperative): dst[e] = post?(part[e] (+) pre(in[e])) for
// `n` elements, `part` (the predecessor's partial result, in this rank's put scratch, 16-byte
// aligned) may be null at the chain's head, post() is applied only at its end (`last`). Partials
// come first so the result is the chain-order reduction. Four independent 16-byte loads of each
// input are in flight per thread before the first store.
template <typename T, typename Op>
OX_DEV void ox_chain_step(const Op& op, const T* in, const T* part, T* dst, uint64_t n, bool last, uint32_t tid, uint32_t nthreads) {
  uint64_t done = 0;
  // The width comes from every address the loop touches: `part` too, whatever the caller's layout.
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(part)) & 15) == 0) {
    const uint64_t words = n * sizeof(T) / 16;
    const uint4* s = reinterpret_cast<const uint4*>(in);
    const char* q = reinterpret_cast<const char*>(part);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint64_t w = tid;
    for (; w + 3 * (uint64_t)nthreads < words; w += 4 * (uint64_t)nthreads) {
      uint4 v[4], x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = s[w + u * (uint64_t)nthreads];
      if (part) {
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = ox_ldcg16(q + (w + u * (uint64_t)nthreads) * 16);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint4 r = ox_pre<T>(op, v[u]);
        if (part) r = ox_combine<T>(op, x[u], r);
        if (last) r = ox_post<T>(op, r);
        d[w + u * (uint64_t)nthreads] = r;
      }
    }
    for (; w < words; w += nthreads) {
      uint4 r = ox_pre<T>(op, s[w]);
      if (part) r = ox_combine<T>(op, ox_ldcg16(q + w * 16), r);
      if (last) r = ox_post<T>(op, r);
      d[w] = r;
    }
    done = words * 16 / sizeof(T);
  }
  for (uint64_t e = done + tid; e < n; e += nthreads) {
    T r = op.pre(in[e]);
    if (part) r = op.combine(part[e], r);
    if (last) r = op.post(r);
    dst[e] = r;
  }
}
