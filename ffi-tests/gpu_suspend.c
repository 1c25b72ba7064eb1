/* ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29+) on a 2-rank communicator in
 * two processes:
 *   1. ncclCommMemStats: suspendable and persistent bytes nonzero, total their sum, not
 *      suspended; every argument error gets NCCL's code;
 *   2. an AllReduce at three sizes (packets, LL128, the large path) checked element by element,
 *      and one captured in a CUDA graph before any suspend;
 *   3. three cycles: ncclCommSuspend(NCCL_SUSPEND_MEM) gives back at least 90% of the suspendable
 *      bytes (cudaMemGetInfo, read after both ranks suspended), MemStats says suspended, an
 *      AllReduce enqueued meanwhile and a second suspend get ncclInvalidUsage; ncclCommResume
 *      (inside a group in the second cycle), then the AllReduces checked again and the graph
 *      captured before the first suspend replayed and checked (the addresses it holds are valid
 *      again);
 *   4. resume without suspend and suspend without NCCL_SUSPEND_MEM (a no-op) as NCCL answers;
 *   5. the communicator destroyed while suspended.
 * Runs against oxccl (NCCL 2.28.9 lacks these functions). Exit 77 without 2 GPUs, unless
 * TWO_PROCS_ONE_GPU=1. GPU_SUSPEND_HOSTS=1 puts the ranks on two simulated hosts (NCCL_HOSTID).
 * GPU_SUSPEND_FREE=0 skips the cudaMemGetInfo check (for GPUs other processes allocate on).
 * Under NCCL_CUMEM_ENABLE=0 (cuMemAlloc buffers) nothing is suspendable and the calls still work. */
#include <stdint.h>
#include <string.h>
#include "two_procs.h"

#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))
#define IS(call, code) CHECK((call) == (code), "%s is not %s", #call, #code)
#define CU(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(call))

static int fd[2], ready_fd[2][2];
static const size_t sizes[] = {1000, 300000, 9u << 20}; /* floats */
#define NSIZES 3
#define MAXN (9u << 20)

static float* host;

/* AllReduce of `n` floats where rank r contributes (i % 97) * (r + 1) + seed: the sum is
 * 3 * (i % 97) + 2 * seed. */
static void allreduce_checked(ncclComm_t comm, cudaStream_t s, float* buf, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) host[i] = (float)((i % 97) * (rank + 1) + seed);
  /* On `s`: a cudaMemcpy from pageable memory may return before its DMA lands, and `s` does not
   * wait for the legacy default stream. */
  CU(cudaMemcpyAsync(buf, host, n * sizeof(float), cudaMemcpyHostToDevice, s));
  OK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s));
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(host, buf, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    float want = (float)(3 * (i % 97) + 2 * seed);
    CHECK(host[i] == want, "AllReduce of %zu floats (seed %d): element %zu is %g, expected %g", n, seed, i, host[i], want);
  }
}

static uint64_t stat(ncclComm_t comm, ncclCommMemStat_t which) {
  uint64_t v = 12345;
  OK(ncclCommMemStats(comm, which, &v));
  return v;
}

/* The two ranks meet: each writes a byte to the other and reads the other's. */
static void meet(void) {
  char b = 1;
  CHECK(write(ready_fd[rank][1], &b, 1) == 1, "meet: write");
  CHECK(read(ready_fd[1 - rank][0], &b, 1) == 1, "meet: read");
}

static void child(int r) {
  rank = r;
  close(fd[rank == 0 ? 0 : 1]);
  if (getenv("GPU_SUSPEND_HOSTS") && atoi(getenv("GPU_SUSPEND_HOSTS")) == 1) {
    char h[64];
    snprintf(h, sizeof h, "gpu-suspend-host-%d", rank);
    CHECK(setenv("NCCL_HOSTID", h, 1) == 0, "setenv NCCL_HOSTID");
  }
  /* GPU_SUSPEND_MIXED=1: rank 0 alone sets NCCL_CUMEM_ENABLE=0, so rank 1's descriptor has no
   * socket to go to and both ranks fall back to cuMemAlloc shared by CUDA IPC (nothing
   * suspendable on either: the fallback when descriptors cannot travel). */
  if (getenv("GPU_SUSPEND_MIXED") && atoi(getenv("GPU_SUSPEND_MIXED")) == 1 && rank == 0) CHECK(setenv("NCCL_CUMEM_ENABLE", "0", 1) == 0, "setenv");
  int mixed = getenv("GPU_SUSPEND_MIXED") && atoi(getenv("GPU_SUSPEND_MIXED")) == 1;
  int check_free = !(getenv("GPU_SUSPEND_FREE") && atoi(getenv("GPU_SUSPEND_FREE")) == 0);
  /* NCCL_CUMEM_ENABLE=0: cuMemAlloc buffers, which a suspend cannot give back (none suspendable). */
  int cumem = !(getenv("NCCL_CUMEM_ENABLE") && atoi(getenv("NCCL_CUMEM_ENABLE")) == 0) && !mixed;
  if (!cumem) check_free = 0;
  ncclComm_t comm = pair_comm("GPU_SUSPEND_ALARM", fd[1], fd[0]);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *buf, *gbuf;
  CU(cudaMalloc((void**)&buf, MAXN * sizeof(float)));
  CU(cudaMalloc((void**)&gbuf, 4096 * sizeof(float)));
  host = malloc(MAXN * sizeof(float));
  CHECK(host, "malloc");

  /* 1. statistics and their argument errors */
  uint64_t susp = stat(comm, ncclStatGpuMemSuspend), pers = stat(comm, ncclStatGpuMemPersist);
  CHECK((cumem ? susp > 0 : susp == 0) && pers > 0, "MemStats: suspendable %llu, persistent %llu bytes", (unsigned long long)susp, (unsigned long long)pers);
  CHECK(stat(comm, ncclStatGpuMemTotal) == susp + pers, "MemStats: total is not suspendable + persistent");
  CHECK(stat(comm, ncclStatGpuMemSuspended) == 0, "MemStats: suspended before any suspend");
  uint64_t v;
  IS(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL), ncclInvalidArgument);
  IS(ncclCommMemStats(comm, (ncclCommMemStat_t)4, &v), ncclInvalidArgument);
  IS(ncclCommMemStats(comm, (ncclCommMemStat_t)-1, &v), ncclInvalidArgument);
  IS(ncclCommMemStats(NULL, ncclStatGpuMemTotal, &v), ncclInvalidArgument);
  IS(ncclCommSuspend(NULL, NCCL_SUSPEND_MEM), ncclInvalidArgument);
  IS(ncclCommResume(NULL), ncclInvalidArgument);
  if (rank == 0) printf("gpu_suspend: suspendable %llu bytes, persistent %llu bytes\n", (unsigned long long)susp, (unsigned long long)pers);

  /* 2. collectives, and a graph captured before any suspend */
  for (int k = 0; k < NSIZES; k++) allreduce_checked(comm, s, buf, sizes[k], k);
  for (int i = 0; i < 4096; i++) host[i] = (float)(rank + 1) * i;
  CU(cudaMemcpyAsync(gbuf, host, 4096 * sizeof(float), cudaMemcpyHostToDevice, s));
  CU(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK(ncclAllReduce(gbuf, gbuf, 4096, ncclFloat, ncclSum, comm, s));
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphInstantiate(&ge, g, 0));

  /* 3. three suspend / resume cycles */
  for (int cycle = 0; cycle < 3; cycle++) {
    size_t free0, free1, total;
    CU(cudaMemGetInfo(&free0, &total));
    meet(); /* both ranks measured before either suspends */
    OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    CU(cudaMemGetInfo(&free1, &total));
    meet();
    CU(cudaMemGetInfo(&free1, &total)); /* both ranks have suspended (the barrier inside too) */
    if (check_free) {
      /* Both ranks on one GPU free both buffers; each on its own GPU its own. */
      CHECK(free1 >= free0 && free1 - free0 >= susp / 10 * 9, "cycle %d: suspend freed %lld bytes, %llu suspendable", cycle,
            (long long)free1 - (long long)free0, (unsigned long long)susp);
    }
    CHECK(stat(comm, ncclStatGpuMemSuspended) == 1, "MemStats: not suspended after ncclCommSuspend");
    CHECK(stat(comm, ncclStatGpuMemSuspend) == susp, "MemStats: suspendable bytes changed while suspended");
    IS(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, s), ncclInvalidUsage);
    IS(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage);
    if (rank == 0 && cycle == 0) printf("gpu_suspend: suspend gave back %lld bytes (this rank's view)\n", (long long)free1 - (long long)free0);
    if (cycle == 1) {
      OK(ncclGroupStart());
      OK(ncclCommResume(comm));
      CHECK(stat(comm, ncclStatGpuMemSuspended) == 1, "resumed before ncclGroupEnd");
      OK(ncclGroupEnd());
    } else {
      OK(ncclCommResume(comm));
    }
    CHECK(stat(comm, ncclStatGpuMemSuspended) == 0, "MemStats: suspended after ncclCommResume");
    for (int k = 0; k < NSIZES; k++) allreduce_checked(comm, s, buf, sizes[k], 10 * (cycle + 1) + k);
    /* the graph from before the first suspend: its input is reset, then it runs once */
    for (int i = 0; i < 4096; i++) host[i] = (float)(rank + 1) * i;
    CU(cudaMemcpyAsync(gbuf, host, 4096 * sizeof(float), cudaMemcpyHostToDevice, s));
    CU(cudaGraphLaunch(ge, s));
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(host, gbuf, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4096; i++) CHECK(host[i] == 3.0f * i, "cycle %d: graph replay: element %d is %g, expected %g", cycle, i, host[i], 3.0f * i);
  }

  /* 4. what NCCL answers out of order */
  IS(ncclCommResume(comm), ncclInvalidUsage);
  OK(ncclCommSuspend(comm, 0)); /* no NCCL_SUSPEND_MEM: nothing to do */
  CHECK(stat(comm, ncclStatGpuMemSuspended) == 0, "suspend without NCCL_SUSPEND_MEM suspended");
  allreduce_checked(comm, s, buf, 1000, 99);

  /* 5. destroyed while suspended */
  CU(cudaGraphExecDestroy(ge));
  CU(cudaGraphDestroy(g));
  OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  OK(ncclCommDestroy(comm));
  CU(cudaFree(buf));
  CU(cudaFree(gbuf));
  CU(cudaStreamDestroy(s));
  _exit(0);
}

int main(void) {
  if (pipe(fd) != 0 || pipe(ready_fd[0]) != 0 || pipe(ready_fd[1]) != 0) return 2;
  return two_processes("gpu_suspend", child, "a suspend or resume that never returned",
                       "suspend gave the memory back, resume restored it: collectives and a graph from before are correct");
}
