// flash_mma: FlashAttention-2's forward pass on mma.sync (sm_80+).
//
// Data flow of one block (one query tile of block_q = 16 * warps rows of one batch row and head):
//   Q tile --cp.async--> shared --ldmatrix--> A fragments, kept in registers for the whole block.
//   For each key tile of block_k rows (only those some query of the tile may see):
//     K, V tiles --cp.async (zero-filled past the valid keys)--> shared, `stages` deep.
//     S = Q K^T per warp (16 x block_k, fp32 accumulators): K is [keys, hd] row-major, i.e. the
//       mma's column-major B, read by plain ldmatrix.
//     Online softmax on the accumulators: masked scores -inf, row max over the 4 lanes that share
//       a row (shuffles), P = exp2(s scale log2(e) - max scale log2(e)) by one fma, O and the
//       lane's partial row sums rescaled by exp2(old max - new max).
//     O += P V: P's accumulator registers are the A fragment of the next mma (below), rounded to
//       T (or TF32); V is [keys, hd] row-major, a K-major B, read by ldmatrix.trans (16-bit) or
//       by 32-bit loads (TF32: .trans would split the floats).
//   O / (row sum) --the warp's rows of the Q tile's shared memory--> 16-byte global stores.
//
// The rounded mode (Params::rounded, a template flag: the plain instantiations do not change)
// rounds where a framework's materialised attention rounds, st() = round to T: S = st(st(Q K^T)
// scale), P = st(exp(S - max) / sum) normalised before P V. P needs the row's final max and sum,
// so the block walks its key tiles twice, as one pipeline of 2 * key_tiles steps: pass 1 takes S
// and the exact row max and the fp32 sum of exp(S - max) (rescaled online, no V loads, no P V);
// pass 2 takes the same S again (the same mma on the same tiles: bit-identical), P in fp32 with
// the final max and sum, rounded to T as it becomes the A fragment, and O += P V as the plain
// mode does, no rescaling and no division at the end. The exponentials are the MUFU's ex2 of
// (S - max) log2(e) and P is a product by the sum's reciprocal: each within a few fp32 ulps of
// expf and an IEEE division, which moves a stored P across a rounding boundary of T about as often
// as the order of the fp32 sums does (the rounded tolerance's "flipped probability"), for a third
// of the instructions per score: the softmax's arithmetic, not the mma, bounds this mode at small
// head dimensions. TF32: P is rounded to TF32 by the
// mma operand conversion, so the rounded tf32 primitive differs from its definition (st() = the
// identity on fp32) by that rounding of P, as the plain tf32 mode rounds its unnormalised P.
// The rounded mode in one pass (FlashMmaConfig::passes 1) rounds S as above and then runs the
// plain mode's online softmax on it: half the key tiles' work, P not stored as the definition
// stores it (FlashMmaConfig says what that costs).
//
// P from accumulator to A fragment (groupID g = lane / 4, t = lane % 4): the accumulator of score
// tile j holds (row g, keys 8j + 2t, +1) in c0, c1 and (row g + 8, the same keys) in c2, c3.
//   m16n8k16: a0..a3 = (g, k 2t..2t+1), (g + 8, k 2t..), (g, k 2t+8..), (g + 8, k 2t+8..), so
//     the A fragment of keys 16kk..16kk+15 is pack(c0, c1), pack(c2, c3) of tile 2kk and the same
//     of tile 2kk + 1: no data moves between lanes.
//   m16n8k8 TF32: a0..a3 = (g, k t), (g + 8, k t), (g, k t+4), (g + 8, k t+4), one element per
//     register. A product's depth may run over its keys in any order as long as the A columns and
//     the B rows agree, so the k-step of tile j takes depth index t as key 8j + 2t and t + 4 as key
//     8j + 2t + 1: a = (c0, c2, c1, c3), and B's rows t and t + 4 are read from V rows 8j + 2t and
//     8j + 2t + 1.
//
// Every tile row in shared memory is padded by 16 bytes: row strides of an odd multiple of 16
// bytes put the 8 rows one ldmatrix matrix reads (and the key rows 0, 2, 4, 6 of the TF32 V loads)
// in distinct banks, for head dimensions (80, 96) whose rows are not a power-of-two number of
// chunks, which the XOR swizzle of the GEMM needs.
#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/async_copy.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/mma.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/shared_address.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Below sm_80 the kernel compiles to a trap (no cp.async, no bf16/tf32 mma, no m16n8k16), so the
// device helpers below go unused in this pass by design.
#pragma nv_diag_suppress 177
#endif

namespace shapetune::kernels::attention {
namespace {

constexpr int kWarpSize = 32;
constexpr int kRowPadBytes = 16;  // see the top of the file
constexpr int kMmaRows = 16;      // query rows of a warp, the mma's M
constexpr int kDefaultSharedLimit = 48 * 1024;
// Tiles of 128 keys are built up to hd 128: at hd 256 their 64 fp32 scores a thread beside O's
// 128 would spill.
constexpr int kMaxHeadDimOfWideKeyTiles = 128;

// hd 8 computes as hd 16, its columns 8-15 zero in shared memory: a k-step of Q K^T spans 16
// halves (8 floats, two k-steps for TF32), and one ldmatrix.x4 of V feeds two n tiles of O.
constexpr int compute_head_dim(int head_dim) { return head_dim < 16 ? 16 : head_dim; }

constexpr std::size_t padded_row_bytes(int head_dim, int element_bytes) {
  return static_cast<std::size_t>(compute_head_dim(head_dim)) * element_bytes + kRowPadBytes;
}
constexpr std::size_t shared_bytes(int warps, int block_k, int stages, int head_dim, int element_bytes) {
  // The Q tile, then `stages` pairs of K and V tiles.
  return (static_cast<std::size_t>(kMmaRows) * warps + static_cast<std::size_t>(stages) * 2 * block_k) *
         padded_row_bytes(head_dim, element_bytes);
}

// The three modes: plain (fp32 scores), the rounded mode in two passes (above), and in one pass:
// S rounded as the two-pass mode rounds it, then the plain mode's online softmax on it, P kept in
// fp32 until the P V operand's rounding (top of FlashMmaConfig::passes says what that costs).
enum class Mode { plain, rounded_two_pass, rounded_scores };

template <typename TArg, int kHeadDimArg, int kWarpsArg, int kBlockKArg, Mode kModeArg = Mode::plain>
struct Tiling {
  using T = TArg;
  static constexpr bool kTf32 = sizeof(T) == 4;
  static constexpr bool kRounded = kModeArg == Mode::rounded_two_pass;  // (top of the file)
  static constexpr bool kRoundScores = kModeArg == Mode::rounded_scores;
  // kDataDim: the tensors' hd; kHeadDim: the width computed (compute_head_dim).
  static constexpr int kDataDim = kHeadDimArg, kHeadDim = compute_head_dim(kHeadDimArg);
  static constexpr int kWarps = kWarpsArg, kBlockK = kBlockKArg;
  static constexpr int kThreads = kWarpSize * kWarps;
  static constexpr int kBlockQ = kMmaRows * kWarps;
  static constexpr int kRowBytes = static_cast<int>(padded_row_bytes(kHeadDim, sizeof(T)));
  static constexpr int kChunkElements = kChunkBytes / static_cast<int>(sizeof(T));
  static constexpr int kChunksPerRow = kHeadDim / kChunkElements;
  static constexpr int kDataChunksPerRow = kDataDim / kChunkElements;  // the rest of a row zero-filled
  // A k-step of S = Q K^T spans two chunks of hd: 16 halves or 8 floats.
  static constexpr int kDimSteps = kChunksPerRow / 2;
  static constexpr int kKeyTiles = kBlockK / 8;  // n tiles of S, k-steps of P V in TF32
  static constexpr int kDimTiles = kHeadDim / 8;  // n tiles of O
  static constexpr int kTileBytes = kBlockK * kRowBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kQBytes = kBlockQ * kRowBytes;
  // Q's fragments (kDimSteps * 4 registers) stay in registers for the whole block where that
  // leaves room for the rest: for 16-bit types up to hd 128 (32 registers), for TF32 up to hd 64.
  // TF32 at hd 80-128 (40-64 registers) beside the fp32 O and S spilled under the 255-register
  // cap, as would hd 256 (64 registers beside O's 128), so there each warp reads its Q fragments
  // from shared memory again, one k-step at a time, for every key tile.
  static constexpr bool kQInRegisters = kHeadDim <= (kTf32 ? 64 : 128);
  static_assert(kHeadDim % 16 == 0, "whole k-steps for both element sizes, an even number of O tiles");
  static_assert(kRowBytes % 32 == 16, "rows an odd number of 16-byte chunks apart: conflict-free fragment loads");
  static_assert(kKeyTiles % 2 == 0 && kDimTiles % 2 == 0, "one ldmatrix.x4 feeds two n tiles");
};

// ---- device helpers ---------------------------------------------------------------------------

// Copies a tile of kRows rows of hd elements into shared memory at `dst` (padded rows): rows
// below valid_rows from `src` (row stride `stride` elements), the rest zero-filled, so keys and
// queries past the end (or past the batch row's length) hold zeros rather than whatever the
// buffer holds there (0 * NaN would reach every output of the P V product); so are the columns
// past kDataDim where the kernel computes a wider hd. Consecutive threads copy consecutive
// chunks of a row: coalesced.
template <class C, int kRows>
__device__ __forceinline__ void copy_tile(unsigned dst, const typename C::T* src, std::int64_t stride,
                                          int valid_rows) {
  constexpr int kChunks = kRows * C::kChunksPerRow;
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < (kChunks + C::kThreads - 1) / C::kThreads; ++i) {
    const int chunk = tid + i * C::kThreads;
    if (kChunks % C::kThreads == 0 || chunk < kChunks) {
      const int row = chunk / C::kChunksPerRow, col = chunk % C::kChunksPerRow;
      const bool inside = row < valid_rows && col < C::kDataChunksPerRow;
      copy_async_16_zfill(dst + static_cast<unsigned>(row * C::kRowBytes + col * kChunkBytes),
                          inside ? src + row * stride + col * C::kChunkElements : src, inside ? kChunkBytes : 0);
    }
  }
}

// The A fragments of the warp's 16 Q rows. q_lane: this lane's ldmatrix row address; the
// matrices are rows 0-7 | rows 8-15 at chunk 0, then the same at chunk 1 = a0..a3, for TF32 too
// (a chunk is one 4-float row of an 8 x 4 matrix, as the m16n8k8 A layout has it).
template <class C>
__device__ __forceinline__ void load_q(unsigned (&q)[C::kDimSteps][4], unsigned q_lane) {
#pragma unroll
  for (int ks = 0; ks < C::kDimSteps; ++ks) {
    ldmatrix_x4(q[ks], q_lane + static_cast<unsigned>(ks * 2 * kChunkBytes));
    if constexpr (C::kTf32) {
#pragma unroll
      for (int e = 0; e < 4; ++e) q[ks][e] = to_tf32(q[ks][e]);
    }
  }
}

// S = Q K^T for the warp's 16 rows and the tile's block_k keys. k_lane: this lane's ldmatrix row
// address in the K tile; its matrices are (keys 0-7, chunk 0), (keys 0-7, chunk 1), (keys 8-15,
// chunk 0), (keys 8-15, chunk 1) = b0, b1 of two score tiles. For TF32 a chunk is one 4-float row
// of an 8 x 4 matrix, which lands in the m16n8k8 B layout as it stands. Q's fragments come from
// `q` (kQInRegisters) or, one k-step at a time, from the Q tile at q_lane (load_q's address).
template <class C>
__device__ __forceinline__ void multiply_qk(float (&s)[C::kKeyTiles][4], const unsigned (&q)[C::kDimSteps][4],
                                            unsigned q_lane, unsigned k_lane) {
#pragma unroll
  for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < C::kDimSteps; ++ks) {
    unsigned q_step[4];
    if constexpr (C::kQInRegisters) {
#pragma unroll
      for (int e = 0; e < 4; ++e) q_step[e] = q[ks][e];
    } else {
      ldmatrix_x4(q_step, q_lane + static_cast<unsigned>(ks * 2 * kChunkBytes));
      if constexpr (C::kTf32) {
#pragma unroll
        for (int e = 0; e < 4; ++e) q_step[e] = to_tf32(q_step[e]);
      }
    }
#pragma unroll
    for (int jp = 0; jp < C::kKeyTiles / 2; ++jp) {
      unsigned b[4];
      ldmatrix_x4(b, k_lane + static_cast<unsigned>(jp * 16 * C::kRowBytes + ks * 2 * kChunkBytes));
      if constexpr (C::kTf32) {
#pragma unroll
        for (int e = 0; e < 4; ++e) b[e] = to_tf32(b[e]);
      }
      const unsigned b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      Mma<typename C::T>::run(s[2 * jp], q_step, b_lo);
      Mma<typename C::T>::run(s[2 * jp + 1], q_step, b_hi);
    }
  }
}

// -inf for the tile's keys that lie past the valid keys or, under the causal mask, above the
// diagonal: key first_key + 8 j + (e & 1) of row first_row + 8 (e >> 1) in s[j][e] (the lane's
// accumulator layout, top of the file).
template <class C>
__device__ __forceinline__ void mask_scores(float (&s)[C::kKeyTiles][4], bool causal, int first_key, int first_row,
                                           int valid_keys) {
#pragma unroll
  for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = first_key + 8 * j + (e & 1), row = first_row + 8 * (e >> 1);
      if (key >= valid_keys || (causal && key > row)) s[j][e] = -INFINITY;
    }
}

// Turns the tile's scores into probabilities against the running row maxima and rescales what
// was accumulated under the old maxima. h = 0, 1: the lane's rows g and g + 8. `masked`: some key
// of the tile lies past the valid keys or above the diagonal for some row of the warp (only then
// are keys compared one by one). The maxima are of the unscaled scores (scale > 0 keeps their
// order), so that each exponential takes one fma, s scale log2(e) - max scale log2(e), rather
// than a product and a difference. A row with no unmasked key so far keeps max -inf: it takes its
// exponentials against 0 instead, so they come out 0, not NaN.
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[C::kKeyTiles][4], float (&o)[C::kDimTiles][4],
                                               float (&row_max)[2], float (&row_sum)[2], float scale_log2,
                                               bool masked, bool causal, int first_key, int first_row,
                                               int valid_keys) {
  if (masked) mask_scores<C>(s, causal, first_key, first_row, valid_keys);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max[h], tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max * scale_log2;
    const float correction = fast_exp2(row_max[h] * scale_log2 - base);  // 0 while the row had nothing
    row_max[h] = new_max;
    float tile_sum = 0.f;
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[j][e] = fast_exp2(fmaf(s[j][e], scale_log2, -base));
        tile_sum += s[j][e];
      }
    // The lane's share only: the 4 lanes of a row add theirs once, at the end.
    row_sum[h] = row_sum[h] * correction + tile_sum;
#pragma unroll
    for (int d = 0; d < C::kDimTiles; ++d) {
      o[d][2 * h] *= correction;
      o[d][2 * h + 1] *= correction;
    }
  }
}

// O += P V. 16-bit: v_lane is the lane's ldmatrix.trans row address in the V tile, matrices
// (keys 0-7, chunk 0), (keys 8-15, chunk 0), (keys 0-7, chunk 1), (keys 8-15, chunk 1) = b0, b1
// of two O tiles. TF32: v_lane is V row 2t, column g (see the top of the file for the order).
template <class C>
__device__ __forceinline__ void multiply_pv(const float (&p)[C::kKeyTiles][4], float (&o)[C::kDimTiles][4],
                                            unsigned v_lane) {
  using T = typename C::T;
  if constexpr (C::kTf32) {
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j) {
      const unsigned a[4] = {to_tf32(__float_as_uint(p[j][0])), to_tf32(__float_as_uint(p[j][2])),
                             to_tf32(__float_as_uint(p[j][1])), to_tf32(__float_as_uint(p[j][3]))};
#pragma unroll
      for (int d = 0; d < C::kDimTiles; ++d) {
        const unsigned address = v_lane + static_cast<unsigned>(j * 8 * C::kRowBytes + d * 8 * 4);
        const unsigned b[2] = {to_tf32(load_shared_u32(address)), to_tf32(load_shared_u32(address + C::kRowBytes))};
        Mma<T>::run(o[d], a, b);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < C::kKeyTiles / 2; ++kk) {
      const unsigned a[4] = {pack_pair<T>(p[2 * kk][0], p[2 * kk][1]), pack_pair<T>(p[2 * kk][2], p[2 * kk][3]),
                             pack_pair<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                             pack_pair<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < C::kDimTiles / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, v_lane + static_cast<unsigned>(kk * 16 * C::kRowBytes + dp * 2 * kChunkBytes));
        const unsigned b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
        Mma<T>::run(o[2 * dp], a, b_lo);
        Mma<T>::run(o[2 * dp + 1], a, b_hi);
      }
    }
  }
}

// ---- the rounded mode's softmax ---------------------------------------------------------------

// st() of two values: rounded to the storage type T and back (the identity for TF32's float), by
// one packed conversion and two widenings.
template <typename T>
__device__ __forceinline__ void stored_pair(float& lo, float& hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const float2 wide = __half22float2(__floats2half2_rn(lo, hi));
    lo = wide.x, hi = wide.y;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const float2 wide = __bfloat1622float2(__floats2bfloat162_rn(lo, hi));
    lo = wide.x, hi = wide.y;
  }
}

// The tile's scores as a materialised attention stores them, S = st(st(q . k) scale). The product
// by __fmul_rn is never contracted into a later subtraction, so every use of a score, in both
// passes, sees the same value.
template <class C>
__device__ __forceinline__ void round_scores(float (&s)[C::kKeyTiles][4], float scale) {
  using T = typename C::T;
#pragma unroll
  for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // (c0, c1) and (c2, c3): two keys of one row
      stored_pair<T>(s[j][e], s[j][e + 1]);
      s[j][e] = __fmul_rn(s[j][e], scale), s[j][e + 1] = __fmul_rn(s[j][e + 1], scale);
      stored_pair<T>(s[j][e], s[j][e + 1]);
    }
}

// exp(s - max) as ex2(s log2(e) - max log2(e)): one fma and the MUFU (see the top of the file).
__device__ __forceinline__ float exp_below(float s, float max_log2e) {
  return fast_exp2(fmaf(s, kLog2e, -max_log2e));
}

// Pass 1: the lane's running max of its scores in rows g and g + 8 (h = 0, 1), exact, and the sum
// of exp(s - max) over them in fp32, rescaled by exp(old max - new max) when the max grows. The
// 4 lanes of a row merge theirs after the last tile (merge_row_statistics).
template <class C>
__device__ __forceinline__ void accumulate_row_statistics(const float (&s)[C::kKeyTiles][4], float (&row_max)[2],
                                                          float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    const float new_max = fmaxf(row_max[h], tile_max);
    if (new_max == -INFINITY) continue;  // no key of this lane's row visible yet
    const float max_log2e = new_max * kLog2e;
    float sum = row_sum[h] * exp_below(row_max[h], max_log2e);  // 0 * 0 while the row had nothing
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) sum += exp_below(s[j][e], max_log2e);
    row_max[h] = new_max;
    row_sum[h] = sum;
  }
}

// End of pass 1: the 4 lanes of a row merge their maxima and sums, and each then holds its rows'
// final max and sum. The whole warp calls this (shuffles).
template <class C>
__device__ __forceinline__ void merge_row_statistics(float (&row_max)[2], float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float top = row_max[h];
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
    float sum = top == -INFINITY ? 0.f : row_sum[h] * exp_below(row_max[h], top * kLog2e);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    row_max[h] = top;
    row_sum[h] = sum;
  }
}

// Pass 2: P = exp(S - max) / sum with the rows' final max and sum (a product by the IEEE
// reciprocal), left in fp32 for multiply_pv, which rounds it to T as it packs the A fragment:
// st(P). Masked scores give 0; a row with no visible key (sum 0: its output is zeroed) gives 0
// throughout.
template <class C>
__device__ __forceinline__ void normalised_probabilities(float (&s)[C::kKeyTiles][4], const float (&row_max)[2],
                                                         const float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool any = row_sum[h] > 0.f;
    const float inverse = any ? 1.f / row_sum[h] : 0.f, max_log2e = any ? row_max[h] * kLog2e : 0.f;
#pragma unroll
    for (int j = 0; j < C::kKeyTiles; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) s[j][e] = exp_below(s[j][e], max_log2e) * inverse;
  }
}

// ---- the kernel -------------------------------------------------------------------------------

// Pipelines (cp.async groups committed in order; every step commits, empty or not, so the waits'
// counts hold in every iteration):
//   stages 2: Q | K0 | V0, then per tile t: wait K_t, barrier, copy K_{t+1} | V_{t+1} into the
//     other slot (free: the barrier follows every warp's last read of tile t - 1), S; wait V_t,
//     barrier, P V.
//   stages 1: Q | K0 | (empty), then per tile t: wait K_t, barrier (V buffer free), copy V_t, S;
//     wait V_t, barrier (K buffer free), copy K_{t+1}, P V: K and V loads alternate with the math.
template <class C>
__global__ void __launch_bounds__(C::kThreads)
    flash_mma_kernel(const Params<typename C::T> p, const float scale_log2, const int stages) {
  grid_dependency_sync();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using T = typename C::T;
  extern __shared__ __align__(128) unsigned char shared[];
  const unsigned q_smem = shared_address(shared);
  const unsigned kv_smem = q_smem + C::kQBytes;

  // The last query tiles see the most keys under a causal mask: they go first.
  const int q_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int group = lane / 4, thread_in_group = lane % 4;
  const bool causal = p.mask == Mask::causal;
  const bool double_buffered = stages == 2;

  const int valid = p.lengths ? min(max(p.lengths[batch], 0), p.seq) : p.seq;
  const int q0 = q_tile * C::kBlockQ;
  const int warp_q0 = q0 + kMmaRows * warp;
  // Keys some query of the tile may see; none when every query of the tile is past the length.
  const int key_end = q0 >= valid ? 0 : (causal ? min(valid, q0 + C::kBlockQ) : valid);
  const int key_tiles = (key_end + C::kBlockK - 1) / C::kBlockK;

  float o[C::kDimTiles][4];
#pragma unroll
  for (int d = 0; d < C::kDimTiles; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  if (key_tiles > 0) {
    const T* q_src = p.q + batch * p.q_strides.batch + head * p.q_strides.head + q0 * p.q_strides.row;
    const T* k_src = p.k + batch * p.k_strides.batch + head * p.k_strides.head;
    const T* v_src = p.v + batch * p.v_strides.batch + head * p.v_strides.head;
    auto k_tile = [&](int t) { return kv_smem + static_cast<unsigned>((double_buffered ? t & 1 : 0) * C::kStageBytes); };
    auto copy_k = [&](int t) {
      copy_tile<C, C::kBlockK>(k_tile(t), k_src + t * C::kBlockK * p.k_strides.row, p.k_strides.row,
                               valid - t * C::kBlockK);
    };
    auto copy_v = [&](int t) {
      copy_tile<C, C::kBlockK>(k_tile(t) + C::kTileBytes, v_src + t * C::kBlockK * p.v_strides.row,
                               p.v_strides.row, valid - t * C::kBlockK);
    };

    copy_tile<C, C::kBlockQ>(q_smem, q_src, p.q_strides.row, valid - q0);
    commit_async_copies();
    copy_k(0);
    commit_async_copies();
    if (!C::kRounded && double_buffered) copy_v(0);  // the rounded mode's first pass reads no V
    commit_async_copies();
    wait_async_copies<2>();  // Q has landed; K0 (and V0) may not have
    __syncthreads();

    const unsigned q_lane =
        q_smem + static_cast<unsigned>((kMmaRows * warp + lane % 16) * C::kRowBytes + (lane / 16) * kChunkBytes);
    unsigned q[C::kDimSteps][4];
    if constexpr (C::kQInRegisters) load_q<C>(q, q_lane);
    const unsigned k_lane_offset =
        static_cast<unsigned>(((lane / 16) * 8 + lane % 8) * C::kRowBytes + ((lane / 8) % 2) * kChunkBytes);
    const unsigned v_lane_offset =
        C::kTileBytes + (C::kTf32 ? static_cast<unsigned>(2 * thread_in_group * C::kRowBytes + group * 4)
                                  : static_cast<unsigned>(((lane / 8) % 2 * 8 + lane % 8) * C::kRowBytes +
                                                          (lane / 16) * kChunkBytes));

    if (C::kRounded && key_tiles == 1) {
      // One key tile (every query tile of a sequence up to block_k keys: 11 of the 13 TechJam
      // cases at block_k 128): the two passes would load and multiply the same K tile twice. Its
      // scores stay in registers from the statistics to the probabilities instead; pass 2 would
      // recompute them bit for bit, so the output is the two-pass output. V's copy overlaps S.
      const bool warp_active = warp_q0 < valid;
      const bool masked = C::kBlockK > valid || (causal && C::kBlockK - 1 > warp_q0);
      copy_v(0);
      commit_async_copies();
      wait_async_copies<1>();  // K0 has landed; V0 may not have
      __syncthreads();
      float s[C::kKeyTiles][4];
      if (warp_active) {
        multiply_qk<C>(s, q, q_lane, k_tile(0) + k_lane_offset);
        round_scores<C>(s, p.scale);
        if (masked) mask_scores<C>(s, causal, 2 * thread_in_group, warp_q0 + group, valid);
        accumulate_row_statistics<C>(s, row_max, row_sum);
      }
      merge_row_statistics<C>(row_max, row_sum);  // every lane (shuffles)
      if (warp_active) normalised_probabilities<C>(s, row_max, row_sum);
      wait_async_copies<0>();
      __syncthreads();
      if (warp_active) multiply_pv<C>(s, o, k_tile(0) + v_lane_offset);
    } else if constexpr (C::kRounded) {
      // Step u of 2 key_tiles takes tile u (pass 1) or u - key_tiles (pass 2) into slot u & 1:
      // the pipeline of the plain mode over a sequence of tiles twice as long, the same waits and
      // barriers, with no V copies in pass 1.
      const int steps = 2 * key_tiles;
      auto slot = [&](int u) { return kv_smem + static_cast<unsigned>((double_buffered ? u & 1 : 0) * C::kStageBytes); };
      auto tile_of = [&](int u) { return u < key_tiles ? u : u - key_tiles; };
      auto copy_k_step = [&](int u) {
        const int tile = tile_of(u);
        copy_tile<C, C::kBlockK>(slot(u), k_src + tile * C::kBlockK * p.k_strides.row, p.k_strides.row,
                                 valid - tile * C::kBlockK);
      };
      auto copy_v_step = [&](int u) {
        if (u < key_tiles) return;
        const int tile = u - key_tiles;
        copy_tile<C, C::kBlockK>(slot(u) + C::kTileBytes, v_src + tile * C::kBlockK * p.v_strides.row,
                                 p.v_strides.row, valid - tile * C::kBlockK);
      };

      for (int u = 0; u < steps; ++u) {
        const bool second_pass = u >= key_tiles;
        const int k0 = tile_of(u) * C::kBlockK;
        const bool warp_active = warp_q0 < valid && (!causal || k0 <= warp_q0 + kMmaRows - 1);
        const bool masked = k0 + C::kBlockK > valid || (causal && k0 + C::kBlockK - 1 > warp_q0);

        if (double_buffered)
          wait_async_copies<1>();
        else
          wait_async_copies<0>();
        __syncthreads();
        if (double_buffered) {
          if (u + 1 < steps) copy_k_step(u + 1);
          commit_async_copies();
          if (u + 1 < steps) copy_v_step(u + 1);
          commit_async_copies();
        } else {
          copy_v_step(u);
          commit_async_copies();
        }

        if (u == key_tiles) merge_row_statistics<C>(row_max, row_sum);  // every lane, before pass 2
        float s[C::kKeyTiles][4];
        if (warp_active) {
          multiply_qk<C>(s, q, q_lane, slot(u) + k_lane_offset);
          round_scores<C>(s, p.scale);
          if (masked) mask_scores<C>(s, causal, k0 + 2 * thread_in_group, warp_q0 + group, valid);
          if (second_pass)
            normalised_probabilities<C>(s, row_max, row_sum);
          else
            accumulate_row_statistics<C>(s, row_max, row_sum);
        }

        if (double_buffered)
          wait_async_copies<2>();
        else
          wait_async_copies<0>();
        __syncthreads();
        if (!double_buffered) {
          if (u + 1 < steps) copy_k_step(u + 1);
          commit_async_copies();
        }

        if (second_pass && warp_active) multiply_pv<C>(s, o, slot(u) + v_lane_offset);
      }
    } else {
      for (int t = 0; t < key_tiles; ++t) {
        const int k0 = t * C::kBlockK;
        // A warp whose rows are all past the length, or all above this tile under the causal
        // mask, has nothing to add; it still takes part in the copies and barriers.
        const bool warp_active = warp_q0 < valid && (!causal || k0 <= warp_q0 + kMmaRows - 1);
        const bool masked = k0 + C::kBlockK > valid || (causal && k0 + C::kBlockK - 1 > warp_q0);

        if (double_buffered)
          wait_async_copies<1>();
        else
          wait_async_copies<0>();
        __syncthreads();
        if (double_buffered) {
          if (t + 1 < key_tiles) copy_k(t + 1);
          commit_async_copies();
          if (t + 1 < key_tiles) copy_v(t + 1);
          commit_async_copies();
        } else {
          copy_v(t);
          commit_async_copies();
        }

        float s[C::kKeyTiles][4];
        if (warp_active) {
          multiply_qk<C>(s, q, q_lane, k_tile(t) + k_lane_offset);
          if constexpr (C::kRoundScores) round_scores<C>(s, p.scale);
          online_softmax<C>(s, o, row_max, row_sum, scale_log2, masked, causal, k0 + 2 * thread_in_group,
                            warp_q0 + group, valid);
        }

        if (double_buffered)
          wait_async_copies<2>();
        else
          wait_async_copies<0>();
        __syncthreads();
        if (!double_buffered) {
          if (t + 1 < key_tiles) copy_k(t + 1);
          commit_async_copies();
        }

        if (warp_active) multiply_pv<C>(s, o, k_tile(t) + v_lane_offset);
      }
    }
  }

  // Finish the rows: the 4 lanes of a row add their partial sums; rows past the length are
  // zeros whatever was computed for them, as are rows that saw no key.
  float out_scale[2];
  bool row_valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (C::kRounded) {
      row_valid[h] = warp_q0 + group + 8 * h < valid;
      out_scale[h] = 1.f;  // P was normalised before P V
    } else {
      float sum = row_sum[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      row_valid[h] = warp_q0 + group + 8 * h < valid;
      out_scale[h] = sum > 0.f ? fast_reciprocal(sum) : 0.f;
    }
  }

  // The warp's own 16 rows of the Q tile (read only by this warp, long since in registers) stage
  // its output, so the global stores go out as whole 16-byte chunks of consecutive lanes rather
  // than the accumulators' scattered 4- or 8-byte pieces.
  unsigned char* staging = shared + kMmaRows * warp * C::kRowBytes;
#pragma unroll
  for (int d = 0; d < C::kDimTiles; ++d)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lo = row_valid[h] ? o[d][2 * h] * out_scale[h] : 0.f;
      const float hi = row_valid[h] ? o[d][2 * h + 1] * out_scale[h] : 0.f;
      unsigned char* at = staging + (group + 8 * h) * C::kRowBytes + (8 * d + 2 * thread_in_group) * sizeof(T);
      if constexpr (C::kTf32)
        *reinterpret_cast<float2*>(at) = make_float2(lo, hi);
      else
        *reinterpret_cast<unsigned*>(at) = pack_pair<T>(lo, hi);
    }
  __syncwarp();
  T* o_dst = p.o + batch * p.o_strides.batch + head * p.o_strides.head;
#pragma unroll
  for (int i = 0; i < kMmaRows * C::kChunksPerRow / kWarpSize; ++i) {
    const int chunk = lane + i * kWarpSize;
    const int r = chunk / C::kChunksPerRow, c = chunk % C::kChunksPerRow;
    const int row = warp_q0 + r;
    if (row < p.seq && c < C::kDataChunksPerRow)
      *reinterpret_cast<uint4*>(o_dst + row * p.o_strides.row + c * C::kChunkElements) =
          *reinterpret_cast<const uint4*>(staging + r * C::kRowBytes + c * kChunkBytes);
  }
#else
  // Built for an architecture without these mma shapes; the host wrapper never launches this.
  __trap();
#endif
}

// ---- host side --------------------------------------------------------------------------------

template <class C>
cudaError_t launch(const Params<typename C::T>& p, int stages, cudaStream_t stream) {
  static_assert(shared_bytes(C::kWarps, C::kBlockK, 1, C::kDataDim, sizeof(typename C::T)) ==
                    static_cast<std::size_t>(C::kQBytes + C::kStageBytes),
                "flash_mma_shared_bytes is the kernel's layout");
  const std::size_t smem = static_cast<std::size_t>(C::kQBytes) + static_cast<std::size_t>(stages) * C::kStageBytes;
  auto kernel = flash_mma_kernel<C>;
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (smem > kDefaultSharedLimit) {
    if (cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        e != cudaSuccess)
      return e;
  }
  const unsigned q_tiles = static_cast<unsigned>((p.seq + C::kBlockQ - 1) / C::kBlockQ);
  const dim3 grid(q_tiles, static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  // The one-pass rounded mode's scores arrive scaled (S = st(st(Q K^T) scale)).
  kernel<<<grid, C::kThreads, smem, stream>>>(p, C::kRoundScores ? kLog2e : p.scale * kLog2e, stages);
  return cudaGetLastError();
}

template <typename T, int kHeadDim, int kWarps, Mode kRounded>
cudaError_t launch_block_k(const Params<T>& p, const FlashMmaConfig& config, cudaStream_t stream) {
  switch (config.block_k) {
    case 32: return launch<Tiling<T, kHeadDim, kWarps, 32, kRounded>>(p, config.stages, stream);
    case 64: return launch<Tiling<T, kHeadDim, kWarps, 64, kRounded>>(p, config.stages, stream);
    case 128:
      if constexpr (kHeadDim <= kMaxHeadDimOfWideKeyTiles)
        return launch<Tiling<T, kHeadDim, kWarps, 128, kRounded>>(p, config.stages, stream);
      else
        return cudaErrorNotSupported;
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int kHeadDim, Mode kRounded>
cudaError_t launch_mode(const Params<T>& p, const FlashMmaConfig& config, cudaStream_t stream) {
  switch (config.warps) {
    case 4: return launch_block_k<T, kHeadDim, 4, kRounded>(p, config, stream);
    case 8: return launch_block_k<T, kHeadDim, 8, kRounded>(p, config, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int kHeadDim>
cudaError_t launch_warps(const Params<T>& p, const FlashMmaConfig& config, cudaStream_t stream) {
  if (!p.rounded) return launch_mode<T, kHeadDim, Mode::plain>(p, config, stream);
  return config.passes == 1 ? launch_mode<T, kHeadDim, Mode::rounded_scores>(p, config, stream)
                            : launch_mode<T, kHeadDim, Mode::rounded_two_pass>(p, config, stream);
}

bool valid_config(const FlashMmaConfig& c) {
  return (c.warps == 4 || c.warps == 8) && (c.block_k == 32 || c.block_k == 64 || c.block_k == 128) &&
         (c.stages == 1 || c.stages == 2) && (c.passes == 1 || c.passes == 2);
}

cudaError_t require_sm80() {
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  return major >= 8 ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace

bool flash_mma_head_dim_supported(int head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 80 || head_dim == 96 ||
         head_dim == 128 || head_dim == 256;
}

int flash_mma_max_block_k(int head_dim) { return head_dim <= kMaxHeadDimOfWideKeyTiles ? 128 : 64; }

std::size_t flash_mma_shared_bytes(const FlashMmaConfig& config, int head_dim, int element_bytes) {
  return shared_bytes(config.warps, config.block_k, config.stages, head_dim, element_bytes);
}

template <typename T>
cudaError_t flash_mma_forward(const Params<T>& p, const FlashMmaConfig& config, cudaStream_t stream) {
  if (!valid_config(config)) return cudaErrorInvalidValue;
  if (!flash_mma_head_dim_supported(p.head_dim)) return cudaErrorNotSupported;
  if (cudaError_t e = check_params(p); e != cudaSuccess) return e;
  if (cudaError_t e = require_sm80(); e != cudaSuccess) return e;
  switch (p.head_dim) {
    case 8: return launch_warps<T, 8>(p, config, stream);
    case 16: return launch_warps<T, 16>(p, config, stream);
    case 32: return launch_warps<T, 32>(p, config, stream);
    case 64: return launch_warps<T, 64>(p, config, stream);
    case 80: return launch_warps<T, 80>(p, config, stream);
    case 96: return launch_warps<T, 96>(p, config, stream);
    case 128: return launch_warps<T, 128>(p, config, stream);
    case 256: return launch_warps<T, 256>(p, config, stream);
    default: return cudaErrorNotSupported;
  }
}

template cudaError_t flash_mma_forward<__half>(const Params<__half>&, const FlashMmaConfig&, cudaStream_t);
template cudaError_t flash_mma_forward<__nv_bfloat16>(const Params<__nv_bfloat16>&, const FlashMmaConfig&,
                                                      cudaStream_t);
template cudaError_t flash_mma_forward<float>(const Params<float>&, const FlashMmaConfig&, cudaStream_t);

}  // namespace shapetune::kernels::attention
