// Float64 CPU references, one function per primitive. Inputs are the values the device saw
// (already rounded to the storage type); every intermediate is double.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/types.hpp"

namespace shapetune::reference {

// y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) for each of `rows` rows.
void softmax(std::int64_t rows, std::int64_t cols, const double* x, double* y);

// y[r, :] = (x[r, :] - mean) / sqrt(var + epsilon) * gamma + beta, biased variance.
void layernorm(std::int64_t rows, std::int64_t cols, const double* x, const double* gamma, const double* beta,
               double epsilon, double* y);

// h = round(x + r) to the storage type (`round_h`, the h the next layer reads), y = layernorm(h).
void residual_layernorm(std::int64_t rows, std::int64_t cols, const double* x, const double* r, const double* gamma,
                        const double* beta, double epsilon, double (*round_h)(double), double* h, double* y);

// Softmax cross-entropy against integer labels (given as doubles), forward and backward:
// loss[0] = mean_r (log sum_c exp(x[r,c]) - x[r,label_r]),
// dlogits[r,c] = (softmax(x[r,:])[c] - [c == label_r]) / rows. Labels outside [0, classes)
// are clamped into range, as the kernels do.
void softmax_xent(std::int64_t rows, std::int64_t classes, const double* logits, const double* labels, double* loss,
                  double* dlogits);

// Binary logistic regression over x [rows, features], w [features], scalar b and labels (0/1, as
// doubles; anything else is clamped to 0 or 1): z = x w + b, p = sigmoid(z),
// loss[0] = mean max(z,0) - z y + log1p(exp(-|z|)), dw = x^T (p - y) / rows, db[0] = mean(p - y),
// with p - y taken as -sigmoid(-z) where y = 1 (no cancellation when p is near 1).
void logistic_bce(std::int64_t rows, std::int64_t features, const double* x, const double* w, double b,
                  const double* labels, double* p, double* loss, double* dw, double* db);

// One AdamW step, in place, over `tensors` consecutive tensors of `sizes[k]` elements:
// m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p),
// the decay term using p before the update (weight_decay = 0 is plain Adam).
struct AdamHyperparameters {
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  double step;  // t >= 1
};
void adam(const std::int64_t* sizes, std::int64_t tensors, const AdamHyperparameters&, double* params,
          const double* grads, double* exp_avg, double* exp_avg_sq);

// The elementwise activations: relu, gelu (erf form), gelu_tanh, sigmoid, silu.
enum class Activation : std::uint8_t { relu, gelu, gelu_tanh, sigmoid, silu };
// f(x) and its derivative f'(x); relu'(0) = 0.
double activation(Activation, double x);
double activation_derivative(Activation, double x);
// y = f(x) and dx = dy * f'(x) over n elements; y[r, c] = f(x[r, c] + b[c]) over [rows, cols].
void activation_forward(Activation, std::int64_t n, const double* x, double* y);
void activation_backward(Activation, std::int64_t n, const double* x, const double* dy, double* dx);
void bias_activation(Activation, std::int64_t rows, std::int64_t cols, const double* x, const double* b, double* y);

// C = act(alpha op(A) op(B) + beta C + bias) over row-major matrices. op(A) is [m, k]: A is stored
// [m, k], or [k, m] when a_transposed; op(B) is [k, n]: B is stored [k, n], or [n, k] when
// b_transposed. bias is [n] (added to every row) or null; beta == 0 means C is not read (it may
// hold NaN, as in BLAS); the activation, if any, follows the bias.
struct GemmSpec {
  std::int64_t m = 0, n = 0, k = 0;
  bool a_transposed = false;
  bool b_transposed = false;
  double alpha = 1;
  double beta = 0;
  const double* bias = nullptr;
  std::optional<Activation> activation;
  // The activation reads its input rounded to the output's storage type (a 16-bit GELU epilogue,
  // as a framework's Linear followed by GELU); null: unrounded.
  double (*round_pre_activation)(double) = nullptr;
};
void gemm(const GemmSpec&, const double* a, const double* b, double* c);

// One recurrent layer over a sequence, PyTorch's and cuDNN's formulas and gate order. x is
// [T, N, D], h0 and c0 [N, H], w_ih [G H, D], w_hh [G H, H], b_ih and b_hh [G H] (G = 4 for the
// LSTM, 3 for the GRU); y is [T, N, H], hT and cT [N, H].
//   LSTM: (i, f, g, o) = (sigma, sigma, tanh, sigma)(W_ih x + b_ih + W_hh h + b_hh),
//         c' = f c + i g, h' = o tanh(c')
//   GRU:  (r, z) = sigma(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z}),
//         n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h
// round_h rounds each h' to the storage type before it is stored and fed back (the recurrence
// reads h as stored); c stays unrounded (the cell state is kept in fp32 on the device).
struct RnnShape {
  std::int64_t steps, batch, input, hidden;
};
void lstm_forward(const RnnShape&, const double* x, const double* h0, const double* c0, const double* w_ih,
                  const double* w_hh, const double* b_ih, const double* b_hh, double (*round_h)(double), double* y,
                  double* h_t, double* c_t);
void gru_forward(const RnnShape&, const double* x, const double* h0, const double* w_ih, const double* w_hh,
                 const double* b_ih, const double* b_hh, double (*round_h)(double), double* y, double* h_t);

// Backpropagation through time of the layer above: the forward is run again exactly as there
// (round_h included), then the loss L = sum dy . y + dh_t . hT (+ dc_t . cT) is differentiated
// in float64, taking the rounding of h as the identity. dy is [T, N, H], dh_t and dc_t [N, H];
// the outputs have the shapes of x, h0, c0 and the weights. With a the gates' pre-activations:
//   LSTM: dc = dc' + dh o (1 - tanh^2 c'); da = (dc g i(1-i), dc c f(1-f), dc i (1-g^2),
//         dh tanh(c') o(1-o)); the carried dc is dc f, the carried dh is da W_hh; dW_ih += da^T x,
//         dW_hh += da^T h, db_ih = db_hh = sum da.
//   GRU:  dn = dh (1-z)(1-n^2), dz = dh (h - n) z(1-z), dr = dn (W_hn h + b_hn) r(1-r); the input
//         side gets (dr, dz, dn), the hidden side (dr, dz, r dn): dW_ih, db_ih, dx from the first,
//         dW_hh, db_hh and the carried dh = dh z + (dr, dz, r dn) W_hh from the second.
void lstm_backward(const RnnShape&, const double* x, const double* h0, const double* c0, const double* w_ih,
                   const double* w_hh, const double* b_ih, const double* b_hh, double (*round_h)(double),
                   const double* dy, const double* dh_t, const double* dc_t, double* dx, double* dh0, double* dc0,
                   double* dw_ih, double* dw_hh, double* db_ih, double* db_hh);
void gru_backward(const RnnShape&, const double* x, const double* h0, const double* w_ih, const double* w_hh,
                  const double* b_ih, const double* b_hh, double (*round_h)(double), const double* dy,
                  const double* dh_t, double* dx, double* dh0, double* dw_ih, double* dw_hh, double* db_ih,
                  double* db_hh);

// One step of those cells for a batch of N rows and H units, as the stepwise rung splits it:
// gx = x W_ih^T and gh = h W_hh^T [N, G H] without biases (the GEMMs' outputs), the biases apart.
// `saved` [N, 4 H] is what the step's backward reads: the LSTM's i, f, g, o; the GRU's r, z, n
// and W_hn h + b_hn. h [N, H] goes through round_h; c [N, H] does not.
void lstm_cell_forward(std::int64_t batch, std::int64_t hidden, const double* gx, const double* gh,
                       const double* b_ih, const double* b_hh, const double* c_prev, double (*round_h)(double),
                       double* h, double* c, double* saved);
void gru_cell_forward(std::int64_t batch, std::int64_t hidden, const double* gx, const double* gh, const double* b_ih,
                      const double* b_hh, const double* h_prev, double (*round_h)(double), double* h, double* saved);
// One step back, the formulas of lstm_backward and gru_backward above, from dy [N, H] and the
// gradient dh [N, H] later steps carry back. LSTM: d_gates [N, 4 H] (both sides' pre-activations
// share it) and dc [N, H] updated in place to what reaches c_prev; dh past W_hh is d_gates W_hh,
// the caller's product. GRU: d_input and d_hidden [N, 3 H] (the candidate rows differ by r) and dh
// updated in place to dh_total z, the part of dh_prev that does not go through W_hh.
void lstm_cell_backward(std::int64_t batch, std::int64_t hidden, const double* saved, const double* c_prev,
                        const double* c, const double* dy, const double* dh, double* dc, double* d_gates);
void gru_cell_backward(std::int64_t batch, std::int64_t hidden, const double* saved, const double* h_prev,
                       const double* dy, double* dh, double* d_input, double* d_hidden);

// Scaled dot-product attention: O[b, i, h, :] = sum_j softmax_j(scale q_i . k_j + mask) v_j for
// query rows i of batch row b and head h, every tensor read through strides of [batch, head, row,
// dim] (dim contiguous): split, packed and head-merged layouts alike. Causal masks key j > i;
// `lengths` (per batch row, or null) masks keys j >= length and zeroes the outputs of queries
// i >= length (a row with no valid key is zero). `query_rows` lists the rows b S + i to compute
// (every head of each); empty: all of them. Everything in double, unless `round` is set: then the
// rounding points of a framework's materialised (eager) attention are applied with it, st() =
// round: S_ij = st(st(q_i . k_j) scale), P_ij = st(exp(S_ij - max_j S_ij) / sum_j exp(S_ij -
// max_j S_ij)) over the visible keys, O_i = st(sum_j P_ij v_j).
struct AttentionSpec {
  std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  double scale = 1;
  bool causal = true;
  double (*round)(double) = nullptr;  // null: no rounding points
  std::int64_t q_strides[3] = {}, k_strides[3] = {}, v_strides[3] = {}, o_strides[3] = {};  // batch, head, row
};
void attention(const AttentionSpec&, const double* q, const double* k, const double* v, const double* lengths,
               const std::vector<std::int64_t>& query_rows, double* o);

// A QKV projection: y[r, j] = sum_d x[r, d] w[j, d] + bias[j] over x [rows, D], w [3 D, D] (Q's,
// K's and V's weights stacked, as PyTorch's in_proj_weight) and bias [3 D], with rows = batch seq
// and D = heads head_dim, written heads-split: column j D + h head_dim + d of row b seq + s goes to
// out[j][((b heads + h) seq + s) head_dim + d] (out = q, k, v). Only the rows listed (all when
// empty); the rest of q, k, v is left alone.
struct QkvProjectionSpec {
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
};
void qkv_projection(const QkvProjectionSpec&, const double* x, const double* w, const double* bias,
                    const std::vector<std::int64_t>& rows, double* q, double* k, double* v);

// Rounding of a double to a storage type, as the device stores it (round to nearest even).
double round_to_f32(double);
double round_to_f16(double);
double round_to_bf16(double);
using Rounding = double (*)(double);
Rounding rounding_for(DType);  // f16, bf16; f32 for every other type

}  // namespace shapetune::reference
