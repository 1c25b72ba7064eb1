// The device-API kernel devapi_gpu.cu and devapi_pair.cu both run (compiled against NVIDIA's
// nccl_device.h of the version each build names). The including file defines BLOCKS and THREADS
// (the launch shape; a window holds nranks * BLOCKS * THREADS ints, a resource buffer
// nranks * BLOCKS) before including it.
//
// Each call is one iteration: every block writes its tag into every peer's window
// (ncclGetLsaPointer) and resource buffer (ncclGetResourceBufferLsaPointer), crosses an LSA
// barrier with its peers' same-index blocks, and checks what its peers wrote through
// ncclGetLocalPointer, the caller's own pointer and ncclGetResourceBufferLocalPointer;
// ncclFindWindow must find the window from a pointer into it. Mismatches add to *errors.
#pragma once

__device__ int tag(int iter, int src, int block, int thread) { return iter * 1000003 + src * 10007 + block * 1009 + thread; }

__global__ void exchange(ncclWindow_t win, int* user, ncclDevComm dc, ncclDevResourceHandle res, int iter, int* errors) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
  // Everyone has checked the previous iteration before anyone overwrites it.
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
  const int me = dc.lsaRank, n = dc.lsaSize, b = blockIdx.x, t = threadIdx.x;
  for (int peer = 0; peer < n; peer++) {
    int* p = (int*)ncclGetLsaPointer(win, 0, peer);
    p[(me * BLOCKS + b) * THREADS + t] = tag(iter, me, b, t);
    if (t == 0) ((int*)ncclGetResourceBufferLsaPointer(dc, res, peer))[me * BLOCKS + b] = tag(iter, me, b, 0);
  }
  // Release this block's writes to the peers, acquire theirs.
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  int bad = 0;
  int* local = (int*)ncclGetLocalPointer(win, 0);
  int* mine = (int*)ncclGetResourceBufferLocalPointer(dc, res);
  for (int src = 0; src < n; src++) {
    if (local[(src * BLOCKS + b) * THREADS + t] != tag(iter, src, b, t)) bad++;
    if (user[(src * BLOCKS + b) * THREADS + t] != tag(iter, src, b, t)) bad++;  // the same memory, through the caller's pointer
    if (t == 0 && mine[src * BLOCKS + b] != tag(iter, src, b, 0)) bad++;
  }
  if (local != ncclGetLsaPointer(win, 0, me) || local != ncclGetPeerPointer(win, 0, dc.rank)) bad++;
  if (ncclFindWindow(ncclCoopWarp(), dc, user + 17) != win) bad++;
  if (bad) atomicAdd(errors, bad);
}
