// Reductions over a group of `width` consecutive threads of a block (width a power of two,
// up to 1024), and the (max, sum of exp) pair that online softmax carries.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/numeric.cuh"

namespace shapetune::kernels {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

// Running softmax statistics of a set of values: its max and sum(exp(v - max)).
// The empty set is (-inf, 0); merging keeps that exact, so idle lanes never make NaN.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.f;

  __device__ __forceinline__ void add(float v) {
    if (v > max) {
      sum = sum * __expf(max - v) + 1.f;  // exp(-inf) = 0 covers the first element
      max = v;
    } else {
      sum += __expf(v - max);
    }
  }
  // Several values at once: one rescale of the running sum instead of one per new maximum.
  template <int N>
  __device__ __forceinline__ void add(const float (&v)[N]) {
    float local_max = v[0];
#pragma unroll
    for (int i = 1; i < N; ++i) local_max = fmaxf(local_max, v[i]);
    const float new_max = fmaxf(max, local_max);
    float local_sum = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) local_sum += __expf(v[i] - new_max);
    sum = sum * __expf(max - new_max) + local_sum;
    max = new_max;
  }
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  MaxSum out;
  out.max = fmaxf(a.max, b.max);
  if (out.max == -INFINITY) return out;
  out.sum = a.sum * __expf(a.max - out.max) + b.sum * __expf(b.max - out.max);
  return out;
}

// Running mean and sum of squared deviations (Welford), merged with Chan et al.'s formula:
// one pass over the data, no catastrophic cancellation when the mean is large.
struct Welford {
  float count = 0.f;
  float mean = 0.f;
  float m2 = 0.f;

  __device__ __forceinline__ void add(float v) {
    count += 1.f;
    const float delta = v - mean;
    mean += delta / count;
    m2 += delta * (v - mean);
  }
};

__device__ __forceinline__ Welford merge(Welford a, Welford b) {
  if (b.count == 0.f) return a;
  if (a.count == 0.f) return b;
  Welford out;
  out.count = a.count + b.count;
  const float delta = b.mean - a.mean;
  const float b_share = b.count / out.count;
  out.mean = a.mean + delta * b_share;
  out.m2 = a.m2 + b.m2 + delta * delta * a.count * b_share;
  return out;
}

// A float sum with Kahan's compensation, for one thread adding a whole row sequentially: a
// plain float sum loses about n/2 ulps over n terms (2.7e-5 relative was measured on an H200
// for a 32000-wide softmax row, over the 1e-5 fp32 tolerance); compensation keeps it at a few
// ulps for four flops per element.
struct CompensatedSum {
  float sum = 0.f;
  float error = 0.f;
  __device__ __forceinline__ void add(float v) {
    const float y = v - error;
    const float t = sum + y;
    error = (t - sum) - y;
    sum = t;
  }
  __device__ __forceinline__ void scale(float factor) {
    sum *= factor;
    error *= factor;
  }
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ static float identity() { return -INFINITY; }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  __device__ __forceinline__ static float identity() { return 0.f; }
};
struct MergeOp {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
  __device__ __forceinline__ static MaxSum identity() { return MaxSum{}; }
};
struct WelfordOp {
  __device__ __forceinline__ Welford operator()(Welford a, Welford b) const { return merge(a, b); }
  __device__ __forceinline__ static Welford identity() { return Welford{}; }
};

__device__ __forceinline__ float shuffle_xor(float v, int offset) { return __shfl_xor_sync(kFullMask, v, offset); }
__device__ __forceinline__ MaxSum shuffle_xor(MaxSum v, int offset) {
  return MaxSum{__shfl_xor_sync(kFullMask, v.max, offset), __shfl_xor_sync(kFullMask, v.sum, offset)};
}
__device__ __forceinline__ Welford shuffle_xor(Welford v, int offset) {
  return Welford{__shfl_xor_sync(kFullMask, v.count, offset), __shfl_xor_sync(kFullMask, v.mean, offset),
                 __shfl_xor_sync(kFullMask, v.m2, offset)};
}

// Every lane ends with the reduction over its aligned group of `width` <= 32 lanes. A whole warp
// (the common case) takes an unrolled copy of the same steps, in the same order: the loop over a
// run-time width costs a compare, a branch and an index update per step, which showed in the
// per-row instruction count of the LayerNorm and softmax_xent register kernels.
template <typename V, typename Op>
__device__ __forceinline__ V lane_group_reduce(V v, int width, Op op) {
  if (width == kWarpSize) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset));
    return v;
  }
  for (int offset = width / 2; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset));
  return v;
}

// Every thread ends with the reduction over its group of `group_size` consecutive threads.
// Groups wider than a warp meet in `partials` (one slot per warp of the block), which costs two
// barriers, so every thread of the block must call this, also those with no row to work on.
template <typename V, typename Op>
__device__ __forceinline__ V group_reduce(V v, int group_size, V* partials, Op op) {
  v = lane_group_reduce(v, group_size < kWarpSize ? group_size : kWarpSize, op);
  if (group_size <= kWarpSize) return v;
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) partials[warp] = v;
  __syncthreads();
  const int warps_per_group = group_size / kWarpSize;
  const int first_warp = (threadIdx.x / group_size) * warps_per_group;
  V total = Op::identity();
  for (int w = 0; w < warps_per_group; ++w) total = op(total, partials[first_warp + w]);
  __syncthreads();  // the caller may reuse `partials` for its next reduction
  return total;
}

// The group of `threads_per_row` consecutive threads (a divisor of blockDim.x) that works on one
// row when a block holds blockDim.x / threads_per_row rows: which row, and this thread's index
// in the group. Threads past the last row are inactive but must still join group_reduce.
struct RowGroup {
  std::int64_t row;
  int thread;
  bool active;

  __device__ static RowGroup of(std::int64_t rows, int threads_per_row) {
    const int rows_per_block = blockDim.x / threads_per_row;
    const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(rows_per_block) + threadIdx.x / threads_per_row;
    return {row, static_cast<int>(threadIdx.x % threads_per_row), row < rows};
  }
};

// The softmax statistics of one row of `cols` values, read by the 32 lanes of a warp (lane c
// takes columns c, c + 32, ...); every lane ends with the whole row's.
template <typename T>
__device__ __forceinline__ MaxSum warp_row_max_sum(const T* row, int cols, int lane) {
  MaxSum stats;
  for (int c = lane; c < cols; c += kWarpSize) stats.add(to_float(row[c]));
  return lane_group_reduce(stats, kWarpSize, MergeOp{});
}

}  // namespace shapetune::kernels
