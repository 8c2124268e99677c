// Tensor-core GEMM through Hopper's warpgroup-level wgmma.mma_async (sm_90a only), for the
// contract of kernels/gemm/gemm.cuh; f16 and bf16, and tf32 (fp32 storage, TF32 products) in layout
// nt, with fp32 accumulation.
// One kernel family, warp-specialised: a producer warp loads the A and B tiles of each K step with
// TMA (cp.async.bulk.tensor) into 128-byte-swizzled shared memory, through a ring of `stages`
// buffers guarded by full/empty mbarriers; two consumer warpgroups each multiply their half of the
// block tile with wgmma straight from shared memory (both K-major and MN-major operands, so every
// layout is read as it lies in global memory) and apply the epilogue from their accumulators.
// TMA zero-fills what lies past a matrix edge, so any M, N, K >= 1 works, but it addresses global
// memory in 16-byte units: lda and ldb must be multiples of 8 elements and A and B 16-byte
// aligned (tma_addressable); mma_sync covers the rest. TF32 wgmma reads both operands K-major only
// (the instruction has no transpose for it), so tf32 takes layout nt alone (reads_layout).
// Host-safe: the catalogue (compiled by g++) includes this header for the tile table.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/gemm/gemm.cuh"
#include "kernels/gemm/head_split.cuh"

namespace shapetune::kernels::gemm_wgmma {

// Every block: one producer warpgroup (one thread of it issues the TMA loads; the warpgroup
// gives its registers to the consumers) and two consumer warpgroups.
inline constexpr int kConsumerWarpgroups = 2;
inline constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
inline constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
// K per pipeline stage: one 128-byte swizzle row, 64 16-bit or 32 fp32 elements (block_k).
inline constexpr int kBlockKBytes = 128;
constexpr int block_k(std::size_t element_bytes) { return kBlockKBytes / static_cast<int>(element_bytes); }

// A block tile of block_m x block_n outputs; consumer warpgroup g owns rows
// [g * block_m / 2, (g + 1) * block_m / 2), all block_n columns, as m64 x n(block_n) wgmma tiles.
struct TileShape {
  int block_m;
  int block_n;
  constexpr int warpgroup_m() const { return block_m / kConsumerWarpgroups; }
};

// The curated tiles (the `tile` parameter indexes these), largest first:
//   0: 128x256: each consumer 64x256 (m64n256k16, 128 fp32 accumulators a thread): the most
//      reuse per byte loaded; up to 4 stages of 48 KiB fit an H100/H200's 227 KiB. The default
//      tile (with 3 stages, measured faster than 4 at bf16 8192^3 on the H200).
//   1: 256x128: each consumer 128x128 (two m64n128k16): the same reuse with the other aspect,
//      for N-narrow problems where tile 0 would leave half its columns empty.
//   2: 128x128: half the outputs of tile 0 a block: twice the blocks, for problems that would
//      leave SMs idle with the larger tiles.
//   3: 128x64: four times the blocks of tile 0, for small and N-narrow problems.
inline constexpr std::array<TileShape, 4> kTiles = {{
    {128, 256},
    {256, 128},
    {128, 128},
    {128, 64},
}};

// At least three stages: the consumers' epilogue staging reuses the pipeline's buffers, and
// with one tile in flight behind the one being multiplied TMA latency is not hidden anyway.
inline constexpr int kMinStages = 3;
inline constexpr int kMaxStages = 5;

// Bytes of one pipeline stage: an A and a B tile of one 128-byte row of K each (the same bytes
// for every element type).
constexpr std::size_t stage_bytes(const TileShape& t) {
  return static_cast<std::size_t>(t.block_m + t.block_n) * kBlockKBytes;
}

// The consumers' epilogue staging: each consumer warp's 16 rows of block_n fp32 accumulators,
// rows padded by 8 floats.
constexpr std::size_t staging_bytes(const TileShape& t) {
  return static_cast<std::size_t>(kConsumerWarps) * 16 * (t.block_n + 8) * 4;
}

// Dynamic shared memory of one block: the stages, 1 KiB of slack to align them to the
// 128-byte swizzle's 1024-byte period, and a full and an empty mbarrier (8 bytes each) a stage.
// A persistent block (one an SM, looping over tiles) keeps its epilogue staging apart, so that
// the producer fills the pipeline with the next tile while the consumers store this one; a block
// of one tile stages in the pipeline's buffers once its last K step is read.
constexpr std::size_t shared_bytes(const TileShape& t, int stages, bool persistent = false) {
  return static_cast<std::size_t>(stages) * (stage_bytes(t) + 16) + 1024 + (persistent ? staging_bytes(t) : 0);
}

// TMA needs every global row stride a multiple of 16 bytes: the leading dimensions of A and B
// (kernels/gemm/gemm.cuh: lda is k in nn and nt, m in tn; ldb is n in nn and tn, k in nt) in
// multiples of 8 16-bit or 4 fp32 elements.
constexpr std::int64_t leading_dimension_multiple(std::size_t element_bytes) {
  return 16 / static_cast<std::int64_t>(element_bytes);
}
constexpr bool tma_addressable(gemm::Layout layout, std::int64_t m, std::int64_t n, std::int64_t k,
                               std::size_t element_bytes = 2) {
  const std::int64_t lda = layout == gemm::Layout::tn ? m : k;
  const std::int64_t ldb = layout == gemm::Layout::nt ? k : n;
  const std::int64_t multiple = leading_dimension_multiple(element_bytes);
  return lda % multiple == 0 && ldb % multiple == 0;
}

// 16-bit operands in every layout; fp32 ones (TF32 products) K-major on both sides: nt.
constexpr bool reads_layout(gemm::Layout layout, std::size_t element_bytes) {
  return element_bytes == 2 || layout == gemm::Layout::nt;
}

// C = epilogue(alpha * op(A) op(B) + beta * C + bias) with wgmma. T is __half or __nv_bfloat16,
// or float for TF32 products (layout nt only: reads_layout); `tile` indexes kTiles; stages in
// [kMinStages, kMaxStages]; `persistent`: as many blocks as the SMs hold at once, each looping
// over tiles (shared_bytes says what that costs), for problems of few K steps a tile, where a
// block of one tile leaves the memory pipe idle while it stores.
// Returns cudaErrorNotSupported unless the current device is compute capability 9.0 (sm_90a code
// runs nowhere else); cudaErrorInvalidValue for a tile or stage count out of range, operands TMA
// cannot address (see tma_addressable; A or B not 16-byte aligned), a layout it does not read
// (reads_layout), or shared memory past the device's opt-in limit; cudaErrorInvalidConfiguration
// when the tiles exceed the grid; the driver's error when it cannot encode a tensor map.
template <typename T>
cudaError_t wgmma(const gemm::Args<T>& args, int tile, int stages, bool persistent, cudaStream_t stream);

// wgmma whose epilogue writes C through `out` (kernels/gemm/head_split.cuh): the QKV projection
// at the speed of the GEMM. Needs layout nt (x [M, D] times W [3 D, D] transposed), beta 0,
// n = 3 heads head_dim, head_dim whole 16-byte chunks (a multiple of 8 16-bit or 4 fp32 elements),
// m a multiple of seq and m, n below 2^31; cudaErrorInvalidValue otherwise, and wgmma's other
// errors. T as for wgmma.
template <typename T>
cudaError_t wgmma_head_split(const gemm::Args<T>& args, const gemm::HeadSplitOutput<T>& out, int tile, int stages,
                             bool persistent, cudaStream_t stream);

// The residual LayerNorm epilogue of gemm_bias_residual_layernorm (a pre-LN Transformer's output
// projection and its residual step in one kernel): C receives the residual sum
// h = round(round(acc + bias) + residual), rounded as gemm_bias and residual_layernorm store them,
// and y = round((h - mean) / sqrt(var + epsilon) gamma + beta) per row (fp32 statistics of the
// stored h, biased variance).
template <typename T>
struct ResidualLayerNorm {
  const T* residual = nullptr;  // [M, N]
  const T* gamma = nullptr;     // [N]
  const T* beta = nullptr;      // [N]
  T* y = nullptr;               // [M, N]
  float epsilon = 1e-5f;
};

// wgmma with that epilogue: layout nt, alpha 1, beta 0, the bias epilogue, every column in one
// tile (n <= the tile's block_n: a warp normalises whole rows it has staged), m and n below 2^31;
// cudaErrorInvalidValue otherwise, and wgmma's other errors.
template <typename T>
cudaError_t wgmma_residual_layernorm(const gemm::Args<T>& args, const ResidualLayerNorm<T>& norm, int tile, int stages,
                                     bool persistent, cudaStream_t stream);

}  // namespace shapetune::kernels::gemm_wgmma
