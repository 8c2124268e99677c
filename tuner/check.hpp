// `shapetune check`: are the stored winners still accurate, and still as fast, on this device?
// What a user's CI calls. Each winner is verified on fresh random inputs against the float64
// reference with the tolerance stored beside it, then timed again with the measurement options
// of the sweep that chose it, and its new median compared with the stored one.
//
// The verdicts and the exit code are pure functions of (stored winner, fresh outcome), so they
// are tested without a GPU; run_check does the measuring.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "harness/measure.hpp"

namespace shapetune {

// The noise-aware regression rule. With c_stored and c_now the medians' relative 95% CI
// half-widths (as stored, and as just measured):
//   limit      = max(threshold, noise_k * (c_stored + c_now))
//   regression: now > stored * (1 + limit)
//   faster:     now < stored * (1 - limit)   (informative; passes)
struct CheckRule {
  double threshold = 0.10;
  double noise_k = 2;
};
double regression_limit(const CheckRule&, double stored_ci_rel, double now_ci_rel);

enum class CheckVerdict : std::uint8_t {
  ok,         // accurate; time within the limit
  faster,     // accurate; faster than stored by more than the limit
  regression, // accurate; slower than stored by more than the limit
  accuracy,   // some element broke the stored tolerance (a violation)
  error,      // could not be checked: the variant is gone, refused the problem, or failed to run
  not_tuned,  // a problem of the given matrix without a winner on this device
};
std::string_view check_verdict_name(CheckVerdict);  // "ok", "faster", "REGRESSION", ...

struct CheckRow {
  Problem problem;
  std::optional<WinnerRecord> stored;     // absent: not tuned
  std::optional<CandidateOutcome> fresh;  // absent: not run
  CheckVerdict verdict = CheckVerdict::ok;
  double change_rel = 0;  // fresh median / stored median - 1 (when both exist)
  double limit_rel = 0;   // the rule's limit for this row
  std::string detail;     // why, for anything but ok
  // Candidates of the problem that crashed or hung their GPU worker when the winner was swept.
  int swept_faults = 0;

  // Whether the row compares two medians (change_rel and limit_rel are set).
  bool compared() const {
    return verdict == CheckVerdict::ok || verdict == CheckVerdict::faster || verdict == CheckVerdict::regression;
  }
};

// The verdict on one stored winner given what verifying and timing it again gave.
CheckRow judge(const WinnerRecord& stored, const CandidateOutcome& fresh, const CheckRule&);
// A matrix problem with no stored winner on this device.
CheckRow not_tuned(const Problem&);
// A stored winner that could not be run at all (variant gone, lost context before it).
CheckRow not_run(const WinnerRecord& stored, const std::string& why);

// 0 when every row passes; 1 on an accuracy violation, a regression or an error, and with
// `strict` on a problem that is not tuned.
int check_exit_code(const std::vector<CheckRow>&, bool strict);
// The last line of the output: the counts, and PASS or FAIL with what failed.
std::string check_summary(const std::vector<CheckRow>&, bool strict);
// The accuracy cell: "ok (max abs err 1.2e-06)" or "VIOLATION: 12 of 4096 elements, max abs
// err 3.1e-02 vs atol 1e-03 / rtol 1e-03"; "-" when not run.
std::string check_accuracy_text(const CheckRow&);

// The measurement options a sweep recorded (result_affecting_options' text): l2, min_samples,
// max_samples, target_ci, time_cap_s, batch_below_us; what is absent keeps its default.
MeasureOptions measure_options_from_text(const std::string& options_text);

// Setup failures (exit code 2): no winners, no device, an unreadable database or shape file.
class CheckSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckOptions {
  std::string db_path;
  std::optional<std::string> shape_file;  // only its problems (untuned ones listed)
  int device = 0;
  CheckRule rule;
  std::optional<std::uint64_t> seed;      // input seed; random when absent
  double candidate_timeout_s = 0;         // the worker's watchdog per winner; 0: derived
};

struct CheckRun {
  std::string device_key;
  std::uint64_t seed = 0;
  std::vector<CheckRow> rows;
};

// Verifies and times every winner of the current device (or every problem of the shape file),
// one progress line each on `progress`. Opens the database read-only. Throws CheckSetupError.
CheckRun run_check(const CheckOptions&, std::ostream& progress);

}  // namespace shapetune
