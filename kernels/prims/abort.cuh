// Abort polling for device spin loops. Every loop that waits on a peer checks the communicator's
// abort flag (host-mapped memory that ncclCommAbort sets), so a dead peer never leaves a kernel
// spinning forever.
#pragma once
#include "atomics.cuh"

// Spins between two reads of the abort flag by one warp whose lanes spin together (a power of
// two). A read crosses PCIe, and a packet receive has tens of thousands of threads spinning at
// once: when every thread read every 1024 spins (about 200 us of polling on an H200), their reads,
// issued together, queued for about a millisecond, and every receive that waited longer than
// 200 us took 1.2-1.3 ms whenever its data came (2 x 2 Send/Recv at 1 MB; BENCHMARKS.md
// of 2026-11-27, ac76c9a). NCCL reads its abort flag every million spins.
#define OX_ABORT_POLL_SPINS 2048u

struct AbortState {
  const uint32_t* flag;
  uint32_t spins;
  bool aborted;

  // The lanes of a warp take turns: lane L first reads after (L + 1) * OX_ABORT_POLL_SPINS spins,
  // then every 32 * OX_ABORT_POLL_SPINS (tens of milliseconds of a lone waiter's polling), so a warp that
  // spins together reads once every OX_ABORT_POLL_SPINS spins. The turns are counted, not agreed:
  // sharing one read through __match_any_sync / __shfl_sync put warp-synchronous code in every
  // spin loop and cost the 4-rank 16-64 KB AllReduce 0.1-0.2 us (0.6 at bf16 64 KB; BENCHMARKS.md
  // of 2026-11-27, 26c2104).
  OX_DEV explicit AbortState(uint64_t flag_addr)
      : flag(reinterpret_cast<const uint32_t*>(flag_addr)), spins(0), aborted(false) {
    uint32_t lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    spins = 0u - (lane + 1u) * OX_ABORT_POLL_SPINS;  // wraps: the period divides 2^32
  }

  // True once the communicator is aborted (read per the turns above). Once seen, it stays set for
  // this thread, so the remaining waits of an aborted kernel fall through at once and it exits.
  OX_DEV bool poll() {
    if (aborted) return true;
    if ((++spins & (32u * OX_ABORT_POLL_SPINS - 1)) == 0) aborted = ox_ld_volatile_u32(flag) != 0;
    return aborted;
  }
};
