// The wgmma GEMM variant in the catalogue, checked without a GPU: registration on the twelve
// GEMM primitives, the tile table and parameter space, the shared-memory sizes, and what
// supports() refuses and why (dtypes, tf32 outside layout nt, devices other than sm_90, leading
// dimensions TMA cannot address, shared memory past the device's opt-in limit).
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "kernels/gemm/wgmma.cuh"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

namespace kwg = kernels::gemm_wgmma;
using kernels::gemm::Layout;

Problem gemm_problem(const std::string& primitive, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {primitive, dtype, Shape({{"m", m}, {"n", n}, {"k", k}})};
}

const Variant& wgmma(const std::string& primitive) {
  const Variant* v = catalogue().find_variant(primitive, "wgmma");
  if (!v) throw std::runtime_error(primitive + " has no variant wgmma");
  return *v;
}

TEST(GemmWgmmaRegistration, NeedsTheGemmPrimitivesFirst) {
  Catalogue empty;
  EXPECT_THROW(register_gemm_wgmma(empty), std::logic_error);
}

TEST(GemmWgmmaRegistration, OnEveryGemmPrimitive) {
  for (const std::string& primitive : gemm_primitive_names()) {
    const Variant& v = wgmma(primitive);
    EXPECT_FALSE(v.baseline) << primitive;
    EXPECT_TRUE(v.launch) << primitive;
    EXPECT_FALSE(v.workspace_bytes) << primitive;
    EXPECT_CONTAINS(v.description, "wgmma");
    EXPECT_CONTAINS(v.description, "TMA");
    EXPECT_TRUE(v.params.contains(v.default_config)) << primitive;
  }
}

TEST(GemmWgmmaRegistration, SpaceIsTheTilesTimesThreeToFiveStagesTimesPersistence) {
  const Variant& v = wgmma("gemm.nn");
  EXPECT_EQ(v.params.enumerate().size(), kwg::kTiles.size() * 3 * 2);
  ASSERT_EQ(v.params.axes().size(), 3u);
  EXPECT_EQ(v.params.axes()[0].name, "tile");
  EXPECT_EQ(v.params.axes()[1].name, "stages");
  EXPECT_EQ(v.params.axes()[1].values, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(v.params.axes()[2].name, "persistent");
  EXPECT_EQ(v.params.axes()[2].values, (std::vector<std::int64_t>{0, 1}));
  // The axis description lists the tiles, so `shapetune list` says what an index means.
  EXPECT_CONTAINS(v.params.axes()[0].description, "0: 128x256x64");
  EXPECT_CONTAINS(v.params.axes()[0].description, "64 16-bit or 32 tf32 elements");
  // The default: the 128x256 tile with 3 stages (the fastest measured at bf16 8192^3).
  EXPECT_EQ(v.default_config.at("tile"), 0);
  EXPECT_EQ(v.default_config.at("stages"), 3);
  // A block a tile: what every winner recorded before the axis existed ran.
  EXPECT_EQ(v.default_config.at("persistent"), 0);
}

TEST(GemmWgmmaTiles, EveryTileIsWholeWgmmaTilesAndTmaBoxes) {
  for (const kwg::TileShape& t : kwg::kTiles) {
    const std::string what = std::to_string(t.block_m) + "x" + std::to_string(t.block_n);
    EXPECT_EQ(t.block_m % kwg::kConsumerWarpgroups, 0) << what;
    EXPECT_EQ(t.warpgroup_m() % 64, 0) << what;  // m64 wgmma tiles
    EXPECT_TRUE(t.block_n == 64 || t.block_n == 128 || t.block_n == 256) << what;
    EXPECT_LE(t.block_m, 256) << what;  // a K-major operand is one TMA box of up to 256 rows
  }
  EXPECT_EQ(kwg::kThreads, 384);
}

TEST(GemmWgmmaTiles, SharedBytesAreStagesOfBothTilesPlusBarriersAndAlignment) {
  const kwg::TileShape big{128, 256};
  EXPECT_EQ(kwg::stage_bytes(big), (128u + 256u) * 64 * 2);
  // A stage holds 128 bytes of K a row whatever the element: 64 16-bit or 32 fp32 (TF32) elements.
  EXPECT_EQ(kwg::block_k(2), 64);
  EXPECT_EQ(kwg::block_k(4), 32);
  EXPECT_EQ(kwg::shared_bytes(big, 4), 4u * ((128 + 256) * 64 * 2 + 16) + 1024);
  EXPECT_EQ(kwg::shared_bytes(kwg::TileShape{128, 64}, 3), 3u * ((128 + 64) * 64 * 2 + 16) + 1024);
  // Persistent: the eight consumer warps' 16 staged rows of block_n + 8 floats besides.
  EXPECT_EQ(kwg::shared_bytes(kwg::TileShape{128, 128}, 4, true),
            4u * ((128 + 128) * 64 * 2 + 16) + 1024 + 8 * 16 * (128 + 8) * 4);
}

// f16 and bf16 in every layout; tf32 in nt alone (TF32 wgmma has no transpose: both operands
// K-major); f32 never gets TF32 products.
TEST(GemmWgmmaSupports, F16AndBf16EverywhereTf32InNtAndF32NeverGetsTensorCores) {
  const DeviceLimits limits = nominal_device_limits();
  for (const std::string& primitive : gemm_primitive_names()) {
    const bool nt = parse_gemm_primitive(primitive)->layout == Layout::nt;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::tf32}) {
      const Problem p = gemm_problem(primitive, dtype, 128, 136, 72);
      const Variant& v = wgmma(primitive);
      const Support s = v.supports(p, v.default_config, limits);
      EXPECT_EQ(s.ok, dtype == DType::f16 || dtype == DType::bf16 || (dtype == DType::tf32 && nt))
          << p.key() << ": " << s.reason;
      if (dtype == DType::f32) {
        EXPECT_CONTAINS(s.reason, "TF32");
      }
      if (dtype == DType::tf32 && !nt) {
        EXPECT_CONTAINS(s.reason, "tf32 takes layout nt only");
      }
    }
  }
}

TEST(GemmWgmmaSupports, RefusesEveryDeviceButSm90) {
  const Variant& v = wgmma("gemm_bias.nt");
  const Problem p = gemm_problem("gemm_bias.nt", DType::bf16, 256, 256, 256);
  for (int cc : {75, 80, 86, 89, 100, 120}) {
    DeviceLimits other = nominal_device_limits();
    other.compute_capability = cc;
    const Support s = v.supports(p, Config({{"tile", 3}, {"stages", 3}, {"persistent", 0}}), other);
    EXPECT_FALSE(s.ok) << cc;
    EXPECT_CONTAINS(s.reason, "sm_90a");
  }
  EXPECT_TRUE(v.supports(p, v.default_config, nominal_device_limits()).ok);
}

// TMA strides are whole 16-byte units: lda (k in nn and nt, m in tn) and ldb (n in nn and tn,
// k in nt) multiples of 8 elements; the reason names the extent and the layout.
TEST(GemmWgmmaSupports, RefusesLeadingDimensionsTmaCannotAddress) {
  const DeviceLimits limits = nominal_device_limits();
  struct Refusal {
    const char* primitive;
    std::int64_t m, n, k;
    const char* reason;
  };
  const Refusal refusals[] = {{"gemm.nn", 64, 64, 65, "k = 65 in nn"},  {"gemm.nn", 64, 12, 64, "n = 12 in nn"},
                              {"gemm.nt", 64, 13, 33, "k = 33 in nt"},  {"gemm.tn", 17, 64, 64, "m = 17 in tn"},
                              {"gemm.tn", 64, 20, 64, "n = 20 in tn"},  {"gemm_bias_gelu.nn", 1, 8, 1, "k = 1 in nn"}};
  for (const Refusal& r : refusals) {
    const Variant& v = wgmma(r.primitive);
    const Support s = v.supports(gemm_problem(r.primitive, DType::f16, r.m, r.n, r.k), v.default_config, limits);
    EXPECT_FALSE(s.ok) << r.primitive;
    EXPECT_CONTAINS(s.reason, "TMA needs lda and ldb multiples of 8 elements (16 bytes)");
    EXPECT_CONTAINS(s.reason, r.reason);
  }
  // fp32 (tf32) rows are 16-byte units every 4 elements: k = 36 is addressable there, k = 34 not.
  const Variant& nt = wgmma("gemm_bias.nt");
  EXPECT_TRUE(nt.supports(gemm_problem("gemm_bias.nt", DType::tf32, 64, 13, 36), nt.default_config, limits).ok);
  EXPECT_FALSE(nt.supports(gemm_problem("gemm_bias.nt", DType::f16, 64, 13, 36), nt.default_config, limits).ok);
  const Support tf32 = nt.supports(gemm_problem("gemm_bias.nt", DType::tf32, 64, 13, 34), nt.default_config, limits);
  EXPECT_FALSE(tf32.ok);
  EXPECT_CONTAINS(tf32.reason, "TMA needs lda and ldb multiples of 4 elements (16 bytes); k = 34 in nt");
  // What TMA can address, however small or ragged against the tiles: M (or N in nt) need not be
  // a multiple of anything where it is no leading dimension.
  const std::int64_t fine[][4] = {{0, 1, 8, 8}, {1, 17, 13, 72}, {2, 8, 16, 13}, {0, 127, 136, 264}, {2, 8, 8, 8}};
  for (const auto& f : fine) {
    const std::string primitive = std::string("gemm.") + std::string(kGemmLayouts[f[0]]);
    const Variant& v = wgmma(primitive);
    const Support s = v.supports(gemm_problem(primitive, DType::bf16, f[1], f[2], f[3]), v.default_config, limits);
    EXPECT_TRUE(s.ok) << primitive << " " << f[1] << "x" << f[2] << "x" << f[3] << ": " << s.reason;
  }
}

TEST(GemmWgmmaSupports, SharedMemoryMustFitTheDevicesOptInLimit) {
  const Problem p = gemm_problem("gemm.nn", DType::bf16, 4096, 4096, 4096);
  const Variant& v = wgmma("gemm.nn");
  const DeviceLimits h200 = nominal_device_limits();  // 227 KiB
  // 128x256, 5 stages: 5 * (48 KiB + 16) + 1 KiB = 246864 bytes: past any Hopper's 227 KiB.
  const auto config = [](int tile, int stages, int persistent = 0) {
    return Config({{"tile", tile}, {"stages", stages}, {"persistent", persistent}});
  };
  const Support refused = v.supports(p, config(0, 5), h200);
  EXPECT_FALSE(refused.ok);
  EXPECT_CONTAINS(refused.reason, "246864 bytes of shared memory");
  EXPECT_TRUE(v.supports(p, config(0, 4), h200).ok);
  EXPECT_TRUE(v.supports(p, config(2, 5), h200).ok);
  // Persistent 128x256: 3 * (48 KiB + 16) + 1 KiB + 135168 bytes of staging = 283696.
  const Support staging = v.supports(p, config(0, 3, 1), h200);
  EXPECT_FALSE(staging.ok);
  EXPECT_CONTAINS(staging.reason, "283696 bytes of shared memory");
  EXPECT_TRUE(v.supports(p, config(2, 4, 1), h200).ok);   // 200792 bytes
  EXPECT_FALSE(v.supports(p, config(2, 5, 1), h200).ok);  // 233576 bytes
  DeviceLimits smaller = h200;
  smaller.shared_memory_per_block_optin = 160 * 1024;
  EXPECT_FALSE(v.supports(p, config(0, 4), smaller).ok);
  EXPECT_TRUE(v.supports(p, config(0, 3), smaller).ok);  // 148528 bytes
}

// On an H100/H200 every config takes every addressable shape but for shared memory: a block a tile,
// all but the two 5-stage ones of the 48 KiB-a-stage tiles (10 of 12); persistent, whose staging
// is 135 KiB at 256 columns and 68 KiB at 128, 256x128 at 3 stages, 128x128 at 3-4, 128x64 at 3-5
// (6 of 12). The default takes them all.
TEST(GemmWgmmaSupports, DefaultAndEveryFittingConfigTakeAddressableShapes) {
  const DeviceLimits limits = nominal_device_limits();
  const std::int64_t shapes[][3] = {{8, 8, 8}, {64, 8, 8}, {136, 264, 520}, {8192, 8192, 8192}, {65536, 8, 8}};
  for (const std::string& primitive : gemm_primitive_names()) {
    const Variant& v = wgmma(primitive);
    for (const auto& s : shapes) {
      for (DType dtype : {DType::f16, DType::bf16}) {
        const Problem p = gemm_problem(primitive, dtype, s[0], s[1], s[2]);
        const Support def = v.supports(p, v.default_config, limits);
        EXPECT_TRUE(def.ok) << p.key() << ": " << def.reason;
        int fit = 0;
        for (const Config& c : v.params.enumerate()) fit += v.supports(p, c, limits).ok;
        EXPECT_EQ(fit, 10 + 6) << p.key();
      }
    }
  }
}

TEST(GemmWgmmaSupports, RefusesGridsBeyondTheKernelsIntArithmetic) {
  const Variant& v = wgmma("gemm.nt");
  const Config smallest({{"tile", 3}, {"stages", 3}, {"persistent", 0}});
  // 2^20 x 2^20 outputs in 128 x 64 tiles: 2^27 blocks, fine; 2^24 x 2^20: 2^31, not.
  EXPECT_TRUE(v.supports(gemm_problem("gemm.nt", DType::f16, 1 << 20, 1 << 20, 8), smallest, nominal_device_limits()).ok);
  const Support s =
      v.supports(gemm_problem("gemm.nt", DType::f16, 1 << 24, 1 << 20, 8), smallest, nominal_device_limits());
  EXPECT_FALSE(s.ok);
  EXPECT_CONTAINS(s.reason, "blocks");
}

}  // namespace
}  // namespace shapetune
