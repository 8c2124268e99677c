// Helpers shared by the CPU and GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <filesystem>
#include <string>

#include "core/types.hpp"
#include "harness/device.hpp"

namespace shapetune {

// Readable dtype names in the parameterised tests' names and failure messages (found by ADL).
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }

}  // namespace shapetune

namespace shapetune::test_support {

// The source tree: $SHAPETUNE_SOURCE_DIR when set (a build carried to another machine), else
// the directory the tests were configured from.
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("SHAPETUNE_SOURCE_DIR")) return env;
  return SHAPETUNE_SOURCE_DIR;
}

// A fresh directory removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "shapetune-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace shapetune::test_support

// Skips (counted as skipped by CTest, not passed) where no CUDA device is usable.
#define SHAPETUNE_REQUIRE_GPU()                                             \
  do {                                                                      \
    if (auto why = ::shapetune::cuda_unavailable_reason())                  \
      GTEST_SKIP() << "no usable CUDA device here: " << *why;               \
  } while (0)
