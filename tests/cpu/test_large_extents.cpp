// Tensors past 2^31 elements: TechJam case 14 (B 32, S 100000, D 1024, 16 heads) binds LayerNorms
// of 3.3e9 elements, a QKV projection writing 9.8e9, attention over Q, K, V and O of 3.3e9 each,
// GEMMs with 3.3e9 outputs and the padded output's mask product over 3.3e9. Dispatch may bind any
// variant of those primitives (the nearest tuned shape's winner), so each one either runs them
// (its kernels index in 64 bits: the audit behind this table) or its supports() refuses them with
// the reason, and untuned dispatch still finds a variant that runs each of them. Also the limits
// the audit found outside case 14: heads and batch rows as grid dimensions (attention), and
// warp_tiled_async's 32-bit K step over an extent-major operand.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "core/primitive_name.hpp"
#include "models/dispatcher.hpp"
#include "models/transformer.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr std::int64_t k2To31 = std::int64_t{1} << 31;

// Whether some config of the variant runs the problem; else the reason its default config gives.
Support any_config_supports(const Variant& v, const Problem& p, const DeviceLimits& limits) {
  if (v.supports(p, v.default_config, limits).ok) return Support::yes();
  for (const Config& c : v.params.enumerate())
    if (v.supports(p, c, limits).ok) return Support::yes();
  const Support why = v.supports(p, v.default_config, limits);
  return why.ok ? Support::no("no config of the space runs it") : why;
}

// Case 14's problems in every model dtype, with and without the padding mask, one of each key: the
// split QKV path's and the packed one's (--qkv-layout packed).
std::vector<Problem> case14_problems() {
  std::vector<Problem> out;
  std::set<std::string> seen;
  const TransformerShape c14 = *techjam_case(14);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const bool padded : {false, true}) {
      std::vector<ModelOp> ops = transformer_ops(c14, dtype, padded);
      for (ModelOp& op : transformer_packed_qkv_ops(
               c14, dtype, padded, default_attention_rounding(c14, dtype, DispatchMode::tuned)))
        ops.push_back(std::move(op));
      for (const ModelOp& op : ops)
        if (seen.insert(op.problem.key()).second) out.push_back(op.problem);
    }
  return out;
}

// Those problems and each attention problem's rounded twin (the materialised reference's rounding
// points), which the Transformer may bind in its place.
std::vector<Problem> case14_problems_and_rounded_attention() {
  std::vector<Problem> out = case14_problems();
  std::set<std::string> seen;
  for (const Problem& p : out) seen.insert(p.key());
  for (const Problem& p : case14_problems()) {
    if (p.primitive.rfind("attention.", 0) != 0) continue;
    Problem rounded = p;
    if (!PrimitiveName::parse(p.primitive)->has("rounded")) rounded.primitive += ".rounded";
    if (seen.insert(rounded.key()).second) out.push_back(rounded);
  }
  return out;
}

TEST(LargeExtents, Case14ProblemsPass2To31Elements) {
  const std::vector<Problem> problems = case14_problems();
  // Per dtype: layernorm, qkv_projection, attention, gemm_bias (the output projection and the FFN's
  // second Linear: D = FFN here), residual_layernorm, gemm_bias_gelu, the padded attention and the
  // mask product; the packed path's gemm_bias of n = 3 D and its two packed attentions.
  ASSERT_EQ(problems.size(), 3u * 11u);
  for (const Problem& p : problems) {
    std::int64_t largest = 0;
    for (const TensorSpec& t : catalogue().find_primitive(p.primitive)->tensors(p)) largest = std::max(largest, t.elements());
    EXPECT_GT(largest, k2To31) << p.key();
  }
}

// The audit, variant by variant: "runs" (64-bit indexing throughout, some config supports case 14
// on an H200) or the words its refusal gives. Every variant of these primitives must be listed: a
// new one is audited for tensors past 2^31 elements before it can be bound to case 14.
TEST(LargeExtents, EveryVariantOfACase14PrimitiveRunsItOrRefusesItWithTheReason) {
  const std::string runs = "runs";
  const std::map<std::string, std::string> layernorm = {
      {"thread_row_two_pass", runs}, {"warp_row_welford", runs}, {"block_row_welford", runs},
      {"vec_welford", runs},         {"register_row", runs},     {"cudnn", "at most 2^31 - 1 elements"}};
  const std::map<std::string, std::string> residual = {
      {"unfused", runs}, {"fused_vec", runs}, {"fused_register", runs}, {"fused_ring", runs}, {"fused_pipelined", runs}};
  // wgmma_head_split: head_split_at divides rows and columns in 32 bits (3.2 million rows, 3072
  // columns) and forms offsets in size_t; TMA's coordinates are int32; 600,000 blocks.
  const std::map<std::string, std::string> qkv = {
      {"split", runs}, {"packed", runs}, {"packed_head_split", runs}, {"wgmma_head_split", runs}};
  const std::map<std::string, std::string> attention = {
      {"naive", "GiB of scores"}, {"flash_mma", runs}, {"flash_wgmma", runs}, {"cudnn_sdpa", runs}};
  // 16-bit GEMMs; the f32 model's are tf32 (below).
  const std::map<std::string, std::string> gemm16 = {
      {"naive", runs},
      {"smem_tiled", runs},
      {"register_blocked", runs},
      {"double_buffered", runs},
      {"warp_tiled", runs},
      {"split_k", "4 blocks per SM"},
      {"warp_tiled_broadcast", runs},
      {"warp_tiled_async", "16-bit types are for the tensor-core variants"},
      {"mma_sync", runs},
      {"mma_sync_tf32", "mma_sync_tf32 has no"},
      {"wgmma", runs},
      {"cublas", "cannot fuse the bias"},
      {"cublas_tf32", "TF32 products are allowed for tf32 problems only"},
      {"cublaslt", "cuBLASLt's"},
      // cuBLAS's extents are each below 2^31 (its 64-bit offsets are its own); finish_product's
      // offsets and grid-stride count are 64-bit, its grid capped.
      {"unfused", runs}};
  const std::map<std::string, std::string> relu = {{"scalar", runs}, {"vec", runs}, {"cudnn", "cuDNN extents are 32-bit"}};

  const DeviceLimits h200 = nominal_device_limits();
  int audited = 0;
  for (const Problem& p : case14_problems_and_rounded_attention()) {
    const std::string& name = p.primitive;
    std::map<std::string, std::string> expected;
    if (name == "layernorm") expected = layernorm;
    if (name == "residual_layernorm") expected = residual;
    if (name == "qkv_projection") expected = qkv;
    if (name.rfind("attention.", 0) == 0) {
      expected = attention;
      if (PrimitiveName::parse(name)->has("rounded")) {
        expected["flash_wgmma"] = "not rounded as a framework's materialised attention rounds";
        expected["cudnn_sdpa"] = "not rounded as a framework's materialised attention rounds";
      }
      if (p.dtype == DType::tf32) {
        expected["flash_wgmma"] = "wgmma takes 16-bit operands";
        expected["cudnn_sdpa"] = "cuDNN SDPA takes f16 or bf16";
      }
    }
    if (name.rfind("gemm_bias", 0) == 0) {
      expected = gemm16;
      if (p.dtype == DType::tf32) {
        for (const char* cuda_core : {"naive", "smem_tiled", "register_blocked", "double_buffered", "warp_tiled",
                                      "split_k", "warp_tiled_broadcast"})
          expected[cuda_core] = "CUDA-core variants multiply in fp32";
        expected["warp_tiled_async"] = "copies f32 tiles as they lie";
        expected["mma_sync"] = "mma_sync has no tf32";
        expected["mma_sync_tf32"] = runs;
        expected["wgmma"] = runs;  // TF32 wgmma: the same 64-bit offsets as the 16-bit kernel's
        expected["cublas"] = "cannot fuse the bias";
        expected["cublas_tf32"] = "cannot fuse the bias";
        // cuBLASLt fuses a bias in f32 and tf32; it has no erf GELU.
        expected["cublaslt"] = name.rfind("gemm_bias_gelu", 0) == 0 ? "tanh approximation" : runs;
      }
    }
    if (name == "activation_backward.relu") expected = relu;
    ASSERT_FALSE(expected.empty()) << "no audit for " << p.key();

    for (const Variant* v : catalogue().variants(name)) {
      const auto it = expected.find(v->name);
      if (it == expected.end()) {
        ADD_FAILURE() << name << "/" << v->name << " is not audited for case 14 (" << p.key()
                      << "): read its kernels for 32-bit offsets, counts and grids, then list it here";
        continue;
      }
      const Support s = any_config_supports(*v, p, h200);
      if (it->second == runs) {
        EXPECT_TRUE(s.ok) << p.key() << " " << v->name << ": " << s.reason;
      } else {
        EXPECT_FALSE(s.ok) << p.key() << " " << v->name << " should refuse (" << it->second << ")";
        EXPECT_NE(s.reason.find(it->second), std::string::npos) << p.key() << " " << v->name << ": " << s.reason;
      }
      ++audited;
    }
  }
  EXPECT_GT(audited, 100);
}

// Untuned (no database, or no tuned shape whose winner runs it), every case-14 op still resolves
// to its primitive's default or a declared fallback, and that variant runs it.
TEST(LargeExtents, Case14ResolvesUntunedToADeclaredChoiceThatRunsIt) {
  const DeviceLimits h200 = nominal_device_limits();
  const Dispatcher untuned(h200);
  for (const Problem& p : case14_problems_and_rounded_attention()) {
    const DispatchChoice choice = untuned.lookup(p);
    const Primitive& primitive = *catalogue().find_primitive(p.primitive);
    const auto& declared = primitive.fallback_variants;
    EXPECT_TRUE(choice.variant == primitive.default_variant ||
                std::find(declared.begin(), declared.end(), choice.variant) != declared.end())
        << p.key() << " -> " << choice.variant;
    const Support s = catalogue().find_variant(p.primitive, choice.variant)->supports(p, choice.config, h200);
    EXPECT_TRUE(s.ok) << p.key() << " -> " << choice.variant << ": " << s.reason;
  }
}

// ---- outside case 14: what the audit found refused only at launch, or not at all --------------

Problem attention(const std::string& name, std::int64_t B, std::int64_t H, DType dtype = DType::f16) {
  return {name, dtype, Shape({{"B", B}, {"H", H}, {"S", 64}, {"hd", 64}})};
}

// The flash kernels' grids take heads as y and batch rows as z, and cuDNN SDPA's padded rows are
// zeroed by a grid with batch rows as y: at most 65535 each. supports() says so (before, the
// launch refused them, too late for dispatch to pick another variant), and naive, whose GEMMs
// loop over batch rows on the host, still runs them.
TEST(LargeExtents, AttentionRefusesMoreHeadsOrBatchRowsThanAGridDimensionHolds) {
  const DeviceLimits h200 = nominal_device_limits();
  for (const std::string name : {"attention.causal.split", "attention.causal.split.padded", "attention.full.packed"})
    for (const char* variant : {"flash_mma", "flash_wgmma", "cudnn_sdpa"}) {
      const Variant& v = *catalogue().find_variant(name, variant);
      EXPECT_TRUE(v.supports(attention(name, 65535, 1), v.default_config, h200).ok) << name << " " << variant;
      EXPECT_TRUE(v.supports(attention(name, 1, 65535), v.default_config, h200).ok) << name << " " << variant;
      for (const Problem& p : {attention(name, 65536, 1), attention(name, 1, 65536)}) {
        const Support s = v.supports(p, v.default_config, h200);
        EXPECT_FALSE(s.ok) << p.key() << " " << variant;
        EXPECT_NE(s.reason.find("65535"), std::string::npos) << p.key() << " " << variant << ": " << s.reason;
      }
    }
  const Dispatcher untuned(h200);
  for (const Problem& p : {attention("attention.causal.split.padded", 70000, 1), attention("attention.causal.split", 1, 70000)}) {
    const DispatchChoice choice = untuned.lookup(p);
    EXPECT_EQ(choice.variant, "naive") << p.key();
    EXPECT_TRUE(catalogue().find_variant(p.primitive, choice.variant)->supports(p, choice.config, h200).ok) << p.key();
  }
}

// warp_tiled_async steps an extent-major operand's chunk offsets by 8 ld in 32 bits: A in tn
// (ld = m) and B in nn and tn (ld = n) need that extent below 2^28. K-contiguous operands (nt)
// step by 8 and take any m, n below 2^31 - 256.
TEST(LargeExtents, WarpTiledAsyncRefusesExtentMajorLeadingDimensionsFrom2To28) {
  const DeviceLimits h200 = nominal_device_limits();
  const std::int64_t limit = (std::int64_t{1} << 28) - 1;
  auto gemm = [](const std::string& name, std::int64_t m, std::int64_t n) {
    return Problem{name, DType::f32, Shape({{"m", m}, {"n", n}, {"k", 8}})};
  };
  auto supports = [&](const Problem& p) {
    const Variant& v = *catalogue().find_variant(p.primitive, "warp_tiled_async");
    return v.supports(p, v.default_config, h200);
  };
  EXPECT_TRUE(supports(gemm("gemm.tn", limit, 64)).ok);
  const Support tn_m = supports(gemm("gemm.tn", limit + 1, 64));
  EXPECT_FALSE(tn_m.ok);
  EXPECT_NE(tn_m.reason.find("below 2^28"), std::string::npos) << tn_m.reason;
  EXPECT_TRUE(supports(gemm("gemm.nn", limit + 1, 64)).ok) << "A is K-contiguous in nn";
  for (const char* name : {"gemm.nn", "gemm.tn", "gemm_bias_gelu.nn"}) {
    EXPECT_TRUE(supports(gemm(name, 64, limit)).ok) << name;
    const Support n = supports(gemm(name, 64, limit + 1));
    EXPECT_FALSE(n.ok) << name;
    EXPECT_NE(n.reason.find("below 2^28"), std::string::npos) << name << ": " << n.reason;
  }
  EXPECT_TRUE(supports(gemm("gemm.nt", limit + 1, 64)).ok) << "both operands K-contiguous";
  EXPECT_TRUE(supports(gemm("gemm.nt", 64, limit + 1)).ok) << "both operands K-contiguous";

  // Untuned dispatch of a GELU GEMM (no cuBLASLt) past the limit still finds a CUDA-core variant.
  const Problem gelu = gemm("gemm_bias_gelu.tn", limit + 1, 64);
  const DispatchChoice choice = Dispatcher(h200).lookup(gelu);
  EXPECT_EQ(choice.variant, "warp_tiled_broadcast");
  EXPECT_TRUE(catalogue().find_variant(gelu.primitive, choice.variant)->supports(gelu, choice.config, h200).ok);
}

}  // namespace
}  // namespace shapetune
