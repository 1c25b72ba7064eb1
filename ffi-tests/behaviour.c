/* Runtime behaviour of the C ABI that needs no GPU: versions, error strings, argument errors with
 * NCCL's codes, the last-error text, groups, and init failing cleanly where there is no GPU (on a
 * machine with one, a one-rank communicator is created and destroyed instead). Every pncclX alias
 * is exercised once. Exit status 0 only if every check passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "nccl.h"

static int failures = 0;
#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                         \
    }                                                                     \
  } while (0)
#define EXPECT(call, code) CHECK((call) == (code))

int main(void) {
  int v = 0;
  EXPECT(ncclGetVersion(&v), ncclSuccess);
  /* The header is NCCL 2.32.3's; the library reports the newest NCCL whose whole host API it has. */
  CHECK(v == 23203 && NCCL_VERSION_CODE == 23203);
  EXPECT(pncclGetVersion(&v), ncclSuccess);
  EXPECT(ncclGetVersion(NULL), ncclInvalidArgument);

  CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0);
  CHECK(strcmp(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)") == 0);
  CHECK(strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0);
  CHECK(strcmp(ncclGetErrorString((ncclResult_t)42), "unknown result code") == 0);
  CHECK(strcmp(pncclGetErrorString(ncclInProgress), "NCCL operation in progress") == 0);
  CHECK(strcmp(ncclGetErrorString(ncclTimeout), "timeout") == 0);

  /* An argument error leaves its WARN text for ncclGetLastError. */
  EXPECT(ncclCommCount(NULL, NULL), ncclInvalidArgument);
  CHECK(strlen(ncclGetLastError(NULL)) > 0);

  /* Handles that were never created are rejected, not dereferenced. */
  int n = -1;
  ncclComm_t bogus = (ncclComm_t)(uintptr_t)0xdeadbeef;
  EXPECT(ncclCommCount(bogus, &n), ncclInvalidArgument);
  EXPECT(ncclCommUserRank(bogus, &n), ncclInvalidArgument);
  EXPECT(ncclCommCuDevice(bogus, &n), ncclInvalidArgument);
  ncclResult_t st;
  EXPECT(ncclCommGetAsyncError(bogus, &st), ncclInvalidArgument);
  EXPECT(ncclAllReduce(NULL, NULL, 4, ncclFloat, ncclSum, bogus, 0), ncclInvalidArgument);
  EXPECT(ncclAllReduce(NULL, NULL, 4, ncclFloat, ncclSum, NULL, 0), ncclInvalidArgument);
  EXPECT(ncclRedOpDestroy(ncclSum, bogus), ncclInvalidArgument);

  /* Every operation rejects a NULL or never-created communicator before touching anything. */
  {
    ncclComm_t bad[2] = {NULL, bogus};
    float two = 2.0f;
    ncclRedOp_t op;
    void* handle = NULL;
    char buf[16];
    for (int i = 0; i < 2; i++) {
      ncclComm_t c = bad[i];
      EXPECT(ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, c, 0), ncclInvalidArgument);
      EXPECT(ncclBroadcast(buf, buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclBcast(buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclReduce(buf, buf, 1, ncclFloat, ncclSum, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclAllGather(buf, buf, 1, ncclFloat, c, 0), ncclInvalidArgument);
      EXPECT(ncclReduceScatter(buf, buf, 1, ncclFloat, ncclSum, c, 0), ncclInvalidArgument);
      EXPECT(ncclAlltoAll(buf, buf, 1, ncclFloat, c, 0), ncclInvalidArgument);
      EXPECT(ncclGather(buf, buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclScatter(buf, buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclSend(buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclRecv(buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, c), ncclInvalidArgument);
      EXPECT(ncclCommRegister(c, buf, sizeof buf, &handle), ncclInvalidArgument);
      {
        ncclWindow_t w = NULL;
        EXPECT(ncclCommWindowRegister(c, buf, sizeof buf, &w, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);
        EXPECT(ncclCommWindowDeregister(c, w), ncclInvalidArgument);
      }
      EXPECT(ncclCommGetAsyncError(c, &st), ncclInvalidArgument);
      EXPECT(ncclCommCuDevice(c, &n), ncclInvalidArgument);
      /* Inside a group the error is returned at once and again by ncclGroupEnd. */
      EXPECT(ncclGroupStart(), ncclSuccess);
      EXPECT(ncclSend(buf, 1, ncclFloat, 0, c, 0), ncclInvalidArgument);
      EXPECT(ncclGroupEnd(), ncclInvalidArgument);
    }
  }

  /* Per-collective configs (NCCL 2.32.3): the config is parsed before the communicator is looked
   * at (a bad magic, forceAlgSelection or CTAPolicy is reported even with a NULL comm); values NCCL
   * only ignores, and the algorithm selection, are judged after it. ncclGetLastError tells which
   * check failed. */
  {
    char buf[16];
    const ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
    ncclCollConfig_t cc = init;
#define LAST_HAS(text) CHECK(strstr(ncclGetLastError(NULL), text) != NULL)
    CHECK(init.size == sizeof(ncclCollConfig_t) && init.magic == NCCL_API_MAGIC && init.forceAlgSelection == 1);
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, NULL), ncclInvalidArgument);
    LAST_HAS("comm argument is NULL");
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("comm argument is NULL");
    cc.magic = 1;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("ncclCollConfig_t magic mismatch (got 0x1, expected 0xcafebeef)");
    cc = init;
    cc.forceAlgSelection = 2;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("config->forceAlgSelection=2 is invalid, accepted values are 0 or 1");
    cc.forceAlgSelection = 0;
    cc.CTAPolicy = 4;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("config->CTAPolicy=4 is invalid, accepted values are [1, 3]");
    cc.CTAPolicy = -1;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("config->CTAPolicy=-1 is invalid");
    /* Valid policies, out-of-range counts (ignored by NCCL, with an INFO line) and an unknown
     * algorithm name (judged after the communicator): the communicator's error. */
    cc.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
    cc.maxCTAs = -5;
    cc.minCTAs = 1000;
    cc.nvlsCTAs = -3;
    cc.cgaClusterSize = 99;
    cc.algSelection = "BOGUS";
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("comm argument is NULL");
    /* Only the first `size` bytes are read: 16 covers the magic, not forceAlgSelection; 8 not
     * even the magic. */
    cc = init;
    cc.forceAlgSelection = 7;
    cc.version = 1;
    cc.size = 16;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("comm argument is NULL");
    cc.size = 8;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch (got 0x0");
    cc.size = sizeof cc;
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("forceAlgSelection=7");
    /* Every collective, and its pnccl alias, parses first, count 0 included. */
    cc = init;
    cc.magic = 0;
    EXPECT(ncclAllReduceConfig(buf, buf, 0, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclBroadcastConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclReduceConfig(buf, buf, 1, ncclFloat, ncclSum, 0, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclAllGatherConfig(buf, buf, 1, ncclFloat, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclReduceScatterConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclAlltoAllConfig(buf, buf, 1, ncclFloat, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclGatherConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(ncclScatterConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    EXPECT(pncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclBroadcastConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclReduceConfig(buf, buf, 1, ncclFloat, ncclSum, 0, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclAllGatherConfig(buf, buf, 1, ncclFloat, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclReduceScatterConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclAlltoAllConfig(buf, buf, 1, ncclFloat, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclGatherConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(pncclScatterConfig(buf, buf, 1, ncclFloat, 0, NULL, 0, &cc), ncclInvalidArgument);
    LAST_HAS("magic mismatch");
    /* A config error comes before the call joins the group: the group still ends well (NCCL 2.32.3
     * does the same); a communicator error fails it. */
    EXPECT(ncclGroupStart(), ncclSuccess);
    EXPECT(ncclAllReduceConfig(buf, buf, 1, ncclFloat, ncclSum, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(ncclGroupEnd(), ncclSuccess);
    cc = init;
    EXPECT(ncclGroupStart(), ncclSuccess);
    EXPECT(ncclAllGatherConfig(buf, buf, 1, ncclFloat, NULL, 0, &cc), ncclInvalidArgument);
    EXPECT(ncclGroupEnd(), ncclInvalidArgument);
#undef LAST_HAS
  }

  /* NULL communicators are fine to tear down. */
  EXPECT(ncclCommDestroy(NULL), ncclSuccess);
  EXPECT(ncclCommAbort(NULL), ncclSuccess);
  EXPECT(ncclCommFinalize(NULL), ncclSuccess);
  EXPECT(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT), ncclSuccess);
  EXPECT(ncclCommRevoke(bogus, NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  {
    ncclComm_t child = bogus;
    int excl[2] = {3, 1};
    EXPECT(ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument);
    EXPECT(ncclCommSplit(bogus, NCCL_SPLIT_NOCOLOR, 0, &child, NULL), ncclInvalidArgument);
    EXPECT(ncclCommShrink(bogus, excl, 2, &child, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
    EXPECT(ncclCommShrink(NULL, NULL, 0, &child, NULL, NCCL_SHRINK_ABORT), ncclInvalidArgument);
    /* Grow: an unknown parent, and a joining rank's (comm NULL) argument errors, before any wait. */
    ncclUniqueId gid;
    memset(&gid, 0, sizeof gid);
    EXPECT(ncclCommGetUniqueId(NULL, &gid), ncclInvalidArgument);
    EXPECT(pncclCommGetUniqueId(bogus, &gid), ncclInvalidArgument);
    EXPECT(ncclCommGrow(bogus, 4, NULL, -1, &child, NULL), ncclInvalidArgument);
    EXPECT(ncclCommGrow(NULL, 4, &gid, 2, NULL, NULL), ncclInvalidArgument);
    child = bogus;
    EXPECT(ncclCommGrow(NULL, 4, NULL, 2, &child, NULL), ncclInvalidArgument);
    CHECK(child == NULL);
    EXPECT(ncclCommGrow(NULL, 4, &gid, -1, &child, NULL), ncclInvalidArgument);
    EXPECT(ncclCommGrow(NULL, 4, &gid, 4, &child, NULL), ncclInvalidArgument);
    EXPECT(pncclCommGrow(NULL, 0, &gid, 2, &child, NULL), ncclInvalidArgument);
    /* oxccl refuses an id not made by ncclCommGetUniqueId (NCCL's code would wait on it). */
    EXPECT(ncclCommGrow(NULL, 4, &gid, 2, &child, NULL), ncclInvalidArgument);
  }
  EXPECT(pncclCommDestroy(NULL), ncclSuccess);

  /* Groups: End without Start is invalid usage; an error inside a group is returned by End. */
  EXPECT(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT(ncclAllReduce(NULL, NULL, 4, ncclFloat, ncclSum, bogus, 0), ncclInvalidArgument);
  EXPECT(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT(pncclGroupStart(), ncclSuccess);
  EXPECT(pncclGroupEnd(), ncclSuccess);

  /* Unique ids need no GPU. */
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  int nonzero = 0;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) nonzero |= id.internal[i];
  CHECK(nonzero);
  EXPECT(ncclGetUniqueId(NULL), ncclInvalidArgument);

  /* Init argument errors come before any CUDA work. */
  ncclComm_t comm = NULL;
  EXPECT(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument);
  EXPECT(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  /* On an error *comm is NULL (nccl.h), whatever the caller left there. */
  comm = (ncclComm_t)(uintptr_t)0x1;
  EXPECT(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  CHECK(comm == NULL);
  ncclResult_t r28;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  comm = (ncclComm_t)(uintptr_t)0x1;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
  CHECK(comm == NULL);
  ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
  cfg2.blocking = 7;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg2), ncclInvalidArgument);
  /* A 2.31 field out of its range. */
  ncclConfig_t cfg3 = NCCL_CONFIG_INITIALIZER;
  cfg3.hostCftMode = 9;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg3), ncclInvalidArgument);
  /* A caller built against NCCL 2.28's nccl.h passes an 80-byte struct stamped 22809: its fields
   * are read, and the bytes after it are not (here they hold values that would be rejected). */
  union { ncclConfig_t c; unsigned char b[sizeof(ncclConfig_t)]; } old;
  old.c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  memset(old.b + 80, 0x7f, sizeof(old.b) - 80);
  old.c.size = 80;
  old.c.version = 22809;
  old.c.blocking = 7;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &old.c), ncclInvalidArgument);
  old.c.blocking = 1;
  ncclUniqueId id28; /* a unique id serves one communicator */
  EXPECT(ncclGetUniqueId(&id28), ncclSuccess);
  r28 = ncclCommInitRankConfig(&comm, 1, id28, 0, &old.c);
  CHECK(r28 != ncclInvalidArgument);
  if (r28 == ncclSuccess) EXPECT(ncclCommDestroy(comm), ncclSuccess);
  EXPECT(ncclCommInitAll(NULL, 1, NULL), ncclInvalidArgument);
  EXPECT(ncclCommInitAll(&comm, 0, NULL), ncclInvalidArgument);

  /* A one-rank communicator: created where there is a GPU; a CUDA or system error (never a crash)
   * where there is none. */
  ncclConfig_t ok = NCCL_CONFIG_INITIALIZER;
  ok.nvlinkCentricSched = 1; /* nccl-tests sets it */
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &ok);
  if (r == ncclSuccess) {
    EXPECT(ncclCommCount(comm, &n), ncclSuccess);
    CHECK(n == 1);
    EXPECT(ncclCommUserRank(comm, &n), ncclSuccess);
    CHECK(n == 0);
    EXPECT(ncclCommGetAsyncError(comm, &st), ncclSuccess);
    CHECK(st == ncclSuccess);
    EXPECT(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, 0), ncclSuccess); /* count 0: no-op */
    EXPECT(ncclAllReduce(NULL, NULL, 1, (ncclDataType_t)12, ncclSum, comm, 0), ncclInvalidArgument);
    EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, (ncclRedOp_t)ncclNumOps, comm, 0), ncclInvalidArgument);
    ncclRedOp_t op;
    float two = 2.0f;
    EXPECT(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
    EXPECT(ncclRedOpDestroy(op, comm), ncclSuccess);
    EXPECT(ncclRedOpDestroy(op, comm), ncclInvalidArgument);
    EXPECT(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument);
    /* A user op belongs to the communicator that created it. */
    ncclUniqueId id2;
    ncclComm_t other = NULL;
    EXPECT(ncclGetUniqueId(&id2), ncclSuccess);
    EXPECT(ncclCommInitRank(&other, 1, id2, 0), ncclSuccess);
    EXPECT(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
    EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, op, other, 0), ncclInvalidArgument);
    EXPECT(ncclReduceScatter(NULL, NULL, 1, ncclFloat, op, other, 0), ncclInvalidArgument);
    EXPECT(ncclRedOpDestroy(op, other), ncclInvalidArgument);
    EXPECT(ncclAllReduce(NULL, NULL, 1, ncclHalf, op, comm, 0), ncclInvalidArgument); /* created for float */
    EXPECT(ncclRedOpDestroy(op, comm), ncclSuccess);
    EXPECT(ncclCommDestroy(other), ncclSuccess);
    /* A destroyed communicator is rejected by every kind of call, not dereferenced. */
    EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, other, 0), ncclInvalidArgument);
    EXPECT(ncclSend(NULL, 1, ncclFloat, 0, other, 0), ncclInvalidArgument);
    EXPECT(ncclCommGetAsyncError(other, &st), ncclInvalidArgument);
    EXPECT(ncclCommDestroy(other), ncclInvalidArgument);
    EXPECT(ncclCommAbort(other), ncclInvalidArgument);
    EXPECT(ncclCommFinalize(comm), ncclSuccess);
    EXPECT(ncclCommFinalize(comm), ncclInvalidArgument);
    EXPECT(ncclCommDestroy(comm), ncclSuccess);
    EXPECT(ncclCommCount(comm, &n), ncclInvalidArgument); /* destroyed */
    printf("behaviour: GPU present, one-rank communicator checked\n");
  } else {
    CHECK(r == ncclSystemError || r == ncclUnhandledCudaError);
    CHECK(comm == NULL);
    void* p = NULL;
    r = ncclMemAlloc(&p, 1024);
    CHECK(r == ncclSystemError || r == ncclUnhandledCudaError);
    EXPECT(ncclMemAlloc(NULL, 1024), ncclInvalidArgument);
    printf("behaviour: no GPU, init failed cleanly with %d (%s)\n", (int)r, ncclGetErrorString(r));
  }

  if (failures) {
    fprintf(stderr, "behaviour: %d check(s) failed\n", failures);
    return 1;
  }
  printf("behaviour: all checks passed\n");
  return 0;
}
