// Every GEMM variant, every config it supports, in every layout, epilogue and dtype, at shapes
// that leave partial tiles everywhere (and degenerate ones: 1 x 1 x 1, one row, one column,
// depth 1), verified element by element against the float64 reference on fresh inputs with
// poisoned outputs. Library and tensor-core variants of the same primitives run too.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {

namespace {

struct Case {
  std::int64_t m, n, k;
};

// Partial tiles in every dimension; one output; one row; one column; depth 1 (a single partial K
// step); leading dimensions that are whole 16-byte packs for some operands and not for others
// (100 x 40 x 72: every matrix packs in f32, A in tn does not in 16-bit types; 33 x 64 x 136: A
// in tn never packs); more rows than a grid's y extent holds (naive strides over them); a few
// blocks of the large tiles with edges on both sides and many whole K steps before a partial one
// (300 x 260 x 520: interior blocks take the unguarded loads of warp_tiled_broadcast, edge blocks
// and the last K step of bk = 16 the guarded ones; in warp_tiled_async interior blocks take the
// loop of unchecked copies, edge blocks whole 16-byte copies and partial, zero-filling ones);
// whole tiles over a K that ends mid-step (256 x 256 x 130: warp_tiled_async's interior blocks
// must take the checked loop).
const Case kAwkwardShapes[] = {{1, 1, 1},     {17, 33, 65},  {127, 129, 31}, {1, 129, 65},
                               {127, 1, 65},  {33, 17, 1},   {100, 40, 72},  {33, 64, 136},
                               {70000, 3, 5}, {300, 260, 520}, {256, 256, 130}};
const Case kScalarShapes[] = {{1, 1, 1}, {17, 33, 65}, {127, 129, 31}, {33, 17, 1}, {100, 40, 72}};
const Case kLargeSquare = {256, 256, 256};

// The CUDA-core ladder alone has 24 configs (naive 5, smem_tiled 4, register_blocked 4,
// double_buffered 4, warp_tiled 4, warp_tiled_broadcast 3) for every shape here, split_k more
// where K allows, warp_tiled_async 4 more in f32 on sm_80+.
constexpr int kCudaCoreConfigs = 24;

class GemmVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  void verify(const std::string& primitive, const Case& c, std::uint64_t seed,
              const std::function<void(std::vector<TensorSpec>&)>& adjust = {}, std::vector<double> scalars = {}) {
    const Problem problem{primitive, GetParam(), Shape({{"m", c.m}, {"n", c.n}, {"k", c.k}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed, adjust, std::move(scalars)),
              kCudaCoreConfigs)
        << problem.key();
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(GemmVariants, EveryConfigAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : gemm_primitive_names())
    for (const Case& c : kAwkwardShapes) verify(primitive, c, seed++);
}

// alpha != 1 and beta != 0: C is read back, scaled and added before the bias and activation.
TEST_P(GemmVariants, AlphaAndBetaAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : gemm_primitive_names())
    for (const Case& c : kScalarShapes) verify(primitive, c, seed++, {}, {0.75, -0.5});
}

// beta == 0 means C is not read (BLAS): C starts as NaN, and NaN * 0 would show in every output.
TEST_P(GemmVariants, BetaZeroNeverReadsC) {
  const auto nan_c = [](std::vector<TensorSpec>& specs) {
    specs.back().low = specs.back().high = std::numeric_limits<double>::quiet_NaN();
  };
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : gemm_primitive_names())
    for (const Case& c : {Case{17, 33, 65}, Case{100, 40, 72}}) verify(primitive, c, seed++, nan_c, {1.0, 0.0});
}

// Whole tiles, 16-byte packs everywhere and many K steps: the fast paths of every tile shape.
TEST_P(GemmVariants, EveryConfigAtALargeSquare) {
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : gemm_primitive_names()) verify(primitive, kLargeSquare, seed++);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, GemmVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The check must catch a kernel that drops a K tail: the same buffers launched as a problem one
// step shallower (k = 64 on data laid out for k = 65) miss a product per output and misread A's
// rows, both far beyond the tolerance.
TEST(GemmVariantChecks, RejectsAKernelThatSkipsTheLastProduct) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const Primitive& primitive = *catalogue().find_primitive("gemm.nn");
  const Problem problem{"gemm.nn", DType::f32, Shape({{"m", 17}, {"n", 33}, {"k", 65}})};
  const Problem shallower{"gemm.nn", DType::f32, Shape({{"m", 17}, {"n", 33}, {"k", 64}})};
  ProblemData data(primitive, problem, 11);
  const Variant& honest = *catalogue().find_variant("gemm.nn", "register_blocked");
  std::vector<void*> pointers = data.pointers(0);
  data.prepare(0, measurer.stream());
  const LaunchArgs args{shallower,          honest.default_config, pointers, measurer.stream(),
                        measurer.libraries(), nullptr,             0,        data.scalars()};
  ASSERT_TRUE(honest.launch(args).ok);
  const AccuracyReport report = data.check(0, tolerance_for(primitive, problem), measurer.stream());
  EXPECT_GT(report.mismatches, 17 * 33 / 2);
}

}  // namespace
}  // namespace shapetune
