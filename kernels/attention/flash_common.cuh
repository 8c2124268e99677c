// What the two flash kernels (flash_mma.cu, flash_wgmma_sm90a.cu) share: the checks of a parameter
// block before any launch, and the packing of two fp32 probabilities into the 16-bit pair a
// tensor-core A operand takes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

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

}  // namespace shapetune::kernels::attention
