// Shared by the two-GPU bandwidth labs (oneway_lab, reduce_lab): setting up the GPU pair, and the
// flag load their kernels poll with.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lab.h"

// Acquire at system scope: what the writer (a peer GPU's kernel, or a copy engine followed by a
// stream write) made visible before its flag is visible to this thread after the load.
__device__ __forceinline__ uint32_t ld_acq_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Peer access both ways between GPUs 0 and 1 and 8 non-blocking streams on each. Returns the
// buffer size in bytes (argv[1] MiB, default 512), or 0 (after saying why) with fewer than 2 GPUs.
static size_t pair_setup(const char* prog, int argc, char** argv, std::vector<cudaStream_t>& st0,
                         std::vector<cudaStream_t>& st1) {
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (have < 2) {
    printf("%s: needs 2 GPUs, %d present\n", prog, have);
    return 0;
  }
  st0.resize(8);
  st1.resize(8);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    for (int s = 0; s < 8; ++s) CK(cudaStreamCreateWithFlags(d == 0 ? &st0[s] : &st1[s], cudaStreamNonBlocking));
  }
  return (size_t)(argc > 1 ? atoi(argv[1]) : 512) << 20;
}
