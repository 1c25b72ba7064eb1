/* Prints every ABI fact of nccl.h a caller depends on: sizes and offsets of the public structs,
 * enum values, macros and initializers. Built against oxccl's include/nccl.h and compared with
 * expected/abi_facts.txt, which is this same program's output against NVIDIA NCCL 2.32.3's
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
  OFF(ncclConfig_t, graphUsageMode); OFF(ncclConfig_t, numRmaCtx); OFF(ncclConfig_t, maxP2pPeers);
  OFF(ncclConfig_t, graphStreamOrdering); OFF(ncclConfig_t, launchOrderImplicit); OFF(ncclConfig_t, numRmaSig);
  OFF(ncclConfig_t, rmaEagerInit); OFF(ncclConfig_t, hostCftMode); OFF(ncclConfig_t, nvlsHostMode);
  SZ(ncclConfigExt_t); OFF(ncclConfigExt_t, next); OFF(ncclConfigExt_t, key.vendorId); OFF(ncclConfigExt_t, key.optionId);
  OFF(ncclConfigExt_t, val.i); OFF(ncclConfigExt_t, val.s); OFF(ncclConfigExt_t, val.raw);
  SZ(ncclCollConfig_t); OFF(ncclCollConfig_t, size); OFF(ncclCollConfig_t, magic); OFF(ncclCollConfig_t, version);
  OFF(ncclCollConfig_t, ext); OFF(ncclCollConfig_t, minCTAs); OFF(ncclCollConfig_t, maxCTAs);
  OFF(ncclCollConfig_t, nvlsCTAs); OFF(ncclCollConfig_t, cgaClusterSize); OFF(ncclCollConfig_t, algSelection);
  OFF(ncclCollConfig_t, forceAlgSelection); OFF(ncclCollConfig_t, CTAPolicy); OFF(ncclCollConfig_t, userProfilerTag);
  OFF(ncclCollConfig_t, launchCompletionEvent);
  SZ(ncclWaitSignalDesc_t); OFF(ncclWaitSignalDesc_t, opCnt); OFF(ncclWaitSignalDesc_t, peer);
  OFF(ncclWaitSignalDesc_t, sigIdx); OFF(ncclWaitSignalDesc_t, ctx);
  SZ(ncclEncryptionConfig_t); OFF(ncclEncryptionConfig_t, size); OFF(ncclEncryptionConfig_t, magic);
  OFF(ncclEncryptionConfig_t, version); OFF(ncclEncryptionConfig_t, mode); OFF(ncclEncryptionConfig_t, psk);
  SZ(ncclCommMemStat_t); SZ(ncclHostCftMode_t); SZ(ncclNvlsHostMode_t); SZ(ncclEncryptionMode_t); SZ(ncclParamHandle_t);
  OFF(ncclSimInfo_t, size); OFF(ncclSimInfo_t, magic); OFF(ncclSimInfo_t, version); OFF(ncclSimInfo_t, estimatedTime);
  VAL(NCCL_MAJOR); VAL(NCCL_MINOR); VAL(NCCL_PATCH); VAL(NCCL_VERSION_CODE); VAL(NCCL_VERSION(2, 28, 9));
  VAL(NCCL_VERSION(2, 8, 4)); VAL(NCCL_UNIQUE_ID_BYTES); printf("NCCL_SUFFIX=\"%s\"\n", NCCL_SUFFIX);
  VAL(ncclSuccess); VAL(ncclUnhandledCudaError); VAL(ncclSystemError); VAL(ncclInternalError);
  VAL(ncclInvalidArgument); VAL(ncclInvalidUsage); VAL(ncclRemoteError); VAL(ncclInProgress); VAL(ncclTimeout);
  VAL(ncclNumResults);
  VAL(ncclSum); VAL(ncclProd); VAL(ncclMax); VAL(ncclMin); VAL(ncclAvg); VAL(ncclNumOps); VAL(ncclMaxRedOp);
  VAL(ncclInt8); VAL(ncclChar); VAL(ncclUint8); VAL(ncclInt32); VAL(ncclInt); VAL(ncclUint32); VAL(ncclInt64);
  VAL(ncclUint64); VAL(ncclFloat16); VAL(ncclHalf); VAL(ncclFloat32); VAL(ncclFloat); VAL(ncclFloat64);
  VAL(ncclDouble); VAL(ncclBfloat16); VAL(ncclFloat8e4m3); VAL(ncclFloat8e5m2); VAL(ncclNumTypes);
  VAL(ncclScalarDevice); VAL(ncclScalarHostImmediate);
  VAL(NCCL_CONFIG_UNDEF_INT); VAL(NCCL_SPLIT_NOCOLOR); printf("NCCL_UNDEF_FLOAT=%f\n", (double)NCCL_UNDEF_FLOAT);
  printf("NCCL_COMM_NULL=%p\n", (void*)NCCL_COMM_NULL); printf("NCCL_CONFIG_UNDEF_PTR=%p\n", (void*)NCCL_CONFIG_UNDEF_PTR);
  VAL(NCCL_WIN_DEFAULT); VAL(NCCL_WIN_COLL_SYMMETRIC); VAL(NCCL_WIN_REQUIRED_ALIGNMENT);
  VAL(NCCL_WIN_STRICT_ORDERING); VAL(NCCL_WIN_GIN_ONLY); VAL(NCCL_WIN_CFT_COUNTED); VAL(NCCL_API_MAGIC);
  VAL(ncclHostCftDefault); VAL(ncclHostCftEnable); VAL(ncclHostCftDisable); VAL(ncclHostCftFallback);
  VAL(ncclNvlsHostModeDefault); VAL(ncclNvlsHostModeEnable); VAL(ncclNvlsHostModeDisableTransport);
  VAL(ncclNvlsHostModeDisableSymmetricMultimem); VAL(ncclNvlsHostModeDisable);
  VAL(NCCL_SUSPEND_MEM); VAL(ncclStatGpuMemSuspend); VAL(ncclStatGpuMemSuspended); VAL(ncclStatGpuMemPersist);
  VAL(ncclStatGpuMemTotal); VAL(NCCL_ENCRYPTION_MODE_NONE); VAL(NCCL_ENCRYPTION_MODE_PSK);
  VAL(NCCL_CTA_POLICY_DEFAULT); VAL(NCCL_CTA_POLICY_EFFICIENCY); VAL(NCCL_CTA_POLICY_ZERO);
  VAL(NCCL_SHRINK_DEFAULT); VAL(NCCL_SHRINK_ABORT); VAL(NCCL_REVOKE_DEFAULT);
  {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    VAL(c.size); VAL(c.magic); VAL(c.version); VAL(c.blocking); VAL(c.cgaClusterSize); VAL(c.minCTAs);
    VAL(c.maxCTAs); printf("c.netName=%p\n", (void*)c.netName); VAL(c.splitShare); VAL(c.trafficClass);
    printf("c.commName=%p\n", (void*)c.commName); VAL(c.collnetEnable); VAL(c.CTAPolicy); VAL(c.shrinkShare);
    VAL(c.nvlsCTAs); VAL(c.nChannelsPerNetPeer); VAL(c.nvlinkCentricSched);
    VAL(c.graphUsageMode); VAL(c.numRmaCtx); VAL(c.maxP2pPeers); VAL(c.graphStreamOrdering);
    VAL(c.launchOrderImplicit); VAL(c.numRmaSig); VAL(c.rmaEagerInit); VAL(c.hostCftMode); VAL(c.nvlsHostMode);
  }
  {
    ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER;
    VAL(k.size); VAL(k.magic); VAL(k.version); printf("k.ext=%p\n", (void*)k.ext); VAL(k.minCTAs); VAL(k.maxCTAs);
    VAL(k.nvlsCTAs); VAL(k.cgaClusterSize); printf("k.algSelection=%p\n", (void*)k.algSelection);
    VAL(k.forceAlgSelection); VAL(k.CTAPolicy); VAL(k.userProfilerTag);
    printf("k.launchCompletionEvent=%p\n", (void*)k.launchCompletionEvent);
  }
  {
    ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    VAL(e.size); VAL(e.magic); VAL(e.version); VAL(e.mode); printf("e.psk=%p\n", (void*)e.psk);
  }
  {
    ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
    VAL(s.size); VAL(s.magic); VAL(s.version); printf("s.estimatedTime=%f\n", (double)s.estimatedTime);
  }
  return 0;
}
