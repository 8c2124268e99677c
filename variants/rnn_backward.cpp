// The recurrent family's backward pass: lstm.backward and gru.backward, backpropagation through
// time over one layer, PyTorch's formulas (baselines/reference.hpp). A training step pays for a
// forward that keeps its activations and for the backward together, so every variant runs both
// in its own launch and that is what is timed:
//   stepwise: the forward as the forward's stepwise rung (one input GEMM, then per step a
//             recurrent GEMM and the cell kernel), keeping each step's activations in fp32;
//             then per step in reverse the fused cell-backward kernel and the product dh W_hh;
//             then dx, dW_ih, dW_hh and the biases' gradients as one GEMM each over all T N rows;
//   stepwise_graph: the same launches captured once into a CUDA graph and replayed (one launch a
//             call instead of about 4 T + 20);
//   persistent: the forward as the forward's persistent, persistent_registers or persistent_cluster
//             rung, keeping each step's activations; then the recurrent chain alone in one cooperative launch
//             (kernels/rnn/persistent_backward.cu: W_hh's columns on chip, a grid barrier a step),
//             since dh_t = dy_t + d_gates_{t+1} W_hh is the only sequential part; then the same
//             products over all T N rows as stepwise;
//   persistent_block: the forward's persistent_block rung keeping the activations, then the chain the
//             same way (kernels/rnn/persistent_block.cu: a block per batch rows holding W_hh's columns,
//             no exchange), then the same products: for small H, where exchanges set a step's time;
//   persistent_stepwise: persistent's forward, then stepwise's backward, captured as one CUDA
//             graph: at H 512 the persistent forward won (877 against 1085 us at T 64 on the H100)
//             and the persistent chain lost (2935 against 2524 us for the whole backward), so the
//             faster half of each (the activations they keep are laid out alike); its axis products
//             takes the products over all steps and an f32 input projection as three TF32 products
//             of split operands (variants/rnn_problem.hpp) instead of fp32 FMAs;
//   cudnn:    cudnnRNNForward in training mode, cudnnRNNBackwardData_v8 and
//             cudnnRNNBackwardWeights_v8, with each algorithm cuDNN has (the baseline).
// Each rung also launches as two halves, split where its forward ends (Variant::forward_half and
// backward_half), for a trainer that computes its loss between them and so runs the forward once.
// tf32 problems (variants/rnn_problem.hpp) run as f32 with every cuBLAS product in TF32; the
// persistent chain's products stay fp32 FMAs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "baselines/cublas.hpp"
#include "baselines/cudnn.hpp"
#include "baselines/reference.hpp"
#include "core/primitive_name.hpp"
#include "kernels/rnn/rnn.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"
#include "variants/rnn_graph.hpp"
#include "variants/rnn_problem.hpp"

namespace shapetune {
namespace {

namespace kr = kernels::rnn;

// Tensor order. LSTM: x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy, dh_t, dc_t, then the gradients dx,
// dh0, dc0, dw_ih, dw_hh, db_ih, db_hh; GRU: the same without c0, dc_t and dc0.
struct Tensors {
  const void *x, *h0, *c0, *w_ih, *w_hh, *b_ih, *b_hh, *dy, *dh_t, *dc_t;
  void *dx, *dh0, *dc0, *dw_ih, *dw_hh, *db_ih, *db_hh;
};

Tensors tensors_of(const LaunchArgs& a) {
  const bool lstm = rnn_of(a.problem).cell == kr::Cell::lstm;
  std::size_t k = 0;
  const auto next = [&] { return a.tensors[k++]; };
  const auto lstm_only = [&]() -> void* { return lstm ? a.tensors[k++] : nullptr; };
  Tensors t{};
  t.x = next(), t.h0 = next(), t.c0 = lstm_only();
  t.w_ih = next(), t.w_hh = next(), t.b_ih = next(), t.b_hh = next();
  t.dy = next(), t.dh_t = next(), t.dc_t = lstm_only();
  t.dx = next(), t.dh0 = next(), t.dc0 = lstm_only();
  t.dw_ih = next(), t.dw_hh = next(), t.db_ih = next(), t.db_hh = next();
  return t;
}

// The activations' gradients (dx, dh0, dc0) carry errors of the forward's kind (fp32 products,
// a 16-bit h that rounds the other way) through about twice as many operations: twice the
// forward's rtol. The weights' gradients are sums of T N terms of either sign, so their error
// grows as sqrt(T N) times a term's while an element may cancel to near zero: atol grows as
// sqrt(T N / 32) from the forward's. A term's error is larger where the saved activations are
// kept in 16 bits, as cuDNN keeps them, and its terms' errors share signs (a gate's gradient
// takes the saved gate's rounding in every step): at T N = 119 cuDNN's f16 and bf16 weight and
// bias gradients were off by up to 1.3 times the forward's atol on the H200 and by 2.0 times on
// an H100 (bf16, db_ih of the GRU's n gate, all four algorithms alike; stepwise, which keeps
// them in fp32, by less). So 16-bit atol starts from twice the forward's: 3.9 times at T N = 119.
// A variant that skips or misplaces a term errs by the term, the size of the values.
// tf32's forward error sits in its atol (TF32 products: variants/rnn.cpp), so the twice as many
// operations double its atol as they double the others' rtol; and each of the weight gradients'
// T N terms is a TF32 product of a gate gradient that carries that error, so twice again: 4
// times the forward's atol, grown by sqrt(T N / 32). A C++ model of the LSTM's forward and
// backward with TF32 operands (truncated, the worse case) put its weight gradients at up to half
// of twice that atol where the growth is least (T = 1, N = 64: dW_ih 3.9e-3), its activations'
// gradients at a tenth.
Tolerance backward_tolerance(const Tolerance& forward, const Problem& p) {
  const double terms = static_cast<double>(p.shape.at("T") * p.shape.at("N"));
  const bool sixteen_bit = p.dtype == DType::f16 || p.dtype == DType::bf16;
  const double atol = p.dtype == DType::tf32 ? 4 * forward.atol : sixteen_bit ? 2 * forward.atol : forward.atol;
  return Tolerance{atol * std::max(1.0, std::sqrt(terms / 32)), 2 * forward.rtol};
}

Primitive backward_primitive(const Primitive& forward, kr::Cell cell) {
  const bool lstm = cell == kr::Cell::lstm;
  const int G = kr::gate_count(cell);
  Primitive p;
  p.name = lstm ? "lstm.backward" : "gru.backward";
  p.description = std::string(lstm ? "LSTM" : "GRU") +
                  " layer backward through time over a sequence: the gradients of x, h0" + (lstm ? ", c0" : "") +
                  " and the weights from dy [T, N, H] and the final state's; every variant recomputes the forward "
                  "activations it needs in its own launch, so the time is a training step's forward with saved "
                  "activations plus its backward; fp32 state, products and weight-gradient sums (tf32: the products "
                  "in TF32)";
  p.signature = lstm ? "dL/d(x, h0, c0, W_ih, W_hh, b_ih, b_hh) for L = sum dy.y + dh_t.h_T + dc_t.c_T, y = lstm.forward"
                     : "dL/d(x, h0, W_ih, W_hh, b_ih, b_hh) for L = sum dy.y + dh_t.h_T, y = gru.forward "
                       "(b_hn's and W_hn's gradients take r dn, b_in's dn)";
  p.axes = forward.axes;
  p.dtypes = forward.dtypes;
  p.tensors = [forward_tensors = forward.tensors, lstm, G](const Problem& problem) {
    const auto T = problem.shape.at("T"), N = problem.shape.at("N"), D = problem.shape.at("D"),
               H = problem.shape.at("H");
    const DType t = storage_of(problem.dtype);
    // The forward's inputs, with its ranges, then the incoming gradients and the outgoing ones.
    std::vector<TensorSpec> specs;
    for (TensorSpec& spec : forward_tensors(problem))
      if (spec.role == TensorRole::input) specs.push_back(std::move(spec));
    specs.push_back({"dy", t, {T, N, H}, TensorRole::input, -1, 1});
    specs.push_back({"dh_t", t, {N, H}, TensorRole::input, -1, 1});
    if (lstm) specs.push_back({"dc_t", t, {N, H}, TensorRole::input, -1, 1});
    specs.push_back({"dx", t, {T, N, D}, TensorRole::output});
    specs.push_back({"dh0", t, {N, H}, TensorRole::output});
    if (lstm) specs.push_back({"dc0", t, {N, H}, TensorRole::output});
    specs.push_back({"dw_ih", t, {G * H, D}, TensorRole::output});
    specs.push_back({"dw_hh", t, {G * H, H}, TensorRole::output});
    specs.push_back({"db_ih", t, {G * H}, TensorRole::output});
    specs.push_back({"db_hh", t, {G * H}, TensorRole::output});
    return specs;
  };
  p.reference = [lstm](const Problem& problem, std::span<const double>, HostTensors& t) {
    const reference::RnnShape s{problem.shape.at("T"), problem.shape.at("N"), problem.shape.at("D"),
                                problem.shape.at("H")};
    const reference::Rounding round_h = reference::rounding_for(problem.dtype);
    const auto in = [&](std::size_t i) { return t[i].data(); };
    if (lstm)
      reference::lstm_backward(s, in(0), in(1), in(2), in(3), in(4), in(5), in(6), round_h, in(7), in(8), in(9),
                               in(10), in(11), in(12), in(13), in(14), in(15), in(16));
    else
      reference::gru_backward(s, in(0), in(1), in(2), in(3), in(4), in(5), round_h, in(6), in(7), in(8), in(9),
                              in(10), in(11), in(12), in(13));
  };
  p.cost = [lstm, G](const Problem& problem) {
    const double T = static_cast<double>(problem.shape.at("T")), N = static_cast<double>(problem.shape.at("N")),
                 D = static_cast<double>(problem.shape.at("D")), H = static_cast<double>(problem.shape.at("H"));
    const double element = static_cast<double>(dtype_size(problem.dtype));
    // Each tensor once: x and dx, dy, the weights and their gradients, the states and theirs.
    const double bytes =
        (2 * T * N * D + T * N * H + 2 * (G * H * (D + H) + 2 * G * H) + (lstm ? 6 : 3) * N * H) * element;
    // The forward's products once more (recomputed), and the backward's twice as many: dx and
    // dh from the gates' gradients, dW_ih and dW_hh from them and x, h.
    return Cost{bytes, 3 * 2 * T * N * G * H * (D + H)};
  };
  p.problem_tolerance = [forward_tolerance = forward.problem_tolerance, name = forward.name](const Problem& problem) {
    return backward_tolerance(forward_tolerance({name, problem.dtype, problem.shape}), problem);
  };
  p.tolerance = [forward_tolerance = forward.problem_tolerance, name = forward.name](DType dtype) {
    // What `list` shows: at T = 64, N = 64.
    const Problem at{name, dtype, Shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}})};
    return backward_tolerance(forward_tolerance(at), at);
  };
  p.default_variant = "stepwise";
  p.validate_shape = forward.validate_shape;
  return p;
}

// ---- stepwise ---------------------------------------------------------------------------------

// The most slices the stepwise chain takes a step's product in (its axis chain_splits).
constexpr int kMaxChainSplits = 16;

// Byte offsets into the stepwise rung's workspace. fp32 unless said: every gradient stays fp32
// until it is stored, so the 16-bit operands of the backward products are widened (cuBLAS has no
// fp32 x 16-bit product); f32 problems read and write the tensors in place instead.
struct StepwiseLayout {
  std::size_t gates;      // [T N, G H]: x W_ih^T, then the input side's gate gradients
  std::size_t d_hidden;   // [T N, G H]: the GRU's hidden-side gate gradients (the LSTM's are `gates`)
  std::size_t recurrent;  // [N, G H]: one step's h W_hh^T
  std::size_t saved;      // [T N, 4 H]: each step's activations (kr::kSavedGates)
  std::size_t cells;      // [T + 1, N, H]: c0 and every step's c (LSTM)
  std::size_t h_stored;   // [T, N, H] in the storage type: a whole launch's y (each step's h as fed back)
  std::size_t h_prev;     // [T, N, H]: the h each step read (h0, then h_0 .. h_{T-2}), widened
  std::size_t dh, dc;     // [N, H]: the gradients carried back to the previous step
  std::size_t partials;   // [kMaxChainSplits, N, H]: a step's product in slices of its depth (chain_splits)
  std::size_t ones;       // [T N]: the bias gradients are d^T ones
  std::size_t x, w_ih, w_hh;                        // widened inputs (16-bit only)
  std::size_t dx, dw_ih, dw_hh, db_ih, db_hh;       // fp32 gradients before rounding (16-bit only)
  // The operands of split_tf32 products (the axis `products`), each its high part then its low
  // part: the gates' gradients, and x, W_ih and the h each step read where they are fp32 values
  // (a widened 16-bit value is exact in TF32 and needs none).
  std::size_t split_d_input, split_d_hidden, split_x, split_w_ih, split_h_prev;
  std::size_t total;
};

// Whether the config takes the products over all steps (and an f32 problem's input projection) as
// split_tf32 products: the axis `products` of persistent_stepwise (1), fp32 FMAs elsewhere.
bool split_products(const Config& c) { return c.find("products").value_or(0) == 1; }

StepwiseLayout stepwise_layout(const RnnProblem& r, DType dtype, bool split) {
  std::size_t at = 0;
  const auto take = [&](std::int64_t elements, std::size_t element_bytes = sizeof(float)) {
    const std::size_t here = at;
    at += align256(static_cast<std::size_t>(elements) * element_bytes);
    return here;
  };
  const bool lstm = r.cell == kr::Cell::lstm, narrow = storage_of(dtype) != DType::f32;
  const std::int64_t T = r.steps, N = r.batch, D = r.input, H = r.hidden, GH = r.gates * r.hidden;
  StepwiseLayout l{};
  l.gates = take(T * N * GH);
  l.d_hidden = take(lstm ? 0 : T * N * GH);
  l.recurrent = take(N * GH);
  l.saved = take(T * N * kr::kSavedGates * H);
  l.cells = take(lstm ? (T + 1) * N * H : 0);
  l.h_stored = take(T * N * H, dtype_size(storage_of(dtype)));
  l.h_prev = take(T * N * H);
  l.dh = take(N * H);
  l.dc = take(lstm ? N * H : 0);
  l.partials = take(kMaxChainSplits * N * H);
  l.ones = take(T * N);
  l.x = take(narrow ? T * N * D : 0);
  l.w_ih = take(narrow ? GH * D : 0);
  l.w_hh = take(narrow ? GH * H : 0);
  l.dx = take(narrow ? T * N * D : 0);
  l.dw_ih = take(narrow ? GH * D : 0);
  l.dw_hh = take(narrow ? GH * H : 0);
  l.db_ih = take(narrow ? GH : 0);
  l.db_hh = take(narrow ? GH : 0);
  const bool split_inputs = split && !narrow;
  l.split_d_input = take(split ? 2 * T * N * GH : 0);
  l.split_d_hidden = take(split && !lstm ? 2 * T * N * GH : 0);
  l.split_x = take(split_inputs ? 2 * T * N * D : 0);
  l.split_w_ih = take(split_inputs ? 2 * GH * D : 0);
  l.split_h_prev = take(split_inputs ? 2 * T * N * H : 0);
  l.total = at;
  return l;
}

std::size_t stepwise_workspace(const Problem& p, const Config& c) {
  return stepwise_layout(rnn_of(p), p.dtype, split_products(c)).total;
}

// The first failure of a sequence of calls. The loops over steps stop at it; the few calls after
// it outside them still queue their work, which only touches the workspace and the outputs (a
// failed launch leaves those undefined anyway), and their statuses are dropped.
class Steps {
 public:
  Steps& operator<<(const LaunchStatus& s) {
    if (status_.ok) status_ = s;
    return *this;
  }
  bool ok() const { return status_.ok; }
  const LaunchStatus& status() const { return status_; }

 private:
  LaunchStatus status_ = LaunchStatus::success();
};

// The fp32 views a 16-bit problem needs (cuBLAS has no fp32 x 16-bit product): f32 problems
// read and write the tensors in place instead.
template <typename Element>
struct Fp32Views {
  char* ws;
  cudaStream_t stream;
  float* f32(std::size_t offset) const { return reinterpret_cast<float*>(ws + offset); }
  // The fp32 view of a tensor: itself for f32, else a widened copy in the workspace.
  const float* widened(const void* tensor, std::size_t offset, std::int64_t n, Steps& steps) const {
    if constexpr (std::is_same_v<Element, float>) {
      return static_cast<const float*>(tensor);
    } else {
      steps << launch_status(kr::widen(static_cast<const Element*>(tensor), f32(offset), n, stream));
      return f32(offset);
    }
  }
  // Where a gradient is summed in fp32: the output itself for f32, else the workspace.
  float* accumulator(void* output, std::size_t offset) const {
    if constexpr (std::is_same_v<Element, float>) return static_cast<float*>(output);
    else return f32(offset);
  }
  LaunchStatus store(const float* sum, void* output, std::int64_t n) const {
    if constexpr (std::is_same_v<Element, float>) return LaunchStatus::success();
    else return launch_status(kr::narrow(sum, static_cast<Element*>(output), n, stream));
  }
};

// An fp32 operand of n elements as split_tf32_product takes it: split into the workspace at
// `offset` (high part, then low), or the operand itself where it is exact in TF32.
SplitOperand split_operand(char* ws, std::size_t offset, const float* v, std::int64_t n, bool exact,
                           cudaStream_t stream, Steps& steps) {
  if (exact) return {v, nullptr};
  auto* high = reinterpret_cast<float*>(ws + offset);
  steps << launch_status(kr::split_tf32(v, high, high + n, n, stream));
  return {high, high + n};
}

// The input projection of every step at once, gates [T N, G H] = x W_ih^T (fp32): an f32
// problem's as split_tf32 products where the config asks (a 16-bit problem's is a 16-bit
// tensor-core product already, exact; tf32's in TF32).
void project_inputs(const LaunchArgs& a, const RnnProblem& r, const StepwiseLayout& l, const Tensors& t,
                    float* gates, Steps& steps) {
  const std::int64_t rows = r.steps * r.batch, D = r.input, GH = r.gates * r.hidden;
  if (!split_products(a.config) || a.problem.dtype != DType::f32) {
    steps << library_status(
        rnn_times_transposed(a.libraries, a.stream, a.problem.dtype, rows, GH, D, t.x, t.w_ih, gates));
    return;
  }
  char* ws = static_cast<char*>(a.workspace);
  const auto* x_f32 = static_cast<const float*>(t.x);
  const auto* w_f32 = static_cast<const float*>(t.w_ih);
  const SplitOperand x = split_operand(ws, l.split_x, x_f32, rows * D, false, a.stream, steps);
  const SplitOperand w = split_operand(ws, l.split_w_ih, w_f32, GH * D, false, a.stream, steps);
  GemmOperands g;
  g.m = rows, g.n = GH, g.k = D;
  g.layout = kernels::gemm::Layout::nt;
  if (steps.ok()) steps << library_status(split_tf32_product(a.libraries, a.stream, g, x, w, gates));
}

// What both rungs finish with, the non-recurrent products over every step at once (T N rows):
// dx = d_input W_ih, dW_ih = d_input^T x, dW_hh = d_hidden^T h_prev, and the biases' gradients as
// products with a ones vector.
template <typename Element>
void products_over_all_steps(const LaunchArgs& a, const RnnProblem& r, const Tensors& t, const StepwiseLayout& l,
                             const float* d_input, const float* d_hidden, const float* h_prev, Steps& steps) {
  const Fp32Views<Element> v{static_cast<char*>(a.workspace), a.stream};
  const std::int64_t rows = r.steps * r.batch, D = r.input, GH = r.gates * r.hidden;
  const DType dtype = a.problem.dtype;
  LibraryHandles& libraries = a.libraries;
  const float* x = v.widened(t.x, l.x, rows * D, steps);
  const float* w_ih = v.widened(t.w_ih, l.w_ih, GH * D, steps);
  float* dx = v.accumulator(t.dx, l.dx);
  float* dw_ih = v.accumulator(t.dw_ih, l.dw_ih);
  float* dw_hh = v.accumulator(t.dw_hh, l.dw_hh);
  float* db_ih = v.accumulator(t.db_ih, l.db_ih);
  float* db_hh = v.accumulator(t.db_hh, l.db_hh);
  if (split_products(a.config)) {
    // Split TF32: x, W_ih and h_prev are exact in TF32 where they are widened 16-bit values.
    const bool exact = storage_of(dtype) != DType::f32;
    char* ws = static_cast<char*>(a.workspace);
    const auto split = [&](std::size_t offset, const float* operand, std::int64_t n, bool is_exact) {
      return split_operand(ws, offset, operand, n, is_exact, a.stream, steps);
    };
    const SplitOperand d_in = split(l.split_d_input, d_input, rows * GH, false);
    const SplitOperand d_hid = d_hidden == d_input ? d_in : split(l.split_d_hidden, d_hidden, rows * GH, false);
    const SplitOperand x_parts = split(l.split_x, x, rows * D, exact);
    const SplitOperand w_parts = split(l.split_w_ih, w_ih, GH * D, exact);
    const SplitOperand h_parts = split(l.split_h_prev, h_prev, rows * r.hidden, exact);
    GemmOperands g;
    g.m = rows, g.n = D, g.k = GH, g.layout = kernels::gemm::Layout::nn;
    if (steps.ok()) steps << library_status(split_tf32_product(libraries, a.stream, g, d_in, w_parts, dx));
    g.m = GH, g.n = D, g.k = rows, g.layout = kernels::gemm::Layout::tn;
    if (steps.ok()) steps << library_status(split_tf32_product(libraries, a.stream, g, d_in, x_parts, dw_ih));
    g.n = r.hidden;
    if (steps.ok()) steps << library_status(split_tf32_product(libraries, a.stream, g, d_hid, h_parts, dw_hh));
  } else {
    steps << library_status(rnn_product(libraries, a.stream, dtype, rows, D, GH, d_input, false, w_ih, dx));
    steps << library_status(rnn_product(libraries, a.stream, dtype, GH, D, rows, d_input, true, x, dw_ih));
    steps << library_status(
        rnn_product(libraries, a.stream, dtype, GH, r.hidden, rows, d_hidden, true, h_prev, dw_hh));
  }
  steps << launch_status(kr::fill(v.f32(l.ones), rows, 1.f, a.stream));
  steps << library_status(rnn_product(libraries, a.stream, dtype, GH, 1, rows, d_input, true, v.f32(l.ones), db_ih));
  steps << library_status(rnn_product(libraries, a.stream, dtype, GH, 1, rows, d_hidden, true, v.f32(l.ones), db_hh));
  steps << v.store(dx, t.dx, rows * D) << v.store(dw_ih, t.dw_ih, GH * D) << v.store(dw_hh, t.dw_hh, GH * r.hidden)
        << v.store(db_ih, t.db_ih, GH) << v.store(db_hh, t.db_hh, GH);
}

// The h each step read, widened to fp32 for dW_hh's product (and the GRU's cell backward): h0,
// then the forward's h_0 .. h_{T-2} as stored.
template <typename Element>
void widen_h_prev(const RnnProblem& r, const void* h0, const Element* h_stored, float* h_prev, cudaStream_t stream,
                  Steps& steps) {
  const std::int64_t NH = r.batch * r.hidden;
  steps << launch_status(kr::widen(static_cast<const Element*>(h0), h_prev, NH, stream));
  if (r.steps > 1) steps << launch_status(kr::widen(h_stored, h_prev + NH, (r.steps - 1) * NH, stream));
}

// The layer's outputs that a forward half writes and its backward half reads: y [T, N, H] in the
// storage type (each step's h as the next step reads it), and the final states h_T and c_T (null:
// not wanted). A whole launch keeps y in the workspace (StepwiseLayout::h_stored).
struct LayerOutputs {
  void* y;
  void* h_t;
  void* c_t;  // LSTM only
};

// What Variant::forward_half and backward_half were given, checked: y, h_T, and c_T for an LSTM.
LaunchStatus layer_outputs(const LaunchArgs& a, std::span<void* const> outputs, LayerOutputs& out) {
  const bool lstm = rnn_of(a.problem).cell == kr::Cell::lstm;
  if (outputs.size() != (lstm ? 3u : 2u) || !outputs[0])
    return LaunchStatus::failure(std::string("a training half of ") + a.problem.primitive + " takes y, h_T" +
                                 (lstm ? " and c_T" : "") + " as its outputs (y not null), got " +
                                 std::to_string(outputs.size()));
  out = {outputs[0], outputs[1], lstm ? outputs[2] : nullptr};
  return LaunchStatus::success();
}

// The final h as an output: y's last step, copied.
template <typename Element>
LaunchStatus copy_final_h(const RnnProblem& r, const LayerOutputs& out, cudaStream_t stream) {
  if (!out.h_t) return LaunchStatus::success();
  const std::int64_t NH = r.batch * r.hidden;
  return launch_status(cudaMemcpyAsync(out.h_t, static_cast<const Element*>(out.y) + (r.steps - 1) * NH,
                                       static_cast<std::size_t>(NH) * sizeof(Element), cudaMemcpyDeviceToDevice,
                                       stream));
}

// stepwise's forward, keeping the activations: one input GEMM, then per step a recurrent GEMM and
// the cell kernel, which writes h into y and the step's activations (and c) into the workspace.
template <typename Element>
LaunchStatus stepwise_forward(const LaunchArgs& a, const LayerOutputs& out) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  const StepwiseLayout l = stepwise_layout(r, a.problem.dtype, split_products(a.config));
  char* ws = static_cast<char*>(a.workspace);
  const auto f32 = [&](std::size_t offset) { return reinterpret_cast<float*>(ws + offset); };
  const bool lstm = r.cell == kr::Cell::lstm;
  const int N = static_cast<int>(r.batch), H = static_cast<int>(r.hidden);
  const std::int64_t T = r.steps, GH = r.gates * r.hidden, NH = r.batch * r.hidden, NGH = r.batch * GH;
  const DType dtype = a.problem.dtype;
  cudaStream_t stream = a.stream;
  const auto* h0 = static_cast<const Element*>(t.h0);
  auto* y = static_cast<Element*>(out.y);
  float* gates = f32(l.gates);
  float* cells = f32(l.cells);
  float* saved = f32(l.saved);

  Steps steps;
  project_inputs(a, r, l, t, gates, steps);
  if (lstm) steps << launch_status(kr::widen(static_cast<const Element*>(t.c0), cells, NH, stream));
  for (std::int64_t s = 0; s < T && steps.ok(); ++s) {
    const Element* h_in = s == 0 ? h0 : y + (s - 1) * NH;
    steps << library_status(
        rnn_times_transposed(a.libraries, stream, dtype, r.batch, GH, r.hidden, h_in, t.w_hh, f32(l.recurrent)));
    steps << launch_status(kr::cell_step_saving(r.cell, gates + s * NGH, f32(l.recurrent),
                                                static_cast<const Element*>(t.b_ih),
                                                static_cast<const Element*>(t.b_hh), h_in,
                                                lstm ? cells + s * NH : nullptr, lstm ? cells + (s + 1) * NH : nullptr,
                                                saved + s * r.batch * kr::kSavedGates * H, y + s * NH, N, H, stream));
  }
  steps << copy_final_h<Element>(r, out, stream);
  if (lstm && out.c_t) steps << launch_status(kr::narrow(cells + T * NH, static_cast<Element*>(out.c_t), NH, stream));
  return steps.status();
}

// The slices a step's product dh W_hh is taken in: the config's chain_splits (0, cuBLAS's own
// single product, where it has none).
int chain_splits(const Config& c) { return static_cast<int>(c.find("chain_splits").value_or(0)); }

// stepwise's backward from what its forward left: per step in reverse the fused cell-backward
// kernel and the product dh W_hh, then the products over all steps.
//
// cuBLAS takes the step's product (N x H outputs over G H) as a split-K GEMM and a reduction
// kernel (two launches; at the char layer's N 64, H 512, 128 blocks and 64). With chain_splits,
// one batched launch leaves the slices' partial sums and the next step's cell kernel adds them
// up: two launches a step instead of three. The last step's product (into dh0) stays cuBLAS's.
template <typename Element>
LaunchStatus stepwise_backward(const LaunchArgs& a, const LayerOutputs& out) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  const StepwiseLayout l = stepwise_layout(r, a.problem.dtype, split_products(a.config));
  char* ws = static_cast<char*>(a.workspace);
  const auto f32 = [&](std::size_t offset) { return reinterpret_cast<float*>(ws + offset); };
  const bool lstm = r.cell == kr::Cell::lstm;
  const int N = static_cast<int>(r.batch), H = static_cast<int>(r.hidden);
  const std::int64_t T = r.steps, GH = r.gates * r.hidden, NH = r.batch * r.hidden, NGH = r.batch * GH;
  cudaStream_t stream = a.stream;
  const Fp32Views<Element> views{ws, stream};
  const auto* dy = static_cast<const Element*>(t.dy);
  float* d_input = f32(l.gates);  // x W_ih^T is spent once the forward is done
  float* d_hidden = lstm ? d_input : f32(l.d_hidden);
  float* cells = f32(l.cells);
  float* saved = f32(l.saved);
  float* h_prev = f32(l.h_prev);
  float* dh = f32(l.dh);
  float* dc = f32(l.dc);

  Steps steps;
  widen_h_prev(r, t.h0, static_cast<const Element*>(out.y), h_prev, stream, steps);
  const float* w_hh = views.widened(t.w_hh, l.w_hh, GH * r.hidden, steps);
  // The GRU's cell kernel leaves dh z in dh, which the product adds to.
  steps << launch_status(kr::widen(static_cast<const Element*>(t.dh_t), dh, NH, stream));
  if (lstm) steps << launch_status(kr::widen(static_cast<const Element*>(t.dc_t), dc, NH, stream));
  const int splits = chain_splits(a.config);
  float* partials = f32(l.partials);
  for (std::int64_t s = T - 1; s >= 0 && steps.ok(); --s) {
    const bool summed_here = splits > 0 && s < T - 1;  // the step after left partial sums
    steps << launch_status(kr::cell_backward_step(
        r.cell, saved + s * r.batch * kr::kSavedGates * H, lstm ? cells + s * NH : nullptr,
        lstm ? cells + (s + 1) * NH : nullptr, h_prev + s * NH, dy + s * NH, dh, dc, d_input + s * NGH,
        lstm ? nullptr : d_hidden + s * NGH, N, H, stream, summed_here ? partials : nullptr, summed_here ? splits : 0));
    if (splits > 0 && s > 0)
      steps << library_status(rnn_split_product(a.libraries, stream, a.problem.dtype, r.batch, r.hidden, GH, splits,
                                                d_hidden + s * NGH, w_hh, partials));
    else
      steps << library_status(rnn_product(a.libraries, stream, a.problem.dtype, r.batch, r.hidden, GH,
                                          d_hidden + s * NGH, false, w_hh, dh, lstm ? 0.f : 1.f));
  }
  steps << launch_status(kr::narrow(dh, static_cast<Element*>(t.dh0), NH, stream));
  if (lstm) steps << launch_status(kr::narrow(dc, static_cast<Element*>(t.dc0), NH, stream));

  products_over_all_steps<Element>(a, r, t, l, d_input, d_hidden, h_prev, steps);
  return steps.status();
}

// ---- persistent -------------------------------------------------------------------------------

// The forward's two persistent rungs, as registered for lstm.forward / gru.forward: the backward
// runs one of them first (keeping the activations) and refuses what its `supports` refuses.
struct ForwardRungs {
  std::string primitive;  // lstm.forward or gru.forward
  std::function<Support(const Problem&, const Config&, const DeviceLimits&)> grid, cluster, registers, block;
};

// The forward's configs, fixed here rather than a second tuning axis (which would multiply this
// variant's space by the forward's): the winners of the H200 sweeps of rnn_targets.yaml
// (reports/h200/2026-12-02-cluster-rnn-and-budget), carried to other shapes by rule.
kr::PersistentConfig grid_forward_config(const RnnProblem& r) {
  int units = r.hidden <= 128 ? 8 : 16;  // 8 won at H = 128, 16 at H = 256 and 512
  while (units > 1 && units > r.hidden) units /= 2;
  const int groups = static_cast<int>(std::min<std::int64_t>(r.batch, r.hidden >= 512 ? 4 : 8));
  return {units, 256, groups};
}

// The grid forward with lane groups of 8 lanes a unit: 4 units and 256 threads a block (two blocks
// an SM at the kernel's 128 registers: 512-thread blocks fit one, too few for a grid of 256), so 8
// lane groups a unit, each taking at most 4 rows (8 rows spill); the batch split into groups of at
// most 32 rows, two at least: 13.3 us a step at H 512 on the H100 where one lane a unit took 41
// (persistent_registers' forward 3 took 9.3 and wins there since).
kr::PersistentConfig grid_split_forward_config(const RnnProblem& r) {
  int units = 4;
  while (units > 1 && units > r.hidden) units /= 2;
  constexpr int kThreads = 256, kSplit = 8, kRowsPerGroup = 4;
  const std::int64_t rows_a_group = std::int64_t{kRowsPerGroup} * (kThreads / kSplit / units);
  const auto groups = static_cast<int>(
      std::min<std::int64_t>(r.batch, std::max<std::int64_t>(2, (r.batch + rows_a_group - 1) / rows_a_group)));
  return {units, kThreads, groups, kSplit};
}

// The register forward: a warp a unit, 8 a block, at most 32 rows a group (two blocks' groups at
// N 64: 128 blocks at H 512, one an SM).
kr::RegisterConfig register_forward_config(const RnnProblem& r) {
  return {8, static_cast<int>(std::max<std::int64_t>(1, (r.batch + 31) / 32))};
}

// The block forward: a row a block, a thread a gate row, 16 of its 16-byte chunks in registers
// (the LSTM's H 128 winner on the H100), 24 where the block has at most 384 threads (the GRU's
// H 128 winner, reports/h100/2026-12-06-block-backward-wide-registers-at-ca64eab), none where a
// row has fewer than 16 (H < 64).
kr::BlockConfig block_forward_config(const RnnProblem& r) {
  const int quads = static_cast<int>((r.hidden + 3) / 4);
  const bool wide = r.gates * r.hidden <= kr::kMaxWideRegisterThreads;
  return {1, 1, wide && quads >= 24 ? 24 : quads >= 16 ? 16 : 0};
}

kr::ClusterConfig cluster_forward_config(const RnnProblem& r) {
  int cluster_size = r.hidden >= 512 ? 16 : 8;
  while (cluster_size > 2 && cluster_size > r.hidden) cluster_size /= 2;
  int rows_per_cluster = 1;  // the smallest power of 2 holding the batch, at most 8
  while (rows_per_cluster < 8 && rows_per_cluster < r.batch) rows_per_cluster *= 2;
  int most = 1;  // rows_per_thread: a power of 2 up to 4, at most the cluster's rows and the batch
  while (most < 4 && most * 2 <= std::min<std::int64_t>(rows_per_cluster, r.batch)) most *= 2;
  kr::ClusterConfig c{cluster_size, rows_per_cluster, 8, std::min(r.batch >= 64 ? 4 : 2, most)};
  // Four rows a lane group where two would need more threads than a block may have.
  if (kr::cluster_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), c).threads >
      kr::kMaxClusterThreads)
    c.rows_per_thread = most;
  return c;
}

Config as_config(const kr::PersistentConfig& c) {
  return Config({{"units_per_block", c.units_per_block}, {"block_size", c.block_size}, {"batch_groups", c.batch_groups},
                 {"k_split", c.k_split}});
}
Config as_config(const kr::RegisterConfig& c) {
  return Config({{"units_per_block", c.units_per_block}, {"batch_groups", c.batch_groups}});
}
Config as_config(const kr::BlockConfig& c) {
  return Config({{"rows_per_block", c.rows_per_block},
                 {"k_split", c.k_split},
                 {"register_quads", c.register_quads},
                 {"project", c.project},
                 {"unit_groups", c.unit_groups},
                 {"group_units", c.group_units}});
}
Config as_config(const kr::ClusterConfig& c) {
  return Config({{"cluster_size", c.cluster_size}, {"rows_per_cluster", c.rows_per_cluster}, {"k_split", c.k_split},
                 {"rows_per_thread", c.rows_per_thread}, {"exchange", c.exchange}});
}

constexpr int kGridForward = 0, kClusterForward = 1, kGridSplitForward = 2, kRegisterForward = 3;
// Not a value of the `forward` axis: persistent_block's forward, fixed to its own rung.
constexpr int kBlockForward = 4;

// The grid forward's config where the backward's `forward` axis names a grid rung.
kr::PersistentConfig grid_config_of(const Config& c, const RnnProblem& r) {
  return cfg(c, "forward") == kGridSplitForward ? grid_split_forward_config(r) : grid_forward_config(r);
}

// persistent_block's chain: its variant's own axes.
kr::BlockConfig chain_config(const Config& c) {
  return {cfg(c, "rows_per_block"), cfg(c, "k_split"), cfg(c, "register_quads")};
}

kr::BackwardConfig backward_config(const Config& c) {
  return {cfg(c, "units_per_block"), cfg(c, "batch_groups"), cfg(c, "k_split")};
}

// The forward that the `forward` axis names, as its own rung judges it with the config it runs.
Support forward_rung_supports(const ForwardRungs& forward, const Problem& p, int rung, const Config& c,
                              const DeviceLimits& limits) {
  const RnnProblem r = rnn_of(p);
  const Problem forward_problem{forward.primitive, p.dtype, p.shape};
  const Config forward_config = rung == kClusterForward    ? as_config(cluster_forward_config(r))
                                : rung == kRegisterForward ? as_config(register_forward_config(r))
                                : rung == kBlockForward    ? as_config(block_forward_config(r))
                                                           : as_config(grid_config_of(c, r));
  const auto& supports = rung == kClusterForward    ? forward.cluster
                         : rung == kRegisterForward ? forward.registers
                         : rung == kBlockForward    ? forward.block
                                                    : forward.grid;
  const char* name = rung == kClusterForward    ? "persistent_cluster{"
                     : rung == kRegisterForward ? "persistent_registers{"
                     : rung == kBlockForward    ? "persistent_block{"
                                                : "persistent{";
  const Support s = supports(forward_problem, forward_config, limits);
  if (!s.ok)
    return Support::no(std::string("the forward it runs first, ") + name + forward_config.key() + "}, refuses: " +
                       s.reason);
  return Support::yes();
}

// The chain's plan as the forward persistent rung judges its own: a valid plan, shared memory a
// block may have, and a grid the device can hold at once (estimated from shared memory and
// threads here; the launch asks the occupancy API and refuses what it cannot co-schedule). Then
// the forward it runs first must be supported too.
Support persistent_supports(const ForwardRungs& forward, const Problem& p, const Config& c,
                            const DeviceLimits& limits) {
  const RnnProblem r = rnn_of(p);
  const kr::BackwardConfig bc = backward_config(c);
  if (bc.batch_groups > r.batch) return Support::no("more batch groups than batch rows");
  if (bc.units_per_block > r.hidden) return Support::no("more units per block than hidden units");
  // An SM's shared memory estimated as a block's opt-in maximum and the 1 KiB the runtime reserves.
  const std::int64_t shared_per_sm = limits.shared_memory_per_block_optin + 1024;
  const kr::ChipBudget chip{static_cast<std::size_t>(limits.shared_memory_per_block_optin),
                            static_cast<std::size_t>(shared_per_sm), limits.sm_count};
  const kr::BackwardPlan plan =
      kr::persistent_backward_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), bc, chip);
  if (plan.threads == 0) return Support::no("not a valid config (k_split a power of 2 up to 32)");
  if (plan.threads > kr::kMaxBackwardThreads)
    return Support::no(std::to_string(plan.threads) + " threads a block (units x rows / rows_per_thread x k_split); "
                       "the kernel is built for at most " + std::to_string(kr::kMaxBackwardThreads));
  if (plan.tile == 0) {
    // Whether a block alone on an SM could hold them: if so, it is the grid that is too large.
    const kr::ChipBudget alone{chip.shared_per_block, chip.shared_per_sm, 0};
    const std::string what = "the columns of W_hh of " + std::to_string(bc.units_per_block) + " units and " +
                             std::to_string(plan.rows_per_group) + " rows of the gates' gradients (32 columns at least)";
    if (kr::persistent_backward_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), bc, alone).tile > 0)
      return Support::no("the grid of " + std::to_string(plan.blocks) + " blocks cannot be resident at once: " +
                         std::to_string((plan.blocks + limits.sm_count - 1) / limits.sm_count) +
                         " blocks an SM leave each too little shared memory for " + what);
    return Support::no(what + " need more shared memory than a block may have (" +
                       std::to_string(limits.shared_memory_per_block_optin) + " bytes here; the full rows take " +
                       std::to_string(plan.shared_bytes) + ")");
  }
  const std::int64_t by_shared = shared_per_sm / (static_cast<std::int64_t>(plan.shared_bytes) + 1024);
  const std::int64_t per_sm = std::min<std::int64_t>({by_shared, 2048 / plan.threads, 32});
  if (plan.blocks > per_sm * limits.sm_count)
    return Support::no("the grid of " + std::to_string(plan.blocks) + " blocks cannot be resident at once (at most " +
                       std::to_string(per_sm * limits.sm_count) + " here)");
  return forward_rung_supports(forward, p, static_cast<int>(cfg(c, "forward")), c, limits);
}

// stepwise's workspace (the same buffers, most of them used the same way), then the forward's h_t
// and c_t (written, not read), the grid forward's exchange buffers and the chain's barrier.
struct PersistentLayout {
  StepwiseLayout steps;
  std::size_t final_state, forward, barrier, total;
};

PersistentLayout persistent_layout(const RnnProblem& r, DType dtype, bool split) {
  PersistentLayout l{stepwise_layout(r, dtype, split), 0, 0, 0, 0};
  std::size_t at = l.steps.total;
  const auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at += align256(bytes);
    return here;
  };
  l.final_state = take(2 * static_cast<std::size_t>(r.batch * r.hidden) * dtype_size(dtype));
  l.forward = take(kr::persistent_workspace_bytes(static_cast<int>(r.batch), static_cast<int>(r.hidden)));
  l.barrier = take(kr::persistent_backward_workspace_bytes());
  l.total = at;
  return l;
}

std::size_t persistent_workspace(const Problem& p, const Config& c) {
  return persistent_layout(rnn_of(p), p.dtype, split_products(c)).total;
}

// A cooperative launch the device cannot hold, or a cluster it cannot place, is a refusal.
LaunchStatus persistent_status(cudaError_t e, const char* what) {
  if (e == cudaErrorCooperativeLaunchTooLarge)
    return LaunchStatus::refused(std::string(what) + ": the device cannot hold every block (or one cluster) at once");
  if (e == cudaErrorNotSupported) return LaunchStatus::refused(std::string(what) + ": needs compute capability 9.0");
  return launch_status(e);
}

// persistent's forward, keeping the activations: the input projection, then one persistent
// launch writing y (and the final states: the caller's, else the workspace's).
template <typename Element>
LaunchStatus persistent_forward(const LaunchArgs& a, const LayerOutputs& out, int rung) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  const PersistentLayout pl = persistent_layout(r, a.problem.dtype, split_products(a.config));
  const StepwiseLayout& l = pl.steps;
  char* ws = static_cast<char*>(a.workspace);
  const auto f32 = [&](std::size_t offset) { return reinterpret_cast<float*>(ws + offset); };
  const bool lstm = r.cell == kr::Cell::lstm;
  const std::int64_t NH = r.batch * r.hidden;
  auto* final_state = reinterpret_cast<Element*>(ws + pl.final_state);
  float* gates = f32(l.gates);

  Steps steps;
  project_inputs(a, r, l, t, gates, steps);
  if (lstm) steps << launch_status(kr::widen(static_cast<const Element*>(t.c0), f32(l.cells), NH, a.stream));
  kr::Layer<Element> layer;
  layer.cell = r.cell;
  layer.x = static_cast<const Element*>(t.x);
  layer.h0 = static_cast<const Element*>(t.h0);
  layer.c0 = static_cast<const Element*>(t.c0);
  layer.w_hh = static_cast<const Element*>(t.w_hh);
  layer.b_ih = static_cast<const Element*>(t.b_ih);
  layer.b_hh = static_cast<const Element*>(t.b_hh);
  layer.y = static_cast<Element*>(out.y);
  layer.h_t = out.h_t ? static_cast<Element*>(out.h_t) : final_state;
  layer.c_t = !lstm ? nullptr : out.c_t ? static_cast<Element*>(out.c_t) : final_state + NH;
  layer.saved = f32(l.saved);
  layer.cells = lstm ? f32(l.cells) : nullptr;
  layer.steps = static_cast<int>(r.steps);
  layer.batch = static_cast<int>(r.batch);
  layer.input = static_cast<int>(r.input);
  layer.hidden = static_cast<int>(r.hidden);
  if (!steps.ok()) return steps.status();
  if (rung == kClusterForward)
    return persistent_status(kr::cluster_forward(layer, gates, cluster_forward_config(r), a.stream),
                             "the forward (persistent_cluster)");
  if (rung == kBlockForward)
    return persistent_status(kr::block_forward(layer, gates, block_forward_config(r), {}, a.stream),
                             "the forward (persistent_block)");
  if (rung == kRegisterForward)
    return persistent_status(kr::register_forward(layer, gates, ws + pl.forward, register_forward_config(r), a.stream),
                             "the forward (persistent_registers)");
  return persistent_status(kr::persistent_forward(layer, gates, ws + pl.forward, grid_config_of(a.config, r), a.stream),
                           "the forward (persistent)");
}

// persistent's backward from what its forward left: the recurrent chain in one cooperative
// launch (it writes dh0 and dc0 itself), then the products over all steps as stepwise.
template <typename Element, typename Chain>
LaunchStatus persistent_backward(const LaunchArgs& a, const LayerOutputs& out, Chain run_chain) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  const PersistentLayout pl = persistent_layout(r, a.problem.dtype, split_products(a.config));
  const StepwiseLayout& l = pl.steps;
  char* ws = static_cast<char*>(a.workspace);
  const auto f32 = [&](std::size_t offset) { return reinterpret_cast<float*>(ws + offset); };
  const bool lstm = r.cell == kr::Cell::lstm;
  float* d_input = f32(l.gates);  // x W_ih^T is spent once the forward is done
  float* d_hidden = lstm ? d_input : f32(l.d_hidden);
  float* h_prev = f32(l.h_prev);

  Steps steps;
  widen_h_prev(r, t.h0, static_cast<const Element*>(out.y), h_prev, a.stream, steps);
  if (!steps.ok()) return steps.status();
  kr::BackwardChain<Element> chain;
  chain.cell = r.cell;
  chain.w_hh = static_cast<const Element*>(t.w_hh);
  chain.saved = f32(l.saved);
  chain.cells = lstm ? f32(l.cells) : nullptr;
  chain.h_prev = h_prev;
  chain.dy = static_cast<const Element*>(t.dy);
  chain.dh_t = static_cast<const Element*>(t.dh_t);
  chain.dc_t = static_cast<const Element*>(t.dc_t);
  chain.d_input = d_input;
  chain.d_hidden = d_hidden;
  chain.dh0 = static_cast<Element*>(t.dh0);
  chain.dc0 = static_cast<Element*>(t.dc0);
  chain.steps = static_cast<int>(r.steps);
  chain.batch = static_cast<int>(r.batch);
  chain.hidden = static_cast<int>(r.hidden);
  steps << run_chain(chain, ws + pl.barrier);
  if (!steps.ok()) return steps.status();

  products_over_all_steps<Element>(a, r, t, l, d_input, d_hidden, h_prev, steps);
  return steps.status();
}

// ---- cudnn ------------------------------------------------------------------------------------

CudnnRnnBackward cudnn_call(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  CudnnRnnBackward b;
  CudnnRnnForward& f = b.layer;
  f.cell = r.cell == kr::Cell::lstm ? CudnnRnnCell::lstm : CudnnRnnCell::gru;
  f.dtype = a.problem.dtype;
  f.steps = r.steps, f.batch = r.batch, f.input = r.input, f.hidden = r.hidden;
  f.algo = cfg(a.config, "algo");
  f.x = t.x, f.h0 = t.h0, f.c0 = t.c0;
  f.w_ih = t.w_ih, f.w_hh = t.w_hh, f.b_ih = t.b_ih, f.b_hh = t.b_hh;
  b.dy = t.dy, b.dh_t = t.dh_t, b.dc_t = t.dc_t;
  b.dx = t.dx, b.dh0 = t.dh0, b.dc0 = t.dc0;
  b.dw_ih = t.dw_ih, b.dw_hh = t.dw_hh, b.db_ih = t.db_ih, b.db_hh = t.db_hh;
  return b;
}

// The halves' cuDNN call: the layer's outputs, and a plan of its own per x (one per layer of a trainer).
CudnnRnnBackward cudnn_half_call(const LaunchArgs& a, const LayerOutputs& out) {
  CudnnRnnBackward b = cudnn_call(a);
  b.layer.y = out.y, b.layer.h_t = out.h_t, b.layer.c_t = out.c_t;
  return b;
}

using Half = std::function<LaunchStatus(const LaunchArgs&, const LayerOutputs&)>;

// Variant::forward_half and backward_half of a rung from its halves.
void set_halves(Variant& v, const Half& forward, const Half& backward) {
  const auto checked = [](const Half& half) {
    return [half](const LaunchArgs& a, std::span<void* const> outputs) {
      LayerOutputs out{};
      if (LaunchStatus s = layer_outputs(a, outputs, out); !s.ok) return s;
      return half(a, out);
    };
  };
  v.forward_half = checked(forward);
  v.backward_half = checked(backward);
}

// A whole launch of shapetune's rungs: both halves, y in the workspace (every rung's layout starts
// with stepwise's), the final states not wanted.
std::function<LaunchStatus(const LaunchArgs&)> whole_launch(const Half& forward, const Half& backward) {
  return [forward, backward](const LaunchArgs& a) {
    const StepwiseLayout l = stepwise_layout(rnn_of(a.problem), a.problem.dtype, split_products(a.config));
    const LayerOutputs out{static_cast<char*>(a.workspace) + l.h_stored, nullptr, nullptr};
    if (LaunchStatus s = forward(a, out); !s.ok) return s;
    return backward(a, out);
  };
}

void add_variants(Catalogue& cat, const std::string& primitive, const ForwardRungs& forward) {
  Variant s;
  s.primitive = primitive;
  s.name = "stepwise";
  s.description = "forward as one input GEMM and per step a recurrent GEMM and a cell kernel keeping the activations; "
                  "backward per step in reverse a fused cell-backward kernel and dh W_hh (cuBLAS), then dx, dW and db "
                  "as one fp32 GEMM each over all steps";
  s.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  s.workspace_bytes = stepwise_workspace;
  const Half stepwise_forward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return stepwise_forward<decltype(tag)>(a, out);
    });
  };
  const Half stepwise_backward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return stepwise_backward<decltype(tag)>(a, out);
    });
  };
  s.launch = whole_launch(stepwise_forward_half, stepwise_backward_half);
  set_halves(s, stepwise_forward_half, stepwise_backward_half);
  cat.add(s);

  Variant g;
  g.primitive = primitive;
  g.name = "stepwise_graph";
  g.description = "stepwise's forward and backward launches captured once into a CUDA graph (cached per shape and "
                  "pointers) and replayed: one launch a call instead of about 4 T + 20";
  g.supports = s.supports;
  g.workspace_bytes = stepwise_workspace;
  g.launch = [launch = s.launch](const LaunchArgs& a) {
    return launch_as_graph("stepwise_graph", a, [&] { return launch(a); });
  };
  // A trainer captures its whole step, halves included, so its halves are stepwise's.
  set_halves(g, stepwise_forward_half, stepwise_backward_half);
  cat.add(g);

  Variant p;
  p.primitive = primitive;
  p.name = "persistent";
  p.description = "forward as the persistent rung keeping the activations; the backward's recurrent chain in one "
                  "cooperative launch, each block W_hh's columns of its units in shared memory and the gates' "
                  "gradients through L2, a grid barrier a step; then dx, dW and db as stepwise";
  // The forward rung run first, keeping the activations: persistent's and persistent_stepwise's axis.
  const ParamAxis forward_axis{
      "forward", {kGridForward, kClusterForward, kGridSplitForward, kRegisterForward},
      "the forward run first: 0 persistent (k_split 1), 1 persistent_cluster (sm_90a), 2 persistent with k_split 8, "
      "3 persistent_registers (H <= 512)"};
  p.params = ParamSpace(
      {forward_axis,
       {"units_per_block", {1, 2, 4, 8, 16}, "hidden units a block owns (their columns of W_hh, all G H rows)"},
       {"batch_groups", {1, 2, 4, 8}, "the batch split over groups of blocks (each its own columns; fewer rows read a step)"},
       {"k_split", {4, 8, 16}, "lanes that share one unit's dot products over G H (summed by shuffles)"}});
  // The grid forward runs anywhere; 8 units in 4 groups keep issue 20's four targets at one or two
  // blocks an SM (256 threads of up to 128 registers; at H = 512 three tiles of 111 KB).
  p.default_config = Config({{"forward", kGridForward}, {"units_per_block", 8}, {"batch_groups", 4}, {"k_split", 8}});
  p.supports = [forward](const Problem& problem, const Config& config, const DeviceLimits& limits) {
    return persistent_supports(forward, problem, config, limits);
  };
  p.workspace_bytes = persistent_workspace;
  const Half persistent_forward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return persistent_forward<decltype(tag)>(a, out, static_cast<int>(cfg(a.config, "forward")));
    });
  };
  const Half persistent_backward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return persistent_backward<decltype(tag)>(a, out, [&a](const auto& chain, void* barrier) {
        return persistent_status(kr::persistent_backward(chain, barrier, backward_config(a.config), a.stream),
                                 "the backward chain");
      });
    });
  };
  p.launch = whole_launch(persistent_forward_half, persistent_backward_half);
  set_halves(p, persistent_forward_half, persistent_backward_half);
  cat.add(p);

  Variant h;
  h.primitive = primitive;
  h.name = "persistent_stepwise";
  h.description = "persistent's forward keeping the activations, then stepwise's backward (per step a fused "
                  "cell-backward kernel and dh W_hh, then dx, dW and db over all steps), captured once into a CUDA "
                  "graph and replayed: the faster half of each rung where the persistent chain loses to cuBLAS";
  h.params = ParamSpace(
      {forward_axis,
       {"chain_splits", {0, 4, 8, kMaxChainSplits},
        "slices of G H a step's product dh W_hh is taken in by one batched launch, summed by the next step's cell "
        "kernel (0: cuBLAS's one product, its split-K reduction a launch of its own)"},
       {"products", {0, 1},
        "the products over all steps (x W_ih^T, dx, dW_ih, dW_hh): 0 fp32 FMAs (cuBLAS SGEMM); 1 three TF32 "
        "tensor-core products of operands split into TF32 high and low parts (a term off by about 2^-21 of itself; "
        "not tf32 problems, whose products are TF32 already)"}});
  // k_split 8: the forward that won at H 512 (13.7 us a step on the H100 against 41 with k_split 1).
  h.default_config = Config({{"forward", kGridSplitForward}, {"chain_splits", 0}, {"products", 0}});
  h.supports = [forward](const Problem& problem, const Config& config, const DeviceLimits& limits) {
    const RnnProblem r = rnn_of(problem);
    if (split_products(config) && problem.dtype == DType::tf32)
      return Support::no("a tf32 problem takes its products in TF32 already (products 1 is for fp32 products)");
    if (split_products(config) && limits.compute_capability < 80)
      return Support::no("split TF32 products need TF32 tensor cores (compute capability 8.0)");
    const int splits = chain_splits(config);
    if (splits > 0 && (r.gates * r.hidden) % splits != 0)
      return Support::no("the G H = " + std::to_string(r.gates * r.hidden) + " gate rows do not split into " +
                         std::to_string(splits) + " equal slices");
    return forward_rung_supports(forward, problem, static_cast<int>(cfg(config, "forward")), config, limits);
  };
  h.workspace_bytes = persistent_workspace;  // stepwise's layout first, as stepwise's backward reads it
  h.launch = [launch = whole_launch(persistent_forward_half, stepwise_backward_half)](const LaunchArgs& a) {
    return launch_as_graph("persistent_stepwise", a, [&] { return launch(a); });
  };
  set_halves(h, persistent_forward_half, stepwise_backward_half);
  cat.add(h);

  Variant b;
  b.primitive = primitive;
  b.name = "persistent_block";
  b.description = "forward as the forward's persistent_block rung keeping the activations; the backward's recurrent "
                  "chain the same way: a block per batch rows holding W_hh's columns (registers and shared memory), "
                  "no exchange, two block barriers a step; then dx, dW and db as stepwise";
  b.params = ParamSpace(
      {{"rows_per_block", {1, 2}, "batch rows a block of the chain runs (at most k_split)"},
       {"k_split", {1, 2, 4}, "threads that split one unit's dot product over the G H gate rows"},
       {"register_quads", {0, 16}, "16-byte chunks of a thread's slice of W_hh's column in registers"}});
  b.default_config = Config({{"rows_per_block", 1}, {"k_split", 4}, {"register_quads", 16}});
  b.supports = [forward](const Problem& problem, const Config& config, const DeviceLimits& limits) {
    const RnnProblem r = rnn_of(problem);
    const kr::BlockPlan plan =
        kr::block_backward_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), chain_config(config));
    if (plan.blocks == 0)
      return Support::no("not a chain this kernel is built for (H x k_split <= " +
                         std::to_string(kr::kMaxBlockThreads) + " threads, rows_per_block <= k_split, " +
                         "register_quads within a slice of G H / k_split rows)");
    if (static_cast<std::int64_t>(plan.shared_bytes) > limits.shared_memory_per_block_optin)
      return Support::no("W_hh's columns outside registers, the rows of d_hidden and the partial sums need " +
                         std::to_string(plan.shared_bytes) + " bytes of shared memory; a block may have " +
                         std::to_string(limits.shared_memory_per_block_optin));
    return forward_rung_supports(forward, problem, kBlockForward, config, limits);
  };
  b.workspace_bytes = persistent_workspace;
  const Half block_forward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return persistent_forward<decltype(tag)>(a, out, kBlockForward);
    });
  };
  const Half block_backward_half = [](const LaunchArgs& a, const LayerOutputs& out) {
    return with_storage_type(storage_of(a.problem.dtype), "the recurrent family", [&](auto tag) {
      return persistent_backward<decltype(tag)>(a, out, [&a](const auto& chain, void*) {
        return launch_status(kr::block_backward(chain, chain_config(a.config), a.stream));
      });
    });
  };
  b.launch = whole_launch(block_forward_half, block_backward_half);
  set_halves(b, block_forward_half, block_backward_half);
  cat.add(b);

  Variant c;
  c.primitive = primitive;
  c.name = "cudnn";
  c.description = "cudnnRNNForward (training, reserve space), cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8; "
                  "algo: 0 STANDARD, 1 PERSIST_STATIC, 2 PERSIST_DYNAMIC, 3 PERSIST_STATIC_SMALL_H; weights copied "
                  "into cuDNN's weight space and the gradients out of it by one copy kernel each";
  c.baseline = true;
  c.library = true;
  c.params = ParamSpace({{"algo", {0, 1, 2, 3}, "cuDNN's RNN algorithm"}});
  c.default_config = Config({{"algo", 0}});
  c.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  c.launch = [](const LaunchArgs& a) { return library_status(cudnn_rnn_backward(a.libraries, a.stream, cudnn_call(a))); };
  set_halves(
      c,
      [](const LaunchArgs& a, const LayerOutputs& out) {
        return library_status(cudnn_rnn_training_forward(a.libraries, a.stream, cudnn_half_call(a, out), a.tensors[0]));
      },
      [](const LaunchArgs& a, const LayerOutputs& out) {
        return library_status(
            cudnn_rnn_backward_after_forward(a.libraries, a.stream, cudnn_half_call(a, out), a.tensors[0]));
      });
  cat.add(c);
}

}  // namespace

void register_rnn_backward(Catalogue& cat) {
  for (const kr::Cell cell : {kr::Cell::lstm, kr::Cell::gru}) {
    const char* forward_name = cell == kr::Cell::lstm ? "lstm.forward" : "gru.forward";
    const Primitive* forward = cat.find_primitive(forward_name);
    if (!forward) throw std::logic_error(std::string("register_rnn_backward needs ") + forward_name + " registered first");
    const Variant* grid = cat.find_variant(forward_name, "persistent");
    const Variant* cluster = cat.find_variant(forward_name, "persistent_cluster");
    const Variant* registers = cat.find_variant(forward_name, "persistent_registers");
    const Variant* block = cat.find_variant(forward_name, "persistent_block");
    if (!grid || !cluster)
      throw std::logic_error(std::string("register_rnn_backward needs ") + forward_name + "'s persistent rungs");
    Primitive p = backward_primitive(*forward, cell);
    const std::string name = p.name;
    cat.add(std::move(p));
    add_variants(cat, name,
                 ForwardRungs{forward_name, grid->supports, cluster->supports, registers->supports, block->supports});
  }
}

}  // namespace shapetune
