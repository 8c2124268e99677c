#include <algorithm>
#include <cmath>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {

void logistic_bce(std::int64_t rows, std::int64_t features, const double* x, const double* w, double b,
                  const double* labels, double* p, double* loss, double* dw, double* db) {
  std::vector<double> residuals(static_cast<std::size_t>(rows)), row_losses(static_cast<std::size_t>(rows));
  parallel_for(rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(features, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t i = begin; i < end; ++i) {
                   const double* xi = x + i * features;
                   double z = b;
                   for (std::int64_t j = 0; j < features; ++j) z += xi[j] * w[j];
                   const bool positive = labels[i] > 0;  // 0/1, anything else clamped as the kernels do
                   const double e = std::exp(-std::abs(z));
                   const double sigmoid = z >= 0 ? 1 / (1 + e) : e / (1 + e);
                   const double complement = z >= 0 ? e / (1 + e) : 1 / (1 + e);  // sigmoid(-z), no cancellation
                   p[i] = sigmoid;
                   residuals[static_cast<std::size_t>(i)] = positive ? -complement : sigmoid;
                   row_losses[static_cast<std::size_t>(i)] =
                       std::max(z, 0.0) - z * (positive ? 1.0 : 0.0) + std::log1p(e);
                 }
               });
  // Row order throughout, so the reference does not depend on the number of cores.
  const double inv_rows = 1.0 / static_cast<double>(rows);
  double loss_sum = 0, residual_sum = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    loss_sum += row_losses[static_cast<std::size_t>(i)];
    residual_sum += residuals[static_cast<std::size_t>(i)];
  }
  loss[0] = loss_sum * inv_rows;
  db[0] = residual_sum * inv_rows;
  std::fill(dw, dw + features, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const double r = residuals[static_cast<std::size_t>(i)];
    const double* xi = x + i * features;
    for (std::int64_t j = 0; j < features; ++j) dw[j] += xi[j] * r;
  }
  for (std::int64_t j = 0; j < features; ++j) dw[j] *= inv_rows;
}

}  // namespace shapetune::reference
