// Instantiation of typed collective kernels: <prefix>_<type>_<op>(CollArgs) for every datatype
// and op, looked up by name on the host (src/gpu/module.rs).
#pragma once
#include "done.cuh"
#include "pdl.cuh"
#include "reduce.cuh"

// ENTRY runs first: ox_pdl_enter() for every kernel but those that place the PDL wait and
// trigger themselves (the one-shot AllReduce, kernels/colls/allreduce.cu). The body returns to the
// entry point, which publishes a counted launch's completion (done.cuh).
// The arguments are __grid_constant__ (as every kernel's): bodies take their address (a reference to an operation of
// GroupArgs, a pointer to its last transfer), which otherwise copies the whole struct into every
// thread's local memory. The grouped kernel's 1.8 KB stack frame that made was above CUDA's
// default 1 KB stack: its first launch on a GPU grew the context's local memory, about 0.5 GB on
// an H200, and that growth waits for the kernels running there, so one thread driving several
// ranks hung (rank 0's previous kernel waited for rank 1's, not yet launched; oxccl-conform,
// 2 x H200, 2026-11-30).
#define OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, ONAME, OP, ENTRY, ARGS)            \
  extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1)                  \
      PREFIX##_##TNAME##_##ONAME(const __grid_constant__ ARGS args) {              \
    ENTRY;                                                                         \
    FN<T, OP<T>>(args);                                                            \
    ox_done_publish(args.done);                                                    \
  }

#define OX_TYPED_OPS(PREFIX, FN, TNAME, T, ENTRY, ARGS)                  \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, sum, OpSum, ENTRY, ARGS)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, prod, OpProd, ENTRY, ARGS)           \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, max, OpMax, ENTRY, ARGS)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, min, OpMin, ENTRY, ARGS)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, avg, OpAvg, ENTRY, ARGS)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, premulsum, OpPreMulSum, ENTRY, ARGS)

// Which datatypes this translation unit instantiates. The typed kernels are most of the kernels'
// compile time, so build.rs compiles them as several units at once, each defining
// OX_TYPE_IN_UNIT_<k>(x) as x for its share of the 12 datatypes (k in NCCL's ncclDataType_t
// order) and as nothing for the rest. A unit that defines none (a plain nvcc of one file)
// instantiates every datatype.
#ifndef OX_TYPE_UNITS
#define OX_TYPE_IN_UNIT_0(x) x
#define OX_TYPE_IN_UNIT_1(x) x
#define OX_TYPE_IN_UNIT_2(x) x
#define OX_TYPE_IN_UNIT_3(x) x
#define OX_TYPE_IN_UNIT_4(x) x
#define OX_TYPE_IN_UNIT_5(x) x
#define OX_TYPE_IN_UNIT_6(x) x
#define OX_TYPE_IN_UNIT_7(x) x
#define OX_TYPE_IN_UNIT_8(x) x
#define OX_TYPE_IN_UNIT_9(x) x
#define OX_TYPE_IN_UNIT_10(x) x
#define OX_TYPE_IN_UNIT_11(x) x
#endif

#define OX_TYPED_KERNELS_ARGS(PREFIX, FN, ENTRY, ARGS)                                \
  OX_TYPE_IN_UNIT_0(OX_TYPED_OPS(PREFIX, FN, i8, int8_t, ENTRY, ARGS))                    \
  OX_TYPE_IN_UNIT_1(OX_TYPED_OPS(PREFIX, FN, u8, uint8_t, ENTRY, ARGS))                   \
  OX_TYPE_IN_UNIT_2(OX_TYPED_OPS(PREFIX, FN, i32, int32_t, ENTRY, ARGS))                  \
  OX_TYPE_IN_UNIT_3(OX_TYPED_OPS(PREFIX, FN, u32, uint32_t, ENTRY, ARGS))                 \
  OX_TYPE_IN_UNIT_4(OX_TYPED_OPS(PREFIX, FN, i64, int64_t, ENTRY, ARGS))                  \
  OX_TYPE_IN_UNIT_5(OX_TYPED_OPS(PREFIX, FN, u64, uint64_t, ENTRY, ARGS))                 \
  OX_TYPE_IN_UNIT_6(OX_TYPED_OPS(PREFIX, FN, f16, __half, ENTRY, ARGS))                   \
  OX_TYPE_IN_UNIT_7(OX_TYPED_OPS(PREFIX, FN, f32, float, ENTRY, ARGS))                    \
  OX_TYPE_IN_UNIT_8(OX_TYPED_OPS(PREFIX, FN, f64, double, ENTRY, ARGS))                   \
  OX_TYPE_IN_UNIT_9(OX_TYPED_OPS(PREFIX, FN, bf16, __nv_bfloat16, ENTRY, ARGS))           \
  OX_TYPE_IN_UNIT_10(OX_TYPED_OPS(PREFIX, FN, f8e4m3, __nv_fp8_e4m3, ENTRY, ARGS))        \
  OX_TYPE_IN_UNIT_11(OX_TYPED_OPS(PREFIX, FN, f8e5m2, __nv_fp8_e5m2, ENTRY, ARGS))

// The usual forms: kernels taking CollArgs.
#define OX_TYPED_KERNELS_ENTRY(PREFIX, FN, ENTRY) OX_TYPED_KERNELS_ARGS(PREFIX, FN, ENTRY, CollArgs)
#define OX_TYPED_KERNELS(PREFIX, FN) OX_TYPED_KERNELS_ARGS(PREFIX, FN, ox_pdl_enter(), CollArgs)
