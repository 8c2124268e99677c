// GPU work in a supervised worker process, so a kernel under test that faults (illegal address,
// trap, misaligned access: a CUDA context lost for good) or hangs costs one candidate, not the
// sweep. The parent side (GpuWorker) never touches CUDA; the worker, an exec'd copy of the same
// executable, owns the device, the Measurer, the problem's inputs and reference, and the
// counter session. A worker that dies or overruns its time limit is killed and reaped; the next
// request starts a fresh one, which rebuilds the device state the last one had (device,
// counters, the open problem, from the same seed: the same inputs).
//
// Executables that measure call serve_gpu_worker_if_asked() first thing in main().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/counters.hpp"
#include "harness/device.hpp"
#include "harness/measure.hpp"

namespace shapetune {

class ChildProcess;

// The worker cannot be started or restarted, or answered something it should not: nothing
// more can be measured.
class WorkerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void serve_gpu_worker_if_asked();

// Time limits of the requests that run no candidate's kernels.
inline constexpr double kWorkerStartTimeoutS = 180;  // CUDA context, cuBLAS/cuDNN handles
inline constexpr double kWorkerSetupTimeoutS = 600;  // a problem's inputs and float64 reference

// The watchdog's limit for one candidate's measurement, unless options.candidate_timeout_s sets
// one: generous for any kernel that finishes, short enough that a hung one costs little. A
// measurement is verification, warm-up, an estimate, at least min_samples samples and at most
// the time cap after them, and the outputs copied back and compared on the host twice. Each
// launch is allowed 20x the longer of the problem's cost at a modest 100 GB/s and 1 TFLOP/s and
// its baseline's median (once measured, else 0); the host's share, 1 s per GB moved; plus a
// floor of kCandidateTimeoutFloorS.
inline constexpr double kCandidateTimeoutFloorS = 20;
double candidate_time_limit_s(const MeasureOptions&, const Cost&, double baseline_us);

struct WorkerCounterStatus {
  bool available = false;
  std::string unavailable_reason;
  std::string chip;
  std::size_t passes = 0;
  std::vector<std::string> metrics;
};

class GpuWorker {
 public:
  GpuWorker(int device_ordinal, MeasureOptions default_options);
  ~GpuWorker();
  GpuWorker(const GpuWorker&) = delete;
  GpuWorker& operator=(const GpuWorker&) = delete;

  // Starts the worker on the device. nullopt when it is ready; otherwise why no CUDA device is
  // usable here (no driver, no device: the user's situation, not a failure). Throws WorkerError
  // when the device exists but cannot be used.
  std::optional<std::string> start();
  const DeviceInfo& device() const { return device_; }
  // Device memory the worker's Measurer holds, for capacity checks.
  std::int64_t reserved_device_bytes() const { return reserved_device_bytes_; }

  // Draws the problem's inputs from `seed`, computes the reference and allocates the buffers,
  // in the worker. nullopt when ready; otherwise why the problem is skipped (it does not fit, a
  // CUDA error, the worker died meanwhile).
  std::optional<std::string> open_problem(const Problem&, std::uint64_t seed);

  // Measures a candidate on the open problem (Measurer::measure). When the worker dies, hangs
  // past `timeout_s` or loses its CUDA context, the outcome is `crashed` or `timeout` with what
  // happened, and the worker is restarted before the next request. `options`: the Measurer to
  // use (check re-times with a winner's sweep's options); null: the default.
  CandidateOutcome measure(const Variant&, const Config&, Tolerance, const MeasureSteps&, double timeout_s,
                           const MeasureOptions* options = nullptr);

  // The variant's library algorithm identity (Variant::describe_algorithm); throws
  // std::runtime_error with the variant's or the worker's reason.
  std::string describe_algorithm(const Variant&, const Config&);

  // Sets up a counter session in the worker (kept across restarts). Throws UnknownMetricError.
  WorkerCounterStatus start_counters(const std::vector<std::string>& metrics);
  // Profiles one launch of a verified candidate on the open problem, L2 flushed first. A crash
  // or hang is the profile's error (the worker restarts); `crashed` says so.
  CounterProfile profile(const Variant&, const Config&, double timeout_s, bool* crashed = nullptr);
  void disable_counters();
  const WorkerCounterStatus& counter_status() const { return counter_status_; }

  // Workers started after the first, each after a crash or a time-out.
  int restarts() const { return restarts_; }

 private:
  struct Answer;
  Answer request(const std::string& message, double timeout_s);
  void ensure_running();
  std::optional<std::string> launch_and_start();  // why no device is usable, or nullopt

  int ordinal_;
  MeasureOptions default_options_;
  std::unique_ptr<ChildProcess> child_;
  bool started_ = false;
  DeviceInfo device_;
  std::int64_t reserved_device_bytes_ = 0;
  std::optional<std::pair<Problem, std::uint64_t>> open_;      // replayed into a restarted worker
  std::optional<std::vector<std::string>> counter_metrics_;    // likewise
  WorkerCounterStatus counter_status_;
  int restarts_ = 0;
};

}  // namespace shapetune
