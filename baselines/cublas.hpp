// cuBLAS and cuBLASLt as implementations of the GEMM primitives (kernels/gemm/gemm.cuh: row-major
// C[M,N] = epilogue(alpha op(A) op(B) + beta C + bias), layouts nn, nt, tn), used as baselines.
//
// Both libraries are column-major. A row-major matrix is the column-major view of its transpose,
// so C^T[N,M] = op(B)^T op(A)^T is computed instead: B becomes the library's first operand, A the
// second, m and n swap, and each operand keeps its own transpose flag (nt's B and tn's A are the
// transposed ones). The bias, one value per column of C, is then one per row of the column-major
// result, which is the direction cuBLASLt broadcasts its bias in.
//
// Every call returns an empty LibraryCallResult on success, or the library's status with
// `not_supported` set where the library refused the problem (NOT_SUPPORTED, ARCH_MISMATCH).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "baselines/cudnn.hpp"  // LibraryCallResult
#include "core/types.hpp"
#include "kernels/gemm/gemm.cuh"

namespace shapetune {

class LibraryHandles;

// Pointers untyped: which type they point to follows from the problem's dtype (tf32: float).
using GemmOperands = kernels::gemm::Args<void>;

// cublasSgemm for f32 (CUBLAS_DEFAULT_MATH: true fp32, never TF32), cublasGemmEx with
// CUBLAS_COMPUTE_32F_FAST_TF32 for tf32, cublasGemmEx with CUBLAS_COMPUTE_32F for f16 and bf16
// (C in the data's own type). Reductions always in fp32 (split-K partial sums are never rounded to
// 16 bits), as the primitive promises. Epilogues other than none are refused: plain cuBLAS cannot
// fuse them. Extents beyond 2^31-1 are refused (the 32-bit API).
LibraryCallResult cublas_gemm(LibraryHandles&, cudaStream_t, DType, const GemmOperands&);
// op(A) op(B) of 16-bit operands (g's layout, m, n, k, a and b) into fp32 c [m, n], row-major, fp32
// accumulation: the GEMM of an unfused chain whose epilogue runs as a pass of its own.
LibraryCallResult cublas_product_to_f32(LibraryHandles&, cudaStream_t, DType, const GemmOperands& g, float* c);

// C [rows, cols] = beta C + A [rows, depth] W^T, W [cols, depth]: row-major operands in dtype
// (f32, f16 or bf16), C in fp32, products accumulated in fp32 (never TF32): a linear layer's
// pre-activations kept in fp32, as the recurrent family's rungs use them.
LibraryCallResult cublas_times_transposed_f32(LibraryHandles&, cudaStream_t, DType dtype, std::int64_t rows,
                                              std::int64_t cols, std::int64_t depth, const void* a, const void* w,
                                              float* c, float beta = 0.f);

// C [rows, cols] = beta C + op(A) B over row-major fp32 matrices, products in fp32 (never TF32):
// op(A) [rows, depth] is A stored [rows, depth], or A^T where a_transposed and A is stored
// [depth, rows]; B is [depth, cols]. The recurrent family's backward products, whose gradients
// stay in fp32 (cuBLAS has no product of an fp32 matrix with a 16-bit one, so a 16-bit operand is
// widened first).
LibraryCallResult cublas_product_f32(LibraryHandles&, cudaStream_t, std::int64_t rows, std::int64_t cols,
                                     std::int64_t depth, const float* a, bool a_transposed, const float* b, float* c,
                                     float beta = 0.f);

// For each of `count` batches at fixed element strides, row-major C_i [m, n] = A_i [m, k] op(B_i),
// op(B) = B [k, n], or B^T where B is stored [n, k] (b_transposed); each operand at its own row
// stride (ld). A and B in dtype (f32, f16, bf16; f32 storage for tf32, whose products are TF32); C
// in fp32 (c_fp32) or in dtype; fp32 accumulation. Attention's naive rung: scores = Q K^T per head,
// then O = P V; the recurrent backward's step product in slices of its depth. Extents beyond
// 2^31-1 are refused (the 32-bit API).
struct StridedBatchedGemm {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  const void* a = nullptr;
  std::int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0, stride_b = 0;
  bool b_transposed = false;
  void* c = nullptr;
  std::int64_t ldc = 0, stride_c = 0;
  bool c_fp32 = false;
};
LibraryCallResult cublas_strided_batched(LibraryHandles&, cudaStream_t, DType, const StridedBatchedGemm&);

// cuBLASLt's heuristic is asked for this many algorithms; a variant's `algo` is a rank in that list.
inline constexpr int kCublasLtHeuristicCount = 8;
// What the cuBLASLt variant asks for and the heuristic may plan with.
inline constexpr std::size_t kCublasLtWorkspaceBytes = std::size_t{32} << 20;

// cublasLtMatmul with the algorithm cuBLASLt's heuristic ranks `rank`-th (0 = its best guess) for
// this problem, the pointers' alignments and a workspace of kCublasLtWorkspaceBytes. Compute in
// fp32 (TF32 tensor cores for tf32); bias, bias+ReLU and bias+GELU through the fused epilogue
// (the catalogue's cublaslt variant refuses the GELU and the 16-bit bias epilogues: see there).
// The heuristic's answer, and the descriptors, are kept in the LibraryHandles per problem and
// alignment, so only the first call for a problem pays for the query. A rank past the algorithms
// the heuristic returned, or a workspace smaller than the algorithm needs, is a refusal.
// cuBLASLt's GELU is the tanh approximation, not the erf form the primitive defines.
LibraryCallResult cublaslt_gemm(LibraryHandles&, cudaStream_t, DType, const GemmOperands&, int rank, void* workspace,
                                std::size_t workspace_bytes);

// The algorithm behind cublaslt_gemm(rank) for a problem (buffers aligned to 256 bytes, as
// cudaMalloc gives them), as "key=value" pairs separated by spaces: the cuBLASLt version, the
// algorithm's identity (algo_id, tile_id, stages_id, splitk_num, reduction_scheme, cta_swizzling,
// custom_option, inner_shape_id, cluster_shape_id) and, for reading only, its workspace_bytes and
// waves. Empty where the heuristic returned fewer than rank+1 algorithms. Throws LibraryError
// where the library fails (the heuristic refusing the problem included).
std::string describe_cublaslt_algo(const Problem&, int rank, LibraryHandles&);

// cublasLtMatmul with an algorithm recorded by describe_cublaslt_algo, rebuilt from its identity
// (cublasLtMatmulAlgoInit plus the configuration attributes) and checked with
// cublasLtMatmulAlgoCheck, so the same kernel runs whatever a later heuristic would rank first.
// Refused where the recorded algorithm does not exist or does not run here (another cuBLASLt
// version, another device), which a caller answers by falling back to a rank.
LibraryCallResult cublaslt_gemm_recorded(LibraryHandles&, cudaStream_t, DType, const GemmOperands&,
                                         const std::string& algo_description, void* workspace,
                                         std::size_t workspace_bytes);


}  // namespace shapetune
