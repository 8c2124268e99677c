// The gate arithmetic both RNN rungs share, in fp32.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels::rnn {

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

// One LSTM unit from its four gate pre-activations (i, f, g, o, biases included): updates the
// cell state c and returns h = o tanh(c).
__device__ __forceinline__ float lstm_update(const float (&pre)[4], float& c) {
  const float i = sigmoid(pre[0]), f = sigmoid(pre[1]), g = tanhf(pre[2]), o = sigmoid(pre[3]);
  c = fmaf(f, c, i * g);
  return o * tanhf(c);
}

// One GRU unit: r and z from their pre-activations (biases included), the candidate from its
// input part (b_in included) and its recurrent part (b_hn included); returns h'.
__device__ __forceinline__ float gru_update(float r_pre, float z_pre, float n_input, float n_recurrent, float h_prev) {
  const float r = sigmoid(r_pre), z = sigmoid(z_pre);
  const float candidate = tanhf(fmaf(r, n_recurrent, n_input));
  return fmaf(z, h_prev - candidate, candidate);  // (1 - z) n + z h
}

}  // namespace shapetune::kernels::rnn
