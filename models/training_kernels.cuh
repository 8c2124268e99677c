// The bookkeeping kernels of a model runner's CUDA graph: what changes from one replay of a
// training step to the next (which batch, the loss) lives in device memory, so one captured
// graph serves every step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::training_kernels {

// x[r, :] = pixels[order[*step * batch + r], :] * scale + shift as float, and
// y[r] = labels[same]: the batch of the step `*step` of an epoch whose sample order is `order`.
cudaError_t gather_batch(const std::uint8_t* pixels, const std::uint8_t* labels, const std::int32_t* order,
                         const std::int32_t* step, int batch, int features, float scale, float shift, float* x,
                         std::int32_t* y, cudaStream_t);

// *loss_sum += *loss; ++*step. One thread: the end of a training step.
cudaError_t finish_step(std::int32_t* step, const float* loss, double* loss_sum, cudaStream_t);

}  // namespace shapetune::training_kernels
