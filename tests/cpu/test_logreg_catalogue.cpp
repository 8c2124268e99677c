// The logistic_bce entry of the catalogue, checked without a GPU: the float64 reference against
// hand-computed values, a finite difference of its own loss and the stable form at large |z|;
// the cost model, tolerances, workspaces and every variant's constraints.
#include <gtest/gtest.h>

#include <cmath>

#include "baselines/reference.hpp"
#include "kernels/logistic_bce.cuh"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

struct BceResult {
  std::vector<double> p, dw;
  double loss = NAN, db = NAN;
};

BceResult run_reference(std::int64_t rows, std::int64_t features, const std::vector<double>& x,
                        const std::vector<double>& w, double b, const std::vector<double>& labels) {
  BceResult r;
  r.p.assign(static_cast<std::size_t>(rows), NAN);
  r.dw.assign(static_cast<std::size_t>(features), NAN);
  reference::logistic_bce(rows, features, x.data(), w.data(), b, labels.data(), r.p.data(), &r.loss, r.dw.data(),
                          &r.db);
  return r;
}

Problem bce_problem(DType dtype, std::int64_t rows, std::int64_t features) {
  return Problem{"logistic_bce", dtype, Shape({{"rows", rows}, {"features", features}})};
}

std::vector<double> wave(std::size_t n, double scale, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(1.3 * static_cast<double>(i) + phase);
  return v;
}

TEST(LogregReference, OneRowMatchesHandComputedValues) {
  // z = 1*0.5 + 2*(-0.25) + 0.75 = 0.75, y = 1.
  const BceResult r = run_reference(1, 2, {1, 2}, {0.5, -0.25}, 0.75, {1});
  const double p = 1 / (1 + std::exp(-0.75));
  EXPECT_NEAR(r.p[0], p, 1e-15);
  EXPECT_NEAR(r.loss, std::log1p(std::exp(-0.75)), 1e-15);
  EXPECT_NEAR(r.db, p - 1, 1e-15);
  EXPECT_NEAR(r.dw[0], p - 1, 1e-15);
  EXPECT_NEAR(r.dw[1], 2 * (p - 1), 1e-15);
}

TEST(LogregReference, GradientMatchesCentralDifferenceOfTheMeanLoss) {
  // Odd D, not a multiple of 4, mixed labels.
  const std::int64_t rows = 5, features = 7;
  const auto x = wave(rows * features, 1, 0.2), w = wave(features, 0.8, 1.1);
  const std::vector<double> labels = {1, 0, 0, 1, 1};
  const double b = 0.3, h = 1e-6;
  const BceResult at = run_reference(rows, features, x, w, b, labels);
  for (std::int64_t j = 0; j < features; ++j) {
    auto plus = w, minus = w;
    plus[j] += h;
    minus[j] -= h;
    const double slope = (run_reference(rows, features, x, plus, b, labels).loss -
                          run_reference(rows, features, x, minus, b, labels).loss) / (2 * h);
    EXPECT_NEAR(at.dw[static_cast<std::size_t>(j)], slope, 1e-8) << j;
  }
  const double slope_b = (run_reference(rows, features, x, w, b + h, labels).loss -
                          run_reference(rows, features, x, w, b - h, labels).loss) / (2 * h);
  EXPECT_NEAR(at.db, slope_b, 1e-8);
}

TEST(LogregReference, AllZeroAndAllOneLabelsAreMirrorImages) {
  // Flipping every label and z's sign gives the same loss and opposite gradients.
  const std::int64_t rows = 4, features = 3;
  const auto x = wave(rows * features, 1, 0.5), w = wave(features, 1, 2.0);
  std::vector<double> neg_x(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) neg_x[i] = -x[i];
  const BceResult zeros = run_reference(rows, features, x, w, 0.25, std::vector<double>(rows, 0));
  const BceResult ones = run_reference(rows, features, neg_x, w, -0.25, std::vector<double>(rows, 1));
  EXPECT_NEAR(zeros.loss, ones.loss, 1e-14);
  EXPECT_NEAR(zeros.db, -ones.db, 1e-15);
  EXPECT_GT(zeros.db, 0);  // all-0 labels: every residual is p > 0
  for (std::int64_t j = 0; j < features; ++j) EXPECT_NEAR(zeros.dw[j], ones.dw[j], 1e-15) << j;  // (-x)(-r) = x r
}

TEST(LogregReference, StableAtLargeAbsoluteZ) {
  // z = +-800: exp(800) overflows double, the naive -log(sigmoid) is -log(0) = inf.
  const BceResult right = run_reference(2, 1, {800, -800}, {1}, 0, {1, 0});
  EXPECT_TRUE(std::isfinite(right.loss));
  EXPECT_EQ(right.loss, 0);  // log1p(exp(-800)) underflows to 0, correctly
  const BceResult wrong = run_reference(2, 1, {800, -800}, {1}, 0, {0, 1});
  EXPECT_NEAR(wrong.loss, 800, 1e-12);
  EXPECT_NEAR(wrong.db, 0, 1e-15);    // +1 and -1
  EXPECT_NEAR(wrong.dw[0], 800, 1e-12);  // (800 * 1 + (-800) * (-1)) / 2
  // z = 40, y = 1: p - 1 = -sigmoid(-40), kept to full relative precision.
  const BceResult tiny = run_reference(1, 1, {40}, {1}, 0, {1});
  EXPECT_NEAR(tiny.db / -std::exp(-40.0), 1, 1e-14);
  EXPECT_NEAR(tiny.loss / std::exp(-40.0), 1, 1e-14);
}

TEST(LogregReference, LabelsOutsideZeroOneAreClamped) {
  const auto x = wave(6, 1, 0.1), w = wave(3, 1, 0.7);
  const BceResult clamped = run_reference(2, 3, x, w, 0.1, {-3, 7});
  const BceResult edges = run_reference(2, 3, x, w, 0.1, {0, 1});
  EXPECT_EQ(clamped.loss, edges.loss);
  EXPECT_EQ(clamped.dw, edges.dw);
}

TEST(LogregPrimitive, TensorsAreXWBLabelsThenPLossDwDb) {
  const Primitive& p = *catalogue().find_primitive("logistic_bce");
  const auto specs = p.tensors(bce_problem(DType::bf16, 6, 785));
  ASSERT_EQ(specs.size(), 8u);
  const char* names[] = {"x", "w", "b", "labels", "p", "loss", "dw", "db"};
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(specs[i].name, names[i]);
  EXPECT_EQ(specs[0].dtype, DType::bf16);
  EXPECT_EQ(specs[0].extents, (std::vector<std::int64_t>{6, 785}));
  for (std::size_t i : {1u, 2u, 4u, 5u, 6u, 7u}) EXPECT_EQ(specs[i].dtype, DType::f32) << i;
  EXPECT_EQ(specs[3].dtype, DType::i32);
  EXPECT_EQ(specs[3].low, 0);
  EXPECT_EQ(specs[3].high, 2);  // floor(u * 2): 0 or 1
  EXPECT_NEAR(specs[1].high, 3 / std::sqrt(785.0), 1e-12);
  for (std::size_t i = 4; i < 8; ++i) EXPECT_EQ(specs[i].role, TensorRole::output) << i;
}

TEST(LogregPrimitive, CostModelReadsXOnce) {
  const Primitive& p = *catalogue().find_primitive("logistic_bce");
  const double n = 12000, d = 784;
  const Cost f32 = p.cost(bce_problem(DType::f32, 12000, 784));
  EXPECT_DOUBLE_EQ(f32.bytes, n * d * 4 + 8 * d + 8 * n + 12);
  EXPECT_DOUBLE_EQ(f32.flops, 4 * n * d + 10 * n);
  EXPECT_DOUBLE_EQ(p.cost(bce_problem(DType::bf16, 12000, 784)).bytes, n * d * 2 + 8 * d + 8 * n + 12);
}

TEST(LogregPrimitive, ToleranceGrowsWithFeaturesAndIsTheSameForEveryDtype) {
  const Primitive& p = *catalogue().find_primitive("logistic_bce");
  const Tolerance narrow = tolerance_for(p, bce_problem(DType::f32, 100, 3));
  const Tolerance wide = tolerance_for(p, bce_problem(DType::f32, 100, 100000));
  EXPECT_LT(narrow.atol, wide.atol);
  EXPECT_EQ(narrow.rtol, wide.rtol);
  EXPECT_EQ(tolerance_for(p, bce_problem(DType::bf16, 100, 784)).atol,
            tolerance_for(p, bce_problem(DType::f32, 100, 784)).atol);
  EXPECT_LT(tolerance_for(p, bce_problem(DType::f32, 12000, 784)).atol, 1e-4);  // far under the runner's gradients
}

TEST(LogregPrimitive, ValidateShapeKeepsIndicesInRange) {
  const Primitive& p = *catalogue().find_primitive("logistic_bce");
  EXPECT_TRUE(p.validate_shape(Shape({{"rows", 1}, {"features", 1}})).ok);
  EXPECT_FALSE(p.validate_shape(Shape({{"rows", 1}, {"features", (std::int64_t{1} << 30) + 1}})).ok);
  EXPECT_FALSE(p.validate_shape(Shape({{"rows", std::int64_t{1} << 40}, {"features", 1 << 9}})).ok);
}

TEST(LogregVariantsCatalogue, LadderIsRegisteredWithUnfusedAsBaseline) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants("logistic_bce")) {
    names.push_back(v->name);
    EXPECT_EQ(v->baseline, v->name == "unfused") << v->name;
    EXPECT_FALSE(v->description.empty()) << v->name;
    EXPECT_TRUE(v->params.contains(v->default_config)) << v->name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"unfused", "row_warp", "fused_block"}));
  EXPECT_EQ(catalogue().find_primitive("logistic_bce")->default_variant, "fused_block");
}

TEST(LogregVariantsCatalogue, SupportsAndRefusalsHaveReasons) {
  const DeviceLimits limits = nominal_device_limits();
  const Variant& unfused = *catalogue().find_variant("logistic_bce", "unfused");
  const Variant& row_warp = *catalogue().find_variant("logistic_bce", "row_warp");
  const Variant& fused = *catalogue().find_variant("logistic_bce", "fused_block");
  for (auto [rows, features] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {1000, 3}, {12000, 784}, {7, 785}})
    for (const Variant* v : {&unfused, &row_warp, &fused})
      EXPECT_TRUE(v->supports(bce_problem(DType::f32, rows, features), v->default_config, limits).ok)
          << v->name << " " << rows << "x" << features;
  const Support half = unfused.supports(bce_problem(DType::f16, 10, 10), unfused.default_config, limits);
  EXPECT_FALSE(half.ok);
  EXPECT_NE(half.reason.find("f32"), std::string::npos);
  EXPECT_TRUE(fused.supports(bce_problem(DType::bf16, 10, 10), fused.default_config, limits).ok);
  // D = 100000 floats of dw partial exceed a block's 227 KB; row_warp (the fallback) takes it.
  const Problem wide = bce_problem(DType::f32, 10, 100000);
  const Support too_wide = fused.supports(wide, fused.default_config, limits);
  EXPECT_FALSE(too_wide.ok);
  EXPECT_NE(too_wide.reason.find("shared memory"), std::string::npos);
  EXPECT_TRUE(row_warp.supports(wide, row_warp.default_config, limits).ok);
  // More than 65535 row chunks of 64.
  EXPECT_FALSE(row_warp.supports(bce_problem(DType::f32, 65536 * 64 + 1, 4), Config({{"warps_per_block", 4}, {"rows_per_chunk", 64}}), limits).ok);
}

TEST(LogregVariantsCatalogue, WorkspacesHoldThePartialsTheKernelsWrite) {
  namespace kl = kernels::logistic_bce;
  const Problem problem = bce_problem(DType::f32, 1000, 3);
  const Variant& fused = *catalogue().find_variant("logistic_bce", "fused_block");
  const Config c({{"block_size", 256}, {"rows_per_block", 64}});
  // 16 blocks: a [16, 3] dw partial and 16 losses and residual sums, each piece 256-byte aligned.
  EXPECT_EQ(fused.workspace_bytes(problem, c), 3u * 256);
  EXPECT_EQ(kl::fused_block_count(1000, 64), 16);
  const Variant& row_warp = *catalogue().find_variant("logistic_bce", "row_warp");
  const Config r({{"warps_per_block", 4}, {"rows_per_chunk", 256}});
  EXPECT_EQ(row_warp.workspace_bytes(problem, r), kl::row_scratch_bytes(1000) + kl::partials_bytes(4, 3));
  EXPECT_EQ(kl::row_scratch_bytes(1000), 2u * 4096);
  const Variant& unfused = *catalogue().find_variant("logistic_bce", "unfused");
  EXPECT_EQ(unfused.workspace_bytes(problem, unfused.default_config), kl::row_scratch_bytes(1000));
}

}  // namespace
}  // namespace shapetune
