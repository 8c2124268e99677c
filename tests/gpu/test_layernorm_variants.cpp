// Every LayerNorm and residual+LayerNorm variant, config and dtype at awkward shapes, against
// the float64 reference on fresh inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <random>

#include "harness/problem_data.hpp"
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

// The persistent variants (fused_pipelined, fused_ring) walk rows blockIdx.x,
// + gridDim.x, ... with later rows in flight; the awkward shapes above mostly give a block one
// row. Here every block walks several (the grid is at most SMs x blocks per SM: ~2000 on an
// H200): 20000 rows of 33 (every row at another phase, heads and tails everywhere, at most a
// pack per thread), 4000 of 2063 (in 128-thread blocks, 2-3 packs per thread in 16-bit types,
// 4-5 in f32), 300 of 12289 (one block per SM, past the 48 KB of shared memory a kernel gets
// without opting in). Unlike verify_every_config, a refusal at launch is a failure for
// fused_pipelined, which refuses nothing that its supports() accepts; fused_ring may refuse
// block sizes its registers do not allow.
void verify_walking_many_rows(const char* primitive_name, const char* variant, DType dtype, const DeviceInfo& device,
                              Measurer& measurer, bool may_refuse, int min_verified) {
  const Variant& v = *catalogue().find_variant(primitive_name, variant);
  const Primitive& primitive = *catalogue().find_primitive(primitive_name);
  std::uint64_t seed = std::random_device{}();
  for (const Case& c : {Case{20000, 33}, Case{4000, 2063}, Case{300, 12289}}) {
    const Problem problem{primitive_name, dtype, Shape({{"rows", c.rows}, {"cols", c.cols}})};
    ProblemData data(primitive, problem, seed++);
    const Tolerance tol = tolerance_for(primitive, problem);
    int verified = 0;
    for (const Config& config : v.params.enumerate()) {
      if (!v.supports(problem, config, device.limits).ok) continue;
      std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs args{problem, config, pointers, measurer.stream(), measurer.libraries(), nullptr, 0,
                            data.scalars()};
      data.prepare(0, measurer.stream());
      const LaunchStatus status = v.launch(args);
      const std::string name = problem.key() + " " + v.name + "{" + config.key() + "}";
      if (may_refuse && !status.ok && status.unsupported) continue;
      EXPECT_TRUE(status.ok) << name << ": " << status.message;
      if (!status.ok) continue;
      const AccuracyReport report = data.check(0, tol, measurer.stream());
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch;
      ++verified;
    }
    EXPECT_GE(verified, min_verified) << problem.key() << " " << variant;
  }
}

// On an H100/H200 every fused_pipelined config runs but f32's round_h=0 (no effect there) and,
// at 12289 columns, f32 in 3 stages (288 KB of shared memory).
TEST_P(LayerNormVariants, PipelinedWalksManyRowsPerBlock) {
  verify_walking_many_rows("residual_layernorm", "fused_pipelined", GetParam(), device_, *measurer_, false, 4);
}

// fused_ring: sm_90 only. Every shape here has at least two configs that run (f32 12289 wide:
// 96 KB a slot, so 2 stages only, in 512 or 1024 threads).
TEST_P(LayerNormVariants, RingWalksManyRowsPerBlock) {
  if (device_.limits.compute_capability < 90) GTEST_SKIP() << "fused_ring needs sm_90";
  verify_walking_many_rows("residual_layernorm", "fused_ring", GetParam(), device_, *measurer_, true, 2);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, LayerNormVariants, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
