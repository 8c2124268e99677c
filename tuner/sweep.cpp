#include "tuner/sweep.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <random>
#include <sstream>

#include "core/build_info.hpp"
#include "core/format.hpp"
#include "db/store.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "tuner/choose.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};

// First Ctrl-C: finish the candidate in flight, then stop (the sweep stays resumable).
// Second: the default action.
extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);
}

struct Candidate {
  const Variant* variant;
  Config config;
};

std::vector<Candidate> candidates_for(const PlannedProblem& planned, const std::vector<std::string>& cli_variants) {
  auto allowed = [&](const std::string& name) {
    auto in = [&](const std::vector<std::string>& list) {
      return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
    };
    return in(planned.variants) && in(cli_variants);
  };
  std::vector<Candidate> out;
  const auto variants = catalogue().variants(planned.problem.primitive);
  // Baselines first, then each variant's default: what a budget cuts short is the search,
  // never the bar it is compared with.
  for (const Variant* v : variants)
    if (v->baseline && allowed(v->name))
      for (auto& c : v->params.enumerate()) out.push_back({v, std::move(c)});
  for (const Variant* v : variants)
    if (!v->baseline && allowed(v->name)) out.push_back({v, v->default_config});
  for (const Variant* v : variants) {
    if (v->baseline || !allowed(v->name)) continue;
    for (auto& c : v->params.enumerate())
      if (!(c == v->default_config)) out.push_back({v, std::move(c)});
  }
  return out;
}

std::string describe(const std::string& variant, const Config& config) {
  return config.values().empty() ? variant : variant + "{" + config.key() + "}";
}

int dry_run(const ShapeFile& file, const SweepOptions& options, std::ostream& out) {
  const DeviceLimits limits = nominal_device_limits();
  std::int64_t total = 0;
  for (const auto& planned : file.problems) {
    if (!options.primitives.empty() && std::find(options.primitives.begin(), options.primitives.end(),
                                                 planned.problem.primitive) == options.primitives.end())
      continue;
    int supported = 0;
    const auto candidates = candidates_for(planned, options.variants);
    for (const auto& c : candidates) supported += c.variant->supports(planned.problem, c.config, limits).ok;
    out << planned.problem.key() << ": " << candidates.size() << " candidates, " << supported
        << " supported (nominal sm_90 limits)\n";
    total += supported;
  }
  out << file.problems.size() << " problems, " << total << " candidates to measure. Dry run: nothing measured.\n";
  return 0;
}

CandidateRecord to_record(std::int64_t sweep_id, const PlannedProblem& planned, const Candidate& c,
                          const CandidateOutcome& outcome) {
  CandidateRecord r;
  r.sweep_id = sweep_id;
  r.problem = planned.problem;
  r.variant = c.variant->name;
  r.config = c.config;
  r.baseline = c.variant->baseline;
  r.status = outcome.status;
  r.reason = outcome.reason;
  r.accuracy = outcome.accuracy;
  r.timing = outcome.timing;
  r.tolerance = planned.tolerance;
  return r;
}

class Sweep {
 public:
  Sweep(const SweepOptions& options, std::ostream& out, std::ostream& err) : options_(options), out_(out), err_(err) {}
  int run();

 private:
  enum class ProblemResult { done, skipped, context_lost, interrupted };
  ProblemResult tune(const PlannedProblem&, Clock::time_point deadline);
  void report_problem(const PlannedProblem&, const std::vector<CandidateRecord>&, const std::optional<WinnerRecord>&,
                      double seconds, int skipped_for_budget);

  const SweepOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<Store> store_;
  std::optional<DeviceInfo> device_;
  std::unique_ptr<Measurer> measurer_;
  std::int64_t sweep_id_ = 0;
  std::uint64_t seed_ = 0;
  std::size_t index_ = 0, count_ = 0;
};

int Sweep::run() {
  ShapeFile file;
  try {
    file = load_shape_file(options_.shape_file, catalogue());
  } catch (const ShapeFileError& e) {
    err_ << "error: " << e.what() << "\n";
    return 2;
  }
  for (const auto& p : options_.primitives)
    if (!catalogue().find_primitive(p)) {
      err_ << "error: unknown primitive '" << p << "'; known: " << catalogue().primitive_names() << "\n";
      return 2;
    }
  if (options_.dry_run) return dry_run(file, options_, out_);

  if (auto why = cuda_unavailable_reason()) {
    err_ << "error: `shapetune sweep` needs a CUDA device, and none is usable here: " << *why << ".\n"
         << "Without a GPU you can still: check a shape file (shapetune sweep " << options_.shape_file
         << " --dry-run), browse the catalogue (shapetune list), read or export a database swept elsewhere "
            "(shapetune winners/export --db FILE), and run the CPU tests (see README).\n";
    return 2;
  }

  std::vector<const PlannedProblem*> selected;
  for (const auto& p : file.problems)
    if (options_.primitives.empty() || std::find(options_.primitives.begin(), options_.primitives.end(),
                                                 p.problem.primitive) != options_.primitives.end())
      selected.push_back(&p);

  try {
    store_ = Store::open(options_.db_path);
  } catch (const StoreError& e) {
    err_ << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    device_ = use_device(options_.device);
    measurer_ = std::make_unique<Measurer>(*device_, options_.measure);
    store_->upsert_device(device_->fingerprint);
    const SweepInfo info{device_->fingerprint.key(), options_.command_line, build_git_sha(), options_.shape_file,
                         file.sha256, result_affecting_options(options_)};
    const auto resumable = options_.fresh ? std::nullopt : store_->find_resumable_sweep(info);
    sweep_id_ = resumable ? *resumable : store_->begin_sweep(info);
    seed_ = options_.seed ? *options_.seed : std::random_device{}();
    out_ << (resumable ? "Resuming sweep #" : "Sweep #") << sweep_id_ << " on " << device_->fingerprint.name << " ("
         << info.device_key << "), " << selected.size() << " problems from " << options_.shape_file << ", "
         << (options_.measure.flush_l2 ? "cold L2" : "hot L2") << ", input seed " << seed_ << ", build "
         << build_git_sha() << "\n";
  } catch (const std::exception& e) {
    err_ << "error: " << e.what() << "\n";
    return 1;
  }

  std::signal(SIGINT, on_sigint);
  const auto start = Clock::now();
  count_ = selected.size();
  int exit_code = 0;
  for (index_ = 0; index_ < count_; ++index_) {
    Clock::time_point deadline = Clock::time_point::max();
    if (options_.budget_s > 0) {
      const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.budget_s));
      deadline = Clock::now() + (end - Clock::now()) / static_cast<long>(count_ - index_);
    }
    ProblemResult result;
    try {
      result = tune(*selected[index_], deadline);
    } catch (const StoreError& e) {
      err_ << "error: " << e.what() << "\n";
      exit_code = 1;
      break;
    }
    if (result == ProblemResult::context_lost) {
      err_ << "error: the CUDA context was lost (see the candidate above); the sweep stops here. Rerun the same "
              "command to resume after that candidate.\n";
      exit_code = 1;
      break;
    }
    if (result == ProblemResult::interrupted) {
      err_ << "interrupted: rerun the same command to resume sweep #" << sweep_id_ << ".\n";
      exit_code = 130;
      break;
    }
  }
  std::signal(SIGINT, SIG_DFL);
  if (exit_code == 0) {
    store_->finish_sweep(sweep_id_, options_.budget_s > 0 ? "complete (budget)" : "complete");
    out_ << "Sweep #" << sweep_id_ << " complete in " << std::fixed << std::setprecision(1)
         << std::chrono::duration<double>(Clock::now() - start).count() << " s; winners in " << options_.db_path
         << " (shapetune winners --db " << options_.db_path << ")\n";
  }
  return exit_code;
}

Sweep::ProblemResult Sweep::tune(const PlannedProblem& planned, Clock::time_point deadline) {
  const std::string key = planned.problem.key();
  if (auto status = store_->problem_status(sweep_id_, key)) {
    out_ << "[" << index_ + 1 << "/" << count_ << "] " << key << ": " << *status << " earlier in this sweep\n";
    return ProblemResult::done;
  }
  const auto t0 = Clock::now();
  const Primitive& primitive = *catalogue().find_primitive(planned.problem.primitive);
  if (auto why = cannot_hold(footprint(primitive, planned.problem), measurer_->reserved_device_bytes())) {
    store_->record_problem(sweep_id_, key, "skipped", *why);
    out_ << "[" << index_ + 1 << "/" << count_ << "] " << key << ": skipped: " << *why << "\n";
    return ProblemResult::skipped;
  }
  std::unique_ptr<ProblemData> data;
  try {
    data = std::make_unique<ProblemData>(primitive, planned.problem, seed_);
  } catch (const CudaError& e) {
    if (e.context_lost()) return ProblemResult::context_lost;
    store_->record_problem(sweep_id_, key, "skipped", e.what());
    out_ << "[" << index_ + 1 << "/" << count_ << "] " << key << ": skipped: " << e.what() << "\n";
    return ProblemResult::skipped;
  }

  int skipped_for_budget = 0;
  for (const auto& candidate : candidates_for(planned, options_.variants)) {
    if (g_interrupted) return ProblemResult::interrupted;
    if (store_->has_candidate(sweep_id_, key, candidate.variant->name, candidate.config.key())) continue;
    if (Clock::now() > deadline) {
      ++skipped_for_budget;
      continue;
    }
    const CandidateOutcome outcome = measurer_->measure(*candidate.variant, candidate.config, *data, planned.tolerance);
    const CandidateRecord record = to_record(sweep_id_, planned, candidate, outcome);
    store_->record_candidate(record);
    if (options_.verbose || outcome.context_lost) {
      out_ << "    " << describe(record.variant, record.config) << ": " << candidate_status_name(record.status);
      if (record.timing) out_ << " " << fmt_us(record.timing->median_us) << " (" << timing_mode_name(record.timing->mode) << ")";
      if (!record.reason.empty()) out_ << " — " << record.reason;
      out_ << "\n";
    }
    if (outcome.context_lost) return ProblemResult::context_lost;
  }

  const auto records = store_->candidates(sweep_id_, key);
  auto winner = choose_winner(records);
  if (winner) {
    winner->device_key = device_->fingerprint.key();
    winner->git_sha = build_git_sha();
    winner->measured_at = utc_now_iso8601();
    winner->cost = catalogue().find_primitive(planned.problem.primitive)->cost(planned.problem);
    store_->store_winner(*winner);
  }
  const std::string reason = skipped_for_budget ? "budget: " + std::to_string(skipped_for_budget) + " candidates not measured" : "";
  store_->record_problem(sweep_id_, key, "done", reason);
  report_problem(planned, records, winner, std::chrono::duration<double>(Clock::now() - t0).count(), skipped_for_budget);
  return ProblemResult::done;
}

void Sweep::report_problem(const PlannedProblem& planned, const std::vector<CandidateRecord>& records,
                           const std::optional<WinnerRecord>& winner, double seconds, int skipped_for_budget) {
  int counts[5] = {};
  for (const auto& r : records) ++counts[static_cast<int>(r.status)];
  const Primitive& primitive = *catalogue().find_primitive(planned.problem.primitive);
  const double bytes = primitive.cost(planned.problem).bytes;
  std::ostringstream line;
  line << "[" << index_ + 1 << "/" << count_ << "] " << planned.problem.key() << "  ";
  if (winner) {
    line << "best " << describe(winner->variant, winner->config) << " " << fmt_us(winner->timing.median_us) << " "
         << fmt_rate(bytes / (winner->timing.median_us * 1e-6));
    if (winner->timing.mode != TimingMode::cold) line << " [" << timing_mode_name(winner->timing.mode) << "]";
    if (!winner->best_baseline.empty())
      line << " | " << winner->best_baseline << " " << fmt_us(winner->baseline_us) << " (x" << std::fixed
           << std::setprecision(2) << winner->speedup_vs_baseline << ")";
    if (winner->tie) line << " | tie with " << winner->runner_up_variant;
  } else {
    line << "NO ACCURATE CANDIDATE";
  }
  line << " | " << counts[0] << " ok";
  if (counts[1]) line << ", " << counts[1] << " failed accuracy";
  if (counts[2]) line << ", " << counts[2] << " unsupported";
  if (counts[3]) line << ", " << counts[3] << " errors";
  if (skipped_for_budget) line << ", " << skipped_for_budget << " over budget";
  line << " | " << std::fixed << std::setprecision(1) << seconds << " s";
  out_ << line.str() << std::endl;
  for (const auto& r : records)
    if (r.status == CandidateStatus::failed_accuracy && r.baseline)
      err_ << "warning: baseline " << r.variant << " failed accuracy on " << planned.problem.key() << ": " << r.reason
           << "\n";
}

}  // namespace

std::string result_affecting_options(const SweepOptions& o) {
  std::ostringstream s;
  s << "l2=" << (o.measure.flush_l2 ? "cold" : "hot") << ";min_samples=" << o.measure.stop.min_samples
    << ";max_samples=" << o.measure.stop.max_samples << ";target_ci=" << o.measure.stop.target_ci_rel
    << ";time_cap_s=" << o.measure.stop.time_cap_s << ";batch_below_us=" << o.measure.batch_below_us;
  auto list = [&](const char* name, const std::vector<std::string>& v) {
    if (v.empty()) return;
    s << ";" << name << "=";
    for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  };
  list("primitives", o.primitives);
  list("variants", o.variants);
  if (o.budget_s > 0) s << ";budget_s=" << o.budget_s;
  return s.str();
}

int run_sweep(const SweepOptions& options, std::ostream& out, std::ostream& err) {
  g_interrupted = false;
  return Sweep(options, out, err).run();
}

}  // namespace shapetune
