// One step of a communicator that spans hosts (src/net): the stream hands the step to the
// communicator's proxy thread and waits for it. One thread does everything; the kernel is a
// stream-ordered doorbell, so it works the same eagerly and inside a CUDA graph (the plan number is
// a kernel argument, the step counter lives in device memory and counts every replay).
//
// Ordering:
// - Everything earlier on the stream has finished when this kernel starts, and its writes are in
//   device memory, so the proxy's copy-engine reads after it sees the trigger get final data. The
//   push itself is a release (fifo.cuh).
// - The proxy completes every copy into this GPU's memory before it raises `done` (a release
//   store); the acquire load here, and the kernel boundary after it, order those writes before
//   anything later on the stream.
// - An abort (or a stopped proxy) ends the wait, so no kernel spins on a dead peer.
#include "common.cuh"
#include "abort.cuh"
#include "fifo.cuh"

extern "C" __global__ void ox_net_step(NetStepArgs a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  uint64_t* issued = reinterpret_cast<uint64_t*>(a.issued);
  // Only this communicator's kernels touch the counter, and they never overlap (one order of
  // launches per communicator), so a plain read-modify-write is enough.
  const uint64_t target = *issued + 1;
  *issued = target;
  const uint64_t fst = a.plan & 0xffffffffull;  // the trigger's size field carries the plan
  if (ox_fifo_push(a.fifo, fst, ox_trigger_type(OX_TRIGGER_DATA | OX_TRIGGER_FLAG)) == ~0ull) return;
  AbortState ab(a.abort_flag);
  const uint64_t* done = reinterpret_cast<const uint64_t*>(a.done);
  for (uint32_t spins = 0; ox_ld_acquire_sys(done) < target; ++spins) {
    if (ab.poll()) return;
    if ((spins & 63u) == 63u && ox_fifo_stopped(a.fifo)) return;
  }
}
