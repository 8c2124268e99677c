// The sweep driver: shape file -> problems -> candidates -> verify, time -> store -> winners.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "harness/measure.hpp"
#include "tuner/search.hpp"
#include "tuner/shard.hpp"

namespace shapetune {

// Which candidates get their hardware counters read (once each, after their timing).
enum class CounterMode { none, winners, all };
inline constexpr const char* kCounterModeNames = "all, winners or none";
std::optional<CounterMode> parse_counter_mode(const std::string&);
const char* counter_mode_name(CounterMode);

struct SweepOptions {
  std::string shape_file;
  std::string db_path;
  std::vector<std::string> primitives;  // empty: all in the file
  std::vector<std::string> variants;    // empty: all (as the file allows)
  double budget_s = 0;                  // whole-sweep wall-clock budget; 0: none
  // Replaces every matrix's search strategy; a matrix whose `search:` names the same one
  // keeps its settings (eta, samples, ...), the others get the strategy's defaults.
  std::optional<SearchStrategy> strategy;
  MeasureOptions measure;
  // Profiled with CUPTI after timing: each problem's winner (default), every accurate
  // candidate, or none. Not result-affecting: profiling happens after all of a problem's timing.
  CounterMode counters = CounterMode::winners;
  std::vector<std::string> extra_metrics;  // --metrics: collected besides the default set
  // Only this shard of the (selected) problems, split by expected time: N processes given
  // 1/N..N/N sweep every problem once. Part of the sweep's identity, so a shard resumes itself.
  std::optional<ShardSpec> shard;
  bool fresh = false;                   // start a new sweep even if an unfinished one matches
  bool dry_run = false;                 // list problems and candidates; no GPU needed
  bool verbose = false;                 // one line per candidate
  int device = 0;
  std::optional<std::uint64_t> seed;    // input seed; random when absent
  std::string command_line;             // recorded with the sweep
};

// Runs a sweep, printing progress to `out` and problems to `err`. Returns the exit code:
// 0 done, 1 a failure during the sweep (lost CUDA context, store error), 2 could not start
// (bad shape file, no CUDA device, unusable database), 130 interrupted (Ctrl-C; resumable).
int run_sweep(const SweepOptions&, std::ostream& out, std::ostream& err);

struct ShapeFile;
struct PlannedProblem;
// The problems a sweep with these options measures, in file order: those of the chosen
// primitives, then, with options.shard, that shard's part of them.
std::vector<const PlannedProblem*> sweep_problems(const ShapeFile&, const SweepOptions&);

// The canonical text of the options that change results (what makes two sweeps the same).
std::string result_affecting_options(const SweepOptions&);

}  // namespace shapetune
