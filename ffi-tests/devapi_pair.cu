/* NCCL's device API from kernels compiled against NVIDIA's headers of ANY version oxccl serves:
 * build it once against NCCL 2.32.3's include/ (versioned requirements, NCCL 2.32.3's 248-byte
 * ncclDevComm and 96-byte window) and once against NCCL 2.28.9's (unversioned, 200 and 72
 * bytes); the same source checks what each header promises. Two processes, one rank each
 * (two_procs.h; TWO_PROCS_ONE_GPU=1 puts both on GPU 0, so one GPU is enough). Each rank:
 *   1. registers an ncclMemAlloc buffer as a symmetric window (2.32: with
 *      NCCL_WIN_STRICT_ORDERING too) and reads back its device descriptor (2.32: winFlags,
 *      cftFlatRank 0, ucLeIdBase NCCL_LE_ID_INVALID);
 *   2. creates a device communicator (2.32: NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER) with LSA
 *      barriers and a resource buffer, and checks its fields (2.30+: magic and version; 2.32:
 *      abort flag, CFT teams of one, no logical endpoints);
 *   3. runs ITERS iterations of a kernel: every block writes its tag into both ranks' windows
 *      (ncclGetLsaPointer) and resource buffers (ncclGetResourceBufferLsaPointer), crosses an
 *      LSA barrier (ncclLsaBarrierSession::sync), and checks what the peer wrote through
 *      ncclGetLocalPointer, the caller's own pointer and ncclGetResourceBufferLocalPointer;
 *      ncclFindWindow must find the window from a pointer into it;
 *   4. 2.29+: ncclCommQueryProperties (fields per version); 2.32: ncclTeamCft,
 *      ncclTeamCftMultimem, ncclGetPeerDeviceLeInfo as NCCL 2.32.3 answers without CFT;
 *   5. requests oxccl (and NCCL without NVLS/GIN/CFT) refuses, with NCCL's codes;
 *   6. destroys the device communicator, the window, the communicator.
 * Build: nvcc -std=c++17 -O2 -arch=sm_90 -DNCCL_GIN_GDAKI_ENABLE=0 -I<NCCL include> -Iffi-tests
 *        ffi-tests/devapi_pair.cu -L<dir with libnccl.so> -lnccl -o devapi_pair
 * Exit 0 pass, 77 fewer than 2 GPUs (without TWO_PROCS_ONE_GPU=1), 1 fail. DEVAPI_ALARM: seconds
 * before a stalled rank is killed (default 120). DEVAPI_PAIR_STRICT=1 adds oxccl's own checks
 * (the 2.32 ncclDevComm's abort flag is set; NCCL 2.32.3 sets it only for its own kernels). */
#include <cstddef>
#include <cstring>
#include "nccl.h"
#include "nccl_device.h"
#include "two_procs.h"

constexpr int BLOCKS = 4, THREADS = 128, ITERS = 20, NR = 2;
#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))
#define IS(call, code) CHECK((call) == (code), "%s is not %s (%s)", #call, #code, ncclGetLastError(NULL))
#define CU(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

// The layouts the kernels compile against; oxccl's src/symmem/abi*.rs pin the same numbers.
#if NCCL_VERSION_CODE >= 23100
static_assert(sizeof(ncclDevComm) == 248 && offsetof(ncclDevComm, lsaBarrier) == 80 && offsetof(ncclDevComm, abortFlag) == 168 &&
                offsetof(ncclDevComm, ucLeId) == 224,
              "NCCL 2.32 ncclDevComm layout");
static_assert(sizeof(ncclWindow_vidmem) == 96 && offsetof(ncclWindow_vidmem, winFlags) == 36 && offsetof(ncclWindow_vidmem, ucLeIdBase) == 88,
              "NCCL 2.32 ncclWindow_vidmem layout");
static_assert(sizeof(ncclDevCommRequirements) == 120 && sizeof(ncclCommProperties_t) == 152, "NCCL 2.32 requirements/properties");
#elif NCCL_VERSION_CODE < 22902
static_assert(sizeof(ncclDevComm) == 200 && offsetof(ncclDevComm, lsaBarrier) == 120, "NCCL 2.28 ncclDevComm layout");
static_assert(sizeof(ncclWindow_vidmem) == 72 && offsetof(ncclWindow_vidmem, stride4G) == 24, "NCCL 2.28 ncclWindow_vidmem layout");
#endif

#include "devapi_exchange.cuh"

// Rank 0 sends the unique id to rank 1 through it (made by main before the fork).
static int pipe_fds[2];

static void child(int r) {
  rank = r;
  const bool strict = getenv("DEVAPI_PAIR_STRICT") && atoi(getenv("DEVAPI_PAIR_STRICT")) == 1;
  (void)strict;
  ncclComm_t comm = pair_comm("DEVAPI_ALARM", pipe_fds[1], pipe_fds[0]);
  const size_t bytes = (size_t)NR * BLOCKS * THREADS * sizeof(int);
  int* buf = nullptr;
  OK(ncclMemAlloc((void**)&buf, bytes));
#if NCCL_VERSION_CODE >= 23000
  const int flags = NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING;
#else
  const int flags = NCCL_WIN_COLL_SYMMETRIC;
#endif
  ncclWindow_t win = nullptr;
  OK(ncclCommWindowRegister(comm, buf, bytes, &win, flags));
  CHECK(win != nullptr, "no window");
  {
    // The descriptor a kernel reads (device memory).
    ncclWindow_vidmem w;
    memset(&w, 0xcd, sizeof w);
    CU(cudaMemcpy(&w, (void*)win, sizeof w, cudaMemcpyDeviceToHost));
    CHECK(w.lsaRank == rank && w.worldRank == rank && w.stride4G > 0 && w.lsaFlatBase != nullptr, "window: lsaRank %d worldRank %d", w.lsaRank, w.worldRank);
#if NCCL_VERSION_CODE >= 23100
    CHECK(w.winFlags == (uint32_t)flags && w.cftFlatRank == 0 && w.ucLeIdBase == NCCL_LE_ID_INVALID && w.numSegments == 0,
          "window: winFlags %#x cftFlatRank %d ucLeIdBase %#x", w.winFlags, w.cftFlatRank, w.ucLeIdBase);
#endif
  }
  int* errs = nullptr;
  CU(cudaMalloc(&errs, sizeof(int)));
  CU(cudaMemset(errs, 0, sizeof(int)));
  cudaStream_t stream;
  CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Requests refused without NVLS, GIN and CFT (both processes make the same calls: the checks
  // come before anything collective).
  {
#if NCCL_VERSION_CODE >= 22902
    ncclDevCommRequirements mm = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
    ncclDevCommRequirements mm = {};
#endif
    mm.lsaMultimem = true;
    mm.lsaBarrierCount = 1;
    ncclDevComm d;
    ncclResult_t res = ncclDevCommCreate(comm, &mm, &d);
    CHECK(res == ncclInvalidArgument || res == ncclInvalidUsage, "lsaMultimem with NVLS off -> %d", (int)res);
#if NCCL_VERSION_CODE >= 23100
    ncclDevCommRequirements cft = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    cft.cftCaps = NCCL_CFT;
    IS(ncclDevCommCreate(comm, &cft, &d), ncclInvalidArgument);
    ncclDevCommRequirements gin = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    gin.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
    IS(ncclDevCommCreate(comm, &gin, &d), ncclInvalidArgument);
    ncclDevCommRequirements hybrid = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    hybrid.barrierCount = 1;  // hybrid barriers need GIN since 2.29.4
    IS(ncclDevCommCreate(comm, &hybrid, &d), ncclInvalidArgument);
    ncclDevCommRequirements bad = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    bad.magic = 0;
    IS(ncclDevCommCreate(comm, &bad, &d), ncclInvalidUsage);
    ncclDevCommRequirements newer = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    newer.version = NCCL_VERSION_CODE + 1;
    IS(ncclDevCommCreate(comm, &newer, &d), ncclInvalidUsage);
#endif
  }

#if NCCL_VERSION_CODE >= 22902
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements reqs = {};
#endif
  reqs.lsaBarrierCount = BLOCKS;
  ncclDevResourceRequirements res = {};
  res.bufferSize = (size_t)NR * BLOCKS * sizeof(int);
  res.bufferAlign = 16;
  ncclDevResourceHandle handle = 0xdeadbeef;
  res.outBufferHandle = &handle;
  reqs.resourceRequirementsList = &res;
  ncclDevComm dc;
  memset(&dc, 0xcd, sizeof dc);
  OK(ncclDevCommCreate(comm, &reqs, &dc));
  CHECK(dc.rank == rank && dc.nRanks == NR && dc.lsaRank == rank && dc.lsaSize == NR, "devcomm rank %d/%d lsa %d/%d", dc.rank, dc.nRanks, dc.lsaRank, dc.lsaSize);
  CHECK(handle != 0xdeadbeef && dc.lsaBarrier.nBarriers == BLOCKS && dc.resourceWindow != nullptr && dc.windowTable != nullptr, "handle %u, %d barriers",
        handle, dc.lsaBarrier.nBarriers);
  CHECK(dc.lsaMultimem.mcBasePtr == nullptr, "no multicast");
#if NCCL_VERSION_CODE >= 23000
  CHECK(dc.magic == NCCL_API_MAGIC && dc.version == NCCL_VERSION_CODE, "devcomm magic %#x version %u", dc.magic, dc.version);
#endif
#if NCCL_VERSION_CODE >= 23100
  CHECK(dc.cftSize == 1 && dc.cftRank == 0 && dc.cftMultimemSize == 1 && dc.ucLeId == NCCL_LE_ID_INVALID && dc.mcLeId == NCCL_LE_ID_INVALID &&
          dc.ginConnectionCount == 0 && dc.ginContextCount == 0,
        "devcomm: cft %d/%d LE %#x/%#x", dc.cftRank, dc.cftSize, dc.ucLeId, dc.mcLeId);
  // oxccl's own choice (NCCL 2.32.3 leaves it NULL for user device communicators): the LSA
  // barrier polls the communicator's abort flag.
  if (strict) CHECK(dc.abortFlag != nullptr, "devcomm: no abort flag");
#endif

  for (int it = 1; it <= ITERS; it++) {
    exchange<<<BLOCKS, THREADS, 0, stream>>>(win, buf, dc, handle, it, errs);
    CU(cudaGetLastError());
    CU(cudaStreamSynchronize(stream));
    int e = -1;
    CU(cudaMemcpy(&e, errs, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(e == 0, "iteration %d: %d wrong values", it, e);
  }

#if NCCL_VERSION_CODE >= 22902
  {
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    OK(ncclCommQueryProperties(comm, &props));
    CHECK(props.rank == rank && props.nRanks == NR && props.deviceApiSupport && !props.multimemSupport, "properties: rank %d/%d device API %d multimem %d",
          props.rank, props.nRanks, (int)props.deviceApiSupport, (int)props.multimemSupport);
    int dev = -1;
    CU(cudaGetDevice(&dev));
    CHECK(props.cudaDev == dev && props.nvmlDev >= 0, "properties: cudaDev %d (current %d) nvmlDev %d", props.cudaDev, dev, props.nvmlDev);
#if NCCL_VERSION_CODE >= 22905
    CHECK(props.ginType == NCCL_GIN_TYPE_NONE && props.railedGinType == NCCL_GIN_TYPE_NONE && props.nLsaTeams == 1 && props.hostRmaSupport,
          "properties: ginType %d nLsaTeams %d hostRma %d", (int)props.ginType, props.nLsaTeams, (int)props.hostRmaSupport);
#endif
#if NCCL_VERSION_CODE >= 23100
    bool any = false;
    for (int i = 0; i < 64; i++) any |= props.ginSupport[i];
    CHECK(props.ginConnectionType == NCCL_GIN_CONNECTION_NONE && !any && props.devCommRuntimeVersionSize == sizeof(ncclDevComm) && props.ginMinStride == NR,
          "properties: connection %d runtime size %zu ginMinStride %d", (int)props.ginConnectionType, props.devCommRuntimeVersionSize, props.ginMinStride);
    CHECK(!props.cftSupport && !props.cftMulticastSupport && !props.cftCountedSupport, "properties: CFT");
    ncclCommProperties_t bad = NCCL_COMM_PROPERTIES_INITIALIZER;
    bad.magic = 0;
    IS(ncclCommQueryProperties(comm, &bad), ncclInvalidUsage);
    // CFT without CFT: teams of one, every endpoint query refused, nothing written.
    ncclTeam_t flat = ncclTeamCft(comm, NCCL_CFT_TEAM_FLAT), lsa = ncclTeamCft(comm, NCCL_CFT_TEAM_HIER_LSA), mm = ncclTeamCftMultimem(comm);
    CHECK(flat.nRanks == 1 && flat.rank == 0 && flat.stride == 1, "ncclTeamCft flat {%d, %d, %d}", flat.nRanks, flat.rank, flat.stride);
    CHECK(lsa.nRanks == 0 && lsa.rank == 0 && lsa.stride == NR, "ncclTeamCft hier-lsa {%d, %d, %d}", lsa.nRanks, lsa.rank, lsa.stride);
    CHECK(mm.nRanks == 1 && mm.rank == 0 && mm.stride == 1, "ncclTeamCftMultimem {%d, %d, %d}", mm.nRanks, mm.rank, mm.stride);
    ncclCftLeId le = 0x1234;
    size_t leOff = 77;
    IS(ncclGetPeerDeviceLeInfo(win, 0, 1 - rank, &le, &leOff), ncclInvalidArgument);
    IS(ncclGetMultimemDeviceLeInfo(win, 0, &le, &leOff), ncclInvalidArgument);
    IS(ncclGetCftDeviceLeInfo(win, 0, 0, flat, &le, &leOff), ncclInvalidArgument);
    CHECK(le == 0x1234 && leOff == 77, "LE queries wrote %#x %zu", le, leOff);
#endif
  }
#endif

  OK(ncclDevCommDestroy(comm, &dc));
  OK(ncclCommWindowDeregister(comm, win));
  OK(ncclMemFree(buf));
  CU(cudaFree(errs));
  CU(cudaStreamDestroy(stream));
  OK(ncclCommDestroy(comm));
  _exit(0);
}

int main() {
  if (pipe(pipe_fds) != 0) return 2;
  char name[64];
  snprintf(name, sizeof name, "devapi_pair (headers %d)", NCCL_VERSION_CODE);
  return two_processes(name, child, "a device-API call or an LSA barrier in a kernel", "passed");
}
