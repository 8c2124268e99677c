// Combining databases swept apart (shards on several GPUs, Slurm array tasks, other machines)
// into one dispatch table: every row kept with its provenance (db/store's merge_from), then each
// (device, problem)'s winner recomputed from the merged candidates.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "tuner/choose.hpp"

namespace shapetune {

class Store;

struct WinnerRefresh {
  std::int64_t problems = 0;  // (device, problem) pairs with a finished sweep
  std::int64_t changed = 0;   // rows written because the table held another winner, or none
};

// The cost model a rewritten winner is stored with (catalogue_cost, or none: NaN).
using CostModel = std::function<Cost(const Problem&)>;

// For every device and problem, the winner chosen as a sweep chooses it (choose_winner) from the
// newest measurements of the sweeps that finished the problem (Store::done_sweeps,
// newest_measurements, configs keyed by as_run). A row already naming that sweep, variant and
// config is left as it is, so refreshing twice changes nothing. A problem none of whose candidates
// was accurate keeps whatever row it had.
WinnerRefresh recompute_winners(Store&, const CostModel& cost = {}, const ConfigAsRun& as_run = {});

// `shapetune merge OUT IN...`: OUT is created if missing. Returns the exit code: 0 merged,
// 2 an input or OUT could not be read or written (inputs before it stay merged; merging is
// idempotent, so the same command can simply be run again).
int run_merge(const std::string& output, const std::vector<std::string>& inputs, const CostModel& cost,
              const ConfigAsRun& as_run, std::ostream& out, std::ostream& err);

}  // namespace shapetune
