// The adam entry of the catalogue, checked without a GPU: the float64 reference against hand
// computations, the tensor-size rule, cost model, tolerances, shape checks and the variants'
// spaces and launch-time argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>

#include "baselines/library_handles.hpp"
#include "baselines/reference.hpp"
#include "kernels/adam.cuh"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

const reference::AdamHyperparameters kTuning{1e-3, 0.9, 0.999, 1e-8, 0.01, 10};

struct Element {
  double p, g, m, v;
};

Element step_one_element(Element e, const reference::AdamHyperparameters& h) {
  const std::int64_t size = 1;
  reference::adam(&size, 1, h, &e.p, &e.g, &e.m, &e.v);
  return e;
}

TEST(AdamReference, MatchesAHandComputedAdamWStep) {
  const Element out = step_one_element({0.5, 0.2, 0.1, 0.01}, kTuning);
  EXPECT_NEAR(out.m, 0.11, 1e-16);     // 0.9 * 0.1 + 0.1 * 0.2
  EXPECT_NEAR(out.v, 0.01003, 1e-17);  // 0.999 * 0.01 + 0.001 * 0.04
  // m_hat = 0.11 / (1 - 0.9^10) = 0.11 / 0.6513215599 = 0.16888739260664
  // v_hat = 0.01003 / (1 - 0.999^10) = 0.01003 / 0.00995511979025 = 1.00752177887619
  // p = 0.5 - 1e-3 (m_hat / (sqrt(v_hat) + 1e-8) + 0.01 * 0.5) = 0.5 - 1e-3 (0.16825578499439 + 0.005)
  EXPECT_NEAR(out.p, 0.49982674421500560, 1e-15);
  EXPECT_EQ(out.g, 0.2);
}

TEST(AdamReference, ZeroWeightDecayIsPlainAdam) {
  reference::AdamHyperparameters adam = kTuning;
  adam.weight_decay = 0;
  const Element plain = step_one_element({0.5, 0.2, 0.1, 0.01}, adam);
  EXPECT_NEAR(plain.p, 0.49983174421500560, 1e-15);  // the same step without 1e-3 * 0.01 * 0.5
  const Element decoupled = step_one_element({0.5, 0.2, 0.1, 0.01}, kTuning);
  // The decay never touches the moments, and it uses p before the update.
  EXPECT_EQ(plain.m, decoupled.m);
  EXPECT_EQ(plain.v, decoupled.v);
  EXPECT_NEAR(plain.p - decoupled.p, 1e-3 * 0.01 * 0.5, 1e-16);  // an ulp of p
}

TEST(AdamReference, FirstStepBiasCorrectionRecoversTheGradient) {
  // From m = v = 0 at t = 1: m_hat = g and v_hat = g^2 exactly, so the step is lr * g / (|g| + eps).
  reference::AdamHyperparameters first = kTuning;
  first.step = 1;
  first.weight_decay = 0;
  for (double g : {0.5, -0.25, 1e-3}) {
    const Element out = step_one_element({0.3, g, 0, 0}, first);
    EXPECT_NEAR(out.m, 0.1 * g, 1e-15 * std::fabs(g));
    EXPECT_NEAR(out.v, 0.001 * g * g, 1e-15 * g * g);
    EXPECT_NEAR(out.p, 0.3 - 1e-3 * g / (std::fabs(g) + 1e-8), 1e-15) << g;
  }
}

TEST(AdamReference, TheSplitIntoTensorsDoesNotChangeTheMath) {
  const std::int64_t n = 7;
  std::vector<double> p(n), g(n), m(n), v(n);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(1.0 + i);
    g[i] = std::cos(2.0 * i);
    m[i] = 0.05 * std::sin(3.0 * i);
    v[i] = 0.005 * (1 + std::cos(5.0 * i));
  }
  auto p2 = p, m2 = m, v2 = v;
  const std::int64_t whole[] = {7}, split[] = {3, 1, 3};
  reference::adam(whole, 1, kTuning, p.data(), g.data(), m.data(), v.data());
  reference::adam(split, 3, kTuning, p2.data(), g.data(), m2.data(), v2.data());
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
}

TEST(AdamReference, LargeTensorsInParallelMatchElementByElement) {
  const std::int64_t sizes[] = {300001, 5, 200000};
  const std::int64_t n = 500006;
  std::vector<double> p(n), g(n), m(n, 0.01), v(n, 0.002);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.37 * i);
    g[i] = std::cos(0.11 * i);
  }
  const std::vector<double> p0 = p, m0 = m, v0 = v;
  reference::adam(sizes, 3, kTuning, p.data(), g.data(), m.data(), v.data());
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{300000}, std::int64_t{300003}, n / 2, n - 1}) {
    const Element one = step_one_element({p0[i], g[i], m0[i], v0[i]}, kTuning);
    EXPECT_EQ(p[i], one.p) << i;
    EXPECT_EQ(m[i], one.m) << i;
    EXPECT_EQ(v[i], one.v) << i;
  }
}

std::int64_t sum(const std::vector<std::int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}); }

TEST(AdamTensorSizes, SumToNWithEveryTensorNonEmpty) {
  for (auto [n, tensors] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 1}, {3, 3}, {1025, 2}, {4097, 7},
                            {(1 << 20) + 3, 5}, {235146, 6}, {16777216, 64}, {134217728, 200}, {70000, 65536},
                            {std::int64_t{1} << 40, 65536}}) {
    const auto sizes = kernels::adam::tensor_sizes(n, tensors);
    ASSERT_EQ(static_cast<std::int64_t>(sizes.size()), tensors);
    EXPECT_EQ(sum(sizes), n) << n << " " << tensors;
    for (std::int64_t s : sizes) EXPECT_GE(s, 1) << n << " " << tensors;
    EXPECT_EQ(sizes, kernels::adam::tensor_sizes(n, tensors)) << "not deterministic";
  }
}

TEST(AdamTensorSizes, OneTensorHoldsEverythingAndNTensorsHoldOneEach) {
  EXPECT_EQ(kernels::adam::tensor_sizes(134217728, 1), std::vector<std::int64_t>{134217728});
  EXPECT_EQ(kernels::adam::tensor_sizes(1, 1), std::vector<std::int64_t>{1});
  EXPECT_EQ(kernels::adam::tensor_sizes(5, 5), std::vector<std::int64_t>(5, 1));
}

TEST(AdamTensorSizes, AlternatesLargeWeightsAndSmallBiases) {
  // 16777216 - 64 extra elements over 32 * 1000 + 32 shares: 523.76 per share.
  const auto sizes = kernels::adam::tensor_sizes(16777216, 64);
  for (std::size_t k = 0; k + 1 < sizes.size(); k += 2) {
    EXPECT_NEAR(static_cast<double>(sizes[k]), 1 + 523762.9, 1.0) << k;  // weight: 1 + 1000 shares
    EXPECT_NEAR(static_cast<double>(sizes[k + 1]), 1 + 523.76, 1.0) << k;  // bias: 1 + 1 share
  }
  // 4090 extra over 4003 shares, rounded down on the running total; an odd count ends on a weight.
  EXPECT_EQ(kernels::adam::tensor_sizes(4097, 7), (std::vector<std::int64_t>{1022, 2, 1023, 2, 1023, 2, 1023}));
}

// The rule is the catalogue's; a model brings its own list, which the kernels take explicitly
// (tests/gpu/test_adam_variants.cpp launches the MLP's list).
TEST(AdamTensorSizes, NeedNotReproduceAModelsList) {
  const std::vector<std::int64_t> mlp = {200704, 256, 32768, 128, 1280, 10};  // 784 -> 256 -> 128 -> 10
  ASSERT_EQ(sum(mlp), 235146);
  EXPECT_NE(kernels::adam::tensor_sizes(235146, 6), mlp);
}

TEST(AdamTensorSizes, RefusesSplitsItCannotMake) {
  EXPECT_THROW(kernels::adam::tensor_sizes(3, 4), std::invalid_argument);
  EXPECT_THROW(kernels::adam::tensor_sizes(3, 0), std::invalid_argument);
  EXPECT_THROW(kernels::adam::tensor_sizes(1 << 20, kernels::adam::kMaxTensors + 1), std::invalid_argument);
}

const Primitive& adam() { return *catalogue().find_primitive("adam"); }

Problem problem_of(std::int64_t n, std::int64_t tensors) {
  return Problem{"adam", DType::f32, Shape({{"n", n}, {"tensors", tensors}})};
}

TEST(AdamPrimitive, IsF32OnlyWithItsScalarsInOrder) {
  EXPECT_EQ(adam().dtypes, std::vector<DType>{DType::f32});
  std::vector<std::string> names;
  for (const auto& s : adam().scalars) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "step"}));
  EXPECT_EQ(default_scalars(adam()), (std::vector<double>{1e-3, 0.9, 0.999, 1e-8, 0.01, 10}));
}

TEST(AdamPrimitive, FourBuffersOfNWithPMAndVInPlace) {
  const auto specs = adam().tensors(problem_of(1025, 2));
  ASSERT_EQ(specs.size(), 4u);
  const TensorRole roles[] = {TensorRole::inout, TensorRole::input, TensorRole::inout, TensorRole::inout};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(specs[i].extents, std::vector<std::int64_t>{1025});
    EXPECT_EQ(specs[i].dtype, DType::f32);
    EXPECT_EQ(specs[i].role, roles[i]) << specs[i].name;
  }
  EXPECT_GE(specs[3].low, 0) << "v is a second moment";
}

TEST(AdamPrimitive, CatalogueReferenceIsTheReferenceStep) {
  const Problem problem = problem_of(4097, 7);
  HostTensors t(4);
  for (int k = 0; k < 4; ++k) t[k].assign(4097, 0.0);
  for (std::int64_t i = 0; i < 4097; ++i) {
    t[0][i] = std::sin(0.5 * i);
    t[1][i] = std::cos(0.3 * i);
    t[2][i] = 0.05 * std::sin(0.7 * i);
    t[3][i] = 0.004;
  }
  const HostTensors before = t;
  adam().reference(problem, default_scalars(adam()), t);
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{1021}, std::int64_t{1022}, std::int64_t{4096}}) {
    const Element one = step_one_element({before[0][i], before[1][i], before[2][i], before[3][i]}, kTuning);
    EXPECT_EQ(t[0][i], one.p) << i;
    EXPECT_EQ(t[2][i], one.m) << i;
    EXPECT_EQ(t[3][i], one.v) << i;
  }
  EXPECT_EQ(t[1], before[1]) << "g is an input";
}

TEST(AdamPrimitive, CostModelCountsSevenAccessesAndSixteenFlopsPerParameter) {
  const Cost cost = adam().cost(problem_of(134217728, 200));
  EXPECT_DOUBLE_EQ(cost.bytes, 28.0 * 134217728);
  EXPECT_DOUBLE_EQ(cost.flops, 16.0 * 134217728);
  // PyTorch's fused Adam at 1.14 ms on an H200 (bench note in shapes/adam.yaml): 3.3 TB/s.
  EXPECT_NEAR(cost.bytes / 1.14e-3 / 1e12, 3.30, 0.01);
}

TEST(AdamPrimitive, ToleranceIsTightFloatRounding) {
  const Tolerance tol = adam().tolerance(DType::f32);
  EXPECT_EQ(tol.rtol, 1e-6);
  EXPECT_EQ(tol.atol, 1e-7);
  // A step of ~lr on p ~ 1 must be resolved: an update dropped entirely would fail.
  EXPECT_LT(tol.rtol * 1.0, 1e-3 * 0.01);
}

TEST(AdamPrimitive, ValidateShapeRefusesImpossibleSplits) {
  auto valid = [](std::int64_t n, std::int64_t tensors) {
    return adam().validate_shape(Shape({{"n", n}, {"tensors", tensors}}));
  };
  EXPECT_TRUE(valid(235146, 6).ok);
  EXPECT_TRUE(valid(1, 1).ok);
  EXPECT_TRUE(valid(65536, 65536).ok);
  EXPECT_FALSE(valid(3, 4).ok);
  EXPECT_FALSE(valid(1 << 20, 65537).ok);
  EXPECT_NE(valid(1 << 20, 65537).reason.find("65536"), std::string::npos);
}

TEST(AdamVariantsCatalogue, LadderIsRegisteredPlainestFirst) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants("adam")) names.push_back(v->name);
  EXPECT_EQ(names, (std::vector<std::string>{"scalar", "vec4", "multi_tensor"}));
  EXPECT_NE(catalogue().find_variant("adam", adam().default_variant), nullptr);
}

TEST(AdamVariantsCatalogue, DefaultConfigsAreInTheirSpacesAndSupportAnyShape) {
  const DeviceLimits limits = nominal_device_limits();
  for (const Variant* v : catalogue().variants("adam")) {
    EXPECT_TRUE(v->params.contains(v->default_config)) << v->name;
    EXPECT_FALSE(v->description.empty()) << v->name;
    for (auto [n, tensors] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {4097, 7}, {134217728, 200}})
      EXPECT_TRUE(v->supports(problem_of(n, tensors), v->default_config, limits).ok) << v->name;
  }
}

// Bad scalars are caught before anything reaches the device, with a reason.
TEST(AdamVariantsCatalogue, LaunchRefusesMissingScalarsAndImpossibleSteps) {
  const Variant& v = *catalogue().find_variant("adam", "multi_tensor");
  const Problem problem = problem_of(16, 2);
  LibraryHandles libraries;
  std::vector<void*> pointers(4, nullptr);
  const LaunchStatus missing = v.launch(LaunchArgs{problem, v.default_config, pointers, nullptr, libraries});
  EXPECT_FALSE(missing.ok);
  EXPECT_FALSE(missing.unsupported);
  EXPECT_NE(missing.message.find("6 scalars"), std::string::npos) << missing.message;
  std::vector<double> scalars = default_scalars(adam());
  scalars[5] = 0;  // step 0: 1 - beta^0 = 0 would divide by zero
  const LaunchStatus step0 =
      v.launch(LaunchArgs{problem, v.default_config, pointers, nullptr, libraries, nullptr, 0, scalars});
  EXPECT_FALSE(step0.ok);
  EXPECT_NE(step0.message.find("step"), std::string::npos) << step0.message;
}

TEST(AdamKernels, EntryPointsRejectBadArgumentsBeforeLaunching) {
  namespace ka = kernels::adam;
  const ka::Hyperparameters good{1e-3, 0.9, 0.999, 1e-8, 0.01, 10};
  EXPECT_EQ(ka::invalid_reason(good), nullptr);
  EXPECT_NE(ka::invalid_reason({1e-3, 1.0, 0.999, 1e-8, 0.01, 10}), nullptr);
  EXPECT_NE(ka::invalid_reason({1e-3, 0.9, -0.1, 1e-8, 0.01, 10}), nullptr);
  EXPECT_NE(ka::invalid_reason({1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5}), nullptr);
  // Buffers that differ in 16-byte alignment cannot share one head/body/tail split.
  alignas(16) static float storage[4][8];
  const ka::Buffers skewed{storage[0], storage[1] + 1, storage[2], storage[3]};
  EXPECT_EQ(ka::vec4(skewed, {4}, good, 256, 4, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(ka::multi_tensor(skewed, {4}, good, 256, 2, nullptr), cudaErrorNotSupported);
  const ka::Buffers aligned{storage[0], storage[1], storage[2], storage[3]};
  EXPECT_EQ(ka::scalar(aligned, {-1}, good, 256, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(ka::vec4(aligned, {4}, good, 256, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(ka::multi_tensor(aligned, {4}, good, 256, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(ka::multi_tensor(aligned, {4}, good, 0, 2, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace shapetune
