// LayerNorm forward through cuDNN's graph API: one NORM_FORWARD operation (CUDNN_LAYER_NORM,
// inference phase: no statistics written) in an operation graph, engine configs from heuristics
// mode A, the first execution plan that finalizes. Building all that takes 0.2 to 0.9 s on the
// H200 and allocates, so it happens once per (dtype, rows, cols, alignment) and is kept in the
// LibraryHandles together with its workspace; later calls only fill a variant pack and execute,
// which is safe inside a stream capture.
//
// Scale and bias are in the data's own type: cuDNN accepts that for f16 and bf16 (seen on the
// H200 for widths 1 to 12288), so no float copies of the weights are needed.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baselines/cudnn.hpp"
#include "baselines/library_handles.hpp"

namespace shapetune {
namespace {

// ---------------------------------------------------------------------------------------------
// Failures: every cuDNN or CUDA call that can fail throws one, naming the call, the descriptor
// and the attribute, cuDNN's status and its own last message; the entry point turns it into a
// LibraryCallResult. `not_supported` is set for cuDNN's NOT_SUPPORTED family (3000-3999): the
// problem is beyond what cuDNN can do, which the sweep records as a refusal, not an error.

struct Failure {
  LibraryCallResult result;
};

[[noreturn]] void throw_cudnn(const std::string& call, cudnnStatus_t status) {
  std::string message = call + ": " + cudnnGetErrorString(status) + " (" + std::to_string(static_cast<int>(status)) + ")";
  std::array<char, 1024> detail{};
  cudnnGetLastErrorString(detail.data(), detail.size());
  if (detail[0] != '\0') message += "; cuDNN says: " + std::string(detail.data());
  throw Failure{{false, CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED, std::move(message)}};
}

void check_cudnn(cudnnStatus_t status, const std::string& call) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn(call, status);
}

void check_cuda(cudaError_t error, const std::string& call) {
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
#define SHAPETUNE_ATTRIBUTE(id) (Attribute{id, #id})

// cuDNN 9.19's headers deprecate the graph's and the plan's handle attributes (a device-property
// descriptor may stand in for them), but the 9.14 runtime on the GPU box, like cudnn_frontend,
// still takes the handle this way.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
const Attribute kGraphHandle = SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
const Attribute kPlanHandle = SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
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
// The operation graph.

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// The variant pack names tensors by these ids.
enum TensorId : std::int64_t { kX = 1, kScale, kBias, kEpsilon, kY };

struct PlanKey {
  DType dtype;
  std::int64_t rows;
  std::int64_t cols;
  std::int64_t alignment;  // bytes, a power of two up to 16, that every caller pointer has
  auto operator<=>(const PlanKey&) const = default;
};

std::string shape_text(const PlanKey& key) {
  return std::string(dtype_name(key.dtype)) + " " + std::to_string(key.rows) + "x" + std::to_string(key.cols);
}

// Packed 4-d tensors, NCHW order with H = W = 1: cuDNN's layer norm normalizes over every
// dimension but N, so N = rows and C = cols.
using Extents = std::array<std::int64_t, 4>;
Extents packed_strides(const Extents& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

Descriptor tensor(const std::string& name, TensorId id, cudnnDataType_t type, const Extents& dims, std::int64_t alignment,
                  bool by_value = false) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, name + " tensor");
  const Extents strides = packed_strides(dims);
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, type);
  t.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 4, dims.data());
  t.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 4, strides.data());
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, static_cast<std::int64_t>(id));
  t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, alignment);
  if (by_value) t.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, true);
  t.finalize();
  return t;
}

// The finalized graph and every descriptor it was made from (kept for the plan's lifetime; a
// deque, so that references to its elements survive later insertions).
struct OperationGraph {
  std::deque<Descriptor> parts;
  std::optional<Descriptor> graph;
};

OperationGraph layernorm_graph(cudnnHandle_t handle, const PlanKey& key) {
  const cudnnDataType_t type = cudnn_type(key.dtype);
  const Extents data{key.rows, key.cols, 1, 1};
  const Extents weights{1, key.cols, 1, 1};
  const Extents scalar{1, 1, 1, 1};

  OperationGraph out;
  auto& parts = out.parts;
  const Descriptor& x = parts.emplace_back(tensor("x", kX, type, data, key.alignment));
  const Descriptor& scale = parts.emplace_back(tensor("scale", kScale, type, weights, key.alignment));
  const Descriptor& bias = parts.emplace_back(tensor("bias", kBias, type, weights, key.alignment));
  // Epsilon travels in the variant pack as a host float, read when the plan executes.
  const Descriptor& epsilon = parts.emplace_back(tensor("epsilon", kEpsilon, CUDNN_DATA_FLOAT, scalar, 16, true));
  const Descriptor& y = parts.emplace_back(tensor("y", kY, type, data, key.alignment));

  // The inference phase takes no mean or inverse-variance outputs (the training phase needs both).
  Descriptor& op = parts.emplace_back(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, "norm forward operation");
  op.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_MODE), CUDNN_TYPE_NORM_MODE, CUDNN_LAYER_NORM);
  op.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE), CUDNN_TYPE_NORM_FWD_PHASE,
               CUDNN_NORM_FWD_INFERENCE);
  op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC), x);
  op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC), scale);
  op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC), bias);
  op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC), epsilon);
  op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC), y);
  op.finalize();

  Descriptor& graph = out.graph.emplace(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  graph.set_value(kGraphHandle, CUDNN_TYPE_HANDLE, handle);
  graph.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATIONGRAPH_OPS), op);
  graph.finalize();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Engines: heuristics mode A's configs, in its order, until one finalizes into a plan.

std::vector<Descriptor> engine_configs(const Descriptor& graph) {
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

Descriptor execution_plan(cudnnHandle_t handle, const Descriptor& config) {
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan from " + config.what());
  plan.set_value(kPlanHandle, CUDNN_TYPE_HANDLE, handle);
  plan.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), config);
  plan.finalize();
  return plan;
}

// The first config that finalizes. When none does, every config's failure is listed, and the
// whole is a refusal only if each of them was one (or there was no config at all).
Descriptor first_plan_that_finalizes(cudnnHandle_t handle, const Descriptor& graph, const PlanKey& key) {
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
  throw Failure{{false, all_refusals, "no cuDNN LayerNorm plan for " + shape_text(key) + ": " + failures}};
}

// ---------------------------------------------------------------------------------------------
// A built plan and what it needs at every call.

class LayerNormPlan {
 public:
  LayerNormPlan(cudnnHandle_t handle, const PlanKey& key)
      : graph_(layernorm_graph(handle, key)),
        plan_(first_plan_that_finalizes(handle, *graph_.graph, key)),
        workspace_(workspace_size(plan_), "cuDNN workspace") {}

  void execute(cudnnHandle_t handle, const void* x, const void* gamma, const void* beta, float epsilon, void* y) const {
    // The variant pack takes non-const pointers, inputs included; epsilon goes by host address,
    // as aligned as its tensor says.
    alignas(16) float epsilon_value = epsilon;
    const std::array<std::int64_t, 5> ids = {kX, kScale, kBias, kEpsilon, kY};
    const std::array<void*, 5> pointers = {const_cast<void*>(x), const_cast<void*>(gamma), const_cast<void*>(beta),
                                           &epsilon_value, y};
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    pack.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, ids.size(), ids.data());
    pack.set(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, pointers.size(),
             pointers.data());
    pack.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, workspace_.get());
    pack.finalize();
    check_cudnn(cudnnBackendExecute(handle, plan_.get(), pack.get()), "cudnnBackendExecute(" + plan_.what() + ")");
  }

 private:
  static std::size_t workspace_size(const Descriptor& plan) {
    std::int64_t bytes = 0, count = 0;
    check_cudnn(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &count, &bytes),
                "cudnnBackendGetAttribute(" + plan.what() + ", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)");
    return static_cast<std::size_t>(bytes);
  }

  OperationGraph graph_;  // the plan was finalized from these: they go last
  Descriptor plan_;
  DeviceMemory workspace_;
};

// ---------------------------------------------------------------------------------------------
// The plans of one LibraryHandles. Refusals are remembered too, so that a problem cuDNN cannot
// do is asked about once. At most kCapacity entries (each plan holds device memory); the least
// recently used goes first, on a miss, which never happens inside a capture. A CUDA graph
// captured over more distinct problems than that would point at a freed workspace.

class PlanCache {
 public:
  struct Entry {
    std::unique_ptr<LayerNormPlan> plan;  // null for a refusal
    LibraryCallResult refusal;
    std::uint64_t last_use = 0;
  };

  Entry* find(const PlanKey& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    it->second.last_use = ++clock_;
    return &it->second;
  }

  Entry& insert(const PlanKey& key, Entry entry) {
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
  std::map<PlanKey, Entry> entries_;
  std::uint64_t clock_ = 0;
};

// The largest power of two up to 16 that divides every address.
std::int64_t common_alignment(std::initializer_list<const void*> pointers) {
  std::uintptr_t bits = 16;
  for (const void* p : pointers) bits |= reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::int64_t>(bits & (~bits + 1));
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // A failed query (e.g. the legacy stream while another captures) counts as capturing: too
  // uncertain to allocate.
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

PlanCache::Entry& plan_for(LibraryHandles& libraries, cudnnHandle_t handle, cudaStream_t stream, const PlanKey& key) {
  PlanCache& cache = libraries.cache<PlanCache>("cudnn_layernorm_forward");
  if (PlanCache::Entry* entry = cache.find(key)) return *entry;
  if (capturing(stream))
    throw Failure{{false, false,
                   "cuDNN LayerNorm plan for " + shape_text(key) +
                       " requested inside a stream capture: building one allocates; call once outside the capture first"}};
  try {
    return cache.insert(key, {std::make_unique<LayerNormPlan>(handle, key), {}, 0});
  } catch (const Failure& f) {
    if (!f.result.not_supported) throw;  // errors may be transient (memory): ask again next time
    return cache.insert(key, {nullptr, f.result, 0});
  }
}

}  // namespace

LibraryCallResult cudnn_layernorm_forward(LibraryHandles& libraries, cudaStream_t stream, DType dtype, std::int64_t rows,
                                          std::int64_t cols, const void* x, const void* gamma, const void* beta,
                                          float epsilon, void* y) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    return {false, true, "cuDNN LayerNorm takes f32, f16 or bf16 data, not " + std::string(dtype_name(dtype))};
  if (rows < 1 || cols < 1) return {false, false, "LayerNorm needs rows >= 1 and cols >= 1"};
  try {
    const cudnnHandle_t handle = libraries.cudnn(stream);
    const PlanKey key{dtype, rows, cols, common_alignment({x, gamma, beta, y})};
    const PlanCache::Entry& entry = plan_for(libraries, handle, stream, key);
    if (!entry.plan) return entry.refusal;
    entry.plan->execute(handle, x, gamma, beta, epsilon, y);
    return {};
  } catch (const Failure& f) {
    return f.result;
  } catch (const LibraryError& e) {
    return {false, false, e.what()};
  }
}

}  // namespace shapetune
