// The activation of a GEMM epilogue, applied once per output by every kernel (gemm.cu,
// tensor_core.cu, wgmma_sm90a.cu) to alpha op(A) op(B) + beta C + bias in fp32.
#pragma once

#include <type_traits>

#include "kernels/common/numeric.cuh"
#include "kernels/gemm/gemm.cuh"

namespace shapetune::kernels::gemm {

// T is the output's storage type.
template <typename T>
__device__ __forceinline__ float apply_activation(Epilogue e, float v) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  switch (e) {
    case Epilogue::bias_relu: return v < 0.f ? 0.f : v;
    case Epilogue::bias_gelu:
      // The GELU of the pre-activation as stored in T, as a framework's Linear followed by GELU
      // computes it (PyTorch rounds the Linear's 16-bit output first): the GELU of the unrounded
      // sum puts a 16-bit model's outputs a rounding away from the framework's (the rounding
      // study in reports/cpu/2026-12-05-transformer-rounding-study). No-op for f32.
      if constexpr (!std::is_same_v<T, float>) v = to_float(from_float<T>(v));
      // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation in the left tail. Its cost
      // is a few dozen instructions per output, nothing beside the K-long dot product behind it.
      return 0.5f * v * erfcf(-v * kSqrtHalf);
    default: return v;
  }
}

}  // namespace shapetune::kernels::gemm
