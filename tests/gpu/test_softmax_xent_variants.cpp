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
// rtol 1e-5 on about one row in five there (791 of 4096 in a host simulation). Widths just
// under and over a warp and a pack multiple (31, 33, 127, 1025); one-row problems of every
// width class, where the mean kernel averages a single row loss.
const Case kAwkwardShapes[] = {{1, 1},     {1, 3},    {1, 31},     {5, 33},  {3, 127},  {7, 1000}, {1, 1025},
                               {3, 4097},  {1, 32000}, {2, 32000}, {65536, 17}, {33, 10}, {128, 10}, {4096, 2}};

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

// The cluster variant's configs alone at the widths it takes (the loop above counts all
// variants together): several rows, one row, odd widths, so that slices end mid-pack and the
// label falls in any block of a cluster. From 4097 classes on, at least three configs of every
// dtype fit (narrower rows are refused: a block of the cluster would hold nothing).
TEST_P(SoftmaxXentVariants, ClusterRowEveryConfigAtWideShapes) {
  if (device_.limits.compute_capability < 90) GTEST_SKIP() << "thread-block clusters need sm_90";
  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_cluster_row");
  const Primitive& primitive = *catalogue().find_primitive("softmax_xent");
  std::uint64_t seed = std::random_device{}();
  for (const Case c : {Case{1, 8191}, Case{19, 4103}, Case{3, 4097}, Case{1, 32000}, Case{37, 32000}, Case{5, 32003}}) {
    const Problem problem = xent_problem(GetParam(), c);
    SCOPED_TRACE("input seed " + std::to_string(seed));
    ProblemData data(primitive, problem, seed++);
    int verified = 0;
    for (const Config& config : v.params.enumerate()) {
      if (!v.supports(problem, config, device_.limits).ok) continue;
      const std::size_t workspace_bytes = v.workspace_bytes(problem, config);
      DeviceBuffer workspace(workspace_bytes);
      SHAPETUNE_CUDA_CHECK(cudaMemset(workspace.get(), 0xFF, workspace_bytes));  // stale bytes
      std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs args{problem,         config,          pointers,      measurer_->stream(), measurer_->libraries(),
                            workspace.get(), workspace_bytes, data.scalars()};
      data.prepare(0, measurer_->stream());
      const LaunchStatus status = v.launch(args);
      if (!status.ok && status.unsupported) continue;  // registers, or a cluster the device cannot place
      ASSERT_TRUE(status.ok) << problem.key() << " " << config.key() << ": " << status.message;
      const AccuracyReport report = data.check(0, tolerance_for(primitive, problem), measurer_->stream());
      EXPECT_EQ(report.mismatches, 0) << problem.key() << " " << config.key() << ": " << report.first_mismatch;
      ++verified;
    }
    EXPECT_GE(verified, 3) << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SoftmaxXentVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

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
      const auto zeroed = test_support::outputs_after_launch(*v, v->default_config, data, measurer, 0);
      EXPECT_EQ(data.check(0, primitive.tolerance(DType::f32), measurer.stream()).mismatches, 0)
          << problem.key() << " " << v->name;
      const auto poisoned = test_support::outputs_after_launch(*v, v->default_config, data, measurer, 0xFF);
      EXPECT_TRUE(zeroed == poisoned) << problem.key() << " " << v->name << ": outputs differ between runs";
    }
  }
}

// The fused variants leave their row losses in the workspace for a second kernel (on sm_90 a
// programmatic dependent launch) that averages them: launches back to back on one workspace
// (stale bytes before the first) and replays of one captured graph must all give the reference's
// values, bit for bit the same. A mean that read the row losses before they were all written
// would read the poison (NaN) or the last launch's values.
TEST(SoftmaxXentEngine, RepeatedLaunchesAndGraphReplaysGiveTheSameBits) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const Primitive& primitive = *catalogue().find_primitive("softmax_xent");
  const cudaStream_t stream = measurer.stream();
  for (const auto& [dtype, c] : {std::pair{DType::f32, Case{4099, 1000}}, std::pair{DType::f32, Case{130, 10}},
                                 std::pair{DType::bf16, Case{3, 32000}}, std::pair{DType::f32, Case{1, 4097}}}) {
    const Problem problem = xent_problem(dtype, c);
    ProblemData data(primitive, problem, 41);
    const Tolerance tol = primitive.tolerance(dtype);
    for (const Variant* v : catalogue().variants("softmax_xent")) {
      for (const Config& config : v->params.enumerate()) {
        if (!v->supports(problem, config, device.limits).ok) continue;
        const std::string name = problem.key() + " " + v->name + "{" + config.key() + "}";
        const std::size_t workspace_bytes = v->workspace_bytes ? v->workspace_bytes(problem, config) : 0;
        DeviceBuffer workspace(workspace_bytes);
        if (workspace_bytes) SHAPETUNE_CUDA_CHECK(cudaMemset(workspace.get(), 0xFF, workspace_bytes));
        std::vector<void*> pointers = data.pointers(0);
        const LaunchArgs args{problem,         config,          pointers,      stream, measurer.libraries(),
                              workspace.get(), workspace_bytes, data.scalars()};
        auto outputs = [&] {
          std::vector<std::vector<std::byte>> out;
          for (std::size_t i = 2; i < data.specs().size(); ++i) {  // loss, dlogits
            out.emplace_back(static_cast<std::size_t>(data.specs()[i].bytes()));
            SHAPETUNE_CUDA_CHECK(cudaMemcpy(out.back().data(), pointers[i], out.back().size(), cudaMemcpyDeviceToHost));
          }
          return out;
        };
        data.prepare(0, stream);
        const LaunchStatus first = v->launch(args);
        if (!first.ok && first.unsupported) continue;
        ASSERT_TRUE(first.ok) << name << ": " << first.message;
        ASSERT_EQ(data.check(0, tol, stream).mismatches, 0) << name;
        const auto expected = outputs();
        for (int repeat = 0; repeat < 3; ++repeat) {
          data.prepare(0, stream);
          // Poisoned row losses before every launch: a mean that read them early would be NaN.
          if (workspace_bytes) SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(workspace.get(), 0xFF, workspace_bytes, stream));
          ASSERT_TRUE(v->launch(args).ok) << name;
          EXPECT_EQ(data.check(0, tol, stream).mismatches, 0) << name << ", launch " << repeat + 2;
          EXPECT_TRUE(outputs() == expected) << name << ": launch " << repeat + 2 << " differs from the first";
        }
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        SHAPETUNE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const LaunchStatus captured = v->launch(args);
        SHAPETUNE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        ASSERT_TRUE(captured.ok) << name << ": " << captured.message;
        SHAPETUNE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int replay = 0; replay < 3; ++replay) {
          data.prepare(0, stream);
          SHAPETUNE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
          EXPECT_EQ(data.check(0, tol, stream).mismatches, 0) << name << ", replay " << replay + 1;
          EXPECT_TRUE(outputs() == expected) << name << ": replay " << replay + 1 << " differs from the first launch";
        }
        SHAPETUNE_CUDA_CHECK(cudaGraphExecDestroy(exec));
        SHAPETUNE_CUDA_CHECK(cudaGraphDestroy(graph));
      }
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
