/* NCCL's device API on GPUs: kernels written against NCCL 2.28's nccl_device.h (compiled with
 * NVIDIA's installed headers, not ours) run on whichever libnccl.so.2 is loaded. One process, every
 * visible GPU, ncclCommInitAll; windows and device communicators created inside groups (one thread
 * drives every rank, so the library must run them concurrently). Each iteration, every block of
 * every rank writes its own tag into every peer's window (ncclGetLsaPointer) and its resource buffer
 * (ncclGetResourceBufferLsaPointer), crosses an LSA barrier with its peers' same-index blocks, and
 * checks what its peers wrote; ncclFindWindow must find the window from a pointer into it. Also:
 * host teams, the struct's facts, a multicast request refused, teardown. The same binary runs
 * against NVIDIA's NCCL (the test is honest) and oxccl (ffi-tests/gpu.sh).
 * Usage: devapi_gpu   (exit 77 with fewer than 2 GPUs) */
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cuda_runtime.h>
#include "nccl.h"
#include "nccl_device.h"

constexpr int BLOCKS = 4, THREADS = 256, ITERS = 40, MAXG = 8;
static int checks, fails;
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    checks++;                                                              \
    if (!(cond)) {                                                         \
      fails++;                                                             \
      fprintf(stderr, "FAIL line %d (%s): ", __LINE__, #cond);             \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
    }                                                                      \
  } while (0)
#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))
#define CUDA(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

// The layout user kernels compile against; oxccl's src/symmem/abi.rs pins the same numbers.
static_assert(sizeof(ncclDevComm) == 200 && offsetof(ncclDevComm, lsaBarrier) == 120 && offsetof(ncclDevComm, ginSignalShadows) == 192, "ncclDevComm layout");
static_assert(sizeof(ncclWindow_vidmem) == 72 && offsetof(ncclWindow_vidmem, stride4G) == 24, "ncclWindow_vidmem layout");

#include "devapi_exchange.cuh"

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    fprintf(stderr, "devapi_gpu: needs 2 GPUs\n");
    return 77;
  }
  if (n > MAXG) n = MAXG;
  ncclComm_t comms[MAXG];
  int devs[MAXG];
  for (int i = 0; i < n; i++) devs[i] = i;
  OK(ncclCommInitAll(comms, n, devs));
  const size_t bytes = (size_t)n * BLOCKS * THREADS * sizeof(int);
  int* bufs[MAXG];
  ncclWindow_t wins[MAXG];
  ncclDevComm dcs[MAXG];
  ncclDevCommRequirements reqs[MAXG];
  ncclDevResourceRequirements res[MAXG];
  ncclDevResourceHandle handles[MAXG];
  int* errs[MAXG];
  cudaStream_t streams[MAXG];
  for (int i = 0; i < n; i++) {
    CUDA(cudaSetDevice(i));
    OK(ncclMemAlloc((void**)&bufs[i], bytes));
    CUDA(cudaMalloc(&errs[i], sizeof(int)));
    CUDA(cudaMemset(errs[i], 0, sizeof(int)));
    CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
  }
  OK(ncclGroupStart());
  for (int i = 0; i < n; i++) OK(ncclCommWindowRegister(comms[i], bufs[i], bytes, &wins[i], NCCL_WIN_COLL_SYMMETRIC));
  OK(ncclGroupEnd());
  for (int i = 0; i < n; i++) {
    ncclTeam_t lsa = ncclTeamLsa(comms[i]), world = ncclTeamWorld(comms[i]);
    CHECK(lsa.nRanks == n && lsa.rank == i && world.nRanks == n, "rank %d: lsa team {%d, %d}", i, lsa.nRanks, lsa.rank);
  }
  // A request for multicast memory: NVLS is off, so both libraries refuse it.
  {
    ncclDevCommRequirements mm = {};
    mm.lsaMultimem = true;
    mm.lsaBarrierCount = 1;
    ncclDevComm d;
    ncclResult_t r = ncclDevCommCreate(comms[0], &mm, &d);
    CHECK(r == ncclInvalidArgument || r == ncclInvalidUsage, "lsaMultimem with NVLS off -> %d", (int)r);
  }
  OK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    reqs[i] = ncclDevCommRequirements{};
    reqs[i].lsaBarrierCount = BLOCKS;
    res[i] = ncclDevResourceRequirements{};
    res[i].bufferSize = (size_t)n * BLOCKS * sizeof(int);
    res[i].bufferAlign = 16;
    res[i].outBufferHandle = &handles[i];
    handles[i] = 0xdeadbeef;
    reqs[i].resourceRequirementsList = &res[i];
    OK(ncclDevCommCreate(comms[i], &reqs[i], &dcs[i]));
  }
  OK(ncclGroupEnd());
  for (int i = 0; i < n; i++) {
    CHECK(dcs[i].rank == i && dcs[i].nRanks == n && dcs[i].lsaRank == i && dcs[i].lsaSize == n, "rank %d: devcomm rank %d/%d lsa %d/%d", i, dcs[i].rank,
          dcs[i].nRanks, dcs[i].lsaRank, dcs[i].lsaSize);
    CHECK(handles[i] != 0xdeadbeef && dcs[i].lsaBarrier.nBarriers == BLOCKS && dcs[i].resourceWindow != NULL, "rank %d: handle %u, %d barriers", i, handles[i],
          dcs[i].lsaBarrier.nBarriers);
  }
  for (int it = 1; it <= ITERS && !fails; it++) {
    for (int i = 0; i < n; i++) {
      CUDA(cudaSetDevice(i));
      exchange<<<BLOCKS, THREADS, 0, streams[i]>>>(wins[i], bufs[i], dcs[i], handles[i], it, errs[i]);
      CUDA(cudaGetLastError());
    }
    for (int i = 0; i < n; i++) {
      CUDA(cudaSetDevice(i));
      CUDA(cudaStreamSynchronize(streams[i]));
      int e = -1;
      CUDA(cudaMemcpy(&e, errs[i], sizeof(int), cudaMemcpyDeviceToHost));
      CHECK(e == 0, "rank %d iteration %d: %d wrong values", i, it, e);
    }
  }
  for (int i = 0; i < n; i++) {
    CUDA(cudaSetDevice(i));
    OK(ncclDevCommDestroy(comms[i], &dcs[i]));
    OK(ncclCommWindowDeregister(comms[i], wins[i]));
    OK(ncclMemFree(bufs[i]));
    CUDA(cudaFree(errs[i]));
    CUDA(cudaStreamDestroy(streams[i]));
  }
  for (int i = 0; i < n; i++) OK(ncclCommDestroy(comms[i]));
  printf("devapi_gpu: %d ranks, %d iterations, %d checks, %d failed\n", n, ITERS, checks, fails);
  return fails ? 1 : 0;
}
