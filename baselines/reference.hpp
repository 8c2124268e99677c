// Float64 CPU references, one function per primitive. Inputs are the values the device saw
// (already rounded to the storage type); every intermediate is double.
#pragma once

#include <cstdint>

namespace shapetune::reference {

// y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) for each of `rows` rows.
void softmax(std::int64_t rows, std::int64_t cols, const double* x, double* y);

}  // namespace shapetune::reference
