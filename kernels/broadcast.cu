// Broadcast as LL128 lines along the chain root -> root+1 -> ... -> root-1 (ll128_chain.cuh):
// every rank but the last forwards each line as soon as it has it and then keeps its own copy, so
// every link carries the message once and the root sends it once (the exchange kernel's direct
// packets make the root send it n-1 times; its relay syncs in rounds). Untyped: `count` is bytes.
// The root copies sendbuff into recvbuff when they differ; sendbuff is never read off the root.
#include "ll128_chain.cuh"

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

extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) ox_broadcast_ll128(CollArgs a) {
  const DevComm& c = ox_comm(a);
  const int n = c.nranks, pos = (c.rank - a.root + n) % n;  // 0 = the root
  const bool root = pos == 0;
  BroadcastLl128Line line{root ? reinterpret_cast<const char*>(a.send) : nullptr,
                          root && a.send == a.recv ? nullptr : reinterpret_cast<char*>(a.recv), a.count};
  ox_ll128_chain(a, pos, a.count, line);
}
