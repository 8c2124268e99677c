#include "harness/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "harness/cuda_check.hpp"
#include "harness/timing_kernels.cuh"

namespace shapetune {
namespace {

constexpr int kEventPairs = 16;
// Target length of one graph-batch sample: long enough that the two event timestamps
// (about half a microsecond of resolution) are noise.
constexpr double kGraphSampleUs = 200;
constexpr int kMaxInputSets = 64;
constexpr int kMaxLaunchesPerGraph = 4096;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TimingStats to_stats(const std::vector<double>& samples_us, TimingMode mode, StopReason reason) {
  const SampleSummary s = summarize(samples_us);
  TimingStats t;
  t.median_us = s.median;
  t.p10_us = s.p10;
  t.p90_us = s.p90;
  t.min_us = s.min;
  t.median_ci_rel = s.median_ci_rel;
  t.samples = s.count;
  t.mode = mode;
  t.stop_reason = stop_reason_name(reason);
  return t;
}

// A launch that failed while being timed (it passed verification, so this is an error).
struct TimingLaunchFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void require(const LaunchStatus& status) {
  if (!status.ok) throw TimingLaunchFailed(status.message);
}

}  // namespace

Measurer::Measurer(const DeviceInfo& device, MeasureOptions options) : device_(device), options_(options) {
  SHAPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Three times L2: the cache's replacement is not strict LRU, so one L2's worth of reads
  // leaves some of the previous kernel's lines behind.
  const std::size_t flush_bytes = (static_cast<std::size_t>(std::max<std::int64_t>(device.limits.l2_bytes, 1 << 20)) * 3 + 15) / 16 * 16;
  flush_buffer_ = DeviceBuffer(flush_bytes);
  SHAPETUNE_CUDA_CHECK(cudaMemset(flush_buffer_.get(), 0x5a, flush_bytes));
  flush_sink_ = DeviceBuffer(sizeof(unsigned));
  starts_.resize(kEventPairs);
  stops_.resize(kEventPairs);
  for (int i = 0; i < kEventPairs; ++i) {
    SHAPETUNE_CUDA_CHECK(cudaEventCreate(&starts_[i]));
    SHAPETUNE_CUDA_CHECK(cudaEventCreate(&stops_[i]));
  }
}

Measurer::~Measurer() {
  for (auto e : starts_) cudaEventDestroy(e);
  for (auto e : stops_) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
}

std::int64_t Measurer::reserved_device_bytes() const {
  // The flush buffer plus room for library workspaces, handles and rotation sets.
  return static_cast<std::int64_t>(flush_buffer_.bytes()) + (std::int64_t{512} << 20);
}

void Measurer::evict_l2() {
  SHAPETUNE_CUDA_CHECK(timing_kernels::evict_l2_by_reading(flush_buffer_.get(), flush_buffer_.bytes(),
                                                            static_cast<unsigned*>(flush_sink_.get()), stream_));
}

void* Measurer::workspace_for(std::size_t bytes) {
  if (bytes > workspace_.bytes()) workspace_ = DeviceBuffer(bytes);
  return bytes ? workspace_.get() : nullptr;
}

std::optional<CandidateOutcome> Measurer::run_once(const Launch& launch, int set) {
  const LaunchStatus status = launch(set);
  if (!status.ok) {
    CandidateOutcome out;
    out.status = status.unsupported ? CandidateStatus::unsupported : CandidateStatus::error;
    out.reason = status.message;
    return out;
  }
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return std::nullopt;
}

double Measurer::estimate_us(const Launch& launch) {
  // The five timed launches queue behind a hold on the device, so each event pair times the
  // kernel, not the host's submission gap before it: on a slow or busy host those gaps once
  // made an 8-row softmax (~3 us) look like 10+ us, and it was timed one launch at a time.
  constexpr unsigned kHoldUs = 200;  // ~5x what queueing 5 launches and 10 events takes
  SHAPETUNE_CUDA_CHECK(timing_kernels::hold_stream(kHoldUs, stream_));
  std::vector<double> samples;
  for (int i = 0; i < 5; ++i) {
    SHAPETUNE_CUDA_CHECK(cudaEventRecord(starts_[i], stream_));
    require(launch(0));
    SHAPETUNE_CUDA_CHECK(cudaEventRecord(stops_[i], stream_));
  }
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int i = 0; i < 5; ++i) {
    float ms = 0;
    SHAPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, starts_[i], stops_[i]));
    samples.push_back(ms * 1000.0);
  }
  return summarize(samples).median;
}

TimingStats Measurer::time_single_launches(const Launch& launch, const std::function<void()>& before_each, bool flush,
                                           const StopRule& stop) {
  std::vector<double> samples;
  const auto t0 = std::chrono::steady_clock::now();
  StopReason reason = StopReason::keep_going;
  while (reason == StopReason::keep_going) {
    // Queue a batch of samples before waiting, so the host's launch latency overlaps the GPU;
    // never past max_samples, which a fixed sample count sets to exactly that count.
    const int taken = static_cast<int>(samples.size());
    const int batch =
        std::min(std::clamp(stop.min_samples - taken, 4, kEventPairs), std::max(stop.max_samples - taken, 1));
    for (int i = 0; i < batch; ++i) {
      if (before_each) before_each();
      if (flush) evict_l2();
      SHAPETUNE_CUDA_CHECK(cudaEventRecord(starts_[i], stream_));
      require(launch(0));
      SHAPETUNE_CUDA_CHECK(cudaEventRecord(stops_[i], stream_));
    }
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int i = 0; i < batch; ++i) {
      float ms = 0;
      SHAPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, starts_[i], stops_[i]));
      samples.push_back(ms * 1000.0);
    }
    reason = should_stop(samples, seconds_since(t0), stop);
  }
  return to_stats(samples, flush ? TimingMode::cold : TimingMode::hot, reason);
}

std::optional<TimingStats> Measurer::time_graph_batch(const Launch& launch, ProblemData& data, double estimate,
                                                      const StopRule& stop) {
  // Rotate over enough buffer sets that each launch finds its data evicted from L2 by the
  // launches in between, as a cold single launch would.
  const double per_set = static_cast<double>(std::max<std::int64_t>(data.bytes_per_set(), 1));
  const int sets = std::clamp(static_cast<int>(std::ceil(3.0 * static_cast<double>(device_.limits.l2_bytes) / per_set)),
                              1, kMaxInputSets);
  data.ensure_sets(sets, stream_);
  int launches = std::clamp(static_cast<int>(std::ceil(kGraphSampleUs / std::max(estimate, 0.1))), sets,
                            kMaxLaunchesPerGraph);
  launches = (launches + sets - 1) / sets * sets;

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  for (int i = 0; captured && i < launches; ++i) captured = launch(i % sets).ok;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  captured = captured && end == cudaSuccess && graph &&
             cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!captured) {
    cudaGetLastError();  // capture failures are not sticky; clear them
    if (exec) cudaGraphExecDestroy(exec);
    exec = nullptr;
  }

  const TimingMode mode = captured ? TimingMode::graph_batch : TimingMode::batch;
  auto issue_batch = [&] {
    if (captured) {
      SHAPETUNE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    } else {
      for (int i = 0; i < launches; ++i) require(launch(i % sets));
    }
  };
  std::vector<double> samples;
  StopReason reason = StopReason::keep_going;
  try {
    issue_batch();  // warm-up: graph upload, first-touch of the new sets
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto t0 = std::chrono::steady_clock::now();
    while (reason == StopReason::keep_going) {
      const int batch = std::min(4, std::max(stop.max_samples - static_cast<int>(samples.size()), 1));
      for (int i = 0; i < batch; ++i) {
        SHAPETUNE_CUDA_CHECK(cudaEventRecord(starts_[i], stream_));
        issue_batch();
        SHAPETUNE_CUDA_CHECK(cudaEventRecord(stops_[i], stream_));
      }
      SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (int i = 0; i < batch; ++i) {
        float ms = 0;
        SHAPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, starts_[i], stops_[i]));
        samples.push_back(ms * 1000.0 / launches);
      }
      reason = should_stop(samples, seconds_since(t0), stop);
    }
  } catch (...) {
    if (exec) cudaGraphExecDestroy(exec);
    throw;
  }
  if (exec) cudaGraphExecDestroy(exec);
  TimingStats stats = to_stats(samples, mode, reason);
  stats.launches_per_sample = launches;
  stats.input_sets = sets;
  return stats;
}

CandidateOutcome Measurer::measure(const Variant& variant, const Config& config, ProblemData& data, Tolerance tolerance,
                                   const MeasureSteps& steps) {
  CandidateOutcome out;
  const Problem& problem = data.problem();
  if (const Support s = variant.supports(problem, config, device_.limits); !s.ok) {
    out.status = CandidateStatus::unsupported;
    out.reason = s.reason;
    return out;
  }
  try {
    const std::size_t workspace_bytes = variant.workspace_bytes ? variant.workspace_bytes(problem, config) : 0;
    void* workspace = workspace_for(workspace_bytes);
    std::vector<std::vector<void*>> pointers;
    auto launch = [&](int set) {
      while (static_cast<int>(pointers.size()) < data.sets()) pointers.push_back(data.pointers(static_cast<int>(pointers.size())));
      const LaunchArgs args{problem,         config,          pointers[set], stream_, libraries_,
                            workspace,       workspace_bytes, data.scalars(), steps.library_algo};
      return variant.launch(args);
    };

    // Poisoned even when verification is skipped, so that the re-check after timing cannot
    // pass on outputs that an earlier candidate left behind.
    data.prepare(0, stream_);
    if (steps.verify) {
      if (auto failed = run_once(launch, 0)) return *failed;
      out.accuracy = data.check(0, tolerance, stream_);
      if (out.accuracy->mismatches > 0) {
        out.status = CandidateStatus::failed_accuracy;
        out.reason = std::to_string(out.accuracy->mismatches) + " of " + std::to_string(out.accuracy->checked) +
                     " elements outside tolerance; first " + out.accuracy->first_mismatch;
        return out;
      }
    }
    if (!steps.time) return out;
    StopRule stop = options_.stop;
    if (steps.time_cap_s > 0) stop.time_cap_s = std::min(stop.time_cap_s, steps.time_cap_s);
    if (steps.fixed_samples > 0) {
      // No confidence target (a negative one is never met), so the count is what stops it;
      // but the caps every measurement has still hold: the time cap once min_samples are
      // in, and max_samples.
      stop.max_samples = std::min(steps.fixed_samples, options_.stop.max_samples);
      stop.min_samples = std::min(stop.max_samples, options_.stop.min_samples);
      stop.target_ci_rel = -1;
    }

    const bool in_place = data.has_inout();
    std::function<void()> restore;
    if (in_place) restore = [&] { data.restore_inout(0, stream_); };
    for (int i = 0; i < options_.warmup_launches; ++i) {
      if (restore) restore();
      require(launch(0));
    }
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const double estimate = estimate_us(launch);
    // In-place kernels are timed one launch at a time with their state restored before each
    // sample (outside the timed region): a batch would let repeated updates drift the state.
    bool batched = !in_place && estimate < options_.batch_below_us;
    if (steps.mode && !in_place) batched = *steps.mode == TimingMode::graph_batch || *steps.mode == TimingMode::batch;
    if (batched)
      out.timing = time_graph_batch(launch, data, estimate, stop);
    else
      out.timing = time_single_launches(launch, restore, options_.flush_l2, stop);
    out.timing->state_restored = in_place;

    if (!in_place && steps.fixed_samples == 0) {
      const AccuracyReport recheck = data.check(0, tolerance, stream_);
      if (recheck.mismatches > 0) {
        out.status = CandidateStatus::failed_accuracy;
        out.accuracy = recheck;
        out.reason = "outputs of the timed launches disagree with the reference (a race?): " +
                     std::to_string(recheck.mismatches) + " elements; first " + recheck.first_mismatch;
        out.timing.reset();
      }
    }
  } catch (const CudaError& e) {
    out.status = CandidateStatus::error;
    out.reason = e.what();
    out.context_lost = e.context_lost();
    out.timing.reset();
  } catch (const TimingLaunchFailed& e) {
    out.status = CandidateStatus::error;
    out.reason = std::string("launch failed while timing: ") + e.what();
    out.timing.reset();
  } catch (const LibraryError& e) {
    out.status = CandidateStatus::error;
    out.reason = e.what();
  }
  return out;
}

std::function<void(cudaStream_t)> Measurer::single_launch(const Variant& variant, const Config& config,
                                                          ProblemData& data) {
  const Problem& problem = data.problem();
  const std::size_t workspace_bytes = variant.workspace_bytes ? variant.workspace_bytes(problem, config) : 0;
  void* workspace = workspace_for(workspace_bytes);
  data.prepare(0, stream_);
  return [this, &variant, config, &data, workspace, workspace_bytes, pointers = data.pointers(0)](cudaStream_t stream) {
    const LaunchArgs args{data.problem(), config, pointers, stream, libraries_, workspace, workspace_bytes,
                          data.scalars()};
    require(variant.launch(args));
  };
}

TimingStats Measurer::time_launch(const std::function<void(cudaStream_t)>& fn) {
  Launch launch = [&](int) {
    fn(stream_);
    return LaunchStatus::success();
  };
  for (int i = 0; i < options_.warmup_launches; ++i) fn(stream_);
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return time_single_launches(launch, {}, options_.flush_l2, options_.stop);
}

}  // namespace shapetune
