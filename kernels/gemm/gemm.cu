// The CUDA-core GEMM ladder (kernels/gemm/gemm.cuh says what each rung changes). Every kernel guards
// every load and store, so no shape is special: tiles past an edge read zeros and write nothing.
//
// Compile time is spent deliberately: the layout is a template parameter only where it sits in
// the innermost loop (naive, smem_tiled); the block-tiled kernels take it at run time, since it
// only picks which of two tile loaders runs once per K step. Tile shapes come from the short
// curated lists in gemm.cuh; alpha, beta and the epilogue are applied at run time in the store.
#include "kernels/common/grid.cuh"
#include "kernels/gemm/gemm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <type_traits>

#include "kernels/common/async_copy.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/shared_address.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gemm/epilogue.cuh"
#include "kernels/gemm/raster.cuh"

namespace shapetune::kernels::gemm {
namespace {

using Index = std::int64_t;

constexpr Index ceil_div(Index a, Index b) { return (a + b - 1) / b; }
__host__ __device__ constexpr Index min_index(Index a, Index b) { return a < b ? a : b; }

template <typename T>
bool valid(const Args<T>& p) {
  return p.m >= 1 && p.n >= 1 && p.k >= 1 && p.a && p.b && p.c && (p.epilogue == Epilogue::none) == (p.bias == nullptr);
}

// Calls fn(std::integral_constant<Layout, L>) for the run-time layout.
template <typename Fn>
cudaError_t with_layout(Layout layout, Fn&& fn) {
  switch (layout) {
    case Layout::nn: return fn(std::integral_constant<Layout, Layout::nn>{});
    case Layout::nt: return fn(std::integral_constant<Layout, Layout::nt>{});
    case Layout::tn: return fn(std::integral_constant<Layout, Layout::tn>{});
  }
  return cudaErrorInvalidValue;
}

// ---- the store: alpha, beta, bias and activation, shared by every kernel ------------------------

template <typename T>
__device__ __forceinline__ void store_element(const Args<T>& p, Index row, Index col, float acc) {
  T* out = p.c + row * p.n + col;
  float v = p.alpha * acc;
  if (p.beta != 0.f) v = fmaf(p.beta, to_float(*out), v);  // beta == 0: C may hold NaN, never read
  if (p.epilogue != Epilogue::none) v = apply_activation<T>(p.epilogue, v + to_float(p.bias[col]));
  *out = from_float<T>(v);
}

// Four consecutive elements: 16 bytes of float, 8 of a 16-bit type.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// Outputs (row, col .. col + 3). vector_ok: C (and bias) are aligned to whole quads and n % 4 == 0,
// so a quad inside the matrix is one load/store; at the right edge, element by element.
template <typename T>
__device__ __forceinline__ void store_quad(const Args<T>& p, Index row, Index col, const float (&acc)[4],
                                           bool vector_ok) {
  if (!(vector_ok && col + 4 <= p.n)) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (col + e < p.n) store_element(p, row, col + e, acc[e]);
    return;
  }
  Quad<T>* out = reinterpret_cast<Quad<T>*>(p.c + row * p.n + col);
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = p.alpha * acc[e];
  if (p.beta != 0.f) {
    const Quad<T> old = *out;
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = fmaf(p.beta, to_float(old.v[e]), v[e]);
  }
  if (p.epilogue != Epilogue::none) {
    const Quad<T> bias = *reinterpret_cast<const Quad<T>*>(p.bias + col);
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = apply_activation<T>(p.epilogue, v[e] + to_float(bias.v[e]));
  }
  Quad<T> result;
#pragma unroll
  for (int e = 0; e < 4; ++e) result.v[e] = from_float<T>(v[e]);
  *out = result;
}

// Split-K's raw float partial sums, [m, n] per slice; vector_ok as for store_quad.
__device__ __forceinline__ void store_partial_quad(float* partials, Index n, Index row, Index col,
                                                   const float (&acc)[4], bool vector_ok) {
  float* out = partials + row * n + col;
  if (vector_ok && col + 4 <= n) {
    *reinterpret_cast<float4*>(out) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (col + e < n) out[e] = acc[e];
}

// Block b of a 1-D grid to its output tile, in groups of 8 tile rows: consecutive blocks share B's
// column tiles and a group's A rows, so both stay in L2 (a plain row-major order streams B once per
// tile row). A 1-D grid also has no 65535 limit on either extent.
struct TileOrigin {
  Index m0, n0;
};
__device__ __forceinline__ TileOrigin tile_origin(Index tiles_m, Index tiles_n, int bm, int bn) {
  const TileIndex<Index> tile = grouped_tile<Index>(blockIdx.x, 8, tiles_m, tiles_n);
  return {tile.m * bm, tile.n * bn};
}

// ---- v1: naive ---------------------------------------------------------------------------------

template <Layout L, typename T>
__device__ __forceinline__ float a_at(const Args<T>& p, Index row, Index kk) {
  return to_float(L == Layout::tn ? p.a[kk * p.m + row] : p.a[row * p.k + kk]);
}
template <Layout L, typename T>
__device__ __forceinline__ float b_at(const Args<T>& p, Index kk, Index col) {
  return to_float(L == Layout::nt ? p.b[col * p.k + kk] : p.b[kk * p.n + col]);
}

// Threads along n (B and C coalesced except B in nt); rows grid-strided, so any m fits the grid.
// Bounded for the largest block_size, so that no config fails to launch for want of registers.
template <Layout L, typename T>
__global__ void __launch_bounds__(1024) naive_kernel(Args<T> p) {
  grid_dependency_sync();
  const Index col = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  if (col >= p.n) return;
  for (Index row = blockIdx.y; row < p.m; row += gridDim.y) {
    float acc = 0.f;
    for (Index kk = 0; kk < p.k; ++kk) acc = fmaf(a_at<L>(p, row, kk), b_at<L>(p, kk, col), acc);
    store_element(p, row, col, acc);
  }
}

// ---- v2: smem_tiled ----------------------------------------------------------------------------

// Thread (x, y) computes C[m0 + y, n0 + x]. Each thread loads the element its x index makes
// contiguous in global memory, so loads coalesce in every layout; for A in tn and B in nt that
// means writing shared memory down a column (stride kTile + kPad), where kPad = 1 spreads a warp's
// stores over all 32 banks instead of one.
template <Layout L, int kTile, int kPad, typename T>
__global__ void __launch_bounds__(kTile* kTile) smem_tiled_kernel(Args<T> p) {
  grid_dependency_sync();
  __shared__ float a_tile[kTile][kTile + kPad];  // [m][k]
  __shared__ float b_tile[kTile][kTile + kPad];  // [k][n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const TileOrigin o = tile_origin(ceil_div(p.m, kTile), ceil_div(p.n, kTile), kTile, kTile);
  float acc = 0.f;
  for (Index k0 = 0; k0 < p.k; k0 += kTile) {
    if (L == Layout::tn) {  // A is [K, M]
      const Index m = o.m0 + tx, kk = k0 + ty;
      a_tile[tx][ty] = m < p.m && kk < p.k ? to_float(p.a[kk * p.m + m]) : 0.f;
    } else {
      const Index m = o.m0 + ty, kk = k0 + tx;
      a_tile[ty][tx] = m < p.m && kk < p.k ? to_float(p.a[m * p.k + kk]) : 0.f;
    }
    if (L == Layout::nt) {  // B is [N, K]
      const Index n = o.n0 + ty, kk = k0 + tx;
      b_tile[tx][ty] = n < p.n && kk < p.k ? to_float(p.b[n * p.k + kk]) : 0.f;
    } else {
      const Index kk = k0 + ty, n = o.n0 + tx;
      b_tile[ty][tx] = kk < p.k && n < p.n ? to_float(p.b[kk * p.n + n]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(a_tile[ty][kk], b_tile[kk][tx], acc);
    __syncthreads();
  }
  const Index row = o.m0 + ty, col = o.n0 + tx;
  if (row < p.m && col < p.n) store_element(p, row, col, acc);
}

// ---- v3..v6: the block-tiled kernels -------------------------------------------------------------

// Where a tile is read from: rows and cols bound what is read (a split-K slice ends its K early).
template <typename T>
struct TileSource {
  const T* data;
  Index rows, cols, ld;
  Index row0, col0;
  bool vector_ok;  // data 16-byte aligned and ld a whole number of packs
};

// A kRows x kCols tile of a row-major matrix, moved by kThreads threads as 16-byte packs: pack
// v = slot * kThreads + thread, consecutive threads along a row (coalesced). Elements outside
// [rows, cols) read as zero, so partial tiles need no other care.
template <typename T, int kRows, int kCols, int kThreads>
struct TileCopy {
  static constexpr int kPackElements = Pack<T>::kCount;
  static_assert(kCols % kPackElements == 0, "a tile row must be whole 16-byte packs");
  static constexpr int kPacksPerRow = kCols / kPackElements;
  static constexpr int kPacks = kRows * kPacksPerRow;
  static constexpr int kSlots = (kPacks + kThreads - 1) / kThreads;

  using Source = TileSource<T>;

  __device__ static bool owns(int thread, int slot) { return slot * kThreads + thread < kPacks; }
  __device__ static int row_of(int thread, int slot) { return (slot * kThreads + thread) / kPacksPerRow; }
  __device__ static int col_of(int thread, int slot) {
    return (slot * kThreads + thread) % kPacksPerRow * kPackElements;
  }

  __device__ static Pack<T> load(const Source& s, int thread, int slot) {
    const Index row = s.row0 + row_of(thread, slot), col = s.col0 + col_of(thread, slot);
    if (row < s.rows && s.vector_ok && col + kPackElements <= s.cols) return load_pack(s.data + row * s.ld + col);
    Pack<T> pack;
#pragma unroll
    for (int e = 0; e < kPackElements; ++e)
      pack.v[e] = row < s.rows && col + e < s.cols ? s.data[row * s.ld + col + e] : from_float<T>(0.f);
    return pack;
  }

#if __CUDA_ARCH__ >= 800
  // The same pack copied global -> shared by cp.async, not through registers; past the matrix's
  // edge the copy reads fewer bytes and zero-fills the rest. Unaligned matrices load as above.
  __device__ static void load_async(const Source& s, int thread, int slot, Pack<T>* staging) {
    if (!s.vector_ok) {
      *staging = load(s, thread, slot);
      return;
    }
    const Index row = s.row0 + row_of(thread, slot), col = s.col0 + col_of(thread, slot);
    const Index available = row < s.rows ? s.cols - col : 0;
    const int elements = available <= 0 ? 0 : available >= kPackElements ? kPackElements : static_cast<int>(available);
    const T* source = elements > 0 ? s.data + row * s.ld + col : s.data;  // never formed out of bounds
    copy_async_16_zfill(shared_address(staging), source, elements * static_cast<int>(sizeof(T)));
  }
#endif

  // Widened to float into shared memory: as is (smem[r][c]) or transposed (smem[c][r]).
  template <bool kTransposed, int kSmemLd>
  __device__ static void put(float* smem, const Pack<T>& pack, int thread, int slot) {
    const int r = row_of(thread, slot), c = col_of(thread, slot);
    if (kTransposed) {
#pragma unroll
      for (int e = 0; e < kPackElements; ++e) smem[(c + e) * kSmemLd + r] = to_float(pack.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < kPackElements; e += 4)
        *reinterpret_cast<float4*>(smem + r * kSmemLd + c + e) =
            make_float4(to_float(pack.v[e]), to_float(pack.v[e + 1]), to_float(pack.v[e + 2]), to_float(pack.v[e + 3]));
    }
  }
};

// One operand's kExtent x kBK tile of op(X) (kExtent along m for A, along n for B), kept in shared
// memory k-major, smem[k][mn], whichever way X is stored: the multiply then reads TM (TN)
// consecutive floats per k. k_major: X is stored [K, extent] (A in tn, B in nn and tn) and is
// copied as is; otherwise it is [extent, K] and is transposed on its way in.
template <typename T, int kExtent, int kBK, int kThreads>
struct Operand {
  using KMajor = TileCopy<T, kBK, kExtent, kThreads>;
  using ExtentMajor = TileCopy<T, kExtent, kBK, kThreads>;
  static_assert(KMajor::kSlots == ExtentMajor::kSlots && KMajor::kPacks == ExtentMajor::kPacks);
  static constexpr int kSlots = KMajor::kSlots;
  static constexpr int kSmemLd = kExtent + 4;  // float4-aligned rows; spreads the transposed stores

  const T* data;
  Index extent, ld;
  bool k_major, vector_ok;

  __device__ TileSource<T> source(Index origin, Index k0, Index k_end) const {
    if (k_major) return {data, k_end, extent, ld, k0, origin, vector_ok};
    return {data, extent, k_end, ld, origin, k0, vector_ok};
  }
  __device__ static bool owns(int thread, int slot) { return KMajor::owns(thread, slot); }
  // Row and column of a pack follow the copy's own shape, so each orientation has its own calls.
  __device__ Pack<T> load(const TileSource<T>& s, int thread, int slot) const {
    return k_major ? KMajor::load(s, thread, slot) : ExtentMajor::load(s, thread, slot);
  }
#if __CUDA_ARCH__ >= 800
  __device__ void load_async(const TileSource<T>& s, int thread, int slot, Pack<T>* staging) const {
    if (k_major)
      KMajor::load_async(s, thread, slot, staging);
    else
      ExtentMajor::load_async(s, thread, slot, staging);
  }
#endif
  __device__ void put(float* smem, const Pack<T>& pack, int thread, int slot) const {
    if (k_major)
      KMajor::template put<false, kSmemLd>(smem, pack, thread, slot);
    else
      ExtentMajor::template put<true, kSmemLd>(smem, pack, thread, slot);
  }
};

// Which outputs a thread owns: TM/4 groups of 4 rows at m_offset + g * kMStride, likewise for
// columns. Contiguous (register_blocked): groups are adjacent. Warp-tiled: a warp covers a
// contiguous warp tile, its lanes' 4-wide pieces side by side, so a warp's float4 reads of a
// shared row are contiguous.
template <int kTileIndex, bool kWarpTile>
struct ThreadMap {
  static constexpr BlockTile kShape = kWarpTile ? kWarpTiles[kTileIndex] : kBlockTiles[kTileIndex];
  static constexpr int BM = kShape.bm, BN = kShape.bn, BK = kShape.bk, TM = kShape.tm, TN = kShape.tn;
  static constexpr int kThreads = kShape.threads();
  static constexpr int kMinBlocks = kShape.min_blocks;
  static constexpr bool kRegisterStaged = kShape.register_staged;
  static constexpr bool kWarpTiled = kShape.warps_m > 0;
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0);

  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpsM = kWarpTiled ? kShape.warps_m : 1, kWarpsN = kWarps / kWarpsM;
  static constexpr int kLanesM = kWarpTiled ? kShape.lanes_m : 1, kLanesN = 32 / kLanesM;
  static_assert(!kWarpTiled || (kThreads % 32 == 0 && kWarps % kWarpsM == 0 && 32 % kLanesM == 0 &&
                                BM == kWarpsM * TM * kLanesM && BN == kWarpsN * TN * kLanesN),
                "a warp tile must be exactly its lanes' pieces");

  static constexpr int kMStride = kWarpTiled ? 4 * kLanesM : 4;
  static constexpr int kNStride = kWarpTiled ? 4 * kLanesN : 4;

  __device__ static int m_offset(int thread) {
    if (!kWarpTiled) return thread / (BN / TN) * TM;
    const int warp = thread / 32, lane = thread % 32;
    return warp / kWarpsN * (BM / kWarpsM) + lane / kLanesN * 4;
  }
  __device__ static int n_offset(int thread) {
    if (!kWarpTiled) return thread % (BN / TN) * TN;
    const int warp = thread / 32, lane = thread % 32;
    return warp % kWarpsN * (BN / kWarpsN) + lane % kLanesN * 4;
  }
};

struct Flags {
  bool a_vector, b_vector;  // 16-byte packs from A, B
  bool out_vector;          // whole quads to C (or to the partial sums)
};

template <typename Map>
__device__ __forceinline__ void multiply_tile(const float* a_tile, const float* b_tile, float (&acc)[Map::TM][Map::TN],
                                              int m_offset, int n_offset) {
  constexpr int kALd = Map::BM + 4, kBLd = Map::BN + 4;
#pragma unroll
  for (int kk = 0; kk < Map::BK; ++kk) {
    float a[Map::TM], b[Map::TN];
#pragma unroll
    for (int g = 0; g < Map::TM / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(a_tile + kk * kALd + m_offset + g * Map::kMStride);
      a[4 * g] = v.x, a[4 * g + 1] = v.y, a[4 * g + 2] = v.z, a[4 * g + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < Map::TN / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(b_tile + kk * kBLd + n_offset + g * Map::kNStride);
      b[4 * g] = v.x, b[4 * g + 1] = v.y, b[4 * g + 2] = v.z, b[4 * g + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < Map::TM; ++i)
#pragma unroll
      for (int j = 0; j < Map::TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// One block: output tile tile_origin(blockIdx.x), K slice blockIdx.y of k_per_split elements (the
// whole of K without split-K). partials == nullptr: the result goes through the epilogue into C;
// else the raw sums go to slice blockIdx.y of the split-K partials.
template <typename T, typename Map, bool kDoubleBuffered>
__global__ void __launch_bounds__(Map::kThreads, Map::kMinBlocks)
    block_tiled_kernel(Args<T> p, Flags flags, float* partials, Index k_per_split) {
  grid_dependency_sync();
  using AOperand = Operand<T, Map::BM, Map::BK, Map::kThreads>;
  using BOperand = Operand<T, Map::BN, Map::BK, Map::kThreads>;
  constexpr int kStages = kDoubleBuffered ? 2 : 1;
  constexpr int kAStage = Map::BK * AOperand::kSmemLd, kBStage = Map::BK * BOperand::kSmemLd;
  __shared__ __align__(16) float a_tiles[kStages * kAStage];
  __shared__ __align__(16) float b_tiles[kStages * kBStage];

  const int thread = threadIdx.x;
  const TileOrigin o = tile_origin(ceil_div(p.m, Map::BM), ceil_div(p.n, Map::BN), Map::BM, Map::BN);
  const Index k_begin = blockIdx.y * k_per_split;
  const Index k_end = min_index(p.k, k_begin + k_per_split);
  const int k_steps = k_begin < k_end ? static_cast<int>(ceil_div(k_end - k_begin, Map::BK)) : 0;

  const AOperand a{p.a, p.m, p.layout == Layout::tn ? p.m : p.k, p.layout == Layout::tn, flags.a_vector};
  const BOperand b{p.b, p.n, p.layout == Layout::nt ? p.k : p.n, p.layout != Layout::nt, flags.b_vector};
  const int m_offset = Map::m_offset(thread), n_offset = Map::n_offset(thread);
  float acc[Map::TM][Map::TN] = {};

  // Loads of a K step are all issued before the first is stored, so they are in flight together.
  auto fetch = [&](int step, Pack<T>(&a_packs)[AOperand::kSlots], Pack<T>(&b_packs)[BOperand::kSlots]) {
    const Index k0 = k_begin + static_cast<Index>(step) * Map::BK;
    const auto a_source = a.source(o.m0, k0, k_end);
    const auto b_source = b.source(o.n0, k0, k_end);
#pragma unroll
    for (int s = 0; s < AOperand::kSlots; ++s)
      if (a.owns(thread, s)) a_packs[s] = a.load(a_source, thread, s);
#pragma unroll
    for (int s = 0; s < BOperand::kSlots; ++s)
      if (b.owns(thread, s)) b_packs[s] = b.load(b_source, thread, s);
  };
  auto put = [&](int stage, const Pack<T>(&a_packs)[AOperand::kSlots], const Pack<T>(&b_packs)[BOperand::kSlots]) {
#pragma unroll
    for (int s = 0; s < AOperand::kSlots; ++s)
      if (a.owns(thread, s)) a.put(a_tiles + stage * kAStage, a_packs[s], thread, s);
#pragma unroll
    for (int s = 0; s < BOperand::kSlots; ++s)
      if (b.owns(thread, s)) b.put(b_tiles + stage * kBStage, b_packs[s], thread, s);
  };

  if constexpr (!kDoubleBuffered) {
    for (int step = 0; step < k_steps; ++step) {
      Pack<T> a_packs[AOperand::kSlots], b_packs[BOperand::kSlots];
      fetch(step, a_packs, b_packs);
      put(0, a_packs, b_packs);
      __syncthreads();
      multiply_tile<Map>(a_tiles, b_tiles, acc, m_offset, n_offset);
      __syncthreads();  // everyone is done reading before the next step overwrites
    }
  } else {
    // Step s is multiplied from stage s % 2 while step s + 1 is on its way; it is stored into the
    // other stage only after the multiply, and the one barrier per step then both publishes it and
    // retires the stage read in this step.
#if __CUDA_ARCH__ >= 800
    constexpr bool kCpAsyncArch = true;
#else
    constexpr bool kCpAsyncArch = false;
#endif
    constexpr bool kAsync = kCpAsyncArch && !Map::kRegisterStaged;
    if constexpr (kAsync) {
#if __CUDA_ARCH__ >= 800
      // The next step waits in shared staging (cp.async), each thread reading back only the packs it
      // copied itself: cp.async.wait_all makes them visible to it without a barrier.
      __shared__ Pack<T> a_staging[AOperand::kSlots][Map::kThreads];
      __shared__ Pack<T> b_staging[BOperand::kSlots][Map::kThreads];
      auto fetch_async = [&](int step) {
        const Index k0 = k_begin + static_cast<Index>(step) * Map::BK;
        const auto a_source = a.source(o.m0, k0, k_end);
        const auto b_source = b.source(o.n0, k0, k_end);
#pragma unroll
        for (int s = 0; s < AOperand::kSlots; ++s)
          if (a.owns(thread, s)) a.load_async(a_source, thread, s, &a_staging[s][thread]);
#pragma unroll
        for (int s = 0; s < BOperand::kSlots; ++s)
          if (b.owns(thread, s)) b.load_async(b_source, thread, s, &b_staging[s][thread]);
        commit_async_copies();
      };
      auto put_staged = [&](int stage) {
        wait_all_async_copies();
#pragma unroll
        for (int s = 0; s < AOperand::kSlots; ++s)
          if (a.owns(thread, s)) a.put(a_tiles + stage * kAStage, a_staging[s][thread], thread, s);
#pragma unroll
        for (int s = 0; s < BOperand::kSlots; ++s)
          if (b.owns(thread, s)) b.put(b_tiles + stage * kBStage, b_staging[s][thread], thread, s);
      };
      if (k_steps > 0) {
        fetch_async(0);
        put_staged(0);
      }
      __syncthreads();
      for (int step = 0; step < k_steps; ++step) {
        const bool more = step + 1 < k_steps;
        if (more) fetch_async(step + 1);
        multiply_tile<Map>(a_tiles + (step % 2) * kAStage, b_tiles + (step % 2) * kBStage, acc, m_offset, n_offset);
        if (more) put_staged((step + 1) % 2);
        __syncthreads();
      }
#endif
    } else {
      // sm_75, and register_staged tiles everywhere: the next step waits in registers.
      Pack<T> a_packs[AOperand::kSlots], b_packs[BOperand::kSlots];
      if (k_steps > 0) {
        fetch(0, a_packs, b_packs);
        put(0, a_packs, b_packs);
      }
      __syncthreads();
      for (int step = 0; step < k_steps; ++step) {
        const bool more = step + 1 < k_steps;
        if (more) fetch(step + 1, a_packs, b_packs);
        multiply_tile<Map>(a_tiles + (step % 2) * kAStage, b_tiles + (step % 2) * kBStage, acc, m_offset, n_offset);
        if (more) put((step + 1) % 2, a_packs, b_packs);
        __syncthreads();
      }
    }
  }

  float* slice = partials ? partials + blockIdx.y * p.m * p.n : nullptr;
#pragma unroll
  for (int i = 0; i < Map::TM; ++i) {
    const Index row = o.m0 + m_offset + i / 4 * Map::kMStride + i % 4;
    if (row >= p.m) continue;
#pragma unroll
    for (int g = 0; g < Map::TN / 4; ++g) {
      const Index col = o.n0 + n_offset + g * Map::kNStride;
      const float quad[4] = {acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]};
      if (slice)
        store_partial_quad(slice, p.n, row, col, quad, flags.out_vector);
      else
        store_quad(p, row, col, quad, flags.out_vector);
    }
  }
}

// Adds the slices in order and finishes each output as the other kernels' store does.
template <typename T>
__global__ void split_k_reduce_kernel(Args<T> p, const float* partials, int splits) {
  grid_dependency_sync();
  const Index total = p.m * p.n;
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += partials[s * total + i];
    store_element(p, i / p.n, i % p.n, sum);
  }
}

// The second half of an unfused chain (a library GEMM's fp32 product, then this pass): four
// consecutive outputs of a row a thread, finished as every kernel's store finishes them. `acc` may
// be C itself when T is float (each quad read, then written, by one thread).
template <typename T>
__global__ void finish_product_kernel(Args<T> p, const float* acc, bool vector_ok) {
  grid_dependency_sync();
  const Index quads_per_row = ceil_div(p.n, 4);
  const Index total = p.m * quads_per_row;
  for (Index q = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; q < total;
       q += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index row = q / quads_per_row, col = (q - row * quads_per_row) * 4;
    const float* in = acc + row * p.n + col;
    float quad[4];
    if (vector_ok) {
      const float4 v = *reinterpret_cast<const float4*>(in);
      quad[0] = v.x, quad[1] = v.y, quad[2] = v.z, quad[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) quad[e] = col + e < p.n ? in[e] : 0.f;
    }
    store_quad(p, row, col, quad, vector_ok);
  }
}

// ---- v7: warp_tiled_broadcast ------------------------------------------------------------------
//
// Why v5's large tile (35.8 TFLOP/s at 4096^3 f32 on an H200, 55% of the FMA peak) stops there:
// an SM returns shared memory at 128 bytes per clock, one 4-byte register per lane, so a warp's
// LDS.128 takes 4 clocks unless lane pairs (n, n^1) or (n, n^2) read the same address, when it
// takes 2. v5's lanes (lane / 8 along m, lane % 8 along n) pair A's reads but not B's: 12 clocks
// of shared memory per warp per k for 64 FFMA (16 clocks of one scheduler), so with 16 warps on 4
// schedulers the reads alone use 75% of the shared-memory pipe at full FMA rate, plus the tile
// stores. Here lane bit 0 picks the row and bit 1 the column: lanes n and n^2 share an A float4,
// n and n^1 a B float4, every read takes 2 clocks, 8 per warp per k: 50% of the pipe.
//
// The prediction per tile, the ptxas report and what the H200 measured (tile 0 at ~80% of cuBLAS,
// its barrier waiting on the step's slowest load) are in reports/h200/2026-12-01-gemm.

// The warp-tiled thread map of v5 with paired lanes: a lane's bit 0 is bit 0 of its row group,
// bits 1 .. log2(lanes_n) its column group, the bits above the rest of its row group. Rows and
// columns a thread owns, and the shape of its pieces, are otherwise as in ThreadMap.
// The async ladder's instantiations read fewer of the map's constants than the broadcast one's;
// nvcc warns (#177) per instantiation in an anonymous namespace and ignores [[maybe_unused]].
#pragma nv_diag_suppress 177
template <int kTileIndex, const BlockTile* kTiles = kBroadcastTiles>
struct PairedLaneMap {
  static constexpr BlockTile kShape = kTiles[kTileIndex];
  static constexpr int BM = kShape.bm, BN = kShape.bn, BK = kShape.bk, TM = kShape.tm, TN = kShape.tn;
  static constexpr int kThreads = kShape.threads();
  static constexpr int kMinBlocks = kShape.min_blocks;
  static constexpr int kAsyncStages = kShape.async_stages;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpsM = kShape.warps_m, kWarpsN = kWarps / kWarpsM;
  static constexpr int kLanesM = kShape.lanes_m, kLanesN = 32 / kLanesM;
  static constexpr int kLanesNBits = kLanesN == 2 ? 1 : kLanesN == 4 ? 2 : kLanesN == 8 ? 3 : 4;
  static_assert(kThreads % 32 == 0 && kWarps % kWarpsM == 0 && kLanesM >= 2 && kLanesN >= 2 &&
                    (1 << kLanesNBits) == kLanesN && TM % 4 == 0 && TN % 4 == 0 &&
                    BM == kWarpsM * TM * kLanesM && BN == kWarpsN * TN * kLanesN,
                "a warp tile must be exactly its paired lanes' pieces");
  static_assert(kAsyncStages == 0 || kAsyncStages >= 2, "a cp.async ring needs a stage to fill and one to read");
  static constexpr int kMStride = 4 * kLanesM, kNStride = 4 * kLanesN;

  __device__ static int m_offset(int thread) {
    const int warp = thread / 32, lane = thread % 32;
    const int lane_m = (lane & 1) | ((lane >> (1 + kLanesNBits)) << 1);
    return warp / kWarpsN * (BM / kWarpsM) + lane_m * 4;
  }
  __device__ static int n_offset(int thread) {
    const int warp = thread / 32, lane = thread % 32;
    return warp % kWarpsN * (BN / kWarpsN) + ((lane >> 1) & (kLanesN - 1)) * 4;
  }
};
#pragma nv_diag_default 177

// A paired-lane thread's TM x TN outputs (4 x 4 pieces kMStride rows and kNStride columns apart)
// through store_quad.
// row_swap: accumulator row i of a piece holds the piece's row (i % 4) ^ row_swap (0..3; see
// warp_tiled_async's RowSlotReader).
template <typename Map, typename T>
__device__ __forceinline__ void store_lane_pieces(const Args<T>& p, TileOrigin o, int m_offset, int n_offset,
                                                  const float (&acc)[Map::TM][Map::TN], bool out_vector,
                                                  int row_swap = 0) {
#pragma unroll
  for (int i = 0; i < Map::TM; ++i) {
    const Index row = o.m0 + m_offset + i / 4 * Map::kMStride + ((i % 4) ^ row_swap);
    if (row >= p.m) continue;
#pragma unroll
    for (int g = 0; g < Map::TN / 4; ++g) {
      const float quad[4] = {acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]};
      store_quad(p, row, o.n0 + n_offset + g * Map::kNStride, quad, out_vector);
    }
  }
}

// An Operand whose packs walk K: each owned pack's element offset is computed once and moved by a
// fixed stride per K step. A pack wholly inside the extent, of a 16-byte-loadable operand, in a
// full K step is one unguarded load; any other (block edges, the K tail, unaligned operands) goes
// through the Operand's guarded load.
template <typename T, int kExtent, int kBK, int kThreads>
struct StreamedOperand {
  using Tile = Operand<T, kExtent, kBK, kThreads>;
  static constexpr int kSlots = Tile::kSlots;
  static constexpr int kPackElements = Pack<T>::kCount;

  Tile tile;
  Index origin;           // the block's first row (A) or column (B) of op(X)
  Index step_stride;      // elements from one K step's pack to the next's
  Index offset[kSlots];   // element offset of each owned pack in the next K step to load
  bool interior[kSlots];  // inside the extent and 16-byte loadable

  __device__ StreamedOperand(const Tile& t, Index block_origin, int thread)
      : tile(t), origin(block_origin), step_stride(t.k_major ? kBK * t.ld : kBK) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (tile.k_major) {  // pack (k row, extent column)
        const int k_row = Tile::KMajor::row_of(thread, s), column = Tile::KMajor::col_of(thread, s);
        offset[s] = k_row * tile.ld + origin + column;
        interior[s] = tile.vector_ok && origin + column + kPackElements <= tile.extent;
      } else {  // pack (extent row, k column)
        const int row = Tile::ExtentMajor::row_of(thread, s), k_column = Tile::ExtentMajor::col_of(thread, s);
        offset[s] = (origin + row) * tile.ld + k_column;
        interior[s] = tile.vector_ok && origin + row < tile.extent;
      }
    }
  }

  // The owned packs of K step [k0, k0 + kBK), then on to the next step.
  __device__ void load(Pack<T> (&packs)[kSlots], bool full_step, Index k0, Index k_end, int thread) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (!Tile::owns(thread, s)) continue;
      if (full_step && interior[s])
        packs[s] = load_pack(tile.data + offset[s]);
      else
        packs[s] = tile.load(tile.source(origin, k0, k_end), thread, s);
      offset[s] += step_stride;
    }
  }
  __device__ void put(float* smem, const Pack<T> (&packs)[kSlots], int thread) const {
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
      if (Tile::owns(thread, s)) tile.put(smem, packs[s], thread, s);
  }

};

// One K step's FMAs, with k + 1's fragments read from shared memory before k's FMAs are issued
// (two register sets), so each k's reads are in flight under the previous k's 64 or 128 FFMA.
// a_tile and b_tile already point at the thread's first row and column.
template <typename Map>
__device__ __forceinline__ void multiply_prefetched(const float* a_tile, const float* b_tile,
                                                    float (&acc)[Map::TM][Map::TN]) {
  constexpr int kALd = Map::BM + 4, kBLd = Map::BN + 4;
  float a[2][Map::TM], b[2][Map::TN];
  auto read = [&](int kk, float(&a_frag)[Map::TM], float(&b_frag)[Map::TN]) {
#pragma unroll
    for (int g = 0; g < Map::TM / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(a_tile + kk * kALd + g * Map::kMStride);
      a_frag[4 * g] = v.x, a_frag[4 * g + 1] = v.y, a_frag[4 * g + 2] = v.z, a_frag[4 * g + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < Map::TN / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(b_tile + kk * kBLd + g * Map::kNStride);
      b_frag[4 * g] = v.x, b_frag[4 * g + 1] = v.y, b_frag[4 * g + 2] = v.z, b_frag[4 * g + 3] = v.w;
    }
  };
  read(0, a[0], b[0]);
#pragma unroll
  for (int kk = 0; kk < Map::BK; ++kk) {
    if (kk + 1 < Map::BK) read(kk + 1, a[(kk + 1) % 2], b[(kk + 1) % 2]);
#pragma unroll
    for (int i = 0; i < Map::TM; ++i)
#pragma unroll
      for (int j = 0; j < Map::TN; ++j) acc[i][j] = fmaf(a[kk % 2][i], b[kk % 2][j], acc[i][j]);
  }
}

// v5's loop (two shared stages, the next step waiting in registers, one barrier per step) over
// the paired map and the walking loads; the store is v3's.
template <typename T, int kTileIndex>
__global__ void __launch_bounds__(PairedLaneMap<kTileIndex>::kThreads, PairedLaneMap<kTileIndex>::kMinBlocks)
    warp_tiled_broadcast_kernel(Args<T> p, Flags flags) {
  grid_dependency_sync();
  using Map = PairedLaneMap<kTileIndex>;
  using AOperand = StreamedOperand<T, Map::BM, Map::BK, Map::kThreads>;
  using BOperand = StreamedOperand<T, Map::BN, Map::BK, Map::kThreads>;
  constexpr int kAStage = Map::BK * AOperand::Tile::kSmemLd, kBStage = Map::BK * BOperand::Tile::kSmemLd;
  __shared__ __align__(16) float a_tiles[2 * kAStage];
  __shared__ __align__(16) float b_tiles[2 * kBStage];

  const int thread = threadIdx.x;
  const TileOrigin o = tile_origin(ceil_div(p.m, Map::BM), ceil_div(p.n, Map::BN), Map::BM, Map::BN);
  const int k_steps = static_cast<int>(ceil_div(p.k, Map::BK));
  const int full_steps = static_cast<int>(p.k / Map::BK);

  AOperand a({p.a, p.m, p.layout == Layout::tn ? p.m : p.k, p.layout == Layout::tn, flags.a_vector}, o.m0, thread);
  BOperand b({p.b, p.n, p.layout == Layout::nt ? p.k : p.n, p.layout != Layout::nt, flags.b_vector}, o.n0, thread);
  const int m_offset = Map::m_offset(thread), n_offset = Map::n_offset(thread);
  float acc[Map::TM][Map::TN] = {};

  Pack<T> a_packs[AOperand::kSlots], b_packs[BOperand::kSlots];
  auto fetch = [&](int step) {
    const Index k0 = static_cast<Index>(step) * Map::BK;
    a.load(a_packs, step < full_steps, k0, p.k, thread);
    b.load(b_packs, step < full_steps, k0, p.k, thread);
  };
  auto put = [&](int stage) {
    a.put(a_tiles + stage * kAStage, a_packs, thread);
    b.put(b_tiles + stage * kBStage, b_packs, thread);
  };

  fetch(0);
  put(0);
  __syncthreads();
  for (int step = 0; step < k_steps; ++step) {
    const bool more = step + 1 < k_steps;
    if (more) fetch(step + 1);
    const int stage = step % 2;
    multiply_prefetched<Map>(a_tiles + stage * kAStage + m_offset, b_tiles + stage * kBStage + n_offset, acc);
    if (more) put(1 - stage);
    __syncthreads();
  }

  store_lane_pieces<Map>(p, o, m_offset, n_offset, acc, flags.out_vector);
}

// ---- v8: warp_tiled_async ----------------------------------------------------------------------
//
// v7's next K step waits in registers (a load, then a store to shared memory after the
// multiply), so a block's barrier waits for the slowest of its loads, and every element of a
// K-contiguous A passes through 4-byte transposing stores. Here nothing is transposed: each
// operand is copied global -> shared in 16-byte cp.async chunks as it lies in memory, into a ring
// of stages, stages - 1 K steps ahead. An operand contiguous along its extent (B in nn and tn, A
// in tn) is stored [bk][extent], as v7 reads it. An operand contiguous along K (A in nn and nt, B
// in nt) is stored [extent][8]: a thread reads k .. k + 3 of one of its rows as one float4, so a
// row's four K values cost one LDS.128. Unswizzled, the 4 rows a warp reads at once (its lanes'
// row groups, 4 rows apart) would share one 32-byte bank group; the 16-byte chunk c of row e
// sits instead at ((e & 3) ^ (e / 4 & 3), c) of its 128-byte line: the 4 rows fall in 4 groups
// (with 8 row groups, as B in nt, two share one: a 2-way conflict).
//
// Blocks whose tiles lie inside both operands at every K step take a loop of branch-free copies
// to shared addresses computed once, issued after the step's first FMAs so they interleave (the
// edge checks per chunk had run as one dependent integer chain), and a K-contiguous A is read
// slot by slot from one base register (RowSlotReader). The predictions, the Nsight Compute
// comparisons with cuBLAS's kernel and each step's times are in reports/h200/
// (2026-12-01-sgemm-async-at-aa15839, 2026-12-01-sgemm-interior-copies).

// One operand of warp_tiled_async, as it lies in global memory: [outer][inner] with leading
// dimension ld, inner contiguous. kKContig: inner is K (the stage is swizzled [extent][8]); else
// inner is the extent (the stage is [8][extent]). Each thread owns kChunks 16-byte chunks of a
// stage, their element offsets walking one K step at a time.
template <int kExtent, int kThreads, bool kKContig>
struct AsyncOperand {
  static constexpr int kBK = 8;
  static constexpr int kStageFloats = kExtent * kBK;
  static constexpr int kChunks = kStageFloats / 4 / kThreads;
  static_assert(kChunks >= 1 && kStageFloats / 4 % kThreads == 0, "every thread copies whole chunks");

  // 32-bit (the catalogue keeps m, n and k under 2^31): fewer registers live through the loop.
  const float* data;
  int ld, outer_limit, inner_limit;
  int origin;  // the block's first row (A) or column (B) of op(X)
  bool vector_ok;
  Index offset[kChunks];  // element offset of each chunk in the next K step to copy
  bool interior[kChunks];

  // The chunk's place in the stage: (extent index, k) of its first element.
  __device__ static int extent_of(int chunk) { return kKContig ? chunk / 2 : chunk % (kExtent / 4) * 4; }
  __device__ static int k_of(int chunk) { return kKContig ? chunk % 2 * 4 : chunk / (kExtent / 4); }
  __device__ static int smem_offset(int chunk) {
    return kKContig ? swizzled_chunk(chunk / 2, chunk % 2) : k_of(chunk) * kExtent + extent_of(chunk);
  }

  __device__ AsyncOperand(const float* data_, int ld_, int outer_limit_, int inner_limit_, int origin_,
                          bool vector_ok_, int thread)
      : data(data_), ld(ld_), outer_limit(outer_limit_), inner_limit(inner_limit_), origin(origin_),
        vector_ok(vector_ok_) {
#pragma unroll
    for (int s = 0; s < kChunks; ++s) {
      const int chunk = thread + s * kThreads;
      const Index e = origin + extent_of(chunk), k = k_of(chunk);
      offset[s] = kKContig ? e * ld + k : k * ld + e;  // 64-bit: m x k may pass 2^31
      interior[s] = vector_ok && (kKContig ? e < outer_limit : e < inner_limit - 3);
    }
  }

  // Copies this thread's chunks of K step [k0, k0 + 8) into stage, then on to the next step.
  __device__ void copy(float* stage, bool full_step, Index k0, int thread) {
#if __CUDA_ARCH__ >= 800
#pragma unroll
    for (int s = 0; s < kChunks; ++s) {
      const int chunk = thread + s * kThreads;
      float* destination = stage + smem_offset(chunk);
      if (full_step && interior[s]) {
        copy_async_16_zfill(destination, data + offset[s], 16);
      } else {
        const int e = origin + extent_of(chunk), k = static_cast<int>(k0) + k_of(chunk);
        const int outer = kKContig ? e : k, inner = kKContig ? k : e;
        const int left = outer < outer_limit ? inner_limit - inner : 0;
        const int valid = left <= 0 ? 0 : left >= 4 ? 4 : left;
        if (vector_ok) {
          copy_async_16_zfill(destination, valid > 0 ? data + offset[s] : data, 4 * valid);
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            copy_async_4_zfill(destination + i, i < valid ? data + offset[s] + i : data, i < valid);
        }
      }
      offset[s] += kKContig ? kBK : kBK * ld;
    }
#endif
  }

  // copy() for a block whose tiles lie wholly inside the operand in every K step (interior_tile
  // below): one 16-byte copy per chunk and no branch, so the scheduler can interleave the copies
  // with the FMAs and shared loads around them. stage: the stage's shared-window byte address.
  // live false (a step past the last): the copies read nothing and zero-fill a stage no step reads.
  __device__ void copy_interior(unsigned stage, bool live, int thread) {
#if __CUDA_ARCH__ >= 800
#pragma unroll
    for (int s = 0; s < kChunks; ++s) {
      const unsigned destination = stage + 4u * static_cast<unsigned>(smem_offset(thread + s * kThreads));
      copy_async_16_zfill(destination, live ? data + offset[s] : data, live ? 16 : 0);
      offset[s] += kKContig ? kBK : kBK * ld;
    }
#endif
  }
};

// kRun (4 or 2) consecutive floats of a K-contiguous stage row, as one 16- or 8-byte shared read.
template <int kRun>
__device__ __forceinline__ void read_run(const float* p, float (&out)[kRun]) {
  if constexpr (kRun == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    const float2 v = *reinterpret_cast<const float2*>(p);
    out[0] = v.x, out[1] = v.y;
  }
}

// A thread's fragments of one operand from a stage. K-contiguous: its rows' k .. k + kRun - 1 at
// once (row group j = i % 4 at row_base[j], the i / 4-th piece kStride rows on); else the k-th
// row of the [8][extent] stage, float4 by float4.
template <int kExtent, int kCount, int kStride, bool kKContig, int kRun>
struct FragmentReader {
  int base[kKContig ? 4 : 1];

  __device__ explicit FragmentReader(int first) {
    if constexpr (kKContig) {
      static_assert(kStride % 16 == 0, "a piece kStride rows on keeps its rows' swizzle");
#pragma unroll
      for (int j = 0; j < 4; ++j) base[j] = swizzled_chunk(first + j, 0);
    } else {
      base[0] = first;
    }
  }
  // K-contiguous: out[i][r] = element (row i, k0 + r); k0 a multiple of kRun.
  __device__ void run(const float* stage, int k0, float (&out)[kCount][kRun]) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      // Chunk 1 of a row is 4 floats after chunk 0 (the swizzle leaves bit 0 of the chunk alone).
      read_run(stage + base[i % 4] + i / 4 * kStride * 8 + k0, out[i]);
    }
  }
  // Extent-contiguous: out[i] = element (row k, piece i).
  __device__ void row(const float* stage, int k, float (&out)[kCount]) const {
#pragma unroll
    for (int g = 0; g < kCount / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(stage + k * kExtent + base[0] + g * kStride);
      out[4 * g] = v.x, out[4 * g + 1] = v.y, out[4 * g + 2] = v.z, out[4 * g + 3] = v.w;
    }
  }
};

// FragmentReader's K-contiguous reads with the swizzle left in place: a thread's four row groups
// (rows first .. first + 3 of each piece, first a multiple of 4) fill the four 32-byte slots of
// their 128-byte line, row first + j in slot j ^ swap (swap = first / 4 % 4). Reading slot j
// as row j, every address is one base register plus a constant, where FragmentReader keeps four
// bases (and the compiler, short of registers at 255, recomputed them every K step). The rows
// come out permuted within each group of 4: accumulator row j holds row j ^ swap, which the
// store puts back (store_lane_pieces' row_swap).
template <int kCount, int kStride, int kRun>
struct RowSlotReader {
  static_assert(kStride % 16 == 0, "a piece kStride rows on keeps its rows' swizzle");
  int base;
  int swap;

  __device__ explicit RowSlotReader(int first) : base(first / 4 * 32), swap(first / 4 % 4) {}
  // out[i][r] = element (row (i / 4) * kStride + (i % 4 ^ swap) past first, k0 + r).
  __device__ void run(const float* stage, int k0, float (&out)[kCount][kRun]) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) read_run(stage + base + i / 4 * kStride * 8 + i % 4 * 8 + k0, out[i]);
  }
};

template <int kTileIndex, bool kAKContig, bool kBKContig>
__global__ void __launch_bounds__(PairedLaneMap<kTileIndex, kAsyncTiles>::kThreads,
                                  PairedLaneMap<kTileIndex, kAsyncTiles>::kMinBlocks)
    warp_tiled_async_kernel(Args<float> p, Flags flags) {
  grid_dependency_sync();
#if __CUDA_ARCH__ >= 800
  using Map = PairedLaneMap<kTileIndex, kAsyncTiles>;
  static_assert(Map::BK == 8, "the swizzle is of 8-float rows");
  constexpr int kStages = Map::kAsyncStages;
  using AOperand = AsyncOperand<Map::BM, Map::kThreads, kAKContig>;
  using BOperand = AsyncOperand<Map::BN, Map::kThreads, kBKContig>;
  // Both operands K-contiguous (nt): two k at a time, so both runs fit the registers.
  constexpr int kRun = kAKContig && kBKContig ? 2 : Map::kShape.k_run;
  static_assert(kRun == 2 || kRun == 4, "a run is one 8- or 16-byte read");
  // Static, so every shared address is a constant offset (the same tile in dynamic shared memory
  // measured 3% slower on the H200); hence at most 48 KB.
  static_assert(async_tile_shared_bytes(Map::kShape) <= 48 * 1024, "a static shared array holds at most 48 KB");
  __shared__ __align__(16) float a_stages[kStages * AOperand::kStageFloats];
  __shared__ __align__(16) float b_stages[kStages * BOperand::kStageFloats];

  const int thread = threadIdx.x;
  const TileOrigin o = tile_origin(ceil_div(p.m, Map::BM), ceil_div(p.n, Map::BN), Map::BM, Map::BN);
  const int k_steps = static_cast<int>(ceil_div(p.k, Map::BK));
  const int full_steps = static_cast<int>(p.k / Map::BK);
  // nn, nt: A is [M, K]; tn: A is [K, M]. nn, tn: B is [K, N]; nt: B is [N, K].
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  AOperand a(p.a, kAKContig ? k : m, kAKContig ? m : k, kAKContig ? k : m, static_cast<int>(o.m0), flags.a_vector,
             thread);
  BOperand b(p.b, kBKContig ? k : n, kBKContig ? n : k, kBKContig ? k : n, static_cast<int>(o.n0), flags.b_vector,
             thread);
  const int m_offset = Map::m_offset(thread), n_offset = Map::n_offset(thread);
  // A K-contiguous A is read slot by slot (rows permuted within groups of 4, undone at the store).
  using AReader = std::conditional_t<kAKContig, RowSlotReader<Map::TM, Map::kMStride, kRun>,
                                     FragmentReader<Map::BM, Map::TM, Map::kMStride, false, kRun>>;
  const AReader a_reader(m_offset);
  const FragmentReader<Map::BN, Map::TN, Map::kNStride, kBKContig, kRun> b_reader(n_offset);
  float acc[Map::TM][Map::TN] = {};
  const unsigned a_shared = static_cast<unsigned>(__cvta_generic_to_shared(a_stages));
  const unsigned b_shared = static_cast<unsigned>(__cvta_generic_to_shared(b_stages));
  // Every chunk of every K step inside both operands: the copies need no checks.
  const bool interior_tile = flags.a_vector && flags.b_vector && k % Map::BK == 0 &&
                             static_cast<int>(o.m0) + Map::BM <= m && static_cast<int>(o.n0) + Map::BN <= n;

  // kInterior: the loop for an interior tile (unguarded copies), else the general one. One
  // commit group per step (past the last, empty or zero-filling), so the wait below always
  // counts the same.
  auto run = [&](auto interior) {
    constexpr bool kInterior = decltype(interior)::value;
    auto issue = [&](int step) {
      const int stage = step % kStages;
      if constexpr (kInterior) {
        const bool live = step < k_steps;
        a.copy_interior(a_shared + 4u * static_cast<unsigned>(stage * AOperand::kStageFloats), live, thread);
        b.copy_interior(b_shared + 4u * static_cast<unsigned>(stage * BOperand::kStageFloats), live, thread);
      } else if (step < k_steps) {
        const Index k0 = static_cast<Index>(step) * Map::BK;
        a.copy(a_stages + stage * AOperand::kStageFloats, step < full_steps, k0, thread);
        b.copy(b_stages + stage * BOperand::kStageFloats, step < full_steps, k0, thread);
      }
      commit_async_copies();
    };
#pragma unroll
    for (int step = 0; step < kStages - 1; ++step) issue(step);
    for (int step = 0; step < k_steps; ++step) {
      // This thread's copies of step `step` have landed; the barrier makes everyone's visible and
      // retires the stage read in step - 1, which the issue below refills.
      wait_async_copies<kStages - 2>();
      __syncthreads();
      const float* a_stage = a_stages + step % kStages * AOperand::kStageFloats;
      const float* b_stage = b_stages + step % kStages * BOperand::kStageFloats;
#pragma unroll
      for (int k0 = 0; k0 < Map::BK; k0 += kRun) {
        [[maybe_unused]] float a_run[Map::TM][kRun], b_run[Map::TN][kRun];  // one is unused in nn and tn
        if constexpr (kAKContig) a_reader.run(a_stage, k0, a_run);
        if constexpr (kBKContig) b_reader.run(b_stage, k0, b_run);
#pragma unroll
        for (int r = 0; r < kRun; ++r) {
          float a_frag[Map::TM], b_frag[Map::TN];
          if constexpr (kAKContig) {
#pragma unroll
            for (int i = 0; i < Map::TM; ++i) a_frag[i] = a_run[i][r];
          } else {
            a_reader.row(a_stage, k0 + r, a_frag);
          }
          if constexpr (kBKContig) {
#pragma unroll
            for (int j = 0; j < Map::TN; ++j) b_frag[j] = b_run[j][r];
          } else {
            b_reader.row(b_stage, k0 + r, b_frag);
          }
#pragma unroll
          for (int i = 0; i < Map::TM; ++i)
#pragma unroll
            for (int j = 0; j < Map::TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
        }
        // The next copies go out after the step's first FMAs, not in a block before them.
        if (k0 == 0) issue(step + kStages - 1);
      }
    }
  };
  if (interior_tile)
    run(std::true_type{});
  else
    run(std::false_type{});
  wait_all_async_copies();  // no copy outlives the block (the empty groups)

  int row_swap = 0;
  if constexpr (kAKContig) row_swap = a_reader.swap;
  store_lane_pieces<Map>(p, o, m_offset, n_offset, acc, flags.out_vector, row_swap);
#else
  __trap();  // sm_80+ only: the catalogue refuses older devices, and the launch below does too
#endif
}

template <typename T>
Flags flags_of(const Args<T>& p) {
  constexpr Index kPack = Pack<T>::kCount;
  const bool quads = aligned(p.c, 4 * sizeof(T)) && p.n % 4 == 0 && (!p.bias || aligned(p.bias, 4 * sizeof(T)));
  return {aligned(p.a, 16) && p.lda() % kPack == 0, aligned(p.b, 16) && p.ldb() % kPack == 0, quads};
}

template <typename T, typename Map, bool kDoubleBuffered>
cudaError_t launch_block_tiled(const Args<T>& p, Flags flags, int splits, float* partials, cudaStream_t stream) {
  const Index tiles = ceil_div(p.m, Map::BM) * ceil_div(p.n, Map::BN);
  if (tiles > INT_MAX || splits < 1 || splits > 65535) return cudaErrorInvalidConfiguration;
  const Index k_per_split = ceil_div(ceil_div(p.k, Map::BK), splits) * Map::BK;
  block_tiled_kernel<T, Map, kDoubleBuffered><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)),
                                                Map::kThreads, 0, stream>>>(p, flags, partials, k_per_split);
  return cudaGetLastError();
}

// The tile index to its compile-time shape.
template <typename T, bool kDoubleBuffered>
cudaError_t launch_block_tile(int tile, const Args<T>& p, Flags flags, int splits, float* partials,
                              cudaStream_t stream) {
  switch (tile) {
    case 0: return launch_block_tiled<T, ThreadMap<0, false>, kDoubleBuffered>(p, flags, splits, partials, stream);
    case 1: return launch_block_tiled<T, ThreadMap<1, false>, kDoubleBuffered>(p, flags, splits, partials, stream);
    case 2: return launch_block_tiled<T, ThreadMap<2, false>, kDoubleBuffered>(p, flags, splits, partials, stream);
    case 3: return launch_block_tiled<T, ThreadMap<3, false>, kDoubleBuffered>(p, flags, splits, partials, stream);
    default: return cudaErrorInvalidValue;
  }
}
template <typename T, int kTileIndex>
cudaError_t launch_warp_tiled_broadcast(const Args<T>& p, Flags flags, cudaStream_t stream) {
  using Map = PairedLaneMap<kTileIndex>;
  const Index tiles = ceil_div(p.m, Map::BM) * ceil_div(p.n, Map::BN);
  if (tiles > INT_MAX) return cudaErrorInvalidConfiguration;
  warp_tiled_broadcast_kernel<T, kTileIndex><<<static_cast<unsigned>(tiles), Map::kThreads, 0, stream>>>(p, flags);
  return cudaGetLastError();
}

template <int kTileIndex>
cudaError_t launch_warp_tiled_async(const Args<float>& p, Flags flags, cudaStream_t stream) {
  using Map = PairedLaneMap<kTileIndex, kAsyncTiles>;
  const Index tiles = ceil_div(p.m, Map::BM) * ceil_div(p.n, Map::BN);
  if (tiles > INT_MAX) return cudaErrorInvalidConfiguration;
  const auto grid = static_cast<unsigned>(tiles);
  auto launch = [&](auto kernel) {
    kernel<<<grid, Map::kThreads, 0, stream>>>(p, flags);
    return cudaGetLastError();
  };
  switch (p.layout) {
    case Layout::nn: return launch(warp_tiled_async_kernel<kTileIndex, true, false>);
    case Layout::nt: return launch(warp_tiled_async_kernel<kTileIndex, true, true>);
    case Layout::tn: return launch(warp_tiled_async_kernel<kTileIndex, false, false>);
  }
  return cudaErrorInvalidValue;
}

static_assert(kBlockTileCount == 4, "launch_block_tile names every tile");
static_assert(kAsyncTileCount == 4, "warp_tiled_async names every tile");
static_assert(kBroadcastTileCount == 3, "warp_tiled_broadcast names every tile");
static_assert(kWarpTileCount == 4, "warp_tiled names every tile");

}  // namespace

template <typename T>
cudaError_t naive(const Args<T>& p, int block_size, cudaStream_t stream) {
  if (!valid(p) || block_size < 1 || block_size > 1024) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, block_size)), static_cast<unsigned>(p.m < 65535 ? p.m : 65535));
  return with_layout(p.layout, [&](auto layout) {
    naive_kernel<decltype(layout)::value><<<grid, block_size, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t smem_tiled(const Args<T>& p, int tile, int pad, cudaStream_t stream) {
  if (!valid(p) || (pad != 0 && pad != 1)) return cudaErrorInvalidValue;
  auto launch = [&](auto layout, auto tile_size, auto padding) {
    constexpr int kTile = decltype(tile_size)::value;
    const Index tiles = ceil_div(p.m, kTile) * ceil_div(p.n, kTile);
    if (tiles > INT_MAX) return cudaErrorInvalidConfiguration;
    smem_tiled_kernel<decltype(layout)::value, kTile, decltype(padding)::value>
        <<<static_cast<unsigned>(tiles), dim3(kTile, kTile), 0, stream>>>(p);
    return cudaGetLastError();
  };
  return with_layout(p.layout, [&](auto layout) {
    using Int = std::integral_constant<int, 0>;
    if (tile == 16)
      return pad ? launch(layout, std::integral_constant<int, 16>{}, std::integral_constant<int, 1>{})
                 : launch(layout, std::integral_constant<int, 16>{}, Int{});
    if (tile == 32)
      return pad ? launch(layout, std::integral_constant<int, 32>{}, std::integral_constant<int, 1>{})
                 : launch(layout, std::integral_constant<int, 32>{}, Int{});
    return cudaErrorInvalidValue;
  });
}

template <typename T>
cudaError_t register_blocked(const Args<T>& p, int tile, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  return launch_block_tile<T, false>(tile, p, flags_of(p), 1, nullptr, stream);
}

template <typename T>
cudaError_t double_buffered(const Args<T>& p, int tile, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  return launch_block_tile<T, true>(tile, p, flags_of(p), 1, nullptr, stream);
}

template <typename T>
cudaError_t warp_tiled(const Args<T>& p, int tile, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  const Flags flags = flags_of(p);
  switch (tile) {
    case 0: return launch_block_tiled<T, ThreadMap<0, true>, true>(p, flags, 1, nullptr, stream);
    case 1: return launch_block_tiled<T, ThreadMap<1, true>, true>(p, flags, 1, nullptr, stream);
    case 2: return launch_block_tiled<T, ThreadMap<2, true>, true>(p, flags, 1, nullptr, stream);
    case 3: return launch_block_tiled<T, ThreadMap<3, true>, true>(p, flags, 1, nullptr, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t warp_tiled_broadcast(const Args<T>& p, int tile, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  const Flags flags = flags_of(p);
  switch (tile) {
    case 0: return launch_warp_tiled_broadcast<T, 0>(p, flags, stream);
    case 1: return launch_warp_tiled_broadcast<T, 1>(p, flags, stream);
    case 2: return launch_warp_tiled_broadcast<T, 2>(p, flags, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t warp_tiled_async(const Args<float>& p, int tile, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (major < 8) return cudaErrorNotSupported;  // cp.async
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) return cudaErrorInvalidValue;  // 32-bit extents
  const Flags flags = flags_of(p);
  switch (tile) {
    case 0: return launch_warp_tiled_async<0>(p, flags, stream);
    case 1: return launch_warp_tiled_async<1>(p, flags, stream);
    case 2: return launch_warp_tiled_async<2>(p, flags, stream);
    case 3: return launch_warp_tiled_async<3>(p, flags, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t split_k(const Args<T>& p, int tile, int splits, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  if (!valid(p) || splits < 1 || !workspace || workspace_bytes < split_k_workspace_bytes(p.m, p.n, splits))
    return cudaErrorInvalidValue;
  float* partials = static_cast<float*>(workspace);
  Flags flags = flags_of(p);
  flags.out_vector = aligned(partials, 16) && p.n % 4 == 0;
  if (cudaError_t e = launch_block_tile<T, true>(tile, p, flags, splits, partials, stream); e != cudaSuccess) return e;
  constexpr int kReduceThreads = 256;
  const Index blocks = ceil_div(p.m * p.n, kReduceThreads);
  split_k_reduce_kernel<<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), kReduceThreads, 0, stream>>>(
      p, partials, splits);
  return cudaGetLastError();
}

template <typename T>
cudaError_t finish_product(const Args<T>& p, const float* acc, cudaStream_t stream) {
  if (!valid(p) || !acc) return cudaErrorInvalidValue;
  // Whole quads of acc and C (and the bias) where n % 4 == 0 and all are aligned to them.
  const bool vector_ok = flags_of(p).out_vector && aligned(acc, 16);
  constexpr int kThreads = 256;
  const Index blocks = ceil_div(p.m * ceil_div(p.n, 4), kThreads);
  finish_product_kernel<<<static_cast<unsigned>(min_index(blocks, Index{1} << 20)), kThreads, 0, stream>>>(p, acc,
                                                                                                        vector_ok);
  return cudaGetLastError();
}

#define SHAPETUNE_INSTANTIATE_GEMM(T)                                                                   \
  template cudaError_t naive<T>(const Args<T>&, int, cudaStream_t);                                      \
  template cudaError_t smem_tiled<T>(const Args<T>&, int, int, cudaStream_t);                            \
  template cudaError_t register_blocked<T>(const Args<T>&, int, cudaStream_t);                           \
  template cudaError_t double_buffered<T>(const Args<T>&, int, cudaStream_t);                            \
  template cudaError_t warp_tiled<T>(const Args<T>&, int, cudaStream_t);                                 \
  template cudaError_t split_k<T>(const Args<T>&, int, int, void*, std::size_t, cudaStream_t);          \
  template cudaError_t finish_product<T>(const Args<T>&, const float*, cudaStream_t);                   \
  template cudaError_t warp_tiled_broadcast<T>(const Args<T>&, int, cudaStream_t);

SHAPETUNE_INSTANTIATE_GEMM(float)
SHAPETUNE_INSTANTIATE_GEMM(__half)
SHAPETUNE_INSTANTIATE_GEMM(__nv_bfloat16)

}  // namespace shapetune::kernels::gemm
