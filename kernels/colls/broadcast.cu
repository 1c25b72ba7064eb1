// Broadcast as LL128 lines along the chain root -> root+1 -> ... -> root-1 (ll128_chain.cuh):
// every rank but the last forwards each line as soon as it has it and then keeps its own copy, so
// every link carries the message once and the root sends it once (the exchange kernel's direct
// packets make the root send it n-1 times; its relay syncs in rounds). Untyped: `count` is bytes.
// The root copies sendbuff into recvbuff when they differ; sendbuff is never read off the root.
#include "copy.cuh"
#include "ll128_chain.cuh"
#include "ll_flags.cuh"
#include "packet.cuh"
#include "done.cuh"
#include "pdl.cuh"

struct BroadcastLl128Line {
  const char* src;  // the root's sendbuff; null off the root
  char* dst;        // recvbuff; null where nothing is to be stored (the root, in place)
  uint64_t nbytes;
  OX_DEV void in(uint64_t w, bool two, uint64_t& x0, uint64_t& x1) const {
    if (src == nullptr) return;
    x0 = ox_load8(src, w * 8, nbytes);
    if (two) x1 = ox_load8(src, (w + 1) * 8, nbytes);
  }
  OX_DEV void merge(bool, uint64_t d0, uint64_t d1, uint64_t& x0, uint64_t& x1) const {
    x0 = d0;
    x1 = d1;
  }
  OX_DEV void out(uint64_t w, bool two, uint64_t x0, uint64_t x1) const {
    if (dst == nullptr) return;
    ox_store8(dst, w * 8, nbytes, x0);
    if (two) ox_store8(dst, (w + 1) * 8, nbytes, x1);
  }
};

OX_DEV void ox_broadcast_ll128_body(const CollArgs& a) {
  ox_pdl_enter();
  const DevComm& c = ox_comm(a);
  const int n = c.nranks, pos = (c.rank - a.root + n) % n;  // 0 = the root
  const bool root = pos == 0;
  BroadcastLl128Line line{root ? reinterpret_cast<const char*>(a.send) : nullptr,
                          root && a.send == a.recv ? nullptr : reinterpret_cast<char*>(a.recv), a.count};
  ox_ll128_chain(a, pos, a.count, line);
}

extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) ox_broadcast_ll128(const __grid_constant__ CollArgs a) {
  ox_broadcast_ll128_body(a);
  ox_done_publish(a.done);
}

// Small Broadcast as one-way LL16 packets: the root writes the message into every peer's LL
// scratch (in its own source region) and copies it to its own recvbuff when that differs; every
// other rank reads it from its own scratch. The mirror of reduce_ll (reduce_colls.cu), with the
// same one-way flag bookkeeping (ll_flags.cuh): this launch's receivers acknowledge it on entry
// and the root's next launch to them waits for that, so back-to-back Broadcasts pay no round
// trip. Replaces the exchange kernel's general transfer list for small messages (BENCHMARKS.md
// of 2026-11-22, 7750d95: 6.6-6.9 us under graphs there, against 2.9-4 for the one-shot kernels).
// Untyped: `count` is bytes.
OX_DEV void ox_broadcast_oneshot_body(const CollArgs& a) {
  ox_pdl_enter();
  OX_KERNEL_PROLOGUE(a.comm);
  const int root = a.root;
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  __shared__ uint8_t pair[OX_MAX_RANKS], role[OX_MAX_RANKS];
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    const int p = (int)threadIdx.x;
    pair[p] = me == root ? p != root && p < n : p == root;
    role[p] = pair[p] ? (me == root ? 1 : 2) : 0;  // one-way: the root sends
    if (p < n) base[p] = reinterpret_cast<char*>(c.ll_scratch[p]);
  }
  // Geometry and the root's first word before the flags: the flag load's acquire empties L1, and
  // loads behind it would delay the first packet by an L2 round trip (as in allreduce_oneshot).
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  const uint64_t nbytes = a.count, npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = me == root && g < npkt ? ox_load8(src, g * 8, nbytes) : 0;
  ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes pair[], role[], base[]
  ox_ll_oneway_mark(c, me, n, flags, role);
  if (me == root) {
    for (uint64_t i = g; i < npkt; i += G) {
      const uint64_t v = i == g ? first : ox_load8(src, i * 8, nbytes);
      for (int k = 1; k < n; ++k) {
        const int p = me + k < n ? me + k : me + k - n;  // staggered so roots start on different peers
        ox_ll16_write(ox_ll_at(base[p], half, region, flags[p], me) + i * 16, v, flags[p]);
      }
      if (src != dst) ox_store8(dst, i * 8, nbytes, v);
    }
  } else {
    const char* mine = ox_ll_at(base[me], half, region, flags[root], root);
    for (uint64_t i = g; i < npkt; i += G) ox_store8(dst, i * 8, nbytes, ox_ll16_read(mine + i * 16, flags[root], ab));
  }
  ox_ll_flags_advance(c, me, n, flags, pair);
}

extern "C" __global__ void ox_broadcast_oneshot(const __grid_constant__ CollArgs a) {
  ox_broadcast_oneshot_body(a);
  ox_done_publish(a.done);
}
