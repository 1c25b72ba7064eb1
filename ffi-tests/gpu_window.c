/* Window queries of NCCL 2.29-2.32 on a 2-rank communicator in two processes: ncclWinGetUserPtr
 * (nccl.h) and the device-API host helpers of nccl_device/host.h (declared below: oxccl ships
 * nccl.h only), ncclGetLsaDevicePointer, ncclGetPeerDevicePointer and the two multimem queries.
 * Each rank fills its window, then reads the peer's copy through the pointer the library gives
 * and checks every byte; every argument error returns NCCL's code. Runs against oxccl only
 * (NCCL 2.28.9 has none of these functions). Exit 77 without 2 GPUs, unless TWO_PROCS_ONE_GPU=1. */
#include <stdint.h>
#include <string.h>
#include "two_procs.h"

typedef struct { void* mcBasePtr; } ncclMultimemHandle_t;
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, ncclMultimemHandle_t mm, void** outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

#define BYTES (1 << 21)
#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))
#define IS(call, code) CHECK((call) == (code), "%s is not %s", #call, #code)

static int fd[2];

static void child(int r) {
  rank = r;
  ncclComm_t comm = pair_comm("GPU_WINDOW_ALARM", fd[1], fd[0]);
  const int peer = 1 - rank;
  unsigned char* buf = NULL;
  OK(ncclMemAlloc((void**)&buf, BYTES));
  ncclWindow_t win = NULL;
  OK(ncclCommWindowRegister(comm, buf, BYTES, &win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(win != NULL, "no window");

  void* user = NULL;
  OK(ncclWinGetUserPtr(comm, win, &user));
  CHECK(user == buf, "ncclWinGetUserPtr %p, registered %p", user, (void*)buf);
  IS(ncclWinGetUserPtr(comm, win, NULL), ncclInvalidArgument);
  IS(ncclWinGetUserPtr(comm, (ncclWindow_t)(uintptr_t)0x1234, &user), ncclInvalidArgument);

  /* Rank r's window holds r*37 + i (mod 256); the peer's copy is read through its pointer. */
  unsigned char* host = malloc(BYTES);
  for (int i = 0; i < BYTES; i++) host[i] = (unsigned char)(rank * 37 + i);
  CHECK(cudaMemcpy(buf, host, BYTES, cudaMemcpyHostToDevice) == cudaSuccess, "fill");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  float* one = NULL;
  CHECK(cudaMalloc((void**)&one, sizeof(float)) == cudaSuccess, "cudaMalloc");
  OK(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0)); /* both windows are filled past here */
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");

  void *mine = NULL, *theirs = NULL, *lsa_peer = NULL, *p = NULL;
  OK(ncclGetPeerDevicePointer(win, 0, rank, &mine));
  OK(pncclGetPeerDevicePointer(win, 4096, peer, &theirs));
  OK(ncclGetLsaDevicePointer(win, 4096, peer, &lsa_peer));
  CHECK(mine != NULL && theirs != NULL && lsa_peer == theirs, "pointers %p %p %p", mine, theirs, lsa_peer);
  unsigned char* got = malloc(BYTES);
  CHECK(cudaMemcpy(got, mine, BYTES, cudaMemcpyDeviceToHost) == cudaSuccess, "read own copy");
  CHECK(memcmp(got, host, BYTES) == 0, "own copy through its LSA pointer differs");
  CHECK(cudaMemcpy(got, theirs, BYTES - 4096, cudaMemcpyDeviceToHost) == cudaSuccess, "read peer copy");
  int wrong = 0;
  for (int i = 0; i < BYTES - 4096; i++) wrong += got[i] != (unsigned char)(peer * 37 + i + 4096);
  CHECK(wrong == 0, "%d bytes of the peer's copy wrong", wrong);

  IS(ncclGetLsaDevicePointer(win, 0, 2, &p), ncclInvalidArgument);
  IS(ncclGetLsaDevicePointer(win, 0, -1, &p), ncclInvalidArgument);
  IS(ncclGetLsaDevicePointer(win, BYTES, 0, &p), ncclInvalidArgument);
  IS(ncclGetPeerDevicePointer(win, 0, 2, &p), ncclInvalidArgument);
  IS(ncclGetPeerDevicePointer(win, 0, 0, NULL), ncclInvalidArgument);
  IS(ncclGetPeerDevicePointer(NULL, 0, 0, &p), ncclInvalidArgument);
  IS(ncclGetPeerDevicePointer((ncclWindow_t)(uintptr_t)0x1234, 0, 0, &p), ncclInvalidArgument);
  /* No NVLS: multimem pointers are NULL, as NCCL gives them where NVLS is off. */
  p = (void*)1;
  OK(ncclGetLsaMultimemDevicePointer(win, 0, &p));
  CHECK(p == NULL, "lsa multimem pointer %p", p);
  ncclMultimemHandle_t mm = {(void*)0x1000};
  p = (void*)1;
  OK(ncclGetMultimemDevicePointer(win, 0, mm, &p));
  CHECK(p == NULL, "multimem pointer %p", p);
  mm.mcBasePtr = NULL;
  IS(ncclGetMultimemDevicePointer(win, 0, mm, &p), ncclInvalidArgument);

  OK(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0)); /* the peer has read past here */
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  OK(ncclCommWindowDeregister(comm, win));
  IS(ncclWinGetUserPtr(comm, win, &user), ncclInvalidArgument);
  OK(ncclCommDestroy(comm));
  OK(ncclMemFree(buf));
  _exit(0);
}

int main(void) {
  if (pipe(fd) != 0) return 2;
  return two_processes("gpu_window", child, "a window registration or AllReduce", "window pointers read the peer's data");
}
