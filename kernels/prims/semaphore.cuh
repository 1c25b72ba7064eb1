// Device-to-device semaphore. The inbound counter lives in the receiver's memory; the sender adds
// to it through its peer mapping; the receiver keeps its own expected count in local memory.
// Counters only grow and live in device memory, so CUDA graph replays stay matched.
//
// Contract: signal() by one thread after a __syncthreads publishes every write the block issued
// before the barrier; a wait() by one thread followed by a __syncthreads makes those writes
// visible to the whole waiting block. Signals and waits pair one to one, in order, per
// (block, sender, receiver) counter.
#pragma once
#include "abort.cuh"

OX_DEV void ox_sem_signal(uint64_t* remote_inbound) { ox_red_release_sys_add(remote_inbound, 1); }

// Relaxed form: orders no data, for pure execution control (e.g. "I am past this point").
OX_DEV void ox_sem_relaxed_signal(uint64_t* remote_inbound) { ox_red_relaxed_sys_add(remote_inbound, 1); }

// Waits for the next signal. `expected` is only ever touched by this thread.
OX_DEV void ox_sem_wait(const uint64_t* inbound, uint64_t* expected, AbortState& ab) {
  const uint64_t target = *expected + 1;
  *expected = target;
  while (ox_ld_acquire_sys(inbound) < target) {
    if (ab.poll()) return;
  }
}

OX_DEV void ox_sem_relaxed_wait(const uint64_t* inbound, uint64_t* expected, AbortState& ab) {
  const uint64_t target = *expected + 1;
  *expected = target;
  while (ox_ld_relaxed_sys(inbound) < target) {
    if (ab.poll()) return;
  }
}
