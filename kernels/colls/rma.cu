// The stream wait of the one-sided operations (ncclWaitSignal; src/comm/rma.rs).
//
// Every rank's signal area (symmetric memory) holds a u64 counter per (context, signal index,
// sending rank), which the sender's ncclPutSignal / ncclSignal raise by one (ox_ce_post, after the
// put's copy on the sender's stream), and beside it a consumed count per counter that only this
// rank's waits raise. Both live on the device, so a CUDA graph replay signals and waits again
// with nothing baked in by the host at capture.
//
// ox_rma_wait (RmaWaitArgs): thread i < n waits until counter slots[i] exceeds its consumed count
// by counts[i], then claims those signals (consumed += counts[i]). The claim is a compare-and-swap
// so that two waits on the same counter from two streams never take the same signals; one list
// naming a counter twice waits for both counts. The abort flag releases the wait (a stream memory
// wait could only be released by the value it waits for).
#include "abort.cuh"
#include "atomics.cuh"
#include "common.cuh"
#include "pdl.cuh"

extern "C" __global__ void ox_rma_wait(const __grid_constant__ RmaWaitArgs a) {
  ox_pdl_enter();
  const uint32_t i = threadIdx.x;
  if (i >= a.n) return;
  const DevComm& c = ox_comm_at(a.comm);
  AbortState ab(c.abort_flag);
  const uint64_t* counter = reinterpret_cast<const uint64_t*>(a.counters) + a.slots[i];
  unsigned long long* used = reinterpret_cast<unsigned long long*>(a.consumed) + a.slots[i];
  const uint64_t want = a.counts[i];
  for (;;) {
    const uint64_t taken = atomicAdd(used, 0ull);
    // Acquire (system scope): the sender's copy into our window finished before its signal
    // kernel started (stream order), so whatever runs after this kernel on our stream sees the
    // data. Compared by difference: both counts only grow.
    const uint64_t arrived = ox_ld_acquire_sys(counter);
    if ((int64_t)(arrived - taken) >= (int64_t)want) {
      if (atomicCAS(used, (unsigned long long)taken, (unsigned long long)(taken + want)) == taken) break;
      continue;  // another wait on this counter claimed first: look again
    }
    if (ab.poll()) return;
  }
  __threadfence_system();
}
