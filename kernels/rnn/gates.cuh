// The gate arithmetic both RNN rungs share, in fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/numeric.cuh"

namespace shapetune::kernels::rnn {

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

// The cell's activations with a short dependent chain, for a step whose latency is the cell's
// (persistent_block's unit groups): the division by the 2-ulp __fdividef and tanh from one
// exponential, 1 - 2 / (1 + e^2v). sigmoid's accurate division and tanhf branch and take a dozen
// dependent instructions each (the H100's SASS). Absolute error about 1e-7 (tanh near 0 loses its
// relative accuracy, not its absolute one); saturates to 0, 1 and -1 as the accurate ones do.
__device__ __forceinline__ float fast_sigmoid(float v) { return __fdividef(1.f, 1.f + __expf(-v)); }
__device__ __forceinline__ float fast_tanh(float v) { return 1.f - __fdividef(2.f, 1.f + __expf(2.f * v)); }
template <bool kFast>
__device__ __forceinline__ float gate_sigmoid(float v) {
  return kFast ? fast_sigmoid(v) : sigmoid(v);
}
template <bool kFast>
__device__ __forceinline__ float gate_tanh(float v) {
  return kFast ? fast_tanh(v) : tanhf(v);
}

// One LSTM unit from its four gate pre-activations (i, f, g, o, biases included): updates the
// cell state c and returns h = o tanh(c). `kept` receives the activated gates (i, f, g, o), what
// the backward pass reads (kSavedGates of them). kFast: the activations above.
template <bool kFast = false>
__device__ __forceinline__ float lstm_update(const float (&pre)[4], float& c, float (&kept)[4]) {
  kept[0] = gate_sigmoid<kFast>(pre[0]), kept[1] = gate_sigmoid<kFast>(pre[1]);
  kept[2] = gate_tanh<kFast>(pre[2]), kept[3] = gate_sigmoid<kFast>(pre[3]);
  c = fmaf(kept[1], c, kept[0] * kept[2]);
  return kept[3] * gate_tanh<kFast>(c);
}
template <bool kFast = false>
__device__ __forceinline__ float lstm_update(const float (&pre)[4], float& c) {
  float kept[4];
  return lstm_update<kFast>(pre, c, kept);
}

// One GRU unit: r and z from their pre-activations (biases included), the candidate from its
// input part (b_in included) and its recurrent part (b_hn included); returns h'. `kept`
// receives r, z, the candidate and the recurrent part (r multiplies it, so its gradient needs it).
template <bool kFast = false>
__device__ __forceinline__ float gru_update(float r_pre, float z_pre, float n_input, float n_recurrent, float h_prev,
                                            float (&kept)[4]) {
  const float r = gate_sigmoid<kFast>(r_pre), z = gate_sigmoid<kFast>(z_pre);
  const float candidate = gate_tanh<kFast>(fmaf(r, n_recurrent, n_input));
  kept[0] = r, kept[1] = z, kept[2] = candidate, kept[3] = n_recurrent;
  return fmaf(z, h_prev - candidate, candidate);  // (1 - z) n + z h
}
template <bool kFast = false>
__device__ __forceinline__ float gru_update(float r_pre, float z_pre, float n_input, float n_recurrent, float h_prev) {
  float kept[4];
  return gru_update<kFast>(r_pre, z_pre, n_input, n_recurrent, h_prev, kept);
}

// One LSTM unit back: from its activated gates (i, f, g, o), the cell states c_prev and c, the
// gradient reaching h (dh) and the one reaching c from the step after (dc): the gradients of the
// four pre-activations into d; returns what reaches c_prev.
__device__ __forceinline__ float lstm_backward(const float (&kept)[4], float c_prev, float c, float dh, float dc,
                                               float (&d)[4]) {
  const float i = kept[0], f = kept[1], g = kept[2], o = kept[3];
  const float tanh_c = tanhf(c);
  const float dc_total = fmaf(dh * o, 1.f - tanh_c * tanh_c, dc);
  d[0] = dc_total * g * i * (1.f - i);
  d[1] = dc_total * c_prev * f * (1.f - f);
  d[2] = dc_total * i * (1.f - g * g);
  d[3] = dh * tanh_c * o * (1.f - o);
  return dc_total * f;
}

// One GRU unit back: from what gru_update kept (r, z, the candidate, W_hn h + b_hn), the h it read
// and the gradient reaching h': the input side's gradients of r, z and the candidate into d (the
// hidden side's are the same but the candidate's, r times it); returns dh' z, the part of the
// gradient that reaches h_prev without passing W_hh.
__device__ __forceinline__ float gru_backward(const float (&kept)[4], float h_prev, float dh, float (&d)[3]) {
  const float r = kept[0], z = kept[1], candidate = kept[2], hidden_n = kept[3];
  d[2] = dh * (1.f - z) * (1.f - candidate * candidate);
  d[0] = d[2] * hidden_n * r * (1.f - r);
  d[1] = dh * (h_prev - candidate) * z * (1.f - z);
  return dh * z;
}

// What a chain's cell backward reads besides the chain at step t, batch row n, unit j (a
// BackwardChain's saved activations, dy, and the LSTM's cell states or the GRU's h_prev): loaded
// before the step's product, since none of it depends on the chain.
struct CellBackwardInputs {
  float dy = 0.f, kept[4] = {0.f, 0.f, 0.f, 0.f}, c = 0.f, c_prev = 0.f, h_prev = 0.f;
};
template <bool kLstm, typename Chain>
__device__ __forceinline__ CellBackwardInputs cell_backward_inputs(const Chain& p, int t, std::int64_t n, int j) {
  CellBackwardInputs in;
  const int H = p.hidden;
  const std::int64_t plane = static_cast<std::int64_t>(p.batch) * H, e = t * plane + n * H + j;
  in.dy = to_float(p.dy[e]);
  const float* keep = p.saved + (static_cast<std::int64_t>(t) * p.batch + n) * (4 * H) + j;
#pragma unroll
  for (int g = 0; g < 4; ++g) in.kept[g] = keep[g * H];
  if constexpr (kLstm) {
    in.c_prev = p.cells[e];
    in.c = p.cells[e + plane];
  } else {
    in.h_prev = p.h_prev[e];
  }
  return in;
}

}  // namespace shapetune::kernels::rnn
