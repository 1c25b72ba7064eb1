// A kernel that exercises the proxy FIFO from many threads at once (oxccl-gpu-check --proxy):
// every thread of every block pushes `per_thread` data triggers numbered (block, thread, k), and
// thread 0 of each block then flushes. The host proxy checks every number arrives exactly once.
#include "common.cuh"
#include "fifo.cuh"

extern "C" __global__ void ox_proxy_selftest(const __grid_constant__ ProxyTestArgs a) {
  const FifoDevice& f = a.fifo;
  const uint32_t per_thread = a.per_thread;
  uint32_t* failures = reinterpret_cast<uint32_t*>(a.failures);
  const uint64_t id = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (uint32_t k = 0; k < per_thread; ++k) {
    const uint64_t fst = (id << 16) | k;  // size = low 32 bits, source offset = high: any value is fine
    if (ox_fifo_push(f, fst, ox_trigger_type(OX_TRIGGER_DATA)) == ~0ull) atomicAdd(failures, 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0 && !ox_fifo_flush(f)) atomicAdd(failures, 1u);
}

// PortChannel end to end (oxccl-gpu-check --proxy): mode 0 on the sending rank fills `bytes` of
// src with a pattern, then each block puts its slice to the peer with put_with_signal_and_flush;
// mode 1 on the receiving rank waits for one signal per sending block, then checks every byte.
#include "port_channel.cuh"

extern "C" __global__ void ox_port_selftest(const __grid_constant__ PortTestArgs a) {
  uint32_t* failures = reinterpret_cast<uint32_t*>(a.failures);
  const uint64_t slice = a.bytes / a.blocks;  // host makes it divide evenly
  if (a.mode == 0) {
    unsigned char* src = reinterpret_cast<unsigned char*>(a.src);
    for (uint64_t i = threadIdx.x; i < slice; i += blockDim.x) {
      const uint64_t j = blockIdx.x * slice + i;
      src[j] = (unsigned char)(j * 7 + 3);
    }
    __syncthreads();  // the whole slice is written before the push releases it
    if (threadIdx.x == 0) {
      OxPortChannel ch{&a.fifo, 0, 0, 0, nullptr, nullptr};
      if (!ch.put_with_signal_and_flush(blockIdx.x * slice, blockIdx.x * slice, slice)) atomicAdd(failures, 1u);
    }
  } else {
    __shared__ uint64_t expected;
    AbortState ab(a.abort_flag);
    if (threadIdx.x == 0) {
      expected = 0;
      OxPortChannel ch{&a.fifo, 0, 0, 0, reinterpret_cast<const uint64_t*>(a.sem), &expected};
      for (uint32_t k = 0; k < a.blocks; ++k) ch.wait(ab);
    }
    __syncthreads();  // extends thread 0's acquire to the block
    const unsigned char* dst = reinterpret_cast<const unsigned char*>(a.dst);
    uint32_t bad = 0;
    for (uint64_t j = threadIdx.x; j < a.bytes; j += blockDim.x) bad += dst[j] != (unsigned char)(j * 7 + 3);
    if (bad) atomicAdd(failures, bad);
  }
}
