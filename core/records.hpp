// What a sweep produces, as plain data: the store writes these, the tuner fills them,
// the dispatch table and the exports read them.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "core/types.hpp"

namespace shapetune {

// How a time was taken. Reported with every number because they are not interchangeable.
enum class TimingMode : std::uint8_t {
  cold,         // L2 flushed before every sample, one launch between two events
  hot,          // no flush, one launch between two events
  graph_batch,  // a CUDA graph of many launches over rotating input sets; time / launches
  batch,        // the same launches issued back to back (when graph capture is refused)
};
std::string_view timing_mode_name(TimingMode);
std::optional<TimingMode> parse_timing_mode(std::string_view);

// Summary of one candidate's samples, all in microseconds per launch.
struct TimingStats {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  // Half-width of the ~95% confidence interval of the median, relative to the median.
  double median_ci_rel = 0;
  int samples = 0;
  TimingMode mode = TimingMode::cold;
  int launches_per_sample = 1;  // >1 in graph_batch mode
  int input_sets = 1;           // how many buffer sets the samples rotated over
  // In-place kernels (Adam): their state was restored before every sample, outside the timed
  // region, so every sample updated the same initial state.
  bool state_restored = false;
  std::string stop_reason;      // "converged", "time cap", "max samples"
};

enum class CandidateStatus : std::uint8_t {
  ok,               // accurate and timed
  failed_accuracy,  // ran, but some element broke the tolerance
  unsupported,      // supports() said no, or the library refused the problem
  error,            // a CUDA/library error while running
  skipped,          // not measured (budget ran out)
  crashed,          // killed its worker: a signal, an abort, or a CUDA context lost for good
  timeout,          // still running at the watchdog's limit; its worker was killed
};
inline constexpr int kCandidateStatusCount = 7;
std::string_view candidate_status_name(CandidateStatus);
std::optional<CandidateStatus> parse_candidate_status(std::string_view);

// Worst disagreement with the float64 reference over every element of every output.
struct AccuracyReport {
  double max_abs_error = 0;
  double max_rel_error = 0;  // over elements with |ref| > 0
  std::int64_t mismatches = 0;  // elements outside the tolerance (NaN/Inf included)
  std::int64_t checked = 0;
  std::string first_mismatch;  // "y[3,4097]: got nan, want 0.0123" (empty when all pass)
};

struct CandidateRecord {
  std::int64_t sweep_id = 0;
  Problem problem;
  std::string variant;
  Config config;
  bool baseline = false;
  CandidateStatus status = CandidateStatus::ok;
  std::string reason;  // why unsupported / failed / errored / skipped
  std::optional<AccuracyReport> accuracy;  // present once the candidate ran
  std::optional<TimingStats> timing;       // present when status == ok
  Tolerance tolerance;                     // the tolerance it was checked with
  std::string measured_at;                 // UTC, ISO 8601; set by the store when it is recorded
};

// The dispatch table row for one device and problem.
struct WinnerRecord {
  std::string device_key;
  Problem problem;
  std::string variant;
  Config config;
  bool baseline = false;
  TimingStats timing;
  Tolerance tolerance;
  // Best library baseline, when one ran accurately: its name and time, and baseline/winner.
  std::string best_baseline;
  double baseline_us = 0;
  double speedup_vs_baseline = 0;
  // Second-fastest accurate candidate (another variant or config) and winner's lead over it.
  std::string runner_up_variant;
  Config runner_up_config;
  double runner_up_us = 0;
  double margin_rel = 0;  // runner_up / winner - 1
  bool tie = false;       // margin inside the measurement noise
  // The primitive's cost model for this problem when it was measured (bytes moved, FLOPs), so
  // a report can place the winner on the roofline; NaN for rows stored before schema 4.
  Cost cost{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  // The library's identity of the algorithm the winner ran, where its variant has one (cuBLASLt:
  // describe_cublaslt_algo's text); dispatch replays it. Empty otherwise.
  std::string library_algo;
  std::int64_t sweep_id = 0;
  std::string git_sha;
  std::string measured_at;  // UTC, ISO 8601
};

}  // namespace shapetune
