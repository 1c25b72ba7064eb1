// A message carried as LL128 lines (ll128.cuh) along the chain ... -> rank-1 -> rank -> rank+1 ->
// ..., from the chain's head (position 0) to its tail (position n-1), one launch per message. It
// serves Reduce (the chain ends at the root; each rank adds its input to what it forwards) and
// Broadcast (the chain starts at the root; each rank keeps a copy of what it forwards). The
// policy `P` says what a rank puts into a line and what it keeps of it (reduce_colls.cu,
// broadcast.cu); the driver owns the scratch, the rounds and the flags.
//
// The LL128 scratch half of the pair's flag parity is cut into two sub-buffers of Lb lines; the
// message's lines go in rounds of Lb, round r into sub-buffer r & 1, each line flagged
// (pair flag << 32) | r so no line of another round or launch (or a zeroed buffer) matches. Block
// b owns lines [b*P, (b+1)*P) of every round, the same on every rank (the host gives every rank
// the same grid), so a reader block consumes exactly what its writer block wrote.
// Scratch reuse: within the launch, block b writes round r >= 2 only after the successor's block
// b has read round r - 2 (a credit per round, relaxed: it orders no data, the reads it follows
// have returned their values, as NCCL's LL128 head updates); across launches, the one-way pair
// acknowledgement of ll_flags.cuh, as for packets. Only the predecessor (rank - 1) writes a
// rank's LL128 scratch, whatever the root and whichever collective, so the pairs' flags and
// acknowledgements are shared with every other one-way packet launch consistently.
// Executable model: scripts/model/reduce_ll128_model.py in git before 7bcb34d.
#pragma once
#include "common.cuh"
#include "ll128.cuh"
#include "ll_flags.cuh"
#include "memory_channel.cuh"

// Policy interface (every method is called by one lane for its 16 bytes of a line; `w` is the
// index of the lane's first 8-byte payload word in the message, `two` says whether it has a second
// one, w + 1: lanes 0-6 of a line have two, lane 7 has one and the flag):
//   void in(uint64_t w, bool two, uint64_t& x0, uint64_t& x1)   what this rank contributes
//                                                               (called on active lanes only)
//   void merge(bool two, uint64_t d0, uint64_t d1, uint64_t& x0, uint64_t& x1)
//                                                               what it makes of the
//                                                               predecessor's words d0/d1
//   void out(uint64_t w, bool two, uint64_t x0, uint64_t x1)    what it keeps (after forwarding)
template <typename P>
OX_DEV void ox_ll128_chain(const CollArgs& a, int pos, uint64_t nbytes, P& pol) {
  OX_KERNEL_PROLOGUE(a.comm);
  const int prev = (me + n - 1) % n, next = (me + 1) % n;
  const bool has_prev = pos > 0, has_next = pos < n - 1;
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ uint8_t pair[OX_MAX_RANKS], role[OX_MAX_RANKS];
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    // One-way both: lines come from prev (acknowledged) and go to next (pending).
    role[threadIdx.x] = ((int)threadIdx.x == prev && has_prev ? 2 : 0) | ((int)threadIdx.x == next && has_next ? 1 : 0);
    pair[threadIdx.x] = role[threadIdx.x] != 0;
  }
  ox_ll_flags_load(c, flags, ab);  // includes a __syncthreads
  ox_ll_oneway_mark(c, me, n, flags, role);
  const uint64_t words = ox_ceil_div(nbytes, 8);
  const uint64_t lines = ox_ceil_div(words, kLl128LineWords);
  const uint64_t sub_lines = c.ll128_half_bytes / 2 / kLl128LineBytes;
  const uint64_t sub_bytes = sub_lines * kLl128LineBytes;
  const uint64_t round_lines = ox_min(sub_lines, lines);
  const uint64_t rounds = round_lines ? ox_ceil_div(lines, round_lines) : 0;
  const uint64_t per = ox_ceil_div(round_lines, gridDim.x);  // lines of a round per block
  const uint64_t lo = (uint64_t)blockIdx.x * per;
  const char* from = reinterpret_cast<const char*>(c.ll_scratch[me] + c.ll128_off) + (flags[prev] & 1u) * c.ll128_half_bytes;
  char* to = reinterpret_cast<char*>(c.ll_scratch[next] + c.ll128_off) + (flags[next] & 1u) * c.ll128_half_bytes;
  const MemoryChannel up = ox_memory_channel(c, prev, blockIdx.x, 0, 0);    // signal: credit
  const MemoryChannel down = ox_memory_channel(c, next, blockIdx.x, 0, 0);  // wait: credit
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const uint32_t j = lane & 7;  // this lane's 16 bytes of its line
  const bool two = j < 7;
  for (uint64_t r = 0; r < rounds; ++r) {
    if (has_next && r >= 2) {
      if (threadIdx.x == 0) down.relaxed_wait(ab);  // the successor has read round r - 2
      __syncthreads();
    }
    const uint64_t first = r * round_lines;  // the round's first line of the message
    const uint64_t end = ox_min(lo + per, ox_min(round_lines, lines - first));
    const uint64_t buf = (r & 1) * sub_bytes;
    const uint64_t rflag_prev = ((uint64_t)flags[prev] << 32) | (uint32_t)r;
    const uint64_t rflag_next = ((uint64_t)flags[next] << 32) | (uint32_t)r;
    // Warp-uniform loop: 4 lines per warp per pass, lane group lane / 8 on line base + lane / 8.
    for (uint64_t base = lo + 4 * (uint64_t)warp; base < lo + per; base += 4 * (uint64_t)nwarps) {
      const uint64_t l = base + lane / 8;
      const bool active = l < end;
      const uint64_t w = (first + l) * kLl128LineWords + 2 * j;  // this lane's first payload word
      uint64_t x0 = 0, x1 = 0;
      if (active) pol.in(w, two, x0, x1);
      if (has_prev) {
        uint64_t d0 = 0, d1 = 0;
        ox_ll128_load(from + buf + l * kLl128LineBytes, lane, active, rflag_prev, d0, d1, ab);
        pol.merge(two, d0, d1, x0, x1);
      }
      __syncwarp();  // a line's 8 lanes store in one instruction (ll128.cuh)
      if (!active) continue;
      if (has_next) ox_ll128_store(to + buf + l * kLl128LineBytes, lane, x0, x1, rflag_next);
      pol.out(w, two, x0, x1);
    }
    if (has_prev && r + 2 < rounds) {
      __syncthreads();  // the block's reads of round r have returned
      if (threadIdx.x == 0) up.relaxed_signal();
    }
  }
  ox_ll_flags_advance(c, me, n, flags, pair);
}
