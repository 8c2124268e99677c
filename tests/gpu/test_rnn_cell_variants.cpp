// The recurrent cells' variants at awkward shapes, every dtype, against the float64 references on
// fresh inputs with poisoned outputs; and the stepwise_graph rungs replayed from their cache and
// issued inside an outer capture (the harness's graph_batch timing), still matching.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "baselines/library_handles.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "support/test_support.hpp"
#include "support/verify_configs.hpp"
#include "variants/rnn_graph.hpp"

namespace shapetune {
namespace {

class RnnCellVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

// One unit; one row of 100 units; H not a multiple of 4 (3, 17) nor of a 256-thread block's rows;
// a last block that is almost empty (2 x 1023 = 8 x 256 - 2); a layer's shape.
TEST_P(RnnCellVariants, EveryCellAtAwkwardShapes) {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {1, 100}, {3, 100}, {7, 3}, {5, 17}, {2, 1023}, {64, 256}};
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm_cell.forward", "gru_cell.forward", "lstm_cell.backward", "gru_cell.backward"})
    for (const auto& [N, H] : shapes) {
      const Problem problem{primitive, GetParam(), Shape({{"N", N}, {"H", H}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), 1) << problem.key();
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RnnCellVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The layers' stepwise_graph rungs, in the layers' dtypes (tf32 too, which the cells have not:
// they take no products); and the backward's persistent_stepwise with its step product in slices
// (chain_splits), each step's partial sums added up by the next step's cell kernel, and with its
// products over all steps split into TF32 parts (products 1).
class RnnStepwiseGraph : public RnnCellVariants {};

// Three launches with the same pointers: the first runs the launches and captures them, the next
// two replay the cached graph (each on freshly poisoned outputs); then one launch captured inside
// an outer graph, which must not touch the cache and must issue the launches into the outer capture.
TEST_P(RnnStepwiseGraph, ReplaysAndNestsInAnOuterCapture) {
  std::uint64_t seed = std::random_device{}();
  struct Rung {
    const char* primitive;
    const char* variant;
    Config config;
  };
  const Config sliced({{"forward", 2}, {"chain_splits", 4}});
  std::vector<Rung> rungs = {{"lstm.forward", "stepwise_graph", {}},
                             {"gru.forward", "stepwise_graph", {}},
                             {"lstm.backward", "stepwise_graph", {}},
                             {"gru.backward", "stepwise_graph", {}},
                             {"lstm.backward", "persistent_stepwise", sliced},
                             {"gru.backward", "persistent_stepwise", sliced}};
  // Split TF32 products (their split kernels and three cuBLAS products each) captured too; tf32
  // problems refuse them.
  const Config split({{"forward", 2}, {"chain_splits", 4}, {"products", 1}});
  if (GetParam() != DType::tf32)
    for (const char* primitive : {"lstm.backward", "gru.backward"})
      rungs.push_back({primitive, "persistent_stepwise", split});
  for (const auto& [primitive, variant, config] : rungs) {
    const Problem problem{primitive, GetParam(), Shape({{"T", 5}, {"N", 2}, {"D", 33}, {"H", 100}})};
    const std::string what = problem.key() + " " + variant + "{" + config.key() + "}";
    const Primitive& p = *catalogue().find_primitive(primitive);
    const Variant& v = *catalogue().find_variant(primitive, variant);
    ProblemData data(p, problem, seed++);
    const Tolerance tol = tolerance_for(p, problem);
    const std::size_t workspace_bytes = v.workspace_bytes(problem, config);
    DeviceBuffer workspace(workspace_bytes);
    const std::vector<void*> pointers = data.pointers(0);
    cudaStream_t stream = measurer_->stream();
    LibraryHandles& libraries = measurer_->libraries();
    const LaunchArgs args{problem, config, pointers, stream, libraries, workspace.get(), workspace_bytes,
                          data.scalars()};
    auto& cache = libraries.cache<StepwiseGraphCache>("rnn.stepwise_graph");
    const std::size_t before = cache.size();
    for (int round = 0; round < 3; ++round) {
      data.prepare(0, stream);
      const LaunchStatus s = v.launch(args);
      ASSERT_TRUE(s.ok) << what << ": " << s.message;
      const AccuracyReport report = data.check(0, tol, stream);
      EXPECT_EQ(report.mismatches, 0) << what << " round " << round << ": " << report.first_mismatch;
    }
    EXPECT_EQ(cache.size(), std::min(before + 1, StepwiseGraphCache::kCapacity)) << what;

    data.prepare(0, stream);
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
    SHAPETUNE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const LaunchStatus inner = v.launch(args);
    cudaGraph_t graph = nullptr;
    SHAPETUNE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(inner.ok) << what << ": " << inner.message;
    cudaGraphExec_t exec = nullptr;
    SHAPETUNE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    SHAPETUNE_CUDA_CHECK(cudaGraphDestroy(graph));
    SHAPETUNE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    const AccuracyReport report = data.check(0, tol, stream);
    SHAPETUNE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    EXPECT_EQ(report.mismatches, 0) << what << " in an outer capture: " << report.first_mismatch;
    EXPECT_EQ(cache.size(), std::min(before + 1, StepwiseGraphCache::kCapacity)) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RnnStepwiseGraph, ::testing::Values(DType::f32, DType::tf32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
