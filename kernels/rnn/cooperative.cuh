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

}  // namespace shapetune::kernels::rnn
