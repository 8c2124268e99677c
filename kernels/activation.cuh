// Elementwise activations, stored in T (float, __half, __nv_bfloat16) and computed in float:
// forward y = f(x), backward dx = dy * f'(x) (the derivative with respect to the input x), and
// the fused y[r, c] = f(x[r, c] + b[c]). Host-safe: declarations only, kernels in activation.cu.
// The ladder, plainest first; each launch wrapper returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::kernels::activation {

enum class Function : std::uint8_t { relu, gelu, gelu_tanh, sigmoid, silu };

// ---- y = f(x) and dx = dy * f'(x) over n elements ------------------------------------------

// v1: grid-stride, one element per thread per step; the grid is the smaller of the blocks that
// cover n and blocks_per_sm blocks for each SM of the current device.
template <typename T>
cudaError_t forward_scalar(Function, const T* x, T* y, std::int64_t n, int block_size, int blocks_per_sm,
                           cudaStream_t);
template <typename T>
cudaError_t backward_scalar(Function, const T* x, const T* dy, T* dx, std::int64_t n, int block_size,
                            int blocks_per_sm, cudaStream_t);

// v2: 16-byte loads and stores; each thread loads its `packs_per_thread` (1, 2, 4, 8) packs of
// every input before using any, one pass of blocks over the tensor; the elements before the
// first 16-byte boundary and after the last whole pack go through scalar accesses. Every tensor
// must share its address modulo 16 (else cudaErrorNotSupported).
template <typename T>
cudaError_t forward_vec(Function, const T* x, T* y, std::int64_t n, int block_size, int packs_per_thread,
                        cudaStream_t);
template <typename T>
cudaError_t backward_vec(Function, const T* x, const T* dy, T* dx, std::int64_t n, int block_size,
                         int packs_per_thread, cudaStream_t);

// ---- y[r, c] = f(x[r, c] + b[c]) over a row-major [rows, cols] x -------------------------

// v1: flat grid-stride over rows * cols elements, column = index % cols.
template <typename T>
cudaError_t bias_forward_scalar(Function, const T* x, const T* b, T* y, std::int64_t rows, int cols, int block_size,
                                int blocks_per_sm, cudaStream_t);

// v2: `threads_per_row` threads per row (a power of two, 4..block_size); each row split into an
// unaligned head, 16-byte packs and a tail, four packs per thread in flight. The bias comes in
// packs where its columns line up with the row's packs (every row when x and b are aligned and
// cols is a multiple of the pack), else element by element from cache. x and y must share their address modulo 16
// (else cudaErrorNotSupported); b may have any alignment.
template <typename T>
cudaError_t bias_forward_row_vec(Function, const T* x, const T* b, T* y, std::int64_t rows, int cols,
                                 int threads_per_row, int block_size, cudaStream_t);

// v3: the tensor as one flat run of 16-byte packs, rows ignored, walked as forward_vec walks it
// (`packs_per_thread` packs per thread loaded before use, one pass of blocks); each pack's
// bias column follows from one modulo per thread. The bias comes in packs when the rows start
// on 16-byte boundaries, cols is a multiple of the pack and b is aligned (no pack then straddles
// two rows), else element by element from cache. x and y must share their address modulo 16
// (else cudaErrorNotSupported).
template <typename T>
cudaError_t bias_forward_flat_vec(Function, const T* x, const T* b, T* y, std::int64_t rows, int cols, int block_size,
                                  int packs_per_thread, cudaStream_t);

// v4: columns: each thread owns one 16-byte column pack, holds its bias in registers and walks
// rows, `rows_per_thread` (1, 2, 4, 8) rows loaded before the first is used; the block is
// (column packs, rounded up to a power of two, at most block_size) x (the rest along rows). No
// division per element or per thread. When cols is a multiple of the pack and x and y are
// 16-byte aligned, 16-byte loads and stores; otherwise the same walk element by element (any
// cols, any alignment, slower). block_size a multiple of 32, at most 1024.
template <typename T>
cudaError_t bias_forward_column_vec(Function, const T* x, const T* b, T* y, std::int64_t rows, int cols,
                                    int block_size, int rows_per_thread, cudaStream_t);

}  // namespace shapetune::kernels::activation
