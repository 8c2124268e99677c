// Search strategies through a real sweep: what halving and random search store, and that
// race rows never make the winner. Skips without a GPU.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "support/test_support.hpp"
#include "tuner/search.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr const char* kProblem = "softmax/f32/rows=64,cols=4097";

std::string matrix_with(const std::string& search) {
  return "matrices:\n  - primitive: softmax\n    dtypes: [f32]\n    axes: {rows: 64, cols: 4097}\n    search: " + search +
         "\n";
}

std::string problem_reason(const std::string& db, std::int64_t sweep_id) {
  sqlite3* raw = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  sqlite3_prepare_v2(raw, "SELECT reason FROM sweep_problems WHERE sweep_id = ?", -1, &statement, nullptr);
  sqlite3_bind_int64(statement, 1, sweep_id);
  std::string reason;
  if (sqlite3_step(statement) == SQLITE_ROW) reason = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
  sqlite3_finalize(statement);
  sqlite3_close(raw);
  return reason;
}

TEST(SearchSweep, HalvingRacesStoresRungsAndPicksTheWinnerAmongFullMeasurements) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("h.yaml"), db = dir.file("h.db");
  std::ofstream(yaml) << matrix_with("{strategy: halving, eta: 3, min_samples: 5}");
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"sweep", yaml, "--db", db, "--time-cap", "0.05", "--seed", "5"}, out, err), 0)
      << out.str() << err.str();
  EXPECT_NE(out.str().find("(halving: raced "), std::string::npos) << out.str();

  auto store = Store::open(db, OpenMode::read_only);
  const auto sweep = store->sweeps().at(0);
  const auto records = store->candidates(sweep.id, kProblem);
  int race_rows = 0, full_rows = 0;
  for (const auto& r : records) {
    if (r.status != CandidateStatus::ok) continue;
    ASSERT_TRUE(r.timing);
    ASSERT_TRUE(r.accuracy) << "a timed row keeps its verification's accuracy report";
    if (const auto rung = race_rung_index(r.timing->stop_reason)) {
      ++race_rows;
      int rung_samples = 5;
      for (int k = 0; k < *rung; ++k) rung_samples *= 3;
      EXPECT_LE(r.timing->samples, rung_samples) << r.variant << " " << r.timing->stop_reason;
      if (*rung == 0) {
        EXPECT_EQ(r.timing->samples, 5);
      }
      EXPECT_FALSE(r.baseline);
    } else {
      ++full_rows;
    }
  }
  EXPECT_GT(race_rows, 20);
  EXPECT_LE(full_rows, 1 + 3) << "the baseline and at most eta finalists";

  const auto winners = store->winners();
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_FALSE(is_race_stop_reason(winners[0].timing.stop_reason)) << winners[0].timing.stop_reason;
  EXPECT_EQ(winners[0].best_baseline, "cudnn");
  const std::string reason = problem_reason(db, sweep.id);
  EXPECT_EQ(reason.rfind("halving (eta 3, min_samples 5): measured ", 0), 0u) << reason;
}

TEST(SearchSweep, RandomMeasuresItsCountWithTheBaselineAndDefaults) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("r.yaml"), db = dir.file("r.db");
  std::ofstream(yaml) << matrix_with("{strategy: random, samples: 20, seed: 3}");
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"sweep", yaml, "--db", db, "--time-cap", "0.05", "--seed", "5"}, out, err), 0)
      << out.str() << err.str();
  auto store = Store::open(db, OpenMode::read_only);
  const auto records = store->candidates(store->sweeps().at(0).id, kProblem);
  int measured = 0;
  bool baseline = false;
  for (const auto& r : records) {
    if (r.status == CandidateStatus::unsupported) continue;
    ++measured;
    baseline = baseline || (r.baseline && r.status == CandidateStatus::ok);
  }
  EXPECT_EQ(measured, 20);
  EXPECT_TRUE(baseline);
  // Every variant's default has a row: measured, or pruned by supports() for this shape.
  for (const Variant* v : catalogue().variants("softmax")) {
    if (v->baseline) continue;
    EXPECT_TRUE(std::any_of(records.begin(), records.end(), [&](const CandidateRecord& r) {
      return r.variant == v->name && r.config == v->default_config;
    })) << v->name << "'s default was not measured";
  }
}

}  // namespace
}  // namespace shapetune
