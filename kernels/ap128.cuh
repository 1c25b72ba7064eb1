// The all-pairs LL128 area: LL128 lines (ll128.cuh) between every pair of ranks, for the LL128
// one-shot and two-phase AllReduces (allreduce.cu).
//
// Each rank's area has two halves of ap128_half_bytes, picked by the pair flag's parity, each cut
// into one region per source rank, exactly as the LL halves are (ll_flags.cuh): a source writes
// only its own region of a reader's half, so the pair flags, their parity rule and the one-ahead
// bound of ll_flags.cuh carry over unchanged. The area is its own: the chain's LL128 scratch is
// written whole by the predecessor, and LL16 readers could take raw line data for packets.
//
// A line's flag word is the pair flag in both halves. Flags never repeat within a parity before
// wrapping at 2^32 launches and are never 0, so neither a line of an earlier launch in the same
// region nor zeroed memory matches.
#pragma once
#include "ll128.cuh"

OX_DEV uint64_t ox_ap128_flag(uint32_t f) { return ((uint64_t)f << 32) | f; }

// Bytes of one source's region in one half (algo::Scratch::ap128_region_bytes computes the same).
OX_DEV uint64_t ox_ap128_region_bytes(uint64_t half, int n) { return (half / (uint64_t)n) & ~127ull; }

// Start of the region of a reader's area (`base` = its ll_scratch + ap128_off) that `src` writes
// lines carrying pair flag `flag` into.
OX_DEV char* ox_ap128_at(char* base, uint64_t half, uint64_t region, uint32_t flag, int src) {
  return base + (flag & 1u) * half + (uint64_t)src * region;
}

// Warp-collective: every lane calls it with the same `use` mask. For each k with bit k of `use`,
// lanes whose line is `active` read their 16 bytes of line `at[k]` into w0[k]/w1[k], reloading
// only the sources whose lines are not all there yet, until every active line of every used
// source carries its flag `flag[k]`. All sources' loads are in flight together, so a warp pays one
// round trip for all of them rather than one each. Returns early (garbage) once the communicator
// is aborted.
template <int K>
OX_DEV void ox_ll128_load_many(const char* const (&at)[K], const uint64_t (&flag)[K], uint32_t use, uint32_t lane, bool active,
                               uint64_t (&w0)[K], uint64_t (&w1)[K], AbortState& ab) {
  const uint32_t j = lane & 7;
  bool done[K];
#pragma unroll
  for (int k = 0; k < K; ++k) done[k] = ((use >> k) & 1u) == 0;  // warp-uniform
  for (;;) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (!done[k] && active) {
        asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(w0[k]), "=l"(w1[k]) : "l"(at[k] + j * 16) : "memory");
      }
    }
    bool all = true;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (!done[k]) {
        done[k] = !__any_sync(0xffffffffu, active && j == 7 && w1[k] != flag[k]);
        all = all && done[k];
      }
    }
    if (all) return;
    if (__any_sync(0xffffffffu, ab.poll())) return;
  }
}
