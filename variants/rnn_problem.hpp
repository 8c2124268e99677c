// What both halves of the recurrent family's catalogue (rnn.cpp, the forward; rnn_backward.cpp,
// the backward) read off a problem: the cell, from the primitive's family, and the four axes; the
// storage type of its tensors; and how its products are taken.
//
// dtypes f32, f16, bf16 and tf32. A tf32 problem is an f32 problem whose products may be taken in
// TF32 (10-bit mantissas, fp32 accumulation), as cuDNN's RNN takes them with tensor-op math on
// fp32 data and PyTorch's nn.LSTM/nn.GRU do by default (torch.backends.cudnn.allow_tf32): its
// tensors are fp32 and every kernel runs it as f32; only its cuBLAS products (and cuDNN) differ.
// The persistent rungs' recurrent products are fp32 FMAs whatever the dtype, more accurate than
// TF32 and so within a tf32 problem's tolerance.
#pragma once

#include <cstdint>

#include "baselines/cublas.hpp"
#include "core/primitive_name.hpp"
#include "core/types.hpp"
#include "kernels/rnn/rnn.cuh"

namespace shapetune {

struct RnnProblem {
  kernels::rnn::Cell cell;
  std::int64_t steps, batch, input, hidden;
  int gates;
};

inline RnnProblem rnn_of(const Problem& p) {
  namespace kr = kernels::rnn;
  const kr::Cell cell = PrimitiveName::parse(p.primitive)->family == "gru" ? kr::Cell::gru : kr::Cell::lstm;
  return {cell, p.shape.at("T"), p.shape.at("N"), p.shape.at("D"), p.shape.at("H"), kr::gate_count(cell)};
}

// C [rows, cols] = beta C + A [rows, depth] W^T, W stored [cols, depth], row-major, C fp32, A and W
// in the problem's storage type: the gates' pre-activations. fp32 products (16-bit ones exact),
// TF32 ones for tf32 problems (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32, as the GEMM family's tf32).
inline LibraryCallResult rnn_times_transposed(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                              std::int64_t rows, std::int64_t cols, std::int64_t depth,
                                              const void* a, const void* w, float* c, float beta = 0.f) {
  if (dtype != DType::tf32)
    return cublas_times_transposed_f32(libraries, stream, dtype, rows, cols, depth, a, w, c, beta);
  GemmOperands g;
  g.a = a, g.b = w, g.c = c;
  g.m = rows, g.n = cols, g.k = depth;
  g.beta = beta;
  g.layout = kernels::gemm::Layout::nt;
  return cublas_gemm(libraries, stream, DType::tf32, g);
}

// C [rows, cols] = beta C + op(A) B over row-major fp32 matrices: op(A) [rows, depth] is A stored
// [rows, depth], or A^T where a_transposed and A is stored [depth, rows]; B is [depth, cols]. The
// backward's products; fp32, TF32 for tf32 problems.
inline LibraryCallResult rnn_product(LibraryHandles& libraries, cudaStream_t stream, DType dtype, std::int64_t rows,
                                     std::int64_t cols, std::int64_t depth, const float* a, bool a_transposed,
                                     const float* b, float* c, float beta = 0.f) {
  if (dtype != DType::tf32)
    return cublas_product_f32(libraries, stream, rows, cols, depth, a, a_transposed, b, c, beta);
  GemmOperands g;
  g.a = a, g.b = b, g.c = c;
  g.m = rows, g.n = cols, g.k = depth;
  g.beta = beta;
  g.layout = a_transposed ? kernels::gemm::Layout::tn : kernels::gemm::Layout::nn;
  return cublas_gemm(libraries, stream, DType::tf32, g);
}

// partials [splits, rows, cols] fp32 = A [rows, depth slice s] B [depth slice s, cols] for each of
// `splits` equal slices of the depth (depth % splits == 0) in one batched launch: rnn_product's
// product (A not transposed), left as partial sums for the kernel that reads it to add up.
inline LibraryCallResult rnn_split_product(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                           std::int64_t rows, std::int64_t cols, std::int64_t depth, int splits,
                                           const float* a, const float* b, float* partials) {
  const std::int64_t slice = depth / splits;
  StridedBatchedGemm g;
  g.m = rows, g.n = cols, g.k = slice, g.count = splits;
  g.a = a, g.lda = depth, g.stride_a = slice;
  g.b = b, g.ldb = cols, g.stride_b = slice * cols;
  g.c = partials, g.ldc = cols, g.stride_c = rows * cols;
  g.c_fp32 = true;
  return cublas_strided_batched(libraries, stream, dtype == DType::tf32 ? DType::tf32 : DType::f32, g);
}

// An fp32 operand of split_tf32_product: `high` its TF32 rounding and `low` the rest
// (kernels::rnn::split_tf32), or low null where the operand is exact in TF32 (a widened 16-bit
// value: f16's and bf16's mantissas fit TF32's 10 bits) and high is the operand itself.
struct SplitOperand {
  const float* high;
  const float* low;
};

// C [m, n] = beta C + op(A) op(B) (g's layout, m, n, k; fp32, row-major) as three TF32
// tensor-core products of split operands: A_low B_high + A_high B_low + A_high B_high, the small
// terms first. The dropped A_low B_low and the rounding of each low part to TF32 leave a term off
// by about 2^-21 of |A B| (fp32 FMAs: 2^-24), at a third of the tensor cores' TF32 rate.
inline LibraryCallResult split_tf32_product(LibraryHandles& libraries, cudaStream_t stream, GemmOperands g,
                                            SplitOperand a, SplitOperand b, float* c) {
  g.c = c;
  const auto product = [&](const float* a_part, const float* b_part) {
    g.a = a_part, g.b = b_part;
    LibraryCallResult r = cublas_gemm(libraries, stream, DType::tf32, g);
    g.beta = 1.f;
    return r;
  };
  if (a.low)
    if (LibraryCallResult r = product(a.low, b.high); !r.ok) return r;
  if (b.low)
    if (LibraryCallResult r = product(a.high, b.low); !r.ok) return r;
  return product(a.high, b.high);
}

}  // namespace shapetune
