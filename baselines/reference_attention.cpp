#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {

void attention(const AttentionSpec& s, const double* q, const double* k, const double* v, const double* lengths,
               const std::vector<std::int64_t>& query_rows, double* o) {
  const std::int64_t rows = query_rows.empty() ? s.batch * s.seq : static_cast<std::int64_t>(query_rows.size());
  parallel_for(rows * s.heads, 16, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> scores(static_cast<std::size_t>(s.seq));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t row = query_rows.empty() ? task / s.heads : query_rows[static_cast<std::size_t>(task / s.heads)];
      const std::int64_t b = row / s.seq, i = row % s.seq, h = task % s.heads;
      const auto length = lengths ? static_cast<std::int64_t>(lengths[b]) : s.seq;
      double* out = o + b * s.o_strides[0] + h * s.o_strides[1] + i * s.o_strides[2];
      const std::int64_t keys = i >= length ? 0 : std::min(length, s.causal ? i + 1 : s.seq);
      if (keys == 0) {
        std::fill(out, out + s.head_dim, 0.0);
        continue;
      }
      const double* qi = q + b * s.q_strides[0] + h * s.q_strides[1] + i * s.q_strides[2];
      double top = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < keys; ++j) {
        const double* kj = k + b * s.k_strides[0] + h * s.k_strides[1] + j * s.k_strides[2];
        double dot = 0;
        for (std::int64_t d = 0; d < s.head_dim; ++d) dot += qi[d] * kj[d];
        const double score = s.round ? s.round(s.round(dot) * s.scale) : dot * s.scale;
        scores[static_cast<std::size_t>(j)] = score;
        top = std::max(top, score);
      }
      double sum = 0;
      for (std::int64_t j = 0; j < keys; ++j) sum += scores[static_cast<std::size_t>(j)] = std::exp(scores[static_cast<std::size_t>(j)] - top);
      std::fill(out, out + s.head_dim, 0.0);
      for (std::int64_t j = 0; j < keys; ++j) {
        const double normalised = scores[static_cast<std::size_t>(j)] / sum;
        const double p = s.round ? s.round(normalised) : normalised;
        const double* vj = v + b * s.v_strides[0] + h * s.v_strides[1] + j * s.v_strides[2];
        for (std::int64_t d = 0; d < s.head_dim; ++d) out[d] += p * vj[d];
      }
      if (s.round)
        for (std::int64_t d = 0; d < s.head_dim; ++d) out[d] = s.round(out[d]);
    }
  });
}

void qkv_projection(const QkvProjectionSpec& s, const double* x, const double* w, const double* bias,
                    const std::vector<std::int64_t>& rows, double* q, double* k, double* v) {
  const std::int64_t width = s.heads * s.head_dim;
  const std::int64_t count = rows.empty() ? s.batch * s.seq : static_cast<std::int64_t>(rows.size());
  double* const out[3] = {q, k, v};
  parallel_for(count, 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t row = rows.empty() ? task : rows[static_cast<std::size_t>(task)];
      const std::int64_t b = row / s.seq, position = row % s.seq;
      const double* xr = x + row * width;
      for (std::int64_t j = 0; j < 3 * width; ++j) {
        const double* wj = w + j * width;
        double sum = bias[j];
        for (std::int64_t d = 0; d < width; ++d) sum += xr[d] * wj[d];
        const std::int64_t which = j / width, head = (j % width) / s.head_dim, d = j % s.head_dim;
        out[which][((b * s.heads + head) * s.seq + position) * s.head_dim + d] = sum;
      }
    }
  });
}

}  // namespace shapetune::reference
