// The timing harness's own kernels (harness/measure.cpp): evicting L2 between samples, and
// holding a stream while the launches to be timed queue behind it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace shapetune::timing_kernels {

// Reads `bytes` (a multiple of 16) of `buffer` so the lines a timed kernel left in L2 are
// evicted. Reads, not writes: a write flush would leave dirty lines whose write-back would be
// charged to the next timed kernel. `sink` is written only on an impossible checksum, so the
// reads cannot be optimized away.
cudaError_t evict_l2_by_reading(const void* buffer, std::size_t bytes, unsigned* sink, cudaStream_t);

// Keeps the stream busy on the device for `microseconds` (one thread watching the global timer),
// so that work queued behind it meanwhile runs back to back, without the host's submission
// gaps between launches.
cudaError_t hold_stream(unsigned microseconds, cudaStream_t);

}  // namespace shapetune::timing_kernels
