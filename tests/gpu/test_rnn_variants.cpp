// Every LSTM and GRU forward and backward variant and config (cuDNN's algorithms included) at
// awkward shapes, every dtype (tf32: fp32 tensors, TF32 products in cuBLAS and cuDNN), against the
// float64 reference on fresh inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <random>

#include "harness/accuracy.hpp"
#include "support/test_support.hpp"
#include "support/verify_configs.hpp"

namespace shapetune {
namespace {

struct Case {
  std::int64_t T, N, D, H;
};

// One of everything; one step; odd widths (33 inputs, 100 units: no multiple of 4 or of a
// block's units); a batch row count no batch group divides; more steps than a cache holds of
// anything; one unit past a block of 16; issue 20's longest sequence (T 1000, where the tolerance
// has grown by 1 + log2(T) / 4 = 3.5x) at the odd widths.
const Case kShapes[] = {{1, 1, 1, 1},   {1, 3, 33, 100}, {5, 2, 33, 100}, {17, 7, 64, 128},
                        {3, 1, 128, 256}, {200, 2, 16, 32}, {9, 5, 24, 17}, {1000, 3, 33, 100}};

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

// The grid persistent rung's lane groups (k_split > 1) run, not only refuse, on any GPU: at a shape
// that splits the units (100), the batch (7 rows) and the dot products (H 100: 25 chunks of 16
// bytes, no multiple of 4 or 16 lanes) unevenly, every config it supports launches and matches;
// its 80 configs of k_split 1 alone cannot reach the count. And at the character model's H 512,
// where one lane a unit took 41 us a step on the H100, the split configs match too (on a GPU of
// an H100's size: a T4's 40 SMs hold few of those grids).
TEST_P(RnnVariants, PersistentLaneGroupsRunEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.forward", "gru.forward"}) {
    const Problem awkward{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, awkward, seed++, {}, {}, "persistent"), 100)
        << awkward.key();
    if (device_.limits.sm_count < 108) continue;
    const Problem wide{primitive, GetParam(), Shape({{"T", 3}, {"N", 64}, {"D", 16}, {"H", 512}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, wide, seed++, {}, {}, "persistent"), 10)
        << wide.key();
  }
}

// The register rung runs, not only refuses: at a shape that splits the units (100 = 8 x 13 - 4) and
// the batch (7 rows) unevenly, whose H (100) is no multiple of 4 (h copied element by element) and
// leaves most of a lane's 128-column chunk zero, every config it supports matches (9: 8 groups of
// 7 rows is refused); at H 500 (4 chunks, cp.async, the last chunk part zero) and a second 8-row
// chunk short of rows (N 13 in one or two groups) too; and at the character model's H 512 with 64
// rows, 32 a group, where it was built to win (on a GPU of an H100's size).
TEST_P(RnnVariants, PersistentRegistersRunsEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.forward", "gru.forward"}) {
    const Problem awkward{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, awkward, seed++, {}, {}, "persistent_registers"),
              9)
        << awkward.key();
    const Problem ragged{primitive, GetParam(), Shape({{"T", 4}, {"N", 13}, {"D", 8}, {"H", 500}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, ragged, seed++, {}, {}, "persistent_registers"),
              4)
        << ragged.key();
    if (device_.limits.sm_count < 108) continue;
    const Problem wide{primitive, GetParam(), Shape({{"T", 3}, {"N", 64}, {"D", 16}, {"H", 512}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, wide, seed++, {}, {}, "persistent_registers"), 2)
        << wide.key();
  }
}

// The block rung runs, not only refuses: at H 100 (25 chunks a row, more than the 8 or 16 in
// registers) and 7 rows (a last block short of rows at 2 and 4 a block), where the LSTM runs 9
// configs and the GRU 6 (4 rows of 100 cells outnumber its 300 threads); at H 17 with k_split 2
// and 4 (slices of 12 and 8 columns, zero past 17; 9 LSTM and 8 GRU configs, every one with its
// whole slice in shared memory); and at H 128 with 64 rows, where it was built
// to win. Every config runs with project 0 and 1.
TEST_P(RnnVariants, PersistentBlockRunsEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.forward", "gru.forward"}) {
    const Problem awkward{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, awkward, seed++, {}, {}, "persistent_block"), 6)
        << awkward.key();
    const Problem narrow{primitive, GetParam(), Shape({{"T", 9}, {"N", 5}, {"D", 24}, {"H", 17}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, narrow, seed++, {}, {}, "persistent_block"), 8)
        << narrow.key();
    const Problem target{primitive, GetParam(), Shape({{"T", 5}, {"N", 64}, {"D", 16}, {"H", 128}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, target, seed++, {}, {}, "persistent_block"), 4)
        << target.key();
    // The projecting blocks (project = 1) over more than one tile of rows (70 > 64) and of gate
    // columns (120 or 160 > 96), and D past two chunks of 64 with a tail; one step and two.
    for (const std::int64_t steps : {1, 2}) {
      const Problem tiles{primitive, GetParam(), Shape({{"T", steps}, {"N", 70}, {"D", 130}, {"H", 40}})};
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, tiles, seed++, {}, {}, "persistent_block"), 8)
          << tiles.key();
    }
  }
}

// The block rung's unit groups (unit_groups 1), each config with project 0 and 1: at H 100 and 7
// rows (4 lanes: chunks of a 112-wide row, zero past 100; 13 warps of 400 threads and padding
// lanes; a last block of 1 row at 2 a block), at H 17 (8 lanes: one chunk a lane, most of them
// past H), at H 128 and 64 rows for one step, and at H 128 for 40 steps (the two h buffers
// alternate 20 times each) at 3 rows. The counts are the configs with project 0 alone.
TEST_P(RnnVariants, PersistentBlockUnitGroupsRunEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  const auto groups = [](const Config& c) { return c.at("unit_groups") == 1; };
  struct Case {
    std::int64_t t, n, d, h;
    int lstm, gru;
  };
  for (const Case& c : {Case{6, 7, 33, 100, 22, 8}, Case{9, 5, 24, 17, 10, 6}, Case{1, 64, 16, 128, 16, 10},
                        Case{40, 3, 8, 128, 16, 10}})
    for (const char* primitive : {"lstm.forward", "gru.forward"}) {
      const Problem problem{primitive, GetParam(), Shape({{"T", c.t}, {"N", c.n}, {"D", c.d}, {"H", c.h}})};
      const int at_least = std::string(primitive) == "lstm.forward" ? c.lstm : c.gru;
      EXPECT_GE(test_support::verify_every_config(*measurer_, device_, problem, seed++, {}, {}, "persistent_block",
                                                  groups),
                at_least)
          << problem.key();
    }
}

// The block rung's backward runs, not only refuses: at H 100 and 7 rows (10 configs each cell: a
// last block short of rows at 2 a block; slices of 100, 50 and 25 chunks, 16 or none in
// registers), at H 17 (the forward without register chunks; G H = 68 or 51 rows in slices of 4-17
// chunks, zero past G H) and at H 128 with 64 rows, where it was built to win.
TEST_P(RnnVariants, PersistentBlockBackwardRunsEveryConfig) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.backward", "gru.backward"}) {
    const Problem awkward{primitive, GetParam(), Shape({{"T", 6}, {"N", 7}, {"D", 33}, {"H", 100}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, awkward, seed++, {}, {}, "persistent_block"), 10)
        << awkward.key();
    const Problem narrow{primitive, GetParam(), Shape({{"T", 9}, {"N", 5}, {"D", 24}, {"H", 17}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, narrow, seed++, {}, {}, "persistent_block"), 5)
        << narrow.key();
    const Problem target{primitive, GetParam(), Shape({{"T", 5}, {"N", 64}, {"D", 16}, {"H", 128}})};
    EXPECT_GE(test_support::verify_every_config(*measurer_, device_, target, seed++, {}, {}, "persistent_block"), 4)
        << target.key();
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

// A trainer runs the backward primitives in two halves with the loss between them. Every config
// of every rung, at three shapes: the forward half's y, h_T and c_T (written on poison) are the
// forward primitive's reference; the backward half's gradients are the backward's reference and,
// for shapetune's own rungs, the whole launch's bit for bit (the same kernels in the same order).
// cuDNN's halves keep a plan per x, so a second layer of one shape cannot overwrite the first's
// reserve space: two instances' halves interleave, as a two-layer trainer runs them.
TEST_P(RnnVariants, TheHalvesOfEveryBackwardAreItsWholeLaunch) {
  std::uint64_t seed = std::random_device{}();
  int halves_checked = 0;
  for (const char* primitive : {"lstm.backward", "gru.backward"}) {
    const bool lstm = std::string(primitive) == "lstm.backward";
    const char* forward_name = lstm ? "lstm.forward" : "gru.forward";
    for (const Case& c : {Case{1, 1, 1, 1}, Case{5, 2, 33, 100}, Case{17, 7, 64, 128}}) {
      const Shape shape({{"T", c.T}, {"N", c.N}, {"D", c.D}, {"H", c.H}});
      const Problem problem{primitive, GetParam(), shape};
      const Primitive& backward = *catalogue().find_primitive(primitive);
      ProblemData data(backward, problem, seed++);
      // The forward's reference from the same inputs (the backward's first tensors, in the forward's order).
      const Primitive& forward = *catalogue().find_primitive(forward_name);
      const Problem forward_problem{forward_name, GetParam(), shape};
      const std::vector<TensorSpec> forward_specs = forward.tensors(forward_problem);
      HostTensors host;
      std::vector<const TensorSpec*> outputs;
      for (std::size_t i = 0; i < forward_specs.size(); ++i) {
        if (forward_specs[i].role == TensorRole::input) {
          host.push_back(data.expected(i));
        } else {
          host.emplace_back(static_cast<std::size_t>(forward_specs[i].elements()));
          outputs.push_back(&forward_specs[i]);
        }
      }
      forward.reference(forward_problem, {}, host);
      const std::size_t first_output = host.size() - outputs.size();
      const Tolerance forward_tol = tolerance_for(forward, forward_problem);
      const Tolerance tol = tolerance_for(backward, problem);

      for (const Variant* v : catalogue().variants(primitive)) {
        ASSERT_TRUE(v->forward_half && v->backward_half) << v->name << " has no halves";
        for (const Config& config : v->params.enumerate()) {
          if (!v->supports(problem, config, device_.limits).ok) continue;
          const std::string name = problem.key() + " " + v->name + "{" + config.key() + "}";
          const std::size_t workspace_bytes = v->workspace_bytes ? v->workspace_bytes(problem, config) : 0;
          DeviceBuffer workspace(workspace_bytes);
          std::vector<void*> pointers = data.pointers(0);
          const LaunchArgs args{problem,         config,          pointers,      measurer_->stream(), measurer_->libraries(),
                                workspace.get(), workspace_bytes, data.scalars()};
          data.prepare(0, measurer_->stream());
          const LaunchStatus whole = v->launch(args);
          if (!whole.ok && whole.unsupported) continue;
          ASSERT_TRUE(whole.ok) << name << ": " << whole.message;
          const std::vector<std::vector<std::byte>> whole_outputs = test_support::device_outputs(data, pointers, measurer_->stream());

          std::vector<DeviceBuffer> layer_outputs;
          std::vector<void*> out;
          for (const TensorSpec* spec : outputs) {
            layer_outputs.emplace_back(static_cast<std::size_t>(spec->bytes()));
            SHAPETUNE_CUDA_CHECK(cudaMemset(layer_outputs.back().get(), 0xFF, spec->bytes()));
            out.push_back(layer_outputs.back().get());
          }
          data.prepare(0, measurer_->stream());
          if (workspace_bytes) SHAPETUNE_CUDA_CHECK(cudaMemset(workspace.get(), 0xFF, workspace_bytes));
          LaunchStatus s = v->forward_half(args, out);
          ASSERT_TRUE(s.ok) << name << " forward half: " << s.message;
          SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer_->stream()));
          for (std::size_t k = 0; k < outputs.size(); ++k) {
            std::vector<std::byte> image(static_cast<std::size_t>(outputs[k]->bytes()));
            SHAPETUNE_CUDA_CHECK(cudaMemcpy(image.data(), out[k], image.size(), cudaMemcpyDeviceToHost));
            const AccuracyReport r = compare_with_reference(*outputs[k], image.data(), host[first_output + k], forward_tol);
            EXPECT_EQ(r.mismatches, 0) << name << " forward half, " << outputs[k]->name << ": " << r.first_mismatch;
          }
          s = v->backward_half(args, out);
          ASSERT_TRUE(s.ok) << name << " backward half: " << s.message;
          const AccuracyReport r = data.check(0, tol, measurer_->stream());
          EXPECT_EQ(r.mismatches, 0) << name << " halves: " << r.first_mismatch;
          if (!v->library) {
            EXPECT_EQ(test_support::device_outputs(data, pointers, measurer_->stream()), whole_outputs)
                << name << ": halves differ from whole";
          }
          ++halves_checked;
        }
      }
    }
  }
  EXPECT_GE(halves_checked, 2 * 3 * 2) << "stepwise and stepwise_graph at least, per cell and shape";
}

// Two layers of one shape, as a two-layer trainer runs them through cuDNN: both forward halves,
// then both backward halves in reverse, each layer's gradients its own whole launch's (within the
// tolerance: cuDNN promises no bitwise repeat) -- one shared reserve space would give the first
// layer the second's.
TEST_P(RnnVariants, CudnnHalvesOfTwoLayersOfOneShapeKeepTheirOwnReserveSpace) {
  std::uint64_t seed = std::random_device{}();
  for (const char* primitive : {"lstm.backward", "gru.backward"}) {
    const bool lstm = std::string(primitive) == "lstm.backward";
    const Problem problem{primitive, GetParam(), Shape({{"T", 9}, {"N", 5}, {"D", 24}, {"H", 24}})};
    const Primitive& backward = *catalogue().find_primitive(primitive);
    const Variant& cudnn = *catalogue().find_variant(primitive, "cudnn");
    ProblemData first(backward, problem, seed++), second(backward, problem, seed++);
    const Config config = cudnn.default_config;
    const std::int64_t NH = 5 * 24, bytes = 9 * NH * static_cast<std::int64_t>(dtype_size(storage_of(GetParam())));
    std::vector<DeviceBuffer> buffers;
    const auto outputs_for = [&] {  // y, h_T (and c_T): room for fp32 states
      std::vector<void*> out;
      for (int k = 0; k < (lstm ? 3 : 2); ++k) {
        buffers.emplace_back(static_cast<std::size_t>(k == 0 ? bytes : NH * 4));
        out.push_back(buffers.back().get());
      }
      return out;
    };
    const std::vector<void*> out1 = outputs_for(), out2 = outputs_for();
    std::vector<void*> p1 = first.pointers(0), p2 = second.pointers(0);
    const LaunchArgs a1{problem, config, p1, measurer_->stream(), measurer_->libraries(), nullptr, 0, first.scalars()};
    const LaunchArgs a2{problem, config, p2, measurer_->stream(), measurer_->libraries(), nullptr, 0, second.scalars()};
    first.prepare(0, measurer_->stream());
    second.prepare(0, measurer_->stream());
    ASSERT_TRUE(cudnn.forward_half(a1, out1).ok);
    ASSERT_TRUE(cudnn.forward_half(a2, out2).ok);
    ASSERT_TRUE(cudnn.backward_half(a2, out2).ok);
    ASSERT_TRUE(cudnn.backward_half(a1, out1).ok);
    const Tolerance tol = tolerance_for(backward, problem);
    EXPECT_EQ(second.check(0, tol, measurer_->stream()).mismatches, 0) << problem.key() << " second layer";
    EXPECT_EQ(first.check(0, tol, measurer_->stream()).mismatches, 0) << problem.key() << " first layer";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RnnVariants, ::testing::Values(DType::f32, DType::tf32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
