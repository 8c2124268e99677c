// The 32-bit shared-window address of a pointer into shared memory: the operand that PTX's
// shared-memory instructions (cp.async, ldmatrix, mbarrier, bulk copies) take.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

}  // namespace shapetune::kernels
