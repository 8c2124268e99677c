// 128-bit loads and stores, and how a row splits into an unaligned head, a body of 16-byte
// packs and a tail. Rows of an odd width start at odd addresses, so every vectorized kernel
// goes through RowSplit rather than assuming `cols % pack == 0`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common/numeric.cuh"

namespace shapetune::kernels {

// Whether p is a multiple of `bytes` (host side: which launches may take the vector paths).
inline bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// 16 bytes of T: 4 floats or 8 halves.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  Pack<T> pack;
  *reinterpret_cast<uint4*>(&pack) = *reinterpret_cast<const uint4*>(p);
  return pack;
}

// One 128-bit store, always. A plain uint4 assignment was split by the compiler into four 32-bit
// stores where the pack had been assembled from 16-bit pieces (softmax_xent's gradients, the
// LayerNorm ring kernel's h, the activations' 16-bit results): four store instructions per pack.
// The __stwb intrinsic keeps it whole but compiles to a strong store (STG.E.128.STRONG.SM); this
// is the plain, weak one. A generic pointer to global memory is its global address.
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& pack) {
  const uint4 w = *reinterpret_cast<const uint4*>(&pack);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
               : "memory");
}

// A plain C++ 16-byte store: the compiler may split it into 32-bit stores (see store_pack), but
// it may also duplicate and reorder the code around it, which store_pack's volatile asm rules out.
// LayerNorm's fused_ring is faster with it (layernorm.cu says by how much); every other kernel
// measured the same or faster with store_pack.
template <typename T>
__device__ __forceinline__ void store_pack_plain(T* p, const Pack<T>& pack) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&pack);
}

// As store_pack, with the evict-first hint (st.global.cs): for outputs that nothing reads back
// soon, whose lines then leave L2 before the ones still wanted there.
template <typename T>
__device__ __forceinline__ void store_pack_streaming(T* p, const Pack<T>& pack) {
  __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&pack));
}

// A pack widened to floats (the arithmetic type of every kernel). 16-bit types widen by 32-bit
// words: a bf16 pair is two bit operations (the low element shifted up, the high one masked),
// where widening element by element unpacks each half first, and reading `pack.v[i]` from a
// pack in shared memory would load 16 bits at a time (8 loads where one 128-bit load will do).
template <typename T>
__device__ __forceinline__ void to_floats(const Pack<T>& pack, float (&v)[Pack<T>::kCount]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 words = *reinterpret_cast<const uint4*>(&pack);
    const unsigned w[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        __half2 pair;
        *reinterpret_cast<unsigned*>(&pair) = w[i];
        const float2 f = __half22float2(pair);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < Pack<T>::kCount; ++i) v[i] = to_float(pack.v[i]);
  }
}

// Floats narrowed into a pack. 16-bit types convert two at a time (one cvt.rn.{f16x2,bf16x2}.f32
// per pair on sm_80+, where one per element would be twice the instructions: enough to matter in
// the 16-bit elementwise kernels, whose instruction budget per element is half of fp32's). The
// pairs are assembled as 32-bit words: a pack built element by element may be stored 32 bits at
// a time (four stores where one 128-bit store will do).
template <typename T>
__device__ __forceinline__ Pack<T> pack_of_floats(const float (&v)[Pack<T>::kCount]) {
  Pack<T> pack;
  if constexpr (sizeof(T) == 2) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, __half>) {
        const __half2 pair = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const unsigned*>(&pair);
      } else {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const unsigned*>(&pair);
      }
    }
    *reinterpret_cast<uint4*>(&pack) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int i = 0; i < Pack<T>::kCount; ++i) pack.v[i] = from_float<T>(v[i]);
  }
  return pack;
}

// A row of `cols` elements at `row`: [0, head) scalars, then `packs` 16-byte packs, then `tail`
// scalars. Valid only when the source and destination rows share their offset modulo 16.
struct RowSplit {
  int head;
  int packs;
  int tail;

  template <typename T>
  __device__ __forceinline__ static RowSplit of(const T* row, int cols) {
    constexpr int kPack = Pack<T>::kCount;
    const int misalignment = static_cast<int>((reinterpret_cast<std::uintptr_t>(row) & 15) / sizeof(T));
    int head = misalignment == 0 ? 0 : kPack - misalignment;
    head = head < cols ? head : cols;
    const int packs = (cols - head) / kPack;
    return {head, packs, cols - head - packs * kPack};
  }
  // Index of the k-th scalar edge element (head ones first, then tail ones).
  template <typename T>
  __device__ __forceinline__ int edge_index(int k) const {
    return k < head ? k : head + packs * Pack<T>::kCount + (k - head);
  }
  __device__ __forceinline__ int edges() const { return head + tail; }
};

// Host side: whether two buffers can share one RowSplit for every row.
inline bool same_16_byte_phase(const void* a, const void* b) {
  return (reinterpret_cast<std::uintptr_t>(a) & 15) == (reinterpret_cast<std::uintptr_t>(b) & 15);
}

}  // namespace shapetune::kernels
