// Tensor-core GEMM through warp-level mma.sync (sm_80+), for the contract of kernels/gemm/gemm.cuh.
//   f16, bf16: mma.m16n8k16 with fp32 accumulators.
//   tf32:      fp32 tensors, each element rounded to TF32 (cvt.rna) and multiplied with
//              mma.m16n8k8.tf32, fp32 accumulators.
// One kernel family: a block tile staged through shared memory by a cp.async pipeline of
// `stages` buffers, split into warp tiles whose fragments come from ldmatrix (or, for the TF32
// operands whose K is not contiguous, 32-bit shared loads). Any M, N, K >= 1, any layout, any
// alignment: what lies past a matrix edge is zero-filled, and an operand whose base or leading
// dimension is not a multiple of 16 bytes (odd K in nn, say) is loaded element by element through
// registers instead of by cp.async (slower: those loads are not overlapped with the mma), so no
// problem is refused for its shape or alignment.
// Host-safe: the catalogue (compiled by g++) includes this header for the tile tables.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/gemm/gemm.cuh"
#include "kernels/gemm/head_split.cuh"

namespace shapetune::kernels::gemm_tensor_core {

// A block tile of block_m x block_n outputs, walking K in steps of block_k elements, computed by
// warps_m x warps_n warps that each own a (block_m / warps_m) x (block_n / warps_n) warp tile.
struct TileShape {
  int block_m;
  int block_n;
  int block_k;
  int warps_m;
  int warps_n;
  constexpr int threads() const { return 32 * warps_m * warps_n; }
};

// The curated tiles (the `tile` parameter indexes these), smallest first. 16-bit types, block_k
// in elements:
//   0-2: 64x64, 64x128, 128x64 on 4 warps, for problems too small to fill the SMs with larger
//        tiles.
//   3:   128x128 on 8 warps of 64x32: more warps to hide latency than tile 4.
//   4:   128x128 on 4 warps of 64x64: up to two blocks per SM, overlapping each other's barriers.
//   5-6: 128x256 and 256x128 on 8 warps of 64x64: the most reuse per byte of shared memory read.
//   7-8: 128x256 and 128x128 with block_k 64: half the barriers per FLOP, twice the shared memory.
// 64x64 warp tiles are the largest that fit the registers (128 accumulators a thread), and on
// Hopper the smallest at which ldmatrix traffic leaves shared-memory bandwidth to spare.
inline constexpr std::array<TileShape, 9> kTiles16 = {{
    {64, 64, 32, 2, 2},
    {64, 128, 32, 2, 2},
    {128, 64, 32, 2, 2},
    {128, 128, 32, 2, 4},
    {128, 128, 32, 2, 2},
    {128, 256, 32, 2, 4},
    {256, 128, 32, 4, 2},
    {128, 256, 64, 2, 4},
    {128, 128, 64, 2, 2},
}};

// TF32 (4-byte elements): block_k counts floats, so 16 moves the bytes of 32 halves. Warp tiles
// stop at 64x32: TF32 fragments of a 64x64 warp tile, double-buffered, spill registers.
inline constexpr std::array<TileShape, 4> kTilesTf32 = {{
    {64, 64, 16, 2, 2},
    {64, 128, 16, 2, 2},
    {128, 128, 16, 2, 4},
    {128, 128, 32, 2, 4},
}};

inline constexpr int kMinStages = 2;
inline constexpr int kMaxStages = 4;

// Dynamic shared memory of one block: `stages` copies of an A and a B tile. A TF32 operand whose
// K is not contiguous (A in tn, B in nn and tn) is read with 32-bit loads from rows padded by 32
// bytes (kernels/gemm/tensor_core.cu says why).
constexpr std::size_t shared_bytes(const TileShape& t, std::size_t element_bytes, gemm::Layout layout, int stages) {
  const bool a_k_contiguous = layout != gemm::Layout::tn, b_k_contiguous = layout == gemm::Layout::nt;
  const std::size_t pad = element_bytes == 4 ? 32 : 0;
  const std::size_t a = a_k_contiguous ? std::size_t(t.block_m) * t.block_k * element_bytes
                                       : std::size_t(t.block_k) * (t.block_m * element_bytes + pad);
  const std::size_t b = b_k_contiguous ? std::size_t(t.block_n) * t.block_k * element_bytes
                                       : std::size_t(t.block_k) * (t.block_n * element_bytes + pad);
  return static_cast<std::size_t>(stages) * (a + b);
}

// C = epilogue(alpha * op(A) op(B) + beta * C + bias) on tensor cores. T is __half or
// __nv_bfloat16 (m16n8k16), or float for TF32 products (m16n8k8). `tile` indexes kTiles16
// (16-bit T) or kTilesTf32 (float); stages in [kMinStages, kMaxStages].
// Returns cudaErrorNotSupported on a device below sm_80 (no such mma.sync there),
// cudaErrorInvalidValue for a tile or stage count out of range or shared memory past the
// device's opt-in limit, cudaErrorInvalidConfiguration when the tiles exceed the grid.
template <typename T>
cudaError_t mma_sync(const gemm::Args<T>& args, int tile, int stages, cudaStream_t stream);

using gemm::HeadSplitOutput;

// mma_sync whose epilogue writes C through `out`. Needs layout nt (x [M, D] times W [3 D, D]
// transposed), beta 0, n = 3 heads head_dim, m a multiple of seq and m, n below 2^31;
// cudaErrorInvalidValue otherwise.
template <typename T>
cudaError_t mma_sync_head_split(const gemm::Args<T>& args, const HeadSplitOutput<T>& out, int tile, int stages,
                                cudaStream_t stream);

}  // namespace shapetune::kernels::gemm_tensor_core
