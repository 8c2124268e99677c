// One AdamW optimizer step, in place, on fp32 state (host-safe: declarations only):
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p = p - lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay p)
// A model's parameters are one buffer per state (params, grads, exp_avg, exp_avg_sq) split into
// consecutive tensors, as its parameter list is; `sizes` gives that split and sums to the
// buffers' length. Every entry point takes the sizes explicitly, so a model runner passes its
// own; the catalogue passes tensor_sizes(). Each returns the launch's cudaError_t:
// cudaErrorInvalidValue for bad hyperparameters, sizes or tuning values, cudaErrorNotSupported
// when the four buffers differ in their 16-byte alignment (vectorized entry points only).
// The ladder, plainest first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace shapetune::kernels::adam {

struct Buffers {
  float* params;
  const float* grads;
  float* exp_avg;     // m
  float* exp_avg_sq;  // v
};

struct Hyperparameters {
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // decoupled (AdamW); 0 is plain Adam
  double step;          // t >= 1, the bias-correction exponent
};

// Why these hyperparameters make no step (bias correction needs 0 <= beta < 1 and t >= 1), or
// nullptr when they do.
const char* invalid_reason(const Hyperparameters&);

// The most tensors tensor_sizes() splits into: more than any model's parameter list, and few
// enough that its share arithmetic stays exact in 64 bits.
inline constexpr std::int64_t kMaxTensors = 65536;

// The catalogue's split of n parameters into `tensors` tensors, shaped like a model's list of
// alternating weights and biases: every tensor holds one element, and the other n - tensors are
// shared 1000 : 1 between even (weight) and odd (bias) positions, rounded down on the running
// total so the sizes add up to exactly n. Throws std::invalid_argument unless
// 1 <= tensors <= min(n, kMaxTensors).
std::vector<std::int64_t> tensor_sizes(std::int64_t n, std::int64_t tensors);

// v1: one launch per tensor, one element per thread, grid-stride.
cudaError_t scalar(const Buffers&, const std::vector<std::int64_t>& sizes, const Hyperparameters&, int block_size,
                   cudaStream_t);

// v2: one launch per tensor; float4 loads and stores on the tensor's 16-byte aligned body (tensor
// boundaries fall anywhere), scalar head and tail; each thread loads `packs_per_thread` (1, 2, 4,
// 8) packs of all four buffers before it updates the first.
cudaError_t vec4(const Buffers&, const std::vector<std::int64_t>& sizes, const Hyperparameters&, int block_size,
                 int packs_per_thread, cudaStream_t);

// v3: one launch for up to kTensorsPerLaunch tensors: the 16-byte packs of every tensor's aligned
// body are numbered consecutively and walked by one grid as v2 walks one tensor (each thread
// loads `packs_per_thread`, 1, 2 or 4, packs of all four buffers before updating the first),
// each pack's tensor found by a binary search in a table passed by value as a kernel parameter;
// the tensors' scalar heads and tails go one per thread. Small tensors (biases) cost no launch.
inline constexpr int kTensorsPerLaunch = 512;
cudaError_t multi_tensor(const Buffers&, const std::vector<std::int64_t>& sizes, const Hyperparameters&,
                         int block_size, int packs_per_thread, cudaStream_t);

}  // namespace shapetune::kernels::adam
