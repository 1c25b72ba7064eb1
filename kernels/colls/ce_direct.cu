// Stream-side pieces of the copy-engine direct path (src/transport/ce_direct.rs).
//
// ox_ce_wait: one thread spins
// until a 64-bit counter in this GPU's memory reaches a target, or the communicator is aborted.
// The counters are written by the peer's stream (cuStreamWriteValue64 through its mapping of our
// memory): "my buffer is ready for your copy" before a sender's copy, "my copy into your buffer
// is done" before a receiver's next work. A kernel rather than cuStreamWaitValue64 so that an
// abort releases it (a stream memory wait can only be released by the value it waits for).
//
// CollArgs: comm = the DevComm (for the abort flag), send = the counter's address, count = the
// target; recv = 0.
//
// Inside a CUDA graph the host cannot write the counts (a replay repeats the captured values), so
// the device counts: recv = the address of this rank's own count of the pair's captured
// transfers in this direction, which the wait first raises by one and then takes as its target
// (count unused). Only this rank's stream touches that count, one wait after another, so a plain
// increment suffices. The peer's side is ox_ce_post.
#include "atomics.cuh"
#include "common.cuh"
#include "copy.cuh"
#include "pdl.cuh"

extern "C" __global__ void ox_ce_wait(const __grid_constant__ CollArgs a) {
  ox_pdl_enter();
  if (threadIdx.x != 0) return;
  const DevComm& c = ox_comm(a);
  AbortState ab(c.abort_flag);
  const uint64_t* counter = reinterpret_cast<const uint64_t*>(a.send);
  uint64_t target = a.count;
  if (a.recv != 0) {
    uint64_t* own = reinterpret_cast<uint64_t*>(a.recv);
    target = *own + 1;
    *own = target;
  }
  // Acquire (system scope): the peer's stream wrote the counter after its copy engine finished
  // writing our buffer (the stream write carries a full memory barrier), so work after this
  // kernel on our stream sees the data. Compared by difference: the counters only grow.
  while ((int64_t)(ox_ld_acquire_sys(counter) - target) < 0) {
    if (ab.poll()) return;
  }
}

// ox_ce_post: the device-counted form of a counter write, for CUDA graphs: adds one to a peer's
// counter (recv = its address as mapped here), with release at system scope. What orders a
// sender's copy before its "done" is stream (graph) order: the copy's memcpy node has completed,
// its writes landed at the peer, before this kernel starts, as NCCL's copy-engine collectives rely
// on (data copy, then flag). The fence and the release order only this thread's own accesses; the
// copy must therefore stay on this stream, before this kernel. "My buffer is ready" from a
// receiver, "my copy into you is done" from a sender.
extern "C" __global__ void ox_ce_post(const __grid_constant__ CollArgs a) {
  ox_pdl_enter();
  if (threadIdx.x != 0) return;
  __threadfence_system();
  ox_red_release_sys_add(reinterpret_cast<uint64_t*>(a.recv), 1);
}

// ox_ce_copy: a local copy beside the transfer (an out-of-place root's own piece), by SMs: a copy
// engine of this GPU is busy with the transfer, and a second copy on the engines would share it.
// CollArgs: send = source, recv = destination, count = bytes. No ordering beyond the stream's.
extern "C" __global__ void ox_ce_copy(const __grid_constant__ CollArgs a) {
  ox_pdl_enter();
  ox_copy(reinterpret_cast<char*>(a.recv), reinterpret_cast<const char*>(a.send), a.count,
          blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x, false);
}
