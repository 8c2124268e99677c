#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "harness/accuracy.hpp"
#include "harness/host_tensor.hpp"

namespace shapetune {
namespace {

TEST(ElementPasses, AbsoluteOrRelative) {
  const Tolerance tol{1e-6, 1e-3};
  EXPECT_TRUE(element_passes(1.0005, 1.0, tol));   // relative
  EXPECT_FALSE(element_passes(1.002, 1.0, tol));
  EXPECT_TRUE(element_passes(5e-7, 0.0, tol));     // absolute near zero
  EXPECT_FALSE(element_passes(2e-6, 0.0, tol));
}

TEST(ElementPasses, NanAndInfNeverPass) {
  const Tolerance loose{1e300, 1e300};
  EXPECT_FALSE(element_passes(NAN, 1.0, loose));
  EXPECT_FALSE(element_passes(INFINITY, 1.0, loose));
  EXPECT_FALSE(element_passes(-INFINITY, -INFINITY, loose));
  EXPECT_FALSE(element_passes(1.0, NAN, loose));
}

TEST(CompareWithReference, FindsPoisonLeftInTheLastElement) {
  const TensorSpec spec{"y", DType::f32, {3, 5}, TensorRole::output};
  std::vector<float> got(15);
  std::vector<double> want(15);
  for (int i = 0; i < 15; ++i) got[i] = static_cast<float>(want[i] = 0.25 * i);
  std::memset(&got[14], 0xFF, sizeof(float));  // poison never overwritten
  const AccuracyReport r = compare_with_reference(spec, got.data(), want, {1e-7, 1e-6});
  EXPECT_EQ(r.checked, 15);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_TRUE(std::isinf(r.max_abs_error));
  EXPECT_NE(r.first_mismatch.find("y[2,4]"), std::string::npos) << r.first_mismatch;
  EXPECT_NE(r.first_mismatch.find("nan"), std::string::npos) << r.first_mismatch;
}

TEST(CompareWithReference, ReportsWorstErrorsAndFirstMismatchAcrossChunks) {
  const std::int64_t n = 1 << 20;  // several parallel chunks
  const TensorSpec spec{"y", DType::f32, {n}, TensorRole::output};
  std::vector<float> got(n, 1.0f);
  std::vector<double> want(n, 1.0);
  got[n - 3] = 1.5f;
  got[n / 2] = 1.25f;
  const AccuracyReport r = compare_with_reference(spec, got.data(), want, {0, 1e-3});
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_DOUBLE_EQ(r.max_abs_error, 0.5);
  EXPECT_DOUBLE_EQ(r.max_rel_error, 0.5);
  EXPECT_NE(r.first_mismatch.find("y[" + std::to_string(n / 2) + "]"), std::string::npos) << r.first_mismatch;
}

TEST(CompareWithReference, ComparesOnlyTheCheckedRangesWhereGiven) {
  // Elements outside the ranges hold poison the reference never computed: neither counted nor
  // reported; a bad element inside a range is.
  const TensorSpec spec{"o", DType::f32, {4, 3}, TensorRole::output};
  std::vector<float> got(12);
  std::vector<double> want(12);
  for (int i = 0; i < 12; ++i) got[i] = static_cast<float>(want[i] = i);
  std::memset(&got[3], 0xFF, 3 * sizeof(float));  // row 1 unwritten and unchecked
  got[10] = 99.f;                                 // row 3 wrong
  const ElementRange ranges[] = {{0, 3}, {6, 12}};
  const AccuracyReport r = compare_with_reference(spec, got.data(), want, {1e-6, 1e-6}, ranges);
  EXPECT_EQ(r.checked, 9);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_NE(r.first_mismatch.find("o[3,1]"), std::string::npos) << r.first_mismatch;
  const ElementRange outside[] = {{10, 13}};
  EXPECT_THROW(compare_with_reference(spec, got.data(), want, {1e-6, 1e-6}, outside), std::logic_error);
}

TEST(HostTensor, DrawnValuesAreTheStoredOnesAndInRange) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const TensorSpec spec{"x", t, {1000}, TensorRole::input, -8, 8};
    std::vector<std::byte> bytes;
    std::vector<double> values;
    draw_uniform(spec, 42, bytes, values);
    ASSERT_EQ(bytes.size(), 1000 * dtype_size(t));
    double lo = 1e9, hi = -1e9;
    int distinct_from_first = 0;
    for (std::int64_t i = 0; i < 1000; ++i) {
      EXPECT_EQ(values[i], load_as_double(t, bytes.data(), i));
      lo = std::min(lo, values[i]);
      hi = std::max(hi, values[i]);
      distinct_from_first += values[i] != values[0];
    }
    EXPECT_GE(lo, -8.0);
    EXPECT_LE(hi, 8.0);
    EXPECT_LT(lo, -7.0);  // spread over the range, not stuck near zero
    EXPECT_GT(hi, 7.0);
    EXPECT_GT(distinct_from_first, 900);
  }
}

TEST(HostTensor, SameSeedSameValuesOtherSeedOtherValues) {
  const TensorSpec spec{"x", DType::f32, {64}, TensorRole::input, -1, 1};
  std::vector<std::byte> b1, b2, b3;
  std::vector<double> v1, v2, v3;
  draw_uniform(spec, 7, b1, v1);
  draw_uniform(spec, 7, b2, v2);
  draw_uniform(spec, 8, b3, v3);
  EXPECT_EQ(v1, v2);
  EXPECT_NE(v1, v3);
}

TEST(HostTensor, HalfAndBfloatRoundToNearest) {
  std::uint16_t buffer = 0;
  store_from_double(DType::f16, 1.0 + 1.0 / 4096, &buffer, 0);  // below half an f16 ulp (2^-11)
  EXPECT_EQ(load_as_double(DType::f16, &buffer, 0), 1.0);
  store_from_double(DType::bf16, 3.0, &buffer, 0);
  EXPECT_EQ(load_as_double(DType::bf16, &buffer, 0), 3.0);
  // bf16 ulp at 1 is 2^-7: exactly half an ulp ties to even, a little more rounds up.
  store_from_double(DType::bf16, 1.0 + 1.0 / 256, &buffer, 0);
  EXPECT_EQ(load_as_double(DType::bf16, &buffer, 0), 1.0);
  store_from_double(DType::bf16, 1.0 + 1.0 / 256 + 1.0 / 1024, &buffer, 0);
  EXPECT_EQ(load_as_double(DType::bf16, &buffer, 0), 1.0 + 1.0 / 128);
}

}  // namespace
}  // namespace shapetune
