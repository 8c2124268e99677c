// Number formats shared by the progress lines, the CLI tables and the reports.
#pragma once

#include <string>

namespace shapetune {

std::string fmt_us(double us);                  // "41.23 us", "1234.5 us"
std::string fmt_rate(double bytes_per_second);  // "3.41 TB/s", "812.0 GB/s"
std::string fmt_fixed(double v, int decimals);
// What a kernel achieved, in the unit that bounds it: the FLOP rate ("812 TFLOP/s") where the
// problem does at least kComputeBoundIntensity FLOPs a byte (GEMM), else the bandwidth.
inline constexpr double kComputeBoundIntensity = 16;  // about the H200's fp32 ridge point
std::string fmt_achieved(double bytes, double flops, double us);
// A measured ceiling in its unit: "B/s" as fmt_rate, "FLOP/s" as "66.9 TFLOP/s", "s" as
// fmt_us; any other as "%g unit".
std::string fmt_quantity(double value, const std::string& unit);

}  // namespace shapetune
