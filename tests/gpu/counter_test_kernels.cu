#include "counter_test_kernels.cuh"

namespace shapetune::test_kernels {
namespace {

constexpr int kBlock = 256;

// Grid-stride loops: the index arithmetic is integer, so the only float instructions are the
// ones the counters are checked against.
__global__ void copy_floats_kernel(const float* __restrict__ in, float* __restrict__ out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

__global__ void add_one_kernel(float* __restrict__ x, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] += 1.0f;
}

unsigned blocks_for(std::size_t n) {
  const std::size_t wanted = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(wanted < 65536 ? (wanted ? wanted : 1) : 65536);
}

}  // namespace

cudaError_t copy_floats(const float* in, float* out, std::size_t n, cudaStream_t stream) {
  copy_floats_kernel<<<blocks_for(n), kBlock, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

cudaError_t add_one(float* x, std::size_t n, cudaStream_t stream) {
  add_one_kernel<<<blocks_for(n), kBlock, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace shapetune::test_kernels
