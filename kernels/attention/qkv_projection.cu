#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/qkv_projection.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/vector_io.cuh"

namespace shapetune::kernels::attention {
namespace {

struct Pointers {
  const float* src[3];
  void* dst[3];
};

constexpr int kThreads = 128;
constexpr unsigned kMaxGridY = 65535;
// Enough blocks to fill an H200 several times over (132 SMs x 16 blocks of 128 threads).
constexpr std::int64_t kTargetBlocks = 4096;

// kVec consecutive elements of T as one store: 16 bytes of floats, 8 of 16-bit values.
template <typename T, int kVec>
__device__ __forceinline__ void store_vector(T* dst, const float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    dst[0] = from_float<T>(v[0]);
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack_pair<T>(v[0], v[1]), pack_pair<T>(v[2], v[3]));
  }
}

// A thread owns kVec consecutive columns of the 3 D (blockIdx.x, threadIdx.x) and walks the rows
// (blockIdx.y, grid-stride): its column's tensor j, head h, offset d and bias are worked out once,
// not per element, where 64-bit divisions would cost more instructions than the pass moves bytes.
// Consecutive threads read consecutive columns of one source row and write consecutive d of one
// (j, b, h, s): both sides coalesce. kVec = 4 needs head_dim, src_ld and the pointers 4-aligned.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    head_split_bias_kernel(Pointers p, std::int64_t src_ld, const T* bias, std::int64_t rows, std::int64_t seq,
                           int heads, int head_dim) {
  grid_dependency_sync();
  const int width = heads * head_dim;
  const int column = (static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x)) * kVec;
  if (column >= 3 * width) return;
  const int which = column / width, c = column - which * width;
  const int h = c / head_dim, d = c - h * head_dim;
  float b[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) b[e] = to_float(bias[column + e]);
  const float* src = p.src[which] + c;
  T* dst = static_cast<T*>(p.dst[which]) + std::int64_t{h} * seq * head_dim + d;
  const std::int64_t head_stride = std::int64_t{heads} * seq * head_dim;  // one batch row of dst
  for (std::int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const std::int64_t batch = row / seq, s = row - batch * seq;
    float v[kVec];
    if constexpr (kVec == 4) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(src + row * src_ld));
      v[0] = x.x + b[0], v[1] = x.y + b[1], v[2] = x.z + b[2], v[3] = x.w + b[3];
    } else {
      v[0] = __ldg(src + row * src_ld) + b[0];
    }
    store_vector<T, kVec>(dst + batch * head_stride + s * head_dim, v);
  }
}

}  // namespace

template <typename T>
cudaError_t head_split_bias(const float* const src[3], std::int64_t src_ld, const T* bias, T* const dst[3],
                            std::int64_t rows, std::int64_t seq, int heads, int head_dim, cudaStream_t stream) {
  if (rows < 1 || seq < 1 || heads < 1 || head_dim < 1 || rows % seq != 0) return cudaErrorInvalidValue;
  if (std::int64_t{heads} * head_dim * 3 > (std::int64_t{1} << 30)) return cudaErrorInvalidValue;
  Pointers p{{src[0], src[1], src[2]}, {dst[0], dst[1], dst[2]}};
  bool vector = head_dim % 4 == 0 && src_ld % 4 == 0 && aligned(bias, 4 * sizeof(T));
  for (int j = 0; j < 3; ++j) vector = vector && aligned(src[j], 16) && aligned(dst[j], 4 * sizeof(T));
  const int vec = vector ? 4 : 1;
  const std::int64_t columns = 3 * std::int64_t{heads} * head_dim / vec;
  const auto grid_x = static_cast<unsigned>((columns + kThreads - 1) / kThreads);
  const auto grid_y = static_cast<unsigned>(
      std::clamp<std::int64_t>(kTargetBlocks / grid_x, 1, std::min<std::int64_t>(rows, kMaxGridY)));
  const dim3 grid(grid_x, grid_y);
  if (vector)
    head_split_bias_kernel<T, 4><<<grid, kThreads, 0, stream>>>(p, src_ld, bias, rows, seq, heads, head_dim);
  else
    head_split_bias_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p, src_ld, bias, rows, seq, heads, head_dim);
  return cudaGetLastError();
}

template cudaError_t head_split_bias<float>(const float* const[3], std::int64_t, const float*, float* const[3],
                                            std::int64_t, std::int64_t, int, int, cudaStream_t);
template cudaError_t head_split_bias<__half>(const float* const[3], std::int64_t, const __half*, __half* const[3],
                                             std::int64_t, std::int64_t, int, int, cudaStream_t);
template cudaError_t head_split_bias<__nv_bfloat16>(const float* const[3], std::int64_t, const __nv_bfloat16*,
                                                    __nv_bfloat16* const[3], std::int64_t, std::int64_t, int, int,
                                                    cudaStream_t);

}  // namespace shapetune::kernels::attention
