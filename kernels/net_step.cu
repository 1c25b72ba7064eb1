// One step of a communicator that spans hosts (src/net): the stream hands the step to the
// communicator's proxy thread and waits for it. The kernel is a stream-ordered doorbell, so it
// works the same eagerly and inside a CUDA graph (the plan number and the copies are kernel
// arguments, the step counter lives in device memory and counts every replay). For a small step
// (src/net/stage.rs) the block also copies the step's GPU inputs into its host arena before the
// hand-over and the results out of it afterwards; otherwise the proxy copies, and one thread works.
//
// Ordering:
// - Everything earlier on the stream has finished when this kernel starts, and its writes are in
//   device memory, so the proxy's copy-engine reads after it sees the trigger get final data.
// - The pre-copies' stores to host memory, by every thread, come before the barrier; thread 0's
//   push (fifo.cuh: fence.acq_rel.sys, then the store of the trigger) follows it, and the fence is
//   cumulative over what the barrier ordered before it, so the proxy that sees the trigger sees
//   the arena filled.
// - The proxy completes every write into this GPU's memory and into the arena before it raises
//   `done` (a release); thread 0's acquire load of it, then the barrier, order those writes before
//   every thread's post-copy loads (which bypass caches: host_copy.cuh) and the kernel boundary
//   orders everything before later work on the stream.
// - An abort (or a stopped proxy) ends the wait, so no kernel spins on a dead peer; the
//   post-copies are skipped then.
#include "common.cuh"
#include "abort.cuh"
#include "fifo.cuh"
#include "host_copy.cuh"

extern "C" __global__ void ox_net_step(NetStepArgs a) {
  if (blockIdx.x != 0) return;
  for (uint32_t k = 0; k < a.npre; ++k) ox_host_copy<false>(a.copies[k].dst, a.copies[k].src, a.copies[k].bytes);
  __shared__ uint32_t finished;
  __syncthreads();
  if (threadIdx.x == 0) {
    finished = 0;
    uint64_t* issued = reinterpret_cast<uint64_t*>(a.issued);
    // Only this communicator's kernels touch the counter, and they never overlap (one order of
    // launches per communicator), so a plain read-modify-write is enough.
    const uint64_t target = *issued + 1;
    *issued = target;
    const uint64_t fst = a.plan & 0xffffffffull;  // the trigger's size field carries the plan
    if (ox_fifo_push(a.fifo, fst, ox_trigger_type(OX_TRIGGER_DATA | OX_TRIGGER_FLAG)) != ~0ull) {
      AbortState ab(a.abort_flag);
      const uint64_t* done = reinterpret_cast<const uint64_t*>(a.done);
      uint32_t spins = 0;
      for (; ox_ld_acquire_sys(done) < target; ++spins) {
        if (ab.poll()) break;
        if ((spins & 63u) == 63u && ox_fifo_stopped(a.fifo)) break;
      }
      finished = ox_ld_acquire_sys(done) >= target;
    }
  }
  __syncthreads();
  if (!finished) return;
  for (uint32_t k = a.npre; k < a.npre + a.npost; ++k) ox_host_copy<true>(a.copies[k].dst, a.copies[k].src, a.copies[k].bytes);
}
