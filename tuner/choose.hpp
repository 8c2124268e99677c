// Choosing a problem's winner from its measured candidates: the fastest accurate one, with the
// best library baseline, the runner-up and whether the lead is inside the noise.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/records.hpp"

namespace shapetune {

// Below this relative margin two medians are a tie even when their confidence intervals
// are tight: repeated cold measurements of one kernel drift by about this much between runs.
constexpr double kNoiseFloorRel = 0.01;

// nullopt when no candidate is accurate. device_key, git_sha and measured_at are left for the
// caller to fill.
std::optional<WinnerRecord> choose_winner(const std::vector<CandidateRecord>& candidates);

// One sweep's measurements of a problem, the L2 mode its timings were taken in and the build
// that took them.
struct SweepMeasurements {
  std::string l2;  // l2_mode_of the sweep's options
  std::vector<CandidateRecord> records;
  std::string git_sha{};
};

// "hot" when a sweep's options text says l2=hot, else "cold" (sweeps flushed L2 before the
// option was recorded).
std::string l2_mode_of(const std::string& sweep_options);

// What a problem's dispatch row is chosen from (choose_winner): of the sweeps that finished the
// problem, newest first, those timed in the newest one's L2 mode (hot and cold times do not
// compare); of those, each (variant, config)'s newest record, kept when it is a full measurement.
// So a later sweep of fewer variants or configs (a --variant filter, a search that passed a
// config by) cannot make the table slower, and a config measured again counts as last measured.
// Configs compare as `as_run` keys them: with the catalogue's completed_config_key, as this build
// runs them (a parameter the variant gained since takes its default); empty, as recorded.
using ConfigAsRun = std::function<std::string(const CandidateRecord&)>;
std::vector<CandidateRecord> newest_measurements(const std::vector<SweepMeasurements>& newest_first,
                                                 const ConfigAsRun& as_run = {});

// A problem's dispatch row: choose_winner over newest_measurements, with the git sha of the
// sweep that measured it and the time it was measured. nullopt when no candidate is accurate;
// device_key, cost and library_algo are left for the caller.
std::optional<WinnerRecord> choose_row(const std::vector<SweepMeasurements>& newest_first,
                                       const ConfigAsRun& as_run = {});

}  // namespace shapetune
