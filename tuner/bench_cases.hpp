// The cases `shapetune-bench` hands to Google Benchmark, and the session that measures them
// with the sweep's engine. Nothing here knows Google Benchmark: the front end
// (cli/main/shapetune_bench_main.cpp) turns each case into a benchmark and each measurement
// into its manual time and counters, so this half is tested without it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/gpu_worker.hpp"
#include "harness/measure.hpp"
#include "tuner/shape_file.hpp"

namespace shapetune {

struct BenchSelection {
  std::vector<std::string> primitives;  // empty: every primitive of the file
  std::vector<std::string> variants;    // empty: every variant the file allows; baselines are variants
  // false: each variant's default_config, the config dispatch falls back to; true: every
  // config of each variant's parameter space (what an exhaustive sweep would measure).
  bool all_configs = false;
};

// One (problem, variant, config) of a shape file.
struct BenchCase {
  // "softmax/f32/rows=4096,cols=4096/register_row{threads_per_row=32,block_size=256,packs_per_thread=4}":
  // the problem's dispatch key, then the candidate as the sweep prints it. Stable across runs
  // and builds as long as the file, the catalogue and its axis order are, so Google Benchmark's
  // comparison tooling can pair runs by name.
  std::string name;
  Problem problem;
  Tolerance tolerance;  // the file's, as a sweep would verify with
  const Variant* variant = nullptr;
  Config config;
};

std::string bench_case_name(const Problem&, const Variant&, const Config&);

// The selected cases in file order: problem by problem; per problem, variants in catalogue
// order and, with all_configs, each variant's default config first, then the rest in
// enumeration order. Candidates that supports() refuses under `limits` are left out, as a
// sweep prunes them. Throws std::invalid_argument naming an unknown primitive or variant.
std::vector<BenchCase> expand_bench_cases(const ShapeFile&, const BenchSelection&, const DeviceLimits&);

// Measures cases one at a time on one device, the way a sweep does: a problem's inputs and
// float64 reference are built once (the last problem's are kept, so consecutive cases of one
// problem share them), each case is verified against the reference the first time it is
// measured on them, and every measurement is a full adaptive one by the Measurer.
class BenchSession {
 public:
  BenchSession(MeasureOptions, int device_ordinal, std::uint64_t seed);
  ~BenchSession();
  BenchSession(const BenchSession&) = delete;
  BenchSession& operator=(const BenchSession&) = delete;

  // status ok with timing and accuracy (from the verification, also on later calls), or a
  // status and reason why the case has no number: no usable CUDA device, the problem does not
  // fit, unsupported, failed accuracy, an error, crashed or timeout (the case faulted or hung
  // its GPU worker, which is restarted for the next case), or a worker that cannot be
  // restarted (after which every case says so instead of running).
  CandidateOutcome measure(const BenchCase&);

  // The device once a measurement has started it (for the benchmark's context), or nullopt.
  const std::optional<DeviceInfo>& device() const { return device_; }

 private:
  std::optional<std::string> start();
  CandidateOutcome fail(CandidateStatus, std::string reason) const;

  MeasureOptions options_;
  int ordinal_ = 0;
  std::uint64_t seed_ = 0;
  std::optional<std::string> unusable_;  // why nothing more can run on this device
  std::optional<DeviceInfo> device_;
  std::unique_ptr<GpuWorker> worker_;                  // every launch happens there
  std::optional<Problem> open_;                        // the problem whose inputs the worker holds
  std::map<std::string, AccuracyReport> verified_;     // case name -> its verification on those inputs
};

}  // namespace shapetune
