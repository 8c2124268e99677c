// A small binary encoding for messages between shapetune's processes (the sweep and its GPU
// worker): fixed-width little-endian numbers and length-prefixed strings, read back with every
// length checked, so a truncated or garbled message is a WireError, never a wild read.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shapetune::wire {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  Writer& u8(std::uint8_t);
  Writer& boolean(bool v) { return u8(v ? 1 : 0); }
  Writer& i64(std::int64_t);
  Writer& f64(double);
  Writer& str(std::string_view);
  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// Reads what a Writer wrote, in the same order. Every read throws WireError past the end. It
// views the bytes: they must outlive the reader.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  std::uint8_t u8();
  bool boolean();
  std::int64_t i64();
  int i32();  // an i64 that must fit an int
  double f64();
  std::string str();
  bool done() const { return pos_ == bytes_.size(); }
  // Throws unless every byte was read: a message longer than its reader expects is garbled too.
  void expect_done() const;

 private:
  std::string_view take(std::size_t n);
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace shapetune::wire
