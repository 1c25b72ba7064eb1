// Loads, stores and block-cooperative copies that respect alignment and buffer ends. User buffers
// may start at any element-aligned address and hold any number of elements; reads and writes
// never leave [base, base + nbytes).
#pragma once
#include "common.cuh"

// Loads the 8 bytes at byte offset `off` (a multiple of 8) of a buffer of `nbytes`. Bytes past the
// end read as zero. Uses the widest access the buffer's alignment allows.
OX_DEV uint64_t ox_load8(const char* base, uint64_t off, uint64_t nbytes) {
  const char* p = base + off;
  if (off + 8 <= nbytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if ((a & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
    if ((a & 3) == 0) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
      return (uint64_t)q[0] | ((uint64_t)q[1] << 32);
    }
    if ((a & 1) == 0) {
      const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
      return (uint64_t)q[0] | ((uint64_t)q[1] << 16) | ((uint64_t)q[2] << 32) | ((uint64_t)q[3] << 48);
    }
  }
  uint64_t v = 0;
  for (int i = 0; i < 8 && off + i < nbytes; ++i) v |= (uint64_t)(uint8_t)p[i] << (8 * i);
  return v;
}

// Stores the valid bytes of an 8-byte pack at `off` (a multiple of 8); nothing past `nbytes`.
OX_DEV void ox_store8(char* base, uint64_t off, uint64_t nbytes, uint64_t v) {
  char* p = base + off;
  if (off + 8 <= nbytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if ((a & 7) == 0) {
      *reinterpret_cast<uint64_t*>(p) = v;
      return;
    }
    if ((a & 3) == 0) {
      uint32_t* q = reinterpret_cast<uint32_t*>(p);
      q[0] = (uint32_t)v;
      q[1] = (uint32_t)(v >> 32);
      return;
    }
    if ((a & 1) == 0) {
      uint16_t* q = reinterpret_cast<uint16_t*>(p);
      q[0] = (uint16_t)v;
      q[1] = (uint16_t)(v >> 16);
      q[2] = (uint16_t)(v >> 32);
      q[3] = (uint16_t)(v >> 48);
      return;
    }
  }
  for (int i = 0; i < 8 && off + i < nbytes; ++i) p[i] = (char)(uint8_t)(v >> (8 * i));
}

// L2-only 16-byte load, for scratch that peers write: never served from a possibly stale L1 line.
OX_DEV uint4 ox_ldcg16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }

// Copies `nbytes` with threads [tid, tid + nthreads) cooperating. Plain accesses: ordering comes
// from a later semaphore signal. `peer_src` makes reads bypass L1 (source written by a peer).
OX_DEV void ox_copy(char* dst, const char* src, uint64_t nbytes, uint32_t tid, uint32_t nthreads, bool peer_src) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    const uint64_t words = nbytes / 16;
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint64_t w = tid;
    // Four independent 16-byte loads in flight per thread before the first store.
    for (; w + 3 * (uint64_t)nthreads < words; w += 4 * (uint64_t)nthreads) {
      uint4 v0, v1, v2, v3;
      if (peer_src) {
        v0 = ox_ldcg16(s + w);
        v1 = ox_ldcg16(s + w + nthreads);
        v2 = ox_ldcg16(s + w + 2 * (uint64_t)nthreads);
        v3 = ox_ldcg16(s + w + 3 * (uint64_t)nthreads);
      } else {
        v0 = s[w];
        v1 = s[w + nthreads];
        v2 = s[w + 2 * (uint64_t)nthreads];
        v3 = s[w + 3 * (uint64_t)nthreads];
      }
      d[w] = v0;
      d[w + nthreads] = v1;
      d[w + 2 * (uint64_t)nthreads] = v2;
      d[w + 3 * (uint64_t)nthreads] = v3;
    }
    for (; w < words; w += nthreads) d[w] = peer_src ? ox_ldcg16(s + w) : s[w];
    done = words * 16;
  } else if ((mis & 7) == 0) {
    const uint64_t words = nbytes / 8;
    for (uint64_t w = tid; w < words; w += nthreads)
      reinterpret_cast<uint64_t*>(dst)[w] = peer_src ? __ldcg(reinterpret_cast<const unsigned long long*>(src) + w)
                                                     : reinterpret_cast<const uint64_t*>(src)[w];
    done = words * 8;
  } else if ((mis & 3) == 0) {
    const uint64_t words = nbytes / 4;
    for (uint64_t w = tid; w < words; w += nthreads)
      reinterpret_cast<uint32_t*>(dst)[w] = peer_src ? __ldcg(reinterpret_cast<const unsigned int*>(src) + w)
                                                     : reinterpret_cast<const uint32_t*>(src)[w];
    done = words * 4;
  }
  for (uint64_t i = done + tid; i < nbytes; i += nthreads) dst[i] = peer_src ? __ldcg(src + i) : src[i];
}
