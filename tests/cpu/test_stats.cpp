#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/stats.hpp"

namespace shapetune {
namespace {

TEST(Stats, SummarizeOrderStatistics) {
  // 1..11: median 6, p10 = 2 (position 1.0), p90 = 10.
  std::vector<double> samples;
  for (int i = 11; i >= 1; --i) samples.push_back(i);
  const SampleSummary s = summarize(samples);
  EXPECT_EQ(s.count, 11);
  EXPECT_DOUBLE_EQ(s.median, 6);
  EXPECT_DOUBLE_EQ(s.p10, 2);
  EXPECT_DOUBLE_EQ(s.p90, 10);
  EXPECT_DOUBLE_EQ(s.min, 1);
}

TEST(Stats, PercentilesInterpolate) {
  const SampleSummary s = summarize({10, 20});
  EXPECT_DOUBLE_EQ(s.median, 15);
  EXPECT_DOUBLE_EQ(s.p10, 11);
  EXPECT_DOUBLE_EQ(s.p90, 19);
}

TEST(Stats, EmptyInputThrows) { EXPECT_THROW(summarize({}), std::invalid_argument); }

TEST(Stats, MedianCiIsInfiniteForTooFewSamplesAndZeroForConstantOnes) {
  EXPECT_TRUE(std::isinf(median_ci_rel({1, 2, 3, 4, 5})));
  EXPECT_DOUBLE_EQ(median_ci_rel(std::vector<double>(50, 7.0)), 0.0);
}

TEST(Stats, MedianCiShrinksLikeOneOverSqrtN) {
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(100.0, 5.0);
  auto ci_for = [&](int n) {
    std::vector<double> v(n);
    for (auto& x : v) x = noise(rng);
    std::sort(v.begin(), v.end());
    return median_ci_rel(v);
  };
  const double ci100 = ci_for(100), ci10000 = ci_for(10000);
  // sd 5% -> CI of the median ~ 1.96 * 1.2533 * 5% / sqrt(n): ~1.2% at 100, ~0.12% at 10000.
  EXPECT_NEAR(ci100, 0.0123, 0.006);
  EXPECT_NEAR(ci10000, 0.00123, 0.0005);
  EXPECT_LT(ci10000 * 5, ci100);
}

TEST(Stats, OutliersDoNotMoveTheMedianCi) {
  std::vector<double> v(100, 50.0);
  for (int i = 0; i < 5; ++i) v[i] = 5000;  // 5% of samples hit by something else on the GPU
  std::sort(v.begin(), v.end());
  EXPECT_DOUBLE_EQ(median_ci_rel(v), 0.0);
  EXPECT_DOUBLE_EQ(summarize(v).median, 50.0);
}

TEST(StopRule, MinimumSamplesComeFirst) {
  StopRule rule;
  rule.min_samples = 10;
  rule.time_cap_s = 0.0;  // even with the time cap long gone
  EXPECT_EQ(should_stop(std::vector<double>(9, 1.0), 100.0, rule), StopReason::keep_going);
  EXPECT_NE(should_stop(std::vector<double>(10, 1.0), 100.0, rule), StopReason::keep_going);
}

TEST(StopRule, ConvergesWhenTheMedianIsTight) {
  StopRule rule;
  EXPECT_EQ(should_stop(std::vector<double>(10, 3.0), 0.01, rule), StopReason::converged);
}

TEST(StopRule, NoisySamplesRunToTheTimeCapOrTheMaximum) {
  StopRule rule;
  rule.max_samples = 40;
  std::vector<double> noisy;
  for (int i = 0; i < 20; ++i) noisy.push_back(i % 2 ? 100.0 : 150.0);
  EXPECT_EQ(should_stop(noisy, 0.1, rule), StopReason::keep_going);
  EXPECT_EQ(should_stop(noisy, rule.time_cap_s, rule), StopReason::time_cap);
  for (int i = 0; i < 20; ++i) noisy.push_back(i % 2 ? 100.0 : 150.0);
  EXPECT_EQ(should_stop(noisy, 0.1, rule), StopReason::max_samples);
}

}  // namespace
}  // namespace shapetune
