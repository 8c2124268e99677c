#include "core/counters.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shapetune::counters {

std::vector<std::string> default_metrics() {
  return {std::string(kDramBytesRead),  std::string(kDramBytesWrite), std::string(kDuration),
          std::string(kOccupancy),      std::string(kL2HitRate),      std::string(kDramThroughput),
          std::string(kSmThroughput),   std::string(kFadd),           std::string(kFmul),
          std::string(kFfma),           std::string(kHadd),           std::string(kHmul),
          std::string(kHfma),           std::string(kTensorInstructions)};
}

std::vector<std::string> with_extra(std::vector<std::string> base, const std::vector<std::string>& extra) {
  for (const auto& name : extra)
    if (std::find(base.begin(), base.end(), name) == base.end()) base.push_back(name);
  return base;
}

namespace {

std::optional<double> find(const Values& values, std::string_view name) {
  const auto it = values.find(std::string(name));
  if (it == values.end()) return std::nullopt;
  return it->second;
}

void add_flops(Values& values, std::string_view add, std::string_view mul, std::string_view fma,
               std::string_view result) {
  const auto a = find(values, add), m = find(values, mul), f = find(values, fma);
  if (a && m && f) values[std::string(result)] = *a + *m + 2 * *f;
}

}  // namespace

void add_derived(Values& values) {
  add_flops(values, kFadd, kFmul, kFfma, kFp32Flops);
  add_flops(values, kHadd, kHmul, kHfma, kFp16Flops);
}

std::optional<double> dram_bytes(const Values& values) {
  const auto read = find(values, kDramBytesRead), write = find(values, kDramBytesWrite);
  if (!read || !write || !std::isfinite(*read) || !std::isfinite(*write)) return std::nullopt;
  return *read + *write;
}

std::string dram_vs_model_text(const Values& values, double model_bytes) {
  const auto measured = dram_bytes(values);
  if (!measured || !std::isfinite(model_bytes) || model_bytes <= 0) return "";
  char text[48];
  std::snprintf(text, sizeof text, "%.2fx model", *measured / model_bytes);
  return text;
}

}  // namespace shapetune::counters
