// The measurement options `shapetune sweep` and `shapetune-bench` share (--hot, --time-cap,
// --target-ci, --min-samples, --max-samples): declared once, parsed once.
#pragma once

#include <string>
#include <vector>

#include "cli/args.hpp"
#include "harness/measure.hpp"

namespace shapetune::cli {

// `what` names one measured thing in the help text: "candidate", "measurement".
std::vector<OptionSpec> measurement_option_specs(const std::string& what);

// Applies the options present in `a` over `o`'s values (which are the defaults).
void apply_measurement_options(const ParsedArgs& a, MeasureOptions& o);

}  // namespace shapetune::cli
