// Empirical ceilings of the device, measured with the same timing method as the kernels
// (reports compare against these, never against datasheet numbers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "harness/measure.hpp"

namespace shapetune {

struct MeasuredCeiling {
  std::string name;    // "dram_copy_memcpy"
  double value = 0;    // in `unit`
  std::string unit;    // "B/s"
  std::string method;  // one line: what was timed and how the value follows from it
  TimingStats timing;
};

// Device-memory bandwidth three ways over `bytes` of source (bytes read + bytes written per
// second): cudaMemcpy device-to-device, a 16-byte-per-thread copy kernel, a 4-byte one.
std::vector<MeasuredCeiling> measure_memory_ceilings(Measurer&, std::int64_t bytes);

// The best of the memory ceilings: what "% of copy bandwidth" is measured against.
constexpr const char* kCopyCeilingName = "dram_copy_best";

}  // namespace shapetune
