// What the recurrent family's persistent launches share: their shared memory allowed, and whether a
// cooperative grid can be resident at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/grid.cuh"

namespace shapetune::kernels::rnn {

// Whether `blocks` blocks of `kernel` can all be resident at once (the occupancy API, asked
// before a cooperative launch so that a grid the device cannot co-schedule is a refusal).
template <typename Kernel>
cudaError_t fits_at_once(Kernel kernel, int blocks, int threads, std::size_t shared_bytes) {
  std::int64_t resident = 0;
  if (cudaError_t e = resident_blocks(kernel, threads, shared_bytes, &resident); e != cudaSuccess) return e;
  return resident >= blocks ? cudaSuccess : cudaErrorCooperativeLaunchTooLarge;
}

// The dynamic shared memory a kernel asks for, allowed past the default 48 KiB.
template <typename Kernel>
cudaError_t allow_dynamic_shared(Kernel kernel, std::size_t shared_bytes) {
  if (shared_bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes));
}

// A cooperative kernel's set-up: its shared memory allowed, then whether its grid can be resident
// at once (cudaErrorCooperativeLaunchTooLarge if not).
template <typename Kernel>
cudaError_t prepare_cooperative(Kernel kernel, int blocks, int threads, std::size_t shared_bytes) {
  if (cudaError_t e = allow_dynamic_shared(kernel, shared_bytes); e != cudaSuccess) return e;
  return fits_at_once(kernel, blocks, threads, shared_bytes);
}

}  // namespace shapetune::kernels::rnn
