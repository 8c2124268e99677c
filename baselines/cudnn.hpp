// cuDNN's own implementations of our primitives, used as baselines. Each returns an empty
// string on success or cuDNN's status text, with `not_supported` set when cuDNN refused the
// problem (as opposed to failing on it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/types.hpp"

namespace shapetune {

class LibraryHandles;

struct LibraryCallResult {
  bool ok = true;
  bool not_supported = false;
  std::string message;
};

// cudnnSoftmaxForward, CUDNN_SOFTMAX_ACCURATE, per row (MODE_INSTANCE over an N=rows, C=cols
// NCHW tensor with H = W = 1).
LibraryCallResult cudnn_softmax_forward(LibraryHandles&, cudaStream_t, DType, std::int64_t rows, std::int64_t cols,
                                        const void* x, void* y);

// LayerNorm forward through the graph API (NORM_FORWARD, CUDNN_LAYER_NORM): per row,
// y = (x - mean) / sqrt(var + epsilon) * gamma + beta with the biased variance; x, y, gamma and
// beta in `dtype`. The execution plan and its workspace are built on the first call for a
// (dtype, rows, cols, alignment) and kept in `libraries`; that call must not be inside a stream
// capture, later ones may be.
LibraryCallResult cudnn_layernorm_forward(LibraryHandles&, cudaStream_t, DType dtype, std::int64_t rows,
                                          std::int64_t cols, const void* x, const void* gamma, const void* beta,
                                          float epsilon, void* y);

// The activations of cuDNN's legacy API that match ours (it has no GELU): relu, sigmoid, and
// silu as CUDNN_ACTIVATION_SWISH with swish beta 1. Over n elements as an [n, 1, 1, 1] tensor.
enum class CudnnActivation : std::uint8_t { relu, sigmoid, silu };
LibraryCallResult cudnn_activation_forward(LibraryHandles&, cudaStream_t, DType, CudnnActivation, std::int64_t n,
                                           const void* x, void* y);
// dx = dy * f'(x) through cudnnActivationBackward, which also reads y = f(x): this first writes
// y into `y_workspace` (n elements of the dtype) with cudnnActivationForward.
LibraryCallResult cudnn_activation_backward(LibraryHandles&, cudaStream_t, DType, CudnnActivation, std::int64_t n,
                                            const void* x, const void* dy, void* dx, void* y_workspace);

}  // namespace shapetune
