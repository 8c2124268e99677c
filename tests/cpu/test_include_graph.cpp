// The arrows of docs/ARCHITECTURE.md point one way: every project include of every source file
// names a folder its own folder may depend on.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

// Folder -> the folders its files may include (itself included).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"core", {"core"}},
    {"kernels", {"kernels", "core"}},  // core only in host headers (kernels/gemm/gemm_kind.hpp)
    {"baselines", {"baselines", "kernels", "core"}},
    {"db", {"db", "core"}},
    {"variants", {"variants", "kernels", "baselines", "core"}},
    {"harness", {"harness", "variants", "kernels", "baselines", "core"}},
    {"tuner", {"tuner", "harness", "db", "variants", "kernels", "baselines", "core"}},
    {"models", {"models", "harness", "db", "variants", "kernels", "baselines", "core"}},
};

TEST(IncludeGraph, ArrowsPointOneWay) {
  const fs::path root = test_support::source_dir();
  const std::regex include(R"re(#include\s+"([a-z_]+)/)re");
  int files = 0;
  for (const auto& [folder, allowed] : kAllowed) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh")) continue;
      ++files;
      const std::string text = test_support::read_file(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
        const std::string target = (*it)[1];
        if (!kAllowed.count(target) && target != "cli") continue;  // a system or library header
        EXPECT_TRUE(allowed.count(target)) << fs::relative(entry.path(), root) << " includes " << target << "/";
      }
    }
  }
  EXPECT_GT(files, 100) << "the source tree was not found under " << root;
}

}  // namespace
}  // namespace shapetune
