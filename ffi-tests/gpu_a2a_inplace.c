// Group of {AllGather, AlltoAll, AllGather} where only rank 0 passes sendbuff == recvbuff to the
// AlltoAll (no in-place form: its data is undefined). Must not hang; the AllGathers must be exact.
// Each size: 16 KiB (grouped kernel) and 8 MiB (exchange launch) pieces.
#include "two_procs.h"
static int id_pipe[2];
static void run(int r) {
  rank = r;
  ncclComm_t comm = pair_comm("A2A_ALARM", id_pipe[1], id_pipe[0]);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  size_t sizes[2] = {4096, 2 << 20};
  for (int k = 0; k < 2; ++k) {
    size_t n = sizes[k];
    float *ag_in, *ag_out, *a2a_in, *a2a_out, *ag2_out;
    CHECK(cudaMalloc((void**)&ag_in, n * 4) == 0 && cudaMalloc((void**)&ag_out, 2 * n * 4) == 0 && cudaMalloc((void**)&a2a_in, 2 * n * 4) == 0 &&
              cudaMalloc((void**)&a2a_out, 2 * n * 4) == 0 && cudaMalloc((void**)&ag2_out, 2 * n * 4) == 0, "malloc");
    float* h = malloc(2 * n * 4);
    for (size_t i = 0; i < n; ++i) h[i] = (float)(r * 1000003 + i % 65536);
    CHECK(cudaMemcpyAsync(ag_in, h, n * 4, cudaMemcpyHostToDevice, s) == 0, "h2d");
    CHECK(cudaMemcpyAsync(a2a_in, h, n * 4, cudaMemcpyHostToDevice, s) == 0, "h2d");
    CHECK(cudaStreamSynchronize(s) == 0, "sync");
    for (int it = 0; it < 3; ++it) {
      CHECK(ncclGroupStart() == ncclSuccess, "group start");
      CHECK(ncclAllGather(ag_in, ag_out, n, ncclFloat32, comm, s) == ncclSuccess, "allgather");
      CHECK(ncclAlltoAll(a2a_in, r == 0 ? a2a_in : a2a_out, n, ncclFloat32, comm, s) == ncclSuccess, "alltoall");
      CHECK(ncclAllGather(ag_in, ag2_out, n, ncclFloat32, comm, s) == ncclSuccess, "allgather 2");
      CHECK(ncclGroupEnd() == ncclSuccess, "group end");
    }
    CHECK(cudaStreamSynchronize(s) == 0, "sync");
    float* got = malloc(2 * n * 4);
    float* outs[2] = {ag_out, ag2_out};
    for (int o = 0; o < 2; ++o) {
      CHECK(cudaMemcpy(got, outs[o], 2 * n * 4, cudaMemcpyDeviceToHost) == 0, "d2h");
      for (int p = 0; p < 2; ++p)
        for (size_t i = 0; i < n; ++i)
          CHECK(got[p * n + i] == (float)(p * 1000003 + i % 65536), "allgather %d size %zu: rank %d piece %d elem %zu = %f", o, n, r, p, i, got[p * n + i]);
    }
    free(h); free(got);
  }
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  _exit(0);
}
int main(void) {
  if (pipe(id_pipe)) return 2;
  return two_processes("gpu_a2a_inplace", run, "a grouped launch waited for the peer's", "PASS (no hang with an in-place AlltoAll on one rank; AllGathers exact)");
}
