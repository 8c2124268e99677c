// Softmax cross-entropy for classification, forward and backward in one primitive:
//   loss       = mean_r (log sum_c exp(x[r,c]) - x[r, label[r]])             (f32, one value)
//   dlogits    = (softmax(x[r,:]) - onehot(label[r])) / rows                 (stored in T)
// logits and dlogits in T (float, __half, __nv_bfloat16), statistics in float. Host-safe: the
// catalogue (compiled by g++) includes this header; the kernels live in softmax_xent.cu.
//
// Labels outside [0, classes) are the caller's bug; every kernel clamps them into range (so no
// read or write leaves the row) and the float64 reference does the same.
//
// The mean is deterministic: the per-row losses go to the workspace and are added up in a fixed
// order (in double) by a small second kernel (on sm_90 a programmatic dependent launch, whose
// start overlaps the fused kernel), `unfused`'s fourth. No float atomics anywhere, so the same
// inputs give the same bits on every run of a config.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::softmax_xent {

// Workspace of the fused variants: one float per row, the row losses that the mean kernel
// launched after them averages.
inline std::size_t fused_workspace_bytes(std::int64_t rows) { return static_cast<std::size_t>(rows) * sizeof(float); }

// Workspace of `unfused`: the f32 probabilities, then the row losses, then each row's
// 1 - p[label] (kept so that the gradient kernel need not subtract two nearly equal numbers).
inline std::size_t unfused_workspace_bytes(std::int64_t rows, std::int64_t classes) {
  return static_cast<std::size_t>(rows) * (static_cast<std::size_t>(classes) + 2) * sizeof(float);
}

// Rows (warps) per block of the unfused chain's row kernels; its grid is rows / this.
inline constexpr int unfused_rows_per_block = 8;

// v1: the library-style chain: a softmax kernel (logits read twice) writes f32 probabilities to
// the workspace, a per-row loss kernel reads them back, a gradient kernel reads them again and
// writes dlogits, and one block averages the row losses. Four launches.
template <typename T>
cudaError_t unfused(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                    int classes, void* workspace, cudaStream_t);

// v2: one warp per row: statistics with shuffles, then dlogits and the row loss in one more
// pass over the row (which comes back from cache).
template <typename T>
cudaError_t fused_warp_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int warps_per_block, void* workspace, cudaStream_t);

// v3: one block per row (64..1024 threads) for wide rows: 16-byte loads and stores on the
// aligned body, scalar head and tail; warps merge their statistics in shared memory.
// logits and dlogits must share their address modulo 16 (else cudaErrorNotSupported).
template <typename T>
cudaError_t fused_block_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                            int classes, int block_size, void* workspace, cudaStream_t);

// v4: as v3, but each thread also keeps the packs it loads in shared memory and the write pass
// reads them from there: the logits leave DRAM once, whatever the number of rows in flight.
// Dynamic shared memory: staged_row_bytes(classes, sizeof(T)); a row past the device's limit
// returns cudaErrorInvalidValue.
template <typename T>
cudaError_t fused_smem_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int block_size, void* workspace, cudaStream_t);

// The shared memory fused_smem_row stages a row's body in: at most classes / pack 16-byte packs.
inline std::size_t staged_row_bytes(std::int64_t classes, std::size_t element_bytes) {
  return static_cast<std::size_t>(classes) * element_bytes / 16 * 16;
}

// v5: `threads_per_row` threads (4..1024) per row, each keeping `packs_per_thread` (1, 2, 4,
// 8, 16) 16-byte packs in registers, as floats: the row body is read from memory once, and each
// value's exp, computed once for the sum, becomes its gradient with one multiply. Needs
// threads_per_row * packs_per_thread packs to cover the row body; returns
// cudaErrorLaunchOutOfResources when the kernel's register use does not allow block_size
// threads, cudaErrorNotSupported as v3 does.
template <typename T>
cudaError_t fused_register_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                               int classes, int threads_per_row, int block_size, int packs_per_thread, void* workspace,
                               cudaStream_t);

// v6 (sm_90): as v5, with a row split over a thread-block cluster of `blocks_per_row` (2..8)
// blocks of block_size threads, each holding a slice in registers; the blocks merge their slices'
// statistics through distributed shared memory. Smaller blocks than one holding a whole wide row,
// so several rows are in flight per SM. Needs blocks_per_row * block_size * packs_per_thread
// packs to cover the row body; a cluster the device cannot place fails at launch.
inline constexpr int kMaxBlocksPerRow = 8;  // the portable cluster size
template <typename T>
cudaError_t fused_cluster_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                              int classes, int blocks_per_row, int block_size, int packs_per_thread, void* workspace,
                              cudaStream_t);

// v7 (sm_90): a persistent block per SM slot whose one producer thread streams row bodies into
// a ring of `chunk_bytes` shared-memory slots by bulk copies (TMA), completing on mbarriers,
// while `consumer_warps` warps reduce each row from the ring, then write its dlogits from the
// ring and free the slots. The logits leave DRAM once, and the reads run ahead of the consumers
// by whatever the ring holds past the current row: no thread's loads wait for a reduction.
// A row's body must fit the ring (ring_slots); shared memory is split among `blocks_per_sm`
// blocks. warp_per_row: each row is one warp's alone (its body in one slot), reduced with
// shuffles only: for narrow rows, many in flight per SM. claim_rows (block mode only): after its
// first row a block claims the next from a counter in the workspace instead of taking every
// gridDim-th row, so that SMs which run faster take more rows; a one-thread kernel zeroes the
// counter first (the ring kernel is its programmatic dependent). Workspace:
// ring_workspace_bytes(rows). Returns cudaErrorLaunchOutOfResources when the ring cannot hold a
// row, cudaErrorNotSupported as v3 does, cudaErrorInvalidValue below sm_90, for a bad config or
// for 2^31 rows or more.
inline constexpr int kMaxRingConsumerWarps = 31;  // with the producer warp, a 1024-thread block
inline constexpr int kRingStaticSharedBytes = 1024;  // the kernel's static shared memory, with room to spare
inline constexpr int kRingMetaBytes = 16;           // per slot: the row (and label) it starts, if any
inline constexpr int kRingSlotOverheadBytes = 16 + kRingMetaBytes;  // and its full and empty mbarriers
template <typename T>
cudaError_t fused_ring_row(const T* logits, const std::int32_t* labels, float* loss, T* dlogits, std::int64_t rows,
                           int classes, int consumer_warps, int chunk_bytes, int blocks_per_sm, bool warp_per_row,
                           bool claim_rows, void* workspace, cudaStream_t);

// fused_ring_row's workspace: the row losses, then (16-byte aligned) the row counter.
inline std::size_t ring_claims_offset(std::int64_t rows) { return (fused_workspace_bytes(rows) + 15) / 16 * 16; }
inline std::size_t ring_workspace_bytes(std::int64_t rows) { return ring_claims_offset(rows) + 16; }

// Ring slots of `chunk_bytes` (plus their mbarriers and RowMeta) that fit a block's share of an
// SM's shared memory: `shared_per_sm` split over `blocks_per_sm`, each less the `reserved` bytes
// the driver keeps per block and the kernel's static shared memory, capped at the opt-in limit.
inline int ring_slots(std::int64_t chunk_bytes, int blocks_per_sm, std::int64_t shared_per_sm,
                      std::int64_t shared_per_block_optin, std::int64_t reserved_per_block) {
  std::int64_t budget = shared_per_sm / blocks_per_sm - reserved_per_block;
  budget = (budget < shared_per_block_optin ? budget : shared_per_block_optin) - kRingStaticSharedBytes;
  return budget <= 0 ? 0 : static_cast<int>(budget / (chunk_bytes + kRingSlotOverheadBytes));
}

// Slots one row's body takes: the worst-aligned row has classes / pack whole packs.
inline std::int64_t ring_chunks_per_row(std::int64_t classes, std::size_t element_bytes, std::int64_t chunk_bytes) {
  const std::int64_t body_bytes = classes / static_cast<std::int64_t>(16 / element_bytes) * 16;
  return (body_bytes + chunk_bytes - 1) / chunk_bytes;
}

}  // namespace shapetune::kernels::softmax_xent
