// The proxy FIFO, device side (host side and protocol: src/proxy/fifo.rs).
//
// push: take a position with a relaxed atomic add on the head (device memory: only GPU threads
// touch it); while the ring is full, wait on the tail the proxy advances in pinned host memory;
// then publish the trigger with ONE 128-bit store whose top bit is the lap's commit bit, so the
// proxy never sees half a trigger and an all-zero payload is still a valid trigger.
// flush: push a sync trigger, then wait until the proxy's flush position passes it.
// Every wait also watches the FIFO's stop word (proxy stopped, communicator aborted) and gives up
// then, so no kernel spins forever on a proxy that is gone.
#pragma once
#include "atomics.cuh"

OX_DEV uint64_t ox_fifo_commit_bit(uint64_t pos, uint32_t size) {
  return (((pos / size) & 1ull) ^ 1ull) << OX_TRIGGER_COMMIT_SHIFT;
}

// A trigger's type bits in place. The OX_TRIGGER_* constants are plain (int) macros: shifting
// them by OX_TRIGGER_TYPE_SHIFT without widening first would overflow an int.
OX_DEV constexpr uint64_t ox_trigger_type(uint64_t kind) { return kind << OX_TRIGGER_TYPE_SHIFT; }

OX_DEV bool ox_fifo_stopped(const FifoDevice& f) {
  return ox_ld_volatile_u32(reinterpret_cast<const uint32_t*>(f.stop)) != 0;
}

// Pushes one trigger; returns its position, or UINT64_MAX if the FIFO was stopped meanwhile.
// Ordering: a release (fence.acq_rel.sys before the store), so every write this thread observed
// before the push (the block's, after a __syncthreads) is visible to the proxy and to the copies
// it starts from the trigger. With `release` false the store is relaxed: only for a pusher whose
// data carries its own flags (LL packets, net_step.cu), where the fence's system round trip
// (about 1.4 us on H200, scripts/lab/netstep_lab.cu in git before 7bcb34d) would buy nothing.
OX_DEV uint64_t ox_fifo_push(const FifoDevice& f, uint64_t fst, uint64_t snd, bool release = true) {
  const uint64_t pos = atomicAdd(reinterpret_cast<unsigned long long*>(f.head), 1ull);
  const uint64_t* tail = reinterpret_cast<const uint64_t*>(f.tail);
  // Acquire on the tail: the slot's previous trigger was fully read before the proxy freed it.
  // A full ring waits at least one proxy round trip: back off (up to ~1 us) so thousands of
  // waiting threads do not flood PCIe with reads of the tail, which slows the proxy that frees
  // the slots. The common, non-full case never enters the loop.
  for (uint32_t spins = 0, nap = 32; pos >= ox_ld_acquire_sys(tail) + f.size; ++spins) {
    if ((spins & 63u) == 63u && ox_fifo_stopped(f)) return ~0ull;
    __nanosleep(nap);
    if (nap < 1024) nap <<= 1;
  }
  Trigger* slot = reinterpret_cast<Trigger*>(f.triggers) + (pos & (uint64_t)(f.size - 1));
  snd = (snd & ~(1ull << OX_TRIGGER_COMMIT_SHIFT)) | ox_fifo_commit_bit(pos, f.size);
  if (release) asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(fst), "l"(snd) : "memory");
  return pos;
}

// Waits until the proxy's flush position passes `pos`, the position of a trigger with the sync
// bit (UINT64_MAX: a push that failed). Returns false if the FIFO was stopped first. Acquire on
// flush_done: what the proxy completed (copies into this GPU's memory, say) is visible to this
// thread's later reads.
OX_DEV bool ox_fifo_wait_flushed(const FifoDevice& f, uint64_t pos) {
  if (pos == ~0ull) return false;
  const uint64_t* done = reinterpret_cast<const uint64_t*>(f.flush_done);
  for (uint32_t spins = 0; ox_ld_acquire_sys(done) <= pos; ++spins) {
    if ((spins & 63u) == 63u && ox_fifo_stopped(f)) return false;
  }
  return true;
}

// Pushes a sync trigger and waits until the proxy has completed everything up to it
// (ox_fifo_wait_flushed).
OX_DEV bool ox_fifo_flush(const FifoDevice& f) {
  return ox_fifo_wait_flushed(f, ox_fifo_push(f, 0, ox_trigger_type(OX_TRIGGER_SYNC)));
}
