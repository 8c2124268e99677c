// Kernels that measure the device's compute ceilings and launch overhead for
// `shapetune ceilings` (harness/ceilings.cpp), and fill the large operands it times cuBLAS on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::ceiling_kernels {

// Independent FMA chains each thread of the FMA-rate kernel keeps in flight: enough that a
// warp never waits on its own previous FMA (4 cycles of latency), with several warps per
// scheduler on top.
inline constexpr int kFmaChains = 8;
inline constexpr int kFmaThreads = 256;

// FMA chains over `blocks` x kFmaThreads threads, each doing `iterations` x kFmaChains fp32
// FMAs (2 FLOPs each): blocks x kFmaThreads x iterations x kFmaChains x 2 FLOPs in all.
// `sink` is written only on an impossible sum, so the chains cannot be optimized away.
cudaError_t fma_chains(int blocks, int iterations, float* sink, cudaStream_t);

// dst = src over `bytes` (a multiple of 16), grid-stride, 16-byte accesses.
cudaError_t copy_vec16(const void* src, void* dst, std::size_t bytes, cudaStream_t);
// The same with 4-byte accesses, for comparison.
cudaError_t copy_scalar(const void* src, void* dst, std::size_t bytes, cudaStream_t);

// A kernel that does nothing, one block of one thread: what a launch costs by itself.
cudaError_t empty(cudaStream_t);

enum class FillType : std::uint8_t { f32, f16, bf16 };
// `count` elements of the type at `data`, uniform in [-1, 1) from a hash of (seed, index):
// GEMM operands that are neither zeros (which flatter a tensor core's power draw) nor slow
// to make on the host.
cudaError_t fill_uniform(void* data, std::size_t count, FillType, std::uint32_t seed, cudaStream_t);

}  // namespace shapetune::ceiling_kernels
