// TMA tensor maps (host side): the driver's cuTensorMapEncodeTiled, found once through the runtime
// (no link against libcuda), and a 16-bit or fp32 tensor described for 128-byte-swizzled boxes. The
// wgmma GEMM (2D operands) and flash_wgmma (4D [B, H, S, hd] through its strides) encode theirs here.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

namespace shapetune::kernels {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
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

// A tensor of `rank` dimensions (innermost first; dims[0] contiguous), strides of dimensions
// 1.. in elements, read in boxes of `box` elements a dimension, 128-byte swizzled (box[0] elements
// = 128 bytes: one swizzle row), zero-filled past its extents. cudaErrorNotSupported without the
// driver entry point, cudaErrorInvalidValue where the driver refuses the description (strides
// not multiples of 16 bytes, a box past 256 rows, ...).
template <typename T, int kRank>
cudaError_t encode_swizzled_128(CUtensorMap& map, const T* base, const std::int64_t (&dims)[kRank],
                                const std::int64_t (&strides)[kRank - 1], const int (&box)[kRank]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>,
                "f16, bf16 or fp32 elements");
  const PFN_cuTensorMapEncodeTiled_v12000 fn = tensor_map_encoder();
  if (!fn) return cudaErrorNotSupported;
  cuuint64_t d[kRank], s[kRank - 1];
  cuuint32_t b[kRank], e[kRank];
  for (int i = 0; i < kRank; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    b[i] = static_cast<cuuint32_t>(box[i]);
    e[i] = 1;
    if (i + 1 < kRank) s[i] = static_cast<cuuint64_t>(strides[i]) * sizeof(T);
  }
  const CUtensorMapDataType type = std::is_same_v<T, __half>          ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                    : std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = fn(&map, type, kRank, const_cast<T*>(base), d, s, b, e, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace shapetune::kernels
