// Grid-wide barrier for kernels whose blocks are all co-resident (launch at most one block per SM,
// or check occupancy on the host). `state` is two u32 in zeroed device memory owned by this
// launch's communicator: an arrival counter and a generation; it is left ready for reuse.
#pragma once
#include "abort.cuh"

OX_DEV void ox_grid_barrier(uint32_t* state, AbortState& ab) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile uint32_t* gen = state + 1;
    const uint32_t my_gen = *gen;
    // Release: this block's writes are visible to blocks that pass the barrier after us.
    __threadfence();
    if (atomicAdd(state, 1u) == gridDim.x - 1) {
      state[0] = 0;  // reset before releasing anyone, so the next barrier counts from zero
      __threadfence();
      atomicAdd(state + 1, 1u);
    } else {
      while (*gen == my_gen) {
        if (ab.poll()) break;
      }
    }
    __threadfence();  // acquire: other blocks' writes before the barrier are visible after it
  }
  __syncthreads();
}
