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

// The character models' embedding, not dispatched (an indexed copy and its transpose, no
// arithmetic to tune). The batch of step `*step` is rows = T B tokens at tokens[*step * rows].

// x[r, :] = table[inputs[*step * rows + r], :] and labels[r] = targets[same].
cudaError_t gather_embedding(const float* table, const std::int32_t* inputs, const std::int32_t* targets,
                             const std::int32_t* step, int rows, int embed, float* x, std::int32_t* labels,
                             cudaStream_t);

// dtable[v, :] = sum of dx[r, :] over the rows r whose token is v, for every v (zero where none):
// rows_by_token[*step * rows + ...] lists the batch's rows grouped by token, ascending within a
// token, and token_starts[*step * (vocab + 1) + v] where token v's rows begin. One block per
// token and 32 columns sums its rows in a fixed order: no atomics, so the result is the same bits every run.
cudaError_t embedding_backward(const float* dx, const std::int32_t* rows_by_token, const std::int32_t* token_starts,
                               const std::int32_t* step, int rows, int vocab, int embed, float* dtable, cudaStream_t);

// history[*step] = *loss. One thread; before finish_step, which advances *step.
cudaError_t record_loss(const std::int32_t* step, const float* loss, float* history, cudaStream_t);

}  // namespace shapetune::training_kernels
