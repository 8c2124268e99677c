// Every softmax variant, every config it supports, every dtype, at awkward shapes: verified
// element by element against the float64 reference on fresh inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <random>

#include "harness/device.hpp"
#include "harness/measure.hpp"
#include "harness/problem_data.hpp"
#include "support/test_support.hpp"
#include "support/verify_configs.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

namespace {

struct Case {
  std::int64_t rows;
  std::int64_t cols;
};

// One row; widths under one 16-byte pack; odd widths past a power of two (every row starts at a
// different phase, so heads and tails vary); vocabulary-wide rows; many short odd rows.
const Case kAwkwardShapes[] = {{1, 1}, {1, 3}, {7, 1000}, {3, 4097}, {2, 32000}, {65536, 17}, {5, 8}, {33, 129}};

class SoftmaxVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    MeasureOptions options;
    measurer_ = std::make_unique<Measurer>(device_, options);
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

void expect_all_configs_accurate(Measurer& measurer, const DeviceInfo& device, DType dtype, const Case& c,
                                 std::uint64_t seed, const std::function<void(std::vector<TensorSpec>&)>& adjust = {}) {
  const Problem problem{"softmax", dtype, Shape({{"rows", c.rows}, {"cols", c.cols}})};
  // Every hand-written variant has at least one config for every shape here.
  EXPECT_GE(test_support::verify_every_config(measurer, device, problem, seed, adjust), 6) << problem.key();
}

TEST_P(SoftmaxVariants, EveryConfigMatchesReferenceAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const Case& c : kAwkwardShapes) expect_all_configs_accurate(*measurer_, device_, GetParam(), c, seed++);
}

// Logits far from zero: exp(x) overflows float without the max subtraction.
TEST_P(SoftmaxVariants, StableForLargeLogits) {
  auto shift = [](std::vector<TensorSpec>& specs) {
    specs[0].low = 90;
    specs[0].high = 110;
  };
  expect_all_configs_accurate(*measurer_, device_, GetParam(), {9, 1031}, std::random_device{}(), shift);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SoftmaxVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The engine must catch a wrong kernel: a variant that skips the tail of every row.
TEST(MeasureEngine, RejectsAVariantThatSkipsElements) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const Primitive& primitive = *catalogue().find_primitive("softmax");
  const Problem problem{"softmax", DType::f32, Shape({{"rows", 4}, {"cols", 37}})};
  ProblemData data(primitive, problem, 7);
  Variant skipping = *catalogue().find_variant("softmax", "block_row_online");
  const auto honest = skipping.launch;
  // Launch on a problem that claims one column fewer per row: the last column stays poisoned
  // in the last row, and rows are misplaced in the others.
  skipping.launch = [honest](const LaunchArgs& a) {
    Problem narrower = a.problem;
    narrower.shape = Shape({{"rows", 4}, {"cols", 36}});
    return honest(LaunchArgs{narrower, a.config, a.tensors, a.stream, a.libraries});
  };
  const CandidateOutcome outcome = measurer.measure(skipping, skipping.default_config, data, primitive.tolerance(DType::f32));
  EXPECT_EQ(outcome.status, CandidateStatus::failed_accuracy);
  ASSERT_TRUE(outcome.accuracy.has_value());
  EXPECT_GT(outcome.accuracy->mismatches, 0);
  EXPECT_FALSE(outcome.timing.has_value());
}

TEST(MeasureEngine, TimesAnAccurateVariantWithStatistics) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  MeasureOptions options;
  options.stop.time_cap_s = 0.2;
  Measurer measurer(device, options);
  const Primitive& primitive = *catalogue().find_primitive("softmax");
  for (auto rows : {std::int64_t{8}, std::int64_t{16384}}) {
    const Problem problem{"softmax", DType::f32, Shape({{"rows", rows}, {"cols", 1024}})};
    ProblemData data(primitive, problem, 11);
    const Variant& v = *catalogue().find_variant("softmax", "vec_online");
    const CandidateOutcome outcome = measurer.measure(v, v.default_config, data, primitive.tolerance(DType::f32));
    ASSERT_EQ(outcome.status, CandidateStatus::ok) << outcome.reason;
    ASSERT_TRUE(outcome.timing.has_value());
    const TimingStats& t = *outcome.timing;
    EXPECT_GE(t.samples, options.stop.min_samples);
    EXPECT_LE(t.p10_us, t.median_us);
    EXPECT_LE(t.median_us, t.p90_us);
    EXPECT_GT(t.min_us, 0);
    // 8 rows is a few microseconds: timed as a graph batch over rotating sets; 16384 rows is not.
    if (rows == 8) {
      EXPECT_TRUE(t.mode == TimingMode::graph_batch || t.mode == TimingMode::batch);
      EXPECT_GT(t.launches_per_sample, 1);
    } else {
      EXPECT_EQ(t.mode, TimingMode::cold);
    }
  }
}

}  // namespace
}  // namespace shapetune
