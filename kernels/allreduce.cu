// AllReduce kernels. Three algorithms, chosen on the host by algo::allreduce:
//   oneshot  - all-pairs LL16: every rank writes its whole input as packets into every peer's
//              scratch, then reduces all inputs locally. One hop; for small messages.
//   twophase - LL16 reduce-scatter into the owner's scratch, then LL16 all-gather of the reduced
//              chunks. Two hops, each rank moves 2(n-1)/n of the data; for medium messages.
//   rsag     - reduce-scatter + all-gather with MemoryChannel puts and semaphores, pipelined in
//              rounds per block; for large messages.
// Every algorithm reduces in rank order 0..n-1, so all ranks get bit-identical results, and
// touches each element's input before writing its output from the same thread, so in-place
// (send == recv) is safe.
#include "common.cuh"
#include "ll_flags.cuh"
#include "memory_channel.cuh"
#include "reduce.cuh"

// ---- oneshot -------------------------------------------------------------------------------
// LL scratch half: slot[src] of (half / nranks) bytes, packet i at slot + 16 i.
template <typename T, typename Op>
OX_DEV void allreduce_oneshot(const CollArgs& a) {
  const DevComm& c = ox_comm(a);
  const int me = c.rank, n = c.nranks;
  AbortState ab(c.abort_flag);
  const uint32_t flag = ox_ll_flag(c);
  const uint64_t half = ox_ll_half_offset(c, flag);
  const uint64_t slot = (c.ll_half_bytes / (uint64_t)n) & ~15ull;
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;

  const Op op(a, n);
  // pre() is applied by the rank that owns the input (PreMulSum scalars differ per rank), so
  // packets carry pre-scaled values and the reduction below only combines.
  for (uint64_t i = g; i < npkt; i += G) {
    const uint64_t v = ox_pre<T>(op, ox_load8(src, i * 8, nbytes));
    for (int k = 1; k < n; ++k) {
      const int p = me + k < n ? me + k : me + k - n;  // staggered so ranks start on different peers
      ox_ll16_write(reinterpret_cast<char*>(c.ll_scratch[p]) + half + (uint64_t)me * slot + i * 16, v, flag);
    }
  }
  const char* mine = reinterpret_cast<const char*>(c.ll_scratch[me]) + half;
  for (uint64_t i = g; i < npkt; i += G) {
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t x = r == me ? ox_pre<T>(op, ox_load8(src, i * 8, nbytes))
                                 : ox_ll16_read(mine + (uint64_t)r * slot + i * 16, flag, ab);
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    ox_store8(dst, i * 8, nbytes, ox_post<T>(op, acc));
  }
  ox_ll_flag_advance(c, flag);
}

// ---- twophase ------------------------------------------------------------------------------
// LL scratch half: RS area [0, half/2) then AG area [half/2, half), each with slot[src] of
// (half/2 / nranks) bytes. Chunk p = packets [p*cp, min((p+1)*cp, npkt)) is reduced by rank p.
template <typename T, typename Op>
OX_DEV void allreduce_twophase(const CollArgs& a) {
  const DevComm& c = ox_comm(a);
  const int me = c.rank, n = c.nranks;
  AbortState ab(c.abort_flag);
  const uint32_t flag = ox_ll_flag(c);
  const uint64_t half = ox_ll_half_offset(c, flag);
  const uint64_t area = c.ll_half_bytes / 2;
  const uint64_t slot = (area / (uint64_t)n) & ~15ull;
  const uint64_t nbytes = a.count * sizeof(T);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const uint64_t cp = ox_ceil_div(npkt, (uint64_t)n);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const char* mine = reinterpret_cast<const char*>(c.ll_scratch[me]) + half;
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
    ox_ll16_write(reinterpret_cast<char*>(c.ll_scratch[p]) + half + (uint64_t)me * slot + k * 16,
                  ox_pre<T>(op, ox_load8(src, i * 8, nbytes)), flag);
  }
  // 2. Reduce this rank's chunk; write it locally and as packets to every peer's AG area.
  for (uint64_t k = g; k < cp; k += G) {
    const uint64_t i = (uint64_t)me * cp + k;
    if (i >= npkt) break;
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t x = r == me ? ox_pre<T>(op, ox_load8(src, i * 8, nbytes))
                                 : ox_ll16_read(mine + (uint64_t)r * slot + k * 16, flag, ab);
      acc = r == 0 ? x : ox_combine<T>(op, acc, x);
    }
    const uint64_t res = ox_post<T>(op, acc);
    ox_store8(dst, i * 8, nbytes, res);
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      ox_ll16_write(reinterpret_cast<char*>(c.ll_scratch[p]) + half + area + (uint64_t)me * slot + k * 16, res, flag);
    }
  }
  // 3. All-gather: every other chunk arrives from its owner.
  for (uint64_t t = g; t < others; t += G) {
    const int q = (int)(t / cp);
    const uint64_t k = t - (uint64_t)q * cp;
    const int p = q < me ? q : q + 1;
    const uint64_t i = (uint64_t)p * cp + k;
    if (i >= npkt) continue;
    ox_store8(dst, i * 8, nbytes, ox_ll16_read(mine + area + (uint64_t)p * slot + k * 16, flag, ab));
  }
  ox_ll_flag_advance(c, flag);
}

// ---- rsag ----------------------------------------------------------------------------------
// Rank j owns elements [j*per, min((j+1)*per, count)), per rounded up to 16 bytes. In round k,
// block b handles offset o = (k*nb + b)*S of every owned range. Each rank's put scratch holds an
// RS area then an AG area, each with slot[(b, src)] of rs_slot_bytes.
//
// Per round: put my input slices (pre-scaled by my op, see oneshot) to their owners' RS slots; sync; reduce my slice from my input
// and the RS slots, writing it to my output and to every peer's AG slot; sync; copy the AG slots
// into my output. Slot reuse needs no extra sync: a peer writes my RS slot for round k+1 only after
// my AG data of round k reached it (so I had consumed round k), and writes my AG slot for round
// k+1 only after my round-k+1 RS signal (sent after I copied out round k).
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

template <typename T, typename Op>
OX_DEV void rsag_reduce_slice(const DevComm& c, const Op& op, const T* in, T* out, const char* rs_area, uint64_t ag_off,
                              uint32_t b, uint64_t nelem) {
  const int me = c.rank, n = c.nranks;
  const uint64_t slot = c.rs_slot_bytes;
  const uint64_t rs_base = (uint64_t)b * n * slot;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out);
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    const uint64_t words = nelem * sizeof(T) / 16;
    for (uint64_t w = tid; w < words; w += nt) {
      uint4 acc;
      for (int r = 0; r < n; ++r) {
        const uint4 x = r == me ? ox_pre<T>(op, reinterpret_cast<const uint4*>(in)[w])
                                : ox_ldcg16(rs_area + rs_base + (uint64_t)r * slot + w * 16);
        acc = r == 0 ? x : ox_combine<T>(op, acc, x);
      }
      acc = ox_post<T>(op, acc);
      reinterpret_cast<uint4*>(out)[w] = acc;
      for (int j = 1; j < n; ++j) {
        const int p = me + j < n ? me + j : me + j - n;
        char* ag = reinterpret_cast<char*>(c.rs_scratch[p]) + ag_off + ((uint64_t)b * n + me) * slot;
        reinterpret_cast<uint4*>(ag)[w] = acc;
      }
    }
    done = words * 16 / sizeof(T);
  }
  for (uint64_t e = done + tid; e < nelem; e += nt) {
    T acc = T();
    for (int r = 0; r < n; ++r) {
      const T x = r == me ? op.pre(in[e]) : reinterpret_cast<const T*>(rs_area + rs_base + (uint64_t)r * slot)[e];
      acc = r == 0 ? x : op.combine(acc, x);
    }
    acc = op.post(acc);
    out[e] = acc;
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      reinterpret_cast<T*>(reinterpret_cast<char*>(c.rs_scratch[p]) + ag_off + ((uint64_t)b * n + me) * slot)[e] = acc;
    }
  }
}

template <typename T, typename Op>
OX_DEV void allreduce_rsag(const CollArgs& a) {
  const DevComm& c = ox_comm(a);
  const int me = c.rank, n = c.nranks;
  AbortState ab(c.abort_flag);
  const uint64_t unit = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);
  RsagGeom<T> geo;
  geo.count = a.count;
  geo.per = ox_ceil_div(ox_ceil_div(a.count, (uint64_t)n), unit) * unit;
  const uint64_t S = a.chunk_elems;
  const uint32_t b = blockIdx.x, nb = gridDim.x;
  const uint64_t slot = c.rs_slot_bytes;
  const uint64_t ag_off = (uint64_t)c.rs_max_blocks * n * slot;
  const char* my_rs = reinterpret_cast<const char*>(c.rs_scratch[me]);
  const T* in = reinterpret_cast<const T*>(a.send);
  T* out = reinterpret_cast<T*>(a.recv);
  const Op op(a, n);

  for (uint64_t o = (uint64_t)b * S; o < geo.per; o += (uint64_t)nb * S) {
    // Reduce-scatter puts.
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      const uint64_t len = geo.slice(p, o, S);
      if (len == 0) continue;
      char* dst = reinterpret_cast<char*>(c.rs_scratch[p]) + ((uint64_t)b * n + me) * slot;
      ox_copy_pre<T>(op, reinterpret_cast<T*>(dst), in + geo.start(p) + o, len, threadIdx.x, blockDim.x);
    }
    ox_block_sync_peers(c, ab);
    const uint64_t mylen = geo.slice(me, o, S);
    if (mylen) rsag_reduce_slice<T>(c, op, in + geo.start(me) + o, out + geo.start(me) + o, my_rs, ag_off, b, mylen);
    ox_block_sync_peers(c, ab);
    // All-gather copy-out from the AG slots peers wrote.
    for (int j = 1; j < n; ++j) {
      const int p = me + j < n ? me + j : me + j - n;
      const uint64_t len = geo.slice(p, o, S);
      if (len == 0) continue;
      const char* from = my_rs + ag_off + ((uint64_t)b * n + p) * slot;
      ox_copy(reinterpret_cast<char*>(out + geo.start(p) + o), from, len * sizeof(T), threadIdx.x, blockDim.x, true);
    }
  }
}

// ---- entry points --------------------------------------------------------------------------
// ox_allreduce_<algo>_<type>_<op>, looked up by name on the host (gpu::module).
#define OX_AR_KERNEL(ALGO, TNAME, T, ONAME, OP)                                                  \
  extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1)                                  \
      ox_allreduce_##ALGO##_##TNAME##_##ONAME(CollArgs args) {                                     \
    allreduce_##ALGO<T, OP<T>>(args);                                                              \
  }

#define OX_AR_OPS(ALGO, TNAME, T)          \
  OX_AR_KERNEL(ALGO, TNAME, T, sum, OpSum)   \
  OX_AR_KERNEL(ALGO, TNAME, T, prod, OpProd) \
  OX_AR_KERNEL(ALGO, TNAME, T, max, OpMax)   \
  OX_AR_KERNEL(ALGO, TNAME, T, min, OpMin)   \
  OX_AR_KERNEL(ALGO, TNAME, T, avg, OpAvg)   \
  OX_AR_KERNEL(ALGO, TNAME, T, premulsum, OpPreMulSum)

#define OX_AR_TYPES(ALGO)                   \
  OX_AR_OPS(ALGO, i8, int8_t)               \
  OX_AR_OPS(ALGO, u8, uint8_t)              \
  OX_AR_OPS(ALGO, i32, int32_t)             \
  OX_AR_OPS(ALGO, u32, uint32_t)            \
  OX_AR_OPS(ALGO, i64, int64_t)             \
  OX_AR_OPS(ALGO, u64, uint64_t)            \
  OX_AR_OPS(ALGO, f16, __half)              \
  OX_AR_OPS(ALGO, f32, float)               \
  OX_AR_OPS(ALGO, f64, double)              \
  OX_AR_OPS(ALGO, bf16, __nv_bfloat16)      \
  OX_AR_OPS(ALGO, f8e4m3, __nv_fp8_e4m3)    \
  OX_AR_OPS(ALGO, f8e5m2, __nv_fp8_e5m2)

OX_AR_TYPES(oneshot)
OX_AR_TYPES(twophase)
OX_AR_TYPES(rsag)
