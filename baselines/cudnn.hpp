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

}  // namespace shapetune
