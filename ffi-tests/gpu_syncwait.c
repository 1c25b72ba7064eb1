// Two processes, one GPU each (GPUs 0 and 1), one 2-rank communicator: a host thread blocked in a
// synchronous CUDA copy that waits for a large transfer must not stop the transfer. Rank 0 posts a
// large send (later a large Broadcast from it), then makes another stream wait for the
// communicator's stream and copies a few bytes from the GPU into pageable memory on it, as
// PyTorch's `.cpu()` does after `req.wait()`: the copy returns only once the transfer is done.
// Rank 1 makes its matching call some time later (GPU_SYNCWAIT_DELAY_MS, default 300), without
// hearing from rank 0. With NCCL both complete. oxccl's copy-engine direct path with its
// handshakes on a worker thread (OXCCL_CE_DIRECT_ASYNC=1) made the user's stream wait for stream
// work the worker issues later, and a driver call of the worker's stalled behind such a copy
// (docs/design-notes.md); an alarm (GPU_SYNCWAIT_ALARM seconds, default 120) turns a stall
// into a failure. Each round runs twice: the copy on the legacy default stream (cudaMemcpy), and
// on a stream of its own (cudaMemcpyAsync to pageable memory). The data is checked too.
// GPU_SYNCWAIT_HOSTS=1 puts the two ranks on two simulated hosts (NCCL_HOSTID per rank, both
// libraries honour it): the transfer crosses the network transport. oxccl's proxy copying a
// step's GPU data with the copy engines stalled there the same way (every CUDA call of
// another thread that issues work waits behind such a copy; docs/design-notes.md).
// Exit status 0: pass; 77: fewer than 2 GPUs (skipped); anything else: fail.
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "two_procs.h"

#define COUNT (4u << 20) /* floats: 16 MiB, above the 2-rank copy-engine threshold */

static float value(size_t i, int round) { return (float)((i * 11 + (size_t)round * 17) % 1000); }

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  return v && atoi(v) > 0 ? atoi(v) : dflt;
}

// One transfer (round 0: Send/Recv; 1: Broadcast from rank 0). `delayed` 0: both ranks call at
// once (the warm-up, which also connects the pair); 1: rank 1 calls after the delay while rank 0
// waits in a synchronous copy behind the transfer (`legacy`: on the legacy default stream).
static void one_round(int round, int delayed, int legacy, ncclComm_t comm, cudaStream_t s, cudaStream_t side, cudaEvent_t ev,
                      float* buf, float* host, int sync_w, int sync_r) {
  if (rank == 0) {
    for (size_t i = 0; i < COUNT; ++i) host[i] = value(i, round + 2 * legacy);
    CHECK(cudaMemcpy(buf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy in");
  } else {
    CHECK(cudaMemset(buf, 0, COUNT * sizeof(float)) == cudaSuccess, "cudaMemset");
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  // Both ranks start the round together (a byte each way), so the delay below is rank 1's alone.
  char b = (char)round;
  CHECK(write(sync_w, &b, 1) == 1 && read(sync_r, &b, 1) == 1, "round %d: meeting the peer", round);
  if (delayed && rank == 1) usleep((useconds_t)env_int("GPU_SYNCWAIT_DELAY_MS", 300) * 1000);
  double t0 = now_ms();
  ncclResult_t r = round == 0 ? (rank == 0 ? ncclSend(buf, COUNT, ncclFloat, 1, comm, s) : ncclRecv(buf, COUNT, ncclFloat, 0, comm, s))
                              : ncclBroadcast(buf, buf, COUNT, ncclFloat, 0, comm, s);
  CHECK(r == ncclSuccess, "round %d: %s", round, ncclGetErrorString(r));
  if (delayed && rank == 0) {
    // The application's wait for the transfer, then its copy to pageable memory behind it.
    float probe[16];
    CHECK(cudaEventRecord(ev, s) == cudaSuccess, "cudaEventRecord");
    if (legacy) {
      CHECK(cudaStreamWaitEvent(0, ev, 0) == cudaSuccess, "cudaStreamWaitEvent (legacy stream)");
      CHECK(cudaMemcpy(probe, buf, sizeof probe, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy (legacy stream)");
    } else {
      CHECK(cudaStreamWaitEvent(side, ev, 0) == cudaSuccess, "cudaStreamWaitEvent");
      CHECK(cudaMemcpyAsync(probe, buf, sizeof probe, cudaMemcpyDeviceToHost, side) == cudaSuccess, "cudaMemcpyAsync to pageable memory");
      CHECK(cudaStreamSynchronize(side) == cudaSuccess, "cudaStreamSynchronize (side)");
    }
    for (int i = 0; i < 16; ++i) CHECK(probe[i] == value((size_t)i, round + 2 * legacy), "round %d: rank 0's own data changed", round);
    printf("gpu_syncwait: rank 0, %s, copy on %s: done after %.0f ms (rank 1 called after %d ms)\n", round == 0 ? "Send" : "Broadcast",
           legacy ? "the legacy stream" : "a stream of its own", now_ms() - t0, env_int("GPU_SYNCWAIT_DELAY_MS", 300));
  }
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "round %d: cudaStreamSynchronize", round);
  if (rank == 1) {
    CHECK(cudaMemcpy(host, buf, COUNT * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy out");
    for (size_t i = 0; i < COUNT; ++i)
      CHECK(host[i] == value(i, round + 2 * legacy), "round %d: element %zu is %g, expected %g", round, i, host[i], value(i, round + 2 * legacy));
  }
}

static void child(int id_w, int id_r, int sync_w, int sync_r) {
  if (env_int("GPU_SYNCWAIT_HOSTS", 0)) {
    char host[64];
    snprintf(host, sizeof host, "gpu-syncwait-host-%d", rank);
    CHECK(setenv("NCCL_HOSTID", host, 1) == 0, "setenv NCCL_HOSTID");
  }
  ncclComm_t comm = pair_comm("GPU_SYNCWAIT_ALARM", id_w, id_r);
  cudaStream_t s, side;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate (side)");
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");
  float* buf;
  CHECK(cudaMalloc((void**)&buf, COUNT * sizeof(float)) == cudaSuccess, "cudaMalloc");
  float* host = malloc(COUNT * sizeof(float));
  CHECK(host != NULL, "malloc");
  for (int round = 0; round < 2; ++round) one_round(round, 0, 0, comm, s, side, ev, buf, host, sync_w, sync_r);
  for (int legacy = 0; legacy < 2; ++legacy)
    for (int round = 0; round < 2; ++round) one_round(round, 1, legacy, comm, s, side, ev, buf, host, sync_w, sync_r);
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  _exit(0);
}

// id: rank 0 -> 1. The meeting before each round: a byte each way, on two pipes.
static int id_pipe[2], to1[2], to0[2];

static void run_rank(int r) {
  rank = r;
  if (r == 0) child(id_pipe[1], id_pipe[0], to1[1], to0[0]);
  else child(id_pipe[1], id_pipe[0], to0[1], to1[0]);
}

int main(void) {
  if (pipe(id_pipe) || pipe(to1) || pipe(to0)) return 2;
  return two_processes("gpu_syncwait", run_rank, "the transfer stalled behind the synchronous copy",
                       "PASS (every transfer completed under a synchronous copy waiting for it)");
}
