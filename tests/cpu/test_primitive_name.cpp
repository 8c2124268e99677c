// Dotted primitive names: family and attributes, closed sets of attributes, and the GEMM names.
#include "core/primitive_name.hpp"

#include <gtest/gtest.h>

#include "kernels/gemm/gemm_kind.hpp"

namespace shapetune {
namespace {

TEST(PrimitiveName, FamilyAndAttributes) {
  const auto plain = PrimitiveName::parse("softmax");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->family, "softmax");
  EXPECT_TRUE(plain->attributes.empty());

  const auto attention = PrimitiveName::parse("attention.causal.packed");
  ASSERT_TRUE(attention);
  EXPECT_EQ(attention->family, "attention");
  EXPECT_EQ(attention->attributes, (std::vector<std::string>{"causal", "packed"}));
  EXPECT_TRUE(attention->has("packed"));
  EXPECT_FALSE(attention->has("pack"));
  EXPECT_EQ(attention->one_of({"causal", "full"}), "causal");
  EXPECT_EQ(attention->one_of({"split", "packed"}), "packed");
  EXPECT_EQ(attention->one_of({"lstm", "gru"}), std::nullopt);
  EXPECT_EQ(attention->text(), "attention.causal.packed");
}

TEST(PrimitiveName, OneOfRefusesTwoOfASet) {
  const auto both = PrimitiveName::parse("attention.causal.full");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->one_of({"causal", "full"}), std::nullopt);
}

TEST(PrimitiveName, RejectsMalformedNames) {
  for (const char* bad : {"", ".", "a.", ".a", "a..b", "Softmax", "gemm.NN", "a b", "a-b", "a.b/c", "x`y`"})
    EXPECT_FALSE(PrimitiveName::parse(bad)) << '"' << bad << '"';
  EXPECT_TRUE(PrimitiveName::parse("gemm_bias_gelu.nt"));
  EXPECT_TRUE(PrimitiveName::parse("lstm_cell.forward"));
}

TEST(PrimitiveName, IndexIn) {
  EXPECT_EQ(index_in("nt", kernels::gemm::kGemmLayouts), 1u);
  EXPECT_EQ(index_in("tt", kernels::gemm::kGemmLayouts), std::nullopt);
  EXPECT_EQ(index_in("b", {"a", "b"}), 1u);
}

TEST(GemmKind, EveryNameParsesToItsOpAndLayout) {
  namespace kg = kernels::gemm;
  const auto names = kg::gemm_primitive_names();
  ASSERT_EQ(names.size(), 12u);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto kind = kg::parse_gemm_primitive(names[i]);
    ASSERT_TRUE(kind) << names[i];
    EXPECT_EQ(static_cast<std::size_t>(kind->epilogue), i / 3) << names[i];
    EXPECT_EQ(static_cast<std::size_t>(kind->layout), i % 3) << names[i];
  }
  EXPECT_EQ(names[11], "gemm_bias_gelu.tn");
  for (const char* bad : {"gemm", "gemm.nn.x", "gemm.tt", "gemm_bias_tanh.nn", "softmax", "gemm.nn "})
    EXPECT_FALSE(kg::parse_gemm_primitive(bad)) << bad;
}

}  // namespace
}  // namespace shapetune
