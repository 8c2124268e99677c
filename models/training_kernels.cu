#include "models/training_kernels.cuh"

namespace shapetune::training_kernels {
namespace {

__global__ void gather_batch_kernel(const std::uint8_t* pixels, const std::uint8_t* labels,
                                    const std::int32_t* order, const std::int32_t* step, int batch, int features,
                                    float scale, float shift, float* x, std::int32_t* y) {
  // One block per row of the batch: a row is 784 bytes, read once, coalesced.
  const int r = blockIdx.x;
  const std::int64_t sample = order[static_cast<std::int64_t>(*step) * batch + r];
  const std::uint8_t* src = pixels + sample * features;
  float* dst = x + static_cast<std::int64_t>(r) * features;
  for (int c = threadIdx.x; c < features; c += blockDim.x) dst[c] = fmaf(static_cast<float>(src[c]), scale, shift);
  if (threadIdx.x == 0) y[r] = labels[sample];
}

__global__ void finish_step_kernel(std::int32_t* step, const float* loss, double* loss_sum) {
  *loss_sum += *loss;
  *step += 1;
}

}  // namespace

cudaError_t gather_batch(const std::uint8_t* pixels, const std::uint8_t* labels, const std::int32_t* order,
                         const std::int32_t* step, int batch, int features, float scale, float shift, float* x,
                         std::int32_t* y, cudaStream_t stream) {
  if (batch < 1 || features < 1) return cudaErrorInvalidValue;
  gather_batch_kernel<<<batch, 256, 0, stream>>>(pixels, labels, order, step, batch, features, scale, shift, x, y);
  return cudaGetLastError();
}

cudaError_t finish_step(std::int32_t* step, const float* loss, double* loss_sum, cudaStream_t stream) {
  finish_step_kernel<<<1, 1, 0, stream>>>(step, loss, loss_sum);
  return cudaGetLastError();
}

}  // namespace shapetune::training_kernels
