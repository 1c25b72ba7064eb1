// Abort polling for device spin loops. Every loop that waits on a peer checks the communicator's
// abort flag (host-mapped memory that ncclCommAbort sets), so a dead peer never leaves a kernel
// spinning forever.
#pragma once
#include "atomics.cuh"

// Spins between two reads of the abort flag, per thread (a power of two). A read crosses PCIe,
// and a packet receive has tens of thousands of threads spinning at once: at 1024 spins (about
// 200 us of polling on an H200) their reads, issued together, queued for about a millisecond, and
// every receive that waited longer than 200 us took 1.2-1.3 ms whenever its data came (2 x 2
// Send/Recv at 1 MB; BENCHMARKS, thirty-eighth pass). NCCL reads its abort flag every million
// spins; 8192 keeps an abort seen within a few milliseconds.
#define OX_ABORT_POLL_SPINS 8192u

// One read of the flag for the lanes of a warp that poll together (the leader reads, the others
// take its value): a wave of polls costs a read per warp, not per thread. Lanes polling different
// flags (never within one kernel today) each get their own read.
OX_DEV bool ox_abort_read(const uint32_t* flag) {
  const uint32_t same = __match_any_sync(__activemask(), reinterpret_cast<uint64_t>(flag));
  const int leader = __ffs(same) - 1;
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  uint32_t v = 0;
  if ((int)lane == leader) v = ox_ld_volatile_u32(flag);
  return __shfl_sync(same, v, leader) != 0;
}

struct AbortState {
  const uint32_t* flag;
  uint32_t spins;
  bool aborted;

  OX_DEV explicit AbortState(uint64_t flag_addr)
      : flag(reinterpret_cast<const uint32_t*>(flag_addr)), spins(0), aborted(false) {}

  // True once the communicator is aborted. The flag is read every OX_ABORT_POLL_SPINS calls only
  // (above). Once seen, it stays set for this thread, so the remaining waits of an aborted kernel
  // fall through at once and the kernel exits.
  OX_DEV bool poll() {
    if (aborted) return true;
    if ((++spins & (OX_ABORT_POLL_SPINS - 1)) == 0) aborted = ox_abort_read(flag);
    return aborted;
  }
};
