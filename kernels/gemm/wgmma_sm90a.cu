#include "kernels/common/grid.cuh"
#include "kernels/gemm/wgmma.cuh"

// CUtensorMap and its enums only: cuTensorMapEncodeTiled is reached through the runtime's
// cudaGetDriverEntryPointByVersion, so nothing links libcuda directly.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/mbarrier.cuh"
#include "kernels/common/mma.cuh"
#include "kernels/common/reductions.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/sm90a_guard.cuh"
#include "kernels/common/tensor_map.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gemm/epilogue.cuh"
#include "kernels/gemm/raster.cuh"

namespace shapetune::kernels::gemm_wgmma {
namespace {

using gemm::finish_chunk;
using gemm::finish_element;
using gemm::Args;
using gemm::Epilogue;
using gemm::head_split_at;
using gemm::HeadSplitOutput;
using gemm::grouped_tile;
using gemm::Layout;

constexpr int kWarpSize = 32;
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
static_assert(kConsumerWarps == kConsumerThreads / kWarpSize, "wgmma.cuh's count");
// The 128-byte swizzle: a shared row of 128 bytes (one stage's K: 64 16-bit or 32 fp32 elements)
// whose eight 16-byte chunks are permuted by XOR with address bits 7-9, so its pattern repeats
// every 8 rows, 1024 bytes.
constexpr unsigned kSwizzleRowBytes = 128;
constexpr unsigned kSwizzleAtomBytes = 8 * kSwizzleRowBytes;
// An MN-major operand (A in tn, B in nn and tn; 16-bit only) arrives in boxes of 64 MN x 64 K:
// one 128-byte row of MN per K, 8 KiB a box.
constexpr int kMnBoxExtent = 64;
constexpr unsigned kMnBoxBytes = kMnBoxExtent * kBlockKBytes;
// One wgmma's K: 32 bytes of a K-major row (16 16-bit or 8 fp32 elements), four a stage.
constexpr int kMmaKBytes = 32;
// setmaxnreg: the producer warpgroup needs a handful of registers, the consumers' 128 fp32
// accumulators a thread the rest: 128 x 40 + 256 x 232 <= 64 Ki registers of an SM.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
// Named barrier of the two consumer warpgroups (0 is __syncthreads).
constexpr int kConsumerBarrier = 1;
// Rows of C that consecutive blocks walk down before moving right, in tile rows of 2048 / block_m:
// the ~132 resident blocks then cover about 2048 rows x 2048 columns of C, sharing their A rows
// and B columns in L2.
constexpr int kRasterRows = 2048;

// What the consumers' epilogue writes. It and the persistent schedule are template parameters: as
// runtime flags of one kernel they cost the H100's plain GEMM 5-12% (f16, 8192 x 3072 x 1024 and
// 65536 x 384 x 128, one tile a block).
enum class Store { c, head_split, residual_layernorm };

// What the consumers' epilogue needs; the operands travel as tensor maps.
template <typename T>
struct Params {
  const T* bias;  // null when the epilogue has none
  T* c;
  std::int64_t m, n, ldc;
  float alpha, beta;
  Epilogue epilogue;
  int tiles_m, tiles_n;
  int k_tiles;
  int stages;
  // C aligned to 16 bytes with ldc a whole number of 16-byte chunks (or head-split outputs
  // aligned with head_dim one), and the bias aligned: every chunk of 8 outputs inside the matrix
  // is one 128-bit access.
  bool c_vector;
  HeadSplitOutput<T> split;   // Store::head_split's outputs
  ResidualLayerNorm<T> norm;  // Store::residual_layernorm's operands
};

// kAKMajor: A's K is contiguous (nn, nt: A is [M, K]); else A is [K, M] (tn, M-major).
// kBKMajor: B's K is contiguous (nt: B is [N, K]); else B is [K, N] (nn, tn, N-major).
// Shared memory keeps each operand as it lies in global memory (TMA copies boxes straight
// through) and wgmma's transpose bits say which major it is.
template <typename TArg, int kBlockMArg, int kBlockNArg, bool kAKMajorArg, bool kBKMajorArg>
struct Tiling {
  using T = TArg;
  static constexpr int kBM = kBlockMArg, kBN = kBlockNArg;
  static constexpr bool kAKMajor = kAKMajorArg, kBKMajor = kBKMajorArg;
  static constexpr int kWarpgroupM = kBM / kConsumerWarpgroups;
  static constexpr int kMTiles = kWarpgroupM / 64;  // m64 wgmma tiles a consumer warpgroup
  static constexpr int kAccumulators = kBN / 2;     // fp32 a thread per m64 x kBN tile
  static constexpr int kBlockK = block_k(sizeof(T));  // K a stage: one 128-byte row
  static constexpr int kMmaK = kMmaKBytes / static_cast<int>(sizeof(T));  // K a wgmma: 16, or 8 in TF32
  static constexpr unsigned kATileBytes = kBM * kBlockKBytes;
  static constexpr unsigned kBTileBytes = kBN * kBlockKBytes;
  static constexpr unsigned kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kRasterGroup = kRasterRows / kBM > 0 ? kRasterRows / kBM : 1;
  // The epilogue stages each warp's 16 rows x kBN accumulators in fp32 through shared memory;
  // rows padded by 8 floats put the 8-byte writes of one n8 piece (8 rows x 4 lanes) on distinct
  // banks.
  static constexpr int kStagingStride = kBN + 8;
  static constexpr unsigned kStagingBytes = kConsumerWarps * 16 * kStagingStride * 4;
  static_assert(kStagingBytes == staging_bytes(TileShape{kBM, kBN}), "the catalogue's staging is the kernel's");

  static_assert(sizeof(T) == 2 || (std::is_same_v<T, float> && kAKMajor && kBKMajor),
                "16-bit A and B (k16) in any major, or fp32 ones (TF32, k8) both K-major");
  static_assert(kWarpgroupM % 64 == 0 && kBN % kMnBoxExtent == 0, "whole m64 tiles and MN boxes");
  static_assert(kBN == 64 || kBN == 128 || kBN == 256, "an n the wgmma wrappers below provide");
  static_assert(kBM <= 256 && kBN <= 256, "a K-major box spans the tile; TMA boxes stop at 256 rows");
  static_assert(kATileBytes % kSwizzleAtomBytes == 0, "B tiles start on a swizzle period too");
  static_assert(kStagingBytes <= kMinStages * kStageBytes, "the staging fits in the smallest pipeline");
  static_assert(shared_bytes(TileShape{kBM, kBN}, 1) == kStageBytes + 16 + 1024, "the catalogue's size is the kernel's");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- the GEMM's operand descriptors ---------------------------------------------------------

// The descriptor of a K-major or MN-major operand tile, as the producer's TMA boxes lay it out:
//   K-major (canonical ((8,m),(T,2k)):((8T,SBO),(1,T))): rows of 128 bytes, 8-row groups SBO =
//     1024 bytes apart; the leading offset is unused with swizzling ("assumed 1": encoded 1).
//     K step s (16 16-bit or 8 fp32 elements) starts 32 * s bytes into the rows.
//   MN-major (canonical ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))): 64 MN elements per 128-byte row,
//     one row per K; 8-K groups SBO = 1024 bytes apart; the next 64 MN (the next box) LBO = 8 KiB
//     away. K step s starts 16 rows = 2048 * s bytes in.
template <bool kKMajor>
__device__ __forceinline__ std::uint64_t operand_descriptor(unsigned tile, int mn0, int k_step) {
  if constexpr (kKMajor) {
    return matrix_descriptor(tile + static_cast<unsigned>(mn0) * kSwizzleRowBytes + k_step * kMmaKBytes, 16,
                             kSwizzleAtomBytes);
  } else {
    return matrix_descriptor(tile + static_cast<unsigned>(mn0 / kMnBoxExtent) * kMnBoxBytes +
                                 k_step * (kMmaKBytes / 2 * kSwizzleRowBytes),
                             kMnBoxBytes, kSwizzleAtomBytes);
  }
}

// ---- the kernel's parts -----------------------------------------------------------------------

// The pipeline's extents, read from the parameters once: the producer's and consumers' loops take
// them by value rather than through a reference to the kernel's parameter struct.
struct Schedule {
  int tiles_m, tiles_n;
  int k_tiles;
  int stages;
};

// run(tile) for the block's tiles: blockIdx.x, then (persistent) every gridDim.x-th after it.
template <bool kPersistent, class Run>
__device__ __forceinline__ void for_each_tile(const Schedule s, Run&& run) {
  if constexpr (kPersistent) {
    for (int tile = static_cast<int>(blockIdx.x); tile < s.tiles_m * s.tiles_n; tile += static_cast<int>(gridDim.x))
      run(tile);
  } else {
    run(static_cast<int>(blockIdx.x));
  }
}

// A position in the ring of stages, carried from one tile to the next.
struct Ring {
  int slot = 0;
  unsigned phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++slot == stages) slot = 0, phase ^= 1;
  }
};

// The producer (one thread): for every K step of every tile of the block, wait until the
// consumers have released the slot, announce the stage's bytes on its full barrier and issue the
// TMA boxes of A and B into it. A K-major tile is one box of kBlockK x rows; an MN-major one is
// rows / 64 boxes of 64 x kBlockK. It runs ahead into the next tile while the consumers store one.
template <class C, bool kPersistent>
__device__ __forceinline__ void produce(const CUtensorMap* a_map, const CUtensorMap* b_map,
                                        const Schedule s, unsigned tiles, unsigned full, unsigned empty) {
  prefetch_tensor_map(a_map);
  prefetch_tensor_map(b_map);
  Ring ring;
  const auto load_tile = [&](int tile) {
    const auto [tile_m, tile_n] = grouped_tile(tile, C::kRasterGroup, s.tiles_m, s.tiles_n);
    const int m0 = tile_m * C::kBM, n0 = tile_n * C::kBN;  // the host keeps extents below 2^31 - 256
    for (int kt = 0; kt < s.k_tiles; ++kt) {
      const int slot = ring.slot;
      mbarrier_wait(empty + 8 * slot, ring.phase ^ 1);
      const unsigned bar = full + 8 * slot;
      mbarrier_arrive_expect_tx(bar, C::kStageBytes);
      const unsigned a_dst = tiles + static_cast<unsigned>(slot) * C::kStageBytes;
      const unsigned b_dst = a_dst + C::kATileBytes;
      const int k0 = kt * C::kBlockK;
      if constexpr (C::kAKMajor) {
        tma_load_2d(a_dst, a_map, k0, m0, bar);
      } else {
#pragma unroll
        for (int j = 0; j < C::kBM / kMnBoxExtent; ++j)
          tma_load_2d(a_dst + j * kMnBoxBytes, a_map, m0 + j * kMnBoxExtent, k0, bar);
      }
      if constexpr (C::kBKMajor) {
        tma_load_2d(b_dst, b_map, k0, n0, bar);
      } else {
#pragma unroll
        for (int j = 0; j < C::kBN / kMnBoxExtent; ++j)
          tma_load_2d(b_dst + j * kMnBoxBytes, b_map, n0 + j * kMnBoxExtent, k0, bar);
      }
      ring.advance(s.stages);
    }
  };
  for_each_tile<kPersistent>(s, load_tile);
}

// TF32 wgmma takes the top 19 bits of each fp32 operand: it truncates. cuBLAS's TF32 and
// mma_sync_tf32 (cvt.rna) round to nearest, with about a third of the error (the H100 measured
// 0.0138 against 0.0050 at 8192 x 384 x 128), and truncation put 482 elements of the TechJam f32
// model's case 1 outside its rule. So the consumers round each stage in place before using it:
// each warpgroup its own A rows, both of them B (which both read); a proxy fence (wgmma reads
// through the async proxy; the fence also orders these writes before the producer's next TMA into
// the slot), then a barrier of the two warpgroups. It runs while the previous stage's wgmma do.
template <class C>
__device__ __forceinline__ void round_stage_to_tf32(unsigned a_tile, unsigned b_tile, int consumer) {
  const int thread = static_cast<int>(threadIdx.x) - kWarpgroupThreads;  // 0 .. kConsumerThreads - 1
  const auto round_chunk = [](unsigned address) {
    unsigned v[4];
    load_shared_16(address, v);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_tf32(v[i]);
    store_shared_16(address, v);
  };
  constexpr int kAChunks = C::kWarpgroupM * kBlockKBytes / 16, kBChunks = C::kBN * kBlockKBytes / 16;
  const unsigned a_rows = a_tile + static_cast<unsigned>(consumer * C::kWarpgroupM) * kBlockKBytes;
#pragma unroll
  for (int i = thread % kWarpgroupThreads; i < kAChunks; i += kWarpgroupThreads) round_chunk(a_rows + 16 * i);
#pragma unroll
  for (int i = thread; i < kBChunks; i += kConsumerThreads) round_chunk(b_tile + 16 * i);
  fence_proxy_async_shared();
  named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
}

// A consumer warpgroup, for one tile: for every K step, wait for the stage, issue its 4 wgmma K
// steps (k16, or k8 in TF32; kMTiles m64 x kBN tiles each) as one group, then wait for the
// previous step's group, whose stage each warp then releases (one arrival a warp; the empty
// barriers count kConsumerWarps). One group stays in flight, so the tensor cores always have the
// next step queued. A persistent block releases the last step's stage too, for the next tile's loads.
template <class C, bool kPersistent>
__device__ __forceinline__ void consume(float (&acc)[C::kMTiles][C::kAccumulators], const Schedule s,
                                        unsigned tiles, unsigned full, unsigned empty, int consumer, int lane,
                                        Ring& ring) {
  constexpr int kTransA = C::kAKMajor ? 0 : 1, kTransB = C::kBKMajor ? 0 : 1;
  int previous = -1;
  for (int kt = 0; kt < s.k_tiles; ++kt) {
    const int slot = ring.slot;
    mbarrier_wait(full + 8 * slot, ring.phase);
    const unsigned a_tile = tiles + static_cast<unsigned>(slot) * C::kStageBytes;
    const unsigned b_tile = a_tile + C::kATileBytes;
    if constexpr (std::is_same_v<typename C::T, float>) round_stage_to_tf32<C>(a_tile, b_tile, consumer);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < C::kBlockK / C::kMmaK; ++ks) {
      const std::uint64_t desc_b = operand_descriptor<C::kBKMajor>(b_tile, 0, ks);
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        const std::uint64_t desc_a =
            operand_descriptor<C::kAKMajor>(a_tile, consumer * C::kWarpgroupM + mt * 64, ks);
        if constexpr (std::is_same_v<typename C::T, float>)
          wgmma_m64k8_tf32<C::kBN>(acc[mt], desc_a, desc_b, kt > 0 || ks > 0);
        else
          wgmma_m64k16<typename C::T, C::kBN, kTransA, kTransB>(acc[mt], desc_a, desc_b, kt > 0 || ks > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) touch(acc[mt]);
    if (previous >= 0 && lane == 0) mbarrier_arrive(empty + 8 * previous);
    previous = slot;
    ring.advance(s.stages);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) touch(acc[mt]);
  if (kPersistent && lane == 0) mbarrier_arrive(empty + 8 * previous);
}

// The residual LayerNorm epilogue (wgmma.cuh's ResidualLayerNorm) for one warp's 16 staged rows of
// a tile that spans every column: lane l takes columns l, l + 32, ... (coalesced, and
// conflict-free in the staging), and the warp takes the rows in groups of 16 / (columns a lane
// holds), the loads of a group's residual rows all in flight together and its rows' reductions
// interleaved: row by row, each row's loads and shuffles were a latency chain of their own, and
// the H100 measured the fused kernel slower than the two kernels it replaces at 128 columns. Per
// row: the mean, then the biased variance of the stored h about it, in fp32 from registers.
template <class C>
__device__ __forceinline__ void store_rows_normalised(const Params<typename C::T>& p, const float* staging,
                                                      std::int64_t row0, int lane) {
  using T = typename C::T;
  constexpr int kPer = C::kBN / kWarpSize;  // columns a lane holds
  constexpr int kGroup = 16 / kPer;  // rows in flight at once: 16 values a lane (32 spilled at 256x128)
  static_assert(16 % kGroup == 0, "whole groups of a warp's 16 rows");
  const auto stored = [](float v) { return to_float(from_float<T>(v)); };
  const int n = static_cast<int>(p.n);
  const float inv_n = 1.f / static_cast<float>(n);
  float bias[kPer], gamma[kPer], beta[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int col = x * kWarpSize + lane;
    const bool in = col < n;
    bias[x] = in ? to_float(p.bias[col]) : 0.f;
    gamma[x] = in ? to_float(p.norm.gamma[col]) : 0.f;
    beta[x] = in ? to_float(p.norm.beta[col]) : 0.f;
  }
#pragma unroll 1
  for (int r0 = 0; r0 < 16; r0 += kGroup) {
    float h[kGroup][kPer], mean[kGroup], rstd[kGroup];
    // Every residual load of the group first: stores to C in between could alias them, and the
    // compiler would then keep each row's loads behind the row before.
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const std::int64_t row = row0 + r0 + g;
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int col = x * kWarpSize + lane;
        h[g][x] = row < p.m && col < n ? to_float(p.norm.residual[row * n + col]) : 0.f;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const std::int64_t row = row0 + r0 + g;
      const float* staged = staging + (r0 + g) * C::kStagingStride;
      mean[g] = 0.f;
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int col = x * kWarpSize + lane;
        if (row < p.m && col < n) {
          h[g][x] = stored(stored(p.alpha * staged[col] + bias[x]) + h[g][x]);
          p.c[row * p.ldc + col] = from_float<T>(h[g][x]);
          mean[g] += h[g][x];
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) mean[g] = lane_group_reduce(mean[g], kWarpSize, SumOp{}) * inv_n;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      rstd[g] = 0.f;
#pragma unroll
      for (int x = 0; x < kPer; ++x)
        if (x * kWarpSize + lane < n) rstd[g] += (h[g][x] - mean[g]) * (h[g][x] - mean[g]);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      rstd[g] = rsqrtf(lane_group_reduce(rstd[g], kWarpSize, SumOp{}) * inv_n + p.norm.epsilon);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const std::int64_t row = row0 + r0 + g;
      if (row >= p.m) break;  // uniform across the warp, and the rows after it are past m too
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int col = x * kWarpSize + lane;
        if (col < n) p.norm.y[row * n + col] = from_float<T>((h[g][x] - mean[g]) * rstd[g] * gamma[x] + beta[x]);
      }
    }
  }
}

// c[m][n] = act(alpha acc + beta c[m][n] + bias[n]) for one m64 tile of a consumer warpgroup:
// warp w holds rows 16w..16w+15 of it in wgmma's accumulator layout (register 4j + 2h + e: row
// lane / 4 + 8h, column 8j + 2 (lane % 4) + e). Each warp stages its 16 rows through its own
// shared area so that lanes then walk C row-major in 16-byte chunks (8 outputs: one 128-bit
// store, one bias load); element by element, the 2-byte stores cost several times the K = 128
// GEMM behind them. Chunks past the right edge, and a C whose alignment or ldc breaks the chunks
// (p.c_vector false), go element by element. The loop is not unrolled: erfcf inlined once per
// element of every chunk would dominate the kernel's size.
template <class C, Store kStore>
__device__ __forceinline__ void store_tile(const Params<typename C::T>& p, const float (&acc)[C::kAccumulators],
                                           float* staging, std::int64_t row0, std::int64_t col0, int lane) {
  using T = typename C::T;
  constexpr int kStride = C::kStagingStride;
  constexpr int kChunk = Pack<T>::kCount;
  constexpr int kChunksPerRow = C::kBN / kChunk;
  static_assert((16 * kChunksPerRow) % kWarpSize == 0, "whole chunks per lane");
  __syncwarp();  // the previous tile's reads of the staging are done
#pragma unroll
  for (int j = 0; j < C::kBN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(staging + (lane / 4 + 8 * h) * kStride + 8 * j + 2 * (lane % 4)) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  __syncwarp();
  if constexpr (kStore == Store::residual_layernorm) {
    store_rows_normalised<C>(p, staging, row0, lane);
    return;
  }

  const bool read_c = p.beta != 0.f;
#pragma unroll 1
  for (int e = 0; e < 16 * kChunksPerRow / kWarpSize; ++e) {
    const int idx = lane + e * kWarpSize, r = idx / kChunksPerRow, c = (idx % kChunksPerRow) * kChunk;
    const std::int64_t row = row0 + r, col = col0 + c;
    if (row >= p.m) continue;
    const float* staged = staging + r * kStride + c;
    T* out;
    if constexpr (kStore == Store::head_split)
      out = head_split_at(p.split, row, col);
    else
      out = p.c + row * p.ldc + col;
    const T* c_old = read_c ? out : nullptr;
    const T* bias = p.bias ? p.bias + col : nullptr;
    if (p.c_vector && col + kChunk <= p.n) {
      store_pack(out, finish_chunk<T>(staged, c_old, bias, p.alpha, p.beta, p.epilogue));
    } else {
      for (int x = 0; x < kChunk && col + x < p.n; ++x)
        out[x] = finish_element<T>(staged[x], c_old ? c_old + x : nullptr, bias ? bias + x : nullptr, p.alpha, p.beta,
                                   p.epilogue);
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Warpgroup 0 produces (one thread issues every TMA), warpgroups 1 and 2 consume. Shared memory:
// `stages` x (A tile, B tile), each on a 1024-byte boundary, then the full and empty mbarriers,
// then (persistent) the consumer warps' staging.
template <class C, bool kPersistent, Store kStore>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                 const Params<typename C::T> p) {
  grid_dependency_sync();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char shared[];
  // TMA's and wgmma's swizzle are functions of the address bits, so the tiles must start on the
  // swizzle's 1024-byte period; the dynamic segment's start is not guaranteed to (1 KiB of slack).
  const unsigned shared_base = shared_address(shared);
  const unsigned tiles = (shared_base + (kSwizzleAtomBytes - 1)) & ~(kSwizzleAtomBytes - 1);
  const Schedule schedule{p.tiles_m, p.tiles_n, p.k_tiles, p.stages};
  const int stages = schedule.stages;
  const unsigned full = tiles + static_cast<unsigned>(stages) * C::kStageBytes;
  const unsigned empty = full + 8 * static_cast<unsigned>(stages);
  const int warpgroup = static_cast<int>(threadIdx.x) / kWarpgroupThreads;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(full + 8 * s, 1);                // the producer's arrive.expect_tx (+ the bytes)
      mbarrier_init(empty + 8 * s, kConsumerWarps);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    registers_decrease<kProducerRegisters>();
    if (threadIdx.x == 0) produce<C, kPersistent>(&a_map, &b_map, schedule, tiles, full, empty);
    return;
  }

  registers_increase<kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int consumer_warp = (static_cast<int>(threadIdx.x) - kWarpgroupThreads) / kWarpSize;
  // Persistent: the staging lies past the barriers (16-byte aligned: the stages are whole KiB);
  // otherwise in the pipeline's buffers.
  const unsigned staging_at = kPersistent ? empty + 8 * static_cast<unsigned>(stages) : tiles;
  float* staging = reinterpret_cast<float*>(shared + (staging_at - shared_base)) + consumer_warp * 16 * C::kStagingStride;
  Ring ring;
  const auto multiply_and_store = [&](int tile) {
    const auto [tile_m, tile_n] = grouped_tile(tile, C::kRasterGroup, schedule.tiles_m, schedule.tiles_n);
    const int m0 = tile_m * C::kBM, n0 = tile_n * C::kBN;
    float acc[C::kMTiles][C::kAccumulators];  // the first K step's wgmma (scale_d 0) initialises them
    consume<C, kPersistent>(acc, schedule, tiles, full, empty, consumer, lane, ring);
    // A block of one tile stages in the pipeline's buffers once both warpgroups' last wgmma have
    // read them (every TMA has landed: each was waited for).
    if constexpr (!kPersistent) named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
      const std::int64_t row0 =
          static_cast<std::int64_t>(m0) + consumer * C::kWarpgroupM + mt * 64 + 16 * (consumer_warp % 4);
      store_tile<C, kStore>(p, acc[mt], staging, row0, n0, lane);
    }
  };
  for_each_tile<kPersistent>(schedule, multiply_and_store);
#else
  // Built for an architecture without wgmma; the host wrapper never launches this.
  __trap();
#endif
}

// ---- host side ------------------------------------------------------------------------------

template <typename T, std::size_t kTile, bool kAKMajor, bool kBKMajor>
struct TilingFor {
  static constexpr TileShape s = kTiles[kTile];
  using type = Tiling<T, s.block_m, s.block_n, kAKMajor, kBKMajor>;
};

// A row-major matrix of `outer` rows of `inner` elements, `ld` elements apart, read in boxes of
// box_inner x box_outer (box_inner elements = 128 bytes: one swizzle row), 128-byte swizzled,
// zero-filled past its edges.
template <typename T>
cudaError_t encode(CUtensorMap& map, const T* base, std::int64_t inner, std::int64_t outer, std::int64_t ld,
                   int box_inner, int box_outer) {
  return encode_swizzled_128<T, 2>(map, base, {inner, outer}, {ld}, {box_inner, box_outer});
}

template <class C, Store kStore>
cudaError_t launch(const Args<typename C::T>& args, const HeadSplitOutput<typename C::T>& split,
                   const ResidualLayerNorm<typename C::T>& norm, int stages, bool persistent, cudaStream_t stream) {
  using T = typename C::T;
  const std::int64_t tiles_m = (args.m + C::kBM - 1) / C::kBM, tiles_n = (args.n + C::kBN - 1) / C::kBN;
  // grouped_tile() computes in int; this keeps tiles_m * tiles_n (and the group's blocks) in range.
  if (tiles_m * tiles_n > INT_MAX / 2 || tiles_n > INT_MAX / (2 * C::kRasterGroup)) return cudaErrorInvalidConfiguration;

  CUtensorMap a_map, b_map;
  cudaError_t e = C::kAKMajor ? encode(a_map, args.a, args.k, args.m, args.lda(), C::kBlockK, C::kBM)
                              : encode(a_map, args.a, args.m, args.k, args.lda(), kMnBoxExtent, C::kBlockK);
  if (e != cudaSuccess) return e;
  e = C::kBKMajor ? encode(b_map, args.b, args.k, args.n, args.ldb(), C::kBlockK, C::kBN)
                  : encode(b_map, args.b, args.n, args.k, args.ldb(), kMnBoxExtent, C::kBlockK);
  if (e != cudaSuccess) return e;

  Params<T> p{};
  p.bias = args.epilogue == Epilogue::none ? nullptr : args.bias;
  p.c = args.c;
  p.m = args.m;
  p.n = args.n;
  p.ldc = args.ldc();
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.epilogue = args.epilogue;
  p.tiles_m = static_cast<int>(tiles_m);
  p.tiles_n = static_cast<int>(tiles_n);
  p.k_tiles = static_cast<int>((args.k + C::kBlockK - 1) / C::kBlockK);
  p.stages = stages;
  // store_tile's unit: one Pack<T>, 16 bytes.
  p.split = split;
  p.norm = norm;
  p.c_vector = (!p.bias || aligned(p.bias, sizeof(Pack<T>))) &&
               (split.dst[0] ? aligned(split.dst[0], sizeof(Pack<T>)) && aligned(split.dst[1], sizeof(Pack<T>)) &&
                                   aligned(split.dst[2], sizeof(Pack<T>)) && split.head_dim % Pack<T>::kCount == 0
                             : aligned(args.c, sizeof(Pack<T>)) && p.ldc % Pack<T>::kCount == 0);

  const std::size_t smem = shared_bytes(TileShape{C::kBM, C::kBN}, stages, persistent);
  const auto kernel = persistent ? wgmma_kernel<C, true, kStore> : wgmma_kernel<C, false, kStore>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  std::int64_t blocks = tiles_m * tiles_n;
  if (persistent) {  // as many blocks as are resident at once
    std::int64_t resident = 0;
    if ((e = resident_blocks(kernel, kThreads, smem, &resident)) != cudaSuccess) return e;
    if (resident < 1) return cudaErrorInvalidValue;
    blocks = std::min(blocks, resident);
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(a_map, b_map, p);
  return cudaGetLastError();
}

template <typename T, Store kStore, bool kAKMajor, bool kBKMajor, std::size_t... kTile>
cudaError_t launch_tile(const Args<T>& args, const HeadSplitOutput<T>& split, const ResidualLayerNorm<T>& norm,
                        int tile, int stages, bool persistent, cudaStream_t stream, std::index_sequence<kTile...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((static_cast<std::size_t>(tile) == kTile
        ? (e = launch<typename TilingFor<T, kTile, kAKMajor, kBKMajor>::type, kStore>(args, split, norm, stages,
                                                                                       persistent, stream))
        : e),
   ...);
  return e;
}

template <typename T, bool kAKMajor, bool kBKMajor, Store kStore = Store::c>
cudaError_t launch_layout(const Args<T>& args, int tile, int stages, bool persistent, cudaStream_t stream,
                          const HeadSplitOutput<T>& split = {}, const ResidualLayerNorm<T>& norm = {}) {
  return launch_tile<T, kStore, kAKMajor, kBKMajor>(args, split, norm, tile, stages, persistent, stream,
                                                    std::make_index_sequence<kTiles.size()>{});
}

// The checks every entry point makes: a tile and stage count of the table, a layout the element
// type is read in, extents TMA can address, an sm_90 device, A and B as TMA reads them.
template <typename T>
cudaError_t check_call(const gemm::Args<T>& args, int tile, int stages) {
  if (stages < kMinStages || stages > kMaxStages || tile < 0 || tile >= static_cast<int>(kTiles.size()))
    return cudaErrorInvalidValue;
  // TMA coordinates are int32, and a tile's origin plus its extent must stay representable.
  constexpr std::int64_t kMaxExtent = INT_MAX - 256;
  if (args.m < 1 || args.n < 1 || args.k < 1 || args.m > kMaxExtent || args.n > kMaxExtent || args.k > kMaxExtent)
    return cudaErrorInvalidValue;
  if (cudaError_t e = require_sm90(); e != cudaSuccess) return e;
  if (!reads_layout(args.layout, sizeof(T))) return cudaErrorInvalidValue;
  if (!tma_addressable(args.layout, args.m, args.n, args.k, sizeof(T)) || !aligned(args.a, 16) || !aligned(args.b, 16))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

template <typename T>
cudaError_t wgmma(const gemm::Args<T>& args, int tile, int stages, bool persistent, cudaStream_t stream) {
  if (cudaError_t e = check_call(args, tile, stages); e != cudaSuccess) return e;
  if constexpr (std::is_same_v<T, float>) {  // nt alone (check_call refused the others)
    return launch_layout<T, true, true>(args, tile, stages, persistent, stream);
  } else {
    switch (args.layout) {
      case Layout::nn: return launch_layout<T, true, false>(args, tile, stages, persistent, stream);
      case Layout::nt: return launch_layout<T, true, true>(args, tile, stages, persistent, stream);
      case Layout::tn: return launch_layout<T, false, false>(args, tile, stages, persistent, stream);
    }
    return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t wgmma_head_split(const gemm::Args<T>& args, const HeadSplitOutput<T>& out, int tile, int stages,
                             bool persistent, cudaStream_t stream) {
  if (args.layout != Layout::nt || args.beta != 0.f) return cudaErrorInvalidValue;
  if (!out.dst[0] || !out.dst[1] || !out.dst[2] || out.seq < 1 || out.heads < 1 || out.head_dim < 1 ||
      out.head_dim % Pack<T>::kCount != 0 || args.n != 3 * std::int64_t{out.heads} * out.head_dim ||
      args.m % out.seq != 0 || args.m > INT_MAX || args.n > INT_MAX)
    return cudaErrorInvalidValue;
  if (cudaError_t e = check_call(args, tile, stages); e != cudaSuccess) return e;
  return launch_layout<T, true, true, Store::head_split>(args, tile, stages, persistent, stream, out);
}

template <typename T>
cudaError_t wgmma_residual_layernorm(const gemm::Args<T>& args, const ResidualLayerNorm<T>& norm, int tile, int stages,
                                     bool persistent, cudaStream_t stream) {
  if (args.layout != Layout::nt || args.alpha != 1.f || args.beta != 0.f || args.epilogue != Epilogue::bias ||
      !args.bias || !norm.residual || !norm.gamma || !norm.beta || !norm.y || args.m > INT_MAX || args.n > INT_MAX)
    return cudaErrorInvalidValue;
  if (cudaError_t e = check_call(args, tile, stages); e != cudaSuccess) return e;
  if (args.n > kTiles[static_cast<std::size_t>(tile)].block_n) return cudaErrorInvalidValue;
  return launch_layout<T, true, true, Store::residual_layernorm>(args, tile, stages, persistent, stream, {}, norm);
}

template cudaError_t wgmma<__half>(const gemm::Args<__half>&, int, int, bool, cudaStream_t);
template cudaError_t wgmma<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&, int, int, bool, cudaStream_t);
template cudaError_t wgmma<float>(const gemm::Args<float>&, int, int, bool, cudaStream_t);

template cudaError_t wgmma_head_split<__half>(const gemm::Args<__half>&, const HeadSplitOutput<__half>&, int, int, bool,
                                              cudaStream_t);
template cudaError_t wgmma_head_split<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&,
                                                     const HeadSplitOutput<__nv_bfloat16>&, int, int, bool,
                                                     cudaStream_t);
template cudaError_t wgmma_head_split<float>(const gemm::Args<float>&, const HeadSplitOutput<float>&, int, int, bool,
                                             cudaStream_t);

template cudaError_t wgmma_residual_layernorm<__half>(const gemm::Args<__half>&, const ResidualLayerNorm<__half>&, int,
                                                      int, bool, cudaStream_t);
template cudaError_t wgmma_residual_layernorm<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&,
                                                             const ResidualLayerNorm<__nv_bfloat16>&, int, int, bool,
                                                             cudaStream_t);

}  // namespace shapetune::kernels::gemm_wgmma
