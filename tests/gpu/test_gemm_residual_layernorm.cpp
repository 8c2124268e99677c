// gemm_bias_residual_layernorm.nt on a GPU: every variant and config (the fused wgmma ones on
// sm_90) against the float64 reference on fresh inputs with poisoned outputs, at one row, odd
// widths, a row a tile only just spans, a narrow row of case 7's width, and 40000 rows whose
// persistent blocks loop over several tiles.
#include <gtest/gtest.h>

#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t m, n, k;
  int hopper_at_least;  // configs that must run on sm_90: every fitting wgmma config and unfused
};

// On an H100 or H200 the wgmma configs whose tiles span n and whose shared memory fits: n <= 64,
// all four tiles (16 configs); n <= 128, tiles 0-2 (10); n <= 256, tile 0 a block a tile (2).
const Case kCases[] = {{1, 8, 8, 17},    {77, 100, 64, 11}, {300, 128, 128, 11}, {257, 256, 72, 3},
                       {130, 32, 32, 17}, {40000, 128, 128, 11}};

class GemmResidualLayerNorm : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(GemmResidualLayerNorm, EveryConfigAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  const bool hopper = device_.limits.compute_capability == 90;
  for (const Case& c : kCases) {
    const Problem problem{"gemm_bias_residual_layernorm.nt", GetParam(),
                          Shape({{"m", c.m}, {"n", c.n}, {"k", c.k}})};
    EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++), hopper ? c.hopper_at_least : 1)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmResidualLayerNorm, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
