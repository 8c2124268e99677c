// Choosing a problem's winner from its measured candidates: the fastest accurate one, with the
// best library baseline, the runner-up and whether the lead is inside the noise.
#pragma once

#include <optional>
#include <vector>

#include "core/records.hpp"

namespace shapetune {

// Below this relative margin two medians are a tie even when their confidence intervals
// are tight: repeated cold measurements of one kernel drift by about this much between runs.
constexpr double kNoiseFloorRel = 0.01;

// nullopt when no candidate is accurate. device_key, git_sha and measured_at are left for the
// caller to fill.
std::optional<WinnerRecord> choose_winner(const std::vector<CandidateRecord>& candidates);

}  // namespace shapetune
