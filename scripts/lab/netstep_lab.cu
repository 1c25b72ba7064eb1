// Where a small cross-host step's fixed cost goes on the GPU side (issue 4's small rows: at 2
// simulated hosts x 1 an exchange takes about 20 us, of which the proxy's part is 8-10).
// One GPU, no network: a host thread plays the proxy with zero transfer time. Each iteration is
// one launch of a kernel shaped like kernels/net_step.cu's waiting step (one block of 512): wait
// for the previous step (`done`), copy the inputs into the host arena, push a trigger
// (kernels/fifo.cuh), wait for `done`, copy the outputs back. Variants switch parts off or
// replace them, and %globaltimer stamps (thread 0) split the time:
//   entry | first wait done | pre-copies done | trigger pushed | done seen | post-copies done
// plus the gap from one launch's end to the next one's entry.
// Modes (bits): 1 = initial wait on `done`, 2 = cached FIFO tail (read the host tail only when the
// cache says full), 4 = LL receive (the proxy writes each 4-byte word with a 4-byte flag; the
// kernel polls the data itself, no `done` read), 8 = no fence before the trigger (unsafe: its cost
// only), 16 = no copies at all.
// Build: see scripts/lab/build.sh (needs the ABI header). Run: ./netstep_lab [bytes, default 64]
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "lab.h"
#include "common.cuh"
#include "atomics.cuh"
#include "fifo.cuh"
#include "host_copy.cuh"

constexpr int kStamps = 6;
constexpr uint32_t kFifo = 64;

struct LabArgs {
  FifoDevice fifo;
  uint64_t* done;      // host-mapped
  uint64_t* issued;    // device
  uint64_t* tail_cache;  // device
  uint64_t dev_in, dev_out, host_in, host_out;  // copies: dev_in -> host_in before, host_out -> dev_out after
  uint64_t* ll;        // host-mapped: LL words (data | flag << 32)
  uint64_t bytes;
  uint32_t mode;
  uint64_t* stamps;    // device: [iter][kStamps]
};

OX_DEV uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

OX_DEV uint64_t push(const LabArgs& a, uint64_t fst, uint64_t snd) {
  const FifoDevice& f = a.fifo;
  if (!(a.mode & 2)) return ox_fifo_push(f, fst, snd);
  const uint64_t pos = atomicAdd(reinterpret_cast<unsigned long long*>(f.head), 1ull);
  // The cache may only lag the real tail, so "not full by the cache" is never wrong.
  if (pos >= *a.tail_cache + f.size) {
    uint64_t t;
    while (pos >= (t = ox_ld_acquire_sys(reinterpret_cast<const uint64_t*>(f.tail))) + f.size) {
    }
    *a.tail_cache = t;
  }
  Trigger* slot = reinterpret_cast<Trigger*>(f.triggers) + (pos & (uint64_t)(f.size - 1));
  snd = (snd & ~(1ull << OX_TRIGGER_COMMIT_SHIFT)) | ox_fifo_commit_bit(pos, f.size);
  if (!(a.mode & 8)) asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(fst), "l"(snd) : "memory");
  return pos;
}

__global__ void step(LabArgs a) {
  __shared__ uint64_t target;
  const bool t0 = threadIdx.x == 0;
  uint64_t st[kStamps] = {};
  if (t0) {
    st[0] = gtime();
    target = *reinterpret_cast<volatile uint64_t*>(a.issued) + 1;
    if (a.mode & 1)
      while (ox_ld_acquire_sys(a.done) < target - 1) {
      }
    st[1] = gtime();
  }
  __syncthreads();
  const bool copies = !(a.mode & 16);
  if (copies) ox_host_copy<false>(a.host_in, a.dev_in, a.bytes);
  __syncthreads();
  if (t0) {
    st[2] = gtime();
    *a.issued = target;
    push(a, target, ox_trigger_type(OX_TRIGGER_DATA));
    st[3] = gtime();
    if (!(a.mode & 4))
      while (ox_ld_acquire_sys(a.done) < target) {
      }
    st[4] = gtime();
  }
  __syncthreads();
  if (copies) {
    if (a.mode & 4) {
      // LL: each thread polls its own words; the flag is the step number.
      const uint64_t words = a.bytes / 4;
      uint32_t* out = reinterpret_cast<uint32_t*>(a.dev_out);
      for (uint64_t w = threadIdx.x; w < words; w += blockDim.x) {
        uint64_t v;
        do {
          v = __ldcv(reinterpret_cast<const unsigned long long*>(a.ll + w));
        } while ((v >> 32) != (uint32_t)target);
        out[w] = (uint32_t)v;
      }
    } else {
      ox_host_copy<true>(a.dev_out, a.host_out, a.bytes);
    }
  }
  __syncthreads();
  if (t0) {
    st[5] = gtime();
    if (a.mode & 4) st[4] = st[5];
    for (int k = 0; k < kStamps; ++k) a.stamps[(target - 1) * kStamps + k] = st[k];
  }
}

__global__ void empty() {}

int main(int argc, char** argv) {
  const uint64_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : 64;
  const int N = 4000, W = 200;
  CK(cudaSetDevice(0));
  // Host-mapped words: FIFO triggers, tail, flush, stop, done, arena, LL area.
  auto hostmap = [](size_t n) {
    void* p;
    CK(cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(p, 0, n);
    return p;
  };
  Trigger* trig = (Trigger*)hostmap(sizeof(Trigger) * kFifo);
  uint64_t* words = (uint64_t*)hostmap(64);  // tail, flush_done, stop, done
  uint8_t* arena = (uint8_t*)hostmap(2 * bytes + 64);
  uint64_t* ll = (uint64_t*)hostmap((bytes / 4 + 1) * 8);
  uint64_t *head, *issued, *tail_cache, *stamps;
  void *din, *dout;
  CK(cudaMalloc(&head, 64));
  CK(cudaMalloc(&stamps, sizeof(uint64_t) * kStamps * (N + W)));
  CK(cudaMalloc(&din, bytes + 16));
  CK(cudaMalloc(&dout, bytes + 16));
  issued = head + 1;
  tail_cache = head + 2;
  auto dptr = [](void* h) {
    void* d;
    CK(cudaHostGetDevicePointer(&d, h, 0));
    return (uint64_t)d;
  };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("bytes %llu, %d steps per mode (after %d warm-up), one block of 512\n", (unsigned long long)bytes, N, W);
  printf("%-28s %8s | %7s %7s %7s %7s %7s %7s\n", "mode", "us/step", "gap", "wait0", "pre", "push", "done", "post");
  const char* names[] = {"now: wait0", "no wait0", "no wait0, cached tail", "no wait0, tail, LL", "no wait0, tail, no fence",
                         "wait0, cached tail", "no copies, no wait0, tail", "empty kernel"};
  const uint32_t modes[] = {1, 0, 2, 2 | 4, 2 | 8, 1 | 2, 2 | 16, 999};
  for (int m = 0; m < 8; ++m) {
    const uint32_t mode = modes[m];
    CK(cudaMemset(head, 0, 64));
    memset(words, 0, 64);
    memset(trig, 0, sizeof(Trigger) * kFifo);
    memset(ll, 0, (bytes / 4 + 1) * 8);
    CK(cudaDeviceSynchronize());
    LabArgs a{};
    a.fifo.triggers = dptr(trig);
    a.fifo.tail = dptr(words);
    a.fifo.head = (uint64_t)head;
    a.fifo.flush_done = dptr(words + 1);
    a.fifo.stop = dptr(words + 2);
    a.fifo.size = kFifo;
    a.done = (uint64_t*)dptr(words + 3);
    a.issued = issued;
    a.tail_cache = tail_cache;
    a.dev_in = (uint64_t)din;
    a.dev_out = (uint64_t)dout;
    a.host_in = dptr(arena);
    a.host_out = dptr(arena + bytes + 32);
    a.ll = (uint64_t*)dptr(ll);
    a.bytes = bytes;
    a.mode = mode;
    a.stamps = stamps;
    const int total = N + W;
    // The proxy: consume each trigger, "receive" (write the output, or LL words), raise done.
    std::atomic<bool> quit{false};
    std::thread proxy([&] {
      if (mode == 999) return;
      auto* tail = reinterpret_cast<std::atomic<uint64_t>*>(words);
      auto* done = reinterpret_cast<std::atomic<uint64_t>*>(words + 3);
      for (uint64_t pos = 0; pos < (uint64_t)total && !quit.load(std::memory_order_relaxed); ++pos) {
        auto* snd = reinterpret_cast<std::atomic<uint64_t>*>(&trig[pos % kFifo].snd);
        const uint64_t bit = (((pos / kFifo) & 1) ^ 1) << OX_TRIGGER_COMMIT_SHIFT;
        while ((snd->load(std::memory_order_acquire) & (1ull << OX_TRIGGER_COMMIT_SHIFT)) != bit) {
          if (quit.load(std::memory_order_relaxed)) return;
        }
        const uint64_t step_no = trig[pos % kFifo].fst;
        if (mode & 4) {
          auto* w = reinterpret_cast<std::atomic<uint64_t>*>(ll);
          for (uint64_t i = 0; i < bytes / 4; ++i) w[i].store((step_no << 32) | (uint32_t)i, std::memory_order_relaxed);
        } else if (!(mode & 16)) {
          memset(arena + bytes + 32, (int)step_no, bytes);
        }
        tail->store(pos + 1, std::memory_order_release);
        done->store(step_no, std::memory_order_release);
      }
    });
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < W; ++i) mode == 999 ? empty<<<1, 512, 0, s>>>() : step<<<1, 512, 0, s>>>(a);
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < N; ++i) mode == 999 ? empty<<<1, 512, 0, s>>>() : step<<<1, 512, 0, s>>>(a);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    quit = true;
    proxy.join();
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double sum[kStamps] = {}, gap = 0;
    if (mode != 999) {
      std::vector<uint64_t> h(kStamps * total);
      CK(cudaMemcpy(h.data(), stamps, sizeof(uint64_t) * h.size(), cudaMemcpyDeviceToHost));
      for (int i = W; i < total; ++i) {
        const uint64_t* t = &h[i * kStamps];
        for (int k = 1; k < kStamps; ++k) sum[k] += (double)(t[k] - t[k - 1]);
        gap += (double)(t[0] - h[(i - 1) * kStamps + 5]);
      }
    }
    printf("%-28s %8.2f | %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f\n", names[m], ms * 1e3 / N, gap / N / 1e3, sum[1] / N / 1e3, sum[2] / N / 1e3,
           sum[3] / N / 1e3, sum[4] / N / 1e3, sum[5] / N / 1e3);
  }
  return 0;
}
