// The host-side guard every launch wrapper of the sm_90a library calls first: its kernels exist
// only as sm_90a machine code (wgmma, setmaxnreg, clusters built for that target), which runs on
// compute capability 9.0 alone, so any other device is refused before a launch could fail.
#pragma once

#include <cuda_runtime_api.h>

namespace shapetune::kernels {

inline cudaError_t require_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device); e != cudaSuccess)
    return e;
  return major == 9 && minor == 0 ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace shapetune::kernels
