// The runner core: what every model runner shares, so a runner file holds its model alone.
//
//   RunnerCore core({db, dispatch, device});                  // device, stream, dispatch table
//   BoundOp fc1 = core.bind({"fc1 forward", problem}, {x, w, b, h}, {1.0, 0.0});
//   Graph step = capture(core.stream(), [&] { fc1.launch(core.stream(), core.libraries()); });
//   GraphExec exec(step);  exec.launch(core.stream());        // every step: one replay
//   print_resolutions(core.resolutions(), std::cout);          // how each op resolved, and why
//
// Each operation (a name and the Problem it is) resolves once: the dispatch table's winner for
// the exact problem, else the nearest tuned shape, else the primitive's default variant; with
// DispatchMode::library, the library baseline instead. The resolution is recorded so the runner
// can print it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baselines/library_handles.hpp"
#include "core/types.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "models/dispatcher.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

// tuned: the dispatch table; library: the cuBLAS/cuBLASLt/cuDNN baselines only.
enum class DispatchMode { tuned, library };
std::string_view dispatch_mode_name(DispatchMode);
std::optional<DispatchMode> parse_dispatch_mode(std::string_view);

// One GPU operation of a model and the problem it is.
struct ModelOp {
  std::string name;  // "fc1 forward, bias + ReLU"
  Problem problem;
  // Config values the model's semantics need, whatever the table chose (e.g. round_h = 1: the
  // LayerNorm of the stored residual sum, where the model it mirrors rounds the sum first). Set on
  // whichever variant resolves the op and has the parameter; variants without it are unaffected.
  std::vector<std::pair<std::string, std::int64_t>> pinned = {};
};

// How one operation resolved: the variant it launches and why that one.
struct OpResolution {
  ModelOp op;
  std::string variant;
  std::string config;        // Config::key()
  std::string source;        // "exact", "nearest (gemm.nn/f32/m=...)", "default", "library: ..."
  std::string library_algo;  // the winner's recorded library algorithm, replayed (exact matches)
  // Variants that failed the accuracy gate on the tuned problem the choice came from: why the
  // table took another (printed under the op).
  std::vector<AccuracyFailure> accuracy_failures;
};

// What a launch of a bound op runs: all of it, or one half of a primitive that has halves
// (Variant::forward_half and backward_half: a training step's forward and backward).
enum class LaunchPart : std::uint8_t { whole, forward_half, backward_half };

// An operation bound to its tensors, scalars and workspace: one launch.
struct BoundOp {
  OpResolution resolution;
  const Variant* variant = nullptr;
  Config config;
  std::vector<void*> tensors;
  std::vector<double> scalars;
  DeviceBuffer workspace;
  std::vector<void*> half_outputs;  // what the halves write and read besides `tensors` (Variant::forward_half)

  // Throws std::runtime_error naming the operation when the launch fails, or when `part` is a
  // half and the variant has none.
  void launch(cudaStream_t, LibraryHandles&, LaunchPart = LaunchPart::whole) const;
};

// A step of a captured sequence: a bound op, whole or one of its halves, or a plain kernel that the
// runner launches itself (no variants: an embedding's gather, say), listed under its name so that
// op_times accounts for the whole step.
struct OpLaunch {
  OpLaunch(const BoundOp* op, LaunchPart part = LaunchPart::whole) : op(op), part(part) {}  // NOLINT: implicit
  OpLaunch(std::string name, std::function<void()> enqueue) : plain_name(std::move(name)), plain(std::move(enqueue)) {}
  const BoundOp* op = nullptr;
  LaunchPart part = LaunchPart::whole;
  std::string plain_name;
  std::function<void()> plain;

  void launch(cudaStream_t stream, LibraryHandles& libraries) const {
    if (op) op->launch(stream, libraries, part);
    else plain();
  }
};

// Picks the variant of each operation: the dispatch table's choice, or the library baseline.
class Resolver {
 public:
  // db_path empty: nothing tuned, every problem takes its default (or library) variant.
  // Throws StoreError for an unusable database.
  Resolver(const std::string& db_path, const DeviceInfo&, DispatchMode);
  // Throws std::runtime_error when the chosen variant cannot run the problem.
  std::pair<const Variant*, OpResolution> resolve(const ModelOp&) const;
  // The median the table measured for exactly this problem's winner, if it holds the problem.
  std::optional<double> tuned_median_us(const Problem&) const;
  std::size_t tuned_problems() const { return dispatcher_.tuned_problems(); }
  DispatchMode mode() const { return mode_; }

 private:
  Dispatcher dispatcher_;
  DeviceLimits limits_;
  DispatchMode mode_;
};

struct RunnerOptions {
  std::string db_path;  // empty: every problem takes its primitive's default variant
  DispatchMode dispatch = DispatchMode::tuned;
  int device = 0;
  bool overlap_launches = false;  // overlap_kernel_launches on the runner's graph (sm_90 on)
};

// One op of a captured sequence (a forward, a training step) with its median time inside a replay.
struct OpTime {
  std::string name, problem, variant;  // variant{config}
  double median_us = 0;
};

// The device, a stream, the libraries' handles on it and the resolver, for one runner.
class RunnerCore {
 public:
  explicit RunnerCore(const RunnerOptions&);
  ~RunnerCore();
  RunnerCore(const RunnerCore&) = delete;
  RunnerCore& operator=(const RunnerCore&) = delete;

  const DeviceInfo& device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  LibraryHandles& libraries() { return libraries_; }
  const Resolver& resolver() const { return *resolver_; }
  // RunnerOptions::overlap_launches, where the device has programmatic dependent launch (sm_90 on).
  bool overlap_launches() const { return overlap_launches_; }

  enum class Record { yes, no };
  // Resolves `op` and binds it; its workspace is allocated here. Record::no for a second binding
  // of ops already recorded (the same network at another batch size, for a test).
  BoundOp bind(ModelOp op, std::vector<void*> tensors, std::vector<double> scalars = {}, Record = Record::yes);
  // Resolution alone, recorded: what a runner shows when it has nothing to bind.
  void resolve(const ModelOp&);
  const std::vector<OpResolution>& resolutions() const { return resolutions_; }

  // Each op's share of one forward as the graph runs it: `ops` captured in order with an event
  // recorded after each (event nodes in the graph), replayed `warmup` times, then `iterations`
  // times; per op the median over those replays of the time between its event and the one before
  // (its kernels, and the gap before them). The events add a little to each op, so the sum runs
  // above the plain graph's time; what each op costs relative to the others is what it is for.
  std::vector<OpTime> op_times(const std::vector<OpLaunch>& ops, int warmup, int iterations);

 private:
  DeviceInfo device_;
  bool overlap_launches_ = false;
  std::unique_ptr<Resolver> resolver_;
  cudaStream_t stream_ = nullptr;
  LibraryHandles libraries_;
  std::vector<OpResolution> resolutions_;
};

// A CUDA graph, owned.
class Graph {
 public:
  Graph() = default;
  explicit Graph(cudaGraph_t g) : graph_(g) {}
  ~Graph();
  Graph(Graph&& o) noexcept : graph_(std::exchange(o.graph_, nullptr)) {}
  Graph& operator=(Graph&& o) noexcept;
  cudaGraph_t get() const { return graph_; }

 private:
  cudaGraph_t graph_ = nullptr;
};

// What `body` enqueues on `stream` (and on streams forked from it by events), captured. A body
// that throws ends the capture before the exception goes on.
template <typename Body>
Graph capture(cudaStream_t stream, Body body) {
  SHAPETUNE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t g = nullptr;
  SHAPETUNE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  return Graph(g);
}

// Programmatic dependent launch inside a captured graph: every kernel-to-kernel edge whose
// downstream kernel is one of shapetune's becomes a programmatic edge, so that kernel is launched
// (and its blocks made resident) while the one before it finishes, instead of after it. Safe
// because each of shapetune's kernels waits for the grids it depends on before it touches memory
// (grid_dependency_sync, kernels/common/grid.cuh); a library's kernel downstream keeps its ordinary
// edge. Compute capability 9.0 and later; returns how many edges changed.
std::size_t overlap_kernel_launches(cudaGraph_t graph);

// An instantiated graph, replayed by launch().
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(const Graph&);
  ~GraphExec();
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept;
  cudaGraphExec_t get() const { return exec_; }
  void launch(cudaStream_t) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// A training step as one executable graph: the body captured once, then the parameter update as a
// child graph swapped in before every step, since Adam's bias correction is a launch argument and
// a capture bakes its arguments. Without an update function the step is the body alone.
class StepGraph {
 public:
  using CaptureUpdate = std::function<Graph(std::int64_t step)>;  // the update of step t (from 1), captured
  StepGraph() = default;
  StepGraph(Graph body, CaptureUpdate capture_update);  // the update runs after all of the body
  // The host half of the next step: its update captured and swapped in. Call it before recording
  // the step's start event, so event time is the GPU's alone; launches already queued keep the
  // update they were launched with.
  void prepare();
  void launch(cudaStream_t stream) const { exec_.launch(stream); }
  void replay(cudaStream_t stream) {
    prepare();
    launch(stream);
  }
  std::int64_t steps() const { return steps_; }  // steps prepared so far

 private:
  CaptureUpdate capture_update_;
  Graph graph_;  // the body with the update node; outlives exec_, and the node's handle belongs to it
  GraphExec exec_;
  cudaGraphNode_t update_node_ = nullptr;
  std::int64_t steps_ = 0;
};

// A device copy of `host` (at least one element's worth, so an empty vector is a valid pointer).
template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer d(std::max<std::size_t>(host.size(), 1) * sizeof(T));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// The resolution table a runner prints at start: op, problem, variant{config}, resolved by.
void print_resolutions(const std::vector<OpResolution>&, std::ostream&);

// --op-times: per distinct op (name, problem, variant) in the order it first runs, how many times
// one `sequence` ("forward", "training step") runs it and the sum of those runs' medians, with
// its share of the total.
void print_op_times(const std::vector<OpTime>&, int iterations, std::string_view sequence, std::ostream&);

}  // namespace shapetune
