#include "harness/cuda_check.hpp"

namespace shapetune {

bool is_sticky_cuda_error(cudaError_t code) {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

bool CudaError::context_lost() const { return is_sticky_cuda_error(code_); }

void cuda_check(cudaError_t code, const char* expression, const char* file, int line) {
  if (code == cudaSuccess) return;
  throw CudaError(code, std::string(cudaGetErrorName(code)) + " (" + cudaGetErrorString(code) + ") from " +
                            expression + " at " + file + ":" + std::to_string(line));
}

}  // namespace shapetune
