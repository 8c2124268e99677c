#include "models/mlp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <stdexcept>

#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "kernels/gemm/gemm_kind.hpp"
#include "models/runner.hpp"
#include "models/training_kernels.cuh"

namespace shapetune {
namespace {

constexpr int kIn = kMlpWidths[0], kH1 = kMlpWidths[1], kH2 = kMlpWidths[2], kOut = kMlpWidths[3];
// Offsets of the six tensors in the flat parameter (and gradient, and moment) buffers. Every
// one is a multiple of 4 floats, so each tensor starts 16-byte aligned for vectorized kernels.
constexpr std::int64_t kW1 = 0, kB1 = kW1 + std::int64_t{kIn} * kH1, kW2 = kB1 + kH1, kB2 = kW2 + std::int64_t{kH1} * kH2,
                       kW3 = kB2 + kH2, kB3 = kW3 + std::int64_t{kH2} * kOut, kParamEnd = kB3 + kOut;
static_assert(kParamEnd == kMlpParameters);
constexpr int kParamTensors = 6;
constexpr int kTrainOps = 15;  // mlp_operations(): the training step's, then evaluation's 3

// Fashion-MNIST's pixel mean and standard deviation over the training set (of p / 255).
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
constexpr float kPixelScale = static_cast<float>(1.0 / (255.0 * kPixelStd));
constexpr float kPixelShift = static_cast<float>(-kPixelMean / kPixelStd);

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kAdamEps = 1e-8;

Problem gemm_problem(const std::string& primitive, std::int64_t m, std::int64_t n, std::int64_t k) {
  return Problem{primitive, DType::f32, Shape({{"m", m}, {"n", n}, {"k", k}})};
}
Problem relu_backward_problem(std::int64_t n) { return Problem{"activation_backward.relu", DType::f32, Shape({{"n", n}})}; }

// Reproducible across standard libraries (std::uniform_*_distribution is not).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Activations and gradients of one batch size.
struct Activations {
  std::int64_t rows = 0;
  DeviceBuffer x, y, h1, h2, logits, loss, dlogits, dh2, dz2, dh1, dz1, ones;

  Activations(std::int64_t r, bool backward) : rows(r) {
    auto floats = [](std::int64_t n) { return DeviceBuffer(static_cast<std::size_t>(n) * sizeof(float)); };
    x = floats(rows * kIn);
    h1 = floats(rows * kH1);
    h2 = floats(rows * kH2);
    logits = floats(rows * kOut);
    if (!backward) return;
    y = DeviceBuffer(static_cast<std::size_t>(rows) * sizeof(std::int32_t));
    loss = floats(1);
    dlogits = floats(rows * kOut);
    dh2 = floats(rows * kH2);
    dz2 = floats(rows * kH2);
    dh1 = floats(rows * kH1);
    dz1 = floats(rows * kH1);
    ones = floats(rows);
    const std::vector<float> host(static_cast<std::size_t>(rows), 1.f);
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(ones.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
};

struct Parameters {
  DeviceBuffer p, g, m, v;
  Parameters() {
    const std::size_t bytes = static_cast<std::size_t>(kMlpParameters) * sizeof(float);
    p = DeviceBuffer(bytes);
    g = DeviceBuffer(bytes);
    m = DeviceBuffer(bytes);
    v = DeviceBuffer(bytes);
    SHAPETUNE_CUDA_CHECK(cudaMemset(m.get(), 0, bytes));
    SHAPETUNE_CUDA_CHECK(cudaMemset(v.get(), 0, bytes));
  }
  float* p_at(std::int64_t offset) const { return static_cast<float*>(p.get()) + offset; }
  float* g_at(std::int64_t offset) const { return static_cast<float*>(g.get()) + offset; }
};

// The forward (and, with `backward`, backward) operations of `ops` (mlp_operations() order)
// bound to `a` and the parameters.
std::vector<BoundOp> bind_step(const std::vector<ModelOp>& ops, RunnerCore& core, Activations& a,
                               const Parameters& params, bool backward, RunnerCore::Record record) {
  auto f = [](const DeviceBuffer& b) { return b.get(); };
  const std::vector<std::vector<void*>> tensors = {
      {f(a.x), params.p_at(kW1), params.p_at(kB1), f(a.h1)},
      {f(a.h1), params.p_at(kW2), params.p_at(kB2), f(a.h2)},
      {f(a.h2), params.p_at(kW3), params.p_at(kB3), f(a.logits)},
      {f(a.logits), f(a.y), f(a.loss), f(a.dlogits)},
      {f(a.h2), f(a.dlogits), params.g_at(kW3)},
      {f(a.ones), f(a.dlogits), params.g_at(kB3)},
      {f(a.dlogits), params.p_at(kW3), f(a.dh2)},
      {f(a.h2), f(a.dh2), f(a.dz2)},  // relu'(z) = [z > 0] = [relu(z) > 0]: h2 stands for z2
      {f(a.h1), f(a.dz2), params.g_at(kW2)},
      {f(a.ones), f(a.dz2), params.g_at(kB2)},
      {f(a.dz2), params.p_at(kW2), f(a.dh1)},
      {f(a.h1), f(a.dh1), f(a.dz1)},
      {f(a.x), f(a.dz1), params.g_at(kW1)},
      {f(a.ones), f(a.dz1), params.g_at(kB1)},
  };
  const std::size_t count = backward ? tensors.size() : 3;
  std::vector<BoundOp> bound;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<double> scalars;
    if (kernels::gemm::parse_gemm_primitive(ops[i].problem.primitive)) scalars = {1.0, 0.0};  // alpha, beta
    bound.push_back(core.bind(ops[i], tensors[i], std::move(scalars), record));
  }
  return bound;
}

}  // namespace

std::vector<float> mlp_normalise(const std::vector<std::uint8_t>& pixels) {
  // The same float operation as the gather kernel's, so host and device agree bit for bit.
  std::vector<float> out(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) out[i] = std::fmaf(static_cast<float>(pixels[i]), kPixelScale, kPixelShift);
  return out;
}

std::vector<ModelOp> mlp_operations(int batch, std::int64_t eval_rows) {
  const std::int64_t b = batch;
  return {
      {"fc1 forward, bias + ReLU", gemm_problem("gemm_bias_relu.nn", b, kH1, kIn)},
      {"fc2 forward, bias + ReLU", gemm_problem("gemm_bias_relu.nn", b, kH2, kH1)},
      {"fc3 forward, bias", gemm_problem("gemm_bias.nn", b, kOut, kH2)},
      {"softmax cross-entropy, loss and dlogits",
       Problem{"softmax_xent", DType::f32, Shape({{"rows", b}, {"classes", kOut}})}},
      {"fc3 weight gradient h2^T dlogits", gemm_problem("gemm.tn", kH2, kOut, b)},
      {"fc3 bias gradient 1^T dlogits", gemm_problem("gemm.tn", 1, kOut, b)},
      {"fc3 input gradient dlogits W3^T", gemm_problem("gemm.nt", b, kH2, kOut)},
      {"ReLU 2 backward", relu_backward_problem(b * kH2)},
      {"fc2 weight gradient h1^T dz2", gemm_problem("gemm.tn", kH1, kH2, b)},
      {"fc2 bias gradient 1^T dz2", gemm_problem("gemm.tn", 1, kH2, b)},
      {"fc2 input gradient dz2 W2^T", gemm_problem("gemm.nt", b, kH1, kH2)},
      {"ReLU 1 backward", relu_backward_problem(b * kH1)},
      {"fc1 weight gradient x^T dz1", gemm_problem("gemm.tn", kIn, kH1, b)},
      {"fc1 bias gradient 1^T dz1", gemm_problem("gemm.tn", 1, kH1, b)},
      {"Adam, all six tensors in one step",
       Problem{"adam", DType::f32, Shape({{"n", kMlpParameters}, {"tensors", kParamTensors}})}},
      {"eval fc1 forward, bias + ReLU", gemm_problem("gemm_bias_relu.nn", eval_rows, kH1, kIn)},
      {"eval fc2 forward, bias + ReLU", gemm_problem("gemm_bias_relu.nn", eval_rows, kH2, kH1)},
      {"eval fc3 forward, bias", gemm_problem("gemm_bias.nn", eval_rows, kOut, kH2)},
  };
}

struct MlpTrainer::State {
  MlpOptions options;
  std::unique_ptr<RunnerCore> core;  // first in, last out: everything below runs on its stream
  std::optional<Parameters> params;  // allocated once the device is chosen
  std::mt19937_64 rng;

  // Training (present with data).
  std::unique_ptr<Activations> train;
  std::vector<BoundOp> step_ops;
  BoundOp adam;
  std::int64_t train_count = 0;
  DeviceBuffer train_pixels, train_labels, order, step_counter, loss_sum;
  StepGraph step_graph;  // with Adam in it (adam_in_graph), else the body alone
  int epoch = 0;

  // Evaluation.
  std::unique_ptr<Activations> eval;
  std::vector<BoundOp> eval_ops;
  std::vector<std::uint8_t> test_labels;

  // The backward pass's weight and bias gradients run beside the input-gradient chain: two side
  // streams, each with its own library handles (a cuBLAS handle's workspace must not be shared
  // by concurrent calls), forked from and joined back to the core's stream by events.
  cudaStream_t side[2] = {nullptr, nullptr};
  LibraryHandles side_libraries[2];
  cudaEvent_t fork_events[3] = {}, join_events[2] = {};

  cudaStream_t stream() const { return core->stream(); }
  LibraryHandles& libraries() { return core->libraries(); }

  ~State() {
    for (cudaEvent_t e : fork_events)
      if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : join_events)
      if (e) cudaEventDestroy(e);
    for (cudaStream_t st : side)
      if (st) cudaStreamDestroy(st);
  }

  // Forward, loss and backward of the batch in train->x: the chain dlogits -> dh2 -> dz2 -> dh1
  // -> dz1 on `stream`; each layer's dW (side 0) and db (side 1) forked once its d is ready;
  // both sides joined before returning, so what follows on `stream` sees every gradient.
  // step_ops order (mlp_operations()): 0-3 forward and loss; per layer dW, db, dh, ReLU
  // backward (4-7 layer 3, 8-11 layer 2); 12-13 layer 1's dW and db.
  void enqueue_forward_backward() {
    for (int i = 0; i < 4; ++i) step_ops[static_cast<std::size_t>(i)].launch(stream(), libraries());
    const int layers[3][4] = {{4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, -1, -1}};
    for (int l = 0; l < 3; ++l) {
      SHAPETUNE_CUDA_CHECK(cudaEventRecord(fork_events[l], stream()));
      for (int sd = 0; sd < 2; ++sd) {
        SHAPETUNE_CUDA_CHECK(cudaStreamWaitEvent(side[sd], fork_events[l], 0));
        step_ops[static_cast<std::size_t>(layers[l][sd])].launch(side[sd], side_libraries[sd]);
      }
      for (int k = 2; k < 4; ++k)
        if (layers[l][k] >= 0) step_ops[static_cast<std::size_t>(layers[l][k])].launch(stream(), libraries());
    }
    for (int sd = 0; sd < 2; ++sd) {
      SHAPETUNE_CUDA_CHECK(cudaEventRecord(join_events[sd], side[sd]));
      SHAPETUNE_CUDA_CHECK(cudaStreamWaitEvent(stream(), join_events[sd], 0));
    }
  }

  // The Adam step `t` as a graph of its own: the bias correction changes every step, and a
  // launch's scalars are baked into a captured graph, so this child is swapped in per step.
  Graph capture_adam(std::int64_t t) {
    adam.scalars = {options.lr, kBeta1, kBeta2, kAdamEps, 0.0, static_cast<double>(t)};
    return capture(stream(), [&] { adam.launch(stream(), libraries()); });
  }

  void gather() {
    SHAPETUNE_CUDA_CHECK(training_kernels::gather_batch(
        static_cast<const std::uint8_t*>(train_pixels.get()), static_cast<const std::uint8_t*>(train_labels.get()),
        static_cast<const std::int32_t*>(order.get()), static_cast<const std::int32_t*>(step_counter.get()),
        options.batch, kIn, kPixelScale, kPixelShift, static_cast<float*>(train->x.get()),
        static_cast<std::int32_t*>(train->y.get()), stream()));
  }

  // The step graph: gather, forward, backward, then the loss sum and step counter, captured
  // once; then Adam as a child graph. Adam's bias correction changes every step and a captured
  // launch bakes its arguments, so each step captures the next Adam launch and swaps it in
  // (cudaGraphExecChildGraphNodeSetParams) while the GPU runs the current one. Without
  // adam_in_graph, Adam is launched after each replay instead: on the H200 the two placements
  // took the same epoch time within 2% (reports/h200/2026-12-01-mlp-at-d99ca3b).
  void build_graph() {
    // One eager pass first, so that libraries do their lazy set-up (workspaces, heuristics)
    // outside the capture. It computes gradients only; the parameters are untouched.
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(step_counter.get(), 0, sizeof(std::int32_t), stream()));
    for (cudaStream_t& st : side) SHAPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (cudaEvent_t& e : fork_events) SHAPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (cudaEvent_t& e : join_events) SHAPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    gather();
    enqueue_forward_backward();
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream()));

    Graph body = capture(stream(), [&] {
      gather();
      enqueue_forward_backward();
      SHAPETUNE_CUDA_CHECK(training_kernels::finish_step(static_cast<std::int32_t*>(step_counter.get()),
                                                          static_cast<const float*>(train->loss.get()),
                                                          static_cast<double*>(loss_sum.get()), stream()));
    });
    if (options.adam_in_graph)
      step_graph = StepGraph(std::move(body), [this](std::int64_t t) { return capture_adam(t); });
    else
      step_graph = StepGraph(std::move(body), {});
  }

  void replay_step() {
    step_graph.replay(stream());
    if (!options.adam_in_graph) {
      adam.scalars = {options.lr, kBeta1, kBeta2, kAdamEps, 0.0, static_cast<double>(step_graph.steps())};
      adam.launch(stream(), libraries());
    }
  }
};

MlpTrainer::MlpTrainer(const MlpOptions& options) : MlpTrainer(options, FashionMnist{}) {}

MlpTrainer::MlpTrainer(const MlpOptions& options, FashionMnist data) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  if (options.batch < 1) throw std::invalid_argument("batch must be >= 1");
  s.core = std::make_unique<RunnerCore>(RunnerOptions{options.db_path, options.dispatch, options.device});
  s.params.emplace();
  s.rng.seed(options.seed);

  // PyTorch's nn.Linear initialisation: weights and biases U(-1/sqrt(in), 1/sqrt(in)).
  std::vector<float> host(static_cast<std::size_t>(kMlpParameters));
  const std::int64_t offsets[] = {kW1, kB1, kW2, kB2, kW3, kB3, kParamEnd};
  const int fan_in[] = {kIn, kIn, kH1, kH1, kH2, kH2};
  for (int t = 0; t < kParamTensors; ++t) {
    const double bound = 1 / std::sqrt(static_cast<double>(fan_in[t]));
    for (std::int64_t i = offsets[t]; i < offsets[t + 1]; ++i)
      host[static_cast<std::size_t>(i)] = static_cast<float>((2 * uniform01(s.rng) - 1) * bound);
  }
  set_parameters(host);

  const bool have_data = data.train.count > 0;
  const std::int64_t eval_rows = have_data ? data.test.count : options.batch;
  const std::vector<ModelOp> ops = mlp_operations(options.batch, eval_rows);
  if (!have_data) {
    // Resolution only (tests): the same table, nothing bound.
    for (const auto& op : ops) s.core->resolve(op);
    return;
  }
  if (data.train.rows * data.train.cols != kIn)
    throw DataError("images are " + std::to_string(data.train.rows) + "x" + std::to_string(data.train.cols) +
                    "; the MLP takes 28x28");
  s.train_count = options.train_limit > 0 ? std::min(options.train_limit, data.train.count) : data.train.count;
  if (s.train_count < options.batch)
    throw std::invalid_argument("batch " + std::to_string(options.batch) + " is larger than the " +
                                std::to_string(s.train_count) + " training images");

  s.train = std::make_unique<Activations>(options.batch, true);
  s.step_ops = bind_step(ops, *s.core, *s.train, *s.params, true, RunnerCore::Record::yes);
  s.adam = s.core->bind(ops[kTrainOps - 1], {s.params->p.get(), s.params->g.get(), s.params->m.get(), s.params->v.get()});
  s.eval = std::make_unique<Activations>(eval_rows, false);
  const std::vector<ModelOp> eval_ops(ops.begin() + kTrainOps, ops.end());
  s.eval_ops = bind_step(eval_ops, *s.core, *s.eval, *s.params, false, RunnerCore::Record::yes);

  const std::size_t train_pixels = static_cast<std::size_t>(s.train_count * kIn);
  data.train.pixels.resize(train_pixels);
  data.train.labels.resize(static_cast<std::size_t>(s.train_count));
  s.train_pixels = upload(data.train.pixels);
  s.train_labels = upload(data.train.labels);
  std::vector<std::int32_t> identity(static_cast<std::size_t>(s.train_count));
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int32_t>(i);
  s.order = upload(identity);
  s.step_counter = DeviceBuffer(sizeof(std::int32_t));
  s.loss_sum = DeviceBuffer(sizeof(double));
  const std::vector<float> test_x = mlp_normalise(data.test.pixels);
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(s.eval->x.get(), test_x.data(), test_x.size() * sizeof(float), cudaMemcpyHostToDevice));
  s.test_labels = std::move(data.test.labels);
  s.build_graph();
}

MlpTrainer::~MlpTrainer() = default;

const std::vector<OpResolution>& MlpTrainer::resolutions() const { return state_->core->resolutions(); }
const DeviceInfo& MlpTrainer::device() const { return state_->core->device(); }

EpochResult MlpTrainer::train_epoch() {
  State& s = *state_;
  if (!s.train) throw std::logic_error("train_epoch needs a trainer constructed with data");
  EpochResult r;
  r.epoch = ++s.epoch;
  r.steps = s.train_count / s.options.batch;
  const auto start = std::chrono::steady_clock::now();
  // The epoch's order: Fisher-Yates from the seeded generator.
  std::vector<std::int32_t> order(static_cast<std::size_t>(s.train_count));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[s.rng() % (i + 1)]);
  SHAPETUNE_CUDA_CHECK(
      cudaMemcpyAsync(s.order.get(), order.data(), order.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.step_counter.get(), 0, sizeof(std::int32_t), s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.loss_sum.get(), 0, sizeof(double), s.stream()));
  for (std::int64_t i = 0; i < r.steps; ++i) s.replay_step();
  double loss_sum = 0;
  SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(&loss_sum, s.loss_sum.get(), sizeof(double), cudaMemcpyDeviceToHost, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  r.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.train_loss = loss_sum / static_cast<double>(r.steps);
  r.images_per_second = static_cast<double>(r.steps * s.options.batch) / r.train_seconds;
  r.test_accuracy = test_accuracy();
  return r;
}

double MlpTrainer::test_accuracy() {
  State& s = *state_;
  if (!s.eval) throw std::logic_error("test_accuracy needs a trainer constructed with data");
  for (const auto& op : s.eval_ops) op.launch(s.stream(), s.libraries());
  std::vector<float> logits(static_cast<std::size_t>(s.eval->rows * kOut));
  SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(logits.data(), s.eval->logits.get(), logits.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < s.eval->rows; ++r) {
    const float* row = logits.data() + r * kOut;
    correct += (std::max_element(row, row + kOut) - row) == s.test_labels[static_cast<std::size_t>(r)];
  }
  return static_cast<double>(correct) / static_cast<double>(s.eval->rows);
}

std::vector<float> MlpTrainer::parameters() const {
  std::vector<float> host(static_cast<std::size_t>(kMlpParameters));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(state_->stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(host.data(), state_->params->p.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

void MlpTrainer::set_parameters(const std::vector<float>& host) {
  if (host.size() != static_cast<std::size_t>(kMlpParameters))
    throw std::invalid_argument("the MLP has " + std::to_string(kMlpParameters) + " parameters, got " +
                                std::to_string(host.size()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(state_->stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(state_->params->p.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
}

GradientResult MlpTrainer::gradients(const std::vector<float>& x, const std::vector<std::int32_t>& labels) {
  State& s = *state_;
  const auto rows = static_cast<std::int64_t>(labels.size());
  if (rows < 1 || x.size() != static_cast<std::size_t>(rows * kIn))
    throw std::invalid_argument("gradients: x must hold rows x 784 floats for rows = labels.size() >= 1");
  Activations a(rows, true);
  const std::vector<BoundOp> ops =
      bind_step(mlp_operations(static_cast<int>(rows), rows), *s.core, a, *s.params, true, RunnerCore::Record::no);
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(a.x.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(a.y.get(), labels.data(), labels.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.params->g.get(), 0xff, s.params->g.bytes(), s.stream()));  // NaN: nothing stale passes
  for (const auto& op : ops) op.launch(s.stream(), s.libraries());
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  GradientResult r;
  float loss = 0;
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(&loss, a.loss.get(), sizeof(float), cudaMemcpyDeviceToHost));
  r.loss = loss;
  r.gradients.resize(static_cast<std::size_t>(kMlpParameters));
  SHAPETUNE_CUDA_CHECK(
      cudaMemcpy(r.gradients.data(), s.params->g.get(), r.gradients.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return r;
}

GradientResult mlp_reference_gradients(const std::vector<float>& params, const std::vector<float>& x,
                                       const std::vector<std::int32_t>& labels) {
  const auto rows = static_cast<std::int64_t>(labels.size());
  auto P = [&](std::int64_t i) { return static_cast<double>(params[static_cast<std::size_t>(i)]); };
  // Forward: h = relu(in W + b) with W stored [in, out].
  auto layer = [&](const std::vector<double>& in, int n_in, int n_out, std::int64_t w, std::int64_t b, bool relu) {
    std::vector<double> out(static_cast<std::size_t>(rows * n_out));
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < n_out; ++j) {
        double acc = P(b + j);
        for (int i = 0; i < n_in; ++i) acc += in[static_cast<std::size_t>(r * n_in + i)] * P(w + std::int64_t{i} * n_out + j);
        out[static_cast<std::size_t>(r * n_out + j)] = relu ? std::max(acc, 0.0) : acc;
      }
    return out;
  };
  const std::vector<double> x64(x.begin(), x.end());
  const auto h1 = layer(x64, kIn, kH1, kW1, kB1, true);
  const auto h2 = layer(h1, kH1, kH2, kW2, kB2, true);
  const auto logits = layer(h2, kH2, kOut, kW3, kB3, false);
  GradientResult r;
  r.gradients.assign(static_cast<std::size_t>(kMlpParameters), 0.f);
  std::vector<double> g(static_cast<std::size_t>(kMlpParameters), 0.0);
  std::vector<double> dlogits(logits.size());
  for (std::int64_t row = 0; row < rows; ++row) {
    const double* l = logits.data() + row * kOut;
    const double mx = *std::max_element(l, l + kOut);
    double sum = 0;
    for (int c = 0; c < kOut; ++c) sum += std::exp(l[c] - mx);
    const int label = labels[static_cast<std::size_t>(row)];
    r.loss += (std::log(sum) + mx - l[label]) / static_cast<double>(rows);
    for (int c = 0; c < kOut; ++c)
      dlogits[static_cast<std::size_t>(row * kOut + c)] =
          (std::exp(l[c] - mx) / sum - (c == label ? 1.0 : 0.0)) / static_cast<double>(rows);
  }
  // Backward through a layer: dW += in^T d, db += sum d, returns d in (before the ReLU of in).
  auto back = [&](const std::vector<double>& in, const std::vector<double>& d, int n_in, int n_out, std::int64_t w,
                  std::int64_t b, bool in_relu) {
    std::vector<double> din(static_cast<std::size_t>(rows * n_in), 0.0);
    for (std::int64_t row = 0; row < rows; ++row)
      for (int j = 0; j < n_out; ++j) {
        const double dj = d[static_cast<std::size_t>(row * n_out + j)];
        g[static_cast<std::size_t>(b + j)] += dj;
        for (int i = 0; i < n_in; ++i) {
          g[static_cast<std::size_t>(w + std::int64_t{i} * n_out + j)] += in[static_cast<std::size_t>(row * n_in + i)] * dj;
          din[static_cast<std::size_t>(row * n_in + i)] += dj * P(w + std::int64_t{i} * n_out + j);
        }
      }
    if (in_relu)
      for (std::size_t i = 0; i < din.size(); ++i) din[i] = in[i] > 0 ? din[i] : 0.0;
    return din;
  };
  const auto dz2 = back(h2, dlogits, kH2, kOut, kW3, kB3, true);
  const auto dz1 = back(h1, dz2, kH1, kH2, kW2, kB2, true);
  back(x64, dz1, kIn, kH1, kW1, kB1, false);
  for (std::size_t i = 0; i < g.size(); ++i) r.gradients[i] = static_cast<float>(g[i]);
  return r;
}

}  // namespace shapetune
