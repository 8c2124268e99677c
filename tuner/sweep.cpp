#include "tuner/sweep.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <random>
#include <sstream>

#include "core/build_info.hpp"
#include "core/counters.hpp"
#include "core/format.hpp"
#include "db/store.hpp"
#include "harness/counters.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/gpu_worker.hpp"
#include "tuner/budget.hpp"
#include "tuner/choose.hpp"
#include "tuner/missing_baseline.hpp"
#include "tuner/progress_events.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using Clock = std::chrono::steady_clock;

// The shortest sampling time a budget leaves a candidate: min_samples are taken whatever it is.
constexpr double kMinBudgetTimeCapS = 0.02;

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
  bool default_config = false;
};

// A problem's candidates in measuring order, and how many configs the variants' own
// constraints removed before that.
struct CandidateList {
  std::vector<Candidate> candidates;
  std::int64_t pruned_by_constraint = 0;
};

CandidateList candidates_for(const PlannedProblem& planned, const std::vector<std::string>& cli_variants) {
  auto allowed = [&](const std::string& name) {
    auto in = [&](const std::vector<std::string>& list) {
      return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
    };
    return in(planned.variants) && in(cli_variants);
  };
  CandidateList out;
  std::vector<std::pair<const Variant*, std::vector<Config>>> spaces;
  for (const Variant* v : catalogue().variants(planned.problem.primitive))
    if (allowed(v->name)) {
      spaces.emplace_back(v, v->params.enumerate());
      out.pruned_by_constraint += v->params.raw_size() - static_cast<std::int64_t>(spaces.back().second.size());
    }
  // Baselines first, then each variant's default: what a budget cuts short is the search,
  // never the bar it is compared with.
  for (auto& [v, configs] : spaces)
    if (v->baseline)
      for (auto& c : configs) {
        const bool is_default = c == v->default_config;  // the bar halving measures fully
        out.candidates.push_back({v, std::move(c), is_default});
      }
  // The defaults in the order dispatch falls back through them (the primitive's default variant,
  // its fallbacks, then the catalogue's order): once a problem has a winner the budget cuts the
  // rest, defaults too, and a plain variant measured first (attention's naive at 40,000 heads:
  // 0.2 s a launch) would then be the winner of a problem its general variant runs 100 times
  // faster.
  const Primitive* primitive = catalogue().find_primitive(planned.problem.primitive);
  const auto dispatch_rank = [&](const Variant* v) {
    if (!primitive) return std::size_t{0};
    if (v->name == primitive->default_variant) return std::size_t{0};
    const auto& fallbacks = primitive->fallback_variants;
    const auto it = std::find(fallbacks.begin(), fallbacks.end(), v->name);
    return it == fallbacks.end() ? fallbacks.size() + 1 : static_cast<std::size_t>(it - fallbacks.begin()) + 1;
  };
  std::vector<const Variant*> defaults;
  for (const auto& [v, configs] : spaces)
    if (!v->baseline) defaults.push_back(v);
  std::stable_sort(defaults.begin(), defaults.end(),
                   [&](const Variant* a, const Variant* b) { return dispatch_rank(a) < dispatch_rank(b); });
  for (const Variant* v : defaults) out.candidates.push_back({v, v->default_config, true});
  for (auto& [v, configs] : spaces) {
    if (v->baseline) continue;
    for (auto& c : configs)
      if (!(c == v->default_config)) out.candidates.push_back({v, std::move(c)});
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Config>> measuring_order(const PlannedProblem& planned,
                                                            const std::vector<std::string>& cli_variants) {
  std::vector<std::pair<std::string, Config>> out;
  for (Candidate& c : candidates_for(planned, cli_variants).candidates) out.emplace_back(c.variant->name, std::move(c.config));
  return out;
}

namespace {

std::string describe(const std::string& variant, const Config& config) {
  return config.values().empty() ? variant : variant + "{" + config.key() + "}";
}

double expected_problem_s(const PlannedProblem& planned, const SweepOptions& options) {
  return expected_problem_time(planned, options.variants, options.measure, nominal_device_limits()).total_s();
}

// The chosen primitives' problems in file order, and how --shard would split them.
std::vector<const PlannedProblem*> selected_problems(const ShapeFile& file, const SweepOptions& options) {
  std::vector<const PlannedProblem*> selected;
  const auto& wanted = options.primitives;
  for (const auto& p : file.problems)
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), p.problem.primitive) != wanted.end())
      selected.push_back(&p);
  return selected;
}

std::vector<std::vector<std::size_t>> shard_split(const std::vector<const PlannedProblem*>& selected,
                                                  const SweepOptions& options, int count) {
  std::vector<double> expected;
  for (const PlannedProblem* p : selected) expected.push_back(expected_problem_s(*p, options));
  return partition_by_time(expected, count);
}

}  // namespace

// A kernel's time comes from the cost model at nominal H200-class rates, samples from the stop
// rule (typically ~30 before the median converges, never beyond the time cap), and each candidate
// adds a fixed overhead (worker round trip, verification). Only the relative weights matter for
// shards, and they come from the file and the catalogue alone, so every shard's process agrees;
// progress corrects the absolute scale by the rate it measures.
ExpectedProblemTime expected_problem_time(const PlannedProblem& planned, const std::vector<std::string>& cli_variants,
                                          const MeasureOptions& measure, const DeviceLimits& limits) {
  constexpr double kNominalBytesPerS = 3e12, kNominalFlopsPerS = 2e14;
  constexpr double kCandidateOverheadS = 0.03, kFlushS = 20e-6, kTypicalSamples = 30;
  const Primitive& primitive = *catalogue().find_primitive(planned.problem.primitive);
  const Cost reference = reference_cost(primitive, planned.problem);
  const Cost cost = primitive.cost(planned.problem);
  auto finite = [](double x) { return std::isfinite(x) && x > 0 ? x : 0.0; };
  ExpectedProblemTime expected;
  expected.setup_s = BudgetPlan::kSetupFloorS + finite(reference.flops) / BudgetPlan::kReferenceFlopsPerS +
                     finite(reference.bytes) / BudgetPlan::kHostBytesPerS;
  const double kernel_s = finite(cost.bytes) / kNominalBytesPerS + finite(cost.flops) / kNominalFlopsPerS;
  const double sampling_s =
      std::min(measure.stop.time_cap_s, std::max<double>(kTypicalSamples, measure.stop.min_samples) * (kernel_s + kFlushS));
  expected.per_candidate_s = kCandidateOverheadS + kernel_s + sampling_s;
  for (const auto& c : candidates_for(planned, cli_variants).candidates)
    expected.supported += c.variant->supports(planned.problem, c.config, limits).ok;
  return expected;
}

std::vector<const PlannedProblem*> sweep_problems(const ShapeFile& file, const SweepOptions& options) {
  const std::vector<const PlannedProblem*> selected = selected_problems(file, options);
  if (!options.shard) return selected;
  const auto shards = shard_split(selected, options, options.shard->count);
  std::vector<const PlannedProblem*> mine;
  for (const std::size_t i : shards[static_cast<std::size_t>(options.shard->index - 1)]) mine.push_back(selected[i]);
  return mine;
}

std::vector<double> expected_shard_s(const ShapeFile& file, const SweepOptions& options, int count) {
  const std::vector<const PlannedProblem*> selected = selected_problems(file, options);
  const auto shards = shard_split(selected, options, count);
  std::vector<double> expected;
  for (const auto& shard : shards) {
    double total = 0;
    for (const std::size_t i : shard) total += expected_problem_s(*selected[i], options);
    expected.push_back(total);
  }
  return expected;
}

namespace {

// The strategy a problem is searched with: the file's, unless the command line names another.
SearchOptions search_for(const PlannedProblem& planned, const SweepOptions& options) {
  if (!options.strategy || *options.strategy == planned.search.strategy) return planned.search;
  SearchOptions search;
  search.strategy = *options.strategy;
  return search;
}

// A random search with neither a count nor a time budget would measure everything, in no
// useful order: refused before anything starts.
std::optional<std::string> unbounded_search(const std::vector<const PlannedProblem*>& selected,
                                            const SweepOptions& options) {
  if (options.budget_s > 0) return std::nullopt;
  for (const PlannedProblem* planned : selected) {
    const SearchOptions search = search_for(*planned, options);
    if (search.strategy == SearchStrategy::random && !search.samples && !search.fraction)
      return options.shape_file + ":" + std::to_string(planned->source_line) +
             ": random search of this matrix has no limit; expected samples or fraction in its search: (e.g. "
             "search: {strategy: random, samples: 50}), or --budget SECONDS";
  }
  return std::nullopt;
}

std::string pruned_text(std::int64_t by_constraint, std::int64_t by_supports) {
  return "pruned " + std::to_string(by_constraint + by_supports) + " (" + std::to_string(by_constraint) +
         " by constraint, " + std::to_string(by_supports) + " by supports)";
}

std::string fmt_seconds(double s) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s";
  return text.str();
}

// The candidates supports() refuses under `limits` (only the baselines with baselines_only), as
// the sweep would record them; `accepted` counts the others. What a plan can say before anything runs.
std::vector<CandidateRecord> refused_candidates(const PlannedProblem& planned, const CandidateList& list,
                                                const DeviceLimits& limits, int& accepted, bool baselines_only) {
  std::vector<CandidateRecord> refused;
  accepted = 0;
  for (const Candidate& c : list.candidates) {
    if (baselines_only && !c.variant->baseline) continue;
    const Support support = c.variant->supports(planned.problem, c.config, limits);
    if (support.ok) {
      ++accepted;
      continue;
    }
    CandidateRecord r;
    r.problem = planned.problem;
    r.variant = c.variant->name;
    r.config = c.config;
    r.baseline = c.variant->baseline;
    r.status = CandidateStatus::unsupported;
    r.reason = support.reason;
    refused.push_back(std::move(r));
  }
  return refused;
}

// The baselines among the candidates when supports() refuses every one of them.
std::vector<VariantFailure> baselines_refused(const PlannedProblem& planned, const CandidateList& list,
                                              const DeviceLimits& limits) {
  int accepted = 0;
  const auto refused = refused_candidates(planned, list, limits, accepted, true);
  return accepted ? std::vector<VariantFailure>{} : missing_baselines(refused);
}

// Why not one of the problems has a candidate that supports() accepts under `limits` (the first
// few problems' reasons); nullopt when some problem has one. A sweep like that would record only
// refusals and look finished: it is refused before it starts.
std::optional<std::string> unmeasurable(const std::vector<const PlannedProblem*>& selected, const SweepOptions& options,
                                        const DeviceLimits& limits, const std::string& limits_name) {
  constexpr std::size_t kProblemsNamed = 3;
  std::vector<std::string> reasons;
  for (const PlannedProblem* planned : selected) {
    const CandidateList list = candidates_for(*planned, options.variants);
    int accepted = 0;
    const auto refused = refused_candidates(*planned, list, limits, accepted, false);
    if (accepted) return std::nullopt;
    if (reasons.size() < kProblemsNamed)
      reasons.push_back(planned->problem.key() + ": " +
                        (list.candidates.empty() ? std::string("no variant passes the variant filters")
                                                 : failures_text(variants_without_measurement(refused))));
  }
  if (selected.empty()) return std::nullopt;
  std::string filters;
  for (std::size_t i = 0; i < options.variants.size(); ++i) filters += (i ? "," : " with --variant ") + options.variants[i];
  std::string text = "nothing to measure: no candidate of the " + std::to_string(selected.size()) +
                     (selected.size() == 1 ? " problem" : " problems") + filters + " is supported (" + limits_name +
                     "), so no problem could get a winner. ";
  for (std::size_t i = 0; i < reasons.size(); ++i) text += (i ? " | " : "") + reasons[i];
  if (selected.size() > reasons.size()) text += " | and " + std::to_string(selected.size() - reasons.size()) + " more";
  return text + ". `shapetune list PRIMITIVE` shows each primitive's variants.";
}

int dry_run(const ShapeFile& file, const std::vector<const PlannedProblem*>& selected, const SweepOptions& options,
            std::ostream& out, std::ostream& err) {
  const DeviceLimits limits = nominal_device_limits();
  std::int64_t total = 0;
  double expected_total_s = 0;
  for (const PlannedProblem* planned : selected) {
    const CandidateList list = candidates_for(*planned, options.variants);
    const ExpectedProblemTime expected = expected_problem_time(*planned, options.variants, options.measure, limits);
    expected_total_s += expected.total_s();
    out << planned->problem.key() << ": " << list.candidates.size() << " candidates, " << expected.supported
        << " supported (nominal sm_90 limits), "
        << pruned_text(list.pruned_by_constraint, static_cast<std::int64_t>(list.candidates.size()) - expected.supported)
        << "; search: " << search_for(*planned, options).describe() << "; expected ~" << fmt_seconds(expected.total_s())
        << "\n";
    if (const auto refused = baselines_refused(*planned, list, limits); !refused.empty())
      err << "warning: " << planned->problem.key() << ": no baseline supports it (nominal sm_90 limits), so its "
          << "winner would be compared with none: " << failures_text(refused) << "\n";
    total += expected.supported;
  }
  out << selected.size() << " problems, " << total << " supported candidates, expected ~" << fmt_seconds(expected_total_s)
      << " (cost model at nominal H200 rates; exhaustive search; a rough guide).";
  if (options.shard) {
    SweepOptions unsharded = options;
    unsharded.shard.reset();
    const auto all = sweep_problems(file, unsharded);
    double all_s = 0;
    for (const PlannedProblem* p : all) all_s += expected_problem_s(*p, options);
    out << "\nShard " << options.shard->text() << ": " << selected.size() << " of " << all.size()
        << " problems, ~" << fmt_seconds(expected_total_s) << " of ~" << fmt_seconds(all_s)
        << " expected for the whole file (shards are split by expected time, so each is near 1/"
        << options.shard->count << " of it).";
  }
  out << " Dry run: nothing measured.\n";
  if (auto why = unmeasurable(selected, options, limits, "nominal sm_90 limits")) {
    if (options.shard) {
      err << "warning: shard " << options.shard->text() << ": " << *why << "\n";
      return 0;
    }
    err << "error: " << *why << "\n";
    return 2;
  }
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

// Thrown from inside a search's hooks when the user interrupts; tune() turns it into the
// problem's result. Whatever was stored before stays stored, so the sweep can resume.
struct EndProblem {};

class Sweep {
 public:
  Sweep(const SweepOptions& options, std::ostream& out, std::ostream& err) : options_(options), out_(out), err_(err) {}
  int run();

 private:
  enum class ProblemResult { done, skipped, interrupted };
  struct Tuning;
  // One problem: open it, prune, search, choose and store the winner, count, report.
  ProblemResult tune(const PlannedProblem&, Clock::time_point deadline);
  std::optional<ProblemResult> open_problem(Tuning&);
  bool prune_unsupported(Tuning&);
  // announce: a candidate event for --json-progress (not for what supports() refused)
  void keep(Tuning&, const Candidate&, const CandidateOutcome&, bool announce = true);
  SearchHooks hooks_for(Tuning&, Clock::time_point deadline);
  std::optional<WinnerRecord> store_winner(const PlannedProblem&, const std::vector<CandidateRecord>&,
                                           std::optional<WinnerRecord>& kept);
  std::pair<std::string, std::string> summaries(const Tuning&, const std::string& strategy, SearchStrategy,
                                                const SearchReport&);
  void report_problem(const PlannedProblem&, const std::vector<CandidateRecord>&, const std::optional<WinnerRecord>&,
                      double seconds, const std::string& search_summary, std::size_t skipped_for_budget);
  void print_candidate(const CandidateRecord&);
  std::string collect_counters(const PlannedProblem&, const std::optional<WinnerRecord>&,
                               const std::vector<CandidateRecord>&, Clock::time_point deadline);
  void report_counters_unavailable();
  bool counters_available() const { return counters_on_ && worker_->counter_status().available; }
  double time_limit(const Tuning&) const;
  int finish(int exit_code);

  // Progress: the streams with the progress line cleared first (it may share their terminal);
  // the line and the JSON events brought up to date; a supported candidate's share of the
  // expected work counted once (work a resumed sweep answers from the store leaves the total).
  std::ostream& say();
  std::ostream& warn();
  void show_progress(bool force = false);
  void credit(Tuning&, std::size_t i, bool from_store);
  void show_candidates(const Tuning&);
  void problem_done(const ProblemDoneEvent&);
  double seconds_since(Clock::time_point t) const { return std::chrono::duration<double>(Clock::now() - t).count(); }

  const SweepOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  Clock::time_point start_;           // the budget counts from here, setup included
  Clock::time_point progress_start_;  // the measured rate counts from the first problem
  std::optional<ProgressLine> line_;
  std::ofstream json_file_;
  std::optional<JsonProgress> json_;
  ProgressSnapshot progress_;
  std::vector<ExpectedProblemTime> expected_;  // beside the problems, at this device's limits
  std::size_t with_results_ = 0;      // problems with a winner, or done earlier in the sweep
  std::size_t without_winner_ = 0, without_baseline_ = 0;
  std::unique_ptr<Store> store_;
  // Every launch happens in the worker; this process keeps the database.
  std::unique_ptr<GpuWorker> worker_;
  std::optional<BudgetPlan> budget_;  // with --budget
  std::optional<DeviceInfo> device_;
  bool counters_on_ = false;        // false with --counters none
  bool counters_reported_ = false;  // "counters unavailable" is said once a sweep
  struct {
    std::int64_t candidates = 0;  // left unmeasured
    std::int64_t counters = 0;    // profiles not taken
  } budget_cuts_;                 // what the budget cut, said at the end
  std::int64_t sweep_id_ = 0;
  std::uint64_t seed_ = 0;
  std::size_t index_ = 0, count_ = 0;
};

int Sweep::run() {
  // A budget is the user's wall-clock promise: it counts from here, setup included.
  start_ = Clock::now();
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
  const std::vector<const PlannedProblem*> selected = sweep_problems(file, options_);
  if (auto why = unbounded_search(selected, options_)) {
    err_ << "error: " << *why << "\n";
    return 2;
  }
  const std::vector<std::string> metrics = counters::with_extra(counters::default_metrics(), options_.extra_metrics);
  if (options_.dry_run) {
    // No device to ask for its chip: the user's metric names are checked against the GH100
    // (H100/H200) the dry run's nominal limits describe.
    if (options_.counters != CounterMode::none && !options_.extra_metrics.empty()) {
      try {
        CounterConfig check("GH100", metrics);
      } catch (const UnknownMetricError& e) {
        err_ << "error: --metrics: " << e.what() << "\n";
        return 2;
      } catch (const CounterError& e) {
        err_ << "note: metric names not checked (" << e.what() << ")\n";
      }
    }
    return dry_run(file, selected, options_, out_, err_);
  }
  if (!options_.json_progress.empty()) {
    if (options_.json_progress == "-") {
      json_.emplace(err_);
    } else {
      json_file_.open(options_.json_progress, std::ios::out | std::ios::trunc);
      if (!json_file_) {
        err_ << "error: --json-progress: cannot write " << options_.json_progress << "\n";
        return 2;
      }
      json_.emplace(json_file_);
    }
  }

  worker_ = std::make_unique<GpuWorker>(options_.device, options_.measure);
  std::optional<std::string> no_device;
  try {
    no_device = worker_->start();
  } catch (const std::exception& e) {
    err_ << "error: " << e.what() << "\n";
    return 1;
  }
  if (no_device) {
    err_ << "error: `shapetune sweep` needs a CUDA device, and none is usable here: " << *no_device << ".\n"
         << "Without a GPU you can still: check a shape file (shapetune sweep " << options_.shape_file
         << " --dry-run), browse the catalogue (shapetune list), read or export a database swept elsewhere "
            "(shapetune winners/export --db FILE), and run the CPU tests (see README).\n";
    return 2;
  }

  try {
    store_ = Store::open(options_.db_path);
  } catch (const StoreError& e) {
    err_ << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    device_ = worker_->device();
    // Before the sweep is recorded: a metric this device's chip does not have stops it here.
    if (options_.counters != CounterMode::none) {
      try {
        worker_->start_counters(metrics);
        counters_on_ = true;
      } catch (const UnknownMetricError& e) {
        err_ << "error: --metrics: " << e.what() << "\n";
        return 2;
      }
    }
    for (const PlannedProblem* p : selected)
      expected_.push_back(expected_problem_time(*p, options_.variants, options_.measure, device_->limits));
    // A shard alone may hold nothing measurable while the others do: it says so and goes on.
    if (auto why = unmeasurable(selected, options_, device_->limits, device_->fingerprint.name + "'s limits")) {
      if (!options_.shard) {
        err_ << "error: " << *why << "\n";
        return 2;
      }
      err_ << "warning: shard " << options_.shard->text() << ": " << *why << "\n";
    }
    store_->upsert_device(device_->fingerprint);
    const SweepInfo info{device_->fingerprint.key(), options_.command_line, build_git_sha(), options_.shape_file,
                         file.sha256, result_affecting_options(options_)};
    const auto resumable = options_.fresh ? std::nullopt : store_->find_resumable_sweep(info);
    sweep_id_ = resumable ? *resumable : store_->begin_sweep(info);
    seed_ = options_.seed ? *options_.seed : std::random_device{}();
    out_ << (resumable ? "Resuming sweep #" : "Sweep #") << sweep_id_ << " on " << device_->fingerprint.name << " ("
         << info.device_key << "), " << selected.size() << " problems from " << options_.shape_file
         << (options_.shard ? " (shard " + options_.shard->text() + ")" : std::string()) << ", "
         << (options_.measure.flush_l2 ? "cold L2" : "hot L2")
         << (options_.strategy ? ", " + std::string(search_strategy_name(*options_.strategy)) + " search (--strategy)" : "")
         << ", input seed " << seed_ << ", build "
         << build_git_sha() << "\n";
    if (counters_available()) {
      const WorkerCounterStatus& c = worker_->counter_status();
      out_ << "Counters: " << counter_mode_name(options_.counters) << ", " << c.metrics.size() << " metrics in "
           << c.passes << " replay passes on " << c.chip << "\n";
    }
    report_counters_unavailable();
    progress_.problems = selected.size();
    for (const auto& e : expected_) progress_.expected_total_s += e.total_s();
    if (json_)
      json_->write(sweep_start_event({sweep_id_, resumable.has_value(), options_.shape_file, info.device_key,
                                      options_.shard ? options_.shard->text() : "", selected.size(),
                                      progress_.expected_total_s}));
  } catch (const std::exception& e) {
    err_ << "error: " << e.what() << "\n";
    return 1;
  }

  std::signal(SIGINT, on_sigint);
  count_ = selected.size();
  int exit_code = 0;
  if (options_.budget_s > 0) {
    std::vector<Cost> costs;
    for (const PlannedProblem* p : selected) costs.push_back(reference_cost(*catalogue().find_primitive(p->problem.primitive), p->problem));
    budget_.emplace(options_.budget_s, std::move(costs));
    const double setups = budget_->predicted_setups_s();
    if (setups > options_.budget_s) {
      std::ostringstream note;
      note << "note: --budget " << options_.budget_s << " s: preparing the problems' inputs and references alone is "
           << "estimated at " << std::fixed << std::setprecision(0) << setups << " s; every problem still gets one "
           << "measured winner, so the sweep will take longer\n";
      out_ << note.str();
    }
  }
  progress_start_ = Clock::now();
  // JSON on the error stream leaves the progress line out: one stream, one reader.
  line_.emplace(err_, options_.json_progress == "-" ? ProgressStyle::none : options_.progress, 0.0,
                options_.progress_interval_s, options_.progress_columns);
  for (index_ = 0; index_ < count_; ++index_) {
    Clock::time_point deadline = Clock::time_point::max();
    if (budget_) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(budget_->share_s(index_, seconds_since(start_))));
    }
    ProblemResult result;
    try {
      result = tune(*selected[index_], deadline);
    } catch (const StoreError& e) {
      warn() << "error: " << e.what() << "\n";
      exit_code = 1;
      break;
    } catch (const WorkerError& e) {
      warn() << "error: " << e.what() << "; the sweep stops here. Rerun the same command to resume.\n";
      exit_code = 1;
      break;
    }
    if (result == ProblemResult::interrupted) {
      warn() << "interrupted: rerun the same command to resume sweep #" << sweep_id_ << ".\n";
      exit_code = 130;
      break;
    }
  }
  std::signal(SIGINT, SIG_DFL);
  return finish(exit_code);
}

// The sweep's end: recorded as complete, or as "nothing measured" when not one problem got a
// winner (filters, a device every candidate refuses or crashes on: a sweep that looks done but
// holds nothing must not exit 0); the last line, with what the budget cut and the problems whose
// winners have no baseline; the JSON sweep_end.
int Sweep::finish(int exit_code) {
  line_->clear();
  std::string status = exit_code == 130 ? "interrupted" : "failed";
  const bool nothing_measured = exit_code == 0 && count_ > 0 && with_results_ == 0;
  if (nothing_measured && options_.shard)
    err_ << "warning: shard " << options_.shard->text() << ": not one of its " << count_
         << (count_ == 1 ? " problem" : " problems") << " got an accurate measurement (see the lines above)\n";
  if (nothing_measured && !options_.shard) {
    exit_code = 1;
    status = "nothing measured";
    store_->finish_sweep(sweep_id_, status);
    err_ << "error: nothing was measured: not one of the " << count_
         << (count_ == 1 ? " problem" : " problems")
         << " got an accurate measurement (see the lines above); sweep #" << sweep_id_ << " is recorded as '" << status
         << "'\n";
  } else if (exit_code == 0) {
    status = options_.budget_s > 0 ? "complete (budget)" : "complete";
    store_->finish_sweep(sweep_id_, status);
    out_ << "Sweep #" << sweep_id_ << " complete in " << std::fixed << std::setprecision(1) << seconds_since(start_)
         << " s";
    if (options_.budget_s > 0)
      out_ << " (budget " << options_.budget_s << " s: "
           << (budget_cuts_.candidates + budget_cuts_.counters == 0
                   ? std::string("nothing cut")
                   : std::to_string(budget_cuts_.candidates) + " candidates not measured, " +
                         std::to_string(budget_cuts_.counters) + " counter profiles not taken") << ")";
    if (worker_->restarts())
      out_ << " (GPU worker restarted " << worker_->restarts() << (worker_->restarts() == 1 ? " time" : " times")
           << " after crashes or time-outs)";
    auto problems = [](std::size_t n) { return std::to_string(n) + (n == 1 ? " problem" : " problems"); };
    if (without_winner_) out_ << "; " << problems(without_winner_) << " without an accurate candidate";
    if (without_baseline_)
      out_ << "; " << problems(without_baseline_) << " without a baseline (warnings above)";
    out_ << "; winners in " << options_.db_path
         << " (shapetune winners --db " << options_.db_path << ")\n";
  }
  if (json_)
    json_->write(sweep_end_event({status, exit_code, progress_.problems_done, count_, without_winner_, without_baseline_,
                                  seconds_since(start_)}));
  return exit_code;
}

std::ostream& Sweep::say() {
  if (line_) line_->clear();
  return out_;
}

std::ostream& Sweep::warn() {
  if (line_) line_->clear();
  return err_;
}

void Sweep::show_progress(bool force) {
  progress_.elapsed_s = seconds_since(progress_start_);
  if (budget_) progress_.budget_left_s = options_.budget_s - seconds_since(start_);
  line_->update(progress_, progress_.elapsed_s);
  if (json_) json_->progress(progress_, progress_.elapsed_s, force);
}

void Sweep::problem_done(const ProblemDoneEvent& event) {
  ++progress_.problems_done;
  progress_.current.clear();
  if (json_) json_->write(problem_done_event(event));
  show_progress(true);
}

// What tune() keeps for one problem while its candidates are searched.
struct Sweep::Tuning {
  Tuning(const PlannedProblem& p, const ExpectedProblemTime& e) : planned(p), key(p.problem.key()), expected(e) {}
  const PlannedProblem& planned;
  std::string key;
  const ExpectedProblemTime& expected;
  std::vector<bool> credited;  // beside `supported`: its share of the expected work counted
  std::size_t candidates_done = 0;
  CandidateList list;
  double baseline_us = 0;  // the first baseline's full median, for the watchdog
  double time_cap_s = 0;   // > 0: the sampling cap the budget leaves each candidate
  // For the budget: when the setup ended, whether a first winner has been seen since, and how
  // long the full measurements (verification and timing) have taken.
  Clock::time_point opened{};
  bool has_winner = false;
  double verify_s = 0;  // the last verification
  double measured_s = 0;
  int measured = 0;
  double mean_measurement_s() const { return measured ? measured_s / measured : 0; }
  // What this sweep already holds for the problem (it is being resumed), reused rather than
  // measured again; and, as the search goes on, what it has measured so far.
  std::map<std::pair<std::string, std::string>, CandidateRecord> stored;
  std::vector<const Candidate*> supported;   // what the search chooses among
  std::vector<SearchCandidate> searched;     // the same, as the search sees them
  std::int64_t pruned_by_supports = 0;
  std::vector<std::optional<AccuracyReport>> accuracy;  // from verification, beside `supported`
  std::int64_t race_samples = 0;

  const CandidateRecord* stored_for(const Candidate& c) const {
    const auto found = stored.find({c.variant->name, c.config.key()});
    return found == stored.end() ? nullptr : &found->second;
  }
};

void Sweep::credit(Tuning& t, std::size_t i, bool from_store) {
  if (t.credited[i]) return;
  t.credited[i] = true;
  ++t.candidates_done;
  if (from_store) progress_.expected_total_s -= t.expected.per_candidate_s;
  else progress_.expected_done_s += t.expected.per_candidate_s;
  show_candidates(t);
}

void Sweep::show_candidates(const Tuning& t) {
  progress_.current = "[" + std::to_string(index_ + 1) + "/" + std::to_string(count_) + "] " + t.key + ": " +
                      std::to_string(t.candidates_done) + "/" + std::to_string(t.supported.size()) + " candidates";
  show_progress();
}

Sweep::ProblemResult Sweep::tune(const PlannedProblem& planned, Clock::time_point deadline) {
  const auto t0 = Clock::now();
  Tuning t(planned, expected_[index_]);
  if (const auto ended = open_problem(t)) return *ended;
  if (!prune_unsupported(t)) return ProblemResult::interrupted;

  // Under a budget the problem's share covers everything: its search stops early enough to
  // leave the counters their part, and each candidate samples for at most its part of the
  // search's time (after min_samples).
  Clock::time_point search_deadline = deadline;
  if (deadline != Clock::time_point::max()) {
    const double counters_part = !counters_available()                      ? 0.0
                                 : options_.counters == CounterMode::all ? 0.4
                                                                          : 0.15;
    const auto now = Clock::now();
    search_deadline = deadline <= now ? deadline
                                      : now + std::chrono::duration_cast<Clock::duration>((deadline - now) * (1 - counters_part));
    const double search_s = std::chrono::duration<double>(search_deadline - now).count();
    // Half of a candidate's share for sampling: verification, warm-up and storing take the rest.
    t.time_cap_s = std::clamp(search_s / (2.0 * static_cast<double>(std::max<std::size_t>(t.supported.size(), 1))),
                              kMinBudgetTimeCapS, options_.measure.stop.time_cap_s);
  }

  SearchOptions search = search_for(planned, options_);
  const std::string strategy = search.describe();
  search.seed = seed_for(search.seed, t.key);
  SearchReport report;
  try {
    report = run_search(search, t.searched, hooks_for(t, search_deadline));
  } catch (const EndProblem&) {
    return ProblemResult::interrupted;
  }
  if (budget_ && !t.has_winner) budget_->observed_time_to_winner(std::chrono::duration<double>(Clock::now() - t.opened).count());

  const auto records = store_->candidates(sweep_id_, t.key);
  std::optional<WinnerRecord> kept;
  const std::optional<WinnerRecord> winner = store_winner(planned, records, kept);
  auto [summary, progress] = summaries(t, strategy, search.strategy, report);
  if (kept)
    progress = "table keeps " + describe(kept->variant, kept->config) + " " + fmt_us(kept->timing.median_us) + " (sweep " +
               std::to_string(kept->sweep_id) + ") | " + progress;
  try {
    const std::string counted = collect_counters(planned, winner, records, deadline);
    if (!counted.empty()) progress += ", " + counted;
  } catch (const EndProblem&) {
    return ProblemResult::interrupted;
  }
  budget_cuts_.candidates += static_cast<std::int64_t>(report.skipped_for_budget);
  store_->record_problem(sweep_id_, t.key, "done", summary);
  const double seconds = seconds_since(t0);
  report_problem(planned, records, winner, seconds, progress, report.skipped_for_budget);
  const std::vector<VariantFailure> missing = missing_baselines(records);
  if (!missing.empty()) {
    warn() << missing_baselines_warning(t.key, missing) << "\n";
    ++without_baseline_;
  }
  ++(winner ? with_results_ : without_winner_);
  // What the search did not need (halving's losers, what the budget cut) counts as done: the
  // measured rate then learns how much of the model's work this sweep's strategy really does.
  for (std::size_t i = 0; i < t.supported.size(); ++i)
    if (!t.credited[i]) progress_.expected_done_s += t.expected.per_candidate_s;
  problem_done({t.key, index_ + 1, count_, "done", "", winner, missing, seconds, kept});
  return ProblemResult::done;
}

// A problem done earlier in this sweep, one the device cannot hold, or inputs that cannot be
// made end here; otherwise t has its data, its candidates and what the sweep stored of them.
std::optional<Sweep::ProblemResult> Sweep::open_problem(Tuning& t) {
  const std::string prefix = "[" + std::to_string(index_ + 1) + "/" + std::to_string(count_) + "] " + t.key + ": ";
  if (auto status = store_->problem_status(sweep_id_, t.key)) {
    say() << prefix << *status << " earlier in this sweep\n";
    progress_.expected_total_s -= t.expected.total_s();
    ++with_results_;  // it may have no winner, but the sweep did not come to nothing
    problem_done({t.key, index_ + 1, count_, *status + " earlier", "", std::nullopt, {}, 0});
    return ProblemResult::done;
  }
  // Whether it fits, its inputs and reference: in the worker, which keeps them for the candidates.
  progress_.current = prefix + "inputs and reference";
  show_progress();
  const auto setup_start = Clock::now();
  const auto why = worker_->open_problem(t.planned.problem, seed_);
  t.opened = Clock::now();
  if (budget_) budget_->observed_setup(index_, std::chrono::duration<double>(t.opened - setup_start).count());
  if (why) {
    store_->record_problem(sweep_id_, t.key, "skipped", *why);
    say() << prefix << "skipped: " << *why << "\n";
    progress_.expected_total_s -= t.expected.total_s();
    problem_done({t.key, index_ + 1, count_, "skipped", *why, std::nullopt, {}, seconds_since(setup_start)});
    return ProblemResult::skipped;
  }
  progress_.expected_done_s += t.expected.setup_s;
  t.list = candidates_for(t.planned, options_.variants);
  for (auto& r : store_->candidates(sweep_id_, t.key)) {
    auto id = std::make_pair(r.variant, r.config.key());
    t.stored.insert_or_assign(std::move(id), std::move(r));
  }
  return std::nullopt;
}

// Constraints prune before any launch: a strategy only ever sees what supports() accepts. The
// rest are stored as unsupported, with the reason. False when interrupted meanwhile.
bool Sweep::prune_unsupported(Tuning& t) {
  for (const Candidate& c : t.list.candidates) {
    if (g_interrupted) return false;
    const Support support = c.variant->supports(t.planned.problem, c.config, device_->limits);
    if (support.ok) {
      t.supported.push_back(&c);
      t.searched.push_back({c.variant->baseline, c.default_config});
      continue;
    }
    ++t.pruned_by_supports;
    if (t.stored_for(c)) continue;
    CandidateOutcome unsupported;
    unsupported.status = CandidateStatus::unsupported;
    unsupported.reason = support.reason;
    keep(t, c, unsupported, false);
  }
  t.accuracy.resize(t.supported.size());
  t.credited.assign(t.supported.size(), false);
  show_candidates(t);
  return true;
}

// Stores one candidate's outcome (its own transaction) and remembers it for the search. One that
// crashed or hung its worker is always printed: the sweep goes on, but the user should know.
void Sweep::keep(Tuning& t, const Candidate& c, const CandidateOutcome& outcome, bool announce) {
  CandidateRecord record = to_record(sweep_id_, t.planned, c, outcome);
  store_->record_candidate(record);
  if (json_ && announce) json_->write(candidate_event(record, index_ + 1));
  const bool fault = outcome.status == CandidateStatus::crashed || outcome.status == CandidateStatus::timeout;
  if (options_.verbose || fault) print_candidate(record);
  if (c.variant->baseline && t.baseline_us == 0 && outcome.status == CandidateStatus::ok && outcome.timing &&
      !is_race_stop_reason(outcome.timing->stop_reason))
    t.baseline_us = outcome.timing->median_us;
  t.stored.insert_or_assign({record.variant, record.config.key()}, std::move(record));
}

double Sweep::time_limit(const Tuning& t) const {
  const Cost cost = catalogue().find_primitive(t.planned.problem.primitive)->cost(t.planned.problem);
  return candidate_time_limit_s(options_.measure, cost, t.baseline_us);
}

// What the search calls to verify and time candidate i of t.supported; a candidate the sweep
// already holds (resumed) answers from the store.
SearchHooks Sweep::hooks_for(Tuning& t, Clock::time_point deadline) {
  SearchHooks hooks;
  // A candidate starts only if one more, as long as this problem's have taken, still ends
  // inside the share: checking the clock alone overran every problem by one candidate.
  hooks.over_budget = [&t, deadline] {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t.mean_measurement_s())) >
           deadline;
  };
  hooks.verify = [this, &t](std::size_t i) {
    if (g_interrupted) throw EndProblem{};
    const Candidate& c = *t.supported[i];
    if (const CandidateRecord* earlier = t.stored_for(c)) {
      t.accuracy[i] = earlier->accuracy;
      if (earlier->status != CandidateStatus::ok) credit(t, i, true);
      return earlier->status == CandidateStatus::ok;
    }
    MeasureSteps verify_only;
    verify_only.time = false;
    const auto t0 = Clock::now();
    const CandidateOutcome outcome =
        worker_->measure(*c.variant, c.config, t.planned.tolerance, verify_only, time_limit(t));
    t.verify_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (outcome.status == CandidateStatus::ok) {
      t.accuracy[i] = outcome.accuracy;  // stored with its timing, once there is one
      return true;
    }
    keep(t, c, outcome);
    credit(t, i, false);
    return false;
  };
  hooks.time = [this, &t](std::size_t i, const Rung& rung) -> std::optional<double> {
    if (g_interrupted) throw EndProblem{};
    const Candidate& c = *t.supported[i];
    if (const CandidateRecord* earlier = t.stored_for(c);
        earlier && earlier->status == CandidateStatus::ok && earlier->timing) {
      // A full measurement answers any request; a race one, a request for its rung or an
      // earlier one (a resumed race replays its rungs with the latest medians it has).
      const std::optional<int> earlier_rung = race_rung_index(earlier->timing->stop_reason);
      if (!earlier_rung || (!rung.full() && *earlier_rung >= rung.index)) {
        credit(t, i, true);
        return earlier->timing->median_us;
      }
    }
    MeasureSteps time_only;
    time_only.verify = false;
    time_only.fixed_samples = rung.samples;
    time_only.time_cap_s = t.time_cap_s;
    const auto t0 = Clock::now();
    CandidateOutcome outcome = worker_->measure(*c.variant, c.config, t.planned.tolerance, time_only, time_limit(t));
    const auto t1 = Clock::now();
    if (rung.full()) {
      t.measured_s += t.verify_s + std::chrono::duration<double>(t1 - t0).count();
      ++t.measured;
      if (!t.has_winner && outcome.status == CandidateStatus::ok && outcome.timing) {
        t.has_winner = true;
        if (budget_) budget_->observed_time_to_winner(std::chrono::duration<double>(t1 - t.opened).count());
      }
    }
    if (!outcome.accuracy) outcome.accuracy = t.accuracy[i];
    if (outcome.timing) {
      if (rung.full()) {
        outcome.timing->stop_reason = final_stop_reason(outcome.timing->stop_reason, rung);
      } else {
        outcome.timing->stop_reason = race_stop_reason(rung);
        t.race_samples += outcome.timing->samples;
      }
    }
    keep(t, c, outcome);
    credit(t, i, false);
    if (outcome.status != CandidateStatus::ok || !outcome.timing) return std::nullopt;
    return outcome.timing->median_us;
  };
  return hooks;
}

// This sweep's fastest accurate full measurement, returned for its report. The dispatch row is
// chosen from it and the newest measurements of earlier sweeps of the problem (newest_measurements),
// stored with its provenance and cost; a rank-picked library algorithm is stored by identity, for
// dispatch to replay. `kept` is the row when an earlier sweep's measurement holds it.
std::optional<WinnerRecord> Sweep::store_winner(const PlannedProblem& planned, const std::vector<CandidateRecord>& records,
                                                std::optional<WinnerRecord>& kept) {
  auto best = choose_winner(full_measurements(records));
  if (!best) return best;
  const std::string device_key = device_->fingerprint.key();
  std::vector<SweepMeasurements> measured{{options_.measure.flush_l2 ? "cold" : "hot", records, build_git_sha()}};
  for (const auto& [problem_key, ids] : store_->done_sweeps(device_key, planned.problem.key()))
    for (const std::int64_t id : ids)
      if (const auto sweep = store_->sweep(id); sweep && id != sweep_id_)
        measured.push_back({l2_mode_of(sweep->info.options), store_->candidates(id, problem_key), sweep->info.git_sha});
  // This sweep's best is accurate, so the pool holds an accurate candidate.
  WinnerRecord winner = *choose_row(measured, completed_config_key);
  winner.device_key = device_key;
  winner.cost = catalogue().find_primitive(planned.problem.primitive)->cost(planned.problem);
  if (winner.sweep_id != sweep_id_) {
    kept = winner;
    // The row already held names this measurement: left as it is, with the library algorithm's
    // identity it was stored with.
    const auto held = store_->winner(device_key, planned.problem.key());
    if (!held || held->sweep_id != winner.sweep_id || held->variant != winner.variant || held->config != winner.config)
      store_->store_winner(winner);
    return best;
  }
  if (const Variant* v = catalogue().find_variant(planned.problem.primitive, winner.variant);
      v && v->describe_algorithm) {
    try {
      winner.library_algo = worker_->describe_algorithm(*v, winner.config);
    } catch (const std::exception& e) {
      warn() << "warning: " << planned.problem.key() << ": the winner's algorithm could not be described ("
           << e.what() << "); dispatch will replay its rank\n";
    }
  }
  store_->store_winner(winner);
  return best;
}

// The problem's summary as stored (strategy, counts, pruning, budget cuts) and its line's part.
// "measured" counts full measurements: what a winner needs, and what exhaustive search gives
// every accurate candidate.
std::pair<std::string, std::string> Sweep::summaries(const Tuning& t, const std::string& strategy,
                                                     SearchStrategy strategy_kind, const SearchReport& report) {
  const std::string measured =
      "measured " + std::to_string(report.fully_measured) + "/" + std::to_string(t.supported.size());
  std::string summary = strategy + ": " + measured;
  std::string progress = measured + " (" + std::string(search_strategy_name(strategy_kind));
  if (report.raced) {
    const std::string raced = "raced " + std::to_string(report.raced) + " in " + std::to_string(report.race_rungs) +
                              (report.race_rungs == 1 ? " rung" : " rungs");
    summary += ", " + raced + " (" + std::to_string(t.race_samples) + " samples)";
    progress += ": " + raced;
  }
  progress += ")";
  if (t.list.pruned_by_constraint + t.pruned_by_supports > 0) {
    summary += ", " + pruned_text(t.list.pruned_by_constraint, t.pruned_by_supports);
    progress += ", pruned " + std::to_string(t.list.pruned_by_constraint + t.pruned_by_supports);
  }
  if (report.skipped_for_budget)
    summary += "; budget: " + std::to_string(report.skipped_for_budget) + " candidates not measured";
  return {summary, progress};
}

// Profiles what --counters asks for, once each, after all of the problem's timing (the
// profiler is enabled only meanwhile). Returns the problem line's part, e.g.
// "counters: DRAM 1.02x model". Runs before the problem is recorded as done, so an interrupted
// sweep resumes here; what is stored already is not profiled again.
std::string Sweep::collect_counters(const PlannedProblem& planned, const std::optional<WinnerRecord>& winner,
                                   const std::vector<CandidateRecord>& records, Clock::time_point deadline) {
  if (!counters_available()) return "";
  struct Target {
    std::string variant;
    Config config;
    double median_us;
  };
  std::vector<Target> targets;
  if (options_.counters == CounterMode::winners && winner)
    targets.push_back({winner->variant, winner->config, winner->timing.median_us});
  if (options_.counters == CounterMode::all)
    for (const auto& r : records)
      if (r.status == CandidateStatus::ok && r.timing) targets.push_back({r.variant, r.config, r.timing->median_us});
  if (targets.empty()) return "";
  // The winner first: under a budget it is the one most worth its profile.
  if (winner)
    std::stable_partition(targets.begin(), targets.end(), [&](const Target& target) {
      return target.variant == winner->variant && target.config == winner->config;
    });

  const std::string key = planned.problem.key();
  int profiled = 0;
  std::size_t cut_for_budget = 0;
  std::string first_error;
  std::optional<counters::Values> winner_values;
  const double passes = static_cast<double>(worker_->counter_status().passes + 1);
  for (const auto& [variant_name, config, median_us] : targets) {
    if (g_interrupted) break;
    const bool is_winner = winner && winner->variant == variant_name && winner->config == config;
    counters::Values values = store_->counter_values(sweep_id_, key, variant_name, config.key());
    // Started only if it is predicted to end inside the share.
    const double kernel_s = passes * median_us * 1e-6;
    const double predicted_s = budget_ ? budget_->predicted_profile_s(kernel_s) : 0;
    if (values.empty() && Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(predicted_s)) > deadline) {
      ++cut_for_budget;
      continue;
    }
    if (values.empty()) {
      const Variant* variant = catalogue().find_variant(planned.problem.primitive, variant_name);
      if (!variant) continue;
      // Always cold: measured DRAM bytes are compared with what the cost model says must move.
      // Kernel replay runs the launch once per pass; a crash or hang is this profile's error.
      const Cost cost = catalogue().find_primitive(planned.problem.primitive)->cost(planned.problem);
      const double limit = candidate_time_limit_s(options_.measure, cost, 0) * passes;
      const auto t0 = Clock::now();
      const CounterProfile profile = worker_->profile(*variant, config, limit);
      if (budget_) budget_->observed_profile(std::chrono::duration<double>(Clock::now() - t0).count(), kernel_s);
      if (!counters_available()) break;
      if (!profile.ok()) {
        if (options_.verbose) say() << "    " << describe(variant_name, config) << ": no counters: " << profile.error << "\n";
        if (first_error.empty()) first_error = profile.error;
        continue;
      }
      values = std::move(profile.values);
      store_->record_counters({sweep_id_, key, variant_name, config.key(), values});
    }
    ++profiled;
    if (is_winner) winner_values = values;
  }
  worker_->disable_counters();
  if (!counters_available()) {
    report_counters_unavailable();
    return "counters unavailable";
  }
  if (g_interrupted) throw EndProblem{};

  const bool all = options_.counters == CounterMode::all;
  std::vector<std::string> parts;
  if (all) parts.push_back(std::to_string(profiled) + "/" + std::to_string(targets.size()) + " profiled");
  if (winner_values) {
    const std::string dram = counters::dram_vs_model_text(*winner_values, winner->cost.bytes);
    parts.push_back(std::string(all ? "winner " : "") + (dram.empty() ? "profiled" : "DRAM " + dram));
  } else if (!all) {
    parts.push_back("none (" + (cut_for_budget      ? std::string("cut for budget")
                                : first_error.empty() ? std::string("not profiled")
                                                      : first_error) +
                    ")");
  }
  if (all && cut_for_budget) parts.push_back(std::to_string(cut_for_budget) + " cut for budget");
  budget_cuts_.counters += static_cast<std::int64_t>(cut_for_budget);
  std::string text = "counters:";
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : " ") + parts[i];
  return text;
}

// Once per sweep, on the problems' stream and in the database; the sweep goes on without.
void Sweep::report_counters_unavailable() {
  if (!counters_on_ || counters_available() || counters_reported_) return;
  counters_reported_ = true;
  const std::string reason = worker_->counter_status().unavailable_reason;
  say() << "counters unavailable: " << reason << " (the sweep goes on without them)\n";
  store_->set_counters_unavailable(sweep_id_, reason);
}

void Sweep::print_candidate(const CandidateRecord& record) {
  say() << "    " << describe(record.variant, record.config) << ": " << candidate_status_name(record.status);
  if (record.timing) {
    out_ << " " << fmt_us(record.timing->median_us) << " (" << timing_mode_name(record.timing->mode) << ")";
    if (is_race_stop_reason(record.timing->stop_reason))
      out_ << " [" << record.timing->stop_reason << ", " << record.timing->samples << " samples]";
  }
  if (!record.reason.empty()) out_ << " — " << record.reason;
  out_ << "\n";
}

void Sweep::report_problem(const PlannedProblem& planned, const std::vector<CandidateRecord>& records,
                           const std::optional<WinnerRecord>& winner, double seconds, const std::string& search_summary,
                           std::size_t skipped_for_budget) {
  int counts[kCandidateStatusCount] = {};
  for (const auto& r : records) ++counts[static_cast<int>(r.status)];
  const Primitive& primitive = *catalogue().find_primitive(planned.problem.primitive);
  const Cost cost = primitive.cost(planned.problem);
  std::ostringstream line;
  line << "[" << index_ + 1 << "/" << count_ << "] " << planned.problem.key() << "  ";
  if (winner) {
    line << "best " << describe(winner->variant, winner->config) << " " << fmt_us(winner->timing.median_us) << " "
         << fmt_achieved(cost.bytes, cost.flops, winner->timing.median_us);
    if (winner->timing.mode != TimingMode::cold) line << " [" << timing_mode_name(winner->timing.mode) << "]";
    if (!winner->best_baseline.empty())
      line << " | " << winner->best_baseline << " " << fmt_us(winner->baseline_us) << " (x" << std::fixed
           << std::setprecision(2) << winner->speedup_vs_baseline << ")";
    if (winner->tie) line << " | tie with " << winner->runner_up_variant;
  } else {
    line << "NO ACCURATE CANDIDATE";
  }
  line << " | " << search_summary;
  line << " | " << counts[0] << " ok";
  if (counts[1]) line << ", " << counts[1] << " failed accuracy";
  if (counts[2]) line << ", " << counts[2] << " unsupported";
  if (counts[3]) line << ", " << counts[3] << " errors";
  if (const int faults = counts[static_cast<int>(CandidateStatus::crashed)] + counts[static_cast<int>(CandidateStatus::timeout)])
    line << ", " << faults << " crashed or hung";
  if (skipped_for_budget) line << ", " << skipped_for_budget << " over budget";
  line << " | " << std::fixed << std::setprecision(1) << seconds << " s";
  say() << line.str() << std::endl;
  for (const auto& r : records)
    if (r.status == CandidateStatus::failed_accuracy && r.baseline)
      warn() << "warning: baseline " << r.variant << " failed accuracy on " << planned.problem.key() << ": " << r.reason
           << "\n";
}

}  // namespace

std::optional<std::string> nothing_to_measure(const ShapeFile& file, const SweepOptions& options) {
  SweepOptions whole = options;
  whole.shard.reset();
  return unmeasurable(sweep_problems(file, whole), whole, nominal_device_limits(), "nominal sm_90 limits");
}

std::optional<CounterMode> parse_counter_mode(const std::string& text) {
  if (text == "none") return CounterMode::none;
  if (text == "winners") return CounterMode::winners;
  if (text == "all") return CounterMode::all;
  return std::nullopt;
}

const char* counter_mode_name(CounterMode mode) {
  switch (mode) {
    case CounterMode::none: return "none";
    case CounterMode::winners: return "winners";
    case CounterMode::all: return "all";
  }
  return "?";
}

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
  // Only when given, so that sweeps started before strategies existed can still be resumed;
  // the file's own `search:` settings are covered by its hash.
  if (o.strategy) s << ";strategy=" << search_strategy_name(*o.strategy);
  // Not result-affecting, but part of the sweep's identity: shard 1/2 resumes shard 1/2 only.
  if (o.shard) s << ";shard=" << o.shard->text();
  return s.str();
}

int run_sweep(const SweepOptions& options, std::ostream& out, std::ostream& err) {
  g_interrupted = false;
  return Sweep(options, out, err).run();
}

}  // namespace shapetune
