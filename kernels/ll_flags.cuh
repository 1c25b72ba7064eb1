// LL flags, one per (block, peer), kept and bumped on the device so CUDA graph replays use fresh
// flags. The flag a pair of ranks uses advances once per launch in which that pair exchanges
// packets, on both sides, so the two counters stay equal even when other ranks take part in fewer
// launches (point-to-point).
//
// Each block reads its own slots at start; at exit, for every peer it exchanged with, it writes the
// next value into every slot congruent to its index, so all OX_MAX_BLOCKS slots of that peer stay
// equal whatever grid the next launch has. Slot (s, p) is written only by block (s mod gridDim) of a
// launch, so blocks never race on a slot. The flag's parity picks the scratch half: a rank may run
// one launch ahead of a peer without overwriting packets the peer is still reading.
#pragma once
#include "common.cuh"

OX_DEV uint32_t* ox_ll_flag_ptr(const DevComm& c, uint32_t block, int peer) {
  return reinterpret_cast<uint32_t*>(c.ll_flags) + (uint64_t)block * OX_MAX_RANKS + (uint64_t)peer;
}

// Next flag; skips 0 (fresh, zeroed scratch) on wrap-around and keeps the parity alternating.
OX_DEV uint32_t ox_ll_next_flag(uint32_t flag) { return flag + 1 == 0 ? 2u : flag + 1; }

// Loads this block's flag for every peer into shared memory (thread p loads peer p).
OX_DEV void ox_ll_flags_load(const DevComm& c, uint32_t* flags) {
  if ((int)threadIdx.x < c.nranks) flags[threadIdx.x] = *ox_ll_flag_ptr(c, blockIdx.x, (int)threadIdx.x);
  __syncthreads();
}

// Byte offset of the half of a scratch slot that packets carrying `flag` use.
OX_DEV uint64_t ox_ll_half_offset(const DevComm& c, uint32_t flag) { return (flag & 1u) * c.ll_half_bytes; }

// Advances the flags of every peer p with active[p] != 0 (thread p handles peer p).
OX_DEV void ox_ll_flags_advance(const DevComm& c, const uint32_t* flags, const uint8_t* active) {
  __syncthreads();  // every thread of the block has used the flags before they change
  const int p = (int)threadIdx.x;
  if (p < c.nranks && p != c.rank && active[p]) {
    const uint32_t next = ox_ll_next_flag(flags[p]);
    for (uint32_t s = blockIdx.x; s < OX_MAX_BLOCKS; s += gridDim.x) *ox_ll_flag_ptr(c, s, p) = next;
  }
}

// Advances the flags of every peer (collectives where all pairs exchange).
OX_DEV void ox_ll_flags_advance_all(const DevComm& c, const uint32_t* flags) {
  __syncthreads();
  const int p = (int)threadIdx.x;
  if (p < c.nranks && p != c.rank) {
    const uint32_t next = ox_ll_next_flag(flags[p]);
    for (uint32_t s = blockIdx.x; s < OX_MAX_BLOCKS; s += gridDim.x) *ox_ll_flag_ptr(c, s, p) = next;
  }
}
