// The softmax entry of the catalogue, checked without a GPU: reference, cost model,
// tolerances and every variant's constraints.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "baselines/reference.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

TEST(SoftmaxReference, UniformRowIsOneOverN) {
  std::vector<double> x(5, 3.0), y(5);
  reference::softmax(1, 5, x.data(), y.data());
  for (double v : y) EXPECT_DOUBLE_EQ(v, 0.2);
}

TEST(SoftmaxReference, MatchesTheTextbookFormulaAndSumsToOne) {
  const std::vector<double> x = {1, 2, 3, -1, 0, 0.5};  // 2 rows of 3
  std::vector<double> y(6);
  reference::softmax(2, 3, x.data(), y.data());
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 3; ++c) sum += std::exp(x[r * 3 + c]);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(y[r * 3 + c], std::exp(x[r * 3 + c]) / sum, 1e-15);
    EXPECT_NEAR(y[r * 3] + y[r * 3 + 1] + y[r * 3 + 2], 1.0, 1e-15);
  }
}

TEST(SoftmaxReference, StableForHugeLogitsAndShiftInvariant) {
  std::vector<double> x = {1000, 1001, 1002}, shifted = {0, 1, 2}, y(3), y_shifted(3);
  reference::softmax(1, 3, x.data(), y.data());
  reference::softmax(1, 3, shifted.data(), y_shifted.data());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isfinite(y[i]));
    EXPECT_NEAR(y[i], y_shifted[i], 1e-15);
  }
}

TEST(SoftmaxReference, ManyRowsInParallelMatchOneByOne) {
  const std::int64_t rows = 3000, cols = 37;
  std::vector<double> x(rows * cols), y(rows * cols), one(cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) * 8;
  reference::softmax(rows, cols, x.data(), y.data());
  for (std::int64_t r : {std::int64_t{0}, rows / 2, rows - 1}) {
    reference::softmax(1, cols, x.data() + r * cols, one.data());
    for (std::int64_t c = 0; c < cols; ++c) EXPECT_EQ(y[r * cols + c], one[c]);
  }
}

TEST(SoftmaxPrimitive, CostModelCountsOneReadAndOneWrite) {
  const Primitive& p = *catalogue().find_primitive("softmax");
  const Problem f32{"softmax", DType::f32, Shape({{"rows", 65536}, {"cols", 1024}})};
  EXPECT_DOUBLE_EQ(p.cost(f32).bytes, 2.0 * 65536 * 1024 * 4);
  EXPECT_DOUBLE_EQ(p.cost(f32).flops, 5.0 * 65536 * 1024);
  const Problem bf16{"softmax", DType::bf16, f32.shape};
  EXPECT_DOUBLE_EQ(p.cost(bf16).bytes, 2.0 * 65536 * 1024 * 2);
}

TEST(SoftmaxPrimitive, TolerancesLooserForNarrowerTypes) {
  const Primitive& p = *catalogue().find_primitive("softmax");
  EXPECT_LT(p.tolerance(DType::f32).rtol, p.tolerance(DType::f16).rtol);
  EXPECT_LT(p.tolerance(DType::f16).rtol, p.tolerance(DType::bf16).rtol);
}

TEST(SoftmaxVariantsCatalogue, LadderAndBaselineAreRegistered) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants("softmax")) names.push_back(v->name);
  const std::vector<std::string> expected = {"thread_row_3pass", "thread_row_online", "warp_row_online",
                                             "block_row_online", "vec_online",        "register_row",
                                             "cudnn"};
  EXPECT_EQ(names, expected);
  EXPECT_TRUE(catalogue().find_variant("softmax", "cudnn")->baseline);
  EXPECT_NE(catalogue().find_variant("softmax", catalogue().find_primitive("softmax")->default_variant), nullptr);
}

TEST(SoftmaxVariantsCatalogue, DefaultConfigsAreInTheirSpacesAndSupportAnyShape) {
  const DeviceLimits limits = nominal_device_limits();
  const Primitive& p = *catalogue().find_primitive("softmax");
  const Variant& fallback = *catalogue().find_variant("softmax", p.default_variant);
  for (const Variant* v : catalogue().variants("softmax")) EXPECT_TRUE(v->params.contains(v->default_config)) << v->name;
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 4097}, {1, 1 << 20}, {1 << 20, 7}}) {
    const Problem problem{"softmax", DType::f16, Shape({{"rows", rows}, {"cols", cols}})};
    EXPECT_TRUE(fallback.supports(problem, fallback.default_config, limits).ok) << problem.key();
  }
}

TEST(SoftmaxVariantsCatalogue, VectorizedSpacesRespectTheirConstraint) {
  for (const char* name : {"vec_online", "register_row"}) {
    const Variant& v = *catalogue().find_variant("softmax", name);
    const auto configs = v.params.enumerate();
    EXPECT_LT(static_cast<std::int64_t>(configs.size()), v.params.raw_size());
    for (const Config& c : configs) EXPECT_LE(c.at("threads_per_row"), c.at("block_size")) << name << " " << c.key();
  }
}

TEST(SoftmaxVariantsCatalogue, RegisterRowHoldsExactlyTheRowsThatFit) {
  const Variant& v = *catalogue().find_variant("softmax", "register_row");
  const DeviceLimits limits = nominal_device_limits();
  const Config config({{"threads_per_row", 1024}, {"block_size", 1024}, {"packs_per_thread", 8}});
  auto problem = [](std::int64_t cols) { return Problem{"softmax", DType::f32, Shape({{"rows", 8}, {"cols", cols}})}; };
  EXPECT_TRUE(v.supports(problem(32000), config, limits).ok);    // 8000 packs of 4 <= 8192
  EXPECT_TRUE(v.supports(problem(32771), config, limits).ok);    // 8192 packs + 3 edge elements
  EXPECT_FALSE(v.supports(problem(32772), config, limits).ok);   // 8193 packs
  const Support wasteful = v.supports(problem(1000), config, limits);
  EXPECT_FALSE(wasteful.ok);
  EXPECT_NE(wasteful.reason.find("half the packs"), std::string::npos) << wasteful.reason;
}

}  // namespace
}  // namespace shapetune
