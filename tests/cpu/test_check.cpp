// `shapetune check`'s decisions without a GPU: verdicts from stored winners (a fixture database)
// and fake fresh outcomes, exit codes, the summary line, and the CLI's setup failures.
#include "tuner/check.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "support/test_support.hpp"
#include "tuner/sweep.hpp"

namespace shapetune {
namespace {

// Not a real device's key, so the CLI finds no winners for whatever GPU the tests run on.
const char* kDevice = "Fixture GPU|sm_90|1SM|1GiB";

using test_support::contains;

WinnerRecord winner(const std::string& primitive, DType dtype, Shape shape, double us, double ci_rel) {
  WinnerRecord w;
  w.device_key = kDevice;
  w.problem = Problem{primitive, dtype, std::move(shape)};
  w.variant = "vec_online";
  w.config = Config({{"block_size", 128}});
  w.timing.median_us = us;
  w.timing.p10_us = us * 0.98;
  w.timing.p90_us = us * 1.02;
  w.timing.median_ci_rel = ci_rel;
  w.timing.samples = 40;
  w.timing.mode = TimingMode::cold;
  w.tolerance = {1e-3, 1e-3};
  w.sweep_id = 1;
  w.git_sha = "abc1234";
  w.measured_at = "2026-12-01T00:00:00Z";
  return w;
}

CandidateOutcome accurate(double us, double ci_rel) {
  CandidateOutcome o;
  o.accuracy = AccuracyReport{2e-4, 1e-4, 0, 4096, ""};
  o.timing = TimingStats{};
  o.timing->median_us = us;
  o.timing->median_ci_rel = ci_rel;
  o.timing->samples = 40;
  o.timing->mode = TimingMode::cold;
  return o;
}

CandidateOutcome violation() {
  CandidateOutcome o;
  o.status = CandidateStatus::failed_accuracy;
  o.accuracy = AccuracyReport{3.1e-2, 0.5, 12, 4096, "y[3,5]: got 0.0312, want 0.0001"};
  o.reason = "12 of 4096 elements outside tolerance; first y[3,5]: got 0.0312, want 0.0001";
  return o;
}

// Four winners stored as a sweep would leave them, read back through the store.
struct CheckFixture : ::testing::Test {
  test_support::TempDir tmp;
  std::string db = tmp.file("check.db");
  std::vector<WinnerRecord> stored;

  void SetUp() override {
    auto store = Store::open(db);
    store->upsert_device(DeviceFingerprint{"Fixture GPU", 90, 1, 1 << 20, std::int64_t{1} << 30, "1", "2", "3", "4"});
    store->store_winner(winner("softmax", DType::f16, Shape({{"rows", 3}, {"cols", 4097}}), 10.0, 0.01));
    store->store_winner(winner("softmax", DType::f32, Shape({{"rows", 64}, {"cols", 1000}}), 100.0, 0.01));
    store->store_winner(winner("softmax", DType::f32, Shape({{"rows", 3}, {"cols", 4097}}), 50.0, 0.04));
    store->store_winner(winner("softmax", DType::f16, Shape({{"rows", 64}, {"cols", 1000}}), 20.0, 0.005));
    stored = store->winners(kDevice);
    ASSERT_EQ(stored.size(), 4u);
  }
  const WinnerRecord& find(const std::string& key) {
    for (const auto& w : stored)
      if (w.problem.key() == key) return w;
    throw std::runtime_error("no fixture winner " + key);
  }
};

TEST_F(CheckFixture, PlantedViolationAndRegressionFailWithTheirNames) {
  const CheckRule rule;  // 10%, k = 2
  std::vector<CheckRow> rows;
  // Planted accuracy violation on the f16 winner; its time is never looked at.
  rows.push_back(judge(find("softmax/f16/rows=3,cols=4097"), violation(), rule));
  // Planted 30% regression with tight CIs: 100 us -> 130 us, limit max(10%, 2 * 2%) = 10%.
  rows.push_back(judge(find("softmax/f32/rows=64,cols=1000"), accurate(130, 0.01), rule));
  // Within the noise: +5% under a 10% limit.
  rows.push_back(judge(find("softmax/f16/rows=64,cols=1000"), accurate(21, 0.005), rule));
  // Noisy on both sides: +15% is inside max(10%, 2 * (4% + 5%)) = 18%.
  rows.push_back(judge(find("softmax/f32/rows=3,cols=4097"), accurate(57.5, 0.05), rule));

  EXPECT_EQ(rows[0].verdict, CheckVerdict::accuracy);
  EXPECT_TRUE(contains(rows[0].detail, "12 of 4096 elements")) << rows[0].detail;
  EXPECT_EQ(check_accuracy_text(rows[0]), "VIOLATION: 12 of 4096 elements, max abs err 3.1e-02 vs atol 0.001 / rtol 0.001");

  EXPECT_EQ(rows[1].verdict, CheckVerdict::regression);
  EXPECT_NEAR(rows[1].change_rel, 0.30, 1e-12);
  EXPECT_NEAR(rows[1].limit_rel, 0.10, 1e-12);
  EXPECT_TRUE(contains(rows[1].detail, "slower by +30.0%")) << rows[1].detail;
  EXPECT_EQ(check_accuracy_text(rows[1]), "ok (max abs err 2.0e-04)");

  EXPECT_EQ(rows[2].verdict, CheckVerdict::ok);
  EXPECT_NEAR(rows[2].change_rel, 0.05, 1e-12);
  EXPECT_EQ(rows[3].verdict, CheckVerdict::ok);
  EXPECT_NEAR(rows[3].limit_rel, 0.18, 1e-12);

  EXPECT_EQ(check_exit_code(rows, false), 1);
  const std::string summary = check_summary(rows, false);
  EXPECT_EQ(summary, "FAIL (1 accuracy violation, 1 regression): 4 winners checked: 2 ok, 1 accuracy violation, 1 regression");

  // Each planted failure alone fails; without them the run passes.
  EXPECT_EQ(check_exit_code({rows[0], rows[2], rows[3]}, false), 1);
  EXPECT_EQ(check_exit_code({rows[1], rows[2], rows[3]}, false), 1);
  EXPECT_TRUE(contains(check_summary({rows[1], rows[2]}, false), "FAIL (1 regression)"));
  EXPECT_EQ(check_exit_code({rows[2], rows[3]}, false), 0);
  EXPECT_EQ(check_summary({rows[2], rows[3]}, false), "PASS: 2 winners checked: 2 ok");
}

TEST_F(CheckFixture, NoiseDecidesBetweenRegressionAndOk) {
  const WinnerRecord& noisy = find("softmax/f32/rows=3,cols=4097");  // stored CI 4%
  // +15%: a regression when the new median is tight (limit max(10%, 2 * 4.5%) = 10%)...
  EXPECT_EQ(judge(noisy, accurate(57.5, 0.005), CheckRule{}).verdict, CheckVerdict::regression);
  // ...and within the noise when it is not.
  EXPECT_EQ(judge(noisy, accurate(57.5, 0.05), CheckRule{}).verdict, CheckVerdict::ok);
  // The threshold is a floor: a 30% threshold lets +25% through even with tight CIs.
  const WinnerRecord& tight = find("softmax/f32/rows=64,cols=1000");
  EXPECT_EQ(judge(tight, accurate(125, 0.001), CheckRule{0.30, 2}).verdict, CheckVerdict::ok);
  EXPECT_DOUBLE_EQ(regression_limit(CheckRule{0.10, 2}, 0.03, 0.04), 0.14);
  EXPECT_DOUBLE_EQ(regression_limit(CheckRule{0.10, 2}, std::nan(""), 0.01), 0.10);  // no recorded CI: no noise
  // Faster beyond the limit passes, with its own verdict.
  const CheckRow faster = judge(tight, accurate(80, 0.01), CheckRule{});
  EXPECT_EQ(faster.verdict, CheckVerdict::faster);
  EXPECT_EQ(check_exit_code({faster}, false), 0);
  EXPECT_EQ(check_summary({faster}, false), "PASS: 1 winner checked: 0 ok, 1 faster");
}

TEST_F(CheckFixture, ErrorsAndUntunedProblems) {
  CandidateOutcome refused;
  refused.status = CandidateStatus::unsupported;
  refused.reason = "needs sm_100";
  const CheckRow error = judge(find("softmax/f16/rows=64,cols=1000"), refused, CheckRule{});
  EXPECT_EQ(error.verdict, CheckVerdict::error);
  EXPECT_EQ(error.detail, "unsupported: needs sm_100");
  EXPECT_EQ(check_accuracy_text(error), "-");
  EXPECT_EQ(check_exit_code({error}, false), 1);
  EXPECT_EQ(not_run(stored[0], "variant gone").verdict, CheckVerdict::error);

  const CheckRow ok = judge(find("softmax/f16/rows=64,cols=1000"), accurate(20, 0.01), CheckRule{});
  const CheckRow untuned = not_tuned(Problem{"softmax", DType::bf16, Shape({{"rows", 8}, {"cols", 8}})});
  EXPECT_EQ(untuned.verdict, CheckVerdict::not_tuned);
  EXPECT_EQ(check_exit_code({ok, untuned}, false), 0);
  EXPECT_EQ(check_exit_code({ok, untuned}, true), 1);
  EXPECT_EQ(check_summary({ok, untuned}, false),
            "PASS: 1 winner checked: 1 ok; 1 problem not tuned (a failure only with --strict)");
  EXPECT_EQ(check_summary({ok, untuned}, true), "FAIL (1 problem not tuned): 1 winner checked: 1 ok; 1 problem not tuned");
}

TEST(Check, MeasureOptionsRoundTripThroughTheSweepRecord) {
  SweepOptions sweep;
  sweep.measure.flush_l2 = false;
  sweep.measure.stop.min_samples = 7;
  sweep.measure.stop.max_samples = 99;
  sweep.measure.stop.target_ci_rel = 0.02;
  sweep.measure.stop.time_cap_s = 0.25;
  sweep.variants = {"a", "b"};
  const MeasureOptions o = measure_options_from_text(result_affecting_options(sweep));
  EXPECT_FALSE(o.flush_l2);
  EXPECT_EQ(o.stop.min_samples, 7);
  EXPECT_EQ(o.stop.max_samples, 99);
  EXPECT_DOUBLE_EQ(o.stop.target_ci_rel, 0.02);
  EXPECT_DOUBLE_EQ(o.stop.time_cap_s, 0.25);
  EXPECT_DOUBLE_EQ(o.batch_below_us, MeasureOptions{}.batch_below_us);
  const MeasureOptions defaults = measure_options_from_text("");
  EXPECT_TRUE(defaults.flush_l2);
  EXPECT_EQ(defaults.stop.min_samples, StopRule{}.min_samples);
}

using test_support::CliResult;
constexpr auto run = &test_support::run_shapetune;

TEST_F(CheckFixture, CliSetupFailuresExitTwo) {
  const CliResult help = run({"check", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(contains(help.out, "limit = max(threshold, 2 * (c_stored + c_now))")) << help.out;
  EXPECT_TRUE(contains(help.out, "Exit codes: 0"));

  EXPECT_EQ(run({"check"}).code, 2);
  EXPECT_TRUE(contains(run({"check"}).err, "--db FILE is required"));
  const CliResult missing = run({"check", "--db", tmp.file("missing.db")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(contains(missing.err, "does not exist")) << missing.err;

  const std::string empty = tmp.file("empty.db");
  Store::open(empty);
  const CliResult none = run({"check", "--db", empty});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.err, "no winners in")) << none.err;

  // Winners, but none for this machine's device (or no device at all here): nothing to check.
  const CliResult foreign = run({"check", "--db", db});
  EXPECT_EQ(foreign.code, 2) << foreign.out << foreign.err;
  EXPECT_TRUE(contains(foreign.err, "needs a CUDA device") || contains(foreign.err, "no winners for this device"))
      << foreign.err;
}

}  // namespace
}  // namespace shapetune
