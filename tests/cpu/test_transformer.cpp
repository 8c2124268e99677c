// The Transformer runner's host side: the TechJam cases, its problems (and shapes/transformer.yaml
// kept equal to them), its parameters, the float64 forward's causality, the safetensors round
// trip of weights, and the command line's refusals.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "cli/cli.hpp"
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

TEST(Transformer, EveryOpIsAValidProblemOfTheCatalogue) {
  for (int n = 1; n <= kTechJamCases; ++n)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const ModelOp& op : transformer_ops(*techjam_case(n), dtype)) {
        const Primitive* p = catalogue().find_primitive(op.problem.primitive);
        ASSERT_NE(p, nullptr) << op.problem.key();
        EXPECT_TRUE(std::find(p->dtypes.begin(), p->dtypes.end(), op.problem.dtype) != p->dtypes.end())
            << op.problem.key();
        EXPECT_TRUE(p->validate_shape(op.problem.shape).ok) << op.problem.key();
      }
  const auto f32 = transformer_ops(*techjam_case(1), DType::f32);
  EXPECT_EQ(f32[0].problem.dtype, DType::f32) << "LayerNorms in f32";
  EXPECT_EQ(f32[1].problem.dtype, DType::tf32) << "products in TF32";
}

// shapes/transformer.yaml holds exactly the problems of cases 1-13 in f32, f16 and bf16.
TEST(Transformer, ShapeFileHoldsExactlyTheRunnersProblems) {
  std::set<std::string> wanted;
  for (int n = 1; n <= 13; ++n)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const ModelOp& op : transformer_ops(*techjam_case(n), dtype)) wanted.insert(op.problem.key());
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
  test_support::TempDir dir;
  { std::ofstream(dir.file("bad.safetensors")) << "not safetensors"; }
  const auto bad = run({"run", "transformer", "--case", "1", "--weights", dir.file("bad.safetensors")});
  EXPECT_EQ(bad.first, 2);
  EXPECT_TRUE(contains(bad.second, dir.file("bad.safetensors"))) << bad.second;
}

}  // namespace
}  // namespace shapetune
