// safetensors files (Hugging Face's tensor container, what PyTorch users save weights in): the
// Transformer runner reads its weights and inputs from them and writes its outputs as one, so a
// PyTorch script can compare.
//
// The format: 8 bytes, N as a little-endian u64; N bytes of UTF-8 JSON, an object starting with
// '{' and maybe padded with spaces, mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets into the data section) plus an optional "__metadata__"
// object of strings; then the data section, which the tensors must cover exactly: no byte in two
// tensors, no byte in none (the format forbids holes so that a file cannot also be another file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"
#include "models/idx.hpp"  // DataError: every data reader of models/ throws it, naming the file

namespace shapetune {

// The header's bound: the format's reference implementation refuses more than 100,000,000 bytes.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Bits per element of a dtype named in a header ("F32", "F8_E4M3", "F4", ...); nullopt for a name
// the format does not define.
std::optional<int> safetensors_dtype_bits(std::string_view dtype);
// The header's name for a shapetune storage type (tf32 is stored as F32).
std::string_view safetensors_dtype(DType dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                  // the header's name for it
  std::vector<std::int64_t> shape;    // [] for a scalar; extents may be 0
  std::span<const std::byte> bytes;   // row-major, little-endian

  // The shapetune type of F32, F16, BF16 and I32 tensors; nullopt for the other dtypes.
  std::optional<DType> shapetune_dtype() const;
};

// A file's bytes and the tensors in them, in the order the header lists them. Tensors' bytes point
// into the object: it moves, it does not copy.
class SafetensorsFile {
 public:
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& source() const { return source_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const SafetensorsTensor* find(std::string_view name) const;
  // DataError naming the file, the missing tensor and the tensors there are.
  const SafetensorsTensor& tensor(std::string_view name) const;

 private:
  friend SafetensorsFile parse_safetensors(std::span<const std::byte>, std::string_view);
  friend SafetensorsFile read_safetensors(const std::string&);
  SafetensorsFile() = default;
  static SafetensorsFile parse(std::vector<std::byte> bytes, std::string source);

  std::string source_;
  std::vector<std::byte> bytes_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Parses (a copy of) `bytes`; every problem is a DataError whose message starts with
// `name_for_errors`. What the fuzz target and tests call; read_safetensors reads a file into it.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view name_for_errors);

// Reads a regular file (a FIFO or a device is refused: it would block or never end) whole.
SafetensorsFile read_safetensors(const std::string& path);

// Writes `tensors` in their order and `metadata` (omitted when empty) to `path`, through a
// temporary file in the same directory renamed over it, so `path` is never half-written. The header
// is padded with spaces to a multiple of 8 bytes, as the reference writer does, so that the data
// section starts aligned. DataError (naming `path`) for a tensor whose bytes do not match its dtype
// and shape, an unknown dtype, a repeated name, or a failed write.
void write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace shapetune
