#include "harness/ceilings.hpp"

#include <algorithm>

#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "kernels/memory.cuh"

namespace shapetune {

std::vector<MeasuredCeiling> measure_memory_ceilings(Measurer& measurer, std::int64_t bytes) {
  const auto size = static_cast<std::size_t>(bytes) / 16 * 16;
  DeviceBuffer src(size), dst(size);
  SHAPETUNE_CUDA_CHECK(cudaMemset(src.get(), 0x3c, size));
  SHAPETUNE_CUDA_CHECK(cudaMemset(dst.get(), 0, size));
  const double moved = 2.0 * static_cast<double>(size);  // read + written
  const std::string what = std::to_string(size >> 20) + " MiB read + written, median of " +
                           (measurer.options().flush_l2 ? "cold" : "hot") + " samples";

  std::vector<MeasuredCeiling> out;
  auto add = [&](std::string name, std::string how, const std::function<void(cudaStream_t)>& launch) {
    TimingStats t = measurer.time_launch(launch);
    out.push_back({std::move(name), moved / (t.median_us * 1e-6), "B/s", how + ", " + what, t});
  };
  add("dram_copy_memcpy", "cudaMemcpyAsync device to device", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), size, cudaMemcpyDeviceToDevice, s));
  });
  add("dram_copy_kernel_vec16", "grid-stride copy kernel, 16-byte accesses", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(kernels::memory::copy_vec16(src.get(), dst.get(), size, s));
  });
  add("dram_copy_kernel_scalar", "grid-stride copy kernel, 4-byte accesses", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(kernels::memory::copy_scalar(src.get(), dst.get(), size, s));
  });
  const auto best = *std::max_element(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
  out.push_back({kCopyCeilingName, best.value, "B/s", "best of the copies above (" + best.name + ")", best.timing});
  return out;
}

}  // namespace shapetune
