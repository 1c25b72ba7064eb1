// The exchange kernel: moves bytes between this rank and any set of peers, in both directions,
// plus local copies. It serves every non-reducing operation: AllGather, Broadcast, AlltoAll,
// Gather, Scatter and grouped Send/Recv (the host turns each into transfer lists, see
// src/algo/exchange.rs). Per peer, the host picks one mode that both sides of the pair derive
// from the pair's own byte counts, so they always agree:
//   LL / LL_ACK - LL16 packets into the peer's LL scratch slot for this rank; LL_ACK pairs (data
//                 flows one way) are acknowledged by the receiver when it enters the launch, and
//                 the sender's next packet launch waits for that (ll_flags.cuh), so a sender can
//                 never run two launches ahead and overwrite packets not yet read;
//   PUT         - puts through the put scratch in rounds: in round k, block b moves bytes
//                 [(k*nb + b)*chunk, +chunk) of the pair's stream; one semaphore sync per round
//                 with that peer; rounds alternate between the two scratch areas, so a peer's
//                 round k+2 writes (after the round k+1 sync) never hit data still being read.
//                 A final sync keeps the next launch's round 0 away from this launch's last reads.
//                 A relay transfer (Broadcast) runs one round behind: the sending side forwards
//                 piece k-1 of what a third rank put into its scratch in round k-1, straight from
//                 that scratch, so a forwarded piece costs one NVLink write and no extra copy.
//                 A receiver whose destination is registered may offer it (kernels/colls/direct.cuh):
//                 a sender that takes the offer puts its pieces from round 1 on straight into the
//                 receiver's buffer, which then copies nothing out of scratch for them.
// Local copies (a rank to itself) ride along with the put rounds when there are any, so that
// local HBM traffic overlaps the NVLink traffic instead of preceding it.
// Every launch of this kernel on a communicator uses the same grid and block size on every rank
// (the host guarantees it), so block b on one side always pairs with block b on the other.
#include "common.cuh"
#include "ll_flags.cuh"
#include "memory_channel.cuh"
#include "put_scratch.cuh"
#include "direct.cuh"
#include "done.cuh"
#include "pdl.cuh"

// Block-cooperative share of the local copies for step `k` of `steps` (each copy is cut into
// steps * gridDim 16-byte aligned pieces; piece k*gridDim + b belongs to block b in step k).
OX_DEV void ox_local_copies_step(const ExchangeArgs& a, uint32_t k, uint32_t steps) {
  const uint64_t pieces = (uint64_t)steps * gridDim.x;
  const uint64_t piece_idx = (uint64_t)k * gridDim.x + blockIdx.x;
  for (uint32_t i = 0; i < a.ncopy; ++i) {
    const Xfer& x = a.copies[i];
    if (x.src == x.dst) continue;
    const uint64_t piece = ((ox_ceil_div(x.bytes, pieces) + 15) / 16) * 16;
    const uint64_t lo = piece_idx * piece;
    if (lo >= x.bytes) continue;
    const uint64_t len = ox_min(piece, x.bytes - lo);
    ox_copy(reinterpret_cast<char*>(x.dst) + lo, reinterpret_cast<const char*>(x.src) + lo, len, threadIdx.x, blockDim.x, false);
  }
}

OX_DEV void ox_exchange_body(const ExchangeArgs& a) {
  ox_pdl_enter();
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ uint8_t ll_peer[OX_MAX_RANKS];
  __shared__ uint8_t oneway[OX_MAX_RANKS];  // LL_ACK pairs: 1 = this rank sends, 2 = it receives
  __shared__ uint8_t put_peer[OX_MAX_RANKS];
  // Zero-copy streams (direct.cuh): pairs this rank sends data to, and which pairs run direct.
  __shared__ uint8_t out_active[OX_MAX_RANKS];
  __shared__ uint8_t direct_out[OX_MAX_RANKS], direct_in[OX_MAX_RANKS];
  __shared__ uint64_t direct_dst[OX_MAX_RANKS];  // peer's buffer at stream position 0, mapped here
  if ((int)threadIdx.x < OX_MAX_RANKS) {
    const uint8_t m = (int)threadIdx.x < n ? a.mode[threadIdx.x] : OX_MODE_NONE;
    ll_peer[threadIdx.x] = m == OX_MODE_LL || m == OX_MODE_LL_ACK;
    oneway[threadIdx.x] = 0;
    put_peer[threadIdx.x] = 0;
    out_active[threadIdx.x] = 0;
    direct_out[threadIdx.x] = 0;
    direct_in[threadIdx.x] = 0;
    direct_dst[threadIdx.x] = 0;
  }
  __syncthreads();
  // An LL_ACK pair moves data one way, so these writes never conflict; the others store equal
  // values. Only transfers with bytes count: a pair's zero-byte transfer against the data's
  // direction (a Send/Recv group may post one) would otherwise also mark the sender a receiver,
  // and a sender that sets no pending acknowledgement runs launches ahead of its peer and
  // overwrites packets still unread (graph replays back to back hung on 2 x H200 under load, the
  // conformance fuzzer's seed 148000, 2026-11-30).
  if (threadIdx.x < a.nsend && a.sends[threadIdx.x].bytes > 0 && a.mode[a.sends[threadIdx.x].peer] == OX_MODE_LL_ACK) oneway[a.sends[threadIdx.x].peer] = 1;
  if (threadIdx.x < a.nrecv && a.recvs[threadIdx.x].bytes > 0 && a.mode[a.recvs[threadIdx.x].peer] == OX_MODE_LL_ACK) oneway[a.recvs[threadIdx.x].peer] = 2;
  if (threadIdx.x < a.nsend && a.sends[threadIdx.x].bytes > 0) out_active[a.sends[threadIdx.x].peer] = 1;
  ox_ll_flags_load(c, flags, ab);  // includes a __syncthreads
  ox_ll_oneway_mark(c, me, n, flags, oneway);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  uint32_t max_rounds = 0;
  for (int p = 0; p < n; ++p)
    if (a.mode[p] == OX_MODE_PUT && a.rounds[p] > max_rounds) max_rounds = a.rounds[p];

  // 1. Local copies, unless the put rounds below carry them.
  if (max_rounds == 0) {
    for (uint32_t k = 0; k < a.ncopy; ++k) {
      const Xfer& x = a.copies[k];
      if (x.src != x.dst) ox_copy(reinterpret_cast<char*>(x.dst), reinterpret_cast<const char*>(x.src), x.bytes, g, G, false);
    }
  }

  // 2. Packet sends: never block, so every rank posts them before waiting on anyone.
  for (uint32_t k = 0; k < a.nsend; ++k) {
    const Xfer& x = a.sends[(k + blockIdx.x) % a.nsend];  // spread over peers, as the puts below
    if (!ll_peer[x.peer]) continue;
    const uint32_t f = flags[x.peer];
    char* base = ox_ll_region(c, x.peer, f, me) + x.off * 16;
    const uint64_t npkt = ox_ceil_div(x.bytes, 8);
    for (uint64_t i = g; i < npkt; i += G) ox_ll16_write(base + i * 16, ox_load8(reinterpret_cast<const char*>(x.src), i * 8, x.bytes), f);
  }

  // 3. Put rounds.
  if (max_rounds > 0) {
    const uint32_t b = blockIdx.x, nb = gridDim.x;
    const OxPutScratch ps(c, n);
    const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
    // Offers for this launch (or "none", so a sender never reads a stale one), published by the
    // round-0 sync below. The host offers only a pair's single, unrelayed receive.
    if (threadIdx.x < a.nrecv) {
      const Xfer& x = a.recvs[threadIdx.x];
      if (a.offer[x.peer] != 0) ox_reg_offer_post(c, x.peer, a.offer[x.peer], x.dst, x.off, x.bytes);
    }
    if ((int)threadIdx.x < n && (int)threadIdx.x != me && a.mode[threadIdx.x] == OX_MODE_PUT && a.rounds[threadIdx.x] >= 2 &&
        a.offer[threadIdx.x] == 0)
      ox_reg_offer_post(c, (int)threadIdx.x, 0, 0, 0, 0);
    for (uint32_t k = 0; k < max_rounds; ++k) {
      const uint64_t area = (k & 1u) * ps.area;
      // Block b starts at send b (mod nsend): at any moment the grid writes to every peer, not
      // all of it to the same one, so no receiver's links are oversubscribed while others idle.
      for (uint32_t i = 0; i < a.nsend; ++i) {
        const Xfer& x = a.sends[(i + b) % a.nsend];
        const int p = x.peer;
        if (a.mode[p] != OX_MODE_PUT || k >= a.rounds[p]) continue;
        if (x.relay && k == 0) continue;  // forwards run one round behind
        const uint32_t kk = x.relay ? k - 1 : k;  // the piece this round moves
        const uint64_t C = a.chunk[p];
        const uint64_t o = ((uint64_t)kk * nb + b) * C;
        const uint64_t lo = o > x.off ? o : x.off;
        const uint64_t hi = ox_min(o + C, x.off + x.bytes);
        if (lo >= hi) continue;
        // A taken offer (from round 1 on): the piece goes straight to its place in the receiver's
        // buffer, with the rounds and their syncs kept as they are: measured on H200 x4, one
        // burst of every remaining piece without the syncs lost 2-11% from eight rounds on.
        char* dst = direct_out[p] ? reinterpret_cast<char*>(direct_dst[p] + lo)
                                  : reinterpret_cast<char*>(c.rs_scratch[p]) + area + ps.at(b, me) + (lo - o);
        // A relay's piece kk arrived from peer relay-1 in round kk, into the same block's slot of
        // area kk&1; that sender overwrites the area only in round kk+2, after this round's sync.
        const char* src = x.relay ? my_rs + (kk & 1u) * ps.area + ps.at(b, x.relay - 1) + (lo - o)
                                  : reinterpret_cast<const char*>(x.src) + (lo - x.off);
        ox_copy(dst, src, hi - lo, threadIdx.x, blockDim.x, x.relay != 0);
      }
      // This block's share of the local copies, while the peers' puts are in flight.
      ox_local_copies_step(a, k, max_rounds);
      if ((int)threadIdx.x < n) put_peer[threadIdx.x] = a.mode[threadIdx.x] == OX_MODE_PUT && k < a.rounds[threadIdx.x];
      ox_block_sync_masked(c, put_peer, ab);
      if (k == 0 && (int)threadIdx.x < n && (int)threadIdx.x != me) {
        // Sender side of the offer: this thread waited for peer p above, so its acquire covers
        // the offer p posted before its round-0 signal. Every send to p must be unrelayed and lie
        // inside the offered receive, or the stream goes through scratch as usual.
        const int p = (int)threadIdx.x;
        if (a.mode[p] == OX_MODE_PUT && a.rounds[p] >= 2 && out_active[p]) {
          const RegOffer o = ox_reg_offer_read(c, p);
          if (o.gen != 0) {
            uint64_t dst = ox_reg_translate(c, p, o);
            for (uint32_t i = 0; dst != 0 && i < a.nsend; ++i) {
              const Xfer& x = a.sends[i];
              if (x.peer == p && (x.relay || x.off < o.off || x.off + x.bytes > o.off + o.bytes)) dst = 0;
            }
            direct_out[p] = dst != 0;
            direct_dst[p] = dst - o.off;  // wraps; only used with positions >= o.off
            ox_reg_answer(c, p, dst != 0);  // published by the round-1 signal
          }
        }
      }
      if (k == 1 && (int)threadIdx.x < n && a.offer[threadIdx.x] != 0) direct_in[threadIdx.x] = ox_reg_taken(c, (int)threadIdx.x);
      if (k <= 1) __syncthreads();
      for (uint32_t i = 0; i < a.nrecv; ++i) {
        const Xfer& x = a.recvs[(i + b) % a.nrecv];
        const int p = x.peer;
        if (a.mode[p] != OX_MODE_PUT || k >= a.rounds[p]) continue;
        if (direct_in[p]) continue;  // from round 1 the sender writes straight into x.dst
        if (x.relay && k == 0) continue;
        const uint32_t kk = x.relay ? k - 1 : k;
        const uint64_t C = a.chunk[p];
        const uint64_t o = ((uint64_t)kk * nb + b) * C;
        const uint64_t lo = o > x.off ? o : x.off;
        const uint64_t hi = ox_min(o + C, x.off + x.bytes);
        if (lo >= hi) continue;
        const char* from = my_rs + area + ps.at(b, p) + (lo - o);
        ox_copy(reinterpret_cast<char*>(x.dst) + (lo - x.off), from, hi - lo, threadIdx.x, blockDim.x, true);
      }
    }
    if ((int)threadIdx.x < n) put_peer[threadIdx.x] = a.mode[threadIdx.x] == OX_MODE_PUT && a.rounds[threadIdx.x] > 0;
    ox_block_sync_masked(c, put_peer, ab);
  }

  // 4. Packet receives, in the same (thread -> packet) mapping the sender used.
  for (uint32_t k = 0; k < a.nrecv; ++k) {
    const Xfer& x = a.recvs[k];
    if (!ll_peer[x.peer]) continue;
    const uint32_t f = flags[x.peer];
    const char* base = ox_ll_region(c, me, f, x.peer) + x.off * 16;
    const uint64_t npkt = ox_ceil_div(x.bytes, 8);
    for (uint64_t i = g; i < npkt; i += G) ox_store8(reinterpret_cast<char*>(x.dst), i * 8, x.bytes, ox_ll16_read(base + i * 16, f, ab));
  }
  ox_ll_flags_advance(c, me, n, flags, ll_peer);
}

extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) ox_exchange(const __grid_constant__ ExchangeArgs a) {
  ox_exchange_body(a);
  ox_done_publish(a.done);
}
