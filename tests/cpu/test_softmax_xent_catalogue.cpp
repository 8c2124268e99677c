// The softmax_xent entry of the catalogue, checked without a GPU: the float64 reference against
// hand-computed values, identities and a finite difference of its own loss; the cost model,
// tolerances, workspaces and every variant's constraints.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "baselines/library_handles.hpp"
#include "baselines/reference.hpp"
#include "kernels/softmax_xent.cuh"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

struct XentResult {
  double loss = 0;
  std::vector<double> dlogits;
};

XentResult run_reference(std::int64_t rows, std::int64_t classes, const std::vector<double>& logits,
                         const std::vector<double>& labels) {
  XentResult out;
  out.dlogits.assign(logits.size(), NAN);
  reference::softmax_xent(rows, classes, logits.data(), labels.data(), &out.loss, out.dlogits.data());
  return out;
}

Problem xent_problem(DType dtype, std::int64_t rows, std::int64_t classes) {
  return Problem{"softmax_xent", dtype, Shape({{"rows", rows}, {"classes", classes}})};
}

TEST(SoftmaxXentReference, TwoClassesMatchHandComputedValues) {
  // Row 0: p = (1/4, 3/4), label 1. Row 1: p = (1/2, 1/2), label 0. Gradients are halved (2 rows).
  const XentResult r = run_reference(2, 2, {0, std::log(3.0), 2, 2}, {1, 0});
  EXPECT_NEAR(r.loss, (std::log(4.0 / 3.0) + std::log(2.0)) / 2, 1e-15);
  const std::vector<double> expected = {0.125, -0.125, -0.25, 0.25};
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(r.dlogits[i], expected[i], 1e-15) << i;
}

TEST(SoftmaxXentReference, GradientMatchesCentralDifferenceOfTheMeanLoss) {
  const std::int64_t rows = 3, classes = 5;
  std::vector<double> x(rows * classes);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 4 * std::sin(1.7 * static_cast<double>(i) + 0.3);
  const std::vector<double> labels = {4, 0, 2};
  const XentResult at_x = run_reference(rows, classes, x, labels);
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::vector<double> plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    const double slope =
        (run_reference(rows, classes, plus, labels).loss - run_reference(rows, classes, minus, labels).loss) / (2 * h);
    EXPECT_NEAR(at_x.dlogits[i], slope, 1e-8) << "logit " << i;
  }
}

TEST(SoftmaxXentReference, IdenticalLogitsGiveLogClasses) {
  const std::int64_t rows = 4, classes = 7;
  const XentResult r = run_reference(rows, classes, std::vector<double>(rows * classes, 3.5), {0, 6, 3, 3});
  EXPECT_NEAR(r.loss, std::log(7.0), 1e-15);
  const std::vector<double> labels = {0, 6, 3, 3};
  for (std::int64_t row = 0; row < rows; ++row)
    for (std::int64_t c = 0; c < classes; ++c) {
      const double onehot = c == static_cast<std::int64_t>(labels[row]) ? 1 : 0;
      EXPECT_NEAR(r.dlogits[row * classes + c], (1.0 / 7 - onehot) / rows, 1e-16);
    }
}

TEST(SoftmaxXentReference, EveryGradientRowSumsToZero) {
  const std::int64_t rows = 5, classes = 11;
  std::vector<double> x(rows * classes), labels = {0, 10, 5, 5, 1};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 8 * std::cos(0.9 * static_cast<double>(i));
  const XentResult r = run_reference(rows, classes, x, labels);
  for (std::int64_t row = 0; row < rows; ++row) {
    const double sum = std::accumulate(r.dlogits.begin() + row * classes, r.dlogits.begin() + (row + 1) * classes, 0.0);
    EXPECT_NEAR(sum, 0, 1e-15) << row;
  }
}

TEST(SoftmaxXentReference, OneClassHasZeroLossAndGradient) {
  const XentResult r = run_reference(3, 1, {-7, 0, 5}, {0, 0, 0});
  EXPECT_EQ(r.loss, 0);
  for (double g : r.dlogits) EXPECT_EQ(g, 0);
}

TEST(SoftmaxXentReference, ADominantLabelKeepsItsTinyGradientExact) {
  // p[label] = 1 / (1 + e^-40): p - 1 would round to 0 in double; -others / total does not.
  const XentResult r = run_reference(1, 2, {40, 0}, {0});
  EXPECT_NEAR(r.dlogits[0] / -std::exp(-40.0), 1, 1e-14);
  EXPECT_NEAR(r.loss / std::exp(-40.0), 1, 1e-14);  // log(1 + e^-40)
}

TEST(SoftmaxXentReference, StableForHugeLogitsAndShiftInvariant) {
  const XentResult huge = run_reference(1, 3, {1000, 1001, 1002}, {1});
  const XentResult small = run_reference(1, 3, {0, 1, 2}, {1});
  EXPECT_NEAR(huge.loss, small.loss, 1e-12);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isfinite(huge.dlogits[i]));
    EXPECT_NEAR(huge.dlogits[i], small.dlogits[i], 1e-15);
  }
}

TEST(SoftmaxXentReference, OutOfRangeLabelsAreClamped) {
  const std::vector<double> x = {0.5, -1, 2, 0.25, 3, -2};
  const XentResult clamped = run_reference(2, 3, x, {-4, 9});
  const XentResult edges = run_reference(2, 3, x, {0, 2});
  EXPECT_EQ(clamped.loss, edges.loss);
  EXPECT_EQ(clamped.dlogits, edges.dlogits);
}

TEST(SoftmaxXentReference, ManyRowsInParallelMatchOneByOne) {
  const std::int64_t rows = 3000, classes = 37;
  std::vector<double> x(rows * classes), labels(rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) * 8;
  for (std::int64_t r = 0; r < rows; ++r) labels[r] = static_cast<double>((r * 7) % classes);
  const XentResult all = run_reference(rows, classes, x, labels);
  double loss_sum = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::vector<double> row(x.begin() + r * classes, x.begin() + (r + 1) * classes);
    const XentResult one = run_reference(1, classes, row, {labels[r]});
    loss_sum += one.loss;
    for (std::int64_t c = 0; c < classes; ++c) EXPECT_NEAR(all.dlogits[r * classes + c] * rows, one.dlogits[c], 1e-15);
  }
  EXPECT_NEAR(all.loss, loss_sum / rows, 1e-12);
}

TEST(SoftmaxXentPrimitive, TensorsAreLogitsLabelsLossDlogits) {
  const Primitive& p = *catalogue().find_primitive("softmax_xent");
  const auto specs = p.tensors(xent_problem(DType::bf16, 6, 1000));
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "logits");
  EXPECT_EQ(specs[0].dtype, DType::bf16);
  EXPECT_EQ(specs[0].role, TensorRole::input);
  EXPECT_EQ(specs[1].name, "labels");
  EXPECT_EQ(specs[1].dtype, DType::i32);
  EXPECT_EQ(specs[1].extents, std::vector<std::int64_t>{6});
  EXPECT_EQ(specs[1].low, 0);
  EXPECT_EQ(specs[1].high, 1000);  // floor(u * 1000): every class, never 1000
  EXPECT_EQ(specs[2].name, "loss");
  EXPECT_EQ(specs[2].dtype, DType::f32);
  EXPECT_EQ(specs[2].elements(), 1);
  EXPECT_EQ(specs[2].role, TensorRole::output);
  EXPECT_EQ(specs[3].name, "dlogits");
  EXPECT_EQ(specs[3].dtype, DType::bf16);
  EXPECT_EQ(specs[3].extents, (std::vector<std::int64_t>{6, 1000}));
  EXPECT_EQ(specs[3].role, TensorRole::output);
}

TEST(SoftmaxXentPrimitive, CostModelCountsLogitsDlogitsLabelsAndLoss) {
  const Primitive& p = *catalogue().find_primitive("softmax_xent");
  const double rows = 4096, n = 4096.0 * 32000;
  const Cost f32 = p.cost(xent_problem(DType::f32, 4096, 32000));
  EXPECT_DOUBLE_EQ(f32.bytes, 2 * n * 4 + 4 * rows + 4);
  EXPECT_DOUBLE_EQ(f32.flops, 5 * n + 5 * rows);
  EXPECT_DOUBLE_EQ(p.cost(xent_problem(DType::bf16, 4096, 32000)).bytes, 2 * n * 2 + 4 * rows + 4);
}

TEST(SoftmaxXentPrimitive, TolerancesAreRelativeAndLooserForNarrowerTypes) {
  const Primitive& p = *catalogue().find_primitive("softmax_xent");
  const Tolerance f32 = p.tolerance(DType::f32), f16 = p.tolerance(DType::f16), bf16 = p.tolerance(DType::bf16);
  EXPECT_LT(f32.rtol, f16.rtol);
  EXPECT_LT(f16.rtol, bf16.rtol);
  // Gradients of 16384 x 50257 logits are ~1e-9: atol must not wave them through in f32/bf16.
  EXPECT_LT(f32.atol, 1e-20);
  EXPECT_LT(bf16.atol, 1e-20);
  // f16 must accept rounding to a neighbouring subnormal (spacing 2^-24), and no more.
  EXPECT_GE(f16.atol, std::ldexp(1.0, -25));
  EXPECT_LE(f16.atol, std::ldexp(1.0, -24) * 1.01);
}

TEST(SoftmaxXentPrimitive, ValidateShapeKeepsIndicesInRange) {
  const Primitive& p = *catalogue().find_primitive("softmax_xent");
  EXPECT_TRUE(p.validate_shape(Shape({{"rows", 128}, {"classes", 10}})).ok);
  EXPECT_TRUE(p.validate_shape(Shape({{"rows", 1}, {"classes", std::int64_t{1} << 30}})).ok);
  EXPECT_FALSE(p.validate_shape(Shape({{"rows", 1}, {"classes", (std::int64_t{1} << 30) + 1}})).ok);
  EXPECT_FALSE(p.validate_shape(Shape({{"rows", std::int64_t{1} << 40}, {"classes", 1 << 9}})).ok);
}

TEST(SoftmaxXentVariantsCatalogue, LadderIsRegisteredWithTheUnfusedChainAsBaseline) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants("softmax_xent")) {
    names.push_back(v->name);
    EXPECT_EQ(v->baseline, v->name == "unfused") << v->name;
    EXPECT_FALSE(v->description.empty()) << v->name;
  }
  const std::vector<std::string> expected = {"unfused",           "fused_warp_row", "fused_block_row", "fused_smem_row",
                                             "fused_register_row", "fused_cluster_row", "fused_ring_row"};
  EXPECT_EQ(names, expected);
  EXPECT_NE(catalogue().find_variant("softmax_xent", catalogue().find_primitive("softmax_xent")->default_variant),
            nullptr);
}

TEST(SoftmaxXentVariantsCatalogue, DefaultConfigsAreInTheirSpacesAndTheFallbackSupportsAnyShape) {
  const DeviceLimits limits = nominal_device_limits();
  const Primitive& p = *catalogue().find_primitive("softmax_xent");
  const Variant& fallback = *catalogue().find_variant("softmax_xent", p.default_variant);
  for (const Variant* v : catalogue().variants("softmax_xent"))
    EXPECT_TRUE(v->params.contains(v->default_config)) << v->name;
  for (auto [rows, classes] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 4097}, {1, 1 << 20}, {1 << 20, 7}}) {
    const Problem problem = xent_problem(DType::f16, rows, classes);
    EXPECT_TRUE(fallback.supports(problem, fallback.default_config, limits).ok) << problem.key();
  }
}

TEST(SoftmaxXentVariantsCatalogue, WorkspacesHoldWhatEachVariantKeeps) {
  const Problem problem = xent_problem(DType::bf16, 4096, 32000);
  auto bytes = [&](const char* name) {
    const Variant& v = *catalogue().find_variant("softmax_xent", name);
    return v.workspace_bytes ? v.workspace_bytes(problem, v.default_config) : 0;
  };
  EXPECT_EQ(bytes("unfused"), 4u * 4096 * (32000 + 2));  // f32 probabilities, row losses, complements
  for (const char* name :
       {"fused_warp_row", "fused_block_row", "fused_smem_row", "fused_register_row", "fused_cluster_row"})
    EXPECT_EQ(bytes(name), 4u * 4096) << name;  // the row losses
  EXPECT_EQ(bytes("fused_ring_row"), 4u * 4096 + 16);  // and the counter it claims rows from
}

TEST(SoftmaxXentVariantsCatalogue, ClusterRowNeedsSm90AndCoversTheRowWithEveryBlock) {
  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_cluster_row");
  const DeviceLimits h200 = nominal_device_limits();
  // 32000 f32 classes are 8000 packs: 4 blocks x 256 threads x 8 packs = 8192 hold them.
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8192, 32000), v.default_config, h200).ok);
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  const Support old_device = v.supports(xent_problem(DType::f32, 8192, 32000), v.default_config, t4);
  EXPECT_FALSE(old_device.ok);
  EXPECT_NE(old_device.reason.find("sm_90"), std::string::npos) << old_device.reason;
  // Too small a config, and one twice as large as needed, are refused.
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 32776), v.default_config, h200).ok);  // 8194 packs
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 16000), v.default_config, h200).ok);  // 4000 packs
  // One pack per thread: the last block of the cluster must get some of the row.
  const Config thin({{"blocks_per_row", 4}, {"block_size", 128}, {"packs_per_thread", 1}});
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8, 4 * 4 * 128), thin, h200).ok);   // 512 packs
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8, 4 * 385), thin, h200).ok);       // 385 packs
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 4 * 384), thin, h200).ok);      // 3 blocks would do
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 4 * 512 + 4), thin, h200).ok);  // 513 packs
  // Every supported config of the target shapes covers the row with every block of the cluster.
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Problem problem = xent_problem(dtype, 8192, 32000);
    const std::int64_t packs = 32000 / (16 / static_cast<std::int64_t>(dtype_size(dtype)));
    int supported = 0;
    for (const Config& c : v.params.enumerate()) {
      if (!v.supports(problem, c, h200).ok) continue;
      ++supported;
      const std::int64_t threads = c.at("blocks_per_row") * c.at("block_size");
      EXPECT_GE(threads * c.at("packs_per_thread"), packs) << c.key();
      EXPECT_GT(packs, (c.at("blocks_per_row") - 1) * c.at("block_size")) << c.key();
    }
    EXPECT_GE(supported, 8) << dtype_name(dtype);
    EXPECT_LE(supported, 16) << dtype_name(dtype);  // a sweep of the large shapes stays short
  }
}

TEST(SoftmaxXentVariantsCatalogue, RegisterRowHoldsExactlyTheRowsThatFit) {
  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_register_row");
  const DeviceLimits limits = nominal_device_limits();
  const Config config({{"threads_per_row", 256}, {"block_size", 256}, {"packs_per_thread", 16}});
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 8, 32000), config, limits).ok);   // 4000 packs of 8 <= 4096
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 8, 32775), config, limits).ok);   // 4096 packs + 7 edge elements
  EXPECT_FALSE(v.supports(xent_problem(DType::bf16, 8, 32776), config, limits).ok);  // 4097 packs
  const Support wasteful = v.supports(xent_problem(DType::bf16, 8, 1000), config, limits);
  EXPECT_FALSE(wasteful.ok);
  EXPECT_NE(wasteful.reason.find("half the packs"), std::string::npos) << wasteful.reason;
  // Groups narrower than a row's edges still hold it: 17 f32 classes in 4 threads x 1 pack.
  const Config narrow({{"threads_per_row", 4}, {"block_size", 128}, {"packs_per_thread", 1}});
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 65536, 17), narrow, limits).ok);
}

TEST(SoftmaxXentVariantsCatalogue, RegisterRowSpaceRespectsItsConstraint) {
  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_register_row");
  const auto configs = v.params.enumerate();
  EXPECT_LT(static_cast<std::int64_t>(configs.size()), v.params.raw_size());
  for (const Config& c : configs) EXPECT_LE(c.at("threads_per_row"), c.at("block_size")) << c.key();
}

TEST(SoftmaxXentVariantsCatalogue, SmemRowStagesRowsThatFitTheDevicesSharedMemory) {
  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_smem_row");
  const DeviceLimits h200 = nominal_device_limits();                                                // 227 KB per block
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 16384, 50257), v.default_config, h200).ok);       // 201 KB
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 8, 100000), v.default_config, h200).ok);         // 200 KB
  const Support too_wide = v.supports(xent_problem(DType::f32, 8, 60000), v.default_config, h200);  // 240 KB
  EXPECT_FALSE(too_wide.ok);
  EXPECT_NE(too_wide.reason.find("shared memory"), std::string::npos) << too_wide.reason;
  DeviceLimits t4 = h200;
  t4.shared_memory_per_block_optin = 64 * 1024;
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 8, 32000), v.default_config, t4).ok);  // 62.5 KB
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 32000), v.default_config, t4).ok);  // 125 KB
}

TEST(SoftmaxXentVariantsCatalogue, RingRowTakesRowsWhoseBodyFitsTheRing) {
  namespace kx = kernels::softmax_xent;
  // 228 KiB per SM, 1 KiB reserved per block, 227 KiB opt-in (sm_90), less the static 1 KiB;
  // each slot also takes two 8-byte mbarriers and a 16-byte RowMeta.
  EXPECT_EQ(kx::ring_slots(16384, 1, 228 * 1024, 227 * 1024, 1024), 226 * 1024 / (16384 + 32));  // 14
  EXPECT_EQ(kx::ring_slots(16384, 2, 228 * 1024, 227 * 1024, 1024), 112 * 1024 / (16384 + 32));  // 6
  EXPECT_EQ(kx::ring_slots(4096, 1, 64 * 1024, 48 * 1024, 1024), 47 * 1024 / (4096 + 32));         // capped by opt-in
  EXPECT_EQ(kx::ring_slots(32768, 64, 228 * 1024, 227 * 1024, 1024), 0);                          // nothing left
  // The worst-aligned row's body: classes / pack whole packs.
  EXPECT_EQ(kx::ring_chunks_per_row(32000, 4, 16384), 8);  // 128000 bytes
  EXPECT_EQ(kx::ring_chunks_per_row(32000, 2, 16384), 4);  // 64000 bytes
  EXPECT_EQ(kx::ring_chunks_per_row(3, 4, 4096), 0);       // no whole pack: edges only
  EXPECT_EQ(kx::ring_chunks_per_row(1025, 4, 4096), 1);
  // The row losses, then the claims counter 16-byte aligned.
  EXPECT_EQ(kx::ring_claims_offset(8192), 8192u * 4);
  EXPECT_EQ(kx::ring_claims_offset(3), 16u);
  EXPECT_EQ(kx::ring_workspace_bytes(3), 32u);

  const Variant& v = *catalogue().find_variant("softmax_xent", "fused_ring_row");
  const DeviceLimits h200 = nominal_device_limits();
  const Config one({{"consumer_warps", 8}, {"chunk_bytes", 16384}, {"blocks_per_sm", 1}, {"warp_per_row", 0},
                    {"claim_rows", 1}});
  const Config two({{"consumer_warps", 8}, {"chunk_bytes", 16384}, {"blocks_per_sm", 2}, {"warp_per_row", 0},
                    {"claim_rows", 0}});
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8192, 32000), one, h200).ok);  // 8 of 14 slots
  const Support f32_two = v.supports(xent_problem(DType::f32, 8192, 32000), two, h200);
  EXPECT_FALSE(f32_two.ok);  // 8 of 6
  EXPECT_NE(f32_two.reason.find("slots"), std::string::npos) << f32_two.reason;
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 8192, 32000), two, h200).ok);   // 4 of 6
  EXPECT_TRUE(v.supports(xent_problem(DType::f16, 65536, 17), two, h200).ok);      // 2 packs: 1 slot
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8, 60000), one, h200).ok);      // 240000 bytes: 15 slots
  // A row per warp: the body in one slot, and not in half of one past the smallest slot.
  auto per_warp = [](std::int64_t chunk) {
    return Config({{"consumer_warps", 8}, {"chunk_bytes", chunk}, {"blocks_per_sm", 1}, {"warp_per_row", 1},
                   {"claim_rows", 0}});
  };
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8192, 1024), per_warp(4096), h200).ok);    // 4096-byte body
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8192, 1024), per_warp(8192), h200).ok);   // half the slot
  EXPECT_TRUE(v.supports(xent_problem(DType::f32, 8192, 2049), per_warp(8192), h200).ok);    // 8192 + edges
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8192, 1028), per_warp(4096), h200).ok);   // 4112 bytes: 2 slots
  EXPECT_TRUE(v.supports(xent_problem(DType::f16, 65536, 17), per_warp(4096), h200).ok);     // tiny rows
  EXPECT_FALSE(v.supports(xent_problem(DType::bf16, 8192, 32000), per_warp(32768), h200).ok);  // 2 slots
  // Each slot one warp's: 3 blocks per SM leave 2 slots of 32 KiB, fewer than 8 warps.
  const Config crowded({{"consumer_warps", 8}, {"chunk_bytes", 32768}, {"blocks_per_sm", 3}, {"warp_per_row", 1},
                        {"claim_rows", 0}});
  const Support too_few = v.supports(xent_problem(DType::f32, 64, 5000), crowded, h200);  // 20000-byte body
  EXPECT_FALSE(too_few.ok);
  EXPECT_NE(too_few.reason.find("fewer slots"), std::string::npos) << too_few.reason;
  // Warp mode takes its rows in a fixed order: no claiming.
  Config claiming = per_warp(4096);
  claiming.set("claim_rows", 1);
  EXPECT_FALSE(v.supports(xent_problem(DType::f32, 8192, 1024), claiming, h200).ok);
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  const Support old_device = v.supports(xent_problem(DType::bf16, 8192, 32000), one, t4);
  EXPECT_FALSE(old_device.ok);
  EXPECT_NE(old_device.reason.find("sm_90"), std::string::npos) << old_device.reason;
}

TEST(SoftmaxXentVariantsCatalogue, UnfusedRefusesProblemsWhoseProbabilitiesExceedTheDevice) {
  const Variant& v = *catalogue().find_variant("softmax_xent", "unfused");
  DeviceLimits small = nominal_device_limits();
  small.global_memory_bytes = std::int64_t{16} << 30;
  EXPECT_TRUE(v.supports(xent_problem(DType::bf16, 4096, 32000), v.default_config, small).ok);           // 0.5 + 0.5 GB
  const Support too_big = v.supports(xent_problem(DType::bf16, 65536, 50257), v.default_config, small);  // 13 + 13 GB
  EXPECT_FALSE(too_big.ok);
  EXPECT_NE(too_big.reason.find("memory"), std::string::npos) << too_big.reason;
}

TEST(SoftmaxXentVariantsCatalogue, LaunchRefusesAWorkspaceSmallerThanAskedWithoutTouchingTheDevice) {
  const Problem problem = xent_problem(DType::f32, 64, 10);
  LibraryHandles libraries;
  std::vector<void*> tensors(4, nullptr);
  for (const char* name : {"unfused", "fused_warp_row", "fused_block_row", "fused_smem_row", "fused_register_row",
                           "fused_cluster_row", "fused_ring_row"}) {
    const Variant& v = *catalogue().find_variant("softmax_xent", name);
    const LaunchArgs args{problem, v.default_config, tensors, nullptr, libraries, nullptr, 0};
    const LaunchStatus status = v.launch(args);
    EXPECT_FALSE(status.ok) << name;
    EXPECT_FALSE(status.unsupported) << name;
    EXPECT_NE(status.message.find("workspace"), std::string::npos) << name << ": " << status.message;
  }
}

}  // namespace
}  // namespace shapetune
