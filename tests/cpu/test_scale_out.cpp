// Sweeps spread over processes: --shard's split, merge, and the parallel sweep's workers, on
// fixture sweeps (support/fixture_sweep.hpp) since no GPU is here. The GPU box runs the same
// paths with real measurements (scripts/gpu-check.sh --scale-out).
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "support/fixture_sweep.hpp"
#include "support/test_support.hpp"
#include "tuner/merge.hpp"
#include "tuner/parallel_sweep.hpp"
#include "tuner/shape_file.hpp"
#include "tuner/shard.hpp"
#include "tuner/sweep.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using test_support::contains;
using test_support::FixtureSweep;
using test_support::TempDir;

std::string shapes(const std::string& name) { return (test_support::source_dir() / "shapes" / name).string(); }

using Result = test_support::CliResult;
constexpr auto cli = &test_support::run_shapetune;

// Every row of every table, in a fixed order: "changes nothing" means this is equal.
std::string dump(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string text;
  for (const char* table : {"devices", "ceilings", "sweeps", "sweep_problems", "candidates", "counters", "winners"}) {
    const std::string sql = std::string("SELECT * FROM ") + table + " ORDER BY 1, 2, 3";
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sql;
    text += std::string("[") + table + "]\n";
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
        const auto* v = sqlite3_column_text(stmt, c);
        text += (v ? reinterpret_cast<const char*>(v) : "NULL") + std::string("|");
      }
      text += "\n";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return text;
}

void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  const std::string text = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << text;
}

// problem key -> "variant{config}" of every winner.
std::map<std::string, std::string> winners(const std::string& path) {
  std::map<std::string, std::string> out;
  for (const auto& w : Store::open(path, OpenMode::read_only)->winners())
    out[w.problem.key()] = w.variant + "{" + w.config.key() + "}";
  return out;
}

void fixture(const std::string& shape_file, const std::string& db, std::optional<ShardSpec> shard = std::nullopt) {
  std::string error;
  ASSERT_EQ(test_support::run_fixture_sweep(FixtureSweep{shape_file, db, shard, "", ""}, &error), 0) << error;
}

TEST(Shard, ParsesKOfN) {
  EXPECT_EQ(parse_shard("1/1")->index, 1);
  EXPECT_EQ(parse_shard("3/8")->count, 8);
  std::string why;
  for (const char* bad : {"", "3", "0/4", "5/4", "1/0", "-1/4", "1/-4", "a/b", "1/4/2", " 1/4", "1/4 ", "1/100001", "99999999999/1"}) {
    EXPECT_FALSE(parse_shard(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(Shard, PartitionCoversEveryItemOnceAndBalancesTime) {
  std::vector<double> times;
  for (int i = 0; i < 200; ++i) times.push_back(1 + (i * 7919) % 97 + (i == 13 ? 500 : 0));
  times.push_back(std::nan(""));
  times.push_back(-3);
  const double total = [&] {
    double t = 0;
    for (double x : times) t += std::isfinite(x) && x > 0 ? x : 0;
    return t;
  }();
  for (int n : {1, 2, 3, 7, 16, 250}) {
    const auto shards = partition_by_time(times, n);
    ASSERT_EQ(shards.size(), static_cast<std::size_t>(n));
    std::vector<int> seen(times.size(), 0);
    double largest = 0;
    for (const auto& shard : shards) {
      double load = 0;
      for (std::size_t i = 0; i < shard.size(); ++i) {
        ++seen[shard[i]];
        if (i) {
          EXPECT_LT(shard[i - 1], shard[i]) << "file order within a shard";
        }
        load += std::isfinite(times[shard[i]]) && times[shard[i]] > 0 ? times[shard[i]] : 0;
      }
      largest = std::max(largest, load);
    }
    for (int count : seen) EXPECT_EQ(count, 1);
    // Longest-first greedy: the largest shard is within one item (at most 597) of the mean, or
    // is that one big item alone.
    EXPECT_LE(largest, std::max(total / n + 97.0, 597.0)) << n << " shards";
    EXPECT_EQ(shards, partition_by_time(times, n)) << "deterministic";
  }
}

TEST(Shard, ShardsOfAShapeFileSweepEachProblemOnce) {
  const ShapeFile file = load_shape_file(shapes("quick.yaml"), catalogue());
  SweepOptions all;
  const auto every = sweep_problems(file, all);
  ASSERT_GT(every.size(), 10u);
  for (int n : {2, 3, 5}) {
    std::multiset<std::string> keys;
    for (int k = 1; k <= n; ++k) {
      SweepOptions part;
      part.shard = ShardSpec{k, n};
      const auto mine = sweep_problems(file, part);
      EXPECT_FALSE(mine.empty());
      for (const auto* p : mine) keys.insert(p->problem.key());
    }
    ASSERT_EQ(keys.size(), every.size());
    for (const auto* p : every) EXPECT_EQ(keys.count(p->problem.key()), 1u) << p->problem.key();
  }
}

TEST(Shard, DryRunPrintsTheShardsPlanAndRejectsBadShards) {
  const Result r = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--shard", "2/3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Shard 2/3: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "expected ~")) << r.out;
  const Result bad = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--shard", "4/3"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(contains(bad.err, "--shard: shard 4 of 3 does not exist")) << bad.err;
  const Result both = cli({"sweep", shapes("quick.yaml"), "--db", "x.db", "--shard", "1/2", "--devices", "0,1"});
  EXPECT_EQ(both.code, 2);
  EXPECT_TRUE(contains(both.err, "not both")) << both.err;
}

TEST(Merge, ShardsMergeIntoTheUnshardedWinnersAndTwiceChangesNothing) {
  TempDir dir;
  const std::string file = shapes("quick.yaml");
  fixture(file, dir.file("whole.db"));
  for (int k = 1; k <= 3; ++k) fixture(file, dir.file("part" + std::to_string(k) + ".db"), ShardSpec{k, 3});
  const Result first = cli({"merge", dir.file("merged.db"), dir.file("part1.db"), dir.file("part2.db"), dir.file("part3.db")});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_TRUE(contains(first.out, "no row changed")) << first.out;
  const auto merged = winners(dir.file("merged.db"));
  EXPECT_EQ(merged, winners(dir.file("whole.db")));
  EXPECT_EQ(merged.size(), sweep_problems(load_shape_file(file, catalogue()), SweepOptions{}).size());

  const std::string before = dump(dir.file("merged.db"));
  const Result again = cli({"merge", dir.file("merged.db"), dir.file("part2.db"), dir.file("part1.db"), dir.file("part3.db")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "nothing new (already merged)")) << again.out;
  EXPECT_EQ(dump(dir.file("merged.db")), before);
  const Result itself = cli({"merge", dir.file("merged.db"), dir.file("merged.db")});
  ASSERT_EQ(itself.code, 0) << itself.err;
  EXPECT_TRUE(contains(itself.out, "the output itself, skipped")) << itself.out;
  EXPECT_EQ(dump(dir.file("merged.db")), before);
  // Three sweeps, each candidate row once.
  auto store = Store::open(dir.file("merged.db"), OpenMode::read_only);
  EXPECT_EQ(store->sweeps().size(), 3u);
  std::size_t candidates = 0, whole_candidates = 0;
  for (const auto& s : store->sweeps()) candidates += store->candidates(s.id).size();
  auto whole = Store::open(dir.file("whole.db"), OpenMode::read_only);
  for (const auto& s : whole->sweeps()) whole_candidates += whole->candidates(s.id).size();
  EXPECT_EQ(candidates, whole_candidates);
}

TEST(Merge, TheLaterMeasurementOfACandidateWinsAndWinnersFollowIt) {
  TempDir dir;
  const std::string file = shapes("quick.yaml");
  fixture(file, dir.file("a.db"));
  std::filesystem::copy_file(dir.file("a.db"), dir.file("b.db"));
  // In b, the same sweep measured its runner-up again, later and faster than the winner.
  const auto a_winners = Store::open(dir.file("a.db"), OpenMode::read_only)->winners();
  const WinnerRecord& target = a_winners.front();
  ASSERT_FALSE(target.runner_up_variant.empty());
  exec(dir.file("b.db"), "UPDATE candidates SET median_us = 0.5, measured_at = '2999-01-01T00:00:00Z' WHERE problem_key = '" +
                             target.problem.key() + "' AND variant = '" + target.runner_up_variant + "'");
  // And an older measurement of another candidate, which must not replace a's.
  exec(dir.file("b.db"), "UPDATE candidates SET median_us = 0.25, measured_at = '2000-01-01T00:00:00Z' WHERE problem_key = '" +
                             a_winners.back().problem.key() + "' AND variant = '" + a_winners.back().runner_up_variant + "'");
  const Result r = cli({"merge", dir.file("a.db"), dir.file("b.db")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "1 replaced by later measurements")) << r.out;
  const auto merged = winners(dir.file("a.db"));
  EXPECT_EQ(merged.at(target.problem.key()).rfind(target.runner_up_variant + "{", 0), 0u) << merged.at(target.problem.key());
  EXPECT_EQ(merged.at(a_winners.back().problem.key()), a_winners.back().variant + "{" + a_winners.back().config.key() + "}");
  EXPECT_EQ(Store::open(dir.file("a.db"), OpenMode::read_only)->sweeps().size(), 1u) << "the same sweep, not a second";
}

TEST(Merge, ALaterSweepOfOneVariantKeepsTheFasterWinnerItDidNotMeasure) {
  TempDir dir;
  fixture(shapes("quick.yaml"), dir.file("a.db"));
  const auto before = winners(dir.file("a.db"));
  const WinnerRecord target = Store::open(dir.file("a.db"), OpenMode::read_only)->winners().front();
  ASSERT_FALSE(target.runner_up_variant.empty());
  const std::string key = target.problem.key();
  // b: a later sweep that measured only the runner-up, again slower than the winner, and then the
  // same sweep once more with the winner measured again, slower than the runner-up.
  std::filesystem::copy_file(dir.file("a.db"), dir.file("b.db"));
  exec(dir.file("b.db"),
       "INSERT INTO sweeps (device_key, command, git_sha, yaml_path, yaml_sha256, options, started_at, finished_at, status) "
       "SELECT device_key, 'shapetune sweep --variant " + target.runner_up_variant + "', 'later', yaml_path, yaml_sha256, "
       "options || ';variants=" + target.runner_up_variant + "', '2999-01-01T00:00:00Z', '2999-01-01T00:01:00Z', "
       "'complete' FROM sweeps WHERE id = 1; "
       "INSERT INTO candidates SELECT NULL, 2, problem_key, primitive, dtype, shape_key, variant, config_key, baseline, "
       "status, reason, max_abs_error, max_rel_error, mismatches, checked, first_mismatch, atol, rtol, median_us * 1.5, "
       "p10_us, p90_us, min_us, median_ci_rel, samples, timing_mode, launches_per_sample, input_sets, stop_reason, "
       "'2999-01-01T00:00:30Z', state_restored FROM candidates WHERE sweep_id = 1 AND problem_key = '" + key +
       "' AND variant = '" + target.runner_up_variant + "'; "
       "INSERT INTO sweep_problems (sweep_id, problem_key, status, reason) VALUES (2, '" + key + "', 'done', 'test')");
  const Result r = cli({"merge", dir.file("out.db"), dir.file("b.db")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(winners(dir.file("out.db")), before);
  // The winner measured again by the later sweep, slower: now the runner-up leads.
  exec(dir.file("b.db"), "INSERT INTO candidates SELECT NULL, 2, problem_key, primitive, dtype, shape_key, variant, "
                         "config_key, baseline, status, reason, max_abs_error, max_rel_error, mismatches, checked, "
                         "first_mismatch, atol, rtol, 1e9, p10_us, p90_us, min_us, median_ci_rel, samples, timing_mode, "
                         "launches_per_sample, input_sets, stop_reason, '2999-01-01T00:00:40Z', state_restored "
                         "FROM candidates WHERE sweep_id = 1 AND problem_key = '" + key + "' AND variant = '" +
                             target.variant + "'");
  const Result again = cli({"merge", dir.file("out2.db"), dir.file("b.db")});
  ASSERT_EQ(again.code, 0) << again.err;
  const auto after = winners(dir.file("out2.db"));
  EXPECT_EQ(after.at(key).rfind(target.runner_up_variant + "{", 0), 0u) << after.at(key);
  for (const auto& w : Store::open(dir.file("out2.db"), OpenMode::read_only)->winners()) {
    if (w.problem.key() == key) {
      EXPECT_EQ(w.git_sha, "later");
    }
  }
}

TEST(Merge, RecomputesAMissingWinnerAndKeepsDevicesApart) {
  TempDir dir;
  const std::string file = shapes("quick.yaml");
  fixture(file, dir.file("a.db"));
  const auto expected = winners(dir.file("a.db"));
  exec(dir.file("a.db"), "DELETE FROM winners WHERE rowid IN (SELECT rowid FROM winners LIMIT 3)");
  // Another device's sweep of the same file.
  fixture(file, dir.file("other.db"));
  exec(dir.file("other.db"), "UPDATE devices SET key = 'Other GPU|cc90|sm132|80GiB'; "
                             "UPDATE sweeps SET device_key = 'Other GPU|cc90|sm132|80GiB'; "
                             "UPDATE winners SET device_key = 'Other GPU|cc90|sm132|80GiB'");
  const Result r = cli({"merge", dir.file("out.db"), dir.file("a.db"), dir.file("other.db")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "3 rows rewritten")) << r.out;
  auto store = Store::open(dir.file("out.db"), OpenMode::read_only);
  EXPECT_EQ(store->winners().size(), 2 * expected.size());
  std::map<std::string, std::string> first_device;
  for (const auto& w : store->winners())
    if (w.device_key != "Other GPU|cc90|sm132|80GiB") first_device[w.problem.key()] = w.variant + "{" + w.config.key() + "}";
  EXPECT_EQ(first_device, expected);
}

TEST(Merge, RefusesBadInputsClearly) {
  TempDir dir;
  fixture(shapes("quick.yaml"), dir.file("good.db"));
  std::filesystem::copy_file(dir.file("good.db"), dir.file("newer.db"));
  exec(dir.file("newer.db"), "PRAGMA user_version = 99");
  { std::ofstream(dir.file("text.db")) << "not a database\n"; }
  struct Case {
    std::string input, message;
  };
  for (const Case& c : {Case{dir.file("missing.db"), "does not exist"}, Case{dir.file("text.db"), "not an SQLite database"},
                        Case{dir.file("newer.db"), "has schema v99"}, Case{dir.path().string(), "is a directory"},
                        // Found by fuzz_merge: a counters row whose index entry says text where the
                        // table holds a blob passed quick_check and the typed readers (which read the
                        // index) and was copied into the output, which then could not be read.
                        Case{(test_support::source_dir() / "tests/fuzz/regressions/merge/index-disagrees-with-table.db").string(),
                             "is corrupt: row 2 missing from index"}}) {
    const Result r = cli({"merge", dir.file("out.db"), dir.file("good.db"), c.input});
    EXPECT_EQ(r.code, 2) << c.input;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
    EXPECT_TRUE(contains(r.err, "run the same command again")) << r.err;
  }
  // What was merged before the bad input is whole, and the bad one left no trace.
  EXPECT_EQ(winners(dir.file("out.db")), winners(dir.file("good.db")));
  const Result usage = cli({"merge", dir.file("out.db")});
  EXPECT_EQ(usage.code, 2);
}

TEST(ParallelSweep, AWorkerThatDiesIsReportedAndItsShardRequeued) {
  TempDir dir;
  const std::string file = shapes("quick.yaml");
  fixture(file, dir.file("whole.db"));
  ::setenv("FIXTURE_SWEEP_DIE_SHARD", "2", 1);
  ::setenv("FIXTURE_SWEEP_DIE_MARKER", dir.file("died").c_str(), 1);
  ParallelSweepOptions o;
  o.shape_file = file;
  o.db_path = dir.file("parallel.db");
  o.devices = {0, 0};  // two workers sharing one GPU: the code path of two GPUs
  o.problem_count = sweep_problems(load_shape_file(file, catalogue()), SweepOptions{}).size();
  o.shard_count = 5;
  o.executable = SHAPETUNE_FIXTURE_SWEEP;
  std::ostringstream out, err;
  const int code = run_parallel_sweep(o, out, err);
  ::unsetenv("FIXTURE_SWEEP_DIE_SHARD");
  ::unsetenv("FIXTURE_SWEEP_DIE_MARKER");
  ASSERT_EQ(code, 0) << out.str() << err.str();
  EXPECT_TRUE(std::filesystem::exists(dir.file("died"))) << "the fault was injected";
  EXPECT_TRUE(contains(err.str(), "the worker of shard 2/5 was killed by signal 6")) << err.str();
  EXPECT_TRUE(contains(err.str(), "goes back to the queue")) << err.str();
  EXPECT_TRUE(contains(out.str(), "[gpu0.2] ")) << out.str();
  EXPECT_TRUE(contains(out.str(), "5 of 5 shards done")) << out.str();
  EXPECT_EQ(winners(dir.file("parallel.db")), winners(dir.file("whole.db")));
  // Each problem once: the shard that died resumed its sweep rather than starting another.
  auto store = Store::open(dir.file("parallel.db"), OpenMode::read_only);
  EXPECT_EQ(store->sweeps().size(), 5u);
}

TEST(ParallelSweep, AShardThatKeepsFailingEndsWithAnErrorAndKeepsTheRest) {
  TempDir dir;
  ParallelSweepOptions o;
  o.shape_file = shapes("quick.yaml");
  o.db_path = dir.file("parallel.db");
  o.devices = {0};
  o.problem_count = 4;
  o.shard_count = 2;
  o.executable = "/bin/false";
  std::ostringstream out, err;
  EXPECT_EQ(run_parallel_sweep(o, out, err), 1);
  EXPECT_TRUE(contains(err.str(), "takes no more shards")) << err.str();
  EXPECT_TRUE(contains(err.str(), "2 of 2 shards could not be finished")) << err.str();
}

}  // namespace
}  // namespace shapetune
