// Summaries of timing samples and the rule that decides when there are enough of them.
// Pure functions of the samples, so they are tested on synthetic data.
#pragma once

#include <string>
#include <vector>

namespace shapetune {

struct SampleSummary {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  // Half-width of the distribution-free ~95% confidence interval of the median, over the median.
  double median_ci_rel = 0;
  int count = 0;
};

// Percentiles by linear interpolation between order statistics. Throws on an empty input.
SampleSummary summarize(std::vector<double> samples);

// The confidence interval of the median from order statistics: ranks n/2 -+ 1.96*sqrt(n)/2
// (normal approximation to the binomial). No assumption on the distribution's shape, which
// matters because kernel times are skewed (a few slow outliers). Infinity below 6 samples.
double median_ci_rel(const std::vector<double>& sorted_samples);

struct StopRule {
  int min_samples = 10;
  int max_samples = 1000;
  double target_ci_rel = 0.01;  // stop once the median is known to +-1%
  double time_cap_s = 1.0;      // per candidate, warm-up and verification excluded
};

enum class StopReason { keep_going, converged, time_cap, max_samples };
const char* stop_reason_name(StopReason);

// Whether to stop after these samples and `elapsed_s` seconds of sampling. The minimum count
// wins over the time cap so every candidate has at least min_samples samples.
StopReason should_stop(const std::vector<double>& samples, double elapsed_s, const StopRule&);

}  // namespace shapetune
