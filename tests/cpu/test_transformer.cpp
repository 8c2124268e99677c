// The Transformer runner's host side: the TechJam cases, its problems (and shapes/transformer.yaml
// kept equal to them), its parameters, the float64 forward's causality and its valid-token mask,
// the drawn valid lengths, the safetensors round trip of weights, inputs and lengths, and the
// command line's refusals.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "models/dispatcher.hpp"
#include "models/safetensors.hpp"
#include "models/transformer.hpp"
#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using test_support::contains;

TEST(Transformer, TheFourteenTechJamCases) {
  EXPECT_FALSE(techjam_case(0));
  EXPECT_FALSE(techjam_case(15));
  const TransformerShape c14 = *techjam_case(14);
  EXPECT_EQ(c14.describe(), "B 32, S 100000, D 1024, heads 16, FFN 1024, layers 2");
  EXPECT_EQ(techjam_case(8)->head_dim(), 256);
  EXPECT_EQ(techjam_case(7)->head_dim(), 8);
  for (int n = 1; n <= kTechJamCases; ++n) EXPECT_EQ(transformer_shape_error(*techjam_case(n)), "") << n;
  EXPECT_NE(transformer_shape_error({1, 8, 30, 4, 16, 1}), "") << "D not a multiple of heads";
}

// The ops the runner resolves for a case: transformer_ops, the fused ops that may replace two of
// them, and the packed QKV path's two that may replace two others.
std::vector<ModelOp> resolved_ops(const TransformerShape& s, DType dtype, bool padded,
                                  std::optional<AttentionRounding> rounding = std::nullopt) {
  const AttentionRounding r = rounding.value_or(default_attention_rounding(s, dtype, DispatchMode::tuned));
  std::vector<ModelOp> ops = transformer_ops(s, dtype, padded, r);
  for (ModelOp& op : transformer_fused_ops(s, dtype)) ops.push_back(std::move(op));
  for (ModelOp& op : transformer_packed_qkv_ops(s, dtype, padded, r)) ops.push_back(std::move(op));
  return ops;
}

TEST(Transformer, EveryOpIsAValidProblemOfTheCatalogue) {
  for (int n = 1; n <= kTechJamCases; ++n)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const bool padded : {false, true})
        for (const ModelOp& op : resolved_ops(*techjam_case(n), dtype, padded)) {
          const Primitive* p = catalogue().find_primitive(op.problem.primitive);
          ASSERT_NE(p, nullptr) << op.problem.key();
          EXPECT_TRUE(std::find(p->dtypes.begin(), p->dtypes.end(), op.problem.dtype) != p->dtypes.end())
              << op.problem.key();
          EXPECT_TRUE(p->validate_shape(op.problem.shape).ok) << op.problem.key();
        }
  const auto f32 = transformer_ops(*techjam_case(1), DType::f32);
  EXPECT_EQ(f32[0].problem.dtype, DType::f32) << "LayerNorms in f32";
  EXPECT_EQ(f32[1].problem.dtype, DType::tf32) << "products in TF32";
  const auto padded = transformer_ops(*techjam_case(1), DType::f16, true);
  ASSERT_EQ(padded.size(), f32.size() + 1);
  EXPECT_EQ(padded[2].problem.primitive, "attention.causal.split.padded.rounded");
  EXPECT_EQ(padded.back().problem.primitive, "activation_backward.relu") << "the output's mask product";
  EXPECT_EQ(padded.back().problem.dtype, DType::f16);
  EXPECT_EQ(padded.back().problem.shape.at("n"), 64 * 128 * 128);
  EXPECT_EQ(transformer_ops(*techjam_case(1), DType::f16)[2].problem.primitive, "attention.causal.split.rounded");
  EXPECT_EQ(f32[2].problem.primitive, "attention.causal.split") << "an f32 model's attention is the flash one";
}

// The fused projection + residual LayerNorm exists for 16-bit models whose rows a tile spans
// (D up to 256): at the output projection (k = D) and the FFN's second (k = FFN).
TEST(Transformer, FusedOpsAreTheTwoProjectionsBeforeAResidual) {
  const std::vector<ModelOp> f16 = transformer_fused_ops(*techjam_case(1), DType::f16);
  ASSERT_EQ(f16.size(), 2u);
  EXPECT_EQ(f16[0].problem.key(), "gemm_bias_residual_layernorm.nt/f16/m=8192,n=128,k=128");
  EXPECT_EQ(f16[1].problem.key(), "gemm_bias_residual_layernorm.nt/f16/m=8192,n=128,k=128");
  EXPECT_EQ(transformer_fused_ops(*techjam_case(7), DType::bf16)[1].problem.key(),
            "gemm_bias_residual_layernorm.nt/bf16/m=8192,n=32,k=32");
  const TransformerShape wide_ffn{2, 8, 64, 4, 512, 1};
  EXPECT_EQ(transformer_fused_ops(wide_ffn, DType::f16)[1].problem.key(),
            "gemm_bias_residual_layernorm.nt/f16/m=16,n=64,k=512");
  EXPECT_TRUE(transformer_fused_ops(*techjam_case(1), DType::f32).empty());
  EXPECT_TRUE(transformer_fused_ops(*techjam_case(8), DType::f16).empty()) << "D 1024";
  EXPECT_TRUE(transformer_fused_ops(*techjam_case(14), DType::bf16).empty());
}

// The attention rounds as the eager reference in 16-bit models up to S = 16384 with the tuned
// dispatch; as a flash attention otherwise (f32, case 14, the library dispatch); either on request.
TEST(Transformer, AttentionRoundingDefaultsAndChoice) {
  const TransformerShape c1 = *techjam_case(1), c14 = *techjam_case(14);
  EXPECT_EQ(default_attention_rounding(c1, DType::f16, DispatchMode::tuned), AttentionRounding::eager);
  EXPECT_EQ(default_attention_rounding(c1, DType::bf16, DispatchMode::tuned), AttentionRounding::eager);
  EXPECT_EQ(default_attention_rounding(c1, DType::f32, DispatchMode::tuned), AttentionRounding::flash);
  EXPECT_EQ(default_attention_rounding(c14, DType::f16, DispatchMode::tuned), AttentionRounding::flash);
  EXPECT_EQ(default_attention_rounding(c1, DType::f16, DispatchMode::library), AttentionRounding::flash);
  EXPECT_EQ(transformer_ops(c1, DType::f16, true, AttentionRounding::flash)[2].problem.primitive,
            "attention.causal.split.padded");
  EXPECT_EQ(transformer_ops(c1, DType::f32, false, AttentionRounding::eager)[2].problem.primitive,
            "attention.causal.split.rounded");
  EXPECT_EQ(parse_attention_rounding("eager"), AttentionRounding::eager);
  EXPECT_EQ(parse_attention_rounding("flash"), AttentionRounding::flash);
  EXPECT_FALSE(parse_attention_rounding("fast"));
  EXPECT_EQ(attention_rounding_name(AttentionRounding::eager), "eager");
}

// The packed QKV path: one GEMM of n = 3 D (the concatenated weights) in the model's product type,
// and the packed attention with the same mask and rounding as the split one it replaces.
TEST(Transformer, PackedQkvOpsAreOneGemmAndThePackedAttention) {
  const std::vector<ModelOp> f16 =
      transformer_packed_qkv_ops(*techjam_case(1), DType::f16, false, AttentionRounding::eager);
  ASSERT_EQ(f16.size(), 2u);
  EXPECT_EQ(f16[0].problem.key(), "gemm_bias.nt/f16/m=8192,n=384,k=128");
  EXPECT_EQ(f16[1].problem.key(), "attention.causal.packed.rounded/f16/B=64,H=4,S=128,hd=32");
  const std::vector<ModelOp> f32 =
      transformer_packed_qkv_ops(*techjam_case(8), DType::f32, true, AttentionRounding::flash);
  EXPECT_EQ(f32[0].problem.key(), "gemm_bias.nt/tf32/m=8192,n=3072,k=1024");
  EXPECT_EQ(f32[1].problem.key(), "attention.causal.packed.padded/tf32/B=64,H=4,S=128,hd=256");
  for (const QkvLayout q : {QkvLayout::table, QkvLayout::split, QkvLayout::packed})
    EXPECT_EQ(parse_qkv_layout(qkv_layout_name(q)), q);
  EXPECT_FALSE(parse_qkv_layout("fused"));
}

TEST(Transformer, FusedResidualChoicesRoundTripByName) {
  for (const FusedResidual f : {FusedResidual::table, FusedResidual::on, FusedResidual::off})
    EXPECT_EQ(parse_fused_residual(fused_residual_name(f)), f);
  EXPECT_EQ(fused_residual_name(FusedResidual::table), "table");
  EXPECT_FALSE(parse_fused_residual("auto"));
  EXPECT_FALSE(parse_fused_residual(""));
}

// shapes/transformer_case1.yaml: exactly case 1's problems in f16, as the runner binds them by default.
TEST(Transformer, CaseOneShapeFileHoldsExactlyItsProblems) {
  std::set<std::string> wanted, in_file;
  for (const ModelOp& op : resolved_ops(*techjam_case(1), DType::f16, false)) wanted.insert(op.problem.key());
  const ShapeFile file =
      load_shape_file((test_support::source_dir() / "shapes" / "transformer_case1.yaml").string(), catalogue());
  for (const auto& p : file.problems) in_file.insert(p.problem.key());
  EXPECT_EQ(in_file, wanted);
}

// Without a table every op of cases 1-13, in either attention rounding, resolves to a variant that
// runs it on an H200: the rounded attention included (naive at head dims the flash kernel lacks).
TEST(Transformer, EveryOpResolvesUntunedToAVariantThatRunsIt) {
  const DeviceLimits h200 = nominal_device_limits();
  const Dispatcher untuned(h200);
  for (int n = 1; n <= 13; ++n)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const bool padded : {false, true})
        for (const AttentionRounding rounding : {AttentionRounding::eager, AttentionRounding::flash})
          for (const ModelOp& op : resolved_ops(*techjam_case(n), dtype, padded, rounding)) {
            const DispatchChoice choice = untuned.lookup(op.problem);
            const Variant* v = catalogue().find_variant(op.problem.primitive, choice.variant);
            ASSERT_NE(v, nullptr) << op.problem.key() << " -> " << choice.variant;
            const Support s = v->supports(op.problem, choice.config, h200);
            EXPECT_TRUE(s.ok) << op.problem.key() << " -> " << choice.variant << ": " << s.reason;
          }
}

// The eager forward stores the scores and the probabilities: in f16 it differs from the flash
// forward by roundings (a few units of f16 at most), and in both the masked rows agree with the
// unmasked model's.
TEST(Transformer, EagerReferenceRoundsScoresAndProbabilities) {
  const TransformerShape s{2, 12, 32, 2, 48, 2};
  const auto w = generate_transformer_weights(s, DType::f16, 5);
  const TensorValues x = generate_transformer_input(s, DType::f16, 5);
  const std::vector<double> eager = transformer_reference(s, DType::f16, w, x, {}, AttentionRounding::eager);
  const std::vector<double> flash = transformer_reference(s, DType::f16, w, x, {}, AttentionRounding::flash);
  EXPECT_EQ(transformer_reference(s, DType::f16, w, x), eager) << "eager is the tuned default in f16";
  std::size_t differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < eager.size(); ++i) {
    differ += eager[i] != flash[i];
    worst = std::max(worst, std::abs(eager[i] - flash[i]));
  }
  EXPECT_GT(differ, eager.size() / 20) << "the rounded scores and probabilities reach the output";
  EXPECT_LT(worst, 0.05);
  // An f32 model (storage f32): eager rounds to f32 only, within 1e-5 of flash.
  const auto w32 = generate_transformer_weights(s, DType::f32, 5);
  const TensorValues x32 = generate_transformer_input(s, DType::f32, 5);
  const std::vector<double> e32 = transformer_reference(s, DType::f32, w32, x32, {}, AttentionRounding::eager);
  const std::vector<double> f32 = transformer_reference(s, DType::f32, w32, x32, {}, AttentionRounding::flash);
  for (std::size_t i = 0; i < e32.size(); ++i) ASSERT_NEAR(e32[i], f32[i], 1e-5) << i;
}

// shapes/transformer.yaml holds exactly the problems of cases 1-13 in f32, f16 and bf16, with and
// without a mask, the fused ops that may replace two of them included.
TEST(Transformer, ShapeFileHoldsExactlyTheRunnersProblems) {
  std::set<std::string> wanted;
  for (int n = 1; n <= 13; ++n)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const bool padded : {false, true})
        for (const ModelOp& op : resolved_ops(*techjam_case(n), dtype, padded)) wanted.insert(op.problem.key());
  std::set<std::string> in_file;
  const ShapeFile file = load_shape_file((test_support::source_dir() / "shapes" / "transformer.yaml").string(), catalogue());
  for (const auto& p : file.problems) EXPECT_TRUE(in_file.insert(p.problem.key()).second) << "twice: " << p.problem.key();
  for (const auto& key : wanted) EXPECT_TRUE(in_file.count(key)) << "missing from the file: " << key;
  for (const auto& key : in_file) EXPECT_TRUE(wanted.count(key)) << "not a problem of the runner: " << key;
}

TEST(Transformer, WeightsAreDeterministicAndShapedAsThePyTorchModule) {
  const TransformerShape s{2, 5, 16, 4, 24, 2};
  const auto a = generate_transformer_weights(s, DType::f16, 7), b = generate_transformer_weights(s, DType::f16, 7);
  const auto c = generate_transformer_weights(s, DType::f16, 8);
  ASSERT_EQ(a.size(), 2u * 12 + 2);
  EXPECT_EQ(a.at("layers.1.attn.qkv.weight").shape, (std::vector<std::int64_t>{48, 16}));
  EXPECT_EQ(a.at("layers.0.ffn.fc2.weight").shape, (std::vector<std::int64_t>{16, 24}));
  EXPECT_EQ(a.at("ln_f.bias").shape, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(a.at("layers.0.ffn.fc1.weight").values, b.at("layers.0.ffn.fc1.weight").values);
  EXPECT_NE(a.at("layers.0.ffn.fc1.weight").values, c.at("layers.0.ffn.fc1.weight").values);
  for (float v : a.at("layers.0.ffn.fc2.weight").values) EXPECT_LE(std::abs(v), 1 / std::sqrt(24.f) + 1e-3f);
  for (float v : a.at("layers.0.ln1.weight").values) EXPECT_NEAR(v, 1.f, 0.101f);

  test_support::TempDir dir;
  write_tensor_values(dir.file("w.safetensors"), a, DType::bf16);
  const auto back = read_tensor_values(dir.file("w.safetensors"));
  ASSERT_EQ(back.size(), a.size());
  for (const auto& [name, t] : back) {
    EXPECT_EQ(t.shape, a.at(name).shape) << name;
    for (std::size_t i = 0; i < t.values.size(); ++i)
      EXPECT_NEAR(t.values[i], a.at(name).values[i], std::abs(a.at(name).values[i]) * 0x1p-8 + 1e-30) << name;
  }
}

// The input is drawn in fixed chunks of 2^24 values on all cores: the same values on every machine
// and run, a second chunk that is its own stream (not a copy of the first), and unit normals throughout.
TEST(Transformer, TheInputIsDeterministicAcrossItsChunks) {
  const TransformerShape s{1, 4097, 4096, 4, 64, 1};  // 2^24 + 4096 values: a second, short chunk
  const TensorValues a = generate_transformer_input(s, DType::f32, 3), b = generate_transformer_input(s, DType::f32, 3);
  ASSERT_EQ(a.values.size(), (std::size_t{1} << 24) + 4096);
  EXPECT_EQ(a.values, b.values);
  const std::size_t second = std::size_t{1} << 24;
  EXPECT_FALSE(std::equal(a.values.begin() + second, a.values.end(), a.values.begin()));
  double sum = 0, squares = 0;
  for (std::size_t i = second; i < a.values.size(); ++i) sum += a.values[i], squares += double(a.values[i]) * a.values[i];
  EXPECT_NEAR(sum / 4096, 0, 0.1);
  EXPECT_NEAR(squares / 4096, 1, 0.1);
  for (float v : generate_transformer_input(TransformerShape{1, 3, 8, 2, 8, 1}, DType::f16, 3).values)
    EXPECT_EQ(v, __half2float(__float2half_rn(v)));
}

// Position i's output depends on positions <= i alone; and rows of one batch on that batch alone.
TEST(Transformer, TheFloat64ForwardIsCausal) {
  const TransformerShape s{2, 6, 8, 2, 12, 2};
  const auto w = generate_transformer_weights(s, DType::f32, 3);
  TensorValues x = generate_transformer_input(s, DType::f32, 3);
  const std::vector<double> before = transformer_reference(s, DType::f32, w, x);
  x.values[(0 * 6 + 4) * 8 + 1] += 1.0f;  // batch 0, position 4
  const std::vector<double> after = transformer_reference(s, DType::f32, w, x);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 6; ++i) {
      bool same = true;
      for (std::int64_t d = 0; d < 8; ++d) same = same && before[(b * 6 + i) * 8 + d] == after[(b * 6 + i) * 8 + d];
      EXPECT_EQ(same, b == 1 || i < 4) << "batch " << b << " position " << i;
    }
  for (double v : before) EXPECT_TRUE(std::isfinite(v));
}

// Lengths 1, S and between in one batch: the output is exactly 0 past each row's length and, at
// valid positions, the unmasked forward's bit for bit (a causal query reads no later key, so the
// masked keys are only ever later ones; the zeroings change invalid positions alone).
TEST(Transformer, TheFloat64ForwardZeroesPaddedPositionsAndKeepsValidOnes) {
  const TransformerShape s{3, 7, 8, 2, 12, 2};
  const ValidLengths lengths{1, 7, 4};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const auto w = generate_transformer_weights(s, dtype, 5);
    TensorValues x = generate_transformer_input(s, dtype, 5);
    const std::vector<double> plain = transformer_reference(s, dtype, w, x);
    const std::vector<double> masked = transformer_reference(s, dtype, w, x, lengths);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t i = 0; i < s.seq; ++i)
        for (std::int64_t d = 0; d < s.dim; ++d) {
          const std::size_t e = static_cast<std::size_t>((b * s.seq + i) * s.dim + d);
          if (i < lengths[static_cast<std::size_t>(b)])
            ASSERT_EQ(masked[e], plain[e]) << "batch " << b << " position " << i;
          else
            ASSERT_EQ(masked[e], 0.0) << "batch " << b << " position " << i;
        }
    // The inputs (and with them every hidden state) at invalid positions changed: the output is the same.
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t i = lengths[static_cast<std::size_t>(b)]; i < s.seq; ++i)
        for (std::int64_t d = 0; d < s.dim; ++d)
          x.values[static_cast<std::size_t>((b * s.seq + i) * s.dim + d)] *= -3.f;
    EXPECT_EQ(transformer_reference(s, dtype, w, x, lengths), masked);
    EXPECT_NE(transformer_reference(s, dtype, w, x), plain) << "the change reaches the unmasked output";
    // Every row at full length is the unmasked forward.
    EXPECT_EQ(transformer_reference(s, dtype, w, x, ValidLengths(3, 7)), transformer_reference(s, dtype, w, x));
  }
  const auto w = generate_transformer_weights(s, DType::f32, 5);
  const TensorValues x = generate_transformer_input(s, DType::f32, 5);
  EXPECT_THROW(transformer_reference(s, DType::f32, w, x, {1, 0, 7}), std::invalid_argument);
  EXPECT_THROW(transformer_reference(s, DType::f32, w, x, {1, 8, 7}), std::invalid_argument);
  EXPECT_THROW(transformer_reference(s, DType::f32, w, x, {1, 7}), std::invalid_argument);
}

TEST(Transformer, ValidLengthsAreCheckedAndDrawnFromTheSeed) {
  const TransformerShape s{4000, 100, 8, 2, 8, 1};
  EXPECT_EQ(valid_lengths_error(s, {}), "");
  EXPECT_TRUE(contains(valid_lengths_error({2, 5, 8, 2, 8, 1}, {1, 6}), "outside [1, S] = [1, 5]"));
  EXPECT_TRUE(contains(valid_lengths_error({2, 5, 8, 2, 8, 1}, {0, 5}), "batch row 0"));
  EXPECT_TRUE(contains(valid_lengths_error({2, 5, 8, 2, 8, 1}, {5}), "1 valid lengths where the batch is 2"));
  EXPECT_FALSE(has_padding({2, 5, 8, 2, 8, 1}, {5, 5}));
  EXPECT_TRUE(has_padding({2, 5, 8, 2, 8, 1}, {5, 4}));

  EXPECT_EQ(generate_valid_lengths(s, 0, 1), ValidLengths(4000, 100));
  for (const double ratio : {0.1, 0.25, 0.5, 0.9}) {
    const ValidLengths a = generate_valid_lengths(s, ratio, 3);
    EXPECT_EQ(a, generate_valid_lengths(s, ratio, 3));
    EXPECT_NE(a, generate_valid_lengths(s, ratio, 4));
    EXPECT_EQ(valid_lengths_error(s, a), "");
    double padding = 0;
    for (const std::int32_t l : a) padding += 100 - l;
    EXPECT_NEAR(padding / (4000 * 100), ratio, 0.01) << ratio;
    EXPECT_GT(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()), 10) << "lengths vary";
  }
  EXPECT_EQ(generate_valid_lengths(s, 0.999, 1), ValidLengths(4000, 1)) << "every row keeps one position";
  EXPECT_EQ(generate_valid_lengths({5, 1, 8, 2, 8, 1}, 0.5, 1), ValidLengths(5, 1)) << "S 1: nothing to pad";
  EXPECT_THROW(generate_valid_lengths(s, 1, 1), std::invalid_argument);
  EXPECT_THROW(generate_valid_lengths(s, -0.5, 1), std::invalid_argument);
}

TEST(Transformer, InputFilesCarryValidLengths) {
  const TransformerShape s{2, 5, 4, 2, 8, 1};
  const TensorValues x = generate_transformer_input(s, DType::f16, 2);
  test_support::TempDir dir;
  write_transformer_tensor(dir.file("x.st"), "x", x, {3, 5}, DType::f16);
  const TransformerInput in = read_transformer_input(dir.file("x.st"), s);
  EXPECT_EQ(in.x.values, x.values);
  EXPECT_EQ(in.valid_lengths, (ValidLengths{3, 5}));
  write_transformer_tensor(dir.file("plain.st"), "x", x, {}, DType::f32);
  EXPECT_TRUE(read_transformer_input(dir.file("plain.st"), s).valid_lengths.empty());
  EXPECT_EQ(read_safetensors(dir.file("plain.st")).tensors().size(), 1u) << "no lengths written without a mask";

  const auto refusal = [&](const std::string& dtype, std::vector<std::int64_t> shape, std::vector<std::byte> bytes) {
    const std::vector<std::byte> x_bytes(static_cast<std::size_t>(2 * 5 * 4 * 4));
    std::vector<SafetensorsTensor> tensors(2);
    tensors[0] = {"x", "F32", {2, 5, 4}, std::span<const std::byte>(x_bytes)};
    tensors[1] = {kValidLengthsTensor, dtype, std::move(shape), std::span<const std::byte>(bytes)};
    write_safetensors(dir.file("bad.st"), tensors);
    try {
      read_transformer_input(dir.file("bad.st"), s);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto i32 = [](std::vector<std::int32_t> v) {
    std::vector<std::byte> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  const std::string f32 = refusal("F32", {2}, std::vector<std::byte>(8));
  EXPECT_TRUE(contains(f32, dir.file("bad.st")) && contains(f32, "tensor valid_lengths is F32")) << f32;
  EXPECT_TRUE(contains(refusal("I32", {1, 2}, i32({3, 5})), "tensor valid_lengths is [1x2]"));
  EXPECT_TRUE(contains(refusal("I32", {3}, i32({3, 5, 5})), "valid lengths are I32 [B] = [2]"));
  const std::string zero = refusal("I32", {2}, i32({0, 5}));
  EXPECT_TRUE(contains(zero, dir.file("bad.st")) && contains(zero, "valid_lengths: valid length 0 of batch row 0"))
      << zero;
  EXPECT_TRUE(contains(refusal("I32", {2}, i32({3, 6})), "outside [1, S] = [1, 5]"));
  EXPECT_TRUE(contains(refusal("I32", {2}, i32({3, 5})), "no error"));
}

TEST(Transformer, CommandLineRefusalsNeedNoGpu) {
  auto run = [](std::vector<std::string> args) {
    const auto result = test_support::run_shapetune(args);
    return std::make_pair(result.code, result.err);
  };
  EXPECT_EQ(run({"run", "transformer"}).first, 2);
  EXPECT_TRUE(contains(run({"run", "transformer"}).second, "give --case N"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "15"}).second, "--case"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "1", "--dtype", "f64"}).second, "--dtype must be f32, f16 or bf16"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "1", "--heads", "3"}).second, "multiple of heads"));
  EXPECT_TRUE(contains(run({"run", "gpt"}).second, "unknown model 'gpt'"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "1", "--fused-residual", "yes"}).second,
                       "--fused-residual must be table, on or off, got 'yes'"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "1", "--qkv-layout", "interleaved"}).second,
                       "--qkv-layout must be table, split or packed, got 'interleaved'"));
  test_support::TempDir dir;
  { std::ofstream(dir.file("bad.safetensors")) << "not safetensors"; }
  const auto bad = run({"run", "transformer", "--case", "1", "--weights", dir.file("bad.safetensors")});
  EXPECT_EQ(bad.first, 2);
  EXPECT_TRUE(contains(bad.second, dir.file("bad.safetensors"))) << bad.second;

  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "2", "--padding-ratio", "1"}).second, "below 1"));
  EXPECT_TRUE(contains(run({"run", "transformer", "--case", "2", "--padding-ratio", "-0.1"}).second,
                       "--padding-ratio must be between 0 and 1"));
  EXPECT_TRUE(
      contains(run({"run", "transformer", "--case", "2", "--padding-ratio", "half"}).second, "expects a number"));
  const TransformerShape two{2, 5, 4, 2, 8, 1};
  const std::vector<std::string> small{"run", "transformer", "--batch", "2", "--seq", "5", "--dim", "4", "--heads", "2",
                                       "--ffn", "8", "--layers", "1", "--input"};
  const auto with_input = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = small;
    args.push_back(dir.file("x.st"));
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  write_transformer_tensor(dir.file("x.st"), "x", generate_transformer_input(two, DType::f16, 1), {1, 5}, DType::f16);
  const auto both = with_input({"--padding-ratio", "0.5"});
  EXPECT_EQ(both.first, 2);
  EXPECT_TRUE(contains(both.second, "give one or the other")) << both.second;
  // A length out of range, written as I32 by hand: refused naming the file and the tensor.
  const std::vector<std::byte> x_bytes(2 * 5 * 4 * 4);
  const std::int32_t lengths[2] = {5, 9};
  const std::vector<SafetensorsTensor> tensors{
      {"x", "F32", {2, 5, 4}, std::span<const std::byte>(x_bytes)},
      {kValidLengthsTensor, "I32", {2}, std::as_bytes(std::span<const std::int32_t>(lengths))}};
  write_safetensors(dir.file("x.st"), tensors);
  const auto out_of_range = with_input({});
  EXPECT_EQ(out_of_range.first, 2);
  EXPECT_TRUE(contains(out_of_range.second, dir.file("x.st") + ": tensor valid_lengths: valid length 9 of batch row 1"))
      << out_of_range.second;
}

}  // namespace
}  // namespace shapetune
