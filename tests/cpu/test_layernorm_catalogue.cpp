// LayerNorm and residual+LayerNorm in the catalogue, without a GPU: references, cost models,
// tolerances and constraints.
#include <gtest/gtest.h>

#include <cmath>

#include "baselines/reference.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

TEST(LayerNormReference, NormalizesEachRowThenScalesAndShifts) {
  // Row {1, 2, 3, 4}: mean 2.5, biased variance 1.25.
  const std::vector<double> x = {1, 2, 3, 4}, gamma = {1, 2, 1, 1}, beta = {0, 0, 0, 10};
  std::vector<double> y(4);
  reference::layernorm(1, 4, x.data(), gamma.data(), beta.data(), 0.0, y.data());
  const double s = std::sqrt(1.25);
  EXPECT_NEAR(y[0], -1.5 / s, 1e-15);
  EXPECT_NEAR(y[1], 2 * -0.5 / s, 1e-15);
  EXPECT_NEAR(y[2], 0.5 / s, 1e-15);
  EXPECT_NEAR(y[3], 1.5 / s + 10, 1e-14);
}

TEST(LayerNormReference, EpsilonAndConstantRows) {
  const std::vector<double> x = {7, 7, 7}, gamma = {1, 1, 1}, beta = {0.25, -1, 3};
  std::vector<double> y(3);
  reference::layernorm(1, 3, x.data(), gamma.data(), beta.data(), 1e-5, y.data());
  for (int c = 0; c < 3; ++c) EXPECT_DOUBLE_EQ(y[c], beta[c]);
  // epsilon enters under the square root: var 1 + eps 3 -> divide by 2.
  const std::vector<double> two = {0, 2};
  std::vector<double> out(2);
  reference::layernorm(1, 2, two.data(), gamma.data(), std::vector<double>{0, 0}.data(), 3.0, out.data());
  EXPECT_DOUBLE_EQ(out[0], -0.5);
  EXPECT_DOUBLE_EQ(out[1], 0.5);
}

TEST(ResidualLayerNormReference, WritesTheRoundedSumAndNormalizesIt) {
  const std::vector<double> x = {1, 2, 3, 4}, r = {0.25, 0.25, 0.25, 0.25}, gamma(4, 1.0), beta(4, 0.0);
  std::vector<double> h(4), y(4), expected(4);
  auto to_integer = [](double v) { return std::round(v); };  // a stand-in rounding, to see that it is applied
  reference::residual_layernorm(1, 4, x.data(), r.data(), gamma.data(), beta.data(), 0.0, to_integer, h.data(),
                                y.data());
  EXPECT_EQ(h, (std::vector<double>{1, 2, 3, 4}));
  reference::layernorm(1, 4, h.data(), gamma.data(), beta.data(), 0.0, expected.data());
  EXPECT_EQ(y, expected);
}

TEST(LayerNormPrimitives, CostModelsCountTheLeastTraffic) {
  const Problem ln{"layernorm", DType::f32, Shape({{"rows", 65536}, {"cols", 4096}})};
  const Problem res{"residual_layernorm", DType::bf16, ln.shape};
  const double n = 65536.0 * 4096;
  EXPECT_DOUBLE_EQ(catalogue().find_primitive("layernorm")->cost(ln).bytes, (2 * n + 2 * 4096) * 4);
  EXPECT_DOUBLE_EQ(catalogue().find_primitive("residual_layernorm")->cost(res).bytes, (4 * n + 2 * 4096) * 2);
}

TEST(LayerNormPrimitives, EpsilonIsAScalarWithTheUsualDefault) {
  for (const char* name : {"layernorm", "residual_layernorm"}) {
    const Primitive& p = *catalogue().find_primitive(name);
    ASSERT_EQ(p.scalars.size(), 1u);
    EXPECT_EQ(p.scalars[0].name, "epsilon");
    EXPECT_DOUBLE_EQ(p.scalars[0].value, 1e-5);
  }
}

TEST(LayerNormVariantsCatalogue, LaddersBaselinesAndDefaults) {
  auto names = [](const char* primitive) {
    std::vector<std::string> out;
    for (const Variant* v : catalogue().variants(primitive)) out.push_back(v->name + (v->baseline ? "*" : ""));
    return out;
  };
  EXPECT_EQ(names("layernorm"), (std::vector<std::string>{"thread_row_two_pass", "warp_row_welford",
                                                          "block_row_welford", "vec_welford", "register_row",
                                                          "cudnn*"}));
  EXPECT_EQ(names("residual_layernorm"),
            (std::vector<std::string>{"unfused*", "fused_vec", "fused_register", "fused_ring",
                                      "fused_pipelined"}));
  const DeviceLimits limits = nominal_device_limits();
  for (const char* primitive : {"layernorm", "residual_layernorm"}) {
    const Primitive& p = *catalogue().find_primitive(primitive);
    const Variant& fallback = *catalogue().find_variant(primitive, p.default_variant);
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 4097}, {1 << 20, 7}, {2, 1 << 20}}) {
      const Problem problem{primitive, DType::bf16, Shape({{"rows", rows}, {"cols", cols}})};
      EXPECT_TRUE(fallback.supports(problem, fallback.default_config, limits).ok) << problem.key();
    }
    for (const Variant* v : catalogue().variants(primitive)) EXPECT_TRUE(v->params.contains(v->default_config)) << v->name;
  }
}

TEST(LayerNormVariantsCatalogue, RegisterCapacityAndRoundingFlag) {
  const DeviceLimits limits = nominal_device_limits();
  const Variant& reg = *catalogue().find_variant("layernorm", "register_row");
  const Config fits({{"threads_per_row", 256}, {"block_size", 256}, {"packs_per_thread", 4}});
  auto problem = [](DType t, std::int64_t cols) {
    return Problem{"layernorm", t, Shape({{"rows", 8}, {"cols", cols}})};
  };
  EXPECT_TRUE(reg.supports(problem(DType::f32, 4096), fits, limits).ok);    // 1024 packs of 4
  EXPECT_FALSE(reg.supports(problem(DType::f32, 4100), fits, limits).ok);   // 1025 packs
  const Config spills({{"threads_per_row", 64}, {"block_size", 256}, {"packs_per_thread", 16}});
  EXPECT_FALSE(reg.supports(problem(DType::f16, 8192), spills, limits).ok);  // 128 floats per thread
  EXPECT_TRUE(reg.supports(problem(DType::f32, 4096), spills, limits).ok);   // 64 floats

  // fused_ring: one row per block in registers, `stages` bodies of x and r in shared memory, sm_90 only.
  const Variant& ring = *catalogue().find_variant("residual_layernorm", "fused_ring");
  auto ring_config = [](std::int64_t block, std::int64_t packs, std::int64_t stages) {
    return Config({{"block_size", block}, {"packs_per_thread", packs}, {"stages", stages}, {"round_h", 1}});
  };
  auto residual = [](DType t, std::int64_t cols) {
    return Problem{"residual_layernorm", t, Shape({{"rows", 8}, {"cols", cols}})};
  };
  EXPECT_TRUE(ring.supports(residual(DType::bf16, 4096), ring_config(128, 4, 3), limits).ok);   // 512 packs
  EXPECT_FALSE(ring.supports(residual(DType::bf16, 4104), ring_config(128, 4, 3), limits).ok);  // 513 packs
  EXPECT_FALSE(ring.supports(residual(DType::f32, 4096), ring_config(256, 8, 3), limits).ok);   // half would do
  // f32 8192 wide: 32 KB of x and 32 KB of r a slot; 3 slots fit in 227 KB, 4 do not.
  EXPECT_TRUE(ring.supports(residual(DType::f32, 8192), ring_config(1024, 2, 3), limits).ok);
  const Support four = ring.supports(residual(DType::f32, 8192), ring_config(1024, 2, 4), limits);
  EXPECT_FALSE(four.ok);
  EXPECT_NE(four.reason.find("shared memory"), std::string::npos) << four.reason;
  DeviceLimits turing = limits;
  turing.compute_capability = 75;
  EXPECT_FALSE(ring.supports(residual(DType::bf16, 4096), ring_config(128, 4, 3), turing).ok);

  const Variant& fused = *catalogue().find_variant("residual_layernorm", "fused_vec");
  const Config rounded({{"threads_per_row", 32}, {"block_size", 256}, {"round_h", 1}});
  const Config unrounded({{"threads_per_row", 32}, {"block_size", 256}, {"round_h", 0}});
  const Problem f32{"residual_layernorm", DType::f32, Shape({{"rows", 8}, {"cols", 1024}})};
  const Problem f16{"residual_layernorm", DType::f16, f32.shape};
  // In f32 the two are the same kernel: only round_h=1 is timed.
  EXPECT_TRUE(fused.supports(f32, rounded, limits).ok);
  EXPECT_FALSE(fused.supports(f32, unrounded, limits).ok);
  // fused_vec normalizes the stored h, so its statistics must be of the rounded h.
  EXPECT_TRUE(fused.supports(f16, rounded, limits).ok);
  EXPECT_FALSE(fused.supports(f16, unrounded, limits).ok);
  const Variant& reg_fused = *catalogue().find_variant("residual_layernorm", "fused_register");
  const Config reg_unrounded({{"threads_per_row", 32}, {"block_size", 256}, {"packs_per_thread", 4}, {"round_h", 0}});
  EXPECT_TRUE(reg_fused.supports(f16, reg_unrounded, limits).ok);  // h stays unrounded in registers
}

// TechJam case 14's first LayerNorm (3200000 x 1024) is past what cuDNN finalises: refused before
// launch, so a nearest winner of `cudnn` gives way to the next candidate that runs.
TEST(LayerNormVariantsCatalogue, CudnnRefusesPast2To31Elements) {
  const Variant& cudnn = *catalogue().find_variant("layernorm", "cudnn");
  const DeviceLimits limits = nominal_device_limits();
  const Problem fits{"layernorm", DType::f16, Shape({{"rows", 2097151}, {"cols", 1024}})};
  const Problem past{"layernorm", DType::f16, Shape({{"rows", 3200000}, {"cols", 1024}})};
  EXPECT_TRUE(cudnn.supports(fits, cudnn.default_config, limits).ok);
  const Support s = cudnn.supports(past, cudnn.default_config, limits);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("2^31"), std::string::npos) << s.reason;
}

// fused_pipelined stages `stages` row bodies of x and r in shared memory: a config is pruned where
// they exceed what a block of this device may have, and only there.
TEST(LayerNormVariantsCatalogue, PipelinedPrunesConfigsPastSharedMemory) {
  const Variant& v = *catalogue().find_variant("residual_layernorm", "fused_pipelined");
  auto config = [](std::int64_t stages) {
    return Config({{"block_size", 256}, {"stages", stages}, {"round_h", 1}, {"streaming_stores", 1}});
  };
  auto problem = [](DType t, std::int64_t cols) {
    return Problem{"residual_layernorm", t, Shape({{"rows", 3}, {"cols", cols}})};
  };
  const DeviceLimits h200 = nominal_device_limits();  // 227 KB per block
  // bf16 4096 wide: 2 x 8 KB per stage; 32 KB in 2 stages, 48 KB in 3.
  EXPECT_TRUE(v.supports(problem(DType::bf16, 4096), config(3), h200).ok);
  // f32 12289 wide: 3072 packs of x and of r, 96 KB per stage: 2 stages fit, 3 (288 KB) do not.
  EXPECT_TRUE(v.supports(problem(DType::f32, 12289), config(2), h200).ok);
  const Support three = v.supports(problem(DType::f32, 12289), config(3), h200);
  EXPECT_FALSE(three.ok);
  EXPECT_NE(three.reason.find("shared memory"), std::string::npos) << three.reason;
  // At the boundary: 2 stages of f32 take 16 bytes per column, plus 384 of partials.
  const std::int64_t widest = (h200.shared_memory_per_block_optin - 384) / 16 / 4 * 4;
  EXPECT_TRUE(v.supports(problem(DType::f32, widest), config(2), h200).ok);
  EXPECT_FALSE(v.supports(problem(DType::f32, widest + 4), config(2), h200).ok);
  // A device with 64 KB per block (sm_75) takes bf16 4096 in 2 stages (32 KB), not 12288 (96 KB).
  DeviceLimits turing = h200;
  turing.compute_capability = 75;
  turing.shared_memory_per_block_optin = 64 * 1024;
  EXPECT_TRUE(v.supports(problem(DType::bf16, 4096), config(2), turing).ok);
  EXPECT_FALSE(v.supports(problem(DType::bf16, 12288), config(2), turing).ok);
  // Widths under a pack stage nothing (every element is an edge): always supported.
  EXPECT_TRUE(v.supports(problem(DType::bf16, 1), config(3), turing).ok);
  EXPECT_TRUE(v.supports(problem(DType::f32, 3), config(3), turing).ok);
}

TEST(LayerNormVariantsCatalogue, PipelinedSpaceIsSmallAndRoundsBothWays) {
  const Variant& v = *catalogue().find_variant("residual_layernorm", "fused_pipelined");
  const DeviceLimits limits = nominal_device_limits();
  const Problem bf16{"residual_layernorm", DType::bf16, Shape({{"rows", 65536}, {"cols", 4096}})};
  const Problem f32{"residual_layernorm", DType::f32, bf16.shape};
  auto supported = [&](const Problem& p) {
    int n = 0;
    for (const Config& c : v.params.enumerate()) n += v.supports(p, c, limits).ok;
    return n;
  };
  // 3 block sizes x 2 stage counts x 2 store hints, both roundings in bf16, round_h=1 alone in f32.
  EXPECT_EQ(supported(bf16), 24);
  EXPECT_EQ(supported(f32), 12);
  const Config unrounded({{"block_size", 256}, {"stages", 2}, {"round_h", 0}, {"streaming_stores", 1}});
  EXPECT_TRUE(v.supports(bf16, unrounded, limits).ok);  // h stays unrounded (as float) in the stage
  EXPECT_FALSE(v.supports(f32, unrounded, limits).ok);
  // Any number of rows: the grid is the device's resident blocks, whatever the rows.
  const Problem many{"residual_layernorm", DType::bf16, Shape({{"rows", std::int64_t{1} << 36}, {"cols", 4096}})};
  EXPECT_TRUE(v.supports(many, v.default_config, limits).ok);
}

}  // namespace
}  // namespace shapetune
