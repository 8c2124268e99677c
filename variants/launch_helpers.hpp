// Turning kernel and library return codes into LaunchStatus, the same way for every family.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <string_view>

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

// Calls fn(tag) with tag's type the storage type of a float problem dtype (f32, f16, bf16);
// any other dtype is a failure naming `family`, which has no variant for it.
template <typename Fn>
LaunchStatus with_storage_type(DType dtype, std::string_view family, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    default:
      return LaunchStatus::failure(std::string(family) + " has no " + std::string(dtype_name(dtype)) + " variant");
  }
}

// Workspace pieces start on 256-byte boundaries, as cudaMalloc's allocations do: cuBLAS and the
// kernels' 16-byte loads assume aligned operands.
inline std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// A config value as the int the kernel wrappers take (parameter spaces hold small values).
inline int cfg(const Config& c, const char* name) { return static_cast<int>(c.at(name)); }

}  // namespace shapetune
