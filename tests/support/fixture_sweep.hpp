// A stand-in for `shapetune sweep` on machines without a GPU: the same problems (the real shape
// file and --shard split), every variant's default config and baseline recorded as a real sweep
// records them, with synthetic medians derived from a hash of (problem, variant), so two runs
// give the same winners whatever their order or sharding. It exercises everything of scale-out
// that is not measurement: shards, resume, merge, winners recomputed, the parallel sweep's
// workers and the Slurm scripts. Never a measurement: its device is "Fixture GPU".
#pragma once

#include <optional>
#include <string>

#include "tuner/shard.hpp"

namespace shapetune::test_support {

struct FixtureSweep {
  std::string shape_file;
  std::string db_path;
  std::optional<ShardSpec> shard;
  // Testing a worker that dies: abort() after the first problem when `die_marker` names a file
  // that does not exist yet (it is created first, so the rerun of the shard goes through).
  std::string die_marker;
  // --json-progress: the events a real sweep writes (tuner/progress_events.hpp), counted in the
  // cost model's expected seconds as a sweep counts them, so the parallel sweep's progress can be
  // tested end to end.
  std::string json_progress;
};

// Returns the exit code, as `shapetune sweep` does (0, or 2 for a bad shape file or database).
int run_fixture_sweep(const FixtureSweep&, std::string* error = nullptr);

}  // namespace shapetune::test_support
