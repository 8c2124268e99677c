// Every LayerNorm and residual+LayerNorm variant, config and dtype at awkward shapes, against
// the float64 reference on fresh inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {

namespace {

struct Case {
  std::int64_t rows;
  std::int64_t cols;
};

// One row; widths 1, 3, 31, 33, 127, 1025, 4097 (odd: each row starts at another phase, so
// heads and tails vary); rows not a multiple of any rows-per-block; a wide row.
const Case kShapes[] = {{1, 1}, {1, 3}, {5, 31}, {3, 33}, {7, 127}, {9, 1025}, {3, 4097}, {1, 12288}, {1000, 17}};

class LayerNormVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  void verify_all(const char* primitive, const std::function<void(std::vector<TensorSpec>&)>& adjust = {}) {
    std::uint64_t seed = std::random_device{}();
    for (const Case& c : kShapes) {
      const Problem problem{primitive, GetParam(), Shape({{"rows", c.rows}, {"cols", c.cols}})};
      // The five (or three) variants each have at least one config for every shape here.
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, adjust), 3) << problem.key();
    }
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(LayerNormVariants, LayerNormEveryConfigAtAwkwardShapes) { verify_all("layernorm"); }

TEST_P(LayerNormVariants, ResidualLayerNormEveryConfigAtAwkwardShapes) { verify_all("residual_layernorm"); }

// Constant rows: variance 0, y = beta exactly (up to rounding); no NaN from 0/0.
TEST_P(LayerNormVariants, ConstantRowsGiveBeta) {
  auto constant = [](std::vector<TensorSpec>& specs) { specs[0].low = specs[0].high = 1.5; };
  const Problem problem{"layernorm", GetParam(), Shape({{"rows", 3}, {"cols", 129}})};
  EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, 4, constant), 5);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, LayerNormVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
