/* Compile-time check that every function in nccl.h has NCCL 2.32.3's exact C type, for both the
 * ncclX and pncclX names. Any difference in a parameter or return type fails the build.
 * NCCL 2.32.3 declares ncclResetDebugInit only for programs that define NCCL_OS_LINUX. */
#define NCCL_OS_LINUX 1
#include "nccl.h"

#define SAME(fn, type)                                                             \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), #fn);         \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&p##fn), type), "p" #fn)

SAME(ncclMemAlloc, ncclResult_t (*)(void**, size_t));
SAME(ncclMemFree, ncclResult_t (*)(void*));
SAME(ncclGetVersion, ncclResult_t (*)(int*));
SAME(ncclGetUniqueId, ncclResult_t (*)(ncclUniqueId*));
SAME(ncclCommInitRankConfig, ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*));
SAME(ncclCommInitRank, ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int));
SAME(ncclCommInitAll, ncclResult_t (*)(ncclComm_t*, int, const int*));
SAME(ncclCommInitRankScalable, ncclResult_t (*)(ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*));
SAME(ncclCommFinalize, ncclResult_t (*)(ncclComm_t));
SAME(ncclCommDestroy, ncclResult_t (*)(ncclComm_t));
SAME(ncclCommAbort, ncclResult_t (*)(ncclComm_t));
SAME(ncclCommRevoke, ncclResult_t (*)(ncclComm_t, int));
SAME(ncclCommSplit, ncclResult_t (*)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*));
SAME(ncclCommShrink, ncclResult_t (*)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int));
SAME(ncclCommGetUniqueId, ncclResult_t (*)(ncclComm_t, ncclUniqueId*));
SAME(ncclCommGrow, ncclResult_t (*)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*));
SAME(ncclGetErrorString, const char* (*)(ncclResult_t));
SAME(ncclGetLastError, const char* (*)(ncclComm_t));
SAME(ncclResetDebugInit, void (*)(void));
SAME(ncclCommGetAsyncError, ncclResult_t (*)(ncclComm_t, ncclResult_t*));
SAME(ncclCommCount, ncclResult_t (*)(const ncclComm_t, int*));
SAME(ncclCommCuDevice, ncclResult_t (*)(const ncclComm_t, int*));
SAME(ncclCommUserRank, ncclResult_t (*)(const ncclComm_t, int*));
SAME(ncclCommRegister, ncclResult_t (*)(const ncclComm_t, void*, size_t, void**));
SAME(ncclCommDeregister, ncclResult_t (*)(const ncclComm_t, void*));
SAME(ncclCommWindowRegister, ncclResult_t (*)(ncclComm_t, void*, size_t, ncclWindow_t*, int));
SAME(ncclCommWindowDeregister, ncclResult_t (*)(ncclComm_t, ncclWindow_t));
SAME(ncclRedOpCreatePreMulSum, ncclResult_t (*)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t));
SAME(ncclRedOpDestroy, ncclResult_t (*)(ncclRedOp_t, ncclComm_t));
SAME(ncclReduce, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t));
SAME(ncclBcast, ncclResult_t (*)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclBroadcast, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclAllReduce, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t));
SAME(ncclReduceScatter, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t));
SAME(ncclAllGather, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t));
SAME(ncclAlltoAll, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t));
SAME(ncclGather, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclScatter, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclAllReduceConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclBroadcastConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclReduceConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclAllGatherConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclReduceScatterConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclAlltoAllConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclGatherConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclScatterConfig, ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t, const ncclCollConfig_t*));
SAME(ncclSend, ncclResult_t (*)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclRecv, ncclResult_t (*)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
SAME(ncclPutSignal, ncclResult_t (*)(const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t, int, int, unsigned int, ncclComm_t, cudaStream_t));
SAME(ncclSignal, ncclResult_t (*)(int, int, int, unsigned int, ncclComm_t, cudaStream_t));
SAME(ncclWaitSignal, ncclResult_t (*)(int, ncclWaitSignalDesc_t*, ncclComm_t, cudaStream_t));
SAME(ncclGroupStart, ncclResult_t (*)(void));
SAME(ncclGroupEnd, ncclResult_t (*)(void));
SAME(ncclGroupSimulateEnd, ncclResult_t (*)(ncclSimInfo_t*));

SAME(ncclWinGetUserPtr, ncclResult_t (*)(ncclComm_t, ncclWindow_t, void**));

SAME(ncclParamBind, ncclResult_t (*)(ncclParamHandle_t*, const char*));
SAME(ncclParamGetI8, ncclResult_t (*)(ncclParamHandle_t, int8_t*));
SAME(ncclParamGetI16, ncclResult_t (*)(ncclParamHandle_t, int16_t*));
SAME(ncclParamGetI32, ncclResult_t (*)(ncclParamHandle_t, int32_t*));
SAME(ncclParamGetI64, ncclResult_t (*)(ncclParamHandle_t, int64_t*));
SAME(ncclParamGetU8, ncclResult_t (*)(ncclParamHandle_t, uint8_t*));
SAME(ncclParamGetU16, ncclResult_t (*)(ncclParamHandle_t, uint16_t*));
SAME(ncclParamGetU32, ncclResult_t (*)(ncclParamHandle_t, uint32_t*));
SAME(ncclParamGetU64, ncclResult_t (*)(ncclParamHandle_t, uint64_t*));
SAME(ncclParamGetStr, ncclResult_t (*)(ncclParamHandle_t, const char**));
SAME(ncclParamGet, ncclResult_t (*)(ncclParamHandle_t, void*, int, int*));
SAME(ncclParamGetParameter, ncclResult_t (*)(const char*, const char**, int*));
SAME(ncclParamGetAllParameterKeys, ncclResult_t (*)(const char***, int*));
SAME(ncclParamDumpAll, void (*)(void));
SAME(ncclSetEncryption, ncclResult_t (*)(const ncclEncryptionConfig_t*));

int main(void) { return 0; }
