// libFuzzer target: safetensors files, read from memory through parse_safetensors (what
// read_safetensors hands a file's bytes to). Any bytes either read into tensors of product(shape)
// elements of their dtype that cover the data section exactly, end to end, or raise DataError;
// nothing else, and nothing is allocated ahead of the bytes that back it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "models/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  try {
    const shapetune::SafetensorsFile file = shapetune::parse_safetensors(input, "fuzz.safetensors");
    std::vector<std::pair<const std::byte*, std::size_t>> pieces;
    for (const shapetune::SafetensorsTensor& tensor : file.tensors()) {
      const std::optional<int> bits = shapetune::safetensors_dtype_bits(tensor.dtype);
      if (!bits) std::abort();
      std::uint64_t elements = 1;
      for (const std::int64_t extent : tensor.shape) {
        if (extent < 0) std::abort();
        elements *= static_cast<std::uint64_t>(extent);
      }
      if (elements * static_cast<std::uint64_t>(*bits) != tensor.bytes.size() * 8) std::abort();
      if (file.find(tensor.name) != &tensor) std::abort();
      if (!tensor.bytes.empty()) pieces.emplace_back(tensor.bytes.data(), tensor.bytes.size());
    }
    std::uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | data[i];
    std::size_t covered = 0;
    std::sort(pieces.begin(), pieces.end());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (i > 0 && pieces[i].first != pieces[i - 1].first + pieces[i - 1].second) std::abort();
      covered += pieces[i].second;
    }
    if (covered != size - 8 - header_length) std::abort();
  } catch (const shapetune::DataError&) {
  }
  return 0;
}
