// The stepwise rungs of the recurrent family replayed from a CUDA graph (the original work's 6.3).
// A stepwise call is 2 T + 2 launches forward, 2 T + 4 for the LSTM (the input GEMM, per step a
// recurrent GEMM and the cell, the state copies), and about 4 T + 20 backward (the forward again,
// per step back a cell and a product, the widening copies and the weight products); at small N H each is a few microseconds of
// work behind a few microseconds of launch (`shapetune ceilings` measures that overhead), so the
// rung exists to take the launches off the host: one graph launch a call.
//
// A graph bakes in every pointer and extent it was captured with, so instantiated graphs are cached
// by (variant, problem, config, every tensor and workspace pointer, workspace size, stream, device)
// in the LibraryHandles that issued the captured cuBLAS calls: the graphs refer to that handle's
// workspace, and LibraryHandles releases its caches before its handles. Least recently used
// graphs are dropped past kCapacity.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>

#include "variants/catalogue.hpp"

namespace shapetune {

class StepwiseGraphCache {
 public:
  // Verification and single-launch timing use one input set, and graph_batch timing captures the
  // launches itself (nothing cached), so a handful of entries is the working set; a graph of
  // T = 1000 holds some 2000 nodes, too many to keep one per each of the harness's 64 input sets.
  static constexpr std::size_t kCapacity = 16;

  StepwiseGraphCache() = default;
  ~StepwiseGraphCache();
  StepwiseGraphCache(const StepwiseGraphCache&) = delete;
  StepwiseGraphCache& operator=(const StepwiseGraphCache&) = delete;

  // Replays the graph of `key` on `stream`; where there is none yet, runs `issue` (what it
  // enqueues on `stream`) directly and captures it for the next calls.
  LaunchStatus launch(const std::string& key, cudaStream_t stream, const std::function<LaunchStatus()>& issue);
  std::size_t size() const;

 private:
  struct Entry {
    std::string key;
    cudaGraphExec_t exec = nullptr;  // null: the launches could not be captured, for `refusal`
    std::string refusal;
  };
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
};

// The key of a launch: everything a captured graph depends on.
std::string stepwise_graph_key(std::string_view variant, const LaunchArgs&);

// `issue` (a stepwise rung's launches on a.stream) through the graph cache of a.libraries. Where
// a.stream is being captured already (the harness's graph_batch timing captures whole launches)
// the launches go straight into that outer capture: graphs do not nest by capture.
LaunchStatus launch_as_graph(std::string_view variant, const LaunchArgs& a, const std::function<LaunchStatus()>& issue);

}  // namespace shapetune
