// cuDNN's LayerNorm forward baseline (graph API) against a float64 computation on random data:
// every dtype at awkward and large shapes, fresh data and epsilon through the cached plan, and a
// launch inside a stream capture. A problem cuDNN refuses is listed and the test skipped, never
// passed; f32 at a transformer's shape must not be refused.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "baselines/cudnn.hpp"
#include "baselines/library_handles.hpp"
#include "harness/accuracy.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/host_tensor.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

// cuDNN's LayerNorm engines start with Ampere (cudnn_frontend's samples skip the op before it).
constexpr int kFirstCapabilityWithLayerNorm = 80;

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1.6e-2, 1.6e-2};
    default: return {1e-6, 1e-5};
  }
}

class Stream {
 public:
  Stream() { SHAPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// One tensor: the values the device holds (after rounding to the dtype) and the device copy.
struct Tensor {
  TensorSpec spec;
  DeviceBuffer device;
  std::vector<double> values;

  explicit Tensor(TensorSpec s) : spec(std::move(s)), device(static_cast<std::size_t>(spec.bytes())) {}
  void draw(std::uint64_t seed) {
    std::vector<std::byte> image;
    draw_uniform(spec, seed, image, values);
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(device.get(), image.data(), image.size(), cudaMemcpyHostToDevice));
  }
};

// x, gamma and beta of one problem in buffers that stay put when fresh values are drawn, so the
// plan cuDNN built for the problem is reused.
class LayerNormProblem {
 public:
  LayerNormProblem(DType dtype, std::int64_t rows, std::int64_t cols)
      : dtype_(dtype),
        rows_(rows),
        cols_(cols),
        // A mean away from zero, so that the statistics are not trivially centred.
        x_({"x", dtype, {rows, cols}, TensorRole::input, -1, 2}),
        gamma_({"gamma", dtype, {cols}, TensorRole::input, -1, 1}),
        beta_({"beta", dtype, {cols}, TensorRole::input, -1, 1}),
        y_({"y", dtype, {rows, cols}, TensorRole::output}) {}

  std::string name() const {
    return std::string(dtype_name(dtype_)) + " " + std::to_string(rows_) + "x" + std::to_string(cols_);
  }

  void draw(std::uint64_t seed) {
    x_.draw(seed);
    gamma_.draw(seed ^ 0x9e3779b97f4a7c15ull);
    beta_.draw(seed ^ 0xc2b2ae3d27d4eb4full);
  }

  // Every element poisoned with NaN first: an element cuDNN does not write fails the check.
  void poison(cudaStream_t stream) {
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(y_.device.get(), 0xFF, static_cast<std::size_t>(y_.spec.bytes()), stream));
  }

  LibraryCallResult run(LibraryHandles& libraries, cudaStream_t stream, float epsilon) {
    return cudnn_layernorm_forward(libraries, stream, dtype_, rows_, cols_, x_.device.get(), gamma_.device.get(),
                                   beta_.device.get(), epsilon, y_.device.get());
  }

  AccuracyReport check(float epsilon, cudaStream_t stream) const {
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<std::byte> image(static_cast<std::size_t>(y_.spec.bytes()));
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(image.data(), y_.device.get(), image.size(), cudaMemcpyDeviceToHost));
    return compare_with_reference(y_.spec, image.data(), expected(epsilon), tolerance(dtype_));
  }

 private:
  // Two passes in double, biased variance; epsilon exactly as the float cuDNN received.
  std::vector<double> expected(float epsilon) const {
    std::vector<double> y(x_.values.size());
    for (std::int64_t r = 0; r < rows_; ++r) {
      const double* x = x_.values.data() + r * cols_;
      double sum = 0;
      for (std::int64_t c = 0; c < cols_; ++c) sum += x[c];
      const double mean = sum / static_cast<double>(cols_);
      double squares = 0;
      for (std::int64_t c = 0; c < cols_; ++c) squares += (x[c] - mean) * (x[c] - mean);
      const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(cols_) + static_cast<double>(epsilon));
      for (std::int64_t c = 0; c < cols_; ++c)
        y[static_cast<std::size_t>(r * cols_ + c)] = (x[c] - mean) * inv_std * gamma_.values[c] + beta_.values[c];
    }
    return y;
  }

  DType dtype_;
  std::int64_t rows_;
  std::int64_t cols_;
  Tensor x_;
  Tensor gamma_;
  Tensor beta_;
  Tensor y_;
};

void expect_accurate(const AccuracyReport& report, const std::string& what) {
  EXPECT_EQ(report.mismatches, 0) << what << ": " << report.mismatches << " of " << report.checked
                                  << " elements outside tolerance; first " << report.first_mismatch
                                  << "; max abs error " << report.max_abs_error;
}

class CudnnLayerNorm : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    stream_.emplace();
    libraries_.cudnn(*stream_);  // the handle exists before any capture, as in the harness
  }
  bool cudnn_has_layernorm() const { return device_.fingerprint.compute_capability >= kFirstCapabilityWithLayerNorm; }
  cudaStream_t stream() const { return *stream_; }

  DeviceInfo device_;
  std::optional<Stream> stream_;  // made once a device is known to be there
  LibraryHandles libraries_;      // after the stream: its plans go first
};

TEST_P(CudnnLayerNorm, MatchesFloat64AtEveryShapeAndThroughTheCachedPlan) {
  struct Extent {
    std::int64_t rows;
    std::int64_t cols;
  };
  // One element (variance 0: y = beta); a short odd row; odd rows of a width that is no power
  // of two; a transformer's width over 4096 tokens.
  const Extent shapes[] = {{1, 1}, {3, 31}, {7, 1000}, {4096, 1024}};
  const DType dtype = GetParam();
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));

  std::string refusals;
  for (const Extent& e : shapes) {
    LayerNormProblem problem(dtype, e.rows, e.cols);
    problem.draw(seed);
    problem.poison(stream());
    const LibraryCallResult first = problem.run(libraries_, stream(), 1e-5f);
    if (!first.ok && first.not_supported) {
      refusals += "\n  " + problem.name() + ": " + first.message;
      if (dtype == DType::f32 && e.rows == 4096 && cudnn_has_layernorm())
        ADD_FAILURE() << "cuDNN refused f32 LayerNorm at 4096x1024 on capability "
                      << device_.fingerprint.compute_capability << ": " << first.message;
      continue;
    }
    if (!first.ok) {
      ADD_FAILURE() << problem.name() << ": " << first.message;
      continue;
    }
    expect_accurate(problem.check(1e-5f, stream()), problem.name() + ", first call (builds the plan)");

    // Same buffers, so the cached plan: new data, weights and epsilon must all show in y.
    problem.draw(seed + 1);
    problem.poison(stream());
    const LibraryCallResult second = problem.run(libraries_, stream(), 0.1f);
    if (!second.ok) {
      ADD_FAILURE() << problem.name() << ", second call: " << second.message;
      continue;
    }
    expect_accurate(problem.check(0.1f, stream()), problem.name() + ", second call (cached plan, epsilon 0.1)");
  }
  if (!refusals.empty()) GTEST_SKIP() << "cuDNN refused:" << refusals;
}

// The harness times small problems as CUDA graphs: a call with a built plan must capture, and
// the replayed graph must compute with the data and epsilon of the captured call.
TEST_P(CudnnLayerNorm, CapturedCallMatchesFloat64) {
  const DType dtype = GetParam();
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  LayerNormProblem problem(dtype, 7, 1000);
  problem.draw(seed);
  problem.poison(stream());
  const LibraryCallResult built = problem.run(libraries_, stream(), 1e-5f);
  if (!built.ok && built.not_supported) GTEST_SKIP() << "cuDNN refused " << problem.name() << ": " << built.message;
  ASSERT_TRUE(built.ok) << built.message;
  expect_accurate(problem.check(1e-5f, stream()), problem.name() + ", outside the capture");

  problem.draw(seed + 1);
  problem.poison(stream());
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const LibraryCallResult captured = problem.run(libraries_, stream(), 0.1f);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream(), &graph);
  if (!captured.ok || end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    FAIL() << "inside the capture: " << (captured.ok ? "ok" : captured.message)
           << "; capture ended with: " << cudaGetErrorString(end);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ASSERT_EQ(instantiated, cudaSuccess) << cudaGetErrorString(instantiated);
  const cudaError_t launched = cudaGraphLaunch(exec, stream());
  const AccuracyReport report = problem.check(0.1f, stream());
  cudaGraphExecDestroy(exec);
  ASSERT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
  expect_accurate(report, problem.name() + ", replayed graph");
}

// Building a plan allocates, which would break a capture: the first call for a problem inside
// one must say so and leave the capture intact.
TEST_P(CudnnLayerNorm, FirstCallInsideACaptureIsAnErrorThatNamesTheCapture) {
  LayerNormProblem problem(GetParam(), 5, 77);
  problem.draw(3);
  ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const LibraryCallResult r = problem.run(libraries_, stream(), 1e-5f);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream(), &graph);
  if (graph) cudaGraphDestroy(graph);
  EXPECT_EQ(end, cudaSuccess) << "the capture was invalidated: " << cudaGetErrorString(end);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.not_supported) << r.message;
  EXPECT_NE(r.message.find("capture"), std::string::npos) << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CudnnLayerNorm, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
