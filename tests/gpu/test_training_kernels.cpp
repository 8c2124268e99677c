// The character models' embedding gradient (models/training_kernels.cuh) against float64 sums:
// one token holding most rows (a space in English text), a token with none, widths below, at and
// past the 32-column chunks, and a step counter past the first batch; the output poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "models/training_kernels.cuh"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> download(const DeviceBuffer& d) {
  std::vector<float> host(d.bytes() / sizeof(float));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

TEST(EmbeddingGradient, SumsEachTokensRowsInAFixedOrder) {
  SHAPETUNE_REQUIRE_GPU();
  constexpr int kVocab = 7, kSteps = 2, kEmptyToken = 3;
  std::mt19937_64 rng(29);
  for (const int rows : {1, 37, 4096})
    for (const int embed : {1, 6, 32, 33, 519}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + ", embed " + std::to_string(embed));
      // Per step: each row's token (token 0 on 60% of rows, token 3 on none), the rows grouped by
      // token (ascending within one), and where each token's rows begin.
      std::vector<std::int32_t> by_token, starts;
      std::vector<std::vector<int>> token_of(kSteps, std::vector<int>(static_cast<std::size_t>(rows)));
      for (int s = 0; s < kSteps; ++s) {
        std::vector<std::vector<std::int32_t>> rows_of(kVocab);
        for (int r = 0; r < rows; ++r) {
          int v = rng() % 10 < 6 ? 0 : static_cast<int>(rng() % kVocab);
          if (v == kEmptyToken) v = 1;
          token_of[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)] = v;
          rows_of[static_cast<std::size_t>(v)].push_back(r);
        }
        starts.push_back(0);
        for (const auto& list : rows_of) {
          by_token.insert(by_token.end(), list.begin(), list.end());
          starts.push_back(static_cast<std::int32_t>(by_token.size()) - s * rows);
        }
      }
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> dx(static_cast<std::size_t>(rows) * static_cast<std::size_t>(embed));
      for (float& x : dx) x = u(rng);

      const DeviceBuffer d_dx = upload(dx), d_by_token = upload(by_token), d_starts = upload(starts);
      const DeviceBuffer d_step = upload(std::vector<std::int32_t>{1});  // the second batch's grouping
      std::vector<std::vector<float>> runs;
      for (int run = 0; run < 2; ++run) {
        DeviceBuffer d_table(static_cast<std::size_t>(kVocab) * static_cast<std::size_t>(embed) * sizeof(float));
        SHAPETUNE_CUDA_CHECK(cudaMemset(d_table.get(), 0xff, d_table.bytes()));  // NaN
        SHAPETUNE_CUDA_CHECK(training_kernels::embedding_backward(
            static_cast<const float*>(d_dx.get()), static_cast<const std::int32_t*>(d_by_token.get()),
            static_cast<const std::int32_t*>(d_starts.get()), static_cast<const std::int32_t*>(d_step.get()), rows,
            kVocab, embed, static_cast<float*>(d_table.get()), nullptr));
        SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
        runs.push_back(download(d_table));
      }
      const std::vector<float>& got = runs[0];
      for (int v = 0; v < kVocab; ++v)
        for (int c = 0; c < embed; ++c) {
          double want = 0, scale = 0;
          for (int r = 0; r < rows; ++r)
            if (token_of[1][static_cast<std::size_t>(r)] == v) {
              const double x = dx[static_cast<std::size_t>(r * embed + c)];
              want += x;
              scale += std::abs(x);
            }
          const float g = got[static_cast<std::size_t>(v * embed + c)];
          // The bound of this order: each warp sums at most rows / 8 + 1 terms, then the eight partials.
          ASSERT_NEAR(g, want, (rows / 8.0 + 9) * std::ldexp(1.0, -24) * scale) << "token " << v << ", column " << c;
          if (v == kEmptyToken) {
            ASSERT_EQ(g, 0.f) << "a token with no rows, column " << c;
          }
        }
      EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
          << "two runs differ in some bit";
    }
}

}  // namespace
}  // namespace shapetune
