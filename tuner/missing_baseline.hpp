// A baseline that disappears is a warning: when a problem's candidates include baselines (the
// variants the catalogue marks as the bar: cuBLAS, cuDNN, an unfused chain) and none of them ran it,
// its winner has nothing to be compared with, and a speedup column left blank is easy to miss. The
// sweep names the problem and each baseline's reason on its error stream and counts such problems
// in its last line.
#pragma once

#include <string>
#include <vector>

#include "core/records.hpp"

namespace shapetune {

struct VariantFailure {
  std::string variant;
  std::string reason;  // "unsupported: needs f32"; for several configs a count per status: "8 unsupported (needs f32)"
};

// Each variant among `records` (one problem's candidates) that has no accurate full measurement,
// with why, in the order the variants first appear. Race rungs of halving do not count as
// measurements: only a full one can be a winner or a winner's baseline.
std::vector<VariantFailure> variants_without_measurement(const std::vector<CandidateRecord>& records);

// The baselines among `records`, each with why it gave no accurate full measurement; empty when
// no baseline was a candidate, or when one of them has such a measurement.
std::vector<VariantFailure> missing_baselines(const std::vector<CandidateRecord>& records);

// "cublas: unsupported: ...; cublaslt: 8 unsupported (...)"
std::string failures_text(const std::vector<VariantFailure>&);

// "warning: KEY: no baseline ran, so its winner is compared with none: cublas: ...; cublaslt: ..."
std::string missing_baselines_warning(const std::string& problem_key, const std::vector<VariantFailure>&);

}  // namespace shapetune
