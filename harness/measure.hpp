// The measurement engine: verify a candidate against the float64 reference, then time it.
// Measurement state (stream, events, flush buffer, library handles) lives here, apart from
// the kernels, as nvbench keeps it.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <optional>
#include <string>

#include "baselines/library_handles.hpp"
#include "core/records.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/problem_data.hpp"
#include "harness/stats.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

struct MeasureOptions {
  bool flush_l2 = true;  // cold (default): evict L2 before each sample; hot: don't
  StopRule stop;
  // Kernels shorter than this (hot estimate) are timed as CUDA-graph batches over rotating
  // input sets: single launches that short are mostly launch and event overhead.
  double batch_below_us = 10;
  int warmup_launches = 2;
  // The GPU worker's watchdog: how long one candidate may take before its worker is killed and
  // it is stored as `timeout`. 0: derived per problem (candidate_time_limit_s). Not part of the
  // measurement, so not result-affecting.
  double candidate_timeout_s = 0;
};

// Which parts of a measurement one call does; the default is all of it. Search strategies
// split it: verify every candidate once, then time the accurate ones, briefly while racing.
struct MeasureSteps {
  bool verify = true;  // poison the outputs, launch once, compare with the reference
  bool time = true;    // time, then re-check the outputs of the timed launches
  // > 0: this many samples whatever their confidence interval, and no re-check (a race
  // rung, whose number ranks candidates but never makes a winner). Fewer only where the
  // options' caps say so: --max-samples, or --time-cap once --min-samples are in (a rung
  // never takes longer than a full measurement could).
  int fixed_samples = 0;
  // > 0: a tighter sampling time cap than the options' for this call (a sweep's budget shares
  // its time out; min_samples still come first).
  double time_cap_s = 0;
  // Time in this mode instead of the one the hot estimate picks: `check` re-times a winner the
  // way it was timed (an estimate near batch_below_us can fall either side from run to run).
  // In-place candidates are always timed one launch at a time, state restored.
  std::optional<TimingMode> mode;
  // A library algorithm recorded with a winner (LaunchArgs::library_algo): `check` verifies and
  // re-times the kernel the winner was, not whatever the library's heuristic ranks first now.
  std::string library_algo;
};

struct CandidateOutcome {
  CandidateStatus status = CandidateStatus::ok;
  std::string reason;
  std::optional<AccuracyReport> accuracy;
  std::optional<TimingStats> timing;
  // The CUDA context is unusable after this candidate (illegal address, ...): record it, then
  // stop; a resumed sweep starts after it.
  bool context_lost = false;
};

class Measurer {
 public:
  Measurer(const DeviceInfo&, MeasureOptions);
  ~Measurer();
  Measurer(const Measurer&) = delete;
  Measurer& operator=(const Measurer&) = delete;

  // supports() -> verify on poisoned outputs -> time -> re-check the outputs of the timed
  // launches (a race that strikes sometimes shows there). With steps.time false, an accurate
  // candidate comes back ok without timing; with steps.verify false, the caller vouches that
  // it passed verification on this ProblemData earlier.
  CandidateOutcome measure(const Variant&, const Config&, ProblemData&, Tolerance, const MeasureSteps& steps = {});

  // Times an arbitrary launch with the same method (for ceilings): cold or hot per options.
  TimingStats time_launch(const std::function<void(cudaStream_t)>& launch);

  // For the counter session: one launch of a verified candidate on input set 0, prepared as
  // for verification (outputs poisoned, in-place state restored) when this is called. The
  // returned launch throws CudaError, LibraryError, or std::runtime_error when the variant
  // reports a failure; it stays valid while the measurer and `data` live and no other
  // candidate is measured.
  std::function<void(cudaStream_t)> single_launch(const Variant&, const Config&, ProblemData&);
  // Evicts L2 on the measurer's stream, as cold timing does before each sample.
  void flush_l2() { evict_l2(); }

  const DeviceInfo& device() const { return device_; }
  const MeasureOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  LibraryHandles& libraries() { return libraries_; }
  // Device memory the measurer itself holds (flush buffer), for capacity checks.
  std::int64_t reserved_device_bytes() const;

 private:
  using Launch = std::function<LaunchStatus(int set)>;
  void evict_l2();
  std::optional<CandidateOutcome> run_once(const Launch&, int set);
  TimingStats time_single_launches(const Launch&, const std::function<void()>& before_each, bool flush,
                                   const StopRule&);
  std::optional<TimingStats> time_graph_batch(const Launch&, ProblemData&, double estimate_us, const StopRule&);
  double estimate_us(const Launch&);
  void* workspace_for(std::size_t bytes);

  DeviceInfo device_;
  MeasureOptions options_;
  cudaStream_t stream_ = nullptr;
  LibraryHandles libraries_;
  DeviceBuffer flush_buffer_;
  DeviceBuffer flush_sink_;
  DeviceBuffer workspace_;
  std::vector<cudaEvent_t> starts_, stops_;
};

}  // namespace shapetune
