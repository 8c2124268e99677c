#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// out[n][r] = b1[r] + b2[r] + sum_k in[n][k] w[r][k] over rows [0, rows) of w, for each batch row
// (b1 and b2 may be null).
void affine(std::int64_t batch, std::int64_t rows, std::int64_t width, const double* in, const double* w,
            const double* b1, const double* b2, double* out) {
  parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      for (std::int64_t r = 0; r < rows; ++r) {
        double acc = (b1 ? b1[r] : 0.0) + (b2 ? b2[r] : 0.0);
        const double* wr = w + r * width;
        const double* v = in + n * width;
        for (std::int64_t k = 0; k < width; ++k) acc += v[k] * wr[k];
        out[n * rows + r] = acc;
      }
  });
}

}  // namespace

double round_to_f32(double v) { return static_cast<float>(v); }
double round_to_f16(double v) { return __half2float(__float2half_rn(static_cast<float>(v))); }
double round_to_bf16(double v) { return __bfloat162float(__float2bfloat16_rn(static_cast<float>(v))); }

Rounding rounding_for(DType dtype) {
  return dtype == DType::f16 ? round_to_f16 : dtype == DType::bf16 ? round_to_bf16 : round_to_f32;
}

void lstm_forward(const RnnShape& s, const double* x, const double* h0, const double* c0, const double* w_ih,
                  const double* w_hh, const double* b_ih, const double* b_hh, double (*round_h)(double), double* y,
                  double* h_t, double* c_t) {
  const std::int64_t N = s.batch, H = s.hidden, D = s.input, G = 4 * H;
  std::vector<double> h(h0, h0 + N * H), c(c0, c0 + N * H), in_gates(N * G), rec_gates(N * G);
  for (std::int64_t t = 0; t < s.steps; ++t) {
    affine(N, G, D, x + t * N * D, w_ih, b_ih, b_hh, in_gates.data());
    affine(N, G, H, h.data(), w_hh, nullptr, nullptr, rec_gates.data());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        auto gate = [&](int g) { return in_gates[n * G + g * H + j] + rec_gates[n * G + g * H + j]; };
        const double i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = std::tanh(gate(2)), o = sigmoid(gate(3));
        double& cell = c[n * H + j];
        cell = f * cell + i * g;
        const double hv = round_h(o * std::tanh(cell));
        y[(t * N + n) * H + j] = hv;
        h[n * H + j] = hv;
      }
  }
  for (std::int64_t e = 0; e < N * H; ++e) {
    h_t[e] = h[e];
    c_t[e] = c[e];
  }
}

void gru_forward(const RnnShape& s, const double* x, const double* h0, const double* w_ih, const double* w_hh,
                 const double* b_ih, const double* b_hh, double (*round_h)(double), double* y, double* h_t) {
  const std::int64_t N = s.batch, H = s.hidden, D = s.input, G = 3 * H;
  std::vector<double> h(h0, h0 + N * H), in_gates(N * G), rec_gates(N * G);
  for (std::int64_t t = 0; t < s.steps; ++t) {
    affine(N, G, D, x + t * N * D, w_ih, b_ih, nullptr, in_gates.data());
    affine(N, G, H, h.data(), w_hh, b_hh, nullptr, rec_gates.data());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        const double* gi = in_gates.data() + n * G;
        const double* gh = rec_gates.data() + n * G;
        const double r = sigmoid(gi[j] + gh[j]);
        const double z = sigmoid(gi[H + j] + gh[H + j]);
        const double nn = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
        const double hv = round_h((1 - z) * nn + z * h[n * H + j]);
        y[(t * N + n) * H + j] = hv;
        h[n * H + j] = hv;
      }
  }
  for (std::int64_t e = 0; e < N * H; ++e) h_t[e] = h[e];
}

}  // namespace shapetune::reference
