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
using TensorDescriptor = std::unique_ptr<cudnnTensorStruct, TensorDescriptorDeleter>;

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

LibraryCallResult from_status(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return {};
  const bool refused = s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM;
  return {false, refused, std::string(call) + ": " + cudnnGetErrorString(s)};
}

}  // namespace

LibraryCallResult cudnn_softmax_forward(LibraryHandles& libraries, cudaStream_t stream, DType dtype, std::int64_t rows,
                                        std::int64_t cols, const void* x, void* y) {
  if (rows > INT_MAX || cols > INT_MAX) return {false, true, "cuDNN tensor extents are 32-bit"};
  cudnnTensorDescriptor_t raw = nullptr;
  if (auto r = from_status(cudnnCreateTensorDescriptor(&raw), "cudnnCreateTensorDescriptor"); !r.ok) return r;
  TensorDescriptor desc(raw);
  if (auto r = from_status(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, cudnn_type(dtype),
                                                      static_cast<int>(rows), static_cast<int>(cols), 1, 1),
                           "cudnnSetTensor4dDescriptor");
      !r.ok)
    return r;
  const float alpha = 1.f, beta = 0.f;  // float scalars for float, half and bfloat16 data
  return from_status(cudnnSoftmaxForward(libraries.cudnn(stream), CUDNN_SOFTMAX_ACCURATE,
                                         CUDNN_SOFTMAX_MODE_INSTANCE, &alpha, desc.get(), x, &beta, desc.get(), y),
                     "cudnnSoftmaxForward");
}

}  // namespace shapetune
