// Every LSTM and GRU forward and backward variant and config (cuDNN's algorithms included) at
// awkward shapes, every dtype (tf32: fp32 tensors, TF32 products in cuBLAS and cuDNN), against the
// float64 reference on fresh inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <random>

#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t T, N, D, H;
};

// One of everything; one step; odd widths (33 inputs, 100 units: no multiple of 4 or of a
// block's units); a batch row count no batch group divides; more steps than a cache holds of
// anything; one unit past a block of 16.
const Case kShapes[] = {{1, 1, 1, 1}, {1, 3, 33, 100}, {5, 2, 33, 100}, {17, 7, 64, 128},
                        {3, 1, 128, 256}, {200, 2, 16, 32}, {9, 5, 24, 17}};

class RnnVariants : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
  }
  // The forward: stepwise and at least one persistent config at every shape (`at_least` 2).
  void verify_all(const char* primitive, int at_least = 2) {
    std::uint64_t seed = std::random_device{}();
    for (const Case& c : kShapes) {
      const Problem problem{primitive, GetParam(), Shape({{"T", c.T}, {"N", c.N}, {"D", c.D}, {"H", c.H}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++), at_least) << problem.key();
    }
  }
  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
};

TEST_P(RnnVariants, LstmEveryConfigAtAwkwardShapes) { verify_all("lstm.forward"); }
TEST_P(RnnVariants, GruEveryConfigAtAwkwardShapes) { verify_all("gru.forward"); }

// The backward: stepwise and persistent at every shape, cuDNN's algorithms where cuDNN takes them
// (persistent refuses none of these shapes outright, but at_least stays stepwise's 1: its
// configs' count is checked below).
TEST_P(RnnVariants, LstmBackwardEveryConfigAtAwkwardShapes) { verify_all("lstm.backward", 1); }
TEST_P(RnnVariants, GruBackwardEveryConfigAtAwkwardShapes) { verify_all("gru.backward", 1); }

// On Hopper the cluster rung runs, not only refuses: at a shape where its configs split the
// units unevenly (100 = 8 x 13 - 4) and leave the last cluster short of rows (7 rows), every
// config it supports launches and matches, and there are many of them.
TEST_P(RnnVariants, PersistentClusterRunsEveryConfigOnHopper) {
  if (device_.limits.compute_capability != 90) GTEST_SKIP() << "persistent_cluster needs compute capability 9.0";
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.forward", "gru.forward"}) {
    const Problem problem{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "persistent_cluster"), 40)
        << problem.key();
  }
}

// The persistent backward runs, not only refuses, on any GPU: at a shape where its configs split
// the units and the batch unevenly (100 units, 7 rows; G H = 400 or 300 columns, the GRU's no
// multiple of 8), every config it supports launches and matches, with either forward on Hopper.
TEST_P(RnnVariants, PersistentBackwardRunsEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.backward", "gru.backward"}) {
    const Problem problem{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "persistent"), 30)
        << problem.key();
  }
}

// At H = 512 and 64 rows the rows of the gates' gradients do not fit whole beside W's columns
// (an H200 block: 227 KiB), so most configs stage them in tiles: of those the occupancy check
// should let launch by ptxas's register counts, 22 for the LSTM in 2 to 6 tiles, 25 for the GRU
// in 1 to 4 (and as many again with the cluster forward). Those run too.
TEST_P(RnnVariants, PersistentBackwardStagesWideRowsInTiles) {
  if (device_.limits.shared_memory_per_block_optin < 200 * 1024)
    GTEST_SKIP() << "the grid forward at H = 512 needs a Hopper-sized block's shared memory";
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.backward", "gru.backward"}) {
    const Problem problem{primitive, GetParam(), Shape({{"T", 3}, {"N", 64}, {"D", 16}, {"H", 512}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "persistent"), 8)
        << problem.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RnnVariants, ::testing::Values(DType::f32, DType::tf32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
