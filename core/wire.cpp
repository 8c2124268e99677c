#include "core/wire.hpp"

#include <bit>
#include <cstring>
#include <limits>

namespace shapetune::wire {
namespace {

template <typename T>
void put_le(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "wire encoding assumes a little-endian host");
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

template <typename T>
T get_le(std::string_view raw) {
  T value;
  std::memcpy(&value, raw.data(), sizeof(T));
  return value;
}

}  // namespace

Writer& Writer::u8(std::uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::i64(std::int64_t v) {
  put_le(bytes_, v);
  return *this;
}

Writer& Writer::f64(double v) {
  put_le(bytes_, v);
  return *this;
}

Writer& Writer::str(std::string_view s) {
  i64(static_cast<std::int64_t>(s.size()));
  bytes_.append(s);
  return *this;
}

std::string_view Reader::take(std::size_t n) {
  if (n > bytes_.size() - pos_)
    throw WireError("message truncated: " + std::to_string(n) + " bytes wanted at offset " + std::to_string(pos_) +
                    " of " + std::to_string(bytes_.size()));
  const std::string_view out = bytes_.substr(pos_, n);
  pos_ += n;
  return out;
}

std::uint8_t Reader::u8() { return static_cast<std::uint8_t>(take(1)[0]); }

bool Reader::boolean() {
  const std::uint8_t v = u8();
  if (v > 1) throw WireError("message garbled: a boolean reads " + std::to_string(v));
  return v == 1;
}

std::int64_t Reader::i64() { return get_le<std::int64_t>(take(8)); }

int Reader::i32() {
  const std::int64_t v = i64();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw WireError("message garbled: " + std::to_string(v) + " does not fit an int");
  return static_cast<int>(v);
}

double Reader::f64() { return get_le<double>(take(8)); }

std::string Reader::str() {
  const std::int64_t n = i64();
  if (n < 0) throw WireError("message garbled: a string of length " + std::to_string(n));
  return std::string(take(static_cast<std::size_t>(n)));
}

void Reader::expect_done() const {
  if (!done())
    throw WireError("message garbled: " + std::to_string(bytes_.size() - pos_) + " bytes left over");
}

}  // namespace shapetune::wire
