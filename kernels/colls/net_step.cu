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
// - `issued[2]` (device memory) is the newest step a kernel of this communicator saw finished
//   (written after its wait on `done`, or after its packets, below). A kernel whose pre-copies
//   must wait for step `before` skips the read of the host-mapped `done` (a PCIe round trip,
//   about 1.1 us) when it already covers `before`: the kernel that saw it ended before this one
//   started, so the proxy's use of the arena up to that step is over.
// Packets (`packets` = 1, small steps, src/net/packets.rs): the arena side of every arena copy is
// LL16 packets flagged with the step's number (ox_net_flag). The flags make the data its own
// signal both ways:
// - Pre-copies write packets, and the trigger is stored without the system fence: the proxy
//   waits for each packet's flags before it uses the payload, so it may see the trigger first.
// - The proxy writes the results' packets only after it finished the whole step (its sends'
//   reads of the arena included) and raised `done`; every thread polls its own packets instead of
//   thread 0 polling `done` and the block copying after it: one PCIe round trip, not two.
#include "common.cuh"
#include "abort.cuh"
#include "atomics.cuh"
#include "copy.cuh"
#include "fifo.cuh"
#include "host_copy.cuh"
#include "net_combine.cuh"
#include "packet.cuh"
#include "pdl.cuh"

// The flag of step `target`'s packets: its low 31 bits and the top bit, so zeroed memory never
// matches. The proxy gets the same bits from the trigger (src/net/executor.rs, NetHandler::execute).
OX_DEV uint32_t ox_net_flag(uint64_t target) { return ((uint32_t)target & 0x7fffffffu) | 0x80000000u; }

// The newest step a kernel of this communicator saw finished (issued[2]).
OX_DEV uint64_t* ox_net_seen(const NetStepArgs& a) { return reinterpret_cast<uint64_t*>(a.issued) + 2; }

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

// Which copies of a range ox_net_copies makes: all, only those with an arena side, or only the
// others (the step's own GPU-to-GPU copies, which may run at any point of it, src/net/plan/).
enum NetCopies { kAll, kArena, kOwn };

// Copies k in [from, to): GPU -> host (ToHost) or host -> GPU, this block's part of each; the
// arena side of a copy marked in arena_copies moves by `shift`, and is packets flagged `flag` when
// a.packets is set. Returns false if a packet never came (abort, or the proxy stopped).
template <bool ToHost>
OX_DEV bool ox_net_copies(const NetStepArgs& a, uint32_t from, uint32_t to, uint64_t shift, uint32_t flag, NetCopies which = kAll) {
  bool ok = true;
  for (uint32_t k = from; k < to && ok; ++k) {
    const NetCopy& c = a.copies[k];
    const bool arena = (a.arena_copies >> k) & 1;
    if ((which == kArena && !arena) || (which == kOwn && arena)) continue;
    const uint64_t moved = arena ? shift : 0;
    if (arena && a.packets) {
      // Packets, spread over every thread of the grid; one packet per thread for small steps.
      const uint64_t n = (c.bytes + 7) / 8, t0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (uint64_t)gridDim.x * blockDim.x;
      if (ToHost) {
        for (uint64_t i = t0; i < n; i += nt)
          ox_ll16_write(reinterpret_cast<void*>(c.dst + moved + i * 16), ox_load8(reinterpret_cast<const char*>(c.src), i * 8, c.bytes), flag);
      } else {
        AbortState ab(a.abort_flag);
        for (uint64_t i = t0; i < n && ok; i += nt) {
          // ld.global.cv: fetched from host memory anew on every poll, never a cached line.
          const uint4* p = reinterpret_cast<const uint4*>(c.src + moved + i * 16);
          uint4 v = __ldcv(p);
          for (uint32_t spins = 0; v.y != flag || v.w != flag; v = __ldcv(p)) {
            if (ab.poll() || ((++spins & 255u) == 0 && ox_fifo_stopped(a.fifo))) {
              ok = false;
              break;
            }
          }
          if (ok) ox_store8(reinterpret_cast<char*>(c.dst), i * 8, c.bytes, (uint64_t)v.x | (uint64_t)v.z << 32);
        }
      }
      continue;
    }
    uint64_t off, len;
    ox_net_part(c.bytes, off, len);
    if (ToHost) ox_host_copy<false>(c.dst + moved + off, c.src + off, len);
    // A copy out that combines (`with`, net_combine.cuh); parts are whole 16-byte units, so
    // whole elements.
    else if (c.with) ox_net_combine_copy(a.combine, c.dst + off, c.src + moved + off, c.with + off, len);
    else ox_host_copy<true>(c.dst + off, c.src + moved + off, len);
  }
  return ok;
}

// Whether a step's results come as packets: then nobody waits on `done` for it.
OX_DEV bool ox_net_by_packets(const NetStepArgs& a) { return a.packets && a.npost > 0; }

// The completion of an issued step: wait for the proxy, then the copies out.
OX_DEV void ox_net_complete(const NetStepArgs& a) {
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) {
    // Written by the issuing kernel, which finished before this one started (stream order).
    target = *reinterpret_cast<const uint64_t*>(a.issued);
    AbortState ab(a.abort_flag);
    go = ox_net_by_packets(a) || ox_net_wait(a, ab, target);
  }
  __syncthreads();
  if (!go) return;
  const bool ok = ox_net_copies<false>(a, a.npre, a.npre + a.npost, (target & 1) ? a.flip : 0, ox_net_flag(target), kAll);
  if (__syncthreads_and(ok) && threadIdx.x == 0 && blockIdx.x == 0) *ox_net_seen(a) = target;
}

// Thread 0 of each block: the step's number, and whether the block may go on (the kernel may write
// its arena: the proxy has finished the steps that last used it).
// Only this communicator's kernels touch the counters, and they never overlap (one order of
// launches per communicator), so plain reads and writes are enough. Block 0 writes the new count
// only after every other block has arrived (ox_net_hand_over), so all of them read the old one here.
OX_DEV void ox_net_begin(const NetStepArgs& a, uint64_t& target, uint32_t& go) {
  target = *reinterpret_cast<volatile uint64_t*>(a.issued) + 1;
  AbortState ab(a.abort_flag);
  // With two arenas (flip != 0) a step uses the one of its number's parity, whose last user was
  // step target - 2: only that one (and so every step before it) must have finished.
  // (target counts from 1: the first two steps of a pair wait for nothing.)
  const uint64_t before = a.flip != 0 ? (target > 2 ? target - 2 : 0) : target - 1;
  go = a.npre == 0 || *reinterpret_cast<volatile uint64_t*>(ox_net_seen(a)) >= before || ox_net_wait(a, ab, before);
}

// Thread 0 of each block: counts the block in (`issued[1]`); block 0 waits for every other, records
// the step as issued and pushes its trigger (with the system fence when `fence`). Returns whether
// the step was handed over (block 0), or `go` (the others).
OX_DEV uint32_t ox_net_hand_over(const NetStepArgs& a, uint64_t target, uint64_t shift, uint32_t go, bool fence) {
  uint64_t* issued = reinterpret_cast<uint64_t*>(a.issued);
  uint64_t* arrived = issued + 1;
  if (blockIdx.x != 0) {
    // Release (system scope, cumulative over what the block's barrier ordered before it): block
    // 0's acquire of the count, then its push, make that visible to the proxy. A block whose wait
    // failed arrives too, so block 0 never waits for it in vain.
    ox_red_release_sys_add(arrived, 1);
    return go;
  }
  // The other blocks wait only for the proxy's earlier steps (ox_net_wait, which also gives up on
  // a stopped FIFO), so they always come; the abort check is for a dead communicator.
  AbortState ab(a.abort_flag);
  while (ox_ld_acquire_sys(arrived) < gridDim.x - 1) {
    if (ab.poll()) {
      go = 0;
      break;
    }
  }
  *arrived = 0;
  *issued = target;
  if (!go) return 0;
  // The trigger's size field carries the plan; its source-offset field the arena used (bit 0) and
  // the packets' flag (the step's low 31 bits above it).
  const uint64_t src = (uint64_t)(shift != 0) | (target & 0x7fffffffull) << 1;
  const uint64_t fst = (a.plan & 0xffffffffull) | src << 32;
  return ox_fifo_push(a.fifo, fst, ox_trigger_type(OX_TRIGGER_DATA | OX_TRIGGER_FLAG), fence) != ~0ull;
}

// A pipelined step (`pipe`, src/transport/progress.rs): handed over before its copies, which go chunk by
// chunk (`pipe` bytes of each arena copy, 32 KiB-OX_NET_PIPE_CHUNK, numbered over the arena copies in
// order; chunk c is block c % gridDim.x's).
// - Pre-copies: the block copies chunk c into the arena, then (barrier) its thread 0 stores the
//   step's flag into pre flag c with a system-scope release, cumulative over the block's stores
//   the barrier ordered before it: the proxy that acquires the flag sees the chunk.
// - Post-copies: thread 0 acquires post flag c (system scope; the proxy's release store follows
//   the chunk's bytes), the barrier orders that before every thread's loads, which bypass caches
//   (host_copy.cuh). The proxy flags no result before every pre flag is set, so a chunk out never
//   overwrites GPU memory a pre-copy of this kernel still reads (in-place calls).
// - The hand-over: every block counts itself in (`issued[1]`) before it copies, having read
//   `issued` (so block 0 may write it), and block 0 pushes the trigger once all have, with the
//   system fence of a plain step (nothing is in the arena yet; the fence is the usual one).
// - Once its results are out, block 0 waits for `done` (and records it in issued[2]) before the
//   kernel ends, as a plain step's kernel does: the proxy may still be sending from the arena
//   (the peer's results came in before ours went out), and the step used the first arena, which
//   the next detached step of even number refills after waiting only for the step two before it
//   (ox_net_begin). A detached pipelined step returns after its pre-copies, like a plain one.
// - An issued step (`detach` = OX_NET_STEP_ISSUE, a group's point-to-point work with local work to
//   run meanwhile) returns after its pre-copies, and its completion launch makes the post-copies
//   (same arguments; the step's number read back from `issued`, as ox_net_complete does). Every
//   pre flag is set before the issuing kernel ends, so the proxy finishes the step without it,
//   and the completion's blocks wait only for the proxy's flags, not for each other: a completion
//   needs no co-resident grid. The arena stays the step's until then: it keeps to the first
//   (flip = 0), and later step kernels start after the completion ended.
// - A stop (abort, or the proxy stopped) ends the waits; the copies after a failed wait are skipped.

// The results' half of a pipelined step (its own GPU copies, then each result chunk once flagged):
// in the step's kernel, or in the completion launch of an issued step.
OX_DEV void ox_net_pipe_post(const NetStepArgs& a, uint64_t target) {
  const uint64_t shift = (target & 1) ? a.flip : 0;
  const uint32_t flag = ox_net_flag(target);
  const uint64_t CH = a.pipe;  // the step's chunk size (progress::chunk_for), nonzero here
  // The step's own GPU copies (after the arena ones among the post-copies), then the results.
  ox_net_copies<false>(a, a.npre, a.npre + a.npost, shift, flag, kOwn);
  __shared__ uint32_t ok;
  uint32_t c = 0;
  for (uint32_t k = a.npre; k < a.npre + a.npost; ++k) {
    const NetCopy& cp = a.copies[k];
    if (!((a.arena_copies >> k) & 1)) continue;
    const uint32_t n = (uint32_t)((cp.bytes + CH - 1) / CH);
    for (uint32_t j = 0; j < n; ++j, ++c) {
      if (c % gridDim.x != blockIdx.x) continue;
      if (threadIdx.x == 0) {
        AbortState ab(a.abort_flag);
        const uint32_t* f = reinterpret_cast<const uint32_t*>(a.post_flags + shift) + c;
        ok = 1;
        for (uint32_t spins = 0; ox_ld_acquire_sys_u32(f) != flag; ++spins) {
          if (ab.poll() || ((spins & 255u) == 255u && ox_fifo_stopped(a.fifo))) {
            ok = 0;
            break;
          }
        }
      }
      __syncthreads();
      if (!ok) return;
      const uint64_t off = (uint64_t)j * CH, len = ox_min(CH, cp.bytes - off);
      // Chunks are 32 KiB or more, a power of two: whole elements, as each combining copy needs.
      if (cp.with) ox_net_combine_copy(a.combine, cp.dst + off, cp.src + shift + off, cp.with + off, len);
      else ox_host_copy<true>(cp.dst + off, cp.src + shift + off, len);
      // The next chunk's wait rewrites `ok`: every thread has read it by now.
      __syncthreads();
    }
  }
  // The arena is free only once the proxy has finished the whole step (see the note above).
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    AbortState ab(a.abort_flag);
    if (ox_net_wait(a, ab, target)) *ox_net_seen(a) = target;
  }
}

OX_DEV void ox_net_pipe(const NetStepArgs& a) {
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) {
    ox_net_begin(a, target, go);
    go = ox_net_hand_over(a, target, (target & 1) ? a.flip : 0, go, true);
  }
  __syncthreads();
  if (!go) return;
  const uint64_t shift = (target & 1) ? a.flip : 0;
  const uint32_t flag = ox_net_flag(target);
  const uint64_t CH = a.pipe;  // the step's chunk size (progress::chunk_for), nonzero here
  // Pre-copies: the arena ones by chunks, others (a detached step's own GPU copies) shared as usual.
  uint32_t c = 0;
  for (uint32_t k = 0; k < a.npre; ++k) {
    const NetCopy& cp = a.copies[k];
    if (!((a.arena_copies >> k) & 1)) {
      uint64_t off, len;
      ox_net_part(cp.bytes, off, len);
      ox_host_copy<false>(cp.dst + off, cp.src + off, len);
      continue;
    }
    const uint32_t n = (uint32_t)((cp.bytes + CH - 1) / CH);
    for (uint32_t j = 0; j < n; ++j, ++c) {
      if (c % gridDim.x != blockIdx.x) continue;
      const uint64_t off = (uint64_t)j * CH, len = ox_min(CH, cp.bytes - off);
      ox_host_copy<false>(cp.dst + shift + off, cp.src + off, len);
      __syncthreads();
      if (threadIdx.x == 0) ox_st_release_sys_u32(reinterpret_cast<uint32_t*>(a.pre_flags + shift) + c, flag);
    }
  }
  // Detached: nothing comes back. Issued: the results come in the completion launch, after the
  // work the stream runs in between (every pre flag is set by now, so the proxy can finish the
  // step without this kernel, and the completion needs none of this grid's blocks).
  if (a.detach != OX_NET_STEP_WAIT) return;
  ox_net_pipe_post(a, target);
}

// Copies into the arena of a step with more than OX_NET_COPIES of them (src/net/mod.rs,
// `overflow`), in launches of their own before a step kernel that has none. The step's number and
// arena are the ones the step kernel will use (`issued` + 1, not yet written), and each block first
// waits for the proxy to be done with the arena, as ox_net_begin does for the step kernel. Each
// thread's system fence after its copies makes them visible to the proxy before the kernel ends,
// so before the step kernel's hand-over. (The copies out come in completion launches after the
// step kernel, which waited: ox_net_complete.)
OX_DEV void ox_net_pre(const NetStepArgs& a) {
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) ox_net_begin(a, target, go);
  __syncthreads();
  if (!go) return;
  ox_net_copies<true>(a, 0, a.npre, (target & 1) ? a.flip : 0, ox_net_flag(target));
  __threadfence_system();
}

// Several blocks (OXCCL_NET_STEP_BLOCKS) share the copies; block 0 alone hands the step over,
// once every other block has counted its part of the copies in (`issued[1]`, then reset for the
// next step kernel, which starts after this one ended). The other blocks never wait for block 0,
// so they need not run at the same time as it.
extern "C" __global__ void ox_net_step(const __grid_constant__ NetStepArgs a) {
  ox_pdl_enter();
  if (a.detach == OX_NET_STEP_COMPLETE) {
    // Written by the issuing kernel, which finished before this one started (stream order).
    if (a.pipe) ox_net_pipe_post(a, *reinterpret_cast<const uint64_t*>(a.issued));
    else ox_net_complete(a);
    return;
  }
  if (a.detach == OX_NET_STEP_PRE) {
    ox_net_pre(a);
    return;
  }
  if (a.pipe) {
    ox_net_pipe(a);
    return;
  }
  // Detached and issued steps return once handed over; only a waiting step waits here.
  const bool wait_here = a.detach == OX_NET_STEP_WAIT;
  __shared__ uint32_t go;
  __shared__ uint64_t target;
  if (threadIdx.x == 0) ox_net_begin(a, target, go);
  __syncthreads();
  // Odd steps use the second arena: the arena side of each copy marked in arena_copies moves by
  // flip (modulo 2^64: the second arena may lie below the first).
  const uint64_t shift = (target & 1) ? a.flip : 0;
  const uint32_t flag = ox_net_flag(target);
  if (go) ox_net_copies<true>(a, 0, a.npre, shift, flag);
  __syncthreads();
  // The block's copies (ordered before by the barrier) go with its count; packets need no fence.
  if (threadIdx.x == 0) go = ox_net_hand_over(a, target, shift, go, !a.packets);
  __syncthreads();
  if (!go || !wait_here) return;
  // The step's own copies while the proxy works: they touch nothing of its ranges.
  ox_net_copies<false>(a, a.npre, a.npre + a.npost, shift, flag, kOwn);
  if (threadIdx.x == 0 && !ox_net_by_packets(a)) {
    // Every block waits for the proxy itself before its part of the copies out (or polls its
    // packets in them).
    AbortState ab(a.abort_flag);
    go = ox_net_wait(a, ab, target);
    if (go && blockIdx.x == 0) *ox_net_seen(a) = target;
  }
  __syncthreads();
  if (!go) return;
  const bool ok = ox_net_copies<false>(a, a.npre, a.npre + a.npost, shift, flag, kArena);
  if (__syncthreads_and(ok) && threadIdx.x == 0 && blockIdx.x == 0 && ox_net_by_packets(a)) *ox_net_seen(a) = target;
}
