// Can copy engines carry a Broadcast along a chain of GPUs faster than SM copies? Issue 9 asks
// for 1.05x NCCL's Broadcast busbw from 128 MB at 4 GPUs; NCCL's ring reaches 343-359 GB/s there
// and SM copies along a ring top out at 359 (egress_lab), while one copy engine per hop moves
// 386.5. A chain pipelines chunks: hop h copies chunk k once hop h-1 has landed it, so the message
// takes S/B plus (hops - 1) chunks of fill plus whatever each chunk's dependency costs. This lab
// measures that best case: one process, one host thread per hop (as one process per rank would
// have), chunk k of hop h waits on hop h-1's event for chunk k (cudaStreamWaitEvent; the thread
// of hop h issues that wait only after hop h-1's thread has recorded the event, as a rank would
// learn it from its predecessor), `ns` streams per hop taking chunks in turn.
// Broadcast busbw = S / wall time from the moment every hop's thread is running (thread start-up
// is not timed) to the last copy's end; every GPU's copy is checked. Plain events: the cheapest
// dependency there is; separate processes would need interprocess events or flags, never less.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o cechain_lab cechain_lab.cu
// Run:   ./cechain_lab
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "lab.h"
#include "pattern.h"

constexpr int REPS = 5;
constexpr int MAXG = 8;
constexpr size_t MAXS = (size_t)512 << 20;
constexpr size_t MINC = (size_t)1 << 20;
constexpr int MAXCH = (int)(MAXS / MINC);
constexpr int MAXNS = 4;

static int G;
static char* buf[MAXG];
static cudaStream_t st[MAXG][MAXNS];
static cudaEvent_t ev[MAXG][MAXCH];
static std::atomic<int> recorded[MAXG];  // chunks whose event hop h has recorded, this pass
static std::atomic<int> ready{0};        // hop threads started, this pass
static std::atomic<bool> go{false};

static void sync_all() {
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceSynchronize());
  }
}

// Hop h (GPU h -> GPU h+1) of one pass.
static void hop(int h, size_t S, size_t c, int ns) {
  CK(cudaSetDevice(h));
  ready.fetch_add(1);
  while (!go.load(std::memory_order_acquire)) {
  }
  const int nch = (int)((S + c - 1) / c);
  for (int k = 0; k < nch; ++k) {
    cudaStream_t s = st[h][k % ns];
    if (h > 0) {
      while (recorded[h - 1].load(std::memory_order_acquire) <= k) {
      }
      CK(cudaStreamWaitEvent(s, ev[h - 1][k], 0));
    }
    const size_t off = (size_t)k * c, len = off + c <= S ? c : S - off;
    CK(cudaMemcpyAsync(buf[h + 1] + off, buf[h] + off, len, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(ev[h][k], s));
    recorded[h].store(k + 1, std::memory_order_release);
  }
}

static double pass(size_t S, size_t c, int ns) {
  for (int h = 0; h < G; ++h) recorded[h].store(0);
  ready.store(0);
  go.store(false);
  std::vector<std::thread> th;
  for (int h = 0; h + 1 < G; ++h) th.emplace_back(hop, h, S, c, ns);
  while (ready.load() < G - 1) {
  }
  auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : th) t.join();
  sync_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static void run_case(size_t S, size_t c, int ns) {
  static uint32_t salt = 11;
  ++salt;
  CK(cudaSetDevice(0));
  fill<<<264, 512>>>(reinterpret_cast<uint32_t*>(buf[0]), S / 4, salt);
  for (int g = 1; g < G; ++g) {
    CK(cudaSetDevice(g));
    CK(cudaMemset(buf[g], 0, S));
  }
  sync_all();
  pass(S, c, ns);  // warm-up, and the pass that is checked
  unsigned long long bad = 0;
  for (int g = 1; g < G; ++g) {
    CK(cudaSetDevice(g));
    unsigned long long* b;
    CK(cudaMallocManaged(&b, 8));
    *b = 0;
    count_bad<<<264, 512>>>(reinterpret_cast<const uint32_t*>(buf[g]), S / 4, salt, b);
    CK(cudaDeviceSynchronize());
    bad += *b;
    CK(cudaFree(b));
  }
  double best = 1e30, sum = 0;
  for (int r = 0; r < REPS; ++r) {
    const double t = pass(S, c, ns);
    sum += t;
    best = t < best ? t : best;
  }
  printf("S %4zu MiB  chunk %5zu KiB  streams %d   %7.1f GB/s mean  %7.1f best  %9.1f us mean  %s\n", S >> 20, c >> 10, ns,
         (double)S * REPS / sum / 1e9, (double)S / best / 1e9, sum / REPS * 1e6, bad ? "WRONG" : "ok");
  fflush(stdout);
}

int main() {
  CK(cudaGetDeviceCount(&G));
  if (G < 3) {
    printf("cechain_lab: needs 3+ GPUs, %d present\n", G);
    return 1;
  }
  if (G > MAXG) G = MAXG;
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    for (int d = 0; d < G; ++d)
      if (d != g) CK(cudaDeviceEnablePeerAccess(d, 0));
    CK(cudaMalloc(&buf[g], MAXS));
    for (int s = 0; s < MAXNS; ++s) CK(cudaStreamCreateWithFlags(&st[g][s], cudaStreamNonBlocking));
    for (int k = 0; k < MAXCH; ++k)
      CK(cudaEventCreateWithFlags(&ev[g][k], cudaEventDisableTiming));
  }
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("cechain_lab: chain of %d x %s, %d timed passes\n", G, pr.name, REPS);
  // The ceiling: the whole message in one copy per hop, all hops at once (no dependency).
  for (size_t S : {(size_t)128 << 20, (size_t)512 << 20}) {
    for (int g = 0; g + 1 < G; ++g) {
      CK(cudaSetDevice(g));
      CK(cudaMemcpyAsync(buf[g + 1], buf[g], S, cudaMemcpyDeviceToDevice, st[g][0]));
    }
    sync_all();
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < REPS; ++r)
      for (int g = 0; g + 1 < G; ++g) {
        CK(cudaSetDevice(g));
        CK(cudaMemcpyAsync(buf[g + 1], buf[g], S, cudaMemcpyDeviceToDevice, st[g][0]));
      }
    sync_all();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("ring ceiling, S %zu MiB: %.1f GB/s per hop\n", S >> 20, (double)S * REPS / sec / 1e9);
  }
  for (size_t S : {(size_t)128 << 20, (size_t)256 << 20, (size_t)512 << 20})
    for (size_t c : {(size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20, (size_t)8 << 20, (size_t)16 << 20})
      for (int ns : {1, 2, 4}) run_case(S, c, ns);
  return 0;
}
