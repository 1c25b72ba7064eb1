// Instantiation of typed collective kernels: <prefix>_<type>_<op>(CollArgs) for every datatype
// and op, looked up by name on the host (src/gpu/module.rs).
#pragma once
#include "done.cuh"
#include "pdl.cuh"
#include "reduce.cuh"

// ENTRY runs first: ox_pdl_enter() for every kernel but those that place the PDL wait and
// trigger themselves (the one-shot AllReduce, kernels/colls/allreduce.cu). The body returns to the
// entry point, which publishes a counted launch's completion (done.cuh).
#define OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, ONAME, OP, ENTRY, ARGS)            \
  extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1)                  \
      PREFIX##_##TNAME##_##ONAME(ARGS args) {                                      \
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
