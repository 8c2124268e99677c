#include "kernels/common/grid.cuh"
#include "kernels/gemm/tensor_core.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/async_copy.cuh"
#include "kernels/common/mma.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gemm/epilogue.cuh"
#include "kernels/gemm/raster.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Below sm_80 the kernels compile to a trap (no cp.async, no bf16/tf32 mma, no m16n8k16), so the
// device helpers below go unused in this pass by design.
#pragma nv_diag_suppress 177
#endif

namespace shapetune::kernels::gemm_tensor_core {
namespace {

using gemm::finish_chunk;
using gemm::finish_element;
using gemm::Args;
using gemm::Epilogue;
using gemm::grouped_tile;
using gemm::head_split_at;
using gemm::Layout;

constexpr int kWarpSize = 32;
constexpr int kChunkBytes = 16;  // one cp.async, one ldmatrix row
// Tile rows (of the block-tile grid) that consecutive blocks walk down before moving right, so
// the blocks resident at one time share their A rows and B columns in L2.
constexpr int kRasterGroup = 8;

// Everything a launch passes, decided on the host. The *_vector flags say the operand's base is
// 16-byte aligned and its leading dimension a whole number of 16-byte chunks, so every chunk of
// a tile is one aligned cp.async (or lies wholly outside the matrix).
template <typename T>
struct Params {
  const T* a;
  const T* b;
  const T* bias;  // null when the epilogue has none
  T* c;
  std::int64_t m, n, k;
  std::int64_t lda, ldb, ldc;
  float alpha, beta;
  Epilogue epilogue;
  int tiles_m, tiles_n;
  int stages;
  bool a_vector, b_vector;
  // Every 16-byte chunk of C's columns (and of the bias) is one aligned 128-bit access: row-major
  // C aligned with ldc a whole number of chunks, or head-split outputs aligned with head_dim one.
  bool c_vector;
  HeadSplitOutput<T> split;  // split.dst[0] null: C row-major at c
};

// Where output (row, col) of C is stored, as an element pointer.
template <typename T>
__device__ __forceinline__ T* output_at(const Params<T>& p, std::int64_t row, std::int64_t col) {
  return p.split.dst[0] ? head_split_at(p.split, row, col) : p.c + row * p.ldc + col;
}

// Waits until the oldest in-flight tile has landed: with `stages` buffers, stages - 2 younger
// groups may stay in flight. The stage count is a run-time value (one kernel serves 2, 3 and 4),
// and wait_group takes an immediate, hence the switch (uniform across the block).
__device__ __forceinline__ void wait_oldest_tile(int stages) {
  switch (stages) {
    case 2: wait_async_copies<0>(); break;
    case 3: wait_async_copies<1>(); break;
    default: wait_async_copies<2>(); break;
  }
}

// The raw bits of one element, for copies that do not interpret them.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, unsigned short, unsigned>;

// ---- shared-memory tiles --------------------------------------------------------------------

// A kRows x kCols tile of T in shared memory, row-major, in 16-byte chunks.
// Read by ldmatrix (kPadded false): the chunk's position within its row is XOR-swizzled by the
// row. Unswizzled, rows are multiples of 128 bytes apart (or 64: two rows per 128-byte line), so
// the 8 rows one ldmatrix matrix reads would all hit the same banks; the XOR spreads any 8
// consecutive rows (from a multiple of 8) over the 8 chunk positions of a bank line, and it
// permutes aligned groups of 8 chunks, so the 16-byte cp.async writes of 8 consecutive chunks
// stay conflict-free too.
// Read by 32-bit loads (kPadded, the TF32 operands whose K is the row index): a warp reads 4
// consecutive rows x 8 consecutive floats; 8 floats of padding per row put those rows 8 banks
// apart. (An XOR swizzle would do too, but its per-tile offsets are not additive and cost the
// registers a 64x64 warp tile cannot spare.)
template <typename T, int kRowsArg, int kColsArg, bool kPadded>
struct SmemTile {
  static constexpr int kRows = kRowsArg;
  static constexpr int kCols = kColsArg;
  static constexpr int kChunkElements = kChunkBytes / static_cast<int>(sizeof(T));
  static constexpr int kChunksPerRow = kCols / kChunkElements;
  static constexpr int kRowBytes = kCols * static_cast<int>(sizeof(T)) + (kPadded ? 32 : 0);
  static constexpr int kBytes = kRows * kRowBytes;
  static_assert(kCols % kChunkElements == 0, "rows are whole chunks");
  static_assert(kChunksPerRow >= 4 && (kChunksPerRow & (kChunksPerRow - 1)) == 0,
                "the swizzle needs a power-of-two number of chunks per row, at least 4");
  static_assert(!kPadded || kCols * sizeof(T) % 128 == 0, "padding puts rows 8 banks apart");

  // Byte offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static unsigned chunk_offset(int row, int chunk) {
    int x = 0;
    if constexpr (kPadded) {
      x = 0;
    } else if constexpr (kChunksPerRow >= 8) {
      x = row & 7;
    } else {
      x = (row >> 1) & 3;  // two 64-byte rows share a 128-byte line
    }
    return static_cast<unsigned>(row * kRowBytes + (chunk ^ x) * kChunkBytes);
  }
  // Byte offset of element (row, col); for the padded layout only.
  __device__ __forceinline__ static unsigned element_offset(int row, int col) {
    static_assert(kPadded, "swizzled tiles are read by ldmatrix");
    return static_cast<unsigned>(row * kRowBytes + col * static_cast<int>(sizeof(T)));
  }
};

// One thread's share of copying an operand's tiles, in K order, into SmemTiles. The tile's
// element (r, c) is src[(row0 + r) * ld + col0 + c]; the thread copies chunk `chunk` of rows
// first_row, first_row + kRowsPerPass, ...: consecutive threads read consecutive 16 bytes of a row
// (coalesced), and the thread's pointer and bounds are set up once, then advanced one tile at a
// time along K (along columns for a K-contiguous operand, along rows otherwise).
// Elements outside the matrix become zero, so the K tail adds nothing and no garbage (NaN) in an
// unused row or column meets a real value.
template <typename Tile, typename T, int kThreads, bool kAlongColumns>
struct TileCopy {
  static constexpr int kE = Tile::kChunkElements;
  static constexpr int kRowsPerPass = kThreads / Tile::kChunksPerRow;
  static constexpr int kPasses = Tile::kRows / kRowsPerPass;
  static_assert(kThreads % Tile::kChunksPerRow == 0 && Tile::kRows % kRowsPerPass == 0,
                "every thread copies the same chunk column of the same number of rows");

  const T* src;              // this thread's first element of the current tile (always a valid address)
  std::int64_t ld;
  std::int64_t rows_left;    // rows of the matrix from this thread's first row of the current tile on
  std::int64_t cols_left;    // columns from this thread's first column on
  int first_row, chunk;
  bool vector;               // every chunk a whole, aligned 16 bytes (or wholly outside)

  __device__ __forceinline__ TileCopy(const T* matrix, std::int64_t ld_arg, std::int64_t rows, std::int64_t cols,
                                      std::int64_t row0, std::int64_t col0, bool vector_ok) {
    first_row = static_cast<int>(threadIdx.x) / Tile::kChunksPerRow;
    chunk = static_cast<int>(threadIdx.x) % Tile::kChunksPerRow;
    const std::int64_t row = row0 + first_row, col = col0 + chunk * kE;
    ld = ld_arg;
    rows_left = rows - row;
    cols_left = cols - col;
    // A thread whose first element lies outside the matrix never copies anything (the edges only
    // recede as K advances); its pointer stays at the matrix start for the zero-filling copies.
    src = rows_left > 0 && cols_left > 0 ? matrix + row * ld + col : matrix;
    vector = vector_ok;
  }

  // Copies the current tile into the SmemTile at `dst`, then moves on to the next along K.
  __device__ __forceinline__ void copy_and_advance(unsigned dst) {
    if (vector) {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        // cols is a multiple of kE here, so a chunk is wholly inside or wholly outside.
        const bool inside = rows_left > i * kRowsPerPass && cols_left > 0;
        copy_async_16_zfill</*kPrefetchL2Line=*/true>(dst + Tile::chunk_offset(first_row + i * kRowsPerPass, chunk),
                                                    inside ? src + i * (kRowsPerPass * ld) : src,
                                                    inside ? kChunkBytes : 0);
      }
    } else {
      // Unaligned rows (odd K, an offset pointer): element by element through registers. Not
      // unrolled: it is the slow path, and would otherwise double the kernel's size.
#pragma unroll 1
      for (int i = 0; i < kPasses; ++i) {
        const bool row_inside = rows_left > i * kRowsPerPass;
        const Bits<T>* p = reinterpret_cast<const Bits<T>*>(src + i * (kRowsPerPass * ld));
        Bits<T> e[kE];
#pragma unroll
        for (int j = 0; j < kE; ++j) e[j] = (row_inside && cols_left > j) ? p[j] : Bits<T>(0);
        unsigned words[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          if constexpr (sizeof(T) == 2) {
            words[w] = static_cast<unsigned>(e[2 * w]) | (static_cast<unsigned>(e[2 * w + 1]) << 16);
          } else {
            words[w] = e[w];
          }
        }
        store_shared_16(dst + Tile::chunk_offset(first_row + i * kRowsPerPass, chunk), words);
      }
    }
    // Along K; the pointer moves only while it stays on the matrix.
    if constexpr (kAlongColumns) {
      cols_left -= Tile::kCols;
      if (cols_left > 0 && rows_left > 0) src += Tile::kCols;
    } else {
      rows_left -= Tile::kRows;
      if (rows_left > 0 && cols_left > 0) src += Tile::kRows * ld;
    }
  }
};

// ---- the kernel -----------------------------------------------------------------------------

// kAKMajor: A's K is contiguous (nn, nt: A is [M, K]); else A is [K, M] (tn).
// kBKMajor: B's K is contiguous (nt: B is [N, K]); else B is [K, N] (nn, tn).
// Shared memory keeps each operand in its global layout, so cp.async copies straight through and
// the transposition happens in the fragment load: ldmatrix.trans for 16-bit types, 32-bit loads
// for TF32 (ldmatrix moves 16-bit elements; .trans would split the floats).
template <typename TArg, int kBlockM, int kBlockN, int kBlockK, int kWarpsMArg, int kWarpsNArg, bool kAKMajorArg,
          bool kBKMajorArg>
struct Tiling {
  using T = TArg;
  static constexpr int kBM = kBlockM, kBN = kBlockN, kBK = kBlockK;
  static constexpr int kWarpsM = kWarpsMArg, kWarpsN = kWarpsNArg;
  static constexpr bool kAKMajor = kAKMajorArg, kBKMajor = kBKMajorArg;
  static constexpr bool kTf32 = sizeof(T) == 4;
  static constexpr int kThreads = kWarpSize * kWarpsM * kWarpsN;
  static constexpr int kWarpM = kBM / kWarpsM;  // warp tile
  static constexpr int kWarpN = kBN / kWarpsN;
  static constexpr int kMmaK = Mma<T>::kK;
  static constexpr int kMTiles = kWarpM / 16;  // mma tiles per warp tile
  static constexpr int kNTiles = kWarpN / 8;
  static constexpr int kKSteps = kBK / kMmaK;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0 && kBK % kMmaK == 0, "warp tiles are whole mma tiles");
  // The main loop alternates two fragment buffers by k-step; the next tile's first k-step must
  // land in buffer 0 again.
  static_assert(kKSteps % 2 == 0, "an even number of k-steps per tile");

  using ATile = std::conditional_t<kAKMajor, SmemTile<T, kBM, kBK, false>, SmemTile<T, kBK, kBM, kTf32>>;
  using BTile = std::conditional_t<kBKMajor, SmemTile<T, kBN, kBK, false>, SmemTile<T, kBK, kBN, kTf32>>;
  static constexpr int kStageBytes = ATile::kBytes + BTile::kBytes;
  // The epilogue's per-warp staging of a 16-row slice of the warp tile in fp32; rows padded by 8
  // floats so the lanes' 8-byte writes of one mma tile (8 rows x 4 pairs) hit distinct banks.
  static constexpr int kStagingStride = kWarpN + 8;
  static constexpr int kStagingFloats = 16 * kStagingStride;
  static_assert(kWarpsM * kWarpsN * kStagingFloats * 4 <= 2 * kStageBytes, "staging fits in the smallest pipeline");
  static_assert(kWarpN % kWarpSize == 0, "a warp's lanes cover whole rows of a slice");
  // A K-contiguous operand's tiles follow each other along its columns, the other's along rows.
  using ACopy = TileCopy<ATile, T, kThreads, kAKMajor>;
  using BCopy = TileCopy<BTile, T, kThreads, kBKMajor>;
};

// Fragments of one k-step of a warp tile.
template <class C>
struct Fragments {
  unsigned a[C::kMTiles][4];
  unsigned b[C::kNTiles][2];
};

// Loads the fragments of k-step `ks` of the warp tile at (warp_m0, warp_n0) of the block tile
// from the stage at a_base / b_base. Lane roles follow the PTX fragment layouts: groupID =
// lane / 4 picks the row (A) or column (B) of the mma tile, lane % 4 the K pair (16-bit) or K
// index (TF32); for ldmatrix.x4, lanes 8q..8q+7 give the 8 row addresses of matrix q.
template <class C>
__device__ __forceinline__ void load_fragments(Fragments<C>& f, unsigned a_base, unsigned b_base, int warp_m0,
                                               int warp_n0, int ks, int lane) {
  using ATile = typename C::ATile;
  using BTile = typename C::BTile;
  const int q = lane / 8, r = lane % 8;
  const int group = lane / 4, thread_in_group = lane % 4;
  // A k-step spans two chunks of K: 16 halves, or 8 floats.
  const int k_chunk = ks * 2;

#pragma unroll
  for (int i = 0; i < C::kMTiles; ++i) {
    const int m = warp_m0 + 16 * i;
    if constexpr (C::kAKMajor) {
      // Matrices: rows 0-7 | rows 8-15 at K chunk 0, then the same at K chunk 1 = a0..a3 (both
      // for 16-bit pairs and for TF32, whose 8x4-float matrix row is one 16-byte chunk).
      ldmatrix_x4(f.a[i], a_base + ATile::chunk_offset(m + lane % 16, k_chunk + lane / 16));
    } else if constexpr (!C::kTf32) {
      // Stored [K][M]: matrix q is M half q % 2 at K half q / 2; .trans hands each lane its
      // (row, K pair) as the non-transposed load would.
      ldmatrix_x4_trans(f.a[i], a_base + ATile::chunk_offset(ks * 16 + (q / 2) * 8 + r, m / 8 + (q % 2)));
    } else {
      const int k = ks * 8 + thread_in_group;
      f.a[i][0] = load_shared_u32(a_base + ATile::element_offset(k, m + group));
      f.a[i][1] = load_shared_u32(a_base + ATile::element_offset(k, m + group + 8));
      f.a[i][2] = load_shared_u32(a_base + ATile::element_offset(k + 4, m + group));
      f.a[i][3] = load_shared_u32(a_base + ATile::element_offset(k + 4, m + group + 8));
    }
  }

#pragma unroll
  for (int j = 0; j < C::kNTiles; j += 2) {  // one x4 load covers two n tiles
    const int n = warp_n0 + 8 * j;
    unsigned v[4];
    if constexpr (C::kBKMajor) {
      // Stored [N][K]: matrices (n 0-7, K chunk 0), (n 0-7, chunk 1), (n 8-15, 0), (n 8-15, 1).
      ldmatrix_x4(v, b_base + BTile::chunk_offset(n + (q / 2) * 8 + r, k_chunk + (q % 2)));
    } else if constexpr (!C::kTf32) {
      // Stored [K][N]: matrices (K 0-7, n 0-7), (K 8-15, n 0-7), (K 0-7, n 8-15), (K 8-15, n 8-15).
      ldmatrix_x4_trans(v, b_base + BTile::chunk_offset(ks * 16 + (q % 2) * 8 + r, n / 8 + (q / 2)));
    } else {
      const int k = ks * 8 + thread_in_group;
      v[0] = load_shared_u32(b_base + BTile::element_offset(k, n + group));
      v[1] = load_shared_u32(b_base + BTile::element_offset(k + 4, n + group));
      v[2] = load_shared_u32(b_base + BTile::element_offset(k, n + 8 + group));
      v[3] = load_shared_u32(b_base + BTile::element_offset(k + 4, n + 8 + group));
    }
    f.b[j][0] = v[0];
    f.b[j][1] = v[1];
    f.b[j + 1][0] = v[2];
    f.b[j + 1][1] = v[3];
  }

  if constexpr (C::kTf32) {
#pragma unroll
    for (int i = 0; i < C::kMTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) f.a[i][e] = to_tf32(f.a[i][e]);
#pragma unroll
    for (int j = 0; j < C::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) f.b[j][e] = to_tf32(f.b[j][e]);
  }
}

// Writes the warp's accumulators: c[m][n] = act(alpha acc + beta c[m][n] + bias[n]).
// Each 16-row slice of the warp tile goes through the warp's own staging area in shared memory
// first: the mma layout (a lane holds scattered pairs) becomes row-major. Then each lane takes
// whole 16-byte chunks of a row (8 halves or 4 floats): one 128-bit store, one bias load and, for
// the head split, one address computation per chunk. Element by element, the 2-byte stores and
// the per-element head-split divisions made the epilogue cost several times the K = 128 GEMM
// behind it. Chunks that straddle the right edge, and outputs whose alignment or head width
// breaks the chunks (p.c_vector false), are stored element by element. The loop over chunks is
// not unrolled: erfcf inlined once per element of every chunk would dominate the kernel's size.
template <class C>
__device__ __forceinline__ void store_tile(const Params<typename C::T>& p, float (&acc)[C::kMTiles][C::kNTiles][4],
                                           float* staging, std::int64_t row0, std::int64_t col0, int lane) {
  using T = typename C::T;
  constexpr int kStride = C::kStagingStride;
  constexpr int kChunk = Pack<T>::kCount;
  constexpr int kChunksPerRow = C::kWarpN / kChunk;
  constexpr int kChunksPerLane = 16 * kChunksPerRow / kWarpSize;
  static_assert(C::kWarpN % kChunk == 0 && (16 * kChunksPerRow) % kWarpSize == 0, "whole chunks per lane");
  const int group = lane / 4, thread_in_group = lane % 4;
  const bool read_c = p.beta != 0.f;

#pragma unroll
  for (int i = 0; i < C::kMTiles; ++i) {
    __syncwarp();  // the previous slice's reads are done
#pragma unroll
    for (int j = 0; j < C::kNTiles; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(staging + (group + 8 * h) * kStride + 8 * j + 2 * thread_in_group) =
            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    __syncwarp();

#pragma unroll 1
    for (int e = 0; e < kChunksPerLane; ++e) {
      const int idx = lane + e * kWarpSize, r = idx / kChunksPerRow, c = (idx % kChunksPerRow) * kChunk;
      const std::int64_t row = row0 + 16 * i + r, col = col0 + c;
      if (row >= p.m) continue;
      const float* staged = staging + r * kStride + c;
      const T* c_old = read_c ? p.c + row * p.ldc + col : nullptr;
      const T* bias = p.bias ? p.bias + col : nullptr;
      if (p.c_vector && col + kChunk <= p.n) {
        store_pack(output_at(p, row, col), finish_chunk<T>(staged, c_old, bias, p.alpha, p.beta, p.epilogue));
      } else {
        for (int x = 0; x < kChunk && col + x < p.n; ++x)
          *output_at(p, row, col + x) = finish_element<T>(staged[x], c_old ? c_old + x : nullptr,
                                                          bias ? bias + x : nullptr, p.alpha, p.beta, p.epilogue);
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads) mma_sync_kernel(const Params<typename C::T> p) {
  grid_dependency_sync();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char shared[];
  const unsigned smem = shared_address(shared);

  const auto [tile_m, tile_n] = grouped_tile(static_cast<int>(blockIdx.x), kRasterGroup, p.tiles_m, p.tiles_n);
  const std::int64_t m0 = static_cast<std::int64_t>(tile_m) * C::kBM;
  const std::int64_t n0 = static_cast<std::int64_t>(tile_n) * C::kBN;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp_m0 = (warp / C::kWarpsN) * C::kWarpM;
  const int warp_n0 = (warp % C::kWarpsN) * C::kWarpN;
  const int k_tiles = static_cast<int>((p.k + C::kBK - 1) / C::kBK);
  const int stages = p.stages;

  // A is [M, K] or [K, M]; B is [N, K] or [K, N]. Tiles start at K = 0 and move along K.
  typename C::ACopy a_copy = C::kAKMajor ? typename C::ACopy(p.a, p.lda, p.m, p.k, m0, 0, p.a_vector)
                                         : typename C::ACopy(p.a, p.lda, p.k, p.m, 0, m0, p.a_vector);
  typename C::BCopy b_copy = C::kBKMajor ? typename C::BCopy(p.b, p.ldb, p.n, p.k, n0, 0, p.b_vector)
                                         : typename C::BCopy(p.b, p.ldb, p.k, p.n, 0, n0, p.b_vector);
  auto load_stage = [&](int slot) {
    const unsigned a_dst = smem + static_cast<unsigned>(slot * C::kStageBytes);
    a_copy.copy_and_advance(a_dst);
    b_copy.copy_and_advance(a_dst + C::ATile::kBytes);
  };

  float acc[C::kMTiles][C::kNTiles][4];
#pragma unroll
  for (int i = 0; i < C::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < C::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  auto stage_base = [&](int slot) { return smem + static_cast<unsigned>(slot * C::kStageBytes); };

  // Prologue: stages - 1 tiles in flight. Every step commits a group, empty or not, so the
  // number of groups, and with it every wait below, is the same in every thread and iteration.
  for (int s = 0; s < stages - 1; ++s) {
    if (s < k_tiles) load_stage(s);
    commit_async_copies();
  }
  wait_oldest_tile(stages);
  __syncthreads();

  // Fragments are double-buffered: each k-step's mma run while the next k-step's fragments load,
  // including across tiles, where the next tile's first fragments are read right after the
  // barrier that makes it visible, before this tile's last mma.
  Fragments<C> f[2];
  load_fragments<C>(f[0], stage_base(0), stage_base(0) + C::ATile::kBytes, warp_m0, warp_n0, 0, lane);
  int read_slot = 0, write_slot = stages - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int next_slot = read_slot + 1 == stages ? 0 : read_slot + 1;
#pragma unroll
    for (int ks = 0; ks < C::kKSteps; ++ks) {
      if (ks == 0) {
        // Refill the slot of tile kt - 1: every warp read its last fragments before the
        // barrier of the previous iteration.
        if (kt + stages - 1 < k_tiles) load_stage(write_slot);
        commit_async_copies();
      }
      unsigned next_base = stage_base(read_slot);
      if (ks == C::kKSteps - 1) {
        // Tile kt + 1 has landed (stages - 2 younger groups may still be in flight) and, after
        // the barrier, is visible to every warp.
        wait_oldest_tile(stages);
        __syncthreads();
        next_base = stage_base(next_slot);
      }
      if (ks + 1 < C::kKSteps || kt + 1 < k_tiles)
        load_fragments<C>(f[(ks + 1) % 2], next_base, next_base + C::ATile::kBytes, warp_m0, warp_n0,
                          (ks + 1) % C::kKSteps, lane);
#pragma unroll
      for (int i = 0; i < C::kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < C::kNTiles; ++j) Mma<typename C::T>::run(acc[i][j], f[ks % 2].a[i], f[ks % 2].b[j]);
    }
    read_slot = next_slot;
    write_slot = write_slot + 1 == stages ? 0 : write_slot + 1;
  }

  // The pipeline's buffers become the warps' staging areas: every warp is done reading them
  // (the last iteration's barrier follows its last fragment loads), and every cp.async group
  // still pending is empty.
  float* staging = reinterpret_cast<float*>(shared) + warp * C::kStagingFloats;
  store_tile<C>(p, acc, staging, m0 + warp_m0, n0 + warp_n0, lane);
#else
  // Built for an architecture without these mma shapes; the host wrapper never launches this.
  __trap();
#endif
}

// ---- host side ------------------------------------------------------------------------------

template <typename T>
constexpr const auto& tiles_for() {
  if constexpr (sizeof(T) == 4)
    return kTilesTf32;
  else
    return kTiles16;
}

template <typename T, std::size_t kTile, bool kAKMajor, bool kBKMajor>
struct TilingFor {
  static constexpr TileShape s = tiles_for<T>()[kTile];
  using type = Tiling<T, s.block_m, s.block_n, s.block_k, s.warps_m, s.warps_n, kAKMajor, kBKMajor>;
  static constexpr Layout kLayout = kAKMajor ? (kBKMajor ? Layout::nt : Layout::nn) : Layout::tn;
  static_assert(shared_bytes(s, sizeof(T), kLayout, 1) == type::kStageBytes, "the catalogue's size is the kernel's");
};

template <class C>
cudaError_t launch(const Args<typename C::T>& args, const HeadSplitOutput<typename C::T>& split, int stages,
                   cudaStream_t stream) {
  using T = typename C::T;
  const std::int64_t tiles_m = (args.m + C::kBM - 1) / C::kBM, tiles_n = (args.n + C::kBN - 1) / C::kBN;
  // grouped_tile() computes in int; this keeps tiles_m * tiles_n (and kRasterGroup * tiles_n) in range.
  if (tiles_m * tiles_n > INT_MAX / 2 || tiles_n > INT_MAX / (2 * kRasterGroup)) return cudaErrorInvalidConfiguration;
  constexpr std::int64_t kChunkElements = kChunkBytes / sizeof(T);
  Params<T> p{};
  p.a = args.a;
  p.b = args.b;
  p.bias = args.epilogue == Epilogue::none ? nullptr : args.bias;
  p.c = args.c;
  p.m = args.m;
  p.n = args.n;
  p.k = args.k;
  p.lda = args.lda();
  p.ldb = args.ldb();
  p.ldc = args.ldc();
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.epilogue = args.epilogue;
  p.tiles_m = static_cast<int>(tiles_m);
  p.tiles_n = static_cast<int>(tiles_n);
  p.stages = stages;
  p.a_vector = aligned(args.a, kChunkBytes) && p.lda % kChunkElements == 0;
  p.b_vector = aligned(args.b, kChunkBytes) && p.ldb % kChunkElements == 0;
  p.split = split;
  const bool bias_vector = !p.bias || aligned(p.bias, kChunkBytes);
  p.c_vector = bias_vector && (split.dst[0] ? aligned(split.dst[0], kChunkBytes) && aligned(split.dst[1], kChunkBytes) &&
                                                  aligned(split.dst[2], kChunkBytes) &&
                                                  split.head_dim % kChunkElements == 0
                                            : aligned(args.c, kChunkBytes) && p.ldc % kChunkElements == 0);

  const std::size_t smem = static_cast<std::size_t>(stages) * C::kStageBytes;
  auto kernel = mma_sync_kernel<C>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  // All of the unified L1/shared storage as shared memory: cp.async.cg bypasses L1, and the
  // blocks per SM that fit (two for the 4-warp 128x128 tiles) depend on it.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  kernel<<<static_cast<unsigned>(tiles_m * tiles_n), C::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, bool kAKMajor, bool kBKMajor, std::size_t... kTile>
cudaError_t launch_tile(const Args<T>& args, const HeadSplitOutput<T>& split, int tile, int stages,
                        cudaStream_t stream, std::index_sequence<kTile...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((static_cast<std::size_t>(tile) == kTile
        ? (e = launch<typename TilingFor<T, kTile, kAKMajor, kBKMajor>::type>(args, split, stages, stream))
        : e),
   ...);
  return e;
}

template <typename T, bool kAKMajor, bool kBKMajor>
cudaError_t launch_layout(const Args<T>& args, int tile, int stages, cudaStream_t stream,
                          const HeadSplitOutput<T>& split = {}) {
  return launch_tile<T, kAKMajor, kBKMajor>(args, split, tile, stages, stream,
                                            std::make_index_sequence<tiles_for<T>().size()>{});
}

cudaError_t require_sm80() {
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  return major >= 8 ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace

template <typename T>
cudaError_t mma_sync(const gemm::Args<T>& args, int tile, int stages, cudaStream_t stream) {
  if (stages < kMinStages || stages > kMaxStages || tile < 0) return cudaErrorInvalidValue;
  if (args.m < 1 || args.n < 1 || args.k < 1) return cudaErrorInvalidValue;
  if (cudaError_t e = require_sm80(); e != cudaSuccess) return e;
  switch (args.layout) {
    case Layout::nn: return launch_layout<T, true, false>(args, tile, stages, stream);
    case Layout::nt: return launch_layout<T, true, true>(args, tile, stages, stream);
    case Layout::tn: return launch_layout<T, false, false>(args, tile, stages, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t mma_sync_head_split(const gemm::Args<T>& args, const HeadSplitOutput<T>& out, int tile, int stages,
                                cudaStream_t stream) {
  if (stages < kMinStages || stages > kMaxStages || tile < 0) return cudaErrorInvalidValue;
  if (args.m < 1 || args.n < 1 || args.k < 1 || args.layout != Layout::nt || args.beta != 0.f) return cudaErrorInvalidValue;
  if (!out.dst[0] || !out.dst[1] || !out.dst[2] || out.seq < 1 || out.heads < 1 || out.head_dim < 1 ||
      args.n != 3 * std::int64_t{out.heads} * out.head_dim || args.m % out.seq != 0 || args.m > INT_MAX ||
      args.n > INT_MAX)
    return cudaErrorInvalidValue;
  if (cudaError_t e = require_sm80(); e != cudaSuccess) return e;
  return launch_layout<T, true, true>(args, tile, stages, stream, out);
}

template cudaError_t mma_sync<__half>(const gemm::Args<__half>&, int, int, cudaStream_t);
template cudaError_t mma_sync<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&, int, int, cudaStream_t);
template cudaError_t mma_sync<float>(const gemm::Args<float>&, int, int, cudaStream_t);
template cudaError_t mma_sync_head_split<__half>(const gemm::Args<__half>&, const HeadSplitOutput<__half>&, int, int,
                                                 cudaStream_t);
template cudaError_t mma_sync_head_split<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&,
                                                        const HeadSplitOutput<__nv_bfloat16>&, int, int, cudaStream_t);
template cudaError_t mma_sync_head_split<float>(const gemm::Args<float>&, const HeadSplitOutput<float>&, int, int,
                                                cudaStream_t);

}  // namespace shapetune::kernels::gemm_tensor_core
