#include "cli/measure_options.hpp"

namespace shapetune::cli {

std::vector<OptionSpec> measurement_option_specs(const std::string& what) {
  return {{"hot", 0, "", "do not flush L2 between samples (default: cold, flushed)"},
          {"time-cap", 0, "SECONDS", "sampling time cap per " + what + " (default 1)"},
          {"target-ci", 0, "FRACTION", "stop sampling once the median's 95% CI is within this (default 0.01)"},
          {"min-samples", 0, "N", "samples every " + what + " gets at least (default 10)"},
          {"max-samples", 0, "N", "samples no " + what + " gets more of (default 1000)"},
          {"candidate-timeout", 0, "SECONDS",
           "kill a " + what + " still running after this long and record it as timeout (default: derived from its "
           "cost model and the baseline's time, at least 20 s)"}};
}

void apply_measurement_options(const ParsedArgs& a, MeasureOptions& o) {
  o.flush_l2 = !a.has("hot");
  o.stop.time_cap_s = a.number("time-cap", o.stop.time_cap_s, 0.001, 3600);
  o.stop.target_ci_rel = a.number("target-ci", o.stop.target_ci_rel, 1e-5, 1);
  o.stop.min_samples = static_cast<int>(a.integer("min-samples", o.stop.min_samples, 6, 1000000));
  o.stop.max_samples = static_cast<int>(a.integer("max-samples", o.stop.max_samples, o.stop.min_samples, 10000000));
  o.candidate_timeout_s = a.number("candidate-timeout", 0, 0.1, 86400);
}

}  // namespace shapetune::cli
