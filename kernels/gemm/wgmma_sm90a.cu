#include "kernels/gemm/wgmma.cuh"

// CUtensorMap and its enums only: cuTensorMapEncodeTiled is reached through the runtime's
// cudaGetDriverEntryPointByVersion, so nothing links libcuda directly.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/gemm/epilogue.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/numeric.cuh"

namespace shapetune::kernels::gemm_wgmma {
namespace {

using gemm::apply_activation;
using gemm::Args;
using gemm::Epilogue;
using gemm::Layout;

constexpr int kWarpSize = 32;
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
constexpr int kConsumerWarps = kConsumerThreads / kWarpSize;
// The 128-byte swizzle: a shared row of 128 bytes (kBlockK 16-bit elements) whose eight 16-byte
// chunks are permuted by XOR with address bits 7-9, so its pattern repeats every 8 rows, 1024 bytes.
constexpr unsigned kSwizzleRowBytes = 128;
constexpr unsigned kSwizzleAtomBytes = 8 * kSwizzleRowBytes;
// An MN-major operand (A in tn, B in nn and tn) arrives in boxes of 64 MN x kBlockK K: one
// 128-byte row of MN per K, 8 KiB a box.
constexpr int kMnBoxExtent = 64;
constexpr unsigned kMnBoxBytes = kMnBoxExtent * kBlockK * 2;
constexpr int kMmaK = 16;  // wgmma's K for 16-bit types
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
  static constexpr unsigned kATileBytes = kBM * kBlockK * 2;
  static constexpr unsigned kBTileBytes = kBN * kBlockK * 2;
  static constexpr unsigned kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kRasterGroup = kRasterRows / kBM > 0 ? kRasterRows / kBM : 1;
  // The epilogue stages each warp's 16 rows x kBN accumulators in fp32 through shared memory;
  // rows padded by 8 floats put the 8-byte writes of one n8 piece (8 rows x 4 lanes) on distinct
  // banks.
  static constexpr int kStagingStride = kBN + 8;
  static constexpr unsigned kStagingBytes = kConsumerWarps * 16 * kStagingStride * 4;

  static_assert(sizeof(T) == 2, "wgmma k16 with 16-bit A and B");
  static_assert(kWarpgroupM % 64 == 0 && kBN % kMnBoxExtent == 0, "whole m64 tiles and MN boxes");
  static_assert(kBN == 64 || kBN == 128 || kBN == 256, "an n the wgmma wrappers below provide");
  static_assert(kBM <= 256 && kBN <= 256, "a K-major box spans the tile; TMA boxes stop at 256 rows");
  static_assert(kATileBytes % kSwizzleAtomBytes == 0, "B tiles start on a swizzle period too");
  static_assert(kStagingBytes <= kMinStages * kStageBytes, "the staging fits in the smallest pipeline");
  static_assert(shared_bytes(TileShape{kBM, kBN}, 1) == kStageBytes + 16 + 1024, "the catalogue's size is the kernel's");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- PTX wrappers (sm_90a; only the kernel's guarded body calls them) -----------------------

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}
// One box of a 2D tensor map (coordinates innermost first, in elements) into shared memory at
// `dst`, 128-byte swizzled as the map says; its bytes count against `bar`'s transaction count.
// Parts of the box past the tensor's extent arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const CUtensorMap* map, int inner, int outer,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// Warpgroup-wide register reallocation (every warp of the warpgroup executes it).
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

__device__ __forceinline__ void consumer_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kConsumerBarrier), "n"(kConsumerThreads) : "memory");
}

// wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address,
// leading and stride byte offsets, all >> 4; base offset 0 (every tile starts on a 1024-byte
// boundary, and a start moved by whole 16-byte chunks within a swizzle row keeps the pattern's
// phase, which the hardware takes from the address bits); bits 62-63 = 1: 128-byte swizzle.
//   K-major (canonical ((8,m),(T,2k)):((8T,SBO),(1,T))): rows of 128 bytes, 8-row groups SBO =
//     1024 bytes apart; the leading offset is unused with swizzling ("assumed 1": encoded 1).
//     K step s of 16 elements starts 32 * s bytes into the rows.
//   MN-major (canonical ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))): 64 MN elements per 128-byte row,
//     one row per K; 8-K groups SBO = 1024 bytes apart; the next 64 MN (the next box) LBO = 8 KiB
//     away. K step s starts 16 rows = 2048 * s bytes in.
__device__ __forceinline__ std::uint64_t matrix_descriptor(unsigned address, unsigned leading_bytes,
                                                           unsigned stride_bytes) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<std::uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | std::uint64_t{1} << 62;
}
template <bool kKMajor>
__device__ __forceinline__ std::uint64_t operand_descriptor(unsigned tile, int mn0, int k_step) {
  if constexpr (kKMajor) {
    return matrix_descriptor(tile + static_cast<unsigned>(mn0) * kSwizzleRowBytes + k_step * (kMmaK * 2), 16,
                             kSwizzleAtomBytes);
  } else {
    return matrix_descriptor(tile + static_cast<unsigned>(mn0 / kMnBoxExtent) * kMnBoxBytes +
                                 k_step * (kMmaK * kSwizzleRowBytes),
                             kMnBoxBytes, kSwizzleAtomBytes);
  }
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Tells the compiler the accumulators may have changed here (they are written asynchronously by
// the wgmma in flight), so it neither reads them early nor keeps stale copies across a wait.
template <int kCount>
__device__ __forceinline__ void touch(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, fp32, N / 2 registers a thread) += A (64 x 16) B (16 x N), both from shared memory.
// kTransA / kTransB: 0 for a K-major operand, 1 for an M- or N-major one. scale_d = 0 ignores D
// (D = A B): the first product initialises the accumulators, which no other instruction then
// writes while a wgmma is in flight (ptxas serialises the wgmma where one does).
#define SHAPETUNE_WGMMA_M64N256K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

#define SHAPETUNE_WGMMA_M64N128K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

#define SHAPETUNE_WGMMA_M64N64K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))


template <typename T, int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                             int scale_d) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kN == 256) {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N256K16("bf16");
    else
      SHAPETUNE_WGMMA_M64N256K16("f16");
  } else if constexpr (kN == 128) {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N128K16("bf16");
    else
      SHAPETUNE_WGMMA_M64N128K16("f16");
  } else {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N64K16("bf16");
    else
      SHAPETUNE_WGMMA_M64N64K16("f16");
  }
}

// ---- the kernel's parts -----------------------------------------------------------------------

// Block index -> tile coordinates: groups of kRasterGroup tile rows, walked column by column,
// so concurrently resident blocks form a roughly square patch of C.
__device__ __forceinline__ void block_tile(int block, int group_rows, int tiles_m, int tiles_n, int& tile_m,
                                           int& tile_n) {
  const int per_group = group_rows * tiles_n;
  const int group = block / per_group;
  const int first_m = group * group_rows;
  const int rows_in_group = min(tiles_m - first_m, group_rows);
  const int in_group = block - group * per_group;
  tile_m = first_m + in_group % rows_in_group;
  tile_n = in_group / rows_in_group;
}

// The producer (one thread): for every K step, wait until the consumers have released the slot,
// announce the stage's bytes on its full barrier and issue the TMA boxes of A and B into it.
// A K-major tile is one box of kBlockK x rows; an MN-major one is rows / 64 boxes of 64 x kBlockK.
template <class C>
__device__ __forceinline__ void produce(const CUtensorMap* a_map, const CUtensorMap* b_map,
                                        const Params<typename C::T>& p, unsigned tiles, unsigned full,
                                        unsigned empty, int m0, int n0) {
  prefetch_tensor_map(a_map);
  prefetch_tensor_map(b_map);
  int slot = 0;
  unsigned phase = 0;
  for (int kt = 0; kt < p.k_tiles; ++kt) {
    mbarrier_wait(empty + 8 * slot, phase ^ 1);
    const unsigned bar = full + 8 * slot;
    mbarrier_arrive_expect_tx(bar, C::kStageBytes);
    const unsigned a_dst = tiles + static_cast<unsigned>(slot) * C::kStageBytes;
    const unsigned b_dst = a_dst + C::kATileBytes;
    const int k0 = kt * kBlockK;
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
    if (++slot == p.stages) slot = 0, phase ^= 1;
  }
}

// A consumer warpgroup: for every K step, wait for the stage, issue its 4 k16 steps of wgmma
// (kMTiles m64 x kBN tiles each) as one group, then wait for the previous step's group, whose
// stage each warp then releases (one arrival a warp; the empty barriers count kConsumerWarps).
// One group stays in flight, so the tensor cores always have the next step queued.
template <class C>
__device__ __forceinline__ void consume(float (&acc)[C::kMTiles][C::kAccumulators], const Params<typename C::T>& p,
                                        unsigned tiles, unsigned full, unsigned empty, int consumer, int lane) {
  constexpr int kTransA = C::kAKMajor ? 0 : 1, kTransB = C::kBKMajor ? 0 : 1;
  int slot = 0, previous = -1;
  unsigned phase = 0;
  for (int kt = 0; kt < p.k_tiles; ++kt) {
    mbarrier_wait(full + 8 * slot, phase);
    const unsigned a_tile = tiles + static_cast<unsigned>(slot) * C::kStageBytes;
    const unsigned b_tile = a_tile + C::kATileBytes;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockK / kMmaK; ++ks) {
      const std::uint64_t desc_b = operand_descriptor<C::kBKMajor>(b_tile, 0, ks);
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        const std::uint64_t desc_a =
            operand_descriptor<C::kAKMajor>(a_tile, consumer * C::kWarpgroupM + mt * 64, ks);
        wgmma_m64k16<typename C::T, C::kBN, kTransA, kTransB>(acc[mt], desc_a, desc_b, kt > 0 || ks > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) touch(acc[mt]);
    if (previous >= 0 && lane == 0) mbarrier_arrive(empty + 8 * previous);
    previous = slot;
    if (++slot == p.stages) slot = 0, phase ^= 1;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) touch(acc[mt]);
}

// c[m][n] = act(alpha acc + beta c[m][n] + bias[n]) for one m64 tile of a consumer warpgroup:
// warp w holds rows 16w..16w+15 of it in wgmma's accumulator layout (register 4j + 2h + e: row
// lane / 4 + 8h, column 8j + 2 (lane % 4) + e). Each warp stages its 16 rows through its own
// shared area so that lanes then walk C row-major, consecutive lanes on consecutive columns, and
// the epilogue's code is one loop rather than one copy per register (erfcf inlined 128 times).
template <class C>
__device__ __forceinline__ void store_tile(const Params<typename C::T>& p, const float (&acc)[C::kAccumulators],
                                           float* staging, std::int64_t row0, std::int64_t col0, int lane) {
  using T = typename C::T;
  constexpr int kStride = C::kStagingStride;
  __syncwarp();  // the previous tile's reads of the staging are done
#pragma unroll
  for (int j = 0; j < C::kBN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(staging + (lane / 4 + 8 * h) * kStride + 8 * j + 2 * (lane % 4)) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  __syncwarp();

  const bool read_c = p.beta != 0.f;
#pragma unroll 4
  for (int e = 0; e < 16 * C::kBN / kWarpSize; ++e) {
    const int idx = lane + e * kWarpSize, r = idx / C::kBN, c = idx % C::kBN;
    const std::int64_t row = row0 + r, col = col0 + c;
    if (row < p.m && col < p.n) {
      float v = p.alpha * staging[r * kStride + c];
      if (read_c) v += p.beta * to_float(p.c[row * p.ldc + col]);
      if (p.bias) v += to_float(p.bias[col]);
      p.c[row * p.ldc + col] = from_float<T>(apply_activation(p.epilogue, v));
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Warpgroup 0 produces (one thread issues every TMA), warpgroups 1 and 2 consume. Shared memory:
// `stages` x (A tile, B tile), each on a 1024-byte boundary, then the full and empty mbarriers.
template <class C>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                 const Params<typename C::T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char shared[];
  // TMA's and wgmma's swizzle are functions of the address bits, so the tiles must start on the
  // swizzle's 1024-byte period; the dynamic segment's start is not guaranteed to (1 KiB of slack).
  const unsigned shared_base = shared_address(shared);
  const unsigned tiles = (shared_base + (kSwizzleAtomBytes - 1)) & ~(kSwizzleAtomBytes - 1);
  const int stages = p.stages;
  const unsigned full = tiles + static_cast<unsigned>(stages) * C::kStageBytes;
  const unsigned empty = full + 8 * static_cast<unsigned>(stages);
  const int warpgroup = static_cast<int>(threadIdx.x) / kWarpgroupThreads;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;

  int tile_m, tile_n;
  block_tile(static_cast<int>(blockIdx.x), C::kRasterGroup, p.tiles_m, p.tiles_n, tile_m, tile_n);
  const int m0 = tile_m * C::kBM, n0 = tile_n * C::kBN;  // the host keeps extents below 2^31 - 256

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
    if (threadIdx.x == 0) produce<C>(&a_map, &b_map, p, tiles, full, empty, m0, n0);
    return;
  }

  registers_increase<kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  float acc[C::kMTiles][C::kAccumulators];  // the first K step's wgmma (scale_d 0) initialises them
  consume<C>(acc, p, tiles, full, empty, consumer, lane);

  // The pipeline's buffers become the consumer warps' staging areas once both warpgroups' last
  // wgmma have read them (every TMA has landed: each was waited for).
  consumer_barrier();
  const int consumer_warp = (static_cast<int>(threadIdx.x) - kWarpgroupThreads) / kWarpSize;
  float* staging = reinterpret_cast<float*>(shared + (tiles - shared_base)) + consumer_warp * 16 * C::kStagingStride;
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) {
    const std::int64_t row0 = static_cast<std::int64_t>(m0) + consumer * C::kWarpgroupM + mt * 64 + 16 * (consumer_warp % 4);
    store_tile<C>(p, acc[mt], staging, row0, n0, lane);
  }
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

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major matrix of `outer` rows of `inner` elements, `ld` elements apart, read in boxes of
// box_inner x box_outer (box_inner * 2 = 128 bytes: one swizzle row), 128-byte swizzled,
// zero-filled past its edges.
template <typename T>
cudaError_t encode(CUtensorMap& map, const T* base, std::int64_t inner, std::int64_t outer, std::int64_t ld,
                   int box_inner, int box_outer) {
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_tiled();
  if (!fn) return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * sizeof(T)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type =
      std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = fn(&map, type, 2, const_cast<T*>(base), dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <class C>
cudaError_t launch(const Args<typename C::T>& args, int stages, cudaStream_t stream) {
  using T = typename C::T;
  const std::int64_t tiles_m = (args.m + C::kBM - 1) / C::kBM, tiles_n = (args.n + C::kBN - 1) / C::kBN;
  // block_tile() computes in int; this keeps tiles_m * tiles_n (and the group's blocks) in range.
  if (tiles_m * tiles_n > INT_MAX / 2 || tiles_n > INT_MAX / (2 * C::kRasterGroup)) return cudaErrorInvalidConfiguration;

  CUtensorMap a_map, b_map;
  cudaError_t e = C::kAKMajor ? encode(a_map, args.a, args.k, args.m, args.lda(), kBlockK, C::kBM)
                              : encode(a_map, args.a, args.m, args.k, args.lda(), kMnBoxExtent, kBlockK);
  if (e != cudaSuccess) return e;
  e = C::kBKMajor ? encode(b_map, args.b, args.k, args.n, args.ldb(), kBlockK, C::kBN)
                  : encode(b_map, args.b, args.n, args.k, args.ldb(), kMnBoxExtent, kBlockK);
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
  p.k_tiles = static_cast<int>((args.k + kBlockK - 1) / kBlockK);
  p.stages = stages;

  const std::size_t smem = shared_bytes(TileShape{C::kBM, C::kBN}, stages);
  auto kernel = wgmma_kernel<C>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  kernel<<<static_cast<unsigned>(tiles_m * tiles_n), kThreads, smem, stream>>>(a_map, b_map, p);
  return cudaGetLastError();
}

template <typename T, bool kAKMajor, bool kBKMajor, std::size_t... kTile>
cudaError_t launch_tile(const Args<T>& args, int tile, int stages, cudaStream_t stream,
                        std::index_sequence<kTile...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((static_cast<std::size_t>(tile) == kTile
        ? (e = launch<typename TilingFor<T, kTile, kAKMajor, kBKMajor>::type>(args, stages, stream))
        : e),
   ...);
  return e;
}

template <typename T, bool kAKMajor, bool kBKMajor>
cudaError_t launch_layout(const Args<T>& args, int tile, int stages, cudaStream_t stream) {
  return launch_tile<T, kAKMajor, kBKMajor>(args, tile, stages, stream, std::make_index_sequence<kTiles.size()>{});
}

// sm_90a code runs on compute capability 9.0 alone.
cudaError_t require_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device); e != cudaSuccess)
    return e;
  return major == 9 && minor == 0 ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace

template <typename T>
cudaError_t wgmma(const gemm::Args<T>& args, int tile, int stages, cudaStream_t stream) {
  if (stages < kMinStages || stages > kMaxStages || tile < 0 || tile >= static_cast<int>(kTiles.size()))
    return cudaErrorInvalidValue;
  // TMA coordinates are int32, and a tile's origin plus its extent must stay representable.
  constexpr std::int64_t kMaxExtent = INT_MAX - 256;
  if (args.m < 1 || args.n < 1 || args.k < 1 || args.m > kMaxExtent || args.n > kMaxExtent || args.k > kMaxExtent)
    return cudaErrorInvalidValue;
  if (cudaError_t e = require_sm90(); e != cudaSuccess) return e;
  if (!tma_addressable(args.layout, args.m, args.n, args.k) || !aligned(args.a, 16) || !aligned(args.b, 16))
    return cudaErrorInvalidValue;
  switch (args.layout) {
    case Layout::nn: return launch_layout<T, true, false>(args, tile, stages, stream);
    case Layout::nt: return launch_layout<T, true, true>(args, tile, stages, stream);
    case Layout::tn: return launch_layout<T, false, false>(args, tile, stages, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t wgmma<__half>(const gemm::Args<__half>&, int, int, cudaStream_t);
template cudaError_t wgmma<__nv_bfloat16>(const gemm::Args<__nv_bfloat16>&, int, int, cudaStream_t);

}  // namespace shapetune::kernels::gemm_wgmma
