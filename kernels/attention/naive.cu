// The naive rung's own kernels: the masked fp32 softmax between its two GEMMs (plain, and with the
// rounding points of a framework's materialised attention), and the zeroing of
// padded query rows that the cuDNN baseline leaves to its caller.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention/attention.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/reductions.cuh"

namespace shapetune::kernels::attention {
namespace {

constexpr int kRowsPerBlock = 8;  // a warp per row of scores

// The keys query i of batch row b may see: [0, keys). A query at or past its row's length sees
// none, so its probabilities and its output are zero.
__device__ __forceinline__ int visible_keys(int i, int seq, int length, Mask mask) {
  if (i >= length) return 0;
  const int limit = mask == Mask::causal ? i + 1 : seq;
  return limit < length ? limit : length;
}

// The row of scores this thread's warp owns (a warp per row), its lane, and the keys the row's
// query may see; row -1 for warps past the last row.
struct WarpRow {
  std::int64_t row;
  int lane;
  int keys;
};

__device__ __forceinline__ WarpRow warp_row(const int* lengths, int batch, int heads, int seq, Mask mask) {
  const std::int64_t row = blockIdx.x * std::int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  if (row >= std::int64_t{batch} * heads * seq) return {-1, lane, 0};
  const int i = static_cast<int>(row % seq);
  const int b = static_cast<int>(row / (std::int64_t{heads} * seq));
  return {row, lane, visible_keys(i, seq, lengths ? lengths[b] : seq, mask)};
}

// The grid of a softmax kernel: kRowsPerBlock rows of scores a block.
cudaError_t softmax_blocks(int batch, int heads, int seq, unsigned* blocks) {
  const std::int64_t rows = std::int64_t{batch} * heads * seq;
  const std::int64_t wanted = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (wanted > 0x7fffffff) return cudaErrorInvalidValue;
  *blocks = static_cast<unsigned>(wanted);
  return cudaSuccess;
}

template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * kWarpSize)
    masked_softmax_kernel(const float* scores, T* p, const int* lengths, int batch, int heads, int seq, float scale,
                          Mask mask) {
  grid_dependency_sync();
  const WarpRow r = warp_row(lengths, batch, heads, seq, mask);
  if (r.row < 0) return;
  const std::int64_t row = r.row;
  const int lane = r.lane, keys = r.keys;
  const float* in = scores + row * seq;
  T* out = p + row * seq;
  MaxSum stats;
  for (int j = lane; j < keys; j += kWarpSize) stats.add(in[j] * scale);
  stats = lane_group_reduce(stats, kWarpSize, MergeOp{});
  const float inverse = keys > 0 ? 1.f / stats.sum : 0.f;
  for (int j = lane; j < seq; j += kWarpSize)
    out[j] = from_float<T>(j < keys ? __expf(in[j] * scale - stats.max) * inverse : 0.f);
}

// The rounding points of a framework's materialised attention: the scores arrive stored in T
// (st(q . k), the GEMM's output), each is scaled and stored again (st(st(q . k) scale), the
// product in fp32 and never contracted into a later subtraction), then the exact row max, the sum
// of accurate expf in fp32 (the lanes' partial sums added in a tree) and P = st(exp(s - max) /
// sum), an IEEE division. Three reads of the row where the unrounded kernel takes two: the
// rounded scores are recomputed rather than kept, which is exact.
template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * kWarpSize)
    rounded_masked_softmax_kernel(const T* scores, T* p, const int* lengths, int batch, int heads, int seq,
                                  float scale, Mask mask) {
  grid_dependency_sync();
  const WarpRow r = warp_row(lengths, batch, heads, seq, mask);
  if (r.row < 0) return;
  const std::int64_t row = r.row;
  const int lane = r.lane, keys = r.keys;
  const T* in = scores + row * seq;
  T* out = p + row * seq;
  const auto score = [&](int j) { return to_float(from_float<T>(__fmul_rn(to_float(in[j]), scale))); };
  float top = -INFINITY;
  for (int j = lane; j < keys; j += kWarpSize) top = fmaxf(top, score(j));
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) top = fmaxf(top, __shfl_xor_sync(kFullMask, top, offset));
  float sum = 0.f;
  for (int j = lane; j < keys; j += kWarpSize) sum += expf(score(j) - top);
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
  // A row with no visible key (keys == 0) writes zeros: its max is -inf and its sum 0.
  for (int j = lane; j < seq; j += kWarpSize) out[j] = from_float<T>(j < keys ? expf(score(j) - top) / sum : 0.f);
}

template <typename T>
__global__ void zero_invalid_rows_kernel(T* o, Strides o_strides, const int* lengths, int heads, int seq,
                                         int head_dim) {
  grid_dependency_sync();
  const int b = blockIdx.y;
  const int length = lengths[b];
  // One block per (batch row, query row); its threads cover every head's head_dim values.
  const int i = blockIdx.x;
  if (i < length) return;
  T* row = o + b * o_strides.batch + i * o_strides.row;
  for (int e = threadIdx.x; e < heads * head_dim; e += blockDim.x)
    row[(e / head_dim) * o_strides.head + e % head_dim] = from_float<T>(0.f);
}

}  // namespace

template <typename T>
cudaError_t masked_softmax(const float* scores, T* p, const int* lengths, int batch, int heads, int seq, float scale,
                           Mask mask, cudaStream_t stream) {
  unsigned blocks = 0;
  if (cudaError_t e = softmax_blocks(batch, heads, seq, &blocks); e != cudaSuccess) return e;
  masked_softmax_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
      scores, p, lengths, batch, heads, seq, scale, mask);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rounded_masked_softmax(const T* scores, T* p, const int* lengths, int batch, int heads, int seq,
                                   float scale, Mask mask, cudaStream_t stream) {
  unsigned blocks = 0;
  if (cudaError_t e = softmax_blocks(batch, heads, seq, &blocks); e != cudaSuccess) return e;
  rounded_masked_softmax_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
      scores, p, lengths, batch, heads, seq, scale, mask);
  return cudaGetLastError();
}

template <typename T>
cudaError_t zero_invalid_rows(T* o, Strides o_strides, const int* lengths, int batch, int heads, int seq, int head_dim,
                              cudaStream_t stream) {
  if (batch > kMaxGridYZ) return cudaErrorInvalidValue;
  zero_invalid_rows_kernel<T><<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(batch)), 128, 0, stream>>>(
      o, o_strides, lengths, heads, seq, head_dim);
  return cudaGetLastError();
}

#define SHAPETUNE_ATTENTION_NAIVE(T)                                                                              \
  template cudaError_t masked_softmax<T>(const float*, T*, const int*, int, int, int, float, Mask, cudaStream_t); \
  template cudaError_t rounded_masked_softmax<T>(const T*, T*, const int*, int, int, int, float, Mask,     \
                                                 cudaStream_t);                                             \
  template cudaError_t zero_invalid_rows<T>(T*, Strides, const int*, int, int, int, int, cudaStream_t);
SHAPETUNE_ATTENTION_NAIVE(float)
SHAPETUNE_ATTENTION_NAIVE(__half)
SHAPETUNE_ATTENTION_NAIVE(__nv_bfloat16)
#undef SHAPETUNE_ATTENTION_NAIVE

}  // namespace shapetune::kernels::attention
