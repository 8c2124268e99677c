#include "kernels/common/grid.cuh"
#include "kernels/softmax.cuh"

#include "kernels/common/numeric.cuh"
#include "kernels/common/reductions.cuh"
#include "kernels/common/vector_io.cuh"

namespace shapetune::kernels::softmax {
namespace {

unsigned grid_for(std::int64_t work_items, std::int64_t per_block) {
  return static_cast<unsigned>((work_items + per_block - 1) / per_block);
}

// ---- v1 ------------------------------------------------------------------------------------
template <typename T>
__global__ void thread_row_3pass_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int cols) {
  grid_dependency_sync();
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  const T* in = x + row * cols;
  T* out = y + row * cols;
  float max = -INFINITY;
  for (int c = 0; c < cols; ++c) max = fmaxf(max, to_float(in[c]));
  CompensatedSum sum;
  for (int c = 0; c < cols; ++c) sum.add(__expf(to_float(in[c]) - max));
  const float inv_sum = 1.f / sum.sum;
  for (int c = 0; c < cols; ++c) out[c] = from_float<T>(__expf(to_float(in[c]) - max) * inv_sum);
}

// ---- v2 ------------------------------------------------------------------------------------
template <typename T>
__global__ void thread_row_online_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int cols) {
  grid_dependency_sync();
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  const T* in = x + row * cols;
  T* out = y + row * cols;
  float max = -INFINITY;
  CompensatedSum sum;
  for (int c = 0; c < cols; ++c) {
    const float v = to_float(in[c]);
    if (v > max) {
      sum.scale(__expf(max - v));  // exp(-inf) = 0 covers the first element
      max = v;
    }
    sum.add(__expf(v - max));
  }
  const float inv_sum = 1.f / sum.sum;
  for (int c = 0; c < cols; ++c) out[c] = from_float<T>(__expf(to_float(in[c]) - max) * inv_sum);
}

// ---- v3 ------------------------------------------------------------------------------------
template <typename T>
__global__ void warp_row_online_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int cols) {
  grid_dependency_sync();
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // warp-uniform, so the shuffles below see full warps
  const T* in = x + row * cols;
  T* out = y + row * cols;
  const MaxSum stats = warp_row_max_sum(in, cols, lane);
  const float inv_sum = 1.f / stats.sum;
  for (int c = lane; c < cols; c += kWarpSize) out[c] = from_float<T>(__expf(to_float(in[c]) - stats.max) * inv_sum);
}

// ---- v4 ------------------------------------------------------------------------------------
template <typename T>
__global__ void block_row_online_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  grid_dependency_sync();
  __shared__ MaxSum partials[32];
  const T* in = x + static_cast<std::int64_t>(blockIdx.x) * cols;
  T* out = y + static_cast<std::int64_t>(blockIdx.x) * cols;
  MaxSum stats;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) stats.add(to_float(in[c]));
  stats = group_reduce(stats, blockDim.x, partials, MergeOp{});
  const float inv_sum = 1.f / stats.sum;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[c] = from_float<T>(__expf(to_float(in[c]) - stats.max) * inv_sum);
}

// ---- v5 ------------------------------------------------------------------------------------

template <typename T>
__global__ void vec_online_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int cols,
                                  int threads_per_row) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  constexpr int kUnroll = 4;  // packs loaded before the first is used: loads in flight per thread
  __shared__ MaxSum partials[32];
  const RowGroup g = RowGroup::of(rows, threads_per_row);
  const T* in = x + (g.active ? g.row : 0) * cols;
  T* out = y + (g.active ? g.row : 0) * cols;
  const RowSplit split = RowSplit::of(in, cols);
  const T* body_in = in + split.head;
  T* body_out = out + split.head;

  MaxSum stats;
  if (g.active) {
    for (int k = g.thread; k < split.edges(); k += threads_per_row) stats.add(to_float(in[split.edge_index<T>(k)]));
    for (int base = g.thread; base < split.packs; base += kUnroll * threads_per_row) {
      Pack<T> packs[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int p = base + u * threads_per_row;
        if (p < split.packs) packs[u] = load_pack(body_in + p * kPack);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * threads_per_row < split.packs) {
          float v[kPack];
          to_floats(packs[u], v);
          stats.add(v);
        }
      }
    }
  }
  stats = group_reduce(stats, threads_per_row, partials, MergeOp{});
  if (!g.active) return;

  const float inv_sum = 1.f / stats.sum;
  for (int k = g.thread; k < split.edges(); k += threads_per_row) {
    const int c = split.edge_index<T>(k);
    out[c] = from_float<T>(__expf(to_float(in[c]) - stats.max) * inv_sum);
  }
  for (int p = g.thread; p < split.packs; p += threads_per_row) {
    Pack<T> pack = load_pack(body_in + p * kPack);
#pragma unroll
    for (int i = 0; i < kPack; ++i) pack.v[i] = from_float<T>(__expf(to_float(pack.v[i]) - stats.max) * inv_sum);
    store_pack(body_out + p * kPack, pack);
  }
}

// ---- v6 ------------------------------------------------------------------------------------
template <typename T, int kPacksPerThread>
__global__ void register_row_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int cols,
                                    int threads_per_row) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  __shared__ float partials[32];
  const RowGroup g = RowGroup::of(rows, threads_per_row);
  const T* in = x + (g.active ? g.row : 0) * cols;
  T* out = y + (g.active ? g.row : 0) * cols;
  const RowSplit split = RowSplit::of(in, cols);
  const T* body_in = in + split.head;
  T* body_out = out + split.head;
  const bool has_edge = g.active && g.thread < split.edges();

  // The row's only trip through memory: every pack is loaded before any is used.
  Pack<T> cache[kPacksPerThread];
  float edge = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const int p = g.thread + i * threads_per_row;
    if (g.active && p < split.packs) cache[i] = load_pack(body_in + p * kPack);
  }
  if (has_edge) edge = to_float(in[split.edge_index<T>(g.thread)]);

  float max = edge;
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    if (g.active && g.thread + i * threads_per_row < split.packs) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) max = fmaxf(max, to_float(cache[i].v[j]));
    }
  }
  max = group_reduce(max, threads_per_row, partials, MaxOp{});

  float sum = has_edge ? __expf(edge - max) : 0.f;
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    if (g.active && g.thread + i * threads_per_row < split.packs) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += __expf(to_float(cache[i].v[j]) - max);
    }
  }
  sum = group_reduce(sum, threads_per_row, partials, SumOp{});
  if (!g.active) return;

  const float inv_sum = 1.f / sum;
  if (has_edge) out[split.edge_index<T>(g.thread)] = from_float<T>(__expf(edge - max) * inv_sum);
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const int p = g.thread + i * threads_per_row;
    if (p < split.packs) {
      Pack<T> result;
#pragma unroll
      for (int j = 0; j < kPack; ++j) result.v[j] = from_float<T>(__expf(to_float(cache[i].v[j]) - max) * inv_sum);
      store_pack(body_out + p * kPack, result);
    }
  }
}

template <typename Kernel>
cudaError_t check_block_fits(Kernel kernel, int block_size) {
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return block_size > attributes.maxThreadsPerBlock ? cudaErrorLaunchOutOfResources : cudaSuccess;
}

template <typename T, int kPacksPerThread>
cudaError_t launch_register_row(const T* x, T* y, std::int64_t rows, int cols, int threads_per_row, int block_size,
                                cudaStream_t stream) {
  auto kernel = register_row_kernel<T, kPacksPerThread>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  kernel<<<grid_for(rows, block_size / threads_per_row), block_size, 0, stream>>>(x, y, rows, cols, threads_per_row);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t thread_row_3pass(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t stream) {
  thread_row_3pass_kernel<<<grid_for(rows, block_size), block_size, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t thread_row_online(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t stream) {
  thread_row_online_kernel<<<grid_for(rows, block_size), block_size, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t warp_row_online(const T* x, T* y, std::int64_t rows, int cols, int warps_per_block, cudaStream_t stream) {
  warp_row_online_kernel<<<grid_for(rows, warps_per_block), warps_per_block * kWarpSize, 0, stream>>>(x, y, rows,
                                                                                                     cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t block_row_online(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t stream) {
  block_row_online_kernel<<<static_cast<unsigned>(rows), block_size, 0, stream>>>(x, y, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t vec_online(const T* x, T* y, std::int64_t rows, int cols, int threads_per_row, int block_size,
                       cudaStream_t stream) {
  if (!same_16_byte_phase(x, y)) return cudaErrorNotSupported;
  vec_online_kernel<<<grid_for(rows, block_size / threads_per_row), block_size, 0, stream>>>(x, y, rows, cols,
                                                                                            threads_per_row);
  return cudaGetLastError();
}

template <typename T>
cudaError_t register_row(const T* x, T* y, std::int64_t rows, int cols, int threads_per_row, int block_size,
                         int packs_per_thread, cudaStream_t stream) {
  if (!same_16_byte_phase(x, y)) return cudaErrorNotSupported;
  switch (packs_per_thread) {
    case 1: return launch_register_row<T, 1>(x, y, rows, cols, threads_per_row, block_size, stream);
    case 2: return launch_register_row<T, 2>(x, y, rows, cols, threads_per_row, block_size, stream);
    case 4: return launch_register_row<T, 4>(x, y, rows, cols, threads_per_row, block_size, stream);
    case 8: return launch_register_row<T, 8>(x, y, rows, cols, threads_per_row, block_size, stream);
    case 16: return launch_register_row<T, 16>(x, y, rows, cols, threads_per_row, block_size, stream);
    default: return cudaErrorInvalidValue;
  }
}

#define SHAPETUNE_INSTANTIATE_SOFTMAX(T)                                                                          \
  template cudaError_t thread_row_3pass<T>(const T*, T*, std::int64_t, int, int, cudaStream_t);                   \
  template cudaError_t thread_row_online<T>(const T*, T*, std::int64_t, int, int, cudaStream_t);                  \
  template cudaError_t warp_row_online<T>(const T*, T*, std::int64_t, int, int, cudaStream_t);                    \
  template cudaError_t block_row_online<T>(const T*, T*, std::int64_t, int, int, cudaStream_t);                   \
  template cudaError_t vec_online<T>(const T*, T*, std::int64_t, int, int, int, cudaStream_t);                    \
  template cudaError_t register_row<T>(const T*, T*, std::int64_t, int, int, int, int, cudaStream_t);

SHAPETUNE_INSTANTIATE_SOFTMAX(float)
SHAPETUNE_INSTANTIATE_SOFTMAX(__half)
SHAPETUNE_INSTANTIATE_SOFTMAX(__nv_bfloat16)

}  // namespace shapetune::kernels::softmax
