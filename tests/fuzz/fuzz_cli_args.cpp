// libFuzzer target: command lines. The input is split at NUL bytes into arguments and parsed
// against a command with every kind of option the verbs declare; each option is then read as a
// number and as an integer with the ranges the verbs use, and list options are split. Any
// arguments either parse or raise UsageError; a number that comes back is finite and in range.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "tuner/search.hpp"

using shapetune::cli::CommandSpec;
using shapetune::cli::UsageError;

namespace {

const CommandSpec& command() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "sweep";
    s.summary = "fuzzed";
    s.positionals = "FILE.yaml";
    s.min_positional = 0;
    s.max_positional = 2;
    s.options = {{"db", 0, "FILE", "database"},
                 {"budget", 0, "SECONDS", "budget"},
                 {"device", 'd', "N", "device"},
                 {"seed", 0, "N", "seed"},
                 {"time-cap", 0, "SECONDS", "time cap"},
                 {"target-ci", 0, "FRACTION", "target ci"},
                 {"min-samples", 0, "N", "min samples"},
                 {"max-samples", 0, "N", "max samples"},
                 {"variant", 0, "NAME[,NAME]", "variants", true},
                 {"search", 0, "STRATEGY", "search"},
                 {"dry-run", 'n', "", "flag"},
                 {"output", 'o', "FILE", "output"}};
    return s;
  }();
  return spec;
}

struct Range {
  const char* name;
  double min, max;
};

// The ranges the verbs give ParsedArgs::number and ::integer (cli/cli.cpp, cli/measure_options.cpp).
constexpr Range kNumbers[] = {{"budget", 0, 1e7}, {"time-cap", 0.001, 3600}, {"target-ci", 1e-5, 1}, {"device", 0, 1024}};
constexpr Range kIntegers[] = {{"device", 0, 1024}, {"min-samples", 6, 1000000}, {"max-samples", 6, 10000000}};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      args.emplace_back();
    else
      args.back().push_back(static_cast<char>(data[i]));
  }
  try {
    const auto parsed = shapetune::cli::parse(command(), args);
    (void)shapetune::cli::help_text(command());
    for (const auto& [name, min, max] : kNumbers) {
      try {
        const double v = parsed.number(name, min, min, max);
        if (!std::isfinite(v) || v < min || v > max) std::abort();
      } catch (const UsageError&) {
      }
    }
    for (const auto& [name, min, max] : kIntegers) {
      try {
        const long long v = parsed.integer(name, static_cast<long long>(min), static_cast<long long>(min),
                                           static_cast<long long>(max));
        if (v < min || v > max) std::abort();
      } catch (const UsageError&) {
      }
    }
    try {
      (void)parsed.integer("seed", 0, 0, std::numeric_limits<std::int64_t>::max());
    } catch (const UsageError&) {
    }
    for (const auto& item : shapetune::cli::split_comma_lists(parsed.values("variant")))
      if (item.empty() || item.find(',') != std::string::npos) std::abort();
    if (const auto strategy = parsed.value("search")) (void)shapetune::parse_search_strategy(*strategy);
  } catch (const UsageError&) {
  }
  return 0;
}
