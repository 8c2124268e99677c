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
// (CUDNN_FMA_MATH, no TF32); tf32 (fp32 tensors) TF32 products where cuDNN uses tensor cores
// (CUDNN_DEFAULT_MATH, as PyTorch with allow_tf32); f16 and bf16 tensor cores; fp32 accumulation
// everywhere. The first call for a (cell, dtype, shape, algo) builds the descriptors and must not
// be inside a stream capture.
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

// Backpropagation through the same layer: cudnnRNNForward in training mode (its y and reserve
// space kept in buffers of the plan), then cudnnRNNBackwardData_v8 (dx, dh0, dc0 from dy, dhT,
// dcT) and cudnnRNNBackwardWeights_v8 (CUDNN_WGRAD_MODE_ADD into a zeroed gradient weight space),
// whose gradients are copied out into PyTorch's layout. `layer` gives the inputs, the weights and
// the algorithm as for the forward; its y, h_t and c_t are not used (the halves below write them).
// The first call for a (cell, dtype, shape, algo) allocates cuDNN's workspace, reserve space and
// the plan's buffers and must not be inside a stream capture; later calls allocate nothing.
struct CudnnRnnBackward {
  CudnnRnnForward layer;
  const void* dy = nullptr;
  const void* dh_t = nullptr;
  const void* dc_t = nullptr;  // LSTM only
  void* dx = nullptr;
  void* dh0 = nullptr;
  void* dc0 = nullptr;  // LSTM only
  void* dw_ih = nullptr;
  void* dw_hh = nullptr;
  void* db_ih = nullptr;
  void* db_hh = nullptr;
};
LibraryCallResult cudnn_rnn_backward(LibraryHandles&, cudaStream_t, const CudnnRnnBackward&);

// cudnn_rnn_backward's two halves apart, for a trainer that computes its loss between them. The
// training forward writes b.layer's y, h_t and c_t (the states may be null) and keeps the reserve
// space and the weights in a plan of `instance` alone: any pointer that tells the trainer's layers
// apart (each layer's x), since two layers of one shape must not share a reserve space. The
// backward then reads that plan and y. Set-up and capture as for cudnn_rnn_backward.
LibraryCallResult cudnn_rnn_training_forward(LibraryHandles&, cudaStream_t, const CudnnRnnBackward&,
                                             const void* instance);
LibraryCallResult cudnn_rnn_backward_after_forward(LibraryHandles&, cudaStream_t, const CudnnRnnBackward&,
                                                   const void* instance);

// Scaled dot-product attention forward through cuDNN's graph API (its fused flash attention):
// O = softmax(Q K^T * scale + mask) V, fp32 statistics, f16 or bf16 tensors (anything else is
// `not_supported`). Every tensor is [batch, heads, seq, head_dim] in the order of its four strides
// (elements; head_dim contiguous), so split and packed Q/K/V and a head-merged O are all strided
// views. `causal` masks key j > query i; `lengths` (device int32 [batch], or null) are the valid
// prefix of each batch row, passed to cuDNN as both the query and the key sequence lengths
// (padding mask). The outputs of queries at or past their length are left to the caller. The
// first call for a (dtype, shape, strides, masks) builds the graph and its execution plan (with its
// workspace, kept in `libraries`) and must not be inside a stream capture; later ones may be.
struct CudnnSdpaForward {
  DType dtype = DType::f16;
  std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  float scale = 1;
  bool causal = true;
  const int* lengths = nullptr;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  std::int64_t q_strides[4] = {}, k_strides[4] = {}, v_strides[4] = {}, o_strides[4] = {};
};
LibraryCallResult cudnn_sdpa_forward(LibraryHandles&, cudaStream_t, const CudnnSdpaForward&);

}  // namespace shapetune
