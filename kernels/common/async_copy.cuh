// Global -> shared copies that do not wait for their data (cp.async, sm_80+), for kernels that
// keep the next rows in flight while they work on the current one. A thread that reads back only
// what it copied itself needs no barrier: wait_async_copies makes its own copies visible to it.
// Below sm_80 a copy is an ordinary load and store (correct, not overlapped) and the commits and
// waits are no-ops.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels {

// 16 bytes, both addresses 16-byte aligned. .cg: cached in L2 only (streamed data is used once).
__device__ __forceinline__ void copy_async_16(void* shared_destination, const void* global_source) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(destination), "l"(global_source) : "memory");
#else
  *static_cast<uint4*>(shared_destination) = *static_cast<const uint4*>(global_source);
#endif
}

// Closes the group of this thread's copies issued since its last commit. An empty group is
// allowed, so a loop can commit once per step whether or not it copied anything.
__device__ __forceinline__ void commit_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace shapetune::kernels
