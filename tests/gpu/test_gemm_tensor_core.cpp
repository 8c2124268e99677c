// The tensor-core GEMM variants (mma_sync for f16 and bf16, mma_sync_tf32 for tf32), every config
// in every layout, at shapes that leave partial tiles everywhere (and degenerate ones: 1 x 1 x 1,
// one row, one column, depth 1, depths that are not whole k-steps), with every epilogue and
// beta != 0, verified element by element against the float64 reference on fresh inputs with
// poisoned outputs; and the element-by-element load path for unaligned operands, checked
// bit for bit against the 16-byte cp.async path.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <random>

#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/measure.hpp"
#include "harness/problem_data.hpp"
#include "support/test_support.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t m, n, k;
};

// Partial tiles in every dimension; one output; one row; one column; depth 1; K = 31 (rows of A
// in nn/nt start at odd elements: the element-wise load path), K = 65 (one element past whole
// k-steps), leading dimensions that are whole 16-byte chunks for some operands and not others
// (100 x 40 x 72: all of them in 16-bit types, not A in tn; 33 x 64 x 136: A in tn never);
// whole tiles with many K steps (256^3).
const Case kAwkwardShapes[] = {{1, 1, 1},     {17, 33, 65},  {127, 129, 31}, {1, 129, 65},   {127, 1, 65},
                               {33, 17, 1},   {100, 40, 72}, {33, 64, 136},  {256, 256, 256}};
const Case kEpilogueShapes[] = {{17, 33, 65}, {127, 129, 31}, {100, 40, 72}};
const Case kLargeSquare = {1024, 1024, 1024};
const std::vector<double> kAlphaBeta = {0.75, -0.5};

const char* variant_for(DType dtype) { return dtype == DType::tf32 ? "mma_sync_tf32" : "mma_sync"; }

std::vector<std::string> primitives_of(const char* op) {
  std::vector<std::string> out;
  for (std::string_view layout : kGemmLayouts) out.push_back(std::string(op) + "." + std::string(layout));
  return out;
}

class GemmTensorCore : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    if (device_.limits.compute_capability < 80) GTEST_SKIP() << "mma.sync variants need sm_80+";
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }

  // Every config of this dtype's variant that supports the problem on this device (on an H200,
  // all of them), each launched on poisoned outputs and checked against the reference. Unlike
  // test_support::verify_every_config, a refusal at launch is a failure here: these kernels
  // refuse nothing that supports() accepts. Returns how many configs were verified.
  int verify(const std::string& primitive_name, const Case& c, std::uint64_t seed,
             const std::function<void(std::vector<TensorSpec>&)>& adjust = {}, std::vector<double> scalars = {}) {
    const Problem problem{primitive_name, GetParam(), Shape({{"m", c.m}, {"n", c.n}, {"k", c.k}})};
    const Primitive& primitive = *catalogue().find_primitive(primitive_name);
    const Variant& v = *catalogue().find_variant(primitive_name, variant_for(GetParam()));
    ProblemData data(primitive, problem, seed, adjust, std::move(scalars));
    const Tolerance tol = tolerance_for(primitive, problem);
    int verified = 0;
    for (const Config& config : v.params.enumerate()) {
      if (!v.supports(problem, config, device_.limits).ok) continue;
      std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs args{problem, config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                            data.scalars()};
      data.prepare(0, measurer_->stream());
      const LaunchStatus status = v.launch(args);
      const std::string name = problem.key() + " " + v.name + "{" + config.key() + "}";
      EXPECT_TRUE(status.ok) << name << ": " << status.message;
      if (!status.ok) continue;
      const AccuracyReport report = data.check(0, tol, measurer_->stream());
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch;
      ++verified;
    }
    return verified;
  }

  // Configs whose shared memory fits this device: every one on an H100/H200.
  std::size_t configs_that_fit(const std::string& primitive_name, const Case& c) const {
    const Problem problem{primitive_name, GetParam(), Shape({{"m", c.m}, {"n", c.n}, {"k", c.k}})};
    const Variant& v = *catalogue().find_variant(primitive_name, variant_for(GetParam()));
    std::size_t count = 0;
    for (const Config& config : v.params.enumerate()) count += v.supports(problem, config, device_.limits).ok;
    return count;
  }

  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(GemmTensorCore, EveryConfigAndLayoutAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : primitives_of("gemm"))
    for (const Case& c : kAwkwardShapes) verify(primitive, c, seed++);
}

// alpha != 1 and beta != 0: C is read back and scaled, and with it every epilogue: the bias per
// column, then ReLU or GELU.
TEST_P(GemmTensorCore, EveryEpilogueWithAlphaAndBeta) {
  std::uint64_t seed = std::random_device{}();
  for (const char* op : {"gemm", "gemm_bias", "gemm_bias_relu", "gemm_bias_gelu"})
    for (const std::string& primitive : primitives_of(op))
      for (const Case& c : kEpilogueShapes) verify(primitive, c, seed++, {}, kAlphaBeta);
}

// The epilogues without beta, at degenerate shapes (a row, a column, one output).
TEST_P(GemmTensorCore, EpiloguesAtDegenerateShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const char* op : {"gemm_bias", "gemm_bias_relu", "gemm_bias_gelu"})
    for (const std::string& primitive : primitives_of(op))
      for (const Case& c : {Case{1, 1, 1}, Case{1, 129, 65}, Case{127, 1, 65}, Case{33, 17, 1}})
        verify(primitive, c, seed++);
}

// beta == 0 means C is not read (BLAS): C starts as NaN, and NaN * 0 would show in every output.
TEST_P(GemmTensorCore, BetaZeroNeverReadsC) {
  const auto nan_c = [](std::vector<TensorSpec>& specs) {
    specs.back().low = specs.back().high = std::numeric_limits<double>::quiet_NaN();
  };
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : {std::string("gemm.nn"), std::string("gemm_bias_gelu.tn")})
    for (const Case& c : {Case{17, 33, 65}, Case{100, 40, 72}}) verify(primitive, c, seed++, nan_c, {1.0, 0.0});
}

// Many K steps through every pipeline depth and tile, where rounding error has grown.
TEST_P(GemmTensorCore, EveryConfigAndLayoutAt1024Cubed) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : primitives_of("gemm")) {
    const std::size_t fit = configs_that_fit(primitive, kLargeSquare);
    EXPECT_GE(fit, 1u) << primitive;
    EXPECT_EQ(static_cast<std::size_t>(verify(primitive, kLargeSquare, seed++)), fit) << primitive;
  }
}

// Operands whose base is not 16-byte aligned (a caller's sub-matrix) take the element-by-element
// load path even where the leading dimension would allow cp.async. Both paths put the same values
// in shared memory and run the same mma sequence, so the results must agree bit for bit; the
// aligned run is checked against the reference first.
TEST_P(GemmTensorCore, MisalignedPointersMatchTheAlignedPathBitForBit) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& name : {std::string("gemm_bias.nn"), std::string("gemm_bias.nt"), std::string("gemm_bias.tn")}) {
    const Problem problem{name, GetParam(), Shape({{"m", 100}, {"n", 40}, {"k", 72}})};
    const Primitive& primitive = *catalogue().find_primitive(name);
    const Variant& v = *catalogue().find_variant(name, variant_for(GetParam()));
    ProblemData data(primitive, problem, seed++, {}, kAlphaBeta);
    const std::vector<TensorSpec>& specs = data.specs();
    const std::size_t c_index = specs.size() - 1;
    const std::size_t element = dtype_size(specs[0].dtype);
    const std::vector<void*> aligned = data.pointers(0);
    const std::vector<Config> configs = {v.default_config, Config({{"tile", 0}, {"stages", 2}})};
    for (const Config& config : configs) {
      const std::string what = problem.key() + " " + config.key();
      data.prepare(0, measurer_->stream());
      const LaunchArgs args{problem, config, aligned, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                            data.scalars()};
      ASSERT_TRUE(v.launch(args).ok) << what;
      ASSERT_EQ(data.check(0, tolerance_for(primitive, problem), measurer_->stream()).mismatches, 0) << what;
      const std::size_t c_bytes = static_cast<std::size_t>(specs[c_index].bytes());
      std::vector<unsigned char> expected(c_bytes), got(c_bytes);
      SHAPETUNE_CUDA_CHECK(cudaMemcpy(expected.data(), aligned[c_index], c_bytes, cudaMemcpyDeviceToHost));

      // The same tensors one element past a 16-byte boundary, C restored to its initial values.
      // Everything on the measurer's stream, in order: restore C, copy, launch.
      data.prepare(0, measurer_->stream());
      std::vector<DeviceBuffer> shifted;
      std::vector<void*> pointers;
      for (std::size_t t = 0; t < specs.size(); ++t) {
        const std::size_t bytes = static_cast<std::size_t>(specs[t].bytes());
        shifted.emplace_back(bytes + 16);
        pointers.push_back(static_cast<unsigned char*>(shifted.back().get()) + element);
        SHAPETUNE_CUDA_CHECK(
            cudaMemcpyAsync(pointers.back(), aligned[t], bytes, cudaMemcpyDeviceToDevice, measurer_->stream()));
      }
      const LaunchArgs shifted_args{problem, config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                                    data.scalars()};
      ASSERT_TRUE(v.launch(shifted_args).ok) << what;
      SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer_->stream()));
      SHAPETUNE_CUDA_CHECK(cudaMemcpy(got.data(), pointers[c_index], c_bytes, cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), c_bytes), 0) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TensorCoreDtypes, GemmTensorCore, ::testing::Values(DType::f16, DType::bf16, DType::tf32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
