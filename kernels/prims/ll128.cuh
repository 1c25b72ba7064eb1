// LL128 lines: 128 bytes written by 8 consecutive lanes of one warp, 16 bytes each, where the
// 8th lane's second 8-byte word is a flag and the other 15 words are data: 120 payload bytes per
// 128 (LL16 carries 8 per 16). As with LL16 a reader knows the data is there from the flag alone,
// with no fence and no separate signal, but only because of two properties of the hardware that
// NCCL's LL128 protocol relies on too (it enables LL128 over NVLink on sm_90): a warp's store of
// a whole aligned 128-byte line through one instruction reaches peer memory as one transaction,
// and a warp's load of a line through one instruction reads it as one. So the 8 lanes of a line
// see either all of one write of it or all of an earlier one, and a lane whose line carries the
// expected flag may use its data. Loads and stores are volatile (never cached in L1, never merged
// or split by the compiler); the warp reloads until every line it reads carries the flag.
//
// Lines must live in memory that only LL128 lines are ever written to: their data words are raw,
// so an LL16 or LL8 reader could take them for packets whose flag happens to match.
#pragma once
#include "abort.cuh"

constexpr uint32_t kLl128LineBytes = 128;
constexpr uint32_t kLl128LineWords = 15;  // payload words (8 bytes) per line

// Lane `lane` of a warp stores its 16 bytes of a line: {w0, w1}, or {w0, flag} on the line's 8th
// lane (lane % 8 == 7). All 8 lanes of a line must store in the same instruction.
OX_DEV void ox_ll128_store(char* line, uint32_t lane, uint64_t w0, uint64_t w1, uint64_t flag) {
  const uint32_t j = lane & 7;
  const uint64_t hi = j == 7 ? flag : w1;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(line + j * 16), "l"(w0), "l"(hi) : "memory");
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
    // Lanes may arrive here diverged (their input loads take per-lane paths: the buffer's
    // alignment, the message's end), and a line's 8 lanes must load it in one instruction. NCCL's
    // LL128 receive starts with the same __syncwarp.
    __syncwarp();
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

// One line: lanes with `active` read their 16 bytes of `line` into w0/w1 (w1 is the flag on the 8th
// lane of a line); the warp reloads until every active line carries `flag`. Warp-collective, as
// ox_ll128_load_many; inactive lanes take part in the votes only.
OX_DEV void ox_ll128_load(const char* line, uint32_t lane, bool active, uint64_t flag, uint64_t& w0, uint64_t& w1,
                          AbortState& ab) {
  const char* at[1] = {line};
  const uint64_t fl[1] = {flag};
  uint64_t a0[1], a1[1];
  ox_ll128_load_many<1>(at, fl, 1u, lane, active, a0, a1, ab);
  w0 = a0[0];
  w1 = a1[0];
}
