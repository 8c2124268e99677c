// The sweep driver: shape file -> problems -> candidates -> verify, time -> store -> winners.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "harness/measure.hpp"
#include "tuner/progress.hpp"
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
  // The progress line on the error stream (tuner/progress.hpp): redrawn in place on a terminal,
  // a plain line every progress_interval_s in a log, or none (the default for callers other than
  // the command line, whose error stream is no terminal).
  ProgressStyle progress = ProgressStyle::none;
  double progress_interval_s = ProgressLine::kDefaultPlainIntervalS;
  std::size_t progress_columns = 0;     // the terminal's width: a redrawn line must not wrap
  // --json-progress: the events of tuner/progress_events.hpp, to this file ("-": the error stream).
  std::string json_progress;
  int device = 0;
  std::optional<std::uint64_t> seed;    // input seed; random when absent
  std::string command_line;             // recorded with the sweep
};

// Runs a sweep, printing each problem's line to `out`, and warnings, errors and the progress line
// to `err`. Returns the exit code: 0 done; 1 a failure during the sweep (lost CUDA context, store
// error) or nothing measured at all (every candidate of every problem failed, crashed or was
// refused); 2 could not start (bad shape file, no CUDA device, unusable database, filters that
// leave no candidate any problem's variants support on this device); 130 interrupted (Ctrl-C;
// resumable).
int run_sweep(const SweepOptions&, std::ostream& out, std::ostream& err);

struct ShapeFile;
struct PlannedProblem;
// The problems a sweep with these options measures, in file order: those of the chosen
// primitives, then, with options.shard, that shard's part of them.
std::vector<const PlannedProblem*> sweep_problems(const ShapeFile&, const SweepOptions&);

// A problem's candidates (variant, config) in the order a sweep measures them: the baselines,
// then each variant's default config in the order dispatch falls back through them (the
// primitive's default variant first), then every other config. The configs are all the
// variants' parameters enumerate; supports() filters them later.
std::vector<std::pair<std::string, Config>> measuring_order(const PlannedProblem&,
                                                            const std::vector<std::string>& cli_variants);

// What the cost model expects a problem to take on a GPU: its inputs and float64 reference on the
// host, then each candidate supports() accepts under `limits`. Shards are split by it (at nominal
// limits, so that every process agrees) and progress is counted in it.
struct ExpectedProblemTime {
  double setup_s = 0;
  double per_candidate_s = 0;
  int supported = 0;
  double total_s() const { return setup_s + supported * per_candidate_s; }
};
ExpectedProblemTime expected_problem_time(const PlannedProblem&, const std::vector<std::string>& cli_variants,
                                          const MeasureOptions&, const DeviceLimits&);

// Why not one problem of the sweep (every shard of it) has a candidate that supports() accepts at
// nominal limits, naming the first few problems' reasons; nullopt when one has. A sweep refuses
// to start on that (exit 2) with its device's limits; --devices checks it before any worker
// starts, since each worker sees only its shard, where it is a warning.
std::optional<std::string> nothing_to_measure(const ShapeFile&, const SweepOptions&);

// The expected seconds of each of `count` shards of the sweep (element k-1: shard k/count), split
// as --shard splits it; options.shard is ignored.
std::vector<double> expected_shard_s(const ShapeFile&, const SweepOptions&, int count);

// The canonical text of the options that change results (what makes two sweeps the same).
std::string result_affecting_options(const SweepOptions&);

}  // namespace shapetune
