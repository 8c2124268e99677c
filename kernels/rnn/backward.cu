// The stepwise rung of the backward pass: the forward cell that keeps what backpropagation
// reads, and the cell's backward step. One thread per (batch row, hidden unit); the products
// around them are cuBLAS's (variants/rnn_backward.cpp).
#include "kernels/rnn/rnn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/gates.cuh"

namespace shapetune::kernels::rnn {
namespace {

constexpr unsigned kThreads = 256;

unsigned blocks_for(int batch, int hidden) {
  return static_cast<unsigned>((static_cast<std::int64_t>(batch) * hidden + kThreads - 1) / kThreads);
}

template <typename T, Cell kCell>
__global__ void __launch_bounds__(kThreads)
    cell_step_saving_kernel(const float* __restrict__ input_gates, const float* __restrict__ recurrent_gates,
                            const T* __restrict__ b_ih, const T* __restrict__ b_hh, const T* __restrict__ h_prev,
                            const float* __restrict__ c_prev, float* __restrict__ c, float* __restrict__ saved,
                            T* __restrict__ h, int batch, int hidden) {
  grid_dependency_sync();
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<std::int64_t>(batch) * hidden) return;
  const int j = static_cast<int>(e % hidden);
  const std::int64_t n = e / hidden;
  constexpr int G = gate_count(kCell);
  const float* in = input_gates + n * G * hidden;
  const float* rec = recurrent_gates + n * G * hidden;
  float* keep = saved + n * kSavedGates * hidden;
  const auto pre = [&](int g) {
    return in[g * hidden + j] + rec[g * hidden + j] + to_float(b_ih[g * hidden + j]) + to_float(b_hh[g * hidden + j]);
  };
  float value;
  if constexpr (kCell == Cell::lstm) {
    const float i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = tanhf(pre(2)), o = sigmoid(pre(3));
    const float cell = fmaf(f, c_prev[e], i * g);
    c[e] = cell;
    value = o * tanhf(cell);
    keep[j] = i, keep[hidden + j] = f, keep[2 * hidden + j] = g, keep[3 * hidden + j] = o;
  } else {
    const float r = sigmoid(pre(0)), z = sigmoid(pre(1));
    const float hidden_n = rec[2 * hidden + j] + to_float(b_hh[2 * hidden + j]);
    const float candidate = tanhf(fmaf(r, hidden_n, in[2 * hidden + j] + to_float(b_ih[2 * hidden + j])));
    value = fmaf(z, to_float(h_prev[e]) - candidate, candidate);
    keep[j] = r, keep[hidden + j] = z, keep[2 * hidden + j] = candidate, keep[3 * hidden + j] = hidden_n;
  }
  h[e] = from_float<T>(value);
}

template <typename T, Cell kCell>
__global__ void __launch_bounds__(kThreads)
    cell_backward_kernel(const float* __restrict__ saved, const float* __restrict__ c_prev,
                         const float* __restrict__ c, const float* __restrict__ h_prev, const T* __restrict__ dy,
                         float* __restrict__ dh, float* __restrict__ dc, float* __restrict__ d_input,
                         float* __restrict__ d_hidden, int batch, int hidden, const float* __restrict__ partials,
                         int splits) {
  grid_dependency_sync();
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<std::int64_t>(batch) * hidden) return;
  const int j = static_cast<int>(e % hidden);
  const std::int64_t n = e / hidden;
  constexpr int G = gate_count(kCell);
  const float* keep = saved + n * kSavedGates * hidden;
  float carried = kCell == Cell::gru || splits == 0 ? dh[e] : 0.f;
  const std::int64_t plane = static_cast<std::int64_t>(batch) * hidden;
  for (int k = 0; k < splits; ++k) carried += partials[k * plane + e];
  const float dh_total = to_float(dy[e]) + carried;
  float* di = d_input + n * G * hidden;
  const float kept[kSavedGates] = {keep[j], keep[hidden + j], keep[2 * hidden + j], keep[3 * hidden + j]};
  if constexpr (kCell == Cell::lstm) {
    float d[4];
    dc[e] = lstm_backward(kept, c_prev[e], c[e], dh_total, dc[e], d);
#pragma unroll
    for (int g = 0; g < 4; ++g) di[g * hidden + j] = d[g];
  } else {
    float d[3];
    dh[e] = gru_backward(kept, h_prev[e], dh_total, d);
    float* dhid = d_hidden + n * G * hidden;
    di[j] = dhid[j] = d[0];
    di[hidden + j] = dhid[hidden + j] = d[1];
    di[2 * hidden + j] = d[2];
    dhid[2 * hidden + j] = kept[0] * d[2];
  }
}

__global__ void fill_kernel(float* __restrict__ out, std::int64_t n, float value) {
  grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

}  // namespace

template <typename T>
cudaError_t cell_step_saving(Cell cell, const float* input_gates, const float* recurrent_gates, const T* b_ih,
                             const T* b_hh, const T* h_prev, const float* c_prev, float* c, float* saved, T* h,
                             int batch, int hidden, cudaStream_t stream) {
  const unsigned blocks = blocks_for(batch, hidden);
  if (cell == Cell::lstm)
    cell_step_saving_kernel<T, Cell::lstm><<<blocks, kThreads, 0, stream>>>(
        input_gates, recurrent_gates, b_ih, b_hh, h_prev, c_prev, c, saved, h, batch, hidden);
  else
    cell_step_saving_kernel<T, Cell::gru><<<blocks, kThreads, 0, stream>>>(
        input_gates, recurrent_gates, b_ih, b_hh, h_prev, c_prev, c, saved, h, batch, hidden);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cell_backward_step(Cell cell, const float* saved, const float* c_prev, const float* c,
                               const float* h_prev, const T* dy, float* dh, float* dc, float* d_input,
                               float* d_hidden, int batch, int hidden, cudaStream_t stream, const float* partials,
                               int splits) {
  const unsigned blocks = blocks_for(batch, hidden);
  if (cell == Cell::lstm)
    cell_backward_kernel<T, Cell::lstm><<<blocks, kThreads, 0, stream>>>(
        saved, c_prev, c, h_prev, dy, dh, dc, d_input, d_hidden, batch, hidden, partials, splits);
  else
    cell_backward_kernel<T, Cell::gru><<<blocks, kThreads, 0, stream>>>(
        saved, c_prev, c, h_prev, dy, dh, dc, d_input, d_hidden, batch, hidden, partials, splits);
  return cudaGetLastError();
}

cudaError_t fill(float* out, std::int64_t n, float value, cudaStream_t stream) {
  fill_kernel<<<grid_stride_blocks(static_cast<std::size_t>(n), kThreads, 1024), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

#define SHAPETUNE_RNN_BACKWARD(T)                                                                                   \
  template cudaError_t cell_step_saving<T>(Cell, const float*, const float*, const T*, const T*, const T*,          \
                                           const float*, float*, float*, T*, int, int, cudaStream_t);               \
  template cudaError_t cell_backward_step<T>(Cell, const float*, const float*, const float*, const float*, const T*, \
                                             float*, float*, float*, float*, int, int, cudaStream_t, const float*,    \
                                             int);
SHAPETUNE_RNN_BACKWARD(float)
SHAPETUNE_RNN_BACKWARD(__half)
SHAPETUNE_RNN_BACKWARD(__nv_bfloat16)
#undef SHAPETUNE_RNN_BACKWARD

}  // namespace shapetune::kernels::rnn
