// libFuzzer target: IDX files, plain or gzipped. Any bytes either read into an array whose data
// is exactly the product of its dimensions, or raise DataError; nothing else, and memory is never
// allocated ahead of the data that backs it (libFuzzer's -rss_limit_mb catches that).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/idx.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path file = fs::temp_directory_path() / ("shapetune-fuzz-idx-" + std::to_string(getpid()));
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const shapetune::IdxArray array = shapetune::read_idx(file.string());
    std::int64_t elements = 1;
    for (const std::int64_t d : array.dims) {
      if (d < 1) std::abort();
      elements *= d;
    }
    if (array.dims.empty() || static_cast<std::int64_t>(array.data.size()) != elements) std::abort();
  } catch (const shapetune::DataError&) {
  }
  return 0;
}
