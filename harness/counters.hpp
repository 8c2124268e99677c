// Hardware counters of one launch through CUPTI's Range Profiler (CUDA 13: the legacy event
// and metric APIs are gone). Two halves:
// - CounterConfig, host side: metric names checked against a chip and compiled into a config
//   image by the Profiler Host API. Needs no GPU, so the checks run in CI.
// - CounterSession, target side: the range profiler on the current CUDA context with kernel
//   replay (CUPTI saves and restores device memory between passes, so in-place kernels are
//   safe), auto ranges (one per kernel), L2 flushed before each profile.
// Verified sequence and pitfalls: docs/CUPTI.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/counters.hpp"

struct CUpti_Profiler_Host_Object;
struct CUpti_RangeProfiler_Object;

namespace shapetune {

// The profiler host library failed, or a metric list cannot be used; the message names the
// CUPTI call or the metric.
class CounterError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A metric name the chip does not have (or one without a rollup): the user's input is wrong.
class UnknownMetricError : public CounterError {
 public:
  using CounterError::CounterError;
};

// CUPTI loads libnvperf_host.so with RTLD_DEEPBIND, which AddressSanitizer's runtime refuses by
// ending the process (google/sanitizers#611). In a build under it (scripts/sanitize.sh) counters
// are unavailable, a CounterError, rather than a crash.
constexpr bool kCountersBlockedBySanitizer =
#if defined(__SANITIZE_ADDRESS__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

// Host side: a metric list compiled for one chip ("TU104", "GH100", ...). Works without a GPU.
class CounterConfig {
 public:
  // Throws UnknownMetricError naming the first metric the chip does not have, CounterError
  // when the host library cannot start (unknown chip, libnvperf_host.so missing).
  CounterConfig(std::string chip, std::vector<std::string> metrics);
  ~CounterConfig();
  CounterConfig(const CounterConfig&) = delete;
  CounterConfig& operator=(const CounterConfig&) = delete;

  const std::string& chip() const { return chip_; }
  const std::vector<std::string>& metrics() const { return metrics_; }
  // Replay passes one profile takes (the hardware counts a few counters per pass).
  std::size_t passes() const { return passes_; }
  const std::vector<std::uint8_t>& image() const { return image_; }
  // Whether the metric's values over several kernels add up: a counter's .sum does; ratios,
  // percentages, averages and throughputs do not.
  bool additive(std::size_t metric) const { return additive_.at(metric); }
  const std::vector<const char*>& c_names() const { return names_; }

  // One value per metric for range `range` of a decoded counter-data image.
  std::vector<double> evaluate(const std::vector<std::uint8_t>& counter_data, std::size_t range) const;

 private:
  std::string chip_;
  std::vector<std::string> metrics_;
  std::vector<const char*> names_;  // into metrics_, for the C API
  std::vector<bool> additive_;
  std::vector<std::uint8_t> image_;
  std::size_t passes_ = 0;
  CUpti_Profiler_Host_Object* host_ = nullptr;
};

// The counters of one profiled launch, or why it has none.
struct CounterProfile {
  counters::Values values;  // CUPTI metrics, plus fp32_flops, fp16_flops and kernels
  int kernels = 0;          // ranges (kernels) the launch ran
  std::string error;        // empty when values were collected
  bool ok() const { return error.empty(); }
};

// Target side, one per sweep and device. Failures to profile at all (insufficient privileges,
// an unsupported device or MIG instance, another profiler attached, CUPTI missing) are never
// thrown: they leave the session unavailable with the reason, and the sweep goes on.
class CounterSession {
 public:
  // Sets up on the current CUDA device and context (call use_device first). Throws
  // UnknownMetricError when a metric is not one of this device's chip: a usage error that
  // should stop the sweep before it measures anything.
  explicit CounterSession(std::vector<std::string> metrics);
  ~CounterSession();
  CounterSession(const CounterSession&) = delete;
  CounterSession& operator=(const CounterSession&) = delete;

  bool available() const { return !unavailable_reason_; }
  // "insufficient privileges: ..." and the like; nullopt while profiling works.
  const std::optional<std::string>& unavailable_reason() const { return unavailable_reason_; }
  const std::string& chip() const { return chip_; }
  std::size_t passes() const { return config_ ? config_->passes() : 0; }
  const std::vector<std::string>& metrics() const { return metrics_; }

  // Enables the range profiler on the context; a no-op when it already is (CUPTI must never
  // enable one context twice). Enable only around profiling: launches timed while a profiler
  // is attached could pay for it. Returns available().
  bool enable();
  void disable();
  bool enabled() const { return profiler_ != nullptr; }

  // Profiles exactly one launch: waits for the device, runs `flush_l2` (may be empty) and
  // waits again, then Start, `launch(stream)`, wait, Stop, decode, evaluate. Enables the
  // profiler first if needed. One kernel gives every metric; several kernels in the launch
  // give the sums of the additive metrics only (a ratio of several kernels is no ratio).
  // A CUPTI failure makes the session unavailable and comes back as the profile's error; a
  // CUDA error from the launch or a synchronisation is thrown (CudaError), after Stop.
  CounterProfile profile(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                         const std::function<void()>& flush_l2 = {});

 private:
  void set_unavailable(std::string reason);
  bool prepare_counter_data();

  std::vector<std::string> metrics_;
  std::optional<std::string> unavailable_reason_;
  std::string chip_;
  int device_ = -1;
  void* context_ = nullptr;  // CUcontext; void* keeps cuda.h out of this header
  std::unique_ptr<CounterConfig> config_;
  CUpti_RangeProfiler_Object* profiler_ = nullptr;
  std::vector<std::uint8_t> counter_data_;  // alive while enabled: CUPTI writes into it
};

// The most kernels (auto ranges) one profiled launch may run; a launch with more gets an error.
inline constexpr std::size_t kMaxProfiledKernels = 64;

}  // namespace shapetune
