// The test binaries' main: Google Test's, after the GPU worker's hook, so that tests which
// sweep, check or bench can start workers (exec'd copies of this binary).
#include <gtest/gtest.h>

#include "harness/gpu_worker.hpp"

int main(int argc, char** argv) {
  shapetune::serve_gpu_worker_if_asked();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
