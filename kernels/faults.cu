#include "kernels/common/grid.cuh"
#include "kernels/faults.cuh"

#include <algorithm>

namespace shapetune::kernels::faults {
namespace {

// Never written: the spinning kernel reads it through volatile, so the loop cannot be removed.
__device__ int g_never_set = 0;

__global__ void copy_kernel(Fault fault, const float* __restrict__ x, float* __restrict__ y, std::int64_t n) {
  grid_dependency_sync();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = x[i];
  if (fault == Fault::out_of_bounds && blockIdx.x == 0 && threadIdx.x == 0) {
    // 2^40 floats (4 TiB) past the output: no allocation of this process is there.
    volatile float* far = y + (std::int64_t{1} << 40);
    *far = 1.0f;
  }
  if (fault == Fault::trap) __trap();
  if (fault == Fault::spin)
    while (*static_cast<volatile int*>(&g_never_set) == 0) {
    }
}

}  // namespace

cudaError_t copy_with_fault(Fault fault, const float* x, float* y, std::int64_t n, int block_size, cudaStream_t stream) {
  const std::int64_t blocks = std::min<std::int64_t>((n + block_size - 1) / block_size, 65535);
  copy_kernel<<<static_cast<unsigned>(blocks), block_size, 0, stream>>>(fault, x, y, n);
  return cudaGetLastError();
}

}  // namespace shapetune::kernels::faults
