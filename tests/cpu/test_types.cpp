#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/types.hpp"

namespace shapetune {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::tf32}) {
    const auto parsed = parse_dtype(dtype_name(dtype));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_names(), "f32, f16, bf16, i32, tf32");
  EXPECT_EQ(dtype_size(DType::tf32), 4u);  // fp32 storage
}

TEST(DType, UnknownNamesAreRejected) {
  EXPECT_FALSE(parse_dtype("f64").has_value());
  EXPECT_FALSE(parse_dtype("F32").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
}

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
}

TEST(Shape, KeyKeepsAxisOrderAndRoundTrips) {
  const Shape shape({{"rows", 4096}, {"cols", 1000}});
  EXPECT_EQ(shape.key(), "rows=4096,cols=1000");
  EXPECT_EQ(Shape::parse_key(shape.key()), shape);
  EXPECT_NE(Shape::parse_key("cols=1000,rows=4096"), shape);
}

TEST(Shape, LargeExtentsRoundTrip) {
  const Shape shape({{"n", std::int64_t{1} << 40}});
  EXPECT_EQ(shape.key(), "n=1099511627776");
  EXPECT_EQ(Shape::parse_key(shape.key()).at("n"), std::int64_t{1} << 40);
}

TEST(Shape, EmptyShapeRoundTrips) {
  EXPECT_EQ(Shape().key(), "");
  EXPECT_EQ(Shape::parse_key(""), Shape());
  EXPECT_EQ(Shape().elements(), 1);
}

TEST(Shape, LookupAndElements) {
  const Shape shape({{"rows", 3}, {"cols", 5}});
  EXPECT_EQ(shape.at("cols"), 5);
  EXPECT_EQ(shape.find("rows"), 3);
  EXPECT_FALSE(shape.find("depth").has_value());
  EXPECT_EQ(shape.elements(), 15);
}

TEST(Shape, AtNamesTheMissingAxis) {
  const Shape shape({{"rows", 3}});
  try {
    shape.at("depth");
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("depth"), std::string::npos) << e.what();
  }
}

TEST(Shape, MalformedKeysAreRejected) {
  for (const char* key : {"rows", "rows=", "=4", "rows=abc", "rows=4x", "rows=4,", "rows=4,,cols=2", "rows=1.5"})
    EXPECT_THROW(Shape::parse_key(key), std::invalid_argument) << key;
}

TEST(Problem, KeyRoundTrips) {
  const Problem problem{"softmax", DType::bf16, Shape({{"rows", 7}, {"cols", 1000}})};
  EXPECT_EQ(problem.key(), "softmax/bf16/rows=7,cols=1000");
  EXPECT_EQ(Problem::parse_key(problem.key()), problem);
}

TEST(Problem, MalformedKeysAreRejected) {
  for (const char* key : {"softmax", "softmax/f32", "softmax/f64/rows=1", "softmax/f32/rows=x"})
    EXPECT_THROW(Problem::parse_key(key), std::invalid_argument) << key;
}

TEST(Config, KeyRoundTrips) {
  const Config config({{"block_size", 256}, {"vec", 4}});
  EXPECT_EQ(config.key(), "block_size=256,vec=4");
  EXPECT_EQ(Config::parse_key(config.key()), config);
}

TEST(Config, NoParametersIsTheEmptyKey) {
  EXPECT_EQ(Config().key(), "");
  EXPECT_EQ(Config::parse_key(""), Config());
}

TEST(Config, MalformedKeysAreRejected) {
  for (const char* key : {"block_size", "block_size=", "block_size=big", "=256"})
    EXPECT_THROW(Config::parse_key(key), std::invalid_argument) << key;
}

TEST(Config, SetReplacesInPlaceOrAppends) {
  Config config({{"block_size", 256}, {"vec", 4}});
  config.set("block_size", 512);
  config.set("unroll", 2);
  EXPECT_EQ(config.key(), "block_size=512,vec=4,unroll=2");
  EXPECT_EQ(config.at("unroll"), 2);
  EXPECT_FALSE(config.find("rows").has_value());
  EXPECT_THROW(config.at("rows"), std::out_of_range);
}

DeviceFingerprint h200_with_memory(std::int64_t memory_bytes) {
  DeviceFingerprint device;
  device.name = "NVIDIA H200";
  device.compute_capability = 90;
  device.sm_count = 132;
  device.memory_bytes = memory_bytes;
  return device;
}

TEST(DeviceFingerprint, KeyRoundsMemoryToNearestGiB) {
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  EXPECT_EQ(h200_with_memory(141 * kGiB).key(), "NVIDIA H200|sm_90|132SM|141GiB");
  EXPECT_EQ(h200_with_memory(141 * kGiB - 300 * kMiB).key(), "NVIDIA H200|sm_90|132SM|141GiB");
  EXPECT_EQ(h200_with_memory(141 * kGiB + 511 * kMiB).key(), "NVIDIA H200|sm_90|132SM|141GiB");
  EXPECT_EQ(h200_with_memory(141 * kGiB + 513 * kMiB).key(), "NVIDIA H200|sm_90|132SM|142GiB");
}

TEST(DeviceFingerprint, VersionsDoNotSplitTheKey) {
  DeviceFingerprint older = h200_with_memory(std::int64_t{141} << 30);
  DeviceFingerprint newer = older;
  older.driver_version = "550.54";
  newer.driver_version = "560.35";
  newer.cudnn_version = "9.1.0";
  EXPECT_EQ(older.key(), newer.key());
  newer.sm_count = 114;
  EXPECT_NE(older.key(), newer.key());
}

}  // namespace
}  // namespace shapetune
