// NCCL 2.32.3's per-collective configs (ncclCollConfig_t, the nccl*Config collectives), two
// processes, one 2-rank communicator (two_procs.h; TWO_PROCS_ONE_GPU=1 puts both on one GPU).
// Every *Config collective runs with each config below, at two sizes (a small one and one past
// every packet path), and every element of its result is checked (and the element after it is
// checked untouched):
//   NULL; an initialized config (all unset) with a userProfilerTag; maxCTAs 1; minCTAs 8 with
//   maxCTAs 16; CTAPolicy ZERO; CTAPolicy EFFICIENCY|ZERO with maxCTAs 4; algSelection "RING_LL";
//   "RING_SIMPLE"; "RING_LL128" with CTAPolicy EFFICIENCY; "NVLS_SIMPLE" with forceAlgSelection 0
//   (nothing oxccl has: the automatic choice); a launchCompletionEvent.
// With forceAlgSelection 1, AlltoAll, Gather and Scatter must refuse any algSelection
// (ncclInvalidArgument: no NCCL algorithm serves them). The launchCompletionEvent is first
// recorded on a second stream held by a host function, so that it completes only if the call
// records it again: the test fails if it is still pending 15 s after the call returned.
// Then: forceAlgSelection 1 errors (TREE_LL for Broadcast: not valid for it; NVLS_SIMPLE for
// AllReduce: nothing oxccl runs), count 0 with a config, a group mixing configured and plain
// collectives (results checked), and a group with two launch-completion events on the
// communicator (ncclGroupEnd: ncclInvalidUsage; the communicator works afterwards).
// GPU_COLLCFG_ALARM: seconds before a stalled process fails (default 300).
// Exit status 0: pass; 77: fewer than 2 GPUs (skipped); anything else: fail.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "two_procs.h"

#define BIG ((1u << 20) + 3) /* floats per rank: 4 MiB, not a power of two */
#define SMALL 1003u
#define MAXN (2u * BIG + 64)

enum { AR, BC, RD, AG, RS, A2A, GA, SC, NCOLL };
static const char* const coll_name[NCOLL] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter"};

static cudaStream_t s, held;
static float *dsend, *drecv, *host;
static const uint32_t UNTOUCHED = 0xffffffffu;

static float val(size_t i, int r, int salt) { return (float)((i * 7 + (size_t)r * 131 + (size_t)salt * 17) % 2048); }

// Elements of one rank's input and output for a per-rank count `n`.
static size_t in_count(int c, size_t n) { return (c == RS || c == A2A || (c == SC && rank == 1)) ? 2 * n : n; }
static size_t out_count(int c, size_t n) { return (c == AG || c == A2A || (c == GA && rank == 0)) ? 2 * n : n; }
// Reduce and Gather (root 0) leave the other rank's output alone.
static int has_output(int c) { return !((c == RD || c == GA) && rank != 0); }

static float expect(int c, size_t j, size_t n, int salt) {
  switch (c) {
    case AR:
    case RD: return val(j, 0, salt) + val(j, 1, salt);
    case BC: return val(j, 1, salt);                       // root 1
    case AG:
    case GA: return val(j % n, (int)(j / n), salt);       // Gather: root 0
    case RS: return val(rank * n + j, 0, salt) + val(rank * n + j, 1, salt);
    case A2A: return val(rank * n + j % n, (int)(j / n), salt);
    default: return val(rank * n + j, 1, salt);           // Scatter from root 1
  }
}

static ncclResult_t issue(int c, const float* in, float* out, size_t n, ncclComm_t comm, const ncclCollConfig_t* cfg) {
  switch (c) {
    case AR: return ncclAllReduceConfig(in, out, n, ncclFloat, ncclSum, comm, s, cfg);
    case BC: return ncclBroadcastConfig(in, out, n, ncclFloat, 1, comm, s, cfg);
    case RD: return ncclReduceConfig(in, out, n, ncclFloat, ncclSum, 0, comm, s, cfg);
    case AG: return ncclAllGatherConfig(in, out, n, ncclFloat, comm, s, cfg);
    case RS: return ncclReduceScatterConfig(in, out, n, ncclFloat, ncclSum, comm, s, cfg);
    case A2A: return ncclAlltoAllConfig(in, out, n, ncclFloat, comm, s, cfg);
    case GA: return ncclGatherConfig(in, out, n, ncclFloat, 0, comm, s, cfg);
    default: return ncclScatterConfig(in, out, n, ncclFloat, 1, comm, s, cfg);
  }
}

// Fills `in` with this rank's input (salt `salt`) and `out` with the untouched pattern.
static void prepare(int c, float* in, float* out, size_t n, int salt) {
  for (size_t i = 0; i < in_count(c, n); ++i) host[i] = val(i, rank, salt);
  CHECK(cudaMemcpy(in, host, in_count(c, n) * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy in");
  CHECK(cudaMemset(out, 0xff, (out_count(c, n) + 1) * sizeof(float)) == cudaSuccess, "cudaMemset");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
}

// Every output element, and the one after the output untouched.
static void verify(int c, const float* out, size_t n, int salt, const char* what) {
  size_t m = out_count(c, n);
  CHECK(cudaMemcpy(host, out, (m + 1) * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy out");
  if (has_output(c)) {
    for (size_t j = 0; j < m; ++j) {
      float want = expect(c, j, n, salt);
      CHECK(host[j] == want, "%s, %s, count %zu: element %zu is %g, expected %g", what, coll_name[c], n, j, host[j], want);
    }
  }
  uint32_t after;
  memcpy(&after, &host[m], sizeof after);
  CHECK(after == UNTOUCHED, "%s, %s, count %zu: the element after the output was written", what, coll_name[c], n);
}

// The held stream: a host function that waits for `released` (at most 20 s).
static volatile int released;
static void CUDART_CB hold(void* arg) {
  (void)arg;
  for (int i = 0; i < 200000 && !__atomic_load_n(&released, __ATOMIC_ACQUIRE); ++i) usleep(100);
}

// Records `ev` on the held stream, where it stays pending until released.
static void arm(cudaEvent_t ev) {
  __atomic_store_n(&released, 0, __ATOMIC_RELEASE);
  CHECK(cudaLaunchHostFunc(held, hold, NULL) == cudaSuccess, "cudaLaunchHostFunc");
  CHECK(cudaEventRecord(ev, held) == cudaSuccess, "cudaEventRecord on the held stream");
  CHECK(cudaEventQuery(ev) == cudaErrorNotReady, "the armed event completed before the call");
}

// The call must have recorded `ev` again: it completes while the held stream still waits.
static void completed(cudaEvent_t ev, const char* what) {
  cudaError_t q = cudaErrorNotReady;
  for (int i = 0; i < 15000 && (q = cudaEventQuery(ev)) == cudaErrorNotReady; ++i) usleep(1000);
  CHECK(q == cudaSuccess, "%s: launchCompletionEvent %s", what, q == cudaErrorNotReady ? "never recorded by the call" : cudaGetErrorString(q));
  CHECK(cudaEventSynchronize(ev) == cudaSuccess, "%s: cudaEventSynchronize", what);
  __atomic_store_n(&released, 1, __ATOMIC_RELEASE);
  CHECK(cudaStreamSynchronize(held) == cudaSuccess, "releasing the held stream");
}

typedef struct {
  const char* name;
  int null_cfg;     // pass NULL
  int event;        // set launchCompletionEvent
  int forced_sel;   // algSelection with forceAlgSelection 1: AlltoAll, Gather, Scatter refuse it
  ncclCollConfig_t cfg;
} Variant;

static void one_call(ncclComm_t comm, const Variant* v, cudaEvent_t ev, int c, size_t n, int salt) {
  char what[96];
  snprintf(what, sizeof what, "config \"%s\"", v->name);
  ncclCollConfig_t cfg = v->cfg;
  if (v->event) cfg.launchCompletionEvent = ev;
  prepare(c, dsend, drecv, n, salt);
  int refused = v->forced_sel && (c == A2A || c == GA || c == SC);
  if (v->event && !refused) arm(ev);
  ncclResult_t r = issue(c, dsend, drecv, n, comm, v->null_cfg ? NULL : &cfg);
  if (refused) {
    CHECK(r == ncclInvalidArgument, "%s, %s: an algSelection with forceAlgSelection 1 gave %s, expected ncclInvalidArgument", what, coll_name[c],
          ncclGetErrorString(r));
    return;
  }
  CHECK(r == ncclSuccess, "%s, %s, count %zu: %s", what, coll_name[c], n, ncclGetErrorString(r));
  if (v->event) completed(ev, what);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s, %s: cudaStreamSynchronize", what, coll_name[c]);
  verify(c, drecv, n, salt, what);
}

static void errors_and_groups(ncclComm_t comm, cudaEvent_t ev) {
  const ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
  ncclCollConfig_t cfg = init;
  // TREE_LL serves only AllReduce: refused for Broadcast; with forceAlgSelection 0 it runs.
  cfg.algSelection = "TREE_LL";
  prepare(BC, dsend, drecv, SMALL, 90);
  CHECK(ncclBroadcastConfig(dsend, drecv, SMALL, ncclFloat, 1, comm, s, &cfg) == ncclInvalidArgument, "TREE_LL for Broadcast, forced");
  cfg.forceAlgSelection = 0;
  CHECK(ncclBroadcastConfig(dsend, drecv, SMALL, ncclFloat, 1, comm, s, &cfg) == ncclSuccess, "TREE_LL for Broadcast, not forced");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
  verify(BC, drecv, SMALL, 90, "TREE_LL, not forced");
  // NVLS_SIMPLE is valid for AllReduce but oxccl has no NVLS: forced, the call fails.
  cfg = init;
  cfg.algSelection = "NVLS_SIMPLE";
  CHECK(ncclAllReduceConfig(dsend, drecv, SMALL, ncclFloat, ncclSum, comm, s, &cfg) == ncclInvalidArgument, "NVLS_SIMPLE for AllReduce, forced");
  // count 0: nothing to do, whatever the config.
  cfg = init;
  cfg.maxCTAs = 1;
  cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  cfg.algSelection = "RING_LL";
  CHECK(ncclAllReduceConfig(dsend, drecv, 0, ncclFloat, ncclSum, comm, s, &cfg) == ncclSuccess, "count 0");

  // A group: plain and configured collectives, each with its own buffers.
  enum { NOPS = 4 };
  static const int colls[NOPS] = {AR, AR, AG, RS};
  float *in[NOPS], *out[NOPS];
  ncclCollConfig_t cfgs[NOPS];
  for (int k = 0; k < NOPS; ++k) {
    CHECK(cudaMalloc((void**)&in[k], 2 * 4099 * sizeof(float)) == cudaSuccess && cudaMalloc((void**)&out[k], (2 * 4099 + 1) * sizeof(float)) == cudaSuccess, "cudaMalloc");
    prepare(colls[k], in[k], out[k], 4099, 100 + k);
    cfgs[k] = init;
  }
  cfgs[1].maxCTAs = 1;
  cfgs[2].algSelection = "RING_LL";
  cfgs[3].CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  for (int k = 0; k < NOPS; ++k) CHECK(issue(colls[k], in[k], out[k], 4099, comm, k == 0 ? NULL : &cfgs[k]) == ncclSuccess, "group op %d", k);
  CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd (mixed group)");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
  for (int k = 0; k < NOPS; ++k) verify(colls[k], out[k], 4099, 100 + k, "mixed group");

  // Two launch-completion events on one communicator in one group: ncclInvalidUsage at the end.
  cudaEvent_t ev2;
  CHECK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");
  cfgs[0] = init;
  cfgs[0].launchCompletionEvent = ev;
  cfgs[1] = init;
  cfgs[1].launchCompletionEvent = ev2;
  CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  CHECK(issue(AR, in[0], out[0], 4099, comm, &cfgs[0]) == ncclSuccess, "first event in the group");
  CHECK(issue(AG, in[2], out[2], 4099, comm, &cfgs[1]) == ncclSuccess, "second event in the group");
  ncclResult_t r = ncclGroupEnd();
  CHECK(r == ncclInvalidUsage, "two launch-completion events in a group: %s, expected ncclInvalidUsage", ncclGetErrorString(r));
  // One event per group is fine, and the communicator still works.
  for (int k = 0; k < NOPS; ++k) prepare(colls[k], in[k], out[k], 4099, 200 + k);
  arm(ev);
  CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  for (int k = 0; k < NOPS; ++k) CHECK(issue(colls[k], in[k], out[k], 4099, comm, k == 0 ? &cfgs[0] : NULL) == ncclSuccess, "group op %d", k);
  CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd (one event)");
  completed(ev, "group with one event");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
  for (int k = 0; k < NOPS; ++k) verify(colls[k], out[k], 4099, 200 + k, "group with one event");
  for (int k = 0; k < NOPS; ++k) CHECK(cudaFree(in[k]) == cudaSuccess && cudaFree(out[k]) == cudaSuccess, "cudaFree");
  CHECK(cudaEventDestroy(ev2) == cudaSuccess, "cudaEventDestroy");
}

static void child(int id_w, int id_r) {
  ncclComm_t comm = pair_comm("GPU_COLLCFG_ALARM", id_w, id_r);
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  CHECK(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  CHECK(cudaMalloc((void**)&dsend, MAXN * sizeof(float)) == cudaSuccess, "cudaMalloc");
  CHECK(cudaMalloc((void**)&drecv, MAXN * sizeof(float)) == cudaSuccess, "cudaMalloc");
  host = malloc(MAXN * sizeof(float));
  CHECK(host != NULL, "malloc");
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");

  const ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
  Variant v[] = {
      {"NULL", 1, 0, 0, init},
      {"initialized, userProfilerTag", 0, 0, 0, init},
      {"maxCTAs 1", 0, 0, 0, init},
      {"minCTAs 8, maxCTAs 16", 0, 0, 0, init},
      {"CTAPolicy ZERO", 0, 0, 0, init},
      {"CTAPolicy EFFICIENCY|ZERO, maxCTAs 4", 0, 0, 0, init},
      {"RING_LL", 0, 0, 1, init},
      {"RING_SIMPLE", 0, 0, 1, init},
      {"RING_LL128, CTAPolicy EFFICIENCY", 0, 0, 1, init},
      {"NVLS_SIMPLE, forceAlgSelection 0", 0, 0, 0, init},
      {"launchCompletionEvent", 0, 1, 0, init},
  };
  v[1].cfg.userProfilerTag = 0x1234abcd;
  v[2].cfg.maxCTAs = 1;
  v[3].cfg.minCTAs = 8;
  v[3].cfg.maxCTAs = 16;
  v[4].cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  v[5].cfg.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  v[5].cfg.maxCTAs = 4;
  v[6].cfg.algSelection = "RING_LL";
  v[7].cfg.algSelection = "RING_SIMPLE";
  v[8].cfg.algSelection = "RING_LL128";
  v[8].cfg.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  v[9].cfg.algSelection = "NVLS_SIMPLE";
  v[9].cfg.forceAlgSelection = 0;
  const size_t sizes[] = {SMALL, BIG};
  int salt = 0;
  for (size_t k = 0; k < sizeof v / sizeof v[0]; ++k)
    for (int c = 0; c < NCOLL; ++c)
      for (int z = 0; z < 2; ++z) one_call(comm, &v[k], ev, c, sizes[z], ++salt);
  errors_and_groups(comm, ev);
  CHECK(cudaEventDestroy(ev) == cudaSuccess, "cudaEventDestroy");
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  _exit(0);
}

static int id_pipe[2];

static void run_rank(int r) {
  rank = r;
  child(id_pipe[1], id_pipe[0]);
}

int main(void) {
  if (pipe(id_pipe)) return 2;
  return two_processes("gpu_collcfg", run_rank, "a collective or its launch-completion event never completed",
                       "every nccl*Config collective, 11 configs, 2 sizes, checked element by element; errors and groups as NCCL's");
}
