// The attention family's host side (attention and its QKV projection): the float64 reference
// against hand-computed and limiting cases, split and packed layouts agreeing, the padding mask,
// the sampled check of long sequences, the cost model, and what the variants refuse before any
// launch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "baselines/reference.hpp"
#include "kernels/attention/flash_common.cuh"
#include "core/primitive_name.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

const Primitive& primitive(const std::string& name) {
  const Primitive* p = catalogue().find_primitive(name);
  if (!p) throw std::runtime_error("no primitive " + name);
  return *p;
}

Problem problem(const std::string& name, std::int64_t B, std::int64_t H, std::int64_t S, std::int64_t hd,
                DType dtype = DType::f16) {
  return {name, dtype, Shape({{"B", B}, {"H", H}, {"S", S}, {"hd", hd}})};
}

// Host tensors for the reference: inputs drawn from each spec's range (lengths as given), outputs
// filled with NaN so that an element the reference does not write shows.
HostTensors draw(const Problem& p, std::uint64_t seed, const std::vector<double>& lengths = {}) {
  std::mt19937_64 rng(seed);
  HostTensors t;
  for (const TensorSpec& spec : primitive(p.primitive).tensors(p)) {
    std::vector<double> values(static_cast<std::size_t>(spec.elements()), std::nan(""));
    if (spec.name == "lengths")
      values = lengths;
    else if (spec.role == TensorRole::input)
      for (double& v : values) v = std::uniform_real_distribution<double>(spec.low, spec.high)(rng);
    t.push_back(std::move(values));
  }
  return t;
}

void run_reference(const Problem& p, HostTensors& t) { primitive(p.primitive).reference(p, {}, t); }

TEST(AttentionCatalogue, EveryMaskLayoutPaddingAndRoundingHasTheLadderAndTheBaseline) {
  int primitives = 0;
  for (const char* mask : {"causal", "full"})
    for (const char* layout : {"split", "packed"})
      for (const char* padding : {"", ".padded"})
        for (const char* rounding : {"", ".rounded"}) {
          const std::string name = std::string("attention.") + mask + "." + layout + padding + rounding;
          ASSERT_NE(catalogue().find_primitive(name), nullptr) << name;
          for (const char* variant : {"naive", "flash_mma", "flash_wgmma", "cudnn_sdpa"})
            EXPECT_NE(catalogue().find_variant(name, variant), nullptr) << name << " " << variant;
          EXPECT_TRUE(catalogue().find_variant(name, "cudnn_sdpa")->baseline);
          EXPECT_EQ(primitive(name).default_variant, *rounding ? "flash_mma" : "flash_wgmma") << name;
          // flash_wgmma and cuDNN do not round as the rounded primitives ask: naive alone backs
          // flash_mma there.
          const std::vector<std::string> fallbacks = *rounding ? std::vector<std::string>{"naive"}
                                                               : std::vector<std::string>{"flash_mma", "cudnn_sdpa", "naive"};
          EXPECT_EQ(primitive(name).fallback_variants, fallbacks) << name;
          ++primitives;
        }
  EXPECT_EQ(primitives, 16);
}

// `rounded` is the last attribute, after the mask, the layout and the padding, and says what it
// computes.
TEST(AttentionCatalogue, RoundedPrimitivesNameTheirRoundingPoints) {
  for (const char* name : {"attention.causal.split.rounded", "attention.full.packed.padded.rounded"}) {
    const Primitive& p = primitive(name);
    const PrimitiveName parsed = *PrimitiveName::parse(p.name);
    EXPECT_EQ(parsed.attributes.back(), "rounded") << name;
    EXPECT_NE(p.description.find("rounding points of a framework's materialised eager attention"), std::string::npos)
        << p.description;
    EXPECT_NE(p.signature.find("S_ij = st(st(q_i . k_j) / sqrt(hd))"), std::string::npos) << p.signature;
    EXPECT_NE(p.signature.find("P_ij = st(exp(S_ij - max_j S_ij) / sum_j exp(S_ij - max_j S_ij))"), std::string::npos)
        << p.signature;
    EXPECT_NE(p.signature.find("O[b,i,h] = st(sum_j P_ij v_j)"), std::string::npos) << p.signature;
  }
  EXPECT_EQ(primitive("attention.causal.split").signature.find("st("), std::string::npos);
  // The same tensors as the plain primitive.
  for (const DType dtype : {DType::f16, DType::tf32}) {
    const auto tensors = [dtype](const std::string& name) { return primitive(name).tensors(problem(name, 2, 3, 5, 8, dtype)); };
    const auto plain = tensors("attention.causal.packed.padded");
    const auto rounded = tensors("attention.causal.packed.padded.rounded");
    ASSERT_EQ(plain.size(), rounded.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(plain[i].name, rounded[i].name);
      EXPECT_EQ(plain[i].dtype, rounded[i].dtype);
      EXPECT_EQ(plain[i].extents, rounded[i].extents);
    }
  }
}

TEST(AttentionReference, TwoKeysByHand) {
  // B = H = 1, S = 2, hd = 1: query 1 sees both keys (full) or both too (causal, j <= 1); query 0
  // sees only key 0 under the causal mask.
  const Problem full = problem("attention.full.split", 1, 1, 2, 1);
  HostTensors t = {{0.5, -1.5}, {2.0, -0.75}, {1.25, -3.0}, {NAN, NAN}};
  run_reference(full, t);
  for (int i = 0; i < 2; ++i) {
    const double s0 = t[0][i] * 2.0, s1 = t[0][i] * -0.75;  // scale 1/sqrt(1)
    const double p0 = std::exp(s0) / (std::exp(s0) + std::exp(s1));
    EXPECT_NEAR(t[3][i], p0 * 1.25 + (1 - p0) * -3.0, 1e-15);
  }
  const Problem causal = problem("attention.causal.split", 1, 1, 2, 1);
  HostTensors c = {{0.5, -1.5}, {2.0, -0.75}, {1.25, -3.0}, {NAN, NAN}};
  run_reference(causal, c);
  EXPECT_EQ(c[3][0], 1.25);
  EXPECT_DOUBLE_EQ(c[3][1], t[3][1]);
}

// The rounding points by hand: B = H = 1, S = 2, hd = 1 (scale 1), f16.
TEST(AttentionReference, RoundedTwoKeysByHand) {
  const auto st = reference::round_to_f16;
  const std::vector<double> q = {0.3, -1.7}, k = {1.1, -0.45}, v = {1.25, -0.3};
  for (const bool causal : {false, true}) {
    const Problem p = problem(std::string("attention.") + (causal ? "causal" : "full") + ".split.rounded", 1, 1, 2, 1);
    HostTensors t = {q, k, v, {NAN, NAN}};
    run_reference(p, t);
    for (int i = 0; i < 2; ++i) {
      const int keys = causal ? i + 1 : 2;
      double s[2], top = -INFINITY, sum = 0;
      for (int j = 0; j < keys; ++j) top = std::max(top, s[j] = st(st(q[i] * k[j]) * 1.0));
      for (int j = 0; j < keys; ++j) sum += std::exp(s[j] - top);
      double o = 0;
      for (int j = 0; j < keys; ++j) o += st(std::exp(s[j] - top) / sum) * v[j];
      EXPECT_EQ(t[3][i], st(o)) << (causal ? "causal" : "full") << " row " << i;
    }
  }
}

// The rounded reference stores its outputs in the storage type (f16, bf16; tf32's f32), stays
// within the plain primitive's tolerance of the unrounded outputs, and differs from them.
TEST(AttentionReference, RoundedOutputsAreStoredAndNearThePlainOnes) {
  for (const DType dtype : {DType::f16, DType::bf16, DType::tf32}) {
    const Problem plain = problem("attention.causal.split.padded", 2, 2, 40, 16, dtype);
    const Problem rounded = problem("attention.causal.split.padded.rounded", 2, 2, 40, 16, dtype);
    HostTensors u = draw(plain, 5, {40, 23});
    HostTensors r = draw(rounded, 5, {40, 23});
    run_reference(plain, u);
    run_reference(rounded, r);
    const reference::Rounding st = reference::rounding_for(storage_of(dtype));
    const Tolerance tol = tolerance_for(primitive(plain.primitive), plain);
    int different = 0;
    for (std::size_t e = 0; e < r[4].size(); ++e) {
      EXPECT_EQ(r[4][e], st(r[4][e])) << dtype_name(dtype) << " element " << e << " is not a stored value";
      EXPECT_TRUE(std::abs(r[4][e] - u[4][e]) <= tol.atol || std::abs(r[4][e] - u[4][e]) <= tol.rtol * std::abs(u[4][e]))
          << dtype_name(dtype) << " element " << e << ": " << r[4][e] << " vs " << u[4][e];
      different += r[4][e] != u[4][e];
    }
    EXPECT_GT(different, 0) << dtype_name(dtype);
  }
}

TEST(AttentionReference, EqualKeysAverageTheValues) {
  const Problem p = problem("attention.full.split", 1, 1, 5, 3);
  HostTensors t = draw(p, 7);
  for (int j = 0; j < 5; ++j)
    for (int d = 0; d < 3; ++d) t[1][j * 3 + d] = 0.3 * (d + 1);  // every key the same
  run_reference(p, t);
  for (int i = 0; i < 5; ++i)
    for (int d = 0; d < 3; ++d) {
      double mean = 0;
      for (int j = 0; j < 5; ++j) mean += t[2][j * 3 + d] / 5;
      EXPECT_NEAR(t[3][i * 3 + d], mean, 1e-14);
    }
}

// The same numbers laid out split ([B, H, S, hd] each) and packed ([B, S, 3, H, hd]) give the
// same output, for both masks.
TEST(AttentionReference, SplitAndPackedAgree) {
  constexpr std::int64_t B = 2, H = 3, S = 7, hd = 4;
  for (const char* mask : {"causal", "full"}) {
    const Problem split = problem(std::string("attention.") + mask + ".split", B, H, S, hd);
    const Problem packed = problem(std::string("attention.") + mask + ".packed", B, H, S, hd);
    HostTensors s = draw(split, 11);
    HostTensors p = draw(packed, 12);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < S; ++i)
          for (std::int64_t d = 0; d < hd; ++d)
            for (std::int64_t which = 0; which < 3; ++which)
              p[0][static_cast<std::size_t>((((b * S + i) * 3 + which) * H + h) * hd + d)] =
                  s[static_cast<std::size_t>(which)][static_cast<std::size_t>(((b * H + h) * S + i) * hd + d)];
    run_reference(split, s);
    run_reference(packed, p);
    EXPECT_EQ(s[3], p[1]) << mask;
  }
}

TEST(AttentionReference, PaddingMasksKeysAndZeroesQueries) {
  constexpr std::int64_t B = 3, H = 2, S = 6, hd = 4;
  const std::vector<double> lengths = {6, 3, 0};
  for (const char* mask : {"causal", "full"}) {
    const Problem plain = problem(std::string("attention.") + mask + ".split", B, H, S, hd);
    const Problem padded = problem(std::string("attention.") + mask + ".split.padded", B, H, S, hd);
    HostTensors u = draw(plain, 21);
    HostTensors t = draw(padded, 21, lengths);
    for (int i = 0; i < 3; ++i) t[static_cast<std::size_t>(i)] = u[static_cast<std::size_t>(i)];
    run_reference(plain, u);
    run_reference(padded, t);
    const std::vector<double>& o = t[4];
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < S; ++i)
        for (std::int64_t e = 0; e < H * hd; ++e) {
          const auto at = static_cast<std::size_t>((b * S + i) * H * hd + e);
          if (i >= lengths[static_cast<std::size_t>(b)])
            EXPECT_EQ(o[at], 0.0) << mask << " b " << b << " i " << i;
          else if (b == 0 || std::string(mask) == "causal")  // full length, or keys <= i < length anyway
            EXPECT_EQ(o[at], u[3][at]) << mask << " b " << b << " i " << i;
          else
            EXPECT_NE(o[at], u[3][at]) << "row 1's keys past 3 must be masked (" << mask << ")";
        }
  }
}

TEST(AttentionReference, LongSequencesAreCheckedOnSampledRowsWithinTheBudget) {
  const Primitive& causal = primitive("attention.causal.split");
  EXPECT_TRUE(causal.checked_ranges(problem("attention.causal.split", 64, 4, 128, 32)).empty())
      << "a problem whose whole reference fits the budget is checked whole";
  const Problem huge = problem("attention.causal.split", 1, 16, 100000, 64);
  const std::vector<ElementRange> ranges = causal.checked_ranges(huge);
  ASSERT_GE(ranges.size(), 8u);
  const std::int64_t row = 16 * 64;  // every head of one query row
  EXPECT_EQ(ranges.front().begin, 0);
  EXPECT_EQ(ranges.back().end, 100000 * row) << "the last query row is checked";
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    EXPECT_EQ(ranges[r].end - ranges[r].begin, row);
    if (r > 0) {
      EXPECT_GE(ranges[r].begin, ranges[r - 1].end) << "sorted and disjoint";
    }
  }
  const auto checked_rows = static_cast<std::int64_t>(ranges.size());
  // About 4e9 multiply-adds of float64 reference: 2 H hd (S+1)/2 each.
  EXPECT_LE(static_cast<double>(checked_rows) * 2 * 16 * 64 * 50000, 4.4e9);
  // What a sweep's budget reserves for the reference is that sample's share of the FLOPs.
  const double share = static_cast<double>(checked_rows) / 100000;
  EXPECT_DOUBLE_EQ(reference_cost(causal, huge).flops, causal.cost(huge).flops * share);
  EXPECT_DOUBLE_EQ(reference_cost(causal, huge).bytes, causal.cost(huge).bytes);
}

TEST(AttentionCatalogue, CostCountsTheCausalTriangle) {
  const Cost causal = primitive("attention.causal.packed").cost(problem("attention.causal.packed", 4, 16, 8192, 128));
  EXPECT_DOUBLE_EQ(causal.flops, 4.0 * 4 * 16 * 8192.0 * 8192 * 128 / 2);
  EXPECT_DOUBLE_EQ(causal.bytes, 4.0 * 4 * 8192 * 16 * 128 * 2);
  const Cost full = primitive("attention.full.split").cost(problem("attention.full.split", 4, 16, 8192, 128, DType::tf32));
  EXPECT_DOUBLE_EQ(full.flops, 2 * causal.flops);
  EXPECT_DOUBLE_EQ(full.bytes, 2 * causal.bytes) << "tf32 tensors are stored as f32";
}

TEST(AttentionCatalogue, RefusalsBeforeAnyLaunch) {
  const DeviceLimits h200 = nominal_device_limits();
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  const Problem case14 = problem("attention.causal.packed", 32, 16, 100000, 64);
  const Variant& naive = *catalogue().find_variant(case14.primitive, "naive");
  const Support refused = naive.supports(case14, naive.default_config, h200);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.reason.find("GiB of scores"), std::string::npos) << refused.reason;
  EXPECT_TRUE(naive.supports(problem("attention.causal.packed", 64, 4, 128, 32), naive.default_config, h200).ok);

  const Variant& flash = *catalogue().find_variant(case14.primitive, "flash_mma");
  EXPECT_TRUE(flash.supports(case14, flash.default_config, h200).ok);
  EXPECT_FALSE(flash.supports(case14, flash.default_config, t4).ok);
  EXPECT_FALSE(flash.supports(problem("attention.causal.packed", 1, 1, 64, 48), flash.default_config, h200).ok);
  // hd 256 (case 8): key tiles of 32 and 64 rows; 128 is refused with its reason.
  const Problem hd256 = problem("attention.causal.split.rounded", 64, 4, 128, 256, DType::tf32);
  const Variant& flash256 = *catalogue().find_variant(hd256.primitive, "flash_mma");
  EXPECT_TRUE(flash256.supports(hd256, Config({{"warps", 4}, {"block_k", 64}, {"stages", 1}}), h200).ok);
  EXPECT_TRUE(flash256.supports(hd256, Config({{"warps", 8}, {"block_k", 32}, {"stages", 1}}), h200).ok);
  const Support wide = flash256.supports(hd256, Config({{"warps", 4}, {"block_k", 128}, {"stages", 1}}), h200);
  EXPECT_FALSE(wide.ok);
  EXPECT_NE(wide.reason.find("key tiles stop at 64"), std::string::npos) << wide.reason;
  // hd 8 (TechJam cases 7 and 11) computes as hd 16, its padding zero; between the built widths, a refusal.
  for (const std::int64_t hd : {8, 16})
    EXPECT_TRUE(flash.supports(problem("attention.causal.packed", 1, 1, 64, hd), flash.default_config, h200).ok) << hd;
  const Support between = flash.supports(problem("attention.causal.packed", 1, 1, 64, 48), flash.default_config, h200);
  EXPECT_FALSE(between.ok);
  EXPECT_NE(between.reason.find("built for hd 8, 16, 32"), std::string::npos) << between.reason;

  const Variant& wgmma = *catalogue().find_variant(case14.primitive, "flash_wgmma");
  EXPECT_TRUE(wgmma.supports(case14, wgmma.default_config, h200).ok);
  EXPECT_TRUE(wgmma.supports(problem("attention.full.split", 4, 16, 8192, 128, DType::bf16), wgmma.default_config, h200).ok);
  DeviceLimits a100 = h200;
  a100.compute_capability = 80;
  const Support off_hopper = wgmma.supports(case14, wgmma.default_config, a100);
  EXPECT_FALSE(off_hopper.ok);
  EXPECT_NE(off_hopper.reason.find("needs sm_90a (wgmma)"), std::string::npos) << off_hopper.reason;
  EXPECT_FALSE(wgmma.supports(case14, wgmma.default_config, t4).ok);
  EXPECT_FALSE(wgmma.supports(problem("attention.causal.packed", 1, 1, 64, 64, DType::tf32), wgmma.default_config, h200).ok);
  for (const std::int64_t hd : {32, 80, 96, 48})
    EXPECT_FALSE(wgmma.supports(problem("attention.causal.packed", 1, 1, 64, hd), wgmma.default_config, h200).ok) << hd;
  DeviceLimits small_shared = h200;
  small_shared.shared_memory_per_block_optin = 100 * 1024;
  const Config biggest({{"warpgroups", 2}, {"block_k", 128}, {"pipeline", 0}, {"sections", 0}, {"pingpong", 0}});
  const Support too_big = wgmma.supports(problem("attention.causal.split", 1, 1, 256, 128), biggest, small_shared);
  EXPECT_FALSE(too_big.ok);
  EXPECT_NE(too_big.reason.find("shared memory"), std::string::npos) << too_big.reason;
  EXPECT_TRUE(wgmma.supports(problem("attention.causal.split", 1, 1, 256, 64), biggest, small_shared).ok);
  // A winner recorded before `pipeline` existed launches as it did then: dispatch and check complete
  // its config with the parameter's default (the synchronous schedule).
  const Config recorded({{"warpgroups", 2}, {"block_k", 128}});
  EXPECT_THROW(wgmma.supports(problem("attention.causal.split", 1, 1, 256, 64), recorded, h200), std::out_of_range);
  const Config completed = complete_config(wgmma, recorded);
  EXPECT_EQ(completed.key(), "warpgroups=2,block_k=128,pipeline=0,sections=0,pingpong=0");
  EXPECT_TRUE(wgmma.supports(problem("attention.causal.split", 1, 1, 256, 64), completed, h200).ok);
  // The warp-specialised pipelines: two consumer warpgroups only, and their second Q tile and
  // barriers count.
  const Problem hd128 = problem("attention.causal.split", 4, 16, 8192, 128);
  const auto wgmma_config = [](int warpgroups, int pipeline, int pingpong = 0) {
    return Config({{"warpgroups", warpgroups}, {"block_k", 128}, {"pipeline", pipeline}, {"sections", 0},
                   {"pingpong", pingpong}});
  };
  const Problem hd64 = problem("attention.causal.split", 8, 16, 2048, 64);
  for (const int pipeline : {1, 2, 3}) {
    EXPECT_TRUE(wgmma.supports(hd128, wgmma_config(2, pipeline), h200).ok);
    EXPECT_TRUE(wgmma.supports(hd128, wgmma_config(2, pipeline, 1), h200).ok);  // the same shared memory
    const Support one_consumer = wgmma.supports(hd128, wgmma_config(1, pipeline), h200);
    EXPECT_FALSE(one_consumer.ok);
    EXPECT_NE(one_consumer.reason.find("two or three consumer warpgroups"), std::string::npos) << one_consumer.reason;
    // Three consumers (block_q 192) hold O, S and P in 160 registers at hd 64, not at 128.
    EXPECT_TRUE(wgmma.supports(hd64, wgmma_config(3, pipeline, 1), h200).ok);
    const Support three_at_128 = wgmma.supports(hd128, wgmma_config(3, pipeline), h200);
    EXPECT_FALSE(three_at_128.ok);
    EXPECT_NE(three_at_128.reason.find("hd 64 only"), std::string::npos) << three_at_128.reason;
  }
  // Three consumers at hd 64: two Q tiles of 192 x 64 and two K/V pairs of 128 x 64 halves, the
  // barriers and the slack: 49,152 + 65,536 + 96 + 1,024 bytes.
  DeviceLimits exactly_three = h200;
  exactly_three.shared_memory_per_block_optin = 115808;
  EXPECT_TRUE(wgmma.supports(hd64, wgmma_config(3, 2), exactly_three).ok);
  exactly_three.shared_memory_per_block_optin -= 1;
  EXPECT_FALSE(wgmma.supports(hd64, wgmma_config(3, 2), exactly_three).ok);
  // Q 128 x 128 and two K/V pairs of 128 x 128 halves, 1 KiB of alignment slack: 164,864 bytes;
  // the specialised pipelines' second Q tile takes 32,768 more, their twelve barriers 96.
  DeviceLimits exactly_synchronous = h200;
  exactly_synchronous.shared_memory_per_block_optin = 164864;
  EXPECT_TRUE(wgmma.supports(hd128, wgmma_config(2, 0), exactly_synchronous).ok);
  EXPECT_FALSE(wgmma.supports(hd128, wgmma_config(2, 1), exactly_synchronous).ok);
  DeviceLimits exactly_specialised = h200;
  exactly_specialised.shared_memory_per_block_optin = 164864 + 32768 + 96;
  EXPECT_TRUE(wgmma.supports(hd128, wgmma_config(2, 2), exactly_specialised).ok);
  EXPECT_TRUE(wgmma.supports(hd128, wgmma_config(2, 3), exactly_specialised).ok);
  exactly_specialised.shared_memory_per_block_optin -= 1;
  EXPECT_FALSE(wgmma.supports(hd128, wgmma_config(2, 2), exactly_specialised).ok);
  // Pingpong takes turns between a producer's two consumers: pipeline 0 has neither, and the space
  // leaves its pingpong configs out.
  int pingpong_configs = 0, synchronous_pingpong = 0;
  for (const Config& c : wgmma.params.enumerate()) {
    pingpong_configs += c.at("pingpong") == 1;
    synchronous_pingpong += c.at("pingpong") == 1 && c.at("pipeline") == 0;
  }
  EXPECT_EQ(pingpong_configs, 72);  // warpgroups 3 x block_k 2 x pipeline 3 x sections 4
  EXPECT_EQ(synchronous_pingpong, 0);
  for (const Config& c : wgmma.params.enumerate())
    EXPECT_FALSE(c.at("warpgroups") == 3 && c.at("pipeline") == 0) << c.key();  // no producer to feed three
  // Pipeline 3's TMA boxes cannot zero the keys past a batch row's length.
  const Support tma_padded =
      wgmma.supports(problem("attention.causal.split.padded", 4, 16, 8192, 128), wgmma_config(2, 3), h200);
  EXPECT_FALSE(tma_padded.ok);
  EXPECT_NE(tma_padded.reason.find("zero-fill past S but not past a batch row's length"), std::string::npos)
      << tma_padded.reason;

  const Variant& cudnn = *catalogue().find_variant(case14.primitive, "cudnn_sdpa");
  EXPECT_TRUE(cudnn.supports(case14, cudnn.default_config, h200).ok);
  EXPECT_FALSE(cudnn.supports(problem("attention.causal.packed", 1, 1, 64, 64, DType::tf32), cudnn.default_config, h200).ok);
}

// naive and flash_mma compute the rounded primitives (every dtype, flash_mma's whole space, its
// one-pass mode too);
// flash_wgmma and cuDNN SDPA keep fp32 scores and store unnormalised P, and say so.
TEST(AttentionCatalogue, RoundedRefusalsBeforeAnyLaunch) {
  const DeviceLimits h200 = nominal_device_limits();
  for (const char* name : {"attention.causal.packed.rounded", "attention.full.split.padded.rounded"})
    for (const DType dtype : {DType::f16, DType::bf16, DType::tf32}) {
      const Problem p = problem(name, 2, 4, 1000, 64, dtype);
      const Variant& naive = *catalogue().find_variant(name, "naive");
      EXPECT_TRUE(naive.supports(p, naive.default_config, h200).ok) << name;
      const Variant& flash = *catalogue().find_variant(name, "flash_mma");
      int configs = 0;
      for (const Config& c : flash.params.enumerate()) {
        EXPECT_TRUE(flash.supports(p, c, h200).ok) << p.key() << " " << c.key();
        ++configs;
      }
      EXPECT_EQ(configs, 24);  // warps 2 x block_k 3 x stages 2 x passes 2
      // A winner stored before `passes` existed keeps the two-pass mode it was measured in.
      EXPECT_EQ(complete_config(flash, Config({{"warps", 4}, {"block_k", 32}, {"stages", 1}})).key(),
                "warps=4,block_k=32,stages=1,passes=2");
      for (const char* refusing : {"flash_wgmma", "cudnn_sdpa"}) {
        const Variant& v = *catalogue().find_variant(name, refusing);
        const Support s = v.supports(p, v.default_config, h200);
        EXPECT_FALSE(s.ok) << p.key() << " " << refusing;
        if (dtype != DType::tf32) {  // tf32 is refused first, for its operands
          EXPECT_NE(s.reason.find("keeps the scores in fp32 and stores unnormalised probabilities"), std::string::npos)
              << p.key() << " " << refusing << ": " << s.reason;
        }
      }
    }
  // The unrounded primitives' refusals stay as they were.
  const Variant& wgmma = *catalogue().find_variant("attention.causal.packed", "flash_wgmma");
  EXPECT_TRUE(wgmma.supports(problem("attention.causal.packed", 2, 4, 1000, 64), wgmma.default_config, h200).ok);
}

// A correct kernel differs from the rounded reference only by rare flips of a stored value (see
// rounded_attention_tolerance): in 16 bits the bound covers a flipped score of |S| in [2, 4)
// (ulp(S) on the output) plus the output's own rounding (half an ulp of 2), and stays within a
// few units of the storage type; in tf32 it is the plain primitive's.
TEST(AttentionCatalogue, RoundedToleranceCoversOneFlippedScore) {
  const auto tolerance = [](const std::string& name, DType dtype) {
    return tolerance_for(primitive(name), problem(name, 1, 1, 8, 64, dtype));
  };
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const double ulp_at_2 = dtype == DType::f16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -6);
    const Tolerance rounded = tolerance("attention.causal.split.rounded", dtype);
    EXPECT_GE(rounded.atol, ulp_at_2 + ulp_at_2 / 2) << dtype_name(dtype);
    EXPECT_LE(rounded.atol, 2 * ulp_at_2) << dtype_name(dtype);
  }
  const Tolerance plain = tolerance("attention.causal.split", DType::tf32);
  const Tolerance rounded = tolerance("attention.causal.split.rounded", DType::tf32);
  EXPECT_EQ(rounded.atol, plain.atol);
  EXPECT_EQ(rounded.rtol, plain.rtol);
}

// Rounded, naive's score GEMM stores the scores in the model's type (f32 for tf32, as before).
TEST(AttentionCatalogue, RoundedNaiveStoresScoresInTheModelsType) {
  const Variant& plain = *catalogue().find_variant("attention.causal.split", "naive");
  const Variant& rounded = *catalogue().find_variant("attention.causal.split.rounded", "naive");
  const std::size_t squares = 2 * 3 * 512 * 512;
  EXPECT_EQ(plain.workspace_bytes(problem("attention.causal.split", 2, 3, 512, 64), {}), squares * (4 + 2));
  EXPECT_EQ(rounded.workspace_bytes(problem("attention.causal.split.rounded", 2, 3, 512, 64), {}), squares * (2 + 2));
  EXPECT_EQ(rounded.workspace_bytes(problem("attention.causal.split.rounded", 2, 3, 512, 64, DType::tf32), {}),
            squares * (4 + 4));
}

// ---- qkv_projection -----------------------------------------------------------------------------

Problem projection(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t hd, DType dtype = DType::f16) {
  return {"qkv_projection", dtype, Shape({{"B", B}, {"S", S}, {"H", H}, {"hd", hd}})};
}

TEST(QkvProjection, TheLadderAndItsBaseline) {
  std::vector<std::string> names;
  for (const Variant* v : catalogue().variants("qkv_projection")) names.push_back(v->name + (v->baseline ? "*" : ""));
  EXPECT_EQ(names, (std::vector<std::string>{"split*", "packed", "packed_head_split", "wgmma_head_split"}));
  EXPECT_EQ(primitive("qkv_projection").default_variant, "packed_head_split");
}

// Every output element by hand: row b S + s of x against row j D + h hd + d of w, plus the bias,
// found at its heads-split place in q, k or v.
TEST(QkvProjection, ReferenceWritesEachProjectionHeadsSplit) {
  const Problem p = projection(2, 3, 2, 3);  // D = 6, rows = 6
  HostTensors t = draw(p, 11);
  primitive("qkv_projection").reference(p, {}, t);
  const std::int64_t B = 2, S = 3, H = 2, hd = 3, D = H * hd;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (int j = 0; j < 3; ++j)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < hd; ++d) {
            const std::int64_t row = b * S + s, col = j * D + h * hd + d;
            double want = t[2][col];
            for (std::int64_t e = 0; e < D; ++e) want += t[0][row * D + e] * t[1][col * D + e];
            const double got = t[3 + j][((b * H + h) * S + s) * hd + d];
            EXPECT_NEAR(got, want, 1e-12) << "j " << j << " b " << b << " s " << s << " h " << h << " d " << d;
          }
}

TEST(QkvProjection, LargeProblemsAreCheckedOnSampledRowsWithinTheBudget) {
  const Primitive& qkv = primitive("qkv_projection");
  const Problem small = projection(64, 128, 4, 32);
  EXPECT_TRUE(qkv.checked_ranges(small).empty()) << "every row where the whole reference is affordable";
  const Problem case14 = projection(32, 100000, 16, 64);
  const auto ranges = qkv.checked_ranges(case14);
  ASSERT_FALSE(ranges.empty());
  const std::int64_t elements = 32LL * 100000 * 16 * 64;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_LT(ranges[i].begin, ranges[i].end);
    EXPECT_LE(ranges[i].end, elements);
    if (i) {
      EXPECT_LE(ranges[i - 1].end, ranges[i].begin) << "sorted and disjoint";
    }
  }
  const double sampled_rows = static_cast<double>(ranges.size()) / 16;  // one range per head of a row
  EXPECT_LE(sampled_rows * 3 * 1024.0 * 1024.0, 4.5e9) << "the reference stays within its budget";
  EXPECT_GE(sampled_rows, 2 * 32) << "at least the first and last row of every batch row";
  const Cost reference = reference_cost(qkv, case14);
  EXPECT_LT(reference.flops, 1e10);
  // The sampled rows are computed and compared on the GPU box (tests/gpu/test_qkv_projection_variants:
  // B 1, S 2500, D 1024, about twice the budget), where the reference has 16 cores.
}

TEST(QkvProjection, CostAndToleranceFollowTheGemmInside) {
  const Primitive& qkv = primitive("qkv_projection");
  const Problem p = projection(64, 128, 4, 32);  // rows 8192, D 128
  const Cost cost = qkv.cost(p);
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 8192 * 3 * 128 * 128);
  EXPECT_DOUBLE_EQ(cost.bytes, (8192.0 * 128 + 3 * 128 * 128 + 3 * 128 + 3 * 8192.0 * 128) * 2);
  const Tolerance f16 = tolerance_for(qkv, p), wide = tolerance_for(qkv, projection(1, 8, 16, 64));
  EXPECT_LT(f16.atol, wide.atol) << "error grows with D";
  EXPECT_GT(tolerance_for(qkv, projection(64, 128, 4, 32, DType::bf16)).rtol, f16.rtol);
}

TEST(QkvProjection, RefusalsBeforeAnyLaunch) {
  const DeviceLimits h200 = nominal_device_limits();
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  const Variant& fused = *catalogue().find_variant("qkv_projection", "packed_head_split");
  const Problem p = projection(64, 128, 4, 32);
  EXPECT_TRUE(fused.supports(p, fused.default_config, h200).ok);
  EXPECT_TRUE(fused.supports(projection(64, 128, 4, 32, DType::tf32), fused.default_config, h200).ok);
  EXPECT_FALSE(fused.supports(p, fused.default_config, t4).ok);
  const Support tf32_tile = fused.supports(projection(64, 128, 4, 32, DType::tf32), Config({{"tile", 7}, {"stages", 3}}), h200);
  EXPECT_FALSE(tf32_tile.ok);
  EXPECT_NE(tf32_tile.reason.find("16-bit types only"), std::string::npos) << tf32_tile.reason;
  const Variant& split = *catalogue().find_variant("qkv_projection", "split");
  EXPECT_TRUE(split.supports(p, split.default_config, t4).ok) << "cuBLAS runs everywhere";
  EXPECT_EQ(split.workspace_bytes(p, split.default_config), std::size_t{8192} * 3 * 128 * 4) << "fp32 staging";
  EXPECT_FALSE(primitive("qkv_projection").validate_shape(Shape({{"B", 1}, {"S", 1}, {"H", 1024}, {"hd", 32}})).ok);

  // wgmma_head_split: sm_90 only, whole 16-byte chunks of a head (hd a multiple of 8 in 16 bits,
  // of 4 in tf32; TMA then reads x's rows of D = H hd in whole chunks too).
  const Variant& hopper = *catalogue().find_variant("qkv_projection", "wgmma_head_split");
  EXPECT_TRUE(hopper.supports(p, hopper.default_config, h200).ok);
  EXPECT_TRUE(hopper.supports(projection(64, 128, 4, 8), hopper.default_config, h200).ok);
  EXPECT_TRUE(hopper.supports(projection(32, 100000, 16, 64, DType::bf16), hopper.default_config, h200).ok);
  EXPECT_FALSE(hopper.supports(p, hopper.default_config, t4).ok);
  EXPECT_TRUE(hopper.supports(projection(64, 128, 4, 32, DType::tf32), hopper.default_config, h200).ok);
  const Support odd_head = hopper.supports(projection(1, 33, 4, 12), hopper.default_config, h200);
  EXPECT_FALSE(odd_head.ok);
  EXPECT_NE(odd_head.reason.find("multiple of 8"), std::string::npos) << odd_head.reason;
  EXPECT_TRUE(hopper.supports(projection(1, 33, 4, 12, DType::tf32), hopper.default_config, h200).ok);
  const Support odd_tf32 = hopper.supports(projection(1, 33, 4, 6, DType::tf32), hopper.default_config, h200);
  EXPECT_FALSE(odd_tf32.ok);
  EXPECT_NE(odd_tf32.reason.find("multiple of 4"), std::string::npos) << odd_tf32.reason;
  EXPECT_FALSE(hopper.supports(projection(2, 7, 3, 5), hopper.default_config, h200).ok) << "D = 15: TMA cannot read x";
}

// flash_wgmma's warp-specialised schedules take items in sections of heads: every (head, query
// tile) exactly once, sections one after another, and within a section the longest tiles (the
// last) first, one per head, the last section short where the heads do not divide.
TEST(AttentionCatalogue, WgmmaItemsRunInSectionsLongestFirst) {
  namespace ka = kernels::attention;
  for (const auto& [q_tiles, heads_all, section] : {std::tuple{16, 128, 128}, std::tuple{16, 128, 48},
                                                      std::tuple{64, 64, 6}, std::tuple{1, 7, 3}, std::tuple{5, 1, 1},
                                                      std::tuple{3, 10, 4}}) {
    std::vector<int> seen(static_cast<std::size_t>(q_tiles * heads_all), 0);
    int last_section = 0, last_tile = q_tiles;
    for (int item = 0; item < q_tiles * heads_all; ++item) {
      const ka::ItemPlace at = ka::item_place(item, q_tiles, section, heads_all);
      ASSERT_GE(at.bh, 0);
      ASSERT_LT(at.bh, heads_all);
      ASSERT_GE(at.q_tile, 0);
      ASSERT_LT(at.q_tile, q_tiles);
      ++seen[static_cast<std::size_t>(at.bh * q_tiles + at.q_tile)];
      const int s = at.bh / section;
      EXPECT_GE(s, last_section) << "item " << item;
      if (s != last_section) last_tile = q_tiles;
      EXPECT_LE(at.q_tile, last_tile) << "item " << item << " of section " << s;
      last_section = s, last_tile = at.q_tile;
    }
    for (const int n : seen) EXPECT_EQ(n, 1) << q_tiles << " tiles, " << heads_all << " heads, sections of " << section;
  }
  // 1 / 2^sections of the L2 for a section's K and V: (8, 16, 2048, 64) f16 is 512 KiB a head.
  EXPECT_EQ(ka::l2_section_heads(50 << 20, 1, 2048, 64, 2, 128), 50);  // half the L2: 25 MiB of 512 KiB heads
  EXPECT_EQ(ka::l2_section_heads(50 << 20, 2, 2048, 64, 2, 128), 25);  // a quarter
  EXPECT_EQ(ka::l2_section_heads(50 << 20, 3, 2048, 64, 2, 128), 12);  // an eighth, rounded down
  EXPECT_EQ(ka::l2_section_heads(50 << 20, 1, 100000, 128, 2, 512), 1);  // a head larger than the L2
  EXPECT_EQ(ka::l2_section_heads(50 << 20, 1, 128, 64, 2, 4), 4);        // all heads fit
}

}  // namespace
}  // namespace shapetune
