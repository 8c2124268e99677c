#include "tuner/bench_cases.hpp"

#include <algorithm>
#include <stdexcept>

#include "harness/device.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

bool listed(const std::vector<std::string>& list, const std::string& name) {
  return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
}

void check_names(const BenchSelection& selection) {
  const Catalogue& cat = catalogue();
  for (const auto& p : selection.primitives)
    if (!cat.find_primitive(p))
      throw std::invalid_argument("unknown primitive '" + p + "'; known: " + cat.primitive_names());
  for (const auto& v : selection.variants) {
    bool found = false;
    std::string known;
    for (const Primitive* p : cat.primitives()) {
      if (!listed(selection.primitives, p->name)) continue;
      found = found || cat.find_variant(p->name, v);
      known += (known.empty() ? "" : "; ") + p->name + ": " + cat.variant_names(p->name);
    }
    if (!found) throw std::invalid_argument("unknown variant '" + v + "'; known variants: " + known);
  }
}

}  // namespace

std::string bench_case_name(const Problem& problem, const Variant& variant, const Config& config) {
  const std::string candidate = config.values().empty() ? variant.name : variant.name + "{" + config.key() + "}";
  return problem.key() + "/" + candidate;
}

std::vector<BenchCase> expand_bench_cases(const ShapeFile& file, const BenchSelection& selection,
                                          const DeviceLimits& limits) {
  check_names(selection);
  std::vector<BenchCase> cases;
  for (const PlannedProblem& planned : file.problems) {
    const Problem& problem = planned.problem;
    if (!listed(selection.primitives, problem.primitive)) continue;
    for (const Variant* v : catalogue().variants(problem.primitive)) {
      if (!listed(planned.variants, v->name) || !listed(selection.variants, v->name)) continue;
      std::vector<Config> configs{v->default_config};
      if (selection.all_configs)
        for (Config& c : v->params.enumerate())
          if (!(c == v->default_config)) configs.push_back(std::move(c));
      for (Config& c : configs)
        if (v->supports(problem, c, limits).ok)
          cases.push_back({bench_case_name(problem, *v, c), problem, planned.tolerance, v, std::move(c)});
    }
  }
  return cases;
}

BenchSession::BenchSession(MeasureOptions options, int device_ordinal, std::uint64_t seed)
    : options_(options), ordinal_(device_ordinal), seed_(seed) {}

BenchSession::~BenchSession() = default;

CandidateOutcome BenchSession::fail(CandidateStatus status, std::string reason) const {
  CandidateOutcome out;
  out.status = status;
  out.reason = std::move(reason);
  return out;
}

// The worker and its device, on the first measurement: listing cases needs neither.
std::optional<std::string> BenchSession::start() {
  if (worker_) return std::nullopt;
  auto worker = std::make_unique<GpuWorker>(ordinal_, options_);
  try {
    if (auto why = worker->start()) return "no usable CUDA device: " + *why;
  } catch (const std::exception& e) {
    return std::string("cannot start measuring on device ") + std::to_string(ordinal_) + ": " + e.what();
  }
  device_ = worker->device();
  worker_ = std::move(worker);
  return std::nullopt;
}

CandidateOutcome BenchSession::measure(const BenchCase& c) {
  if (!unusable_) unusable_ = start();
  if (unusable_) return fail(CandidateStatus::error, *unusable_);

  const Primitive& primitive = *catalogue().find_primitive(c.problem.primitive);
  try {
    if (!open_ || !(*open_ == c.problem)) {
      open_.reset();
      verified_.clear();
      if (auto why = worker_->open_problem(c.problem, seed_)) return fail(CandidateStatus::skipped, *why);
      open_ = c.problem;
    }
    // Verified once per problem's inputs; later measurements only time (and re-check the
    // outputs of the timed launches, as every full measurement does).
    const auto earlier = verified_.find(c.name);
    MeasureSteps steps;
    steps.verify = earlier == verified_.end();
    const double limit = candidate_time_limit_s(options_, primitive.cost(c.problem), 0);
    CandidateOutcome outcome = worker_->measure(*c.variant, c.config, c.tolerance, steps, limit);
    if (steps.verify && outcome.accuracy && outcome.status == CandidateStatus::ok)
      verified_.emplace(c.name, *outcome.accuracy);
    if (!outcome.accuracy && earlier != verified_.end()) outcome.accuracy = earlier->second;
    return outcome;
  } catch (const WorkerError& e) {
    unusable_ = e.what();
    return fail(CandidateStatus::error, e.what());
  }
}

}  // namespace shapetune
