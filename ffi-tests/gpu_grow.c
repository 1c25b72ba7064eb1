// ncclCommGetUniqueId / ncclCommGrow (NCCL 2.30+), two processes. Rank 0 makes a 1-rank
// communicator (the parent), gets a grow id from it and hands it to process 1 over a pipe; rank 0
// calls ncclCommGrow(parent, 2, &id, -1, ...) and process 1 ncclCommGrow(NULL, 2, &id, 1, ...).
// On the grown communicator: its size and ranks (rank 0 kept its rank), then an AllReduce checked
// element by element on both ranks; then the parent still works (a 1-rank AllReduce). A second grow
// of the same parent follows with a nonblocking config (ncclInProgress, polled with
// ncclCommGetAsyncError) and is checked the same way: the first id was used up, a new one can be
// made. Before each real call, the argument errors NCCL's code checks (src/init.cc) are tried.
// GPU_GROW_STRICT=1 adds the checks oxccl makes where NCCL 2.30's code does not: a second
// ncclCommGetUniqueId while an id is outstanding is ncclInvalidUsage (the 2.32.3 header's
// "cannot generate a new UID while a previous UID is unconsumed"), and a joining rank refuses a
// plain ncclGetUniqueId id or a rank the parent keeps (NCCL would wait or break there).
// GPUs: process r on GPU r (exit 77 with fewer than 2); GPU_GROW_SHARE=1 puts both on GPU 0
// (run the CUDA MPS daemon, or the two processes' kernels only time-slice; NCCL itself refuses
// two ranks on one GPU). GPU_GROW_ALARM: seconds before a stalled process fails (default 120).
// Exit status 0: pass; 77: skipped; anything else: fail.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "two_procs.h"

#define COUNT ((1u << 20) + 3) /* floats: past every small-message path, and not a power of two */

static int strict;

static float input(size_t i, int r, int round) { return (float)((i * 7 + (size_t)round * 13) % 1000 + (size_t)r * 1000); }

// Waits until a nonblocking communicator's last call completed; returns its outcome.
static ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  do {
    CHECK(ncclCommGetAsyncError(comm, &st) == ncclSuccess, "ncclCommGetAsyncError");
  } while (st == ncclInProgress);
  return st;
}

// Sum AllReduce of `nranks` ranks' inputs, checked element by element.
static void allreduce_check(ncclComm_t comm, int nranks, int myrank, int round, const char* what) {
  float *send, *recv;
  float* host = malloc(COUNT * sizeof(float));
  CHECK(host != NULL, "malloc");
  CHECK(cudaMalloc((void**)&send, COUNT * sizeof(float)) == cudaSuccess, "cudaMalloc");
  CHECK(cudaMalloc((void**)&recv, COUNT * sizeof(float)) == cudaSuccess, "cudaMalloc");
  for (size_t i = 0; i < COUNT; ++i) host[i] = input(i, myrank, round);
  CHECK(cudaMemcpy(send, host, COUNT * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy in");
  CHECK(cudaMemset(recv, 0xff, COUNT * sizeof(float)) == cudaSuccess, "cudaMemset");
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  ncclResult_t r = ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, comm, s);
  if (r == ncclInProgress) r = settle(comm);  // nonblocking communicators may say so
  CHECK(r == ncclSuccess, "%s: ncclAllReduce: %s", what, ncclGetErrorString(r));
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s: cudaStreamSynchronize", what);
  CHECK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy out");
  for (size_t i = 0; i < COUNT; ++i) {
    float want = 0;
    for (int p = 0; p < nranks; ++p) want += input(i, p, round);
    CHECK(host[i] == want, "%s: element %zu is %g, expected %g", what, i, host[i], want);
  }
  CHECK(cudaStreamDestroy(s) == cudaSuccess && cudaFree(send) == cudaSuccess && cudaFree(recv) == cudaSuccess, "free");
  free(host);
}

// Size and rank of a grown communicator.
static void check_shape(ncclComm_t comm, int want_rank, const char* what) {
  int n = -1, me = -1;
  CHECK(ncclCommCount(comm, &n) == ncclSuccess && n == 2, "%s: ncclCommCount %d", what, n);
  CHECK(ncclCommUserRank(comm, &me) == ncclSuccess && me == want_rank, "%s: ncclCommUserRank %d, expected %d", what, me, want_rank);
}

// Rank 0: the parent's only rank and the coordinator.
static void existing(int id_w) {
  ncclUniqueId pid, gid, other;
  ncclComm_t parent, grown = NULL, grown2 = NULL, nc;
  CHECK(ncclGetUniqueId(&pid) == ncclSuccess, "ncclGetUniqueId");
  CHECK(ncclCommInitRank(&parent, 1, pid, 0) == ncclSuccess, "ncclCommInitRank (1 rank)");

  // Argument errors (NCCL's codes), none of which may leave anything behind.
  CHECK(ncclCommGetUniqueId(NULL, &gid) == ncclInvalidArgument, "GetUniqueId(NULL comm)");
  CHECK(ncclCommGetUniqueId(parent, NULL) == ncclInvalidArgument, "GetUniqueId(NULL id)");
  CHECK(ncclCommGrow(parent, 2, NULL, -1, NULL, NULL) == ncclInvalidArgument, "Grow(newcomm NULL)");
  // NCCL checks nRanks before it clears *newcomm; oxccl clears it on every error.
  nc = (ncclComm_t)&nc;  // junk: an error must clear it
  CHECK(ncclCommGrow(parent, 1, NULL, -1, &nc, NULL) == ncclInvalidArgument && (!strict || nc == NULL), "Grow(nRanks = parent size)");
  nc = (ncclComm_t)&nc;  // junk: an error must clear it
  CHECK(ncclCommGrow(parent, 0, NULL, -1, &nc, NULL) == ncclInvalidArgument && (!strict || nc == NULL), "Grow(nRanks 0)");
  nc = (ncclComm_t)&nc;  // junk: an error must clear it
  CHECK(ncclCommGrow(parent, 2, NULL, 0, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(existing rank passes 0)");
  nc = (ncclComm_t)&nc;  // junk: an error must clear it
  CHECK(ncclCommGrow(parent, 2, NULL, 1, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(existing rank passes 1)");

  for (int round = 0; round < 2; ++round) {
    CHECK(ncclCommGetUniqueId(parent, &gid) == ncclSuccess, "round %d: ncclCommGetUniqueId", round);
    if (strict) CHECK(ncclCommGetUniqueId(parent, &other) == ncclInvalidUsage, "round %d: a second id while one is outstanding", round);
    CHECK(write(id_w, &gid, sizeof gid) == sizeof gid, "sending the grow id");
    ncclResult_t r;
    if (round == 0) {
      r = ncclCommGrow(parent, 2, &gid, -1, &grown, NULL);  // blocking: the parent's config
      CHECK(r == ncclSuccess, "ncclCommGrow: %s", ncclGetErrorString(r));
    } else {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      r = ncclCommGrow(parent, 2, &gid, -1, &grown2, &cfg);
      CHECK(r == ncclSuccess || r == ncclInProgress, "nonblocking ncclCommGrow: %s", ncclGetErrorString(r));
      CHECK(grown2 != NULL, "nonblocking ncclCommGrow wrote no handle");
      r = settle(grown2);
      CHECK(r == ncclSuccess, "nonblocking ncclCommGrow ended with %s", ncclGetErrorString(r));
    }
    ncclComm_t g = round == 0 ? grown : grown2;
    check_shape(g, 0, round == 0 ? "grown" : "grown (nonblocking)");
    allreduce_check(g, 2, 0, round, round == 0 ? "grown" : "grown (nonblocking)");
    // The parent is untouched and still works.
    int n = -1;
    CHECK(ncclCommCount(parent, &n) == ncclSuccess && n == 1, "parent's ncclCommCount %d", n);
    allreduce_check(parent, 1, 0, round + 2, "parent after the grow");
  }
  CHECK(ncclCommDestroy(grown2) == ncclSuccess, "ncclCommDestroy(grown2)");
  CHECK(ncclCommDestroy(grown) == ncclSuccess, "ncclCommDestroy(grown)");
  CHECK(ncclCommDestroy(parent) == ncclSuccess, "ncclCommDestroy(parent)");
}

// Process 1: joins as rank 1, twice.
static void joining(int id_r) {
  ncclUniqueId gid, plain;
  ncclComm_t grown = NULL, grown2 = NULL, nc;
  for (int round = 0; round < 2; ++round) {
    CHECK(read(id_r, &gid, sizeof gid) == sizeof gid, "receiving the grow id");
    // Argument errors (NCCL's codes).
    nc = (ncclComm_t)&nc;  // junk: an error must clear it
    CHECK(ncclCommGrow(NULL, 2, NULL, 1, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(new rank, NULL id)");
    nc = (ncclComm_t)&nc;  // junk: an error must clear it
    CHECK(ncclCommGrow(NULL, 2, &gid, -1, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(new rank -1)");
    nc = (ncclComm_t)&nc;  // junk: an error must clear it
    CHECK(ncclCommGrow(NULL, 2, &gid, 2, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(rank = nRanks)");
    nc = (ncclComm_t)&nc;  // junk: an error must clear it
    CHECK(ncclCommGrow(NULL, 0, &gid, 1, &nc, NULL) == ncclInvalidArgument && (!strict || nc == NULL), "Grow(nRanks 0)");
    CHECK(ncclCommGrow(NULL, 2, &gid, 1, NULL, NULL) == ncclInvalidArgument, "Grow(newcomm NULL)");
    if (strict) {
      nc = (ncclComm_t)&nc;  // junk: an error must clear it
      CHECK(ncclCommGrow(NULL, 2, &gid, 0, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(new rank takes the parent's rank 0)");
      CHECK(ncclGetUniqueId(&plain) == ncclSuccess, "ncclGetUniqueId");
      nc = (ncclComm_t)&nc;  // junk: an error must clear it
      CHECK(ncclCommGrow(NULL, 2, &plain, 1, &nc, NULL) == ncclInvalidArgument && nc == NULL, "Grow(an ncclGetUniqueId id)");
    }
    ncclResult_t r;
    if (round == 0) {
      r = ncclCommGrow(NULL, 2, &gid, 1, &grown, NULL);
      CHECK(r == ncclSuccess, "ncclCommGrow: %s", ncclGetErrorString(r));
    } else {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      r = ncclCommGrow(NULL, 2, &gid, 1, &grown2, &cfg);
      CHECK(r == ncclSuccess || r == ncclInProgress, "nonblocking ncclCommGrow: %s", ncclGetErrorString(r));
      CHECK(grown2 != NULL, "nonblocking ncclCommGrow wrote no handle");
      r = settle(grown2);
      CHECK(r == ncclSuccess, "nonblocking ncclCommGrow ended with %s", ncclGetErrorString(r));
    }
    ncclComm_t g = round == 0 ? grown : grown2;
    check_shape(g, 1, round == 0 ? "grown" : "grown (nonblocking)");
    allreduce_check(g, 2, 1, round, round == 0 ? "grown" : "grown (nonblocking)");
  }
  CHECK(ncclCommDestroy(grown2) == ncclSuccess, "ncclCommDestroy(grown2)");
  CHECK(ncclCommDestroy(grown) == ncclSuccess, "ncclCommDestroy(grown)");
}

static int id_pipe[2];

static void run_rank(int r) {
  rank = r;
  const char* secs = getenv("GPU_GROW_ALARM");
  alarm(secs && atoi(secs) > 0 ? (unsigned)atoi(secs) : 120);
  const char* share = getenv("GPU_GROW_SHARE");
  const char* st = getenv("GPU_GROW_STRICT");
  strict = st && atoi(st) == 1;
  int n = 0, shared = share && atoi(share) == 1;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < (shared ? 1 : 2)) _exit(77);
  CHECK(cudaSetDevice(shared ? 0 : r) == cudaSuccess, "cudaSetDevice");
  if (r == 0) {
    close(id_pipe[0]);
    existing(id_pipe[1]);
  } else {
    close(id_pipe[1]);
    joining(id_pipe[0]);
  }
  _exit(0);
}

int main(void) {
  if (pipe(id_pipe)) return 2;
  return two_processes("gpu_grow", run_rank, "a grow or a collective on the grown communicator did not complete",
                       "PASS (grown 1 -> 2 ranks twice, blocking and nonblocking; AllReduce checked; parent still works)");
}
