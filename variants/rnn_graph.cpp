#include "variants/rnn_graph.hpp"

#include <cstdio>

#include "baselines/library_handles.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

// Whether work enqueued on `stream` now goes into a capture. A failed query (the legacy stream
// while another thread captures globally) counts as one: then the launches are issued as they
// are, which is what the plain stepwise rung would do.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

// Captures what `issue` enqueues on `stream`, instantiated; on failure says why.
LaunchStatus capture(cudaStream_t stream, const std::function<LaunchStatus()>& issue, cudaGraphExec_t& exec) {
  if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
    cudaGetLastError();
    return LaunchStatus::refused(std::string("the launch stream cannot be captured into a CUDA graph (") +
                                 cudaGetErrorName(e) + "; the legacy default stream cannot)");
  }
  const LaunchStatus issued = issue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!issued.ok || ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; clear the one left
    // A call that broke the capture (a library call that cannot be captured) is a refusal of
    // this rung, not an error of the launches it would replay.
    if (ended != cudaSuccess)
      return LaunchStatus::refused(std::string("the stepwise launches could not be captured (") +
                                   cudaGetErrorName(ended) + (issued.ok ? "" : ": " + issued.message) + ")");
    return issued;
  }
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    exec = nullptr;
    return launch_status(instantiated);
  }
  return LaunchStatus::success();
}

}  // namespace

StepwiseGraphCache::~StepwiseGraphCache() {
  // Graphs still running are freed when they complete (cudaGraphExecDestroy's contract).
  for (Entry& e : entries_)
    if (e.exec) cudaGraphExecDestroy(e.exec);
}

std::size_t StepwiseGraphCache::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

LaunchStatus StepwiseGraphCache::launch(const std::string& key, cudaStream_t stream,
                                        const std::function<LaunchStatus()>& issue) {
  // Held through the capture and the graph launch too: a graph exec is not to be launched from two
  // threads at once, and a second caller of the same key would otherwise capture it twice.
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.begin();
  while (it != entries_.end() && it->key != key) ++it;
  if (it != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, it);
    if (!it->exec) return LaunchStatus::refused(it->refusal);
    return launch_status(cudaGraphLaunch(it->exec, stream));
  }
  // A miss issues the launches directly, which is this call's work, and only then captures them
  // for the next calls: set-up a library does lazily on first use (cuBLAS's workspace for a
  // stream) happens outside the capture, where it could not.
  if (LaunchStatus s = issue(); !s.ok) return s;
  Entry entry{key, nullptr, {}};
  const LaunchStatus captured = capture(stream, issue, entry.exec);
  if (!captured.ok && !captured.unsupported) return captured;
  // A refusal is kept too, so that later calls refuse at once rather than issue and capture again.
  if (!captured.ok) entry.refusal = captured.message;
  entries_.push_front(std::move(entry));
  while (entries_.size() > kCapacity) {
    if (entries_.back().exec) cudaGraphExecDestroy(entries_.back().exec);
    entries_.pop_back();
  }
  return captured;
}

std::string stepwise_graph_key(std::string_view variant, const LaunchArgs& a) {
  int device = -1;
  cudaGetDevice(&device);
  std::string key = std::string(variant) + " " + a.problem.key() + " {" + a.config.key() + "}";
  char word[64];
  const auto add = [&](const void* p) {
    std::snprintf(word, sizeof word, " %p", p);
    key.append(word);
  };
  for (void* tensor : a.tensors) add(tensor);
  add(a.workspace);
  add(a.stream);
  std::snprintf(word, sizeof word, " %zu bytes, device %d", a.workspace_bytes, device);
  key.append(word);
  return key;
}

LaunchStatus launch_as_graph(std::string_view variant, const LaunchArgs& a, const std::function<LaunchStatus()>& issue) {
  if (capturing(a.stream)) return issue();
  return a.libraries.cache<StepwiseGraphCache>("rnn.stepwise_graph").launch(stepwise_graph_key(variant, a), a.stream,
                                                                            issue);
}

}  // namespace shapetune
