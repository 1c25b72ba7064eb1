/* Communicator life cycle on GPUs, through the C ABI the way a NCCL application drives it: one
 * thread per GPU in one process. Covers split (colors, NOCOLOR, key order), shrink (unsorted
 * exclude list sorted in place, dense renumbering), nonblocking init, collectives and split
 * (ncclInProgress, polled through ncclCommGetAsyncError), ncclCommRegister, ncclMemAlloc /
 * ncclMemFree (device restored), symmetric windows, finalize/destroy, revoke, and NCCL_CHECK_POINTERS
 * refusing host and other-GPU buffers, AllGather and AlltoAll into registered buffers (large enough
 * for oxccl's zero-copy path, through re-registration in freed and reallocated memory). Every child is used
 * for an AllReduce whose result is checked. The same binary runs against NVIDIA's NCCL (the test is
 * honest) and oxccl: ffi-tests/gpu.sh runs both.
 * Usage: gpu_comm [NGPUS]   (default: every visible GPU; exit 77 with fewer than 2) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include "nccl.h"

static int N;
static ncclUniqueId id_a, id_b;
static pthread_barrier_t bar;
static atomic_int checks, fails;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    atomic_fetch_add(&checks, 1);                                          \
    if (!(cond)) {                                                         \
      atomic_fetch_add(&fails, 1);                                         \
      fprintf(stderr, "FAIL rank %d line %d (%s): ", rank, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
    }                                                                      \
  } while (0)
#define OK(call) CHECK((call) == ncclSuccess, "%s", ncclGetLastError(NULL))
/* Nonblocking calls may return ncclInProgress; then the comm's state is polled. */
#define OK_NB(comm, call)                                                  \
  do {                                                                     \
    ncclResult_t r_ = (call);                                              \
    CHECK(r_ == ncclSuccess || r_ == ncclInProgress, "%s -> %d", #call, (int)r_); \
    if (r_ == ncclInProgress) CHECK(settle(comm) == ncclSuccess, "%s did not complete", #call); \
  } while (0)

/* Polls a communicator's state until it leaves ncclInProgress (bounded: 60 s). */
static ncclResult_t settle(ncclComm_t c) {
  ncclResult_t st = ncclInProgress;
  for (int i = 0; i < 60000; i++) {
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return ncclInternalError;
    if (st != ncclInProgress) return st;
    usleep(1000);
  }
  return ncclInProgress;
}

/* AllReduce(sum) of `count` floats on `buf` (in place): rank r contributes (r+1)*(i%7+1), so
 * every element must equal n(n+1)/2*(i%7+1), exact in float for these sizes. */
static void allreduce_check(int rank, const char *what, ncclComm_t c, float *buf, size_t count, cudaStream_t s) {
  int n = 0, r = -1;
  OK(ncclCommCount(c, &n));
  OK(ncclCommUserRank(c, &r));
  float *h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)((r + 1) * (int)(i % 7 + 1));
  /* On the operation's stream: s does not synchronize with the legacy stream, and a plain
   * cudaMemcpy from pageable memory may return before its DMA has landed. */
  CHECK(cudaMemcpyAsync(buf, h, count * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess, "%s: upload", what);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s: upload sync", what);
  OK_NB(c, ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c, s));
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s: sync", what);
  CHECK(cudaMemcpyAsync(h, buf, count * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess, "%s: download", what);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s: download sync", what);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++)
    if (h[i] != (float)(n * (n + 1) / 2 * (int)(i % 7 + 1))) bad++;
  CHECK(bad == 0, "%s: %zu of %zu elements wrong (n %d)", what, bad, count, n);
  free(h);
}

/* AllGather and AlltoAll of `per` floats per rank into registered buffers, `reps` times each with
 * new contents: element i of rank q's block for iteration k is q*1000003 + k*7 + i%4093. Large
 * enough (per pair, more than one round of oxccl's put scratch) for peers to write straight into
 * the registered receive buffer; `cumem` picks ncclMemAlloc (cuMem) or cudaMalloc memory. */
static void registered_exchange_check(int rank, ncclComm_t c, size_t per, int cumem, int reps, cudaStream_t s) {
  int n = N;
  float *send = NULL, *recv = NULL;
  size_t total = per * (size_t)n;
  if (cumem) {
    OK(ncclMemAlloc((void **)&send, total * sizeof(float)));
    OK(ncclMemAlloc((void **)&recv, total * sizeof(float)));
  } else {
    CHECK(cudaMalloc((void **)&send, total * sizeof(float)) == cudaSuccess, "cudaMalloc send");
    CHECK(cudaMalloc((void **)&recv, total * sizeof(float)) == cudaSuccess, "cudaMalloc recv");
  }
  if (!send || !recv) return;
  void *hs = NULL, *hr = NULL;
  OK(ncclCommRegister(c, send, total * sizeof(float), &hs));
  OK(ncclCommRegister(c, recv, total * sizeof(float), &hr));
  float *h = malloc(total * sizeof(float));
  for (int k = 0; k < reps; k++) {
    for (int alltoall = 0; alltoall < 2; alltoall++) {
      /* AllGather sends block 0 of `send` to everyone; AlltoAll sends block q to rank q and tags
       * it with the destination too. */
      for (size_t i = 0; i < total; i++) {
        size_t q = i / per;
        h[i] = (float)(rank * 1000003 + k * 7 + (int)(i % per % 4093) + (alltoall ? (int)q * 17 : 0));
      }
      CHECK(cudaMemcpyAsync(send, h, total * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess, "upload");
      CHECK(cudaMemsetAsync(recv, 0xff, total * sizeof(float), s) == cudaSuccess, "clear");
      if (alltoall)
        OK(ncclAlltoAll(send, recv, per, ncclFloat, c, s));
      else
        OK(ncclAllGather(send, recv, per, ncclFloat, c, s));
      CHECK(cudaMemcpyAsync(h, recv, total * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess, "download");
      CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
      size_t bad = 0, first = (size_t)-1;
      for (size_t i = 0; i < total; i++) {
        int q = (int)(i / per);
        float want = (float)(q * 1000003 + k * 7 + (int)(i % per % 4093) + (alltoall ? rank * 17 : 0));
        if (h[i] != want) {
          if (!bad) first = i;
          bad++;
        }
      }
      CHECK(bad == 0, "registered %s (%s, iteration %d): %zu of %zu wrong, first at %zu", alltoall ? "AlltoAll" : "AllGather",
            cumem ? "ncclMemAlloc" : "cudaMalloc", k, bad, total, first);
    }
  }
  free(h);
  OK(ncclCommDeregister(c, hs));
  OK(ncclCommDeregister(c, hr));
  if (cumem) {
    OK(ncclMemFree(send));
    OK(ncclMemFree(recv));
  } else {
    cudaFree(send);
    cudaFree(recv);
  }
}

static void *rank_main(void *arg) {
  int rank = (int)(long)arg;
  const size_t count = 1 << 20;
  cudaSetDevice(rank);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *buf = NULL;
  CHECK(cudaMalloc((void **)&buf, count * sizeof(float)) == cudaSuccess, "cudaMalloc");

  /* 1. A blocking communicator. */
  ncclComm_t a = NULL;
  OK(ncclCommInitRank(&a, N, id_a, rank));
  allreduce_check(rank, "parent", a, buf, count, s);

  /* 2. Split: rank 0 opts out; the others split by parity, ordered by descending parent rank. */
  ncclComm_t child = (ncclComm_t)(long)1;
  int color = rank == 0 ? NCCL_SPLIT_NOCOLOR : rank % 2;
  OK(ncclCommSplit(a, color, -rank, &child, NULL));
  if (rank == 0) {
    CHECK(child == NULL, "NOCOLOR must give a NULL communicator");
  } else {
    int members = 0, above = 0;
    for (int p = 1; p < N; p++)
      if (p % 2 == rank % 2) {
        members++;
        if (p > rank) above++;
      }
    int cn = -1, cr = -1;
    OK(ncclCommCount(child, &cn));
    OK(ncclCommUserRank(child, &cr));
    CHECK(cn == members && cr == above, "split child: rank %d of %d, expected %d of %d", cr, cn, above, members);
    allreduce_check(rank, "split child", child, buf, count, s);
    OK(ncclCommDestroy(child));
  }
  pthread_barrier_wait(&bar);

  /* 3. Shrink: exclude the last rank (and rank 0 from 3 ranks on), the list given unsorted.
   * Excluded ranks do not call. */
  int excl[2] = {N - 1, 0};
  int nexcl = N >= 3 ? 2 : 1;
  int excluded = rank == N - 1 || (nexcl == 2 && rank == 0);
  if (!excluded) {
    ncclComm_t sh = NULL;
    OK(ncclCommShrink(a, excl, nexcl, &sh, NULL, NCCL_SHRINK_DEFAULT));
    if (nexcl == 2) CHECK(excl[0] == 0 && excl[1] == N - 1, "exclude list not sorted in place: %d %d", excl[0], excl[1]);
    int sn = -1, sr = -1;
    OK(ncclCommCount(sh, &sn));
    OK(ncclCommUserRank(sh, &sr));
    CHECK(sn == N - nexcl && sr == rank - (nexcl == 2), "shrunk: rank %d of %d", sr, sn);
    allreduce_check(rank, "shrunk", sh, buf, count, s);
    OK(ncclCommDestroy(sh));
  }
  pthread_barrier_wait(&bar);

  /* 4. ncclMemAlloc memory: registered, then as a symmetric window. */
  void *m = NULL;
  OK(ncclMemAlloc(&m, count * sizeof(float)));
  int dev = -1;
  void *handle = NULL;
  OK(ncclCommRegister(a, m, count * sizeof(float), &handle));
  allreduce_check(rank, "registered buffer", a, (float *)m, count, s);
  OK(ncclCommDeregister(a, handle));
  ncclWindow_t win = NULL;
  OK(ncclCommWindowRegister(a, m, count * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
  allreduce_check(rank, "window", a, (float *)m, count, s);
  OK(ncclCommWindowDeregister(a, win));
  cudaSetDevice((rank + 1) % N); /* ncclMemFree must restore the caller's device */
  OK(ncclMemFree(m));
  cudaGetDevice(&dev);
  CHECK(dev == (rank + 1) % N, "ncclMemFree left device %d current", dev);
  cudaSetDevice(rank);
  pthread_barrier_wait(&bar);

  /* 4b. Registered buffers used by peers: 10 Mi floats (40 MiB) per pair, more than one round of oxccl's put scratch at 2 and 4 ranks; cuMem then cudaMalloc memory,
   * then cuMem again (freed and reallocated memory registered anew). */
  for (int v = 0; v < 3; v++) registered_exchange_check(rank, a, (size_t)10 << 20, v != 1, 3, s);
  pthread_barrier_wait(&bar);

  /* 5. A nonblocking communicator, its collectives and its split. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t b = NULL;
  OK_NB(b, ncclCommInitRankConfig(&b, N, id_b, rank, &cfg));
  CHECK(b != NULL, "nonblocking init must set *comm at once");
  allreduce_check(rank, "nonblocking", b, buf, count, s);
  ncclComm_t bc = NULL;
  ncclResult_t r = ncclCommSplit(b, rank % 2, rank, &bc, NULL);
  CHECK(r == ncclSuccess || r == ncclInProgress, "nonblocking split -> %d", (int)r);
  CHECK(settle(b) == ncclSuccess, "parent of a nonblocking split");
  for (int i = 0; i < 60000 && *(ncclComm_t volatile *)&bc == NULL; i++) usleep(1000);
  CHECK(bc != NULL, "nonblocking split never wrote the child");
  if (bc) {
    CHECK(settle(bc) == ncclSuccess, "nonblocking child");
    int cn = -1;
    OK(ncclCommCount(bc, &cn));
    CHECK(cn == (N + 1 - rank % 2) / 2, "nonblocking child of %d ranks", cn);
    allreduce_check(rank, "nonblocking child", bc, buf, count, s);
    OK_NB(bc, ncclCommFinalize(bc));
    OK(ncclCommDestroy(bc));
  }
  OK_NB(b, ncclCommFinalize(b));
  OK(ncclCommDestroy(b));
  pthread_barrier_wait(&bar);

  /* 6. NCCL_CHECK_POINTERS=1 (gpu.sh sets it): host memory and another GPU's memory are refused
   * with ncclInvalidArgument, by NCCL as by oxccl. */
  {
    static float host[16];
    float *elsewhere = NULL;
    cudaSetDevice((rank + 1) % N);
    CHECK(cudaMalloc((void **)&elsewhere, 16 * sizeof(float)) == cudaSuccess, "cudaMalloc elsewhere");
    cudaSetDevice(rank);
    r = ncclAllReduce(host, buf, 16, ncclFloat, ncclSum, a, s);
    CHECK(r == ncclInvalidArgument, "AllReduce from host memory -> %d", (int)r);
    r = ncclAllReduce(buf, elsewhere, 16, ncclFloat, ncclSum, a, s);
    CHECK(r == ncclInvalidArgument, "AllReduce into GPU %d's memory -> %d", (rank + 1) % N, (int)r);
    /* Every rank must refuse, or the others would wait in the collective: the receive buffer
     * (checked on every rank; Broadcast's send buffer only at the root). */
    r = ncclBroadcast(buf, host, 16, ncclFloat, 0, a, s);
    CHECK(r == ncclInvalidArgument, "Broadcast into host memory -> %d", (int)r);
    cudaFree(elsewhere);
  }
  pthread_barrier_wait(&bar);

  /* 7. Revoke: afterwards collectives are refused; destroy still works. */
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync before revoke");
  OK(ncclCommRevoke(a, NCCL_REVOKE_DEFAULT));
  r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, a, s);
  CHECK(r != ncclSuccess && r != ncclInProgress, "AllReduce on a revoked communicator -> %d", (int)r);
  OK(ncclCommDestroy(a));

  cudaFree(buf);
  cudaStreamDestroy(s);
  return NULL;
}

int main(int argc, char **argv) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  N = argc > 1 ? atoi(argv[1]) : ndev;
  if (N > ndev) N = ndev;
  if (N < 2) {
    printf("gpu_comm: needs 2 GPUs, %d visible: skipped\n", ndev);
    return 77;
  }
  alarm(300); /* a hang is a failure, not a stuck job */
  int version = 0;
  ncclGetVersion(&version);
  if (ncclGetUniqueId(&id_a) != ncclSuccess || ncclGetUniqueId(&id_b) != ncclSuccess) {
    printf("gpu_comm: ncclGetUniqueId failed\n");
    return 1;
  }
  pthread_barrier_init(&bar, NULL, N);
  pthread_t t[64];
  for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, rank_main, (void *)i);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  printf("gpu_comm: %d GPUs, NCCL version %d: %d checks, %d failed\n", N, version, checks, fails);
  return fails == 0 ? 0 : 1;
}
