// Helpers shared by the CPU and GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.hpp"
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

// The whole file as bytes ("" when it cannot be read: the assertions on it then say what is missing).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream s;
  s << file.rdbuf();
  return s.str();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The `shapetune` command run in this process: its exit code and what it wrote to each stream.
struct CliResult {
  int code = 0;
  std::string out, err;
};

inline CliResult run_shapetune(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace shapetune::test_support

// Expects `part` in `text`, printing the text when it is not there.
#define EXPECT_CONTAINS(text, part)                                   \
  EXPECT_TRUE(::shapetune::test_support::contains((text), (part)))   \
      << "'" << (part) << "' not in:\n" << (text)

// Skips (counted as skipped by CTest, not passed) where no CUDA device is usable.
#define SHAPETUNE_REQUIRE_GPU()                                             \
  do {                                                                      \
    if (auto why = ::shapetune::cuda_unavailable_reason())                  \
      GTEST_SKIP() << "no usable CUDA device here: " << *why;               \
  } while (0)
