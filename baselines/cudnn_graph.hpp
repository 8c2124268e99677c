// What the wrappers over cuDNN's graph (backend) API share, internal to baselines/: failures as
// LibraryCallResults, RAII backend descriptors and device memory, tensor descriptors, the
// operation graph, engine configs from heuristics mode A and the first execution plan that
// finalizes, execution through a variant pack, and the per-LibraryHandles cache of built plans.
//
// Building a graph and its plan allocates (host and device) and takes a fraction of a second, so
// a wrapper does it once per problem and keeps the plan with its workspace; every later call only
// fills a variant pack and executes, which is safe inside a stream capture.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "baselines/cudnn.hpp"
#include "baselines/library_handles.hpp"
#include "core/types.hpp"

namespace shapetune::cudnn_graph {

// ---------------------------------------------------------------------------------------------
// Failures: every cuDNN or CUDA call that can fail throws one, naming the call, the descriptor
// and the attribute, cuDNN's status and its own last message; the entry point turns it into a
// LibraryCallResult. `not_supported` is set for cuDNN's NOT_SUPPORTED family (3000-3999): the
// problem is beyond what cuDNN can do, which the sweep records as a refusal, not an error.

struct Failure {
  LibraryCallResult result;
};

[[noreturn]] inline void throw_cudnn(const std::string& call, cudnnStatus_t status) {
  std::string message = call + ": " + cudnnGetErrorString(status) + " (" + std::to_string(static_cast<int>(status)) + ")";
  std::array<char, 1024> detail{};
  cudnnGetLastErrorString(detail.data(), detail.size());
  if (detail[0] != '\0') message += "; cuDNN says: " + std::string(detail.data());
  throw Failure{{false, CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED, std::move(message)}};
}

inline void check_cudnn(cudnnStatus_t status, const std::string& call) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn(call, status);
}

inline void check_cuda(cudaError_t error, const std::string& call) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // allocation failures are not sticky: keep them out of later launches' checks
  throw Failure{{false, false, call + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error)}};
}

// ---------------------------------------------------------------------------------------------
// Backend descriptors and device memory, released with their owners.

struct Attribute {
  cudnnBackendAttributeName_t id;
  const char* name;
};
#define SHAPETUNE_ATTRIBUTE(id) (::shapetune::cudnn_graph::Attribute{id, #id})

// cuDNN 9.19's headers deprecate the graph's and the plan's handle attributes (a device-property
// descriptor may stand in for them), but the 9.14 runtime on the GPU box, like cudnn_frontend,
// still takes the handle this way.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
inline const Attribute kGraphHandle = SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
inline const Attribute kPlanHandle = SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
#pragma GCC diagnostic pop

class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &raw_), "cudnnBackendCreateDescriptor(" + what_ + ")");
  }
  ~Descriptor() {
    if (raw_) cudnnBackendDestroyDescriptor(raw_);
  }
  Descriptor(Descriptor&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)), what_(std::move(other.what_)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(raw_, other.raw_);
    std::swap(what_, other.what_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return raw_; }
  const std::string& what() const { return what_; }

  void set(Attribute attribute, cudnnBackendAttributeType_t type, std::int64_t count, const void* values) {
    check_cudnn(cudnnBackendSetAttribute(raw_, attribute.id, type, count, values),
                "cudnnBackendSetAttribute(" + what_ + ", " + attribute.name + ")");
  }
  template <class T>
  void set_value(Attribute attribute, cudnnBackendAttributeType_t type, const T& value) {
    set(attribute, type, 1, &value);
  }
  void set_descriptor(Attribute attribute, const Descriptor& value) {
    set_value(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, value.get());
  }
  void finalize() { check_cudnn(cudnnBackendFinalize(raw_), "cudnnBackendFinalize(" + what_ + ")"); }

 private:
  cudnnBackendDescriptor_t raw_ = nullptr;
  std::string what_;
};

class DeviceMemory {
 public:
  DeviceMemory(std::size_t bytes, const std::string& what) {
    if (bytes > 0) check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc(" + what + ", " + std::to_string(bytes) + " bytes)");
  }
  ~DeviceMemory() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Tensors and the operation graph.

// The data type of our tensors; f32 for anything but f16 and bf16.
inline cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Dimensions or strides of a 4-d tensor, in elements.
using Extents = std::array<std::int64_t, 4>;

enum class TensorKind : std::uint8_t {
  memory,    // device memory, named in the variant pack by its id
  by_value,  // a scalar whose host address goes in the variant pack, read when the plan executes
  virtual_,  // an intermediate inside the fused graph: never in memory, never in the variant pack
};

// A finalized tensor descriptor. `alignment` is what the variant pack's pointer is promised to
// have, in bytes.
inline Descriptor tensor_descriptor(const std::string& name, std::int64_t id, cudnnDataType_t type, const Extents& dims,
                                    const Extents& strides, std::int64_t alignment,
                                    TensorKind kind = TensorKind::memory) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, name + " tensor");
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, type);
  t.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 4, dims.data());
  t.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 4, strides.data());
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, id);
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, alignment);
  if (kind == TensorKind::by_value) t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, true);
  if (kind == TensorKind::virtual_) t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, true);
  t.finalize();
  return t;
}

// The finalized graph and every descriptor it was made from (kept for the plan's lifetime; a
// deque, so that references to its elements survive later insertions).
struct OperationGraph {
  std::deque<Descriptor> parts;
  std::optional<Descriptor> graph;
};

// Finalizes out.graph over `operations` (finalized operation descriptors, in the graph's order).
inline void finalize_graph(OperationGraph& out, cudnnHandle_t handle, const std::vector<const Descriptor*>& operations) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Descriptor* op : operations) raw.push_back(op->get());
  Descriptor& graph = out.graph.emplace(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  graph.set_value(kGraphHandle, CUDNN_TYPE_HANDLE, handle);
  graph.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<std::int64_t>(raw.size()), raw.data());
  graph.finalize();
}

// ---------------------------------------------------------------------------------------------
// Engines: heuristics mode A's configs, in its order, until one finalizes into a plan.

inline std::vector<Descriptor> engine_configs(const Descriptor& graph) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics (mode A)");
  heuristics.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), graph);
  heuristics.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
  heuristics.finalize();

  const std::string get_results = "cudnnBackendGetAttribute(" + heuristics.what() + ", CUDNN_ATTR_ENGINEHEUR_RESULTS)";
  std::int64_t available = 0;
  check_cudnn(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       0, &available, nullptr),
              get_results);
  // cuDNN fills engine-config descriptors that the caller has created.
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < available; ++i)
    raw.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config " + std::to_string(i)).get());
  std::int64_t returned = 0;
  if (available > 0) {
    check_cudnn(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         available, &returned, raw.data()),
                get_results);
  }
  configs.erase(configs.begin() + std::min(returned, available), configs.end());
  return configs;
}

inline Descriptor execution_plan(cudnnHandle_t handle, const Descriptor& config) {
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan from " + config.what());
  plan.set_value(kPlanHandle, CUDNN_TYPE_HANDLE, handle);
  plan.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), config);
  plan.finalize();
  return plan;
}

// The first config that finalizes. When none does, every config's failure is listed (after "no
// cuDNN <what>: "), and the whole is a refusal only if each of them was one (or there was no
// config at all).
inline Descriptor first_plan_that_finalizes(cudnnHandle_t handle, const Descriptor& graph, const std::string& what) {
  const std::vector<Descriptor> configs = engine_configs(graph);
  std::string failures;
  bool all_refusals = true;
  for (const Descriptor& config : configs) {
    try {
      return execution_plan(handle, config);
    } catch (const Failure& f) {
      failures += (failures.empty() ? "" : " | ") + f.result.message;
      all_refusals = all_refusals && f.result.not_supported;
    }
  }
  if (configs.empty()) failures = "heuristics mode A offered no engine config";
  throw Failure{{false, all_refusals, "no cuDNN " + what + ": " + failures}};
}

inline std::size_t workspace_size(const Descriptor& plan) {
  std::int64_t bytes = 0, count = 0;
  check_cudnn(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                       &count, &bytes),
              "cudnnBackendGetAttribute(" + plan.what() + ", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)");
  return static_cast<std::size_t>(bytes);
}

// Executes `plan` on the handle's stream with the tensors `ids` at `pointers` (same order). The
// variant pack takes non-const pointers, inputs included; a by-value tensor's pointer is a host
// address, as aligned as its tensor says, read during this call.
inline void execute_plan(cudnnHandle_t handle, const Descriptor& plan, std::span<const std::int64_t> ids,
                         std::span<void* const> pointers, void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  pack.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64,
           static_cast<std::int64_t>(ids.size()), ids.data());
  pack.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR,
           static_cast<std::int64_t>(pointers.size()), pointers.data());
  pack.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, workspace);
  pack.finalize();
  check_cudnn(cudnnBackendExecute(handle, plan.get(), pack.get()), "cudnnBackendExecute(" + plan.what() + ")");
}

// ---------------------------------------------------------------------------------------------
// The plans of one wrapper in one LibraryHandles, by problem key. Refusals are remembered too, so
// that a problem cuDNN cannot do is asked about once. At most kCapacity entries (each plan holds
// device memory); the least recently used goes first, on a miss, which never happens inside a
// capture. A CUDA graph captured over more distinct problems than that would point at a freed
// workspace.

template <class Key, class Plan>
class PlanCache {
 public:
  struct Entry {
    std::unique_ptr<Plan> plan;  // null for a refusal
    LibraryCallResult refusal;
    std::uint64_t last_use = 0;
  };

  Entry* find(const Key& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    it->second.last_use = ++clock_;
    return &it->second;
  }

  Entry& insert(const Key& key, Entry entry) {
    if (entries_.size() >= kCapacity) {
      auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                     [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
      entries_.erase(oldest);
    }
    entry.last_use = ++clock_;
    return entries_.insert_or_assign(key, std::move(entry)).first->second;
  }

 private:
  static constexpr std::size_t kCapacity = 32;
  std::map<Key, Entry> entries_;
  std::uint64_t clock_ = 0;
};

// The largest power of two up to 16 that divides every address.
inline std::int64_t common_alignment(std::initializer_list<const void*> pointers) {
  std::uintptr_t bits = 16;
  for (const void* p : pointers) bits |= reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::int64_t>(bits & (~bits + 1));
}

inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // A failed query (e.g. the legacy stream while another captures) counts as capturing: too
  // uncertain to allocate.
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

// The cached entry for `key` in the PlanCache that `libraries` keeps under `cache_name`; on a miss
// (refused inside a stream capture) a Plan(handle, key) is built. `describe` names the plan in
// messages ("LayerNorm plan for f16 4x8"). Refusals are cached; errors are not, since they may be
// transient (memory): the next call asks again.
template <class Plan, class Key>
typename PlanCache<Key, Plan>::Entry& plan_for(LibraryHandles& libraries, const std::string& cache_name,
                                               cudnnHandle_t handle, cudaStream_t stream, const Key& key,
                                               std::string (*describe)(const Key&)) {
  using Cache = PlanCache<Key, Plan>;
  Cache& cache = libraries.cache<Cache>(cache_name);
  if (typename Cache::Entry* entry = cache.find(key)) return *entry;
  if (capturing(stream))
    throw Failure{{false, false,
                   "cuDNN " + describe(key) +
                       " requested inside a stream capture: building one allocates; call once outside the capture first"}};
  try {
    return cache.insert(key, {std::make_unique<Plan>(handle, key), {}, 0});
  } catch (const Failure& f) {
    if (!f.result.not_supported) throw;
    return cache.insert(key, {nullptr, f.result, 0});
  }
}

}  // namespace shapetune::cudnn_graph
