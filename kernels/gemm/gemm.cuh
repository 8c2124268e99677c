// GEMM, shared vocabulary of every GEMM kernel file (kernels/gemm/*.cu) and of the catalogue:
//   C[M,N] = epilogue(alpha * op(A) * op(B) + beta * C + bias)
// All matrices row-major. Layouts (the three a linear layer's forward and backward passes need):
//   nn: A is [M,K], B is [K,N]          (y = x W with W stored [in, out])
//   nt: A is [M,K], B is [N,K]          (y = x W^T with W stored [out, in]: forward, dx)
//   tn: A is [K,M], B is [K,N]          (dW = dy^T x)
// T is float, __half or __nv_bfloat16 for A, B, C and bias; accumulation is always float.
// Epilogue (after alpha/beta): bias[N] added per column, then relu or gelu (erf) if asked.
// beta == 0 means C is not read (it may hold NaN), as in BLAS.
// Host-safe: the catalogue (compiled by g++) includes this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::gemm {

enum class Layout : std::uint8_t { nn, nt, tn };
enum class Epilogue : std::uint8_t { none, bias, bias_relu, bias_gelu };

template <typename T>
struct Args {
  const T* a = nullptr;
  const T* b = nullptr;
  T* c = nullptr;
  const T* bias = nullptr;  // [N]; null unless epilogue != none
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f;
  float beta = 0.f;
  Layout layout = Layout::nn;
  Epilogue epilogue = Epilogue::none;

  // Leading dimensions (row-major strides) that follow from the layout.
  std::int64_t lda() const { return layout == Layout::tn ? m : k; }
  std::int64_t ldb() const { return layout == Layout::nt ? k : n; }
  std::int64_t ldc() const { return n; }
};

// ---- CUDA-core variants (kernels/gemm/gemm.cu) ------------------------------------------------------
// The ladder, plainest first. T is float, __half or __nv_bfloat16; every one accumulates in float,
// takes any m, n, k >= 1, any layout and epilogue, and returns the launch's cudaError_t
// (cudaErrorInvalidValue for an argument outside its space or an inconsistent Args).

// A block tile of the register-blocked kernels: bm x bn outputs per block, K consumed bk at a
// time, each thread computing tm x tn outputs (tm, tn multiples of 4: read as float4 from shared
// memory). warps_m = 0: thread t owns one contiguous tm x tn block. warps_m > 0 (warp_tiled,
// warp_tiled_broadcast): the block is warps_m x (warps / warps_m) warp tiles and a warp's lanes
// form lanes_m x (32 / lanes_m), each lane owning 4 x 4 pieces strided across its warp tile.
//
// min_blocks: blocks per SM the kernel is compiled to fit (__launch_bounds__'s second argument;
// 0 leaves it out, as for the first tiles, whose code it would change); 2 at 256 threads caps a
// thread at 128 registers. register_staged: when double-buffered, the next K step waits in
// registers on every arch (as on sm_75) instead of in cp.async staging in shared memory, which a
// 128 x 128 x 16 tile could not fit beside its two stages in 48 KB. async_stages and k_run
// (warp_tiled_async only): the shared stages its cp.async ring holds, filled async_stages - 1 K
// steps ahead, and how many K values a thread reads at once from a K-contiguous tile.
struct BlockTile {
  int bm, bn, bk, tm, tn;
  int warps_m = 0;
  int lanes_m = 0;
  int min_blocks = 0;
  bool register_staged = false;
  int async_stages = 0;
  int k_run = 0;
  constexpr int threads() const { return (bm / tm) * (bn / tn); }
};

// The curated tiles of register_blocked, double_buffered and split_k (their `tile` parameter).
inline constexpr BlockTile kBlockTiles[] = {
    {128, 128, 8, 8, 8},  // 256 threads, 64 outputs each: the most reuse per loaded element
    {128, 64, 8, 8, 8},   // 128 threads: twice the blocks of tile 0
    {64, 64, 8, 4, 4},    // 256 threads, 16 outputs each: four times the blocks of tile 0
    {32, 32, 8, 4, 4},    // 64 threads: enough blocks to fill a GPU at a few hundred squared
};
// The curated tiles of warp_tiled.
inline constexpr BlockTile kWarpTiles[] = {
    {128, 128, 8, 8, 8, 2, 8},  // 2 x 4 warps of 64 x 32, lanes 8 x 4
    {128, 64, 8, 8, 8, 2, 8},   // 2 x 2 warps of 64 x 32, lanes 8 x 4
    {64, 64, 8, 8, 4, 2, 4},    // 2 x 2 warps of 32 x 32, lanes 4 x 8
    // For large fp32 problems: 4 x 2 warps of 32 x 64, lanes 4 x 8, each lane 2 x 2 pieces of
    // 4 x 4 (strided 16 rows, 32 columns) read as float4 from k-major A and B tiles, both
    // conflict-free; bk = 16 halves the barriers per FMA; at most 128 registers (2 blocks per SM);
    // the next K step staged in registers.
    {128, 128, 16, 8, 8, 4, 4, 2, true},
};
// The curated tiles of warp_tiled_broadcast (all staged in registers, on every arch). The lanes
// of a warp are paired (below), so lanes_m and lanes_n are at least 2.
inline constexpr BlockTile kBroadcastTiles[] = {
    // For large fp32 problems: 4 x 2 warps of 32 x 64, lanes 4 x 8, each lane 2 x 2 pieces of
    // 4 x 4; two blocks per SM (at most 128 registers: 64 accumulators, 2 x 16 fragments, 8
    // staging).
    {128, 128, 8, 8, 8, 4, 4, 2, true},
    // 4 warps of 32 x 128, each lane 2 x 4 pieces (128 outputs): 1.5 shared reads per 16 FMAs
    // instead of 2, up to 255 registers; two blocks (8 warps) per SM, so one block's barrier
    // leaves the other's warps issuing. (bk = 16 at 256 threads spills past 128 registers.)
    {128, 128, 8, 8, 16, 4, 4, 2, true},
    // The same warps and lanes, 8 of them in one block (4 x 2): half the L2 reads per FMA of a
    // 128 x 128 tile, but one block per SM.
    {128, 256, 8, 8, 16, 4, 4, 1, true},
};
// The curated tiles of warp_tiled_async (f32, sm_80+; bk 8: the swizzle is of 8-float rows; both
// row and column pieces 16 or more apart, so a piece keeps its rows' swizzle).
inline constexpr BlockTile kAsyncTiles[] = {
    // 8 warps of 32 x 64 (4 x 2, lanes 4 x 8), 8 x 8 per thread, two blocks per SM (at most 128
    // registers), 2 stages (16 KB): 16 warps per SM to hide the shared loads' latency and each
    // other's barriers; a step's copies land while the step before is multiplied. The fastest
    // at 4096^3 on the H200 (3097 us; 3 stages 3188, 4 stages 3226: fewer stages ran faster).
    {128, 128, 8, 8, 8, 4, 4, 2, false, 2, 4},
    // The same over 3 and 4 stages (24 and 32 KB): copies 2 and 3 steps ahead.
    {128, 128, 8, 8, 8, 4, 4, 2, false, 3, 4},
    {128, 128, 8, 8, 8, 4, 4, 2, false, 4, 4},
    // 8 warps of 32 x 128 (4 x 2, lanes 4 x 8), 8 x 16 per thread (128 FMAs per 6 shared reads),
    // one block per SM (up to 255 registers), 4 stages (48 KB, the most a block has without
    // opting in; 6 stages of dynamic shared memory measured slower on the H200): half the L2
    // reads per FMA of the 128 x 128 tiles, 8 warps per SM.
    {128, 256, 8, 8, 16, 4, 4, 1, false, 4, 4},
};
inline constexpr int kBlockTileCount = static_cast<int>(sizeof kBlockTiles / sizeof kBlockTiles[0]);
inline constexpr int kWarpTileCount = static_cast<int>(sizeof kWarpTiles / sizeof kWarpTiles[0]);
inline constexpr int kBroadcastTileCount = static_cast<int>(sizeof kBroadcastTiles / sizeof kBroadcastTiles[0]);
inline constexpr int kAsyncTileCount = static_cast<int>(sizeof kAsyncTiles / sizeof kAsyncTiles[0]);

// warp_tiled_async's stage of a K-contiguous operand: [extent][8] floats, the two 16-byte chunks
// of row e placed at ((e & 3) ^ (e / 4 & 3), c) within the 128-byte line of rows 4 (e / 4) ..
// + 3, so rows 4 apart (a warp's row groups) fall in different banks. The float offset of chunk
// c (k = 4c .. 4c + 3) of row e; bit 0 of a chunk's place is c, so a row's k .. k + 3 at any k
// that is a multiple of 4 (or k, k + 1 at even k) stay contiguous.
__host__ __device__ constexpr int swizzled_chunk(int e, int c) {
  return (e >> 2) * 32 + ((((e & 3) ^ ((e >> 2) & 3)) << 1) | c) * 4;
}

// warp_tiled_async's shared memory: `async_stages` stages of bk x (bm + bn) floats, unpadded.
constexpr std::size_t async_tile_shared_bytes(const BlockTile& t) {
  return static_cast<std::size_t>(t.async_stages) * static_cast<std::size_t>(t.bk) *
         static_cast<std::size_t>(t.bm + t.bn) * 4;
}

// 16-byte packs of a bk-deep operand tile that each thread of a block tile moves per K step.
constexpr int tile_slots(const BlockTile& t, int block_extent, int element_bytes) {
  const int packs = block_extent * t.bk * element_bytes / 16;
  return (packs + t.threads() - 1) / t.threads();
}

// Static shared memory of a block-tiled kernel: float tiles of A and B (rows padded by 4 floats),
// two of each when double-buffered, and on sm_80+ the cp.async staging packs of the next K step
// (none for a register_staged tile).
constexpr std::size_t block_tile_shared_bytes(const BlockTile& t, bool double_buffered, int compute_capability,
                                              int element_bytes) {
  const std::size_t stage = static_cast<std::size_t>(t.bk) * static_cast<std::size_t>(t.bm + 4 + t.bn + 4) * 4;
  if (!double_buffered) return stage;
  const std::size_t staging =
      compute_capability >= 80 && !t.register_staged
          ? static_cast<std::size_t>(tile_slots(t, t.bm, element_bytes) + tile_slots(t, t.bn, element_bytes)) *
                static_cast<std::size_t>(t.threads()) * 16
          : 0;
  return 2 * stage + staging;
}

// v1: one thread per output, dot product straight from global memory (block_size threads along n).
template <typename T>
cudaError_t naive(const Args<T>&, int block_size, cudaStream_t);

// v2: tile x tile threads share tile x tile blocks of A and B through shared memory; pad (0, 1)
// adds a column to each shared row, against the bank conflicts of the transposed (nt, tn) stores.
template <typename T>
cudaError_t smem_tiled(const Args<T>&, int tile, int pad, cudaStream_t);
inline constexpr int kSmemTiles[] = {16, 32};

// v3: kBlockTiles[tile]: each thread computes a tm x tn block from float4 reads of shared tiles;
// global loads are 16-byte packs where the pointer and leading dimension allow, else scalar.
template <typename T>
cudaError_t register_blocked(const Args<T>&, int tile, cudaStream_t);

// v4: v3 with two shared stages: the next K step is fetched while this one is multiplied,
// into registers on sm_75, by cp.async into shared staging on sm_80+. One barrier per K step.
template <typename T>
cudaError_t double_buffered(const Args<T>&, int tile, cudaStream_t);

// v5: v4 with kWarpTiles[tile]: warp tiles, each lane's 4 x 4 pieces strided so that a warp's
// float4 reads of shared memory are contiguous (no bank conflicts) and warps share few rows.
template <typename T>
cudaError_t warp_tiled(const Args<T>&, int tile, cudaStream_t);

// v6: K cut into `splits` slices of whole bk steps, each multiplied by v4 (kBlockTiles[tile]) into
// float partial sums in the workspace, then one pass adds the slices and applies alpha, beta and
// the epilogue: more blocks for small M x N with large K. Needs split_k_workspace_bytes.
template <typename T>
cudaError_t split_k(const Args<T>&, int tile, int splits, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t);
inline std::size_t split_k_workspace_bytes(std::int64_t m, std::int64_t n, int splits) {
  return static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * static_cast<std::size_t>(splits) * sizeof(float);
}

// The second half of an unfused chain, after a library GEMM that wrote its product in fp32:
// C = epilogue(alpha acc + beta C + bias) for acc [m, n] row-major fp32 (alpha, beta, the bias
// and the activation as every kernel here applies them; the layout and k are not read). acc may
// be C itself when T is float.
template <typename T>
cudaError_t finish_product(const Args<T>&, const float* acc, cudaStream_t);

// v7: v5 for large problems, where shared-memory bandwidth is what limits v5: kBroadcastTiles[tile]
// with each warp's lanes paired so that every float4 read of a shared tile is shared by two lanes
// (an SM returns 128 bytes of shared memory per clock, one register per lane; a paired LDS.128
// takes 2 clocks instead of 4), the next k's fragments read into registers while this k's FMAs
// run, and interior 16-byte loads walking precomputed offsets instead of re-deriving and
// re-checking each address. Edges and the K tail go through v3's guarded loads.
template <typename T>
cudaError_t warp_tiled_broadcast(const Args<T>&, int tile, cudaStream_t);

// v8: f32 only, sm_80+ (cudaErrorNotSupported below): kAsyncTiles[tile], v7's paired lanes with
// both operands copied global -> shared by 16-byte cp.async as they lie in memory, into a ring
// of async_stages stages filled stages - 1 K steps ahead: no staging registers, no transposing
// stores. A K-contiguous operand (A in nn and nt, B in nt) stays [extent][bk] in shared memory,
// its 16-byte chunks swizzled so a warp's rows fall in different banks, and each thread reads 4
// of its K values as one float4. Edges, the K tail and unaligned operands copy partial or 4-byte
// chunks that zero-fill past the matrix; a block whose tiles are inside both operands at every
// K step copies with no checks at all.
cudaError_t warp_tiled_async(const Args<float>&, int tile, cudaStream_t);

// warp_tiled_async's largest m and n: the kernel keeps tile origins in 32 bits and adds a whole
// tile (at most 256) to one when it checks for an interior tile. The catalogue refuses larger
// problems; warp_tiled_async() itself still checks only m, n, k <= 2^31 - 1 (moving this check
// there changed the PTX of another kernel of gemm.cu, which then needs a GPU run to verify).
inline constexpr std::int64_t kAsyncMaxExtent = 2147483647 - 256;
// An operand stored extent-major (A in tn: [K, M]; B in nn and tn: [K, N]) has its extent as its
// leading dimension, and warp_tiled_async moves its chunks' offsets one K step (8 rows) on with
// 8 * ld in 32 bits: that extent must stay below 2^28. The catalogue refuses larger ones (the
// 64-bit product would change the kernel's PTX, which then needs a GPU run to verify).
inline constexpr std::int64_t kAsyncMaxStridedExtent = 2147483647 / 8;

}  // namespace shapetune::kernels::gemm
