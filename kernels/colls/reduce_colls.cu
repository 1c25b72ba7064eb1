// ReduceScatter and Reduce kernels (AllReduce's siblings; allreduce.cu holds the shared pieces).
//   reducescatter_ll  - every rank writes chunk p of its input (pre-scaled) as LL16 packets to
//                       rank p; each rank reduces its own chunk. All pairs exchange both ways, so
//                       no acknowledgement is needed (see exchange.cu).
//   reducescatter_put - the same through the put scratch in rounds: put, sync, reduce; rounds
//                       alternate scratch areas and a final sync ends the launch (as exchange.cu).
//   reduce_ll         - every rank but the root writes its input as packets to the root, which
//                       reduces; the pairs are one-directional, so the root acknowledges the
//                       launch when it enters it (ll_flags.cuh); or (mode OX_MODE_LL128_CHAIN,
//                       3+ ranks) reduce_ll128_chain below.
//   reduce_put        - AllReduce's put-based algorithm with the gather going to the root only,
//                       or (mode OX_MODE_RELAY, 3+ ranks, large) reduce_relay below,
//                       or (mode OX_MODE_CHAIN, 3+ ranks) reduce_chain below.
// Results are reduced in rank order, except along the chains (chain order: root+1, ..., root), and
// each input's pre() is applied by its owner.
#include "common.cuh"
#include "instantiate.cuh"
#include "ll128_chain.cuh"
#include "ll_flags.cuh"
#include "memory_channel.cuh"
#include "named_barrier.cuh"
#include "put_scratch.cuh"
#include "reduce.cuh"
#include "rsag.cuh"

template <typename T, typename Op>
OX_DEV void reducescatter_ll(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  ox_ll_flags_load(c, flags, ab);
  const uint64_t nbytes = a.count * sizeof(T);  // one rank's chunk
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const Op op(a, n);

  for (uint64_t t = g; t < (uint64_t)(n - 1) * npkt; t += G) {
    const int q = (int)(t / npkt);
    const uint64_t i = t - (uint64_t)q * npkt;
    const int p = q < me ? q : q + 1;
    const uint64_t v = ox_pre<T>(op, ox_load8(src + (uint64_t)p * nbytes, i * 8, nbytes));
    ox_ll16_write(ox_ll_region(c, p, flags[p], me) + i * 16, v, flags[p]);
  }
  // In place, recv is this rank's chunk of send: each packet is read before it is written, by
  // the same thread.
  for (uint64_t i = g; i < npkt; i += G) {
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t x = r == me ? ox_pre<T>(op, ox_load8(src + (uint64_t)me * nbytes, i * 8, nbytes))
                                 : ox_ll16_read(ox_ll_region(c, me, flags[r], r) + i * 16, flags[r], ab);
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    ox_store8(dst, i * 8, nbytes, ox_post<T>(op, acc));
  }
  ox_ll_flags_advance_all(c, me, n, flags);
}

template <typename T, typename Op>
OX_DEV void reducescatter_put(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  const uint64_t count = a.count;  // per rank
  const uint64_t S = a.chunk_elems;
  const uint32_t b = blockIdx.x, nb = gridDim.x;
  const OxPutScratch ps(c, n);
  const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
  const T* in = reinterpret_cast<const T*>(a.send);
  T* out = reinterpret_cast<T*>(a.recv);
  const Op op(a, n);
  uint32_t k = 0;
  for (uint64_t o = (uint64_t)b * S; o < count; o += (uint64_t)nb * S, ++k) {
    const uint64_t area = (k & 1u) * ps.area;
    const uint64_t len = ox_min(S, count - o);
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      char* dst = reinterpret_cast<char*>(c.rs_scratch[p]) + area + ps.at(b, me);
      ox_copy_pre<T>(op, reinterpret_cast<T*>(dst), in + (uint64_t)p * count + o, len, threadIdx.x, blockDim.x);
    }
    ox_block_sync_peers(c, ab);
    reduce_slice<T>(c, op, in + (uint64_t)me * count + o, out + o, my_rs + area + ps.at(b, 0), 0, b, len, kAgNone);
  }
  // Peers must be done reading this launch's slots before any next launch writes area 0 again.
  ox_block_sync_peers(c, ab);
}

template <typename T, typename Op>
OX_DEV void reduce_ll(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  const int root = a.root;
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ uint8_t pair[OX_MAX_RANKS], role[OX_MAX_RANKS];
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    pair[threadIdx.x] = me == root ? (int)threadIdx.x != root : (int)threadIdx.x == root;
    role[threadIdx.x] = pair[threadIdx.x] ? (me == root ? 2 : 1) : 0;  // one-way: root receives
  }
  // The root's scratch and its geometry are read before the flags, not after: a sender's flag
  // load waits on an acquire, which empties L1, and DevComm loads behind it would delay its
  // packets by an L2 round trip (as in allreduce_oneshot).
  char* const root_base = reinterpret_cast<char*>(c.ll_scratch[root]);
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  ox_ll_flags_load(c, flags, ab);  // includes a __syncthreads
  ox_ll_oneway_mark(c, me, n, flags, role);
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const Op op(a, n);
  if (me != root) {
    char* base = ox_ll_at(root_base, half, region, flags[root], me);
    for (uint64_t i = g; i < npkt; i += G) ox_ll16_write(base + i * 16, ox_pre<T>(op, ox_load8(src, i * 8, nbytes)), flags[root]);
  } else {
    char* dst = reinterpret_cast<char*>(a.recv);
    for (uint64_t i = g; i < npkt; i += G) {
      uint64_t acc = 0;
      for (int r = 0; r < n; ++r) {
        const uint64_t x = r == me ? ox_pre<T>(op, ox_load8(src, i * 8, nbytes))
                                   : ox_ll16_read(ox_ll_at(root_base, half, region, flags[r], r) + i * 16, flags[r], ab);
        acc = r == 0 ? x : ox_combine<T>(op, acc, x);
      }
      ox_store8(dst, i * 8, nbytes, ox_post<T>(op, acc));
    }
  }
  ox_ll_flags_advance(c, me, n, flags, pair);
}

// Reduce on 3+ ranks as LL128 lines along a chain ending at the root (root+1 -> ... -> root, as
// reduce_chain below; the driver, its scratch rounds and flags: ll128_chain.cuh). No semaphores
// between ranks in a round: a line's flag is its readiness, so lines travel down the chain as soon
// as they arrive, and every link carries the message once, where reduce_ll makes the root receive
// it n-1 times. Each rank adds its pre-scaled input to the predecessor's partial line and forwards the sum; the
// root (the tail) applies post() and stores the result instead.
template <typename T, typename Op>
struct ReduceLl128Line {
  const Op& op;
  const char* src;
  char* dst;
  uint64_t nbytes;
  bool last;  // the root: keeps the result, forwards nothing
  OX_DEV void in(uint64_t w, bool two, uint64_t& x0, uint64_t& x1) const {
    x0 = ox_pre<T>(op, ox_load8(src, w * 8, nbytes));
    if (two) x1 = ox_pre<T>(op, ox_load8(src, (w + 1) * 8, nbytes));
  }
  OX_DEV void merge(bool two, uint64_t d0, uint64_t d1, uint64_t& x0, uint64_t& x1) const {
    x0 = ox_combine<T>(op, d0, x0);
    if (two) x1 = ox_combine<T>(op, d1, x1);
  }
  // In place (the root's send is its recv), a word is read (in) before the same lane writes it.
  OX_DEV void out(uint64_t w, bool two, uint64_t x0, uint64_t x1) const {
    if (!last) return;
    ox_store8(dst, w * 8, nbytes, ox_post<T>(op, x0));
    if (two) ox_store8(dst, (w + 1) * 8, nbytes, ox_post<T>(op, x1));
  }
};

template <typename T, typename Op>
OX_DEV void reduce_ll128_chain(const CollArgs& a) {
  const DevComm& c = ox_comm(a);
  const int n = c.nranks;
  const int pos = (c.rank - a.root - 1 + 2 * n) % n;  // 0 = the chain's head, n-1 = the root
  const Op op(a, n);
  const uint64_t nbytes = a.count * sizeof(T);
  ReduceLl128Line<T, Op> line{op, reinterpret_cast<const char*>(a.send), reinterpret_cast<char*>(a.recv), nbytes, pos == n - 1};
  ox_ll128_chain(a, pos, nbytes, line);
}

// Reduce on 3+ ranks by relay. The m = n-1 ranks other than the root ("holders") each own one
// piece of the message; in round k every rank (the root too) puts its pre-scaled share of chunk k
// of each piece into that piece's holder's scratch (area k&1, slot (block, sender)); after the
// round's sync each holder reduces its chunk k and puts the result straight into the root's
// scratch (area (k+1)&1, slot (block, holder)); the root copies chunk k out in round k+1, after
// that round's sync. So the root receives only finished pieces (the message once) while every
// link carries about the message once, and the root's gather overlaps the next reduce-scatter.
// One sync with every peer per round, rounds+1 rounds, then a final sync.
// Scratch reuse: a sender writes a holder's area k&1 again in round k+2, after the round k+1 sync,
// which the holder enters after reducing chunk k; a holder writes the root's area (k+1)&1 after
// the round k sync, which the root enters after copying out of that area in round k-1.
template <typename T, typename Op>
OX_DEV void reduce_relay(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  const int root = a.root, m = n - 1;
  const uint64_t unit = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);
  RsagGeom<T> geo;  // over holder indices 0..m-1 (holder i is rank i, or i+1 from the root on)
  geo.count = a.count;
  geo.per = ox_ceil_div(ox_ceil_div(a.count, (uint64_t)m), unit) * unit;
  const uint64_t S = a.chunk_elems;
  const uint32_t b = blockIdx.x, nb = gridDim.x;
  const OxPutScratch ps(c, n);
  const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
  const T* in = reinterpret_cast<const T*>(a.send);
  T* out = reinterpret_cast<T*>(a.recv);
  const Op op(a, n);
  const int mine = me < root ? me : me - 1;  // this rank's holder index (unused on the root)
  const uint64_t rounds = ox_ceil_div(geo.per, (uint64_t)nb * S);  // the same on every rank and block
  for (uint64_t k = 0; k <= rounds; ++k) {
    const uint64_t area = (k & 1u) * ps.area;
    const uint64_t o = (k * nb + b) * S;  // chunk k of this block, as an offset into every piece
    if (k < rounds) {
      for (int j = 0; j < m; ++j) {
        const int i = (j + (int)(b % (uint32_t)m)) % m;  // rotated: blocks spread over holders
        const int p = i < root ? i : i + 1;
        const uint64_t len = geo.slice(i, o, S);
        if (p == me || len == 0) continue;
        char* dst = reinterpret_cast<char*>(c.rs_scratch[p]) + area + ps.at(b, me);
        ox_copy_pre<T>(op, reinterpret_cast<T*>(dst), in + geo.start(i) + o, len, threadIdx.x, blockDim.x);
      }
    }
    ox_block_sync_peers(c, ab);
    if (me != root) {
      const uint64_t len = k < rounds ? geo.slice(mine, o, S) : 0;
      if (len) {
        reduce_slice<T>(c, op, in + geo.start(mine) + o, nullptr, my_rs + area + ps.at(b, 0),
                        ((k + 1) & 1u) * ps.area, b, len, root);
      }
    } else if (k > 0) {
      const uint64_t o1 = ((k - 1) * nb + b) * S;
      for (int j = 0; j < m; ++j) {
        const int i = (j + (int)(b % (uint32_t)m)) % m;
        const int p = i < root ? i : i + 1;
        const uint64_t len = geo.slice(i, o1, S);
        if (len == 0) continue;
        const char* from = my_rs + area + ps.at(b, p);
        ox_copy(reinterpret_cast<char*>(out + geo.start(i) + o1), from, len * sizeof(T), threadIdx.x, blockDim.x, true);
      }
    }
  }
  // Every rank is done with this launch's slots before any next launch writes them again.
  ox_block_sync_peers(c, ab);
}

// Reduce on 3+ ranks along a chain that ends at the root: root+1 -> root+2 -> ... -> root, as
// NCCL's ring does, so every rank sends and receives the message once and no step waits for more
// than its two neighbours. Block b owns elements [b*per, (b+1)*per) (per rounded to 16 bytes) and
// walks them in steps of S elements: in step k a rank waits for its predecessor's partial of
// chunk k (none at the head), adds its own input (pre() applied here) and puts the sum into its
// successor's slot k mod D, then signals it; the root applies post() and writes its output
// instead. Consecutive steps pipeline along the chain.
// Slots: D = 2n per block, the block's slots of the put scratch, area 0 first, then area 1 (only
// the predecessor writes them in this launch). Semaphores, per (block, neighbour): the
// predecessor's signals mean "chunk k is in your slot"; this rank's signals back to it mean
// "I have read slot k mod D" (a release after the block's reads, so its later write there cannot
// overtake them).
// Scratch reuse, within the launch: step k >= D waits for the credit of step k - D. Across
// launches: a launch may start writing peers' area 0 at once (rsag's last reads are of area 1,
// after its last sync, and it ends without a barrier), so this launch writes a successor's area 1
// only after the successor's first credit, which it sends from inside this launch. At the end the
// credits not yet waited for are drained (every signal of the launch is consumed in it, so the
// counters stay paired for the next launch), then a barrier with every peer: no rank's next
// launch writes a slot this rank may still read. Checked by an executable model under random
// interleavings (scripts/model/reduce_chain_model.py in git before 7bcb34d).
template <typename T, typename Op>
OX_DEV void reduce_chain(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  const int root = a.root;
  const uint64_t unit = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);
  const uint32_t b = blockIdx.x, nb = gridDim.x;
  const uint64_t per = ox_ceil_div(ox_ceil_div(a.count, (uint64_t)nb), unit) * unit;
  const uint64_t lo = ox_min((uint64_t)b * per, a.count);
  const uint64_t hi = ox_min(lo + per, a.count);
  const uint64_t S = a.chunk_elems;
  const uint64_t steps = ox_ceil_div(hi - lo, S);  // the same on every rank for this block
  const uint64_t D = 2 * (uint64_t)n;
  const OxPutScratch ps(c, n);
  const int pos = (me - root - 1 + 2 * n) % n;  // 0 = the chain's head, n-1 = the root
  const int prev = (me + n - 1) % n, next = (me + 1) % n;
  const bool has_prev = pos > 0, has_next = pos < n - 1;
  const MemoryChannel from = ox_memory_channel(c, prev, b, 0, 0);  // wait: data; signal: credit
  const MemoryChannel to = ox_memory_channel(c, next, b, 0, 0);    // wait: credit; signal: data
  const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
  char* next_rs = reinterpret_cast<char*>(c.rs_scratch[next]);
  const T* in = reinterpret_cast<const T*>(a.send);
  T* out = reinterpret_cast<T*>(a.recv);
  const Op op(a, n);
  // Warp roles, so that a step's release (a system-scope fence that waits for the step's remote
  // writes to land, microseconds) overlaps the next step's copy instead of stalling the block:
  // warp 0 signals, warp 1 waits, the rest compute. Barrier kReady (waiter + compute): step k's
  // inputs are in and its slot in the successor is free. Barrier kDone (signaler + compute): step
  // k's reads and writes are issued. Both sides use bar.sync, so the waiter runs at most one step
  // ahead of the compute warps and the signaler at most one behind.
  constexpr uint32_t kReady = 1, kDone = 2;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t nworkers = blockDim.x - 64;
  if (warp == 1) {
    uint64_t credits = 0;  // credits from the successor consumed so far
    for (uint64_t k = 0; k < steps; ++k) {
      if (lane == 0) {
        if (has_prev) from.wait(ab);
        const uint64_t need = !has_next ? 0 : k >= D ? k - D + 1 : (k >= (uint64_t)n ? 1 : 0);
        for (; credits < need; ++credits) to.wait(ab);
      }
      __syncwarp();
      ox_named_bar_sync(kReady, 32 + nworkers);
    }
    if (lane == 0 && has_next) {
      for (; credits < steps; ++credits) to.wait(ab);
    }
  } else if (warp == 0) {
    for (uint64_t k = 0; k < steps; ++k) {
      ox_named_bar_sync(kDone, 32 + nworkers);
      if (lane == 0 && has_next) to.signal();
      if (lane == 0 && has_prev) from.signal();
    }
  } else {
    for (uint64_t k = 0; k < steps; ++k) {
      ox_named_bar_sync(kReady, 32 + nworkers);
      const uint64_t j = k % D;
      const uint64_t off = (j / n) * ps.area + ps.at(b, j % n);
      const uint64_t e0 = lo + k * S;
      const uint64_t len = ox_min(S, hi - e0);
      const T* part = has_prev ? reinterpret_cast<const T*>(my_rs + off) : nullptr;
      T* dst = has_next ? reinterpret_cast<T*>(next_rs + off) : out + e0;
      ox_chain_step<T>(op, in + e0, part, dst, len, !has_next, threadIdx.x - 64, nworkers);
      ox_named_bar_sync(kDone, 32 + nworkers);
    }
  }
  ox_block_sync_peers(c, ab);  // begins with a __syncthreads
}

template <typename T, typename Op>
OX_DEV void reduce_packets(const CollArgs& a) {
  if (a.mode == OX_MODE_LL128_CHAIN) reduce_ll128_chain<T, Op>(a);
  else reduce_ll<T, Op>(a);
}

template <typename T, typename Op>
OX_DEV void reduce_put(const CollArgs& a) {
  if (a.mode == OX_MODE_CHAIN) reduce_chain<T, Op>(a);
  else if (a.mode == OX_MODE_RELAY) reduce_relay<T, Op>(a);
  else rsag_body<T, Op, true>(a);
}

// ---- put-based, grouped ----------------------------------------------------------------------
// A group's put-based reductions (algo::group::merge_puts: AllReduces run as rsag, ReduceScatters
// as reducescatter_put, Reduces as rsag to the root; one datatype, op and block size; 2 to
// OX_GROUP_MAX_OPS) in one launch: every block runs the operations one after another, each as
// its lone kernel runs it, with its own slices (ops[j].chunk_elems) spread over this launch's
// grid (the largest of the lone grids; a block past an operation's rounds skips them, as its
// peers' same-index blocks do), ops[j].mode saying which (OX_GROUP_ALLREDUCE, _REDUCESCATTER,
// _REDUCE). The put scratch and the semaphores carry over from one operation to the next as from
// one launch to the next. Slot (b, src) of a rank is written only by block b of rank src and read
// only by the rank's own block b, and the k-th sync of block b on one rank pairs with the k-th of
// block b on each peer, so a write can only race with a peer's read between the same two syncs.
// Invariant of every body: its first writes go to area 0 (RS) before its first sync and to area 1
// (AG) only after it; its reads of area 0 end before its last sync and of area 1 by its last
// segment (rsag: copy-out after its last sync; reducescatter_put: reads of area k & 1 in round
// k + 1, then a final sync). So an operation's writes never meet the previous one's reads. The
// sync counts (rsag 2 per round, reducescatter_put rounds + 1) depend only on the plans, alike on
// every rank.
// Within a group no operation may read another's output (NCCL's contract); the block barrier
// between operations still keeps a block's last copy-out of one before its first reads of the
// next, so a chain of same-sized in-place AllReduces over one buffer, which lone launches ran in
// order, reads what the previous one wrote (the slices are then the same for every block).
// Kinds (a mask of OX_PUT_GROUP_* bits) is what the launch holds: a variant with one kind holds
// only that body and takes every operation as that kind (the host picks it only for such a group,
// src/launch/enqueue.rs). The bodies inline (out of line they spilled more) and the variant with
// every kind spills several times what one kind does (ptxas, sm_90, f32 sum: 580 bytes of spill
// stores against 84 for AllReduces alone, 20 for ReduceScatters, 76 for Reduces). Running
// one-kind groups through it took 6-12% longer than lone launches at 16-64 MB, where the
// one-kind variants take 0-7% less (8-11% at 4 MB; nccl-tests -m 8, two ranks sharing one H200,
// 2026-12-01),
// so the common one-kind groups (PyTorch's coalesced all_reduce and reduce_scatter_tensor) keep
// one kind's registers, and a group of several kinds joins here only with operations of at most
// 4 MiB each (algo::group::MIXED_PUT_MAX_BYTES).
#define OX_PUT_GROUP_ALLREDUCE 1u
#define OX_PUT_GROUP_REDUCESCATTER 2u
#define OX_PUT_GROUP_REDUCE 4u
template <typename T, typename Op, uint32_t Kinds>
OX_DEV void put_group(const GroupArgs& a) {
  constexpr bool one = Kinds == OX_PUT_GROUP_ALLREDUCE || Kinds == OX_PUT_GROUP_REDUCESCATTER || Kinds == OX_PUT_GROUP_REDUCE;
  for (uint32_t j = 0; j < a.nops; ++j) {
    if (j) __syncthreads();
    const CollArgs& o = a.ops[j];
    if ((Kinds & OX_PUT_GROUP_REDUCESCATTER) && (one || o.mode == OX_GROUP_REDUCESCATTER)) reducescatter_put<T, Op>(o);
    else if ((Kinds & OX_PUT_GROUP_REDUCE) && (one || o.mode == OX_GROUP_REDUCE)) rsag_body<T, Op, true>(o);
    else if (Kinds & OX_PUT_GROUP_ALLREDUCE) rsag_body<T, Op, false>(o);
  }
}

template <typename T, typename Op>
OX_DEV void put_group_allreduce(const GroupArgs& a) { put_group<T, Op, OX_PUT_GROUP_ALLREDUCE>(a); }
template <typename T, typename Op>
OX_DEV void put_group_reducescatter(const GroupArgs& a) { put_group<T, Op, OX_PUT_GROUP_REDUCESCATTER>(a); }
template <typename T, typename Op>
OX_DEV void put_group_reduce(const GroupArgs& a) { put_group<T, Op, OX_PUT_GROUP_REDUCE>(a); }
template <typename T, typename Op>
OX_DEV void put_group_mixed(const GroupArgs& a) {
  put_group<T, Op, OX_PUT_GROUP_ALLREDUCE | OX_PUT_GROUP_REDUCESCATTER | OX_PUT_GROUP_REDUCE>(a);
}

OX_TYPED_KERNELS(ox_reducescatter_ll, reducescatter_ll)
OX_TYPED_KERNELS(ox_reducescatter_put, reducescatter_put)
OX_TYPED_KERNELS(ox_reduce_ll, reduce_packets)
OX_TYPED_KERNELS(ox_reduce_put, reduce_put)
OX_TYPED_KERNELS_ARGS(ox_put_group_allreduce, put_group_allreduce, ox_pdl_enter(), GroupArgs)
OX_TYPED_KERNELS_ARGS(ox_put_group_reducescatter, put_group_reducescatter, ox_pdl_enter(), GroupArgs)
OX_TYPED_KERNELS_ARGS(ox_put_group_reduce, put_group_reduce, ox_pdl_enter(), GroupArgs)
OX_TYPED_KERNELS_ARGS(ox_put_group_mixed, put_group_mixed, ox_pdl_enter(), GroupArgs)
