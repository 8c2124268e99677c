// The host half of the counter session: metric names checked against a chip and compiled into
// a config image by CUPTI's Profiler Host API (libnvperf_host), which needs no GPU. Also the
// values derived from counters and the DRAM-vs-model text the reports show.
#include "harness/counters.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/counters.hpp"

namespace shapetune {
namespace {

// The UnknownMetricError message of building a config, or a marker that fails expectations.
std::string unknown_metric_message(const std::string& chip, const std::vector<std::string>& metrics) {
  try {
    CounterConfig config(chip, metrics);
  } catch (const UnknownMetricError& e) {
    return e.what();
  }
  return "<no UnknownMetricError thrown>";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// The CUPTI host library cannot run under AddressSanitizer (harness/counters.hpp): these tests
// skip in scripts/sanitize.sh's build and run in every other.
#define SKIP_WHERE_CUPTI_HOST_CANNOT_RUN()                                                   \
  if (kCountersBlockedBySanitizer) GTEST_SKIP() << "CUPTI's host library cannot run under " \
                                                   "AddressSanitizer; the plain build runs this test"

class CounterChips : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SKIP_WHERE_CUPTI_HOST_CANNOT_RUN(); }
};

TEST_P(CounterChips, DefaultMetricSetCompilesWithPasses) {
  const CounterConfig config(GetParam(), counters::default_metrics());
  EXPECT_EQ(config.chip(), GetParam());
  EXPECT_EQ(config.metrics(), counters::default_metrics());
  EXPECT_GT(config.passes(), 0u);
  EXPECT_LT(config.passes(), 64u) << "a replay per pass: far more would make profiling impractical";
  EXPECT_FALSE(config.image().empty());
  ASSERT_EQ(config.c_names().size(), config.metrics().size());
}

TEST_P(CounterChips, SumsOfCountersAddUpAndRatiosDoNot) {
  const std::vector<std::string> metrics = {std::string(counters::kDramBytesRead), std::string(counters::kDuration),
                                            std::string(counters::kFadd), std::string(counters::kOccupancy),
                                            std::string(counters::kL2HitRate), std::string(counters::kDramThroughput)};
  const CounterConfig config(GetParam(), metrics);
  EXPECT_TRUE(config.additive(0)) << metrics[0];
  EXPECT_TRUE(config.additive(1)) << metrics[1];
  EXPECT_TRUE(config.additive(2)) << metrics[2];
  EXPECT_FALSE(config.additive(3)) << metrics[3];
  EXPECT_FALSE(config.additive(4)) << metrics[4];
  EXPECT_FALSE(config.additive(5)) << metrics[5];
}

TEST_P(CounterChips, MadeUpMetricIsRejectedByName) {
  auto metrics = counters::default_metrics();
  metrics.insert(metrics.begin() + 3, "dram__bytes_teleported.sum");
  const std::string message = unknown_metric_message(GetParam(), metrics);
  expect_contains(message, "'dram__bytes_teleported.sum'");
  expect_contains(message, GetParam());
}

TEST_P(CounterChips, MetricWithoutRollupIsRejected) {
  const std::string message = unknown_metric_message(GetParam(), {"dram__bytes_read"});
  expect_contains(message, "'dram__bytes_read'");
  expect_contains(message, "rollup");
}

TEST_P(CounterChips, UserMetricsAddToTheDefaultSet) {
  const auto metrics = counters::with_extra(counters::default_metrics(), {"lts__t_sectors.sum", "dram__bytes_read.sum"});
  ASSERT_EQ(metrics.size(), counters::default_metrics().size() + 1) << "a default metric is not added twice";
  EXPECT_EQ(metrics.back(), "lts__t_sectors.sum");
  const CounterConfig config(GetParam(), metrics);
  EXPECT_EQ(config.metrics().size(), metrics.size());
}

INSTANTIATE_TEST_SUITE_P(TuringAndHopper, CounterChips, ::testing::Values("TU104", "GH100"));

TEST(CounterConfig, UnknownChipIsAHostFailureNotAMetricError) {
  SKIP_WHERE_CUPTI_HOST_CANNOT_RUN();
  try {
    CounterConfig config("XY999", counters::default_metrics());
    FAIL() << "an unknown chip was accepted";
  } catch (const UnknownMetricError& e) {
    FAIL() << "not the metrics' fault: " << e.what();
  } catch (const CounterError& e) {
    expect_contains(e.what(), "cuptiProfilerHostInitialize");
    expect_contains(e.what(), "XY999");
  }
}

TEST(CounterConfig, EmptyMetricListIsRefused) { EXPECT_THROW(CounterConfig("GH100", {}), UnknownMetricError); }

// ---- derived values --------------------------------------------------------------------------

TEST(CounterValues, FlopsAreAddPlusMulPlusTwiceFma) {
  counters::Values values{{std::string(counters::kFadd), 10}, {std::string(counters::kFmul), 20},
                          {std::string(counters::kFfma), 30}, {std::string(counters::kHadd), 1},
                          {std::string(counters::kHmul), 2}};
  counters::add_derived(values);
  EXPECT_EQ(values.at(std::string(counters::kFp32Flops)), 10 + 20 + 2 * 30);
  EXPECT_EQ(values.count(std::string(counters::kFp16Flops)), 0u) << "hfma missing: no FP16 FLOPs";
}

TEST(CounterValues, DerivedNamesCannotBeCuptiMetrics) {
  for (const auto name : {counters::kFp32Flops, counters::kFp16Flops, counters::kKernels})
    EXPECT_EQ(std::string(name).find("__"), std::string::npos) << name;
  for (const auto& name : counters::default_metrics()) EXPECT_NE(name.find("__"), std::string::npos) << name;
}

TEST(CounterValues, DramAgainstTheCostModel) {
  const counters::Values values{{std::string(counters::kDramBytesRead), 600}, {std::string(counters::kDramBytesWrite), 420}};
  EXPECT_EQ(counters::dram_bytes(values), std::optional<double>(1020));
  EXPECT_EQ(counters::dram_vs_model_text(values, 1000), "1.02x model");
  EXPECT_EQ(counters::dram_vs_model_text(values, std::nan("")), "");
  EXPECT_EQ(counters::dram_vs_model_text(values, 0), "");
  EXPECT_EQ(counters::dram_vs_model_text({{std::string(counters::kDramBytesRead), 600}}, 1000), "")
      << "reads alone are not the traffic";
}

}  // namespace
}  // namespace shapetune
