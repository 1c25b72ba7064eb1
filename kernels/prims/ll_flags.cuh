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
//
// Running ahead is bounded as follows. A launch with flag f writes the half that packets of flag
// f-2 used, so the peer must have finished its launch f-2. If the pair's launch f-1 moved packets
// towards this rank, or both ways, this rank read the peer's f-1 packets, so the peer was in f-1:
// nothing to wait for. If launch f-1 moved packets only from this rank to the peer ("one-way"),
// the peer acknowledges it: on entering that launch it stores f-1 into this rank's ll_ack slot,
// and this rank's next launch waits for that value or a later one before writing packets. Later
// values are the peer's acknowledgements of later launches: f, or f+1 and f+2 where launch f is
// one-way from the peer, which it may then finish (and enter the next launches as a receiver)
// before a late block of this rank's launch f loads its flags. Launches of one
// communicator are ordered on each GPU, so "the peer entered f-1" means "it left f-2". The wait
// sits at the start of the next launch, not at the end of the one-way launch, so back-to-back
// one-way operations (Broadcast, Gather, Scatter, Reduce) pay no round trip.
#pragma once
#include "abort.cuh"

// This rank's flag and pending tables, at fixed offsets from its DevComm (OX_PRIV_*, laid out by
// src/channel/memory.rs): computed from the DevComm's address, not loaded from it, so the flag
// loads that open every packet launch do not wait for a load of DevComm first.
OX_DEV uint32_t* ox_ll_flag_ptr(const DevComm& c, uint32_t block, int peer) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uintptr_t>(&c) + OX_PRIV_FLAGS_OFF) + (uint64_t)block * OX_MAX_RANKS + (uint64_t)peer;
}

OX_DEV uint32_t* ox_ll_pending_ptr(const DevComm& c, uint32_t block, int peer) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uintptr_t>(&c) + OX_PRIV_PENDING_OFF) + (uint64_t)block * OX_MAX_RANKS + (uint64_t)peer;
}

// Slot (block, reader) of `owner`'s acknowledgement table, as mapped into this rank.
OX_DEV uint32_t* ox_ll_ack_ptr(const DevComm& c, int owner, uint32_t block, int reader) {
  return reinterpret_cast<uint32_t*>(c.ll_ack[owner]) + (uint64_t)block * OX_MAX_RANKS + (uint64_t)reader;
}

// Next flag; skips 0 (fresh, zeroed scratch) on wrap-around, to 8: the flag modulo 2 picks an
// LL half and modulo OX_RING_SLOTS (8) a ring slot, and both must keep advancing by one.
OX_DEV uint32_t ox_ll_next_flag(uint32_t flag) { return flag + 1 == 0 ? 8u : flag + 1; }

// The flag d launches after `flag` (ox_ll_next_flag applied d times).
OX_DEV uint32_t ox_ll_flag_add(uint32_t flag, uint32_t d) {
  const uint64_t t = (uint64_t)flag + d;
  return t > 0xffffffffull ? (uint32_t)(t - 0x100000000ull + 8) : (uint32_t)t;
}

// How many ox_ll_next_flag steps lead from flag `a` to flag `b`, for flags the wrap-around can
// produce (b >= 8 once a wrapped); a `b` behind `a` gives a count near 2^32.
OX_DEV uint32_t ox_ll_flag_steps(uint32_t a, uint32_t b) { return b >= a ? b - a : (b - 8u) + (0xffffffffu - a) + 1u; }

// Whether the acknowledgement `v` names launch `pending` or a later one: it proves the peer left
// launch pending-1. A peer is at most three launches past `pending` (f+2, see the top of this
// file), so the window is small: an acknowledgement left from long ago cannot alias into it. Values
// below 8 exist only before the first wrap-around (flags start at 1 and wrap to 8) or in a slot
// never written (0): behind any pending of 8 or more, and not in the wrap-aware count's domain
// (0 against a pending of 0xfffffff8 would count 0 steps).
OX_DEV bool ox_ll_acked(uint32_t v, uint32_t pending) {
  if (v < 8u && pending >= 8u) return false;
  return ox_ll_flag_steps(pending, v) < 16u;
}

// A flag-table load. Relaxed at GPU scope, so never served from a stale L1 line: an early
// one-shot launch (allreduce.cu) reads the table before its PDL wait, while the previous kernel,
// which wrote it, may still run.
OX_DEV uint32_t ox_ll_table_ld(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Loads this block's flag for every peer into shared memory (thread p loads peer p); where the
// pair's previous launch was one-way from this rank, first waits for the peer's acknowledgement
// (see the top of this file). Acquire: the peer's later reads of this rank's packets are not
// affected, but this block's packet writes must not be issued before the wait ends; the
// __syncthreads extends that to the block.
// Every slot of the tables exists (OX_MAX_RANKS per block), so threads load before they know
// whether their peer index is in range: the loads then issue without waiting for DevComm.
OX_DEV void ox_ll_flags_load(const DevComm& c, uint32_t* flags, AbortState& ab) {
  const int p = (int)threadIdx.x;
  if (p < OX_MAX_RANKS) {
    const uint32_t f = ox_ll_table_ld(ox_ll_flag_ptr(c, blockIdx.x, p));
    const uint32_t pending = ox_ll_table_ld(ox_ll_pending_ptr(c, blockIdx.x, p));
    flags[p] = f;
    if (p < c.nranks && p != c.rank && ox_ll_next_flag(pending) == f) {
      // Any acknowledgement of f-1 or later proves the peer left f-2. Not just f-1 and f: where
      // launch f is one-way from the peer, it may finish f and acknowledge f+1 before this block
      // starts (a hang the conformance fuzzer found on two ranks: Gather, Scatter and Reduce to
      // one root back to back, 2 x H200, 2026-11-30).
      const uint32_t* ack = ox_ll_ack_ptr(c, c.rank, blockIdx.x, p);
      for (uint32_t v = ox_ld_acquire_sys_u32(ack); !ox_ll_acked(v, pending); v = ox_ld_acquire_sys_u32(ack)) {
        if (ab.poll()) break;
      }
    }
  }
  __syncthreads();
}

// Byte offset of the half of a scratch slot that packets carrying `flag` use.
OX_DEV uint64_t ox_ll_half_offset(const DevComm& c, uint32_t flag) { return (flag & 1u) * c.ll_half_bytes; }

// Each half is cut into one region per source rank, and every packet algorithm writes only into
// its own source's region, whatever its layout inside it. A reader accepts a packet whose flag
// equals the pair's flag, and pairs' flags drift apart (point-to-point and one-way launches advance
// only the pairs taking part), so a packet another source left at that address with an equal flag
// would pass for a fresh one. (The soak test caught this when the two-phase AllReduce still laid
// its two phases out across the whole half.)
OX_DEV uint64_t ox_ll_region_bytes(const DevComm& c) { return (c.ll_half_bytes / (uint64_t)c.nranks) & ~15ull; }

// Start of the region of `reader`'s LL scratch that `src` writes packets carrying `flag` into.
OX_DEV char* ox_ll_region(const DevComm& c, int reader, uint32_t flag, int src) {
  return reinterpret_cast<char*>(c.ll_scratch[reader]) + ox_ll_half_offset(c, flag) + (uint64_t)src * ox_ll_region_bytes(c);
}

// ox_ll_region with the pieces already at hand: `base` = the reader's ll_scratch, `half` =
// ll_half_bytes, `region` = ox_ll_region_bytes.
OX_DEV char* ox_ll_at(char* base, uint64_t half, uint64_t region, uint32_t flag, int src) {
  return base + (flag & 1u) * half + (uint64_t)src * region;
}

// The ring area (one-shot AllReduce, allreduce.cu): OX_RING_SLOTS slots of nranks regions of
// OX_RING_REGION_BYTES, right after the two LL halves of each rank's LL scratch. `base` = the
// reader's ll_scratch, `half` = ll_half_bytes.
OX_DEV char* ox_ring_at(char* base, uint64_t half, int n, uint32_t flag, int src) {
  return base + 2 * half + ((uint64_t)(flag % OX_RING_SLOTS) * (uint64_t)n + (uint64_t)src) * OX_RING_REGION_BYTES;
}

// Every per-launch bookkeeping store below goes to all OX_MAX_BLOCKS / gridDim slots this block
// owns (s = blockIdx.x + j * gridDim.x) for each peer it concerns. They are spread over the
// block's threads, one (slot, peer) pair per thread: issued by one thread per peer they ran one
// after another and cost 1.2 us of a 3.2 us 8-byte AllReduce at 4 blocks, 4.1 us at 1 block
// (H200, scripts/lab/oneshot_lab.cu in git before 7bcb34d). Call with the whole block, after ox_ll_flags_load. The
// caller passes its rank and rank count from registers: re-reading them from DevComm after an
// acquire (which empties L1) would put an L2 round trip before a sender's first packet.
// `first` and `stride` spread them over fewer threads (one warp: lane, 32).
template <typename F>
OX_DEV void ox_ll_for_owned_slots(int n, F&& f, uint32_t first = threadIdx.x, uint32_t stride = blockDim.x) {
  const uint32_t slots = (OX_MAX_BLOCKS - 1 - blockIdx.x) / gridDim.x + 1;
  for (uint32_t k = first; k < slots * (uint32_t)n; k += stride) f(blockIdx.x + (k / n) * gridDim.x, (int)(k % n));
}

// One-way launches. `role[p]` (shared memory, written before ox_ll_flags_load's __syncthreads):
// bit 0 if this launch moves packets only from this rank to p, bit 1 if only from p to this rank.
// Receiver: tells the sender this rank has entered the launch of flag f. Relaxed: the launch
// boundary already ordered this rank's reads of older packets before it. Sender: remembers that
// launch f was one-way to p, so the next launch waits for the ack.
OX_DEV void ox_ll_oneway_mark(const DevComm& c, int me, int n, const uint32_t* flags, const uint8_t* role) {
  ox_ll_for_owned_slots(n, [&](uint32_t s, int p) {
    if (role[p] & 2) ox_st_relaxed_sys_u32(ox_ll_ack_ptr(c, p, s, me), flags[p]);
    if (role[p] & 1) *ox_ll_pending_ptr(c, s, p) = flags[p];
  });
}

// Advances the flags of every peer p with active[p] != 0 (shared memory).
OX_DEV void ox_ll_flags_advance(const DevComm& c, int me, int n, const uint32_t* flags, const uint8_t* active) {
  __syncthreads();  // every thread of the block has used the flags before they change
  ox_ll_for_owned_slots(n, [&](uint32_t s, int p) {
    if (p != me && active[p]) *ox_ll_flag_ptr(c, s, p) = ox_ll_next_flag(flags[p]);
  });
}

// Advances the flags of every peer (collectives where all pairs exchange).
OX_DEV void ox_ll_flags_advance_all(const DevComm& c, int me, int n, const uint32_t* flags) {
  __syncthreads();
  ox_ll_for_owned_slots(n, [&](uint32_t s, int p) {
    if (p != me) *ox_ll_flag_ptr(c, s, p) = ox_ll_next_flag(flags[p]);
  });
}

// The ring one-shot's chain (allreduce.cu). A non-early ring launch (the head) writes, besides
// the flag table, the base table: the flags of the first early launch behind it. The early launch
// at chain position k then takes base + k - 1 (every ring launch is all-pairs, so each pair's flag
// advances by one per launch) without reading the flag table, which it advances only after its
// wait. The chain word holds the position of the last launch of the chain that has passed its
// PDL wait (the head stores 0).
OX_DEV uint32_t* ox_ring_base_ptr(const DevComm& c, uint32_t block, int peer) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uintptr_t>(&c) + OX_PRIV_RING_BASE_OFF) + (uint64_t)block * OX_MAX_RANKS + (uint64_t)peer;
}
OX_DEV uint32_t* ox_ring_chain_ptr(const DevComm& c) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uintptr_t>(&c) + OX_PRIV_RING_CHAIN_OFF);
}

// The head's advance, by one whole warp of the block that has written no packets yet: the flag
// and base tables of every slot the block owns, and (block 0) the chain word. Its fence then waits
// only for these stores and the warp's own loads: after packet stores it would wait for their
// acknowledgement by the peer (about an NVLink round trip), and every thread fencing before its
// first packet held that packet up (packets left 1.69 us after entry; BENCHMARKS.md of 2026-11-26,
// 733ad23). Order: the stores, a GPU-scope fence, __syncwarp (every lane has fenced), then the
// caller's trigger: the next launch starts only once every block triggered, and its relaxed
// GPU-scope loads (ox_ll_table_ld) of either table or the word then see the new values.
OX_DEV void ox_ring_head_advance(const DevComm& c, int me, int n, const uint32_t* flags) {
  const uint32_t lane = threadIdx.x & 31;
  ox_ll_for_owned_slots(n, [&](uint32_t s, int p) {
    if (p != me) *ox_ll_flag_ptr(c, s, p) = *ox_ring_base_ptr(c, s, p) = ox_ll_next_flag(flags[p]);
  }, lane, 32);
  if (blockIdx.x == 0 && lane == 0) *ox_ring_chain_ptr(c) = 0;
  __threadfence();
  __syncwarp();
}

// An early launch's advance of the flag table, after its wait (so after every earlier launch's):
// read only by launches that wait first, which the kernel boundary orders. No fence.
OX_DEV void ox_ring_table_advance(const DevComm& c, int me, int n, const uint32_t* flags) {
  ox_ll_for_owned_slots(n, [&](uint32_t s, int p) {
    if (p != me) *ox_ll_flag_ptr(c, s, p) = ox_ll_next_flag(flags[p]);
  }, threadIdx.x & 31, 32);
}

// The ring one-shot's output words (allreduce.cu), one per block: after its block has written its
// output, a ring launch with OX_ONESHOT_PUBLISH stores there the flag it used with the next rank,
// the same for every block. A chained launch (OX_ONESHOT_CHAIN) reads the previous launch's output as its input,
// with the same grid and thread-to-packet map (the host checked), so each block waits only for
// its twin block of that launch: for the word to hold the flag one before its own.
OX_DEV uint32_t* ox_ring_out_ptr(const DevComm& c, uint32_t block) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uintptr_t>(&c) + OX_PRIV_RING_OUT_OFF) + block;
}

// Whole block, after its output stores: the __syncthreads orders every thread's stores before
// thread 0's release (GPU scope: the reader is a kernel on this GPU), so a block that acquires
// the word reads the output, not what was there before.
OX_DEV void ox_ring_out_publish(const DevComm& c, uint32_t flag) {
  __syncthreads();
  if (threadIdx.x == 0) ox_st_release_gpu_u32(ox_ring_out_ptr(c, blockIdx.x), flag);
}

// One thread, then the caller's __syncthreads: waits until the twin block of the launch with the
// flag before `flag` has published its output. Acquire: it also empties this SM's L1, so the
// block's plain input loads after the __syncthreads cannot hit stale lines. No other launch can
// have left that value: the word moves one flag per ring launch, and a flag value repeats only
// after 2^32 launches.
OX_DEV void ox_ring_out_wait(const DevComm& c, uint32_t flag, AbortState& ab) {
  const uint32_t* p = ox_ring_out_ptr(c, blockIdx.x);
  while (ox_ll_next_flag(ox_ld_acquire_gpu_u32(p)) != flag && !ab.poll()) {
  }
}
