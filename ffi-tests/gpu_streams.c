/* Streams and CUDA graphs, through the C ABI: one thread per GPU, one communicator.
 * What NCCL promises and this checks, against NCCL and oxccl alike (ffi-tests/gpu.sh runs both):
 *  1. A group whose operations of one communicator use two streams: the group's work starts after
 *     what each stream held before, and each stream continues only after all of the group's work.
 *     Eager (checked by the data), and captured into one graph from two forked streams (checked by
 *     the data on every replay and by the graph's edges: every kernel comes after both streams'
 *     earlier nodes and before both streams' later nodes, and the kernels are ordered among
 *     themselves, since a communicator's operations never overlap).
 *  2. The same for a group of sends and receives on two streams (the receive on the second),
 *     eager and captured.
 *  3. Two separate calls on two forked streams of one capture: the second's kernels come after the
 *     first's.
 *  4. A group mixing a stream being captured with one that is not: ncclInvalidUsage, from the call
 *     that mixes and from ncclGroupEnd; the communicator works afterwards.
 *  5. A call on a new stream after the stream of the previous call was destroyed.
 *  6. ncclCommDestroy after the stream of the last call was destroyed.
 *  7. Calls alternating between two streams with no synchronization, each reading the previous
 *     one's result: a communicator's operations run in the order they were issued, whatever
 *     their streams (NCCL orders them through its own device stream). Small, mid and large
 *     sizes, so that every kind of AllReduce kernel is followed by one on the other stream.
 * Usage: gpu_streams [NGPUS]   (default: every visible GPU; exit 77 with fewer than 2) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include "nccl.h"

#define COUNT ((size_t)1 << 18) /* floats per buffer: 1 MiB */

static int N;
static ncclUniqueId uid;
static pthread_barrier_t bar;
static atomic_int checks, fails;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    atomic_fetch_add(&checks, 1);                                          \
    if (!(cond)) {                                                         \
      atomic_fetch_add(&fails, 1);                                         \
      fprintf(stderr, "FAIL rank %d line %d (%s): ", rank, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
    }                                                                      \
  } while (0)
#define OK(call) CHECK((call) == ncclSuccess, "%s", ncclGetLastError(NULL))
#define CU(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

/* Rank r's input for tag t: (r+1)*((i+t)%7+1); the sum over n ranks is n(n+1)/2*((i+t)%7+1), exact. */
static float input(int r, int t, size_t i) { return (float)((r + 1) * (int)((i + (size_t)t) % 7 + 1)); }

static void upload(float *dst, int r, int t, cudaStream_t s, float *h) {
  for (size_t i = 0; i < COUNT; i++) h[i] = input(r, t, i);
  cudaMemcpyAsync(dst, h, COUNT * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
}

/* Elements of `d` that differ from the AllReduce sum for tag t (sum) or from rank `from`'s input. */
static size_t wrong(int rank, const float *d, int t, int from, float *h) {
  cudaMemcpy(h, d, COUNT * sizeof(float), cudaMemcpyDeviceToHost);
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) {
    float want = from < 0 ? (float)(N * (N + 1) / 2) * (float)((i + (size_t)t) % 7 + 1) : input(from, t, i);
    if (h[i] != want) bad++;
  }
  (void)rank;
  return bad;
}

/* ---- the graph's structure ---- */
typedef struct {
  size_t n, ne;
  cudaGraphNode_t *nodes, *from, *to;
} Shape;

static int shape_of(cudaGraph_t g, Shape *sh) {
  memset(sh, 0, sizeof *sh);
  if (cudaGraphGetNodes(g, NULL, &sh->n) != cudaSuccess) return -1;
  sh->nodes = calloc(sh->n + 1, sizeof(cudaGraphNode_t));
  if (cudaGraphGetNodes(g, sh->nodes, &sh->n) != cudaSuccess) return -1;
#if CUDART_VERSION >= 13000
  /* Edge data must be asked for: kernels launched with programmatic dependencies have edges
   * with non-default data, and a query without it fails (cudaErrorLossyQuery). */
  if (cudaGraphGetEdges(g, NULL, NULL, NULL, &sh->ne) != cudaSuccess) return -1;
  cudaGraphEdgeData *ed = calloc(sh->ne + 1, sizeof(cudaGraphEdgeData));
  sh->from = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  sh->to = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  cudaError_t e = cudaGraphGetEdges(g, sh->from, sh->to, ed, &sh->ne);
  free(ed);
#elif CUDART_VERSION >= 12030
  if (cudaGraphGetEdges_v2(g, NULL, NULL, NULL, &sh->ne) != cudaSuccess) return -1;
  cudaGraphEdgeData *ed = calloc(sh->ne + 1, sizeof(cudaGraphEdgeData));
  sh->from = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  sh->to = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  cudaError_t e = cudaGraphGetEdges_v2(g, sh->from, sh->to, ed, &sh->ne);
  free(ed);
#else
  if (cudaGraphGetEdges(g, NULL, NULL, &sh->ne) != cudaSuccess) return -1;
  sh->from = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  sh->to = calloc(sh->ne + 1, sizeof(cudaGraphNode_t));
  cudaError_t e = cudaGraphGetEdges(g, sh->from, sh->to, &sh->ne);
#endif
  return e == cudaSuccess ? 0 : -1;
}

static void shape_free(Shape *sh) {
  free(sh->nodes);
  free(sh->from);
  free(sh->to);
}

/* Whether a path of edges leads from a to b (a != b). */
static int reaches(const Shape *sh, cudaGraphNode_t a, cudaGraphNode_t b) {
  cudaGraphNode_t *todo = calloc(sh->n + 1, sizeof(cudaGraphNode_t));
  char *seen = calloc(sh->n + 1, 1);
  size_t top = 0;
  int found = 0;
  todo[top++] = a;
  while (top && !found) {
    cudaGraphNode_t x = todo[--top];
    for (size_t e = 0; e < sh->ne; e++) {
      if (sh->from[e] != x) continue;
      if (sh->to[e] == b) {
        found = 1;
        break;
      }
      for (size_t k = 0; k < sh->n; k++)
        if (sh->nodes[k] == sh->to[e] && !seen[k]) {
          seen[k] = 1;
          todo[top++] = sh->to[e];
        }
    }
  }
  free(todo);
  free(seen);
  return found;
}

/* The memcpy or memset node writing to `dst` (the test's own nodes), or NULL. */
static cudaGraphNode_t writer(const Shape *sh, const void *dst) {
  for (size_t k = 0; k < sh->n; k++) {
    enum cudaGraphNodeType t;
    if (cudaGraphNodeGetType(sh->nodes[k], &t) != cudaSuccess) continue;
    if (t == cudaGraphNodeTypeMemcpy) {
      struct cudaMemcpy3DParms p;
      memset(&p, 0, sizeof p);
      if (cudaGraphMemcpyNodeGetParams(sh->nodes[k], &p) == cudaSuccess && p.dstPtr.ptr == dst) return sh->nodes[k];
    } else if (t == cudaGraphNodeTypeMemset) {
      struct cudaMemsetParams p;
      memset(&p, 0, sizeof p);
      if (cudaGraphMemsetNodeGetParams(sh->nodes[k], &p) == cudaSuccess && p.dst == dst) return sh->nodes[k];
    }
  }
  return NULL;
}

/* Checks that every kernel node comes after each of `before` and before each of `after`, and that
 * the kernels are totally ordered. Returns the number of kernel nodes. */
static int check_order(int rank, const char *what, cudaGraph_t g, const void *const *before, int nb, const void *const *after, int na) {
  Shape sh;
  CHECK(shape_of(g, &sh) == 0, "%s: graph query failed", what);
  cudaGraphNode_t b[4], a[4];
  for (int i = 0; i < nb; i++) {
    b[i] = writer(&sh, before[i]);
    CHECK(b[i] != NULL, "%s: the test's node %d before the group is missing", what, i);
  }
  for (int i = 0; i < na; i++) {
    a[i] = writer(&sh, after[i]);
    CHECK(a[i] != NULL, "%s: the test's node %d after the group is missing", what, i);
  }
  int kernels = 0;
  for (size_t k = 0; k < sh.n; k++) {
    enum cudaGraphNodeType t;
    if (cudaGraphNodeGetType(sh.nodes[k], &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) continue;
    kernels++;
    for (int i = 0; i < nb; i++)
      if (b[i]) CHECK(reaches(&sh, b[i], sh.nodes[k]), "%s: a kernel does not wait for node %d of the streams' earlier work", what, i);
    for (int i = 0; i < na; i++)
      if (a[i]) CHECK(reaches(&sh, sh.nodes[k], a[i]), "%s: node %d of the streams' later work does not wait for a kernel", what, i);
    for (size_t j = 0; j < k; j++) {
      enum cudaGraphNodeType u;
      if (cudaGraphNodeGetType(sh.nodes[j], &u) != cudaSuccess || u != cudaGraphNodeTypeKernel) continue;
      CHECK(reaches(&sh, sh.nodes[j], sh.nodes[k]) || reaches(&sh, sh.nodes[k], sh.nodes[j]), "%s: two of the communicator's kernels are unordered", what);
    }
  }
  CHECK(kernels > 0, "%s: no kernel in the graph", what);
  shape_free(&sh);
  return kernels;
}

/* s1 joins s0's capture (fork), or s0 waits for s1 (join). */
static void fork_join(int rank, cudaStream_t from, cudaStream_t into) {
  cudaEvent_t e;
  CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CU(cudaEventRecord(e, from));
  CU(cudaStreamWaitEvent(into, e, 0));
  cudaEventDestroy(e);
}

static void *rank_main(void *arg) {
  int rank = (int)(long)arg;
  int next = (rank + 1) % N, prev = (rank + N - 1) % N;
  cudaSetDevice(rank);
  cudaStream_t s0, s1;
  cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  float *a, *b, *sa, *sb, *ca, *cb, *h = malloc(COUNT * sizeof(float));
  float **all[] = {&a, &b, &sa, &sb, &ca, &cb};
  for (int i = 0; i < 6; i++) CU(cudaMalloc((void **)all[i], COUNT * sizeof(float)));
  const size_t bytes = COUNT * sizeof(float);
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, N, uid, rank));

  /* 1a. Eager: one group, AllReduce of a on s0 and of b on s1; afterwards each stream copies the
   * other's result. */
  upload(a, rank, 1, s0, h);
  upload(b, rank, 2, s1, h);
  OK(ncclGroupStart());
  OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, s0));
  OK(ncclAllReduce(b, b, COUNT, ncclFloat, ncclSum, c, s1));
  OK(ncclGroupEnd());
  CU(cudaMemcpyAsync(ca, a, bytes, cudaMemcpyDeviceToDevice, s1));
  CU(cudaMemcpyAsync(cb, b, bytes, cudaMemcpyDeviceToDevice, s0));
  CU(cudaStreamSynchronize(s0));
  CU(cudaStreamSynchronize(s1));
  CHECK(wrong(rank, ca, 1, -1, h) == 0, "eager two-stream group: s1's copy of s0's result is wrong");
  CHECK(wrong(rank, cb, 2, -1, h) == 0, "eager two-stream group: s0's copy of s1's result is wrong");
  pthread_barrier_wait(&bar);

  /* 1b. The same captured: s0 stages sa into a, s1 stages sb into b, the group, cross copies. */
  {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CU(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    fork_join(rank, s0, s1);
    CU(cudaMemcpyAsync(a, sa, bytes, cudaMemcpyDeviceToDevice, s0));
    CU(cudaMemcpyAsync(b, sb, bytes, cudaMemcpyDeviceToDevice, s1));
    OK(ncclGroupStart());
    OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, s0));
    OK(ncclAllReduce(b, b, COUNT, ncclFloat, ncclSum, c, s1));
    OK(ncclGroupEnd());
    CU(cudaMemcpyAsync(ca, a, bytes, cudaMemcpyDeviceToDevice, s1));
    CU(cudaMemcpyAsync(cb, b, bytes, cudaMemcpyDeviceToDevice, s0));
    fork_join(rank, s1, s0);
    CU(cudaStreamEndCapture(s0, &g));
    if (g) {
      const void *before[] = {a, b}, *after[] = {ca, cb};
      check_order(rank, "captured two-stream group", g, before, 2, after, 2);
      CU(cudaGraphInstantiate(&x, g, 0));
    }
    for (int rep = 0; x && rep < 3; rep++) {
      upload(sa, rank, 10 + rep, s0, h);
      upload(sb, rank, 20 + rep, s0, h);
      pthread_barrier_wait(&bar);
      CU(cudaGraphLaunch(x, s0));
      CU(cudaStreamSynchronize(s0));
      CHECK(wrong(rank, ca, 10 + rep, -1, h) == 0, "captured two-stream group, replay %d: s1's copy of s0's result", rep);
      CHECK(wrong(rank, cb, 20 + rep, -1, h) == 0, "captured two-stream group, replay %d: s0's copy of s1's result", rep);
    }
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
  }
  pthread_barrier_wait(&bar);

  /* 2a. Send on s0 to the next rank, receive on s1 from the previous one, one group, eager; s0
   * copies the received b afterwards. (Also NCCL's first use of these peers: it connects them
   * then, which it cannot do while capturing.) */
  upload(a, rank, 6, s0, h);
  CU(cudaMemsetAsync(b, 0xff, bytes, s1));
  CU(cudaStreamSynchronize(s1));
  OK(ncclGroupStart());
  OK(ncclSend(a, COUNT, ncclFloat, next, c, s0));
  OK(ncclRecv(b, COUNT, ncclFloat, prev, c, s1));
  OK(ncclGroupEnd());
  CU(cudaMemcpyAsync(cb, b, bytes, cudaMemcpyDeviceToDevice, s0));
  CU(cudaStreamSynchronize(s0));
  CU(cudaStreamSynchronize(s1));
  CHECK(wrong(rank, cb, 6, prev, h) == 0, "eager send/receive on two streams: s0's copy of what s1 received");
  pthread_barrier_wait(&bar);

  /* 2b. The same captured: s1 clears b first; s0 copies the received b afterwards. */
  {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CU(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    fork_join(rank, s0, s1);
    CU(cudaMemcpyAsync(a, sa, bytes, cudaMemcpyDeviceToDevice, s0));
    CU(cudaMemsetAsync(b, 0xff, bytes, s1));
    OK(ncclGroupStart());
    OK(ncclSend(a, COUNT, ncclFloat, next, c, s0));
    OK(ncclRecv(b, COUNT, ncclFloat, prev, c, s1));
    OK(ncclGroupEnd());
    CU(cudaMemcpyAsync(cb, b, bytes, cudaMemcpyDeviceToDevice, s0));
    fork_join(rank, s1, s0);
    CU(cudaStreamEndCapture(s0, &g));
    if (g) {
      const void *before[] = {a, b}, *after[] = {cb};
      check_order(rank, "captured send/receive on two streams", g, before, 2, after, 1);
      CU(cudaGraphInstantiate(&x, g, 0));
    }
    for (int rep = 0; x && rep < 3; rep++) {
      upload(sa, rank, 30 + rep, s0, h);
      pthread_barrier_wait(&bar);
      CU(cudaGraphLaunch(x, s0));
      CU(cudaStreamSynchronize(s0));
      CHECK(wrong(rank, cb, 30 + rep, prev, h) == 0, "captured send/receive, replay %d: received data", rep);
    }
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
  }
  pthread_barrier_wait(&bar);

  /* 3. Two separate calls (no group) on two forked streams of one capture. */
  {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CU(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    fork_join(rank, s0, s1);
    CU(cudaMemcpyAsync(a, sa, bytes, cudaMemcpyDeviceToDevice, s0));
    CU(cudaMemcpyAsync(b, sb, bytes, cudaMemcpyDeviceToDevice, s1));
    OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, s0));
    OK(ncclAllReduce(b, b, COUNT, ncclFloat, ncclSum, c, s1));
    fork_join(rank, s1, s0);
    CU(cudaMemcpyAsync(ca, a, bytes, cudaMemcpyDeviceToDevice, s0));
    CU(cudaMemcpyAsync(cb, b, bytes, cudaMemcpyDeviceToDevice, s0));
    CU(cudaStreamEndCapture(s0, &g));
    if (g) {
      /* The later call comes after the earlier one (a communicator's operations never overlap);
       * neither waits for the other stream's earlier work, so only the join orders the copies. */
      const void *after[] = {ca, cb};
      check_order(rank, "two captured calls on forked streams", g, NULL, 0, after, 2);
      CU(cudaGraphInstantiate(&x, g, 0));
    }
    for (int rep = 0; x && rep < 2; rep++) {
      upload(sa, rank, 40 + rep, s0, h);
      upload(sb, rank, 50 + rep, s0, h);
      pthread_barrier_wait(&bar);
      CU(cudaGraphLaunch(x, s0));
      CU(cudaStreamSynchronize(s0));
      CHECK(wrong(rank, ca, 40 + rep, -1, h) == 0, "two captured calls, replay %d: first result", rep);
      CHECK(wrong(rank, cb, 50 + rep, -1, h) == 0, "two captured calls, replay %d: second result", rep);
    }
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
  }
  pthread_barrier_wait(&bar);

  /* 4. A group mixing a captured stream with one that is not, in both orders. */
  for (int captured_first = 0; captured_first < 2; captured_first++) {
    cudaGraph_t g = NULL;
    CU(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    cudaStream_t first = captured_first ? s0 : s1, second = captured_first ? s1 : s0;
    OK(ncclGroupStart());
    ncclResult_t r1 = ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, first);
    ncclResult_t r2 = ncclAllReduce(b, b, COUNT, ncclFloat, ncclSum, c, second);
    ncclResult_t re = ncclGroupEnd();
    CHECK(r1 == ncclSuccess, "mixed capture (captured first %d): first call -> %d", captured_first, (int)r1);
    CHECK(r2 == ncclInvalidUsage, "mixed capture (captured first %d): the mixing call -> %d, expected ncclInvalidUsage", captured_first, (int)r2);
    CHECK(re == ncclInvalidUsage, "mixed capture (captured first %d): ncclGroupEnd -> %d, expected ncclInvalidUsage", captured_first, (int)re);
    CU(cudaStreamEndCapture(s0, &g));
    if (g) {
      size_t n = 0;
      cudaGraphGetNodes(g, NULL, &n);
      CHECK(n == 0, "mixed capture (captured first %d): the refused group left %zu node(s) in the graph", captured_first, n);
      cudaGraphDestroy(g);
    }
  }
  pthread_barrier_wait(&bar);
  upload(a, rank, 3, s0, h);
  OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, s0));
  CU(cudaStreamSynchronize(s0));
  CHECK(wrong(rank, a, 3, -1, h) == 0, "AllReduce after the refused groups");
  pthread_barrier_wait(&bar);

  /* 5. The previous call's stream is destroyed before the next call on another stream. */
#ifndef GPU_STREAMS_SKIP_5
  {
    cudaStream_t t;
    CU(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    upload(a, rank, 4, t, h);
    OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, t));
    CU(cudaStreamDestroy(t)); /* the AllReduce may still be running: the stream goes when it ends */
    upload(b, rank, 5, s1, h);
    OK(ncclAllReduce(b, b, COUNT, ncclFloat, ncclSum, c, s1));
    CU(cudaStreamSynchronize(s1));
    CU(cudaDeviceSynchronize());
    CHECK(wrong(rank, a, 4, -1, h) == 0, "AllReduce on the destroyed stream");
    CHECK(wrong(rank, b, 5, -1, h) == 0, "AllReduce after the previous stream was destroyed");
  }
#endif
  pthread_barrier_wait(&bar);

  /* 7. Sixteen in-place AllReduces (sum, int64) alternating between s0 and s1, never synchronized:
   * each must start after the previous one ends, on the other stream. Every element ends as its
   * start times N^16. */
  {
    const size_t sizes[] = {8, 4096, bytes / sizeof(long long)};
    long long *v = (long long *)h, *x = (long long *)a;
    for (int z = 0; z < 3; z++) {
      const size_t n = sizes[z];
      for (size_t i = 0; i < n; i++) v[i] = 1 + (long long)(i % 5);
      /* On s0 and waited for: a cudaMemcpy from pageable memory may return before its data lands,
       * and the legacy stream does not order the non-blocking s0. */
      CU(cudaMemcpyAsync(x, v, n * sizeof(long long), cudaMemcpyHostToDevice, s0));
      CU(cudaStreamSynchronize(s0));
      for (int k = 0; k < 16; k++) OK(ncclAllReduce(x, x, n, ncclInt64, ncclSum, c, k % 2 ? s1 : s0));
      CU(cudaStreamSynchronize(s0));
      CU(cudaStreamSynchronize(s1));
      CU(cudaMemcpy(v, x, n * sizeof(long long), cudaMemcpyDeviceToHost));
      long long scale = 1;
      for (int k = 0; k < 16; k++) scale *= N;
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += v[i] != (1 + (long long)(i % 5)) * scale;
      CHECK(bad == 0, "%zu of %zu elements wrong after 16 AllReduces alternating between two streams", bad, n);
    }
  }
  pthread_barrier_wait(&bar);

  /* 6. The last call's stream is destroyed before the communicator. */
  {
    cudaStream_t t;
    CU(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    upload(a, rank, 7, t, h);
    OK(ncclAllReduce(a, a, COUNT, ncclFloat, ncclSum, c, t));
    CU(cudaStreamSynchronize(t));
    CU(cudaStreamDestroy(t));
    CHECK(wrong(rank, a, 7, -1, h) == 0, "AllReduce before its stream and then the communicator are destroyed");
  }
  OK(ncclCommDestroy(c));
  for (int i = 0; i < 6; i++) cudaFree(*all[i]);
  free(h);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
  return NULL;
}

int main(int argc, char **argv) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  N = argc > 1 ? atoi(argv[1]) : ndev;
  if (N > ndev) N = ndev;
  if (N < 2) {
    printf("gpu_streams: needs 2 GPUs, %d visible: skipped\n", ndev);
    return 77;
  }
  alarm(300); /* a hang is a failure, not a stuck job */
  int version = 0;
  ncclGetVersion(&version);
  if (ncclGetUniqueId(&uid) != ncclSuccess) {
    printf("gpu_streams: ncclGetUniqueId failed\n");
    return 1;
  }
  pthread_barrier_init(&bar, NULL, N);
  pthread_t t[64];
  for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, rank_main, (void *)i);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  printf("gpu_streams: %d GPUs, NCCL version %d: %d checks, %d failed\n", N, version, checks, fails);
  return fails == 0 ? 0 : 1;
}
