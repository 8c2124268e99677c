// The strict JSON reader's values beyond strings and integers: any number, booleans, null, and
// stepping over a value it does not know (what a reader of --json-progress events needs).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json_reader.hpp"

namespace shapetune {
namespace {

TEST(JsonReader, NumbersBooleansNullsAndSkippedValues) {
  JsonReader r(R"([0, -0.5, 12.25e2, 1E-3, 9007199254740993, true, false, null, {"a": [[], {}, "x\u00e9"]}, 7])");
  r.begin_array();
  std::vector<double> numbers;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(r.next_element());
    numbers.push_back(r.read_number());
  }
  EXPECT_EQ(numbers, (std::vector<double>{0, -0.5, 1225, 0.001, 9007199254740992.0}));
  ASSERT_TRUE(r.next_element());
  EXPECT_TRUE(r.read_boolean());
  ASSERT_TRUE(r.next_element());
  EXPECT_FALSE(r.read_boolean());
  ASSERT_TRUE(r.next_element());
  r.read_null();
  ASSERT_TRUE(r.next_element());
  r.skip_value();
  ASSERT_TRUE(r.next_element());
  EXPECT_EQ(r.read_integer(), 7);
  EXPECT_FALSE(r.next_element());
  r.expect_end();

  for (const char* bad : {"01", "1.", ".5", "+1", "1e", "1e+", "-", "--1", "0x10", "1e400", "-1e400"}) {
    JsonReader reader(bad);
    EXPECT_THROW(
        {
          reader.read_number();
          reader.expect_end();
        },
        JsonError)
        << bad;
  }
  for (const char* bad : {"tru", "nul", "True", "\"true\""}) {
    JsonReader reader(bad);
    EXPECT_THROW(reader.peek() == JsonKind::null ? reader.read_null() : (void)reader.read_boolean(), JsonError) << bad;
  }
  const std::string nested = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  JsonReader deep(nested);
  EXPECT_THROW(deep.skip_value(), JsonError);
}

}  // namespace
}  // namespace shapetune
