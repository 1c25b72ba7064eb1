// Memory-ordering building blocks at system scope. Peers on other GPUs (and the host proxy) are
// outside the GPU scope, so every cross-device synchronisation below uses .sys.
#pragma once
#include "common.cuh"

// Acquire load: reads by this thread after it see every write the releasing writer made before its
// release (cumulative: including writes of its block that its __syncthreads ordered before it).
// An acquire also invalidates this SM's L1, so the block's later plain loads cannot hit stale lines.
OX_DEV uint64_t ox_ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Relaxed load: only the value is guaranteed fresh; no ordering of other accesses.
OX_DEV uint64_t ox_ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Release add: every write this thread observed before it (its block's, after a __syncthreads)
// is visible to a reader that acquires the new value. One instruction, no return value needed.
OX_DEV void ox_red_release_sys_add(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed add: execution control only; orders nothing else.
OX_DEV void ox_red_relaxed_sys_add(uint64_t* p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Volatile 32-bit load, for host-mapped flags the host writes at any time.
OX_DEV uint32_t ox_ld_volatile_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// 32-bit acquire load at system scope (LL acknowledgements written by a peer).
OX_DEV uint32_t ox_ld_acquire_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// 32-bit acquire load at GPU scope (a word another kernel on this GPU releases): this thread's
// later reads, and its block's after a __syncthreads, see what the releaser's block wrote before.
OX_DEV uint32_t ox_ld_acquire_gpu_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// 32-bit release store at GPU scope: every write this thread observed before it (its block's,
// after a __syncthreads) is visible to a kernel on this GPU that acquires the value.
OX_DEV void ox_st_release_gpu_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// 32-bit relaxed store at GPU scope: the value alone is the message, to this GPU's kernels.
OX_DEV void ox_st_relaxed_gpu_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// 32-bit relaxed store at system scope: the value alone is the message.
OX_DEV void ox_st_relaxed_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// 32-bit release store at system scope: every write this thread observed before it (its block's,
// after a __syncthreads) is visible to a reader that acquires the value (the host proxy's flags).
OX_DEV void ox_st_release_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
