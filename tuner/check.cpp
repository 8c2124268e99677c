#include "tuner/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>

#include "core/format.hpp"
#include "db/store.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/gpu_worker.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

// A recorded CI that is missing (NaN in old rows) or undefined counts as no noise.
double ci_or_zero(double ci_rel) { return std::isfinite(ci_rel) && ci_rel > 0 ? ci_rel : 0; }

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * fraction);
  return text;
}

std::string scientific(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", v);
  return text;
}

std::string general(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::string describe(const WinnerRecord& w) {
  return w.config.values().empty() ? w.variant : w.variant + "{" + w.config.key() + "}";
}

bool fails(CheckVerdict v, bool strict) {
  return v == CheckVerdict::accuracy || v == CheckVerdict::regression || v == CheckVerdict::error ||
         (strict && v == CheckVerdict::not_tuned);
}

}  // namespace

double regression_limit(const CheckRule& rule, double stored_ci_rel, double now_ci_rel) {
  return std::max(rule.threshold, rule.noise_k * (ci_or_zero(stored_ci_rel) + ci_or_zero(now_ci_rel)));
}

std::string_view check_verdict_name(CheckVerdict v) {
  switch (v) {
    case CheckVerdict::ok: return "ok";
    case CheckVerdict::faster: return "faster";
    case CheckVerdict::regression: return "REGRESSION";
    case CheckVerdict::accuracy: return "ACCURACY VIOLATION";
    case CheckVerdict::error: return "ERROR";
    case CheckVerdict::not_tuned: return "not tuned";
  }
  return "?";
}

CheckRow judge(const WinnerRecord& stored, const CandidateOutcome& fresh, const CheckRule& rule) {
  CheckRow row;
  row.problem = stored.problem;
  row.stored = stored;
  row.fresh = fresh;
  if (fresh.status == CandidateStatus::failed_accuracy) {
    row.verdict = CheckVerdict::accuracy;
    row.detail = fresh.reason;
    return row;
  }
  if (fresh.status != CandidateStatus::ok) {
    row.verdict = CheckVerdict::error;
    row.detail = std::string(candidate_status_name(fresh.status)) + ": " + fresh.reason;
    return row;
  }
  const double before = stored.timing.median_us;
  if (!fresh.timing || !(fresh.timing->median_us > 0) || !(before > 0)) {
    row.verdict = CheckVerdict::error;
    row.detail = !(before > 0) ? "accurate, but the stored winner has no median to compare with"
                               : "accurate, but it was not timed";
    return row;
  }
  const double now = fresh.timing->median_us;
  row.limit_rel = regression_limit(rule, stored.timing.median_ci_rel, fresh.timing->median_ci_rel);
  row.change_rel = now / before - 1;
  const std::string change = percent(row.change_rel) + " (" + fmt_us(before) + " -> " + fmt_us(now) +
                             "), limit " + percent(row.limit_rel).substr(1);
  if (now > before * (1 + row.limit_rel)) {
    row.verdict = CheckVerdict::regression;
    row.detail = "slower by " + change;
  } else if (now < before * (1 - row.limit_rel)) {
    row.verdict = CheckVerdict::faster;
    row.detail = "faster by " + change + "; a new sweep would store the faster time";
  }
  if (fresh.timing->mode != stored.timing.mode && row.verdict != CheckVerdict::ok)
    row.detail += "; timed " + std::string(timing_mode_name(fresh.timing->mode)) + " now, " +
                  std::string(timing_mode_name(stored.timing.mode)) + " when stored";
  return row;
}

CheckRow not_tuned(const Problem& problem) {
  CheckRow row;
  row.problem = problem;
  row.verdict = CheckVerdict::not_tuned;
  row.detail = "no winner for this problem on this device";
  return row;
}

CheckRow not_run(const WinnerRecord& stored, const std::string& why) {
  CheckRow row;
  row.problem = stored.problem;
  row.stored = stored;
  row.verdict = CheckVerdict::error;
  row.detail = why;
  return row;
}

int check_exit_code(const std::vector<CheckRow>& rows, bool strict) {
  return std::any_of(rows.begin(), rows.end(), [&](const CheckRow& r) { return fails(r.verdict, strict); }) ? 1 : 0;
}

std::string check_summary(const std::vector<CheckRow>& rows, bool strict) {
  std::map<CheckVerdict, int> count;
  for (const auto& r : rows) ++count[r.verdict];
  auto n = [&](CheckVerdict v) { return count.count(v) ? count.at(v) : 0; };
  auto plural = [](int k, const std::string& one, const std::string& many) {
    return std::to_string(k) + " " + (k == 1 ? one : many);
  };
  std::vector<std::string> failed;
  if (n(CheckVerdict::accuracy)) failed.push_back(plural(n(CheckVerdict::accuracy), "accuracy violation", "accuracy violations"));
  if (n(CheckVerdict::regression)) failed.push_back(plural(n(CheckVerdict::regression), "regression", "regressions"));
  if (n(CheckVerdict::error)) failed.push_back(plural(n(CheckVerdict::error), "error", "errors"));
  if (strict && n(CheckVerdict::not_tuned)) failed.push_back(plural(n(CheckVerdict::not_tuned), "problem not tuned", "problems not tuned"));

  const int checked = static_cast<int>(rows.size()) - n(CheckVerdict::not_tuned);
  std::string counts = plural(checked, "winner", "winners") + " checked: " + std::to_string(n(CheckVerdict::ok)) + " ok";
  if (n(CheckVerdict::faster)) counts += ", " + std::to_string(n(CheckVerdict::faster)) + " faster";
  for (const auto& f : failed)
    if (f.find("not tuned") == std::string::npos) counts += ", " + f;
  if (n(CheckVerdict::not_tuned))
    counts += "; " + plural(n(CheckVerdict::not_tuned), "problem", "problems") + " not tuned" +
              (strict ? "" : " (a failure only with --strict)");

  if (failed.empty()) return "PASS: " + counts;
  std::string what;
  for (std::size_t i = 0; i < failed.size(); ++i) what += (i ? ", " : "") + failed[i];
  return "FAIL (" + what + "): " + counts;
}

std::string check_accuracy_text(const CheckRow& row) {
  if (!row.fresh || !row.fresh->accuracy) return "-";
  const AccuracyReport& a = *row.fresh->accuracy;
  if (row.verdict == CheckVerdict::accuracy) {
    const Tolerance tol = row.stored ? row.stored->tolerance : Tolerance{};
    return "VIOLATION: " + std::to_string(a.mismatches) + " of " + std::to_string(a.checked) + " elements, max abs err " +
           scientific(a.max_abs_error) + " vs atol " + general(tol.atol) + " / rtol " + general(tol.rtol);
  }
  return "ok (max abs err " + scientific(a.max_abs_error) + ")";
}

MeasureOptions measure_options_from_text(const std::string& options_text) {
  MeasureOptions o;
  std::stringstream items(options_text);
  std::string item;
  while (std::getline(items, item, ';')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      if (key == "l2") o.flush_l2 = value != "hot";
      else if (key == "min_samples") o.stop.min_samples = std::stoi(value);
      else if (key == "max_samples") o.stop.max_samples = std::stoi(value);
      else if (key == "target_ci") o.stop.target_ci_rel = std::stod(value);
      else if (key == "time_cap_s") o.stop.time_cap_s = std::stod(value);
      else if (key == "batch_below_us") o.batch_below_us = std::stod(value);
    } catch (const std::exception&) {
      // A value this build cannot read keeps the default: the check still runs.
    }
  }
  return o;
}

namespace {

// Every launch happens in a GPU worker: a winner that now faults or hangs (a driver update, a
// kernel edited since) is an ERROR row, and the check goes on with a fresh worker.
class Checker {
 public:
  Checker(const CheckOptions& options, Store& store, GpuWorker& worker, std::uint64_t seed)
      : options_(options), store_(store), worker_(worker), seed_(seed) {}

  CheckRow check(const WinnerRecord& w) {
    const Primitive* primitive = catalogue().find_primitive(w.problem.primitive);
    const Variant* variant = primitive ? catalogue().find_variant(w.problem.primitive, w.variant) : nullptr;
    if (!variant) return not_run(w, "variant " + w.variant + " of " + w.problem.primitive + " is not in this build's catalogue");
    if (!std::isfinite(w.tolerance.atol) || !std::isfinite(w.tolerance.rtol))
      return not_run(w, "no tolerance recorded with this winner; sweep the problem again");
    try {
      const MeasureOptions measure = options_for(w.sweep_id);
      if (auto why = worker_.open_problem(w.problem, seed_)) return not_run(w, *why);
      MeasureSteps steps;
      steps.mode = w.timing.mode;  // as the winner was timed, so the two medians compare
      steps.library_algo = w.library_algo;
      const double limit = candidate_time_limit_s(measure, primitive->cost(w.problem), w.timing.median_us);
      const CandidateOutcome outcome =
          worker_.measure(*variant, complete_config(*variant, w.config), w.tolerance, steps, limit, &measure);
      return judge(w, outcome, options_.rule);
    } catch (const WorkerError&) {
      throw;  // nothing more can be checked
    } catch (const std::exception& e) {
      return not_run(w, e.what());
    }
  }

 private:
  // The measurement options of the sweep that chose the winner (defaults when it is gone).
  MeasureOptions options_for(std::int64_t sweep_id) {
    const auto sweep = store_.sweep(sweep_id);
    MeasureOptions o = measure_options_from_text(sweep ? sweep->info.options : "");
    o.candidate_timeout_s = options_.candidate_timeout_s;
    return o;
  }

  const CheckOptions& options_;
  Store& store_;
  GpuWorker& worker_;
  std::uint64_t seed_;
};

}  // namespace

CheckRun run_check(const CheckOptions& options, std::ostream& progress) {
  std::unique_ptr<Store> store;
  try {
    store = Store::open(options.db_path, OpenMode::read_only);
  } catch (const StoreError& e) {
    throw CheckSetupError(e.what());
  }
  const std::vector<WinnerRecord> all = store->winners();
  if (all.empty())
    throw CheckSetupError("no winners in " + options.db_path + ": nothing to check (run `shapetune sweep FILE.yaml --db " +
                          options.db_path + "` first)");
  std::optional<ShapeFile> file;
  if (options.shape_file) {
    try {
      file = load_shape_file(*options.shape_file, catalogue());
    } catch (const ShapeFileError& e) {
      throw CheckSetupError(e.what());
    }
  }
  GpuWorker worker(options.device, MeasureOptions{});
  CheckRun run;
  std::optional<std::string> no_device;
  try {
    no_device = worker.start();
  } catch (const std::exception& e) {
    throw CheckSetupError(e.what());
  }
  if (no_device) throw CheckSetupError("`shapetune check` needs a CUDA device, and none is usable here: " + *no_device);
  const DeviceInfo& device = worker.device();
  run.device_key = device.fingerprint.key();
  std::map<std::string, const WinnerRecord*> mine;
  std::vector<std::string> other_devices;
  for (const auto& w : all) {
    if (w.device_key == run.device_key) mine.emplace(w.problem.key(), &w);
    else if (std::find(other_devices.begin(), other_devices.end(), w.device_key) == other_devices.end())
      other_devices.push_back(w.device_key);
  }
  if (mine.empty()) {
    std::string others;
    for (const auto& k : other_devices) others += (others.empty() ? "" : ", ") + k;
    throw CheckSetupError("no winners for this device (" + run.device_key + ") in " + options.db_path +
                          "; it has winners for: " + others + ". Check on that device, or sweep on this one first");
  }

  // What to check: the matrix's problems in file order, or every winner of this device.
  std::vector<Problem> problems;
  if (file)
    for (const auto& p : file->problems) problems.push_back(p.problem);
  else
    for (const auto& [key, w] : mine) problems.push_back(w->problem);

  run.seed = options.seed ? *options.seed : std::random_device{}();
  progress << "Checking " << problems.size() << (file ? " problems of " + *options.shape_file : " winners") << " on "
           << device.fingerprint.name << " (" << run.device_key << "), input seed " << run.seed << "\n";
  Checker checker(options, *store, worker, run.seed);
  std::optional<std::string> worker_gone;  // why nothing more can run
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const auto found = mine.find(problems[i].key());
    CheckRow row;
    if (found == mine.end()) {
      row = not_tuned(problems[i]);
    } else if (worker_gone) {
      row = not_run(*found->second, "not run: " + *worker_gone);
    } else {
      try {
        row = checker.check(*found->second);
      } catch (const WorkerError& e) {
        worker_gone = e.what();
        row = not_run(*found->second, e.what());
      }
    }
    if (found != mine.end())
      row.swept_faults = static_cast<int>(store->faulted_candidates(found->second->sweep_id, problems[i].key()).size());
    progress << "[" << i + 1 << "/" << problems.size() << "] " << problems[i].key() << ": "
             << check_verdict_name(row.verdict);
    if (row.compared()) progress << " " << percent(row.change_rel);
    progress << std::endl;
    run.rows.push_back(std::move(row));
  }
  return run;
}

}  // namespace shapetune
