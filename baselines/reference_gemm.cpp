// The float64 GEMM reference. op(A) and op(B) are first made row-major [m, k] and [k, n] (copied
// only where stored transposed), so one i-k-j loop serves every layout: its j loop streams a row
// of op(B) into a row of accumulators, which the compiler vectorizes. Blocks of rows x columns run
// in parallel, and K is taken in slices so that a slice of op(B)'s rows stays in cache for every
// row of a block: 4096^3 takes seconds on a many-core host rather than minutes.
#include <algorithm>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

constexpr std::int64_t kRowBlock = 16;
constexpr std::int64_t kColBlock = 256;    // 2 KB of accumulators per row: the block's 32 KB fit L1
constexpr std::int64_t kDepthBlock = 128;  // 128 x 256 doubles of op(B): 256 KB, held in L2

// x [rows, cols] as [cols, rows]; 64 columns at a time, so the 64 output rows being written stay
// in cache while x is read along its rows.
std::vector<double> transposed(const double* x, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kColumns = 64;
  std::vector<double> out(static_cast<std::size_t>(rows * cols));
  const std::int64_t blocks = (cols + kColumns - 1) / kColumns;
  parallel_for(blocks, std::max<std::int64_t>(1, (1 << 16) / (rows * kColumns)), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t c0 = block * kColumns, c1 = std::min(cols, c0 + kColumns);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = c0; c < c1; ++c) out[c * rows + r] = x[r * cols + c];
    }
  });
  return out;
}

}  // namespace

void gemm(const GemmSpec& s, const double* a, const double* b, double* c) {
  const std::int64_t m = s.m, n = s.n, k = s.k;
  std::vector<double> a_copy, b_copy;
  if (s.a_transposed) a_copy = transposed(a, k, m);
  if (s.b_transposed) b_copy = transposed(b, n, k);
  const double* op_a = s.a_transposed ? a_copy.data() : a;
  const double* op_b = s.b_transposed ? b_copy.data() : b;

  const std::int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock;
  const std::int64_t col_blocks = (n + kColBlock - 1) / kColBlock;
  // About 4M multiply-adds per chunk at least, so small problems stay on the calling thread.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 22) / (kRowBlock * kColBlock * k));
  parallel_for(row_blocks * col_blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> acc(static_cast<std::size_t>(kRowBlock * kColBlock));
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t i0 = block / col_blocks * kRowBlock, j0 = block % col_blocks * kColBlock;
      const std::int64_t rows = std::min(kRowBlock, m - i0), cols = std::min(kColBlock, n - j0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
        const std::int64_t k1 = std::min(k, k0 + kDepthBlock);
        for (std::int64_t i = 0; i < rows; ++i) {
          double* out = acc.data() + i * kColBlock;
          const double* a_row = op_a + (i0 + i) * k;
          for (std::int64_t kk = k0; kk < k1; ++kk) {
            const double a_value = a_row[kk];
            const double* b_row = op_b + kk * n + j0;
            for (std::int64_t j = 0; j < cols; ++j) out[j] += a_value * b_row[j];
          }
        }
      }
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          double& result = c[(i0 + i) * n + j0 + j];
          double v = s.alpha * acc[static_cast<std::size_t>(i * kColBlock + j)];
          if (s.beta != 0) v += s.beta * result;
          if (s.bias) v += s.bias[j0 + j];
          if (s.activation) v = activation(*s.activation, s.round_pre_activation ? s.round_pre_activation(v) : v);
          result = v;
        }
      }
    }
  });
}

}  // namespace shapetune::reference
