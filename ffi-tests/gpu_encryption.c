// ncclSetEncryption (NCCL 2.32) on the GPU machine: two processes, on GPUs 0 and 1 (both on GPU 0
// where there is one: the simulated hosts do not share memory), on two simulated hosts (NCCL_HOSTID per rank; run with NCCL_IB_DISABLE=1), so the bootstrap and the
// cross-host data move over TCP sockets, every one of them TLS. Both ranks configure the same PSK
// before ncclGetUniqueId, create a 2-rank communicator and check an AllReduce (16 MiB, sum) and a
// Broadcast. With GPU_ENCRYPTION_MISMATCH=1 rank 1 configures another PSK: its ncclCommInitRank
// must fail (ncclRemoteError: its TLS handshake with rank 0's root fails), and rank 0's must fail
// too, within its bootstrap timeout (run with OXCCL_BOOTSTRAP_TIMEOUT=10), never hang.
// GPU_ENCRYPTION_OFF=1 skips ncclSetEncryption: the same run in plaintext, for comparison.
// Exit status 0: pass; 77: no GPU (skipped); anything else: fail.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// This test makes its communicator itself (ncclSetEncryption comes first): pair_comm goes unused.
#pragma GCC diagnostic ignored "-Wunused-function"
#include "two_procs.h"

#define COUNT (4u << 20) /* floats */

static int id_pipe[2];

static void child(int r) {
  rank = r;
  int mismatch = getenv("GPU_ENCRYPTION_MISMATCH") && atoi(getenv("GPU_ENCRYPTION_MISMATCH")) > 0;
  int off = getenv("GPU_ENCRYPTION_OFF") && atoi(getenv("GPU_ENCRYPTION_OFF")) > 0;
  alarm(120);
  int n = 0;
  const cudaError_t counted = cudaGetDeviceCount(&n);
  if (counted == cudaErrorNoDevice || counted == cudaErrorInsufficientDriver || (counted == cudaSuccess && n < 1)) _exit(77);
  CHECK(counted == cudaSuccess, "cudaGetDeviceCount: %s", cudaGetErrorString(counted));
  char host[64];
  snprintf(host, sizeof host, "gpu-encryption-host-%d", rank);
  CHECK(setenv("NCCL_HOSTID", host, 1) == 0, "setenv NCCL_HOSTID");
  CHECK(cudaSetDevice(rank % n) == cudaSuccess, "cudaSetDevice");

  // Argument checks first (no state changes on failure), then the job's PSK.
  ncclEncryptionConfig_t bad = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  bad.mode = NCCL_ENCRYPTION_MODE_PSK;
  CHECK(ncclSetEncryption(&bad) == ncclInvalidArgument, "PSK mode without a key must be rejected");
  bad.psk = "too short";
  CHECK(ncclSetEncryption(&bad) == ncclInvalidArgument, "a PSK under 32 bytes must be rejected");
  ncclEncryptionConfig_t cfg = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  cfg.mode = NCCL_ENCRYPTION_MODE_PSK;
  cfg.psk = (mismatch && rank == 1) ? "another-job-psk-0123456789abcdef0123" : "gpu-encryption-test-psk-0123456789abcdef";
  if (!off) CHECK(ncclSetEncryption(&cfg) == ncclSuccess, "ncclSetEncryption");

  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(write(id_pipe[1], &id, sizeof id) == sizeof id, "sending the id");
  } else {
    CHECK(read(id_pipe[0], &id, sizeof id) == sizeof id, "receiving the id");
  }
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
  if (mismatch) {
    CHECK(res != ncclSuccess, "init with mismatched PSKs succeeded");
    if (rank == 1) CHECK(res == ncclRemoteError, "rank 1 (the odd PSK): %s, expected ncclRemoteError", ncclGetErrorString(res));
    printf("gpu_encryption: rank %d: init failed as it must: %s\n", rank, ncclGetErrorString(res));
    _exit(0);
  }
  CHECK(res == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(res));

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  float* buf;
  CHECK(cudaMalloc((void**)&buf, COUNT * sizeof(float)) == cudaSuccess, "cudaMalloc");
  float* h = malloc(COUNT * sizeof(float));
  CHECK(h != NULL, "malloc");
  for (size_t i = 0; i < COUNT; ++i) h[i] = (float)((i * 7 + (size_t)rank * 13) % 1000);
  CHECK(cudaMemcpy(buf, h, COUNT * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy in");
  CHECK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, s) == ncclSuccess, "ncclAllReduce");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
  CHECK(cudaMemcpy(h, buf, COUNT * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy out");
  for (size_t i = 0; i < COUNT; ++i) {
    float want = (float)((i * 7) % 1000) + (float)((i * 7 + 13) % 1000);
    CHECK(h[i] == want, "AllReduce element %zu is %g, expected %g", i, h[i], want);
  }
  CHECK(ncclBroadcast(buf, buf, COUNT, ncclFloat, 1, comm, s) == ncclSuccess, "ncclBroadcast");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
  // Time of a few large AllReduces (16 MiB): the cost of TLS on this path, for the report.
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess, "cudaEventCreate");
  CHECK(cudaEventRecord(t0, s) == cudaSuccess, "cudaEventRecord");
  for (int i = 0; i < 10; ++i) CHECK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, s) == ncclSuccess, "ncclAllReduce");
  CHECK(cudaEventRecord(t1, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "timing");
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess, "cudaEventElapsedTime");
  if (rank == 0) printf("gpu_encryption: %s: 16 MiB AllReduce across the 2 hosts: %.2f ms each\n", off ? "plaintext" : "TLS", ms / 10);
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  _exit(0);
}

int main(void) {
  if (pipe(id_pipe)) return 2;
  return two_processes("gpu_encryption", child, "a TLS connection stalled",
                       getenv("GPU_ENCRYPTION_MISMATCH") ? "PASS (mismatched PSKs failed the init on both ranks)"
                                                         : "PASS (AllReduce and Broadcast across 2 simulated hosts over TLS)");
}
