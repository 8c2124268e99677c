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

// One LSTM or GRU layer forward (cudnnRNNForward, inference mode, unidirectional, one layer,
// two biases) over x [T, N, D] from h0 (and c0) to y [T, N, H] and hT (and cT), weights in
// PyTorch's layout ([G H, D] and [G H, H], gate order LSTM i, f, g, o; GRU r, z, n). algo: 0
// STANDARD, 1 PERSIST_STATIC, 2 PERSIST_DYNAMIC, 3 PERSIST_STATIC_SMALL_H; an algorithm cuDNN
// refuses for the problem is `not_supported` with cuDNN's reason. f32 takes fp32 products
// (CUDNN_FMA_MATH, no TF32); f16 and bf16 tensor cores with fp32 accumulation. The first call
// for a (cell, dtype, shape, algo) builds the descriptors and must not be inside a stream capture.
enum class CudnnRnnCell : std::uint8_t { lstm, gru };
struct CudnnRnnForward {
  CudnnRnnCell cell = CudnnRnnCell::lstm;
  DType dtype = DType::f32;
  std::int64_t steps = 0, batch = 0, input = 0, hidden = 0;
  int algo = 0;
  const void* x = nullptr;
  const void* h0 = nullptr;
  const void* c0 = nullptr;  // LSTM only
  const void* w_ih = nullptr;
  const void* w_hh = nullptr;
  const void* b_ih = nullptr;
  const void* b_hh = nullptr;
  void* y = nullptr;
  void* h_t = nullptr;
  void* c_t = nullptr;  // LSTM only
};
LibraryCallResult cudnn_rnn_forward(LibraryHandles&, cudaStream_t, const CudnnRnnForward&);

}  // namespace shapetune
