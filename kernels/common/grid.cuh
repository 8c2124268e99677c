// Grids: their size for grid-stride loops, and programmatic dependent launch between them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels {

// One block per `threads` items, at least one and at most `max_blocks` (enough to fill any
// current GPU several times over); a grid-stride loop covers the rest.
inline unsigned grid_stride_blocks(std::size_t items, unsigned threads, unsigned max_blocks) {
  const std::size_t wanted = (items + threads - 1) / threads;
  return static_cast<unsigned>(wanted < max_blocks ? (wanted > 0 ? wanted : 1) : max_blocks);
}

// How many blocks of `kernel` (`threads` each, `shared_bytes` of dynamic shared memory) the
// current device holds at once: its SMs times the occupancy calculator's blocks per SM (0 when
// one block does not fit). What a cooperative or a persistent launch sizes its grid by.
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int threads, std::size_t shared_bytes, std::int64_t* blocks) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared_bytes);
      e != cudaSuccess)
    return e;
  *blocks = static_cast<std::int64_t>(per_sm) * sms;
  return cudaSuccess;
}

// Programmatic dependent launch (sm_90; no-ops below, and unless the grid was launched with the
// programmatic stream serialization attribute). A dependent grid may start while the grid before
// it still runs, once every block of that grid has called allow_dependent_grids (or ended); it
// must call wait_for_primary_grid before it reads what that grid writes.
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Returns once the grid this one depends on has completed and its memory is visible.
__device__ __forceinline__ void wait_for_primary_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The first statement of every kernel in the project (a CPU test checks it): wait until the grids
// this one depends on have completed, then let the grids that depend on this one launch. Since no
// kernel touches memory before its wait, any kernel-to-kernel edge of a captured graph may take
// the programmatic type (models/runner's launch overlap): the dependent is launched and resident
// while the kernel before it finishes, instead of after. Both are no-ops for an ordinary launch.
__device__ __forceinline__ void grid_dependency_sync() {
  wait_for_primary_grid();
  allow_dependent_grids();
}

// A barrier over every block of a grid that is resident all at once (a cooperative launch):
// the n-th call in a block returns once every block has made its n-th call. `counter` is one
// unsigned in global memory, zero at the launch's start; `target` is n times the grid's blocks.
// Writes before the barrier are visible to every thread after it, through L2: data written by
// another block must then be read past L1 (__ldcg), since L1 is not coherent between SMs.
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    while (*static_cast<volatile unsigned*>(counter) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

}  // namespace shapetune::kernels
