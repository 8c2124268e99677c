// One LSTM or GRU layer through cuDNN's RNN API, with each of the algorithms cuDNN offers:
// forward (cudnnRNNForward, inference mode) and backward (a training-mode forward, then
// cudnnRNNBackwardData_v8 and cudnnRNNBackwardWeights_v8). The descriptors, the weight space, the
// temporary space and the device copy of the sequence lengths (and for the backward the reserve
// space, y and the gradients' weight space) are made on the first call for a (cell, dtype, shape,
// algorithm, mode) and kept in the LibraryHandles; PERSIST_DYNAMIC's kernels are built then too
// (cudnnBuildRNNDynamic). Every call copies the caller's weights into cuDNN's weight space with
// one kernel (kernels/rnn: copy_segments), so the result always follows the weights it was given;
// on the H200 that copy is a few microseconds against the hundreds the sequence takes. The
// backward copies the weight gradients out the same way.
//
// cuDNN's gate order is PyTorch's (LSTM i, f, g, o; GRU r, z, n) and its per-gate matrices are
// PyTorch's W_ih and W_hh row blocks, so the repacking is a plain copy per gate.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "baselines/cudnn.hpp"
#include "baselines/library_handles.hpp"
#include "kernels/rnn/rnn.cuh"

namespace shapetune {
namespace {

struct Failure {
  LibraryCallResult result;
};

void check_cudnn(cudnnStatus_t status, const std::string& call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string message = call + ": " + cudnnGetErrorString(status) + " (" + std::to_string(static_cast<int>(status)) + ")";
  std::array<char, 1024> detail{};
  cudnnGetLastErrorString(detail.data(), detail.size());
  if (detail[0] != '\0') message += "; cuDNN says: " + std::string(detail.data());
  throw Failure{{false, CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED, std::move(message)}};
}

void check_cuda(cudaError_t error, const std::string& call) {
  if (error == cudaSuccess) return;
  cudaGetLastError();
  throw Failure{{false, false, call + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error)}};
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;  // f32, and tf32 whose tensors are f32
  }
}

template <typename Raw, cudnnStatus_t (*destroy)(Raw)>
struct Owned {
  Raw raw = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (raw) destroy(raw);
  }
};

struct DeviceMemory {
  void* ptr = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void allocate(std::size_t bytes, const std::string& what) {
    if (bytes > 0) check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc(" + what + ", " + std::to_string(bytes) + " bytes)");
  }
  ~DeviceMemory() {
    if (ptr) cudaFree(ptr);
  }
};

// (cell, dtype, T, N, D, H, algo, mode, instance): instance is null but for a trainer's halves.
using Key = std::tuple<int, DType, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, const void*>;

// What one (cell, dtype, shape, algorithm, mode) needs across calls. Training mode adds what the
// backward reads: the reserve space, y, and a weight space for the gradients.
struct Plan {
  Owned<cudnnRNNDescriptor_t, cudnnDestroyRNNDescriptor> rnn;
  Owned<cudnnDropoutDescriptor_t, cudnnDestroyDropoutDescriptor> dropout;
  Owned<cudnnRNNDataDescriptor_t, cudnnDestroyRNNDataDescriptor> x_desc, y_desc;
  Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> h_desc;
  DeviceMemory dropout_states, weight_space, temp_space, seq_lengths, reserve_space, y, gradient_space;
  std::size_t weight_space_bytes = 0, temp_space_bytes = 0, reserve_space_bytes = 0;
  // Where each gate's matrices and biases go in the weight space: offsets in bytes, in the order
  // W_ih gates, W_hh gates, b_ih gates, b_hh gates.
  std::array<std::ptrdiff_t, kernels::rnn::CopySegments::kMax> offsets{};
  int segments = 0;
};

struct Plans {
  std::map<Key, std::unique_ptr<Plan>> plans;
};

// fp32 accumulation for every type. f32: CUDNN_FMA_MATH, no TF32, as the primitive is defined.
// f16, bf16: tensor cores (CUDNN_TENSOR_OP_MATH). tf32 (fp32 data, TF32 products allowed):
// CUDNN_DEFAULT_MATH, which on sm_80+ permits TF32 tensor-core products for fp32 data (cuDNN's
// cudnnMathType_t: "CUDNN_DEFAULT_MATH permits TF32 Tensor Core operation and CUDNN_FMA_MATH does
// not"), and is what PyTorch sets for an fp32 nn.LSTM/nn.GRU while torch.backends.cudnn.allow_tf32
// holds (aten/src/ATen/cudnn/Descriptors.h, RNNDescriptor), so this baseline is the RNN PyTorch
// runs by default. Not CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: what it adds to tensor-op math is
// an active down-conversion of the tensors to use tensor cores (FP32 data to FP16 when cuDNN 7.2
// introduced it), which is not what PyTorch's figures are made with.
cudnnMathType_t math_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_FMA_MATH;
    case DType::tf32: return CUDNN_DEFAULT_MATH;
    default: return CUDNN_TENSOR_OP_MATH;
  }
}

cudnnRNNAlgo_t algorithm(int algo) {
  switch (algo) {
    case 1: return CUDNN_RNN_ALGO_PERSIST_STATIC;
    case 2: return CUDNN_RNN_ALGO_PERSIST_DYNAMIC;
    case 3: return CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
    default: return CUDNN_RNN_ALGO_STANDARD;
  }
}

std::unique_ptr<Plan> make_plan(cudnnHandle_t handle, const CudnnRnnForward& f, cudnnForwardMode_t mode) {
  auto plan = std::make_unique<Plan>();
  const bool lstm = f.cell == CudnnRnnCell::lstm;
  const int gates = lstm ? 4 : 3;
  const cudnnDataType_t type = cudnn_type(f.dtype);
  const auto N = static_cast<int>(f.batch), H = static_cast<int>(f.hidden), D = static_cast<int>(f.input),
             T = static_cast<int>(f.steps);

  // A dropout descriptor is part of the RNN descriptor even at probability 0 (one layer: unused).
  check_cudnn(cudnnCreateDropoutDescriptor(&plan->dropout.raw), "cudnnCreateDropoutDescriptor");
  std::size_t state_bytes = 0;
  check_cudnn(cudnnDropoutGetStatesSize(handle, &state_bytes), "cudnnDropoutGetStatesSize");
  plan->dropout_states.allocate(state_bytes, "dropout states");
  check_cudnn(cudnnSetDropoutDescriptor(plan->dropout.raw, handle, 0.f, plan->dropout_states.ptr, state_bytes, 0),
              "cudnnSetDropoutDescriptor");

  check_cudnn(cudnnCreateRNNDescriptor(&plan->rnn.raw), "cudnnCreateRNNDescriptor");
  check_cudnn(cudnnSetRNNDescriptor_v8(plan->rnn.raw, algorithm(f.algo), lstm ? CUDNN_LSTM : CUDNN_GRU,
                                       CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type,
                                       CUDNN_DATA_FLOAT, math_type(f.dtype), D, H, H, 1, plan->dropout.raw,
                                       CUDNN_RNN_PADDED_IO_DISABLED),
              "cudnnSetRNNDescriptor_v8");
  if (f.algo == 2) check_cudnn(cudnnBuildRNNDynamic(handle, plan->rnn.raw, N), "cudnnBuildRNNDynamic");

  std::vector<int> lengths(static_cast<std::size_t>(N), T);
  check_cudnn(cudnnCreateRNNDataDescriptor(&plan->x_desc.raw), "cudnnCreateRNNDataDescriptor(x)");
  check_cudnn(cudnnSetRNNDataDescriptor(plan->x_desc.raw, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, N, D,
                                        lengths.data(), nullptr),
              "cudnnSetRNNDataDescriptor(x)");
  check_cudnn(cudnnCreateRNNDataDescriptor(&plan->y_desc.raw), "cudnnCreateRNNDataDescriptor(y)");
  check_cudnn(cudnnSetRNNDataDescriptor(plan->y_desc.raw, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, N, H,
                                        lengths.data(), nullptr),
              "cudnnSetRNNDataDescriptor(y)");
  const int dims[3] = {1, N, H}, strides[3] = {N * H, H, 1};
  check_cudnn(cudnnCreateTensorDescriptor(&plan->h_desc.raw), "cudnnCreateTensorDescriptor(h)");
  check_cudnn(cudnnSetTensorNdDescriptor(plan->h_desc.raw, type, 3, dims, strides), "cudnnSetTensorNdDescriptor(h)");

  plan->seq_lengths.allocate(lengths.size() * sizeof(int), "sequence lengths");
  check_cuda(cudaMemcpy(plan->seq_lengths.ptr, lengths.data(), lengths.size() * sizeof(int), cudaMemcpyHostToDevice),
             "cudaMemcpy(sequence lengths)");

  check_cudnn(cudnnGetRNNWeightSpaceSize(handle, plan->rnn.raw, &plan->weight_space_bytes),
              "cudnnGetRNNWeightSpaceSize");
  plan->weight_space.allocate(plan->weight_space_bytes, "weight space");
  check_cudnn(cudnnGetRNNTempSpaceSizes(handle, plan->rnn.raw, mode, plan->x_desc.raw, &plan->temp_space_bytes,
                                        &plan->reserve_space_bytes),
              "cudnnGetRNNTempSpaceSizes");
  plan->temp_space.allocate(plan->temp_space_bytes, "temporary space");
  if (mode == CUDNN_FWD_MODE_TRAINING) {
    plan->reserve_space.allocate(plan->reserve_space_bytes, "reserve space");
    plan->y.allocate(static_cast<std::size_t>(f.steps * f.batch * f.hidden) * dtype_size(f.dtype), "y");
    plan->gradient_space.allocate(plan->weight_space_bytes, "gradient weight space");
  }

  // linLayerID: 0 .. G-1 the input matrices of each gate, G .. 2G-1 the recurrent ones.
  Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> m_desc, b_desc;
  check_cudnn(cudnnCreateTensorDescriptor(&m_desc.raw), "cudnnCreateTensorDescriptor(matrix)");
  check_cudnn(cudnnCreateTensorDescriptor(&b_desc.raw), "cudnnCreateTensorDescriptor(bias)");
  std::array<std::ptrdiff_t, 2 * 4> matrix{}, bias{};
  for (int id = 0; id < 2 * gates; ++id) {
    void* m = nullptr;
    void* b = nullptr;
    check_cudnn(cudnnGetRNNWeightParams(handle, plan->rnn.raw, 0, plan->weight_space_bytes, plan->weight_space.ptr, id,
                                        m_desc.raw, &m, b_desc.raw, &b),
                "cudnnGetRNNWeightParams(" + std::to_string(id) + ")");
    matrix[static_cast<std::size_t>(id)] = static_cast<char*>(m) - static_cast<char*>(plan->weight_space.ptr);
    bias[static_cast<std::size_t>(id)] = static_cast<char*>(b) - static_cast<char*>(plan->weight_space.ptr);
  }
  for (int id = 0; id < 2 * gates; ++id) plan->offsets[static_cast<std::size_t>(id)] = matrix[static_cast<std::size_t>(id)];
  for (int id = 0; id < 2 * gates; ++id)
    plan->offsets[static_cast<std::size_t>(2 * gates + id)] = bias[static_cast<std::size_t>(id)];
  plan->segments = 4 * gates;
  return plan;
}

// Whether cuDNN's RNN takes the problem at all (32-bit extents; f32, tf32, f16, bf16).
LibraryCallResult refusal_of(const CudnnRnnForward& f) {
  if (f.dtype != DType::f32 && f.dtype != DType::tf32 && f.dtype != DType::f16 && f.dtype != DType::bf16)
    return {false, true, "cuDNN's RNN has no " + std::string(dtype_name(f.dtype)) + " variant here"};
  if (std::max({f.steps, f.batch, f.input, f.hidden}) > INT_MAX / 4)
    return {false, true, "cuDNN's RNN API takes 32-bit extents"};
  return {};
}

Plan& plan_for(LibraryHandles& libraries, cudnnHandle_t handle, const CudnnRnnForward& f, cudnnForwardMode_t mode,
               const void* instance = nullptr) {
  Plans& plans = libraries.cache<Plans>("cudnn_rnn");
  const Key key{static_cast<int>(f.cell), f.dtype, f.steps,   f.batch, f.input,
                f.hidden,                 f.algo,  static_cast<int>(mode), instance};
  auto& slot = plans.plans[key];
  if (!slot) slot = make_plan(handle, f, mode);
  return *slot;
}

// Our four weight tensors in PyTorch's layout, in the plan's segment order.
struct Weights {
  const void* w_ih;
  const void* w_hh;
  const void* b_ih;
  const void* b_hh;
};

// The copies between our weight tensors and a weight space of the plan's layout (the weights
// or, for the gradients, the same layout): gate g of W_ih is rows [g H, (g + 1) H) of [G H, D],
// likewise W_hh and the biases. `into_space` copies ours into the space, else the space into ours.
kernels::rnn::CopySegments weight_copies(const Plan& plan, const CudnnRnnForward& f, void* space, const Weights& ours,
                                         bool into_space) {
  const int gates = f.cell == CudnnRnnCell::lstm ? 4 : 3;
  const std::int64_t element = static_cast<std::int64_t>(dtype_size(f.dtype));
  const std::int64_t gate_bytes[4] = {f.hidden * f.input * element, f.hidden * f.hidden * element,
                                      f.hidden * element, f.hidden * element};
  const void* tensors[4] = {ours.w_ih, ours.w_hh, ours.b_ih, ours.b_hh};
  kernels::rnn::CopySegments copy;
  for (int k = 0; k < 4; ++k)
    for (int g = 0; g < gates; ++g) {
      const int segment = k * gates + g;
      // The caller's tensors are const for the weights and written for the gradients.
      auto* mine = const_cast<char*>(static_cast<const char*>(tensors[k])) + g * gate_bytes[k];
      char* theirs = static_cast<char*>(space) + plan.offsets[static_cast<std::size_t>(segment)];
      copy.src[segment] = into_space ? mine : theirs;
      copy.dst[segment] = into_space ? theirs : mine;
      copy.bytes[segment] = gate_bytes[k];
    }
  copy.count = plan.segments;
  return copy;
}

void load_weights(const Plan& plan, const CudnnRnnForward& f, cudaStream_t stream) {
  check_cuda(kernels::rnn::copy_segments(weight_copies(plan, f, plan.weight_space.ptr,
                                                       {f.w_ih, f.w_hh, f.b_ih, f.b_hh}, true),
                                         stream),
             "copy_segments(weights)");
}

// cudnnRNNForward in training mode: y, and h_t and c_t where given, and the plan's reserve space.
void training_forward(cudnnHandle_t handle, Plan& plan, const CudnnRnnForward& f, void* y) {
  const bool lstm = f.cell == CudnnRnnCell::lstm;
  check_cudnn(cudnnRNNForward(handle, plan.rnn.raw, CUDNN_FWD_MODE_TRAINING,
                              static_cast<const int*>(plan.seq_lengths.ptr), plan.x_desc.raw, f.x, plan.y_desc.raw, y,
                              plan.h_desc.raw, f.h0, f.h_t, lstm ? plan.h_desc.raw : nullptr, lstm ? f.c0 : nullptr,
                              lstm ? f.c_t : nullptr, plan.weight_space_bytes, plan.weight_space.ptr,
                              plan.temp_space_bytes, plan.temp_space.ptr, plan.reserve_space_bytes,
                              plan.reserve_space.ptr),
              "cudnnRNNForward(training)");
}

// From the training forward's reserve space and y: cudnnRNNBackwardData_v8, then the weights'
// gradients, copied out into PyTorch's layout.
void backward_after_forward(cudnnHandle_t handle, cudaStream_t stream, Plan& plan, const CudnnRnnBackward& b,
                            const void* y) {
  const CudnnRnnForward& f = b.layer;
  const bool lstm = f.cell == CudnnRnnCell::lstm;
  const auto* lengths = static_cast<const int*>(plan.seq_lengths.ptr);
  cudnnTensorDescriptor_t c_desc = lstm ? plan.h_desc.raw : nullptr;
  check_cudnn(cudnnRNNBackwardData_v8(handle, plan.rnn.raw, lengths, plan.y_desc.raw, y, b.dy, plan.x_desc.raw, b.dx,
                                      plan.h_desc.raw, f.h0, b.dh_t, b.dh0, c_desc, lstm ? f.c0 : nullptr,
                                      lstm ? b.dc_t : nullptr, lstm ? b.dc0 : nullptr, plan.weight_space_bytes,
                                      plan.weight_space.ptr, plan.temp_space_bytes, plan.temp_space.ptr,
                                      plan.reserve_space_bytes, plan.reserve_space.ptr),
              "cudnnRNNBackwardData_v8");
  // ADD is the mode every algorithm takes; the gradients then start from zero.
  check_cuda(cudaMemsetAsync(plan.gradient_space.ptr, 0, plan.weight_space_bytes, stream),
             "cudaMemsetAsync(gradient weight space)");
  check_cudnn(cudnnRNNBackwardWeights_v8(handle, plan.rnn.raw, CUDNN_WGRAD_MODE_ADD, lengths, plan.x_desc.raw, f.x,
                                         plan.h_desc.raw, f.h0, plan.y_desc.raw, y, plan.weight_space_bytes,
                                         plan.gradient_space.ptr, plan.temp_space_bytes, plan.temp_space.ptr,
                                         plan.reserve_space_bytes, plan.reserve_space.ptr),
              "cudnnRNNBackwardWeights_v8");
  check_cuda(kernels::rnn::copy_segments(weight_copies(plan, f, plan.gradient_space.ptr,
                                                       {b.dw_ih, b.dw_hh, b.db_ih, b.db_hh}, false),
                                         stream),
             "copy_segments(weight gradients)");
}

}  // namespace

LibraryCallResult cudnn_rnn_forward(LibraryHandles& libraries, cudaStream_t stream, const CudnnRnnForward& f) {
  try {
    if (LibraryCallResult refused = refusal_of(f); !refused.ok) return refused;
    cudnnHandle_t handle = libraries.cudnn(stream);
    Plan& plan = plan_for(libraries, handle, f, CUDNN_FWD_MODE_INFERENCE);
    load_weights(plan, f, stream);
    const bool lstm = f.cell == CudnnRnnCell::lstm;
    check_cudnn(cudnnRNNForward(handle, plan.rnn.raw, CUDNN_FWD_MODE_INFERENCE,
                                static_cast<const int*>(plan.seq_lengths.ptr), plan.x_desc.raw, f.x, plan.y_desc.raw,
                                f.y, plan.h_desc.raw, f.h0, f.h_t, lstm ? plan.h_desc.raw : nullptr,
                                lstm ? f.c0 : nullptr, lstm ? f.c_t : nullptr, plan.weight_space_bytes,
                                plan.weight_space.ptr, plan.temp_space_bytes, plan.temp_space.ptr, 0, nullptr),
                "cudnnRNNForward");
    return {};
  } catch (const Failure& failure) {
    return failure.result;
  }
}

LibraryCallResult cudnn_rnn_backward(LibraryHandles& libraries, cudaStream_t stream, const CudnnRnnBackward& b) {
  try {
    if (LibraryCallResult refused = refusal_of(b.layer); !refused.ok) return refused;
    cudnnHandle_t handle = libraries.cudnn(stream);
    Plan& plan = plan_for(libraries, handle, b.layer, CUDNN_FWD_MODE_TRAINING);
    load_weights(plan, b.layer, stream);
    // The final states are not wanted: the backward takes their gradients as given.
    CudnnRnnForward f = b.layer;
    f.h_t = f.c_t = nullptr;
    training_forward(handle, plan, f, plan.y.ptr);
    backward_after_forward(handle, stream, plan, b, plan.y.ptr);
    return {};
  } catch (const Failure& failure) {
    return failure.result;
  }
}

LibraryCallResult cudnn_rnn_training_forward(LibraryHandles& libraries, cudaStream_t stream,
                                             const CudnnRnnBackward& b, const void* instance) {
  try {
    if (LibraryCallResult refused = refusal_of(b.layer); !refused.ok) return refused;
    cudnnHandle_t handle = libraries.cudnn(stream);
    Plan& plan = plan_for(libraries, handle, b.layer, CUDNN_FWD_MODE_TRAINING, instance);
    load_weights(plan, b.layer, stream);
    training_forward(handle, plan, b.layer, b.layer.y);
    return {};
  } catch (const Failure& failure) {
    return failure.result;
  }
}

LibraryCallResult cudnn_rnn_backward_after_forward(LibraryHandles& libraries, cudaStream_t stream,
                                                   const CudnnRnnBackward& b, const void* instance) {
  try {
    if (LibraryCallResult refused = refusal_of(b.layer); !refused.ok) return refused;
    cudnnHandle_t handle = libraries.cudnn(stream);
    backward_after_forward(handle, stream, plan_for(libraries, handle, b.layer, CUDNN_FWD_MODE_TRAINING, instance), b,
                           b.layer.y);
    return {};
  } catch (const Failure& failure) {
    return failure.result;
  }
}

}  // namespace shapetune
