#include <cmath>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {

void softmax(std::int64_t rows, std::int64_t cols, const double* x, double* y) {
  parallel_for(rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const double* in = x + r * cols;
                   double* out = y + r * cols;
                   double max = -INFINITY;
                   for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, in[c]);
                   double sum = 0;
                   for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(in[c] - max);
                   for (std::int64_t c = 0; c < cols; ++c) out[c] = std::exp(in[c] - max) / sum;
                 }
               });
}

}  // namespace shapetune::reference
