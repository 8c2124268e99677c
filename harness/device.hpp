// The GPU this process measures on: its fingerprint (who the winners belong to) and the
// limits kernels' constraints are checked against.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace shapetune {

struct DeviceInfo {
  int ordinal = 0;
  DeviceFingerprint fingerprint;
  DeviceLimits limits;
  std::string pci_bus_id;
  double memory_clock_mhz = 0;
  int memory_bus_bits = 0;
};

// Why no CUDA device can be used here ("no CUDA-capable device is detected", a driver
// mismatch, ...), or nullopt when at least one can.
std::optional<std::string> cuda_unavailable_reason();

// Every visible device; throws CudaError.
std::vector<DeviceInfo> list_devices();
// One device, made current for this thread; throws CudaError / std::out_of_range.
DeviceInfo use_device(int ordinal);

}  // namespace shapetune
