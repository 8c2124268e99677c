// shapetune-bench: every (problem, variant, config) of a YAML shape matrix as a Google
// Benchmark case, timed by the sweep's measurement engine, so that --benchmark_filter,
// --benchmark_format=json and Google Benchmark's compare.py work on shapetune's numbers.
//
// What one benchmark run is: one full Measurer measurement (warm-up, the timing mode the sweep
// would pick, L2 flushed before each sample unless --hot, adaptive stopping), reported as ONE
// iteration whose manual time is that measurement's median. Google Benchmark cannot take the
// samples themselves as its iterations: it fixes the iteration count before the loop, while
// the engine decides its sample count as it goes, and a graph-batch sample is already an
// average over many launches. --benchmark_repetitions=N therefore means N independent
// measurements, and its mean/median/stddev aggregates (and compare.py's U test) are over
// measurement medians. --benchmark_min_time has no effect: the engine's stopping rule governs.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.hpp"
#include "cli/measure_options.hpp"
#include "core/build_info.hpp"
#include "core/format.hpp"
#include "harness/device.hpp"
#include "harness/gpu_worker.hpp"
#include "tuner/bench_cases.hpp"
#include "variants/catalogue.hpp"

namespace {

using namespace shapetune;

// Fixed by default, unlike a sweep's: two runs compared by name should time the same inputs.
constexpr std::uint64_t kDefaultSeed = 1;

cli::CommandSpec bench_spec() {
  cli::CommandSpec spec{"shapetune-bench",
          "Run every (problem, variant, config) of a YAML shape matrix as a Google Benchmark case, verified against "
          "the float64 reference and timed by the same measurement engine as `shapetune sweep`.",
          "SHAPES.yaml",
          1,
          1,
          {{"primitive", 0, "P", "only this primitive (repeatable, or a comma list)", true},
           {"variant", 0, "V", "only this variant (repeatable, or a comma list); baselines are variants too", true},
           {"all-configs", 0, "", "every config of each variant's parameter space (default: its default config)"},
           {"device", 0, "N", "CUDA device ordinal (default 0)"},
           {"seed", 0, "N", "seed for the random inputs (default 1, so that runs compare)"}},
          "Cases are named PROBLEM_KEY/VARIANT{CONFIG}, e.g.\n"
          "  softmax/f32/rows=4096,cols=4096/register_row{threads_per_row=32,block_size=256,packs_per_thread=4}\n"
          "Candidates that supports() refuses are not registered (without a GPU: judged under nominal sm_90 limits).\n"
          "Google Benchmark's own flags (--benchmark_*) pass through, e.g.\n"
          "  --benchmark_list_tests             list the cases (needs no GPU)\n"
          "  --benchmark_filter=REGEX           only matching cases; match { and } with . (the regex rejects \\{)\n"
          "  --benchmark_format=json            or --benchmark_out=FILE --benchmark_out_format=json\n"
          "  --benchmark_repetitions=N          N independent measurements per case, with aggregates\n"
          "Each run of a case is one full measurement (cold L2, adaptive stopping), reported as one iteration whose\n"
          "manual time is its median; the CPU column means nothing here. Counters: bytes_per_second and\n"
          "flop_per_second (from the primitive's cost model), p10_us, p90_us, min_us, median_ci_pct (95% CI of the\n"
          "median, % of it), samples, launches_per_sample, max_abs_error and max_rel_error (against the float64\n"
          "reference); the label names the timing mode and why sampling stopped. A case that fails verification, is\n"
          "refused by a library, or has no device is skipped with the reason (error_message in JSON).\n"
          "Exit codes: 0 every case run measured; 1 some case skipped with an error; 2 could not start."};
  const auto shared = cli::measurement_option_specs("measurement");
  spec.options.insert(spec.options.begin() + 3, shared.begin(), shared.end());  // after --all-configs
  return spec;
}

bool is_benchmark_flag(std::string_view arg) {
  return arg.starts_with("--benchmark_") || arg.starts_with("-benchmark_") || arg == "--v" || arg.starts_with("--v=");
}

std::string describe_timing(const TimingStats& t) {
  std::string label(timing_mode_name(t.mode));
  if (t.launches_per_sample > 1)
    label += " (" + std::to_string(t.launches_per_sample) + " launches/sample over " + std::to_string(t.input_sets) +
             " input sets)";
  if (t.state_restored) label += ", state restored";
  return label + ", " + t.stop_reason;
}

void run_case(benchmark::State& state, BenchSession& session, const BenchCase& c, int& skipped) {
  CandidateOutcome outcome;
  try {
    outcome = session.measure(c);
  } catch (const std::exception& e) {
    outcome.status = CandidateStatus::error;
    outcome.reason = e.what();
  }
  if (outcome.status != CandidateStatus::ok || !outcome.timing) {
    ++skipped;
    const std::string why = outcome.status == CandidateStatus::error
                                ? outcome.reason
                                : std::string(candidate_status_name(outcome.status)) + ": " + outcome.reason;
    state.SkipWithError(why.c_str());
    return;
  }
  const TimingStats& t = *outcome.timing;
  for (auto _ : state) state.SetIterationTime(t.median_us * 1e-6);

  const Cost cost = catalogue().find_primitive(c.problem.primitive)->cost(c.problem);
  state.SetBytesProcessed(static_cast<std::int64_t>(cost.bytes) * state.iterations());
  if (cost.flops > 0)
    state.counters["flop_per_second"] = benchmark::Counter(cost.flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["p10_us"] = t.p10_us;
  state.counters["p90_us"] = t.p90_us;
  state.counters["min_us"] = t.min_us;
  state.counters["median_ci_pct"] = 100 * t.median_ci_rel;
  state.counters["samples"] = t.samples;
  state.counters["launches_per_sample"] = t.launches_per_sample;
  if (outcome.accuracy) {
    state.counters["max_abs_error"] = outcome.accuracy->max_abs_error;
    state.counters["max_rel_error"] = outcome.accuracy->max_rel_error;
  }
  state.SetLabel(describe_timing(t));
}

int bench_main(int argc, char** argv) {
  const cli::CommandSpec spec = bench_spec();
  std::vector<std::string> ours;
  std::vector<char*> theirs{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (is_benchmark_flag(argv[i])) theirs.push_back(argv[i]);
    else ours.emplace_back(argv[i]);
  }

  cli::ParsedArgs args;
  BenchSelection selection;
  MeasureOptions measure;
  int ordinal = 0;
  std::uint64_t seed = kDefaultSeed;
  try {
    args = cli::parse(spec, ours);
    if (args.has("help")) {
      std::cout << cli::help_text(spec);
      return 0;
    }
    selection.primitives = cli::split_comma_lists(args.values("primitive"));
    selection.variants = cli::split_comma_lists(args.values("variant"));
    selection.all_configs = args.has("all-configs");
    cli::apply_measurement_options(args, measure);
    ordinal = static_cast<int>(args.integer("device", 0, 0, 1024));
    seed = static_cast<std::uint64_t>(args.integer("seed", kDefaultSeed, 0, INT64_MAX));
  } catch (const cli::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }

  int their_argc = static_cast<int>(theirs.size());
  theirs.push_back(nullptr);
  benchmark::Initialize(&their_argc, theirs.data());
  if (benchmark::ReportUnrecognizedArguments(their_argc, theirs.data())) return 2;

  const std::string& path = args.positional[0];
  ShapeFile file;
  try {
    file = load_shape_file(path, catalogue());
  } catch (const ShapeFileError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }

  // Registration needs the limits supports() is judged by: the device's, or nominal ones.
  DeviceLimits limits = nominal_device_limits();
  const std::optional<std::string> no_device = cuda_unavailable_reason();
  if (!no_device) {
    try {
      const std::vector<DeviceInfo> devices = list_devices();
      if (ordinal >= static_cast<int>(devices.size())) {
        std::cerr << "error: --device " << ordinal << " does not exist; " << devices.size() << " visible\n";
        return 2;
      }
      const DeviceInfo& device = devices[static_cast<std::size_t>(ordinal)];
      limits = device.limits;
      benchmark::AddCustomContext("device", device.fingerprint.name);
      benchmark::AddCustomContext("device_key", device.fingerprint.key());
    } catch (const std::exception& e) {
      std::cerr << "error: cannot read device " << ordinal << ": " << e.what() << "\n";
      return 2;
    }
  }

  std::vector<BenchCase> cases;
  try {
    cases = expand_bench_cases(file, selection, limits);
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (cases.empty()) {
    std::cerr << "error: " << path << ": no case selected (check --primitive and --variant against the file)\n";
    return 2;
  }
  if (no_device)
    std::cerr << "note: no usable CUDA device (" << *no_device
              << "): cases are those supports() accepts under nominal sm_90 limits, and running one skips it.\n";

  std::ostringstream timing;
  timing << (measure.flush_l2 ? "cold L2" : "hot L2") << ", min " << measure.stop.min_samples << " max "
         << measure.stop.max_samples << " samples, target CI " << measure.stop.target_ci_rel << ", time cap "
         << measure.stop.time_cap_s << " s";
  benchmark::AddCustomContext("shapetune_build", build_git_sha());
  benchmark::AddCustomContext("shape_file", path);
  benchmark::AddCustomContext("shape_file_sha256", file.sha256);
  benchmark::AddCustomContext("measurement", timing.str());
  benchmark::AddCustomContext("input_seed", std::to_string(seed));

  BenchSession session(measure, ordinal, seed);
  int skipped = 0;
  for (const BenchCase& c : cases)
    benchmark::RegisterBenchmark(c.name.c_str(),
                                 [&session, &c, &skipped](benchmark::State& state) { run_case(state, session, c, skipped); })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMicrosecond);
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Exit codes as the shapetune command's: 2 for input that selects nothing or no device to run
  // on, 1 for cases that ran and were skipped (refused, inaccurate, failed), 0 for all measured.
  if (ran == 0) {
    std::cerr << "error: no case ran: --benchmark_filter matched none of the " << cases.size()
              << " cases (or is not a valid regular expression); names look like '" << cases.front().name
              << "/iterations:1/manual_time'\n";
    return 2;
  }
  if (no_device) return 2;
  return skipped > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  shapetune::serve_gpu_worker_if_asked();  // when this process is the GPU worker, it ends here
  return bench_main(argc, argv);
}
