#include <cudnn.h>

#include <climits>
#include <memory>

#include "baselines/cudnn.hpp"
#include "baselines/library_handles.hpp"

namespace shapetune {
namespace {

struct TensorDescriptorDeleter {
  void operator()(cudnnTensorStruct* d) const { cudnnDestroyTensorDescriptor(d); }
};
struct ActivationDescriptorDeleter {
  void operator()(cudnnActivationStruct* d) const { cudnnDestroyActivationDescriptor(d); }
};
using TensorDescriptor = std::unique_ptr<cudnnTensorStruct, TensorDescriptorDeleter>;
using ActivationDescriptor = std::unique_ptr<cudnnActivationStruct, ActivationDescriptorDeleter>;

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

cudnnActivationMode_t cudnn_mode(CudnnActivation f) {
  switch (f) {
    case CudnnActivation::relu: return CUDNN_ACTIVATION_RELU;
    case CudnnActivation::sigmoid: return CUDNN_ACTIVATION_SIGMOID;
    case CudnnActivation::silu: return CUDNN_ACTIVATION_SWISH;
  }
  return CUDNN_ACTIVATION_IDENTITY;
}

LibraryCallResult from_status(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return {};
  const bool refused = s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM;
  return {false, refused, std::string(call) + ": " + cudnnGetErrorString(s)};
}

// The descriptors one activation call needs: one packed tensor shape for every operand, and
// the function.
struct ActivationCall {
  TensorDescriptor tensor;
  ActivationDescriptor activation;
};

LibraryCallResult describe(DType dtype, CudnnActivation f, std::int64_t n, ActivationCall& call) {
  if (n > INT_MAX) return {false, true, "cuDNN tensor extents are 32-bit"};
  cudnnTensorDescriptor_t tensor = nullptr;
  if (auto r = from_status(cudnnCreateTensorDescriptor(&tensor), "cudnnCreateTensorDescriptor"); !r.ok) return r;
  call.tensor.reset(tensor);
  if (auto r = from_status(cudnnSetTensor4dDescriptor(tensor, CUDNN_TENSOR_NCHW, cudnn_type(dtype),
                                                      static_cast<int>(n), 1, 1, 1),
                           "cudnnSetTensor4dDescriptor");
      !r.ok)
    return r;
  cudnnActivationDescriptor_t activation = nullptr;
  if (auto r = from_status(cudnnCreateActivationDescriptor(&activation), "cudnnCreateActivationDescriptor"); !r.ok)
    return r;
  call.activation.reset(activation);
  // NaN propagates, as in our kernels; the coefficient is unused by these three modes.
  if (auto r = from_status(cudnnSetActivationDescriptor(activation, cudnn_mode(f), CUDNN_PROPAGATE_NAN, 0.0),
                           "cudnnSetActivationDescriptor");
      !r.ok)
    return r;
  if (f == CudnnActivation::silu)
    return from_status(cudnnSetActivationDescriptorSwishBeta(activation, 1.0), "cudnnSetActivationDescriptorSwishBeta");
  return {};
}

LibraryCallResult forward(cudnnHandle_t handle, const ActivationCall& call, const void* x, void* y) {
  const float alpha = 1.f, beta = 0.f;  // float scalars for float, half and bfloat16 data
  return from_status(cudnnActivationForward(handle, call.activation.get(), &alpha, call.tensor.get(), x, &beta,
                                            call.tensor.get(), y),
                     "cudnnActivationForward");
}

}  // namespace

LibraryCallResult cudnn_activation_forward(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                           CudnnActivation f, std::int64_t n, const void* x, void* y) {
  ActivationCall call;
  if (auto r = describe(dtype, f, n, call); !r.ok) return r;
  return forward(libraries.cudnn(stream), call, x, y);
}

LibraryCallResult cudnn_activation_backward(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                            CudnnActivation f, std::int64_t n, const void* x, const void* dy, void* dx,
                                            void* y_workspace) {
  ActivationCall call;
  if (auto r = describe(dtype, f, n, call); !r.ok) return r;
  cudnnHandle_t handle = libraries.cudnn(stream);
  if (auto r = forward(handle, call, x, y_workspace); !r.ok) return r;
  const float alpha = 1.f, beta = 0.f;
  const cudnnTensorDescriptor_t t = call.tensor.get();
  return from_status(
      cudnnActivationBackward(handle, call.activation.get(), &alpha, t, y_workspace, t, dy, t, x, &beta, t, dx),
      "cudnnActivationBackward");
}

}  // namespace shapetune
