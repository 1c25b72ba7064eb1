/* Prints every ABI fact of nccl.h a caller depends on: sizes and offsets of the public structs,
 * enum values, macros and initializers. Built against oxccl's include/nccl.h and compared with
 * expected/abi_facts.txt, which is this same program's output against NVIDIA NCCL 2.28.9's
 * nccl.h (see expected/README.md). Compiled as C and as C++. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "nccl.h"

#define SZ(t) printf("sizeof(%s)=%zu\n", #t, sizeof(t))
#define OFF(t, f) printf("offsetof(%s,%s)=%zu\n", #t, #f, offsetof(t, f))
#define VAL(x) printf("%s=%lld\n", #x, (long long)(x))

int main(void) {
  SZ(ncclUniqueId); SZ(ncclConfig_t); SZ(ncclSimInfo_t); SZ(ncclResult_t); SZ(ncclDataType_t);
  SZ(ncclRedOp_t); SZ(ncclScalarResidence_t); SZ(ncclComm_t); SZ(ncclWindow_t);
  OFF(ncclConfig_t, size); OFF(ncclConfig_t, magic); OFF(ncclConfig_t, version); OFF(ncclConfig_t, blocking);
  OFF(ncclConfig_t, cgaClusterSize); OFF(ncclConfig_t, minCTAs); OFF(ncclConfig_t, maxCTAs); OFF(ncclConfig_t, netName);
  OFF(ncclConfig_t, splitShare); OFF(ncclConfig_t, trafficClass); OFF(ncclConfig_t, commName);
  OFF(ncclConfig_t, collnetEnable); OFF(ncclConfig_t, CTAPolicy); OFF(ncclConfig_t, shrinkShare);
  OFF(ncclConfig_t, nvlsCTAs); OFF(ncclConfig_t, nChannelsPerNetPeer); OFF(ncclConfig_t, nvlinkCentricSched);
  OFF(ncclSimInfo_t, size); OFF(ncclSimInfo_t, magic); OFF(ncclSimInfo_t, version); OFF(ncclSimInfo_t, estimatedTime);
  VAL(NCCL_MAJOR); VAL(NCCL_MINOR); VAL(NCCL_PATCH); VAL(NCCL_VERSION_CODE); VAL(NCCL_VERSION(2, 28, 9));
  VAL(NCCL_VERSION(2, 8, 4)); VAL(NCCL_UNIQUE_ID_BYTES); printf("NCCL_SUFFIX=\"%s\"\n", NCCL_SUFFIX);
  VAL(ncclSuccess); VAL(ncclUnhandledCudaError); VAL(ncclSystemError); VAL(ncclInternalError);
  VAL(ncclInvalidArgument); VAL(ncclInvalidUsage); VAL(ncclRemoteError); VAL(ncclInProgress); VAL(ncclNumResults);
  VAL(ncclSum); VAL(ncclProd); VAL(ncclMax); VAL(ncclMin); VAL(ncclAvg); VAL(ncclNumOps); VAL(ncclMaxRedOp);
  VAL(ncclInt8); VAL(ncclChar); VAL(ncclUint8); VAL(ncclInt32); VAL(ncclInt); VAL(ncclUint32); VAL(ncclInt64);
  VAL(ncclUint64); VAL(ncclFloat16); VAL(ncclHalf); VAL(ncclFloat32); VAL(ncclFloat); VAL(ncclFloat64);
  VAL(ncclDouble); VAL(ncclBfloat16); VAL(ncclFloat8e4m3); VAL(ncclFloat8e5m2); VAL(ncclNumTypes);
  VAL(ncclScalarDevice); VAL(ncclScalarHostImmediate);
  VAL(NCCL_CONFIG_UNDEF_INT); VAL(NCCL_SPLIT_NOCOLOR); printf("NCCL_UNDEF_FLOAT=%f\n", (double)NCCL_UNDEF_FLOAT);
  printf("NCCL_COMM_NULL=%p\n", (void*)NCCL_COMM_NULL); printf("NCCL_CONFIG_UNDEF_PTR=%p\n", (void*)NCCL_CONFIG_UNDEF_PTR);
  VAL(NCCL_WIN_DEFAULT); VAL(NCCL_WIN_COLL_SYMMETRIC); VAL(NCCL_WIN_REQUIRED_ALIGNMENT);
  VAL(NCCL_CTA_POLICY_DEFAULT); VAL(NCCL_CTA_POLICY_EFFICIENCY); VAL(NCCL_CTA_POLICY_ZERO);
  VAL(NCCL_SHRINK_DEFAULT); VAL(NCCL_SHRINK_ABORT); VAL(NCCL_REVOKE_DEFAULT);
  {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    VAL(c.size); VAL(c.magic); VAL(c.version); VAL(c.blocking); VAL(c.cgaClusterSize); VAL(c.minCTAs);
    VAL(c.maxCTAs); printf("c.netName=%p\n", (void*)c.netName); VAL(c.splitShare); VAL(c.trafficClass);
    printf("c.commName=%p\n", (void*)c.commName); VAL(c.collnetEnable); VAL(c.CTAPolicy); VAL(c.shrinkShare);
    VAL(c.nvlsCTAs); VAL(c.nChannelsPerNetPeer); VAL(c.nvlinkCentricSched);
  }
  {
    ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
    VAL(s.size); VAL(s.magic); VAL(s.version); printf("s.estimatedTime=%f\n", (double)s.estimatedTime);
  }
  return 0;
}
