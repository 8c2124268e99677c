// What the recurrent family's cooperative launches share: whether a grid can be resident at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::rnn {

// Whether `blocks` blocks of `kernel` can all be resident at once (the occupancy API, asked
// before a cooperative launch so that a grid the device cannot co-schedule is a refusal).
template <typename Kernel>
cudaError_t fits_at_once(Kernel kernel, int blocks, int threads, std::size_t shared_bytes) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared_bytes);
      e != cudaSuccess)
    return e;
  return static_cast<std::int64_t>(per_sm) * sms >= blocks ? cudaSuccess : cudaErrorCooperativeLaunchTooLarge;
}

}  // namespace shapetune::kernels::rnn
