// Copies out of a staged cross-host step that combine on the way (src/net/stage.rs, "Combined on
// the GPU"): dst[i] = with[i] (op) src[i], `src` in the step's host-mapped arena (what a receive
// brought), `with` and `dst` in GPU memory (the same range, or disjoint ones). The proxy then
// neither copies `with` into host memory nor combines on the CPU.
//
// Ordering: as host_copy.cuh's copies out. The loads from the arena use ld.global.cv after the
// caller's acquire of the proxy's `done` or chunk flag (and a barrier); `with` is read with plain
// loads (written by earlier kernels of the stream, or by nothing in this step: stage.rs refuses a
// step that writes it elsewhere). Each element of `with` is read and its result written by the
// same thread, so an in-place combine (with == dst) needs no barrier between them.
#pragma once

#include <string.h>
#include "common.cuh"
#include "host_copy.cuh"
#include "reduce.cuh"

template <typename T>
OX_DEV T ox_nc_op(uint32_t op, T a, T b) {
  switch (op) {
    case OX_NET_COMBINE_SUM: return Arith<T>::add(a, b);
    case OX_NET_COMBINE_PROD: return Arith<T>::mul(a, b);
    case OX_NET_COMBINE_MAX: return Arith<T>::max(a, b);
    default: return Arith<T>::min(a, b);
  }
}

// One 16-byte word of elements: w (op) h, element by element.
template <typename T>
OX_DEV uint4 ox_nc_word(uint32_t op, uint4 w, uint4 h) {
  constexpr int N = 16 / sizeof(T);
  T a[N], b[N];
  memcpy(a, &w, 16);
  memcpy(b, &h, 16);
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = ox_nc_op<T>(op, a[i], b[i]);
  memcpy(&w, a, 16);
  return w;
}

// One element at any alignment (the head and tail of a range, or a range not aligned to T).
template <typename T>
OX_DEV void ox_nc_elem(uint32_t op, uint8_t* d, const uint8_t* w, const uint8_t* s) {
  uint8_t hb[sizeof(T)];
#pragma unroll
  for (int k = 0; k < (int)sizeof(T); ++k) hb[k] = ox_hc_load1<true>(s + k);
  T a, b;
  memcpy(&a, w, sizeof(T));
  memcpy(&b, hb, sizeof(T));
  a = ox_nc_op<T>(op, a, b);
  memcpy(d, &a, sizeof(T));
}

// Every thread of the block calls it. `bytes` is a whole number of elements; where dst, with and
// src share their alignment modulo 16 (stage.rs), 16-byte words line up across the three.
template <typename T>
OX_DEV void ox_nc_copy(uint32_t op, uint64_t dst, uint64_t src, uint64_t with, uint64_t bytes) {
  uint8_t* d = reinterpret_cast<uint8_t*>(dst);
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  const uint8_t* w = reinterpret_cast<const uint8_t*>(with);
  const uint64_t t = threadIdx.x, nt = blockDim.x, es = sizeof(T);
  // The head is cut from dst, so 16-byte words need src and with at dst's alignment modulo 16
  // (stage.rs places them so; checked here rather than trusted). A range not aligned to its
  // type never lines its elements up with 16-byte words. Otherwise: all by element.
  const bool words = ((dst ^ src) & 15) == 0 && ((dst ^ with) & 15) == 0 && (dst % es) == 0;
  const uint64_t head = !words ? bytes : ox_min((16 - (dst & 15)) & 15, bytes);
  for (uint64_t i = t; i < head / es; i += nt) ox_nc_elem<T>(op, d + i * es, w + i * es, s + i * es);
  const uint64_t nvec = (bytes - head) / 16;
  const uint4* vs = reinterpret_cast<const uint4*>(s + head);
  const uint4* vw = reinterpret_cast<const uint4*>(w + head);
  uint4* vd = reinterpret_cast<uint4*>(d + head);
  // Four arena loads in flight per thread before the stores, as ox_host_copy (PCIe latency).
  constexpr uint64_t U = 4;
  uint64_t i = t;
  for (; i + (U - 1) * nt < nvec; i += U * nt) {
    uint4 h[U], g[U];
#pragma unroll
    for (uint64_t u = 0; u < U; ++u) h[u] = ox_hc_load16<true>(vs + i + u * nt);
#pragma unroll
    for (uint64_t u = 0; u < U; ++u) g[u] = vw[i + u * nt];
#pragma unroll
    for (uint64_t u = 0; u < U; ++u) vd[i + u * nt] = ox_nc_word<T>(op, g[u], h[u]);
  }
  for (; i < nvec; i += nt) vd[i] = ox_nc_word<T>(op, vw[i], ox_hc_load16<true>(vs + i));
  const uint64_t tail = head + nvec * 16;
  for (uint64_t j = t; j < (bytes - tail) / es; j += nt) ox_nc_elem<T>(op, d + tail + j * es, w + tail + j * es, s + tail + j * es);
}

// `code`: NetStepArgs::combine (1 + ncclDataType_t + 16 * OX_NET_COMBINE_*), nonzero here.
// Not inlined: two call sites in the step kernel would each take all twelve types.
__device__ __noinline__ void ox_net_combine_copy(uint32_t code, uint64_t dst, uint64_t src, uint64_t with, uint64_t bytes) {
  const uint32_t dt = (code - 1) & 15, op = (code - 1) >> 4;
  switch (dt) {
    case 0: ox_nc_copy<int8_t>(op, dst, src, with, bytes); break;
    case 1: ox_nc_copy<uint8_t>(op, dst, src, with, bytes); break;
    case 2: ox_nc_copy<int32_t>(op, dst, src, with, bytes); break;
    case 3: ox_nc_copy<uint32_t>(op, dst, src, with, bytes); break;
    case 4: ox_nc_copy<int64_t>(op, dst, src, with, bytes); break;
    case 5: ox_nc_copy<uint64_t>(op, dst, src, with, bytes); break;
    case 6: ox_nc_copy<__half>(op, dst, src, with, bytes); break;
    case 7: ox_nc_copy<float>(op, dst, src, with, bytes); break;
    case 8: ox_nc_copy<double>(op, dst, src, with, bytes); break;
    case 9: ox_nc_copy<__nv_bfloat16>(op, dst, src, with, bytes); break;
    case 10: ox_nc_copy<__nv_fp8_e4m3>(op, dst, src, with, bytes); break;
    default: ox_nc_copy<__nv_fp8_e5m2>(op, dst, src, with, bytes); break;
  }
}
