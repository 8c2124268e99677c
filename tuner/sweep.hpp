// The sweep driver: shape file -> problems -> candidates -> verify, time -> store -> winners.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "harness/measure.hpp"
#include "tuner/search.hpp"

namespace shapetune {

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

// The canonical text of the options that change results (what makes two sweeps the same).
std::string result_affecting_options(const SweepOptions&);

}  // namespace shapetune
