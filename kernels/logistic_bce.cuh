// Binary logistic regression, forward, loss and gradient in one primitive:
//   z[i]  = x[i,:] . w + b                                    (fp32 accumulation)
//   p[i]  = sigmoid(z[i])                                     (f32 output)
//   loss  = mean_i max(z,0) - z y + log1p(exp(-|z|))          (the stable binary cross-entropy)
//   dw[j] = mean_i x[i,j] (p[i] - y[i]),  db = mean_i (p[i] - y[i])
// x in T (float, __half, __nv_bfloat16); w, b, p, loss, dw, db in f32 (the parameters Adam
// updates are f32). Labels are int32 0/1; anything else is clamped to 0 or 1, as the float64
// reference does. Host-safe: the catalogue (compiled by g++) includes this header.
//
// p - y is computed as -sigmoid(-z) when y = 1: the float difference 1 - p would keep only
// absolute precision (~6e-8) where p is near 1, the complement keeps relative precision.
//
// Every mean and every column sum is deterministic: per-block (or per-chunk) partials go to the
// workspace, and one more small kernel adds them in a fixed order, in double. No float atomics,
// so the same inputs give the same bits on every run of a config.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::logistic_bce {

// The partials the finishing kernel adds: `parts` rows of dw [parts, D], then the parts' loss
// sums and residual sums. 256-byte aligned pieces.
inline std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
inline std::size_t partials_bytes(std::int64_t parts, std::int64_t features) {
  return align256(static_cast<std::size_t>(parts * features) * sizeof(float)) +
         2 * align256(static_cast<std::size_t>(parts) * sizeof(float));
}
// Per row: the residual p - y and the row's loss (unfused and row_warp keep them between kernels).
inline std::size_t row_scratch_bytes(std::int64_t rows) {
  return 2 * align256(static_cast<std::size_t>(rows) * sizeof(float));
}

// v1 (unfused)'s own kernels; its two GEMVs are cuBLAS calls made by the catalogue
// (variants/logistic_bce.cpp). After z = X w sits in `z_then_residual`:
// residual_kernel turns it into p, the row losses and the residuals (in place of z);
// mean_kernel averages the row losses and the residuals into loss and db.
cudaError_t unfused_rows(float* z_then_residual, const float* b, const std::int32_t* labels, float* p,
                         float* row_losses, std::int64_t rows, cudaStream_t);
cudaError_t unfused_means(const float* row_losses, const float* residuals, std::int64_t rows, float* loss, float* db,
                          cudaStream_t);

// v2: one warp per row: z by shuffles, then p, the residual and the row loss; a second kernel
// sums the columns x[:, j] r over chunks of `rows_per_chunk` rows into per-chunk partials (its
// threads own a column each, so the reads are coalesced); a third adds the chunks. X is read
// twice (the second pass may hit L2 when X fits). Workspace: row_warp_workspace_bytes.
template <typename T>
cudaError_t row_warp(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p, float* loss,
                     float* dw, float* db, std::int64_t rows, int features, int warps_per_block, int rows_per_chunk,
                     void* workspace, cudaStream_t);
inline std::int64_t row_warp_chunks(std::int64_t rows, int rows_per_chunk) {
  return (rows + rows_per_chunk - 1) / rows_per_chunk;
}
inline std::size_t row_warp_workspace_bytes(std::int64_t rows, std::int64_t features, int rows_per_chunk) {
  return row_scratch_bytes(rows) + partials_bytes(row_warp_chunks(rows, rows_per_chunk), features);
}

// v3: one pass. Each block takes `rows_per_block` consecutive rows, four at a time; a thread
// owns the columns j = thread, thread + blockDim, ...: it adds its share of the four dot
// products, the block merges them (one barrier per four rows), every thread derives the four
// residuals and adds x[i, j] r[i] into its own columns of the block's dw partial in shared
// memory (no two threads share an entry: no atomics, no barrier). The second touch of each x
// comes from L1, so X leaves DRAM once. The partials go to the workspace and the finishing
// kernel adds them in block order. Dynamic shared memory: features floats
// (fused_block_shared_bytes), which must fit the block's opt-in limit.
template <typename T>
cudaError_t fused_block(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p, float* loss,
                        float* dw, float* db, std::int64_t rows, int features, int block_size, int rows_per_block,
                        void* workspace, cudaStream_t);
inline std::int64_t fused_block_count(std::int64_t rows, int rows_per_block) {
  return (rows + rows_per_block - 1) / rows_per_block;
}
inline std::size_t fused_block_shared_bytes(std::int64_t features) {
  return static_cast<std::size_t>(features) * sizeof(float);
}
inline std::size_t fused_block_workspace_bytes(std::int64_t rows, std::int64_t features, int rows_per_block) {
  return partials_bytes(fused_block_count(rows, rows_per_block), features);
}
// Rows the fused block merges per barrier.
inline constexpr int kFusedRowsAtOnce = 4;

}  // namespace shapetune::kernels::logistic_bce
