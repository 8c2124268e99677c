#include "baselines/library_handles.hpp"

namespace shapetune {

LibraryHandles::~LibraryHandles() {
  caches_.clear();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (cublas_lt_) cublasLtDestroy(cublas_lt_);
}

cudnnHandle_t LibraryHandles::cudnn(cudaStream_t stream) {
  if (!cudnn_) {
    if (cudnnStatus_t s = cudnnCreate(&cudnn_); s != CUDNN_STATUS_SUCCESS) {
      cudnn_ = nullptr;
      throw LibraryError("cudnnCreate failed: " + cudnn_status_text(s));
    }
  }
  if (cudnnStatus_t s = cudnnSetStream(cudnn_, stream); s != CUDNN_STATUS_SUCCESS)
    throw LibraryError("cudnnSetStream failed: " + cudnn_status_text(s));
  return cudnn_;
}

cublasHandle_t LibraryHandles::cublas(cudaStream_t stream) {
  if (!cublas_) {
    if (cublasStatus_t s = cublasCreate(&cublas_); s != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      throw LibraryError("cublasCreate failed: " + cublas_status_text(s));
    }
  }
  if (cublasStatus_t s = cublasSetStream(cublas_, stream); s != CUBLAS_STATUS_SUCCESS)
    throw LibraryError("cublasSetStream failed: " + cublas_status_text(s));
  return cublas_;
}

cublasLtHandle_t LibraryHandles::cublas_lt() {
  if (!cublas_lt_) {
    if (cublasStatus_t s = cublasLtCreate(&cublas_lt_); s != CUBLAS_STATUS_SUCCESS) {
      cublas_lt_ = nullptr;
      throw LibraryError("cublasLtCreate failed: " + cublas_status_text(s));
    }
  }
  return cublas_lt_;
}

std::string cudnn_status_text(cudnnStatus_t s) { return cudnnGetErrorString(s); }

std::string cublas_status_text(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")";
}

std::string cudnn_version_text() {
  // cudnnGetVersion() is major*10000 + minor*100 + patch since cuDNN 9.
  const std::size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string cublas_version_text() {
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace shapetune
