#include "harness/ceiling_kernels.cuh"

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"

namespace shapetune::ceiling_kernels {

using kernels::from_float;

namespace {

__global__ void __launch_bounds__(kFmaThreads) fma_chains_kernel(int iterations, float* sink) {
  kernels::grid_dependency_sync();
  // Multiplier just under one and a small addend keep every chain finite and away from
  // denormals for any iteration count; distinct starts keep the compiler from merging chains.
  const float multiplier = 0.999999f, addend = 1e-7f;
  float chain[kFmaChains];
#pragma unroll
  for (int c = 0; c < kFmaChains; ++c) chain[c] = static_cast<float>(threadIdx.x + c) * 1e-3f;
  // Unrolled far enough that the loop's own instructions take ~1% of the issue slots.
#pragma unroll 32
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int c = 0; c < kFmaChains; ++c) chain[c] = fmaf(chain[c], multiplier, addend);
  }
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kFmaChains; ++c) sum += chain[c];
  if (sum == -1.f) *sink = sum;  // never true: the chains stay non-negative
}

__global__ void empty_kernel() {
  kernels::grid_dependency_sync();}

template <typename Word>
__global__ void copy_kernel(const Word* __restrict__ src, Word* __restrict__ dst, std::size_t count) {
  kernels::grid_dependency_sync();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

template <typename Word>
cudaError_t copy_words(const Word* src, Word* dst, std::size_t count, cudaStream_t stream) {
  constexpr unsigned kThreads = 512;
  copy_kernel<<<kernels::grid_stride_blocks(count, kThreads, 4096), kThreads, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

__device__ __forceinline__ std::uint32_t hash(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

template <typename T>
__global__ void fill_kernel(T* data, std::size_t count, std::uint32_t seed) {
  kernels::grid_dependency_sync();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t bits = hash(static_cast<std::uint32_t>(i) ^ hash(seed ^ static_cast<std::uint32_t>(i >> 32)));
    data[i] = from_float<T>(static_cast<float>(bits >> 8) * 0x1p-23f - 1.f);  // 24 bits -> [-1, 1)
  }
}

template <typename T>
cudaError_t fill_typed(void* data, std::size_t count, std::uint32_t seed, cudaStream_t stream) {
  constexpr unsigned threads = 256;
  const unsigned blocks = kernels::grid_stride_blocks(count, threads, 8192);
  fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<T*>(data), count, seed);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fma_chains(int blocks, int iterations, float* sink, cudaStream_t stream) {
  if (blocks < 1 || iterations < 1 || !sink) return cudaErrorInvalidValue;
  fma_chains_kernel<<<blocks, kFmaThreads, 0, stream>>>(iterations, sink);
  return cudaGetLastError();
}

cudaError_t empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t copy_vec16(const void* src, void* dst, std::size_t bytes, cudaStream_t stream) {
  return copy_words(static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / sizeof(uint4), stream);
}

cudaError_t copy_scalar(const void* src, void* dst, std::size_t bytes, cudaStream_t stream) {
  return copy_words(static_cast<const unsigned*>(src), static_cast<unsigned*>(dst), bytes / sizeof(unsigned), stream);
}

cudaError_t fill_uniform(void* data, std::size_t count, FillType type, std::uint32_t seed, cudaStream_t stream) {
  switch (type) {
    case FillType::f32: return fill_typed<float>(data, count, seed, stream);
    case FillType::f16: return fill_typed<__half>(data, count, seed, stream);
    case FillType::bf16: return fill_typed<__nv_bfloat16>(data, count, seed, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace shapetune::ceiling_kernels
