#include "tuner/choose.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "tuner/search.hpp"

namespace shapetune {

std::optional<WinnerRecord> choose_winner(const std::vector<CandidateRecord>& candidates) {
  std::vector<const CandidateRecord*> accurate;
  for (const auto& c : candidates)
    if (c.status == CandidateStatus::ok && c.timing) accurate.push_back(&c);
  if (accurate.empty()) return std::nullopt;
  std::stable_sort(accurate.begin(), accurate.end(), [](const CandidateRecord* a, const CandidateRecord* b) {
    return a->timing->median_us < b->timing->median_us;
  });

  const CandidateRecord& best = *accurate.front();
  WinnerRecord w;
  w.problem = best.problem;
  w.variant = best.variant;
  w.config = best.config;
  w.baseline = best.baseline;
  w.timing = *best.timing;
  w.tolerance = best.tolerance;
  w.sweep_id = best.sweep_id;

  const auto baseline = std::find_if(accurate.begin(), accurate.end(), [](const auto* c) { return c->baseline; });
  if (baseline != accurate.end()) {
    w.best_baseline = (*baseline)->variant;
    w.baseline_us = (*baseline)->timing->median_us;
    w.speedup_vs_baseline = w.baseline_us / w.timing.median_us;
  }
  if (accurate.size() > 1) {
    const CandidateRecord& second = *accurate[1];
    w.runner_up_variant = second.variant;
    w.runner_up_config = second.config;
    w.runner_up_us = second.timing->median_us;
    w.margin_rel = w.runner_up_us / w.timing.median_us - 1;
    const double noise = std::max(kNoiseFloorRel, w.timing.median_ci_rel + second.timing->median_ci_rel);
    w.tie = w.margin_rel <= noise;
  }
  return w;
}

std::string l2_mode_of(const std::string& sweep_options) {
  const std::string hot = "l2=hot";
  const auto at = sweep_options.find(hot);
  const bool named = at != std::string::npos && (at == 0 || sweep_options[at - 1] == ';') &&
                     (at + hot.size() == sweep_options.size() || sweep_options[at + hot.size()] == ';');
  return named ? "hot" : "cold";
}

std::vector<CandidateRecord> newest_measurements(const std::vector<SweepMeasurements>& newest_first,
                                                 const ConfigAsRun& as_run) {
  std::vector<CandidateRecord> pool;
  if (newest_first.empty()) return pool;
  std::set<std::pair<std::string, std::string>> seen;
  for (const SweepMeasurements& sweep : newest_first) {
    if (sweep.l2 != newest_first.front().l2) continue;
    for (const CandidateRecord& r : sweep.records)
      if (seen.emplace(r.variant, as_run ? as_run(r) : r.config.key()).second) pool.push_back(r);
  }
  return full_measurements(std::move(pool));
}

std::optional<WinnerRecord> choose_row(const std::vector<SweepMeasurements>& newest_first, const ConfigAsRun& as_run) {
  const std::vector<CandidateRecord> pool = newest_measurements(newest_first, as_run);
  std::optional<WinnerRecord> row = choose_winner(pool);
  if (!row) return row;
  for (const SweepMeasurements& sweep : newest_first)
    if (!sweep.records.empty() && sweep.records.front().sweep_id == row->sweep_id) row->git_sha = sweep.git_sha;
  for (const CandidateRecord& r : pool)
    if (r.sweep_id == row->sweep_id && r.variant == row->variant && r.config == row->config)
      row->measured_at = r.measured_at;
  return row;
}

}  // namespace shapetune
