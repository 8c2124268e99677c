// Float64 CPU references, one function per primitive. Inputs are the values the device saw
// (already rounded to the storage type); every intermediate is double.
#pragma once

#include <cstdint>
#include <optional>

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

// Rounding of a double to a storage type, as the device stores it (round to nearest even).
double round_to_f32(double);
double round_to_f16(double);
double round_to_bf16(double);
using Rounding = double (*)(double);
Rounding rounding_for(DType);  // f16, bf16; f32 for every other type

}  // namespace shapetune::reference
