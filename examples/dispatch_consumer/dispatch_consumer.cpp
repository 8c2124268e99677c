// Looks one problem up in a shapetune dispatch database the way a model runner does and, where a
// CUDA device is present, launches the variant it resolves to once, through the catalogue.
//
//   dispatch_consumer DB PRIMITIVE DTYPE AXIS=EXTENT...
//   dispatch_consumer shapetune.db gemm.nt f16 m=4096 n=4096 k=4096
#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "baselines/library_handles.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "models/dispatcher.hpp"

using namespace shapetune;

int main(int argc, char** argv) try {
  const Primitive* primitive = argc > 3 ? catalogue().find_primitive(argv[2]) : nullptr;
  const std::optional<DType> dtype = argc > 3 ? parse_dtype(argv[3]) : std::nullopt;
  if (!primitive || !dtype) {
    std::cerr << "usage: dispatch_consumer DB PRIMITIVE DTYPE AXIS=EXTENT...\nprimitives: "
              << catalogue().primitive_names() << "\ndtypes: " << dtype_names() << "\n";
    return 2;
  }
  // The shape in the order the primitive declares its axes, whatever order they were given in.
  std::vector<std::pair<std::string, std::int64_t>> dims;
  for (const std::string& axis : primitive->axes)
    for (int i = 4; i < argc; ++i)
      if (std::string(argv[i]).rfind(axis + "=", 0) == 0) dims.emplace_back(axis, std::stoll(argv[i] + axis.size() + 1));
  if (dims.size() != primitive->axes.size() || dims.size() != static_cast<std::size_t>(argc - 4)) {
    std::cerr << primitive->name << " takes one extent per axis:";
    for (const std::string& axis : primitive->axes) std::cerr << " " << axis << "=N";
    std::cerr << "\n";
    return 2;
  }
  const Problem problem{primitive->name, *dtype, Shape(dims)};

  // Winners are keyed by device: this GPU's, or without one the first device the database holds.
  const std::optional<std::string> no_gpu = cuda_unavailable_reason();
  const std::optional<DeviceInfo> device = no_gpu ? std::nullopt : std::optional(use_device(0));
  std::string device_key = device ? device->fingerprint.key() : "";
  if (!device)
    if (const auto devices = Store::open(argv[1], OpenMode::read_only)->devices(); !devices.empty())
      device_key = devices.front().key();
  const DeviceLimits limits = device ? device->limits : nominal_device_limits();
  const Dispatcher dispatcher(argv[1], device_key, limits);

  const DispatchChoice choice = dispatcher.lookup(problem);
  std::cout << problem.key() << " on " << device_key << ": " << dispatch_source_name(choice.source);
  if (choice.source == DispatchSource::nearest) std::cout << " (tuned for " << choice.tuned_problem << ")";
  if (choice.source == DispatchSource::fallback) std::cout << " (nothing tuned applies: the primitive's default)";
  std::cout << "\n  variant " << choice.variant << "{" << choice.config.key() << "}\n";
  if (!choice.library_algo.empty()) std::cout << "  recorded library algorithm " << choice.library_algo << "\n";
  if (!device) {
    std::cout << "no CUDA device (" << *no_gpu << "): lookup only, nothing launched\n";
    return 0;
  }

  // One launch: the primitive's tensors (zeroed), its scalars' tuning values, the variant's workspace.
  const Variant& variant = dispatcher.variant_of(problem, choice);
  if (const Support s = variant.supports(problem, choice.config, limits); !s.ok) {
    std::cerr << variant.name << " cannot run " << problem.key() << " here: " << s.reason << "\n";
    return 1;
  }
  std::vector<DeviceBuffer> buffers;
  std::vector<void*> tensors;
  for (const TensorSpec& spec : primitive->tensors(problem)) {
    buffers.emplace_back(static_cast<std::size_t>(spec.bytes()));
    if (cudaMemset(buffers.back().get(), 0, buffers.back().bytes()) != cudaSuccess) throw std::runtime_error("cudaMemset");
    tensors.push_back(buffers.back().get());
  }
  const DeviceBuffer workspace(variant.workspace_bytes ? variant.workspace_bytes(problem, choice.config) : 0);
  const std::vector<double> scalars = default_scalars(*primitive);
  LibraryHandles libraries;
  const LaunchStatus status = variant.launch(LaunchArgs{problem, choice.config, tensors, nullptr, libraries,
                                                        workspace.get(), workspace.bytes(), scalars, choice.library_algo});
  const cudaError_t finished = status.ok ? cudaDeviceSynchronize() : cudaSuccess;
  if (!status.ok || finished != cudaSuccess) {
    std::cerr << "launch failed: " << (status.ok ? cudaGetErrorString(finished) : status.message) << "\n";
    return 1;
  }
  std::cout << "launched " << variant.name << " once on " << device->fingerprint.name << ": ok\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "dispatch_consumer: " << e.what() << "\n";
  return 1;
}
