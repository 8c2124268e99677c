// Storage types and their float conversions: every kernel stores T and computes in float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace shapetune::kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// exp(x) as one multiply and the MUFU's ex2 with results under 2^-126 flushed to zero. __expf
// without -ftz compiles to ex2.approx.f32, which guards every call against denormal results
// (a compare and two predicated multiplies around the MUFU): 5 instructions where this takes 2,
// in kernels that take an exp or two per element. What is lost, e^x below 1.2e-38, is far under
// any tolerance of a probability or a gradient.
constexpr float kLog2e = 1.4426950408889634f;

// 2^x by the MUFU's ex2 alone, results under 2^-126 flushed to zero (as fast_exp).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_exp(float x) { return fast_exp2(x * kLog2e); }

// 1 / x by the MUFU's rcp alone (about 1 ulp; denormal inputs and results flushed to zero).
__device__ __forceinline__ float fast_reciprocal(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace shapetune::kernels
