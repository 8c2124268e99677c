#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/attention/qkv_projection.cuh"
#include "kernels/common/numeric.cuh"

namespace shapetune::kernels::attention {
namespace {

struct Pointers {
  const float* src[3];
  void* dst[3];
};

// One thread per output element, in destination order: consecutive threads write consecutive d
// of one (j, b, h, s) and read consecutive columns of one source row, so both sides coalesce
// along head_dim. Grid-stride over the 3 rows D elements.
template <typename T>
__global__ void head_split_bias_kernel(Pointers p, std::int64_t src_ld, const T* bias, std::int64_t rows,
                                       std::int64_t seq, int heads, int head_dim) {
  const std::int64_t width = std::int64_t{heads} * head_dim;
  const std::int64_t per_tensor = rows * width;
  const std::int64_t total = 3 * per_tensor;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const int which = static_cast<int>(i / per_tensor);
    std::int64_t rest = i - which * per_tensor;
    const std::int64_t d = rest % head_dim;
    rest /= head_dim;
    const std::int64_t s = rest % seq;
    rest /= seq;
    const std::int64_t h = rest % heads, b = rest / heads;
    const std::int64_t col = h * head_dim + d;
    const float value = p.src[which][(b * seq + s) * src_ld + col] + to_float(bias[which * width + col]);
    static_cast<T*>(p.dst[which])[i - which * per_tensor] = from_float<T>(value);
  }
}

}  // namespace

template <typename T>
cudaError_t head_split_bias(const float* const src[3], std::int64_t src_ld, const T* bias, T* const dst[3],
                            std::int64_t rows, std::int64_t seq, int heads, int head_dim, cudaStream_t stream) {
  if (rows < 1 || seq < 1 || heads < 1 || head_dim < 1 || rows % seq != 0) return cudaErrorInvalidValue;
  Pointers p{{src[0], src[1], src[2]}, {dst[0], dst[1], dst[2]}};
  constexpr int kThreads = 256;
  const std::int64_t total = 3 * rows * heads * head_dim;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + kThreads - 1) / kThreads, 65535LL * 32));
  head_split_bias_kernel<T><<<blocks, kThreads, 0, stream>>>(p, src_ld, bias, rows, seq, heads, head_dim);
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
