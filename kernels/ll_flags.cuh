// Per-block LL flags, kept and bumped on the device so that CUDA graph replays use fresh flags.
// Each block reads its own slot at start; at exit it writes the next value into every slot
// congruent to its index, so all OX_MAX_BLOCKS slots stay equal whatever grid the next launch has.
// Slot s is written only by block (s mod gridDim) of a launch, so blocks never race on a slot.
// The flag's parity picks the scratch half: a rank may run one call ahead of a peer without
// overwriting packets the peer is still reading.
#pragma once
#include "common.cuh"

OX_DEV uint32_t ox_ll_flag(const DevComm& c) {
  return reinterpret_cast<const uint32_t*>(c.ll_flags)[blockIdx.x];
}

// Next flag; skips 0 (fresh, zeroed scratch) on wrap-around and keeps the parity alternating.
OX_DEV uint32_t ox_ll_next_flag(uint32_t flag) { return flag + 1 == 0 ? 2u : flag + 1; }

OX_DEV void ox_ll_flag_advance(const DevComm& c, uint32_t flag) {
  __syncthreads();  // every thread of the block has read the flag before it changes
  if (threadIdx.x == 0) {
    uint32_t* f = reinterpret_cast<uint32_t*>(c.ll_flags);
    const uint32_t next = ox_ll_next_flag(flag);
    for (uint32_t s = blockIdx.x; s < OX_MAX_BLOCKS; s += gridDim.x) f[s] = next;
  }
}

OX_DEV uint64_t ox_ll_half_offset(const DevComm& c, uint32_t flag) { return (flag & 1u) * c.ll_half_bytes; }
