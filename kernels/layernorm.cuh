// LayerNorm over the rows of a row-major [rows, cols] tensor, and the fused pre-LN residual
// step h = x + r; y = LayerNorm(h). Storage type T (float, __half, __nv_bfloat16); statistics in
// float; biased variance; gamma and beta are T, one per column.
// The ladder, plainest first; each launch wrapper returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::kernels::layernorm {

template <typename T>
struct Row {
  const T* x;
  const T* gamma;
  const T* beta;
  T* y;
  std::int64_t rows;
  int cols;
  float epsilon;
};

// v1: one thread per row; mean, then variance around it, then the write: three passes, with
// compensated sums (a sequential float sum over a wide row is too coarse).
template <typename T>
cudaError_t thread_row_two_pass(const Row<T>&, int block_size, cudaStream_t);

// v2: one warp per row; Welford statistics per lane merged with shuffles; a second pass writes.
template <typename T>
cudaError_t warp_row_welford(const Row<T>&, int warps_per_block, cudaStream_t);

// v3: one block per row; Welford statistics merged across warps in shared memory.
template <typename T>
cudaError_t block_row_welford(const Row<T>&, int block_size, cudaStream_t);

// v4: `threads_per_row` threads per row (4..1024); 16-byte packs on the aligned body of each
// row, scalar head and tail; Welford per pack; the write pass re-reads x (from L2 when it fits).
// x and y must share their address modulo 16 (else cudaErrorNotSupported).
template <typename T>
cudaError_t vec_welford(const Row<T>&, int threads_per_row, int block_size, cudaStream_t);

// v5: like v4, but the row stays in registers (packs_per_thread 16-byte packs per thread, as
// float): read once, exact two-pass statistics on the registers, written once. Returns
// cudaErrorLaunchOutOfResources when the kernel's registers do not allow block_size threads.
template <typename T>
cudaError_t register_row(const Row<T>&, int threads_per_row, int block_size, int packs_per_thread, cudaStream_t);

// The residual step's tensors: h = x + r (written), y = LayerNorm(h).
template <typename T>
struct ResidualRow {
  Row<T> row;  // row.x is x; the statistics are of h
  const T* r;
  T* h;
  // Round h to T before taking its statistics, as a framework that materializes h in T does.
  bool round_h;
};

// h = x + r over n elements (16-byte packs, scalar tail): the first kernel of the unfused chain.
template <typename T>
cudaError_t residual_add(const T* x, const T* r, T* h, std::int64_t n, cudaStream_t);

// Fused, streaming: pass 1 reads x and r, writes h and accumulates Welford statistics; pass 2
// re-reads h (from L2 when it fits) and writes y.
template <typename T>
cudaError_t residual_vec_welford(const ResidualRow<T>&, int threads_per_row, int block_size, cudaStream_t);

// Fused, in registers: x and r read once, h kept in registers, exact two-pass statistics,
// h and y written once: the least traffic (4 passes over the tensor).
template <typename T>
cudaError_t residual_register_row(const ResidualRow<T>&, int threads_per_row, int block_size, int packs_per_thread,
                                  cudaStream_t);

// Fused, ring (sm_90): like fused_register with one row per block (block_size threads, a
// multiple of 32), but persistent: as many blocks as fit the device walk rows blockIdx.x,
// + gridDim.x, ..., and thread 0 keeps the next `stages` rows' x and r bodies on their way into
// a ring of shared-memory slots by bulk copies (TMA); each thread reads its packs from the slot
// into registers (packs_per_thread 1, 2, 4 or 8). x, r, h and y must share their address modulo
// 16 (else cudaErrorNotSupported); cudaErrorInvalidValue below sm_90;
// cudaErrorLaunchOutOfResources when registers or shared memory do not allow the block.
template <typename T>
cudaError_t residual_ring_row(const ResidualRow<T>&, int block_size, int packs_per_thread, int stages, cudaStream_t);

// Fused, pipelined: persistent blocks (as many as fit the device at once), each walking rows
// blockIdx.x, + gridDim.x, ... one at a time with all block_size threads, while the next
// stages - 1 rows' x and r are already on their way into shared memory (cp.async on sm_80+; a
// plain copy, not overlapped, below). Exact statistics (per-thread two-pass, merged with Chan's
// formula), h and y written once with 16-byte stores, evict-first when streaming_stores.
// stages is 2 or 3; block_size a power of two, 32..1024. x, r, h and y must share their address
// modulo 16 (else cudaErrorNotSupported); gamma and beta may have any alignment.
template <typename T>
cudaError_t residual_pipelined(const ResidualRow<T>&, int block_size, int stages, bool streaming_stores,
                               cudaStream_t);

// residual_pipelined's shared memory: `stages` row buffers, each the row body's 16-byte packs of
// x and of r (dynamic), plus the reduction's partials (static). A block needs their sum.
constexpr std::int64_t pipelined_dynamic_shared_bytes(std::int64_t cols, int element_bytes, int stages) {
  return std::int64_t{stages} * 2 * (cols / (16 / element_bytes)) * 16;
}
constexpr std::int64_t kPipelinedStaticSharedBytes = 32 * 3 * sizeof(float);  // Welford partials[32]

// residual_ring_row's dynamic shared memory: `stages` slots of the row body's 16-byte packs of x
// and r, then an 8-byte mbarrier per slot.
constexpr std::int64_t ring_dynamic_shared_bytes(std::int64_t cols, int element_bytes, int stages) {
  return std::int64_t{stages} * (2 * (cols / (16 / element_bytes)) * 16 + 8);
}
constexpr std::int64_t kRingStaticSharedBytes = 2 * 32 * sizeof(float);  // the block sums' partials

// Edge elements (unaligned head + tail) of a row never exceed this many; the register kernels
// give each thread one edge slot, so they need threads_per_row >= this.
template <typename T>
constexpr int max_edge_elements() {
  return 2 * (16 / static_cast<int>(sizeof(T)) - 1);
}

}  // namespace shapetune::kernels::layernorm
