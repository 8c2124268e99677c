// The activation of a GEMM epilogue: one definition for every GEMM kernel (gemm.cu's CUDA-core
// kernels and finish_product, tensor_core.cu, wgmma_sm90a.cu), so variants differ only in order
// of summation, never in the activation they apply.
#pragma once

#include <type_traits>

#include "kernels/common/numeric.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gemm/gemm.cuh"

namespace shapetune::kernels::gemm {

// T is the output's storage type. The GELU reads its pre-activation as stored in T, as a
// framework's Linear followed by GELU computes it (PyTorch stores the Linear's 16-bit output, then
// F.gelu reads it): the GELU of the unrounded sum put a 16-bit Transformer a rounding away from the
// framework on every FFN element (reports/cpu/2026-12-05-transformer-rounding-study). A no-op for
// fp32 outputs; ReLU commutes with the rounding.
template <typename T>
__device__ __forceinline__ float apply_activation(Epilogue e, float v) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  switch (e) {
    case Epilogue::bias_relu: return v < 0.f ? 0.f : v;
    // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation in the left tail. Its cost
    // is a few dozen instructions per output, nothing beside the K-long dot product behind it.
    case Epilogue::bias_gelu:
      if constexpr (!std::is_same_v<T, float>) v = to_float(from_float<T>(v));
      return 0.5f * v * erfcf(-v * kSqrtHalf);
    default: return v;
  }
}

// One output of a tensor-core kernel's staged accumulator: act(alpha acc + beta c + bias).
// c_old and bias point at this output's C and bias, null where beta is 0 (C is not read) or
// there is no bias.
template <typename T>
__device__ __forceinline__ T finish_element(float acc, const T* c_old, const T* bias, float alpha, float beta,
                                            Epilogue e) {
  float v = alpha * acc;
  if (c_old) v += beta * to_float(*c_old);
  if (bias) v += to_float(*bias);
  return from_float<T>(apply_activation<T>(e, v));
}

// The same for one 16-byte chunk of a row (8 halves or 4 floats), from 16-byte-aligned staged
// fp32 accumulators; c_old and bias 16-byte aligned where not null. One vector load of each, one
// pack to store.
template <typename T>
__device__ __forceinline__ Pack<T> finish_chunk(const float* staged, const T* c_old, const T* bias, float alpha,
                                                float beta, Epilogue e) {
  constexpr int kChunk = Pack<T>::kCount;
  float v[kChunk];
#pragma unroll
  for (int x = 0; x < kChunk; x += 4) {
    const float4 f = *reinterpret_cast<const float4*>(staged + x);
    v[x] = alpha * f.x, v[x + 1] = alpha * f.y, v[x + 2] = alpha * f.z, v[x + 3] = alpha * f.w;
  }
  if (c_old) {
    float old[kChunk];
    to_floats(load_pack(c_old), old);
#pragma unroll
    for (int x = 0; x < kChunk; ++x) v[x] += beta * old[x];
  }
  if (bias) {
    float b[kChunk];
    to_floats(load_pack(bias), b);
#pragma unroll
    for (int x = 0; x < kChunk; ++x) v[x] += b[x];
  }
  // One branch a chunk, not one an element: the wgmma kernel's store loop compiled the switch
  // per element (the H100 counted 251 instructions a chunk against 208 at 23db4c7, whose build
  // tested the epilogue once a chunk).
  if (e == Epilogue::bias_relu) {
#pragma unroll
    for (int x = 0; x < kChunk; ++x) v[x] = apply_activation<T>(Epilogue::bias_relu, v[x]);
  } else if (e == Epilogue::bias_gelu) {
#pragma unroll
    for (int x = 0; x < kChunk; ++x) v[x] = apply_activation<T>(Epilogue::bias_gelu, v[x]);
  }
  return pack_of_floats<T>(v);
}

}  // namespace shapetune::kernels::gemm
