// The activation of a GEMM epilogue: one definition for every GEMM kernel (gemm.cu's CUDA-core
// kernels and finish_product, tensor_core.cu, wgmma_sm90a.cu), so variants differ only in order
// of summation, never in the activation they apply.
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
