#include "db/dispatch.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "db/store.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

Problem softmax(std::int64_t rows, std::int64_t cols, DType dtype = DType::f32) {
  return Problem{"softmax", dtype, Shape({{"rows", rows}, {"cols", cols}})};
}

WinnerRecord winner(const Problem& problem, const std::string& variant, std::int64_t block_size,
                    const std::string& device_key = "gpu") {
  WinnerRecord row;
  row.device_key = device_key;
  row.problem = problem;
  row.variant = variant;
  row.config = Config({{"block_size", block_size}});
  row.timing.median_us = 1;
  return row;
}

const DispatchTable::SupportsFn supports_everything = [](const Problem&, const std::string&, const Config&) {
  return true;
};

const DispatchTable::DefaultFn naive_default = [](const Problem&) {
  return std::optional<std::pair<std::string, Config>>({"naive", Config({{"block_size", 128}})});
};

const DispatchTable::DefaultFn no_default = [](const Problem&) {
  return std::optional<std::pair<std::string, Config>>();
};

TEST(DispatchSourceName, NamesEverySource) {
  EXPECT_EQ(dispatch_source_name(DispatchSource::exact), "exact");
  EXPECT_EQ(dispatch_source_name(DispatchSource::nearest), "nearest");
  EXPECT_EQ(dispatch_source_name(DispatchSource::fallback), "fallback");
}

TEST(ShapeLogDistance, IsEuclideanInNaturalLogs) {
  const Shape one({{"rows", 1}, {"cols", 1}});
  const Shape four({{"rows", 4}, {"cols", 4}});
  EXPECT_DOUBLE_EQ(*shape_log_distance(one, four), std::sqrt(2.0) * std::log(4.0));
  EXPECT_EQ(*shape_log_distance(four, one), *shape_log_distance(one, four));
  EXPECT_EQ(*shape_log_distance(four, four), 0.0);
  EXPECT_DOUBLE_EQ(*shape_log_distance(Shape({{"n", 1}}), Shape({{"n", 8}})), std::log(8.0));
}

TEST(ShapeLogDistance, NulloptWhenAxesDiffer) {
  const Shape rows_cols({{"rows", 4}, {"cols", 4}});
  EXPECT_FALSE(shape_log_distance(rows_cols, Shape({{"cols", 4}, {"rows", 4}})).has_value());
  EXPECT_FALSE(shape_log_distance(rows_cols, Shape({{"rows", 4}, {"width", 4}})).has_value());
  EXPECT_FALSE(shape_log_distance(rows_cols, Shape({{"rows", 4}})).has_value());
  EXPECT_FALSE(shape_log_distance(rows_cols, Shape({{"rows", 4}, {"cols", 0}})).has_value());
}

TEST(DispatchLookup, ExactMatch) {
  const auto table = DispatchTable::from_winners(
      {winner(softmax(4096, 1000), "block_per_row", 256), winner(softmax(1024, 1000), "warp_per_row", 32)});
  EXPECT_EQ(table.size(), 2u);
  const DispatchChoice choice = table.lookup(softmax(4096, 1000), supports_everything, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::exact);
  EXPECT_EQ(choice.variant, "block_per_row");
  EXPECT_EQ(choice.config, Config({{"block_size", 256}}));
  EXPECT_EQ(choice.tuned_problem, softmax(4096, 1000).key());
}

// A recorded library algorithm travels with an exact match only: one chosen for another shape
// need not run this one.
TEST(DispatchLookup, RecordedLibraryAlgorithmOnlyForExactMatches) {
  WinnerRecord tuned = winner(softmax(4096, 1000), "cublaslt", 0);
  tuned.library_algo = "algo_id=6 tile_id=20";
  const auto table = DispatchTable::from_winners({tuned});
  EXPECT_EQ(table.lookup(softmax(4096, 1000), supports_everything, naive_default).library_algo, "algo_id=6 tile_id=20");
  const DispatchChoice near = table.lookup(softmax(4000, 1000), supports_everything, naive_default);
  EXPECT_EQ(near.source, DispatchSource::nearest);
  EXPECT_EQ(near.library_algo, "");
}

TEST(DispatchLookup, NearestByLogDistance) {
  const auto table = DispatchTable::from_winners(
      {winner(softmax(4096, 4096), "block_per_row", 1024), winner(softmax(1024, 1000), "warp_per_row", 32)});
  const DispatchChoice choice = table.lookup(softmax(1000, 1000), supports_everything, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::nearest);
  EXPECT_EQ(choice.variant, "warp_per_row");
  EXPECT_EQ(choice.config, Config({{"block_size", 32}}));
  EXPECT_EQ(choice.tuned_problem, softmax(1024, 1000).key());
}

TEST(DispatchLookup, NearestSkipsWinnerThatCannotRunTheProblem) {
  const auto table = DispatchTable::from_winners(
      {winner(softmax(1024, 1000), "warp_per_row", 32), winner(softmax(4096, 4096), "block_per_row", 1024)});
  std::vector<std::string> asked;
  const DispatchTable::SupportsFn only_block_per_row = [&](const Problem& problem, const std::string& variant,
                                                           const Config&) {
    EXPECT_EQ(problem, softmax(1000, 1000)) << "supports() must be asked about the problem looked up";
    asked.push_back(variant);
    return variant == "block_per_row";
  };
  const DispatchChoice choice = table.lookup(softmax(1000, 1000), only_block_per_row, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::nearest);
  EXPECT_EQ(choice.variant, "block_per_row");
  EXPECT_EQ(choice.tuned_problem, softmax(4096, 4096).key());
  EXPECT_EQ(asked, (std::vector<std::string>{"warp_per_row", "block_per_row"})) << "nearest first";
}

TEST(DispatchLookup, EqualDistancesBrokenByProblemKey) {
  // Mirror images of the query: the same distance to the last bit.
  const auto table = DispatchTable::from_winners(
      {winner(softmax(2000, 1000), "wide_rows", 1), winner(softmax(1000, 2000), "wide_cols", 2)});
  const DispatchChoice choice = table.lookup(softmax(1000, 1000), supports_everything, naive_default);
  ASSERT_LT(softmax(1000, 2000).key(), softmax(2000, 1000).key());
  EXPECT_EQ(choice.variant, "wide_cols");
}

TEST(DispatchLookup, DistancesEqualButForRoundingBrokenByProblemKey) {
  // 4 lies as far from 2 as from 8, but ln 8 - ln 4 rounds below ln 4 - ln 2: the key decides.
  ASSERT_LT(std::log(8.0) - std::log(4.0), std::log(4.0) - std::log(2.0)) << "this libm rounds the other way";
  const auto table = DispatchTable::from_winners(
      {winner(softmax(8, 1000), "eight", 1), winner(softmax(2, 1000), "two", 2)});
  ASSERT_LT(softmax(2, 1000).key(), softmax(8, 1000).key());
  EXPECT_EQ(table.lookup(softmax(4, 1000), supports_everything, naive_default).variant, "two");
  // Past the tie, the nearer one wins whatever its key.
  EXPECT_EQ(table.lookup(softmax(5, 1000), supports_everything, naive_default).variant, "eight");
  // A tie whose first key cannot run the problem goes to the other.
  const DispatchTable::SupportsFn not_two = [](const Problem&, const std::string& variant, const Config&) {
    return variant != "two";
  };
  EXPECT_EQ(table.lookup(softmax(4, 1000), not_two, naive_default).variant, "eight");
}

TEST(DispatchLookup, FallbackWhenNothingTunedForThePrimitive) {
  const Problem layernorm{"layernorm", DType::f32, Shape({{"rows", 1000}, {"cols", 1000}})};
  const auto table = DispatchTable::from_winners({winner(layernorm, "welford", 256)});
  const DispatchChoice choice = table.lookup(softmax(1000, 1000), supports_everything, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::fallback);
  EXPECT_EQ(choice.variant, "naive");
  EXPECT_EQ(choice.config, Config({{"block_size", 128}}));
  EXPECT_EQ(choice.tuned_problem, "");
}

TEST(DispatchLookup, FallbackWhenNoTunedWinnerSupportsTheProblem) {
  const auto table = DispatchTable::from_winners({winner(softmax(1024, 1000), "warp_per_row", 32)});
  const DispatchTable::SupportsFn nothing = [](const Problem&, const std::string&, const Config&) { return false; };
  EXPECT_EQ(table.lookup(softmax(1000, 1000), nothing, naive_default).source, DispatchSource::fallback);
}

TEST(DispatchLookup, OtherDtypeIsNeverBorrowed) {
  const auto table = DispatchTable::from_winners({winner(softmax(1000, 1000, DType::f16), "half2", 256)});
  const DispatchChoice choice = table.lookup(softmax(1000, 1000, DType::f32), supports_everything, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::fallback);
  EXPECT_EQ(choice.variant, "naive");
}

TEST(DispatchLookup, OtherAxesAreNeverBorrowed) {
  const Problem by_width{"softmax", DType::f32, Shape({{"rows", 1000}, {"width", 1000}})};
  const auto table = DispatchTable::from_winners({winner(by_width, "block_per_row", 256)});
  EXPECT_EQ(table.lookup(softmax(1000, 1000), supports_everything, naive_default).source, DispatchSource::fallback);
}

TEST(DispatchLookup, ThrowsWhenThereIsNoDefault) {
  const auto table = DispatchTable::from_winners({winner(softmax(1000, 1000, DType::f16), "half2", 256)});
  try {
    table.lookup(softmax(1000, 1000), supports_everything, no_default);
    FAIL() << "lookup returned without a variant";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(softmax(1000, 1000).key()), std::string::npos) << e.what();
  }
}

TEST(DispatchTable, RejectsTwoWinnersForOneProblem) {
  EXPECT_THROW(DispatchTable::from_winners({winner(softmax(1, 1), "a", 1, "gpu-a"), winner(softmax(1, 1), "b", 1, "gpu-b")}),
               std::invalid_argument);
}

TEST(DispatchTable, LoadsOneDevicesWinnersFromTheStore) {
  TempDir dir;
  auto store = Store::open(dir.file("tune.db"));
  store->store_winner(winner(softmax(4096, 1000), "block_per_row", 256, "gpu-a"));
  store->store_winner(winner(softmax(4096, 1000), "warp_per_row", 32, "gpu-b"));
  store->store_winner(winner(softmax(1024, 1000), "warp_per_row", 64, "gpu-b"));

  const auto table = DispatchTable::load(*store, "gpu-b");
  store.reset();  // lookups must not need the database
  EXPECT_EQ(table.size(), 2u);
  const DispatchChoice choice = table.lookup(softmax(4096, 1000), supports_everything, naive_default);
  EXPECT_EQ(choice.source, DispatchSource::exact);
  EXPECT_EQ(choice.variant, "warp_per_row");
  EXPECT_EQ(choice.config, Config({{"block_size", 32}}));
}

}  // namespace
}  // namespace shapetune
