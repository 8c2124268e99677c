// The stepwise rung's cell: one thread per (batch row, hidden unit), the step's gates in, h out.
#include "kernels/rnn/rnn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/gates.cuh"

namespace shapetune::kernels::rnn {
namespace {

constexpr unsigned kThreads = 256;

template <typename T, Cell kCell>
__global__ void __launch_bounds__(kThreads)
    cell_step_kernel(const float* __restrict__ input_gates, const float* __restrict__ recurrent_gates,
                     const T* __restrict__ b_ih, const T* __restrict__ b_hh, const T* __restrict__ h_prev,
                     float* __restrict__ c_state, T* __restrict__ h, int batch, int hidden) {
  grid_dependency_sync();
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<std::int64_t>(batch) * hidden) return;
  const int j = static_cast<int>(e % hidden);
  const std::int64_t n = e / hidden;
  constexpr int G = gate_count(kCell);
  const float* in = input_gates + n * G * hidden;
  const float* rec = recurrent_gates + n * G * hidden;
  float value;
  if constexpr (kCell == Cell::lstm) {
    float pre[4];
#pragma unroll
    for (int g = 0; g < 4; ++g)
      pre[g] = in[g * hidden + j] + rec[g * hidden + j] + to_float(b_ih[g * hidden + j]) + to_float(b_hh[g * hidden + j]);
    value = lstm_update(pre, c_state[e]);
  } else {
    value = gru_update(in[j] + rec[j] + to_float(b_ih[j]) + to_float(b_hh[j]),
                       in[hidden + j] + rec[hidden + j] + to_float(b_ih[hidden + j]) + to_float(b_hh[hidden + j]),
                       in[2 * hidden + j] + to_float(b_ih[2 * hidden + j]),
                       rec[2 * hidden + j] + to_float(b_hh[2 * hidden + j]), to_float(h_prev[e]));
  }
  h[e] = from_float<T>(value);
}

template <typename From, typename To>
__global__ void convert_kernel(const From* __restrict__ in, To* __restrict__ out, std::int64_t n) {
  grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<To>(to_float(in[i]));
}

template <typename Word>
__device__ void copy_words(const void* src, void* dst, std::int64_t bytes) {
  const auto* from = static_cast<const Word*>(src);
  auto* to = static_cast<Word*>(dst);
  const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(Word));
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

// blockIdx.y picks the segment; the widest word that divides its addresses and size copies it.
__global__ void copy_segments_kernel(CopySegments s) {
  grid_dependency_sync();
  const int k = static_cast<int>(blockIdx.y);
  const auto bits = reinterpret_cast<std::uintptr_t>(s.src[k]) | reinterpret_cast<std::uintptr_t>(s.dst[k]) |
                    static_cast<std::uintptr_t>(s.bytes[k]);
  if (bits % 16 == 0) copy_words<uint4>(s.src[k], s.dst[k], s.bytes[k]);
  else if (bits % 4 == 0) copy_words<unsigned>(s.src[k], s.dst[k], s.bytes[k]);
  else if (bits % 2 == 0) copy_words<unsigned short>(s.src[k], s.dst[k], s.bytes[k]);
  else copy_words<unsigned char>(s.src[k], s.dst[k], s.bytes[k]);
}

}  // namespace

cudaError_t copy_segments(const CopySegments& s, cudaStream_t stream) {
  if (s.count < 1 || s.count > CopySegments::kMax) return cudaErrorInvalidValue;
  std::int64_t largest = 0;
  for (int k = 0; k < s.count; ++k) largest = largest > s.bytes[k] ? largest : s.bytes[k];
  const unsigned blocks = grid_stride_blocks(static_cast<std::size_t>(largest / 16 + 1), kThreads, 256);
  copy_segments_kernel<<<dim3(blocks, static_cast<unsigned>(s.count)), kThreads, 0, stream>>>(s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cell_step(Cell cell, const float* input_gates, const float* recurrent_gates, const T* b_ih, const T* b_hh,
                      const T* h_prev, float* c_state, T* h, int batch, int hidden, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(batch) * hidden;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  if (cell == Cell::lstm)
    cell_step_kernel<T, Cell::lstm><<<blocks, kThreads, 0, stream>>>(input_gates, recurrent_gates, b_ih, b_hh, h_prev,
                                                                     c_state, h, batch, hidden);
  else
    cell_step_kernel<T, Cell::gru><<<blocks, kThreads, 0, stream>>>(input_gates, recurrent_gates, b_ih, b_hh, h_prev,
                                                                    c_state, h, batch, hidden);
  return cudaGetLastError();
}

template <typename T>
cudaError_t widen(const T* in, float* out, std::int64_t n, cudaStream_t stream) {
  convert_kernel<<<grid_stride_blocks(static_cast<std::size_t>(n), kThreads, 1024), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t narrow(const float* in, T* out, std::int64_t n, cudaStream_t stream) {
  convert_kernel<<<grid_stride_blocks(static_cast<std::size_t>(n), kThreads, 1024), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

// TF32's rounding of v (round to nearest, ties away: cvt.rna.tf32.f32), by integer arithmetic so
// that sm_75 builds it too. Infinities and NaNs stay as they are; a finite v that would round up
// to infinity is truncated instead, so that v - high stays finite.
__device__ __forceinline__ float tf32_rounded(float v) {
  const unsigned bits = __float_as_uint(v);
  if ((bits & 0x7f800000u) == 0x7f800000u) return v;
  const unsigned rounded = (bits + 0x1000u) & 0xffffe000u;
  return __uint_as_float((rounded & 0x7f800000u) == 0x7f800000u ? bits & 0xffffe000u : rounded);
}

__global__ void split_tf32_kernel(const float* __restrict__ in, float* __restrict__ high, float* __restrict__ low,
                                  std::int64_t n) {
  grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = in[i], h = tf32_rounded(v);
    high[i] = h;
    low[i] = isfinite(v) ? v - h : 0.f;  // exact: v and h share their exponent or h is the next power of 2
  }
}

cudaError_t split_tf32(const float* in, float* high, float* low, std::int64_t n, cudaStream_t stream) {
  split_tf32_kernel<<<grid_stride_blocks(static_cast<std::size_t>(n), kThreads, 1024), kThreads, 0, stream>>>(
      in, high, low, n);
  return cudaGetLastError();
}

#define SHAPETUNE_RNN_CELL(T)                                                                                      \
  template cudaError_t cell_step<T>(Cell, const float*, const float*, const T*, const T*, const T*, float*, T*, int, \
                                    int, cudaStream_t);                                                             \
  template cudaError_t widen<T>(const T*, float*, std::int64_t, cudaStream_t);                                     \
  template cudaError_t narrow<T>(const float*, T*, std::int64_t, cudaStream_t);
SHAPETUNE_RNN_CELL(float)
SHAPETUNE_RNN_CELL(__half)
SHAPETUNE_RNN_CELL(__nv_bfloat16)
#undef SHAPETUNE_RNN_CELL

}  // namespace shapetune::kernels::rnn
