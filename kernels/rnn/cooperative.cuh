// What the recurrent family's cooperative launches share: whether a grid can be resident at once.
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

// A cooperative kernel's set-up: the dynamic shared memory it asks for allowed past 48 KiB, then
// whether its grid can be resident at once (cudaErrorCooperativeLaunchTooLarge if not).
template <typename Kernel>
cudaError_t prepare_cooperative(Kernel kernel, int blocks, int threads, std::size_t shared_bytes) {
  if (shared_bytes > 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(shared_bytes));
        e != cudaSuccess)
      return e;
  return fits_at_once(kernel, blocks, threads, shared_bytes);
}

}  // namespace shapetune::kernels::rnn
