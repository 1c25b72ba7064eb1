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

