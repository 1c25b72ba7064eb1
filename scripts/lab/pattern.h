// Shared by the bandwidth labs (oneway_lab, egress_lab): the 16-byte copy loop their SM cases
// time, and the checked pattern every case moves.
#pragma once
#include <cstddef>
#include <cstdint>

// Words i, i + stride, ... of n: four loads in flight per thread before the stores, since a peer
// access has a long latency.
__device__ __forceinline__ void copy16_strided(const int4* __restrict__ src, int4* __restrict__ dst, size_t n, size_t i,
                                               size_t stride) {
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void fill(uint32_t* p, size_t n, uint32_t salt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint32_t)(i * 2654435761u) ^ salt;
}

// Adds to *bad the words of p that differ from what `fill` wrote with `salt`.
__global__ void count_bad(const uint32_t* p, size_t n, uint32_t salt, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    b += p[i] != ((uint32_t)(i * 2654435761u) ^ salt);
  if (b) atomicAdd(bad, b);
}
