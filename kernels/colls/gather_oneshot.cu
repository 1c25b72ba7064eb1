// One-shot AllGather and AlltoAll for small messages: the all-pairs LL16 movement of
// allreduce_oneshot (allreduce.cu) without the reduction. Every rank writes its piece for peer p
// (AllGather: its whole input; AlltoAll: input piece p) as packets into p's LL scratch, in its
// own source region, then reads every peer's packets and stores them as piece r of its output.
//
// Why a kernel of its own: the exchange kernel (exchange.cu) serves any transfer list, and its
// generality costs a small launch several microseconds over the one-shot AllReduce that moves
// the same packets (BENCHMARKS.md of 2026-11-22, b699113 and cea9c3f: 8.1-8.9 us against 3.3-4.9 at
// 4 ranks in a graph). This one takes CollArgs (72 bytes, not ExchangeArgs' 3.9 KiB) and does
// only what these two collectives need.
//
// Flags and ordering are allreduce_oneshot's (ll_flags.cuh): every pair moves packets both ways
// in every launch, so no acknowledgement is needed; a pending one-way acknowledgement from an
// earlier exchange launch is waited for by ox_ll_flags_load. Thread i handles packet i of every
// piece, reading its input word before writing the same word of the output, so in place (AllGather
// send == recv + me * bytes; AlltoAll send == recv) is safe.
//
// a.count is the piece size in bytes; a.mode is OX_GATHER_ALLTOALL for AlltoAll, else AllGather.
#include "common.cuh"
#include "copy.cuh"
#include "ll_flags.cuh"
#include "packet.cuh"
#include "done.cuh"
#include "pdl.cuh"

OX_DEV void ox_gather_oneshot_body(const CollArgs& a) {
  ox_pdl_enter();
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  if ((int)threadIdx.x < n) base[threadIdx.x] = reinterpret_cast<char*>(c.ll_scratch[threadIdx.x]);
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  const uint64_t nbytes = a.count;
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const bool a2a = a.mode == OX_GATHER_ALLTOALL;
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  // AllGather sends one input to every peer: its first packet is loaded while the flags load
  // (as allreduce_oneshot does). AlltoAll's pieces differ per peer and are loaded in the loop.
  const uint64_t first = !a2a && g < npkt ? ox_load8(src, g * 8, nbytes) : 0;
  ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes base[]

  for (uint64_t i = g; i < npkt; i += G) {
    const uint64_t v = a2a ? 0 : (i == g ? first : ox_load8(src, i * 8, nbytes));
    for (int k = 1; k < n; ++k) {
      const int p = me + k < n ? me + k : me + k - n;  // staggered so ranks start on different peers
      const uint64_t w = a2a ? ox_load8(src + (uint64_t)p * nbytes, i * 8, nbytes) : v;
      ox_ll16_write(ox_ll_at(base[p], half, region, flags[p], me) + i * 16, w, flags[p]);
    }
  }
  for (uint64_t i = g; i < npkt; i += G) {
    for (int r = 0; r < n; ++r) {
      uint64_t x;
      if (r == me) {
        const char* own = a2a ? src + (uint64_t)me * nbytes : src;
        if (own == dst + (uint64_t)me * nbytes) continue;  // in place: already there
        x = !a2a && i == g ? first : ox_load8(own, i * 8, nbytes);
      } else {
        x = ox_ll16_read(ox_ll_at(base[me], half, region, flags[r], r) + i * 16, flags[r], ab);
      }
      ox_store8(dst + (uint64_t)r * nbytes, i * 8, nbytes, x);
    }
  }
  ox_ll_flags_advance_all(c, me, n, flags);
}

extern "C" __global__ void ox_gather_oneshot(const __grid_constant__ CollArgs a) {
  ox_gather_oneshot_body(a);
  ox_done_publish(a.done);
}
