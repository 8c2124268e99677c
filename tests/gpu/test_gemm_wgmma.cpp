// The Hopper wgmma GEMM variant (f16 and bf16 in every layout, tf32 in nt; sm_90 only): every tile
// and stage count in every layout the dtype is read in, at shapes that leave partial tiles in
// every dimension (one row, N = 8, K short of a whole stage, K below one stage), with every
// epilogue and beta != 0, verified element by element against the float64 reference on fresh
// inputs with poisoned outputs; beta == 0 never reading C; and the refusals: leading dimensions
// TMA cannot address and tf32 outside nt (supports() says why), operands off a 16-byte boundary,
// and any device other than sm_90.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <limits>
#include <random>

#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/measure.hpp"
#include "harness/problem_data.hpp"
#include "kernels/gemm/wgmma.cuh"
#include "support/test_support.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

namespace kwg = kernels::gemm_wgmma;

struct Case {
  std::int64_t m, n, k;
};

// Partial tiles everywhere; M = 1 and N = 8 (one n8 piece of the smallest tile); K = 8 (one
// eighth of a stage, the rest zero-filled by TMA), K = 72, 264, 520 (a stage and a bit); whole
// tiles (64^3). Shapes with M not a multiple of 8 are refused in tn (A is [K, M]) and checked
// as refusals there. N = 44 (nt only: B's leading dimension is K there) gives a C whose rows are
// not whole 16-byte chunks: the epilogue's element-by-element store path; in tf32 (stages of 32 K)
// 33 x 42 x 36 does (K a stage and 4; 16-bit refuses its K).
const Case kEdgeShapes[] = {{64, 64, 64},    {8, 8, 8},     {1, 8, 8},     {17, 40, 72},   {127, 136, 264},
                            {300, 264, 520}, {136, 8, 200}, {8, 520, 136}, {33, 44, 72},   {33, 42, 36}};
const Case kEpilogueShapes[] = {{24, 40, 72}, {136, 264, 200}, {1, 8, 8}, {127, 136, 264}, {33, 44, 72}};
const Case kLargeSquare = {1024, 1024, 1024};
const std::vector<double> kAlphaBeta = {0.75, -0.5};

std::size_t element_bytes(DType dtype) { return dtype == DType::tf32 ? 4 : 2; }

// The op in every layout wgmma reads the dtype in: all three in 16 bits, nt alone in tf32.
std::vector<std::string> primitives_of(const char* op, DType dtype) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kGemmLayouts.size(); ++i)
    if (kwg::reads_layout(static_cast<kernels::gemm::Layout>(i), element_bytes(dtype)))
      out.push_back(std::string(op) + "." + std::string(kGemmLayouts[i]));
  return out;
}

Problem gemm_problem(const std::string& primitive, DType dtype, const Case& c) {
  return {primitive, dtype, Shape({{"m", c.m}, {"n", c.n}, {"k", c.k}})};
}

bool addressable(const std::string& primitive, DType dtype, const Case& c) {
  return kwg::tma_addressable(parse_gemm_primitive(primitive)->layout, c.m, c.n, c.k, element_bytes(dtype));
}

class GemmWgmma : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    if (device_.limits.compute_capability != 90) GTEST_SKIP() << "wgmma is sm_90a code: it needs compute capability 9.0";
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }

  // Every config that supports the problem on this device (on an H200 16 of 24: see the CPU test
  // of supports()), each launched on poisoned outputs and checked against
  // the reference. A refusal at launch is a failure: the kernel refuses nothing supports() takes.
  // Returns how many configs were verified.
  int verify(const std::string& primitive_name, const Case& c, std::uint64_t seed,
             const std::function<void(std::vector<TensorSpec>&)>& adjust = {}, std::vector<double> scalars = {},
             bool persistent_only = false) {
    const Problem problem = gemm_problem(primitive_name, GetParam(), c);
    const Primitive& primitive = *catalogue().find_primitive(primitive_name);
    const Variant& v = *catalogue().find_variant(primitive_name, "wgmma");
    ProblemData data(primitive, problem, seed, adjust, std::move(scalars));
    const Tolerance tol = tolerance_for(primitive, problem);
    int verified = 0;
    for (const Config& config : v.params.enumerate()) {
      if (!v.supports(problem, config, device_.limits).ok || (persistent_only && config.at("persistent") == 0)) continue;
      std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs args{problem, config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                            data.scalars()};
      data.prepare(0, measurer_->stream());
      const LaunchStatus status = v.launch(args);
      const std::string name = problem.key() + " wgmma{" + config.key() + "}";
      EXPECT_TRUE(status.ok) << name << ": " << status.message;
      if (!status.ok) continue;
      const AccuracyReport report = data.check(0, tol, measurer_->stream());
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch;
      ++verified;
    }
    return verified;
  }

  // Configs whose shared memory fits this device; 0 where TMA cannot address the operands.
  int configs_that_fit(const std::string& primitive_name, const Case& c) const {
    const Problem problem = gemm_problem(primitive_name, GetParam(), c);
    const Variant& v = *catalogue().find_variant(primitive_name, "wgmma");
    int count = 0;
    for (const Config& config : v.params.enumerate()) count += v.supports(problem, config, device_.limits).ok;
    return count;
  }

  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(GemmWgmma, EveryConfigAndLayoutAtEdgeShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : primitives_of("gemm", GetParam())) {
    for (const Case& c : kEdgeShapes) {
      const int fit = configs_that_fit(primitive, c);
      EXPECT_EQ(fit > 0, addressable(primitive, GetParam(), c)) << primitive << " " << c.m << "x" << c.n << "x" << c.k;
      EXPECT_EQ(verify(primitive, c, seed++), fit) << primitive << " " << c.m << "x" << c.n << "x" << c.k;
    }
  }
}

// alpha != 1 and beta != 0: C is read back and scaled, and with it every epilogue: the bias per
// column, then ReLU or GELU.
TEST_P(GemmWgmma, EveryEpilogueWithAlphaAndBeta) {
  std::uint64_t seed = std::random_device{}();
  for (const char* op : {"gemm", "gemm_bias", "gemm_bias_relu", "gemm_bias_gelu"})
    for (const std::string& primitive : primitives_of(op, GetParam()))
      for (const Case& c : kEpilogueShapes) EXPECT_EQ(verify(primitive, c, seed++, {}, kAlphaBeta), configs_that_fit(primitive, c));
}

// The epilogues without beta (the fast path: C only written).
TEST_P(GemmWgmma, EpiloguesWithoutBeta) {
  std::uint64_t seed = std::random_device{}();
  for (const char* op : {"gemm_bias", "gemm_bias_relu", "gemm_bias_gelu"})
    for (const std::string& primitive : primitives_of(op, GetParam()))
      for (const Case& c : {Case{1, 8, 8}, Case{136, 264, 200}}) verify(primitive, c, seed++);
}

// beta == 0 means C is not read (BLAS): C starts as NaN, and NaN * 0 would show in every output.
TEST_P(GemmWgmma, BetaZeroNeverReadsC) {
  const auto nan_c = [](std::vector<TensorSpec>& specs) {
    specs.back().low = specs.back().high = std::numeric_limits<double>::quiet_NaN();
  };
  std::uint64_t seed = std::random_device{}();
  const bool nt_only = GetParam() == DType::tf32;
  for (const std::string& primitive : {std::string(nt_only ? "gemm.nt" : "gemm.nn"),
                                       std::string(nt_only ? "gemm_bias_gelu.nt" : "gemm_bias_gelu.tn")})
    for (const Case& c : {Case{24, 40, 72}, Case{136, 264, 200}})
      EXPECT_GT(verify(primitive, c, seed++, nan_c, {1.0, 0.0}), 0) << primitive;
}

// Many K steps around the mbarrier ring (16 of them: every slot reused several times, both
// phase parities), where rounding error has grown.
TEST_P(GemmWgmma, EveryConfigAndLayoutAt1024Cubed) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : primitives_of("gemm", GetParam())) {
    const int fit = configs_that_fit(primitive, kLargeSquare);
    EXPECT_GE(fit, 8) << primitive;
    EXPECT_EQ(verify(primitive, kLargeSquare, seed++), fit) << primitive;
  }
}

// Persistent blocks loop over tiles: at 40008 x 136 (626 tiles of 128 x 128, about 5 a block on
// 132 SMs) with 9 K steps a tile, the ring wraps inside a tile and a block's next tile starts at
// another slot and phase each time; the last tile is partial in M and every tile in N. Every
// persistent config that fits (6 on an H100 or H200) in every layout, with alpha and beta, plain
// and with the bias and GELU epilogue.
TEST_P(GemmWgmma, PersistentBlocksLoopOverManyTiles) {
  std::uint64_t seed = std::random_device{}();
  for (const char* op : {"gemm", "gemm_bias_gelu"})
    for (const std::string& primitive : primitives_of(op, GetParam()))
      EXPECT_EQ(verify(primitive, Case{40008, 136, 520}, seed++, {}, kAlphaBeta, true), 6) << primitive;
}

// TF32 products take their fp32 operands rounded to nearest, as cuBLAS's TF32 and mma_sync_tf32
// do, not truncated, as wgmma reads them: every element of A is 1 + 7 2^-13 (between the TF32
// neighbours 1 and 1 + 2^-10, nearer the upper one) and every element of B is 1, so each output
// is k (1 + 2^-10) exactly when rounded (the sum is exact in fp32) and k when truncated. Every
// config, and K of several stages (the rounding runs once a stage) with partial tiles.
TEST_P(GemmWgmma, Tf32RoundsItsOperandsToNearest) {
  if (GetParam() != DType::tf32) GTEST_SKIP() << "16-bit operands reach the tensor cores exactly as stored";
  const Case c{130, 136, 200};
  const Problem problem = gemm_problem("gemm.nt", DType::tf32, c);
  const Primitive& primitive = *catalogue().find_primitive(problem.primitive);
  const Variant& v = *catalogue().find_variant(problem.primitive, "wgmma");
  ProblemData data(primitive, problem, 5, [](std::vector<TensorSpec>& specs) {
    specs[0].low = specs[0].high = 1 + 7 * 0x1p-13;
    specs[1].low = specs[1].high = 1;
  });
  const float expected = static_cast<float>(c.k * (1 + 0x1p-10));
  int configs = 0;
  for (const Config& config : v.params.enumerate()) {
    if (!v.supports(problem, config, device_.limits).ok) continue;
    std::vector<void*> pointers = data.pointers(0);
    data.prepare(0, measurer_->stream());
    const LaunchArgs args{problem, config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                          data.scalars()};
    ASSERT_TRUE(v.launch(args).ok) << config.key();
    std::vector<float> out(static_cast<std::size_t>(c.m * c.n));
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(out.data(), pointers.back(), out.size() * sizeof(float),
                                         cudaMemcpyDeviceToHost, measurer_->stream()));
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer_->stream()));
    std::size_t wrong = 0;
    for (const float o : out) wrong += o != expected;
    EXPECT_EQ(wrong, 0u) << "wgmma{" << config.key() << "}: out[0] = " << out[0] << ", expected " << expected
                         << " (truncated operands give " << c.k << ")";
    ++configs;
  }
  EXPECT_GT(configs, 0);
}

// A problem TMA cannot address (k = 66: not whole 16-byte rows in 16 bits or in fp32), or a tf32
// one in a layout TF32 wgmma does not read, is refused by supports() with the reason, and by the
// kernel's wrapper too if launched anyway (mma_sync and mma_sync_tf32 cover them).
TEST_P(GemmWgmma, MisalignedLeadingDimensionsAreRefusedWithTheReason) {
  const bool tf32 = GetParam() == DType::tf32;
  struct Refusal {
    std::string primitive;
    Case c;
    std::string reason;
  };
  std::vector<Refusal> refusals = {
      {tf32 ? "gemm.nt" : "gemm.nn", Case{100, 40, 66}, tf32 ? "k = 66 in nt" : "k = 66 in nn"}};
  if (tf32) refusals.push_back({"gemm.nn", Case{64, 64, 64}, "tf32 takes layout nt only"});
  for (const Refusal& r : refusals) {
    const Problem problem = gemm_problem(r.primitive, GetParam(), r.c);
    const Primitive& primitive = *catalogue().find_primitive(r.primitive);
    const Variant& v = *catalogue().find_variant(r.primitive, "wgmma");
    const Support s = v.supports(problem, v.default_config, device_.limits);
    EXPECT_FALSE(s.ok) << r.primitive;
    EXPECT_CONTAINS(s.reason, r.reason);
    ProblemData data(primitive, problem, 7);
    std::vector<void*> pointers = data.pointers(0);
    const LaunchArgs args{problem, v.default_config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                          data.scalars()};
    const LaunchStatus status = v.launch(args);
    EXPECT_FALSE(status.ok) << r.primitive;
    EXPECT_TRUE(status.unsupported) << r.primitive << ": " << status.message;
  }
}

// Operands one element past a 16-byte boundary (a caller's sub-matrix): refused at launch.
TEST_P(GemmWgmma, OperandsOffA16ByteBoundaryAreRefused) {
  const Problem problem = gemm_problem("gemm_bias.nt", GetParam(), Case{64, 64, 64});
  const Primitive& primitive = *catalogue().find_primitive(problem.primitive);
  const Variant& v = *catalogue().find_variant(problem.primitive, "wgmma");
  ProblemData data(primitive, problem, 11);
  std::vector<void*> pointers = data.pointers(0);
  DeviceBuffer shifted(static_cast<std::size_t>(data.specs()[0].bytes()) + 16);
  pointers[0] = static_cast<unsigned char*>(shifted.get()) + 2;
  const LaunchArgs args{problem, v.default_config, pointers, measurer_->stream(), measurer_->libraries(), nullptr, 0,
                        data.scalars()};
  const LaunchStatus status = v.launch(args);
  EXPECT_FALSE(status.ok);
  EXPECT_TRUE(status.unsupported);
  EXPECT_CONTAINS(status.message, "16-byte aligned");
}

INSTANTIATE_TEST_SUITE_P(WgmmaDtypes, GemmWgmma, ::testing::Values(DType::f16, DType::bf16, DType::tf32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// On any other device (a T4, an A100) the launch is refused cleanly, whatever supports() was
// told: the wrapper checks the current device.
TEST(GemmWgmmaOffHopper, LaunchIsRefusedOnOtherDevices) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  if (device.limits.compute_capability == 90) GTEST_SKIP() << "this is an sm_90 device: the variant runs here";
  Measurer measurer(device, MeasureOptions{});
  const Problem problem = gemm_problem("gemm.nn", DType::f16, Case{64, 64, 64});
  const Primitive& primitive = *catalogue().find_primitive("gemm.nn");
  const Variant& v = *catalogue().find_variant("gemm.nn", "wgmma");
  EXPECT_FALSE(v.supports(problem, v.default_config, device.limits).ok);
  ProblemData data(primitive, problem, 3);
  std::vector<void*> pointers = data.pointers(0);
  const LaunchArgs args{problem, Config({{"tile", 3}, {"stages", 3}, {"persistent", 0}}), pointers, measurer.stream(),
                        measurer.libraries(), nullptr, 0, data.scalars()};
  const LaunchStatus status = v.launch(args);
  EXPECT_FALSE(status.ok);
  EXPECT_TRUE(status.unsupported) << status.message;
}

}  // namespace
}  // namespace shapetune
