#include "kernels/softmax_xent.cuh"

#include <algorithm>

#include "kernels/common/numeric.cuh"
#include "kernels/common/reductions.cuh"
#include "kernels/common/vector_io.cuh"

namespace shapetune::kernels::softmax_xent {
namespace {

constexpr int kLoadsInFlight = 4;  // loads (scalars or packs) each thread issues before using the first
constexpr int kMeanThreads = 512;  // the one block that averages the row losses
constexpr int kGradientThreads = 256;
constexpr unsigned kMaxGridY = 65535;

unsigned grid_for(std::int64_t work_items, std::int64_t per_block) {
  return static_cast<unsigned>((work_items + per_block - 1) / per_block);
}

__device__ __forceinline__ int clamp_label(std::int32_t label, int classes) {
  return label < 0 ? 0 : (label >= classes ? classes - 1 : label);
}

// exp(from - to) for rescaling a running sum to a new max: exactly 1 when the max did not move,
// and no NaN when both are -inf (an empty part of a row).
__device__ __forceinline__ float rescale(float from, float to) { return from == to ? 1.f : __expf(from - to); }

// The fused kernels keep the statistics of a row's elements other than its label (MaxSum: their
// max and sum of exp(x - max)) and load the label's logit on its own. When the label dominates,
// 1 - p[label] is tiny: as others / total it keeps float's relative precision, where p - 1 would
// keep only its absolute precision (~6e-8). Only the chunk of values that holds the label pays
// for leaving it out.

// Adds N values at once: one rescale of the running sum instead of one per new maximum, and N
// times fewer additions to it (a lane's running sum over a 50000-class row loses precision to
// each). -inf values (the left-out label, padding past a row's end) add nothing.
template <int N>
__device__ __forceinline__ void add_values(MaxSum& s, const float (&v)[N]) {
  float local_max = v[0];
#pragma unroll
  for (int i = 1; i < N; ++i) local_max = fmaxf(local_max, v[i]);
  const float new_max = fmaxf(s.max, local_max);
  if (new_max == -INFINITY) return;  // nothing but -inf so far: exp(-inf - -inf) would be NaN
  float local_sum = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) local_sum += __expf(v[i] - new_max);
  s.sum = s.sum * rescale(s.max, new_max) + local_sum;
  s.max = new_max;
}

// Replaces the label's value by -inf when these values (classes first_class + i * class_step)
// hold it.
template <int N>
__device__ __forceinline__ void drop_label(float (&v)[N], int first_class, int class_step, int label) {
  const int offset = label - first_class;
  if (offset < 0 || offset >= N * class_step || offset % class_step != 0) return;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i * class_step == offset) v[i] = -INFINITY;
}

// What the write pass needs from a row's statistics.
struct RowXent {
  float max;
  float scale;           // dlogits[c] = exp(x[c] - max) * scale for c != label
  float label_gradient;  // dlogits[label] = (p[label] - 1) / rows = -others / total / rows
  float loss;            // -log p[label]
};

// Per row, so the accurate expf/logf/log1pf cost nothing that shows.
__device__ __forceinline__ RowXent finish(const MaxSum& others, float label_logit, float inv_rows) {
  const float max = fmaxf(others.max, label_logit);
  const float others_sum = others.sum * rescale(others.max, max);  // 0 for a one-class row
  const float total = others_sum + expf(label_logit - max);
  const float scale = inv_rows / total;
  // The label holding the max is where the loss is small: log1p keeps its digits there.
  const float loss = label_logit == max ? log1pf(others_sum) : logf(total) + (max - label_logit);
  return {max, scale, -others_sum * scale, loss};
}

__device__ __forceinline__ float gradient(float logit, bool is_label, const RowXent& r) {
  return is_label ? r.label_gradient : __expf(logit - r.max) * r.scale;
}

template <typename T>
__device__ __forceinline__ Pack<T> gradient_pack(const Pack<T>& logits, int first_class, int label, const RowXent& r) {
  constexpr int kPack = Pack<T>::kCount;
  Pack<T> out;
#pragma unroll
  for (int i = 0; i < kPack; ++i) out.v[i] = from_float<T>(__expf(to_float(logits.v[i]) - r.max) * r.scale);
  const int offset = label - first_class;
  if (offset < 0 || offset >= kPack) return out;
#pragma unroll
  for (int i = 0; i < kPack; ++i)
    if (i == offset) out.v[i] = from_float<T>(r.label_gradient);
  return out;
}

// ---- the mean -------------------------------------------------------------------------------
// One block, a fixed split of the rows over threads and a fixed tree: the same bits every run.
// Double, so 65536 row losses add up without float's drift.
__global__ void mean_kernel(const float* __restrict__ row_losses, std::int64_t rows, float* __restrict__ loss) {
  __shared__ double partial[kMeanThreads];
  double sum = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += kMeanThreads) sum += row_losses[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kMeanThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(partial[0] / static_cast<double>(rows));
}

cudaError_t launch_mean(const float* row_losses, std::int64_t rows, float* loss, cudaStream_t stream) {
  mean_kernel<<<1, kMeanThreads, 0, stream>>>(row_losses, rows, loss);
  return cudaGetLastError();
}

float inverse(std::int64_t rows) { return static_cast<float>(1.0 / static_cast<double>(rows)); }

// ---- v1 ------------------------------------------------------------------------------------
template <typename T>
__global__ void probabilities_kernel(const T* __restrict__ logits, float* __restrict__ probs, std::int64_t rows,
                                     int classes) {
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // warp-uniform, so the shuffles below see full warps
  const T* in = logits + row * classes;
  float* out = probs + row * classes;
  MaxSum stats;
  for (int c = lane; c < classes; c += kWarpSize) stats.add(to_float(in[c]));
  stats = lane_group_reduce(stats, kWarpSize, MergeOp{});
  const float inv_sum = 1.f / stats.sum;
  for (int c = lane; c < classes; c += kWarpSize) out[c] = __expf(to_float(in[c]) - stats.max) * inv_sum;
}

// Also keeps 1 - p[label], summed from the other probabilities: the gradient kernel uses it
// for the label's element, where p - 1 would cancel.
__global__ void row_loss_kernel(const float* __restrict__ probs, const std::int32_t* __restrict__ labels,
                                float* __restrict__ row_losses, float* __restrict__ complements, std::int64_t rows,
                                int classes) {
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float* p = probs + row * classes;
  const int label = clamp_label(labels[row], classes);
  float others = 0.f;
  for (int c = lane; c < classes; c += kWarpSize) others += c == label ? 0.f : p[c];
  others = lane_group_reduce(others, kWarpSize, SumOp{});
  if (lane != 0) return;
  // -log p[label]; from the complement while that is the more precise of the two.
  row_losses[row] = others < 0.5f ? -log1pf(-others) : -logf(p[label]);
  complements[row] = others;
}

template <typename T>
__global__ void gradient_kernel(const float* __restrict__ probs, const std::int32_t* __restrict__ labels,
                                const float* __restrict__ complements, T* __restrict__ dlogits, std::int64_t rows,
                                int classes, float inv_rows) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= classes) return;
  for (std::int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const std::int64_t i = row * classes + c;
    const float g = c == clamp_label(labels[row], classes) ? -complements[row] : probs[i];
    dlogits[i] = from_float<T>(g * inv_rows);
  }
}

// ---- v2 ------------------------------------------------------------------------------------
template <typename T>
__global__ void warp_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
                                T* __restrict__ dlogits, float* __restrict__ row_losses, std::int64_t rows, int classes,
                                float inv_rows) {
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // warp-uniform, so the shuffles below see full warps
  const T* in = logits + row * classes;
  T* out = dlogits + row * classes;
  const int label = clamp_label(labels[row], classes);
  const float label_logit = to_float(in[label]);
  MaxSum others;
  for (int base = lane; base < classes; base += kLoadsInFlight * kWarpSize) {
    float v[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int c = base + u * kWarpSize;
      v[u] = c < classes ? to_float(in[c]) : -INFINITY;  // past the row: adds nothing
    }
    drop_label(v, base, kWarpSize, label);
    add_values(others, v);
  }
  others = lane_group_reduce(others, kWarpSize, MergeOp{});
  const RowXent r = finish(others, label_logit, inv_rows);
  if (lane == 0) row_losses[row] = r.loss;
  for (int c = lane; c < classes; c += kWarpSize) out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
}

// ---- v3 and v4 -----------------------------------------------------------------------------
// kStaged (v4): each thread also keeps the packs it loads in dynamic shared memory and the
// write pass reads them back from there (a thread reads only what it wrote: no barrier needed),
// so the logits leave DRAM once. Without it (v3) the write pass reads the row again, from L2
// while the row is recent.
template <typename T, bool kStaged>
__global__ void block_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
                                 T* __restrict__ dlogits, float* __restrict__ row_losses, int classes, float inv_rows) {
  constexpr int kPack = Pack<T>::kCount;
  __shared__ MaxSum partials[32];
  extern __shared__ uint4 staged_bytes[];  // one type for every instantiation; used when kStaged
  Pack<T>* staged = reinterpret_cast<Pack<T>*>(staged_bytes);
  const std::int64_t row = blockIdx.x;
  const T* in = logits + row * classes;
  T* out = dlogits + row * classes;
  const int label = clamp_label(labels[row], classes);
  const RowSplit split = RowSplit::of(in, classes);
  const T* body_in = in + split.head;
  T* body_out = out + split.head;
  const int threads = blockDim.x;
  const int step = kLoadsInFlight * threads;

  const float label_logit = to_float(in[label]);
  MaxSum others;
  for (int k = threadIdx.x; k < split.edges(); k += threads) {
    const int c = split.edge_index<T>(k);
    if (c != label) add_values(others, {to_float(in[c])});
  }
  for (int base = threadIdx.x; base < split.packs; base += step) {
    Pack<T> packs[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int p = base + u * threads;
      if (p < split.packs) packs[u] = load_pack(body_in + p * kPack);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int p = base + u * threads;
      if (p < split.packs) {
        if (kStaged) staged[p] = packs[u];
        float v[kPack];
        to_floats(packs[u], v);
        drop_label(v, split.head + p * kPack, 1, label);
        add_values(others, v);
      }
    }
  }
  others = group_reduce(others, threads, partials, MergeOp{});
  const RowXent r = finish(others, label_logit, inv_rows);
  if (threadIdx.x == 0) row_losses[row] = r.loss;

  for (int k = threadIdx.x; k < split.edges(); k += threads) {
    const int c = split.edge_index<T>(k);
    out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
  }
  for (int base = threadIdx.x; base < split.packs; base += step) {
    Pack<T> packs[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int p = base + u * threads;
      if (p < split.packs) packs[u] = kStaged ? staged[p] : load_pack(body_in + p * kPack);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int p = base + u * threads;
      if (p < split.packs) store_pack(body_out + p * kPack, gradient_pack(packs[u], split.head + p * kPack, label, r));
    }
  }
}

// ---- v5 ------------------------------------------------------------------------------------

// The largest block each instantiation is built for: at most 64 registers per thread up to 32
// cached floats, so that 1024 threads fit (a 32000-class f32 row is 1024 threads x 8 packs).
template <typename T, int kPacksPerThread>
constexpr int register_row_max_threads() {
  constexpr int floats = kPacksPerThread * Pack<T>::kCount;
  return floats <= 32 ? 1024 : (floats <= 64 ? 512 : 256);
}

// Where a thread of a row's group holds the label among its cached body values (index
// i * kPack + j of pack i, element j), or -1: one register to compare with compile-time slots
// instead of a class index per cached value.
template <typename T>
__device__ __forceinline__ int cached_label_slot(const RowSplit& split, int label, int thread, int threads_per_row) {
  constexpr int kPack = Pack<T>::kCount;
  const int offset = label - split.head;
  if (offset < 0 || offset >= split.packs * kPack) return -1;
  const int pack = offset / kPack;
  if (pack % threads_per_row != thread) return -1;
  return pack / threads_per_row * kPack + offset % kPack;
}

template <typename T, int kPacksPerThread>
__global__ void __launch_bounds__(register_row_max_threads<T, kPacksPerThread>())
    register_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels, T* __restrict__ dlogits,
                        float* __restrict__ row_losses, std::int64_t rows, int classes, int threads_per_row,
                        float inv_rows) {
  constexpr int kPack = Pack<T>::kCount;
  __shared__ float partials[32];
  const RowGroup g = RowGroup::of(rows, threads_per_row);
  const std::int64_t row = g.active ? g.row : 0;  // idle threads look at row 0 and write nothing
  const T* in = logits + row * classes;
  const int label = clamp_label(labels[row], classes);
  const RowSplit split = RowSplit::of(in, classes);

  // The body's only trip through memory: every pack is requested before any is used.
  Pack<T> cache[kPacksPerThread];
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const int p = g.thread + i * threads_per_row;
    if (g.active && p < split.packs) cache[i] = load_pack(in + split.head + p * kPack);
  }
  const float label_logit = to_float(in[label]);
  const int label_slot = cached_label_slot<T>(split, label, g.thread, threads_per_row);

  // With the row in registers, a max sweep and then a sum sweep cost no memory traffic and
  // need no rescaling: fewer instructions per element than one online sweep, which matters
  // here, where one block fills an SM and its arithmetic does not overlap its memory traffic.
  // Edge elements (under 2 packs' worth) are read again, from cache, rather than held: that lets
  // groups narrower than a row's edges (4 threads for a 17-class row) hold a row.
  float max = -INFINITY;
  if (g.active) {
    for (int k = g.thread; k < split.edges(); k += threads_per_row)
      max = fmaxf(max, to_float(in[split.edge_index<T>(k)]));
#pragma unroll
    for (int i = 0; i < kPacksPerThread; ++i) {
      if (g.thread + i * threads_per_row < split.packs) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) max = fmaxf(max, to_float(cache[i].v[j]));
      }
    }
  }
  max = group_reduce(max, threads_per_row, partials, MaxOp{});

  float sum = 0.f;  // of the elements other than the label
  if (g.active) {
    for (int k = g.thread; k < split.edges(); k += threads_per_row) {
      const int c = split.edge_index<T>(k);
      if (c != label) sum += __expf(to_float(in[c]) - max);
    }
#pragma unroll
    for (int i = 0; i < kPacksPerThread; ++i) {
      if (g.thread + i * threads_per_row < split.packs) {
        float v[kPack];
        to_floats(cache[i], v);
        drop_label(v, i * kPack, 1, label_slot);
#pragma unroll
        for (int j = 0; j < kPack; ++j) sum += __expf(v[j] - max);
      }
    }
  }
  sum = group_reduce(sum, threads_per_row, partials, SumOp{});
  if (!g.active) return;
  const RowXent r = finish(MaxSum{max, sum}, label_logit, inv_rows);
  if (g.thread == 0) row_losses[g.row] = r.loss;

  T* out = dlogits + row * classes;
  for (int k = g.thread; k < split.edges(); k += threads_per_row) {
    const int c = split.edge_index<T>(k);
    out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
  }
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const int p = g.thread + i * threads_per_row;
    if (p < split.packs) store_pack(out + split.head + p * kPack, gradient_pack(cache[i], i * kPack, label_slot, r));
  }
}

template <typename Kernel>
cudaError_t check_block_fits(Kernel kernel, int block_size) {
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return block_size > attributes.maxThreadsPerBlock ? cudaErrorLaunchOutOfResources : cudaSuccess;
}

template <typename T, int kPacksPerThread>
cudaError_t launch_register_row(const T* logits, const std::int32_t* labels, T* dlogits, float* row_losses,
                                std::int64_t rows, int classes, int threads_per_row, int block_size,
                                cudaStream_t stream) {
  auto kernel = register_row_kernel<T, kPacksPerThread>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  kernel<<<grid_for(rows, block_size / threads_per_row), block_size, 0, stream>>>(
      logits, labels, dlogits, row_losses, rows, classes, threads_per_row, inverse(rows));
  return cudaGetLastError();
}

template <typename T>
using RegisterRowLaunch = cudaError_t (*)(const T*, const std::int32_t*, T*, float*, std::int64_t, int, int, int,
                                          cudaStream_t);

template <typename T>
RegisterRowLaunch<T> register_row_launcher(int packs_per_thread) {
  switch (packs_per_thread) {
    case 1: return launch_register_row<T, 1>;
    case 2: return launch_register_row<T, 2>;
    case 4: return launch_register_row<T, 4>;
    case 8: return launch_register_row<T, 8>;
    case 16: return launch_register_row<T, 16>;
    default: return nullptr;
  }
}

}  // namespace

template <typename T>
cudaError_t unfused(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                    int classes, void* workspace, cudaStream_t stream) {
  float* probs = static_cast<float*>(workspace);
  float* row_losses = probs + rows * classes;
  float* complements = row_losses + rows;
  const unsigned row_blocks = grid_for(rows, unfused_rows_per_block);
  probabilities_kernel<<<row_blocks, unfused_rows_per_block * kWarpSize, 0, stream>>>(logits, probs, rows, classes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  row_loss_kernel<<<row_blocks, unfused_rows_per_block * kWarpSize, 0, stream>>>(probs, labels, row_losses, complements,
                                                                                 rows, classes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const dim3 grid(grid_for(classes, kGradientThreads), static_cast<unsigned>(std::min<std::int64_t>(rows, kMaxGridY)));
  gradient_kernel<<<grid, kGradientThreads, 0, stream>>>(probs, labels, complements, dlogits, rows, classes,
                                                         inverse(rows));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_mean(row_losses, rows, loss, stream);
}

template <typename T>
cudaError_t fused_warp_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int warps_per_block, void* workspace, cudaStream_t stream) {
  float* row_losses = static_cast<float*>(workspace);
  warp_row_kernel<<<grid_for(rows, warps_per_block), warps_per_block * kWarpSize, 0, stream>>>(
      logits, labels, dlogits, row_losses, rows, classes, inverse(rows));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_mean(row_losses, rows, loss, stream);
}

template <typename T>
cudaError_t fused_block_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                            int classes, int block_size, void* workspace, cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  float* row_losses = static_cast<float*>(workspace);
  block_row_kernel<T, false><<<static_cast<unsigned>(rows), block_size, 0, stream>>>(
      logits, labels, dlogits, row_losses, classes, inverse(rows));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_mean(row_losses, rows, loss, stream);
}

template <typename T>
cudaError_t fused_smem_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int block_size, void* workspace, cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  const std::size_t staged_bytes = staged_row_bytes(classes, sizeof(T));
  auto kernel = block_row_kernel<T, true>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  const int opt_in = static_cast<int>(staged_bytes);
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, opt_in);
      e != cudaSuccess)
    return e;
  float* row_losses = static_cast<float*>(workspace);
  kernel<<<static_cast<unsigned>(rows), block_size, staged_bytes, stream>>>(logits, labels, dlogits, row_losses,
                                                                            classes, inverse(rows));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_mean(row_losses, rows, loss, stream);
}

template <typename T>
cudaError_t fused_register_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                               int classes, int threads_per_row, int block_size, int packs_per_thread, void* workspace,
                               cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  const auto launch = register_row_launcher<T>(packs_per_thread);
  if (!launch) return cudaErrorInvalidValue;
  float* row_losses = static_cast<float*>(workspace);
  const cudaError_t e = launch(logits, labels, dlogits, row_losses, rows, classes, threads_per_row, block_size, stream);
  if (e != cudaSuccess) return e;
  return launch_mean(row_losses, rows, loss, stream);
}

#define SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(T)                                                                         \
  template cudaError_t unfused<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, void*, cudaStream_t); \
  template cudaError_t fused_warp_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,    \
                                         cudaStream_t);                                                               \
  template cudaError_t fused_block_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,   \
                                          cudaStream_t);                                                              \
  template cudaError_t fused_register_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, int,  \
                                             int, void*, cudaStream_t);                                               \
  template cudaError_t fused_smem_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,    \
                                         cudaStream_t);

SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(float)
SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(__half)
SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(__nv_bfloat16)

}  // namespace shapetune::kernels::softmax_xent
