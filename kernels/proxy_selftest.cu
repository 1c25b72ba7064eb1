// A kernel that exercises the proxy FIFO from many threads at once (oxccl-gpu-check --proxy):
// every thread of every block pushes `per_thread` data triggers numbered (block, thread, k), and
// thread 0 of each block then flushes. The host proxy checks every number arrives exactly once.
#include "common.cuh"
#include "fifo.cuh"

extern "C" __global__ void ox_proxy_selftest(ProxyTestArgs a) {
  const FifoDevice& f = a.fifo;
  const uint32_t per_thread = a.per_thread;
  uint32_t* failures = reinterpret_cast<uint32_t*>(a.failures);
  const uint64_t id = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (uint32_t k = 0; k < per_thread; ++k) {
    const uint64_t fst = (id << 16) | k;  // size = low 32 bits, source offset = high: any value is fine
    if (ox_fifo_push(f, fst, OX_TRIGGER_DATA << OX_TRIGGER_TYPE_SHIFT) == ~0ull) atomicAdd(failures, 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0 && !ox_fifo_flush(f)) atomicAdd(failures, 1u);
}
