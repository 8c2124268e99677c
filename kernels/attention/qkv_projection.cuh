// The QKV projection's bookkeeping kernel: from a projection's row-major output to the
// heads-split Q, K, V [B, H, S, hd] that attention reads, adding the bias on the way.
// Host-safe: the catalogue (compiled by g++) includes this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::kernels::attention {

// dst[j][((b heads + h) seq + s) head_dim + d] = src[j][(b seq + s) src_ld + h head_dim + d] + bias[j D + h head_dim + d]
// for j = 0, 1, 2 (Q, K, V), D = heads head_dim, over rows = batch seq, rounded to T once: the
// source is the GEMM's fp32 output, as a library GEMM with a fused bias epilogue rounds (rounding
// x W^T to 16 bits before adding a bias of opposite sign lost more than the tolerance allows).
// src[j] may point into one packed [rows, 3 D] matrix (src_ld = 3 D) or three [rows, D] ones
// (src_ld = D). T is float, __half or __nv_bfloat16. cudaErrorInvalidValue for empty extents.
template <typename T>
cudaError_t head_split_bias(const float* const src[3], std::int64_t src_ld, const T* bias, T* const dst[3],
                            std::int64_t rows, std::int64_t seq, int heads, int head_dim, cudaStream_t stream);

}  // namespace shapetune::kernels::attention
