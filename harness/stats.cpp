#include "harness/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace shapetune {
namespace {

double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lower = static_cast<std::size_t>(std::floor(pos));
  const std::size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lower);
  return sorted[lower] + frac * (sorted[upper] - sorted[lower]);
}

}  // namespace

double median_ci_rel(const std::vector<double>& sorted) {
  const auto n = static_cast<double>(sorted.size());
  if (sorted.size() < 6) return std::numeric_limits<double>::infinity();
  const double half_width_ranks = 1.96 * std::sqrt(n) / 2;
  const auto lo = static_cast<std::size_t>(std::max(0.0, std::floor(n / 2 - half_width_ranks)));
  const auto hi = static_cast<std::size_t>(std::min(n - 1, std::ceil(n / 2 + half_width_ranks)));
  const double median = percentile(sorted, 0.5);
  if (median <= 0) return std::numeric_limits<double>::infinity();
  return std::max(median - sorted[lo], sorted[hi] - median) / median;
}

SampleSummary summarize(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("summarize: no samples");
  std::sort(samples.begin(), samples.end());
  SampleSummary s;
  s.count = static_cast<int>(samples.size());
  s.median = percentile(samples, 0.5);
  s.p10 = percentile(samples, 0.1);
  s.p90 = percentile(samples, 0.9);
  s.min = samples.front();
  s.median_ci_rel = median_ci_rel(samples);
  return s;
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::keep_going: return "keep going";
    case StopReason::converged: return "converged";
    case StopReason::time_cap: return "time cap";
    case StopReason::max_samples: return "max samples";
  }
  return "?";
}

StopReason should_stop(const std::vector<double>& samples, double elapsed_s, const StopRule& rule) {
  const int n = static_cast<int>(samples.size());
  if (n < rule.min_samples) return StopReason::keep_going;
  if (n >= rule.max_samples) return StopReason::max_samples;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  if (median_ci_rel(sorted) <= rule.target_ci_rel) return StopReason::converged;
  if (elapsed_s >= rule.time_cap_s) return StopReason::time_cap;
  return StopReason::keep_going;
}

}  // namespace shapetune
