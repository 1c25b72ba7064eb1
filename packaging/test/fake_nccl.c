/* Packaging check: a stand-in "NVIDIA" libnccl.so.2 (same soname) reporting version 0. A program
 * linked against it must report oxccl's 23203 once oxccl-run preloads oxccl: that is the
 * displacement LD_PRELOAD gives under torchrun or mpirun, shown without a GPU. */
#include <nccl.h>

ncclResult_t ncclGetVersion(int *version) {
  *version = 0;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  (void)result;
  return "fake libnccl.so.2";
}
