// Writing JSON: escaped strings, numbers that read back exactly, and objects whose members keep
// the order they were added in. One writer for every JSON the project emits (export, the runners'
// results).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shapetune {

// Shortest text that parses back to the same double; integral values print without a fraction
// or exponent. nullopt for NaN and infinities, which each format spells its own way.
std::optional<std::string> finite_number_text(double value);

// A JSON string literal: quotes, backslashes and control characters escaped; bytes that are not
// valid UTF-8 become U+FFFD, so the document is valid JSON whatever the text held.
std::string json_string(std::string_view text);
std::string json_number(double value);  // null for NaN and infinities (JSON has neither)
std::string json_integer(std::int64_t value);
std::string json_bool(bool value);

// Members in the order they are added; values are JSON text already.
class JsonObject {
 public:
  JsonObject& add(std::string_view name, std::string json_value);
  std::string inline_text() const;                     // {"a": 1, "b": 2}
  std::string block_text(const std::string& indent) const;  // one member a line

 private:
  std::vector<std::pair<std::string, std::string>> members_;
};

// [ items, one a line ] (items are JSON text), "[]" when empty.
std::string json_block_array(const std::vector<std::string>& items, const std::string& indent);

}  // namespace shapetune
