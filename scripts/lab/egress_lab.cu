// How many bytes per second can each GPU of an NVSwitch machine push out when every GPU sends at
// once? That rate bounds the bus bandwidth of every collective whose ranks all send the whole time
// (AllReduce, ReduceScatter, AllGather, AlltoAll: nccl-tests' busbw is exactly the bytes each rank
// sends per second), and the ring pattern bounds the chains (Broadcast, Reduce) one hop at a time.
// Issue 9's 4-GPU bars from 128 MB ask for 1.05-1.1x NCCL's busbw; this says how far that is from
// the links. One process drives every visible GPU (peer access between all pairs):
//   a2a  - every GPU copies a distinct piece to each other GPU at once ((n-1) pieces out, (n-1) in);
//   ring - every GPU copies one piece to the next GPU at once (one out, one in);
// each by SM copies (one kernel per GPU writing to all its targets, blocks split among them) or by
// copy engines (one stream per target, cudaMemcpyAsync peer to peer). Per-GPU egress GB/s = bytes
// each GPU sent / wall time of REPS passes; every destination is checked after each case.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o egress_lab egress_lab.cu
// Run:   ./egress_lab [MiB per piece, default 128]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lab.h"
#include "pattern.h"

constexpr int REPS = 10;
constexpr int MAXG = 8;

struct Targets {
  const int4* src[MAXG - 1];
  int4* dst[MAXG - 1];
};

// Blocks are split evenly among the targets.
__global__ void put_many(Targets t, int ntargets, size_t n16) {
  const int per = gridDim.x / ntargets;
  const int k = blockIdx.x / per;
  if (k >= ntargets) return;
  copy16_strided(t.src[k], t.dst[k], n16, (blockIdx.x % per) * (size_t)blockDim.x + threadIdx.x, (size_t)per * blockDim.x);
}

static int G;
static size_t P;                       // bytes per piece
static char* src[MAXG];                // each GPU's source piece
static char* dst[MAXG][MAXG];          // dst[d][s]: GPU d's landing area for GPU s's piece
static cudaStream_t st[MAXG][MAXG];    // per GPU, one stream per target

// Targets of GPU g in a pattern: a2a = every other GPU, ring = the next one.
static std::vector<int> targets(int g, bool ring) {
  std::vector<int> t;
  if (ring) {
    t.push_back((g + 1) % G);
  } else {
    for (int d = 0; d < G; ++d)
      if (d != g) t.push_back(d);
  }
  return t;
}

static void sync_all() {
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceSynchronize());
  }
}

static void run_case(bool ring, bool ce, int blocks) {
  static uint32_t salt = 7;
  ++salt;
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    fill<<<264, 512>>>(reinterpret_cast<uint32_t*>(src[g]), P / 4, salt + g);
    for (int s = 0; s < G; ++s) CK(cudaMemset(dst[g][s], 0, P));
  }
  sync_all();
  auto once = [&]() {
    for (int g = 0; g < G; ++g) {
      CK(cudaSetDevice(g));
      std::vector<int> t = targets(g, ring);
      if (ce) {
        for (size_t k = 0; k < t.size(); ++k)
          CK(cudaMemcpyAsync(dst[t[k]][g], src[g], P, cudaMemcpyDeviceToDevice, st[g][k]));
      } else {
        Targets tg{};
        for (size_t k = 0; k < t.size(); ++k) {
          tg.src[k] = reinterpret_cast<const int4*>(src[g]);
          tg.dst[k] = reinterpret_cast<int4*>(dst[t[k]][g]);
        }
        const int per = blocks / (int)t.size() > 0 ? blocks / (int)t.size() : 1;
        put_many<<<per * (int)t.size(), 512, 0, st[g][0]>>>(tg, (int)t.size(), P / 16);
        CK(cudaGetLastError());
      }
    }
  };
  once();
  sync_all();
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < REPS; ++r) once();
  sync_all();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned long long bad = 0;
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    unsigned long long* b;
    CK(cudaMallocManaged(&b, 8));
    *b = 0;
    for (int s = 0; s < G; ++s) {
      std::vector<int> t = targets(s, ring);
      for (int d : t)
        if (d == g) count_bad<<<264, 512>>>(reinterpret_cast<const uint32_t*>(dst[g][s]), P / 4, salt + s, b);
    }
    CK(cudaDeviceSynchronize());
    bad += *b;
    CK(cudaFree(b));
  }
  const size_t out = P * targets(0, ring).size();  // bytes each GPU sends per pass
  char nm[64];
  if (ce) snprintf(nm, sizeof nm, "%s ce, %zu streams per GPU", ring ? "ring" : "a2a", targets(0, ring).size());
  else snprintf(nm, sizeof nm, "%s sm_put, %d blocks per GPU", ring ? "ring" : "a2a", blocks);
  printf("%-36s %7.1f GB/s out per GPU  %9.1f us per pass  %s\n", nm, (double)out * REPS / sec / 1e9, sec / REPS * 1e6,
         bad ? "WRONG" : "ok");
  fflush(stdout);
}

int main(int argc, char** argv) {
  CK(cudaGetDeviceCount(&G));
  if (G < 2) {
    printf("egress_lab: needs 2 GPUs, %d present\n", G);
    return 1;
  }
  if (G > MAXG) G = MAXG;
  P = (size_t)(argc > 1 ? atoi(argv[1]) : 128) << 20;
  for (int g = 0; g < G; ++g) {
    CK(cudaSetDevice(g));
    for (int d = 0; d < G; ++d)
      if (d != g) CK(cudaDeviceEnablePeerAccess(d, 0));
    CK(cudaMalloc(&src[g], P));
    for (int s = 0; s < G; ++s) CK(cudaMalloc(&dst[g][s], P));
    for (int k = 0; k < G; ++k) CK(cudaStreamCreateWithFlags(&st[g][k], cudaStreamNonBlocking));
  }
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("egress_lab: %d x %s, %d SMs, %zu MiB pieces, %d reps\n", G, pr.name, pr.multiProcessorCount, P >> 20, REPS);
  const int sms = pr.multiProcessorCount;
  for (bool ring : {false, true}) {
    run_case(ring, true, 0);
    for (int b : {32, 66, sms, 2 * sms}) run_case(ring, false, b);
  }
  return 0;
}
