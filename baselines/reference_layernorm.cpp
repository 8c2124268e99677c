#include <cmath>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

void normalize_rows(std::int64_t rows, std::int64_t cols, const double* source, const double* gamma,
                    const double* beta, double epsilon, double* y) {
  parallel_for(rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const double* in = source + r * cols;
                   double sum = 0;
                   for (std::int64_t c = 0; c < cols; ++c) sum += in[c];
                   const double mean = sum / static_cast<double>(cols);
                   double squares = 0;
                   for (std::int64_t c = 0; c < cols; ++c) squares += (in[c] - mean) * (in[c] - mean);
                   const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
                   for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = (in[c] - mean) * rstd * gamma[c] + beta[c];
                 }
               });
}

}  // namespace

void layernorm(std::int64_t rows, std::int64_t cols, const double* x, const double* gamma, const double* beta,
               double epsilon, double* y) {
  normalize_rows(rows, cols, x, gamma, beta, epsilon, y);
}

void residual_layernorm(std::int64_t rows, std::int64_t cols, const double* x, const double* r, const double* gamma,
                        const double* beta, double epsilon, double (*round_h)(double), double* h, double* y) {
  parallel_for(rows * cols, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) h[i] = round_h(x[i] + r[i]);
  });
  normalize_rows(rows, cols, h, gamma, beta, epsilon, y);
}

}  // namespace shapetune::reference
