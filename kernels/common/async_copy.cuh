// Global -> shared copies that do not wait for their data (cp.async, sm_80+), for kernels that
// keep the next tiles or rows in flight while they work on the current ones. A thread that reads
// back only what it copied itself needs no barrier: wait_async_copies makes its own copies visible
// to it; data another thread copied needs the wait and then a barrier.
//
// The copies and the commit carry no "memory" clobber: the compiler may schedule the shared
// loads and FMAs around them (the GEMMs interleave the next tile's copies with the current
// tile's math). The waits do carry it, so no shared read is moved above the wait it depends on.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels {

// 16 bytes, both addresses 16-byte aligned. .cg: cached in L2 only (streamed data is used once).
// Below sm_80 an ordinary load and store (correct, not overlapped).
__device__ __forceinline__ void copy_async_16(void* shared_destination, const void* global_source) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(destination), "l"(global_source));
#else
  *static_cast<uint4*>(shared_destination) = *static_cast<const uint4*>(global_source);
#endif
}

// The two copies below exist from sm_80 on: only code compiled for sm_80+ may call them (ptxas
// rejects them elsewhere, so a misplaced call fails the build, not a run).

// 16 bytes to the shared address `destination` (16-byte aligned) of which the first src_bytes
// (0..16) are read and the rest zero-filled: a chunk past an edge reads nothing outside its
// matrix, and `source` need only be a valid address when src_bytes > 0. kPrefetchL2Line: the
// L2 prefetch hint brings in the source's whole 128-byte line (a tile row of 64 bytes whose
// neighbouring tile row is the line's other half).
template <bool kPrefetchL2Line = false>
__device__ __forceinline__ void copy_async_16_zfill(unsigned destination, const void* source, int src_bytes) {
  if constexpr (kPrefetchL2Line)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
                 "r"(src_bytes));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source), "r"(src_bytes));
}

// The same to a shared-memory pointer.
template <bool kPrefetchL2Line = false>
__device__ __forceinline__ void copy_async_16_zfill(void* destination, const void* source, int src_bytes) {
  copy_async_16_zfill<kPrefetchL2Line>(static_cast<unsigned>(__cvta_generic_to_shared(destination)), source,
                                       src_bytes);
}

// 4 bytes (4-byte aligned), read only when `inside`, else zero-filled: operands that are not
// 16-byte aligned, element by element. .ca: also cached in L1.
__device__ __forceinline__ void copy_async_4_zfill(unsigned destination, const void* source, bool inside) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source), "r"(inside ? 4 : 0));
}
__device__ __forceinline__ void copy_async_4_zfill(void* destination, const void* source, bool inside) {
  copy_async_4_zfill(static_cast<unsigned>(__cvta_generic_to_shared(destination)), source, inside);
}

// Closes the group of this thread's copies issued since its last commit. An empty group is
// allowed, so a loop can commit once per step whether or not it copied anything.
__device__ __forceinline__ void commit_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Waits for every copy of this thread, committed or not.
__device__ __forceinline__ void wait_all_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace shapetune::kernels
