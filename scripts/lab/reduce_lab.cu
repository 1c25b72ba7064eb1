// Can a 2-rank Reduce beat the SM-copy ceiling (issue 9: Reduce >= 128 MB, 1.05x NCCL's ~368 GB/s)?
// Every byte of the non-root's buffer b crosses NVLink one way and the root adds it to its own a.
// Only the copy engines move more than ~370 GB/s one way (oneway_lab: 389-396), so the question is
// whether chunked copies can feed an SM reduction without the per-chunk stream operations eating
// the gain. GPU 0 holds b, GPU 1 holds a and computes out = a + b (float), one process:
//   copy_only      - one copy engine transfer of b into out (the ceiling), no reduction;
//   serial         - that copy, then one add kernel (what a non-pipelined copy-engine Reduce does);
//   push_flags     - GPU 0's streams copy chunk j into out and write flag j on GPU 1 with
//                    cuStreamWriteValue32; one persistent kernel on GPU 1 waits on each flag and adds;
//   pull_flags     - the same with GPU 1's own streams issuing the copies (flags are local writes);
//   pull_events    - GPU 1's copy streams record an event per chunk; a kernel stream waits on it and
//                    launches one add kernel per chunk (no memory-value operations at all);
//   ring_events    - pull_events through a ring of S chunk slots instead of `out` (what an in-place
//                    root needs): the copy into a slot waits for the event of the add that last used it.
// Each case runs REPS passes back to back after a warm-up and is timed until both GPUs are idle:
// GB/s = bytes of b / time. `out` is checked against a + b after every case.
// Build: scripts/lab/build.sh. Run: ./reduce_lab [MiB, default 512]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "pair.h"

constexpr int REPS = 10;

typedef int (*WriteFn)(cudaStream_t, unsigned long long, unsigned int, unsigned int);
typedef int (*WaitFn)(cudaStream_t, unsigned long long, unsigned int, unsigned int);
static WriteFn p_write;
static WaitFn p_wait;


// Small integers in floats, so a + b is exact.
__global__ void fill(float* p, size_t n, uint32_t mod) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (float)(i % mod);
}
__global__ void count_bad(const float* out, size_t n, unsigned long long* bad) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    c += out[i] != (float)(i % 1000) + (float)(i % 777);
  if (c) atomicAdd(bad, c);
}

__device__ __forceinline__ float4 add4(float4 x, float4 y) { return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }

// out[i] = a[i] + x[i] over [lo, hi) float4s, two loads of each in flight per thread.
__device__ __forceinline__ void add_range(const float4* a, const float4* x, float4* out, size_t lo, size_t hi, size_t tid,
                                          size_t nth) {
  size_t i = lo + tid;
  for (; i + nth < hi; i += 2 * nth) {
    float4 a0 = a[i], a1 = a[i + nth], x0 = x[i], x1 = x[i + nth];
    out[i] = add4(a0, x0);
    out[i + nth] = add4(a1, x1);
  }
  for (; i < hi; i += nth) out[i] = add4(a[i], x[i]);
}

__global__ void add_kernel(const float4* a, const float4* x, float4* out, size_t nv) {
  add_range(a, x, out, 0, nv, blockIdx.x * (size_t)blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}

// Persistent: for each chunk in order, thread 0 waits until flag j == epoch (acquire, system
// scope: the copy engine's data is visible once the stream write that follows it is), then the
// whole grid adds the chunk, each block its contiguous share.
__global__ void add_flags(const float4* a, float4* out, size_t nv, size_t chunk_v, int nchunks, const uint32_t* flags,
                          uint32_t epoch) {
  for (int j = 0; j < nchunks; ++j) {
    if (threadIdx.x == 0)
      while (ld_acq_sys(flags + j) != epoch) {}
    __syncthreads();
    const size_t base = (size_t)j * chunk_v, len = base + chunk_v <= nv ? chunk_v : nv - base;
    const size_t per = (len + gridDim.x - 1) / gridDim.x, lo = base + blockIdx.x * per;
    const size_t hi = lo + per < base + len ? lo + per : base + len;
    if (lo < hi) add_range(a, out, out, lo, hi, threadIdx.x, blockDim.x);
  }
}

// Scheduled form: chunk j covers float4s [ends[j-1], ends[j]) and was delivered to x + xoff[j]
// (`out` itself, or a ring slot). With `free_flags`, the block that finishes a chunk last (counted
// in cnt[j], which grows by gridDim.x per pass) publishes free_flags[j] = epoch on the sender, so
// the slot the chunk used may be refilled: __threadfence orders each block's reads of the slot
// before its count, and the release store orders the count's observation before the flag.
__global__ void add_sched(const float4* a, const float4* x, float4* out, const size_t* ends, const size_t* xoff,
                          int nchunks, const uint32_t* flags, uint32_t epoch, uint32_t* cnt, uint32_t pass,
                          uint32_t* free_flags) {
  for (int j = 0; j < nchunks; ++j) {
    if (threadIdx.x == 0)
      while (ld_acq_sys(flags + j) != epoch) {}
    __syncthreads();
    const size_t base = j ? ends[j - 1] : 0, len = ends[j] - base;
    const size_t per = (len + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per;
    const size_t hi = lo + per < len ? lo + per : len;
    if (lo < hi) add_range(a + base, x + xoff[j], out + base, lo, hi, threadIdx.x, blockDim.x);
    if (free_flags) {
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(cnt + j, 1u) == pass * gridDim.x - 1) {
          __threadfence_system();
          asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(free_flags + j), "r"(epoch) : "memory");
        }
      }
    }
  }
}

// One thread of the sender's stream waits until *p == v (the wait-kernel form of a stream wait).
__global__ void wait_eq(const uint32_t* p, uint32_t v) {
  while (ld_acq_sys(p) != v) {}
}

static float *b0, *a1, *out1, *ring1;
static uint32_t* flags1;
static size_t N;  // bytes
static std::vector<cudaStream_t> st0, st1;
static uint32_t epoch = 0;
static int SMS = 132;

static void sync_both() {
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
}

static bool out_ok() {
  unsigned long long* bad;
  CK(cudaSetDevice(1));
  CK(cudaMallocManaged(&bad, 8));
  *bad = 0;
  count_bad<<<264, 512>>>(out1, N / 4, bad);
  CK(cudaDeviceSynchronize());
  const bool ok = *bad == 0;
  CK(cudaFree(bad));
  return ok;
}

template <class F>
static void run(const char* name, F&& once) {
  CK(cudaSetDevice(1));
  CK(cudaMemset(out1, 0, N));
  sync_both();
  double host = 0;
  once();
  sync_both();
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < REPS; ++r) {
    auto h = std::chrono::steady_clock::now();
    once();
    host += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h).count();
  }
  sync_both();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%-48s %7.1f GB/s  %8.1f us  host %7.1f us/pass  %s\n", name, (double)N * REPS / sec / 1e9, sec / REPS * 1e6,
         host / REPS, out_ok() ? "ok" : "WRONG");
  fflush(stdout);
}

static size_t len_of(size_t j, size_t chunk, size_t nchunks) { return j + 1 == nchunks ? N - j * chunk : chunk; }

static void flags_case(bool push, size_t chunk, int ns, int blocks) {
  const size_t nchunks = (N + chunk - 1) / chunk;
  char nm[96];
  snprintf(nm, sizeof nm, "%s chunk %2zu MiB streams %d blocks %3d", push ? "push_flags" : "pull_flags", chunk >> 20, ns,
           blocks);
  run(nm, [&] {
    ++epoch;
    CK(cudaSetDevice(1));
    add_flags<<<blocks, 512, 0, st1[7]>>>(reinterpret_cast<const float4*>(a1), reinterpret_cast<float4*>(out1), N / 16,
                                          chunk / 16, (int)nchunks, flags1, epoch);
    CK(cudaGetLastError());
    CK(cudaSetDevice(push ? 0 : 1));
    for (size_t j = 0; j < nchunks; ++j) {
      cudaStream_t q = push ? st0[j % ns] : st1[j % ns];
      CK(cudaMemcpyAsync((char*)out1 + j * chunk, (const char*)b0 + j * chunk, len_of(j, chunk, nchunks),
                         cudaMemcpyDeviceToDevice, q));
      if (p_write(q, (unsigned long long)(flags1 + j), epoch, 0)) { printf("write failed\n"); exit(1); }
    }
  });
}

static void events_case(size_t chunk, int ns, int blocks, int slots) {
  const size_t nchunks = (N + chunk - 1) / chunk;
  std::vector<cudaEvent_t> ec(nchunks), ek(nchunks);
  CK(cudaSetDevice(1));
  for (size_t j = 0; j < nchunks; ++j) {
    CK(cudaEventCreateWithFlags(&ec[j], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&ek[j], cudaEventDisableTiming));
  }
  char nm[96];
  if (slots) snprintf(nm, sizeof nm, "ring_events chunk %2zu MiB slots %d streams %d blocks %3d", chunk >> 20, slots, ns, blocks);
  else snprintf(nm, sizeof nm, "pull_events chunk %2zu MiB streams %d blocks %3d", chunk >> 20, ns, blocks);
  run(nm, [&] {
    CK(cudaSetDevice(1));
    for (size_t j = 0; j < nchunks; ++j) {
      cudaStream_t q = st1[j % ns];
      char* dst = slots ? (char*)ring1 + (j % slots) * chunk : (char*)out1 + j * chunk;
      // The slot's previous add must be done with it (same pass: ek[j - slots] was recorded above).
      if (slots && j >= (size_t)slots) CK(cudaStreamWaitEvent(q, ek[j - slots], 0));
      const size_t len = len_of(j, chunk, nchunks);
      CK(cudaMemcpyAsync(dst, (const char*)b0 + j * chunk, len, cudaMemcpyDeviceToDevice, q));
      CK(cudaEventRecord(ec[j], q));
      CK(cudaStreamWaitEvent(st1[7], ec[j], 0));
      add_kernel<<<blocks, 512, 0, st1[7]>>>(reinterpret_cast<const float4*>((char*)a1 + j * chunk),
                                             reinterpret_cast<const float4*>(dst),
                                             reinterpret_cast<float4*>((char*)out1 + j * chunk), len / 16);
      CK(cudaGetLastError());
      if (slots) CK(cudaEventRecord(ek[j], st1[7]));
    }
  });
  for (size_t j = 0; j < nchunks; ++j) {
    CK(cudaEventDestroy(ec[j]));
    CK(cudaEventDestroy(ek[j]));
  }
}

// A chunk schedule: sizes in MiB from the front; the rest in chunks of `body` MiB; the last
// ones given by `tail` (sizes in MiB from the end, which may be fractional: 0.5 = 512 KiB).
static std::vector<size_t> make_ends(double head, double body, std::vector<double> tail) {
  std::vector<size_t> lens;
  size_t left = N;
  auto take = [&](double mib) {
    size_t l = ((size_t)(mib * (1 << 20))) & ~(size_t)4095;
    if (l > left) l = left;
    if (l) lens.push_back(l);
    left -= l;
    return l;
  };
  size_t tail_sum = 0;
  for (double t : tail) tail_sum += ((size_t)(t * (1 << 20))) & ~(size_t)4095;
  if (head > 0) take(head);
  while (left > tail_sum)
    if (!take(left - tail_sum < body * (1 << 20) ? (double)(left - tail_sum) / (1 << 20) : body)) break;
  for (double t : tail) take(t);
  if (left) lens.push_back(left);
  std::vector<size_t> ends;
  size_t e = 0;
  for (size_t l : lens) ends.push_back(e += l / 16);
  return ends;
}

// mode 0: push into out with flags; 1: chunked copies and no flags or add (the copies' own cost);
// 2: push into a ring of `slots` slots, the sender's stream waiting (cuStreamWaitValue32) for a
// slot's free flag; 3: the same with a one-thread wait kernel instead.
static void sched_case(const char* label, int mode, std::vector<size_t> ends, int ns, int blocks, int slots = 0) {
  const int nchunks = (int)ends.size();
  size_t *d_ends, *d_xoff;
  uint32_t *cnt, *free0;
  std::vector<size_t> xoff(nchunks), starts(nchunks);
  size_t maxlen = 0;
  for (int j = 0; j < nchunks; ++j) {
    starts[j] = j ? ends[j - 1] : 0;
    maxlen = std::max(maxlen, ends[j] - starts[j]);
  }
  const bool ring = mode >= 2;
  if (ring && maxlen * 16 * slots > ((size_t)256 << 20)) { printf("%s: ring too big\n", label); return; }
  for (int j = 0; j < nchunks; ++j) xoff[j] = ring ? (j % slots) * maxlen : starts[j];
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d_ends, 8 * nchunks));
  CK(cudaMalloc(&d_xoff, 8 * nchunks));
  CK(cudaMalloc(&cnt, 4 * nchunks));
  CK(cudaMemset(cnt, 0, 4 * nchunks));
  CK(cudaMemcpy(d_ends, ends.data(), 8 * nchunks, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_xoff, xoff.data(), 8 * nchunks, cudaMemcpyHostToDevice));
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&free0, 4 * nchunks));
  // Every slot starts free for the first (warm-up) pass: the previous pass's flags read epoch.
  std::vector<uint32_t> init(nchunks, epoch);
  CK(cudaMemcpy(free0, init.data(), 4 * nchunks, cudaMemcpyHostToDevice));
  uint32_t pass = 0;
  char nm[128];
  snprintf(nm, sizeof nm, "%s: %d chunks streams %d blocks %d%s", label, nchunks, ns, blocks,
           ring ? (mode == 2 ? " ring memop" : " ring kernel") : "");
  // A pass's copies wait until the previous pass's adds are done, as a Reduce's next call waits for
  // the root's handshake: otherwise they could overwrite `out` (and flags) under a late add.
  cudaEvent_t done;
  CK(cudaSetDevice(1));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  run(nm, [&] {
    ++epoch;
    ++pass;
    CK(cudaSetDevice(0));
    for (int q = 0; q < ns; ++q) CK(cudaStreamWaitEvent(st0[q], done, 0));
    if (mode != 1) {
      CK(cudaSetDevice(1));
      add_sched<<<blocks, 512, 0, st1[7]>>>(reinterpret_cast<const float4*>(a1),
                                            reinterpret_cast<const float4*>(ring ? ring1 : out1),
                                            reinterpret_cast<float4*>(out1), d_ends, d_xoff, nchunks, flags1, epoch, cnt,
                                            pass, ring ? free0 : nullptr);
      CK(cudaGetLastError());
      CK(cudaEventRecord(done, st1[7]));
    }
    CK(cudaSetDevice(0));
    for (int j = 0; j < nchunks; ++j) {
      cudaStream_t q = st0[j % ns];
      if (ring) {
        // The slot's previous user: chunk j - slots of this pass, or of the previous pass.
        const int prev = j >= slots ? j - slots : j + slots * ((nchunks - 1 - j) / slots);
        const uint32_t want = j >= slots ? epoch : epoch - 1;
        if (prev >= 0) {
          if (mode == 2) {
            if (p_wait(q, (unsigned long long)(free0 + prev), want, 1 /*EQ*/)) { printf("wait failed\n"); exit(1); }
          } else {
            wait_eq<<<1, 1, 0, q>>>(free0 + prev, want);
          }
        }
      }
      char* dst = ring ? (char*)ring1 + xoff[j] * 16 : (char*)out1 + starts[j] * 16;
      CK(cudaMemcpyAsync(dst, (const char*)b0 + starts[j] * 16, (ends[j] - starts[j]) * 16, cudaMemcpyDeviceToDevice, q));
      if (mode != 1 && p_write(q, (unsigned long long)(flags1 + j), epoch, 0)) { printf("write failed\n"); exit(1); }
    }
  });
  CK(cudaFree(free0));
  CK(cudaSetDevice(1));
  CK(cudaEventDestroy(done));
  CK(cudaFree(d_ends));
  CK(cudaFree(d_xoff));
  CK(cudaFree(cnt));
}

int main(int argc, char** argv) {
  N = pair_setup("reduce_lab", argc, argv, st0, st1);
  if (!N) return 1;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&b0, N));
  fill<<<264, 512>>>(b0, N / 4, 777);
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&a1, N));
  CK(cudaMalloc(&out1, N));
  CK(cudaMalloc(&ring1, (size_t)256 << 20));
  CK(cudaMalloc(&flags1, 4 * 4096));
  CK(cudaMemset(flags1, 0, 4 * 4096));
  fill<<<264, 512>>>(a1, N / 4, 1000);
  sync_both();
  cudaDriverEntryPointQueryResult q1, q2;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void**)&p_write, 12000, cudaEnableDefault, &q1));
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void**)&p_wait, 12000, cudaEnableDefault, &q2));
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 1));
  SMS = pr.multiProcessorCount;
  printf("reduce_lab: %s, %d SMs, %zu MiB float out = a + b, b on GPU 0, %d reps\n", pr.name, SMS, N >> 20, REPS);

  run("copy_only (pull, no add; out != a + b)", [&] {
    CK(cudaSetDevice(1));
    CK(cudaMemcpyAsync(out1, b0, N, cudaMemcpyDeviceToDevice, st1[0]));
  });
  for (int blocks : {32, SMS}) {
    char nm[64];
    snprintf(nm, sizeof nm, "serial (pull, then add %d blocks)", blocks);
    run(nm, [&] {
      CK(cudaSetDevice(1));
      CK(cudaMemcpyAsync(out1, b0, N, cudaMemcpyDeviceToDevice, st1[0]));
      add_kernel<<<blocks, 512, 0, st1[0]>>>(reinterpret_cast<const float4*>(a1), reinterpret_cast<const float4*>(out1),
                                             reinterpret_cast<float4*>(out1), N / 16);
    });
  }
  if (argc > 2) {  // s31a's sweep: uniform chunks, flags and events
    for (size_t mib : {4, 8, 16, 32})
      for (int ns : {1, 2})
        for (int blocks : {16, 32, 66}) {
          flags_case(true, mib << 20, ns, blocks);
          flags_case(false, mib << 20, ns, blocks);
        }
    for (size_t mib : {4, 8, 16, 32})
      for (int ns : {1, 2}) events_case(mib << 20, ns, 32, 0);
    for (size_t mib : {8, 16, 32})
      for (int slots : {2, 4}) events_case(mib << 20, 2, 32, slots);
  }
  // Where does a chunk's cost come from: the copies alone, chunked (s31b: about 3 us a copy)?
  sched_case("copies only, 8 MiB", 1, make_ends(0, 8, {}), 1, 0);
  sched_case("copies only, 32 MiB", 1, make_ends(0, 32, {}), 1, 0);
  sched_case("copies only, 32 MiB", 1, make_ends(0, 32, {}), 2, 0);
  // Uniform chunks, then few big chunks and a halving tail (the last add is short).
  for (double c : {16.0, 32.0, 64.0}) {
    char nm[64];
    snprintf(nm, sizeof nm, "push %g MiB", c);
    sched_case(nm, 0, make_ends(0, c, {}), 1, 66);
    sched_case(nm, 0, make_ends(0, c, {}), 2, 66);
  }
  const double big = N >= ((size_t)512 << 20) ? 128 : 32;
  for (int ns : {1, 2}) {
    char nm[96];
    snprintf(nm, sizeof nm, "push %g MiB, tail halving to 1 MiB", big);
    std::vector<double> tail;
    for (double t = big / 2; t >= 1; t /= 2) tail.push_back(t);
    sched_case(nm, 0, make_ends(0, big, tail), ns, 66);
    snprintf(nm, sizeof nm, "push %g MiB, tail halving to 4 MiB", big);
    tail.clear();
    for (double t = big / 2; t >= 4; t /= 2) tail.push_back(t);
    sched_case(nm, 0, make_ends(0, big, tail), ns, 66);
    snprintf(nm, sizeof nm, "push %g MiB, tail 8, 2, 0.5", big);
    sched_case(nm, 0, make_ends(0, big, {8, 2, 0.5}), ns, 132);
  }
  // The in-place form: a ring the sender must wait on.
  for (double c : {16.0, 32.0}) {
    char nm[64];
    snprintf(nm, sizeof nm, "ring %g MiB x 4, tail", c);
    sched_case(nm, 2, make_ends(0, c, {c / 2, c / 4, c / 8}), 1, 66, 4);
    sched_case(nm, 3, make_ends(0, c, {c / 2, c / 4, c / 8}), 1, 66, 4);
  }
  printf("reduce_lab: done\n");
  return 0;
}
