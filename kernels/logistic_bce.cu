#include "kernels/common/grid.cuh"
#include "kernels/logistic_bce.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/numeric.cuh"
#include "kernels/common/reductions.cuh"

namespace shapetune::kernels::logistic_bce {
namespace {

constexpr int kFinishThreads = 256;   // the finishing kernel's blocks (a column each thread; the last block the means)
constexpr int kColumnThreads = 128;   // row_warp's column pass: columns per block
constexpr int kElementThreads = 256;  // unfused's elementwise kernel
constexpr unsigned kMaxGridY = 65535;

unsigned blocks_for(std::int64_t items, std::int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

struct RowTerms {
  float p, residual, loss;
};

// The terms of one row from its z. Accurate expf/log1pf: one of each per row costs nothing next
// to the row's D loads.
__device__ __forceinline__ RowTerms row_terms(float z, std::int32_t label) {
  const bool positive = label > 0;
  const float e = expf(-fabsf(z));  // in (0, 1]: never overflows
  // sigmoid(z) and sigmoid(-z), each from the side where it does not cancel.
  const float p = z >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
  const float q = z >= 0 ? e / (1.f + e) : 1.f / (1.f + e);
  const float y = positive ? 1.f : 0.f;
  return {p, positive ? -q : p, fmaxf(z, 0.f) - z * y + log1pf(e)};
}

// Every thread of the block ends with the block's sums of a and b, added in a fixed tree order.
__device__ void block_sum_pair(double& a, double& b) {
  __shared__ double shared_a[kFinishThreads], shared_b[kFinishThreads];
  shared_a[threadIdx.x] = a;
  shared_b[threadIdx.x] = b;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      shared_a[threadIdx.x] += shared_a[threadIdx.x + half];
      shared_b[threadIdx.x] += shared_b[threadIdx.x + half];
    }
    __syncthreads();
  }
  a = shared_a[0];
  b = shared_b[0];
}

// dw[j] = sum over parts of dw_parts[part, j] / rows, one column a thread; the grid's last block
// adds the parts' losses and residuals into loss and db. Fixed order, in double.
__global__ void finish_kernel(const float* dw_parts, const float* loss_parts, const float* residual_parts,
                              std::int64_t parts, int features, double inv_rows, float* dw, float* loss, float* db) {
  grid_dependency_sync();
  if (blockIdx.x + 1 < gridDim.x) {
    const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= features) return;
    double sum = 0;
    for (std::int64_t part = 0; part < parts; ++part) sum += dw_parts[part * features + j];
    dw[j] = static_cast<float>(sum * inv_rows);
    return;
  }
  double loss_sum = 0, residual_sum = 0;
  for (std::int64_t part = threadIdx.x; part < parts; part += blockDim.x) {
    loss_sum += loss_parts[part];
    residual_sum += residual_parts[part];
  }
  block_sum_pair(loss_sum, residual_sum);
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(loss_sum * inv_rows);
    *db = static_cast<float>(residual_sum * inv_rows);
  }
}

struct Partials {
  float* dw;
  float* loss;
  float* residual;
};

Partials partials_at(void* at, std::int64_t parts, std::int64_t features) {
  char* base = static_cast<char*>(at);
  const std::size_t dw_bytes = align256(static_cast<std::size_t>(parts * features) * sizeof(float));
  const std::size_t part_bytes = align256(static_cast<std::size_t>(parts) * sizeof(float));
  return {reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + dw_bytes),
          reinterpret_cast<float*>(base + dw_bytes + part_bytes)};
}

cudaError_t finish(const Partials& parts, std::int64_t count, std::int64_t rows, int features, float* dw, float* loss,
                   float* db, cudaStream_t stream) {
  finish_kernel<<<blocks_for(features, kFinishThreads) + 1, kFinishThreads, 0, stream>>>(
      parts.dw, parts.loss, parts.residual, count, features, 1.0 / static_cast<double>(rows), dw, loss, db);
  return cudaGetLastError();
}

// ---- v1: unfused --------------------------------------------------------------------------------

__global__ void unfused_rows_kernel(float* z_then_residual, const float* b, const std::int32_t* labels, float* p,
                                    float* row_losses, std::int64_t rows) {
  grid_dependency_sync();
  const float bias = *b;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const RowTerms t = row_terms(z_then_residual[i] + bias, labels[i]);
    p[i] = t.p;
    z_then_residual[i] = t.residual;
    row_losses[i] = t.loss;
  }
}

__global__ void unfused_means_kernel(const float* row_losses, const float* residuals, std::int64_t rows, float* loss,
                                     float* db) {
  grid_dependency_sync();
  double loss_sum = 0, residual_sum = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    loss_sum += row_losses[i];
    residual_sum += residuals[i];
  }
  block_sum_pair(loss_sum, residual_sum);
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(loss_sum / static_cast<double>(rows));
    *db = static_cast<float>(residual_sum / static_cast<double>(rows));
  }
}

// ---- v2: row_warp -------------------------------------------------------------------------------

template <typename T>
__global__ void row_warp_kernel(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p,
                                float* residuals, float* row_losses, std::int64_t rows, int features) {
  grid_dependency_sync();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps: no barrier follows
  const int lane = threadIdx.x % kWarpSize;
  const T* xr = x + row * features;
  float dot = 0.f;
  for (int j = lane; j < features; j += kWarpSize) dot = fmaf(to_float(xr[j]), w[j], dot);
  dot = lane_group_reduce(dot, kWarpSize, SumOp{});
  if (lane != 0) return;
  const RowTerms t = row_terms(dot + *b, labels[row]);
  p[row] = t.p;
  residuals[row] = t.residual;
  row_losses[row] = t.loss;
}

// Column j of chunk c: sum over the chunk's rows of x[i, j] r[i]. Thread 0 of each chunk's first
// column block also adds the chunk's row losses and residuals, in row order.
template <typename T>
__global__ void column_chunks_kernel(const T* x, const float* residuals, const float* row_losses, std::int64_t rows,
                                     int features, int rows_per_chunk, Partials parts) {
  grid_dependency_sync();
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t first = chunk * rows_per_chunk;
  const std::int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < features) {
    float sum = 0.f;
    for (std::int64_t i = first; i < last; ++i) sum = fmaf(to_float(x[i * features + j]), residuals[i], sum);
    parts.dw[chunk * features + j] = sum;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float loss_sum = 0.f, residual_sum = 0.f;
    for (std::int64_t i = first; i < last; ++i) {
      loss_sum += row_losses[i];
      residual_sum += residuals[i];
    }
    parts.loss[chunk] = loss_sum;
    parts.residual[chunk] = residual_sum;
  }
}

// ---- v3: fused_block ----------------------------------------------------------------------------

constexpr int kMaxWarps = 32;

template <typename T>
__global__ void fused_block_kernel(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p,
                                   std::int64_t rows, int features, int rows_per_block, Partials parts) {
  grid_dependency_sync();
  constexpr int R = kFusedRowsAtOnce;
  extern __shared__ float block_dw[];                // [features]: entry j is thread j % blockDim's alone
  __shared__ float warp_dots[2][kMaxWarps][R];       // double-buffered: one barrier per R rows
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, warps = blockDim.x / kWarpSize;
  for (int j = threadIdx.x; j < features; j += blockDim.x) block_dw[j] = 0.f;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * rows_per_block;
  const std::int64_t end = first + rows_per_block < rows ? first + rows_per_block : rows;
  const float bias = *b;
  float loss_sum = 0.f, residual_sum = 0.f;  // thread 0's, in row order
  int buffer = 0;
  for (std::int64_t base = first; base < end; base += R, buffer ^= 1) {
    const int count = end - base < R ? static_cast<int>(end - base) : R;
    float dot[R] = {};
    for (int j = threadIdx.x; j < features; j += blockDim.x) {
      const float wj = w[j];
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < count) dot[r] = fmaf(to_float(x[(base + r) * features + j]), wj, dot[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      dot[r] = lane_group_reduce(dot[r], kWarpSize, SumOp{});
      if (lane == 0) warp_dots[buffer][warp][r] = dot[r];
    }
    __syncthreads();
    // Every thread merges the warps in the same order, so all hold the same z bits.
    float residual[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float z = 0.f;
      for (int k = 0; k < warps; ++k) z += warp_dots[buffer][k][r];
      residual[r] = 0.f;
      if (r < count) {
        const RowTerms t = row_terms(z + bias, labels[base + r]);
        residual[r] = t.residual;
        if (threadIdx.x == 0) {
          p[base + r] = t.p;
          loss_sum += t.loss;
          residual_sum += t.residual;
        }
      }
    }
    for (int j = threadIdx.x; j < features; j += blockDim.x) {
      float acc = block_dw[j];
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < count) acc = fmaf(to_float(x[(base + r) * features + j]), residual[r], acc);
      block_dw[j] = acc;
    }
  }
  for (int j = threadIdx.x; j < features; j += blockDim.x) parts.dw[blockIdx.x * static_cast<std::int64_t>(features) + j] = block_dw[j];
  if (threadIdx.x == 0) {
    parts.loss[blockIdx.x] = loss_sum;
    parts.residual[blockIdx.x] = residual_sum;
  }
}

}  // namespace

cudaError_t unfused_rows(float* z_then_residual, const float* b, const std::int32_t* labels, float* p,
                         float* row_losses, std::int64_t rows, cudaStream_t stream) {
  const unsigned blocks = blocks_for(rows, kElementThreads) < 4096 ? blocks_for(rows, kElementThreads) : 4096;
  unfused_rows_kernel<<<blocks, kElementThreads, 0, stream>>>(z_then_residual, b, labels, p, row_losses, rows);
  return cudaGetLastError();
}

cudaError_t unfused_means(const float* row_losses, const float* residuals, std::int64_t rows, float* loss, float* db,
                          cudaStream_t stream) {
  unfused_means_kernel<<<1, kFinishThreads, 0, stream>>>(row_losses, residuals, rows, loss, db);
  return cudaGetLastError();
}

template <typename T>
cudaError_t row_warp(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p, float* loss,
                     float* dw, float* db, std::int64_t rows, int features, int warps_per_block, int rows_per_chunk,
                     void* workspace, cudaStream_t stream) {
  const std::int64_t chunks = row_warp_chunks(rows, rows_per_chunk);
  if (warps_per_block < 1 || warps_per_block > kMaxWarps || chunks > kMaxGridY) return cudaErrorInvalidValue;
  float* residuals = static_cast<float*>(workspace);
  float* row_losses = residuals + align256(static_cast<std::size_t>(rows) * sizeof(float)) / sizeof(float);
  const Partials parts = partials_at(static_cast<char*>(workspace) + row_scratch_bytes(rows), chunks, features);
  row_warp_kernel<T><<<blocks_for(rows, warps_per_block), warps_per_block * kWarpSize, 0, stream>>>(
      x, w, b, labels, p, residuals, row_losses, rows, features);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const dim3 grid(blocks_for(features, kColumnThreads), static_cast<unsigned>(chunks));
  column_chunks_kernel<T><<<grid, kColumnThreads, 0, stream>>>(x, residuals, row_losses, rows, features,
                                                               rows_per_chunk, parts);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return finish(parts, chunks, rows, features, dw, loss, db, stream);
}

template <typename T>
cudaError_t fused_block(const T* x, const float* w, const float* b, const std::int32_t* labels, float* p, float* loss,
                        float* dw, float* db, std::int64_t rows, int features, int block_size, int rows_per_block,
                        void* workspace, cudaStream_t stream) {
  if (block_size < kWarpSize || block_size % kWarpSize != 0 || block_size > kMaxWarps * kWarpSize ||
      rows_per_block < 1)
    return cudaErrorInvalidValue;
  const std::int64_t blocks = fused_block_count(rows, rows_per_block);
  const std::size_t shared = fused_block_shared_bytes(features);
  auto kernel = fused_block_kernel<T>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
      e != cudaSuccess)
    return e;
  const Partials parts = partials_at(workspace, blocks, features);
  kernel<<<static_cast<unsigned>(blocks), block_size, shared, stream>>>(x, w, b, labels, p, rows, features,
                                                                        rows_per_block, parts);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return finish(parts, blocks, rows, features, dw, loss, db, stream);
}

#define SHAPETUNE_INSTANTIATE_LOGISTIC_BCE(T)                                                                   \
  template cudaError_t row_warp<T>(const T*, const float*, const float*, const std::int32_t*, float*, float*,   \
                                   float*, float*, std::int64_t, int, int, int, void*, cudaStream_t);           \
  template cudaError_t fused_block<T>(const T*, const float*, const float*, const std::int32_t*, float*, float*, \
                                      float*, float*, std::int64_t, int, int, int, void*, cudaStream_t);

SHAPETUNE_INSTANTIATE_LOGISTIC_BCE(float)
SHAPETUNE_INSTANTIATE_LOGISTIC_BCE(__half)
SHAPETUNE_INSTANTIATE_LOGISTIC_BCE(__nv_bfloat16)

}  // namespace shapetune::kernels::logistic_bce
