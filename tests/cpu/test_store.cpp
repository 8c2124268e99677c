#include "db/store.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cli/cli.hpp"
#include "core/records.hpp"
#include "db/schema.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

// Talks to a database file directly, the way an older shapetune or another program would.
class RawDatabase {
 public:
  explicit RawDatabase(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("cannot open " + path);
  }
  ~RawDatabase() { sqlite3_close(db_); }
  RawDatabase(const RawDatabase&) = delete;
  RawDatabase& operator=(const RawDatabase&) = delete;

  void exec(const std::string& sql) {
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("test SQL failed: ") + sqlite3_errmsg(db_) + "\n" + sql);
  }

  // The first column of the first row, as text.
  std::string value(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("test SQL failed: ") + sqlite3_errmsg(db_) + "\n" + sql);
    std::string out;
    if (sqlite3_step(statement) == SQLITE_ROW && sqlite3_column_text(statement, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
    sqlite3_finalize(statement);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

// The StoreError message of `action`, or a marker that fails every expectation on it.
std::string store_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "<no StoreError thrown>";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

DeviceFingerprint h200() {
  return DeviceFingerprint{"NVIDIA H200", 90,       132,      std::int64_t{60} << 20, std::int64_t{141} << 30,
                           "550.54.15",   "12.4.1", "12.4.5", "9.1.0"};
}

SweepInfo sweep_info(const std::string& options = "flush_l2=1 seed=7") {
  return SweepInfo{h200().key(), "shapetune sweep shapes.yaml", "abc1234", "shapes.yaml", "5f3c9e", options};
}

Problem softmax(std::int64_t rows, std::int64_t cols) {
  return Problem{"softmax", DType::f32, Shape({{"rows", rows}, {"cols", cols}})};
}

// Every field set, with doubles that have no short decimal form.
CandidateRecord measured_candidate(std::int64_t sweep_id) {
  CandidateRecord record;
  record.sweep_id = sweep_id;
  record.problem = Problem{"layernorm", DType::bf16, Shape({{"rows", 8192}, {"cols", 768}})};
  record.variant = "warp_per_row";
  record.config = Config({{"block_size", 256}, {"vec", 4}});
  record.baseline = false;
  record.status = CandidateStatus::ok;
  record.reason = "";
  record.accuracy = AccuracyReport{1.0 / 3.0, 2.5e-300, 0, 6291456, ""};
  TimingStats timing;
  timing.median_us = 12.345678901234567;
  timing.p10_us = 0.1 + 0.2;
  timing.p90_us = 1e300;
  timing.min_us = 4.9406564584124654e-324;  // the smallest subnormal
  timing.median_ci_rel = 0.0123;
  timing.samples = 517;
  timing.mode = TimingMode::graph_batch;
  timing.launches_per_sample = 20;
  timing.input_sets = 3;
  timing.state_restored = true;
  timing.stop_reason = "converged";
  record.timing = timing;
  record.tolerance = Tolerance{1e-2, 7.8125e-3};
  return record;
}

// A candidate that never ran: no accuracy, no timing.
CandidateRecord unsupported_candidate(std::int64_t sweep_id) {
  CandidateRecord record;
  record.sweep_id = sweep_id;
  record.problem = softmax(4096, 1000);
  record.variant = "cudnn";
  record.config = Config();
  record.baseline = true;
  record.status = CandidateStatus::unsupported;
  record.reason = "cuDNN refused: CUDNN_STATUS_NOT_SUPPORTED";
  record.tolerance = Tolerance{1e-5, 1e-5};
  return record;
}

WinnerRecord full_winner(const std::string& device_key, const Problem& problem) {
  WinnerRecord winner;
  winner.device_key = device_key;
  winner.problem = problem;
  winner.variant = "block_per_row";
  winner.config = Config({{"block_size", 512}});
  winner.baseline = false;
  winner.timing.median_us = 7.0 / 3.0;
  winner.timing.p10_us = 2.25;
  winner.timing.p90_us = 2.5;
  winner.timing.min_us = 2.0000000000000004;
  winner.timing.median_ci_rel = 0.004;
  winner.timing.samples = 200;
  winner.timing.mode = TimingMode::hot;
  winner.timing.launches_per_sample = 1;
  winner.timing.input_sets = 2;
  winner.timing.stop_reason = "max samples";
  winner.tolerance = Tolerance{1e-5, 1e-5};
  winner.best_baseline = "cudnn";
  winner.baseline_us = 3.1;
  winner.speedup_vs_baseline = 3.1 / (7.0 / 3.0);
  winner.runner_up_variant = "warp_per_row";
  winner.runner_up_config = Config({{"block_size", 128}, {"vec", 2}});
  winner.runner_up_us = 2.4;
  winner.margin_rel = 2.4 / (7.0 / 3.0) - 1;
  winner.tie = true;
  winner.cost = Cost{4096.0 * 1000 * 4 * 2, 4096.0 * 1000 * 5};
  winner.library_algo = "cublasLt=130100 algo_id=6 tile_id=20 stages_id=8";
  winner.sweep_id = 42;
  winner.git_sha = "abc1234-dirty";
  winner.measured_at = "2026-11-30T19:18:14Z";
  return winner;
}

void expect_same_device(const DeviceFingerprint& a, const DeviceFingerprint& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.compute_capability, b.compute_capability);
  EXPECT_EQ(a.sm_count, b.sm_count);
  EXPECT_EQ(a.l2_bytes, b.l2_bytes);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.driver_version, b.driver_version);
  EXPECT_EQ(a.runtime_version, b.runtime_version);
  EXPECT_EQ(a.cublas_version, b.cublas_version);
  EXPECT_EQ(a.cudnn_version, b.cudnn_version);
}

void expect_same_timing(const TimingStats& a, const TimingStats& b) {
  EXPECT_EQ(a.median_us, b.median_us);
  EXPECT_EQ(a.p10_us, b.p10_us);
  EXPECT_EQ(a.p90_us, b.p90_us);
  EXPECT_EQ(a.min_us, b.min_us);
  EXPECT_EQ(a.median_ci_rel, b.median_ci_rel);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.launches_per_sample, b.launches_per_sample);
  EXPECT_EQ(a.input_sets, b.input_sets);
  EXPECT_EQ(a.state_restored, b.state_restored);
  EXPECT_EQ(a.stop_reason, b.stop_reason);
}

void expect_same_candidate(const CandidateRecord& a, const CandidateRecord& b) {
  EXPECT_EQ(a.sweep_id, b.sweep_id);
  EXPECT_EQ(a.problem, b.problem);
  EXPECT_EQ(a.variant, b.variant);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.baseline, b.baseline);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.reason, b.reason);
  ASSERT_EQ(a.accuracy.has_value(), b.accuracy.has_value());
  if (a.accuracy) {
    EXPECT_EQ(a.accuracy->max_abs_error, b.accuracy->max_abs_error);
    EXPECT_EQ(a.accuracy->max_rel_error, b.accuracy->max_rel_error);
    EXPECT_EQ(a.accuracy->mismatches, b.accuracy->mismatches);
    EXPECT_EQ(a.accuracy->checked, b.accuracy->checked);
    EXPECT_EQ(a.accuracy->first_mismatch, b.accuracy->first_mismatch);
  }
  ASSERT_EQ(a.timing.has_value(), b.timing.has_value());
  if (a.timing) expect_same_timing(*a.timing, *b.timing);
  EXPECT_EQ(a.tolerance, b.tolerance);
}

void expect_same_winner(const WinnerRecord& a, const WinnerRecord& b) {
  EXPECT_EQ(a.device_key, b.device_key);
  EXPECT_EQ(a.problem, b.problem);
  EXPECT_EQ(a.variant, b.variant);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.baseline, b.baseline);
  expect_same_timing(a.timing, b.timing);
  EXPECT_EQ(a.tolerance, b.tolerance);
  EXPECT_EQ(a.best_baseline, b.best_baseline);
  EXPECT_EQ(a.baseline_us, b.baseline_us);
  EXPECT_EQ(a.speedup_vs_baseline, b.speedup_vs_baseline);
  EXPECT_EQ(a.runner_up_variant, b.runner_up_variant);
  EXPECT_EQ(a.runner_up_config, b.runner_up_config);
  EXPECT_EQ(a.runner_up_us, b.runner_up_us);
  EXPECT_EQ(a.margin_rel, b.margin_rel);
  EXPECT_EQ(a.tie, b.tie);
  // NaN (not recorded) compares unequal to itself: compare the bits' meaning instead.
  EXPECT_TRUE(a.cost.bytes == b.cost.bytes || (std::isnan(a.cost.bytes) && std::isnan(b.cost.bytes)));
  EXPECT_TRUE(a.cost.flops == b.cost.flops || (std::isnan(a.cost.flops) && std::isnan(b.cost.flops)));
  EXPECT_EQ(a.library_algo, b.library_algo);
  EXPECT_EQ(a.sweep_id, b.sweep_id);
  EXPECT_EQ(a.git_sha, b.git_sha);
  EXPECT_EQ(a.measured_at, b.measured_at);
}

void expect_same_ceiling(const CeilingRecord& a, const CeilingRecord& b) {
  EXPECT_EQ(a.device_key, b.device_key);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.unit, b.unit);
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.git_sha, b.git_sha);
  EXPECT_EQ(a.measured_at, b.measured_at);
}

// A store with the H200 recorded, ready for sweeps.
std::unique_ptr<Store> open_with_device(const std::string& path) {
  auto store = Store::open(path);
  store->upsert_device(h200());
  return store;
}

// ---- record names --------------------------------------------------------------------------

TEST(RecordNames, TimingModesRoundTrip) {
  for (TimingMode mode : {TimingMode::cold, TimingMode::hot, TimingMode::graph_batch, TimingMode::batch})
    EXPECT_EQ(parse_timing_mode(timing_mode_name(mode)), mode);
  EXPECT_EQ(timing_mode_name(TimingMode::graph_batch), "graph_batch");
  EXPECT_FALSE(parse_timing_mode("warm").has_value());
}

TEST(RecordNames, CandidateStatusesRoundTrip) {
  for (CandidateStatus status : {CandidateStatus::ok, CandidateStatus::failed_accuracy, CandidateStatus::unsupported,
                                 CandidateStatus::error, CandidateStatus::skipped, CandidateStatus::crashed,
                                 CandidateStatus::timeout})
    EXPECT_EQ(parse_candidate_status(candidate_status_name(status)), status);
  EXPECT_EQ(candidate_status_name(CandidateStatus::failed_accuracy), "failed_accuracy");
  EXPECT_FALSE(parse_candidate_status("OK").has_value());
}

// In a zone five hours off UTC, so that local time would show.
TEST(UtcNow, IsIso8601InUtc) {
  const char* saved_tz = std::getenv("TZ");
  const std::string restore = saved_tz ? saved_tz : "";
  setenv("TZ", "XYZ+5", 1);
  tzset();
  const std::time_t before = std::time(nullptr);
  const std::string now = utc_now_iso8601();
  const std::time_t after = std::time(nullptr);
  saved_tz ? setenv("TZ", restore.c_str(), 1) : unsetenv("TZ");
  tzset();

  std::tm parsed{};
  const char* end = strptime(now.c_str(), "%Y-%m-%dT%H:%M:%SZ", &parsed);
  ASSERT_TRUE(end && *end == '\0') << now;
  EXPECT_EQ(now.size(), std::string("2026-11-30T19:18:14Z").size()) << now;
  const std::time_t as_utc = timegm(&parsed);
  EXPECT_GE(as_utc, before) << now;
  EXPECT_LE(as_utc, after) << now;
}

// ---- creating and opening ------------------------------------------------------------------

TEST(StoreOpen, CreatesDatabaseAtLatestSchema) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  {
    auto store = Store::open(path);
    EXPECT_EQ(store->path(), path);
    EXPECT_EQ(store->schema_version(), Store::latest_schema_version());
  }
  EXPECT_EQ(Store::latest_schema_version(), 6);
  RawDatabase raw(path);
  EXPECT_EQ(raw.value("PRAGMA application_id"), std::to_string(kApplicationId));
  EXPECT_EQ(raw.value("PRAGMA user_version"), "6");
  EXPECT_EQ(raw.value("PRAGMA journal_mode"), "wal");
}

TEST(StoreOpen, InitialisesEmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.db");
  std::ofstream(path).close();
  ASSERT_EQ(fs::file_size(path), 0u);
  auto store = Store::open(path);
  EXPECT_EQ(store->schema_version(), Store::latest_schema_version());
}

TEST(StoreOpen, RejectsFileThatIsNotSqlite) {
  TempDir dir;
  const std::string path = dir.file("notes.db");
  std::ofstream(path) << "shopping list: eggs, milk, a faster softmax\n";
  const std::string message = store_error_of([&] { Store::open(path); });
  expect_contains(message, path + " is not an SQLite database (is it the right file?)");
}

TEST(StoreOpen, RejectsOtherSqliteDatabase) {
  TempDir dir;
  const std::string path = dir.file("other.db");
  RawDatabase(path).exec("CREATE TABLE recipes (name TEXT)");
  const std::string message = store_error_of([&] { Store::open(path); });
  expect_contains(message, path + " is an SQLite database but not a shapetune database");
  EXPECT_EQ(RawDatabase(path).value("SELECT count(*) FROM sqlite_master"), "1") << "the other database was modified";
}

TEST(StoreOpen, RejectsNewerSchema) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  Store::open(path);
  RawDatabase(path).exec("PRAGMA user_version = 99");
  const std::string message = store_error_of([&] { Store::open(path); });
  expect_contains(message, path + " has schema v99; this shapetune understands up to v" + std::to_string(Store::latest_schema_version()) + ": upgrade shapetune");
  expect_contains(store_error_of([&] { Store::open(path, OpenMode::read_only); }), "upgrade shapetune");
}

// Found by tests/fuzz: a damaged sqlite_master (a renamed column) with the right user_version
// reached a reader that looked for the column by name and ended the process.
TEST(StoreOpen, RejectsTablesThatAreNotTheSchemasOwn) {
  TempDir dir;
  const std::string renamed = dir.file("renamed.db");
  open_with_device(renamed);
  RawDatabase(renamed).exec("ALTER TABLE winners RENAME COLUMN speedup_vs_baseline TO speedup");
  for (const OpenMode mode : {OpenMode::read_only, OpenMode::read_write}) {
    const std::string message = store_error_of([&] { Store::open(renamed, mode); });
    expect_contains(message, renamed + " is not a shapetune database of schema v" +
                                 std::to_string(Store::latest_schema_version()) + ": table winners has columns (");
    expect_contains(message, ", speedup,");
    expect_contains(message, ", speedup_vs_baseline,");
  }
  const std::string dropped = dir.file("dropped.db");
  open_with_device(dropped);
  RawDatabase(dropped).exec("DROP TABLE ceilings");
  expect_contains(store_error_of([&] { Store::open(dropped, OpenMode::read_only); }), "it has no table ceilings");
  // A table of the user's own beside ours is left alone.
  const std::string extra = dir.file("extra.db");
  open_with_device(extra);
  RawDatabase(extra).exec("CREATE TABLE notes (text TEXT)");
  EXPECT_TRUE(Store::open(extra, OpenMode::read_only)->device(h200().key()).has_value());
}

TEST(StoreOpen, RejectsMissingDirectory) {
  const std::string message = store_error_of([] { Store::open("/nonexistent-dir/x.db"); });
  expect_contains(message, "/nonexistent-dir/x.db");
  expect_contains(message, "does not exist");
  EXPECT_FALSE(fs::exists("/nonexistent-dir"));
}

TEST(StoreOpen, RejectsUnwritableDirectory) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories anyway";
  TempDir dir;
  const std::string locked = dir.file("locked");
  fs::create_directory(locked);
  ASSERT_EQ(chmod(locked.c_str(), 0500), 0);
  const std::string path = locked + "/x.db";
  const std::string message = store_error_of([&] { Store::open(path); });
  chmod(locked.c_str(), 0700);  // so that TempDir can remove it
  expect_contains(message, path);
  expect_contains(message, "not writable");
  EXPECT_FALSE(fs::exists(path));
}

// A FIFO made SQLite's open block forever, a device file was read without end.
TEST(StoreOpen, RejectsPipesAndDevices) {
  TempDir dir;
  const std::string fifo = dir.file("pipe.db");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")})
    for (const OpenMode mode : {OpenMode::read_only, OpenMode::read_write}) {
      const std::string message = store_error_of([&] { Store::open(path, mode); });
      expect_contains(message, path + " is not a regular file");
    }
}

TEST(StoreOpen, ReadOnlyRejectsMissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent.db");
  const std::string message = store_error_of([&] { Store::open(path, OpenMode::read_only); });
  expect_contains(message, path + " does not exist");
  EXPECT_FALSE(fs::exists(path)) << "a read-only open created the file";
}

TEST(StoreOpen, ReadOnlyReadsButDoesNotWrite) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  open_with_device(path);
  auto store = Store::open(path, OpenMode::read_only);
  ASSERT_TRUE(store->device(h200().key()).has_value());
  const std::string message = store_error_of([&] { store->upsert_device(h200()); });
  expect_contains(message, path);
  expect_contains(message, "cannot be written");
}

TEST(StoreOpen, TwoStoresShareOneFile) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  auto writer = open_with_device(path);
  auto reader = Store::open(path, OpenMode::read_only);
  const std::int64_t id = writer->begin_sweep(sweep_info());
  ASSERT_TRUE(reader->sweep(id).has_value());
  EXPECT_EQ(reader->sweep(id)->status, "running");
}

// ---- migrations ----------------------------------------------------------------------------

// A database as the first shapetune release left it: migration 1 only, with rows in it.
// A database as shapetune wrote it at schema `version`: that many migrations, then rows with the
// columns of version 1 (every later migration adds columns with defaults or NULLs).
void build_version_database(const std::string& path, int version) {
  RawDatabase raw(path);
  for (int v = 0; v < version; ++v) raw.exec(std::string(schema_migrations()[static_cast<std::size_t>(v)].sql));
  raw.exec("PRAGMA user_version = " + std::to_string(version));
  raw.exec(R"sql(
    INSERT INTO devices VALUES ('NVIDIA A100|sm_80|108SM|40GiB', 'NVIDIA A100', 80, 108, 41943040, 42949672960,
                                '535.1', '12.2', '12.2.1', '8.9.0');
    INSERT INTO sweeps (device_key, command, git_sha, yaml_path, yaml_sha256, options, started_at, finished_at, status)
      VALUES ('NVIDIA A100|sm_80|108SM|40GiB', 'shapetune sweep old.yaml', 'old0001', 'old.yaml', 'feed', 'seed=1',
              '2025-01-02T03:04:05Z', NULL, 'running');
    INSERT INTO candidates (sweep_id, problem_key, primitive, dtype, shape_key, variant, config_key, baseline, status,
                            reason, atol, rtol, measured_at)
      VALUES (1, 'softmax/f32/rows=64,cols=64', 'softmax', 'f32', 'rows=64,cols=64', 'naive', 'block_size=64', 0,
              'error', 'illegal address', 0.001, 0.002, '2025-01-02T03:05:00Z');
    INSERT INTO winners (device_key, problem_key, primitive, dtype, shape_key, variant, config_key, baseline,
                         median_us, p10_us, p90_us, min_us, median_ci_rel, samples, timing_mode,
                         launches_per_sample, input_sets, stop_reason, atol, rtol, best_baseline, baseline_us,
                         speedup_vs_baseline, runner_up_variant, runner_up_config, runner_up_us, margin_rel, tie,
                         sweep_id, git_sha, measured_at)
      VALUES ('NVIDIA A100|sm_80|108SM|40GiB', 'softmax/f32/rows=64,cols=64', 'softmax', 'f32',
              'rows=64,cols=64', 'naive', 'block_size=64', 0, 1.5, 1.25, 1.75, 1.0, 0.01, 100, 'cold',
              1, 1, 'converged', 0.001, 0.002, '', 0, 0, '', '', 0, 0, 0, 1, 'old0001',
              '2025-01-02T03:06:00Z');
  )sql");
}

void build_version_1_database(const std::string& path) { build_version_database(path, 1); }

TEST(StoreMigration, UpgradesVersion1DatabaseKeepingItsRows) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  build_version_1_database(path);
  ASSERT_EQ(RawDatabase(path).value("PRAGMA application_id"), std::to_string(kApplicationId))
      << "migration 1 should claim the file";

  auto store = Store::open(path);
  EXPECT_EQ(store->schema_version(), Store::latest_schema_version());

  const DeviceFingerprint a100{"NVIDIA A100", 80, 108, 41943040, 42949672960, "535.1", "12.2", "12.2.1", "8.9.0"};
  ASSERT_EQ(a100.key(), "NVIDIA A100|sm_80|108SM|40GiB");
  const auto device = store->device(a100.key());
  ASSERT_TRUE(device.has_value());
  expect_same_device(*device, a100);

  const SweepInfo old_sweep{a100.key(), "shapetune sweep old.yaml", "old0001", "old.yaml", "feed", "seed=1"};
  EXPECT_EQ(store->find_resumable_sweep(old_sweep), std::optional<std::int64_t>(1));
  const auto candidates = store->candidates(1);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].status, CandidateStatus::error);
  EXPECT_EQ(candidates[0].reason, "illegal address");
  EXPECT_EQ(candidates[0].config, Config({{"block_size", 64}}));
  EXPECT_FALSE(candidates[0].accuracy.has_value());
  EXPECT_FALSE(candidates[0].timing.has_value());

  const auto winners = store->winners(a100.key());
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_EQ(winners[0].problem, softmax(64, 64));
  EXPECT_EQ(winners[0].timing.median_us, 1.5);
  EXPECT_EQ(winners[0].timing.mode, TimingMode::cold);
  EXPECT_FALSE(winners[0].timing.state_restored);  // the column migration 3 added, at its default
  EXPECT_TRUE(std::isnan(winners[0].cost.bytes));   // migration 4's columns: not recorded then
  EXPECT_TRUE(std::isnan(winners[0].cost.flops));

  const CeilingRecord copy{a100.key(), "dram_copy_memcpy", 1.3e12, "B/s", "cudaMemcpy 1 GiB, median of 20",
                           "new0002", "2026-01-01T00:00:00Z"};
  store->store_ceiling(copy);
  const auto ceilings = store->ceilings(a100.key());
  ASSERT_EQ(ceilings.size(), 1u);
  expect_same_ceiling(ceilings[0], copy);

  // Migration 5: no counters then, and none unavailable; both can be written now.
  EXPECT_TRUE(store->counter_values(1, "softmax/f32/rows=64,cols=64", "naive", "block_size=64").empty());
  EXPECT_TRUE(store->counter_records(1).empty());
  EXPECT_FALSE(store->counters_unavailable(1).has_value());
  store->record_counters({1, "softmax/f32/rows=64,cols=64", "naive", "block_size=64", {{"dram__bytes_read.sum", 32768}}});
  EXPECT_EQ(store->counter_values(1, "softmax/f32/rows=64,cols=64", "naive", "block_size=64").at("dram__bytes_read.sum"),
            32768);
}

// ---- counters ------------------------------------------------------------------------------

TEST(StoreCounters, RoundTripReplaceAndSelect) {
  TempDir dir;
  auto store = Store::open(dir.file("c.db"));
  store->upsert_device(h200());
  const std::int64_t sweep = store->begin_sweep(sweep_info());
  const std::string key = softmax(64, 4097).key();
  const counters::Values first{{"dram__bytes_read.sum", 1048576.0},
                               {"dram__bytes_write.sum", 1.0 / 3.0},
                               {"lts__t_sector_hit_rate.pct", std::numeric_limits<double>::quiet_NaN()},
                               {"fp32_flops", 4.0e9}};
  store->record_counters({sweep, key, "warp_online", "block_size=128", first});
  store->record_counters({sweep, key, "cudnn", "", {{"dram__bytes_read.sum", 7.0}}});

  const auto values = store->counter_values(sweep, key, "warp_online", "block_size=128");
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values.at("dram__bytes_read.sum"), 1048576.0);
  EXPECT_EQ(values.at("dram__bytes_write.sum"), 1.0 / 3.0);
  EXPECT_TRUE(std::isnan(values.at("lts__t_sector_hit_rate.pct"))) << "NaN is stored as NULL and read back as NaN";
  EXPECT_TRUE(store->counter_values(sweep, key, "warp_online", "block_size=256").empty());
  EXPECT_TRUE(store->counter_values(sweep + 1, key, "warp_online", "block_size=128").empty());

  // Profiling a candidate again replaces its whole set, metrics that are gone included.
  store->record_counters({sweep, key, "warp_online", "block_size=128", {{"dram__bytes_read.sum", 2.0}}});
  const auto replaced = store->counter_values(sweep, key, "warp_online", "block_size=128");
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_EQ(replaced.at("dram__bytes_read.sum"), 2.0);

  const auto records = store->counter_records(sweep);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].variant, "cudnn");
  EXPECT_EQ(records[0].config_key, "");
  EXPECT_EQ(records[0].values.at("dram__bytes_read.sum"), 7.0);
  EXPECT_EQ(records[1].variant, "warp_online");
  EXPECT_EQ(records[1].problem_key, key);
  EXPECT_EQ(records[1].sweep_id, sweep);
}

TEST(StoreCounters, UnavailableReasonPerSweep) {
  TempDir dir;
  auto store = Store::open(dir.file("c.db"));
  store->upsert_device(h200());
  const std::int64_t a = store->begin_sweep(sweep_info("a")), b = store->begin_sweep(sweep_info("b"));
  store->set_counters_unavailable(a, "insufficient privileges");
  store->set_counters_unavailable(a, "a MIG instance");  // the latest reason is kept
  EXPECT_EQ(store->counters_unavailable(a), std::optional<std::string>("a MIG instance"));
  EXPECT_FALSE(store->counters_unavailable(b).has_value());
  EXPECT_THROW(store->set_counters_unavailable(b + 1, "x"), StoreError);
}

// Every schema this project ever wrote is read by the read-only verbs, through a migrated private
// copy: the file itself is left byte for byte as it was, and no copy stays behind.
TEST(StoreMigration, ReadOnlyOpenReadsEveryOlderSchemaWithoutWritingIt) {
  for (int version = 1; version < Store::latest_schema_version(); ++version) {
    TempDir dir;
    const std::string path = dir.file("v" + std::to_string(version) + ".db");
    build_version_database(path, version);
    const std::string before = test_support::read_file(path);
    {
      auto store = Store::open(path, OpenMode::read_only);
      EXPECT_EQ(store->schema_version(), Store::latest_schema_version());
      EXPECT_EQ(Store::file_schema_version(path), version);
      const auto winners = store->winners();
      ASSERT_EQ(winners.size(), 1u) << "v" << version;
      EXPECT_EQ(winners[0].variant, "naive");
      EXPECT_EQ(winners[0].timing.median_us, 1.5);
      EXPECT_EQ(store->candidates(1).size(), 1u);
    }
    EXPECT_TRUE(test_support::read_file(path) == before) << "v" << version << " was written";
    EXPECT_EQ(RawDatabase(path).value("PRAGMA user_version"), std::to_string(version));
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      EXPECT_EQ(entry.path().filename(), "v" + std::to_string(version) + ".db") << "left behind: " << entry.path();
  }
}

// `shapetune migrate DB`: a backup first, then the upgrade in place; a second run has nothing to
// do; the backup is not overwritten by a later migrate.
TEST(StoreMigration, MigrateCommandUpgradesInPlaceKeepingABackup) {
  TempDir dir;
  const std::string path = dir.file("old.db");
  build_version_database(path, 4);
  auto cli = [](std::vector<std::string> args) {
    auto [code, out, err] = test_support::run_shapetune(args);
    return std::make_tuple(code, out, err);
  };
  const auto [code, out, err] = cli({"migrate", path});
  ASSERT_EQ(code, 0) << err;
  expect_contains(out, "migrated " + path + " from schema v4 to v" + std::to_string(Store::latest_schema_version()));
  EXPECT_EQ(Store::file_schema_version(path + ".v4.bak"), 4) << "the backup is the original schema";
  EXPECT_EQ(Store::open(path + ".v4.bak", OpenMode::read_only)->winners().size(), 1u) << "with its rows";
  EXPECT_EQ(Store::file_schema_version(path), Store::latest_schema_version());
  EXPECT_EQ(Store::open(path, OpenMode::read_only)->winners().size(), 1u);
  const auto [again, again_out, again_err] = cli({"migrate", path});
  EXPECT_EQ(again, 0) << again_err;
  expect_contains(again_out, "nothing to do");

  build_version_database(dir.file("second.db"), 2);
  std::ofstream(dir.file("second.db.v2.bak")) << "an earlier backup";
  const auto [refused, refused_out, refused_err] = cli({"migrate", dir.file("second.db")});
  EXPECT_EQ(refused, 2);
  expect_contains(refused_err, "exists already");
  EXPECT_EQ(Store::file_schema_version(dir.file("second.db")), 2) << "nothing migrated without a backup";
  const auto [not_db, not_db_out, not_db_err] = cli({"migrate", dir.file("second.db.v2.bak")});
  EXPECT_EQ(not_db, 2);
  const auto [version, version_out, version_err] = cli({"--version"});
  EXPECT_EQ(version, 0);
  expect_contains(version_out, "(database schema v" + std::to_string(Store::latest_schema_version()) + ")");
}

TEST(StoreMigration, NewerSchemasAreRefusedEvenReadOnly) {
  TempDir dir;
  const std::string path = dir.file("v99.db");
  build_version_1_database(path);
  RawDatabase(path).exec("PRAGMA user_version = 99");
  for (const OpenMode mode : {OpenMode::read_only, OpenMode::read_write}) {
    const std::string message = store_error_of([&] { Store::open(path, mode); });
    expect_contains(message, "has schema v99; this shapetune understands up to v");
  }
}

// ---- records -------------------------------------------------------------------------------

TEST(StoreDevices, RoundTripAndUpdateInPlace) {
  TempDir dir;
  auto store = Store::open(dir.file("tune.db"));
  const DeviceFingerprint device = h200();
  store->upsert_device(device);
  ASSERT_TRUE(store->device(device.key()).has_value());
  expect_same_device(*store->device(device.key()), device);
  EXPECT_FALSE(store->device("GeForce 256|sm_10|1SM|0GiB").has_value());

  // A new driver does not split the device: same key, one row, new versions.
  const std::int64_t sweep_id = store->begin_sweep(sweep_info());
  DeviceFingerprint updated = device;
  updated.driver_version = "560.28.03";
  ASSERT_EQ(updated.key(), device.key());
  store->upsert_device(updated);
  const auto devices = store->devices();
  ASSERT_EQ(devices.size(), 1u);
  expect_same_device(devices[0], updated);
  EXPECT_TRUE(store->sweep(sweep_id).has_value());
}

TEST(StoreSweeps, BeginAndFinish) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const SweepInfo info = sweep_info();
  const std::int64_t first = store->begin_sweep(info);
  const std::int64_t second = store->begin_sweep(sweep_info("other"));
  EXPECT_GT(second, first);

  const auto running = store->sweep(first);
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->id, first);
  EXPECT_EQ(running->info.device_key, info.device_key);
  EXPECT_EQ(running->info.command, info.command);
  EXPECT_EQ(running->info.git_sha, info.git_sha);
  EXPECT_EQ(running->info.yaml_path, info.yaml_path);
  EXPECT_EQ(running->info.yaml_sha256, info.yaml_sha256);
  EXPECT_EQ(running->info.options, info.options);
  EXPECT_EQ(running->status, "running");
  EXPECT_EQ(running->finished_at, "");
  EXPECT_EQ(running->started_at.size(), std::string("2026-11-30T19:18:14Z").size());

  store->finish_sweep(first, "complete (budget)");
  const auto finished = store->sweep(first);
  EXPECT_EQ(finished->status, "complete (budget)");
  EXPECT_FALSE(finished->finished_at.empty());

  const auto all = store->sweeps();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, first);
  EXPECT_EQ(all[1].id, second);
  EXPECT_FALSE(store->sweep(second + 1).has_value());
  expect_contains(store_error_of([&] { store->finish_sweep(second + 1, "complete"); }), "no sweep");
}

TEST(StoreSweeps, RequireARecordedDevice) {
  TempDir dir;
  auto store = Store::open(dir.file("tune.db"));
  const std::string message = store_error_of([&] { store->begin_sweep(sweep_info()); });
  expect_contains(message, "FOREIGN KEY");
  EXPECT_TRUE(store->sweeps().empty());
}

TEST(StoreCandidates, RoundTripWithAccuracyAndTiming) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const CandidateRecord record = measured_candidate(store->begin_sweep(sweep_info()));
  store->record_candidate(record);
  const auto read = store->candidates(record.sweep_id, record.problem.key());
  ASSERT_EQ(read.size(), 1u);
  expect_same_candidate(read[0], record);
}

TEST(StoreCandidates, RoundTripWithoutOptionalParts) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const CandidateRecord record = unsupported_candidate(store->begin_sweep(sweep_info()));
  store->record_candidate(record);
  const auto read = store->candidates(record.sweep_id);
  ASSERT_EQ(read.size(), 1u);
  expect_same_candidate(read[0], record);
  EXPECT_TRUE(store->has_candidate(record.sweep_id, record.problem.key(), "cudnn", ""));
}

TEST(StoreCandidates, AccuracyWithoutTimingAndNonFiniteErrors) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  CandidateRecord record = measured_candidate(store->begin_sweep(sweep_info()));
  record.status = CandidateStatus::failed_accuracy;
  record.reason = "1 element outside tolerance";
  record.timing.reset();
  record.accuracy = AccuracyReport{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                   1, 6291456, "y[3,4097]: got nan, want 0.0123"};
  store->record_candidate(record);
  const auto read = store->candidates(record.sweep_id);
  ASSERT_EQ(read.size(), 1u);
  ASSERT_TRUE(read[0].accuracy.has_value());
  EXPECT_FALSE(read[0].timing.has_value());
  EXPECT_TRUE(std::isnan(read[0].accuracy->max_abs_error));
  EXPECT_EQ(read[0].accuracy->max_rel_error, std::numeric_limits<double>::infinity());
  EXPECT_EQ(read[0].accuracy->mismatches, 1);
  EXPECT_EQ(read[0].accuracy->first_mismatch, "y[3,4097]: got nan, want 0.0123");
  EXPECT_EQ(read[0].status, CandidateStatus::failed_accuracy);
}

TEST(StoreCandidates, RecordingTheSameCandidateReplacesIt) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  CandidateRecord record = measured_candidate(store->begin_sweep(sweep_info()));
  record.status = CandidateStatus::error;
  record.timing.reset();
  store->record_candidate(record);
  const CandidateRecord retried = measured_candidate(record.sweep_id);
  store->record_candidate(retried);
  const auto read = store->candidates(record.sweep_id);
  ASSERT_EQ(read.size(), 1u);
  expect_same_candidate(read[0], retried);
}

TEST(StoreCandidates, SelectedBySweepAndProblem) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const std::int64_t sweep_a = store->begin_sweep(sweep_info());
  const std::int64_t sweep_b = store->begin_sweep(sweep_info("other"));
  CandidateRecord layernorm = measured_candidate(sweep_a);
  CandidateRecord softmax_cudnn = unsupported_candidate(sweep_a);
  CandidateRecord softmax_other_sweep = unsupported_candidate(sweep_b);
  store->record_candidate(layernorm);
  store->record_candidate(softmax_cudnn);
  store->record_candidate(softmax_other_sweep);

  EXPECT_EQ(store->candidates(sweep_a).size(), 2u);
  EXPECT_EQ(store->candidates(sweep_b).size(), 1u);
  const auto softmax_in_a = store->candidates(sweep_a, softmax_cudnn.problem.key());
  ASSERT_EQ(softmax_in_a.size(), 1u);
  EXPECT_EQ(softmax_in_a[0].sweep_id, sweep_a);
  EXPECT_EQ(softmax_in_a[0].variant, "cudnn");
  EXPECT_TRUE(store->candidates(sweep_b, layernorm.problem.key()).empty());
}

TEST(StoreProblems, StatusRoundTripAndReplace) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const std::int64_t sweep_id = store->begin_sweep(sweep_info());
  const std::string key = softmax(4096, 1000).key();
  EXPECT_FALSE(store->problem_status(sweep_id, key).has_value());
  store->record_problem(sweep_id, key, "skipped", "needs 200 GiB");
  EXPECT_EQ(store->problem_status(sweep_id, key), std::optional<std::string>("skipped"));
  store->record_problem(sweep_id, key, "done", "");
  EXPECT_EQ(store->problem_status(sweep_id, key), std::optional<std::string>("done"));
  EXPECT_FALSE(store->problem_status(sweep_id + 1, key).has_value());
}

TEST(StoreWinners, RoundTripReplaceAndOrder) {
  TempDir dir;
  auto store = Store::open(dir.file("tune.db"));
  const WinnerRecord big = full_winner("gpu-a", softmax(8192, 1000));
  const WinnerRecord small = full_winner("gpu-a", softmax(1024, 1000));
  const WinnerRecord elsewhere = full_winner("gpu-b", softmax(1024, 1000));
  store->store_winner(big);
  store->store_winner(small);
  store->store_winner(elsewhere);

  const auto a = store->winners("gpu-a");
  ASSERT_EQ(a.size(), 2u);
  expect_same_winner(a[0], small);  // ordered by problem key: rows=1024 < rows=8192
  expect_same_winner(a[1], big);
  EXPECT_EQ(store->winners().size(), 3u);
  EXPECT_TRUE(store->winners("gpu-c").empty());
  ASSERT_TRUE(store->winner("gpu-b", elsewhere.problem.key()));
  expect_same_winner(*store->winner("gpu-b", elsewhere.problem.key()), elsewhere);
  EXPECT_FALSE(store->winner("gpu-c", elsewhere.problem.key()));
  EXPECT_FALSE(store->winner("gpu-a", softmax(2048, 1000).key()));

  WinnerRecord retuned = big;
  retuned.variant = "online_softmax";
  retuned.config = Config();
  retuned.baseline = true;
  retuned.tie = false;
  retuned.runner_up_config = Config();
  store->store_winner(retuned);
  const auto after = store->winners("gpu-a");
  ASSERT_EQ(after.size(), 2u);
  expect_same_winner(after[1], retuned);
}

TEST(StoreCeilings, RoundTripAndReplace) {
  TempDir dir;
  auto store = Store::open(dir.file("tune.db"));
  CeilingRecord copy{"gpu-a", "dram_copy_memcpy", 4.123456789012345e12, "B/s", "cudaMemcpy, 2 GiB, best of 10",
                     "abc1234", "2026-11-30T19:18:14Z"};
  const CeilingRecord fma{"gpu-a", "fma_f32", 6.7e13, "FLOP/s", "FMA chain", "abc1234", "2026-11-30T19:18:15Z"};
  store->store_ceiling(copy);
  store->store_ceiling(fma);
  store->store_ceiling(CeilingRecord{"gpu-b", "fma_f32", 1, "FLOP/s", "", "", ""});
  copy.value = 4.2e12;
  store->store_ceiling(copy);

  const auto ceilings = store->ceilings("gpu-a");
  ASSERT_EQ(ceilings.size(), 2u);
  expect_same_ceiling(ceilings[0], copy);
  expect_same_ceiling(ceilings[1], fma);
  EXPECT_EQ(store->ceilings().size(), 3u);
}

TEST(StoreReopen, ReadsBackEverything) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  const WinnerRecord winner = full_winner(h200().key(), softmax(4096, 1000));
  const CeilingRecord ceiling{h200().key(), "launch_overhead", 2.125, "us", "empty kernel", "abc", "2026-01-01T00:00:00Z"};
  std::int64_t sweep_id = 0;
  {
    auto store = open_with_device(path);
    sweep_id = store->begin_sweep(sweep_info());
    store->record_candidate(measured_candidate(sweep_id));
    store->record_candidate(unsupported_candidate(sweep_id));
    store->record_problem(sweep_id, winner.problem.key(), "done", "");
    store->store_winner(winner);
    store->store_ceiling(ceiling);
    store->finish_sweep(sweep_id, "complete");
  }
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    auto store = Store::open(path, mode);
    expect_same_device(store->devices().at(0), h200());
    EXPECT_EQ(store->sweep(sweep_id)->status, "complete");
    const auto candidates = store->candidates(sweep_id);
    ASSERT_EQ(candidates.size(), 2u);
    expect_same_candidate(candidates[0], measured_candidate(sweep_id));
    expect_same_candidate(candidates[1], unsupported_candidate(sweep_id));
    EXPECT_EQ(store->problem_status(sweep_id, winner.problem.key()), std::optional<std::string>("done"));
    ASSERT_EQ(store->winners().size(), 1u);
    expect_same_winner(store->winners()[0], winner);
    ASSERT_EQ(store->ceilings().size(), 1u);
    expect_same_ceiling(store->ceilings()[0], ceiling);
  }
}

// ---- resuming ------------------------------------------------------------------------------

TEST(StoreResume, CrashedSweepIsResumedWithItsCandidates) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  const SweepInfo info = sweep_info();
  CandidateRecord first = measured_candidate(0);
  CandidateRecord second = unsupported_candidate(0);
  std::int64_t crashed = 0;
  {
    auto store = open_with_device(path);
    store->finish_sweep(store->begin_sweep(info), "complete");
    store->begin_sweep(info);  // an older crash: the latest one wins
    crashed = store->begin_sweep(info);
    first.sweep_id = second.sweep_id = crashed;
    store->record_candidate(first);
    store->record_candidate(second);
  }  // no finish_sweep: the process died here

  auto store = Store::open(path);
  ASSERT_EQ(store->find_resumable_sweep(info), std::optional<std::int64_t>(crashed));
  EXPECT_TRUE(store->has_candidate(crashed, first.problem.key(), first.variant, first.config.key()));
  EXPECT_TRUE(store->has_candidate(crashed, second.problem.key(), second.variant, second.config.key()));
  EXPECT_FALSE(store->has_candidate(crashed, first.problem.key(), first.variant, "block_size=1024,vec=4"));
  EXPECT_FALSE(store->has_candidate(crashed - 1, first.problem.key(), first.variant, first.config.key()));
}

TEST(StoreResume, SweepWithOtherOptionsIsNotResumed) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  store->begin_sweep(sweep_info("flush_l2=0"));
  EXPECT_FALSE(store->find_resumable_sweep(sweep_info("flush_l2=1")).has_value());
  SweepInfo other_yaml = sweep_info("flush_l2=0");
  other_yaml.yaml_sha256 = "0000";
  EXPECT_FALSE(store->find_resumable_sweep(other_yaml).has_value());
  SweepInfo other_device = sweep_info("flush_l2=0");
  other_device.device_key = "NVIDIA T4|sm_75|40SM|15GiB";
  EXPECT_FALSE(store->find_resumable_sweep(other_device).has_value());
  EXPECT_TRUE(store->find_resumable_sweep(sweep_info("flush_l2=0")).has_value());
}

TEST(StoreResume, FinishedSweepIsNotResumed) {
  TempDir dir;
  auto store = open_with_device(dir.file("tune.db"));
  const std::int64_t id = store->begin_sweep(sweep_info());
  ASSERT_EQ(store->find_resumable_sweep(sweep_info()), std::optional<std::int64_t>(id));
  store->finish_sweep(id, "interrupted");
  EXPECT_FALSE(store->find_resumable_sweep(sweep_info()).has_value());
}

}  // namespace
}  // namespace shapetune
