// The logistic-regression runner: one linear unit, p = sigmoid(x w + b), trained with the mean
// binary cross-entropy and Adam on two Fashion-MNIST classes. Two GPU operations, both through
// the runner core (models/runner.hpp): `logistic_bce` (forward, loss and gradients in one
// primitive, variants/logistic_bce.cpp) and `adam` over the flat parameter buffer [w, b]. A
// training step is one CUDA graph, replayed; Adam a child graph swapped per step, as the MLP's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"
#include "harness/device.hpp"
#include "models/idx.hpp"
#include "models/runner.hpp"

namespace shapetune {

inline constexpr int kLogregFeatures = 784;
// Parameters [w (784), b] in one flat buffer, so one Adam launch steps both.
inline constexpr std::int64_t kLogregParameters = kLogregFeatures + 1;

struct LogregOptions {
  std::string db_path;  // empty: nothing tuned, every problem takes its default variant
  DispatchMode dispatch = DispatchMode::tuned;
  int device = 0;
  // Class A is label 0, class B label 1. T-shirt/top against Shirt by default: the pair a linear
  // model separates worst, so the accuracy says something (an easy pair is near 100% at once).
  std::array<int, 2> classes = {0, 6};
  int epochs = 50;
  std::int64_t batch = 0;  // 0: full batch, one step an epoch
  bool shuffle = false;    // mini-batches in file order unless set; then a fresh order from the seed each epoch
  std::uint64_t seed = 1;
  double lr = 0.01;  // Adam (no weight decay), betas 0.9/0.999, eps 1e-8
  DType dtype = DType::f32;  // storage of X; f16 and bf16 full batch only (the batch gather writes f32)
};

// std::invalid_argument naming the option: a class outside 0..9, A == B, epochs < 1, lr not a
// positive finite number, batch < 0, 16-bit X with mini-batches, a dtype the primitive lacks.
void validate(const LogregOptions&);
// "A,B" -> {A, B}; std::invalid_argument unless two integers 0..9 that differ.
std::array<int, 2> parse_logreg_classes(std::string_view);

// The rows of two classes, in file order, labels mapped A -> 0, B -> 1.
struct BinaryImages {
  std::int64_t count = 0;
  std::vector<std::uint8_t> pixels;  // count x 784
  std::vector<std::uint8_t> labels;  // count, 0 or 1
};
struct LogregData {
  std::array<int, 2> classes = {0, 6};
  BinaryImages train, test;
};
// DataError for images that are not 28x28 or a split holding no image of one of the classes.
LogregData select_classes(const FashionMnist&, std::array<int, 2> classes);

// Pixels as the model sees them, p / 255 in [0, 1]: the float the batch gather computes
// (fmaf(p, 1/255, 0)), so host and device agree bit for bit.
float logreg_pixel(std::uint8_t p);
std::vector<float> logreg_pixels(const std::vector<std::uint8_t>& pixels);

struct LogregEpoch {
  int epoch = 0;
  std::vector<double> step_losses;       // each step's loss, before its update
  std::vector<double> step_milliseconds; // CUDA events around each replay
  double train_loss() const;             // mean of step_losses
  double median_step_ms() const;
  double train_accuracy = 0;  // after the epoch, a forward over every training row
  double test_loss = 0;       // the same over the test rows
  double test_accuracy = 0;
};

// The dispatched operations, in binding order: the training step's logistic_bce (rows: the batch;
// a full batch is every training row), Adam over [w, b], and the two evaluation forwards (every
// training row, every test row). shapes/logreg.yaml holds them at the defaults (a CPU test keeps
// the two in step).
std::vector<ModelOp> logreg_operations(std::int64_t train_rows, std::int64_t test_rows, std::int64_t batch_rows,
                                       DType dtype);

class LogregTrainer {
 public:
  // Opens the dispatch table, resolves and binds both operations (and the two evaluation
  // forwards), uploads the data and captures the step graph. w and b start at zero.
  // Throws std::invalid_argument, StoreError or std::runtime_error.
  LogregTrainer(const LogregOptions&, const LogregData&);
  ~LogregTrainer();
  LogregTrainer(const LogregTrainer&) = delete;
  LogregTrainer& operator=(const LogregTrainer&) = delete;

  const std::vector<OpResolution>& resolutions() const;
  const DeviceInfo& device() const;
  std::int64_t steps_per_epoch() const;

  LogregEpoch train_epoch();
  std::vector<float> parameters() const;  // [w, b]

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The float64 trainer the GPU is checked against: full batch, zero initial w and b, `steps` Adam
// steps (no weight decay, betas 0.9/0.999, eps 1e-8) through the float64 references of both
// primitives. x: rows x features, the values the device stores; labels 0 or 1.
struct LogregReferenceRun {
  std::vector<double> losses;     // before each step's update
  std::vector<double> parameters; // [w, b] after the last step
  std::vector<std::vector<double>> gradients;  // each step's [dw, db]
};
LogregReferenceRun logreg_reference_train(const std::vector<double>& x, const std::vector<std::int32_t>& labels,
                                          int features, int steps, double lr);

// PyTorch's names for nn.Linear(784, 1): weight [1, 784], bias [1], F32; the classes as metadata
// class_0 and class_1. DataError for a failed write.
void save_logreg_weights(const std::string& path, const std::vector<float>& parameters, std::array<int, 2> classes);

}  // namespace shapetune
