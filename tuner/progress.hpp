// Progress of long work (a sweep, a parallel sweep's shards) for the person watching it: how much
// of the cost model's expected time is done, how long the rest should take, and the one line that
// says so. The model's rates are nominal (H200-class), so what is left is scaled by how fast the
// done part actually went; tools read the same numbers as JSON (tuner/progress_events.hpp).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>

namespace shapetune {

// Seconds left of work the cost model expects to take expected_total_s, of which the part it
// expects to take expected_done_s is done, elapsed_s after it started: the expected rest times
// the measured rate (elapsed / expected done). Before anything is done (or when the rate is not
// a finite number) the model alone answers. Never negative, and 0 once the expected work is done.
double estimate_seconds_left(double expected_total_s, double expected_done_s, double elapsed_s);

// "42 s", "12.5 min", "3.2 h": the durations of progress lines.
std::string format_duration(double seconds);

// Lets an event through at most once per interval: the first at or after first_due_s, each later
// one at least interval_s after the last let through. Times in seconds on any one clock.
class Throttle {
 public:
  Throttle(double interval_s, double first_due_s) : interval_s_(interval_s), next_due_s_(first_due_s) {}
  bool due(double now_s);
  void release() { release_ = true; }  // the next due() is true whatever the time

 private:
  double interval_s_;
  double next_due_s_;
  bool release_ = false;
};

// Where a run stands, in the cost model's seconds.
struct ProgressSnapshot {
  std::size_t problems_done = 0;
  std::size_t problems = 0;
  double expected_total_s = 0;  // what this run has to measure (work it resumes is left out)
  double expected_done_s = 0;
  double elapsed_s = 0;
  std::optional<double> budget_left_s;  // --budget: the estimate never goes past it
  std::string current;                  // what runs now: "[4/31] gemm.nn/f32/m=512,n=256,k=784: 12/40 candidates"

  double seconds_left() const;
  // Elapsed over expected-done: 1.3 means 30% slower than the model; nullopt before any work.
  std::optional<double> model_ratio() const;
};

// "3/31 problems, 42% of the expected work in 1.5 min, about 2.0 min left (1.30x the cost model) |
// [4/31] gemm.nn/...: 12/40 candidates"
std::string progress_text(const ProgressSnapshot&);

enum class ProgressStyle {
  none,
  redraw,  // a terminal: one line drawn over itself with \r
  plain,   // a log: a line of its own now and then
};

// The progress line on one stream. On a terminal it is redrawn at most kRedrawIntervalS apart and
// cut to the terminal's width (a wrapped line could not be drawn over); in a log a plain
// "progress: ..." line comes once per plain interval, the first one interval after the start, so
// a short run prints none and a long one does not flood its log.
class ProgressLine {
 public:
  static constexpr double kRedrawIntervalS = 0.25;
  static constexpr double kDefaultPlainIntervalS = 10;

  ProgressLine(std::ostream& stream, ProgressStyle style, double start_s,
               double plain_interval_s = kDefaultPlainIntervalS, std::size_t columns = 0);
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Shows the snapshot if it is time to (always, on a terminal whose line was just cleared).
  void update(const ProgressSnapshot&, double now_s);
  // Erases a drawn line, so that other output to the same terminal starts on a clean line.
  void clear();
  ProgressStyle style() const { return style_; }

 private:
  std::ostream& stream_;
  ProgressStyle style_;
  std::size_t columns_;
  Throttle throttle_;
  bool drawn_ = false;
};

}  // namespace shapetune
