// Launch overlap (models/runner's overlap_kernel_launches) makes any edge into one of shapetune's
// kernels programmatic, which is safe only while every kernel waits for the grids it depends on
// before it touches memory: the first statement of every __global__ function is
// grid_dependency_sync().
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

// The body's first statement of each kernel defined in `text`, or "" for none found. Parameter
// lists and launch bounds are skipped by parenthesis depth; a declaration (`;` first) has none.
std::vector<std::pair<std::string, std::string>> kernel_first_statements(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
    std::size_t i = at;
    int depth = 0;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (depth == 0 && (c == '{' || c == ';')) break;
    }
    if (i >= text.size() || text[i] == ';') continue;
    const std::string signature = text.substr(at, i - at);
    const std::size_t body = text.find_first_not_of(" \t\n", i + 1);
    const std::size_t end = text.find('\n', body);
    out.emplace_back(signature.substr(0, 120), body == std::string::npos ? "" : text.substr(body, end - body));
  }
  return out;
}

TEST(GridDependency, EveryKernelWaitsFirst) {
  const fs::path root = test_support::source_dir();
  int kernels = 0;
  for (const char* folder : {"kernels", "models", "harness"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
      for (const auto& [kernel, first] : kernel_first_statements(test_support::read_file(entry.path()))) {
        ++kernels;
        EXPECT_TRUE(first.starts_with("grid_dependency_sync();") || first.starts_with("kernels::grid_dependency_sync();"))
            << fs::relative(entry.path(), root) << ": " << kernel << " starts with `" << first << "`";
      }
    }
  }
  EXPECT_GT(kernels, 60) << "the kernels were not found under " << root;
}

TEST(GridDependency, FindsTheFirstStatementPastLaunchBounds) {
  const auto found = kernel_first_statements(
      "template <class C>\n__global__ void __launch_bounds__(C::kThreads)\n    k(Params<T> p) {\n  x();\n}\n"
      "__global__ void declared(int);\n__global__ void plain(int n) { grid_dependency_sync(); }\n");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].second, "x();");
  EXPECT_EQ(found[1].second, "grid_dependency_sync(); }");
}

}  // namespace
}  // namespace shapetune
