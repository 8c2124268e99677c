// The 32-bit shared-window address of a pointer into shared memory: the operand that PTX's
// shared-memory instructions (cp.async, ldmatrix, mbarrier, bulk copies) take.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A 32-bit word of shared memory at a shared address, read and written as volatile (never cached
// in a register, never moved past the barrier waits around it): a value one thread hands to
// others through shared memory under an mbarrier or named barrier, without a 64-bit generic pointer
// held live beside a kernel's accumulators.
__device__ __forceinline__ int load_shared_word(unsigned address) {
  int value;
  asm volatile("ld.volatile.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(address) : "memory");
  return value;
}
__device__ __forceinline__ void store_shared_word(unsigned address, int value) {
  asm volatile("st.volatile.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

}  // namespace shapetune::kernels
