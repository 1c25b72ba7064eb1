// Grouped collectives: the AllReduces, ReduceScatters, Reduces, AllGathers, AlltoAlls,
// Broadcasts, Gathers and Scatters of one ncclGroupStart/End on one communicator, the reductions of one datatype and op,
// as ONE launch (algo::group says which). Launched one by one, each call of a group pays a kernel
// launch and a round trip for its packets' flags; NCCL runs a group's collectives in one kernel.
//
// The launch is the packet algorithms of lone calls over the operations' packets laid end to end:
// operation j's packet i is packet ops[j].chunk_elems + i of every source's LL region, each
// operation's packets starting on a packet of their own (8 payload bytes; a partial last packet
// is zero-padded as in a lone call). Per operation (`mode`):
//   OX_GROUP_ALLREDUCE      its whole input to every peer, as the one-shot (allreduce.cu);
//   OX_GROUP_REDUCESCATTER  (count = each rank's chunk) chunk p to rank p, as reducescatter_ll;
//   OX_GROUP_REDUCE         every rank but the root its whole input to the root, as reduce_ll;
//   OX_GROUP_ALLGATHER      (count = bytes of a piece, moved as they are) its whole input to every
//                           peer, piece r of the output from rank r, as the one-shot gather;
//   OX_GROUP_ALLTOALL       (count = bytes of a piece) piece p of its input to rank p, piece r of
//                           the output from rank r, as the one-shot gather's AlltoAll;
//   OX_GROUP_BROADCAST      (count = bytes) the root's input to every peer, as broadcast_oneshot;
//   OX_GROUP_GATHER         (count = bytes of a piece) every rank but the root its input to the
//                           root, piece r of the root's output from rank r, as the exchange
//                           kernel's packets;
//   OX_GROUP_SCATTER        (count = bytes of a piece) piece p of the root's input to rank p, as
//                           the exchange kernel's packets.
// After the collectives' packets come the group's sends and receives that travel in this launch
// (`GroupArgs::p2p`, algo::group::fold_p2p): transfer k's packet i is packet p2p[k].start + i of
// its pair's region, sent in phase 1 and received in phase 2.
// Every element is reduced in rank order 0..n-1 from the same pre-scaled inputs as a lone call,
// so the results are bit-identical to running the operations one by one. The pair flags advance
// once for the whole launch, for each pair that exchanged; a pair whose packets went one way only
// (a group of rooted operations) is acknowledged as in lone one-way launches (ll_flags.cuh).
// The operations run at once, as NCCL runs a group's: within a group no operation may read
// another's output (nor write what another reads). In place (send == recv, or recv's own piece),
// a packet's input is read before the same thread writes its output.
#include "common.cuh"
#include "copy.cuh"
#include "instantiate.cuh"
#include "ll_flags.cuh"
#include "packet.cuh"
#include "reduce.cuh"

// The operation that global packet `t` belongs to, searching forward from `j` (a thread's packets
// only grow, so the search never goes back).
OX_DEV uint32_t ox_group_op(const GroupArgs& a, uint32_t j, uint64_t t) {
  while (j + 1 < a.nops && t >= a.ops[j + 1].chunk_elems) ++j;
  return j;
}

// The transfer that packet `t` of this rank's walk (at or past the collectives') belongs to,
// searching forward from `k`.
OX_DEV uint32_t ox_group_p2p(const GroupArgs& a, uint32_t k, uint64_t t) {
  while (k + 1 < a.np2p && t >= a.p2p[k + 1].local) ++k;
  return k;
}

// Operations whose count is bytes, moved as they are (no datatype, no op).
OX_DEV bool ox_group_bytes(uint32_t mode) {
  return mode == OX_GROUP_ALLGATHER || mode == OX_GROUP_ALLTOALL || mode == OX_GROUP_BROADCAST || mode == OX_GROUP_GATHER ||
         mode == OX_GROUP_SCATTER;
}

// Rooted operations whose packets go from the root to every other rank, or to the root from every
// other rank; the rest go between every pair, both ways.
OX_DEV bool ox_group_from_root(uint32_t mode) { return mode == OX_GROUP_BROADCAST || mode == OX_GROUP_SCATTER; }
OX_DEV bool ox_group_to_root(uint32_t mode) { return mode == OX_GROUP_REDUCE || mode == OX_GROUP_GATHER; }

template <typename T, typename Op>
OX_DEV void allreduce_group(const GroupArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  __shared__ uint8_t pair[OX_MAX_RANKS], role[OX_MAX_RANKS];
  // The scratch bases and region geometry in registers and shared memory: every volatile packet
  // access clobbers memory, which would make the compiler reload them (as in allreduce.cu).
  if ((int)threadIdx.x < n) base[threadIdx.x] = reinterpret_cast<char*>(c.ll_scratch[threadIdx.x]);
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    // Which way packets go between this rank and peer p over all operations (role: bit 0 only
    // to p, bit 1 only from p, as reduce_ll).
    const int p = (int)threadIdx.x;
    bool out = false, in = false;
    for (uint32_t j = 0; j < a.nops && p != me; ++j) {
      const uint32_t m = a.ops[j].mode;
      const int root = a.ops[j].root;
      const bool from = ox_group_from_root(m);
      if (!from && !ox_group_to_root(m)) {
        out = in = true;
      } else if (from == (me == root)) {
        out |= from || p == root;  // the root of a Broadcast or Scatter, a Reduce's or Gather's sender
      } else {
        in |= !from || p == root;  // the root of a Reduce or Gather, a Broadcast's or Scatter's receiver
      }
    }
    for (uint32_t k = 0; k < a.np2p; ++k) {
      if ((int)a.p2p[k].peer == p && p != me) (a.p2p[k].is_send ? out : in) = true;
    }
    pair[p] = out || in;
    role[p] = out && !in ? 1 : in && !out ? 2 : 0;
  }
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes base[], pair[] and role[]
  ox_ll_oneway_mark(c, me, n, flags, role);
  const CollArgs& last = a.ops[a.nops - 1];
  const uint64_t total = last.chunk_elems + ox_ceil_div(ox_group_bytes(last.mode) ? last.count : last.count * sizeof(T), 8);
  const GroupP2p* lastp = a.np2p ? &a.p2p[a.np2p - 1] : nullptr;
  const uint64_t all = lastp ? lastp->local + ox_ceil_div(lastp->bytes, 8) : total;
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  // This rank's own contribution to its own output (AllReduce and Reduce pre-scaled, AllGather,
  // AlltoAll piece `me`, a Broadcast root's input), as read in phase 1, for phase 2: one 8-byte
  // word per packet in this rank's own region of half 0 of its scratch, which no peer writes and
  // no other kernel of the communicator uses while this one runs. Reading the input again instead
  // would, where a program lets a group's buffers overlap (no operation may read another's output
  // within a group, as in NCCL), give this rank other values than its peers received, and the
  // ranks different results.
  uint64_t* own = reinterpret_cast<uint64_t*>(base[me] + (uint64_t)me * region);

  // 1. Every packet of every operation to the peers it goes to; pre() applied by the input's owner.
  uint32_t j = 0;
  Op op(a.ops[0], n);
  for (uint64_t t = g; t < total; t += G) {
    const uint32_t j1 = ox_group_op(a, j, t);
    if (j1 != j) op = Op(a.ops[j1], n);  // a PreMulSum's scalar is the operation's own
    j = j1;
    const CollArgs& o = a.ops[j];
    const uint64_t i = t - o.chunk_elems;
    const uint32_t m = o.mode;
    const uint64_t nbytes = ox_group_bytes(m) ? o.count : o.count * sizeof(T);
    const char* src = reinterpret_cast<const char*>(o.send);
    if (m == OX_GROUP_SCATTER && me != o.root) continue;  // receives only
    if (m == OX_GROUP_REDUCESCATTER || m == OX_GROUP_ALLTOALL || m == OX_GROUP_SCATTER) {
      // Piece p to rank p; an AlltoAll or a Scatter's root keeps its own piece for phase 2 (a
      // ReduceScatter reads its own chunk there).
      if (m != OX_GROUP_REDUCESCATTER) own[t] = ox_load8(src + (uint64_t)me * nbytes, i * 8, nbytes);
      for (int k = 1; k < n; ++k) {
        const int p = me + k < n ? me + k : me + k - n;  // staggered so ranks start on different peers
        uint64_t x = ox_load8(src + (uint64_t)p * nbytes, i * 8, nbytes);
        if (m == OX_GROUP_REDUCESCATTER) x = ox_pre<T>(op, x);
        ox_ll16_write(ox_ll_at(base[p], half, region, flags[p], me) + t * 16, x, flags[p]);
      }
      continue;
    }
    if (m == OX_GROUP_BROADCAST && me != o.root) continue;  // receives only
    uint64_t v = ox_load8(src, i * 8, nbytes);
    if (!ox_group_bytes(m)) v = ox_pre<T>(op, v);
    own[t] = v;
    if (ox_group_to_root(m)) {
      if (me != o.root) ox_ll16_write(ox_ll_at(base[o.root], half, region, flags[o.root], me) + t * 16, v, flags[o.root]);
      continue;
    }
    for (int k = 1; k < n; ++k) {  // AllReduce, AllGather, a Broadcast's root: every peer
      const int p = me + k < n ? me + k : me + k - n;
      ox_ll16_write(ox_ll_at(base[p], half, region, flags[p], me) + t * 16, v, flags[p]);
    }
  }
  // The sends.
  uint32_t k = 0;
  for (uint64_t t = total + g; t < all; t += G) {
    k = ox_group_p2p(a, k, t);
    const GroupP2p& x = a.p2p[k];
    if (!x.is_send) continue;
    const uint64_t i = t - x.local;
    const int p = (int)x.peer;
    const uint64_t v = ox_load8(reinterpret_cast<const char*>(x.buf), i * 8, x.bytes);
    ox_ll16_write(ox_ll_at(base[p], half, region, flags[p], me) + (x.start + i) * 16, v, flags[p]);
  }
  // 2. This rank's outputs, in the same (thread -> packet) mapping: the words in `own` are this
  //    thread's. Reductions in rank order.
  j = 0;
  op = Op(a.ops[0], n);
  for (uint64_t t = g; t < total; t += G) {
    const uint32_t j1 = ox_group_op(a, j, t);
    if (j1 != j) op = Op(a.ops[j1], n);
    j = j1;
    const CollArgs& o = a.ops[j];
    const uint64_t i = t - o.chunk_elems;
    const uint32_t m = o.mode;
    char* dst = reinterpret_cast<char*>(o.recv);
    if (m == OX_GROUP_GATHER && me != o.root) continue;  // sends only
    if (m == OX_GROUP_ALLGATHER || m == OX_GROUP_ALLTOALL || m == OX_GROUP_GATHER) {
      // Piece r of the output from rank r's packet; this rank's own from `own`.
      const uint64_t nbytes = o.count;
      for (int r = 0; r < n; ++r) {
        const uint64_t x = r == me ? own[t] : ox_ll16_read(ox_ll_at(base[me], half, region, flags[r], r) + t * 16, flags[r], ab);
        ox_store8(dst + (uint64_t)r * nbytes, i * 8, nbytes, x);
      }
      continue;
    }
    if (ox_group_from_root(m)) {  // Broadcast, Scatter: the root's packet
      const uint64_t x = me == o.root ? own[t] : ox_ll16_read(ox_ll_at(base[me], half, region, flags[o.root], o.root) + t * 16, flags[o.root], ab);
      ox_store8(dst, i * 8, o.count, x);
      continue;
    }
    if (m == OX_GROUP_REDUCE && me != o.root) continue;  // sends only
    const uint64_t nbytes = o.count * sizeof(T);
    const bool rs = m == OX_GROUP_REDUCESCATTER;
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      uint64_t x;
      if (r != me) {
        x = ox_ll16_read(ox_ll_at(base[me], half, region, flags[r], r) + t * 16, flags[r], ab);
      } else if (rs) {
        // A ReduceScatter's own chunk is read only here. In place, recv is this chunk of send:
        // read before the same thread writes it below.
        x = ox_pre<T>(op, ox_load8(reinterpret_cast<const char*>(o.send) + (uint64_t)me * nbytes, i * 8, nbytes));
      } else {
        x = own[t];
      }
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    ox_store8(dst, i * 8, nbytes, ox_post<T>(op, acc));
  }
  // The receives.
  k = 0;
  for (uint64_t t = total + g; t < all; t += G) {
    k = ox_group_p2p(a, k, t);
    const GroupP2p& x = a.p2p[k];
    if (x.is_send) continue;
    const uint64_t i = t - x.local;
    const int p = (int)x.peer;
    const uint64_t v = ox_ll16_read(ox_ll_at(base[me], half, region, flags[p], p) + (x.start + i) * 16, flags[p], ab);
    ox_store8(reinterpret_cast<char*>(x.buf), i * 8, x.bytes, v);
  }
  ox_ll_flags_advance(c, me, n, flags, pair);
}

OX_TYPED_KERNELS_ARGS(ox_allreduce_group, allreduce_group, ox_pdl_enter(), GroupArgs)
