#include "harness/timing_kernels.cuh"

#include <cstdint>

#include "kernels/common/grid.cuh"

namespace shapetune::timing_kernels {
namespace {

constexpr unsigned kThreads = 512, kMaxBlocks = 4096;

__global__ void evict_kernel(const uint4* __restrict__ buffer, std::size_t count, unsigned* sink) {
  kernels::grid_dependency_sync();
  unsigned checksum = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = buffer[i];
    checksum ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (checksum == 0x9e3779b9u && threadIdx.x == 0x3ff) *sink = checksum;
}

__global__ void hold_kernel(unsigned long long nanoseconds) {
  kernels::grid_dependency_sync();
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

}  // namespace

cudaError_t evict_l2_by_reading(const void* buffer, std::size_t bytes, unsigned* sink, cudaStream_t stream) {
  const std::size_t count = bytes / sizeof(uint4);
  evict_kernel<<<kernels::grid_stride_blocks(count, kThreads, kMaxBlocks), kThreads, 0, stream>>>(
      static_cast<const uint4*>(buffer), count, sink);
  return cudaGetLastError();
}

cudaError_t hold_stream(unsigned microseconds, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(1000ull * microseconds);
  return cudaGetLastError();
}

}  // namespace shapetune::timing_kernels
