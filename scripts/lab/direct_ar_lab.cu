// What would an AllReduce that reads and writes the peers' own buffers take (issue 9's 16 MB row at
// 4 GPUs)? The put-based AllReduce (rsag.cuh) moves data through scratch: reduce-scatter puts, a
// barrier, the reduction with all-gather puts, a second barrier, a local copy-out. With every
// rank's input and output mapped by its peers (ncclMemAlloc buffers, registered), one streaming
// pass does it: an arrival barrier, then each rank reduces its own slice by reading it from every
// peer's input and writes the sum into every peer's output, then a leaving barrier. No scratch,
// no copy-out, no barrier in the middle.
// Then the floors any AllReduce here stands on, with no reduction at all: every GPU writing its
// 2 (N-1)/N of the message to its peers with no synchronisation (SM stores, `put_floor`, or copy
// engines), and the same stores with the two per-block barriers a put-based form cannot do
// without (`put_sync`). BENCHMARKS, forty-second pass: at 16 MB on 4 GPUs 75 and 78-79 us, where
// NCCL takes 98-103.
//
// One process, N GPUs with peer access (IPC mappings in separate processes reach the same NVLink
// bandwidth). Each GPU's stream gets ITERS launches back to back; time per call = wall time /
// ITERS after all GPUs idle. The outputs are checked after the runs (inputs are small integers,
// so float sums are exact).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o direct_ar_lab direct_ar_lab.cu
// Run:   ./direct_ar_lab [ngpus, default all]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lab.h"

constexpr int MAXR = 8;
constexpr int MAXB = 512;
constexpr int ITERS = 50;

struct Bufs {
  const float4* in[MAXR];
  float4* out[MAXR];
  uint32_t* flags[MAXR];  // flags[p][r * MAXB + b]: set by rank r's block b, in rank p's memory
};

__device__ __forceinline__ uint32_t ld_acq_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Release at system scope: this thread's earlier writes, and (after the __syncthreads before it)
// the block's, are visible to whoever acquires the flag.
__device__ __forceinline__ void st_rel_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Block b of every rank meets block b of every other rank: thread p signals peer p, then waits
// for peer p's signal. Pairing same-numbered blocks is enough: block b touches only its own
// stripe of every buffer, and its peers' block b the same stripe.
template <int N>
__device__ __forceinline__ void block_barrier(const Bufs& B, int rank, uint32_t epoch) {
  __syncthreads();
  int p = threadIdx.x;
  if (p < N && p != rank) {
    st_rel_sys(B.flags[p] + rank * MAXB + blockIdx.x, epoch);
    const uint32_t* mine = B.flags[rank] + p * MAXB + blockIdx.x;
    while ((int32_t)(ld_acq_sys(mine) - epoch) < 0) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// Reads the slice from every rank's input, writes the sum into every rank's output. U vectors a
// thread in flight per peer, to cover the remote reads' latency.
template <int N, int U>
__global__ void __launch_bounds__(1024) direct_ar(Bufs B, int rank, size_t nvec, uint32_t epoch) {
  block_barrier<N>(B, rank, epoch);
  size_t per = nvec / N;
  size_t lo = per * rank, hi = rank == N - 1 ? nvec : lo + per;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < hi; i += stride * U) {
    float4 acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) acc[u] = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int q = 0; q < N; ++q) {
      int p = (rank + q) % N;  // stagger so the peers are read in different orders
      float4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i + u * stride < hi) v[u] = __ldg(B.in[p] + i + u * stride);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i + u * stride < hi) acc[u] = add4(acc[u], v[u]);
    }
#pragma unroll
    for (int q = 0; q < N; ++q) {
      int p = (rank + q) % N;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i + u * stride < hi) B.out[p][i + u * stride] = acc[u];
    }
  }
  block_barrier<N>(B, rank, epoch + 1);
}

// The traffic floor of any AllReduce here: each GPU writes 2 (N - 1) / N of the message to its
// peers (a reduce-scatter's share, then an all-gather's), with no reduction, no barrier and no
// reads from peers: only what leaves and enters every GPU at once.
template <int N>
__global__ void __launch_bounds__(1024) put_floor(Bufs B, int rank, size_t nvec, uint32_t) {
  size_t per = nvec / N;
  const float4* src = B.in[rank] + per * rank;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int phase = 0; phase < 2; ++phase)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per; i += stride) {
      float4 v = src[i];
#pragma unroll
      for (int q = 1; q < N; ++q) B.out[(rank + q) % N][per * rank + i] = v;
    }
}

// The same traffic with the barriers a scratch-based (put) AllReduce cannot do without: after
// the reduce-scatter's writes (the owner may reduce only once all have landed) and at the end.
// Still no reduction and no copy-out: the floor of the put-based form with zero-copy outputs.
template <int N>
__global__ void __launch_bounds__(1024) put_sync(Bufs B, int rank, size_t nvec, uint32_t epoch) {
  size_t per = nvec / N;
  const float4* src = B.in[rank] + per * rank;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int phase = 0; phase < 2; ++phase) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per; i += stride) {
      float4 v = src[i];
#pragma unroll
      for (int q = 1; q < N; ++q) B.out[(rank + q) % N][per * rank + i] = v;
    }
    block_barrier<N>(B, rank, epoch + phase);
  }
}

__global__ void fill(float* p, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (float)((i * 7 + rank * 13) % 61);
}
__global__ void check(const float* p, size_t n, int nranks, unsigned long long* bad) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float e = 0;
    for (int r = 0; r < nranks; ++r) e += (float)((i * 7 + r * 13) % 61);
    if (p[i] != e) atomicAdd(bad, 1ull);
  }
}

typedef void (*Kern)(Bufs, int, size_t, uint32_t);

int main(int argc, char** argv) {
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  int n = argc > 1 ? atoi(argv[1]) : have;
  if (have < 2 || n < 2 || n > have || (n != 2 && n != 4)) {
    printf("direct_ar_lab: needs 2 or 4 GPUs (%d present, %d asked)\n", have, n);
    return 0;
  }
  const size_t maxbytes = 64ull << 20;
  Bufs B{};
  std::vector<cudaStream_t> st(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    for (int e = 0; e < n; ++e)
      if (e != d) CK(cudaDeviceEnablePeerAccess(e, 0));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    float *in, *out;
    CK(cudaMalloc(&in, maxbytes));
    CK(cudaMalloc(&out, maxbytes));
    CK(cudaMalloc(&B.flags[d], MAXR * MAXB * 4));
    CK(cudaMemset(B.flags[d], 0, MAXR * MAXB * 4));
    fill<<<264, 512>>>(in, maxbytes / 4, d);
    CK(cudaDeviceSynchronize());
    B.in[d] = (const float4*)in;
    B.out[d] = (float4*)out;
  }
  uint32_t epoch = 1;
  unsigned long long* bad;
  CK(cudaSetDevice(0));
  CK(cudaMallocManaged(&bad, 8));
  struct Shape {
    int blocks, threads, unroll;
  };
  std::vector<Shape> shapes = {{32, 512, 1}, {64, 512, 1}, {64, 512, 2}, {64, 1024, 1}, {128, 512, 1},
                               {128, 512, 2}, {132, 1024, 1}, {132, 512, 4}, {264, 512, 1}, {96, 1024, 2},
                               {132, 512, 8}, {132, 1024, 4}, {264, 512, 4}, {264, 256, 8}};
  auto kern = [&](int u) -> Kern {
    if (n == 2) return u == 1 ? direct_ar<2, 1> : u == 2 ? direct_ar<2, 2> : u == 4 ? direct_ar<2, 4> : direct_ar<2, 8>;
    return u == 1 ? direct_ar<4, 1> : u == 2 ? direct_ar<4, 2> : u == 4 ? direct_ar<4, 4> : direct_ar<4, 8>;
  };
  printf("direct AllReduce, %d GPUs, float, out of place, us per call (%d calls back to back)\n", n, ITERS);
  printf("%-16s", "blocks x thr/U");
  const size_t sizes[] = {1 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20};
  for (size_t s : sizes) printf(" %8zuM", s >> 20);
  printf("\n");
  for (const Shape& sh : shapes) {
    printf("%4d x %4d /%d   ", sh.blocks, sh.threads, sh.unroll);
    for (size_t bytes : sizes) {
      size_t nvec = bytes / 16;
      Kern k = kern(sh.unroll);
      auto run = [&](int iters) {
        for (int it = 0; it < iters; ++it) {
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            k<<<sh.blocks, sh.threads, 0, st[d]>>>(B, d, nvec, epoch);
          }
          epoch += 2;
        }
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaStreamSynchronize(st[d]));
        }
      };
      run(5);
      auto t0 = std::chrono::steady_clock::now();
      run(ITERS);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / ITERS;
      *bad = 0;
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        check<<<132, 512>>>((const float*)B.out[d], bytes / 4, n, bad);
        CK(cudaDeviceSynchronize());
        CK(cudaMemset(B.out[d], 0, bytes));
        CK(cudaDeviceSynchronize());
      }
      printf(" %8.2f%s", us, *bad ? "!" : " ");
    }
    printf("\n");
    fflush(stdout);
  }
  // The floor: SM writes (put_floor), then copy engines (one stream per peer, 2 (N - 1) / N of
  // the message from each GPU, N - 1 copies at once per GPU).
  printf("traffic floor, no reduction, no synchronisation: us per call\n");
  std::vector<cudaStream_t> ce(n * MAXR);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    for (int q = 0; q < n; ++q) CK(cudaStreamCreateWithFlags(&ce[d * MAXR + q], cudaStreamNonBlocking));
  }
  // unroll 0: put_floor; 1: put_sync; blocks 0: copy engines.
  std::vector<Shape> fshapes = {{64, 512, 0}, {132, 512, 0}, {132, 1024, 0}, {264, 512, 0}, {0, 0, 0},
                                {64, 512, 1}, {132, 512, 1}, {132, 1024, 1}, {264, 512, 1}};
  for (const Shape& sh : fshapes) {
    if (sh.blocks) printf("%s %4d x %4d ", sh.unroll ? "sync " : "SM   ", sh.blocks, sh.threads); else printf("copy engines         ");
    for (size_t bytes : sizes) {
      size_t nvec = bytes / 16, per = bytes / n;
      // The copies as one graph a GPU (N - 1 branches of two copies), so that one launch a GPU
      // issues them: issued one by one, the host would be slower than the copies.
      std::vector<cudaGraphExec_t> graphs(n);
      for (int d = 0; d < n && !sh.blocks; ++d) {
        CK(cudaSetDevice(d));
        cudaStream_t o = ce[d * MAXR];
        cudaEvent_t fork, join[MAXR];
        CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeRelaxed));
        CK(cudaEventRecord(fork, o));
        for (int q = 1; q < n; ++q) {
          int p = (d + q) % n;
          cudaStream_t s2 = ce[d * MAXR + q];
          CK(cudaStreamWaitEvent(s2, fork, 0));
          for (int k = 0; k < 2; ++k)
            CK(cudaMemcpyAsync((char*)B.out[p] + per * d, (const char*)B.in[d] + per * d, per, cudaMemcpyDeviceToDevice, s2));
          CK(cudaEventCreateWithFlags(&join[q], cudaEventDisableTiming));
          CK(cudaEventRecord(join[q], s2));
          CK(cudaStreamWaitEvent(o, join[q], 0));
        }
        cudaGraph_t g;
        CK(cudaStreamEndCapture(o, &g));
        CK(cudaGraphInstantiate(&graphs[d], g, 0));
      }
      auto run = [&](int iters) {
        for (int it = 0; it < iters; ++it) {
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            if (sh.blocks) {
              if (sh.unroll)
                (n == 2 ? put_sync<2> : put_sync<4>)<<<sh.blocks, sh.threads, 0, st[d]>>>(B, d, nvec, epoch);
              else
                (n == 2 ? put_floor<2> : put_floor<4>)<<<sh.blocks, sh.threads, 0, st[d]>>>(B, d, nvec, 0);
            } else {
              CK(cudaGraphLaunch(graphs[d], st[d]));
            }
          }
          epoch += 2;
        }
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaDeviceSynchronize());
        }
      };
      run(5);
      auto t0 = std::chrono::steady_clock::now();
      run(ITERS);
      printf(" %8.2f ", std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / ITERS);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
