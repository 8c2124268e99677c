#include <gtest/gtest.h>

#include "tuner/choose.hpp"
#include "tuner/search.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

CandidateRecord candidate(std::string variant, double median_us, bool baseline = false,
                          CandidateStatus status = CandidateStatus::ok, double ci = 0.002) {
  CandidateRecord c;
  c.problem = Problem{"softmax", DType::f32, Shape({{"rows", 8}, {"cols", 8}})};
  c.variant = std::move(variant);
  c.baseline = baseline;
  c.status = status;
  if (status == CandidateStatus::ok) {
    c.timing = TimingStats{};
    c.timing->median_us = median_us;
    c.timing->median_ci_rel = ci;
  }
  return c;
}

TEST(ChooseWinner, FastestAccurateWinsAndBaselineIsCompared) {
  const auto w = choose_winner({candidate("slow", 30), candidate("cudnn", 20, true), candidate("fast", 10),
                                candidate("wrong", 1, false, CandidateStatus::failed_accuracy)});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, "fast");
  EXPECT_EQ(w->best_baseline, "cudnn");
  EXPECT_DOUBLE_EQ(w->baseline_us, 20);
  EXPECT_DOUBLE_EQ(w->speedup_vs_baseline, 2.0);
  EXPECT_EQ(w->runner_up_variant, "cudnn");
  EXPECT_DOUBLE_EQ(w->margin_rel, 1.0);
  EXPECT_FALSE(w->tie);
}

TEST(ChooseWinner, AFailedCandidateNeverWinsEvenWhenFastest) {
  const auto w = choose_winner({candidate("wrong", 1, false, CandidateStatus::failed_accuracy),
                                candidate("error", 1, false, CandidateStatus::error), candidate("right", 50)});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, "right");
  EXPECT_TRUE(w->runner_up_variant.empty());
  EXPECT_TRUE(w->best_baseline.empty());
}

TEST(ChooseWinner, NoAccurateCandidateNoWinner) {
  EXPECT_FALSE(choose_winner({candidate("wrong", 1, false, CandidateStatus::failed_accuracy)}));
  EXPECT_FALSE(choose_winner({}));
}

TEST(ChooseWinner, MarginInsideNoiseIsATie) {
  // 0.5% apart: under the 1% floor.
  auto w = choose_winner({candidate("a", 100), candidate("b", 100.5)});
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->tie);
  // 3% apart but each median only known to +-2%: the intervals overlap.
  w = choose_winner({candidate("a", 100, false, CandidateStatus::ok, 0.02), candidate("b", 103, false, CandidateStatus::ok, 0.02)});
  EXPECT_TRUE(w->tie);
  // 3% apart, medians known to 0.2%: a real lead.
  w = choose_winner({candidate("a", 100), candidate("b", 103)});
  EXPECT_FALSE(w->tie);
}

TEST(ChooseWinner, BaselineMayWin) {
  const auto w = choose_winner({candidate("cudnn", 5, true), candidate("mine", 9)});
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->baseline);
  EXPECT_DOUBLE_EQ(w->speedup_vs_baseline, 1.0);
}

TEST(NewestMeasurements, ANarrowerLaterSweepCannotMakeTheTableSlower) {
  // The newer sweep measured only "persistent"; the older one's faster "stepwise" stays in the pool.
  const std::vector<SweepMeasurements> sweeps{{"hot", {candidate("persistent", 30)}},
                                              {"hot", {candidate("stepwise", 20), candidate("persistent", 25)}}};
  const auto pool = newest_measurements(sweeps);
  ASSERT_EQ(pool.size(), 2u);
  const auto w = choose_winner(pool);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, "stepwise");
  EXPECT_EQ(w->runner_up_variant, "persistent");
  EXPECT_DOUBLE_EQ(w->runner_up_us, 30) << "a config measured again counts as last measured";
}

TEST(NewestMeasurements, TheNewestRecordOfAConfigGovernsEvenWhenItFailed) {
  const std::vector<SweepMeasurements> sweeps{
      {"cold", {candidate("fast", 5, false, CandidateStatus::failed_accuracy), candidate("slow", 40)}},
      {"cold", {candidate("fast", 10), candidate("slow", 30)}}};
  const auto w = choose_winner(newest_measurements(sweeps));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, "slow");
  EXPECT_DOUBLE_EQ(w->timing.median_us, 40);
}

TEST(NewestMeasurements, OnlySweepsTimedInTheNewestOnesL2ModeCompare) {
  const std::vector<SweepMeasurements> sweeps{{"cold", {candidate("a", 30)}},
                                              {"hot", {candidate("b", 10)}},
                                              {"cold", {candidate("c", 20)}}};
  const auto pool = newest_measurements(sweeps);
  ASSERT_EQ(pool.size(), 2u);
  EXPECT_EQ(choose_winner(pool)->variant, "c");
  EXPECT_TRUE(newest_measurements({}).empty());
}

TEST(NewestMeasurements, ARaceStoppedRecordHidesTheConfigsOlderFullMeasurement) {
  CandidateRecord raced = candidate("raced", 50);
  raced.timing->stop_reason = "halving rung 1 of 3";
  ASSERT_TRUE(full_measurements({raced}).empty()) << "the test needs a race stop reason";
  const auto pool = newest_measurements({{"cold", {raced, candidate("other", 60)}}, {"cold", {candidate("raced", 5)}}});
  ASSERT_EQ(pool.size(), 1u);
  EXPECT_EQ(pool.front().variant, "other");
}

TEST(NewestMeasurements, AConfigRecordedBeforeAParameterExistedIsTheSameCandidate) {
  // wgmma gained `persistent` (default 0): an older sweep's "tile=0,stages=3" is the kernel a newer
  // sweep measured as "tile=0,stages=3,persistent=0", and only the newer measurement counts.
  const auto wgmma = [](Config config, double median_us) {
    CandidateRecord c = candidate("wgmma", median_us);
    c.problem = Problem{"gemm_bias.nt", DType::f16, Shape({{"m", 8192}, {"n", 1024}, {"k", 1024}})};
    c.config = std::move(config);
    return c;
  };
  ASSERT_NE(catalogue().find_variant("gemm_bias.nt", "wgmma"), nullptr);
  const std::vector<SweepMeasurements> sweeps{
      {"cold", {wgmma(Config({{"tile", 0}, {"stages", 3}, {"persistent", 0}}), 42.3)}},
      {"cold", {wgmma(Config({{"tile", 0}, {"stages", 3}}), 35.1), wgmma(Config({{"tile", 1}, {"stages", 3}}), 50)}}};
  EXPECT_EQ(newest_measurements(sweeps).size(), 3u) << "keyed as recorded";
  const auto pool = newest_measurements(sweeps, completed_config_key);
  ASSERT_EQ(pool.size(), 2u);
  const auto w = choose_winner(pool);
  ASSERT_TRUE(w);
  EXPECT_DOUBLE_EQ(w->timing.median_us, 42.3);
}

TEST(NewestMeasurements, TheRowCarriesTheProvenanceOfTheSweepThatMeasuredIt) {
  const auto in_sweep = [](CandidateRecord c, std::int64_t sweep, const char* at) {
    c.sweep_id = sweep;
    c.measured_at = at;
    return c;
  };
  const auto row = choose_row({{"hot", {in_sweep(candidate("persistent", 30), 7, "2026-12-06T08:00:00Z")}, "newer"},
                               {"hot", {in_sweep(candidate("stepwise", 20), 3, "2026-12-05T10:00:00Z")}, "older"}});
  ASSERT_TRUE(row);
  EXPECT_EQ(row->variant, "stepwise");
  EXPECT_EQ(row->sweep_id, 3);
  EXPECT_EQ(row->git_sha, "older");
  EXPECT_EQ(row->measured_at, "2026-12-05T10:00:00Z");
  EXPECT_FALSE(choose_row({{"hot", {candidate("wrong", 1, false, CandidateStatus::failed_accuracy)}, "x"}}));
}

TEST(NewestMeasurements, L2ModeIsReadFromTheSweepsOptions) {
  EXPECT_EQ(l2_mode_of("l2=hot;min_samples=10"), "hot");
  EXPECT_EQ(l2_mode_of("min_samples=10;l2=hot"), "hot");
  EXPECT_EQ(l2_mode_of("l2=cold;min_samples=10"), "cold");
  EXPECT_EQ(l2_mode_of("l2=hotter"), "cold");
  EXPECT_EQ(l2_mode_of(""), "cold");
}

}  // namespace
}  // namespace shapetune
