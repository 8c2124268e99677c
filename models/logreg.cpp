#include "models/logreg.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <tuple>

#include "baselines/reference.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "harness/host_tensor.hpp"
#include "models/safetensors.hpp"
#include "models/training_kernels.cuh"

namespace shapetune {
namespace {

constexpr int kD = kLogregFeatures;
constexpr std::int64_t kBias = kD;  // b's offset in the flat buffers; 784 floats keep it 16-byte aligned
constexpr float kPixelScale = 1.0f / 255.0f;
constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kAdamEps = 1e-8;

Problem bce_problem(std::int64_t rows, DType dtype) {
  return Problem{"logistic_bce", dtype, Shape({{"rows", rows}, {"features", kD}})};
}

// X in its storage type: the floats p / 255 rounded once to `dtype`.
std::vector<std::byte> stored_pixels(const std::vector<std::uint8_t>& pixels, DType dtype) {
  std::vector<std::byte> out(pixels.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    store_from_double(dtype, logreg_pixel(pixels[i]), out.data(), static_cast<std::int64_t>(i));
  return out;
}

std::vector<std::int32_t> widen(const std::vector<std::uint8_t>& labels) { return {labels.begin(), labels.end()}; }

// One forward (with loss and gradients) over a whole split, for evaluation: its own p, loss and
// gradient scratch, so it touches neither the training step's buffers nor the parameters.
struct Evaluation {
  std::int64_t rows = 0;
  DeviceBuffer x, y, p, loss, dw, db;
  std::vector<std::uint8_t> labels;
  BoundOp op;
};

}  // namespace

// ---- options and data ---------------------------------------------------------------------------

void validate(const LogregOptions& o) {
  for (int c : o.classes)
    if (c < 0 || c >= FashionMnist::kClasses)
      throw std::invalid_argument("--classes: class " + std::to_string(c) + " is not one of Fashion-MNIST's 0..9");
  if (o.classes[0] == o.classes[1])
    throw std::invalid_argument("--classes: A and B must differ (both are " + std::to_string(o.classes[0]) + ")");
  if (o.epochs < 1) throw std::invalid_argument("--epochs must be >= 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw std::invalid_argument("--lr must be a positive finite number");
  if (o.batch < 0) throw std::invalid_argument("--batch must be >= 0 (0: full batch)");
  if (o.dtype != DType::f32 && o.dtype != DType::f16 && o.dtype != DType::bf16)
    throw std::invalid_argument("--dtype: logistic_bce stores X as f32, f16 or bf16");
  if (o.dtype != DType::f32 && o.batch > 0)
    throw std::invalid_argument("--dtype " + std::string(dtype_name(o.dtype)) +
                                " is full batch only: the mini-batch gather writes f32 rows");
}

std::array<int, 2> parse_logreg_classes(std::string_view text) {
  const auto comma = text.find(',');
  const auto bad = [&] {
    return std::invalid_argument("--classes expects A,B: two Fashion-MNIST classes 0..9, got '" + std::string(text) + "'");
  };
  if (comma == std::string_view::npos) throw bad();
  std::array<int, 2> out{};
  const std::string_view parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    const auto [end, ec] = std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), out[i]);
    if (ec != std::errc() || end != parts[i].data() + parts[i].size() || parts[i].empty()) throw bad();
  }
  LogregOptions o;
  o.classes = out;
  validate(o);
  return out;
}

LogregData select_classes(const FashionMnist& data, std::array<int, 2> classes) {
  LogregData out;
  out.classes = classes;
  auto pick = [&](const LabelledImages& from, BinaryImages& to, const char* split) {
    if (from.rows * from.cols != kD)
      throw DataError(std::string(split) + " images are " + std::to_string(from.rows) + "x" +
                      std::to_string(from.cols) + "; logistic regression takes 28x28");
    std::int64_t seen[2] = {0, 0};
    for (std::int64_t i = 0; i < from.count; ++i) {
      const int label = from.labels[static_cast<std::size_t>(i)];
      const int mapped = label == classes[0] ? 0 : label == classes[1] ? 1 : -1;
      if (mapped < 0) continue;
      ++seen[mapped];
      const auto row = from.pixels.begin() + i * kD;
      to.pixels.insert(to.pixels.end(), row, row + kD);
      to.labels.push_back(static_cast<std::uint8_t>(mapped));
    }
    to.count = static_cast<std::int64_t>(to.labels.size());
    for (int k = 0; k < 2; ++k)
      if (seen[k] == 0)
        throw DataError(std::string("the ") + split + " split has no image of class " + std::to_string(classes[k]));
  };
  pick(data.train, out.train, "training");
  pick(data.test, out.test, "test");
  return out;
}

float logreg_pixel(std::uint8_t p) { return std::fmaf(static_cast<float>(p), kPixelScale, 0.0f); }

std::vector<float> logreg_pixels(const std::vector<std::uint8_t>& pixels) {
  std::vector<float> out(pixels.size());
  std::transform(pixels.begin(), pixels.end(), out.begin(), logreg_pixel);
  return out;
}

double LogregEpoch::train_loss() const {
  if (step_losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (double l : step_losses) sum += l;
  return sum / static_cast<double>(step_losses.size());
}

double LogregEpoch::median_step_ms() const {
  if (step_milliseconds.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = step_milliseconds;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// ---- the trainer --------------------------------------------------------------------------------

struct LogregTrainer::State {
  LogregOptions options;
  std::unique_ptr<RunnerCore> core;  // first in, last out: everything below runs on its stream
  std::int64_t train_rows = 0, batch_rows = 0, steps = 0;
  bool full_batch = true;

  DeviceBuffer params, grads, m, v;  // [w, b] each
  // The step's batch. Full batch: the training split's X and labels themselves (train_eval's).
  // Mini-batches: gathered each step from the uint8 pixels in `order`.
  DeviceBuffer batch_x, batch_y, batch_p, batch_loss;
  DeviceBuffer pixels, labels01, order, step_counter, loss_sum, history;
  BoundOp step_op, adam;
  Evaluation train_eval, test_eval;

  StepGraph step_graph;
  std::mt19937_64 rng;
  int epoch = 0;

  cudaStream_t stream() const { return core->stream(); }
  float* param_at(std::int64_t i) const { return static_cast<float*>(params.get()) + i; }
  float* grad_at(std::int64_t i) const { return static_cast<float*>(grads.get()) + i; }

  void upload_split(Evaluation& e, const BinaryImages& split) {
    e.rows = split.count;
    e.x = upload(stored_pixels(split.pixels, options.dtype));
    e.y = upload(widen(split.labels));
    e.p = DeviceBuffer(static_cast<std::size_t>(e.rows) * sizeof(float));
    e.loss = DeviceBuffer(sizeof(float));
    e.dw = DeviceBuffer(kD * sizeof(float));
    e.db = DeviceBuffer(sizeof(float));
    e.labels = split.labels;
  }

  void bind_evaluation(Evaluation& e, const ModelOp& op) {
    e.op = core->bind(op, {e.x.get(), param_at(0), param_at(kBias), e.y.get(), e.p.get(), e.loss.get(), e.dw.get(),
                           e.db.get()});
  }

  // Accuracy (p > 1/2 predicts class B) and the mean loss of a split at the current parameters.
  std::pair<double, double> evaluate(const Evaluation& e) {
    e.op.launch(stream(), core->libraries());
    std::vector<float> p(static_cast<std::size_t>(e.rows));
    float loss = 0;
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(p.data(), e.p.get(), p.size() * sizeof(float), cudaMemcpyDeviceToHost, stream()));
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(&loss, e.loss.get(), sizeof(float), cudaMemcpyDeviceToHost, stream()));
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::int64_t correct = 0;
    for (std::size_t i = 0; i < p.size(); ++i) correct += (p[i] > 0.5f ? 1 : 0) == e.labels[i];
    return {static_cast<double>(correct) / static_cast<double>(e.rows), loss};
  }

  void gather() {
    SHAPETUNE_CUDA_CHECK(training_kernels::gather_batch(
        static_cast<const std::uint8_t*>(pixels.get()), static_cast<const std::uint8_t*>(labels01.get()),
        static_cast<const std::int32_t*>(order.get()), static_cast<const std::int32_t*>(step_counter.get()),
        static_cast<int>(batch_rows), kD, kPixelScale, 0.0f, static_cast<float*>(batch_x.get()),
        static_cast<std::int32_t*>(batch_y.get()), stream()));
  }

  void enqueue_step_body() {
    if (!full_batch) gather();
    step_op.launch(stream(), core->libraries());
    const auto* loss = static_cast<const float*>(batch_loss.get());
    SHAPETUNE_CUDA_CHECK(training_kernels::record_loss(static_cast<const std::int32_t*>(step_counter.get()), loss,
                                                       static_cast<float*>(history.get()), stream()));
    SHAPETUNE_CUDA_CHECK(training_kernels::finish_step(static_cast<std::int32_t*>(step_counter.get()), loss,
                                                       static_cast<double*>(loss_sum.get()), stream()));
  }

  // Adam step t as a graph of its own: its bias correction changes every step and a captured
  // launch bakes its scalars, so the child is swapped in per step (as the MLP runner does).
  Graph capture_adam(std::int64_t t) {
    adam.scalars = {options.lr, kBeta1, kBeta2, kAdamEps, 0.0, static_cast<double>(t)};
    return capture(stream(), [&] { adam.launch(stream(), core->libraries()); });
  }

  void build_graph() {
    // One eager pass first, so the libraries do their lazy set-up (cuBLAS in `unfused`) outside
    // the capture. Gradients only: the parameters are untouched.
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(step_counter.get(), 0, sizeof(std::int32_t), stream()));
    if (!full_batch) gather();
    step_op.launch(stream(), core->libraries());
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    Graph body = capture(stream(), [&] { enqueue_step_body(); });
    step_graph = StepGraph(std::move(body), [this](std::int64_t t) { return capture_adam(t); });
  }
};

std::vector<ModelOp> logreg_operations(std::int64_t train_rows, std::int64_t test_rows, std::int64_t batch_rows,
                                       DType dtype) {
  return {{"training step: forward, BCE loss, dw and db", bce_problem(batch_rows, dtype)},
          {"Adam, [w, b] in one step", Problem{"adam", DType::f32, Shape({{"n", kLogregParameters}, {"tensors", 2}})}},
          {"train forward (accuracy), every training row", bce_problem(train_rows, dtype)},
          {"test forward (accuracy and loss)", bce_problem(test_rows, dtype)}};
}

LogregTrainer::LogregTrainer(const LogregOptions& options, const LogregData& data) : state_(std::make_unique<State>()) {
  validate(options);
  State& s = *state_;
  s.options = options;
  s.rng.seed(options.seed);
  s.train_rows = data.train.count;
  if (s.train_rows < 1 || data.test.count < 1) throw std::invalid_argument("logistic regression needs training and test rows");
  s.full_batch = options.batch == 0 || options.batch == s.train_rows;
  s.batch_rows = s.full_batch ? s.train_rows : options.batch;
  if (s.batch_rows > s.train_rows)
    throw std::invalid_argument("--batch " + std::to_string(options.batch) + " is larger than the " +
                                std::to_string(s.train_rows) + " training rows");
  s.steps = s.train_rows / s.batch_rows;  // the last partial batch is dropped: one shape, one graph
  s.core = std::make_unique<RunnerCore>(RunnerOptions{options.db_path, options.dispatch, options.device});

  const std::vector<float> zeros(static_cast<std::size_t>(kLogregParameters), 0.f);
  s.params = upload(zeros);  // zero w and b: the standard start, and what PyTorch's peer sets
  s.grads = upload(zeros);
  s.m = upload(zeros);
  s.v = upload(zeros);

  s.upload_split(s.train_eval, data.train);
  s.upload_split(s.test_eval, data.test);
  if (!s.full_batch) {
    s.batch_x = DeviceBuffer(static_cast<std::size_t>(s.batch_rows) * kD * sizeof(float));
    s.batch_y = DeviceBuffer(static_cast<std::size_t>(s.batch_rows) * sizeof(std::int32_t));
    s.pixels = upload(data.train.pixels);
    s.labels01 = upload(data.train.labels);
    std::vector<std::int32_t> identity(static_cast<std::size_t>(s.train_rows));
    for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int32_t>(i);
    s.order = upload(identity);
  }
  s.batch_p = DeviceBuffer(static_cast<std::size_t>(s.batch_rows) * sizeof(float));
  s.batch_loss = DeviceBuffer(sizeof(float));
  // A full batch is the training split itself: the step reads its X and labels in place.
  void* x = s.full_batch ? s.train_eval.x.get() : s.batch_x.get();
  void* y = s.full_batch ? s.train_eval.y.get() : s.batch_y.get();
  // The step writes dw and db straight into the flat gradient buffer Adam reads: dw at 0, db at 784.
  const std::vector<ModelOp> ops = logreg_operations(s.train_rows, data.test.count, s.batch_rows, options.dtype);
  s.step_op = s.core->bind(ops[0], {x, s.param_at(0), s.param_at(kBias), y, s.batch_p.get(), s.batch_loss.get(),
                                    s.grad_at(0), s.grad_at(kBias)});
  s.adam = s.core->bind(ops[1], {s.params.get(), s.grads.get(), s.m.get(), s.v.get()});
  s.bind_evaluation(s.train_eval, ops[2]);
  s.bind_evaluation(s.test_eval, ops[3]);
  s.step_counter = DeviceBuffer(sizeof(std::int32_t));
  s.loss_sum = DeviceBuffer(sizeof(double));
  s.history = DeviceBuffer(static_cast<std::size_t>(s.steps) * sizeof(float));
  s.build_graph();
}

LogregTrainer::~LogregTrainer() = default;

const std::vector<OpResolution>& LogregTrainer::resolutions() const { return state_->core->resolutions(); }
const DeviceInfo& LogregTrainer::device() const { return state_->core->device(); }
std::int64_t LogregTrainer::steps_per_epoch() const { return state_->steps; }

LogregEpoch LogregTrainer::train_epoch() {
  State& s = *state_;
  LogregEpoch r;
  r.epoch = ++s.epoch;
  if (!s.full_batch && s.options.shuffle) {
    // Fisher-Yates from the seeded generator, as the MLP shuffles.
    std::vector<std::int32_t> order(static_cast<std::size_t>(s.train_rows));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[s.rng() % (i + 1)]);
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(s.order.get(), order.data(), order.size() * sizeof(std::int32_t),
                                         cudaMemcpyHostToDevice, s.stream()));
  }
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.step_counter.get(), 0, sizeof(std::int32_t), s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.loss_sum.get(), 0, sizeof(double), s.stream()));
  std::vector<cudaEvent_t> events(static_cast<std::size_t>(2 * s.steps), nullptr);
  struct Destroy {
    std::vector<cudaEvent_t>& e;
    ~Destroy() {
      for (cudaEvent_t x : e)
        if (x) cudaEventDestroy(x);
    }
  } destroy{events};
  for (cudaEvent_t& e : events) SHAPETUNE_CUDA_CHECK(cudaEventCreate(&e));
  for (std::int64_t i = 0; i < s.steps; ++i) {
    s.step_graph.prepare();
    SHAPETUNE_CUDA_CHECK(cudaEventRecord(events[static_cast<std::size_t>(2 * i)], s.stream()));
    s.step_graph.launch(s.stream());
    SHAPETUNE_CUDA_CHECK(cudaEventRecord(events[static_cast<std::size_t>(2 * i + 1)], s.stream()));
  }
  std::vector<float> history(static_cast<std::size_t>(s.steps));
  SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(history.data(), s.history.get(), history.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  r.step_losses.assign(history.begin(), history.end());
  for (std::int64_t i = 0; i < s.steps; ++i) {
    float ms = 0;
    SHAPETUNE_CUDA_CHECK(
        cudaEventElapsedTime(&ms, events[static_cast<std::size_t>(2 * i)], events[static_cast<std::size_t>(2 * i + 1)]));
    r.step_milliseconds.push_back(ms);
  }
  r.train_accuracy = s.evaluate(s.train_eval).first;
  std::tie(r.test_accuracy, r.test_loss) = s.evaluate(s.test_eval);
  return r;
}

std::vector<float> LogregTrainer::parameters() const {
  std::vector<float> host(static_cast<std::size_t>(kLogregParameters));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(state_->stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(host.data(), state_->params.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// ---- the float64 reference and the weights file -------------------------------------------------

LogregReferenceRun logreg_reference_train(const std::vector<double>& x, const std::vector<std::int32_t>& labels,
                                          int features, int steps, double lr) {
  const auto rows = static_cast<std::int64_t>(labels.size());
  if (features < 1 || rows < 1 || x.size() != static_cast<std::size_t>(rows * features))
    throw std::invalid_argument("logreg_reference_train: x must hold labels.size() x features values");
  const std::vector<double> y(labels.begin(), labels.end());
  const std::int64_t sizes[2] = {features, 1};
  const auto n = static_cast<std::size_t>(features) + 1;
  std::vector<double> params(n, 0.0), grads(n), m(n, 0.0), v(n, 0.0), p(static_cast<std::size_t>(rows));
  LogregReferenceRun run;
  for (int t = 1; t <= steps; ++t) {
    double loss = 0;
    reference::logistic_bce(rows, features, x.data(), params.data(), params[n - 1], y.data(), p.data(), &loss,
                            grads.data(), &grads[n - 1]);
    run.losses.push_back(loss);
    run.gradients.push_back(grads);
    reference::adam(sizes, 2, reference::AdamHyperparameters{lr, kBeta1, kBeta2, kAdamEps, 0.0, static_cast<double>(t)},
                    params.data(), grads.data(), m.data(), v.data());
  }
  run.parameters = std::move(params);
  return run;
}

void save_logreg_weights(const std::string& path, const std::vector<float>& parameters, std::array<int, 2> classes) {
  if (parameters.size() != static_cast<std::size_t>(kLogregParameters))
    throw std::invalid_argument("logistic regression has " + std::to_string(kLogregParameters) + " parameters");
  const std::span<const float> all(parameters);
  const std::vector<SafetensorsTensor> tensors = {
      {"weight", "F32", {1, kD}, std::as_bytes(all.first(kD))},
      {"bias", "F32", {1}, std::as_bytes(all.subspan(kD, 1))}};
  // Which Fashion-MNIST classes the model's labels 0 and 1 stand for.
  write_safetensors(path, tensors, {{"class_0", std::to_string(classes[0])}, {"class_1", std::to_string(classes[1])}});
}

}  // namespace shapetune
