// Every logistic_bce variant, every config it supports, every dtype, at awkward shapes: p, loss,
// dw and db verified element by element against the float64 reference on fresh inputs with
// poisoned outputs; then fused_block's promise of bit-identical runs.
#include <gtest/gtest.h>

#include <random>

#include "harness/cuda_check.hpp"
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
  std::int64_t features;
};

// One row; one feature; 785 features (odd, not a multiple of 4 or of any block size); many rows
// of three features (most threads of a block idle); the runner's problem; a partial last tile.
const Case kAwkwardShapes[] = {{1, 1}, {1, 785}, {3, 1}, {1000, 3}, {33, 785}, {12000, 784}, {1025, 130}};

Problem bce_problem(DType dtype, const Case& c) {
  return Problem{"logistic_bce", dtype, Shape({{"rows", c.rows}, {"features", c.features}})};
}

class LogregVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(LogregVariants, EveryConfigMatchesReferenceAtAwkwardShapes) {
  // row_warp's 12 configs and fused_block's 16 take every shape above; unfused adds one in f32.
  const int expected = 12 + 16 + (GetParam() == DType::f32 ? 1 : 0);
  std::uint64_t seed = std::random_device{}();
  for (const Case& c : kAwkwardShapes) {
    const Problem problem = bce_problem(GetParam(), c);
    SCOPED_TRACE("input seed " + std::to_string(seed));
    EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++), expected) << problem.key();
  }
}

// |z| in the tens: the naive log(1 - p) is -inf and 1 - p rounds to 0 in float; the stable form
// and the complement residual are what keep every output within tolerance.
TEST_P(LogregVariants, StableForLargeAbsoluteZ) {
  auto large_z = [](std::vector<TensorSpec>& specs) {
    specs[1].low = 0.25;  // w in [0.25, 0.5), x in [0.5, 1): z ~ 0.28 D, 17 at D = 60
    specs[1].high = 0.5;
    specs[0].low = 0.5;
    specs[0].high = 1;
  };
  for (const Case c : {Case{64, 60}, Case{7, 33}}) {
    const Problem problem = bce_problem(GetParam(), c);
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, std::random_device{}(), large_z), 28)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, LogregVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// fused_block's partials are added in block order, never by atomics: two runs, whatever the
// workspace held before, give the same bits. (row_warp and unfused promise the same; checked too.)
TEST(LogregEngine, RunsAreBitIdentical) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const Primitive& primitive = *catalogue().find_primitive("logistic_bce");
  for (const Case c : {Case{12000, 784}, Case{1000, 3}, Case{1, 785}}) {
    const Problem problem = bce_problem(DType::f32, c);
    ProblemData data(primitive, problem, 23);
    for (const Variant* v : catalogue().variants("logistic_bce"))
      for (const Config& config : v->params.enumerate()) {
        if (!v->supports(problem, config, device.limits).ok) continue;
        const auto zeroed = test_support::outputs_after_launch(*v, config, data, measurer, 0);
        EXPECT_EQ(data.check(0, tolerance_for(primitive, problem), measurer.stream()).mismatches, 0)
            << problem.key() << " " << v->name << "{" << config.key() << "}";
        const auto poisoned = test_support::outputs_after_launch(*v, config, data, measurer, 0xFF);
        EXPECT_TRUE(zeroed == poisoned) << problem.key() << " " << v->name << "{" << config.key()
                                        << "}: outputs differ between runs";
      }
  }
}

}  // namespace
}  // namespace shapetune
