// Every adam variant and config at awkward parameter counts and splits, verified element by
// element against the float64 reference; the kernels' explicit tensor lists (a model's own);
// and 100 steps of training against a float64 trajectory.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"
#include "harness/accuracy.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "kernels/adam.cuh"
#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

namespace ka = kernels::adam;

struct Case {
  std::int64_t n;
  std::int64_t tensors;
};

// One parameter; fewer than a 16-byte pack, whole and split into single-element tensors; tensor
// boundaries at every phase (odd sizes); a million parameters past a power of two; the MLP's count;
// more tensors than multi_tensor's small table (32) and than one launch takes (512), many of them
// a single element (no body, only an edge).
const Case kAwkwardShapes[] = {{1, 1},     {3, 1},           {3, 3},      {1025, 2},    {4097, 7},
                               {(1 << 20) + 3, 5}, {235146, 6}, {100003, 41}, {20011, 1100}};

Problem problem_of(Case c) { return Problem{"adam", DType::f32, Shape({{"n", c.n}, {"tensors", c.tensors}})}; }

// Configs whose blocks fit any kernel's registers (256 threads x 255 registers < 64 Ki): the
// others may be refused at launch on a given device and compiler.
int configs_that_always_fit() {
  int count = 0;
  for (const Variant* v : catalogue().variants("adam"))
    for (const Config& c : v->params.enumerate()) count += c.at("block_size") <= 256;
  return count;
}

class AdamVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_F(AdamVariants, EveryConfigMatchesReferenceAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const Case& c : kAwkwardShapes) {
    const Problem problem = problem_of(c);
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), configs_that_always_fit())
        << problem.key();
  }
}

// Plain Adam (no decay) and the first step, where the bias correction divides m by 0.1 and v by
// 0.001: the largest updates the scalars can make.
TEST_F(AdamVariants, PlainAdamAndTheFirstStep) {
  const std::vector<double> plain_adam = {1e-3, 0.9, 0.999, 1e-8, 0, 10};
  const std::vector<double> first_step = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1};
  for (const auto& scalars : {plain_adam, first_step}) {
    for (const Case& c : {Case{4097, 7}, Case{1025, 2}}) {
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem_of(c), 17, {}, scalars),
                configs_that_always_fit())
          << problem_of(c).key() << " step " << scalars[5] << " weight_decay " << scalars[4];
    }
  }
}

ka::Hyperparameters hyperparameters_of(const std::vector<double>& s) { return {s[0], s[1], s[2], s[3], s[4], s[5]}; }

// What a model runner does with a tuned (variant, config): call the kernel entry point with its
// own tensor list.
cudaError_t launch_with_sizes(const Variant& v, const Config& c, const ka::Buffers& buffers,
                              const std::vector<std::int64_t>& sizes, const ka::Hyperparameters& h,
                              cudaStream_t stream) {
  const int block_size = static_cast<int>(c.at("block_size"));
  if (v.name == "scalar") return ka::scalar(buffers, sizes, h, block_size, stream);
  if (v.name == "vec4") return ka::vec4(buffers, sizes, h, block_size, static_cast<int>(c.at("packs_per_thread")), stream);
  if (v.name == "multi_tensor")
    return ka::multi_tensor(buffers, sizes, h, block_size, static_cast<int>(c.at("packs_per_thread")), stream);
  ADD_FAILURE() << "no kernel entry point for variant " << v.name;
  return cudaErrorInvalidValue;
}

ka::Buffers buffers_of(const std::vector<void*>& pointers, std::int64_t offset = 0) {
  return {static_cast<float*>(pointers[0]) + offset, static_cast<const float*>(pointers[1]) + offset,
          static_cast<float*>(pointers[2]) + offset, static_cast<float*>(pointers[3]) + offset};
}

// The MLP 784 -> 256 -> 128 -> 10 as a model lists it (weights and biases), which the catalogue's
// rule does not reproduce: the kernels take the list they are given. The update is elementwise,
// so the catalogue problem's reference is the expected result for any split of its n.
TEST_F(AdamVariants, ExplicitTensorListOfTheMlp) {
  const std::vector<std::int64_t> mlp = {200704, 256, 32768, 128, 1280, 10};
  const Problem problem = problem_of({235146, 6});
  ASSERT_NE(ka::tensor_sizes(235146, 6), mlp);
  const Primitive& primitive = *catalogue().find_primitive("adam");
  ProblemData data(primitive, problem, std::random_device{}());
  const ka::Hyperparameters h = hyperparameters_of(data.scalars());
  int verified = 0;
  for (const Variant* v : catalogue().variants("adam")) {
    for (const Config& config : v->params.enumerate()) {
      data.prepare(0, measurer_->stream());
      const cudaError_t e = launch_with_sizes(*v, config, buffers_of(data.pointers(0)), mlp, h, measurer_->stream());
      if (e == cudaErrorLaunchOutOfResources) continue;  // this block size does not fit the kernel's registers
      const std::string name = v->name + "{" + config.key() + "}";
      ASSERT_EQ(e, cudaSuccess) << name << ": " << cudaGetErrorString(e);
      const AccuracyReport report = data.check(0, primitive.tolerance(DType::f32), measurer_->stream());
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch;
      ++verified;
    }
  }
  EXPECT_GE(verified, configs_that_always_fit());
}

// A counter-based uniform draw in [low, high), rounded to float: the same on every run and
// thread, so the host and each variant see the same gradients.
float uniform_float(std::uint64_t seed, std::int64_t i, double low, double high) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(low + static_cast<double>(z >> 11) * 0x1.0p-53 * (high - low));
}

// One (variant, config)'s training state on the device: p, m, v, one element past a 16-byte
// boundary so every tensor's head and tail differ from the aligned runs above.
struct DeviceState {
  DeviceBuffer p, m, v;
  explicit DeviceState(const std::vector<float>& initial_p)
      : p((initial_p.size() + 1) * sizeof(float)),
        m((initial_p.size() + 1) * sizeof(float)),
        v((initial_p.size() + 1) * sizeof(float)) {
    const std::size_t bytes = initial_p.size() * sizeof(float);
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(at(p), initial_p.data(), bytes, cudaMemcpyHostToDevice));
    SHAPETUNE_CUDA_CHECK(cudaMemset(at(m), 0, bytes));
    SHAPETUNE_CUDA_CHECK(cudaMemset(at(v), 0, bytes));
  }
  static float* at(const DeviceBuffer& b) { return static_cast<float*>(b.get()) + 1; }
};

AccuracyReport compare(const char* name, const DeviceBuffer& buffer, const std::vector<double>& want, Tolerance tol) {
  const auto n = static_cast<std::int64_t>(want.size());
  std::vector<float> got(want.size());
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(got.data(), DeviceState::at(buffer), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return compare_with_reference(TensorSpec{name, DType::f32, {n}, TensorRole::inout}, got.data(), want, tol);
}

// Training from a fresh optimizer (m = v = 0) for t = 1..100 with new gradients each step, every
// config of every variant against one float64 trajectory. Tolerance: each float step rounds p,
// m and v about once (the rest of the update is ~1e-3 of p), so after 100 steps a value carries
// up to 100 roundings: at worst 50 ulps = 3e-6 relative, 1e-5 leaves a factor of three. atol
// covers values that end near zero after cancelling (p drifts by up to 0.1 and m is an average
// of gradients of both signs): their error is that of the larger values they came from, ~100
// roundings of |p| ~ 0.1 (4e-7) or ten of |g| ~ 1 scaled by 0.1 (1e-7). A host emulation of
// the kernels' float operations on this trajectory used at most 14% of the tolerance (p near 0).
TEST_F(AdamVariants, HundredStepTrajectoryMatchesFloat64) {
  const Problem problem = problem_of({300007, 9});
  const std::int64_t n = 300007;
  const std::vector<std::int64_t> sizes = ka::tensor_sizes(n, 9);
  const Tolerance tol{1e-6, 1e-5};
  const std::uint64_t seed = std::random_device{}();

  std::vector<float> initial_p(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) initial_p[i] = uniform_float(seed, i, -1, 1);
  std::vector<double> p(initial_p.begin(), initial_p.end()), m(n, 0.0), v(n, 0.0), g_double(n);

  struct Run {
    const Variant* variant;
    Config config;
    DeviceState state;
    bool refused = false;
  };
  std::vector<Run> runs;
  for (const Variant* variant : catalogue().variants("adam"))
    for (const Config& config : variant->params.enumerate()) runs.push_back({variant, config, DeviceState(initial_p)});
  DeviceBuffer g_device((n + 1) * sizeof(float));
  float* g_at = DeviceState::at(g_device);
  // The initial states were written on the legacy stream; the measurer's does not wait for it.
  SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<double> scalars = default_scalars(*catalogue().find_primitive("adam"));
  for (int t = 1; t <= 100; ++t) {
    scalars[5] = t;
    const std::uint64_t step_seed = seed ^ (static_cast<std::uint64_t>(t) << 40);
    parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        g[i] = uniform_float(step_seed, i, -1, 1);
        g_double[i] = g[i];
      }
    });
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(g_at, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (Run& run : runs) {
      if (run.refused) continue;
      std::vector<void*> pointers = {DeviceState::at(run.state.p), g_at, DeviceState::at(run.state.m),
                                     DeviceState::at(run.state.v)};
      const LaunchStatus status = run.variant->launch(LaunchArgs{problem, run.config, pointers, measurer_->stream(),
                                                                 measurer_->libraries(), nullptr, 0, scalars});
      run.refused = !status.ok && status.unsupported && t == 1;  // registers do not allow this block size
      ASSERT_TRUE(status.ok || run.refused) << run.variant->name << "{" << run.config.key() << "}: " << status.message;
    }
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer_->stream()));  // g is overwritten next step
    const reference::AdamHyperparameters h{scalars[0], scalars[1], scalars[2], scalars[3], scalars[4], scalars[5]};
    reference::adam(sizes.data(), static_cast<std::int64_t>(sizes.size()), h, p.data(), g_double.data(), m.data(),
                    v.data());
  }

  int verified = 0;
  for (const Run& run : runs) {
    if (run.refused) continue;
    const std::string name = run.variant->name + "{" + run.config.key() + "}";
    for (const AccuracyReport& report :
         {compare("p", run.state.p, p, tol), compare("m", run.state.m, m, tol), compare("v", run.state.v, v, tol)})
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch << " (max rel error "
                                      << report.max_rel_error << ")";
    ++verified;
  }
  EXPECT_GE(verified, configs_that_always_fit());
}

}  // namespace
}  // namespace shapetune
