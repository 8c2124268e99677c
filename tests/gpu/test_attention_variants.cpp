// Every attention variant and config (cuDNN SDPA included) at awkward shapes, every mask, layout,
// padding and dtype, against the float64 reference on fresh inputs with poisoned outputs; the
// rounded primitives (a materialised attention's rounding points) against their rounded reference
// through every variant that computes them (naive, flash_mma).
#include <gtest/gtest.h>

#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t B, H, S, hd;
};

// One query; a tail of 1 past a tile of 16 and a short last K tile; a sequence no tile size
// divides, at the largest head dimension; hd 80 and 96 (not powers of two); one (batch, head) pair
// with a tile and a half.
// hd 8 and 16: flash_mma's narrowest widths (hd 8 computed as 16 with zero columns).
const Case kShapes[] = {{1, 1, 1, 64}, {2, 3, 17, 32}, {1, 2, 1000, 128}, {3, 2, 130, 80}, {2, 1, 257, 96},
                        {1, 1, 96, 64}, {2, 3, 130, 8}, {1, 2, 77, 16}};

std::vector<std::string> attention_primitives() {
  std::vector<std::string> names;
  for (const char* mask : {"causal", "full"})
    for (const char* layout : {"split", "packed"})
      for (const char* padding : {"", ".padded"}) names.push_back(std::string("attention.") + mask + "." + layout + padding);
  return names;
}

// The rounded twins of every mask, layout and padding.
std::vector<std::string> rounded_attention_primitives() {
  std::vector<std::string> names;
  for (const std::string& name : attention_primitives()) names.push_back(name + ".rounded");
  return names;
}

// One query of one (batch, head); a tail of 1 past a tile of 16; whole tiles; a sequence no tile
// size divides, at hd 64 and at the largest head dimension over two heads.
const Case kRoundedShapes[] = {{1, 1, 1, 64}, {2, 3, 17, 32}, {1, 1, 128, 128}, {3, 1, 128, 32},
                               {1, 1, 1000, 64}, {1, 2, 1000, 128}, {4, 16, 128, 8}, {2, 1, 33, 16}};

class AttentionVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(AttentionVariants, EveryConfigAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  // naive everywhere, flash_mma from sm_80 on, cuDNN for 16-bit types where it takes the shape.
  const int at_least = device_.limits.compute_capability >= 80 ? 2 : 1;
  for (const std::string& primitive : attention_primitives())
    for (const Case& c : kShapes) {
      const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), at_least) << problem.key();
    }
}

// naive everywhere and flash_mma (every config its shared memory and registers allow) from sm_80
// on; flash_wgmma and cuDNN SDPA refuse (tests/cpu/test_attention_catalogue).
TEST_P(AttentionVariants, RoundedEveryConfigAtAwkwardShapes) {
  std::uint64_t seed = std::random_device{}();
  const int at_least = device_.limits.compute_capability >= 80 ? 2 : 1;
  for (const std::string& primitive : rounded_attention_primitives())
    for (const Case& c : kRoundedShapes) {
      const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), at_least) << problem.key();
    }
}

// Padded rows at the lengths 1 (one key: P = 1 exactly; every other query's output zero) and S
// (every key visible: the all-valid case).
TEST_P(AttentionVariants, RoundedWithLengthsOfOneAndTheWholeSequence) {
  std::uint64_t seed = std::random_device{}();
  const int at_least = device_.limits.compute_capability >= 80 ? 2 : 1;
  for (const Case& c : {Case{2, 2, 1000, 64}, Case{3, 1, 17, 128}})
    for (const std::int64_t length : {std::int64_t{1}, c.S}) {
      const auto fixed = [length](std::vector<TensorSpec>& specs) {
        for (TensorSpec& s : specs)
          if (s.name == "lengths") s.low = static_cast<double>(length), s.high = static_cast<double>(length + 1);
      };
      for (const char* primitive : {"attention.causal.packed.padded.rounded", "attention.full.split.padded.rounded"}) {
        const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
        EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, fixed), at_least)
            << problem.key() << " lengths " << length;
      }
    }
}

// The baseline must run, not only refuse, wherever the comparison matters: both masks, both
// layouts, with and without padding, at an ordinary shape.
TEST_P(AttentionVariants, CudnnSdpaRunsEveryMaskAndLayout) {
  if (GetParam() == DType::tf32) GTEST_SKIP() << "cuDNN SDPA takes f16 or bf16";
  std::uint64_t seed = std::random_device{}();
  for (const std::string& primitive : attention_primitives()) {
    const Problem problem{primitive, GetParam(), Shape({{"B", 2}, {"H", 4}, {"S", 256}, {"hd", 64}})};
    EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "cudnn_sdpa"), 1)
        << problem.key();
  }
}

// Padding at its extremes: every row empty, or every row full (the all-valid fast path's case).
TEST_P(AttentionVariants, LengthsOfZeroAndOfTheWholeSequence) {
  std::uint64_t seed = std::random_device{}();
  for (const std::int64_t length : {std::int64_t{0}, std::int64_t{200}}) {
    const auto fixed = [length](std::vector<TensorSpec>& specs) {
      for (TensorSpec& s : specs)
        if (s.name == "lengths") s.low = static_cast<double>(length), s.high = static_cast<double>(length + 1);
    };
    for (const char* primitive : {"attention.causal.packed.padded", "attention.full.split.padded"}) {
      const Problem problem{primitive, GetParam(), Shape({{"B", 3}, {"H", 2}, {"S", 200}, {"hd", 64}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, fixed), 1) << problem.key();
    }
  }
}

// hd 256 (case 8 of the TechJam model): flash_mma reads Q from shared memory a k-step at a time
// and builds key tiles of 32 and 64 rows; every config that fits, plain and rounded, causal and
// full, padded, one query and a tile and a bit. At least four configs fit in every dtype (tf32:
// 4 warps with block_k 32 and stages 1 or 2, block_k 64 with stages 1, and 8 warps with 32 and 1).
TEST_P(AttentionVariants, FlashMmaAtHeadDim256) {
  if (device_.limits.compute_capability < 80) GTEST_SKIP() << "flash_mma needs sm_80";
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"attention.causal.split", "attention.full.packed.padded", "attention.causal.split.rounded",
                                "attention.full.packed.padded.rounded"})
    for (const Case& c : {Case{2, 1, 130, 256}, Case{1, 2, 1, 256}}) {
      const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "flash_mma"), 4)
          << problem.key();
    }
}

// The flash_wgmma configs that run a problem: warpgroups 1 and 2 with block_k 64 and 128
// synchronous, and (64, 128) x sections 0-3 x pingpong 0 and 1 for each specialised pipeline:
// 1 and 2, and 3 (TMA) where there is no padding; at hd 64 the specialised pipelines again with
// three consumer warpgroups.
int flash_wgmma_configs(const Problem& problem) {
  const bool padded = problem.primitive.find(".padded") != std::string::npos;
  const int specialised = padded ? 32 : 48;
  return 4 + specialised * (problem.shape.at("hd") == 64 ? 2 : 1);
}

// flash_wgmma's schedules (sm_90 only) where the warp-specialised ring wraps many times and the
// consumer warpgroups see different numbers of key tiles: sequences of 1, 130, 1000 and 2049
// (tails of every size against block_k 64 and 128), both head dims, causal and full, with and
// without padding, every config (pipelines 0-3, in one section, with and without pingpong, whose
// turns must stay paired when one warpgroup's rows see fewer tiles or none); and 192 query tiles of 300 rows, more
// than an H100 or H200 has SMs, so that the persistent blocks take several tiles of unlike
// lengths each and their rings and Q slots carry over from one to the next.
TEST_P(AttentionVariants, FlashWgmmaEveryPipelineAtLongerSequences) {
  if (device_.limits.compute_capability != 90) GTEST_SKIP() << "flash_wgmma is sm_90a code";
  if (GetParam() == DType::tf32) GTEST_SKIP() << "flash_wgmma takes f16 or bf16";
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"attention.causal.split", "attention.full.packed", "attention.causal.packed.padded",
                                "attention.full.split.padded"})
    for (const Case& c : {Case{1, 2, 1, 64}, Case{2, 1, 130, 128}, Case{1, 2, 1000, 64}, Case{1, 1, 2049, 128},
                          Case{8, 8, 300, 64}}) {
      const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
      EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "flash_wgmma"),
                flash_wgmma_configs(problem))
          << problem.key();
    }
}

// Scores spread over tens of log2 units (Q and K from [-6, 6): a score's standard deviation about
// 17 log2 units at hd 64), so that a later key tile often passes a row's running maximum by many
// units and O is rescaled mid-row by a factor far from 1, where the usual inputs (a few units) move
// the maximum little after a row's first tile. A conditional rescale (012c2a9, reverted until
// measured) must pass it too.
TEST_P(AttentionVariants, FlashWgmmaRescalesWhereALaterTileRaisesTheMaximum) {
  if (device_.limits.compute_capability != 90) GTEST_SKIP() << "flash_wgmma is sm_90a code";
  if (GetParam() == DType::tf32) GTEST_SKIP() << "flash_wgmma takes f16 or bf16";
  const auto wide_scores = [](std::vector<TensorSpec>& specs) {
    for (TensorSpec& spec : specs)
      if (spec.name == "q" || spec.name == "k" || spec.name == "qkv") spec.low = -6, spec.high = 6;
  };
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"attention.causal.split", "attention.full.packed.padded"})
    for (const Case& c : {Case{1, 2, 1000, 64}, Case{2, 1, 777, 128}}) {
      const Problem problem{primitive, GetParam(), Shape({{"B", c.B}, {"H", c.H}, {"S", c.S}, {"hd", c.hd}})};
      EXPECT_EQ(
          test_support::verify_every_config(*measurer_, device_, problem, seed++, wide_scores, {}, "flash_wgmma"),
          flash_wgmma_configs(problem))
          << problem.key();
    }
}

// sections 1-3 where the heads' K and V overflow half, a quarter and an eighth of the L2 (H100 and
// H200: 50 and 60 MiB): 48 heads of 1537 keys at hd 128 (787 KB each, 37.8 MB) fall into 2, 3-4 or
// 6-7 sections, the last short, each with tails of query and key tiles; and the packed layout's
// TMA boxes (strides of 3 H hd a row) in pipeline 3.
TEST_P(AttentionVariants, FlashWgmmaSectionsOfHeadsAcrossTheL2) {
  if (device_.limits.compute_capability != 90) GTEST_SKIP() << "flash_wgmma is sm_90a code";
  if (GetParam() == DType::tf32) GTEST_SKIP() << "flash_wgmma takes f16 or bf16";
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"attention.causal.split", "attention.full.packed"}) {
    const Problem problem{primitive, GetParam(), Shape({{"B", 4}, {"H", 12}, {"S", 1537}, {"hd", 128}})};
    EXPECT_EQ(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "flash_wgmma"), 52)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionVariants, ::testing::Values(DType::f16, DType::bf16, DType::tf32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
