// How fast can one direction of an NVLink pair go, and by what means (issue 9's large one-way
// rows: Broadcast, Reduce, Gather, Scatter at 2 ranks, where NCCL already sits at the SM-copy
// ceiling)? GPU 0's buffer goes to GPU 1, one process, peer access on:
//   ce_push / ce_pull   - cudaMemcpyAsync issued on GPU 0's (push) or GPU 1's (pull) stream,
//                         over k streams at once (k copies of N/k, so k copy engines may serve);
//   sm_put / sm_get     - a 16-byte-vector copy kernel of B blocks x 512 on GPU 0 (writes to the
//                         peer) or on GPU 1 (reads from the peer);
//   mixes               - a fraction f of the bytes by one means and the rest by another, at once.
// Each case moves the buffer REPS times back to back on every stream it uses, then waits for
// both GPUs: GB/s = bytes moved / wall time. The destination is checked after every case.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o oneway_lab oneway_lab.cu
// Run:   ./oneway_lab [MiB, default 512]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pair.h"
#include "pattern.h"

constexpr int REPS = 10;

__global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  copy16_strided(src, dst, n, blockIdx.x * (size_t)blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}

// One part of a case: bytes [off, off+len) moved by `how` with `k` streams or `blocks` blocks.
enum How { CE_PUSH, CE_PULL, SM_PUT, SM_GET };
struct Part {
  How how;
  double frac;
  int k;  // streams (CE) or blocks (SM)
};

static char *src0, *dst1;
static size_t N;
static std::vector<cudaStream_t> st0, st1;  // per GPU, 8 each

static void issue(const Part& p, size_t off, size_t len, int& used0, int& used1) {
  if (p.how == CE_PUSH || p.how == CE_PULL) {
    int dev = p.how == CE_PUSH ? 0 : 1;
    CK(cudaSetDevice(dev));
    size_t piece = (len / p.k) & ~(size_t)4095;
    for (int s = 0; s < p.k; ++s) {
      size_t o = off + s * piece, l = s == p.k - 1 ? len - s * piece : piece;
      cudaStream_t q = dev == 0 ? st0[used0++] : st1[used1++];
      CK(cudaMemcpyAsync(dst1 + o, src0 + o, l, cudaMemcpyDeviceToDevice, q));
    }
  } else {
    int dev = p.how == SM_PUT ? 0 : 1;
    CK(cudaSetDevice(dev));
    cudaStream_t q = dev == 0 ? st0[used0++] : st1[used1++];
    copy16<<<p.k, 512, 0, q>>>(reinterpret_cast<const int4*>(src0 + off), reinterpret_cast<int4*>(dst1 + off), len / 16);
    CK(cudaGetLastError());
  }
}

// One warm-up pass, `reset`, then REPS passes timed until both GPUs are idle: seconds.
template <class F, class R>
static double timed(F&& once, R&& reset) {
  once();
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  reset();
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < REPS; ++r) once();
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whether GPU 1's destination holds the pattern `fill` wrote with `salt`.
static bool dst_ok(uint32_t salt) {
  unsigned long long* bad;
  CK(cudaSetDevice(1));
  CK(cudaMallocManaged(&bad, 8));
  *bad = 0;
  count_bad<<<264, 512>>>(reinterpret_cast<const uint32_t*>(dst1), N / 4, salt, bad);
  CK(cudaDeviceSynchronize());
  const bool ok = *bad == 0;
  CK(cudaFree(bad));
  return ok;
}

static void run_case(const char* name, std::vector<Part> parts) {
  static uint32_t salt = 1;
  ++salt;
  CK(cudaSetDevice(0));
  fill<<<264, 512>>>(reinterpret_cast<uint32_t*>(src0), N / 4, salt);
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(1));
  CK(cudaMemset(dst1, 0, N));
  CK(cudaDeviceSynchronize());
  auto once = [&]() {
    int u0 = 0, u1 = 0;
    size_t off = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      size_t len = i + 1 == parts.size() ? N - off : ((size_t)(N * parts[i].frac)) & ~(size_t)65535;
      issue(parts[i], off, len, u0, u1);
      off += len;
    }
  };
  const double sec = timed(once, [] {});
  printf("%-40s %7.1f GB/s  %8.1f us per %zu MiB  %s\n", name, (double)N * REPS / sec / 1e9, sec / REPS * 1e6, N >> 20,
         dst_ok(salt) ? "ok" : "WRONG");
  fflush(stdout);
}


// ---- The copy-engine pipeline (what a 2-rank Broadcast would run): GPU 0's streams copy chunk i
// of the source into slot i % S of GPU 1's staging ring, then set that slot's `full` flag on GPU 1;
// a kernel on GPU 1 waits for the flag, copies the slot out to the destination, clears the flag
// and sets the slot's `free` flag on GPU 0; GPU 0's stream waits for `free` before refilling the
// slot. Flags only toggle 0/1, so the same stream operations could be replayed by a CUDA graph.
typedef int (*WaitFn)(cudaStream_t, unsigned long long, unsigned int, unsigned int);
typedef int (*WriteFn)(cudaStream_t, unsigned long long, unsigned int, unsigned int);
static WaitFn p_wait;
static WriteFn p_write;

__device__ __forceinline__ void st_rel_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Receiver: slot s is drained by the G = gridDim.x / slots blocks [s*G, (s+1)*G), each copying
// a G-th of every chunk that lands in it. `cnt[s]` counts block finishes on the slot, `gen[s]` the
// slot's completed uses; both only grow (u32, compared by difference), and every block reads their
// values at entry, when no other launch is touching them (stream order). The block that finishes
// a use last clears `full`, frees the slot at the sender, then bumps `gen`: a block may wait for
// the slot's next fill only once `gen` says the previous use is over, or it could see the stale 1.
__global__ void drain(const char* ring, char* dst, size_t n, size_t chunk, int slots, uint32_t* full, uint32_t* cnt,
                      uint32_t* gen, uint32_t* peer_free) {
  const uint32_t G = gridDim.x / slots;
  const int s = blockIdx.x / G;
  const uint32_t g = blockIdx.x % G;
  if ((uint32_t)s >= (uint32_t)slots) return;
  __shared__ uint32_t cbase, gbase;
  if (threadIdx.x == 0) {
    cbase = *(volatile uint32_t*)(cnt + s);
    gbase = *(volatile uint32_t*)(gen + s);
  }
  __syncthreads();
  const size_t nchunks = (n + chunk - 1) / chunk;
  uint32_t k = 0;
  for (size_t j = s; j < nchunks; j += slots, ++k) {
    if (threadIdx.x == 0) {
      // Acquire: the last block's clear of `full` (and its copy-out) happen before we look again.
      while ((int32_t)(ld_acq_sys(gen + s) - (gbase + k)) < 0) {}
      // Acquire (system): the sender's copy into the slot is visible once its flag write is.
      while (ld_acq_sys(full + s) == 0) {}
    }
    __syncthreads();
    const size_t len = j + 1 == nchunks ? n - j * chunk : chunk;
    const size_t v = len / 16, per = (v + G - 1) / G, lo = g * per, hi = lo + per < v ? lo + per : v;
    const int4* src = reinterpret_cast<const int4*>(ring + (size_t)s * chunk);
    int4* d = reinterpret_cast<int4*>(dst + j * chunk);
    for (size_t x = lo + threadIdx.x; x < hi; x += blockDim.x) d[x] = src[x];
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();  // this block's reads of the slot are done before the count says so
      if (atomicAdd(cnt + s, 1u) - cbase == G * (k + 1) - 1) {
        full[s] = 0;
        __threadfence_system();  // the clear lands before the sender may refill the slot
        st_rel_sys(peer_free + s, 1u);
        st_rel_sys(gen + s, gbase + k + 1);
      }
    }
  }
}

static void pipeline_case(size_t chunk, int slots, int nstreams, int blocks, bool graph = false) {
  static uint32_t salt = 1000;
  ++salt;
  char* ring;
  uint32_t *full, *done, *gen, *freef;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&ring, chunk * slots));
  CK(cudaMalloc(&full, 4 * slots));
  CK(cudaMemset(full, 0, 4 * slots));
  CK(cudaMalloc(&done, 4 * slots));
  CK(cudaMemset(done, 0, 4 * slots));
  CK(cudaMalloc(&gen, 4 * slots));
  CK(cudaMemset(gen, 0, 4 * slots));
  CK(cudaMemset(dst1, 0, N));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&freef, 4 * slots));
  std::vector<uint32_t> ones(slots, 1);
  CK(cudaMemcpy(freef, ones.data(), 4 * slots, cudaMemcpyHostToDevice));
  fill<<<264, 512>>>(reinterpret_cast<uint32_t*>(src0), N / 4, salt);
  CK(cudaDeviceSynchronize());
  const size_t nchunks = (N + chunk - 1) / chunk;
  double host_us = 0;
  // The sender's stream operations for one pass; with `graph`, captured once (fork from st0[0]
  // to the other streams and back) and replayed per pass.
  cudaEvent_t fork, joins[8];
  CK(cudaSetDevice(0));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  for (auto& e : joins) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto sender_ops = [&]() {
    CK(cudaEventRecord(fork, st0[0]));
    for (int q = 1; q < nstreams; ++q) CK(cudaStreamWaitEvent(st0[q], fork, 0));
    for (size_t i = 0; i < nchunks; ++i) {
      const int s = (int)(i % slots);
      cudaStream_t q = st0[s % nstreams];
      const size_t len = i + 1 == nchunks ? N - i * chunk : chunk;
      if (p_wait(q, (unsigned long long)(freef + s), 1, 0 /*GEQ*/)) { printf("wait failed\n"); exit(1); }
      if (p_write(q, (unsigned long long)(freef + s), 0, 0)) { printf("write failed\n"); exit(1); }
      CK(cudaMemcpyAsync(ring + (size_t)s * chunk, src0 + i * chunk, len, cudaMemcpyDeviceToDevice, q));
      if (p_write(q, (unsigned long long)(full + s), 1, 0)) { printf("write failed\n"); exit(1); }
    }
    for (int q = 1; q < nstreams; ++q) {
      CK(cudaEventRecord(joins[q], st0[q]));
      CK(cudaStreamWaitEvent(st0[0], joins[q], 0));
    }
  };
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st0[0], cudaStreamCaptureModeRelaxed));
    sender_ops();
    CK(cudaStreamEndCapture(st0[0], &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
  }
  auto once = [&]() {
    // The receiver first: the sender's queue could fill up waiting for it otherwise.
    CK(cudaSetDevice(1));
    drain<<<blocks, 512, 0, st1[0]>>>(ring, dst1, N, chunk, slots, full, done, gen, freef);
    CK(cudaGetLastError());
    auto h0 = std::chrono::steady_clock::now();
    CK(cudaSetDevice(0));
    if (graph) CK(cudaGraphLaunch(exec, st0[0]));
    else sender_ops();
    host_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
  };
  const double sec = timed(once, [&] { host_us = 0; });
  printf("pipeline%s chunk %5zu KiB slots %d streams %d drain blocks %3d  %7.1f GB/s  %8.1f us  host %6.1f us/call  %s\n",
         graph ? " graph" : "", chunk >> 10, slots, nstreams, blocks, (double)N * REPS / sec / 1e9, sec / REPS * 1e6, host_us / REPS,
         dst_ok(salt) ? "ok" : "WRONG");
  fflush(stdout);
  CK(cudaFree(ring));
  CK(cudaFree(full));
  CK(cudaFree(done));
  CK(cudaFree(gen));
  CK(cudaSetDevice(0));
  CK(cudaFree(freef));
  if (exec) CK(cudaGraphExecDestroy(exec));
  CK(cudaEventDestroy(fork));
  for (auto& e : joins) CK(cudaEventDestroy(e));
}

// Both directions at once (SendRecv at 2 ranks): GPU 0 -> GPU 1 and GPU 1 -> GPU 0, each by `how`.
static char *src1, *dst0;
static void bidir_case(const char* name, int ce, int blocks) {
  auto once = [&]() {
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      const char* s = d == 0 ? src0 : src1;
      char* t = d == 0 ? dst1 : dst0;
      cudaStream_t q = d == 0 ? st0[0] : st1[0];
      if (ce) CK(cudaMemcpyAsync(t, s, N, cudaMemcpyDeviceToDevice, q));
      else copy16<<<blocks, 512, 0, q>>>(reinterpret_cast<const int4*>(s), reinterpret_cast<int4*>(t), N / 16);
    }
  };
  const double sec = timed(once, [] {});
  printf("%-40s %7.1f GB/s each way\n", name, (double)N * REPS / sec / 1e9);
  fflush(stdout);
}

int main(int argc, char** argv) {
  N = pair_setup("oneway_lab", argc, argv, st0, st1);
  if (!N) return 1;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&src0, N));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&dst1, N));
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("oneway_lab: %s, %d SMs, async engines %d, %zu MiB GPU0 -> GPU1, %d reps\n", pr.name, pr.multiProcessorCount,
         pr.asyncEngineCount, N >> 20, REPS);
  const int sms = pr.multiProcessorCount;
  for (int k : {1, 2, 4}) {
    char nm[64];
    snprintf(nm, sizeof nm, "ce_push x%d", k);
    run_case(nm, {{CE_PUSH, 1, k}});
    snprintf(nm, sizeof nm, "ce_pull x%d", k);
    run_case(nm, {{CE_PULL, 1, k}});
  }
  run_case("ce_push x2 + ce_pull x2 (1/2)", {{CE_PUSH, 0.5, 2}, {CE_PULL, 0.5, 2}});
  for (int b : {32, 64, sms, 2 * sms}) {
    char nm[64];
    snprintf(nm, sizeof nm, "sm_put %d blocks", b);
    run_case(nm, {{SM_PUT, 1, b}});
    snprintf(nm, sizeof nm, "sm_get %d blocks", b);
    run_case(nm, {{SM_GET, 1, b}});
  }
  run_case("sm_put + sm_get (1/2, SMs each)", {{SM_PUT, 0.5, sms}, {SM_GET, 0.5, sms}});
  for (double f : {0.3, 0.5, 0.7}) {
    if (argc <= 2) break;  // measured in s30a; pass a second argument to repeat
    for (int b : {16, 32, sms}) {
      char nm[80];
      snprintf(nm, sizeof nm, "ce_push x2 %.1f + sm_put %d", f, b);
      run_case(nm, {{CE_PUSH, f, 2}, {SM_PUT, 1 - f, b}});
      snprintf(nm, sizeof nm, "ce_pull x2 %.1f + sm_put %d", f, b);
      run_case(nm, {{CE_PULL, f, 2}, {SM_PUT, 1 - f, b}});
      snprintf(nm, sizeof nm, "ce_push x2 %.1f + sm_get %d", f, b);
      run_case(nm, {{CE_PUSH, f, 2}, {SM_GET, 1 - f, b}});
    }
  }
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&src1, N));
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&dst0, N));
  bidir_case("bidir ce", 1, 0);
  bidir_case("bidir sm_put 132", 0, 132);
  bidir_case("bidir sm_put 264", 0, 264);
  cudaDriverEntryPointQueryResult q1, q2;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void**)&p_wait, 12000, cudaEnableDefault, &q1));
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void**)&p_write, 12000, cudaEnableDefault, &q2));
  if (!p_wait || !p_write) { printf("no stream memops\n"); return 1; }
  for (size_t c : {(size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20, (size_t)8 << 20, (size_t)16 << 20})
    for (int sl : {4, 8})
      for (int ns : {1, 2}) pipeline_case(c, sl, ns, 4 * sl);
  pipeline_case((size_t)4 << 20, 8, 2, 8);
  pipeline_case((size_t)4 << 20, 8, 2, 16);
  pipeline_case((size_t)4 << 20, 8, 2, 64);
  pipeline_case((size_t)4 << 20, 8, 4, 32);
  pipeline_case((size_t)2 << 20, 16, 2, 32);
  pipeline_case((size_t)4 << 20, 8, 2, 32, true);
  pipeline_case((size_t)8 << 20, 4, 2, 16, true);
  printf("oneway_lab: done\n");
  return 0;
}
