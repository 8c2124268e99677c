// The activation of a GEMM epilogue, for the tensor-core kernels (tensor_core.cu, wgmma_sm90a.cu),
// which stage their accumulators and apply it once per output.
#pragma once

#include "kernels/gemm/gemm.cuh"

namespace shapetune::kernels::gemm {

__device__ __forceinline__ float apply_activation(Epilogue e, float v) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  switch (e) {
    case Epilogue::bias_relu: return v < 0.f ? 0.f : v;
    // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation in the left tail. Its cost
    // is a few dozen instructions per output, nothing beside the K-long dot product behind it.
    case Epilogue::bias_gelu: return 0.5f * v * erfcf(-v * kSqrtHalf);
    default: return v;
  }
}

}  // namespace shapetune::kernels::gemm
