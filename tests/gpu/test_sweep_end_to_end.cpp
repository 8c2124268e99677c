// A small sweep end to end: YAML -> verify -> time -> SQLite -> winners -> dispatch -> export.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli/cli.hpp"
#include "core/sha256.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "models/dispatcher.hpp"
#include "support/test_support.hpp"
#include "tuner/sweep.hpp"

namespace shapetune {
namespace {

constexpr const char* kMatrix = R"(name: e2e
matrices:
  - primitive: softmax
    dtypes: [f32, f16]
    axes:
      rows: [64, 3]
      cols: [1000, 4097]
    zip: [rows, cols]
)";

// A shape file of one f32 gemm.nn problem.
void write_gemm_nn(const std::string& yaml, int m, int n, int k) {
  std::ofstream(yaml) << "matrices:\n  - primitive: gemm.nn\n    dtypes: [f32]\n    axes:\n      m: " << m
                      << "\n      n: " << n << "\n      k: " << k << "\n";
}

// `shapetune sweep YAML --db DB --variant VARIANT`, short timings, no counters; expects exit 0.
std::string sweep_variant(const std::string& yaml, const std::string& db, const char* variant) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"sweep", yaml, "--db", db, "--variant", variant, "--time-cap", "0.05", "--counters", "none"}, out,
                    err),
            0)
      << out.str() << err.str();
  return out.str();
}

TEST(SweepEndToEnd, WritesWinnersThatDispatchReturns) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("e2e.yaml"), db = dir.file("e2e.db");
  std::ofstream(yaml) << kMatrix;

  std::ostringstream out, err;
  const int code = run_cli({"sweep", yaml, "--db", db, "--time-cap", "0.05", "--variant",
                            "cudnn,vec_online,register_row,warp_row_online", "--seed", "5"},
                           out, err);
  ASSERT_EQ(code, 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("[4/4] softmax/f16/rows=3,cols=4097"), std::string::npos) << out.str();

  auto store = Store::open(db, OpenMode::read_only);
  const DeviceInfo device = use_device(0);
  const auto winners = store->winners(device.fingerprint.key());
  ASSERT_EQ(winners.size(), 4u);
  for (const auto& w : winners) {
    EXPECT_GT(w.timing.median_us, 0);
    EXPECT_FALSE(w.git_sha.empty());
    EXPECT_EQ(w.best_baseline, "cudnn") << w.problem.key();  // cuDNN passes the tolerance
    EXPECT_GT(w.speedup_vs_baseline, 0);
  }

  Dispatcher dispatcher(db, device.fingerprint.key(), device.limits);
  for (const auto& w : winners) {
    const DispatchChoice exact = dispatcher.lookup(w.problem);
    EXPECT_EQ(exact.source, DispatchSource::exact);
    EXPECT_EQ(exact.variant, w.variant);
    EXPECT_EQ(exact.config, w.config);
  }
  // An untuned shape borrows the nearest tuned one of its dtype, or falls back to the default.
  const Problem near{"softmax", DType::f32, Shape({{"rows", 60}, {"cols", 1100}})};
  const DispatchChoice borrowed = dispatcher.lookup(near);
  EXPECT_NE(borrowed.source, DispatchSource::exact);
  EXPECT_TRUE(catalogue().find_variant("softmax", borrowed.variant)->supports(near, borrowed.config, device.limits).ok);

  // Running it again resumes nothing (the sweep finished) unless asked: a new sweep starts.
  std::ostringstream out2, err2;
  ASSERT_EQ(run_cli({"winners", "--db", db}, out2, err2), 0) << err2.str();
  EXPECT_NE(out2.str().find("softmax/f16/rows=3,cols=4097"), std::string::npos);
  std::ostringstream out3, err3;
  ASSERT_EQ(run_cli({"export", "--db", db, "--format", "csv"}, out3, err3), 0) << err3.str();
  const std::string csv = out3.str();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);  // header + 4 winners
}

TEST(SweepEndToEnd, ResumesAnInterruptedSweepWithoutRemeasuring) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("r.yaml"), db = dir.file("r.db");
  std::ofstream(yaml) << kMatrix;
  SweepOptions options;
  options.shape_file = yaml;
  options.db_path = db;
  options.variants = {"vec_online"};
  options.measure.stop.time_cap_s = 0.05;
  options.seed = 1;

  // What a crash leaves behind: an unfinished sweep with the same device, file and options,
  // holding one measured candidate (marked by an impossible time) of the first problem.
  const DeviceInfo device = use_device(0);
  std::ifstream in(yaml);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Variant& v = *catalogue().find_variant("softmax", "vec_online");
  {
    auto store = Store::open(db);
    store->upsert_device(device.fingerprint);
    const auto id = store->begin_sweep(
        {device.fingerprint.key(), "crashed run", "sha", yaml, sha256_hex(bytes), result_affecting_options(options)});
    CandidateRecord marker;
    marker.sweep_id = id;
    marker.problem = Problem{"softmax", DType::f32, Shape({{"rows", 64}, {"cols", 1000}})};
    marker.variant = v.name;
    marker.config = v.default_config;
    marker.timing = TimingStats{};
    marker.timing->median_us = 12345;
    marker.timing->samples = 10;
    marker.accuracy = AccuracyReport{};
    store->record_candidate(marker);
  }

  std::ostringstream out, err;
  ASSERT_EQ(run_sweep(options, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("Resuming sweep #1"), std::string::npos) << out.str();

  auto store = Store::open(db, OpenMode::read_only);
  ASSERT_EQ(store->sweeps().size(), 1u);
  EXPECT_EQ(store->sweeps()[0].status, "complete");
  const auto resumed = store->candidates(1, "softmax/f32/rows=64,cols=1000");
  const auto kept = std::find_if(resumed.begin(), resumed.end(), [&](const CandidateRecord& r) {
    return r.config == v.default_config;
  });
  ASSERT_NE(kept, resumed.end());
  EXPECT_EQ(kept->timing->median_us, 12345) << "the resumed sweep measured a recorded candidate again";
  EXPECT_GT(resumed.size(), 1u);  // and it went on with the others
}

TEST(SweepEndToEnd, SkipsWhatTheDeviceCannotHoldAndHonoursTheBudget) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("b.yaml"), db = dir.file("b.db");
  // 2^21 x 2^20 f32 is 8 TiB per tensor: recorded as skipped, and the sweep goes on.
  std::ofstream(yaml) << "matrices:\n  - primitive: softmax\n    dtypes: [f32]\n    axes:\n"
                         "      rows: [2097152, 256, 512, 1024]\n      cols: [1048576, 1000, 1000, 1000]\n"
                         "    zip: [rows, cols]\n";
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"sweep", yaml, "--db", db, "--budget", "1", "--time-cap", "0.05"}, out, err), 0)
      << out.str() << err.str();
  EXPECT_NE(out.str().find("rows=2097152,cols=1048576: skipped: needs"), std::string::npos) << out.str();
  auto store = Store::open(db, OpenMode::read_only);
  const auto sweep = store->sweeps().at(0);
  EXPECT_EQ(sweep.status, "complete (budget)");
  EXPECT_EQ(store->problem_status(sweep.id, "softmax/f32/rows=2097152,cols=1048576"), "skipped");
  // A one-second budget over ~160 candidates per problem cannot measure them all, but every
  // problem still has its baseline and a winner.
  const auto winners = store->winners();
  EXPECT_EQ(winners.size(), 3u);
  for (const auto& w : winners) EXPECT_EQ(w.best_baseline, "cudnn") << w.problem.key();
  std::size_t measured = store->candidates(sweep.id).size();
  EXPECT_LT(measured, 3u * 159u);
}

// A cuBLASLt winner is stored with its algorithm's identity, and dispatch hands it on for an
// exact match: the kernel replayed later is the one that was timed.
TEST(SweepEndToEnd, CublasLtWinnerIsStoredWithItsAlgorithm) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("lt.yaml"), db = dir.file("lt.db");
  write_gemm_nn(yaml, 96, 80, 64);
  const std::string out = sweep_variant(yaml, db, "cublaslt");
  auto store = Store::open(db, OpenMode::read_only);
  const auto winners = store->winners();
  ASSERT_EQ(winners.size(), 1u) << out;
  const WinnerRecord& w = winners[0];
  EXPECT_EQ(w.variant, "cublaslt");
  EXPECT_NE(w.library_algo.find("algo_id="), std::string::npos) << "'" << w.library_algo << "'";
  const DeviceInfo device = use_device(0);
  const Dispatcher dispatcher(db, device.fingerprint.key(), device.limits);
  const DispatchChoice choice = dispatcher.lookup(w.problem);
  EXPECT_EQ(choice.source, DispatchSource::exact);
  EXPECT_EQ(choice.library_algo, w.library_algo);
}

// A later sweep of one slower variant leaves the table's faster row, with its library algorithm,
// and says so on the problem's line.
TEST(SweepEndToEnd, ANarrowerSweepKeepsTheFasterRowItDidNotMeasure) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("narrow.yaml"), db = dir.file("narrow.db");
  write_gemm_nn(yaml, 512, 512, 512);
  sweep_variant(yaml, db, "cublaslt");
  const auto first = Store::open(db, OpenMode::read_only)->winners();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].variant, "cublaslt");
  const std::string line = sweep_variant(yaml, db, "naive");
  EXPECT_NE(line.find("best naive"), std::string::npos) << line;
  EXPECT_NE(line.find("table keeps cublaslt"), std::string::npos) << line;
  const auto after = Store::open(db, OpenMode::read_only)->winners();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].variant, "cublaslt");
  EXPECT_EQ(after[0].sweep_id, first[0].sweep_id);
  EXPECT_EQ(after[0].library_algo, first[0].library_algo);
}

}  // namespace
}  // namespace shapetune
