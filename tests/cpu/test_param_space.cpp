#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/param_space.hpp"

namespace shapetune {
namespace {

std::vector<std::string> keys_of(const std::vector<Config>& configs) {
  std::vector<std::string> keys;
  for (const auto& config : configs) keys.push_back(config.key());
  return keys;
}

ParamSpace block_and_vec() {
  return ParamSpace({{"block_size", {128, 256}, "threads per block"}, {"vec", {1, 2, 4}, "elements per load"}});
}

TEST(ParamSpace, EnumeratesLexicographicallyLastAxisFastest) {
  EXPECT_EQ(keys_of(block_and_vec().enumerate()),
            (std::vector<std::string>{"block_size=128,vec=1", "block_size=128,vec=2", "block_size=128,vec=4",
                                      "block_size=256,vec=1", "block_size=256,vec=2", "block_size=256,vec=4"}));
}

TEST(ParamSpace, ConstraintFiltersPoints) {
  const ParamSpace space(
      {{"block_size", {64, 128, 256}, ""}, {"rows_per_block", {1, 2, 4}, ""}},
      [](const Config& c) { return c.at("block_size") * c.at("rows_per_block") <= 256; },
      "block_size * rows_per_block <= 256");
  EXPECT_EQ(keys_of(space.enumerate()),
            (std::vector<std::string>{"block_size=64,rows_per_block=1", "block_size=64,rows_per_block=2",
                                      "block_size=64,rows_per_block=4", "block_size=128,rows_per_block=1",
                                      "block_size=128,rows_per_block=2", "block_size=256,rows_per_block=1"}));
  EXPECT_EQ(space.constraint_text(), "block_size * rows_per_block <= 256");
}

TEST(ParamSpace, SpaceWithoutAxesHasOnePointTheEmptyConfig) {
  const auto points = ParamSpace().enumerate();
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points.front(), Config());
  EXPECT_EQ(ParamSpace().raw_size(), 1);
}

TEST(ParamSpace, AxisWithoutValuesGivesNoPoints) {
  const ParamSpace space({{"block_size", {128, 256}, ""}, {"vec", {}, ""}});
  EXPECT_TRUE(space.enumerate().empty());
  EXPECT_EQ(space.raw_size(), 0);
}

TEST(ParamSpace, RawSizeIgnoresTheConstraint) {
  const ParamSpace space(block_and_vec().axes(), [](const Config&) { return false; });
  EXPECT_EQ(space.raw_size(), 6);
  EXPECT_TRUE(space.enumerate().empty());
}

TEST(ParamSpace, ContainsAcceptsEveryEnumeratedPoint) {
  const ParamSpace space = block_and_vec();
  for (const auto& config : space.enumerate()) EXPECT_TRUE(space.contains(config)) << config.key();
}

TEST(ParamSpace, ContainsRejectsWhatTheSpaceDoesNotHold) {
  const ParamSpace space(block_and_vec().axes(), [](const Config& c) { return c.at("vec") <= 2; });
  EXPECT_FALSE(space.contains(Config({{"block_size", 128}, {"vec", 4}})));                 // fails the constraint
  EXPECT_FALSE(space.contains(Config({{"block_size", 512}, {"vec", 1}})));                 // value not allowed
  EXPECT_FALSE(space.contains(Config({{"vec", 1}, {"block_size", 128}})));                 // axes out of order
  EXPECT_FALSE(space.contains(Config({{"block_size", 128}})));                             // an axis missing
  EXPECT_FALSE(space.contains(Config({{"block_size", 128}, {"vec", 1}, {"unroll", 2}})));  // one too many
  EXPECT_TRUE(space.contains(Config({{"block_size", 128}, {"vec", 2}})));
}

}  // namespace
}  // namespace shapetune
