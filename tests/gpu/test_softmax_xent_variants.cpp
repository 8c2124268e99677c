// Every softmax_xent variant, every config it supports, every dtype, at awkward shapes: loss and
// dlogits verified element by element against the float64 reference on fresh inputs with
// poisoned outputs; then what the catalogue promises beyond accuracy (a deterministic mean,
// clamped labels, no use of stale workspace).
#include <gtest/gtest.h>

#include <optional>
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
  std::int64_t classes;
};

// One class (loss 0, gradient 0: no NaN); widths under one 16-byte pack; odd widths (every row
// starts at a different phase, so heads and tails vary); vocabulary-wide rows; many short odd
// rows; the MLP's head; two classes, where the label often dominates: a plain float p - 1 misses
// rtol 1e-5 on about one row in five there (791 of 4096 in a host simulation).
const Case kAwkwardShapes[] = {{1, 1},      {1, 3},   {7, 1000}, {3, 4097}, {2, 32000},
                               {65536, 17}, {33, 10}, {128, 10}, {4096, 2}};

// unfused (1 config), fused_warp_row (6), fused_block_row (5) and at least one register config
// support every shape above on any device; fused_smem_row (5) every one whose row fits its
// shared memory.
constexpr int kConfigsEveryShapeHas = 1 + 6 + 5 + 1;

Problem xent_problem(DType dtype, const Case& c) {
  return Problem{"softmax_xent", dtype, Shape({{"rows", c.rows}, {"classes", c.classes}})};
}

class SoftmaxXentVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(SoftmaxXentVariants, EveryConfigMatchesReferenceAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const Case& c : kAwkwardShapes) {
    const Problem problem = xent_problem(GetParam(), c);
    SCOPED_TRACE("input seed " + std::to_string(seed));
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), kConfigsEveryShapeHas)
        << problem.key();
  }
}

// Logits far from zero: exp(x) overflows float without the max subtraction.
TEST_P(SoftmaxXentVariants, StableForLargeLogits) {
  auto shift = [](std::vector<TensorSpec>& specs) {
    specs[0].low = 90;
    specs[0].high = 110;
  };
  const Problem problem = xent_problem(GetParam(), {9, 1031});
  EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, std::random_device{}(), shift),
            kConfigsEveryShapeHas);
}

// Labels below 0 and at or past `classes` are clamped into range, as the reference does; a
// kernel that indexed with them would miss the reference (or fault).
TEST_P(SoftmaxXentVariants, OutOfRangeLabelsAreClamped) {
  for (const Case c : {Case{40, 37}, Case{5, 300}}) {
    auto stray_labels = [&c](std::vector<TensorSpec>& specs) {
      specs[1].low = -5;
      specs[1].high = static_cast<double>(c.classes + 5);
    };
    const Problem problem = xent_problem(GetParam(), c);
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, std::random_device{}(), stray_labels),
              kConfigsEveryShapeHas)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SoftmaxXentVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The bytes of every output after one launch whose workspace was filled with `fill` first.
std::vector<std::vector<std::byte>> outputs_after_launch(const Variant& v, const Config& config, ProblemData& data,
                                                         Measurer& measurer, int fill) {
  const Problem& problem = data.problem();
  const std::size_t workspace_bytes = v.workspace_bytes ? v.workspace_bytes(problem, config) : 0;
  DeviceBuffer workspace(workspace_bytes);
  if (workspace_bytes) SHAPETUNE_CUDA_CHECK(cudaMemset(workspace.get(), fill, workspace_bytes));
  std::vector<void*> pointers = data.pointers(0);
  const LaunchArgs args{problem,         config,          pointers,      measurer.stream(), measurer.libraries(),
                        workspace.get(), workspace_bytes, data.scalars()};
  data.prepare(0, measurer.stream());
  const LaunchStatus status = v.launch(args);
  EXPECT_TRUE(status.ok) << v.name << ": " << status.message;
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer.stream()));
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 2; i < data.specs().size(); ++i) {  // loss, dlogits
    out.emplace_back(static_cast<std::size_t>(data.specs()[i].bytes()));
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(out.back().data(), pointers[i], out.back().size(), cudaMemcpyDeviceToHost));
  }
  return out;
}

// The mean comes from a fixed-order reduction, never from atomics: the same bits on every run,
// whatever the workspace held before (zeros, or NaN bytes from a previous user).
TEST(SoftmaxXentEngine, EveryVariantIsDeterministicAndIgnoresStaleWorkspace) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const Primitive& primitive = *catalogue().find_primitive("softmax_xent");
  for (const Case c : {Case{4099, 1000}, Case{128, 10}}) {
    const Problem problem = xent_problem(DType::f32, c);
    ProblemData data(primitive, problem, 23);
    for (const Variant* v : catalogue().variants("softmax_xent")) {
      if (!v->supports(problem, v->default_config, device.limits).ok) continue;
      const auto zeroed = outputs_after_launch(*v, v->default_config, data, measurer, 0);
      EXPECT_EQ(data.check(0, primitive.tolerance(DType::f32), measurer.stream()).mismatches, 0)
          << problem.key() << " " << v->name;
      const auto poisoned = outputs_after_launch(*v, v->default_config, data, measurer, 0xFF);
      EXPECT_TRUE(zeroed == poisoned) << problem.key() << " " << v->name << ": outputs differ between runs";
    }
  }
}

// The default config where it supports the problem, else the first one that does.
std::optional<Config> first_supported_config(const Variant& v, const Problem& problem, const DeviceLimits& limits) {
  if (v.supports(problem, v.default_config, limits).ok) return v.default_config;
  for (const Config& config : v.params.enumerate())
    if (v.supports(problem, config, limits).ok) return config;
  return std::nullopt;
}

// Through the measurement engine, as a sweep runs it: the workspace comes from the engine, and
// the outputs of the timed launches (graph batches for the small problem) are checked again.
TEST(SoftmaxXentEngine, DefaultConfigsMeasureAccurately) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  MeasureOptions options;
  options.stop.time_cap_s = 0.05;
  Measurer measurer(device, options);
  const Primitive& primitive = *catalogue().find_primitive("softmax_xent");
  for (const Case c : {Case{128, 10}, Case{256, 32000}}) {
    const Problem problem = xent_problem(DType::bf16, c);
    ProblemData data(primitive, problem, 5);
    for (const Variant* v : catalogue().variants("softmax_xent")) {
      const auto config = first_supported_config(*v, problem, device.limits);
      if (!config) continue;
      const CandidateOutcome outcome = measurer.measure(*v, *config, data, primitive.tolerance(DType::bf16));
      if (outcome.status == CandidateStatus::unsupported) continue;  // refused at launch (registers)
      EXPECT_EQ(outcome.status, CandidateStatus::ok) << problem.key() << " " << v->name << ": " << outcome.reason;
      EXPECT_TRUE(outcome.timing.has_value()) << problem.key() << " " << v->name;
    }
  }
}

}  // namespace
}  // namespace shapetune
