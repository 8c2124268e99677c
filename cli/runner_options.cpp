#include "cli/runner_options.hpp"

#include <string>

namespace shapetune::cli {

std::vector<OptionSpec> runner_option_specs() {
  return {{"db", 0, "FILE",
           "the database whose winners of this device are dispatched (without it: every problem takes its "
           "primitive's default variant)"},
          {"dispatch", 0, "tuned|library",
           "tuned: the dispatch table (default); library: the cuBLAS/cuBLASLt/cuDNN baselines, for comparison"},
          {"device", 0, "N", "CUDA device ordinal (default 0)"}};
}

RunnerOptions parse_runner_options(const ParsedArgs& a) {
  RunnerOptions options;
  if (auto db = a.value("db")) options.db_path = *db;
  const std::string dispatch = a.value("dispatch").value_or("tuned");
  const auto mode = parse_dispatch_mode(dispatch);
  if (!mode) throw UsageError("--dispatch must be tuned or library, got '" + dispatch + "'");
  options.dispatch = *mode;
  options.device = static_cast<int>(a.integer("device", 0, 0, 1024));
  return options;
}

}  // namespace shapetune::cli
