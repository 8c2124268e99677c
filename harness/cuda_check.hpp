// CUDA runtime errors as exceptions that say which call failed and where.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace shapetune {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  cudaError_t code() const { return code_; }
  // Errors after which the context is unusable: every later call fails with them too.
  bool context_lost() const;

 private:
  cudaError_t code_;
};

void cuda_check(cudaError_t code, const char* expression, const char* file, int line);
bool is_sticky_cuda_error(cudaError_t);

}  // namespace shapetune

#define SHAPETUNE_CUDA_CHECK(expr) ::shapetune::cuda_check((expr), #expr, __FILE__, __LINE__)
