#include <algorithm>
#include <cmath>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

std::int64_t clamped_label(double label, std::int64_t classes) {
  return std::clamp(static_cast<std::int64_t>(label), std::int64_t{0}, classes - 1);
}

// One row: writes its gradient, returns its loss. The label's term is kept out of the sum so
// that p[label] - 1 comes out as -others / total, and a loss near 0 as log1p(others), with no
// cancellation when p[label] is near 1 (the device kernels compute the same way, in float).
double row_xent(std::int64_t classes, const double* x, std::int64_t label, double inv_rows, double* dx) {
  const double max = *std::max_element(x, x + classes);
  double others = 0;
  for (std::int64_t c = 0; c < classes; ++c)
    if (c != label) others += std::exp(x[c] - max);
  const double total = others + std::exp(x[label] - max);
  for (std::int64_t c = 0; c < classes; ++c) dx[c] = std::exp(x[c] - max) / total * inv_rows;
  dx[label] = -others / total * inv_rows;
  return x[label] == max ? std::log1p(others) : std::log(total) + (max - x[label]);
}

}  // namespace

void softmax_xent(std::int64_t rows, std::int64_t classes, const double* logits, const double* labels, double* loss,
                  double* dlogits) {
  const double inv_rows = 1.0 / static_cast<double>(rows);
  std::vector<double> row_losses(static_cast<std::size_t>(rows));
  parallel_for(rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(classes, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r)
                   row_losses[static_cast<std::size_t>(r)] =
                       row_xent(classes, logits + r * classes, clamped_label(labels[r], classes), inv_rows,
                                dlogits + r * classes);
               });
  double sum = 0;  // in row order, so the reference does not depend on the number of cores
  for (double l : row_losses) sum += l;
  loss[0] = sum / static_cast<double>(rows);
}

}  // namespace shapetune::reference
