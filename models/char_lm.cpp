#include "models/char_lm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <random>
#include <stdexcept>

#include "baselines/reference.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "models/safetensors.hpp"
#include "models/training_kernels.cuh"

namespace shapetune {
namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kAdamEps = 1e-8;

// Reproducible across standard libraries (std::uniform_*_distribution is not).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
// Box-Muller on two uniforms; (0, 1] for the logarithm's argument.
double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1 - uniform01(rng), u2 = uniform01(rng);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

double identity(double v) { return v; }

std::int64_t aligned(std::int64_t n) { return (n + kCharLmAlignment - 1) / kCharLmAlignment * kCharLmAlignment; }

std::string layer_suffix(int l) { return "_l" + std::to_string(l); }

// Positions of the named tensors in char_lm_layout()'s list.
struct LayoutIndex {
  int layers;
  static constexpr int embedding = 0;
  static int w_ih(int l) { return 1 + 4 * l; }
  static int w_hh(int l) { return 2 + 4 * l; }
  static int b_ih(int l) { return 3 + 4 * l; }
  static int b_hh(int l) { return 4 + 4 * l; }
  int head_weight() const { return 1 + 4 * layers; }
  int head_bias() const { return 2 + 4 * layers; }
};

reference::RnnShape rnn_shape(const CharLmShape& s, int l, int seq_len, int batch) {
  return {seq_len, batch, l == 0 ? s.embed : s.hidden, s.hidden};
}

Problem rnn_problem(const CharLmShape& s, const std::string& direction, int l, int seq_len, int batch) {
  return Problem{std::string(recurrent_cell_name(s.cell)) + "." + direction, DType::f32,
                 Shape({{"T", seq_len}, {"N", batch}, {"D", l == 0 ? s.embed : s.hidden}, {"H", s.hidden}})};
}

Problem gemm_problem(const std::string& primitive, std::int64_t m, std::int64_t n, std::int64_t k) {
  return Problem{primitive, DType::f32, Shape({{"m", m}, {"n", n}, {"k", k}})};
}

}  // namespace

std::string_view recurrent_cell_name(RecurrentCell cell) { return cell == RecurrentCell::lstm ? "lstm" : "gru"; }

void validate(const CharLmShape& s) {
  if (s.vocab < 2) throw std::invalid_argument("the vocabulary must hold at least 2 characters");
  if (s.embed < 1 || s.embed > 8192) throw std::invalid_argument("--embed must be in [1, 8192]");
  if (s.hidden < 1 || s.hidden > 8192) throw std::invalid_argument("--hidden must be in [1, 8192]");
  if (s.layers < 1 || s.layers > 2) throw std::invalid_argument("--layers must be 1 or 2");
}

std::vector<CharLmTensor> char_lm_layout(const CharLmShape& s) {
  validate(s);
  const std::int64_t V = s.vocab, E = s.embed, H = s.hidden, GH = std::int64_t{s.gates()} * H;
  std::vector<CharLmTensor> out;
  std::int64_t offset = 0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    std::int64_t size = 1;
    for (auto d : shape) size *= d;
    out.push_back({std::move(name), std::move(shape), offset, size});
    offset += aligned(size);
  };
  add("embedding.weight", {V, E});
  for (int l = 0; l < s.layers; ++l) {
    add("rnn.weight_ih" + layer_suffix(l), {GH, l == 0 ? E : H});
    add("rnn.weight_hh" + layer_suffix(l), {GH, H});
    add("rnn.bias_ih" + layer_suffix(l), {GH});
    add("rnn.bias_hh" + layer_suffix(l), {GH});
  }
  add("head.weight", {V, H});
  add("head.bias", {V});
  return out;
}

std::int64_t char_lm_flat_size(const CharLmShape& s) {
  const auto layout = char_lm_layout(s);
  return layout.back().offset + aligned(layout.back().size);
}

std::vector<float> char_lm_initial_parameters(const CharLmShape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> flat(static_cast<std::size_t>(char_lm_flat_size(s)), 0.f);
  const double bound = 1 / std::sqrt(static_cast<double>(s.hidden));  // nn.LSTM/GRU's and the head's
  for (const CharLmTensor& t : char_lm_layout(s)) {
    const bool normal = t.name == "embedding.weight";
    for (std::int64_t i = 0; i < t.size; ++i)
      flat[static_cast<std::size_t>(t.offset + i)] =
          static_cast<float>(normal ? standard_normal(rng) : (2 * uniform01(rng) - 1) * bound);
  }
  return flat;
}

void save_char_lm_weights(const std::string& path, const CharLmShape& s, const std::vector<float>& flat,
                          const std::string& vocabulary_utf8) {
  if (flat.size() != static_cast<std::size_t>(char_lm_flat_size(s)))
    throw std::invalid_argument("save_char_lm_weights: the flat buffer does not match the shape");
  std::vector<SafetensorsTensor> tensors;
  for (const CharLmTensor& t : char_lm_layout(s)) {
    SafetensorsTensor st;
    st.name = t.name;
    st.dtype = "F32";
    st.shape = t.shape;
    st.bytes = std::as_bytes(std::span<const float>(flat.data() + t.offset, static_cast<std::size_t>(t.size)));
    tensors.push_back(std::move(st));
  }
  const std::map<std::string, std::string> metadata = {
      {"cell", std::string(recurrent_cell_name(s.cell))}, {"vocab", std::to_string(s.vocab)},
      {"embed", std::to_string(s.embed)},                  {"hidden", std::to_string(s.hidden)},
      {"layers", std::to_string(s.layers)},                {"vocabulary", vocabulary_utf8}};
  write_safetensors(path, tensors, metadata);
}

std::vector<float> load_char_lm_weights(const std::string& path, const CharLmShape& s) {
  const SafetensorsFile file = read_safetensors(path);
  std::vector<float> flat(static_cast<std::size_t>(char_lm_flat_size(s)), 0.f);
  auto shape_text = [](const std::vector<std::int64_t>& shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "]";
  };
  const auto layout = char_lm_layout(s);
  // A tensor this model does not have means the file is of another shape (two layers read as
  // one): refused, not ignored.
  for (const SafetensorsTensor& st : file.tensors())
    if (std::none_of(layout.begin(), layout.end(), [&](const CharLmTensor& t) { return t.name == st.name; }))
      throw DataError(path + ": " + st.name + " is not a tensor of this model (" + std::to_string(s.layers) +
                      " layer" + (s.layers == 1 ? "" : "s") + "; --layers must match the file)");
  for (const CharLmTensor& t : layout) {
    const SafetensorsTensor& st = file.tensor(t.name);
    if (st.dtype != "F32")
      throw DataError(path + ": " + t.name + " is " + st.dtype + "; the " + std::string(recurrent_cell_name(s.cell)) +
                      " runner reads F32");
    if (st.shape != t.shape)
      throw DataError(path + ": " + t.name + " is " + shape_text(st.shape) + "; this model's is " +
                      shape_text(t.shape) + " (--layers, --hidden, --embed and the corpus' vocabulary fix it)");
    std::memcpy(flat.data() + t.offset, st.bytes.data(), st.bytes.size());
  }
  return flat;
}

double bits_per_character(double nats) { return nats / std::log(2.0); }

// ---- float64 reference ------------------------------------------------------------------------

CharLmState zero_char_lm_state(const CharLmShape& s, int batch) {
  const std::vector<double> zero(static_cast<std::size_t>(batch) * static_cast<std::size_t>(s.hidden), 0.0);
  CharLmState st;
  st.h.assign(static_cast<std::size_t>(s.layers), zero);
  if (s.cell == RecurrentCell::lstm) st.c.assign(static_cast<std::size_t>(s.layers), zero);
  return st;
}

CharLmReferenceStep char_lm_reference_step(const CharLmShape& s, const std::vector<double>& flat,
                                           const std::vector<std::int32_t>& inputs,
                                           const std::vector<std::int32_t>& targets, int seq_len, int batch,
                                           const CharLmState& state, bool with_gradients) {
  const auto layout = char_lm_layout(s);
  const LayoutIndex at{s.layers};
  const bool lstm = s.cell == RecurrentCell::lstm;
  const std::int64_t R = std::int64_t{seq_len} * batch, V = s.vocab, E = s.embed, H = s.hidden;
  if (inputs.size() != static_cast<std::size_t>(R) || targets.size() != static_cast<std::size_t>(R))
    throw std::invalid_argument("char_lm_reference_step: inputs and targets must hold seq_len x batch ids");
  if (flat.size() != static_cast<std::size_t>(char_lm_flat_size(s)))
    throw std::invalid_argument("char_lm_reference_step: the flat parameters do not match the shape");
  const auto P = [&](int tensor) { return flat.data() + layout[static_cast<std::size_t>(tensor)].offset; };

  // Forward: embedding, layers (each layer's input kept for the backward), head, loss.
  std::vector<std::vector<double>> xs(static_cast<std::size_t>(s.layers) + 1);
  xs[0].resize(static_cast<std::size_t>(R * E));
  for (std::int64_t r = 0; r < R; ++r)
    std::copy_n(P(at.embedding) + std::int64_t{inputs[static_cast<std::size_t>(r)]} * E, E,
                xs[0].begin() + r * E);
  CharLmReferenceStep out;
  out.state = zero_char_lm_state(s, batch);
  for (int l = 0; l < s.layers; ++l) {
    const auto L = static_cast<std::size_t>(l);
    xs[L + 1].resize(static_cast<std::size_t>(R * H));
    if (lstm)
      reference::lstm_forward(rnn_shape(s, l, seq_len, batch), xs[L].data(), state.h[L].data(), state.c[L].data(),
                              P(at.w_ih(l)), P(at.w_hh(l)), P(at.b_ih(l)), P(at.b_hh(l)), identity, xs[L + 1].data(),
                              out.state.h[L].data(), out.state.c[L].data());
    else
      reference::gru_forward(rnn_shape(s, l, seq_len, batch), xs[L].data(), state.h[L].data(), P(at.w_ih(l)),
                             P(at.w_hh(l)), P(at.b_ih(l)), P(at.b_hh(l)), identity, xs[L + 1].data(),
                             out.state.h[L].data());
  }
  const std::vector<double>& y = xs.back();
  std::vector<double> dlogits(static_cast<std::size_t>(R * V));
  for (std::int64_t r = 0; r < R; ++r) {
    double* row = dlogits.data() + r * V;
    for (std::int64_t v = 0; v < V; ++v) {
      double acc = P(at.head_bias())[v];
      for (std::int64_t k = 0; k < H; ++k) acc += y[static_cast<std::size_t>(r * H + k)] * P(at.head_weight())[v * H + k];
      row[v] = acc;
    }
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const std::int32_t label = targets[static_cast<std::size_t>(r)];
    out.loss += (std::log(sum) + mx - row[label]) / static_cast<double>(R);
    for (std::int64_t v = 0; v < V; ++v)
      row[v] = (std::exp(row[v] - mx) / sum - (v == label ? 1.0 : 0.0)) / static_cast<double>(R);
  }
  if (!with_gradients) return out;

  // Backward: the head, then each layer through time from the top (the carried state detached:
  // zero gradient at the batch's end, its gradient at the start dropped), then the embedding.
  out.gradients.assign(flat.size(), 0.0);
  const auto G = [&](int tensor) { return out.gradients.data() + layout[static_cast<std::size_t>(tensor)].offset; };
  std::vector<double> dy(static_cast<std::size_t>(R * H), 0.0);
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t v = 0; v < V; ++v) {
      const double d = dlogits[static_cast<std::size_t>(r * V + v)];
      G(at.head_bias())[v] += d;
      for (std::int64_t k = 0; k < H; ++k) {
        G(at.head_weight())[v * H + k] += d * y[static_cast<std::size_t>(r * H + k)];
        dy[static_cast<std::size_t>(r * H + k)] += d * P(at.head_weight())[v * H + k];
      }
    }
  const std::vector<double> zero_state(static_cast<std::size_t>(batch * H), 0.0);
  std::vector<double> discard_h(zero_state.size()), discard_c(zero_state.size());
  for (int l = s.layers - 1; l >= 0; --l) {
    const auto L = static_cast<std::size_t>(l);
    std::vector<double> dx(xs[L].size());
    if (lstm)
      reference::lstm_backward(rnn_shape(s, l, seq_len, batch), xs[L].data(), state.h[L].data(), state.c[L].data(),
                               P(at.w_ih(l)), P(at.w_hh(l)), P(at.b_ih(l)), P(at.b_hh(l)), identity, dy.data(),
                               zero_state.data(), zero_state.data(), dx.data(), discard_h.data(), discard_c.data(),
                               G(at.w_ih(l)), G(at.w_hh(l)), G(at.b_ih(l)), G(at.b_hh(l)));
    else
      reference::gru_backward(rnn_shape(s, l, seq_len, batch), xs[L].data(), state.h[L].data(), P(at.w_ih(l)),
                              P(at.w_hh(l)), P(at.b_ih(l)), P(at.b_hh(l)), identity, dy.data(), zero_state.data(),
                              dx.data(), discard_h.data(), G(at.w_ih(l)), G(at.w_hh(l)), G(at.b_ih(l)),
                              G(at.b_hh(l)));
    dy = std::move(dx);
  }
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t e = 0; e < E; ++e)
      G(at.embedding)[std::int64_t{inputs[static_cast<std::size_t>(r)]} * E + e] += dy[static_cast<std::size_t>(r * E + e)];
  return out;
}

void char_lm_reference_adam(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                            const std::vector<double>& g, double lr, std::int64_t t) {
  const double c1 = 1 - std::pow(kBeta1, static_cast<double>(t)), c2 = 1 - std::pow(kBeta2, static_cast<double>(t));
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = kBeta1 * m[i] + (1 - kBeta1) * g[i];
    v[i] = kBeta2 * v[i] + (1 - kBeta2) * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + kAdamEps);
  }
}

std::vector<std::int32_t> char_lm_sample(const CharLmShape& s, const std::vector<float>& flat_f,
                                         const std::vector<std::int32_t>& prime, int count, double temperature,
                                         std::uint64_t seed) {
  if (prime.empty()) throw std::invalid_argument("char_lm_sample: prime with at least one character");
  const auto layout = char_lm_layout(s);
  const LayoutIndex at{s.layers};
  const std::vector<double> flat(flat_f.begin(), flat_f.end());
  const auto P = [&](int tensor) { return flat.data() + layout[static_cast<std::size_t>(tensor)].offset; };
  const bool lstm = s.cell == RecurrentCell::lstm;
  CharLmState state = zero_char_lm_state(s, 1);
  std::mt19937_64 rng(seed);
  std::vector<double> logits(static_cast<std::size_t>(s.vocab));
  // One step of the network from `token`: the state advances, logits holds the next character's.
  auto step = [&](std::int32_t token) {
    std::vector<double> x(P(at.embedding) + std::int64_t{token} * s.embed,
                          P(at.embedding) + (std::int64_t{token} + 1) * s.embed);
    for (int l = 0; l < s.layers; ++l) {
      const auto L = static_cast<std::size_t>(l);
      std::vector<double> y(static_cast<std::size_t>(s.hidden)), h = state.h[L];
      if (lstm) {
        std::vector<double> c = state.c[L];
        reference::lstm_forward(rnn_shape(s, l, 1, 1), x.data(), h.data(), c.data(), P(at.w_ih(l)), P(at.w_hh(l)),
                                P(at.b_ih(l)), P(at.b_hh(l)), identity, y.data(), state.h[L].data(),
                                state.c[L].data());
      } else {
        reference::gru_forward(rnn_shape(s, l, 1, 1), x.data(), h.data(), P(at.w_ih(l)), P(at.w_hh(l)), P(at.b_ih(l)),
                               P(at.b_hh(l)), identity, y.data(), state.h[L].data());
      }
      x = std::move(y);
    }
    for (int v = 0; v < s.vocab; ++v) {
      double acc = P(at.head_bias())[v];
      for (int k = 0; k < s.hidden; ++k) acc += x[static_cast<std::size_t>(k)] * P(at.head_weight())[std::int64_t{v} * s.hidden + k];
      logits[static_cast<std::size_t>(v)] = acc;
    }
  };
  for (std::int32_t token : prime) step(token);
  std::vector<std::int32_t> out;
  for (int i = 0; i < count; ++i) {
    std::int32_t next = 0;
    if (temperature <= 0) {
      next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      const double mx = *std::max_element(logits.begin(), logits.end());
      std::vector<double> cumulative(logits.size());
      double sum = 0;
      for (std::size_t v = 0; v < logits.size(); ++v) cumulative[v] = sum += std::exp((logits[v] - mx) / temperature);
      const double u = uniform01(rng) * sum;
      next = static_cast<std::int32_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
      next = std::min(next, s.vocab - 1);
    }
    out.push_back(next);
    step(next);
  }
  return out;
}

// ---- the GPU trainer --------------------------------------------------------------------------

std::vector<ModelOp> char_lm_operations(const CharLmShape& s, int seq_len, int batch, std::int64_t flat_size) {
  const std::int64_t R = std::int64_t{seq_len} * batch;
  const std::string cell(recurrent_cell_name(s.cell));
  std::vector<ModelOp> ops;
  for (int l = 0; l < s.layers; ++l)
    ops.push_back({"layer " + std::to_string(l) + " " + cell + " forward", rnn_problem(s, "forward", l, seq_len, batch)});
  ops.push_back({"head forward y W^T + b", gemm_problem("gemm_bias.nt", R, s.vocab, s.hidden)});
  ops.push_back({"softmax cross-entropy, loss and dlogits",
                 Problem{"softmax_xent", DType::f32, Shape({{"rows", R}, {"classes", s.vocab}})}});
  ops.push_back({"head weight gradient dlogits^T y", gemm_problem("gemm.tn", s.vocab, s.hidden, R)});
  ops.push_back({"head bias gradient 1^T dlogits", gemm_problem("gemm.tn", 1, s.vocab, R)});
  ops.push_back({"head input gradient dlogits W", gemm_problem("gemm.nn", R, s.hidden, s.vocab)});
  for (int l = s.layers - 1; l >= 0; --l)
    ops.push_back({"layer " + std::to_string(l) + " " + cell + " backward through time",
                   rnn_problem(s, "backward", l, seq_len, batch)});
  ops.push_back({"Adam, every tensor in one step",
                 Problem{"adam", DType::f32,
                         Shape({{"n", flat_size}, {"tensors", static_cast<std::int64_t>(2 + 4 * s.layers + 1)}})}});
  return ops;
}

double CharLmEpoch::mean_loss() const {
  double sum = 0;
  for (double l : step_losses) sum += l;
  return step_losses.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(step_losses.size());
}

double CharLmEpoch::median_step_ms() const {
  if (step_milliseconds.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = step_milliseconds;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

namespace {

DeviceBuffer floats(std::int64_t n) { return DeviceBuffer(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(float)); }
DeviceBuffer zeroed(std::size_t bytes) {
  DeviceBuffer b(std::max<std::size_t>(bytes, 4));
  SHAPETUNE_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
  return b;
}

// Every batch of a split, inputs and targets [batches, T, B] flat.
struct SplitTokens {
  std::int64_t batches = 0;
  std::vector<std::int32_t> inputs, targets;
};
SplitTokens all_batches(const TbpttBatches& b) {
  SplitTokens out;
  out.batches = b.batches();
  const std::size_t R = static_cast<std::size_t>(b.seq_len()) * static_cast<std::size_t>(b.batch());
  out.inputs.resize(R * static_cast<std::size_t>(out.batches));
  out.targets.resize(out.inputs.size());
  for (std::int64_t i = 0; i < out.batches; ++i)
    b.fill(i, std::span(out.inputs).subspan(static_cast<std::size_t>(i) * R, R),
           std::span(out.targets).subspan(static_cast<std::size_t>(i) * R, R));
  return out;
}

// Pairs of CUDA events around replays, destroyed with the object; elapsed(i) after a synchronize.
class EventPairs {
 public:
  explicit EventPairs(std::int64_t pairs) : events_(static_cast<std::size_t>(2 * pairs), nullptr) {
    for (cudaEvent_t& e : events_) SHAPETUNE_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventPairs() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;

  void record_start(std::int64_t i, cudaStream_t s) { SHAPETUNE_CUDA_CHECK(cudaEventRecord(at(2 * i), s)); }
  void record_end(std::int64_t i, cudaStream_t s) { SHAPETUNE_CUDA_CHECK(cudaEventRecord(at(2 * i + 1), s)); }
  double elapsed_ms(std::int64_t i) const {
    float ms = 0;
    SHAPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, at(2 * i), at(2 * i + 1)));
    return ms;
  }

 private:
  cudaEvent_t at(std::int64_t k) const { return events_[static_cast<std::size_t>(k)]; }
  std::vector<cudaEvent_t> events_;
};

}  // namespace

void validate(const CharLmTimingSuiteOptions& o) {
  if (o.warmup_steps < 0 || o.warmup_steps > 100000)
    throw std::invalid_argument("--warmup-steps must be between 0 and 100000, got " + std::to_string(o.warmup_steps));
  if (o.timed_steps < 10 || o.timed_steps > 100000)
    throw std::invalid_argument("--timed-steps must be between 10 and 100000 (p10 and p90 need at least ten samples), got " +
                                std::to_string(o.timed_steps));
}

SampleSummary CharLmTimingSuite::summary() const {
  if (step_milliseconds.empty()) throw std::invalid_argument("the timing suite timed no step");
  return summarize(step_milliseconds);
}

struct CharLmTrainer::State {
  CharLmOptions options;
  CharLmShape shape;
  std::vector<CharLmTensor> layout;
  std::int64_t flat = 0, rows = 0;
  std::unique_ptr<RunnerCore> core;  // first in, last out: everything below runs on its stream

  DeviceBuffer p, g, m, v;
  // Activations: xs[0] the embedded inputs, xs[l + 1] layer l's output; dxs[l] the gradient of xs[l].
  std::vector<DeviceBuffer> xs, dxs;
  std::vector<DeviceBuffer> h0, c0, h_t, c_t;  // per layer [B, H]: the carried state and this batch's last
  DeviceBuffer zero_state, discard_h, discard_c, logits, dlogits, loss, labels, ones;
  // Tokens of every batch, and for the embedding's gradient each training batch's rows by token.
  DeviceBuffer train_inputs, train_targets, rows_by_token, token_starts, val_inputs, val_targets;
  std::int64_t train_batches = 0, val_batches = 0;
  DeviceBuffer step, loss_sum, history, val_step, val_loss_sum;

  // Per layer: the inference forward (the evaluation step) and the training op, whose halves run
  // before the head and after its gradients (Variant::forward_half). Then the head and the loss,
  // and the head's gradients.
  std::vector<BoundOp> layer_forward, layer_training, head, head_backward;
  BoundOp adam;
  StepGraph step_graph;
  GraphExec eval_exec;

  cudaStream_t stream() const { return core->stream(); }
  LibraryHandles& libraries() { return core->libraries(); }
  float* P(int tensor) const { return static_cast<float*>(p.get()) + layout[static_cast<std::size_t>(tensor)].offset; }
  float* G(int tensor) const { return static_cast<float*>(g.get()) + layout[static_cast<std::size_t>(tensor)].offset; }

  void gather(const DeviceBuffer& inputs, const DeviceBuffer& targets, const DeviceBuffer& counter) {
    SHAPETUNE_CUDA_CHECK(training_kernels::gather_embedding(
        P(LayoutIndex::embedding), static_cast<const std::int32_t*>(inputs.get()),
        static_cast<const std::int32_t*>(targets.get()), static_cast<const std::int32_t*>(counter.get()),
        static_cast<int>(rows), shape.embed, static_cast<float*>(xs[0].get()), static_cast<std::int32_t*>(labels.get()),
        stream()));
  }

  void carry_state() {
    const std::size_t bytes = static_cast<std::size_t>(options.batch) * static_cast<std::size_t>(shape.hidden) * sizeof(float);
    for (int l = 0; l < shape.layers; ++l) {
      const auto L = static_cast<std::size_t>(l);
      SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(h0[L].get(), h_t[L].get(), bytes, cudaMemcpyDeviceToDevice, stream()));
      if (!c0.empty())
        SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(c0[L].get(), c_t[L].get(), bytes, cudaMemcpyDeviceToDevice, stream()));
    }
  }

  void zero_carried_state() {
    for (auto* list : {&h0, &c0})
      for (DeviceBuffer& b : *list) SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), stream()));
  }

  // The training step in launch order: the embedding's gather, each layer's forward half, the head
  // and the loss, the head's gradients, each layer's backward half from the last layer, the
  // embedding's gradient. The embedding's two are plain kernels (no variants), listed so that the
  // op times account for them.
  std::vector<OpLaunch> training_ops() {
    std::vector<OpLaunch> ops;
    ops.emplace_back("embedding gather", [this] { gather(train_inputs, train_targets, step); });
    for (const BoundOp& op : layer_training) ops.emplace_back(&op, LaunchPart::forward_half);
    for (const auto* list : {&head, &head_backward})
      for (const BoundOp& op : *list) ops.emplace_back(&op);
    for (auto it = layer_training.rbegin(); it != layer_training.rend(); ++it)
      ops.emplace_back(&*it, LaunchPart::backward_half);
    ops.emplace_back("embedding gradient", [this] {
      SHAPETUNE_CUDA_CHECK(training_kernels::embedding_backward(
          static_cast<const float*>(dxs[0].get()), static_cast<const std::int32_t*>(rows_by_token.get()),
          static_cast<const std::int32_t*>(token_starts.get()), static_cast<const std::int32_t*>(step.get()),
          static_cast<int>(rows), shape.vocab, shape.embed, G(LayoutIndex::embedding), stream()));
    });
    return ops;
  }

  void enqueue_training_body() {
    for (const OpLaunch& op : training_ops()) op.launch(stream(), libraries());
  }

  Graph capture_adam(std::int64_t t) {
    adam.scalars = {options.lr, kBeta1, kBeta2, kAdamEps, 0.0, static_cast<double>(t)};
    return capture(stream(), [&] { adam.launch(stream(), libraries()); });
  }

  // The training step: gather, forward, backward, embedding gradient, loss bookkeeping and the
  // state carried over, captured once; Adam a child graph after it, swapped every step (its bias
  // correction is a launch argument, baked into a capture). The evaluation step: gather,
  // forward, loss, state carried.
  void build_graphs() {
    // One eager pass of each step first, so that libraries do their lazy set-up outside the
    // captures (the evaluation step's layers are other ops than the training step's: cuDNN's
    // inference plan, say); they write gradients, activations and this batch's final states only.
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(step.get(), 0, sizeof(std::int32_t), stream()));
    enqueue_training_body();
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(val_step.get(), 0, sizeof(std::int32_t), stream()));
    gather(val_inputs, val_targets, val_step);
    for (const auto* list : {&layer_forward, &head})
      for (const BoundOp& op : *list) op.launch(stream(), libraries());
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream()));

    Graph body = capture(stream(), [&] {
      enqueue_training_body();
      SHAPETUNE_CUDA_CHECK(training_kernels::record_loss(static_cast<const std::int32_t*>(step.get()),
                                                          static_cast<const float*>(loss.get()),
                                                          static_cast<float*>(history.get()), stream()));
      SHAPETUNE_CUDA_CHECK(training_kernels::finish_step(static_cast<std::int32_t*>(step.get()),
                                                          static_cast<const float*>(loss.get()),
                                                          static_cast<double*>(loss_sum.get()), stream()));
      carry_state();
    });
    step_graph = StepGraph(std::move(body), [this](std::int64_t t) { return capture_adam(t); });

    const Graph eval = capture(stream(), [&] {
      gather(val_inputs, val_targets, val_step);
      for (const auto* list : {&layer_forward, &head})
        for (const BoundOp& op : *list) op.launch(stream(), libraries());
      SHAPETUNE_CUDA_CHECK(training_kernels::finish_step(static_cast<std::int32_t*>(val_step.get()),
                                                          static_cast<const float*>(loss.get()),
                                                          static_cast<double*>(val_loss_sum.get()), stream()));
      carry_state();
    });
    eval_exec = GraphExec(eval);
  }
};

CharLmTrainer::CharLmTrainer(const CharLmOptions& options, const CharLmShape& shape,
                             const std::vector<float>& parameters, const TbpttBatches& train,
                             const TbpttBatches& validation)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  s.shape = shape;
  s.layout = char_lm_layout(shape);
  s.flat = char_lm_flat_size(shape);
  if (parameters.size() != static_cast<std::size_t>(s.flat))
    throw std::invalid_argument("the model has " + std::to_string(s.flat) + " flat parameters, got " +
                                std::to_string(parameters.size()));
  if (train.seq_len() != options.seq_len || train.batch() != options.batch || validation.seq_len() != options.seq_len ||
      validation.batch() != options.batch)
    throw std::invalid_argument("the batches' --seq-len and --batch differ from the trainer's");
  s.rows = std::int64_t{options.seq_len} * options.batch;
  if (s.rows > (std::int64_t{1} << 24)) throw std::invalid_argument("--seq-len x --batch must be at most 2^24");
  s.core = std::make_unique<RunnerCore>(RunnerOptions{options.db_path, options.dispatch, options.device});

  const std::size_t flat_bytes = static_cast<std::size_t>(s.flat) * sizeof(float);
  s.p = upload(parameters);
  s.g = zeroed(flat_bytes);  // the padding stays zero: nothing writes it
  s.m = zeroed(flat_bytes);
  s.v = zeroed(flat_bytes);
  const std::int64_t R = s.rows, H = shape.hidden, B = options.batch;
  const bool lstm = shape.cell == RecurrentCell::lstm;
  s.xs.push_back(floats(R * shape.embed));
  s.dxs.push_back(floats(R * shape.embed));
  for (int l = 0; l < shape.layers; ++l) {
    s.xs.push_back(floats(R * H));
    s.dxs.push_back(floats(R * H));
    s.h0.push_back(zeroed(static_cast<std::size_t>(B * H) * sizeof(float)));
    s.h_t.push_back(floats(B * H));
    if (lstm) {
      s.c0.push_back(zeroed(static_cast<std::size_t>(B * H) * sizeof(float)));
      s.c_t.push_back(floats(B * H));
    }
  }
  s.zero_state = zeroed(static_cast<std::size_t>(B * H) * sizeof(float));
  s.discard_h = floats(B * H);
  s.discard_c = floats(B * H);
  s.logits = floats(R * shape.vocab);
  s.dlogits = floats(R * shape.vocab);
  s.loss = floats(1);
  s.labels = DeviceBuffer(static_cast<std::size_t>(R) * sizeof(std::int32_t));
  s.ones = upload(std::vector<float>(static_cast<std::size_t>(R), 1.f));

  const SplitTokens tr = all_batches(train), va = all_batches(validation);
  s.train_batches = tr.batches;
  s.val_batches = va.batches;
  for (const auto* tokens : {&tr, &va})
    for (std::int32_t id : tokens->inputs)
      if (id < 0 || id >= shape.vocab)
        throw std::invalid_argument("a batch holds character id " + std::to_string(id) + " outside the vocabulary of " +
                                    std::to_string(shape.vocab));
  // Each training batch's rows grouped by token (a counting sort, rows ascending within a token).
  std::vector<std::int32_t> by_token(tr.inputs.size()), starts(static_cast<std::size_t>(tr.batches * (shape.vocab + 1)));
  for (std::int64_t i = 0; i < tr.batches; ++i) {
    const std::int32_t* in = tr.inputs.data() + i * R;
    std::int32_t* st = starts.data() + i * (shape.vocab + 1);
    for (std::int64_t r = 0; r < R; ++r) ++st[in[r] + 1];
    for (int vv = 0; vv < shape.vocab; ++vv) st[vv + 1] += st[vv];
    std::vector<std::int32_t> next(st, st + shape.vocab);
    for (std::int64_t r = 0; r < R; ++r) by_token[static_cast<std::size_t>(i * R + next[static_cast<std::size_t>(in[r])]++)] = static_cast<std::int32_t>(r);
  }
  s.train_inputs = upload(tr.inputs);
  s.train_targets = upload(tr.targets);
  s.rows_by_token = upload(by_token);
  s.token_starts = upload(starts);
  s.val_inputs = upload(va.inputs);
  s.val_targets = upload(va.targets);
  s.step = zeroed(sizeof(std::int32_t));
  s.val_step = zeroed(sizeof(std::int32_t));
  s.loss_sum = zeroed(sizeof(double));
  s.val_loss_sum = zeroed(sizeof(double));
  s.history = floats(tr.batches);

  // Bind in char_lm_operations() order.
  const std::vector<ModelOp> ops = char_lm_operations(shape, options.seq_len, options.batch, s.flat);
  const LayoutIndex at{shape.layers};
  auto f = [](const DeviceBuffer& b) { return b.get(); };
  std::size_t k = 0;
  for (int l = 0; l < shape.layers; ++l) {
    const auto L = static_cast<std::size_t>(l);
    std::vector<void*> t = {f(s.xs[L]), f(s.h0[L])};
    if (lstm) t.push_back(f(s.c0[L]));
    for (void* w : {s.P(at.w_ih(l)), s.P(at.w_hh(l)), s.P(at.b_ih(l)), s.P(at.b_hh(l))}) t.push_back(w);
    t.push_back(f(s.xs[L + 1]));
    t.push_back(f(s.h_t[L]));
    if (lstm) t.push_back(f(s.c_t[L]));
    s.layer_forward.push_back(s.core->bind(ops[k++], t));
  }
  const DeviceBuffer& y = s.xs.back();
  s.head.push_back(s.core->bind(ops[k++], {f(y), s.P(at.head_weight()), s.P(at.head_bias()), f(s.logits)}, {1.0, 0.0}));
  s.head.push_back(s.core->bind(ops[k++], {f(s.logits), f(s.labels), f(s.loss), f(s.dlogits)}));
  s.head_backward.push_back(s.core->bind(ops[k++], {f(s.dlogits), f(y), s.G(at.head_weight())}, {1.0, 0.0}));
  s.head_backward.push_back(s.core->bind(ops[k++], {f(s.ones), f(s.dlogits), s.G(at.head_bias())}, {1.0, 0.0}));
  s.head_backward.push_back(
      s.core->bind(ops[k++], {f(s.dlogits), s.P(at.head_weight()), f(s.dxs.back())}, {1.0, 0.0}));
  s.layer_training.resize(static_cast<std::size_t>(shape.layers));
  for (int l = shape.layers - 1; l >= 0; --l) {
    const auto L = static_cast<std::size_t>(l);
    std::vector<void*> t = {f(s.xs[L]), f(s.h0[L])};
    if (lstm) t.push_back(f(s.c0[L]));
    for (void* w : {s.P(at.w_ih(l)), s.P(at.w_hh(l)), s.P(at.b_ih(l)), s.P(at.b_hh(l))}) t.push_back(w);
    t.push_back(f(s.dxs[L + 1]));  // dy: the gradient of this layer's output
    t.push_back(f(s.zero_state));  // dh_t: the carried state is detached
    if (lstm) t.push_back(f(s.zero_state));
    t.push_back(f(s.dxs[L]));
    t.push_back(f(s.discard_h));  // dh0 (and dc0): detached, not used
    if (lstm) t.push_back(f(s.discard_c));
    for (void* w : {s.G(at.w_ih(l)), s.G(at.w_hh(l)), s.G(at.b_ih(l)), s.G(at.b_hh(l))}) t.push_back(w);
    BoundOp& op = s.layer_training[L] = s.core->bind(ops[k++], t);
    // The forward half writes the layer's output and this batch's final state, as the inference
    // forward does; the backward half reads the output back.
    op.half_outputs = {f(s.xs[L + 1]), f(s.h_t[L])};
    if (lstm) op.half_outputs.push_back(f(s.c_t[L]));
  }
  s.adam = s.core->bind(ops[k++], {f(s.p), f(s.g), f(s.m), f(s.v)});
  s.build_graphs();
}

CharLmTrainer::~CharLmTrainer() = default;

const std::vector<OpResolution>& CharLmTrainer::resolutions() const { return state_->core->resolutions(); }
const DeviceInfo& CharLmTrainer::device() const { return state_->core->device(); }

CharLmEpoch CharLmTrainer::train_epoch(std::int64_t max_steps) {
  State& s = *state_;
  const std::int64_t steps = std::clamp<std::int64_t>(max_steps, 0, s.train_batches);
  s.zero_carried_state();
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.step.get(), 0, sizeof(std::int32_t), s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.loss_sum.get(), 0, sizeof(double), s.stream()));
  EventPairs events(steps);
  for (std::int64_t i = 0; i < steps; ++i) {
    s.step_graph.prepare();
    events.record_start(i, s.stream());
    s.step_graph.launch(s.stream());
    events.record_end(i, s.stream());
  }
  CharLmEpoch r;
  std::vector<float> history(static_cast<std::size_t>(steps));
  if (steps > 0)
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(history.data(), s.history.get(), history.size() * sizeof(float),
                                         cudaMemcpyDeviceToHost, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  r.step_losses.assign(history.begin(), history.end());
  for (std::int64_t i = 0; i < steps; ++i) r.step_milliseconds.push_back(events.elapsed_ms(i));
  return r;
}

std::vector<OpTime> CharLmTrainer::op_times(int warmup, int iterations) {
  State& s = *state_;
  std::vector<OpLaunch> step = s.training_ops();
  step.emplace_back(&s.adam);
  return s.core->op_times(step, warmup, iterations);
}

CharLmTimingSuite CharLmTrainer::timing_suite(const CharLmTimingSuiteOptions& options) {
  validate(options);
  State& s = *state_;
  // A pass over the training batches starts as an epoch does: the state zeroed, the device's
  // batch counter (which the gather reads and finish_step advances) back at the first batch.
  auto start_pass = [&] {
    s.zero_carried_state();
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.step.get(), 0, sizeof(std::int32_t), s.stream()));
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.loss_sum.get(), 0, sizeof(double), s.stream()));
  };
  const std::int64_t warmup = options.warmup_steps, timed = options.timed_steps;
  EventPairs events(timed);
  std::int64_t batch = 0;  // the training batch the next step reads
  start_pass();
  for (std::int64_t i = 0; i < warmup + timed; ++i) {
    if (batch == s.train_batches) {
      start_pass();
      batch = 0;
    }
    const std::int64_t sample = i - warmup;
    s.step_graph.prepare();
    if (sample >= 0) events.record_start(sample, s.stream());
    s.step_graph.launch(s.stream());
    if (sample >= 0) events.record_end(sample, s.stream());
    ++batch;
  }
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  CharLmTimingSuite r;
  r.warmup_steps = options.warmup_steps;
  for (std::int64_t i = 0; i < timed; ++i) r.step_milliseconds.push_back(events.elapsed_ms(i));
  s.zero_carried_state();
  return r;
}

double CharLmTrainer::validation_loss() {
  State& s = *state_;
  s.zero_carried_state();
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.val_step.get(), 0, sizeof(std::int32_t), s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(s.val_loss_sum.get(), 0, sizeof(double), s.stream()));
  for (std::int64_t i = 0; i < s.val_batches; ++i) s.eval_exec.launch(s.stream());
  s.zero_carried_state();
  double sum = 0;
  SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(&sum, s.val_loss_sum.get(), sizeof(double), cudaMemcpyDeviceToHost, s.stream()));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  return sum / static_cast<double>(s.val_batches);
}

std::vector<float> CharLmTrainer::parameters() const {
  std::vector<float> host(static_cast<std::size_t>(state_->flat));
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(state_->stream()));
  SHAPETUNE_CUDA_CHECK(cudaMemcpy(host.data(), state_->p.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace shapetune
