// gemm_bias_residual_layernorm.nt in the catalogue, without a GPU: the reference against a plain
// loop that rounds where gemm_bias and residual_layernorm store, the tensors the runner binds, and
// what each variant refuses and why.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "baselines/reference.hpp"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr const char* kName = "gemm_bias_residual_layernorm.nt";

Problem problem(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {kName, dtype, Shape({{"m", m}, {"n", n}, {"k", k}})};
}

Config wgmma_config(int tile, int stages, int persistent) {
  return Config({{"tile", tile}, {"stages", stages}, {"persistent", persistent}});
}

TEST(GemmResidualLayerNorm, RegisteredWithTheUnfusedBaselineAsDefault) {
  const Primitive* p = catalogue().find_primitive(kName);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->dtypes, (std::vector<DType>{DType::f16, DType::bf16}));
  EXPECT_EQ(p->default_variant, "unfused") << "untuned, the runner keeps its two ops";
  const Variant* unfused = catalogue().find_variant(kName, "unfused");
  const Variant* wgmma = catalogue().find_variant(kName, "wgmma");
  ASSERT_TRUE(unfused && wgmma);
  EXPECT_TRUE(unfused->baseline);
  EXPECT_FALSE(wgmma->baseline);
  EXPECT_TRUE(wgmma->params.contains(wgmma->default_config));
  const std::vector<TensorSpec> t = p->tensors(problem(DType::f16, 5, 6, 48));
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[1].extents, (std::vector<std::int64_t>{6, 48})) << "w is [n, k]";
  EXPECT_EQ(t[3].name, "r");
  EXPECT_EQ(t[6].name, "h");
  EXPECT_EQ(t[7].name, "y");
  EXPECT_DOUBLE_EQ(t[1].high, 0.25) << "weights within +-sqrt(3 / k)";
}

// p = round(x W^T + b), h = round(p + r), y = LayerNorm(h) with the biased variance, written out
// as loops here, against the primitive's reference, in f16 (whose roundings show).
TEST(GemmResidualLayerNorm, ReferenceRoundsTheProjectionAndTheSumThenNormalises) {
  const std::int64_t m = 3, n = 5, k = 7;
  const Problem pr = problem(DType::f16, m, n, k);
  const Primitive& p = *catalogue().find_primitive(kName);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto round = reference::rounding_for(DType::f16);
  HostTensors t;
  for (std::int64_t size : {m * k, n * k, n, m * n, n, n}) {
    t.emplace_back(static_cast<std::size_t>(size));
    for (double& v : t.back()) v = round(u(rng));
  }
  t.emplace_back(static_cast<std::size_t>(m * n));
  t.emplace_back(static_cast<std::size_t>(m * n));
  p.reference(pr, std::vector<double>{1e-5}, t);
  for (std::int64_t i = 0; i < m; ++i) {
    std::vector<double> h(static_cast<std::size_t>(n));
    double mean = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      double dot = t[2][static_cast<std::size_t>(j)];
      for (std::int64_t q = 0; q < k; ++q) dot += t[0][static_cast<std::size_t>(i * k + q)] * t[1][static_cast<std::size_t>(j * k + q)];
      h[static_cast<std::size_t>(j)] = round(round(dot) + t[3][static_cast<std::size_t>(i * n + j)]);
      mean += h[static_cast<std::size_t>(j)] / static_cast<double>(n);
    }
    double var = 0;
    for (double v : h) var += (v - mean) * (v - mean) / static_cast<double>(n);
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(i * n + j);
      EXPECT_DOUBLE_EQ(t[6][at], h[static_cast<std::size_t>(j)]) << i << "," << j;
      const double y = (h[static_cast<std::size_t>(j)] - mean) / std::sqrt(var + 1e-5) * t[4][static_cast<std::size_t>(j)] +
                       t[5][static_cast<std::size_t>(j)];
      EXPECT_NEAR(t[7][at], y, 1e-12) << i << "," << j;
    }
  }
}

TEST(GemmResidualLayerNorm, WgmmaNeedsATileSpanningTheRowAndHopper) {
  const Variant& v = *catalogue().find_variant(kName, "wgmma");
  const DeviceLimits h200 = nominal_device_limits();
  EXPECT_TRUE(v.supports(problem(DType::f16, 8192, 128, 128), v.default_config, h200).ok);
  EXPECT_TRUE(v.supports(problem(DType::bf16, 8192, 256, 128), wgmma_config(0, 3, 0), h200).ok);
  const Support narrow = v.supports(problem(DType::f16, 8192, 200, 128), wgmma_config(2, 3, 0), h200);
  EXPECT_FALSE(narrow.ok);
  EXPECT_CONTAINS(narrow.reason, "n = 200 needs a tile of at least that many columns (this one has 128)");
  EXPECT_FALSE(v.supports(problem(DType::f16, 64, 264, 128), v.default_config, h200).ok) << "past 256 columns";
  EXPECT_TRUE(v.supports(problem(DType::f16, 64, 32, 32), wgmma_config(3, 5, 1), h200).ok);
  const Support tma = v.supports(problem(DType::f16, 64, 32, 30), v.default_config, h200);
  EXPECT_FALSE(tma.ok);
  EXPECT_CONTAINS(tma.reason, "k = 30 in nt");
  DeviceLimits ampere = h200;
  ampere.compute_capability = 80;
  EXPECT_FALSE(v.supports(problem(DType::f16, 8192, 128, 128), v.default_config, ampere).ok);
}

TEST(GemmResidualLayerNorm, UnfusedRunsWhereItsTwoKernelsDo) {
  const Variant& v = *catalogue().find_variant(kName, "unfused");
  const DeviceLimits h200 = nominal_device_limits();
  for (const auto& [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{8192, 128, 128}, std::tuple{77, 1000, 33}})
    EXPECT_TRUE(v.supports(problem(DType::bf16, m, n, k), v.default_config, h200).ok) << m << "x" << n << "x" << k;
  ASSERT_TRUE(v.workspace_bytes);
  EXPECT_EQ(v.workspace_bytes(problem(DType::f16, 100, 30, 8), v.default_config), 6144u) << "the projection, 256-byte units";
}

}  // namespace
}  // namespace shapetune
