#include "kernels/softmax_xent.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <utility>

#include "kernels/common/grid.cuh"
#include "kernels/common/mbarrier.cuh"
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
__device__ __forceinline__ float rescale(float from, float to) { return from == to ? 1.f : fast_exp(from - to); }

// The fused kernels keep the statistics of a row's elements other than its label (MaxSum: their
// max and sum of exp(x - max)) and load the label's logit on its own. When the label dominates,
// 1 - p[label] is tiny: as others / total it keeps float's relative precision, where p - 1 would
// keep only its absolute precision (~6e-8). Only the chunk of values that holds the label pays
// for leaving it out.

// Adds N values at once: one rescale of the running sum instead of one per new maximum, and N
// times fewer additions to it (a lane's running sum over a 50000-class row loses precision to
// each). -inf values (the left-out label, padding past a row's end) add nothing.
//
// kExpFma (the 16-bit kernels): exp(v - max) as 2^(v * log2e - max * log2e), one FFMA and the
// MUFU instead of a subtract, a multiply and the MUFU. The product max * log2e is rounded, which
// moves each exp by up to ~1e-6 relative at logits of tens: nothing next to a 16-bit rtol, too
// much for f32's 1e-5 with room, so f32 keeps the exact subtraction.
template <int N, bool kExpFma = false>
__device__ __forceinline__ void add_values(MaxSum& s, const float (&v)[N]) {
  float local_max = v[0];
#pragma unroll
  for (int i = 1; i < N; ++i) local_max = fmaxf(local_max, v[i]);
  const float new_max = fmaxf(s.max, local_max);
  if (new_max == -INFINITY) return;  // nothing but -inf so far: exp(-inf - -inf) would be NaN
  // A pairwise sum: a chain log2(N) additions long instead of N, so the exps of one batch
  // retire without waiting on each other's adds.
  float e[N];
  if constexpr (kExpFma) {
    const float shift = new_max * kLog2e;
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = fast_exp2(fmaf(v[i], kLog2e, -shift));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = fast_exp(v[i] - new_max);
  }
#pragma unroll
  for (int width = 1; width < N; width *= 2)
#pragma unroll
    for (int i = 0; i + width < N; i += 2 * width) e[i] += e[i + width];
  s.sum = s.sum * rescale(s.max, new_max) + e[0];
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
  float exp2_offset;     // ... = 2^(x[c] * log2e + exp2_offset): log2(scale) - max * log2e
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
  return {max, scale, __log2f(scale) - max * kLog2e, -others_sum * scale, loss};
}

__device__ __forceinline__ float gradient(float logit, bool is_label, const RowXent& r) {
  return is_label ? r.label_gradient : fast_exp(logit - r.max) * r.scale;
}

// The gradient of a pack of logits. kMayHoldLabel: the label may be among them, at label_offset
// (its class minus the pack's first; any other value: not here); it takes the label's gradient.
// The label goes in among the floats, before they are narrowed: one 128-bit store per pack.
template <typename T, bool kMayHoldLabel = true>
__device__ __forceinline__ Pack<T> gradient_pack(const Pack<T>& logits, int label_offset, const RowXent& r) {
  constexpr int kPack = Pack<T>::kCount;
  float g[kPack];
  to_floats(logits, g);
  if constexpr (sizeof(T) == 2) {
    // One FFMA and the MUFU per element, the scale folded into the exponent: log2(scale) is
    // rounded at ~25 in magnitude (2e-6, about 1e-6 relative in the gradient), far under half
    // a 16-bit ulp. f32 keeps the subtraction and the multiply.
#pragma unroll
    for (int i = 0; i < kPack; ++i) g[i] = fast_exp2(fmaf(g[i], kLog2e, r.exp2_offset));
  } else {
#pragma unroll
    for (int i = 0; i < kPack; ++i) g[i] = fast_exp(g[i] - r.max) * r.scale;
  }
  if (kMayHoldLabel && static_cast<unsigned>(label_offset) < kPack) {
#pragma unroll
    for (int i = 0; i < kPack; ++i)
      if (i == label_offset) g[i] = r.label_gradient;
  }
  return pack_of_floats<T>(g);
}

// ---- the mean -------------------------------------------------------------------------------
// A fixed split of the row losses over one block's threads and a fixed tree: the same bits every
// run. Each 16-byte chunk of 4 losses is added in float, the chunks in double, so 65536 row
// losses add up without float's drift.
//
// On sm_90 the mean kernel is its fused kernel's programmatic dependent (launch_then_mean): it
// launches as soon as the fused blocks start and waits in wait_for_primary_grid until their row
// losses are visible. That costs no memset and no atomic ticket at each block's end, as a mean
// added by the last block to finish did; what it costs, and what else was tried, is in
// reports/h200/2026-12-01-xent-mean-cost.
__global__ void __launch_bounds__(kMeanThreads)
    mean_kernel(const float* __restrict__ row_losses, std::int64_t rows, float* __restrict__ loss) {
  grid_dependency_sync();
  constexpr int kUnroll = 4;  // chunks in flight per thread: 8192 row losses take one round
  __shared__ double warp_sums[kMeanThreads / kWarpSize];
  // Losses before the first 16-byte boundary (the unfused chain's row losses follow its
  // probabilities, so they may start anywhere) and after the last whole chunk are read one each.
  const int misaligned = static_cast<int>(reinterpret_cast<std::uintptr_t>(row_losses) % 16 / sizeof(float));
  const int head = static_cast<int>(std::min<std::int64_t>(rows, (4 - misaligned) % 4));
  const std::int64_t chunks = (rows - head) / 4;
  const int edges = head + static_cast<int>(rows - head - chunks * 4);
  const auto* body = reinterpret_cast<const float4*>(row_losses + head);
  double sum = 0;
  for (std::int64_t base = threadIdx.x; base < chunks; base += kUnroll * kMeanThreads) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t i = base + u * kMeanThreads;
      v[u] = i < chunks ? __ldcg(body + i) : float4{};  // from L2: other SMs wrote them
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) sum += static_cast<double>((v[u].x + v[u].y) + (v[u].z + v[u].w));
  }
  if (static_cast<int>(threadIdx.x) < edges) {
    const int k = static_cast<int>(threadIdx.x);
    sum += static_cast<double>(__ldcg(row_losses + (k < head ? k : head + chunks * 4 + (k - head))));
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
  if (threadIdx.x % kWarpSize == 0) warp_sums[threadIdx.x / kWarpSize] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int w = 0; w < kMeanThreads / kWarpSize; ++w) total += warp_sums[w];
  *loss = static_cast<float>(total / static_cast<double>(rows));
}

cudaLaunchConfig_t launch_config(unsigned grid, unsigned block, std::size_t dynamic_shared, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = dynamic_shared;
  config.stream = stream;
  return config;
}

// The launch attribute that makes a kernel the programmatic dependent of the one queued before
// it on its stream (sm_90): it may start once every block of that one has executed
// griddepcontrol.launch_dependents, and waits for the rest in griddepcontrol.wait.
cudaLaunchAttribute programmatic_dependent() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// Queues `kernel` on `config` (after every check that could refuse it), then the mean of the
// row losses it stores: a programmatic dependent on sm_90, an ordinary launch before.
template <typename... Params, typename... Args>
cudaError_t launch_then_mean(const cudaLaunchConfig_t& config, const float* row_losses, std::int64_t rows, float* loss,
                             void (*kernel)(Params...), Args... args) {
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...); e != cudaSuccess) return e;
  cudaLaunchConfig_t mean = launch_config(1, kMeanThreads, 0, config.stream);
  cudaLaunchAttribute programmatic = programmatic_dependent();
  if (major >= 9) mean.attrs = &programmatic, mean.numAttrs = 1;
  return cudaLaunchKernelEx(&mean, mean_kernel, row_losses, rows, loss);
}

float inverse(std::int64_t rows) { return static_cast<float>(1.0 / static_cast<double>(rows)); }

// ---- v1 ------------------------------------------------------------------------------------
template <typename T>
__global__ void probabilities_kernel(const T* __restrict__ logits, float* __restrict__ probs, std::int64_t rows,
                                     int classes) {
  grid_dependency_sync();
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // warp-uniform, so the shuffles below see full warps
  const T* in = logits + row * classes;
  float* out = probs + row * classes;
  const MaxSum stats = warp_row_max_sum(in, classes, lane);
  const float inv_sum = 1.f / stats.sum;
  for (int c = lane; c < classes; c += kWarpSize) out[c] = fast_exp(to_float(in[c]) - stats.max) * inv_sum;
}

// Also keeps 1 - p[label], summed from the other probabilities: the gradient kernel uses it
// for the label's element, where p - 1 would cancel.
__global__ void row_loss_kernel(const float* __restrict__ probs, const std::int32_t* __restrict__ labels,
                                float* __restrict__ row_losses, float* __restrict__ complements, std::int64_t rows,
                                int classes) {
  grid_dependency_sync();
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
  grid_dependency_sync();
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
                                T* __restrict__ dlogits, float* __restrict__ row_losses,
                                std::int64_t rows, int classes, float inv_rows) {
  grid_dependency_sync();  // which also lets the mean kernel launch
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row < rows) {  // warp-uniform, so the shuffles below see full warps
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
}

// ---- v3 and v4 -----------------------------------------------------------------------------
// kStaged (v4): each thread also keeps the packs it loads in dynamic shared memory and the
// write pass reads them back from there (a thread reads only what it wrote: no barrier needed),
// so the logits leave DRAM once. Without it (v3) the write pass reads the row again, from L2
// while the row is recent.
template <typename T, bool kStaged>
__global__ void block_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
                                 T* __restrict__ dlogits, float* __restrict__ row_losses,
                                 std::int64_t rows, int classes, float inv_rows) {
  grid_dependency_sync();  // which also lets the mean kernel launch
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
        add_values<kPack, sizeof(T) == 2>(others, v);
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
      if (p < split.packs)
        store_pack(body_out + p * kPack, gradient_pack(packs[u], label - (split.head + p * kPack), r));
    }
  }
}

// ---- v5 and v6 -----------------------------------------------------------------------------
// v5: a group of threads_per_row threads (a block, or part of one) holds a row body in
// registers. v6: blocks_per_row blocks of one thread-block cluster (sm_90) hold it, each a
// slice: a 32000-class f32 row (128 KB) then takes four 256-thread blocks of 32 KB instead of
// one block that fills an SM, so several rows are in flight per SM, at different phases (one
// reading while another reduces or writes) and the memory system never waits for a barrier.
//
// Each group first reduces its own slice: the max of its values other than the label, then
// exp(x - that max) in place of each cached value and their sum. A cluster then merges its
// blocks' (max, sum) pairs through distributed shared memory, in rank order in every block (the
// same bits everywhere), and a block's cached values become gradients with one multiply by
// exp(its max - the row's max) * scale: one exp per element, and one exchange per row.

// The largest block each instantiation is built for: at most 64 registers per thread up to 32
// cached floats, so that 1024 threads fit (a 32000-class f32 row is 1024 threads x 8 packs).
template <typename T, int kPacksPerThread>
constexpr int register_row_max_threads() {
  constexpr int floats = kPacksPerThread * Pack<T>::kCount;
  return floats <= 32 ? 1024 : (floats <= 64 ? 512 : 256);
}

// Which row a thread works on, and its place among the threads that share the row (all of a
// cluster's blocks in v6). Threads past the last row (v5) are inactive but must still join the
// block's barriers.
struct RowSlice {
  std::int64_t row;
  int thread;   // 0 .. threads - 1
  int threads;  // threads_per_row * blocks_per_row
  bool active;

  __device__ static RowSlice of(std::int64_t rows, int threads_per_row, int blocks_per_row) {
    if (blocks_per_row == 1) {
      const RowGroup g = RowGroup::of(rows, threads_per_row);
      return {g.row, g.thread, threads_per_row, g.active};
    }
    const int rank = static_cast<int>(blockIdx.x % blocks_per_row);  // the block's rank in its cluster
    return {blockIdx.x / blocks_per_row, rank * threads_per_row + static_cast<int>(threadIdx.x),
            threads_per_row * blocks_per_row, true};
  }
};

// Where a thread holds the label among its cached body values (index i * kPack + j of pack i,
// element j), or -1: one register to compare with compile-time slots instead of a class index
// per cached value.
template <typename T>
__device__ __forceinline__ int cached_label_slot(const RowSplit& split, int label, int thread, int threads) {
  constexpr int kPack = Pack<T>::kCount;
  const int offset = label - split.head;
  if (offset < 0 || offset >= split.packs * kPack) return -1;
  const int pack = offset / kPack;
  if (pack % threads != thread) return -1;
  return pack / threads * kPack + offset % kPack;
}

// The row's statistics from each block's: every thread of every block of the cluster calls this
// once. It leaves this block's slot readable by the others; the caller must call
// wait_until_cluster_has_read() before it exits.
__device__ MaxSum merge_over_cluster(MaxSum mine, int blocks_per_row) {
#if __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  __shared__ MaxSum slot;
  const cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) slot = mine;
  cluster.sync();
  MaxSum row;
  for (int rank = 0; rank < blocks_per_row; ++rank) row = merge(row, *cluster.map_shared_rank(&slot, rank));
  cluster.barrier_arrive();  // done reading the others' slots; waited for at exit
  return row;
#else
  __trap();  // unreachable: the launch refuses clusters below sm_90
  return mine;
#endif
}

__device__ void wait_until_cluster_has_read() {
#if __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().barrier_wait();
#endif
}

template <typename T, int kPacksPerThread>
__global__ void __launch_bounds__(register_row_max_threads<T, kPacksPerThread>())
    register_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels, T* __restrict__ dlogits,
                        float* __restrict__ row_losses, std::int64_t rows, int classes,
                        int threads_per_row, int blocks_per_row, float inv_rows) {
  grid_dependency_sync();  // which also lets the mean kernel launch
  constexpr int kPack = Pack<T>::kCount;
  constexpr int kValues = kPacksPerThread * kPack;
  __shared__ float partials[32];
  const RowSlice s = RowSlice::of(rows, threads_per_row, blocks_per_row);
  const std::int64_t row = s.active ? s.row : 0;  // idle threads look at row 0 and write nothing
  const T* in = logits + row * classes;
  T* out = dlogits + row * classes;
  const int label = clamp_label(labels[row], classes);
  const RowSplit split = RowSplit::of(in, classes);

  // The body's only trip through memory: every pack is requested before any is used.
  Pack<T> packs[kPacksPerThread];
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const int p = s.thread + i * s.threads;
    if (s.active && p < split.packs) packs[i] = load_pack(in + split.head + p * kPack);
  }
  const float label_logit = to_float(in[label]);
  const int label_slot = cached_label_slot<T>(split, label, s.thread, s.threads);
  float v[kValues];  // the cached values; -inf where a thread holds none (adds nothing below)
#pragma unroll
  for (int i = 0; i < kPacksPerThread; ++i) {
    const bool held = s.active && s.thread + i * s.threads < split.packs;
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[i * kPack + j] = held ? to_float(packs[i].v[j]) : -INFINITY;
  }
  drop_label(v, 0, 1, label_slot);  // its gradient comes from the statistics alone

  // Edge elements (under 2 packs' worth) are read again, from cache, rather than held: that
  // lets groups narrower than a row's edges (4 threads for a 17-class row) hold a row.
  float max = -INFINITY;
  for (int k = s.thread; s.active && k < split.edges(); k += s.threads) {
    const int c = split.edge_index<T>(k);
    if (c != label) max = fmaxf(max, to_float(in[c]));
  }
#pragma unroll
  for (int k = 0; k < kValues; ++k) max = fmaxf(max, v[k]);
  max = group_reduce(max, threads_per_row, partials, MaxOp{});
  const float shift = max == -INFINITY ? 0.f : max;  // a slice with nothing in it: exp(-inf) = 0, no NaN

  float sum = 0.f;
  for (int k = s.thread; s.active && k < split.edges(); k += s.threads) {
    const int c = split.edge_index<T>(k);
    if (c != label) sum += fast_exp(to_float(in[c]) - shift);
  }
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
    v[k] = fast_exp(v[k] - shift);
    sum += v[k];
  }
  sum = group_reduce(sum, threads_per_row, partials, SumOp{});

  MaxSum others{max, sum};
  if (blocks_per_row > 1) others = merge_over_cluster(others, blocks_per_row);
  const RowXent r = finish(others, label_logit, inv_rows);
  if (s.active && s.thread == 0) row_losses[s.row] = r.loss;

  if (s.active) {
    for (int k = s.thread; k < split.edges(); k += s.threads) {
      const int c = split.edge_index<T>(k);
      out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
    }
    const float cached_scale = rescale(max, r.max) * r.scale;  // from this slice's max to the row's
#pragma unroll
    for (int i = 0; i < kPacksPerThread; ++i) {
      const int p = s.thread + i * s.threads;
      if (p >= split.packs) continue;
      float g[kPack];
#pragma unroll
      for (int j = 0; j < kPack; ++j) g[j] = v[i * kPack + j] * cached_scale;
      const int label_offset = label_slot - i * kPack;
      if (label_offset >= 0 && label_offset < kPack) {
#pragma unroll
        for (int j = 0; j < kPack; ++j)
          if (j == label_offset) g[j] = r.label_gradient;
      }
      store_pack(out + split.head + p * kPack, pack_of_floats<T>(g));
    }
  }
  if (blocks_per_row > 1) wait_until_cluster_has_read();
}

// ---- v7 ------------------------------------------------------------------------------------
// Warp 0's first lane produces; the other warps consume. The producer streams each row's body
// in chunks of chunk_bytes, one per ring slot in turn; the consumers take them in the same order.
// Shared memory: the slots, then their full and empty mbarriers, then a RowMeta per slot.
//
// A row's chunks stay in the ring from its reduction to its write pass, so the producer can run
// ahead only by the slots the ring holds past one row: the launch refuses rows that do not fit.
//
// Which rows a block takes (block mode): row blockIdx.x first, then either row + gridDim.x, ...
// (static) or whatever row it claims next from a counter in the workspace (claimed). Claiming
// balances SMs that run slower than others: with the static split, Nsight Compute showed the
// H200's SMs going idle from 87.5% of the kernel's cycles on (bf16 8192 x 32000, 31 rows each),
// 6.7% idle on average. The producer tells the consumers the row (and its label) in the RowMeta
// of the row's first slot, written before that slot's arrival (a release the consumers' wait
// acquires); row -1 there, on a slot with no bytes, ends the block.
constexpr unsigned kRingBarrier = 1;  // the consumers' named barrier (0 is __syncthreads)

struct RowMeta {
  std::int64_t row;  // -1: no more rows for this block
  int label;         // clamped
  int unused;
};
static_assert(sizeof(RowMeta) == kRingMetaBytes);

struct Ring {
  unsigned data;  // shared address of slot 0
  unsigned full;  // shared address of the slots' full barriers, 8 bytes each; then the empty ones
  unsigned empty;
  RowMeta* metas;  // one per slot (generic address)
  int chunk_bytes;
  int slots;
};

// A position in the walk: the slot, and the parity of that slot's current use.
struct RingCursor {
  int slot = 0;
  unsigned phase = 0;
  __device__ void advance(int slots) {
    if (++slot == slots) slot = 0, phase ^= 1;
  }
};

// Slots a row takes in block mode: one per chunk of its body, and one with no bytes for a row
// with no body (it carries the RowMeta).
__device__ __forceinline__ int ring_slots_of(const RowSplit& split, int chunk_packs) {
  return max((split.packs + chunk_packs - 1) / chunk_packs, 1);
}

// Block mode's producer. claims: null for the static order, else the counter to claim rows from
// (reset by the launch's first kernel, which this grid depends on and waits for at its start).
//
// A block claims its next row only once that row's first slot is free, i.e. once its consumers
// have finished the row before the current one: one row of lookahead, as little as the prefetch
// allows (the claim and the label's load then delay that slot's copy by two round trips, a row
// before the consumers need it). A claim two rows ahead spread the blocks' end times wider
// (reports/h200/2026-12-01-xent-claims-at-7e347c7).
template <typename T>
__device__ void produce_block_rows(const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
                                   std::int64_t rows, int classes, const Ring& ring, unsigned* claims) {
  RingCursor at;
  const int chunk_packs = ring.chunk_bytes / 16;
  std::int64_t row = blockIdx.x;  // the grid has no more blocks than rows
  int label = clamp_label(labels[row], classes);
  for (;;) {
    const T* in = logits + row * classes;
    const RowSplit split = RowSplit::of(in, classes);
    const char* body = reinterpret_cast<const char*>(in + split.head);
    const std::int64_t body_bytes = static_cast<std::int64_t>(split.packs) * 16;
    const int slots = ring_slots_of(split, chunk_packs);
    for (int s = 0; s < slots; ++s, at.advance(ring.slots)) {
      mbarrier_wait(ring.empty + 8 * at.slot, at.phase ^ 1);  // the consumers have written this slot's last row out
      const unsigned full = ring.full + 8 * at.slot;
      if (s == 0) ring.metas[at.slot] = RowMeta{row, label, 0};
      if (body_bytes == 0) {
        mbarrier_arrive(full);  // completes the phase with no bytes to wait for
      } else {
        const std::int64_t offset = static_cast<std::int64_t>(s) * ring.chunk_bytes;
        const auto bytes = static_cast<unsigned>(min(static_cast<std::int64_t>(ring.chunk_bytes), body_bytes - offset));
        mbarrier_arrive_expect_tx(full, bytes);
        bulk_copy_to_shared(ring.data + static_cast<unsigned>(at.slot * ring.chunk_bytes), body + offset, bytes, full);
      }
    }
    std::int64_t next = row + gridDim.x;
    if (claims) {
      mbarrier_wait(ring.empty + 8 * at.slot, at.phase ^ 1);  // the next row's first slot is free
      next = gridDim.x + static_cast<std::int64_t>(atomicAdd(claims, 1u));
    }
    if (next >= rows) break;
    row = next;
    label = clamp_label(labels[row], classes);
  }
  mbarrier_wait(ring.empty + 8 * at.slot, at.phase ^ 1);
  ring.metas[at.slot].row = -1;
  mbarrier_arrive(ring.full + 8 * at.slot);
}

// Warp mode's producer: rows blockIdx.x, + gridDim.x, ..., each body in one slot (the consumer
// warps know their rows and slots by the row's index).
template <typename T>
__device__ void produce_warp_rows(const T* __restrict__ logits, std::int64_t rows, int classes, const Ring& ring) {
  RingCursor at;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x, at.advance(ring.slots)) {
    const T* in = logits + row * classes;
    const RowSplit split = RowSplit::of(in, classes);
    const unsigned bytes = static_cast<unsigned>(split.packs) * 16;
    const unsigned full = ring.full + 8 * at.slot;
    mbarrier_wait(ring.empty + 8 * at.slot, at.phase ^ 1);
    if (bytes == 0) {
      mbarrier_arrive(full);  // one slot per row all the same
    } else {
      mbarrier_arrive_expect_tx(full, bytes);
      bulk_copy_to_shared(ring.data + static_cast<unsigned>(at.slot * ring.chunk_bytes), in + split.head, bytes, full);
    }
  }
}

// A consumer thread takes the packs first, first + step, ... < count of a chunk, kRingBatch at a
// time: a full batch needs no bounds checks, and only the chunk that holds the row's label pays
// for looking for it (kMayHoldLabel, label_offset: the label's class minus the chunk's first).
constexpr int kRingBatch = 2;

// Widens a pack; with kMayHoldLabel, a label among its values (label_offset in [0, kPack)) goes
// to *label_logit and -inf takes its place.
template <typename T, bool kMayHoldLabel>
__device__ __forceinline__ void widen_taking_label(const Pack<T>& pack, int label_offset, float (&v)[Pack<T>::kCount],
                                                   float* label_logit) {
  constexpr int kPack = Pack<T>::kCount;
  to_floats(pack, v);
  if (kMayHoldLabel && static_cast<unsigned>(label_offset) < kPack) {
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      if (j == label_offset) *label_logit = v[j], v[j] = -INFINITY;
  }
}

template <typename T, bool kMayHoldLabel>
__device__ __forceinline__ void add_ring_batch(const Pack<T>* packs, int p, int count, int step, int label_offset,
                                               bool full, MaxSum& others, float* label_logit) {
  constexpr int kPack = Pack<T>::kCount;
  float v[kRingBatch * kPack];
#pragma unroll
  for (int u = 0; u < kRingBatch; ++u) {
    const int q = p + u * step;
    float w[kPack];
    if (full || q < count) {
      widen_taking_label<T, kMayHoldLabel>(load_pack(reinterpret_cast<const T*>(packs + q)), label_offset - q * kPack,
                                           w, label_logit);
    } else {
#pragma unroll
      for (int j = 0; j < kPack; ++j) w[j] = -INFINITY;  // adds nothing
    }
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[u * kPack + j] = w[j];
  }
  add_values<kRingBatch * kPack, sizeof(T) == 2>(others, v);
}

template <typename T, bool kMayHoldLabel>
__device__ __forceinline__ void add_ring_packs(const Pack<T>* packs, int count, int first, int step, int label_offset,
                                               MaxSum& others, float* label_logit) {
  int p = first;
  for (; p + (kRingBatch - 1) * step < count; p += kRingBatch * step)
    add_ring_batch<T, kMayHoldLabel>(packs, p, count, step, label_offset, true, others, label_logit);
  if (p < count) add_ring_batch<T, kMayHoldLabel>(packs, p, count, step, label_offset, false, others, label_logit);
}

// The gradients of the same packs, to out (the chunk's first element in dlogits).
template <typename T, bool kMayHoldLabel>
__device__ __forceinline__ void write_ring_packs(const Pack<T>* packs, T* out, int count, int first, int step,
                                                 int label_offset, const RowXent& r) {
  constexpr int kPack = Pack<T>::kCount;
  int p = first;
  for (; p + (kRingBatch - 1) * step < count; p += kRingBatch * step) {
    Pack<T> held[kRingBatch];
#pragma unroll
    for (int u = 0; u < kRingBatch; ++u) held[u] = load_pack(reinterpret_cast<const T*>(packs + p + u * step));
#pragma unroll
    for (int u = 0; u < kRingBatch; ++u) {
      const int q = p + u * step;
      store_pack(out + q * kPack, gradient_pack<T, kMayHoldLabel>(held[u], label_offset - q * kPack, r));
    }
  }
  for (; p < count; p += step)
    store_pack(out + p * kPack, gradient_pack<T, kMayHoldLabel>(load_pack(reinterpret_cast<const T*>(packs + p)),
                                                                label_offset - p * kPack, r));
}

template <typename T>
__device__ void consume_ring_rows(const T* __restrict__ logits, T* __restrict__ dlogits,
                                  float* __restrict__ row_losses, int classes, const Ring& ring,
                                  const unsigned char* slots_generic, float inv_rows) {
  constexpr int kPack = Pack<T>::kCount;
  static_assert(kMaxRingConsumerWarps <= kWarpSize);
  // Indexed by the row's parity: a row's partials are rewritten two rows later, after every
  // consumer has passed the barrier of the row between, so one barrier per row suffices.
  __shared__ MaxSum partials[2][kMaxRingConsumerWarps];
  __shared__ float label_logits[2];
  const int thread = static_cast<int>(threadIdx.x) - kWarpSize, threads = static_cast<int>(blockDim.x) - kWarpSize;
  const int warp = thread / kWarpSize, warps = threads / kWarpSize, lane = thread % kWarpSize;
  const int chunk_packs = ring.chunk_bytes / 16;

  RingCursor at;
  for (int parity = 0;; parity ^= 1) {
    mbarrier_wait(ring.full + 8 * at.slot, at.phase);  // the row's first slot: its RowMeta, its first chunk
    const RowMeta meta = ring.metas[at.slot];
    if (meta.row < 0) return;
    const std::int64_t row = meta.row;
    const int label = meta.label;
    const T* in = logits + row * classes;
    T* out = dlogits + row * classes;
    const RowSplit split = RowSplit::of(in, classes);
    const int chunks = (split.packs + chunk_packs - 1) / chunk_packs;
    // Where the label is among the chunks: its class minus the chunk's first, for each chunk.
    auto label_offset = [&](int ch) { return label - (split.head + ch * chunk_packs * kPack); };
    auto holds_label = [&](int ch, int count) { return static_cast<unsigned>(label_offset(ch)) < count * kPack; };

    MaxSum others;
    for (int k = thread; k < split.edges(); k += threads) {
      const int c = split.edge_index<T>(k);
      const float x = to_float(in[c]);
      if (c == label)
        label_logits[parity] = x;
      else
        add_values(others, {x});
    }
    RingCursor chunk = at;
    for (int ch = 0; ch < chunks; ++ch, chunk.advance(ring.slots)) {
      mbarrier_wait(ring.full + 8 * chunk.slot, chunk.phase);
      const auto* packs = reinterpret_cast<const Pack<T>*>(slots_generic + chunk.slot * ring.chunk_bytes);
      const int count = min(chunk_packs, split.packs - ch * chunk_packs);
      if (holds_label(ch, count))  // the same for every thread: no divergence
        add_ring_packs<T, true>(packs, count, thread, threads, label_offset(ch), others, &label_logits[parity]);
      else
        add_ring_packs<T, false>(packs, count, thread, threads, 0, others, nullptr);
    }

    others = lane_group_reduce(others, kWarpSize, MergeOp{});
    if (lane == 0) partials[parity][warp] = others;
    named_barrier_sync(kRingBarrier, static_cast<unsigned>(threads));
    // Each lane takes one warp's partial and the lanes merge them as a butterfly: log2 steps
    // instead of a chain of `warps` merges (each with two exps) before any row can be written.
    // Every lane and warp merges the same pairs, so all hold the same bits.
    MaxSum row_stats = lane < warps ? partials[parity][lane] : MaxSum{};
    row_stats = lane_group_reduce(row_stats, kWarpSize, MergeOp{});
    const RowXent r = finish(row_stats, label_logits[parity], inv_rows);
    if (thread == 0) row_losses[row] = r.loss;

    for (int k = thread; k < split.edges(); k += threads) {
      const int c = split.edge_index<T>(k);
      out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
    }
    chunk = at;
    for (int ch = 0; ch < chunks; ++ch, chunk.advance(ring.slots)) {
      // This thread waited on the chunk's full barrier above: its bytes are visible to it.
      const auto* packs = reinterpret_cast<const Pack<T>*>(slots_generic + chunk.slot * ring.chunk_bytes);
      const int count = min(chunk_packs, split.packs - ch * chunk_packs);
      T* chunk_out = out + split.head + ch * chunk_packs * kPack;
      if (holds_label(ch, count))
        write_ring_packs<T, true>(packs, chunk_out, count, thread, threads, label_offset(ch), r);
      else
        write_ring_packs<T, false>(packs, chunk_out, count, thread, threads, 0, r);
      __syncwarp();  // the warp's lanes are done reading the slot...
      if (lane == 0) mbarrier_arrive(ring.empty + 8 * chunk.slot);  // ...so the producer may refill it
    }
    if (chunks == 0) {  // the row's one slot carried only its RowMeta
      __syncwarp();
      if (lane == 0) mbarrier_arrive(ring.empty + 8 * chunk.slot);
      chunk.advance(ring.slots);
    }
    at = chunk;
  }
}

// Warp mode (rows whose body fits one slot): the block's k-th row is in slot k % slots and
// belongs to consumer warp k % warps alone, which reduces it with shuffles only (no barrier
// between warps) and frees its slot. Every warp's own rows come in order, so the producer, which
// fills slots in row order, never waits on a row that waits on it.
//
// The launch makes slots a multiple of warps, so that each slot serves one warp only: a parity
// wait tells the fill a warp waits for only from the one before it, and a warp that waited for a
// slot's previous fill itself cannot be a whole fill ahead (with a slot shared between warps it
// could, and would take the previous fill's phase for its own row's).
template <typename T>
__device__ void consume_ring_rows_per_warp(const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
                                           T* __restrict__ dlogits, float* __restrict__ row_losses, std::int64_t rows,
                                           int classes, const Ring& ring, const unsigned char* slots_generic,
                                           float inv_rows) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize - 1, warps = static_cast<int>(blockDim.x) / kWarpSize - 1;
  const std::int64_t first = blockIdx.x + static_cast<std::int64_t>(warp) * gridDim.x;
  const std::int64_t step = static_cast<std::int64_t>(warps) * gridDim.x;
  int label = first < rows ? clamp_label(labels[first], classes) : 0;
  for (std::int64_t row = first, k = warp; row < rows; row += step, k += warps) {
    const int next_label = row + step < rows ? clamp_label(labels[row + step], classes) : 0;  // in flight meanwhile
    const int slot = static_cast<int>(k % ring.slots);
    const T* in = logits + row * classes;
    T* out = dlogits + row * classes;
    const RowSplit split = RowSplit::of(in, classes);
    const auto* packs = reinterpret_cast<const Pack<T>*>(slots_generic + slot * ring.chunk_bytes);
    const int label_offset = label - split.head;  // the body's packs start at class split.head

    MaxSum others;
    float label_logit = -INFINITY;  // the lane that meets the label keeps it; a max over lanes shares it
    for (int k2 = lane; k2 < split.edges(); k2 += kWarpSize) {
      const int c = split.edge_index<T>(k2);
      const float x = to_float(in[c]);
      if (c == label)
        label_logit = x;
      else
        add_values(others, {x});
    }
    mbarrier_wait(ring.full + 8 * slot, static_cast<unsigned>(k / ring.slots) & 1);
    add_ring_packs<T, true>(packs, split.packs, lane, kWarpSize, label_offset, others, &label_logit);
    others = lane_group_reduce(others, kWarpSize, MergeOp{});
    label_logit = lane_group_reduce(label_logit, kWarpSize, MaxOp{});
    const RowXent r = finish(others, label_logit, inv_rows);
    if (lane == 0) row_losses[row] = r.loss;

    for (int k2 = lane; k2 < split.edges(); k2 += kWarpSize) {
      const int c = split.edge_index<T>(k2);
      out[c] = from_float<T>(gradient(to_float(in[c]), c == label, r));
    }
    write_ring_packs<T, true>(packs, out + split.head, split.packs, lane, kWarpSize, label_offset, r);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(ring.empty + 8 * slot);
    label = next_label;
  }
}

template <typename T>
__global__ void __launch_bounds__((kMaxRingConsumerWarps + 1) * kWarpSize)
    ring_row_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ labels, T* __restrict__ dlogits,
                    float* __restrict__ row_losses, std::int64_t rows, int classes, int chunk_bytes,
                    int slots, bool warp_rows, unsigned* claims, float inv_rows) {
  grid_dependency_sync();  // which also lets the mean kernel launch
  // Below sm_90 the mbarrier and bulk-copy wrappers trap; the launch refuses those devices.
  extern __shared__ uint4 ring_storage[];  // 16-byte aligned, as the bulk copies need
  const auto* slots_generic = reinterpret_cast<const unsigned char*>(ring_storage);
  const unsigned data = shared_address(ring_storage);
  const unsigned full = data + static_cast<unsigned>(slots * chunk_bytes);
  auto* metas = reinterpret_cast<RowMeta*>(ring_storage + (slots * chunk_bytes + 16 * slots) / 16);
  const Ring ring{data, full, full + 8 * static_cast<unsigned>(slots), metas, chunk_bytes, slots};
  if (threadIdx.x == 0) {
    const unsigned consumer_warps = blockDim.x / kWarpSize - 1;
    for (int s = 0; s < slots; ++s) {
      mbarrier_init(ring.full + 8 * s, 1);                 // the producer's arrive (+ the bytes it announces)
      mbarrier_init(ring.empty + 8 * s, warp_rows ? 1 : consumer_warps);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < kWarpSize) {
    if (threadIdx.x != 0) return;
    if (warp_rows)
      produce_warp_rows(logits, rows, classes, ring);
    else
      produce_block_rows(logits, labels, rows, classes, ring, claims);
  } else if (warp_rows) {
    consume_ring_rows_per_warp(logits, labels, dlogits, row_losses, rows, classes, ring, slots_generic, inv_rows);
  } else {
    consume_ring_rows(logits, dlogits, row_losses, classes, ring, slots_generic, inv_rows);
  }
}

// The launch's first kernel when fused_ring_row claims rows: zeroes the counter; the ring kernel,
// its programmatic dependent, is launched while it runs.
__global__ void reset_claims_kernel(unsigned* claims) {
  grid_dependency_sync();
  *claims = 0;
}

template <typename Kernel>
cudaError_t check_block_fits(Kernel kernel, int block_size) {
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return block_size > attributes.maxThreadsPerBlock ? cudaErrorLaunchOutOfResources : cudaSuccess;
}

// One launch path for v5 (blocks_per_row 1: rows of block_size / threads_per_row per block) and
// v6 (a cluster of blocks_per_row blocks per row, threads_per_row == block_size).
template <typename T, int kPacksPerThread>
cudaError_t launch_register_row(const T* logits, const std::int32_t* labels, T* dlogits, float* row_losses,
                                float* loss, std::int64_t rows, int classes, int threads_per_row, int blocks_per_row,
                                int block_size, cudaStream_t stream) {
  auto kernel = register_row_kernel<T, kPacksPerThread>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  cudaLaunchConfig_t config = launch_config(blocks_per_row > 1 ? static_cast<unsigned>(rows * blocks_per_row)
                                                               : grid_for(rows, block_size / threads_per_row),
                                            static_cast<unsigned>(block_size), 0, stream);
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(blocks_per_row);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  if (blocks_per_row > 1) {
    config.attrs = &cluster;
    config.numAttrs = 1;
    // A cluster whose blocks cannot share a GPC is refused here rather than failing the launch.
    int clusters = 0;
    if (cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config); e != cudaSuccess) return e;
    if (clusters == 0) return cudaErrorLaunchOutOfResources;
  }
  return launch_then_mean(config, row_losses, rows, loss, kernel, logits, labels, dlogits, row_losses, rows, classes,
                          threads_per_row, blocks_per_row, inverse(rows));
}

template <typename T>
using RegisterRowLaunch = cudaError_t (*)(const T*, const std::int32_t*, T*, float*, float*, std::int64_t, int,
                                          int, int, int, cudaStream_t);

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

template <typename T>
cudaError_t register_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                         int classes, int threads_per_row, int blocks_per_row, int block_size, int packs_per_thread,
                         void* workspace, cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  const auto launch = register_row_launcher<T>(packs_per_thread);
  if (!launch) return cudaErrorInvalidValue;
  return launch(logits, labels, dlogits, static_cast<float*>(workspace), loss, rows, classes, threads_per_row,
                blocks_per_row, block_size, stream);
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
  mean_kernel<<<1, kMeanThreads, 0, stream>>>(row_losses, rows, loss);
  return cudaGetLastError();
}

template <typename T>
cudaError_t fused_warp_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int warps_per_block, void* workspace, cudaStream_t stream) {
  float* row_losses = static_cast<float*>(workspace);
  return launch_then_mean(launch_config(grid_for(rows, warps_per_block), warps_per_block * kWarpSize, 0, stream),
                          row_losses, rows, loss, warp_row_kernel<T>, logits, labels, dlogits, row_losses, rows,
                          classes, inverse(rows));
}

template <typename T>
cudaError_t fused_block_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                            int classes, int block_size, void* workspace, cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  float* row_losses = static_cast<float*>(workspace);
  return launch_then_mean(launch_config(static_cast<unsigned>(rows), block_size, 0, stream), row_losses, rows, loss,
                          block_row_kernel<T, false>, logits, labels, dlogits, row_losses, rows, classes,
                          inverse(rows));
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
  return launch_then_mean(launch_config(static_cast<unsigned>(rows), block_size, staged_bytes, stream), row_losses,
                          rows, loss, kernel, logits, labels, dlogits, row_losses, rows, classes, inverse(rows));
}

template <typename T>
cudaError_t fused_register_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                               int classes, int threads_per_row, int block_size, int packs_per_thread, void* workspace,
                               cudaStream_t stream) {
  return register_row(logits, labels, loss, dlogits, rows, classes, threads_per_row, 1, block_size, packs_per_thread,
                      workspace, stream);
}

template <typename T>
cudaError_t fused_cluster_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                              int classes, int blocks_per_row, int block_size, int packs_per_thread, void* workspace,
                              cudaStream_t stream) {
  if (blocks_per_row < 2 || blocks_per_row > kMaxBlocksPerRow) return cudaErrorInvalidValue;
  return register_row(logits, labels, loss, dlogits, rows, classes, block_size, blocks_per_row, block_size,
                      packs_per_thread, workspace, stream);
}

template <typename T>
cudaError_t fused_ring_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int consumer_warps, int chunk_bytes, int blocks_per_sm, bool warp_per_row,
                           bool claim_rows, void* workspace, cudaStream_t stream) {
  if (!same_16_byte_phase(logits, dlogits)) return cudaErrorNotSupported;
  if (consumer_warps < 1 || consumer_warps > kMaxRingConsumerWarps || chunk_bytes < 16 || chunk_bytes % 16 != 0 ||
      blocks_per_sm < 1 || (warp_per_row && claim_rows) || rows >= (std::int64_t{1} << 31))
    return cudaErrorInvalidValue;
  int device = 0, major = 0, sms = 0, per_sm = 0, optin = 0, reserved = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  for (auto [value, attribute] : {std::pair{&major, cudaDevAttrComputeCapabilityMajor},
                                  std::pair{&sms, cudaDevAttrMultiProcessorCount},
                                  std::pair{&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor},
                                  std::pair{&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
                                  std::pair{&reserved, cudaDevAttrReservedSharedMemoryPerBlock}})
    if (cudaError_t e = cudaDeviceGetAttribute(value, attribute, device); e != cudaSuccess) return e;
  if (major < 9) return cudaErrorInvalidValue;  // bulk copies and mbarrier transactions are sm_90's
  auto kernel = ring_row_kernel<T>;
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  if (attributes.sharedSizeBytes > static_cast<std::size_t>(kRingStaticSharedBytes))
    return cudaErrorLaunchOutOfResources;  // kRingStaticSharedBytes is out of date
  const int slots = ring_slots(chunk_bytes, blocks_per_sm, per_sm, optin, reserved);
  const std::int64_t chunks = ring_chunks_per_row(classes, sizeof(T), chunk_bytes);
  // Warp mode: every slot one warp's (see consume_ring_rows_per_warp).
  const int usable = warp_per_row ? slots / consumer_warps * consumer_warps : slots;
  if (chunks > (warp_per_row ? 1 : usable) || usable == 0) return cudaErrorLaunchOutOfResources;
  const int threads = (consumer_warps + 1) * kWarpSize;
  const std::size_t dynamic = static_cast<std::size_t>(usable) * (chunk_bytes + kRingSlotOverheadBytes);
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(dynamic));
      e != cudaSuccess)
    return e;
  int resident = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, dynamic);
      e != cudaSuccess)
    return e;
  if (resident == 0) return cudaErrorLaunchOutOfResources;
  const std::int64_t persistent = static_cast<std::int64_t>(std::min(resident, blocks_per_sm)) * sms;
  float* row_losses = static_cast<float*>(workspace);
  unsigned* claims = nullptr;
  cudaLaunchConfig_t config =
      launch_config(static_cast<unsigned>(std::min(rows, persistent)), threads, dynamic, stream);
  cudaLaunchAttribute programmatic = programmatic_dependent();
  if (claim_rows) {
    claims = reinterpret_cast<unsigned*>(static_cast<char*>(workspace) + ring_claims_offset(rows));
    reset_claims_kernel<<<1, 1, 0, stream>>>(claims);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    config.attrs = &programmatic;
    config.numAttrs = 1;
  }
  return launch_then_mean(config, row_losses, rows, loss, kernel, logits, labels, dlogits, row_losses, rows, classes,
                          chunk_bytes, usable, warp_per_row, claims, inverse(rows));
}

#define SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(T)                                                                         \
  template cudaError_t unfused<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, void*, cudaStream_t); \
  template cudaError_t fused_warp_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,    \
                                         cudaStream_t);                                                               \
  template cudaError_t fused_block_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,   \
                                          cudaStream_t);                                                              \
  template cudaError_t fused_register_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, int,  \
                                             int, void*, cudaStream_t);                                               \
  template cudaError_t fused_cluster_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, int,   \
                                            int, void*, cudaStream_t);                                                \
  template cudaError_t fused_smem_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, void*,    \
                                         cudaStream_t);                                                               \
  template cudaError_t fused_ring_row<T>(const T*, const std::int32_t*, float*, T*, std::int64_t, int, int, int, int, \
                                         bool, bool, void*, cudaStream_t);

SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(float)
SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(__half)
SHAPETUNE_INSTANTIATE_SOFTMAX_XENT(__nv_bfloat16)

}  // namespace shapetune::kernels::softmax_xent
