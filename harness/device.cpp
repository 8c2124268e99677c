#include "harness/device.hpp"

#include <cuda_runtime_api.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

#include "baselines/library_handles.hpp"
#include "harness/cuda_check.hpp"

namespace shapetune {
namespace {

std::string version_text(int cuda_version) {
  return std::to_string(cuda_version / 1000) + "." + std::to_string(cuda_version % 1000 / 10);
}

// The kernel module's version ("580.159.04") is what people call the driver version; the
// runtime only reports the CUDA API level the driver supports.
std::string driver_version_text() {
  int api = 0;
  cudaDriverGetVersion(&api);
  std::string module;
  std::ifstream proc("/proc/driver/nvidia/version");
  std::string line;
  if (proc && std::getline(proc, line)) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"((\d+\.\d+(\.\d+)?))"))) module = m[1];
  }
  const std::string api_text = "CUDA " + version_text(api);
  return module.empty() ? api_text : module + " (" + api_text + ")";
}

DeviceInfo describe(int ordinal) {
  cudaDeviceProp prop{};
  SHAPETUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  auto& f = info.fingerprint;
  f.name = prop.name;
  f.compute_capability = prop.major * 10 + prop.minor;
  f.sm_count = prop.multiProcessorCount;
  f.l2_bytes = prop.l2CacheSize;
  f.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  f.driver_version = driver_version_text();
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  f.runtime_version = version_text(runtime);
  f.cublas_version = cublas_version_text();
  f.cudnn_version = cudnn_version_text();

  auto& l = info.limits;
  l.compute_capability = f.compute_capability;
  l.sm_count = f.sm_count;
  l.max_threads_per_block = prop.maxThreadsPerBlock;
  l.shared_memory_per_block_optin = static_cast<std::int64_t>(prop.sharedMemPerBlockOptin);
  l.l2_bytes = f.l2_bytes;
  l.global_memory_bytes = f.memory_bytes;

  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess) info.pci_bus_id = bus;
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess)
    info.memory_clock_mhz = clock_khz / 1000.0;
  cudaDeviceGetAttribute(&info.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal);
  return info;
}

}  // namespace

std::optional<std::string> cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so later calls start clean
    const std::string cuda = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
    // Without a driver the runtime says "driver version is insufficient", which sends a user
    // looking for a driver update on a machine that has no GPU at all.
    std::error_code ignored;
    if ((e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) &&
        !std::filesystem::exists("/proc/driver/nvidia/version", ignored))
      return "no NVIDIA driver is loaded on this machine (no /proc/driver/nvidia/version): no GPU to run on; CUDA "
             "says: " + cuda;
    if (e == cudaErrorInsufficientDriver) {
      std::ifstream version("/proc/driver/nvidia/version");
      std::string line;
      std::getline(version, line);
      return "the NVIDIA driver is older than this build's CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + "." +
             std::to_string(CUDART_VERSION % 1000 / 10) + " needs (" + line + "): update the driver; CUDA says: " + cuda;
    }
    return cuda;
  }
  if (count == 0) return std::string("no CUDA device is visible");
  return std::nullopt;
}

std::vector<DeviceInfo> list_devices() {
  int count = 0;
  SHAPETUNE_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) out.push_back(describe(i));
  return out;
}

DeviceInfo use_device(int ordinal) {
  int count = 0;
  SHAPETUNE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw std::out_of_range("device " + std::to_string(ordinal) + " does not exist; " + std::to_string(count) +
                            " visible (0.." + std::to_string(count - 1) + ")");
  SHAPETUNE_CUDA_CHECK(cudaSetDevice(ordinal));
  return describe(ordinal);
}

}  // namespace shapetune
