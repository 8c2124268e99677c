// The Transformer runner on the GPU against its float64 forward, at small awkward sizes (odd
// sequence lengths, a head dim the flash kernels do not take, more than one layer), in f32 (TF32
// products), f16 and bf16, with each problem's default variant and with the library baselines.
#include <gtest/gtest.h>

#include <cmath>

#include "models/transformer.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

struct Case {
  TransformerShape shape;
  const char* why;
};

const Case kCases[] = {
    {{2, 17, 64, 2, 96, 2}, "hd 32, a sequence no tile divides, FFN wider than D"},
    {{3, 9, 48, 3, 40, 1}, "hd 16 (the flash kernels refuse it: naive attention), FFN narrower than D"},
    {{1, 1, 32, 4, 32, 2}, "one token"},
};

// The TechJam rule is 0.002 absolute or 2% relative against PyTorch in the same type; against the
// float64 forward a 16-bit model's rounding through two layers needs more: bf16's unit is 2^-8.
Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return {5e-3, 2e-2};
    case DType::bf16: return {4e-2, 5e-2};
    default: return {2e-3, 2e-2};
  }
}

class TransformerRunnerTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { SHAPETUNE_REQUIRE_GPU(); }
};

TEST_P(TransformerRunnerTest, MatchesTheFloat64ForwardWithDefaultsAndLibraries) {
  const DType dtype = GetParam();
  for (const DispatchMode mode : {DispatchMode::tuned, DispatchMode::library}) {
    RunnerOptions options;
    options.dispatch = mode;
    RunnerCore core(options);
    if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
    for (const Case& c : kCases) {
      const auto weights = generate_transformer_weights(c.shape, dtype, 11);
      const TensorValues x = generate_transformer_input(c.shape, dtype, 11);
      TransformerRunner runner(core, c.shape, dtype, weights);
      runner.set_input(x);
      runner.forward();
      const TensorValues y = runner.output();
      const std::vector<double> want = transformer_reference(c.shape, dtype, weights, x);
      ASSERT_EQ(y.values.size(), want.size());
      const Tolerance tol = tolerance(dtype);
      int bad = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double err = std::abs(y.values[i] - want[i]);
        if (!(err <= tol.atol || err <= tol.rtol * std::abs(want[i]))) {
          if (++bad <= 3)
            ADD_FAILURE() << c.shape.describe() << " (" << c.why << "), " << dispatch_mode_name(mode) << ": y[" << i
                          << "] = " << y.values[i] << ", want " << want[i];
        }
      }
      EXPECT_EQ(bad, 0) << c.shape.describe() << ", " << dispatch_mode_name(mode);
      // A second forward (the graph replayed) gives the same output, bit for bit.
      runner.forward();
      EXPECT_EQ(runner.output().values, y.values) << c.shape.describe();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TransformerRunnerTest, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
