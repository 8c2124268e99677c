// flash_wgmma: FlashAttention's forward pass on Hopper's warpgroup MMA (wgmma, sm_90a only), after
// FlashAttention-3's ideas: a warpgroup owns 64 query rows, both products run on wgmma, and P never
// leaves the registers.
//
// Data flow of one block (block_q = 64 * warpgroups query rows of one batch row and head):
//   Q tile --cp.async (zero-filled past the valid rows)--> 128-byte-swizzled shared memory, once.
//   For each key tile of block_k rows that some query of the block may see:
//     K, V tiles --cp.async (zero-filled past the valid keys)--> swizzled shared, double-buffered;
//       every thread copies, waits for its own copies, fences them over to the async proxy that
//       wgmma reads through, and meets the others at a barrier.
//     S = Q K^T per warpgroup: wgmma m64 n(block_k) k16, A = its 64 Q rows and B = the K tile, both
//       K-major descriptors; fp32 accumulators in registers.
//     Online softmax on the accumulators (masked scores -inf, row max and sum over the 4 lanes
//       that share a row, scale * log2(e) folded into each exponential's fma), O rescaled by
//       exp2(old max - new max).
//     O += P V: P rounded to T in registers is wgmma's register A operand (the m64 accumulator
//       layout is the register-A layout: no data moves between lanes); B = the V tile, [keys, hd]
//       row-major, i.e. N-major: the transpose bit, which 16-bit types allow.
//   O / (row sum) --4-byte stores straight from the accumulators--> O through its strides.
//
// Four schedules (FlashWgmmaConfig::pipeline):
//   0, synchronous: every thread copies K and V, waits for its copies and meets the others at a
//     block barrier before each product; each product is waited for before the softmax. Overlap
//     comes only from the other warpgroup and the other block of the SM.
//   1, warp-specialised (FlashAttention-3's schedule, written here from its paper's description):
//     one producer warpgroup (setmaxnreg down to kProducerRegisters) copies Q into one of two Q
//     slots and streams K and V through a two-slot ring with cp.async, each tile announced on its
//     own full mbarrier and handed back on an empty one, so consumers never meet at a block
//     barrier. Each consumer warpgroup issues tile t's S = Q K^T and tile t-1's O += P V back to
//     back, waits only for the S, runs the softmax of tile t while P V runs on the tensor cores,
//     then waits for P V and rescales O.
//     The producer keeps cp.async's zero fill (keys past a batch row's length arrive as zeros),
//     which TMA boxes cannot give per batch row; before announcing a tile, each producer thread
//     waits for its own copies and fences them over to the async proxy, as the synchronous
//     schedule's threads do before their barrier. One block per query tile.
//   2, persistent: pipeline 1's kernel on one block per SM, each taking query tiles in turn
//     (longest first), so that the producer loads the next tile's Q, K and V while the consumers
//     finish this one's and store its output, where pipeline 1 waits for them at each block's
//     start and idles the SM at its end.
//   3, persistent with TMA: pipeline 2 whose producer is one thread issuing TMA boxes (4D tensor
//     maps of Q, K and V over [B, H, S, hd] through their strides, 64 of hd a box, 128-byte
//     swizzled: the layout below), each tile's bytes counted on its full barrier (expect_tx), no
//     copies, waits or fences by the other 127. TMA zero-fills past S but not past a batch row's
//     length, so padded problems keep pipelines 1 and 2.
// Pingpong (FlashWgmmaConfig::pingpong, pipelines 1-3; FlashAttention-3's "ping-pong" schedule,
// written from its paper's description): the consumer warpgroups take turns at issuing their
// products, passing the turn round through one named barrier each, so that one warpgroup's products
// run on the tensor cores while another's softmax runs on the FMA and MUFU units, instead of all
// issuing together and then all exponentiating together. A turn is one issue of products: S of
// the first tile; S of tile t with P V of tile t-1; the last P V. Every consumer takes key_tiles
// + 1 turns an item (a warpgroup whose causal rows see fewer tiles passes its spare turns as it
// hands back those tiles), waiting for a tile's data before taking a turn, never while holding one.
//
// Shared layout of every tile (Q, K, V alike): hd / 64 column blocks of rows x 64 elements, each
// row one 128-byte swizzle row whose 16-byte chunks are permuted by XOR with (row % 8), each block
// on a 1024-byte boundary. As K-major operands (Q, K) that is wgmma's canonical 128B-swizzled
// K-major layout (8-row groups 1024 bytes apart, a k16 step 32 bytes along a row, the next 64 of hd
// one column block on); as V, the N-major operand of P V, each column block is one N-major box of
// 64 hd x block_k keys (8-key groups 1024 bytes apart, the next 64 of hd one column block on, a
// k16 step 16 rows on): the GEMM's MN-major descriptor with its box block_k deep.
//
// Accumulator layout (m64nN, fp32, N / 2 registers a thread; warp w of the warpgroup, g = lane / 4,
// t = lane % 4): register 4j + 2h + e holds row 16w + g + 8h, column 8j + 2t + e. Register-A
// layout (m64k16, 16-bit pairs): a0 = (g, k 2t..2t+1), a1 = (g + 8, k 2t..), a2 = (g, k 2t+8..),
// a3 = (g + 8, k 2t+8..). So P's k16 step kk is pack(s[8kk], s[8kk+1]), pack(s[8kk+2], s[8kk+3]),
// pack(s[8kk+4], s[8kk+5]), pack(s[8kk+6], s[8kk+7]).
#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/async_copy.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/shared_address.cuh"
#include "kernels/common/tensor_map.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/sm90a_guard.cuh"

namespace shapetune::kernels::attention {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupRows = 64;  // wgmma's M
constexpr int kMmaK = 16;           // wgmma's K for 16-bit types
constexpr int kElementBytes = 2;
constexpr int kSwizzleRowBytes = 128;
constexpr int kSwizzleRowElements = kSwizzleRowBytes / kElementBytes;
constexpr int kSwizzleRowChunks = kSwizzleRowBytes / kChunkBytes;
// The swizzle pattern repeats every 8 rows; wgmma takes its phase from the address bits, so every
// tile starts on this boundary (and the dynamic segment gets this much slack to find one).
constexpr unsigned kSwizzleAtomBytes = 8 * kSwizzleRowBytes;
constexpr int kStages = 2;
static_assert((kStages & (kStages - 1)) == 0, "the ring's 32-bit tile count wraps onto the same slots and phases");
// The warp-specialised schedules' Q tiles: the item in work and the next one's, loaded ahead.
constexpr int kQSlots = 2;
// Pingpong's turns: named barrier kTurnBarrier + c is consumer warpgroup c's turn (0 is __syncthreads).
constexpr unsigned kTurnBarrier = 1;
// Their barriers: full and empty, for K and for V per ring slot and for each Q slot (8 bytes each).
constexpr int kRingBarrierBytes = (4 * kStages + 2 * kQSlots) * 8;
// setmaxnreg of the warp-specialised schedule: the producer copies with a handful of registers,
// the consumers hold O, the next tile's S and the current tile's packed P at once:
// 128 x 24 + 256 x 240 <= 64 Ki registers of an SM with two consumer warpgroups, and
// 128 x 24 + 384 x 160 with three, which holds them at hd 64 only (O 32, S 64, P 32 at block_k 128).
constexpr int kProducerRegisters = 24;
constexpr int consumer_registers(int warpgroups) { return warpgroups == 2 ? 240 : 160; }
static_assert(128 * kProducerRegisters + 384 * 160 <= 64 * 1024, "three consumer warpgroups' register split");

constexpr std::size_t tile_bytes(int rows, int head_dim) {
  return static_cast<std::size_t>(rows) * head_dim * kElementBytes;
}
constexpr std::size_t shared_bytes(int warpgroups, int block_k, int head_dim, int pipeline) {
  // The Q tile (two in the warp-specialised schedules), then kStages pairs of K and V tiles, the
  // ring's barriers, and the alignment slack.
  const bool specialised = pipeline != 0;
  return (specialised ? kQSlots : 1) * tile_bytes(kWarpgroupRows * warpgroups, head_dim) +
         kStages * 2 * tile_bytes(block_k, head_dim) + (specialised ? kRingBarrierBytes : 0) + kSwizzleAtomBytes;
}

template <typename TArg, int kHeadDimArg, int kWarpgroupsArg, int kBlockKArg>
struct Tiling {
  using T = TArg;
  static constexpr int kHeadDim = kHeadDimArg, kWarpgroups = kWarpgroupsArg, kBlockK = kBlockKArg;
  static constexpr int kThreads = kWarpgroupThreads * kWarpgroups;
  static constexpr int kBlockQ = kWarpgroupRows * kWarpgroups;
  static constexpr int kChunksPerRow = kHeadDim * kElementBytes / kChunkBytes;
  static constexpr unsigned kQBytes = static_cast<unsigned>(tile_bytes(kBlockQ, kHeadDim));
  static constexpr unsigned kTileBytes = static_cast<unsigned>(tile_bytes(kBlockK, kHeadDim));
  static constexpr unsigned kStageBytes = 2 * kTileBytes;
  static constexpr int kScoreRegisters = kBlockK / 2;   // m64 x block_k fp32 a thread
  static constexpr int kOutputRegisters = kHeadDim / 2;  // m64 x hd fp32 a thread
  static constexpr int kDimSteps = kHeadDim / kMmaK;    // k16 steps of Q K^T
  static constexpr int kKeySteps = kBlockK / kMmaK;     // k16 steps of P V

  static_assert(sizeof(T) == kElementBytes, "wgmma k16 with 16-bit operands");
  static_assert(kHeadDim % kSwizzleRowElements == 0, "whole 128-byte swizzle rows");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "P V's n: the register-A wrappers provide 64 and 128");
  static_assert(kBlockK == 64 || kBlockK == 128, "Q K^T's n: the shared-A wrappers provide 64 and 128");
  static_assert(kTileBytes % kSwizzleAtomBytes == 0 && kQBytes % kSwizzleAtomBytes == 0, "tiles on the swizzle period");
};

// Pipeline 3's tensor maps: Q in boxes of 64 hd x block_q rows, K and V in 64 hd x block_k.
// CUtensorMap is 128-byte aligned (cuda.h), so the struct is too.
struct TensorMaps {
  CUtensorMap q, k, v;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- device helpers ---------------------------------------------------------------------------

// Copies kRows rows of hd elements into the swizzled layout at `dst` (top of the file), whose
// column blocks are kBlockRows rows tall (a tile's own height, or the whole Q tile's where a
// warpgroup copies its 64 rows of it): rows below valid_rows from `src` (row stride `stride`
// elements), the rest zero-filled, so keys and queries past the end (or past the batch row's
// length) hold zeros rather than whatever the buffer holds there (0 * NaN would reach every output
// of the P V product). kThreads threads copy, tid being this one's index among them; consecutive
// threads copy consecutive chunks of a row: coalesced reads. A thread keeps one chunk column and
// steps down kRowStep rows at a time, a multiple of the swizzle period, so its chunk's place
// within a row stays put and one pointer and one offset walk the whole tile (no address a copy).
// kUnroll: the rows' loop unrolled that far (the producer warpgroup, on 24 registers, keeps it
// rolled: unrolled, its copies' addresses spilled).
template <class C, int kThreads, int kRows, int kBlockRows = kRows, int kUnroll = kRows>
__device__ __forceinline__ void copy_tile(unsigned dst, const typename C::T* src, std::int64_t stride, int valid_rows,
                                          int tid) {
  constexpr int kRowStep = kThreads / C::kChunksPerRow;
  constexpr unsigned kColumnBlockBytes = static_cast<unsigned>(kBlockRows) * kSwizzleRowBytes;
  constexpr int kChunkElements = kChunkBytes / kElementBytes;
  static_assert(kThreads % C::kChunksPerRow == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "a thread's chunks share a column and a swizzle phase");
  const int first_row = tid / C::kChunksPerRow, col = tid % C::kChunksPerRow;
  unsigned at = dst + static_cast<unsigned>(col / kSwizzleRowChunks) * kColumnBlockBytes +
                static_cast<unsigned>(first_row * kSwizzleRowBytes) +
                static_cast<unsigned>(((col % kSwizzleRowChunks) ^ (first_row % 8)) * kChunkBytes);
  const typename C::T* from = src + first_row * stride + col * kChunkElements;
#pragma unroll kUnroll
  for (int row = first_row; row < kRows; row += kRowStep) {
    const bool inside = row < valid_rows;
    copy_async_16_zfill(at, inside ? from : src, inside ? kChunkBytes : 0);
    at += kRowStep * kSwizzleRowBytes;
    from += kRowStep * stride;
  }
}

// A K-major operand of kRows rows in the swizzled layout: its k16 step `step` starts 32 bytes
// further along the rows, the next 64 of hd one column block on. The leading offset is unused
// with swizzling (encoded as 1); 8-row groups are 1024 bytes apart.
__device__ __forceinline__ DescriptorBase k_major_base(unsigned tile) {
  return descriptor_base(tile, 16, kSwizzleAtomBytes);
}
template <int kRows>
constexpr unsigned k_major_offset(int step) {
  constexpr int kStepsPerRow = kSwizzleRowElements / kMmaK;
  return static_cast<unsigned>(step / kStepsPerRow) * kRows * kSwizzleRowBytes +
         static_cast<unsigned>(step % kStepsPerRow) * kMmaK * kElementBytes;
}

// This thread's warpgroup, broadcast from lane 0 so that the compiler knows it is warp-uniform:
// what derives from it (the warpgroup's Q rows, its descriptors) can then live in uniform
// registers, which wgmma reads its descriptors from, instead of being moved there before each one.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// The V tile as P V's N-major B: k16 step `step` (16 keys) starts 16 rows in; the leading offset
// is the next 64 of hd (one column block of kBlockK rows), the stride the next 8 keys.
template <class C>
__device__ __forceinline__ DescriptorBase v_base(unsigned tile) {
  return descriptor_base(tile, static_cast<unsigned>(C::kBlockK) * kSwizzleRowBytes, kSwizzleAtomBytes);
}
constexpr unsigned v_offset(int step) { return static_cast<unsigned>(step) * kMmaK * kSwizzleRowBytes; }

// Issues S = Q K^T for the warpgroup's 64 rows and the tile's block_k keys as one wgmma group,
// not waited for. The fence orders every register write before it (the softmax's of s, the
// packing of P, O's rescaling) before the products that follow.
template <class C>
__device__ __forceinline__ void issue_qk(float (&s)[C::kScoreRegisters], unsigned q_rows, unsigned k_tile) {
  const DescriptorBase q = k_major_base(q_rows), k = k_major_base(k_tile);
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < C::kDimSteps; ++step)
    wgmma_m64k16<typename C::T, C::kBlockK, 0, 0>(s, descriptor_at(q, k_major_offset<C::kBlockQ>(step)),
                                                  descriptor_at(k, k_major_offset<C::kBlockK>(step)), step > 0);
  wgmma_commit();
}

// S = Q K^T, waited for.
template <class C>
__device__ __forceinline__ void multiply_qk(float (&s)[C::kScoreRegisters], unsigned q_rows, unsigned k_tile) {
  issue_qk<C>(s, q_rows, k_tile);
  wgmma_wait<0>();
  touch(s);
}

// Issues O += P V (P packed by pack_probabilities) as one wgmma group, not waited for; a, o and
// the V tile must stay untouched until it is.
template <class C>
__device__ __forceinline__ void issue_pv(const unsigned (&a)[C::kKeySteps][4], float (&o)[C::kOutputRegisters],
                                         unsigned v_tile) {
  const DescriptorBase v = v_base<C>(v_tile);
#pragma unroll
  for (int kk = 0; kk < C::kKeySteps; ++kk)
    wgmma_m64k16_register_a<typename C::T, C::kHeadDim, 1>(o, a[kk], descriptor_at(v, v_offset(kk)), 1);
  wgmma_commit();
}

// Turns the tile's scores into probabilities against the running row maxima and returns in
// `correction` the factor, exp2(old max - new max), by which what was accumulated under the old
// maxima must be rescaled (rescale_output). h = 0, 1: the lane's rows g and g + 8. `masked`: some
// key of the tile lies past the valid keys or above the diagonal for some row of the warpgroup
// (only then are keys compared one by one). The maxima are of the unscaled scores (scale > 0
// keeps their order), so that each exponential takes one fma, s scale log2(e) - max scale log2(e),
// rather than a product and a difference. A row with no unmasked key so far keeps max -inf: it
// takes its exponentials against 0 instead, so they come out 0, not NaN.
template <class C>
__device__ __forceinline__ void softmax_scores(float (&s)[C::kScoreRegisters], float (&row_max)[2],
                                               float (&row_sum)[2], float (&correction)[2], float scale_log2,
                                               bool masked, bool causal, int first_key, int first_row,
                                               int valid_keys) {
  if (masked) {
#pragma unroll
    for (int i = 0; i < C::kScoreRegisters; ++i) {
      const int key = first_key + 8 * (i / 4) + (i % 2), row = first_row + 8 * ((i / 2) % 2);
      if (key >= valid_keys || (causal && key > row)) s[i] = -INFINITY;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kBlockK / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max[h], tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max * scale_log2;
    correction[h] = fast_exp2(row_max[h] * scale_log2 - base);  // 0 while the row had nothing
    row_max[h] = new_max;
    float tile_sum = 0.f;
#pragma unroll
    for (int j = 0; j < C::kBlockK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * j + 2 * h + e];
        x = fast_exp2(fmaf(x, scale_log2, -base));
        tile_sum += x;
      }
    // The lane's share only: the 4 lanes of a row add theirs once, at the end.
    row_sum[h] = row_sum[h] * correction[h] + tile_sum;
  }
}

template <class C>
__device__ __forceinline__ void rescale_output(float (&o)[C::kOutputRegisters], const float (&correction)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int d = 0; d < C::kHeadDim / 8; ++d) {
      o[4 * d + 2 * h] *= correction[h];
      o[4 * d + 2 * h + 1] *= correction[h];
    }
}

// P rounded to T, in wgmma's register-A layout (top of the file): k16 step kk of the keys.
template <class C>
__device__ __forceinline__ void pack_probabilities(unsigned (&a)[C::kKeySteps][4], const float (&s)[C::kScoreRegisters]) {
  using T = typename C::T;
#pragma unroll
  for (int kk = 0; kk < C::kKeySteps; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = pack_pair<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// O += P V, waited for. Every A fragment is packed before the fence: wgmma may read its A
// registers only after a fence that follows their last write.
template <class C>
__device__ __forceinline__ void multiply_pv(const float (&s)[C::kScoreRegisters], float (&o)[C::kOutputRegisters],
                                            unsigned v_tile) {
  unsigned a[C::kKeySteps][4];
  pack_probabilities<C>(a, s);
  wgmma_fence();
  issue_pv<C>(a, o, v_tile);
  wgmma_wait<0>();
  touch(o);
}

// The output rows of a warpgroup: the 4 lanes of a row add their partial sums; rows past the
// length are zeros whatever was computed for them, as are rows that saw no key. The quad's four
// 4-byte stores of a row and 8 columns fill one 16-byte piece of it.
template <class C>
__device__ __forceinline__ void store_output(const Params<typename C::T>& p, const float (&o)[C::kOutputRegisters],
                                             const float (&row_sum)[2], typename C::T* o_dst, int lane_row,
                                             int thread_in_group, int valid) {
  using T = typename C::T;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = lane_row + 8 * h;
    const float out_scale = row < valid && sum > 0.f ? fast_reciprocal(sum) : 0.f;
    if (row < p.seq) {
      T* out = o_dst + row * p.o_strides.row + 2 * thread_in_group;
#pragma unroll
      for (int d = 0; d < C::kHeadDim / 8; ++d)
        *reinterpret_cast<unsigned*>(out + 8 * d) =
            pack_pair<T>(o[4 * d + 2 * h] * out_scale, o[4 * d + 2 * h + 1] * out_scale);
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ---- the kernel -------------------------------------------------------------------------------

// Pipeline (cp.async groups committed in order; every step commits, empty or not, so the waits'
// counts hold in every iteration): Q | K0 | V0, then per tile t: wait K_t, fence, barrier, copy
// K_{t+1} | V_{t+1} into the other slot (free: both warpgroups waited for their last wgmma on
// tile t - 1 before this barrier), S; wait V_t, fence, barrier, P V.
// Two warpgroups of a block, and two blocks of an SM where registers and shared memory allow,
// interleave: one's softmax runs while another's wgmma do.
template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_wgmma_kernel(const Params<typename C::T> p, const float scale_log2) {
  grid_dependency_sync();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename C::T;
  extern __shared__ __align__(1024) unsigned char shared[];
  const unsigned q_smem = (shared_address(shared) + (kSwizzleAtomBytes - 1)) & ~(kSwizzleAtomBytes - 1);
  const unsigned kv_smem = q_smem + C::kQBytes;

  // The last query tiles see the most keys under a causal mask: they go first.
  const int q_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int warpgroup = warpgroup_index();
  const int warp_in_group = static_cast<int>(threadIdx.x) % kWarpgroupThreads / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int group = lane / 4, thread_in_group = lane % 4;
  const bool causal = p.mask == Mask::causal;

  const int valid = p.lengths ? min(max(p.lengths[batch], 0), p.seq) : p.seq;
  const int q0 = q_tile * C::kBlockQ;
  const int group_q0 = q0 + kWarpgroupRows * warpgroup;
  const int lane_row = group_q0 + 16 * warp_in_group + group;  // and lane_row + 8
  // Keys some query of the block may see; none when every query of the block is past the length.
  const int key_end = q0 >= valid ? 0 : (causal ? min(valid, q0 + C::kBlockQ) : valid);
  const int key_tiles = (key_end + C::kBlockK - 1) / C::kBlockK;

  float o[C::kOutputRegisters];
#pragma unroll
  for (int i = 0; i < C::kOutputRegisters; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  if (key_tiles > 0) {
    const T* q_src = p.q + batch * p.q_strides.batch + head * p.q_strides.head + q0 * p.q_strides.row;
    const T* k_src = p.k + batch * p.k_strides.batch + head * p.k_strides.head;
    const T* v_src = p.v + batch * p.v_strides.batch + head * p.v_strides.head;
    auto k_tile = [&](int t) { return kv_smem + static_cast<unsigned>(t % kStages) * C::kStageBytes; };
    const int tid = static_cast<int>(threadIdx.x);
    auto copy_kv = [&](int t) {
      copy_tile<C, C::kThreads, C::kBlockK>(k_tile(t), k_src + t * C::kBlockK * p.k_strides.row, p.k_strides.row,
                                            valid - t * C::kBlockK, tid);
      commit_async_copies();
      copy_tile<C, C::kThreads, C::kBlockK>(k_tile(t) + C::kTileBytes, v_src + t * C::kBlockK * p.v_strides.row,
                                            p.v_strides.row, valid - t * C::kBlockK, tid);
      commit_async_copies();
    };

    copy_tile<C, C::kThreads, C::kBlockQ>(q_smem, q_src, p.q_strides.row, valid - q0, tid);
    commit_async_copies();
    copy_kv(0);
    const unsigned q_rows = q_smem + static_cast<unsigned>(warpgroup * kWarpgroupRows * kSwizzleRowBytes);

    for (int t = 0; t < key_tiles; ++t) {
      const int k0 = t * C::kBlockK;
      // A warpgroup whose rows are all past the length, or all above this tile under the causal
      // mask, has nothing to add; it still takes part in the copies and barriers.
      const bool group_active = group_q0 < valid && (!causal || k0 <= group_q0 + kWarpgroupRows - 1);
      const bool masked = k0 + C::kBlockK > valid || (causal && k0 + C::kBlockK - 1 > group_q0);

      wait_async_copies<1>();  // Q and K_t have landed; V_t may not have
      fence_proxy_async_shared();
      __syncthreads();
      if (t + 1 < key_tiles) {
        copy_kv(t + 1);
      } else {
        commit_async_copies();
        commit_async_copies();
      }

      float s[C::kScoreRegisters];
      if (group_active) {
        multiply_qk<C>(s, q_rows, k_tile(t));
        float correction[2];
        softmax_scores<C>(s, row_max, row_sum, correction, scale_log2, masked, causal, k0 + 2 * thread_in_group,
                          lane_row, valid);
        rescale_output<C>(o, correction);
      }

      wait_async_copies<2>();  // V_t has landed
      fence_proxy_async_shared();
      __syncthreads();

      if (group_active) multiply_pv<C>(s, o, k_tile(t) + C::kTileBytes);
    }
  }

  store_output<C>(p, o, row_sum, p.o + batch * p.o_strides.batch + head * p.o_strides.head, lane_row,
                  thread_in_group, valid);
#else
  // Built for an architecture without wgmma; the host wrapper never launches this.
  __trap();
#endif
}

// A block's unit of work in the warp-specialised schedules: one query tile (rows q0..) of one
// batch row and head, its valid keys and the key tiles some query of it may see, in item_place's
// order. With one section of all B H heads the first items are every head's longest tile at
// once, and each reads its own head's K and V (B H S hd 4 bytes: 64 MB at (8, 16, 2048, 64),
// more than the L2) from DRAM; sections sized to the L2 keep the blocks that run together on a
// few heads, whose K and V tiles they then share in L2.
struct WorkItem {
  int head, batch, q0, valid, key_tiles;
};

template <class C>
__device__ __forceinline__ WorkItem work_item(int item, int q_tiles, int section_heads,
                                              const Params<typename C::T>& p) {
  const ItemPlace place = item_place(item, q_tiles, section_heads, p.heads * p.batch);
  WorkItem w;
  w.head = place.bh % p.heads, w.batch = place.bh / p.heads;
  w.q0 = place.q_tile * C::kBlockQ;
  w.valid = p.lengths ? min(max(p.lengths[w.batch], 0), p.seq) : p.seq;
  const int key_end = w.q0 >= w.valid ? 0 : (p.mask == Mask::causal ? min(w.valid, w.q0 + C::kBlockQ) : w.valid);
  w.key_tiles = (key_end + C::kBlockK - 1) / C::kBlockK;
  return w;
}

// The warp-specialised schedule (top of the file), two or three consumer warpgroups (three: a
// 192-row query tile at hd 64, whose K and V tiles then serve half as many rows again, and whose
// softmaxes have two warpgroups' products to hide under). Warpgroup 0 produces; warpgroup 1 + c
// consumes query rows 64c..64c+63 of an item. A block takes items
// blockIdx.x, blockIdx.x + gridDim.x, ...: one each when the grid has one block an item
// (pipeline 1), as many as it takes when the grid has one block an SM (pipeline 2, persistent:
// the producer loads the next item's Q and first K and V tiles while the consumers finish this
// one's, where a block an item waits for them at every start and leaves its SM idle at its end).
// The producer copies each item's Q tile into one of two Q slots, and streams the K and V tiles
// of every item, one after another, through a ring of kStages slots: the g-th tile the block
// loads (counted over its items) goes to slot g % kStages, and its full and empty barriers
// complete their phase g / kStages, so a waiter names parity (g / kStages) & 1, and the producer's
// wait for the slot's previous tile, (g / kStages + 1) & 1, passes at once on the fresh barrier
// for g < kStages; the Q slots the same with the block's n-th item. Every consumer warp hands
// back every tile the block loads, the tiles its rows do not see unread, and its Q slot once its
// last product is done, so each phase completes.
template <class C, bool kTma, bool kPingpong>
__global__ void __launch_bounds__(C::kThreads + kWarpgroupThreads, 1)
    flash_wgmma_specialised_kernel(const Params<typename C::T> p, const float scale_log2, const int q_tiles,
                                   const int items, const int section_heads, const __grid_constant__ TensorMaps maps) {
  grid_dependency_sync();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename C::T;
  static_assert(C::kWarpgroups == 2 || C::kWarpgroups == 3, "consumer_registers: two or three consumer warpgroups");
  extern __shared__ __align__(1024) unsigned char shared[];
  const unsigned q_smem = (shared_address(shared) + (kSwizzleAtomBytes - 1)) & ~(kSwizzleAtomBytes - 1);
  const unsigned kv_smem = q_smem + kQSlots * C::kQBytes;
  const unsigned barriers = kv_smem + kStages * C::kStageBytes;
  auto q_tile_at = [&](int slot) { return q_smem + static_cast<unsigned>(slot) * C::kQBytes; };
  auto k_tile = [&](int slot) { return kv_smem + static_cast<unsigned>(slot) * C::kStageBytes; };
  auto full_k = [&](int slot) { return barriers + 8u * static_cast<unsigned>(slot); };
  auto full_v = [&](int slot) { return barriers + 8u * static_cast<unsigned>(kStages + slot); };
  auto empty_k = [&](int slot) { return barriers + 8u * static_cast<unsigned>(2 * kStages + slot); };
  auto empty_v = [&](int slot) { return barriers + 8u * static_cast<unsigned>(3 * kStages + slot); };
  auto full_q = [&](int slot) { return barriers + 8u * static_cast<unsigned>(4 * kStages + slot); };
  auto empty_q = [&](int slot) { return barriers + 8u * static_cast<unsigned>(4 * kStages + kQSlots + slot); };

  const int warpgroup = warpgroup_index();
  const int tid = static_cast<int>(threadIdx.x) % kWarpgroupThreads;  // within the warpgroup
  const bool causal = p.mask == Mask::causal;
  constexpr unsigned kConsumerWarps = C::kWarpgroups * kWarpgroupThreads / kWarpSize;

  // A full barrier: every producer thread once its copies landed, or (TMA) the one producer
  // thread's expect_tx and the tile's bytes.
  constexpr unsigned kFullArrivals = kTma ? 1 : kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < kStages; ++slot) {
      mbarrier_init(full_k(slot), kFullArrivals);
      mbarrier_init(full_v(slot), kFullArrivals);
      mbarrier_init(empty_k(slot), kConsumerWarps);  // every consumer warp
      mbarrier_init(empty_v(slot), kConsumerWarps);
    }
    for (int slot = 0; slot < kQSlots; ++slot) {
      mbarrier_init(full_q(slot), kFullArrivals);
      mbarrier_init(empty_q(slot), kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0 && kTma) {
    registers_decrease<kProducerRegisters>();
    if (tid != 0) return;
    prefetch_tensor_map(&maps.q);
    prefetch_tensor_map(&maps.k);
    prefetch_tensor_map(&maps.v);
    constexpr int kColumnBlocks = C::kHeadDim / kSwizzleRowElements;
    constexpr unsigned kQColumnBlockBytes = C::kBlockQ * kSwizzleRowBytes;
    constexpr unsigned kKvColumnBlockBytes = C::kBlockK * kSwizzleRowBytes;
    unsigned g = 0;
    int n = 0;
    for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x), ++n) {
      const WorkItem w = work_item<C>(item, q_tiles, section_heads, p);
      const int q_slot = n % kQSlots;
      mbarrier_wait(empty_q(q_slot), static_cast<unsigned>((n / kQSlots + 1) & 1));
      mbarrier_arrive_expect_tx(full_q(q_slot), C::kQBytes);
#pragma unroll
      for (int cb = 0; cb < kColumnBlocks; ++cb)
        tma_load_4d(q_tile_at(q_slot) + cb * kQColumnBlockBytes, &maps.q, cb * kSwizzleRowElements, w.q0, w.head,
                    w.batch, full_q(q_slot));
      for (int t = 0; t < w.key_tiles; ++t, ++g) {
        const int slot = static_cast<int>(g % kStages);
        const unsigned parity = (g / kStages + 1) & 1;
        mbarrier_wait(empty_k(slot), parity);
        mbarrier_arrive_expect_tx(full_k(slot), C::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < kColumnBlocks; ++cb)
          tma_load_4d(k_tile(slot) + cb * kKvColumnBlockBytes, &maps.k, cb * kSwizzleRowElements, t * C::kBlockK,
                      w.head, w.batch, full_k(slot));
        mbarrier_wait(empty_v(slot), parity);
        mbarrier_arrive_expect_tx(full_v(slot), C::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < kColumnBlocks; ++cb)
          tma_load_4d(k_tile(slot) + C::kTileBytes + cb * kKvColumnBlockBytes, &maps.v, cb * kSwizzleRowElements,
                      t * C::kBlockK, w.head, w.batch, full_v(slot));
      }
    }
    return;
  }
  if (warpgroup == 0) {
    registers_decrease<kProducerRegisters>();
    // Each copy group is announced once this thread's copies of it have landed, one group later,
    // so that a copy is always in flight behind the wait.
    unsigned pending = 0;
    bool any_pending = false;
    auto commit_and_announce_previous = [&](unsigned bar) {
      commit_async_copies();
      if (any_pending) {
        wait_async_copies<1>();
        fence_proxy_async_shared();
        mbarrier_arrive(pending);
      }
      pending = bar, any_pending = true;
    };
    unsigned g = 0;
    int n = 0;
    for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x), ++n) {
      const WorkItem w = work_item<C>(item, q_tiles, section_heads, p);
      const int valid = w.valid, q0 = w.q0;
      const int q_slot = n % kQSlots;
      mbarrier_wait(empty_q(q_slot), static_cast<unsigned>((n / kQSlots + 1) & 1));
      copy_tile<C, kWarpgroupThreads, C::kBlockQ, C::kBlockQ, 1>(
          q_tile_at(q_slot), p.q + w.batch * p.q_strides.batch + w.head * p.q_strides.head + q0 * p.q_strides.row,
          p.q_strides.row, valid - q0, tid);
      commit_and_announce_previous(full_q(q_slot));
      const T* k_src = p.k + w.batch * p.k_strides.batch + w.head * p.k_strides.head;
      const T* v_src = p.v + w.batch * p.v_strides.batch + w.head * p.v_strides.head;
      for (int t = 0; t < w.key_tiles; ++t, ++g) {
        const int slot = static_cast<int>(g % kStages);
        const unsigned parity = (g / kStages + 1) & 1;
        mbarrier_wait(empty_k(slot), parity);
        copy_tile<C, kWarpgroupThreads, C::kBlockK, C::kBlockK, 1>(
            k_tile(slot), k_src + t * C::kBlockK * p.k_strides.row, p.k_strides.row, valid - t * C::kBlockK, tid);
        commit_and_announce_previous(full_k(slot));
        mbarrier_wait(empty_v(slot), parity);
        copy_tile<C, kWarpgroupThreads, C::kBlockK, C::kBlockK, 1>(k_tile(slot) + C::kTileBytes,
                                                                   v_src + t * C::kBlockK * p.v_strides.row,
                                                                   p.v_strides.row, valid - t * C::kBlockK, tid);
        commit_and_announce_previous(full_v(slot));
      }
    }
    if (any_pending) {
      wait_async_copies<0>();
      fence_proxy_async_shared();
      mbarrier_arrive(pending);
    }
    return;
  }

  registers_increase<consumer_registers(C::kWarpgroups)>();
  const int consumer = warpgroup - 1;
  const int warp_in_group = tid / kWarpSize, lane = tid % kWarpSize;
  const int group = lane / 4, thread_in_group = lane % 4;
  auto release = [&](unsigned bar) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  // A turn's barrier counts the warpgroup taking it and the one passing it.
  constexpr unsigned kTurnThreads = 2 * kWarpgroupThreads;
  auto take_turn = [&] {
    if constexpr (kPingpong) named_barrier_sync(kTurnBarrier + static_cast<unsigned>(consumer), kTurnThreads);
  };
  auto pass_turn = [&] {
    if constexpr (kPingpong)
      named_barrier_arrive(kTurnBarrier + static_cast<unsigned>((consumer + 1) % C::kWarpgroups), kTurnThreads);
  };
  if constexpr (kPingpong)
    if (consumer == C::kWarpgroups - 1) pass_turn();  // warpgroup 0 takes the first turn
  unsigned g = 0;  // the ring's tiles before this item's (modulo 2^32: kStages divides it)
  int n = 0;
  for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x), ++n) {
    const WorkItem w = work_item<C>(item, q_tiles, section_heads, p);
    const int valid = w.valid, q0 = w.q0, key_tiles = w.key_tiles;
    const int group_q0 = q0 + kWarpgroupRows * consumer;
    const int lane_row = group_q0 + 16 * warp_in_group + group;  // and lane_row + 8
    // Keys this warpgroup's rows may see: its tiles are the item's first group_tiles.
    const int group_key_end = group_q0 >= valid ? 0 : (causal ? min(valid, group_q0 + kWarpgroupRows) : valid);
    const int group_tiles = (group_key_end + C::kBlockK - 1) / C::kBlockK;
    auto slot_of = [&](int t) { return static_cast<int>((g + static_cast<unsigned>(t)) % kStages); };
    auto parity_of = [&](int t) { return ((g + static_cast<unsigned>(t)) / kStages) & 1; };

    float o[C::kOutputRegisters];
#pragma unroll
    for (int i = 0; i < C::kOutputRegisters; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    const int q_slot = n % kQSlots;
    mbarrier_wait(full_q(q_slot), static_cast<unsigned>((n / kQSlots) & 1));
    const unsigned q_rows = q_tile_at(q_slot) + static_cast<unsigned>(consumer * kWarpgroupRows * kSwizzleRowBytes);
    if (group_tiles > 0) {
      float s[C::kScoreRegisters];
      unsigned probabilities[C::kKeySteps][4];
      float correction[2];
      auto softmax = [&](int t) {
        const int k0 = t * C::kBlockK;
        const bool masked = k0 + C::kBlockK > valid || (causal && k0 + C::kBlockK - 1 > group_q0);
        softmax_scores<C>(s, row_max, row_sum, correction, scale_log2, masked, causal, k0 + 2 * thread_in_group,
                          lane_row, valid);
      };

      mbarrier_wait(full_k(slot_of(0)), parity_of(0));
      if constexpr (kPingpong) {
        take_turn();
        issue_qk<C>(s, q_rows, k_tile(slot_of(0)));
        pass_turn();
        wgmma_wait<0>();
        touch(s);
      } else {
        multiply_qk<C>(s, q_rows, k_tile(slot_of(0)));
      }
      release(empty_k(slot_of(0)));
      softmax(0);  // O is still zero: nothing to rescale
      pack_probabilities<C>(probabilities, s);
      for (int t = 1; t < group_tiles; ++t) {
        const int slot = slot_of(t), previous = slot_of(t - 1);
        mbarrier_wait(full_k(slot), parity_of(t));
        if constexpr (kPingpong) {
          mbarrier_wait(full_v(previous), parity_of(t - 1));
          take_turn();
        }
        issue_qk<C>(s, q_rows, k_tile(slot));
        if constexpr (!kPingpong) mbarrier_wait(full_v(previous), parity_of(t - 1));
        // A fence of its own (ptxas injects one otherwise, to cover register moves since the last):
        // it orders register accesses only, so the S products in flight run on.
        wgmma_fence();
        issue_pv<C>(probabilities, o, k_tile(previous) + C::kTileBytes);
        pass_turn();
        wgmma_wait<1>();  // S of tile t has landed; P V of tile t - 1 runs on beside the softmax
        touch(s);
        release(empty_k(slot));
        softmax(t);
        wgmma_wait<0>();
        touch(o);
        release(empty_v(previous));
        rescale_output<C>(o, correction);
        pack_probabilities<C>(probabilities, s);
      }
      const int last = slot_of(group_tiles - 1);
      mbarrier_wait(full_v(last), parity_of(group_tiles - 1));
      take_turn();
      wgmma_fence();
      issue_pv<C>(probabilities, o, k_tile(last) + C::kTileBytes);
      pass_turn();
      wgmma_wait<0>();
      touch(o);
      release(empty_v(last));
    }
    release(empty_q(q_slot));  // its last product that read Q has been waited for
    // Pingpong: a warpgroup with no tiles of its own passes its first turn before handing any back.
    if (kPingpong && group_tiles == 0) {
      take_turn();
      pass_turn();
    }
    for (int t = group_tiles; t < key_tiles; ++t) {  // loaded for the other warpgroup's rows
      mbarrier_wait(full_k(slot_of(t)), parity_of(t));
      release(empty_k(slot_of(t)));
      mbarrier_wait(full_v(slot_of(t)), parity_of(t));
      release(empty_v(slot_of(t)));
      if constexpr (kPingpong) {  // a spare turn, once the tile is handed back
        take_turn();
        pass_turn();
      }
    }
    g += static_cast<unsigned>(key_tiles);

    store_output<C>(p, o, row_sum, p.o + w.batch * p.o_strides.batch + w.head * p.o_strides.head, lane_row,
                    thread_in_group, valid);
  }
  // The last warpgroup's opening pass is left over: warpgroup 0 takes it, so no bar.arrive outlives the block.
  if constexpr (kPingpong)
    if (consumer == 0) take_turn();
#else
  // Built for an architecture without wgmma; the host wrapper never launches this.
  __trap();
#endif
}

// ---- host side --------------------------------------------------------------------------------

template <class C>
cudaError_t launch(const Params<typename C::T>& p, int pipeline, int sections, bool pingpong, cudaStream_t stream) {
  const std::size_t smem = shared_bytes(C::kWarpgroups, C::kBlockK, C::kHeadDim, pipeline);
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  const int q_tiles = (p.seq + C::kBlockQ - 1) / C::kBlockQ;
  if (pipeline == 0) {
    if constexpr (C::kWarpgroups <= 2) {
      auto kernel = flash_wgmma_kernel<C>;
      if (cudaError_t e =
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
          e != cudaSuccess)
        return e;
      const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
      kernel<<<grid, C::kThreads, smem, stream>>>(p, p.scale * kLog2e);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;  // valid_config: three warpgroups need the producer's schedules
    }
  }
  if constexpr (C::kWarpgroups >= 2) {
    const bool tma = pipeline == 3;
    auto specialised = tma ? (pingpong ? flash_wgmma_specialised_kernel<C, true, true>
                                       : flash_wgmma_specialised_kernel<C, true, false>)
                           : (pingpong ? flash_wgmma_specialised_kernel<C, false, true>
                                       : flash_wgmma_specialised_kernel<C, false, false>);
    if (cudaError_t e =
            cudaFuncSetAttribute(specialised, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        e != cudaSuccess)
      return e;
    const std::int64_t items = std::int64_t{q_tiles} * p.heads * p.batch;
    if (items > INT_MAX) return cudaErrorInvalidConfiguration;  // the kernel counts items in an int
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    // Pipeline 1: a block an item; 2 and 3: a block an SM (one fits: __launch_bounds__ and the ring).
    std::int64_t blocks = items;
    if (pipeline >= 2) {
      int sms = 0;
      if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess)
        return e;
      blocks = std::min<std::int64_t>(items, sms);
    }
    const int heads_all = p.heads * p.batch;
    int section_heads = heads_all;
    if (sections > 0) {
      int l2_bytes = 0;
      if (cudaError_t e = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device); e != cudaSuccess)
        return e;
      section_heads = l2_section_heads(l2_bytes, sections, p.seq, C::kHeadDim, sizeof(typename C::T), heads_all);
    }
    TensorMaps maps{};
    if (tma) {
      // [B, H, S, hd] through the strides, innermost first; boxes of 64 hd (one swizzle row).
      using T = typename C::T;
      const auto encode = [&](CUtensorMap& map, const T* base, const Strides& st, int rows) {
        return encode_swizzled_128<T, 4>(map, base, {C::kHeadDim, p.seq, p.heads, p.batch},
                                         {st.row, st.head, st.batch}, {kSwizzleRowElements, rows, 1, 1});
      };
      if (cudaError_t e = encode(maps.q, p.q, p.q_strides, C::kBlockQ); e != cudaSuccess) return e;
      if (cudaError_t e = encode(maps.k, p.k, p.k_strides, C::kBlockK); e != cudaSuccess) return e;
      if (cudaError_t e = encode(maps.v, p.v, p.v_strides, C::kBlockK); e != cudaSuccess) return e;
    }
    specialised<<<static_cast<unsigned>(blocks), C::kThreads + kWarpgroupThreads, smem, stream>>>(
        p, p.scale * kLog2e, q_tiles, static_cast<int>(items), section_heads, maps);
    return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

template <typename T, int kHeadDim, int kWarpgroups>
cudaError_t launch_block_k(const Params<T>& p, const FlashWgmmaConfig& config, cudaStream_t stream) {
  switch (config.block_k) {
    case 64:
      return launch<Tiling<T, kHeadDim, kWarpgroups, 64>>(p, config.pipeline, config.sections,
                                                          config.pingpong != 0, stream);
    case 128:
      return launch<Tiling<T, kHeadDim, kWarpgroups, 128>>(p, config.pipeline, config.sections,
                                                           config.pingpong != 0, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int kHeadDim>
cudaError_t launch_warpgroups(const Params<T>& p, const FlashWgmmaConfig& config, cudaStream_t stream) {
  switch (config.warpgroups) {
    case 1: return launch_block_k<T, kHeadDim, 1>(p, config, stream);
    case 2: return launch_block_k<T, kHeadDim, 2>(p, config, stream);
    case 3:
      if constexpr (kHeadDim == 64)
        return launch_block_k<T, kHeadDim, 3>(p, config, stream);
      else
        return cudaErrorNotSupported;  // consumer_registers: O, S and P fit 160 registers at hd 64 only
    default: return cudaErrorInvalidValue;
  }
}

bool valid_config(const FlashWgmmaConfig& c) {
  return c.warpgroups >= 1 && c.warpgroups <= 3 && (c.block_k == 64 || c.block_k == 128) &&
         (c.pipeline == 0 ? c.warpgroups <= 2 : c.pipeline >= 1 && c.pipeline <= 3 && c.warpgroups >= 2) &&
         (c.sections == 0 || (c.sections >= 1 && c.sections <= 3 && c.pipeline != 0)) &&
         (c.pingpong == 0 || (c.pingpong == 1 && c.pipeline != 0));
}

}  // namespace

bool flash_wgmma_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

std::size_t flash_wgmma_shared_bytes(const FlashWgmmaConfig& config, int head_dim) {
  return shared_bytes(config.warpgroups, config.block_k, head_dim, config.pipeline);
}

template <typename T>
cudaError_t flash_wgmma_forward(const Params<T>& p, const FlashWgmmaConfig& config, cudaStream_t stream) {
  if (!valid_config(config)) return cudaErrorInvalidValue;
  if (!flash_wgmma_head_dim_supported(p.head_dim)) return cudaErrorNotSupported;
  if (p.rounded) return cudaErrorNotSupported;  // fp32 scores, unnormalised P: not a materialised attention's rounding
  if (config.pipeline == 3 && p.lengths) return cudaErrorNotSupported;  // TMA cannot zero keys past a row's length
  if (cudaError_t e = check_params(p); e != cudaSuccess) return e;
  if (cudaError_t e = require_sm90(); e != cudaSuccess) return e;
  switch (p.head_dim) {
    case 64: return launch_warpgroups<T, 64>(p, config, stream);
    case 128: return launch_warpgroups<T, 128>(p, config, stream);
    default: return cudaErrorNotSupported;
  }
}

template cudaError_t flash_wgmma_forward<__half>(const Params<__half>&, const FlashWgmmaConfig&, cudaStream_t);
template cudaError_t flash_wgmma_forward<__nv_bfloat16>(const Params<__nv_bfloat16>&, const FlashWgmmaConfig&,
                                                        cudaStream_t);

}  // namespace shapetune::kernels::attention
