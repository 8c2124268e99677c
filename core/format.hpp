// Number formats shared by the progress lines, the CLI tables and the reports.
#pragma once

#include <string>

namespace shapetune {

std::string fmt_us(double us);                  // "41.23 us", "1234.5 us"
std::string fmt_rate(double bytes_per_second);  // "3.41 TB/s", "812.0 GB/s"
std::string fmt_fixed(double v, int decimals);

}  // namespace shapetune
