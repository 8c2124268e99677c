// Every shape matrix committed under shapes/ parses against the real catalogue, so a broken
// matrix never reaches a GPU.
#include <gtest/gtest.h>

#include <filesystem>

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

TEST(RepoShapeFiles, QuickHoldsTheSeedShapeAndIsSmall) {
  const ShapeFile quick = load_shape_file((test_support::source_dir() / "shapes" / "quick.yaml").string(), catalogue());
  bool seed = false;
  for (const auto& p : quick.problems) seed = seed || p.problem.key() == "softmax/f32/rows=1024,cols=1000";
  EXPECT_TRUE(seed);
  EXPECT_LE(quick.problems.size(), 16u);
}

}  // namespace
}  // namespace shapetune
