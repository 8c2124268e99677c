#include "models/training_kernels.cuh"

#include "kernels/common/grid.cuh"

namespace shapetune::training_kernels {
namespace {

__global__ void gather_batch_kernel(const std::uint8_t* pixels, const std::uint8_t* labels,
                                    const std::int32_t* order, const std::int32_t* step, int batch, int features,
                                    float scale, float shift, float* x, std::int32_t* y) {
  kernels::grid_dependency_sync();
  // One block per row of the batch: a row is 784 bytes, read once, coalesced.
  const int r = blockIdx.x;
  const std::int64_t sample = order[static_cast<std::int64_t>(*step) * batch + r];
  const std::uint8_t* src = pixels + sample * features;
  float* dst = x + static_cast<std::int64_t>(r) * features;
  for (int c = threadIdx.x; c < features; c += blockDim.x) dst[c] = fmaf(static_cast<float>(src[c]), scale, shift);
  if (threadIdx.x == 0) y[r] = labels[sample];
}

__global__ void finish_step_kernel(std::int32_t* step, const float* loss, double* loss_sum) {
  kernels::grid_dependency_sync();
  *loss_sum += *loss;
  *step += 1;
}

__global__ void gather_embedding_kernel(const float* table, const std::int32_t* inputs, const std::int32_t* targets,
                                        const std::int32_t* step, int rows, int embed, float* x,
                                        std::int32_t* labels) {
  kernels::grid_dependency_sync();
  const int r = blockIdx.x;
  const std::int64_t at = static_cast<std::int64_t>(*step) * rows + r;
  const float* src = table + static_cast<std::int64_t>(inputs[at]) * embed;
  float* dst = x + static_cast<std::int64_t>(r) * embed;
  for (int c = threadIdx.x; c < embed; c += blockDim.x) dst[c] = src[c];
  if (threadIdx.x == 0) labels[r] = targets[at];
}

// Block (v, chunk) sums 32 columns of token v's rows: warp w the rows begin + w, begin + w + 8, ...
// in that order, then warp 0 the eight partial sums in warp order. The order is fixed (the same bits
// every run, no atomics), and the commonest token's rows (a space: a sixth of English text) are
// spread over eight warps and its columns over blocks: one block a token, summing its rows one after
// another, made the gradient a long serial chain of loads at batch 64 x 64 characters.
constexpr int kEmbeddingWarps = 8;

__global__ void __launch_bounds__(32 * kEmbeddingWarps)
    embedding_backward_kernel(const float* dx, const std::int32_t* rows_by_token, const std::int32_t* token_starts,
                              const std::int32_t* step, int rows, int vocab, int embed, float* dtable) {
  kernels::grid_dependency_sync();
  __shared__ float partial[kEmbeddingWarps][32];
  const int v = blockIdx.x, lane = threadIdx.x, warp = threadIdx.y;
  const int c = blockIdx.y * 32 + lane;
  const std::int32_t* order = rows_by_token + static_cast<std::int64_t>(*step) * rows;
  const std::int32_t* starts = token_starts + static_cast<std::int64_t>(*step) * (vocab + 1);
  const int begin = starts[v], end = starts[v + 1];
  float sum = 0.f;
  if (c < embed) {
#pragma unroll 4
    for (int i = begin + warp; i < end; i += kEmbeddingWarps) sum += dx[static_cast<std::int64_t>(order[i]) * embed + c];
  }
  partial[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && c < embed) {
    float total = 0.f;
    for (int w = 0; w < kEmbeddingWarps; ++w) total += partial[w][lane];
    dtable[static_cast<std::int64_t>(v) * embed + c] = total;
  }
}

__global__ void record_loss_kernel(const std::int32_t* step, const float* loss, float* history) {
  kernels::grid_dependency_sync();
  history[*step] = *loss;
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

cudaError_t gather_embedding(const float* table, const std::int32_t* inputs, const std::int32_t* targets,
                             const std::int32_t* step, int rows, int embed, float* x, std::int32_t* labels,
                             cudaStream_t stream) {
  if (rows < 1 || embed < 1) return cudaErrorInvalidValue;
  gather_embedding_kernel<<<rows, 128, 0, stream>>>(table, inputs, targets, step, rows, embed, x, labels);
  return cudaGetLastError();
}

cudaError_t embedding_backward(const float* dx, const std::int32_t* rows_by_token, const std::int32_t* token_starts,
                               const std::int32_t* step, int rows, int vocab, int embed, float* dtable,
                               cudaStream_t stream) {
  if (rows < 1 || vocab < 1 || embed < 1) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(vocab), static_cast<unsigned>((embed + 31) / 32));
  embedding_backward_kernel<<<grid, dim3(32, kEmbeddingWarps), 0, stream>>>(dx, rows_by_token, token_starts, step,
                                                                            rows, vocab, embed, dtable);
  return cudaGetLastError();
}

cudaError_t record_loss(const std::int32_t* step, const float* loss, float* history, cudaStream_t stream) {
  record_loss_kernel<<<1, 1, 0, stream>>>(step, loss, history);
  return cudaGetLastError();
}

}  // namespace shapetune::training_kernels
