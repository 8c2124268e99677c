// Untuned dispatch: what a runner gets for a problem nothing was tuned for. Each primitive names
// its default variant and the next choices where the default cannot run a problem; past those,
// dispatch takes the first registered variant that can, which in most ladders is the plainest
// rung (a performance cliff: GEMM's naive was 7x slower than cuBLASLt on the MLP's layer). So every
// problem the repository sweeps must resolve, untuned, to a declared choice that runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "models/dispatcher.hpp"
#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

TEST(UntunedDispatch, DeclaredChoicesAreVariantsOfTheirPrimitive) {
  for (const Primitive* p : catalogue().primitives()) {
    EXPECT_NE(catalogue().find_variant(p->name, p->default_variant), nullptr) << p->name << "/" << p->default_variant;
    std::set<std::string> seen{p->default_variant};
    for (const std::string& name : p->fallback_variants) {
      EXPECT_NE(catalogue().find_variant(p->name, name), nullptr) << p->name << "/" << name;
      EXPECT_TRUE(seen.insert(name).second) << p->name << " names " << name << " twice";
    }
  }
}

// On an H200's limits (the device the committed matrices are swept on), every problem of every
// shape file under shapes/.
TEST(UntunedDispatch, EveryCommittedProblemTakesADeclaredChoiceThatRunsIt) {
  const DeviceLimits limits = nominal_device_limits();
  const Dispatcher untuned(limits);
  std::set<std::string> checked;
  for (const auto& entry : std::filesystem::directory_iterator(test_support::source_dir() / "shapes")) {
    if (entry.path().extension() != ".yaml") continue;
    for (const PlannedProblem& planned : load_shape_file(entry.path().string(), catalogue()).problems) {
      const Problem& problem = planned.problem;
      if (!checked.insert(problem.key()).second) continue;
      const Primitive& primitive = *catalogue().find_primitive(problem.primitive);
      const DispatchChoice choice = untuned.lookup(problem);
      const std::string where = entry.path().filename().string() + ": " + problem.key() + " -> " + choice.variant;
      EXPECT_EQ(choice.source, DispatchSource::fallback) << where;
      const auto& declared = primitive.fallback_variants;
      EXPECT_TRUE(choice.variant == primitive.default_variant ||
                  std::find(declared.begin(), declared.end(), choice.variant) != declared.end())
          << where << ": neither the default nor a declared fallback";
      const Variant& variant = *catalogue().find_variant(problem.primitive, choice.variant);
      const Support support = variant.supports(problem, choice.config, limits);
      EXPECT_TRUE(support.ok) << where << ": " << support.reason;
    }
  }
  EXPECT_GT(checked.size(), 100u) << "the shape files were not found under " << test_support::source_dir();
}

}  // namespace
}  // namespace shapetune
