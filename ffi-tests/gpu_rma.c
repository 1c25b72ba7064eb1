/* One-sided operations of NCCL 2.29+ (ncclPutSignal, ncclSignal, ncclWaitSignal) on a 2-rank
 * communicator in two processes, numRmaCtx 2 and numRmaSig 3. Each rank registers two symmetric
 * windows (ncclMemAlloc): SRC, which it puts from, and DST, which the peer puts into.
 *   1. rank 0 puts five pieces (1 byte to 2 MiB + 8, odd offsets, one of 0 bytes: a signal
 *      alone) and an ncclSignal into rank 1's DST, in a group, on two (ctx, sigIdx) pairs and
 *      two more signal-only ones, 300 ms after rank 1 enqueued its wait and the copy of DST
 *      behind it: rank 1 checks every byte of DST (the pieces, zeros elsewhere), so a wait that
 *      let go early shows as zeros;
 *   2. the other direction, the calls outside a group, the wait naming one counter twice;
 *   3. rank 0's puts and rank 1's wait captured in CUDA graphs and replayed 3 times, the source
 *      changed between replays; rank 1's graph copies DST, zeroes it and signals rank 0 back,
 *      whose graph waits for that first (a credit primed eagerly, taken back eagerly at the end:
 *      eager and captured calls share the counts). Every replay's bytes are checked;
 *   4. every argument error gets NCCL's code, and an error inside a group is End's.
 * Runs against oxccl (NCCL 2.28.9 has none of these functions). Exit 77 without 2 GPUs, unless
 * TWO_PROCS_ONE_GPU=1. GPU_RMA_STRICT=1 adds oxccl's own checks (descriptor peer range, unknown
 * window handle, a window without symmetric memory). GPU_RMA_CAPTURE=thread captures in
 * thread-local mode (default: global, as PyTorch captures). */
#include <stdint.h>
#include <string.h>
#include "two_procs.h"

#define WIN (8u << 20)
#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))
#define IS(call, code) CHECK((call) == (code), "%s is not %s", #call, #code)
#define CU(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(call))

typedef struct {
  ncclDataType_t dt;
  size_t elt, count, src, dst;
  int ctx, sig;
} Piece;

/* Rank 0 -> 1 and 1 -> 0 alike; byte offsets into SRC and DST. */
static const Piece pieces[] = {
    {ncclInt8, 1, 1, 5, 0, 0, 0},
    {ncclUint8, 1, 4097, 100, 8192 + 3, 1, 2},
    {ncclFloat, 4, 262144, 1u << 20, 64u << 10, 0, 0},
    {ncclInt64, 8, 262145, 3u << 20, 4u << 20, 1, 2},
    {ncclFloat, 4, 0, 0, WIN, 1, 1}, /* a signal alone, at the window's end */
};
#define NPIECES (int)(sizeof pieces / sizeof pieces[0])
/* Waits matching the pieces plus one ncclSignal on (ctx 0, sigIdx 2). */
static const ncclWaitSignalDesc_t waits[] = {{2, 0, 0, 0}, {2, 0, 2, 1}, {1, 0, 1, 1}, {1, 0, 2, 0}};

static int fd[2];
static int strict;

static unsigned char pat(int seed, size_t i) { return (unsigned char)(seed * 131 + i * 7 + (i >> 9) * 13 + 1); }

static void fill(unsigned char* host, int seed) {
  for (size_t i = 0; i < WIN; i++) host[i] = pat(seed, i);
}

/* The DST image after `pieces[first..last)` from a SRC of `seed`. */
static void expect(unsigned char* img, int seed, int first, int last) {
  memset(img, 0, WIN);
  for (int p = first; p < last; p++)
    for (size_t b = 0; b < pieces[p].count * pieces[p].elt; b++) img[pieces[p].dst + b] = pat(seed, pieces[p].src + b);
}

static void compare(const unsigned char* got, const unsigned char* want, const char* what) {
  size_t wrong = 0, first = WIN;
  for (size_t i = 0; i < WIN; i++)
    if (got[i] != want[i]) {
      if (!wrong) first = i;
      wrong++;
    }
  CHECK(wrong == 0, "%s: %zu bytes wrong, the first at %zu (got %u, want %u)", what, wrong, first, first < WIN ? (unsigned)got[first] : 0u,
        first < WIN ? (unsigned)want[first] : 0u);
}

static void put_all(ncclComm_t comm, unsigned char* src, ncclWindow_t dst, int peer, int first, int last, cudaStream_t s) {
  for (int p = first; p < last; p++)
    OK(ncclPutSignal(src + pieces[p].src, pieces[p].count, pieces[p].dt, peer, dst, pieces[p].dst, pieces[p].sig, pieces[p].ctx, 0,
                     comm, s));
}

static void barrier(ncclComm_t comm, float* one, cudaStream_t s) {
  OK(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, s));
  CU(cudaStreamSynchronize(s));
}

/* One eager round: `sender` puts everything into the other's DST; the other waits and checks. */
static void round_eager(ncclComm_t comm, unsigned char* src, unsigned char* dst, ncclWindow_t dwin, unsigned char* host,
                        unsigned char* img, float* one, cudaStream_t s, int sender, int grouped, int seed) {
  const int peer = 1 - rank;
  if (rank == sender) {
    fill(host, seed);
    CU(cudaMemcpy(src, host, WIN, cudaMemcpyHostToDevice));
  } else {
    CU(cudaMemset(dst, 0, WIN));
  }
  CU(cudaDeviceSynchronize());
  barrier(comm, one, s); /* DST is zero and SRC filled on both sides past here */
  if (rank == sender) {
    usleep(300000); /* the receiver's wait is queued by now, and must hold its copy back */
    if (grouped) OK(ncclGroupStart());
    put_all(comm, src, dwin, peer, 0, NPIECES, s);
    OK(ncclSignal(peer, 2, 0, 0, comm, s));
    if (grouped) OK(ncclGroupEnd());
    CU(cudaStreamSynchronize(s));
  } else {
    ncclWaitSignalDesc_t d[5];
    int n = 0;
    for (int i = 0; i < 4; i++) {
      d[n] = waits[i];
      d[n++].peer = peer;
    }
    if (!grouped) { /* the same counts, (ctx 0, sigIdx 0) named twice */
      d[0].opCnt = 1;
      d[n++] = d[0];
    }
    OK(ncclWaitSignal(n, d, comm, s));
    CU(cudaMemcpyAsync(host, dst, WIN, cudaMemcpyDeviceToHost, s));
    cudaError_t q = cudaStreamQuery(s);
    CHECK(q == cudaErrorNotReady, "the stream finished before the peer put anything (%s)", cudaGetErrorString(q));
    CU(cudaStreamSynchronize(s));
    expect(img, seed, 0, NPIECES);
    compare(host, img, grouped ? "rank 0 -> 1, grouped" : "rank 1 -> 0, eager");
  }
}

/* Captured: rank 0 waits for rank 1's credit, puts pieces 1 and 2 and signals (ctx 1, sigIdx 0);
 * rank 1 waits for them, copies DST aside, zeroes DST and gives the credit back. */
static void round_graph(ncclComm_t comm, unsigned char* src, unsigned char* dst, ncclWindow_t dwin, unsigned char* host,
                        unsigned char* img, float* one, cudaStream_t s) {
  const int peer = 1 - rank;
  const char* mode = getenv("GPU_RMA_CAPTURE");
  enum cudaStreamCaptureMode cm = mode && !strcmp(mode, "thread") ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal;
  unsigned char* aside = NULL;
  const ncclWaitSignalDesc_t credit = {1, peer, 1, 0};
  if (rank == 1) {
    CU(cudaMalloc((void**)&aside, WIN));
    CU(cudaMemset(dst, 0, WIN));
    CU(cudaDeviceSynchronize());
  }
  barrier(comm, one, s);
  if (rank == 1) OK(ncclSignal(peer, 1, 0, 0, comm, s)); /* the first credit, eagerly */
  cudaGraph_t g;
  cudaGraphExec_t x;
  CU(cudaStreamBeginCapture(s, cm));
  if (rank == 0) {
    OK(ncclWaitSignal(1, (ncclWaitSignalDesc_t*)&credit, comm, s));
    put_all(comm, src, dwin, peer, 1, 3, s);
    OK(ncclSignal(peer, 0, 1, 0, comm, s));
  } else {
    ncclWaitSignalDesc_t d[3] = {{1, peer, 2, 1}, {1, peer, 0, 0}, {1, peer, 0, 1}};
    OK(ncclWaitSignal(3, d, comm, s));
    CU(cudaMemcpyAsync(aside, dst, WIN, cudaMemcpyDeviceToDevice, s));
    CU(cudaMemsetAsync(dst, 0, WIN, s));
    OK(ncclSignal(peer, 1, 0, 0, comm, s));
  }
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphInstantiate(&x, g, 0));
  for (int k = 0; k < 3; k++) {
    const int seed = 10 + k;
    if (rank == 0) {
      fill(host, seed);
      CU(cudaMemcpy(src, host, WIN, cudaMemcpyHostToDevice)); /* the previous replay's copies are done */
      CU(cudaGraphLaunch(x, s));
      CU(cudaStreamSynchronize(s));
    } else {
      CU(cudaGraphLaunch(x, s));
      CU(cudaStreamSynchronize(s));
      CU(cudaMemcpy(host, aside, WIN, cudaMemcpyDeviceToHost));
      expect(img, seed, 1, 3);
      char what[64];
      snprintf(what, sizeof what, "graph replay %d", k);
      compare(host, img, what);
    }
  }
  if (rank == 0) { /* the last replay's credit, taken eagerly */
    OK(ncclWaitSignal(1, (ncclWaitSignalDesc_t*)&credit, comm, s));
    CU(cudaStreamSynchronize(s));
  }
  CU(cudaGraphExecDestroy(x));
  CU(cudaGraphDestroy(g));
  if (aside) CU(cudaFree(aside));
}

static void errors(ncclComm_t comm, unsigned char* src, ncclWindow_t dwin, float* one, cudaStream_t s) {
  const int peer = 1 - rank;
  ncclWaitSignalDesc_t d = {1, peer, 0, 0}, bad;
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 0, 0, 0, NULL, s), ncclInvalidArgument);
  IS(ncclSignal(peer, 0, 0, 0, NULL, s), ncclInvalidArgument);
  IS(ncclWaitSignal(1, &d, NULL, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclNumTypes, peer, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, (ncclDataType_t)-1, peer, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, 2, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, -1, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 0, 2, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 0, -1, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 3, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, -1, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 0, 0, 1, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 1, ncclInt8, peer, NULL, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(NULL, 1, ncclInt8, peer, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, WIN + 1, ncclInt8, peer, dwin, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclPutSignal(src, 2, ncclFloat, peer, dwin, WIN - 4, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclSignal(2, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclSignal(-1, 0, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclSignal(peer, 3, 0, 0, comm, s), ncclInvalidArgument);
  IS(ncclSignal(peer, 0, 2, 0, comm, s), ncclInvalidArgument);
  IS(ncclSignal(peer, 0, 0, 1, comm, s), ncclInvalidArgument);
  IS(ncclWaitSignal(0, &d, comm, s), ncclInvalidArgument);
  IS(ncclWaitSignal(1, NULL, comm, s), ncclInvalidArgument);
  bad = d, bad.opCnt = 0;
  IS(ncclWaitSignal(1, &bad, comm, s), ncclInvalidArgument);
  bad = d, bad.opCnt = -1;
  IS(ncclWaitSignal(1, &bad, comm, s), ncclInvalidArgument);
  bad = d, bad.sigIdx = 3;
  IS(ncclWaitSignal(1, &bad, comm, s), ncclInvalidArgument);
  bad = d, bad.ctx = 2;
  IS(ncclWaitSignal(1, &bad, comm, s), ncclInvalidArgument);
  IS(pncclSignal(peer, 0, 0, 7, comm, s), ncclInvalidArgument);
  /* Inside a group the error is the call's and End's. */
  OK(ncclGroupStart());
  IS(ncclPutSignal(src, 1, ncclInt8, peer, dwin, 0, 0, 0, 5, comm, s), ncclInvalidArgument);
  IS(ncclGroupEnd(), ncclInvalidArgument);
  if (strict) {
    IS(ncclWaitSignal(-1, &d, comm, s), ncclInvalidArgument);
    bad = d, bad.peer = 2;
    IS(ncclWaitSignal(1, &bad, comm, s), ncclInvalidArgument);
    IS(ncclPutSignal(src, 1, ncclInt8, peer, (ncclWindow_t)(uintptr_t)0x1234, 0, 0, 0, 0, comm, s), ncclInvalidArgument);
    /* A window without symmetric memory (cudaMalloc): registered by both ranks, no puts. */
    void* plain = NULL;
    ncclWindow_t pwin = NULL;
    CU(cudaMalloc(&plain, 1 << 20));
    OK(ncclCommWindowRegister(comm, plain, 1 << 20, &pwin, NCCL_WIN_COLL_SYMMETRIC));
    IS(ncclPutSignal(src, 1, ncclInt8, peer, pwin, 0, 0, 0, 0, comm, s), ncclInvalidUsage);
    barrier(comm, one, s);
    OK(ncclCommWindowDeregister(comm, pwin));
    CU(cudaFree(plain));
  }
  /* Nothing of the refused calls ran: the communicator still works. */
  barrier(comm, one, s);
}

static void child(int r) {
  rank = r;
  strict = getenv("GPU_RMA_STRICT") && atoi(getenv("GPU_RMA_STRICT")) == 1;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.numRmaCtx = 2;
  cfg.numRmaSig = 3;
  ncclComm_t comm = pair_comm_config("GPU_RMA_ALARM", fd[1], fd[0], &cfg);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char *src = NULL, *dst = NULL, *host = NULL, *img = malloc(WIN);
  float* one = NULL;
  OK(ncclMemAlloc((void**)&src, WIN));
  OK(ncclMemAlloc((void**)&dst, WIN));
  CU(cudaMallocHost((void**)&host, WIN));
  CU(cudaMalloc((void**)&one, sizeof(float)));
  CHECK(img != NULL, "malloc");
  ncclWindow_t swin = NULL, dwin = NULL;
  OK(ncclCommWindowRegister(comm, src, WIN, &swin, NCCL_WIN_COLL_SYMMETRIC));
  OK(ncclCommWindowRegister(comm, dst, WIN, &dwin, NCCL_WIN_COLL_SYMMETRIC));

  round_eager(comm, src, dst, dwin, host, img, one, s, 0, 1, 1);
  round_eager(comm, src, dst, dwin, host, img, one, s, 1, 0, 2);
  round_graph(comm, src, dst, dwin, host, img, one, s);
  errors(comm, src, dwin, one, s);

  barrier(comm, one, s); /* the peer is done with our windows */
  OK(ncclCommWindowDeregister(comm, swin));
  OK(ncclCommWindowDeregister(comm, dwin));
  OK(ncclCommDestroy(comm));
  OK(ncclMemFree(src));
  OK(ncclMemFree(dst));
  CU(cudaFreeHost(host));
  CU(cudaFree(one));
  CU(cudaStreamDestroy(s));
  free(img);
  _exit(0);
}

int main(void) {
  if (pipe(fd) != 0) return 2;
  return two_processes("gpu_rma", child, "a one-sided wait, a window registration or a barrier",
                       "puts, signals and waits moved every byte, eager, grouped and in 3 graph replays; argument errors as NCCL's");
}
