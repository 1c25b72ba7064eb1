// Block-wide copies between GPU memory and host-mapped (pinned) memory: the cross-host step
// kernel moves a small step's data through the step's host arena itself (net_step.cu,
// src/net/stage.rs), so the proxy needs no CUDA copy or stream synchronisation.
#pragma once

#include "common.cuh"

// Loads from host memory the proxy wrote use ld.global.cv (__ldcv): fetched anew, never a line a
// cache kept from before. The caller orders the proxy's writes before these loads (an acquire of
// the proxy's `done` counter by one thread, then a barrier). Loads from GPU memory are plain: it
// was written by earlier kernels of the stream.
template <bool FromHost>
OX_DEV uint4 ox_hc_load16(const uint4* p) {
  if (FromHost) return __ldcv(p);
  return *p;
}

template <bool FromHost>
OX_DEV uint8_t ox_hc_load1(const uint8_t* p) {
  if (FromHost) return *reinterpret_cast<const volatile uint8_t*>(p);
  return *p;
}

// Copies `bytes` from src to dst with every thread of the block (all must call it). 16-byte words
// where src and dst share their alignment modulo 16 (stage.rs places the host shadows so), bytes
// otherwise. Each thread issues four loads before its stores: a read across PCIe takes about a
// microsecond, and overlapping them is what makes a 64 KiB copy take a few.
template <bool FromHost>
OX_DEV void ox_host_copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  uint8_t* d = reinterpret_cast<uint8_t*>(dst);
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  const uint64_t t = threadIdx.x, nt = blockDim.x;
  const uint64_t head = ((dst ^ src) & 15) == 0 ? ox_min((16 - (dst & 15)) & 15, bytes) : bytes;
  for (uint64_t i = t; i < head; i += nt) d[i] = ox_hc_load1<FromHost>(s + i);
  const uint64_t nvec = (bytes - head) / 16;
  const uint4* vs = reinterpret_cast<const uint4*>(s + head);
  uint4* vd = reinterpret_cast<uint4*>(d + head);
  constexpr uint64_t U = 4;
  uint64_t i = t;
  for (; i + (U - 1) * nt < nvec; i += U * nt) {
    uint4 v[U];
#pragma unroll
    for (uint64_t u = 0; u < U; ++u) v[u] = ox_hc_load16<FromHost>(vs + i + u * nt);
#pragma unroll
    for (uint64_t u = 0; u < U; ++u) vd[i + u * nt] = v[u];
  }
  for (; i < nvec; i += nt) vd[i] = ox_hc_load16<FromHost>(vs + i);
  for (uint64_t j = head + nvec * 16 + t; j < bytes; j += nt) d[j] = ox_hc_load1<FromHost>(s + j);
}
