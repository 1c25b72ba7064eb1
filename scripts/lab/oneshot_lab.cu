// Where the time of a small one-shot AllReduce goes (issue 9's profiling step), measured on the
// GPUs of one process, outside nccl-tests and the library's host code:
//   empty    - an empty kernel: the floor a launch costs, eager and inside a CUDA graph;
//   ping     - one thread per GPU bouncing a word across NVLink: the one-way latency floor;
//   real     - the library's own kernel (ox_allreduce_oneshot_f32_sum, kernels/allreduce.cu) on a
//              DevComm built the way src/channel/memory.rs builds it, per launch shape;
//   stamped  - the library's body with a probe stamping clock64 at each phase, and %globaltimer at
//              entry and exit (block 0, thread 0): where a launch's time goes, and the gap between
//              launches;
//   lean     - the same packets with the per-launch bookkeeping stripped (one flag word per block,
//              no acknowledgement check, no 128-slot flag advance): what that bookkeeping costs;
//   exchange - the library's exchange kernel (ox_exchange, kernels/exchange.cu) moving small
//              packet streams as AllGather (every pair both ways, LL) and Broadcast from rank 0
//              (one way, LL_ACK) do, per launch shape, next to an empty kernel with the same
//              ~3.9 KiB of parameters: the small AllGather/Broadcast/AlltoAll/Send-Recv path;
//              and the one-shot gather kernel (ox_gather_oneshot, kernels/gather_oneshot.cu)
//              moving the same AllGather.
//   pdl      - (`./oneshot_lab N pdl`) the empty, real and lean kernels launched plainly and with
//              programmatic dependent launch (kernels/pdl.cuh), eager and in graphs, results checked.
//   early    - (`./oneshot_lab N early`) the ring one-shot in graphs of PDL launches as the library
//              chains them (a head, then early launches; entry triggers or not), per launch shape
//              and size, with %globaltimer stamps of each phase (session 39).
// Build (here or on the GPU machine): bash scripts/lab/build.sh; run: ./oneshot_lab [ngpus] [pdl|early].
#include "allreduce.cu"
#include "exchange.cu"
#include "gather_oneshot.cu"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "lab.h"

OX_DEV uint64_t lab_gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void lab_empty(CollArgs) { ox_pdl_enter(); }
// An empty kernel taking the exchange kernel's ~3.9 KiB of parameters: what they cost a launch.
extern "C" __global__ void lab_empty_x(ExchangeArgs) {}

// GPU `first` writes i+1 to the peer's word and waits for i+1 in its own; the other answers.
extern "C" __global__ void lab_ping(volatile uint32_t* mine, volatile uint32_t* peer, int iters, int first) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int i = 1; i <= iters; ++i) {
    if (first) {
      *peer = i;
      while (*mine != (uint32_t)i) {}
    } else {
      while (*mine != (uint32_t)i) {}
      *peer = i;
    }
  }
}

// The library's one-shot body (allreduce_oneshot_with) with a probe that records clock64 at each
// phase, and %globaltimer at entry and exit. a.chunk_elems = stamp array (8 u64 per launch),
// a.mode = launch index.
struct LabProbe {
  long long* t;
  OX_DEV void mark(int k) const {
    if (k < 5) t[k] = clock64();
  }
};
extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) lab_stamped(CollArgs a) {
  ox_pdl_enter();
  const uint64_t t0 = lab_gtime();
  long long t[5];
  allreduce_oneshot_with<float, OpSum<float>>(a, ox_comm(a), LabProbe{t});
  const uint64_t t4 = lab_gtime();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    uint64_t* s = reinterpret_cast<uint64_t*>(a.chunk_elems) + 8ull * a.mode;
    s[0] = t0;
    for (int k = 1; k < 5; ++k) s[k] = (uint64_t)(t[k] - t[0]);
    s[5] = t4;
  }
}

// The ring one-shot (OX_ONESHOT_RING, and EARLY after a graph's first node) stamped with
// %globaltimer at every phase (block 0, thread 0): a.root = launch index, a.chunk_elems = stamps
// (8 u64 per launch: entry, flags, packets, reads done, end, wait returned, exit).
struct LabGProbe {
  uint64_t* t;
  OX_DEV void mark(int k) const { t[k] = lab_gtime(); }
};
extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) lab_early(CollArgs a) {
  uint64_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  allreduce_oneshot_with<float, OpSum<float>>(a, ox_comm(a), LabGProbe{t});
  t[6] = lab_gtime();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    uint64_t* s = reinterpret_cast<uint64_t*>(a.chunk_elems) + 8ull * (uint32_t)a.root;
    for (int k = 0; k < 7; ++k) s[k] = t[k];
  }
}

// Lean bookkeeping: flag = this block's word in the lab's own array (a.chunk_elems), read by
// every thread, bumped by thread 0 at exit. Only sound with the same grid every launch and
// symmetric launches (as here); it measures cost, it is not a protocol.
extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1) lab_lean(CollArgs a) {
  ox_pdl_enter();
  const DevComm& c = ox_comm(a);
  const int me = c.rank, n = c.nranks;
  AbortState ab(c.abort_flag);
  uint32_t* fw = reinterpret_cast<uint32_t*>(a.chunk_elems) + blockIdx.x;
  const uint32_t flag = *fw;
  const uint64_t nbytes = a.count * sizeof(float);
  const uint64_t npkt = ox_ceil_div(nbytes, 8);
  const char* src = reinterpret_cast<const char*>(a.send);
  char* dst = reinterpret_cast<char*>(a.recv);
  const uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t G = (uint64_t)gridDim.x * blockDim.x;
  const OpSum<float> op(a, n);
  for (uint64_t i = g; i < npkt; i += G) {
    const uint64_t v = ox_load8(src, i * 8, nbytes);
    for (int k = 1; k < n; ++k) {
      const int p = me + k < n ? me + k : me + k - n;
      ox_ll16_write(ox_ll_region(c, p, flag, me) + i * 16, v, flag);
    }
  }
  for (uint64_t i = g; i < npkt; i += G) {
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t x = r == me ? ox_load8(src, i * 8, nbytes) : ox_ll16_read(ox_ll_region(c, me, flag, r) + i * 16, flag, ab);
      acc = r == 0 ? x : ox_combine<float>(op, acc, x);
    }
    ox_store8(dst, i * 8, nbytes, acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) *fw = ox_ll_next_flag(flag);
}


struct Rank {
  int dev;
  cudaStream_t s;
  char* shared;   // LL scratch (2 halves) then the ack table
  char* priv;     // DevComm, flags, pending (at OX_PRIV_* as src/channel/memory.rs), expected, abort word
  float* send;
  float* recv;
  uint64_t* stamps;
  uint32_t* lean;  // lab_lean's flag words (start at 1)
  uint32_t* ping;
};

static const uint64_t HALF = 8ull << 20;
static const uint64_t TABLE = 4ull * OX_MAX_BLOCKS * OX_MAX_RANKS;
static const uint64_t RING = OX_RING_SLOTS * OX_MAX_RANKS * OX_RING_REGION_BYTES;  // ox_ring_at's area
static const int NODES = 20;
static const uint64_t EXPECTED_OFF = OX_PRIV_RING_OUT_OFF + OX_MAX_BLOCKS * 4;
static const uint64_t ABORT_OFF = EXPECTED_OFF + 2 * TABLE;
static const uint64_t PRIV_BYTES = ABORT_OFF + 64;

static std::vector<Rank> R;

static void setup(int n) {
  R.resize(n);
  for (int g = 0; g < n; ++g) {
    Rank& r = R[g];
    r.dev = g;
    CK(cudaSetDevice(g));
    for (int h = 0; h < n; ++h)
      if (h != g) CK(cudaDeviceEnablePeerAccess(h, 0));
    CK(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking));
    CK(cudaMalloc(&r.shared, 2 * HALF + RING + TABLE));
    CK(cudaMemset(r.shared, 0, 2 * HALF + RING + TABLE));
    CK(cudaMalloc(&r.priv, PRIV_BYTES));
    CK(cudaMemset(r.priv, 0, PRIV_BYTES));
    std::vector<uint32_t> ones(OX_MAX_BLOCKS * OX_MAX_RANKS, 1);
    CK(cudaMemcpy(r.priv + OX_PRIV_FLAGS_OFF, ones.data(), TABLE, cudaMemcpyHostToDevice));  // LL flags start at 1
    CK(cudaMalloc(&r.send, 1 << 20));
    CK(cudaMalloc(&r.recv, 1 << 20));
    std::vector<float> v(1 << 18, 1.0f + g);
    CK(cudaMemcpy(r.send, v.data(), 1 << 20, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&r.stamps, 8 * 8 * NODES * sizeof(uint64_t)));
    CK(cudaMemset(r.stamps, 0, 8 * 8 * NODES * sizeof(uint64_t)));
    // lab_lean's flags start far above the real kernel's, so neither ever matches the other's
    // stale packets in the shared scratch.
    std::vector<uint32_t> far(OX_MAX_BLOCKS, 1u << 30);
    CK(cudaMalloc(&r.lean, 4 * OX_MAX_BLOCKS));
    CK(cudaMemcpy(r.lean, far.data(), 4 * OX_MAX_BLOCKS, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&r.ping, 64));
    CK(cudaMemset(r.ping, 0, 64));
  }
  for (int g = 0; g < n; ++g) {
    DevComm dc;
    memset(&dc, 0, sizeof dc);
    dc.rank = g;
    dc.nranks = n;
    dc.ll_half_bytes = HALF;
    for (int h = 0; h < n; ++h) {
      dc.ll_scratch[h] = (uint64_t)R[h].shared;
      dc.ll_ack[h] = (uint64_t)(R[h].shared + 2 * HALF + RING);
    }
    dc.ll_flags = (uint64_t)(R[g].priv + OX_PRIV_FLAGS_OFF);
    dc.ll_pending = (uint64_t)(R[g].priv + OX_PRIV_PENDING_OFF);
    dc.sem_expected = (uint64_t)(R[g].priv + EXPECTED_OFF);
    dc.abort_flag = (uint64_t)(R[g].priv + ABORT_OFF);
    CK(cudaSetDevice(g));
    CK(cudaMemcpy(R[g].priv, &dc, sizeof dc, cudaMemcpyHostToDevice));
  }
}

static CollArgs args_for(int g, uint64_t count, uint64_t extra, uint32_t mode) {
  CollArgs a;
  memset(&a, 0, sizeof a);
  a.comm = (uint64_t)R[g].priv;
  a.send = (uint64_t)R[g].send;
  a.recv = (uint64_t)R[g].recv;
  a.count = count;
  a.chunk_elems = extra;
  a.root = 0;
  a.mode = mode;
  return a;
}

static void sync_all() {
  for (auto& r : R) {
    CK(cudaSetDevice(r.dev));
    CK(cudaStreamSynchronize(r.s));
  }
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum Which { EMPTY, REAL, STAMPED, LEAN, EMPTY_X, EXCH_AG, EXCH_BC, GATHER_OS, RING_ONLY, EARLY0, ENTRY };

// The exchange kernel's arguments for `count` floats per pair, laid out as src/algo/exchange.rs
// plans a packet-only launch: AllGather (each rank's input to every peer, both ways, OX_MODE_LL;
// peer p's piece lands at recv + p * count) or Broadcast from rank 0 (OX_MODE_LL_ACK).
static ExchangeArgs exch_args(Which w, int g, uint64_t count) {
  const int n = (int)R.size();
  ExchangeArgs x;
  memset(&x, 0, sizeof x);
  x.comm = (uint64_t)R[g].priv;
  const uint64_t bytes = count * 4;
  for (int p = 0; p < n; ++p) {
    if (p == g) continue;
    if (w == EXCH_AG) {
      x.mode[p] = OX_MODE_LL;
      x.sends[x.nsend++] = Xfer{(uint64_t)R[g].send, 0, bytes, 0, p, 0};
      x.recvs[x.nrecv++] = Xfer{0, (uint64_t)R[g].recv + (uint64_t)p * bytes, bytes, 0, p, 0};
    } else if (g == 0) {
      x.mode[p] = OX_MODE_LL_ACK;
      x.sends[x.nsend++] = Xfer{(uint64_t)R[g].send, 0, bytes, 0, p, 0};
    } else if (p == 0) {
      x.mode[p] = OX_MODE_LL_ACK;
      x.recvs[x.nrecv++] = Xfer{0, (uint64_t)R[g].recv, bytes, 0, p, 0};
    }
  }
  if (w == EXCH_AG) x.copies[x.ncopy++] = Xfer{(uint64_t)R[g].send, (uint64_t)R[g].recv + (uint64_t)g * bytes, bytes, 0, g, 0};
  return x;
}

// Launches with programmatic stream serialization when set (the `pdl` section).
static bool g_pdl = false;
template <typename A>
static void launch_k(void (*k)(A), int grid, int block, cudaStream_t s, const A& a) {
  if (!g_pdl) {
    k<<<grid, block, 0, s>>>(a);
    return;
  }
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, a));
}

static void launch(Which w, int g, int grid, int block, const CollArgs& a) {
  cudaStream_t s = R[g].s;
  switch (w) {
    case EMPTY: launch_k(lab_empty, grid, block, s, a); break;
    case REAL: launch_k(ox_allreduce_oneshot_f32_sum, grid, block, s, a); break;
    case STAMPED: launch_k(lab_stamped, grid, block, s, a); break;
    case LEAN: launch_k(lab_lean, grid, block, s, a); break;
    case EMPTY_X: lab_empty_x<<<grid, block, 0, s>>>(exch_args(EXCH_AG, g, a.count)); break;
    case EXCH_AG:
    case EXCH_BC: ox_exchange<<<grid, block, 0, s>>>(exch_args(w, g, a.count)); break;
    case RING_ONLY:
    case EARLY0:
    case ENTRY: {  // a.mode = node index in the graph = chain position; the first node is the head
      CollArgs b = a;
      b.root = (int32_t)a.mode;
      b.mode = OX_ONESHOT_RING;
      if (w != RING_ONLY && a.mode > 0)
        b.mode |= OX_ONESHOT_EARLY | (w == ENTRY ? OX_ONESHOT_ENTRY : 0) | (a.mode << OX_ONESHOT_POS_SHIFT);
      launch_k(lab_early, grid, block, s, b);
      break;
    }
    case GATHER_OS: {  // AllGather of a.count floats per rank: the kernel counts bytes
      CollArgs b = a;
      b.count = a.count * 4;
      b.mode = 0;
      ox_gather_oneshot<<<grid, block, 0, s>>>(b);
      break;
    }
  }
}
static uint64_t extra(Which w, int g) {
  return w == STAMPED || w == RING_ONLY || w == EARLY0 || w == ENTRY ? (uint64_t)R[g].stamps : w == LEAN ? (uint64_t)R[g].lean : 0;
}

static void check_result(uint64_t count, const char* what) {
  const int n = (int)R.size();
  const float want = (float)(n * (n + 1) / 2);
  for (auto& r : R) {
    std::vector<float> v(count);
    CK(cudaSetDevice(r.dev));
    CK(cudaMemcpy(v.data(), r.recv, count * 4, cudaMemcpyDeviceToHost));
    for (uint64_t i = 0; i < count; ++i)
      if (v[i] != want) {
        printf("WRONG %s rank %d elem %llu: %f != %f\n", what, r.dev, (unsigned long long)i, v[i], want);
        exit(2);
      }
    CK(cudaMemset(r.recv, 0, count * 4));
  }
}

// AllGather: rank g's piece p holds 1 + p; Broadcast from rank 0: every other rank holds 1.
static void check_exchange(Which w, uint64_t count, const char* what) {
  const int n = (int)R.size();
  for (auto& r : R) {
    const uint64_t total = w == EXCH_AG ? count * n : count;
    std::vector<float> v(total);
    CK(cudaSetDevice(r.dev));
    CK(cudaMemcpy(v.data(), r.recv, total * 4, cudaMemcpyDeviceToHost));
    for (uint64_t i = 0; i < total && (w == EXCH_AG || r.dev != 0); ++i) {
      const float want = w == EXCH_AG ? 1.0f + (float)(i / count) : 1.0f;
      if (v[i] != want) {
        printf("WRONG %s rank %d elem %llu: %f != %f\n", what, r.dev, (unsigned long long)i, v[i], want);
        exit(2);
      }
    }
    CK(cudaMemset(r.recv, 0, total * 4));
  }
}

// Per-op microseconds with NODES launches per CUDA graph, `reps` graph launches per GPU.
static double graph_us(Which w, uint64_t count, int grid, int block, int reps) {
  const int n = (int)R.size();
  std::vector<cudaGraphExec_t> ex(n);
  for (int g = 0; g < n; ++g) {
    CK(cudaSetDevice(g));
    cudaGraph_t gr;
    CK(cudaStreamBeginCapture(R[g].s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < NODES; ++i) {
      CollArgs a = args_for(g, count, extra(w, g), (uint32_t)i);
      launch(w, g, grid, block, a);
    }
    CK(cudaStreamEndCapture(R[g].s, &gr));
    CK(cudaGraphInstantiate(&ex[g], gr, 0));
    CK(cudaGraphDestroy(gr));
  }
  for (int k = 0; k < 3; ++k)
    for (int g = 0; g < n; ++g) {
      CK(cudaSetDevice(g));
      CK(cudaGraphLaunch(ex[g], R[g].s));
    }
  sync_all();
  const double t0 = now_us();
  for (int k = 0; k < reps; ++k)
    for (int g = 0; g < n; ++g) {
      CK(cudaSetDevice(g));
      CK(cudaGraphLaunch(ex[g], R[g].s));
    }
  sync_all();
  const double t = (now_us() - t0) / (reps * NODES);
  for (int g = 0; g < n; ++g) CK(cudaGraphExecDestroy(ex[g]));
  return t;
}

// Per-op microseconds with one host thread per GPU launching `iters` kernels back to back (as
// nccl-tests does with one process per GPU), the slowest thread's time.
static double eager_us(Which w, uint64_t count, int grid, int block, int iters) {
  const int n = (int)R.size();
  std::atomic<int> ready(0);
  std::vector<double> took(n);
  std::vector<std::thread> th;
  for (int g = 0; g < n; ++g)
    th.emplace_back([&, g] {
      CK(cudaSetDevice(g));
      CollArgs a = args_for(g, count, extra(w, g), 0);
      for (int i = 0; i < 20; ++i) launch(w, g, grid, block, a);
      CK(cudaStreamSynchronize(R[g].s));
      ready.fetch_add(1);
      while (ready.load() < n) {}
      const double t0 = now_us();
      for (int i = 0; i < iters; ++i) launch(w, g, grid, block, a);
      CK(cudaStreamSynchronize(R[g].s));
      took[g] = now_us() - t0;
    });
  for (auto& t : th) t.join();
  double m = 0;
  for (double t : took) m = t > m ? t : m;
  return m / iters;
}

static void ping(int iters) {
  if (R.size() < 2) return;
  for (int g = 0; g < 2; ++g) {
    CK(cudaSetDevice(g));
    CK(cudaMemset(R[g].ping, 0, 64));
  }
  sync_all();
  const double t0 = now_us();
  for (int g = 0; g < 2; ++g) {
    CK(cudaSetDevice(g));
    lab_ping<<<1, 32, 0, R[g].s>>>(R[g].ping, R[1 - g].ping, iters, g == 0);
  }
  sync_all();
  printf("ping: %d round trips GPU0<->GPU1, %.3f us per round trip (one way %.3f us)\n", iters,
         (now_us() - t0) / iters, (now_us() - t0) / iters / 2);
}

static void stamped_report(uint64_t count, int grid, int block) {
  // Run one graph of NODES stamped launches (after a warm-up replay) and read rank 0's stamps.
  graph_us(STAMPED, count, grid, block, 1);
  int clk_khz = 0;
  CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
  const double cyc_us = 1000.0 / clk_khz;
  for (int g = 0; g < (int)R.size(); ++g) {
    std::vector<uint64_t> s(8 * NODES);
    CK(cudaSetDevice(g));
    CK(cudaMemcpy(s.data(), R[g].stamps, s.size() * 8, cudaMemcpyDeviceToHost));
    double gap = 0, dur = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0;
    int m = 0;
    for (int i = 1; i < NODES; ++i, ++m) {
      gap += (double)(s[8 * i] - s[8 * (i - 1) + 5]) / 1000.0;
      dur += (double)(s[8 * i + 5] - s[8 * i]) / 1000.0;
      c1 += s[8 * i + 1] * cyc_us;
      c2 += s[8 * i + 2] * cyc_us;
      c3 += s[8 * i + 3] * cyc_us;
      c4 += s[8 * i + 4] * cyc_us;
    }
    printf("stamped %6llu B grid %3d block %4d rank %d: kernel %.2f us (globaltimer), gap to next launch %.2f us; "
           "from entry (clock64 at %.0f MHz): flags loaded %.2f, packets written %.2f, peers' packets read + stored %.2f, flags advanced %.2f us\n",
           (unsigned long long)count * 4, grid, block, g, dur / m, gap / m, clk_khz / 1000.0, c1 / m, c2 / m, c3 / m, c4 / m);
  }
}

// The empty, real and lean kernels at one size and launch shape, in graphs and eager, results
// checked; one line prefixed by `tag`. Shapes with more than 8 packets per thread are skipped.
static void measure(uint64_t count, int grid, int block, const char* tag) {
  if ((uint64_t)grid * block < (count * 4 + 7) / 8 / 8) return;
  double ge = graph_us(EMPTY, count, grid, block, 200);
  double gr = graph_us(REAL, count, grid, block, 200);
  check_result(count, "real graph");
  double gl = graph_us(LEAN, count, grid, block, 200);
  check_result(count, "lean graph");
  double ee = eager_us(EMPTY, count, grid, block, 2000);
  double er = eager_us(REAL, count, grid, block, 2000);
  check_result(count, "real eager");
  double el = eager_us(LEAN, count, grid, block, 2000);
  check_result(count, "lean eager");
  printf("%s%6llu B grid %3d block %4d | graph us: empty %.2f real %.2f lean %.2f | eager us: empty %.2f real %.2f lean %.2f\n",
         tag, (unsigned long long)count * 4, grid, block, ge, gr, gl, ee, er, el);
  fflush(stdout);
}

// The ring one-shot in graphs of NODES PDL launches: per-op time, then the stamps of one replay
// averaged over nodes 2..NODES-1 per GPU, relative to each node's entry (us).
static void early_report(Which w, const char* name, uint64_t count, int grid, int block) {
  g_pdl = true;
  const double us = graph_us(w, count, grid, block, 300);
  check_result(count, name);
  graph_us(w, count, grid, block, 1);
  check_result(count, name);
  printf("early-lab %-9s %6llu B grid %2d block %4d: %.3f us per op\n", name, (unsigned long long)count * 4, grid, block, us);
  for (int g = 0; g < (int)R.size(); ++g) {
    std::vector<uint64_t> s(8 * NODES);
    CK(cudaSetDevice(g));
    CK(cudaMemcpy(s.data(), R[g].stamps, s.size() * 8, cudaMemcpyDeviceToHost));
    double per = 0, f = 0, p = 0, wt = 0, rd = 0, ex = 0, lat = 0, wgap = 0;
    int m = 0;
    for (int i = 2; i < NODES; ++i, ++m) {
      const uint64_t* c = &s[8 * i];
      const uint64_t* q = &s[8 * (i - 1)];
      auto d = [](uint64_t a, uint64_t b) { return a && b ? ((double)(int64_t)(a - b)) / 1000.0 : 0.0; };
      per += d(c[0], q[0]);
      f += d(c[1], c[0]);
      p += d(c[2], c[0]);
      wt += d(c[5], c[0]);
      rd += d(c[3], c[0]);
      ex += d(c[6], c[0]);
      lat += d(c[0], w != ENTRY && q[5] ? q[5] : q[1]);  // entry after the previous trigger (about)
      wgap += d(c[5], q[6]);  // wait returned after the previous kernel's exit (block 0)
    }
    printf("  gpu %d: period %.3f | from entry: flags %.3f packets %.3f waited %.3f reads %.3f exit %.3f | "
           "entry after prev trigger %.3f, wait after prev exit %.3f\n",
           g, per / m, f / m, p / m, wt / m, rd / m, ex / m, lat / m, wgap / m);
  }
  fflush(stdout);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (have < n) {
    printf("oneshot_lab: %d GPUs asked, %d present\n", n, have);
    return 1;
  }
  setup(n);
  printf("oneshot_lab: %d GPUs, graph = %d launches per graph, eager = one host thread per GPU\n", n, NODES);
  if (argc > 2 && strcmp(argv[2], "early") == 0) {
    const int eshapes[][2] = {{4, 512}, {2, 256}, {4, 256}, {8, 512}};
    const uint64_t ecounts[] = {2, 512, 2048, 8192, 16384};
    for (uint64_t count : ecounts)
      for (auto& sh : eshapes) {
        early_report(RING_ONLY, "ring", count, sh[0], sh[1]);
        early_report(EARLY0, "early", count, sh[0], sh[1]);
        early_report(ENTRY, "entry", count, sh[0], sh[1]);
      }
    printf("oneshot_lab: done\n");
    return 0;
  }
  if (argc > 2 && strcmp(argv[2], "pdl") == 0) {
    const uint64_t pcounts[] = {2, 1024, 8192};
    const int pshapes[][2] = {{1, 512}, {4, 512}, {8, 512}};
    for (uint64_t count : pcounts)
      for (auto& sh : pshapes)
        for (int p = 0; p < 2; ++p) {
          g_pdl = p == 1;
          measure(count, sh[0], sh[1], g_pdl ? "pdl 1 " : "pdl 0 ");
        }
    for (int p = 0; p < 2; ++p) {
      g_pdl = p == 1;
      printf("stamps with pdl %d:\n", p);
      stamped_report(2, 4, 512);
    }
    printf("oneshot_lab: done\n");
    return 0;
  }
  ping(10000);
  const uint64_t counts[] = {2, 8192, 16384};
  const int shapes[][2] = {{1, 512}, {2, 512}, {4, 512}, {4, 256}, {4, 128}, {4, 64}, {8, 64}, {8, 128}, {8, 512}, {16, 256}, {32, 128}, {16, 512}, {4, 1024}};
  for (uint64_t count : counts)
    for (auto& sh : shapes) measure(count, sh[0], sh[1], "");
  stamped_report(2, 4, 512);
  stamped_report(2, 1, 512);
  stamped_report(2, 4, 128);
  stamped_report(8192, 8, 512);

  // The exchange kernel: the library launches packet-only exchanges on the full exchange grid
  // (128 blocks) of 256 threads (src/algo/exchange.rs).
  const uint64_t xcounts[] = {16, 1024, 8192};
  const int xshapes[][2] = {{128, 256}, {128, 1024}, {64, 256}, {16, 256}, {4, 256}, {4, 512}, {1, 256}};
  for (uint64_t count : xcounts) {
    for (auto& sh : xshapes) {
      const int grid = sh[0], block = sh[1];
      double ge = graph_us(EMPTY_X, count, grid, block, 200);
      double ga = graph_us(EXCH_AG, count, grid, block, 200);
      check_exchange(EXCH_AG, count, "allgather graph");
      double gb = graph_us(EXCH_BC, count, grid, block, 200);
      check_exchange(EXCH_BC, count, "broadcast graph");
      double ee = eager_us(EMPTY_X, count, grid, block, 2000);
      double ea = eager_us(EXCH_AG, count, grid, block, 2000);
      check_exchange(EXCH_AG, count, "allgather eager");
      double eb = eager_us(EXCH_BC, count, grid, block, 2000);
      check_exchange(EXCH_BC, count, "broadcast eager");
      double go = graph_us(GATHER_OS, count, grid, block, 200);
      check_exchange(EXCH_AG, count, "one-shot gather graph");
      double eo = eager_us(GATHER_OS, count, grid, block, 2000);
      check_exchange(EXCH_AG, count, "one-shot gather eager");
      printf("exchange %6llu B per pair grid %3d block %4d | graph us: empty(3.9 KiB args) %.2f allgather %.2f broadcast %.2f "
             "one-shot allgather %.2f | eager us: empty %.2f allgather %.2f broadcast %.2f one-shot allgather %.2f\n",
             (unsigned long long)count * 4, grid, block, ge, ga, gb, go, ee, ea, eb, eo);
      fflush(stdout);
    }
  }
  printf("oneshot_lab: done\n");
  return 0;
}
