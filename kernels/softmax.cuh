// Row softmax over a row-major [rows, cols] tensor: y = exp(x - max) / sum(exp(x - max)),
// stored in T (float, __half, __nv_bfloat16), computed in float.
// The ladder, plainest first; each launch wrapper returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::kernels::softmax {

// v1: one thread per row, three passes (max, sum, write). Uncoalesced; the reference point.
// (v1 and v2 sum with Kahan compensation: a sequential float sum over a wide row is too coarse.)
template <typename T>
cudaError_t thread_row_3pass(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t);

// v2: one thread per row, max and sum in one online pass, then the write pass: 2 reads, not 3.
template <typename T>
cudaError_t thread_row_online(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t);

// v3: one warp per row: coalesced loads, online statistics merged with shuffles.
template <typename T>
cudaError_t warp_row_online(const T* x, T* y, std::int64_t rows, int cols, int warps_per_block, cudaStream_t);

// v4: one block per row: wide rows get many threads; warps meet in shared memory.
template <typename T>
cudaError_t block_row_online(const T* x, T* y, std::int64_t rows, int cols, int block_size, cudaStream_t);

// v5: `threads_per_row` threads per row (4..1024), 16-byte loads and stores for the aligned
// body of each row and scalar ones for its head and tail. x and y must share their address
// modulo 16 (else cudaErrorNotSupported).
template <typename T>
cudaError_t vec_online(const T* x, T* y, std::int64_t rows, int cols, int threads_per_row, int block_size,
                       cudaStream_t);

// v6: like v5, but each thread keeps its `packs_per_thread` (1, 2, 4, 8, 16) 16-byte packs in
// registers: the row is read from memory once. Needs packs_per_thread * threads_per_row packs
// to cover the row body; returns cudaErrorLaunchOutOfResources when the kernel's register use
// does not allow block_size threads.
template <typename T>
cudaError_t register_row(const T* x, T* y, std::int64_t rows, int cols, int threads_per_row, int block_size,
                         int packs_per_thread, cudaStream_t);

// Edge elements (unaligned head + tail) of a row never exceed this many; register_row gives
// each thread one edge slot, so it needs threads_per_row >= this.
template <typename T>
constexpr int max_edge_elements() {
  return 2 * (16 / static_cast<int>(sizeof(T)) - 1);
}

}  // namespace shapetune::kernels::softmax
