// Instantiation of typed collective kernels: <prefix>_<type>_<op>(CollArgs) for every datatype
// and op, looked up by name on the host (src/gpu/module.rs).
#pragma once
#include "pdl.cuh"
#include "reduce.cuh"

#define OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, ONAME, OP)                         \
  extern "C" __global__ void __launch_bounds__(OX_MAX_THREADS, 1)                  \
      PREFIX##_##TNAME##_##ONAME(CollArgs args) {                                  \
    ox_pdl_enter();                                                                \
    FN<T, OP<T>>(args);                                                            \
  }

#define OX_TYPED_OPS(PREFIX, FN, TNAME, T)                      \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, sum, OpSum)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, prod, OpProd)           \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, max, OpMax)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, min, OpMin)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, avg, OpAvg)             \
  OX_TYPED_KERNEL(PREFIX, FN, TNAME, T, premulsum, OpPreMulSum)

#define OX_TYPED_KERNELS(PREFIX, FN)                      \
  OX_TYPED_OPS(PREFIX, FN, i8, int8_t)                    \
  OX_TYPED_OPS(PREFIX, FN, u8, uint8_t)                   \
  OX_TYPED_OPS(PREFIX, FN, i32, int32_t)                  \
  OX_TYPED_OPS(PREFIX, FN, u32, uint32_t)                 \
  OX_TYPED_OPS(PREFIX, FN, i64, int64_t)                  \
  OX_TYPED_OPS(PREFIX, FN, u64, uint64_t)                 \
  OX_TYPED_OPS(PREFIX, FN, f16, __half)                   \
  OX_TYPED_OPS(PREFIX, FN, f32, float)                    \
  OX_TYPED_OPS(PREFIX, FN, f64, double)                   \
  OX_TYPED_OPS(PREFIX, FN, bf16, __nv_bfloat16)           \
  OX_TYPED_OPS(PREFIX, FN, f8e4m3, __nv_fp8_e4m3)         \
  OX_TYPED_OPS(PREFIX, FN, f8e5m2, __nv_fp8_e5m2)
