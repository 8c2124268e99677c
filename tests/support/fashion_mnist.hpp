// Where the tests find Fashion-MNIST (Debian's dataset-fashion-mnist, or $SHAPETUNE_FASHION_MNIST),
// and the skip for a machine without it: the runners' GPU tests that train on it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "models/idx.hpp"

namespace shapetune::test_support {

inline std::string fashion_mnist_dir() {
  if (const char* env = std::getenv("SHAPETUNE_FASHION_MNIST")) return env;
  return kFashionMnistDir;
}

}  // namespace shapetune::test_support

#define SHAPETUNE_REQUIRE_FASHION_MNIST()                                                               \
  do {                                                                                                  \
    const std::string dir_ = ::shapetune::test_support::fashion_mnist_dir();                            \
    if (!std::filesystem::exists(dir_ + "/train-images-idx3-ubyte.gz"))                                 \
      GTEST_SKIP() << "Fashion-MNIST not in " << dir_                                                   \
                   << " (Debian's dataset-fashion-mnist, or set SHAPETUNE_FASHION_MNIST)";              \
  } while (0)
