// Every QKV projection variant and config against the float64 reference on fresh inputs with
// poisoned outputs, at awkward shapes: one row, head dims of 8 and 80, rows no tile divides,
// a D that is not a multiple of 16, and a problem large enough to be checked on sampled rows;
// and the Hopper variant's every config.
#include <gtest/gtest.h>

#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t B, S, H, hd;
};

// hd 5: the library variants' head split takes its one-element path (no 4-wide columns).
const Case kShapes[] = {{1, 1, 1, 8},   {2, 17, 3, 32}, {3, 5, 4, 8},      {1, 130, 2, 80},
                        {2, 64, 4, 64}, {1, 33, 3, 12}, {1, 2500, 16, 64}, {2, 7, 3, 5}};

class QkvProjectionVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(QkvProjectionVariants, EveryConfigAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  // split and packed everywhere; packed_head_split's configs from sm_80 on.
  const int at_least = device_.limits.compute_capability >= 80 ? 3 : 2;
  for (const Case& c : kShapes) {
    const Problem problem{"qkv_projection", GetParam(), Shape({{"B", c.B}, {"S", c.S}, {"H", c.H}, {"hd", c.hd}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), at_least) << problem.key();
  }
}

// wgmma_head_split (sm_90; f16, bf16, and tf32 through TF32 wgmma): every tile, stage count and
// persistence, at rows no tile divides, at one row, at hd 8 (one 16-byte chunk a head in 16
// bits), and at 40000 rows (939 tiles of 128 x 128: persistent blocks loop over several, the
// head split at each).
TEST_P(QkvProjectionVariants, WgmmaHeadSplitEveryConfig) {
  if (device_.limits.compute_capability != 90) GTEST_SKIP() << "wgmma is sm_90a code";
  std::uint64_t seed = std::random_device{}();
  const Variant& v = *catalogue().find_variant("qkv_projection", "wgmma_head_split");
  for (const Case& c :
       {Case{2, 17, 3, 32}, Case{1, 1, 1, 8}, Case{3, 130, 4, 8}, Case{1, 300, 2, 128}, Case{40, 1000, 2, 64}}) {
    const Problem problem{"qkv_projection", GetParam(), Shape({{"B", c.B}, {"S", c.S}, {"H", c.H}, {"hd", c.hd}})};
    // Every config the variant accepts must run and match: those past the opt-in shared memory
    // (10 of 12 a block a tile, 6 of 12 persistent fit) are refused before launch, nothing else is.
    int accepted = 0;
    for (const Config& config : v.params.enumerate()) accepted += v.supports(problem, config, device_.limits).ok;
    EXPECT_GE(accepted, 16) << problem.key();
    EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "wgmma_head_split"),
              accepted)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QkvProjectionVariants, ::testing::Values(DType::f16, DType::bf16, DType::tf32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
