#include "core/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace shapetune {
namespace {

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it is not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  const std::size_t left = text.size() - i;
  const auto continuation = [&](std::size_t k) { return (byte(k) & 0xC0) == 0x80; };
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return left >= 2 && continuation(i + 1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !continuation(i + 1) || !continuation(i + 2)) return 0;
    if (b0 == 0xE0 && byte(i + 1) < 0xA0) return 0;  // overlong
    if (b0 == 0xED && byte(i + 1) > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !continuation(i + 1) || !continuation(i + 2) || !continuation(i + 3)) return 0;
    if (b0 == 0xF0 && byte(i + 1) < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && byte(i + 1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::optional<std::string> finite_number_text(double value) {
  if (!std::isfinite(value)) return std::nullopt;
  if (std::trunc(value) == value && std::fabs(value) < 0x1p53) return std::to_string(static_cast<std::int64_t>(value));
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return std::string(text, end);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[7];
      std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escape;
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  out += '"';
  return out;
}

std::string json_number(double value) { return finite_number_text(value).value_or("null"); }
std::string json_integer(std::int64_t value) { return std::to_string(value); }
std::string json_bool(bool value) { return value ? "true" : "false"; }

JsonObject& JsonObject::add(std::string_view name, std::string json_value) {
  members_.emplace_back(json_string(name), std::move(json_value));
  return *this;
}

std::string JsonObject::inline_text() const {
  std::string out = "{";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (i) out += ", ";
    out += members_[i].first + ": " + members_[i].second;
  }
  return out + "}";
}

std::string JsonObject::block_text(const std::string& indent) const {
  std::string out = "{\n";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    out += indent + "  " + members_[i].first + ": " + members_[i].second;
    out += i + 1 < members_.size() ? ",\n" : "\n";
  }
  return out + indent + "}";
}

std::string json_block_array(const std::vector<std::string>& items, const std::string& indent) {
  if (items.empty()) return "[]";
  std::string out = "[\n";
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += indent + "  " + items[i];
    out += i + 1 < items.size() ? ",\n" : "\n";
  }
  return out + indent + "]";
}

}  // namespace shapetune
