// The tensor-core GEMM variants in the catalogue, checked without a GPU: registration on the
// twelve GEMM primitives, the tile tables and parameter spaces, the shared-memory sizes the
// catalogue and the kernels agree on, and what supports() refuses and why.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "kernels/gemm/tensor_core.cuh"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

namespace ktc = kernels::gemm_tensor_core;
using kernels::gemm::Layout;

const char* const kVariants[] = {"mma_sync", "mma_sync_tf32"};

Problem gemm_problem(const std::string& primitive, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {primitive, dtype, Shape({{"m", m}, {"n", n}, {"k", k}})};
}

bool mentions(const std::string& text, const std::string& word) { return text.find(word) != std::string::npos; }

const Variant& variant(const std::string& primitive, const char* name) {
  const Variant* v = catalogue().find_variant(primitive, name);
  if (!v) throw std::runtime_error(primitive + " has no variant " + name);
  return *v;
}

TEST(GemmTensorCoreRegistration, NeedsTheGemmPrimitivesFirst) {
  Catalogue empty;
  EXPECT_THROW(register_gemm_tensor_core(empty), std::logic_error);
}

TEST(GemmTensorCoreRegistration, BothVariantsOnEveryGemmPrimitive) {
  for (const std::string& primitive : gemm_primitive_names()) {
    for (const char* name : kVariants) {
      const Variant& v = variant(primitive, name);
      EXPECT_FALSE(v.baseline) << primitive << "/" << name;
      EXPECT_TRUE(v.launch) << primitive << "/" << name;
      EXPECT_FALSE(v.workspace_bytes) << primitive << "/" << name;
      EXPECT_FALSE(v.description.empty()) << primitive << "/" << name;
      EXPECT_TRUE(v.params.contains(v.default_config)) << primitive << "/" << name;
    }
  }
}

TEST(GemmTensorCoreRegistration, SpacesAreTheCuratedTilesTimesTwoToFourStages) {
  const Variant& mma = variant("gemm.nn", "mma_sync");
  const Variant& tf32 = variant("gemm.nn", "mma_sync_tf32");
  EXPECT_EQ(mma.params.enumerate().size(), ktc::kTiles16.size() * 3);
  EXPECT_EQ(tf32.params.enumerate().size(), ktc::kTilesTf32.size() * 3);
  for (const Variant* v : {&mma, &tf32}) {
    ASSERT_EQ(v->params.axes().size(), 2u);
    EXPECT_EQ(v->params.axes()[0].name, "tile");
    EXPECT_EQ(v->params.axes()[1].name, "stages");
    EXPECT_EQ(v->params.axes()[1].values, (std::vector<std::int64_t>{2, 3, 4}));
    // The axis description lists the tiles, so `shapetune list` says what an index means.
    EXPECT_TRUE(mentions(v->params.axes()[0].description, "0: 64x64x")) << v->params.axes()[0].description;
  }
}

TEST(GemmTensorCoreTiles, EveryTileSplitsIntoWholeMmaTilesPerWarp) {
  auto check = [](const ktc::TileShape& t, int mma_k) {
    const std::string what = std::to_string(t.block_m) + "x" + std::to_string(t.block_n) + "x" + std::to_string(t.block_k);
    EXPECT_EQ(t.block_m % t.warps_m, 0) << what;
    EXPECT_EQ(t.block_n % t.warps_n, 0) << what;
    EXPECT_EQ(t.block_m / t.warps_m % 16, 0) << what;
    EXPECT_EQ(t.block_n / t.warps_n % 32, 0) << what;  // one lane per column of a staged slice
    EXPECT_EQ(t.block_k % mma_k, 0) << what;
    EXPECT_LE(t.threads(), 256) << what;
  };
  for (const ktc::TileShape& t : ktc::kTiles16) check(t, 16);
  for (const ktc::TileShape& t : ktc::kTilesTf32) check(t, 8);
}

TEST(GemmTensorCoreTiles, SharedBytesAreStagesTimesBothTilesPlusTf32Padding) {
  const ktc::TileShape big{128, 256, 32, 2, 4};
  for (Layout layout : {Layout::nn, Layout::nt, Layout::tn})
    EXPECT_EQ(ktc::shared_bytes(big, 2, layout, 3), 3u * (128 * 32 + 32 * 256) * 2);
  // TF32 operands whose K is not contiguous get 32 bytes of padding per shared row (of K).
  const ktc::TileShape small{64, 64, 16, 2, 2};
  EXPECT_EQ(ktc::shared_bytes(small, 4, Layout::nt, 2), 2u * (64 + 64) * 16 * 4);
  EXPECT_EQ(ktc::shared_bytes(small, 4, Layout::nn, 2), 2u * (64 * 16 * 4 + 16 * (64 * 4 + 32)));
  EXPECT_EQ(ktc::shared_bytes(small, 4, Layout::tn, 2), 2u * 2 * 16 * (64 * 4 + 32));
}

TEST(GemmTensorCoreSupports, DtypesAreTheirsOnlyAndF32NeverGetsTensorCores) {
  const DeviceLimits limits = nominal_device_limits();
  for (const std::string& primitive : gemm_primitive_names()) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::tf32}) {
      const Problem p = gemm_problem(primitive, dtype, 127, 129, 31);
      for (const char* name : kVariants) {
        const Variant& v = variant(primitive, name);
        const bool mine = std::string(name) == "mma_sync" ? (dtype == DType::f16 || dtype == DType::bf16)
                                                          : dtype == DType::tf32;
        const Support s = v.supports(p, v.default_config, limits);
        EXPECT_EQ(s.ok, mine) << p.key() << " " << name << ": " << s.reason;
        if (dtype == DType::f32) {
          EXPECT_TRUE(mentions(s.reason, "TF32")) << s.reason;
        }
      }
    }
  }
}

TEST(GemmTensorCoreSupports, RefusesDevicesBelowSm80) {
  DeviceLimits t4 = nominal_device_limits();
  t4.compute_capability = 75;
  t4.shared_memory_per_block_optin = 64 * 1024;
  for (const char* name : kVariants) {
    const Variant& v = variant("gemm_bias.nt", name);
    const DType dtype = std::string(name) == "mma_sync" ? DType::f16 : DType::tf32;
    const Support s = v.supports(gemm_problem("gemm_bias.nt", dtype, 256, 256, 256), v.default_config, t4);
    EXPECT_FALSE(s.ok) << name;
    EXPECT_TRUE(mentions(s.reason, "sm_80")) << s.reason;
  }
}

TEST(GemmTensorCoreSupports, SharedMemoryMustFitTheDevicesOptInLimit) {
  const Problem p = gemm_problem("gemm.nn", DType::bf16, 4096, 4096, 4096);
  const Variant& v = variant("gemm.nn", "mma_sync");
  // 128x256x64, 4 stages: 4 * (128 + 256) * 64 * 2 = 192 KiB: an H100/H200 (227 KiB) takes it,
  // an A100 (163 KiB) does not, nor the 3-stage one (144 KiB) on an RTX 30x0 (99 KiB).
  const Config largest({{"tile", 7}, {"stages", 4}});
  ASSERT_EQ(ktc::kTiles16[7].block_k, 64);
  DeviceLimits h100 = nominal_device_limits();
  EXPECT_TRUE(v.supports(p, largest, h100).ok);
  DeviceLimits a100 = h100;
  a100.compute_capability = 80;
  a100.shared_memory_per_block_optin = 163 * 1024;
  const Support refused = v.supports(p, largest, a100);
  EXPECT_FALSE(refused.ok);
  EXPECT_TRUE(mentions(refused.reason, "196608 bytes of shared memory")) << refused.reason;
  DeviceLimits ga10x = a100;
  ga10x.compute_capability = 86;
  ga10x.shared_memory_per_block_optin = 99 * 1024;
  EXPECT_FALSE(v.supports(p, Config({{"tile", 7}, {"stages", 3}}), ga10x).ok);
  EXPECT_TRUE(v.supports(p, Config({{"tile", 7}, {"stages", 2}}), ga10x).ok);  // 96 KiB
}

TEST(GemmTensorCoreSupports, EveryConfigTakesAwkwardShapesOnHopper) {
  const DeviceLimits limits = nominal_device_limits();
  const std::int64_t shapes[][3] = {{1, 1, 1},  {17, 33, 65}, {127, 129, 31}, {1, 129, 65},
                                    {127, 1, 1}, {70000, 3, 5}, {8192, 8192, 8192}};
  for (const std::string& primitive : gemm_primitive_names()) {
    for (const auto& s : shapes) {
      for (DType dtype : {DType::f16, DType::bf16, DType::tf32}) {
        const Variant& v = variant(primitive, dtype == DType::tf32 ? "mma_sync_tf32" : "mma_sync");
        const Problem p = gemm_problem(primitive, dtype, s[0], s[1], s[2]);
        for (const Config& c : v.params.enumerate()) {
          const Support support = v.supports(p, c, limits);
          EXPECT_TRUE(support.ok) << p.key() << " " << c.key() << ": " << support.reason;
        }
      }
    }
  }
}

TEST(GemmTensorCoreSupports, RefusesGridsBeyondTheKernelsIntArithmetic) {
  const Variant& v = variant("gemm.nt", "mma_sync");
  const Config smallest({{"tile", 0}, {"stages", 2}});
  // 2^20 x 2^20 outputs in 64 x 64 tiles: 2^28 blocks, fine; 2^24 x 2^20: 2^32, not.
  EXPECT_TRUE(v.supports(gemm_problem("gemm.nt", DType::f16, 1 << 20, 1 << 20, 8), smallest, nominal_device_limits()).ok);
  const Support s = v.supports(gemm_problem("gemm.nt", DType::f16, 1 << 24, 1 << 20, 8), smallest, nominal_device_limits());
  EXPECT_FALSE(s.ok);
  EXPECT_TRUE(mentions(s.reason, "blocks")) << s.reason;
}

}  // namespace
}  // namespace shapetune
