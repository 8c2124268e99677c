// Turning kernel and library return codes into LaunchStatus, the same way for every family.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "baselines/cudnn.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

// Launch-configuration errors are refusals of this config (the tuner records them as
// unsupported, with the reason); anything else is an error of the candidate.
inline LaunchStatus launch_status(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return LaunchStatus::success();
    case cudaErrorLaunchOutOfResources:
      return LaunchStatus::refused("kernel's registers or shared memory do not allow this block size");
    case cudaErrorNotSupported:  // what the vectorized wrappers return for unequal alignment
      return LaunchStatus::refused("input and output differ in their 16-byte alignment");
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidValue:
      return LaunchStatus::refused(std::string("launch refused: ") + cudaGetErrorString(e));
    default: return LaunchStatus::failure(std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
  }
}

inline LaunchStatus library_status(const LibraryCallResult& r) {
  if (r.ok) return LaunchStatus::success();
  return r.not_supported ? LaunchStatus::refused(r.message) : LaunchStatus::failure(r.message);
}

}  // namespace shapetune
