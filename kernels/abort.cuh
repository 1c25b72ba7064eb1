// Abort polling for device spin loops. Every loop that waits on a peer checks the communicator's
// abort flag (host-mapped memory that ncclCommAbort sets), so a dead peer never leaves a kernel
// spinning forever.
#pragma once
#include "atomics.cuh"

struct AbortState {
  const uint32_t* flag;
  uint32_t spins;
  bool aborted;

  OX_DEV explicit AbortState(uint64_t flag_addr)
      : flag(reinterpret_cast<const uint32_t*>(flag_addr)), spins(0), aborted(false) {}

  // True once the communicator is aborted. The flag is read every 1024 calls only: a read across
  // PCIe costs about a microsecond, far more than one spin. Once seen, it stays set for this thread,
  // so the remaining waits of an aborted kernel fall through at once and the kernel exits.
  OX_DEV bool poll() {
    if (aborted) return true;
    if ((++spins & 1023u) == 0) aborted = ox_ld_volatile_u32(flag) != 0;
    return aborted;
  }
};
