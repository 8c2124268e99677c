// The recurrent family's cells alone: lstm_cell.{forward,backward} and gru_cell.{forward,backward},
// one time step for N batch rows and H hidden units, the step the stepwise rungs (variants/rnn.cpp,
// variants/rnn_backward.cpp) launch T times a call. Tuned apart, the fused gate step's own time is
// visible next to the recurrent GEMM's.
//
// The interface is the stepwise kernels' own (kernels/rnn/rnn.cuh), not a sum of pre-activations:
// gx = x W_ih^T and gh = h W_hh^T in fp32 without biases, as cuBLAS writes them, the biases apart
// in the storage type (the GRU's candidate needs W_hn h + b_hn apart from W_in x + b_in anyway).
// The problem's dtype is the storage type of b_ih, b_hh, h_prev, h and dy; the cell state, the
// saved activations and every gradient stay fp32, as they do in the stepwise rungs.
//
//   fused: one thread per (batch row, hidden unit), every gate of the unit in registers: the
//          forward's cell_step_saving, the backward's cell_backward_step.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <string>

#include "baselines/reference.hpp"
#include "core/primitive_name.hpp"
#include "kernels/rnn/rnn.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kr = kernels::rnn;

struct CellProblem {
  kr::Cell cell;
  std::int64_t batch, hidden;
  int gates;
};

CellProblem cell_of(const Problem& p) {
  const kr::Cell cell = PrimitiveName::parse(p.primitive)->family == "gru_cell" ? kr::Cell::gru : kr::Cell::lstm;
  return {cell, p.shape.at("N"), p.shape.at("H"), kr::gate_count(cell)};
}

// The kernels index a row's gates with int (g H + j) and launch one thread per unit.
Support validate_cell_shape(const Shape& s) {
  const std::int64_t N = s.at("N"), H = s.at("H");
  if (H > INT_MAX / 4 || N > INT_MAX) return Support::no("N and H must be below 2^29");
  if (N * H > INT_MAX) return Support::no("N H must be below 2^31 (one thread a unit)");
  return Support::yes();
}

// Each tensor once; an inout tensor is read and written.
double tensor_bytes(const std::vector<TensorSpec>& specs) {
  double bytes = 0;
  for (const TensorSpec& s : specs) bytes += static_cast<double>(s.bytes()) * (s.role == TensorRole::inout ? 2 : 1);
  return bytes;
}

// One step: no error grows with T. The forward's fp32 outputs carry a few ulps of the fast exp and
// tanhf; a 16-bit h may round the other way (one ulp at |h| < 1: 4.9e-4 f16, 3.9e-3 bf16), the
// recurrent primitives' T = 1 tolerance. The backward's outputs are fp32 whatever the storage
// type (dy is read as stored, which the reference sees too): fp32's alone.
Tolerance cell_forward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return Tolerance{1e-3, 2e-3};
    case DType::bf16: return Tolerance{8e-3, 1.6e-2};
    default: return Tolerance{4e-6, 2e-5};
  }
}
Tolerance cell_backward_tolerance(DType) { return Tolerance{1e-5, 2e-5}; }

// The saved activations drawn as the forward leaves them: sigmoids in (0, 1), tanh in (-1, 1);
// one range inside both serves every slot, W_hn h + b_hn included (any value is valid there).
constexpr double kSavedLow = 0.02, kSavedHigh = 0.98;

Primitive forward_primitive(kr::Cell cell) {
  const bool lstm = cell == kr::Cell::lstm;
  const int G = kr::gate_count(cell);
  Primitive p;
  p.name = lstm ? "lstm_cell.forward" : "gru_cell.forward";
  p.description = std::string(lstm ? "LSTM" : "GRU") +
                  " cell, one step: fp32 gx = x W_ih^T, gh = h W_hh^T [N, G H] and the biases -> h [N, H]" +
                  (lstm ? ", the fp32 cell state c" : "") +
                  " and the fp32 activations the backward reads [N, 4 H]; the stepwise rungs' per-step kernel";
  p.signature = lstm ? "(i,f,g,o) = (s,s,tanh,s)(gx + b_ih + gh + b_hh); c = f c_prev + i g; h = o tanh(c); "
                       "saved = (i, f, g, o)"
                     : "(r,z) = s(gx + b_ih + gh + b_hh); n = tanh(gx_n + b_in + r (gh_n + b_hn)); "
                       "h = (1-z) n + z h_prev; saved = (r, z, n, gh_n + b_hn)";
  p.axes = {"N", "H"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.tensors = [lstm, G](const Problem& problem) {
    const std::int64_t N = problem.shape.at("N"), H = problem.shape.at("H");
    const DType t = problem.dtype;
    const double k = 1 / std::sqrt(static_cast<double>(H));  // the layer's bias range
    std::vector<TensorSpec> specs = {{"gx", DType::f32, {N, G * H}, TensorRole::input, -1, 1},
                                     {"gh", DType::f32, {N, G * H}, TensorRole::input, -1, 1},
                                     {"b_ih", t, {G * H}, TensorRole::input, -k, k},
                                     {"b_hh", t, {G * H}, TensorRole::input, -k, k}};
    if (lstm) specs.push_back({"c_prev", DType::f32, {N, H}, TensorRole::input, -1, 1});
    else specs.push_back({"h_prev", t, {N, H}, TensorRole::input, -1, 1});
    specs.push_back({"h", t, {N, H}, TensorRole::output});
    if (lstm) specs.push_back({"c", DType::f32, {N, H}, TensorRole::output});
    specs.push_back({"saved", DType::f32, {N, kr::kSavedGates * H}, TensorRole::output});
    return specs;
  };
  p.reference = [lstm](const Problem& problem, std::span<const double>, HostTensors& t) {
    const std::int64_t N = problem.shape.at("N"), H = problem.shape.at("H");
    const reference::Rounding round_h = reference::rounding_for(problem.dtype);
    if (lstm)
      reference::lstm_cell_forward(N, H, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(), round_h,
                                   t[5].data(), t[6].data(), t[7].data());
    else
      reference::gru_cell_forward(N, H, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(), round_h,
                                  t[5].data(), t[6].data());
  };
  p.cost = [lstm, tensors = p.tensors](const Problem& problem) {
    const double units = static_cast<double>(problem.shape.at("N") * problem.shape.at("H"));
    // Per unit, tanh and sigmoid one operation each. LSTM: the four gate sums 12, five
    // activations, c 3, h 1. GRU: r's and z's sums 6, b_hn 1, the candidate's sum and product 3,
    // three activations, h' 3.
    return Cost{tensor_bytes(tensors(problem)), (lstm ? 21 : 16) * units};
  };
  p.tolerance = cell_forward_tolerance;
  p.default_variant = "fused";
  p.validate_shape = validate_cell_shape;
  return p;
}

Primitive backward_primitive(kr::Cell cell) {
  const bool lstm = cell == kr::Cell::lstm;
  const int G = kr::gate_count(cell);
  Primitive p;
  p.name = lstm ? "lstm_cell.backward" : "gru_cell.backward";
  p.description =
      std::string(lstm ? "LSTM" : "GRU") +
      " cell, one step back: from the saved activations, dy [N, H] and the carried fp32 dh" + (lstm ? ", dc" : "") +
      " -> the fp32 gradients of the gate pre-activations" +
      (lstm ? " [N, 4 H] and dc updated to what reaches c_prev (dh past W_hh is the caller's product)"
            : ", input side and hidden side [N, 3 H], and dh updated to dh z (the part past W_hh is the caller's)");
  p.signature = lstm ? "dc' = dc + (dy + dh) o (1 - tanh^2 c); d_gates = (dc' g i(1-i), dc' c_prev f(1-f), "
                       "dc' i (1-g^2), (dy + dh) tanh(c) o(1-o)); dc = dc' f"
                     : "dn = (dy + dh)(1-z)(1-n^2); dz = (dy + dh)(h_prev - n) z(1-z); dr = dn (gh_n + b_hn) r(1-r); "
                       "d_input = (dr, dz, dn); d_hidden = (dr, dz, r dn); dh = (dy + dh) z";
  p.axes = {"N", "H"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.tensors = [lstm, G](const Problem& problem) {
    const std::int64_t N = problem.shape.at("N"), H = problem.shape.at("H");
    const DType t = problem.dtype;
    std::vector<TensorSpec> specs = {
        {"saved", DType::f32, {N, kr::kSavedGates * H}, TensorRole::input, kSavedLow, kSavedHigh}};
    if (lstm) {
      specs.push_back({"c_prev", DType::f32, {N, H}, TensorRole::input, -1, 1});
      specs.push_back({"c", DType::f32, {N, H}, TensorRole::input, -1, 1});
    } else {
      specs.push_back({"h_prev", DType::f32, {N, H}, TensorRole::input, -1, 1});
    }
    specs.push_back({"dy", t, {N, H}, TensorRole::input, -1, 1});
    // The LSTM's dh is only read (the caller's product d_gates W_hh replaces it); the GRU's
    // becomes dh z. dc is carried in place.
    specs.push_back({"dh", DType::f32, {N, H}, lstm ? TensorRole::input : TensorRole::inout, -1, 1});
    if (lstm) {
      specs.push_back({"dc", DType::f32, {N, H}, TensorRole::inout, -1, 1});
      specs.push_back({"d_gates", DType::f32, {N, G * H}, TensorRole::output});
    } else {
      specs.push_back({"d_input", DType::f32, {N, G * H}, TensorRole::output});
      specs.push_back({"d_hidden", DType::f32, {N, G * H}, TensorRole::output});
    }
    return specs;
  };
  p.reference = [lstm](const Problem& problem, std::span<const double>, HostTensors& t) {
    const std::int64_t N = problem.shape.at("N"), H = problem.shape.at("H");
    if (lstm)
      reference::lstm_cell_backward(N, H, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(), t[5].data(),
                                    t[6].data());
    else
      reference::gru_cell_backward(N, H, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(),
                                   t[5].data());
  };
  p.cost = [lstm, tensors = p.tensors](const Problem& problem) {
    const double units = static_cast<double>(problem.shape.at("N") * problem.shape.at("H"));
    // Per unit, tanh one operation. LSTM: tanh c 1, dh's sum 1, dc' 5, the four gates 16, dc 1.
    // GRU: dh's sum 1, dn 5, dr 4, dz 5, r dn 1, dh z 1.
    return Cost{tensor_bytes(tensors(problem)), (lstm ? 24 : 17) * units};
  };
  p.tolerance = cell_backward_tolerance;
  p.default_variant = "fused";
  p.validate_shape = validate_cell_shape;
  return p;
}

// ---- fused ------------------------------------------------------------------------------------

template <typename T>
LaunchStatus fused_forward(const LaunchArgs& a) {
  const CellProblem c = cell_of(a.problem);
  const auto f32 = [&](std::size_t i) { return static_cast<float*>(a.tensors[i]); };
  const auto typed = [&](std::size_t i) { return static_cast<T*>(a.tensors[i]); };
  const int N = static_cast<int>(c.batch), H = static_cast<int>(c.hidden);
  // LSTM: gx, gh, b_ih, b_hh, c_prev, h, c, saved; GRU: gx, gh, b_ih, b_hh, h_prev, h, saved.
  if (c.cell == kr::Cell::lstm)
    return launch_status(kr::cell_step_saving<T>(c.cell, f32(0), f32(1), typed(2), typed(3), nullptr, f32(4), f32(6),
                                                 f32(7), typed(5), N, H, a.stream));
  return launch_status(kr::cell_step_saving<T>(c.cell, f32(0), f32(1), typed(2), typed(3), typed(4), nullptr, nullptr,
                                               f32(6), typed(5), N, H, a.stream));
}

template <typename T>
LaunchStatus fused_backward(const LaunchArgs& a) {
  const CellProblem c = cell_of(a.problem);
  const auto f32 = [&](std::size_t i) { return static_cast<float*>(a.tensors[i]); };
  const int N = static_cast<int>(c.batch), H = static_cast<int>(c.hidden);
  // LSTM: saved, c_prev, c, dy, dh, dc, d_gates; the kernel only reads the LSTM's dh.
  if (c.cell == kr::Cell::lstm)
    return launch_status(kr::cell_backward_step<T>(c.cell, f32(0), f32(1), f32(2), nullptr,
                                                   static_cast<const T*>(a.tensors[3]), f32(4), f32(5), f32(6),
                                                   nullptr, N, H, a.stream));
  // GRU: saved, h_prev, dy, dh, d_input, d_hidden.
  return launch_status(kr::cell_backward_step<T>(c.cell, f32(0), nullptr, nullptr, f32(1),
                                                 static_cast<const T*>(a.tensors[2]), f32(3), nullptr, f32(4), f32(5),
                                                 N, H, a.stream));
}

void add_fused(Catalogue& cat, const std::string& primitive, bool forward) {
  Variant v;
  v.primitive = primitive;
  v.name = "fused";
  v.description = forward ? "one thread a unit, every gate in registers: the stepwise rungs' cell kernel keeping the "
                            "activations (cell_step_saving)"
                          : "one thread a unit, every gate's gradient in registers: the stepwise backward's cell "
                            "kernel (cell_backward_step)";
  v.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  if (forward)
    v.launch = [](const LaunchArgs& a) {
      return with_storage_type(a.problem.dtype, "the recurrent cells",
                               [&](auto tag) { return fused_forward<decltype(tag)>(a); });
    };
  else
    v.launch = [](const LaunchArgs& a) {
      return with_storage_type(a.problem.dtype, "the recurrent cells",
                               [&](auto tag) { return fused_backward<decltype(tag)>(a); });
    };
  cat.add(v);
}

}  // namespace

void register_rnn_cell(Catalogue& cat) {
  for (const kr::Cell cell : {kr::Cell::lstm, kr::Cell::gru}) {
    Primitive forward = forward_primitive(cell);
    const std::string forward_name = forward.name;
    cat.add(std::move(forward));
    add_fused(cat, forward_name, true);
    Primitive backward = backward_primitive(cell);
    const std::string backward_name = backward.name;
    cat.add(std::move(backward));
    add_fused(cat, backward_name, false);
  }
}

}  // namespace shapetune
