// Reading JSON from outside data (safetensors headers): a strict pull reader. The caller walks
// the document it expects (begin_object, next_member, read_integer, ...) and the reader checks
// every byte on the way. There is no document tree: memory grows only with what the caller keeps,
// so a header of a million empty arrays costs nothing, and the nesting is as deep as the caller's
// walk (bounded besides by kMaxJsonDepth).
//
// Strict means RFC 8259 and nothing more: no comments, no trailing commas, no NaN, strings of valid
// UTF-8 with only the standard escapes (\uXXXX surrogates in pairs). Integers are numbers without
// fraction or exponent that fit int64; 1.0 and 1e3 are refused where an integer is asked for.
// Duplicate member names are the caller's to refuse (it knows which names it keeps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shapetune {

// Malformed JSON, or JSON of another shape than the caller asked for. offset() is where, in bytes
// from the start of the text; what() reads "byte N: <problem>".
class JsonError : public std::runtime_error {
 public:
  JsonError(std::size_t offset, const std::string& problem);
  std::size_t offset() const { return offset_; }

 private:
  std::size_t offset_;
};

enum class JsonKind { object, array, string, number, boolean, null };
std::string_view json_kind_name(JsonKind);  // "an object", "a string", ... for messages

inline constexpr int kMaxJsonDepth = 64;

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}
  // The reader keeps a view of the text: a temporary string would be gone before the first read.
  explicit JsonReader(std::string&&) = delete;
  explicit JsonReader(const char* text) : text_(text) {}

  // The kind of the next value (after whitespace); JsonError at the end of the text or at a byte
  // that starts no JSON value.
  JsonKind peek();

  // Objects: begin_object(), then while (next_member(name)) { read the value }; next_member
  // returns false having consumed the closing brace.
  void begin_object();
  bool next_member(std::string& name);
  // Arrays alike: begin_array(), then while (next_element()) { read the value }.
  void begin_array();
  bool next_element();

  std::string read_string();
  std::int64_t read_integer();
  // Any number the grammar allows (fraction and exponent included), as the nearest double;
  // JsonError for one beyond double's range.
  double read_number();
  bool read_boolean();
  void read_null();
  // Steps over the next value whatever its kind: a member the caller does not know, so a reader
  // of a format keeps reading documents of a later version that added members.
  void skip_value();

  // Only whitespace may follow the document.
  void expect_end();

  std::size_t offset() const { return pos_; }

 private:
  struct Open {
    bool object;
    bool first;
  };

  void skip_whitespace();
  [[noreturn]] void fail(const std::string& problem) const;
  void expect_kind(JsonKind wanted);
  void enter(bool object);
  bool next_in(bool object);
  void append_utf8_sequence(std::string& out);
  std::string_view scan_number();
  void expect_literal(std::string_view literal);
  unsigned read_hex4();

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<Open> open_;
};

}  // namespace shapetune
