#include "core/json_reader.hpp"

#include <charconv>
#include <cstdio>
#include <limits>
#include <system_error>

namespace shapetune {
namespace {

std::string describe_byte(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char hex[16];
  std::snprintf(hex, sizeof hex, "byte 0x%02X", static_cast<unsigned>(c));
  return hex;
}

void append_code_point(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_number_byte(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

}  // namespace

JsonError::JsonError(std::size_t offset, const std::string& problem)
    : std::runtime_error("byte " + std::to_string(offset) + ": " + problem), offset_(offset) {}

std::string_view json_kind_name(JsonKind kind) {
  switch (kind) {
    case JsonKind::object: return "an object";
    case JsonKind::array: return "an array";
    case JsonKind::string: return "a string";
    case JsonKind::number: return "a number";
    case JsonKind::boolean: return "a boolean";
    case JsonKind::null: return "null";
  }
  return "?";
}

void JsonReader::skip_whitespace() {
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
    ++pos_;
}

void JsonReader::fail(const std::string& problem) const { throw JsonError(pos_, problem); }

JsonKind JsonReader::peek() {
  skip_whitespace();
  if (pos_ == text_.size()) fail("the text ends where a value was expected");
  const char c = text_[pos_];
  switch (c) {
    case '{': return JsonKind::object;
    case '[': return JsonKind::array;
    case '"': return JsonKind::string;
    case 't':
    case 'f': return JsonKind::boolean;
    case 'n': return JsonKind::null;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return JsonKind::number;
      fail("unexpected " + describe_byte(static_cast<unsigned char>(c)) + " where a value was expected");
  }
}

void JsonReader::expect_kind(JsonKind wanted) {
  const JsonKind got = peek();
  if (got != wanted) fail("expected " + std::string(json_kind_name(wanted)) + ", got " + std::string(json_kind_name(got)));
}

void JsonReader::enter(bool object) {
  expect_kind(object ? JsonKind::object : JsonKind::array);
  if (open_.size() >= kMaxJsonDepth) fail("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  ++pos_;
  open_.push_back({object, true});
}

void JsonReader::begin_object() { enter(true); }
void JsonReader::begin_array() { enter(false); }

bool JsonReader::next_in(bool object) {
  if (open_.empty() || open_.back().object != object)
    throw std::logic_error(object ? "JsonReader::next_member outside an object" : "JsonReader::next_element outside an array");
  const char close = object ? '}' : ']';
  const char* what = object ? "an object" : "an array";
  skip_whitespace();
  if (pos_ == text_.size()) fail(std::string("the text ends inside ") + what);
  // A close after a ',' never gets here: the ',' is consumed below and the close fails as the value.
  if (text_[pos_] == close) {
    ++pos_;
    open_.pop_back();
    return false;
  }
  if (!open_.back().first) {
    if (text_[pos_] != ',')
      fail("expected ',' or '" + std::string(1, close) + "' in " + what + ", got " +
           describe_byte(static_cast<unsigned char>(text_[pos_])));
    ++pos_;
    skip_whitespace();
  }
  open_.back().first = false;
  return true;
}

bool JsonReader::next_member(std::string& name) {
  if (!next_in(true)) return false;
  if (pos_ == text_.size() || text_[pos_] != '"')
    fail(pos_ == text_.size() ? "the text ends where a member name was expected"
                              : "expected a member name (a string), got " + describe_byte(static_cast<unsigned char>(text_[pos_])));
  name = read_string();
  skip_whitespace();
  if (pos_ == text_.size() || text_[pos_] != ':') fail("expected ':' after a member name");
  ++pos_;
  return true;
}

bool JsonReader::next_element() { return next_in(false); }

unsigned JsonReader::read_hex4() {
  if (text_.size() - pos_ < 4) fail("\\u escape needs four hex digits");
  unsigned value = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[pos_ + i];
    unsigned digit;
    if (c >= '0' && c <= '9') digit = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') digit = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = static_cast<unsigned>(c - 'A' + 10);
    else fail("\\u escape needs four hex digits, got " + describe_byte(static_cast<unsigned char>(c)));
    value = value * 16 + digit;
  }
  pos_ += 4;
  return value;
}

// One multi-byte UTF-8 sequence, checked as Unicode's table of well-formed sequences has it: no
// overlong forms, no encoded surrogates, nothing past U+10FFFF.
void JsonReader::append_utf8_sequence(std::string& out) {
  const auto lead = static_cast<unsigned char>(text_[pos_]);
  int length = 0;
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    fail("invalid UTF-8 in a string (" + describe_byte(lead) + " starts no character)");
  }
  if (text_.size() - pos_ < static_cast<std::size_t>(length)) fail("invalid UTF-8 in a string (a character cut short)");
  for (int i = 1; i < length; ++i) {
    const auto c = static_cast<unsigned char>(text_[pos_ + i]);
    const unsigned char low = i == 1 ? second_low : 0x80, high = i == 1 ? second_high : 0xBF;
    if (c < low || c > high) fail("invalid UTF-8 in a string (" + describe_byte(c) + " cannot continue this character)");
  }
  out.append(text_.substr(pos_, static_cast<std::size_t>(length)));
  pos_ += static_cast<std::size_t>(length);
}

std::string JsonReader::read_string() {
  expect_kind(JsonKind::string);
  const std::size_t start = pos_++;
  std::string out;
  for (;;) {
    if (pos_ == text_.size()) throw JsonError(start, "unterminated string");
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (c < 0x20) fail("unescaped control character " + describe_byte(c) + " in a string");
    if (c >= 0x80) {
      append_utf8_sequence(out);
      continue;
    }
    if (c != '\\') {
      out += static_cast<char>(c);
      ++pos_;
      continue;
    }
    if (++pos_ == text_.size()) fail("the text ends inside an escape");
    const char escape = text_[pos_++];
    switch (escape) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = read_hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) fail("\\u escape of a low surrogate without its high surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (text_.substr(pos_, 2) != "\\u") fail("\\u escape of a high surrogate not followed by its low surrogate");
          pos_ += 2;
          const std::uint32_t low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) fail("\\u escape of a high surrogate not followed by its low surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        append_code_point(out, cp);
        break;
      }
      default:
        --pos_;
        fail("unknown escape \\ followed by " + describe_byte(static_cast<unsigned char>(escape)) + " in a string");
    }
  }
}

std::int64_t JsonReader::read_integer() {
  expect_kind(JsonKind::number);
  const std::size_t start = pos_;
  std::size_t lexeme_end = pos_;
  while (lexeme_end < text_.size() && lexeme_end - start < 40 && is_number_byte(text_[lexeme_end])) ++lexeme_end;
  const std::string lexeme(text_.substr(start, lexeme_end - start));
  const bool negative = text_[pos_] == '-';
  if (negative) ++pos_;
  if (pos_ == text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("'-' without digits");
  if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
    throw JsonError(start, "number " + lexeme + " has a leading zero");
  // Accumulated on the negative side, which reaches one further than the positive.
  std::int64_t value = 0;
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    const int digit = text_[pos_] - '0';
    if (value < (kMin + digit) / 10) throw JsonError(start, "integer " + lexeme + " does not fit in 64 bits");
    value = value * 10 - digit;
    ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
    throw JsonError(start, "expected an integer, got " + lexeme);
  if (!negative) {
    if (value == kMin) throw JsonError(start, "integer " + lexeme + " does not fit in 64 bits");
    value = -value;
  }
  return value;
}

// One number as RFC 8259 spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
std::string_view JsonReader::scan_number() {
  expect_kind(JsonKind::number);
  const std::size_t start = pos_;
  auto digit = [&] { return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; };
  auto digits = [&](const char* after) {
    if (!digit()) fail(std::string("expected a digit after ") + after + " in a number");
    while (digit()) ++pos_;
  };
  if (text_[pos_] == '-') ++pos_;
  if (!digit()) fail("'-' without digits");
  if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
    throw JsonError(start, "a number has a leading zero");
  while (digit()) ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    digits("'.'");
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    digits("an exponent");
  }
  return text_.substr(start, pos_ - start);
}

double JsonReader::read_number() {
  skip_whitespace();
  const std::size_t start = pos_;
  const std::string_view lexeme = scan_number();
  double value = 0;
  const auto [end, ec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), value);
  if (ec == std::errc::result_out_of_range) throw JsonError(start, "number " + std::string(lexeme) + " is beyond a double's range");
  if (ec != std::errc() || end != lexeme.data() + lexeme.size()) throw JsonError(start, "unreadable number " + std::string(lexeme));
  return value;
}

void JsonReader::expect_literal(std::string_view literal) {
  if (text_.substr(pos_, literal.size()) != literal) fail("expected " + std::string(literal));
  pos_ += literal.size();
}

bool JsonReader::read_boolean() {
  expect_kind(JsonKind::boolean);
  const bool value = text_[pos_] == 't';
  expect_literal(value ? "true" : "false");
  return value;
}

void JsonReader::read_null() {
  expect_kind(JsonKind::null);
  expect_literal("null");
}

void JsonReader::skip_value() {
  std::string name;
  switch (peek()) {
    case JsonKind::object:
      begin_object();
      while (next_member(name)) skip_value();
      return;
    case JsonKind::array:
      begin_array();
      while (next_element()) skip_value();
      return;
    case JsonKind::string: read_string(); return;
    case JsonKind::number: scan_number(); return;
    case JsonKind::boolean: read_boolean(); return;
    case JsonKind::null: read_null(); return;
  }
}

void JsonReader::expect_end() {
  skip_whitespace();
  if (pos_ != text_.size())
    fail("unexpected " + describe_byte(static_cast<unsigned char>(text_[pos_])) + " after the end of the document");
}

}  // namespace shapetune
