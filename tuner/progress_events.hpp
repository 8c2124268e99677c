// `sweep --json-progress`: a sweep's events for tools, one JSON object a line, each line written
// whole and flushed as the event happens (a tool tailing the file never sees half a line). Every
// object's first member is "event"; readers skip members they do not know, so later versions may
// add some. The events, in order:
//
//   {"event": "sweep_start", "sweep": 3, "resumed": false, "shape_file": "shapes/quick.yaml",
//    "device": "NVIDIA H200|sm_90|...", "shard": "", "problems": 31, "expected_s": 69.2}
//   {"event": "candidate", "problem": KEY, "index": 4, "variant": "mma_sync", "config": "tile=3,stages=4",
//    "baseline": false, "status": "ok", "median_us": 12.5, "race": false, "reason": ""}
//   {"event": "progress", "problems_done": 3, "problems": 31, "expected_s": 69.2, "done_s": 20.5,
//    "elapsed_s": 31.0, "eta_s": 73.9}
//   {"event": "problem_done", "problem": KEY, "index": 4, "problems": 31, "outcome": "done",
//    "winner": "mma_sync", "config": "tile=3,stages=4", "median_us": 12.5, "baseline": "cublas",
//    "baseline_us": 14.1, "speedup": 1.128, "missing_baselines": [], "seconds": 3.2}
//   {"event": "sweep_end", "status": "complete", "exit_code": 0, "problems_done": 31, "problems": 31,
//    "without_winner": 0, "without_baseline": 1, "elapsed_s": 104.8}
//
// "candidate": each measurement as it is stored (a halving race stores one per rung it ran:
// "race": true); candidates supports() refuses before any launch are not events (problem_done's
// line of the sweep counts them). "progress": after each candidate at most once a second, and after
// each problem; expected_s and done_s are the cost model's seconds (tuner/progress.hpp), eta_s
// what is left. "problem_done"'s outcome: done, skipped (with "reason"), or "done earlier" and
// "skipped earlier" (a resumed sweep); winner, baseline and their times are null where there are none;
// missing_baselines lists {"variant", "reason"} when baselines were candidates and none ran.
// "table_keeps" {"variant", "config", "median_us", "sweep"} appears when the dispatch table's row is
// an earlier sweep's measurement, faster than this sweep's winner (a narrower sweep: --variant).
// "sweep_end"'s status: complete, interrupted, failed or nothing measured, with the exit code.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/records.hpp"
#include "tuner/missing_baseline.hpp"
#include "tuner/progress.hpp"

namespace shapetune {

struct SweepStartEvent {
  std::int64_t sweep_id = 0;
  bool resumed = false;
  std::string shape_file, device_key, shard;
  std::size_t problems = 0;
  double expected_s = 0;
};

struct ProblemDoneEvent {
  std::string problem;
  std::size_t index = 0;  // 1-based, as the problem's line shows it
  std::size_t problems = 0;
  std::string outcome;    // done, skipped, done earlier, skipped earlier
  std::string reason;     // why skipped
  std::optional<WinnerRecord> winner;
  std::vector<VariantFailure> missing_baselines;
  double seconds = 0;
  std::optional<WinnerRecord> table_keeps{};  // the table's row, when an earlier sweep measured it
};

struct SweepEndEvent {
  std::string status;  // complete, interrupted, failed, nothing measured
  int exit_code = 0;
  std::size_t problems_done = 0, problems = 0, without_winner = 0, without_baseline = 0;
  double elapsed_s = 0;
};

std::string sweep_start_event(const SweepStartEvent&);
// index: the problem's 1-based place in the sweep.
std::string candidate_event(const CandidateRecord&, std::size_t index);
std::string progress_event(const ProgressSnapshot&);
std::string problem_done_event(const ProblemDoneEvent&);
std::string sweep_end_event(const SweepEndEvent&);

// Writes events to a stream, a line each, flushed; progress events at most once per
// kProgressIntervalS unless forced.
class JsonProgress {
 public:
  static constexpr double kProgressIntervalS = 1;
  explicit JsonProgress(std::ostream& stream) : stream_(stream) {}
  void write(const std::string& event);
  void progress(const ProgressSnapshot&, double now_s, bool force);

 private:
  std::ostream& stream_;
  Throttle throttle_{kProgressIntervalS, 0};
};

// What a reader of the events (the parallel sweep, following its workers) takes from one line;
// nullopt for a line that is not an event object. Members it does not use are skipped.
struct ReadEvent {
  std::string event;
  std::optional<double> expected_s, done_s, elapsed_s, eta_s;
  std::optional<std::int64_t> problems_done, problems, without_winner, without_baseline, exit_code;
  std::optional<std::string> problem, status;
};
std::optional<ReadEvent> read_progress_event(std::string_view line);

}  // namespace shapetune
