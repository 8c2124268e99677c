// What the two flash kernels (flash_mma.cu, flash_wgmma_sm90a.cu) share: the checks of a parameter
// block before any launch, the packing of two fp32 probabilities into the 16-bit pair a
// tensor-core A operand takes, and the order in which a warp-specialised schedule takes its items.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention.cuh"

namespace shapetune::kernels::attention {

constexpr int kChunkBytes = 16;  // one cp.async: both kernels move rows in whole chunks

template <typename T>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
  }
}

// Every cp.async (and flash_mma's output store) moves whole, aligned 16-byte chunks of a row.
template <typename T>
bool chunk_aligned(const T* base, const Strides& s) {
  constexpr std::int64_t kChunkElements = kChunkBytes / sizeof(T);
  return reinterpret_cast<std::uintptr_t>(base) % kChunkBytes == 0 && s.batch % kChunkElements == 0 &&
         s.head % kChunkElements == 0 && s.row % kChunkElements == 0;
}

// cudaSuccess, or why the kernels cannot take these parameters: nothing to do, a null tensor or a
// scale that is not positive (InvalidValue), more heads or batch rows than a grid dimension holds
// (InvalidConfiguration), operands the 16-byte copies cannot move (NotSupported, a refusal).
template <typename T>
cudaError_t check_params(const Params<T>& p) {
  if (p.batch < 1 || p.heads < 1 || p.seq < 1 || !p.q || !p.k || !p.v || !p.o) return cudaErrorInvalidValue;
  if (!(p.scale > 0.f)) return cudaErrorInvalidValue;  // the softmaxes take maxima of unscaled scores
  if (p.heads > kMaxGridYZ || p.batch > kMaxGridYZ)
    return cudaErrorInvalidConfiguration;
  if (!chunk_aligned(p.q, p.q_strides) || !chunk_aligned(p.k, p.k_strides) || !chunk_aligned(p.v, p.v_strides) ||
      !chunk_aligned<T>(p.o, p.o_strides))
    return cudaErrorNotSupported;
  return cudaSuccess;
}

// The place of item k among B H heads (bh = batch * H + head) of q_tiles query tiles each: the
// heads fall into sections of `section_heads` (the last may be short), taken one after another;
// within a section the longest tiles under a causal mask (the last ones) come first, one per head:
// its k-th item is query tile q_tiles - 1 - k / h of its head k % h, h the section's heads.
struct ItemPlace {
  int bh, q_tile;
};

__host__ __device__ inline ItemPlace item_place(int item, int q_tiles, int section_heads, int heads_all) {
  const int section_items = section_heads * q_tiles;
  const int first = item / section_items * section_heads, local = item % section_items;
  const int heads_here = section_heads < heads_all - first ? section_heads : heads_all - first;
  return {first + local % heads_here, q_tiles - 1 - local / heads_here};
}

// Heads a section holds when its K and V may take 1 / 2^sections of an L2 of `l2_bytes` (at
// least half of it left for Q, O and the previous section's tail; the sweep picks the share): at
// least 1, at most every head.
inline int l2_section_heads(std::int64_t l2_bytes, int sections, std::int64_t seq, int head_dim,
                            int element_bytes, int heads_all) {
  const std::int64_t kv_bytes = 2 * seq * head_dim * element_bytes;
  return static_cast<int>(std::clamp<std::int64_t>((l2_bytes >> sections) / kv_bytes, 1, heads_all));
}

}  // namespace shapetune::kernels::attention
