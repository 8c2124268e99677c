// Every shape matrix committed under shapes/ parses against the real catalogue, so a broken
// matrix never reaches a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

TEST(RepoShapeFiles, AllParse) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test_support::source_dir() / "shapes")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const ShapeFile file = load_shape_file(entry.path().string(), catalogue());
    EXPECT_FALSE(file.problems.empty()) << entry.path();
  }
  EXPECT_GE(files, 2);
}

TEST(RepoShapeFiles, QuickHoldsTheSeedShapeEveryFamilyAndIsSmall) {
  const ShapeFile quick = load_shape_file((test_support::source_dir() / "shapes" / "quick.yaml").string(), catalogue());
  bool seed = false;
  std::set<std::string> families;
  for (const auto& p : quick.problems) {
    seed = seed || p.problem.key() == "softmax/f32/rows=1024,cols=1000";
    const std::string& name = p.problem.primitive;
    families.insert(name.substr(0, name.find('.')));  // activation.gelu -> activation, lstm.forward -> lstm
  }
  EXPECT_TRUE(seed);
  const std::set<std::string> expected = {"softmax",         "layernorm", "residual_layernorm",
                                          "adam",            "activation", "activation_backward",
                                          "bias_activation", "softmax_xent", "gemm", "gemm_bias_gelu",
                                          "lstm",            "gru",       "attention", "qkv_projection"};
  EXPECT_EQ(families, expected);
  // About two minutes on an H200 (105-108 s measured with 30 problems, 2026-12-04): a bound on the
  // problem count keeps it so.
  EXPECT_LE(quick.problems.size(), 31u);
}

}  // namespace
}  // namespace shapetune
