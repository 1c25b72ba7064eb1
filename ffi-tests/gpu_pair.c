// Two processes, one GPU each (GPUs 0 and 1), one 2-rank communicator: NCCL's calls return without
// waiting for the peer's matching call. Rank 0 posts a large send (then a large Broadcast) and
// tells rank 1 over a pipe that the call has returned; rank 1 posts the matching call only after
// hearing that. With NCCL both complete. A library whose call waits on the host for the peer
// would stall there: an alarm turns that into a failure. The data is checked too.
// First both ranks make the same calls together: NCCL 2.28 connects a peer's channels at its first
// operation with it, in the call, on both ranks (runtime connect), so only later calls return
// without the peer. GPU_PAIR_ALARM: seconds before a stalled rank fails (default 120).
// Exit status 0: pass; 77: fewer than 2 GPUs (skipped); anything else: fail.
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "two_procs.h"

#define COUNT (16u << 20) /* floats: 64 MiB, above every copy-engine threshold */

static float value(size_t i, int round) { return (float)((i * 7 + (size_t)round * 13) % 1000); }

// Rank 0 makes `call` and says so; rank 1 waits to hear it, then makes its own. `ordered` 0: both
// call at once (the warm-up).
static void one_round(int round, int ordered, ncclComm_t comm, cudaStream_t s, float* buf, float* host, int sig_w, int sig_r) {
  if (rank == 0) {
    for (size_t i = 0; i < COUNT; ++i) host[i] = value(i, round);
    CHECK(cudaMemcpy(buf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy in");
  } else {
    CHECK(cudaMemset(buf, 0, COUNT * sizeof(float)) == cudaSuccess, "cudaMemset");
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  char b = (char)round;
  if (ordered && rank == 1) CHECK(read(sig_r, &b, 1) == 1, "reading rank 0's signal");
  ncclResult_t r = round == 0 ? (rank == 0 ? ncclSend(buf, COUNT, ncclFloat, 1, comm, s) : ncclRecv(buf, COUNT, ncclFloat, 0, comm, s))
                              : ncclBroadcast(buf, buf, COUNT, ncclFloat, 0, comm, s);
  CHECK(r == ncclSuccess, "round %d: %s", round, ncclGetErrorString(r));
  if (ordered && rank == 0) CHECK(write(sig_w, &b, 1) == 1, "signalling rank 1");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "round %d: cudaStreamSynchronize", round);
  if (rank == 1) {
    CHECK(cudaMemcpy(host, buf, COUNT * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy out");
    for (size_t i = 0; i < COUNT; ++i) CHECK(host[i] == value(i, round), "round %d: element %zu is %g, expected %g", round, i, host[i], value(i, round));
  }
}

static void child(int id_w, int id_r, int sig_w, int sig_r) {
  ncclComm_t comm = pair_comm("GPU_PAIR_ALARM", id_w, id_r);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  float* buf;
  CHECK(cudaMalloc((void**)&buf, COUNT * sizeof(float)) == cudaSuccess, "cudaMalloc");
  float* host = malloc(COUNT * sizeof(float));
  CHECK(host != NULL, "malloc");
  for (int round = 0; round < 2; ++round) one_round(round, 0, comm, s, buf, host, sig_w, sig_r);
  for (int round = 0; round < 2; ++round) one_round(round, 1, comm, s, buf, host, sig_w, sig_r);
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  _exit(0);
}

static int id_pipe[2], sig_pipe[2];

static void run_rank(int r) {
  rank = r;
  child(id_pipe[1], id_pipe[0], sig_pipe[1], sig_pipe[0]);
}

int main(void) {
  if (pipe(id_pipe) || pipe(sig_pipe)) return 2;
  return two_processes("gpu_pair", run_rank, "a call waited for the peer's matching call",
                       "PASS (each call returned before the peer made its matching call)");
}
