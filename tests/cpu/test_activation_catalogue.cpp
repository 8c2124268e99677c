// The activation family's entries of the catalogue, checked without a GPU: the float64
// references against hand-computed values, textbook formulas and finite differences; cost
// models, tolerances, and every variant's space and constraints.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <numbers>

#include "baselines/reference.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using reference::Activation;

const Activation kAll[] = {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::sigmoid,
                           Activation::silu};
const char* const kNames[] = {"relu", "gelu", "gelu_tanh", "sigmoid", "silu"};

double textbook_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double textbook_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

TEST(ActivationReference, MatchesHandComputedValues) {
  // 40-digit values (mpmath), rounded.
  EXPECT_NEAR(reference::activation(Activation::gelu, 1), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(reference::activation(Activation::gelu, -1), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(reference::activation(Activation::gelu_tanh, 1), 0.8411919906082767, 1e-15);
  EXPECT_NEAR(reference::activation(Activation::gelu_tanh, -3), -0.0036373920817730188, 1e-17);
  EXPECT_NEAR(reference::activation(Activation::sigmoid, 2), 0.8807970779778823, 1e-15);
  EXPECT_NEAR(reference::activation(Activation::silu, -3), -0.14227761953270035, 1e-15);
  EXPECT_EQ(reference::activation(Activation::relu, -2), 0);
  EXPECT_EQ(reference::activation(Activation::relu, 2.5), 2.5);
  EXPECT_EQ(reference::activation(Activation::sigmoid, 0), 0.5);
  EXPECT_EQ(reference::activation(Activation::silu, 0), 0);
}

TEST(ActivationReference, LeftTailsKeepTheirRelativeAccuracy) {
  // The textbook forms cancel here even in double (gelu_tanh's loses 3e-7 relative at -6).
  const double gelu = reference::activation(Activation::gelu, -6);
  const double gelu_tanh = reference::activation(Activation::gelu_tanh, -6);
  EXPECT_NEAR(gelu / -5.9195258702261888e-9, 1, 1e-13);
  EXPECT_NEAR(gelu_tanh / -8.4396467007622971e-11, 1, 1e-13);
  EXPECT_NEAR(reference::activation(Activation::sigmoid, -40) / 4.248354255291589e-18, 1, 1e-13);
}

TEST(ActivationReference, StableFormsEqualTheTextbookFormulasAwayFromTheTails) {
  for (double x = -3; x <= 3; x += 0.125) {
    EXPECT_NEAR(reference::activation(Activation::gelu, x), textbook_gelu(x), 1e-15) << x;
    EXPECT_NEAR(reference::activation(Activation::gelu_tanh, x), textbook_gelu_tanh(x), 1e-15) << x;
    EXPECT_NEAR(reference::activation(Activation::silu, x), x / (1 + std::exp(-x)), 1e-15) << x;
  }
}

TEST(ActivationReference, DerivativesMatchCentralDifferences) {
  const double h = 1e-5;
  for (std::size_t k = 0; k < std::size(kAll); ++k) {
    for (double x = -6.1; x <= 6; x += 0.37) {  // never exactly 0, where relu has a kink
      const double numeric =
          (reference::activation(kAll[k], x + h) - reference::activation(kAll[k], x - h)) / (2 * h);
      EXPECT_NEAR(reference::activation_derivative(kAll[k], x), numeric, 1e-9) << kNames[k] << " at " << x;
    }
  }
}

TEST(ActivationReference, ReluDerivativeIsZeroAtZero) {
  EXPECT_EQ(reference::activation_derivative(Activation::relu, 0), 0);
  EXPECT_EQ(reference::activation_derivative(Activation::relu, -0.0), 0);
  EXPECT_EQ(reference::activation_derivative(Activation::relu, 1e-300), 1);
  std::vector<double> x = {0, 0, -1, 2}, dy = {3, -5, 7, 11}, dx(4);
  reference::activation_backward(Activation::relu, 4, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 11}));
}

TEST(ActivationReference, BulkFunctionsApplyTheScalarOnesEverywhere) {
  const std::int64_t n = 300001;  // several parallel chunks and an odd remainder
  std::vector<double> x(n), dy(n), y(n), dx(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = 6 * std::sin(0.001 * static_cast<double>(i));
    dy[i] = std::cos(0.37 * static_cast<double>(i));
  }
  for (Activation f : kAll) {
    reference::activation_forward(f, n, x.data(), y.data());
    reference::activation_backward(f, n, x.data(), dy.data(), dx.data());
    for (std::int64_t i : {std::int64_t{0}, n / 3, n / 2 + 1, n - 1}) {
      EXPECT_EQ(y[i], reference::activation(f, x[i]));
      EXPECT_EQ(dx[i], dy[i] * reference::activation_derivative(f, x[i]));
    }
  }
}

TEST(ActivationReference, BiasIsBroadcastAlongRows) {
  const std::int64_t rows = 5000, cols = 37;
  std::vector<double> x(rows * cols), b(cols), y(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 6 * std::sin(0.11 * static_cast<double>(i));
  for (std::int64_t c = 0; c < cols; ++c) b[c] = 0.05 * static_cast<double>(c) - 1;
  reference::bias_activation(Activation::gelu, rows, cols, x.data(), b.data(), y.data());
  for (std::int64_t r : {std::int64_t{0}, rows / 2, rows - 1})
    for (std::int64_t c : {std::int64_t{0}, std::int64_t{17}, cols - 1})
      EXPECT_EQ(y[r * cols + c], reference::activation(Activation::gelu, x[r * cols + c] + b[c]));
}

const Primitive& primitive(const std::string& name) {
  const Primitive* p = catalogue().find_primitive(name);
  if (!p) throw std::runtime_error("no primitive " + name);
  return *p;
}

std::vector<std::string> variant_names(const std::string& primitive) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants(primitive)) names.push_back(v->name);
  return names;
}

TEST(ActivationCatalogue, ThreePrimitivesPerFunctionWithTheirLadders) {
  for (const char* name : kNames) {
    const std::string f = name;
    const bool has_cudnn = f == "relu" || f == "sigmoid" || f == "silu";
    const std::vector<std::string> elementwise =
        has_cudnn ? std::vector<std::string>{"scalar", "vec", "cudnn"} : std::vector<std::string>{"scalar", "vec"};
    EXPECT_EQ(variant_names("activation." + f), elementwise);
    EXPECT_EQ(variant_names("activation_backward." + f), elementwise);
    EXPECT_EQ(variant_names("bias_activation." + f), (std::vector<std::string>{"scalar", "row_vec", "flat_vec", "column_vec"}));
    if (has_cudnn) {
      EXPECT_TRUE(catalogue().find_variant("activation." + f, "cudnn")->baseline);
      EXPECT_TRUE(catalogue().find_variant("activation_backward." + f, "cudnn")->baseline);
    } else {
      EXPECT_NE(primitive("activation." + f).description.find("cuDNN has no GELU"), std::string::npos);
    }
    for (const std::string& p : {"activation." + f, "activation_backward." + f, "bias_activation." + f}) {
      EXPECT_EQ(primitive(p).dtypes, (std::vector<DType>{DType::f32, DType::f16, DType::bf16})) << p;
      EXPECT_NE(catalogue().find_variant(p, primitive(p).default_variant), nullptr) << p;
      for (const Variant* v : catalogue().variants(p)) {
        EXPECT_TRUE(v->params.contains(v->default_config)) << p << " " << v->name;
        EXPECT_FALSE(v->description.empty()) << p << " " << v->name;
      }
    }
  }
}

TEST(ActivationCatalogue, TensorsAndRangesFollowTheSignatures) {
  const Problem backward{"activation_backward.gelu", DType::bf16, Shape({{"n", 33}})};
  const auto specs = primitive(backward.primitive).tensors(backward);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name, "x");
  EXPECT_EQ(specs[1].name, "dy");
  EXPECT_EQ(specs[2].role, TensorRole::output);
  EXPECT_EQ(specs[0].low, -6);
  EXPECT_EQ(specs[0].high, 6);
  const Problem bias{"bias_activation.silu", DType::f16, Shape({{"rows", 7}, {"cols", 33}})};
  const auto bias_specs = primitive(bias.primitive).tensors(bias);
  ASSERT_EQ(bias_specs.size(), 3u);
  EXPECT_EQ(bias_specs[1].name, "b");
  EXPECT_EQ(bias_specs[1].extents, std::vector<std::int64_t>{33});
  EXPECT_EQ(bias_specs[2].extents, (std::vector<std::int64_t>{7, 33}));
}

TEST(ActivationCatalogue, ReferencesFillTheOutputTensor) {
  const Problem problem{"bias_activation.relu", DType::f32, Shape({{"rows", 2}, {"cols", 3}})};
  HostTensors t = {{-1, 0.5, 2, -3, 1, -0.25}, {0.5, -1, 0.25}, std::vector<double>(6)};
  primitive(problem.primitive).reference(problem, {}, t);
  EXPECT_EQ(t[2], (std::vector<double>{0, 0, 2.25, 0, 0, 0}));
}

TEST(ActivationCatalogue, CostModelsCountEachTensorOnce) {
  const Problem forward{"activation.gelu", DType::f32, Shape({{"n", 4194304}})};
  EXPECT_DOUBLE_EQ(primitive(forward.primitive).cost(forward).bytes, 2.0 * 4194304 * 4);
  EXPECT_DOUBLE_EQ(primitive(forward.primitive).cost(forward).flops, 5.0 * 4194304);
  const Problem backward{"activation_backward.gelu", DType::bf16, Shape({{"n", 4194304}})};
  EXPECT_DOUBLE_EQ(primitive(backward.primitive).cost(backward).bytes, 3.0 * 4194304 * 2);
  EXPECT_DOUBLE_EQ(primitive(backward.primitive).cost(backward).flops, 11.0 * 4194304);
  const Problem bias{"bias_activation.gelu", DType::f16, Shape({{"rows", 65536}, {"cols", 4096}})};
  EXPECT_DOUBLE_EQ(primitive(bias.primitive).cost(bias).bytes, (2.0 * 65536 * 4096 + 4096) * 2);
  EXPECT_DOUBLE_EQ(primitive(bias.primitive).cost(bias).flops, 6.0 * 65536 * 4096);
  const Problem relu{"activation.relu", DType::f32, Shape({{"n", 10}})};
  EXPECT_DOUBLE_EQ(primitive(relu.primitive).cost(relu).flops, 10);
}

TEST(ActivationCatalogue, TolerancesLooserForNarrowerTypes) {
  for (const char* name : {"activation.silu", "activation_backward.gelu_tanh", "bias_activation.sigmoid"}) {
    const Primitive& p = primitive(name);
    EXPECT_EQ(p.tolerance(DType::f32), (Tolerance{1e-6, 1e-5})) << name;
    EXPECT_LT(p.tolerance(DType::f32).rtol, p.tolerance(DType::f16).rtol) << name;
    EXPECT_LT(p.tolerance(DType::f16).rtol, p.tolerance(DType::bf16).rtol) << name;
    // Above half an ulp of each type (2^-11, 2^-8), which output rounding alone costs.
    EXPECT_GT(p.tolerance(DType::f16).rtol, std::ldexp(1.0, -11)) << name;
    EXPECT_GT(p.tolerance(DType::bf16).rtol, std::ldexp(1.0, -8)) << name;
  }
}

TEST(ActivationCatalogue, ShapesAreValidatedWithTheirLimits) {
  const Primitive& forward = primitive("activation.sigmoid");
  EXPECT_TRUE(forward.validate_shape(Shape({{"n", 1}})).ok);
  EXPECT_TRUE(forward.validate_shape(Shape({{"n", std::int64_t{1} << 40}})).ok);
  EXPECT_FALSE(forward.validate_shape(Shape({{"n", (std::int64_t{1} << 48) + 1}})).ok);
  const Primitive& bias = primitive("bias_activation.gelu");
  EXPECT_TRUE(bias.validate_shape(Shape({{"rows", 1280000}, {"cols", 1024}})).ok);
  EXPECT_FALSE(bias.validate_shape(Shape({{"rows", 1}, {"cols", std::int64_t{INT_MAX} + 1}})).ok);
  EXPECT_FALSE(bias.validate_shape(Shape({{"rows", std::int64_t{1} << 40}, {"cols", 1 << 20}})).ok);
}

TEST(ActivationVariants, DefaultsSupportAnyShape) {
  const DeviceLimits limits = nominal_device_limits();
  for (const char* name : kNames) {
    for (const std::string& p : {std::string("activation.") + name, std::string("activation_backward.") + name}) {
      const Variant& fallback = *catalogue().find_variant(p, primitive(p).default_variant);
      for (std::int64_t n : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1} << 20, std::int64_t{268435456}})
        EXPECT_TRUE(fallback.supports(Problem{p, DType::f16, Shape({{"n", n}})}, fallback.default_config, limits).ok)
            << p << " n=" << n;
    }
    const std::string p = std::string("bias_activation.") + name;
    const Variant& fallback = *catalogue().find_variant(p, primitive(p).default_variant);
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {1000, 17}, {1280000, 1024}})
      EXPECT_TRUE(fallback.supports(Problem{p, DType::bf16, Shape({{"rows", rows}, {"cols", cols}})},
                                    fallback.default_config, limits)
                      .ok);
  }
}

TEST(ActivationVariants, VecRefusesOnlyGridsOverTheLimit) {
  const Variant& vec = *catalogue().find_variant("activation.gelu", "vec");
  const DeviceLimits limits = nominal_device_limits();
  const Problem huge{"activation.gelu", DType::f32, Shape({{"n", std::int64_t{1} << 40}})};
  // 2^38 packs: 2^32 blocks of 64 threads with one pack each; 2^25 blocks of 1024 threads with 8.
  const Support small_blocks = vec.supports(huge, Config({{"block_size", 64}, {"packs_per_thread", 1}}), limits);
  EXPECT_FALSE(small_blocks.ok);
  EXPECT_NE(small_blocks.reason.find("blocks"), std::string::npos);
  EXPECT_TRUE(vec.supports(huge, Config({{"block_size", 1024}, {"packs_per_thread", 8}}), limits).ok);
  for (const Config& c : vec.params.enumerate())
    EXPECT_TRUE(vec.supports(Problem{"activation.gelu", DType::bf16, Shape({{"n", 1}})}, c, limits).ok) << c.key();
}

TEST(ActivationVariants, CudnnBaselineNeedsThirtyTwoBitExtentsAndAWorkspaceForY) {
  const DeviceLimits limits = nominal_device_limits();
  const Variant& forward = *catalogue().find_variant("activation.relu", "cudnn");
  EXPECT_TRUE(forward.supports(Problem{"activation.relu", DType::f32, Shape({{"n", INT_MAX}})}, {}, limits).ok);
  EXPECT_FALSE(
      forward.supports(Problem{"activation.relu", DType::f32, Shape({{"n", std::int64_t{INT_MAX} + 1}})}, {}, limits)
          .ok);
  EXPECT_FALSE(static_cast<bool>(forward.workspace_bytes));
  const Variant& backward = *catalogue().find_variant("activation_backward.silu", "cudnn");
  ASSERT_TRUE(static_cast<bool>(backward.workspace_bytes));
  EXPECT_EQ(backward.workspace_bytes(Problem{"activation_backward.silu", DType::bf16, Shape({{"n", 1001}})}, {}),
            2002u);
  EXPECT_NE(backward.description.find("includes the forward pass"), std::string::npos);
}

TEST(ActivationVariants, FlatVecCountsPacksOverTheWholeTensor) {
  const Variant& v = *catalogue().find_variant("bias_activation.silu", "flat_vec");
  const DeviceLimits limits = nominal_device_limits();
  const Config smallest({{"block_size", 64}, {"packs_per_thread", 1}});
  // 2^37 rows of 4 floats: 2^37 packs, over 2^31 blocks of 64 packs; a single row of 4 fits.
  EXPECT_FALSE(v.supports(Problem{"bias_activation.silu", DType::f32, Shape({{"rows", std::int64_t{1} << 37}, {"cols", 4}})},
                          smallest, limits)
                   .ok);
  EXPECT_TRUE(v.supports(Problem{"bias_activation.silu", DType::f32, Shape({{"rows", 1}, {"cols", 4}})}, smallest, limits)
                  .ok);
}

TEST(ActivationVariants, RowVecSpaceRespectsItsConstraint) {
  const Variant& v = *catalogue().find_variant("bias_activation.gelu", "row_vec");
  const auto configs = v.params.enumerate();
  EXPECT_EQ(configs.size(), 30u);  // 9 x 4 pairs less the 6 with more threads per row than per block
  for (const Config& c : configs) EXPECT_LE(c.at("threads_per_row"), c.at("block_size")) << c.key();
  const DeviceLimits limits = nominal_device_limits();
  const Problem many_rows{"bias_activation.gelu", DType::f32, Shape({{"rows", std::int64_t{1} << 38}, {"cols", 1}})};
  EXPECT_FALSE(v.supports(many_rows, Config({{"threads_per_row", 1024}, {"block_size", 1024}}), limits).ok);
  EXPECT_TRUE(v.supports(many_rows, Config({{"threads_per_row", 4}, {"block_size", 1024}}), limits).ok);
}

}  // namespace
}  // namespace shapetune
