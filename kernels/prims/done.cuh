// A counted launch's completion, published by the kernel itself (src/comm/completion.rs).
//
// The host must know when a communicator's last launch has finished: a call on another stream
// waits for it, and so do a group's other streams, finalize, destroy and abort. An event recorded
// behind every launch costs the host about 0.25 us a call (BENCHMARKS.md of 2026-11-27, 2d19a1c).
// An uncaptured launch may instead pass the communicator's done counter (a u32 at OX_PRIV_DONE_OFF
// from its DevComm) in its `done` argument, and every block adds one to it as it finishes;
// the host, which knows how many blocks it launched, waits with cuStreamWaitValue32 (GEQ, which
// compares modulo 2^32). Captured launches pass 0: a graph replays them any number of times,
// which the host cannot count. Which launches count is algo::counting's choice: the release
// below sits on the kernel's critical path, the event on the host's.
//
// Every kernel the host may launch counted ends with ox_done_publish (instantiate.cuh's typed
// kernels, and the untyped ones by hand); a CPU test (src/comm/completion.rs) checks the sources.
#pragma once
#include "common.cuh"
#include "pdl.cuh"

OX_DEV void ox_done_publish(uint64_t done) {
  if (done == 0) return;  // the launch's argument: the same in every thread
  // Every thread of the block is past its last load and store of the launch (some threads may
  // have returned from the body early; all of them reach this barrier).
  __syncthreads();
  if (threadIdx.x != 0) return;
  // A kernel launched with programmatic serialization may start before the previous one ends.
  // The host waits for this launch's count only, so the count must also mean that the previous
  // kernel has finished: wait for it here (at once when the body already did, as all but the
  // early ring AllReduce do first thing).
  ox_pdl_wait();
  // Release at GPU scope, cumulative over what the barrier ordered before it: every load and
  // store of the block is performed for this GPU before the count moves, so work that a stream of
  // this GPU starts behind the count's wait sees all of it. That is what griddepcontrol.wait
  // gives a kernel behind its predecessor on one stream, which the kernels' protocols already
  // live with: peers learn of a launch's data only through its own flags and semaphores, which
  // are system-scope. System scope here cost the device-bound rows: 32 KB AllReduce at 4 ranks
  // 5.64-5.75 us a call against 5.21-5.30 at GPU scope (BENCHMARKS.md of 2026-11-27, 9a9e3b0).
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done) : "memory");
}
