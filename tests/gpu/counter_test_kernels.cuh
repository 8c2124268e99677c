// Kernels whose counters are known exactly, for the counter session's GPU tests.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace shapetune::test_kernels {

// out[i] = in[i], one 4-byte load and store per element: reads and writes n * 4 bytes.
cudaError_t copy_floats(const float* in, float* out, std::size_t n, cudaStream_t);

// x[i] += 1 in place: exactly n FADD thread instructions, no FMUL or FFMA.
cudaError_t add_one(float* x, std::size_t n, cudaStream_t);

}  // namespace shapetune::test_kernels
