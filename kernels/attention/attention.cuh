// The attention family: O = softmax(Q K^T * scale + mask) V per batch row and head, softmax
// statistics in fp32. One parameter block describes every layout by strides (in elements; the
// head dimension is always contiguous), so one kernel serves split Q/K/V ([B, H, S, hd] each) and
// packed QKV ([B, S, 3, H, hd], straight out of a packed projection), as FlashAttention-3's
// Qkv_params does. The output is always [B, S, H, hd]: heads merged, the layout the output
// projection reads.
//
// Masks: causal (key j > query i is masked) or full; optional per-batch valid lengths (a prefix of
// each row is valid: keys j >= length are masked and the outputs of queries i >= length are zero,
// the padding mask of the TechJam model). A length of 0 zeroes the whole row.
//
// Host-safe: the catalogue (compiled by g++) includes this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::attention {

enum class Mask : std::uint8_t { full, causal };

// The most heads and batch rows a launch takes: the flash kernels' grids have heads as their y
// and batch rows as their z, zero_invalid_rows batch rows as its y, and a grid's y and z stop at
// 65535. (Everything else is 64-bit: every element offset is a 64-bit stride times an index, so
// one tensor may hold more than 2^31 elements; TechJam case 14's Q, K, V and O hold 3.3e9.)
constexpr int kMaxGridYZ = 65535;

// Strides of one tensor of [batch, head, row, hd] (hd contiguous).
struct Strides {
  std::int64_t batch = 0, head = 0, row = 0;
};

template <typename T>
struct Params {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  T* o = nullptr;
  Strides q_strides, k_strides, v_strides, o_strides;
  const int* lengths = nullptr;  // [batch] valid tokens of each row, in [0, seq]; null: all valid
  int batch = 0, heads = 0, seq = 0, head_dim = 0;
  float scale = 1;  // multiplies Q K^T before the mask and the softmax
  Mask mask = Mask::causal;
  // The rounding points of a framework's materialised (eager) attention, st() = round to T: S =
  // st(st(Q K^T) scale), P = st(exp(S - max) / sum) normalised before P V, O = st(P V). Only
  // flash_mma has this mode (flash_wgmma refuses it: cudaErrorNotSupported).
  bool rounded = false;
};

// Split Q, K, V: three tensors [B, H, S, hd].
inline Strides split_strides(int heads, int seq, int head_dim) {
  return {std::int64_t{heads} * seq * head_dim, std::int64_t{seq} * head_dim, head_dim};
}
// Packed QKV [B, S, 3, H, hd]: Q, K and V start 0, H hd and 2 H hd elements in, and share strides.
inline Strides packed_strides(int heads, int seq, int head_dim) {
  return {std::int64_t{seq} * 3 * heads * head_dim, head_dim, std::int64_t{3} * heads * head_dim};
}
// The output [B, S, H, hd].
inline Strides merged_strides(int heads, int seq, int head_dim) {
  return {std::int64_t{seq} * heads * head_dim, head_dim, std::int64_t{heads} * head_dim};
}

// ---- naive: the reference's way, O(S^2) memory ---------------------------------------------------

// scores [B, H, S, S] fp32 hold Q K^T (the caller's GEMM); this applies scale and masks, takes the
// softmax of each row in fp32 and writes the probabilities p [B, H, S, S] in T (rows of masked or
// invalid queries as zeros), as the reference casts them back to the model dtype before P V.
template <typename T>
cudaError_t masked_softmax(const float* scores, T* p, const int* lengths, int batch, int heads, int seq, float scale,
                           Mask mask, cudaStream_t);

// The same with the rounding points of a framework's materialised attention: scores [B, H, S, S]
// hold st(Q K^T) in T (the caller's GEMM stores them), each is taken as st(score * scale), the
// softmax is fp32 with accurate expf, and p = st(exp(s - max) / sum).
template <typename T>
cudaError_t rounded_masked_softmax(const T* scores, T* p, const int* lengths, int batch, int heads, int seq,
                                   float scale, Mask mask, cudaStream_t);

// Zeroes the output rows of queries at or past their batch row's length (after P V wrote them).
template <typename T>
cudaError_t zero_invalid_rows(T* o, Strides o_strides, const int* lengths, int batch, int heads, int seq,
                              int head_dim, cudaStream_t);

// ---- flash_mma: FlashAttention-2 style on mma.sync (sm_80+) ----------------------------------------

// A block owns block_q = 16 * warps query rows of one (batch, head); each warp 16 of them. K and V
// tiles of block_k rows stream through shared memory (cp.async, `stages` deep); scores, the online
// softmax and the output accumulate in registers.
struct FlashMmaConfig {
  int warps = 4;     // 4 or 8: block_q = 64 or 128
  int block_k = 64;  // 32, 64 or 128 key rows per tile
  int stages = 2;    // 1 or 2 K/V tiles in flight
  // The rounded mode (Params::rounded) only. 2: every rounding point, P normalised and stored
  // before P V, which takes the key tiles twice (statistics, then P). 1: S rounded as stored, then
  // the plain online softmax in one pass; P is left unstored (it reaches the mma rounded, but
  // unnormalised), which moves each term of an output by at most half a unit of its P (2^-11 P |v|
  // in f16, 2^-8 in bf16), within the rounded tolerance's allowance for probabilities.
  int passes = 2;
};

// Head dimensions the kernel is instantiated for, and the widest key tile built for one (128, or
// 64 at hd 256; a wider block_k is cudaErrorNotSupported).
bool flash_mma_head_dim_supported(int head_dim);
int flash_mma_max_block_k(int head_dim);
// Dynamic shared memory of a config (element_bytes: 2 for f16/bf16, 4 for tf32's float).
std::size_t flash_mma_shared_bytes(const FlashMmaConfig&, int head_dim, int element_bytes);

// T: __half, __nv_bfloat16, or float (TF32 products, fp32 accumulation). Returns
// cudaErrorNotSupported for a head dimension or device it has no code for.
template <typename T>
cudaError_t flash_mma_forward(const Params<T>&, const FlashMmaConfig&, cudaStream_t);

// ---- flash_wgmma: FlashAttention-3's Hopper rung on wgmma (sm_90a only) -------------------------

// A block owns 64 * warpgroups query rows of one (batch, head); each warpgroup 64 of them, taking
// S = Q K^T with wgmma from shared memory and O += P V with P from its registers. K and V tiles of
// block_k rows are double-buffered in 128-byte-swizzled shared memory. pipeline 0: every thread
// copies and the block meets at a barrier before each product; pipeline 1 (two or three warpgroups):
// a producer warpgroup fills a ring of mbarrier-guarded slots and each consumer warpgroup overlaps
// one tile's softmax with the next products (kernels/attention/flash_wgmma_sm90a.cu).
struct FlashWgmmaConfig {
  int warpgroups = 2;  // 1 or 2: block_q = 64 or 128; 3 (block_q 192): pipelines 1-3 at hd 64 only
  int block_k = 64;    // 64 or 128 key rows per tile
  int pipeline = 0;    // 0 synchronous, 1 warp-specialised, 2 warp-specialised and persistent, 3 = 2 with TMA
  int sections = 0;    // pipelines 1-3: s > 0 runs the heads in sections whose K and V fit 1 / 2^s of the L2
  int pingpong = 0;    // pipelines 1-3: 1 has the consumer warpgroups take turns at issuing products
};

// Head dimensions the kernel is instantiated for (whole 128-byte swizzle rows: 64, 128).
bool flash_wgmma_head_dim_supported(int head_dim);
// Dynamic shared memory of a config, 16-bit elements (alignment slack included).
std::size_t flash_wgmma_shared_bytes(const FlashWgmmaConfig&, int head_dim);

// T: __half or __nv_bfloat16. Returns cudaErrorNotSupported off compute capability 9.0, for a
// head dimension it has no code for, or for operands not 16-byte aligned.
template <typename T>
cudaError_t flash_wgmma_forward(const Params<T>&, const FlashWgmmaConfig&, cudaStream_t);

}  // namespace shapetune::kernels::attention
