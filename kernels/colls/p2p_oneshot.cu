// Small grouped Send/Recv (at most one send and one receive, each with another rank) as LL16
// packets, without the exchange kernel's transfer lists (ExchangeArgs is 3.9 KiB; its launch
// took 6.3-8.4 us at 8 B-32 KB where the one-shot kernels take 2.5-5: BENCHMARKS.md of 2026-11-22,
// 7750d95).
//
// Interoperable with the exchange kernel by construction: the packets, their place (packet i of
// the pair's stream at 16 i bytes into this rank's source region of the receiver's LL scratch)
// and the pair's flag bookkeeping (both ways: nothing to acknowledge, as OX_MODE_LL; one way:
// acknowledged, as OX_MODE_LL_ACK) are exactly the exchange kernel's for a pair it moves as
// packets. The host takes this kernel only for pairs the exchange would also move as packets
// (algo::select_p2p_oneshot), so a peer whose own group runs the exchange kernel reads and
// writes the same packets.
//
// CollArgs: send / count = the send's buffer and bytes (0: no send), root = its peer;
// recv / chunk_elems = the receive's buffer and bytes (0: no receive), mode = its peer.
#include "common.cuh"
#include "copy.cuh"
#include "ll_flags.cuh"
#include "packet.cuh"
#include "done.cuh"
#include "pdl.cuh"

OX_DEV void ox_p2p_oneshot_body(const CollArgs& a) {
  ox_pdl_enter();
  OX_KERNEL_PROLOGUE(a.comm);
  const int sp = a.root, rp = (int)a.mode;
  const uint64_t sbytes = a.count, rbytes = a.chunk_elems;
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ uint8_t pair[OX_MAX_RANKS], role[OX_MAX_RANKS];
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    const int p = (int)threadIdx.x;
    const bool out = sbytes > 0 && p == sp, in = rbytes > 0 && p == rp;
    pair[p] = out || in;
    role[p] = out && in ? 0 : out ? 1 : in ? 2 : 0;  // ll_flags.cuh: 1 = only this rank sends, 2 = only p
  }
  // Geometry and the first word before the flags: the flag load's acquire empties L1, and loads
  // behind it would delay the first packet by an L2 round trip (as in allreduce_oneshot).
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  char* const out_base = sbytes > 0 ? reinterpret_cast<char*>(c.ll_scratch[sp]) : nullptr;
  char* const in_base = rbytes > 0 ? reinterpret_cast<char*>(c.ll_scratch[me]) : nullptr;
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t spkt = ox_ceil_div(sbytes, 8), rpkt = ox_ceil_div(rbytes, 8);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = g < spkt ? ox_load8(src, g * 8, sbytes) : 0;
  ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes pair[] and role[]
  ox_ll_oneway_mark(c, me, n, flags, role);
  // Sends first: they never block, so both sides post before either waits (as the exchange does).
  if (sbytes > 0) {
    char* base = ox_ll_at(out_base, half, region, flags[sp], me);
    for (uint64_t i = g; i < spkt; i += G) ox_ll16_write(base + i * 16, i == g ? first : ox_load8(src, i * 8, sbytes), flags[sp]);
  }
  if (rbytes > 0) {
    const char* base = ox_ll_at(in_base, half, region, flags[rp], rp);
    for (uint64_t i = g; i < rpkt; i += G) ox_store8(dst, i * 8, rbytes, ox_ll16_read(base + i * 16, flags[rp], ab));
  }
  ox_ll_flags_advance(c, me, n, flags, pair);
}

extern "C" __global__ void ox_p2p_oneshot(const __grid_constant__ CollArgs a) {
  ox_p2p_oneshot_body(a);
  ox_done_publish(a.done);
}
