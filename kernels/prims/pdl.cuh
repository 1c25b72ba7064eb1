// Programmatic dependent launch (PDL, sm_90 and later): the entry of every oxccl kernel.
//
// The host may launch an oxccl kernel with programmatic stream serialization (src/gpu/module.rs,
// algo::pdl decides when). Such a launch may start as soon as every block of the previous kernel
// in the stream has run griddepcontrol.launch_dependents (or exited), so its launch latency and
// block scheduling overlap that kernel instead of following its end.
//
// Ordering: griddepcontrol.wait returns once every prerequisite grid has completed and its memory
// operations are performed and visible to this grid. Nothing before it may read or write memory
// that earlier work in the stream touches (user buffers, the LL flag tables, scratch, counters),
// so it comes first, before any load. Where the launch had no programmatic dependency it returns
// at once.
//
// The trigger comes after the wait, never before: a kernel of this communicator launched behind
// this one can then be resident only while this one runs, not while an earlier one still does, so
// at most two kernels of a communicator hold SMs at once, whose grids the host keeps within the
// communicator's block budget (maxCTAs). The trigger only lets the next launch begin; it says
// nothing about this kernel's memory, which the next kernel's own wait covers.
//
// One exception, the ring one-shot AllReduce (allreduce.cu, OX_ONESHOT_RING / _EARLY / _ENTRY):
// a launch that waits first triggers only after storing the flags a chain behind it starts from
// (with a GPU-scope fence); launched early, it reads its input and sends its packets before its
// wait, where the host proved (algo::pdl::early) that no kernel still in flight writes anything it
// reads there, and it triggers after its wait or, small, as soon as the launch before it has passed
// its own wait (three of the communicator's kernels in flight; the host counts both earlier grids).
#pragma once
#include "common.cuh"

OX_DEV void ox_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

OX_DEV void ox_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

OX_DEV void ox_pdl_enter() {
  ox_pdl_wait();
  ox_pdl_trigger();
}
