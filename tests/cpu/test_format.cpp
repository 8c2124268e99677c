// The units a result is printed in: bandwidth for memory-bound problems, FLOP rate for GEMM.
#include <gtest/gtest.h>

#include "core/format.hpp"

namespace shapetune {
namespace {

TEST(FmtAchieved, BandwidthBelowTheRidgeAndFlopRateAboveIt) {
  // Softmax 65536 x 1024 fp32: 512 MiB moved, 5 FLOPs an element: memory-bound.
  const double softmax_bytes = 2.0 * 65536 * 1024 * 4;
  EXPECT_EQ(fmt_achieved(softmax_bytes, 5.0 * 65536 * 1024, 129.0), "4.16 TB/s");
  // GEMM 4096^3 fp32: 137 GFLOP over 201 MB, 683 FLOPs a byte.
  const double n = 4096;
  EXPECT_EQ(fmt_achieved(3 * n * n * 4, 2 * n * n * n, 2682.4), "51.2 TFLOP/s");
  // Just below and at the ridge.
  EXPECT_EQ(fmt_achieved(1e9, 15.9e9, 1000.0), "1.00 TB/s");
  EXPECT_EQ(fmt_achieved(1e9, 16e9, 1000.0), "16.0 TFLOP/s");
  // No cost model: nothing to say.
  EXPECT_EQ(fmt_achieved(0, 0, 10.0), "");
}

}  // namespace
}  // namespace shapetune
