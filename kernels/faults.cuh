// Kernels that fail on purpose, for the tests of worker isolation (variants/faults.cpp, which
// registers them only when SHAPETUNE_FAULT_VARIANTS=1): a correct copy beside copies that write
// out of bounds, trap, or never finish. Host-safe declarations; kernels in faults.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shapetune::kernels::faults {

enum class Fault : std::uint8_t {
  none,           // y = x
  out_of_bounds,  // y = x, then one store far outside any allocation: cudaErrorIllegalAddress
  trap,           // __trap() in every thread: cudaErrorLaunchFailure
  spin,           // waits for a flag nothing sets: never finishes
};

cudaError_t copy_with_fault(Fault, const float* x, float* y, std::int64_t n, int block_size, cudaStream_t);

}  // namespace shapetune::kernels::faults
