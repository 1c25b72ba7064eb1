// The put-based reduce-scatter + all-gather round loop, shared by AllReduce and Reduce.
//
// Rank j owns elements [j*per, min((j+1)*per, count)), per rounded up to 16 bytes. In round k,
// block b handles offset o = (k*nb + b)*S of every owned range. Each rank's put scratch holds an
// RS area then an AG area, each with slot[(b, src)] of rs_slot_bytes.
//
// Per round: put my input slices (pre-scaled by my op, see oneshot) to their owners' RS slots; sync; reduce my slice from my input
// and the RS slots, writing it to my output and to every peer's AG slot; sync; copy the AG slots
// into my output. Slot reuse needs no extra sync: a peer writes my RS slot for round k+1 only after
// my AG data of round k reached it (so I had consumed round k), and writes my AG slot for round
// k+1 only after my round-k+1 RS signal (sent after I copied out round k).
//
#pragma once
#include "memory_channel.cuh"
#include "put_scratch.cuh"
#include "reduce.cuh"

template <typename T>
struct RsagGeom {
  uint64_t per;  // elements per owned range
  uint64_t count;
  OX_DEV uint64_t start(int j) const { return ox_min((uint64_t)j * per, count); }
  OX_DEV uint64_t len(int j) const { return ox_min((uint64_t)(j + 1) * per, count) - start(j); }
  // Elements of rank j's range in the slice at offset o of length S.
  OX_DEV uint64_t slice(int j, uint64_t o, uint64_t S) const {
    const uint64_t l = len(j);
    return o >= l ? 0 : ox_min(S, l - o);
  }
};

// Where reduce_slice also writes its results: nowhere, every peer's AG slot, or one rank's.
constexpr int kAgNone = -2;
constexpr int kAgAll = -1;

// Reduces `nelem` elements of this rank's slice: its own input (pre() applied here) and the
// pre-scaled slices peers put into `slots` (slot r of this block at slots + r*slot), in rank
// order. Writes the result to `out` (if not null) and to the AG slot of every peer (`ag` ==
// kAgAll) or of rank `ag` (>= 0), or to no peer (kAgNone).
template <typename T, typename Op>
OX_DEV void reduce_slice(const DevComm& c, const Op& op, const T* in, T* out, const char* slots, uint64_t ag_off, uint32_t b,
                         uint64_t nelem, int ag) {
  const int me = c.rank, n = c.nranks;
  // The put scratch's slot arithmetic written out rather than through OxPutScratch
  // (put_scratch.cuh): that form changed the sm_80 code of this loop.
  const uint64_t slot = c.rs_slot_bytes;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  // 16-byte words only where every address involved allows them: the input, the output and the
  // slots (every rank's put scratch has this rank's layout, so its RS slots stand for the AG ones).
  const uintptr_t mis = reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(slots) | slot | ag_off;
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    const uint64_t words = nelem * sizeof(T) / 16;
    for (uint64_t w = tid; w < words; w += nt) {
      uint4 acc;
      for (int r = 0; r < n; ++r) {
        const uint4 x = r == me ? ox_pre<T>(op, reinterpret_cast<const uint4*>(in)[w]) : ox_ldcg16(slots + (uint64_t)r * slot + w * 16);
        acc = r == 0 ? x : ox_combine<T>(op, acc, x);
      }
      acc = ox_post<T>(op, acc);
      if (out) reinterpret_cast<uint4*>(out)[w] = acc;
      for (int j = 1; j < n; ++j) {
        const int p = me + j < n ? me + j : me + j - n;
        if (ag == kAgNone || (ag >= 0 && p != ag)) continue;
        char* dst = reinterpret_cast<char*>(c.rs_scratch[p]) + ag_off + ((uint64_t)b * n + me) * slot;
        reinterpret_cast<uint4*>(dst)[w] = acc;
      }
    }
    done = words * 16 / sizeof(T);
  }
  for (uint64_t e = done + tid; e < nelem; e += nt) {
    T acc = T();
    for (int r = 0; r < n; ++r) {
      const T x = r == me ? op.pre(in[e]) : reinterpret_cast<const T*>(slots + (uint64_t)r * slot)[e];
      acc = r == 0 ? x : op.combine(acc, x);
    }
    acc = op.post(acc);
    if (out) out[e] = acc;
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      if (ag == kAgNone || (ag >= 0 && p != ag)) continue;
      reinterpret_cast<T*>(reinterpret_cast<char*>(c.rs_scratch[p]) + ag_off + ((uint64_t)b * n + me) * slot)[e] = acc;
    }
  }
}

// AllReduce (every rank gets the result) or Reduce (only a.root does; other ranks' recv is
// never touched and may be NULL).
template <typename T, typename Op, bool kToRoot>
OX_DEV void rsag_body(const CollArgs& a) {
  OX_KERNEL_PROLOGUE(a.comm);
  const int root = kToRoot ? a.root : -1;
  const uint64_t unit = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);
  RsagGeom<T> geo;
  geo.count = a.count;
  geo.per = ox_ceil_div(ox_ceil_div(a.count, (uint64_t)n), unit) * unit;
  const uint64_t S = a.chunk_elems;
  const uint32_t b = blockIdx.x, nb = gridDim.x;
  const OxPutScratch ps(c, n);
  const uint64_t ag_off = ps.area;
  const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
  const T* in = reinterpret_cast<const T*>(a.send);
  T* out = reinterpret_cast<T*>(a.recv);
  const bool writes_out = !kToRoot || me == root;
  const Op op(a, n);

  // All-gather copy-out of the round at offset o from the AG slots peers wrote (Reduce: the root
  // only).
  auto copy_out = [&](uint64_t o) {
    if (!writes_out) return;
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      const uint64_t len = geo.slice(p, o, S);
      if (len == 0) continue;
      const char* from = my_rs + ag_off + ps.at(b, p);
      ox_copy(reinterpret_cast<char*>(out + geo.start(p) + o), from, len * sizeof(T), threadIdx.x, blockDim.x, true);
    }
  };
  // A round's copy-out runs after the next round's reduce-scatter puts, so that the local copy
  // overlaps the puts' NVLink writes instead of leaving the links idle. Both are allowed once the
  // round's second sync passed (the owners' reduce of this round has read their RS slots), and the
  // next round's first sync still follows the copy-out, so the slot reuse above is unchanged. In
  // place, the two touch different offsets of every piece. Executable model, with the orders that
  // break it: scripts/model/rsag_model.py in git before 7bcb34d.
  uint64_t prev = ~0ull;
  for (uint64_t o = (uint64_t)b * S; o < geo.per; o += (uint64_t)nb * S) {
    // Reduce-scatter puts.
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      const uint64_t len = geo.slice(p, o, S);
      if (len == 0) continue;
      char* dst = reinterpret_cast<char*>(c.rs_scratch[p]) + ps.at(b, me);
      ox_copy_pre<T>(op, reinterpret_cast<T*>(dst), in + geo.start(p) + o, len, threadIdx.x, blockDim.x);
    }
    if (prev != ~0ull) copy_out(prev);
    ox_block_sync_peers(c, ab);
    const uint64_t mylen = geo.slice(me, o, S);
    if (mylen) {
      T* dst = writes_out ? out + geo.start(me) + o : nullptr;
      const int ag = kToRoot ? (me == root ? kAgNone : root) : kAgAll;
      reduce_slice<T>(c, op, in + geo.start(me) + o, dst, my_rs + ps.at(b, 0), ag_off, b, mylen, ag);
    }
    ox_block_sync_peers(c, ab);
    prev = o;
  }
  if (prev != ~0ull) copy_out(prev);
}
