// The one JSON writer: string escapes (controls, quotes, invalid UTF-8), numbers, object order.
#include "core/json.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace shapetune {
namespace {

TEST(Json, StringsEscapeQuotesBackslashesAndControls) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string(std::string("x\n\x01y", 4)), "\"x\\u000a\\u0001y\"");
}

TEST(Json, ValidUtf8PassesAndInvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(json_string("\xc3\xa9t\xc3\xa9"), "\"\xc3\xa9t\xc3\xa9\"");          // été
  EXPECT_EQ(json_string("\xf0\x9f\x9a\x80"), "\"\xf0\x9f\x9a\x80\"");            // U+1F680
  EXPECT_EQ(json_string("a\xff" "b"), "\"a\\ufffdb\"");                            // never valid
  EXPECT_EQ(json_string("\xc3"), "\"\\ufffd\"");                                   // truncated
  EXPECT_EQ(json_string("\xc0\xaf"), "\"\\ufffd\\ufffd\"");                        // overlong '/'
  EXPECT_EQ(json_string("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");             // a surrogate
  EXPECT_EQ(json_string("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // above U+10FFFF
}

TEST(Json, NumbersReadBackExactlyAndNonFiniteIsNull) {
  EXPECT_EQ(json_number(3), "3");
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(1e300), "1e+300");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(-INFINITY), "null");
  EXPECT_EQ(json_integer(-7), "-7");
  EXPECT_EQ(json_bool(false), "false");
}

TEST(Json, ObjectsKeepTheirOrder) {
  JsonObject o;
  o.add("z", "1").add("a", json_string("x"));
  EXPECT_EQ(o.inline_text(), "{\"z\": 1, \"a\": \"x\"}");
  EXPECT_EQ(o.block_text("  "), "{\n    \"z\": 1,\n    \"a\": \"x\"\n  }");
  EXPECT_EQ(json_block_array({}, ""), "[]");
  EXPECT_EQ(json_block_array({"1", "2"}, ""), "[\n  1,\n  2\n]");
}

}  // namespace
}  // namespace shapetune
