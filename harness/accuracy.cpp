#include "harness/accuracy.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "core/parallel.hpp"
#include "harness/host_tensor.hpp"

namespace shapetune {
namespace {

std::string describe_mismatch(const TensorSpec& spec, std::int64_t i, double got, double want, Tolerance tol) {
  char text[256];
  std::snprintf(text, sizeof text, ": got %.9g, want %.9g (|err| %.3g; allowed %.3g abs or %.3g rel)", got, want,
                std::fabs(got - want), tol.atol, tol.rtol);
  return element_name(spec, i) + text;
}

}  // namespace

bool element_passes(double got, double want, Tolerance tol) {
  if (!std::isfinite(got) || !std::isfinite(want)) return false;
  const double err = std::fabs(got - want);
  return err <= tol.atol || err <= tol.rtol * std::fabs(want);
}

AccuracyReport compare_with_reference(const TensorSpec& spec, const void* device_image, const std::vector<double>& want,
                                      Tolerance tol, std::span<const ElementRange> ranges) {
  struct Partial {
    AccuracyReport report;
    std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
  };
  std::mutex mutex;
  Partial total;
  const std::int64_t n = spec.elements();
  const ElementRange whole{0, n};
  if (ranges.empty()) ranges = std::span<const ElementRange>(&whole, 1);
  for (const ElementRange& range : ranges) {
    if (range.begin < 0 || range.end > n || range.begin > range.end)
      throw std::logic_error("checked range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                             ") lies outside " + spec.name + "'s " + std::to_string(n) + " elements");
    parallel_for(range.end - range.begin, 1 << 16, [&](std::int64_t first, std::int64_t last) {
      Partial local;
      for (std::int64_t i = range.begin + first; i < range.begin + last; ++i) {
        const double got = load_as_double(spec.dtype, device_image, i);
        const double ref = want[static_cast<std::size_t>(i)];
        const double err = std::fabs(got - ref);
        if (!element_passes(got, ref, tol)) {
          ++local.report.mismatches;
          if (local.first_bad > i) local.first_bad = i;
        }
        // NaN compares false, so a NaN error is counted by the mismatch only: make it visible
        // in the maxima too.
        if (std::isnan(err) || err > local.report.max_abs_error)
          local.report.max_abs_error = std::isnan(err) ? INFINITY : err;
        if (ref != 0) {
          const double rel = std::isnan(err) ? INFINITY : err / std::fabs(ref);
          if (rel > local.report.max_rel_error) local.report.max_rel_error = rel;
        }
      }
      std::lock_guard lock(mutex);
      total.report.mismatches += local.report.mismatches;
      total.report.max_abs_error = std::max(total.report.max_abs_error, local.report.max_abs_error);
      total.report.max_rel_error = std::max(total.report.max_rel_error, local.report.max_rel_error);
      total.first_bad = std::min(total.first_bad, local.first_bad);
    });
    total.report.checked += range.end - range.begin;
  }
  if (total.report.mismatches > 0) {
    const std::int64_t i = total.first_bad;
    total.report.first_mismatch =
        describe_mismatch(spec, i, load_as_double(spec.dtype, device_image, i), want[static_cast<std::size_t>(i)], tol);
  }
  return total.report;
}

void merge_into(AccuracyReport& total, const AccuracyReport& part) {
  total.max_abs_error = std::max(total.max_abs_error, part.max_abs_error);
  total.max_rel_error = std::max(total.max_rel_error, part.max_rel_error);
  total.mismatches += part.mismatches;
  total.checked += part.checked;
  if (total.first_mismatch.empty()) total.first_mismatch = part.first_mismatch;
}

}  // namespace shapetune
