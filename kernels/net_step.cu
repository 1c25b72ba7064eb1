// One step of a communicator that spans hosts (src/net): the stream hands the step to the
// communicator's proxy thread and waits for it (a small step that only sends does not; an issued
// step waits in a later completion launch). The kernel is a stream-ordered doorbell, so it
// works the same eagerly and inside a CUDA graph (the plan number and the copies are kernel
// arguments, the step counter lives in device memory and counts every replay). For a small step
// (src/net/stage.rs) the kernel's blocks also copy the step's GPU inputs into its host arena before
// the hand-over and the results out of it afterwards; otherwise the proxy copies, and one thread
// works.
//
// Ordering:
// - Everything earlier on the stream has finished when this kernel starts, and its writes are in
//   device memory, so the proxy's copy-engine reads after it sees the trigger get final data.
// - The pre-copies' stores to host memory, by every thread, come before the barrier; thread 0's
//   push (fifo.cuh: fence.acq_rel.sys, then the store of the trigger) follows it, and the fence is
//   cumulative over what the barrier ordered before it, so the proxy that sees the trigger sees
//   the arena filled. With several blocks, each other block's thread 0 adds to `issued[1]` with a
//   system-scope release after its barrier, and block 0's acquire load of the count precedes its
//   push, so the proxy sees every block's part of the arena.
// - The proxy completes every write into this GPU's memory and into the arena before it raises
//   `done` (a release); each block's thread 0's acquire load of it, then the barrier, order those writes before
//   every thread's post-copy loads (which bypass caches: host_copy.cuh) and the kernel boundary
//   orders everything before later work on the stream.
// - A detached step (`detach`: one that only sends from the arena) returns as soon as it pushed,
//   while the proxy may still read its arena. So a kernel with pre-copies first waits until the
//   proxy has finished every earlier step (acquire on `done`: the proxy's reads of the arena
//   happened before its release store), then fills it. Detached steps alternate between two
//   arenas by the parity of their number (`flip` != 0; the host keeps every other step to the
//   first, src/net/mod.rs): one waits only for step target - 2 and those before it, the last
//   that can have used its arena, so it fills one while the proxy still sends the other.
// - An issued step (`detach` = OX_NET_STEP_ISSUE) returns once handed over like a detached one,
//   but its wait and copies out come in a completion launch of the same arguments later on the
//   stream (OX_NET_STEP_COMPLETE), with only work that touches neither the step's buffers nor
//   this communicator's counters in between (src/net/mod.rs). That launch reads the step's number
//   back from `issued`: no other step kernel of this communicator ran in between. An issued step
//   keeps to the first arena (flip = 0), so the next staged kernel with pre-copies, which waits
//   for every earlier step, cannot refill it before the completion has copied out of it.
// - An abort (or a stopped proxy) ends the waits, so no kernel spins on a dead peer; the copies
//   after a failed wait are skipped.
#include "common.cuh"
#include "abort.cuh"
#include "atomics.cuh"
#include "fifo.cuh"
#include "host_copy.cuh"
#include "pdl.cuh"

// Thread 0 waits until the proxy has finished step `target`; false on abort or a stopped FIFO.
OX_DEV bool ox_net_wait(const NetStepArgs& a, AbortState& ab, uint64_t target) {
  const uint64_t* done = reinterpret_cast<const uint64_t*>(a.done);
  for (uint32_t spins = 0; ox_ld_acquire_sys(done) < target; ++spins) {
    if (ab.poll()) return false;
    if ((spins & 63u) == 63u && ox_fifo_stopped(a.fifo)) return false;
  }
  return true;
}

// This block's part of a `bytes`-long copy: all of it in a one-block launch, else one of
// gridDim.x slices of whole 16-byte units (so each slice keeps the copy's alignment).
OX_DEV void ox_net_part(uint64_t bytes, uint64_t& off, uint64_t& len) {
  const uint64_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~15ull;
  off = ox_min(per * blockIdx.x, bytes);
  len = ox_min(per, bytes - off);
}

// Copies k in [from, to): GPU -> host (ToHost) or host -> GPU, this block's part of each; the
// arena side of a copy marked in arena_copies moves by `shift`.
template <bool ToHost>
OX_DEV void ox_net_copies(const NetStepArgs& a, uint32_t from, uint32_t to, uint64_t shift) {
  for (uint32_t k = from; k < to; ++k) {
    const NetCopy& c = a.copies[k];
    const uint64_t moved = (a.arena_copies >> k) & 1 ? shift : 0;
    uint64_t off, len;
    ox_net_part(c.bytes, off, len);
    if (ToHost) ox_host_copy<false>(c.dst + moved + off, c.src + off, len);
    else ox_host_copy<true>(c.dst + off, c.src + moved + off, len);
  }
}

// The completion of an issued step: wait for the proxy, then the copies out.
OX_DEV void ox_net_complete(const NetStepArgs& a) {
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) {
    // Written by the issuing kernel, which finished before this one started (stream order).
    target = *reinterpret_cast<const uint64_t*>(a.issued);
    AbortState ab(a.abort_flag);
    go = ox_net_wait(a, ab, target);
  }
  __syncthreads();
  if (!go) return;
  ox_net_copies<false>(a, a.npre, a.npre + a.npost, (target & 1) ? a.flip : 0);
}

// Several blocks (OXCCL_NET_STEP_BLOCKS) share the copies; block 0 alone hands the step over,
// once every other block has counted its part of the copies in (`issued[1]`, then reset for the
// next step kernel, which starts after this one ended). The other blocks never wait for block 0,
// so they need not run at the same time as it.
extern "C" __global__ void ox_net_step(NetStepArgs a) {
  ox_pdl_enter();
  if (a.detach == OX_NET_STEP_COMPLETE) {
    ox_net_complete(a);
    return;
  }
  // Detached and issued steps return once handed over; only a waiting step waits here.
  const bool wait_here = a.detach == OX_NET_STEP_WAIT;
  uint64_t* issued = reinterpret_cast<uint64_t*>(a.issued);
  uint64_t* arrived = issued + 1;
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) {
    // Only this communicator's kernels touch the counters, and they never overlap (one order of
    // launches per communicator), so plain reads and writes are enough. Block 0 writes the new
    // count only after every other block has arrived, so all of them read the old one here.
    target = *reinterpret_cast<volatile uint64_t*>(issued) + 1;
    AbortState ab(a.abort_flag);
    // With two arenas (flip != 0) a step uses the one of its number's parity, whose last user was
    // step target - 2: only that one (and so every step before it) must have finished.
    // (target counts from 1: the first two steps of a pair wait for nothing.)
    const uint64_t before = a.flip != 0 ? (target > 2 ? target - 2 : 0) : target - 1;
    go = a.npre == 0 || ox_net_wait(a, ab, before);
  }
  __syncthreads();
  // Odd steps use the second arena: the arena side of each copy marked in arena_copies moves by
  // flip (modulo 2^64: the second arena may lie below the first).
  const uint64_t shift = (target & 1) ? a.flip : 0;
  if (go) ox_net_copies<true>(a, 0, a.npre, shift);
  __syncthreads();
  if (threadIdx.x == 0) {
    AbortState ab(a.abort_flag);
    if (blockIdx.x != 0) {
      // Release (system scope, cumulative over the block's copies, ordered before by the
      // barrier): block 0's acquire of the count, then its push, make them visible to the proxy.
      // A block whose wait failed arrives too, so block 0 never waits for it in vain.
      ox_red_release_sys_add(arrived, 1);
    } else {
      // The other blocks wait only for the proxy's earlier steps (ox_net_wait, which also gives
      // up on a stopped FIFO), so they always come; the abort check is for a dead communicator.
      while (ox_ld_acquire_sys(arrived) < gridDim.x - 1) {
        if (ab.poll()) {
          go = 0;
          break;
        }
      }
      *arrived = 0;
      *issued = target;
      if (go) {
        // The trigger's size field carries the plan, its source-offset field the arena used.
        const uint64_t fst = (a.plan & 0xffffffffull) | (uint64_t)(shift != 0) << 32;
        go = ox_fifo_push(a.fifo, fst, ox_trigger_type(OX_TRIGGER_DATA | OX_TRIGGER_FLAG)) != ~0ull;
      }
    }
    // Every block waits for the proxy itself before its part of the copies out.
    if (go && wait_here) go = ox_net_wait(a, ab, target);
  }
  __syncthreads();
  if (!go || !wait_here) return;
  ox_net_copies<false>(a, a.npre, a.npre + a.npost, shift);
}
