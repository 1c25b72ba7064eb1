// LL packets: data and a flag written together, so a reader knows the data is there by looking at
// the flag alone; no fence, no separate signal. The flag is the call's sequence number, so stale
// packets from earlier calls (and the zeros of a fresh buffer) never match.
//
// LL16: {data0, flag, data1, flag}, one 16-byte volatile store. Aligned 8-byte words are never
// torn by the memory system or NVLink, so each (data, flag) pair arrives whole; a reader that sees
// the flag in both pairs has both data words. 8 payload bytes per 16.
// LL8: {data, flag}, one 8-byte volatile store; 4 payload bytes per 8.
#pragma once
#include "abort.cuh"

OX_DEV void ox_ll16_write(void* dst, uint64_t val, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(dst), "r"((uint32_t)val), "r"(flag),
               "r"((uint32_t)(val >> 32)), "r"(flag)
               : "memory");
}

OX_DEV bool ox_ll16_poll(const void* src, uint32_t flag, uint64_t& out) {
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(src)
               : "memory");
  out = (uint64_t)d0 | ((uint64_t)d1 << 32);
  return f0 == flag && f1 == flag;
}

// Spins until the packet carries `flag`. Returns 0 if the communicator was aborted.
OX_DEV uint64_t ox_ll16_read(const void* src, uint32_t flag, AbortState& ab) {
  uint64_t v;
  while (!ox_ll16_poll(src, flag, v)) {
    if (ab.poll()) return 0;
  }
  return v;
}

OX_DEV void ox_ll8_write(void* dst, uint32_t val, uint32_t flag) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(dst), "r"(val), "r"(flag) : "memory");
}

OX_DEV bool ox_ll8_poll(const void* src, uint32_t flag, uint32_t& out) {
  uint32_t d, f;
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(d), "=r"(f) : "l"(src) : "memory");
  out = d;
  return f == flag;
}

OX_DEV uint32_t ox_ll8_read(const void* src, uint32_t flag, AbortState& ab) {
  uint32_t v;
  while (!ox_ll8_poll(src, flag, v)) {
    if (ab.poll()) return 0;
  }
  return v;
}
