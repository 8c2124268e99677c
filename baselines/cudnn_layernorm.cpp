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

#include <array>
#include <cstdint>
#include <string>

#include "baselines/cudnn.hpp"
#include "baselines/cudnn_graph.hpp"
#include "baselines/library_handles.hpp"

namespace shapetune {
namespace {

using namespace cudnn_graph;

// ---------------------------------------------------------------------------------------------
// The operation graph.

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

std::string plan_text(const PlanKey& key) { return "LayerNorm plan for " + shape_text(key); }

// Packed 4-d tensors, NCHW order with H = W = 1: cuDNN's layer norm normalizes over every
// dimension but N, so N = rows and C = cols.
Extents packed_strides(const Extents& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

Descriptor tensor(const std::string& name, TensorId id, cudnnDataType_t type, const Extents& dims, std::int64_t alignment,
                  bool by_value = false) {
  return tensor_descriptor(name, id, type, dims, packed_strides(dims), alignment,
                           by_value ? TensorKind::by_value : TensorKind::memory);
}

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

  finalize_graph(out, handle, {&op});
  return out;
}

// ---------------------------------------------------------------------------------------------
// A built plan and what it needs at every call.

class LayerNormPlan {
 public:
  LayerNormPlan(cudnnHandle_t handle, const PlanKey& key)
      : graph_(layernorm_graph(handle, key)),
        plan_(first_plan_that_finalizes(handle, *graph_.graph, plan_text(key))),
        workspace_(workspace_size(plan_), "cuDNN workspace") {}

  void execute(cudnnHandle_t handle, const void* x, const void* gamma, const void* beta, float epsilon, void* y) const {
    // Epsilon goes by host address, as aligned as its tensor says.
    alignas(16) float epsilon_value = epsilon;
    const std::array<std::int64_t, 5> ids = {kX, kScale, kBias, kEpsilon, kY};
    const std::array<void*, 5> pointers = {const_cast<void*>(x), const_cast<void*>(gamma), const_cast<void*>(beta),
                                           &epsilon_value, y};
    execute_plan(handle, plan_, ids, pointers, workspace_.get());
  }

 private:
  OperationGraph graph_;  // the plan was finalized from these: they go last
  Descriptor plan_;
  DeviceMemory workspace_;
};

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
    const auto& entry = plan_for<LayerNormPlan>(libraries, "cudnn_layernorm_forward", handle, stream, key, plan_text);
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
