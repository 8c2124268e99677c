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
//   cudnn:    cudnnRNNForward in training mode, cudnnRNNBackwardData_v8 and
//             cudnnRNNBackwardWeights_v8, with each algorithm cuDNN has (the baseline).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
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
// kept in 16 bits, as cuDNN keeps them: on the H200 its f16 and bf16 weight and bias gradients
// at T N = 119 were off by up to 1.3 times the forward's atol (stepwise, which keeps them in
// fp32, by less); sqrt(119 / 32) = 1.9 leaves room for other draws.
Tolerance backward_tolerance(const Tolerance& forward, const Problem& p) {
  const double terms = static_cast<double>(p.shape.at("T") * p.shape.at("N"));
  return Tolerance{forward.atol * std::max(1.0, std::sqrt(terms / 32)), 2 * forward.rtol};
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
                  "activations plus its backward; fp32 state, products and weight-gradient sums";
  p.signature = lstm ? "dL/d(x, h0, c0, W_ih, W_hh, b_ih, b_hh) for L = sum dy.y + dh_t.h_T + dc_t.c_T, y = lstm.forward"
                     : "dL/d(x, h0, W_ih, W_hh, b_ih, b_hh) for L = sum dy.y + dh_t.h_T, y = gru.forward "
                       "(b_hn's and W_hn's gradients take r dn, b_in's dn)";
  p.axes = forward.axes;
  p.dtypes = forward.dtypes;
  p.tensors = [forward_tensors = forward.tensors, lstm, G](const Problem& problem) {
    const auto T = problem.shape.at("T"), N = problem.shape.at("N"), D = problem.shape.at("D"),
               H = problem.shape.at("H");
    const DType t = problem.dtype;
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

// Byte offsets into the stepwise rung's workspace. fp32 unless said: every gradient stays fp32
// until it is stored, so the 16-bit operands of the backward products are widened (cuBLAS has no
// fp32 x 16-bit product); f32 problems read and write the tensors in place instead.
struct StepwiseLayout {
  std::size_t gates;      // [T N, G H]: x W_ih^T, then the input side's gate gradients
  std::size_t d_hidden;   // [T N, G H]: the GRU's hidden-side gate gradients (the LSTM's are `gates`)
  std::size_t recurrent;  // [N, G H]: one step's h W_hh^T
  std::size_t saved;      // [T N, 4 H]: each step's activations (kr::kSavedGates)
  std::size_t cells;      // [T + 1, N, H]: c0 and every step's c (LSTM)
  std::size_t h_stored;   // [T, N, H] in the storage type: each step's h as the forward feeds it back
  std::size_t h_prev;     // [T, N, H]: the h each step read (h0, then h_0 .. h_{T-2}), widened
  std::size_t dh, dc;     // [N, H]: the gradients carried back to the previous step
  std::size_t ones;       // [T N]: the bias gradients are d^T ones
  std::size_t x, w_ih, w_hh;                        // widened inputs (16-bit only)
  std::size_t dx, dw_ih, dw_hh, db_ih, db_hh;       // fp32 gradients before rounding (16-bit only)
  std::size_t total;
};

StepwiseLayout stepwise_layout(const RnnProblem& r, DType dtype) {
  std::size_t at = 0;
  const auto take = [&](std::int64_t elements, std::size_t element_bytes = sizeof(float)) {
    const std::size_t here = at;
    at += align256(static_cast<std::size_t>(elements) * element_bytes);
    return here;
  };
  const bool lstm = r.cell == kr::Cell::lstm, narrow = dtype != DType::f32;
  const std::int64_t T = r.steps, N = r.batch, D = r.input, H = r.hidden, GH = r.gates * r.hidden;
  StepwiseLayout l{};
  l.gates = take(T * N * GH);
  l.d_hidden = take(lstm ? 0 : T * N * GH);
  l.recurrent = take(N * GH);
  l.saved = take(T * N * kr::kSavedGates * H);
  l.cells = take(lstm ? (T + 1) * N * H : 0);
  l.h_stored = take(T * N * H, dtype_size(dtype));
  l.h_prev = take(T * N * H);
  l.dh = take(N * H);
  l.dc = take(lstm ? N * H : 0);
  l.ones = take(T * N);
  l.x = take(narrow ? T * N * D : 0);
  l.w_ih = take(narrow ? GH * D : 0);
  l.w_hh = take(narrow ? GH * H : 0);
  l.dx = take(narrow ? T * N * D : 0);
  l.dw_ih = take(narrow ? GH * D : 0);
  l.dw_hh = take(narrow ? GH * H : 0);
  l.db_ih = take(narrow ? GH : 0);
  l.db_hh = take(narrow ? GH : 0);
  l.total = at;
  return l;
}

std::size_t stepwise_workspace(const Problem& p, const Config&) { return stepwise_layout(rnn_of(p), p.dtype).total; }

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

template <typename Element>
LaunchStatus stepwise(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const Tensors t = tensors_of(a);
  const StepwiseLayout l = stepwise_layout(r, a.problem.dtype);
  char* ws = static_cast<char*>(a.workspace);
  const auto f32 = [&](std::size_t offset) { return reinterpret_cast<float*>(ws + offset); };
  const bool lstm = r.cell == kr::Cell::lstm;
  const int N = static_cast<int>(r.batch), H = static_cast<int>(r.hidden);
  const std::int64_t T = r.steps, D = r.input, GH = r.gates * r.hidden, NH = r.batch * r.hidden, NGH = r.batch * GH;
  const DType dtype = a.problem.dtype;
  cudaStream_t stream = a.stream;
  LibraryHandles& libraries = a.libraries;

  const auto* h0 = static_cast<const Element*>(t.h0);
  const auto* b_ih = static_cast<const Element*>(t.b_ih);
  const auto* b_hh = static_cast<const Element*>(t.b_hh);
  const auto* dy = static_cast<const Element*>(t.dy);
  auto* h_stored = reinterpret_cast<Element*>(ws + l.h_stored);
  float* gates = f32(l.gates);
  float* d_input = gates;  // x W_ih^T is spent once the forward is done
  float* d_hidden = lstm ? gates : f32(l.d_hidden);
  float* cells = f32(l.cells);
  float* saved = f32(l.saved);
  float* h_prev = f32(l.h_prev);
  float* dh = f32(l.dh);
  float* dc = f32(l.dc);

  // The fp32 view of a tensor: itself for f32, else a widened copy in the workspace.
  const auto widened = [&](const void* tensor, std::size_t offset, std::int64_t n, Steps& steps) -> const float* {
    if constexpr (std::is_same_v<Element, float>) {
      return static_cast<const float*>(tensor);
    } else {
      steps << launch_status(kr::widen(static_cast<const Element*>(tensor), f32(offset), n, stream));
      return f32(offset);
    }
  };
  // Where a gradient is summed in fp32: the output itself for f32, else the workspace.
  const auto accumulator = [&](void* output, std::size_t offset) {
    if constexpr (std::is_same_v<Element, float>) return static_cast<float*>(output);
    else return f32(offset);
  };
  const auto store = [&](const float* sum, void* output, std::int64_t n) {
    if constexpr (std::is_same_v<Element, float>) return LaunchStatus::success();
    else return launch_status(kr::narrow(sum, static_cast<Element*>(output), n, stream));
  };

  Steps steps;
  // Forward, keeping the activations.
  steps << library_status(cublas_times_transposed_f32(libraries, stream, dtype, T * r.batch, GH, D, t.x, t.w_ih, gates));
  if (lstm) steps << launch_status(kr::widen(static_cast<const Element*>(t.c0), cells, NH, stream));
  for (std::int64_t s = 0; s < T && steps.ok(); ++s) {
    const Element* h_in = s == 0 ? h0 : h_stored + (s - 1) * NH;
    steps << library_status(cublas_times_transposed_f32(libraries, stream, dtype, r.batch, GH, r.hidden, h_in, t.w_hh,
                                                        f32(l.recurrent)));
    steps << launch_status(kr::cell_step_saving(r.cell, gates + s * NGH, f32(l.recurrent), b_ih, b_hh, h_in,
                                                lstm ? cells + s * NH : nullptr, lstm ? cells + (s + 1) * NH : nullptr,
                                                saved + s * r.batch * kr::kSavedGates * H, h_stored + s * NH, N, H,
                                                stream));
  }
  steps << launch_status(kr::widen(h0, h_prev, NH, stream));
  if (T > 1) steps << launch_status(kr::widen(h_stored, h_prev + NH, (T - 1) * NH, stream));
  const float* x = widened(t.x, l.x, T * r.batch * D, steps);
  const float* w_ih = widened(t.w_ih, l.w_ih, GH * D, steps);
  const float* w_hh = widened(t.w_hh, l.w_hh, GH * r.hidden, steps);

  // Backward through the steps: the GRU's cell kernel leaves dh z in dh, which the product adds to.
  steps << launch_status(kr::widen(static_cast<const Element*>(t.dh_t), dh, NH, stream));
  if (lstm) steps << launch_status(kr::widen(static_cast<const Element*>(t.dc_t), dc, NH, stream));
  for (std::int64_t s = T - 1; s >= 0 && steps.ok(); --s) {
    steps << launch_status(kr::cell_backward_step(r.cell, saved + s * r.batch * kr::kSavedGates * H,
                                                  lstm ? cells + s * NH : nullptr, lstm ? cells + (s + 1) * NH : nullptr,
                                                  h_prev + s * NH, dy + s * NH, dh, dc, d_input + s * NGH,
                                                  lstm ? nullptr : d_hidden + s * NGH, N, H, stream));
    steps << library_status(cublas_product_f32(libraries, stream, r.batch, r.hidden, GH, d_hidden + s * NGH, false,
                                               w_hh, dh, lstm ? 0.f : 1.f));
  }
  steps << launch_status(kr::narrow(dh, static_cast<Element*>(t.dh0), NH, stream));
  if (lstm) steps << launch_status(kr::narrow(dc, static_cast<Element*>(t.dc0), NH, stream));

  // The products over every step at once.
  const std::int64_t rows = T * r.batch;
  float* dx = accumulator(t.dx, l.dx);
  float* dw_ih = accumulator(t.dw_ih, l.dw_ih);
  float* dw_hh = accumulator(t.dw_hh, l.dw_hh);
  float* db_ih = accumulator(t.db_ih, l.db_ih);
  float* db_hh = accumulator(t.db_hh, l.db_hh);
  steps << library_status(cublas_product_f32(libraries, stream, rows, D, GH, d_input, false, w_ih, dx));
  steps << library_status(cublas_product_f32(libraries, stream, GH, D, rows, d_input, true, x, dw_ih));
  steps << library_status(cublas_product_f32(libraries, stream, GH, r.hidden, rows, d_hidden, true, h_prev, dw_hh));
  steps << launch_status(kr::fill(f32(l.ones), rows, 1.f, stream));
  steps << library_status(cublas_product_f32(libraries, stream, GH, 1, rows, d_input, true, f32(l.ones), db_ih));
  steps << library_status(cublas_product_f32(libraries, stream, GH, 1, rows, d_hidden, true, f32(l.ones), db_hh));
  steps << store(dx, t.dx, rows * D) << store(dw_ih, t.dw_ih, GH * D) << store(dw_hh, t.dw_hh, GH * r.hidden)
        << store(db_ih, t.db_ih, GH) << store(db_hh, t.db_hh, GH);
  return steps.status();
}

// ---- cudnn ------------------------------------------------------------------------------------

LaunchStatus cudnn_backward(const LaunchArgs& a) {
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
  return library_status(cudnn_rnn_backward(a.libraries, a.stream, b));
}

void add_variants(Catalogue& cat, const std::string& primitive) {
  Variant s;
  s.primitive = primitive;
  s.name = "stepwise";
  s.description = "forward as one input GEMM and per step a recurrent GEMM and a cell kernel keeping the activations; "
                  "backward per step in reverse a fused cell-backward kernel and dh W_hh (cuBLAS), then dx, dW and db "
                  "as one fp32 GEMM each over all steps";
  s.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  s.workspace_bytes = stepwise_workspace;
  s.launch = [](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, "the recurrent family", [&](auto tag) {
      return stepwise<decltype(tag)>(a);
    });
  };
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
  cat.add(g);

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
  c.launch = cudnn_backward;
  cat.add(c);
}

}  // namespace

void register_rnn_backward(Catalogue& cat) {
  for (const kr::Cell cell : {kr::Cell::lstm, kr::Cell::gru}) {
    const char* forward_name = cell == kr::Cell::lstm ? "lstm.forward" : "gru.forward";
    const Primitive* forward = cat.find_primitive(forward_name);
    if (!forward) throw std::logic_error(std::string("register_rnn_backward needs ") + forward_name + " registered first");
    Primitive p = backward_primitive(*forward, cell);
    const std::string name = p.name;
    cat.add(std::move(p));
    add_variants(cat, name);
  }
}

}  // namespace shapetune
