// AllReduce kernels. Five algorithms, chosen on the host by algo::allreduce:
//   oneshot  - all-pairs LL16: every rank writes its whole input as packets into every peer's
//              scratch, then reduces all inputs locally. One hop; for small messages.
//   twophase - LL16 reduce-scatter into the owner's scratch, then LL16 all-gather of the reduced
//              chunks. Two hops, each rank moves 2(n-1)/n of the data; for medium messages.
//   oneshot128, twophase128 - the same two as LL128 lines (ap128.cuh): 120 payload bytes per 128
//              on the links instead of 8 per 16, for a warp's work per line of 120 bytes.
//   rsag     - reduce-scatter + all-gather with MemoryChannel puts and semaphores, pipelined in
//              rounds per block; for large messages.
// Every algorithm reduces in rank order 0..n-1, so all ranks get bit-identical results, and
// touches each element's input before writing its output from the same thread, so in-place
// (send == recv) is safe.
#include "common.cuh"
#include "ap128.cuh"
#include "ll_flags.cuh"
#include "memory_channel.cuh"
#include "reduce.cuh"
#include "rsag.cuh"
#include "instantiate.cuh"

// ---- oneshot -------------------------------------------------------------------------------
// Packet i of a source at 16 i into its LL region (ll_flags.cuh), or into its ring region.
//
// For a few packets the launch is latency: what precedes the first packet write sits on the
// critical path. So everything the writes need but the flags (the scratch bases, the region
// geometry, this thread's first input packet) is loaded before ox_ll_flags_load, overlapping the
// flag loads, and kept in registers and shared memory: every volatile packet access clobbers
// memory, which would make the compiler reload DevComm fields and redo the region division.
//
// The ring form (OX_ONESHOT_RING, messages up to OX_RING_PAYLOAD_BYTES) places the PDL wait and
// trigger itself, so that back-to-back one-shot launches overlap (kernels/prims/pdl.cuh). Launches
// behind a non-early ring launch (the head) that the host marks early form a chain:
// - The head waits first, loads its flags, and its block's last warp (the advancer, whose
//   packets come after the others') stores the next flags into the flag table and into the base table, and position
//   0 into the chain word, fences them (GPU scope) and alone triggers (ll_flags.cuh,
//   ox_ring_head_advance).
// - Early (OX_ONESHOT_EARLY) at chain position k, a launch takes its flags from the base table
//   (base + k - 1) and does everything up to its last packet write before its PDL wait: input,
//   packets. It reads neither the flag table nor anything else a launch in flight writes but its
//   protocol's words, so it advances nothing before it triggers: after its wait it stores k into
//   the chain word and, once its reads are done, the next flags into the flag table (for whatever
//   waits first next). Where the table was loaded, advanced and fenced before the packets
//   (the build before 4471bea), an 8-byte call under graphs took 2.0 us at 2 ranks; from the base
//   table 1.47 (BENCHMARKS.md of 2026-11-26, 733ad23).
// - It triggers after its wait, or (OX_ONESHOT_ENTRY, small messages) as soon as the chain word
//   shows launch k - 1 past its own wait: then the next launch's start overlaps this one's wait.
//   Its output is written after the wait, as always. The host marks a launch early only where the
//   previous kernel in the stream is this communicator's ring one-shot (a captured graph's node, so
//   nothing can come between) and its input overlaps no output a launch still in flight may write
//   (algo::pdl::early).
// - Chained (OX_ONESHOT_CHAIN, with EARLY): the input is exactly the previous launch's output (an
//   in-place call on the same buffer, or y = AllReduce(x) then AllReduce(y)), so it cannot be
//   read before that launch writes it; but waiting for that launch's completion (the PDL wait)
//   put 2 us on every such call (64 KB in place under graphs: 4.93 us against 2.76 out of place,
//   4 ranks; BENCHMARKS.md of 2026-11-27, 25a05ee). The launch it follows publishes per block,
//   after its output stores, the flag it used (ox_ring_out_publish, OX_ONESHOT_PUBLISH: the host
//   sets it in that launch's captured node once it knows a chained launch follows; publishing
//   everywhere cost 0.16-0.25 us a call at 8 B, its fence delaying the exit). A chained block waits
//   for its twin's word (same grid and packet map: the host checked), then reads its input and
//   sends as an early launch does. Its packets leave later than an early launch's would, so the
//   slot argument below holds unchanged; its output is still written after its PDL wait.
// - Pre-sent (OX_ONESHOT_PRESEND on the launch before, OX_ONESHOT_PRESENT on the chained one,
//   instead of PUBLISH and the wait for it): where the chained launch's pre() is the identity, the
//   launch before it writes its output to every peer as the chained launch's packets (the pair's
//   next flag) as it stores it. The chained launch sends nothing, reads its input after its PDL
//   wait and only receives: 64 KB in place 1.8 us against 2.6 at 2 ranks (BENCHMARKS.md of
//   2026-11-27, 9140374). Reading the received packets before that wait instead made every such
//   call slower (0.5-2 us).
// Why 8 ring slots. Let L, with flag f (per pair), write its packets. (a) Then this rank's launch
// of flag f-3 is complete: if L waited first, f-1 is; if early, L began once f-1 triggered, and
// f-1 triggered after its own wait (f-2 complete) or, at entry, once f-2 had passed its wait (f-3
// complete). (b) A complete launch f-3 read the peer's f-3 packets, or was one-way towards the
// peer, and then the head f-2 waited for the peer's acknowledgement before it triggered. Either
// way the peer's launch of f-3 had reached its packets (or its acknowledgement), so by (a) on the
// peer, the peer's f-6 is complete: slot f mod 8 last held the packets of f-8, which the peer has
// read. (scripts/model/ring_chain_model.py, in git before 7bcb34d, checked the chain at random: 4 slots fail, 5 do not.)
// The LL halves keep their rule (ll_flags.cuh): a launch that waits first behind an early one has
// a ring launch two flags back, which never used the halves; the early one's predecessors (f-2,
// f-3) are ring launches too.
// `Probe` marked the phases for scripts/lab/oneshot_lab.cu (in git before 7bcb34d); the library's kernels use NoProbe.
struct NoProbe {
  OX_DEV void mark(int) const {}
};

// `Chain`: the variant that may wait for the previous launch's output and publish its own, or
// send and receive pre-sent packets (OX_ONESHOT_CHAIN, _PUBLISH, _PRESEND, _PRESENT), a kernel of
// its own so that the others keep their code:
// the same checks compiled into every launch slowed the 64 KB call by 0.15 us (BENCHMARKS.md of
// 2026-11-27, 25a05ee).
template <typename T, typename Op, typename Probe, bool Chain = false>
OX_DEV void allreduce_oneshot_with(const CollArgs& a, const DevComm& c, const Probe& probe) {
  probe.mark(0);
  const bool ring = (a.mode & OX_ONESHOT_RING) != 0;
  const bool early = ring && (a.mode & OX_ONESHOT_EARLY) != 0;
  const bool entry = early && (a.mode & OX_ONESHOT_ENTRY) != 0;
  const uint32_t pos = a.mode >> OX_ONESHOT_POS_SHIFT;  // early: 1, 2, ... behind the head
  const bool chain_in = Chain && early && (a.mode & OX_ONESHOT_CHAIN) != 0;  // input = the previous output
  // Pre-sent: the launch before this one already wrote this launch's packets (PRESEND there).
  const bool present = chain_in && (a.mode & OX_ONESHOT_PRESENT) != 0;
  const bool presend = Chain && ring && (a.mode & OX_ONESHOT_PRESEND) != 0;
  if (!early) ox_pdl_wait();
  if (!ring) ox_pdl_trigger();
  // Ring: the block's last warp does the chain's bookkeeping (the head's advance, an entry
  // launch's chain-word wait) and alone triggers; the other warps go straight on to their packets.
  const bool advancer = ring && threadIdx.x >= blockDim.x - 32;  // blockDim is a multiple of 32
  const uint32_t* chain = ox_ring_chain_ptr(c);
  uint32_t chained = 0;
  if (entry && advancer) chained = ox_ll_table_ld(chain);  // issued first: the trigger waits on it
  const int me = c.rank, n = c.nranks;
  AbortState ab(c.abort_flag);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  if ((int)threadIdx.x < n) base[threadIdx.x] = reinterpret_cast<char*>(c.ll_scratch[threadIdx.x]);
  const uint64_t half = c.ll_half_bytes, region = ox_ll_region_bytes(c);
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  // Packet index of this thread: every block's last warp (the ring form's advancer) comes after
  // all other threads, so it takes packets only where the others have one each. Packets it wrote
  // before its fence would make the fence wait for the peer's acknowledgement; leaving it none at
  // all cost a second round of reads at 16-64 KB (1.92 against 1.76 us at 16 KB; BENCHMARKS.md of
  // 2026-11-26, 733ad23).
  const uint32_t lead = blockDim.x - 32;
  const uint64_t g = threadIdx.x < lead ? (uint64_t)blockIdx.x * lead + threadIdx.x
                                        : (uint64_t)gridDim.x * lead + blockIdx.x * 32ull + (threadIdx.x - lead);
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const Op op(a, n);
  // pre() is applied by the rank that owns the input (PreMulSum scalars differ per rank), so
  // packets carry pre-scaled values and the reduction below only combines. A chained launch
  // loads its input only once the previous launch has written it (below).
  uint64_t first = !chain_in && g < npkt ? ox_pre<T>(op, ox_load8(src, g * 8, nbytes)) : 0;
  if (early) {
    // The head's base table, written before its trigger (ll_flags.cuh); every slot exists.
    if (threadIdx.x < OX_MAX_RANKS) flags[threadIdx.x] = ox_ll_flag_add(ox_ll_table_ld(ox_ring_base_ptr(c, blockIdx.x, threadIdx.x)), pos - 1);
    __syncthreads();  // also publishes base[]
  } else {
    ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes base[]
  }
  if (advancer) {
    if (!early) {
      ox_ring_head_advance(c, me, n, flags);
      ox_pdl_trigger();
    } else if (entry && (threadIdx.x & 31) == 0) {
      // The next launch may begin once the launch before this one has passed its wait (so the
      // one before that is complete): three launches in flight at most, which the 8 ring slots
      // and the host's input check (algo::pdl::early) are sized for.
      while (chained < pos - 1 && !ab.poll()) chained = ox_ll_table_ld(chain);
      ox_pdl_trigger();
    }
  }
  // The flag this launch uses with the next rank: what its output word carries (ll_flags.cuh).
  const int nextp = me + 1 < n ? me + 1 : 0;
  if (chain_in && !present) {
    // Thread 0, not the advancer: an entry launch's trigger above does not wait for this (waiting
    // before it, and before the flags, made the chained 64 KB call 0.2 us slower, BENCHMARKS.md of
    // 2026-11-27, 25a05ee).
    if (threadIdx.x == 0) ox_ring_out_wait(c, flags[nextp], ab);
    __syncthreads();
    if (g < npkt) first = ox_pre<T>(op, ox_load8(src, g * 8, nbytes));
  }
  probe.mark(1);

  for (uint64_t i = present ? npkt : g; i < npkt; i += G) {
    const uint64_t v = i == g ? first : ox_pre<T>(op, ox_load8(src, i * 8, nbytes));
    for (int k = 1; k < n; ++k) {
      const int p = me + k < n ? me + k : me + k - n;  // staggered so ranks start on different peers
      char* at = ring ? ox_ring_at(base[p], half, n, flags[p], me) : ox_ll_at(base[p], half, region, flags[p], me);
      ox_ll16_write(at + i * 16, v, flags[p]);
    }
  }
  probe.mark(2);
  if (early) {
    ox_pdl_wait();  // the previous kernel is complete: its output, and our output buffer, are ours
    probe.mark(5);
    // Relaxed: it tells the next launches only that this wait has returned, a fact of time.
    if (blockIdx.x == 0 && threadIdx.x == 0) ox_st_relaxed_gpu_u32(ox_ring_chain_ptr(c), pos);
    if (!entry) ox_pdl_trigger();
    // Pre-sent: the input is the previous launch's output, complete now (no out word to wait for).
    if (present && g < npkt) first = ox_pre<T>(op, ox_load8(src, g * 8, nbytes));
  }
  for (uint64_t i = g; i < npkt; i += G) {
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      uint64_t x;
      if (r == me) {
        x = i == g ? first : ox_pre<T>(op, ox_load8(src, i * 8, nbytes));
      } else {
        const char* at = ring ? ox_ring_at(base[me], half, n, flags[r], r) : ox_ll_at(base[me], half, region, flags[r], r);
        x = ox_ll16_read(at + i * 16, flags[r], ab);
      }
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    const uint64_t out = ox_post<T>(op, acc);
    if (presend) {
      // The next launch's packet i: its input is this output and its pre() the identity (the
      // host checked), with the pair's next flag, into the slot of that flag. The slot argument
      // above holds with room to spare: this thread has read the peer's packet i of flag f,
      // written by the peer's launch f (or pre-sent by its f-1, after its wait), so the peer's
      // launch f-3 at least is complete, and the slot of f+1 last held f-7.
      for (int k = 1; k < n; ++k) {
        const int p = me + k < n ? me + k : me + k - n;
        const uint32_t nf = ox_ll_next_flag(flags[p]);
        ox_ll16_write(ox_ring_at(base[p], half, n, nf, me) + i * 16, out, nf);
      }
    }
    ox_store8(dst, i * 8, nbytes, out);  // after the remote writes, whose latency is the longer
  }
  probe.mark(3);
  // Block by block, for the chained launch behind it (the host sets PUBLISH only then: the
  // fence would hold up every launch's exit, and so the next launch's wait).
  if (Chain && ring && (a.mode & OX_ONESHOT_PUBLISH) != 0) ox_ring_out_publish(c, flags[nextp]);
  if (early && advancer) ox_ring_table_advance(c, me, n, flags);
  if (!ring) ox_ll_flags_advance_all(c, me, n, flags);
  probe.mark(4);
}

template <typename T, typename Op>
OX_DEV void allreduce_oneshot(const CollArgs& a) {
  allreduce_oneshot_with<T, Op>(a, ox_comm(a), NoProbe());
}

template <typename T, typename Op>
OX_DEV void allreduce_oneshot_chain(const CollArgs& a) {
  allreduce_oneshot_with<T, Op, NoProbe, true>(a, ox_comm(a), NoProbe());
}

// ---- twophase ------------------------------------------------------------------------------
// Each source's LL region (ll_flags.cuh) holds its RS packets in its first half and its AG
// packets in its second half. Chunk p = packets [p*cp, min((p+1)*cp, npkt)) is reduced by rank p.
template <typename T, typename Op>
OX_DEV void allreduce_twophase(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  ox_ll_flags_load(c, flags, ab);
  const uint64_t area = (ox_ll_region_bytes(c) / 2) & ~15ull;
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const uint64_t cp = ox_ceil_div(npkt, (uint64_t)n);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t others = (uint64_t)(n - 1) * cp;
  const Op op(a, n);

  // pre() is applied by the input's owner, before its packets leave (see oneshot).
  // 1. Reduce-scatter: packets of every other rank's chunk go to that rank. Phase 3 uses the same
  //    (thread -> packet) mapping, so in place a packet's input is read before its output is written.
  for (uint64_t t = g; t < others; t += G) {
    const int q = (int)(t / cp);
    const uint64_t k = t - (uint64_t)q * cp;
    const int p = q < me ? q : q + 1;
    const uint64_t i = (uint64_t)p * cp + k;
    if (i >= npkt) continue;
    ox_ll16_write(ox_ll_region(c, p, flags[p], me) + k * 16,
                  ox_pre<T>(op, ox_load8(src, i * 8, nbytes)), flags[p]);
  }
  // 2. Reduce this rank's chunk; write it locally and as packets to every peer's AG area.
  for (uint64_t k = g; k < cp; k += G) {
    const uint64_t i = (uint64_t)me * cp + k;
    if (i >= npkt) break;
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t x = r == me ? ox_pre<T>(op, ox_load8(src, i * 8, nbytes))
                                 : ox_ll16_read(ox_ll_region(c, me, flags[r], r) + k * 16, flags[r], ab);
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    const uint64_t res = ox_post<T>(op, acc);
    ox_store8(dst, i * 8, nbytes, res);
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      ox_ll16_write(ox_ll_region(c, p, flags[p], me) + area + k * 16, res, flags[p]);
    }
  }
  // 3. All-gather: every other chunk arrives from its owner.
  for (uint64_t t = g; t < others; t += G) {
    const int q = (int)(t / cp);
    const uint64_t k = t - (uint64_t)q * cp;
    const int p = q < me ? q : q + 1;
    const uint64_t i = (uint64_t)p * cp + k;
    if (i >= npkt) continue;
    ox_store8(dst, i * 8, nbytes, ox_ll16_read(ox_ll_region(c, me, flags[p], p) + area + k * 16, flags[p], ab));
  }
  ox_ll_flags_advance_all(c, me, n, flags);
}

// ---- oneshot128 and twophase128 ------------------------------------------------------------
// Lines as in ll128_chain.cuh: a warp works on 4 lines at a time, lanes 8i..8i+7 on line
// base + i, lane j of a line on the message's 8-byte words 15 l + 2j and (j < 7) 15 l + 2j + 1.
// Every loop over line groups is warp-uniform, and the 8 lanes of a line store it in one
// instruction after a __syncwarp (ll128.cuh).

// Both kernels' start: every rank's area (ll_scratch + ap128_off) and this launch's pair flags,
// into the block's shared arrays.
OX_DEV void ox_ap128_begin(const DevComm& c, char** base, uint32_t* flags, AbortState& ab) {
  if ((int)threadIdx.x < c.nranks) base[threadIdx.x] = reinterpret_cast<char*>(c.ll_scratch[threadIdx.x] + c.ap128_off);
  ox_ll_flags_load(c, flags, ab);  // its __syncthreads also publishes base[]
}

// This lane's one or two input words at word index w, pre() applied (see oneshot); 0 past the end.
template <typename T, typename Op>
OX_DEV void ox_ap128_in(const Op& op, const char* src, uint64_t nbytes, uint64_t w, bool two, uint64_t& x0, uint64_t& x1) {
  x0 = ox_pre<T>(op, ox_load8(src, w * 8, nbytes));
  x1 = two ? ox_pre<T>(op, ox_load8(src, (w + 1) * 8, nbytes)) : 0;
}

// Warp-collective. Reduces, in rank order 0..n-1, this lane's words of line `l` of every source's
// region of this rank's half (`mine` = ll_scratch[me] + ap128_off; at offset `off` in each region)
// with this rank's own words m0/m1, four ranks' lines in flight at a time.
template <typename T, typename Op>
OX_DEV void ox_ap128_reduce_line(const Op& op, char* mine, uint64_t half, uint64_t region, const uint32_t* flags, int me, int n,
                                 uint64_t off, uint32_t lane, bool active, uint64_t m0, uint64_t m1, uint64_t& acc0,
                                 uint64_t& acc1, AbortState& ab) {
  constexpr int K = 4;
  for (int r0 = 0; r0 < n; r0 += K) {
    const char* at[K];
    uint64_t fl[K], w0[K], w1[K];
    uint32_t use = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int r = r0 + k;
      const bool peer = r < n && r != me;
      const uint32_t f = peer ? flags[r] : 0;
      at[k] = ox_ap128_at(mine, half, region, f, peer ? r : 0) + off;
      fl[k] = ox_ap128_flag(f);
      w0[k] = w1[k] = 0;
      use |= (uint32_t)peer << k;
    }
    ox_ll128_load_many<K>(at, fl, use, lane, active, w0, w1, ab);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int r = r0 + k;
      if (r >= n) break;
      const uint64_t x0 = r == me ? m0 : w0[k], x1 = r == me ? m1 : w1[k];
      acc0 = r == 0 ? x0 : ox_combine<T>(op, acc0, x0);
      acc1 = r == 0 ? x1 : ox_combine<T>(op, acc1, x1);
    }
  }
}

// One-shot: every rank writes its whole input as lines into its region of every peer's half,
// then reduces line by line. Capacity: the message's lines fit a region (algo::allreduce).
template <typename T, typename Op>
OX_DEV void allreduce_oneshot128(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  const uint64_t half = c.ap128_half_bytes, region = ox_ap128_region_bytes(half, n);
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t lines = ox_ceil_div(ox_ceil_div(nbytes, 8), (uint64_t)kLl128LineWords);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const Op op(a, n);
  ox_ap128_begin(c, base, flags, ab);
  const uint32_t lane = threadIdx.x % 32, j = lane & 7;
  const bool two = j < 7;
  const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint64_t nwarps = (uint64_t)gridDim.x * blockDim.x / 32;

  for (uint64_t g = 4 * warp; g < lines; g += 4 * nwarps) {
    const uint64_t l = g + lane / 8;
    const bool active = l < lines;
    uint64_t x0 = 0, x1 = 0;
    if (active) ox_ap128_in<T>(op, src, nbytes, l * kLl128LineWords + 2 * j, two, x0, x1);
    __syncwarp();
    for (int k = 1; k < n && active; ++k) {
      const int p = me + k < n ? me + k : me + k - n;  // staggered so ranks start on different peers
      ox_ll128_store(ox_ap128_at(base[p], half, region, flags[p], me) + l * kLl128LineBytes, lane, x0, x1, ox_ap128_flag(flags[p]));
    }
  }
  // Same lane-to-word mapping as above: in place, a word is read before this lane writes it.
  for (uint64_t g = 4 * warp; g < lines; g += 4 * nwarps) {
    const uint64_t l = g + lane / 8;
    const bool active = l < lines;
    const uint64_t w = l * kLl128LineWords + 2 * j;
    uint64_t m0 = 0, m1 = 0, acc0 = 0, acc1 = 0;
    if (active) ox_ap128_in<T>(op, src, nbytes, w, two, m0, m1);
    ox_ap128_reduce_line<T>(op, base[me], half, region, flags, me, n, l * kLl128LineBytes, lane, active, m0, m1, acc0, acc1, ab);
    if (active) ox_store8(dst, w * 8, nbytes, ox_post<T>(op, acc0));
    if (active && two) ox_store8(dst, (w + 1) * 8, nbytes, ox_post<T>(op, acc1));
  }
  ox_ll_flags_advance_all(c, me, n, flags);
}

// Two-phase: chunk p = words [p cw, min((p+1) cw, words)) is reduced by rank p. Each source's
// region holds its reduce-scatter lines at 0 and its all-gather lines at `area` (half the region).
// Phases 1 and 3 share one (lane -> word) mapping and phase 2 reads its input before writing it,
// so in place every word is read before it is written, by the same lane.
template <typename T, typename Op>
OX_DEV void allreduce_twophase128(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  __shared__ uint32_t flags[OX_MAX_RANKS];
  __shared__ char* base[OX_MAX_RANKS];
  const uint64_t half = c.ap128_half_bytes, region = ox_ap128_region_bytes(half, n);
  const uint64_t area = (region / 2) & ~127ull;
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t words = ox_ceil_div(nbytes, 8);
  const uint64_t cw = ox_ceil_div(words, (uint64_t)n);               // words per chunk
  const uint32_t cl = (uint32_t)ox_ceil_div(cw, (uint64_t)kLl128LineWords);  // lines per chunk
  const uint32_t others = (uint32_t)(n - 1) * cl;
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const Op op(a, n);
  ox_ap128_begin(c, base, flags, ab);
  const uint32_t lane = threadIdx.x % 32, j = lane & 7;
  const bool two = j < 7;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t nwarps = gridDim.x * blockDim.x / 32;

  // 1. Reduce-scatter: line l of every other rank's chunk to that rank.
  for (uint32_t g = 4 * warp; g < others; g += 4 * nwarps) {
    const uint32_t t = g + lane / 8;
    const bool active = t < others;
    const uint32_t q = t / cl, l = t - q * cl;
    const int p = (int)q < me ? (int)q : (int)q + 1;
    uint64_t x0 = 0, x1 = 0;
    if (active) ox_ap128_in<T>(op, src, nbytes, (uint64_t)p * cw + (uint64_t)l * kLl128LineWords + 2 * j, two, x0, x1);
    __syncwarp();
    if (active) ox_ll128_store(ox_ap128_at(base[p], half, region, flags[p], me) + (uint64_t)l * kLl128LineBytes, lane, x0, x1, ox_ap128_flag(flags[p]));
  }
  // 2. Reduce this rank's chunk; keep it, and send it as lines to every peer's all-gather area.
  const uint64_t my_lo = (uint64_t)me * cw, my_hi = ox_min(my_lo + cw, words);
  for (uint32_t g = 4 * warp; g < cl; g += 4 * nwarps) {
    const uint32_t l = g + lane / 8;
    const uint64_t w = my_lo + (uint64_t)l * kLl128LineWords + 2 * j;
    const bool active = l < cl;
    uint64_t m0 = 0, m1 = 0, acc0 = 0, acc1 = 0;
    if (active) ox_ap128_in<T>(op, src, nbytes, w, two, m0, m1);
    ox_ap128_reduce_line<T>(op, base[me], half, region, flags, me, n, (uint64_t)l * kLl128LineBytes, lane, active, m0, m1, acc0, acc1, ab);
    acc0 = ox_post<T>(op, acc0);
    acc1 = ox_post<T>(op, acc1);
    __syncwarp();
    for (int k = 1; k < n && active; ++k) {
      const int p = me + k < n ? me + k : me + k - n;
      ox_ll128_store(ox_ap128_at(base[p], half, region, flags[p], me) + area + (uint64_t)l * kLl128LineBytes, lane, acc0, acc1,
                     ox_ap128_flag(flags[p]));
    }
    if (active && w < my_hi) ox_store8(dst, w * 8, nbytes, acc0);
    if (active && two && w + 1 < my_hi) ox_store8(dst, (w + 1) * 8, nbytes, acc1);
  }
  // 3. All-gather: line l of every other chunk from its owner.
  for (uint32_t g = 4 * warp; g < others; g += 4 * nwarps) {
    const bool active = g + lane / 8 < others;
    const uint32_t t = active ? g + lane / 8 : 0;  // inactive lanes still load (nothing): keep p a rank
    const uint32_t q = t / cl, l = t - q * cl;
    const int p = (int)q < me ? (int)q : (int)q + 1;
    const uint32_t f = flags[p];
    uint64_t d0 = 0, d1 = 0;
    ox_ll128_load(ox_ap128_at(base[me], half, region, f, p) + area + (uint64_t)l * kLl128LineBytes, lane, active, ox_ap128_flag(f), d0, d1, ab);
    if (!active) continue;  // nothing warp-collective follows in this iteration
    const uint64_t w = (uint64_t)p * cw + (uint64_t)l * kLl128LineWords + 2 * j;
    const uint64_t hi = ox_min((uint64_t)(p + 1) * cw, words);
    if (w < hi) ox_store8(dst, w * 8, nbytes, d0);
    if (two && w + 1 < hi) ox_store8(dst, (w + 1) * 8, nbytes, d1);
  }
  ox_ll_flags_advance_all(c, me, n, flags);
}

// ---- rsag ----------------------------------------------------------------------------------
// Geometry, the slice reduction and the round loop live in rsag.cuh (shared with Reduce).
template <typename T, typename Op>
OX_DEV void allreduce_rsag(const CollArgs& a) {
  rsag_body<T, Op, false>(a);
}

// ---- entry points --------------------------------------------------------------------------
OX_TYPED_KERNELS_ENTRY(ox_allreduce_oneshot, allreduce_oneshot, (void)0)  // its own PDL entry
OX_TYPED_KERNELS_ENTRY(ox_allreduce_oneshot_chain, allreduce_oneshot_chain, (void)0)
OX_TYPED_KERNELS(ox_allreduce_twophase, allreduce_twophase)
OX_TYPED_KERNELS(ox_allreduce_rsag, allreduce_rsag)

OX_TYPED_KERNELS(ox_allreduce_oneshot128, allreduce_oneshot128)
OX_TYPED_KERNELS(ox_allreduce_twophase128, allreduce_twophase128)
