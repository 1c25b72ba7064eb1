// Named CTA barriers, for warp-specialised kernels where groups of warps hand work to each other
// without stopping the whole block (barrier 0 is __syncthreads; kernels pick ids 1-15).
//
// Memory ordering (PTX memory model): a bar.sync on barrier id synchronizes with the other
// bar.sync operations of the same phase, so writes a thread issued before its bar.sync are
// visible to the threads that pass the barrier, and an acquire one thread did before it extends
// to them (the same pattern as "one thread waits, then __syncthreads").
// Rules kept by callers: every thread of a participating warp executes the barrier (it is
// .aligned), `count` is the number of threads of all participating warps, and no group reaches the
// same barrier twice before the others reach it once (use bar.sync on both sides, never arrive,
// when a side could otherwise run two phases ahead).
#pragma once
#include "common.cuh"

OX_DEV void ox_named_bar_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
