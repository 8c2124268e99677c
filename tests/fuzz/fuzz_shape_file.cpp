// libFuzzer target: YAML shape files. Any bytes either parse into problems or raise
// ShapeFileError; nothing else (no crash, no other exception, no unbounded time or memory).
// The catalogue is a small stand-in with the real families' axes (the parser only asks it for
// names, axes, dtypes and shape rules), so this links no CUDA.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_catalogue.hpp"
#include "tuner/shape_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const shapetune::ShapeFile file = shapetune::parse_shape_text(text, "fuzz.yaml", shapetune::fuzz::catalogue());
    (void)file;
  } catch (const shapetune::ShapeFileError&) {
  }
  return 0;
}
