// Library handles, created on first use and reused: creating a cuDNN or cuBLAS handle costs
// milliseconds and allocates, so it must never happen inside a timed region or a graph capture.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace shapetune {

class LibraryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LibraryHandles {
 public:
  LibraryHandles() = default;
  ~LibraryHandles();
  LibraryHandles(const LibraryHandles&) = delete;
  LibraryHandles& operator=(const LibraryHandles&) = delete;

  // The handle bound to `stream`; throws LibraryError when the library cannot start.
  cudnnHandle_t cudnn(cudaStream_t stream);
  cublasHandle_t cublas(cudaStream_t stream);
  // cuBLASLt takes its stream with each cublasLtMatmul call, so its handle is bound to none.
  cublasLtHandle_t cublas_lt();

  // State a library wrapper keeps between calls (cuDNN execution plans with their workspace,
  // cuBLASLt descriptors with the heuristic's answers), under a name of the wrapper's own, created
  // empty on first use. Released before the handles, which the plans refer to.
  template <class State>
  State& cache(const std::string& name) {
    std::shared_ptr<void>& slot = caches_[name];
    if (!slot) slot = std::make_shared<State>();
    return *static_cast<State*>(slot.get());
  }

 private:
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  std::map<std::string, std::shared_ptr<void>> caches_;
};

std::string cudnn_status_text(cudnnStatus_t);
std::string cublas_status_text(cublasStatus_t);

// Library versions as "major.minor.patch", for the device fingerprint.
std::string cudnn_version_text();
std::string cublas_version_text();

}  // namespace shapetune
