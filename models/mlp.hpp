// The MLP runner: a 784 -> 256 -> 128 -> 10 ReLU network trained on Fashion-MNIST with
// softmax cross-entropy and Adam, every GPU operation launched through the runner core
// (models/runner.hpp: the dispatch table, or with DispatchMode::library the cuBLAS/cuDNN
// baselines); a training step as one CUDA graph, replayed: gather, forward, backward and
// bookkeeping captured once, Adam a child graph swapped per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/device.hpp"
#include "models/idx.hpp"
#include "models/runner.hpp"

namespace shapetune {

struct MlpOptions {
  std::string db_path;        // empty: nothing tuned, every problem takes its default variant
  int epochs = 15;
  int batch = 128;
  std::uint64_t seed = 1;
  double lr = 1e-3;           // Adam (no weight decay), betas 0.9/0.999, eps 1e-8
  DispatchMode dispatch = DispatchMode::tuned;
  int device = 0;
  std::int64_t train_limit = 0;  // > 0: train on the first this-many images only
  // Adam inside the step graph, as a child graph swapped every step (its bias correction
  // changes every step and a captured launch bakes its arguments). false: one Adam launch after
  // each replay instead, kept for comparison (the same epoch time within 2% on the H200).
  bool adam_in_graph = true;
};

// The layer widths, input to output.
inline constexpr int kMlpWidths[] = {784, 256, 128, 10};
// Parameters: W1 [784,256], b1, W2 [256,128], b2, W3 [128,10], b3, in that order in one flat
// buffer (weights stored [in, out], so the forward pass is x W + b: gemm nn).
inline constexpr std::int64_t kMlpParameters = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;

// Every operation of a training step at batch `batch` and of evaluating `eval_rows` test
// images at once, in launch order. shapes/mlp.yaml holds exactly these problems at the defaults.
std::vector<ModelOp> mlp_operations(int batch, std::int64_t eval_rows);

struct EpochResult {
  int epoch = 0;
  double train_loss = 0;      // mean over the epoch's steps
  double test_accuracy = 0;   // fraction of the test set
  double train_seconds = 0;   // the epoch's training steps, graph replays, to the last one's end
  double images_per_second = 0;
  std::int64_t steps = 0;
};

struct GradientResult {
  double loss = 0;
  std::vector<float> gradients;  // flat, in the parameter layout
};

class MlpTrainer {
 public:
  // Loads the data, opens the dispatch table, resolves every operation, initialises the
  // parameters from the seed. Throws DataError, StoreError or std::runtime_error.
  MlpTrainer(const MlpOptions&, FashionMnist data);
  // For tests that bring no dataset: resolution, parameters and gradients only.
  explicit MlpTrainer(const MlpOptions&);
  ~MlpTrainer();
  MlpTrainer(const MlpTrainer&) = delete;
  MlpTrainer& operator=(const MlpTrainer&) = delete;

  const std::vector<OpResolution>& resolutions() const;
  const DeviceInfo& device() const;

  // One epoch: a fresh shuffle from the seed, every full batch (the last partial one is
  // dropped), then the test accuracy.
  EpochResult train_epoch();
  double test_accuracy();

  std::vector<float> parameters() const;
  void set_parameters(const std::vector<float>&);
  // Forward and backward, launched eagerly through the same operations, of `rows` images
  // (x: rows x 784, already normalised) and labels; returns the mean loss and the gradients.
  GradientResult gradients(const std::vector<float>& x, const std::vector<std::int32_t>& labels);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The float64 CPU implementation of the same network's loss and gradients (for the tests).
GradientResult mlp_reference_gradients(const std::vector<float>& parameters, const std::vector<float>& x,
                                       const std::vector<std::int32_t>& labels);

// Pixels as the network sees them: p / 255, standardised with Fashion-MNIST's mean and std.
std::vector<float> mlp_normalise(const std::vector<std::uint8_t>& pixels);

}  // namespace shapetune
