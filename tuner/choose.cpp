#include "tuner/choose.hpp"

#include <algorithm>

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

}  // namespace shapetune
