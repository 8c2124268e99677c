// The gate arithmetic both RNN rungs share, in fp32.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels::rnn {

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

// One LSTM unit from its four gate pre-activations (i, f, g, o, biases included): updates the
// cell state c and returns h = o tanh(c). `kept` receives the activated gates (i, f, g, o), what
// the backward pass reads (kSavedGates of them).
__device__ __forceinline__ float lstm_update(const float (&pre)[4], float& c, float (&kept)[4]) {
  kept[0] = sigmoid(pre[0]), kept[1] = sigmoid(pre[1]), kept[2] = tanhf(pre[2]), kept[3] = sigmoid(pre[3]);
  c = fmaf(kept[1], c, kept[0] * kept[2]);
  return kept[3] * tanhf(c);
}
__device__ __forceinline__ float lstm_update(const float (&pre)[4], float& c) {
  float kept[4];
  return lstm_update(pre, c, kept);
}

// One GRU unit: r and z from their pre-activations (biases included), the candidate from its
// input part (b_in included) and its recurrent part (b_hn included); returns h'. `kept`
// receives r, z, the candidate and the recurrent part (r multiplies it, so its gradient needs it).
__device__ __forceinline__ float gru_update(float r_pre, float z_pre, float n_input, float n_recurrent, float h_prev,
                                            float (&kept)[4]) {
  const float r = sigmoid(r_pre), z = sigmoid(z_pre);
  const float candidate = tanhf(fmaf(r, n_recurrent, n_input));
  kept[0] = r, kept[1] = z, kept[2] = candidate, kept[3] = n_recurrent;
  return fmaf(z, h_prev - candidate, candidate);  // (1 - z) n + z h
}
__device__ __forceinline__ float gru_update(float r_pre, float z_pre, float n_input, float n_recurrent, float h_prev) {
  float kept[4];
  return gru_update(r_pre, z_pre, n_input, n_recurrent, h_prev, kept);
}

}  // namespace shapetune::kernels::rnn
