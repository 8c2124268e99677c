// The options every model runner takes, `shapetune run` and `shapetune train` alike (--db,
// --dispatch, --device): declared once, parsed once.
#pragma once

#include <vector>

#include "cli/args.hpp"
#include "models/runner.hpp"

namespace shapetune::cli {

std::vector<OptionSpec> runner_option_specs();

// The options present in `a` (UsageError for a bad --dispatch); defaults: no database, tuned, device 0.
RunnerOptions parse_runner_options(const ParsedArgs& a);

}  // namespace shapetune::cli
