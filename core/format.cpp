#include "core/format.hpp"

#include <cstdio>

namespace shapetune {

std::string fmt_us(double us) {
  char text[32];
  std::snprintf(text, sizeof text, us < 100 ? "%.2f us" : "%.1f us", us);
  return text;
}

std::string fmt_rate(double bytes_per_second) {
  char text[32];
  if (bytes_per_second >= 1e12)
    std::snprintf(text, sizeof text, "%.2f TB/s", bytes_per_second / 1e12);
  else
    std::snprintf(text, sizeof text, "%.1f GB/s", bytes_per_second / 1e9);
  return text;
}

std::string fmt_achieved(double bytes, double flops, double us) {
  const double seconds = us * 1e-6;
  if (flops > 0 && (bytes <= 0 || flops / bytes >= kComputeBoundIntensity)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f TFLOP/s", flops / seconds / 1e12);
    return text;
  }
  return bytes > 0 ? fmt_rate(bytes / seconds) : "";
}

std::string fmt_quantity(double value, const std::string& unit) {
  if (unit == "B/s") return fmt_rate(value);
  if (unit == "s") return fmt_us(value * 1e6);
  char text[48];
  if (unit == "FLOP/s")
    std::snprintf(text, sizeof text, "%.1f TFLOP/s", value / 1e12);
  else
    std::snprintf(text, sizeof text, "%g", value);
  return unit == "FLOP/s" || unit.empty() ? text : text + (" " + unit);
}

std::string fmt_fixed(double v, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

}  // namespace shapetune
