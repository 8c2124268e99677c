// The recurrent family: lstm.forward and gru.forward, one layer over a whole sequence, PyTorch's
// and cuDNN's formulas and layouts (baselines/reference.hpp), so weights move between shapetune,
// cuDNN and PyTorch unchanged. The ladder (kernels/rnn/):
//   stepwise:   the input projection of all T steps as one GEMM, then per step a recurrent GEMM
//               and the fused cell kernel: 2 T + 1 launches (the original work's design);
//   stepwise_graph: the same launches captured once into a CUDA graph and replayed, one launch a
//               call: at small N H the host's launch overhead, not the GPU, sets a step's time;
//   persistent: the same input GEMM, then one cooperative launch for every step, W_hh on chip;
//   persistent_registers: persistent with W_hh in registers, a warp a hidden unit (H <= 512): only
//               h is read from shared memory, where persistent reads W's slice every step too;
//   persistent_block: the same input GEMM, then one ordinary launch of independent blocks, each
//               holding all of W_hh and running its batch rows: no exchange (small H);
//   persistent_cluster (sm_90a): the same input GEMM, then one launch of independent clusters,
//               each a slice of the batch, W_hh split over a cluster's blocks and h exchanged
//               through distributed shared memory (stores and a cluster barrier a step, or st.async
//               on mbarriers; no grid barrier);
//   cudnn:      cudnnRNNForward with each algorithm cuDNN has (the baseline).
// dtypes f32, f16, bf16 and tf32 (variants/rnn_problem.hpp): tf32 runs every kernel as f32 and
// takes the cuBLAS products (stepwise's all, the persistent rungs' input projection) and cuDNN's
// in TF32; the persistent rungs' recurrent products stay fp32 FMAs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>

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

// Tensor order. LSTM: x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, h_t, c_t; GRU: the same without c0
// and c_t.
template <typename T>
kr::Layer<T> layer_of(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const bool lstm = r.cell == kr::Cell::lstm;
  const auto in = [&](int i) { return static_cast<const T*>(a.tensors[static_cast<std::size_t>(i)]); };
  const auto out = [&](int i) { return static_cast<T*>(a.tensors[static_cast<std::size_t>(i)]); };
  kr::Layer<T> l;
  l.cell = r.cell;
  l.x = in(0);
  l.h0 = in(1);
  const int w = lstm ? 3 : 2;  // index of w_ih
  l.c0 = lstm ? in(2) : nullptr;
  l.w_hh = in(w + 1);
  l.b_ih = in(w + 2);
  l.b_hh = in(w + 3);
  l.y = out(w + 4);
  l.h_t = out(w + 5);
  l.c_t = lstm ? out(w + 6) : nullptr;
  l.steps = static_cast<int>(r.steps);
  l.batch = static_cast<int>(r.batch);
  l.input = static_cast<int>(r.input);
  l.hidden = static_cast<int>(r.hidden);
  return l;
}
const void* w_ih_of(const LaunchArgs& a) { return a.tensors[rnn_of(a.problem).cell == kr::Cell::lstm ? 3 : 2]; }

// The fp32 input gates of every step, [T, N, G H], at the start of both rungs' workspaces.
std::size_t input_gates_bytes(const RnnProblem& r) {
  return align256(static_cast<std::size_t>(r.steps * r.batch * r.gates * r.hidden) * sizeof(float));
}

Support validate_rnn_shape(const Shape& s) {
  const std::int64_t T = s.at("T"), N = s.at("N"), D = s.at("D"), H = s.at("H");
  if (std::max({T, N, D, H}) > INT_MAX / 4) return Support::no("T, N, D and H must be below 2^29");
  if (T * N * 4 * H > (std::int64_t{1} << 34)) return Support::no("T N 4H must be at most 2^34 (the fp32 gates)");
  return Support::yes();
}

// Errors of one step are a few fp32 ulps (f32) or a flip of the last bit where a 16-bit h rounds
// the other way (one ulp at |h| up to 1: 4.9e-4 f16, 3.9e-3 bf16), which later steps carry on;
// the recurrences contract, so that stays of the same size over 1000 steps (a NumPy fp32 model of
// these shapes: 2.6e-7, 4.9e-4, 3.9e-3 at most). The tolerance grows with log2 T all the same.
//
// tf32 is f32 with its products' operands rounded to TF32 (10-bit mantissas): each product is off
// by up to 2^-9 of itself. A gate's pre-activation sums D + H products w x, w h with |w| <= k =
// 1/sqrt(H) (PyTorch's initialisation range) and |x|, |h| <= 1, so it is off by a random walk that
// the GEMM family's bound, scaled to products of size k, holds at over 7 sigma (variants/gemm.cpp):
// A = 2^-9 k sqrt(D + H) = 2^-9 sqrt(1 + D/H). A step's h moves by about as much as one gate: with
// e the errors of the gates' pre-activations, LSTM dh = e_o s'(o) tanh(c) + o tanh'(c) dc, dc =
// e_f s'(f) c_prev + e_i s'(i) g + e_g tanh'(g) i; GRU dh = e_z s'(z) (h_prev - n) + (1 - z)
// tanh'(n) (e_n + e_r s'(r) (W_hn h + b_hn)); the sigmoids' slope is at most 1/4, tanh's 1, and
// c, g, h, n are about 1 at most, so the independent e's weigh in with squares summing to about
// 1.2: about 1.1 A at the same 7 sigma. Through the recurrence that does not pile up with T as a
// sum would: each step's rounding is fresh (a new h, a new x), and what earlier steps left is
// multiplied every step by the recurrence's gain, below 1 where the recurrences contract (as
// above), so the steps' errors form a geometric series, 1 / sqrt(1 - gain^2) times one step's at
// random signs, summed within a few steps. The other dtypes' factor 1 + log2(T) / 4 stands for it
// (1 at T = 1, where nothing is carried; 2.5 at T = 64; 3.5 at T = 1000: a gain of 0.9 or so).
// So tf32's atol is f32's plus A growth, 6.9e-3 at T = 64, D = H = 128 (above f16's 2.5e-3: there
// h's storage alone rounds, here every operand of every product); its rtol is f32's, since the
// error is not relative to h (an h near 0 is as far off as any). A C++ model of both layers, fp32
// with TF32 operands truncated (the worse case) or rounded, at the GPU tests' shapes and T up to
// 1000 (D/H up to 32), stayed within 15% of this atol, and its error grew about 2x from T = 1 to
// T = 1000.
Tolerance rnn_tolerance(DType dtype, std::int64_t steps, std::int64_t input, std::int64_t hidden) {
  const double growth = 1 + std::log2(static_cast<double>(std::max<std::int64_t>(steps, 1))) / 4;
  switch (dtype) {
    case DType::f16: return Tolerance{1e-3 * growth, 2e-3 * growth};
    case DType::bf16: return Tolerance{8e-3 * growth, 1.6e-2 * growth};
    case DType::tf32: {
      const double width = static_cast<double>(input) / static_cast<double>(std::max<std::int64_t>(hidden, 1));
      const double gate = 0x1p-9 * std::sqrt(1 + width);  // A
      return Tolerance{(4e-6 + gate) * growth, 2e-5 * growth};
    }
    default: return Tolerance{4e-6 * growth, 2e-5 * growth};
  }
}

Primitive rnn_primitive(kr::Cell cell) {
  const bool lstm = cell == kr::Cell::lstm;
  const int G = kr::gate_count(cell);
  Primitive p;
  p.name = lstm ? "lstm.forward" : "gru.forward";
  p.description = std::string(lstm ? "LSTM" : "GRU") +
                  " layer forward over a sequence: x [T, N, D] -> y [T, N, H], fp32 state and accumulation; "
                  "tf32: fp32 tensors, products allowed in TF32";
  p.signature = lstm ? "(i,f,g,o) = (s,s,tanh,s)(W_ih x + b_ih + W_hh h + b_hh); c' = f c + i g; h' = o tanh(c')"
                     : "(r,z) = s(W_i x + b_i + W_h h + b_h); n = tanh(W_in x + b_in + r (W_hn h + b_hn)); "
                       "h' = (1-z) n + z h";
  p.axes = {"T", "N", "D", "H"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16, DType::tf32};
  p.tensors = [lstm, G](const Problem& problem) {
    const auto T = problem.shape.at("T"), N = problem.shape.at("N"), D = problem.shape.at("D"),
               H = problem.shape.at("H");
    const DType t = storage_of(problem.dtype);
    const double k = 1 / std::sqrt(static_cast<double>(H));  // PyTorch's initialisation range
    std::vector<TensorSpec> specs = {{"x", t, {T, N, D}, TensorRole::input, -1, 1},
                                     {"h0", t, {N, H}, TensorRole::input, -0.5, 0.5}};
    if (lstm) specs.push_back({"c0", t, {N, H}, TensorRole::input, -0.5, 0.5});
    specs.push_back({"w_ih", t, {G * H, D}, TensorRole::input, -k, k});
    specs.push_back({"w_hh", t, {G * H, H}, TensorRole::input, -k, k});
    specs.push_back({"b_ih", t, {G * H}, TensorRole::input, -k, k});
    specs.push_back({"b_hh", t, {G * H}, TensorRole::input, -k, k});
    specs.push_back({"y", t, {T, N, H}, TensorRole::output});
    specs.push_back({"h_t", t, {N, H}, TensorRole::output});
    if (lstm) specs.push_back({"c_t", t, {N, H}, TensorRole::output});
    return specs;
  };
  p.reference = [lstm](const Problem& problem, std::span<const double>, HostTensors& t) {
    const reference::RnnShape s{problem.shape.at("T"), problem.shape.at("N"), problem.shape.at("D"),
                                problem.shape.at("H")};
    const reference::Rounding round_h = reference::rounding_for(problem.dtype);
    if (lstm)
      reference::lstm_forward(s, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(), t[5].data(),
                              t[6].data(), round_h, t[7].data(), t[8].data(), t[9].data());
    else
      reference::gru_forward(s, t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(), t[5].data(), round_h,
                             t[6].data(), t[7].data());
  };
  p.cost = [lstm, G](const Problem& problem) {
    const double T = static_cast<double>(problem.shape.at("T")), N = static_cast<double>(problem.shape.at("N")),
                 D = static_cast<double>(problem.shape.at("D")), H = static_cast<double>(problem.shape.at("H"));
    const double element = static_cast<double>(dtype_size(problem.dtype));
    // Each tensor once: x and y, the weights and biases, the states in and out.
    const double bytes = (T * N * D + T * N * H + G * H * (D + H) + 2 * G * H + (lstm ? 4 : 2) * N * H) * element;
    // The products; the gates' nonlinearities and the cell are a few dozen FLOPs a unit, not counted.
    return Cost{bytes, 2 * T * N * G * H * (D + H)};
  };
  p.problem_tolerance = [](const Problem& problem) {
    return rnn_tolerance(problem.dtype, problem.shape.at("T"), problem.shape.at("D"), problem.shape.at("H"));
  };
  // What `list` shows: at T = 64, D = H = 128 (the first target shape's).
  p.tolerance = [](DType dtype) { return rnn_tolerance(dtype, 64, 128, 128); };
  p.default_variant = "stepwise";
  p.validate_shape = validate_rnn_shape;
  return p;
}

// ---- stepwise ---------------------------------------------------------------------------------

std::size_t stepwise_workspace(const Problem& p, const Config&) {
  const RnnProblem r = rnn_of(p);
  return input_gates_bytes(r) + align256(static_cast<std::size_t>(r.batch * r.gates * r.hidden) * sizeof(float)) +
         align256(static_cast<std::size_t>(r.batch * r.hidden) * sizeof(float));
}

template <typename T>
LaunchStatus stepwise(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const kr::Layer<T> l = layer_of<T>(a);
  char* ws = static_cast<char*>(a.workspace);
  auto* input_gates = reinterpret_cast<float*>(ws);
  auto* recurrent_gates = reinterpret_cast<float*>(ws + input_gates_bytes(r));
  auto* c_state = reinterpret_cast<float*>(
      ws + input_gates_bytes(r) + align256(static_cast<std::size_t>(r.batch * r.gates * r.hidden) * sizeof(float)));
  const std::int64_t GH = r.gates * r.hidden, NH = r.batch * r.hidden;
  if (LaunchStatus s = library_status(rnn_times_transposed(a.libraries, a.stream, a.problem.dtype, r.steps * r.batch,
                                                            GH, r.input, l.x, w_ih_of(a), input_gates));
      !s.ok)
    return s;
  if (r.cell == kr::Cell::lstm)
    if (LaunchStatus s = launch_status(kr::widen(l.c0, c_state, NH, a.stream)); !s.ok) return s;
  for (std::int64_t t = 0; t < r.steps; ++t) {
    const T* h_prev = t == 0 ? l.h0 : l.y + (t - 1) * NH;
    if (LaunchStatus s = library_status(rnn_times_transposed(a.libraries, a.stream, a.problem.dtype, r.batch, GH,
                                                              r.hidden, h_prev, l.w_hh, recurrent_gates));
        !s.ok)
      return s;
    if (LaunchStatus s = launch_status(kr::cell_step(r.cell, input_gates + t * r.batch * GH, recurrent_gates, l.b_ih,
                                                     l.b_hh, h_prev, c_state, l.y + t * NH, l.batch, l.hidden,
                                                     a.stream));
        !s.ok)
      return s;
  }
  if (cudaError_t e = cudaMemcpyAsync(l.h_t, l.y + (r.steps - 1) * NH, static_cast<std::size_t>(NH) * sizeof(T),
                                      cudaMemcpyDeviceToDevice, a.stream);
      e != cudaSuccess)
    return launch_status(e);
  if (r.cell == kr::Cell::lstm) return launch_status(kr::narrow(c_state, l.c_t, NH, a.stream));
  return LaunchStatus::success();
}

// ---- persistent -------------------------------------------------------------------------------

// The input projection of every step at once, input_gates = x W_ih^T (fp32; TF32 products for
// tf32 problems), which both persistent rungs start from.
LaunchStatus project_inputs(const LaunchArgs& a, const RnnProblem& r, const void* x, float* input_gates) {
  return library_status(rnn_times_transposed(a.libraries, a.stream, a.problem.dtype, r.steps * r.batch,
                                             r.gates * r.hidden, r.input, x, w_ih_of(a), input_gates));
}

kr::PersistentConfig persistent_config(const Config& c) {
  return {cfg(c, "units_per_block"), cfg(c, "block_size"), cfg(c, "batch_groups"), cfg(c, "k_split")};
}

// Whether a cooperative grid's blocks get the shared memory they need (`what` names what it holds)
// and can be resident at once. The count of blocks an SM holds is estimated from shared memory and
// threads here; the launch asks the occupancy API, which knows the registers too, and refuses what
// it cannot co-schedule.
Support grid_fits(std::size_t shared_bytes, const std::string& what, int threads, int blocks,
                  const DeviceLimits& limits) {
  if (static_cast<std::int64_t>(shared_bytes) > limits.shared_memory_per_block_optin)
    return Support::no(what + " need " + std::to_string(shared_bytes) + " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin));
  const std::int64_t shared_per_sm = limits.shared_memory_per_block_optin + 1024;
  const std::int64_t by_shared = shared_per_sm / (static_cast<std::int64_t>(shared_bytes) + 1024);
  const std::int64_t per_sm = std::min<std::int64_t>({by_shared, 2048 / threads, 32});
  if (blocks > per_sm * limits.sm_count)
    return Support::no("the grid of " + std::to_string(blocks) + " blocks cannot be resident at once (at most " +
                       std::to_string(per_sm * limits.sm_count) + " here)");
  return Support::yes();
}

// Whether the plan can be launched at all, and whether the device can hold its grid at once.
Support persistent_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const RnnProblem r = rnn_of(p);
  const kr::PersistentConfig pc = persistent_config(c);
  if (pc.batch_groups > r.batch) return Support::no("more batch groups than batch rows");
  if (pc.units_per_block > r.hidden) return Support::no("more units per block than hidden units");
  const kr::PersistentPlan plan = kr::persistent_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), pc);
  if (plan.rows_per_thread == 0)
    return Support::no("a thread would hold more than " + std::to_string(kr::kMaxRowsPerThread) +
                       " batch rows (more threads or batch groups)");
  return grid_fits(plan.shared_bytes, "the W_hh slice and h rows", pc.block_size, plan.blocks, limits);
}

std::size_t persistent_workspace(const Problem& p, const Config&) {
  const RnnProblem r = rnn_of(p);
  return input_gates_bytes(r) + kr::persistent_workspace_bytes(static_cast<int>(r.batch), static_cast<int>(r.hidden));
}

// The grid rungs' launch: the input projection, then `recurrence` (layer, input gates, its own
// workspace after the gates'), one cooperative kernel; a grid the device cannot hold is a refusal.
template <typename T, typename Recurrence>
LaunchStatus project_then_cooperative(const LaunchArgs& a, Recurrence recurrence) {
  const RnnProblem r = rnn_of(a.problem);
  const kr::Layer<T> l = layer_of<T>(a);
  auto* input_gates = static_cast<float*>(a.workspace);
  if (LaunchStatus s = project_inputs(a, r, l.x, input_gates); !s.ok) return s;
  const cudaError_t e = recurrence(l, input_gates, static_cast<char*>(a.workspace) + input_gates_bytes(r));
  if (e == cudaErrorCooperativeLaunchTooLarge)
    return LaunchStatus::refused("the device cannot hold every block of the grid at once");
  return launch_status(e);
}

template <typename T>
LaunchStatus persistent(const LaunchArgs& a) {
  return project_then_cooperative<T>(a, [&a](const kr::Layer<T>& l, const float* gates, void* ws) {
    return kr::persistent_forward(l, gates, ws, persistent_config(a.config), a.stream);
  });
}

// ---- persistent_registers -----------------------------------------------------------------------

kr::RegisterConfig register_config(const Config& c) { return {cfg(c, "units_per_block"), cfg(c, "batch_groups")}; }

// What the kernel is built for (H <= 512, at most 64 rows a group), and grid_fits.
Support register_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const RnnProblem r = rnn_of(p);
  const kr::RegisterConfig rc = register_config(c);
  if (r.hidden > kr::kMaxRegisterHidden)
    return Support::no("H " + std::to_string(r.hidden) + " > " + std::to_string(kr::kMaxRegisterHidden) +
                       ": a lane holds W_hh in 4 chunks of 128 columns at most");
  if (rc.batch_groups > r.batch) return Support::no("more batch groups than batch rows");
  if (rc.units_per_block > r.hidden) return Support::no("more units per block than hidden units");
  const kr::RegisterPlan plan = kr::register_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), rc);
  if (plan.blocks == 0)
    return Support::no("a batch group would have more than " + std::to_string(kr::kMaxRegisterRows) +
                       " rows (more batch groups)");
  return grid_fits(plan.shared_bytes, "the h rows and gates", plan.threads, plan.blocks, limits);
}

template <typename T>
LaunchStatus persistent_registers(const LaunchArgs& a) {
  return project_then_cooperative<T>(a, [&a](const kr::Layer<T>& l, const float* gates, void* ws) {
    return kr::register_forward(l, gates, ws, register_config(a.config), a.stream);
  });
}

// ---- persistent_block ---------------------------------------------------------------------------

kr::BlockConfig block_config(const Config& c) {
  return {cfg(c, "rows_per_block"), cfg(c, "k_split"),     cfg(c, "register_quads"),
          cfg(c, "project"),        cfg(c, "unit_groups"), cfg(c, "group_units")};
}

Support block_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const RnnProblem r = rnn_of(p);
  const kr::BlockConfig bc = block_config(c);
  if (bc.rows_per_block > 1 && bc.rows_per_block / 2 >= r.batch)
    return Support::no("rows_per_block " + std::to_string(bc.rows_per_block) + " is the same single block as a "
                       "smaller one for batch " + std::to_string(r.batch));
  const kr::BlockPlan plan = kr::block_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), bc);
  if (!bc.unit_groups && bc.group_units != 1)
    return Support::no("group_units is an axis of the unit groups (unit_groups 1); the row layout has 1");
  if (plan.blocks == 0 && bc.unit_groups) {
    const int units = bc.group_units;
    if (bc.k_split == 1) return Support::no("unit groups split a unit over 2, 4 or 8 lanes (k_split 1 is the row layout)");
    if (units == 2 && bc.rows_per_block != 1) return Support::no("two units a group are built for 1 row a block");
    if (bc.rows_per_block > 2 || bc.rows_per_block * units > bc.k_split)
      return Support::no("unit groups run 1 or 2 rows a block, at most k_split / group_units (a lane applies the "
                         "cell to one row)");
    if (bc.register_quads % (units * r.gates) != 0)
      return Support::no("unit groups keep whole chunks (all " + std::to_string(units * r.gates) +
                         " gate rows of the group) in registers: register_quads a multiple of " +
                         std::to_string(units * r.gates));
    const std::int64_t threads = ((r.hidden + units - 1) / units * bc.k_split + 31) / 32 * 32;
    const int most = kr::unit_group_thread_cap(bc.register_quads);
    if (threads > most)
      return Support::no(std::to_string(threads) + " threads (H x k_split); with " +
                         std::to_string(bc.register_quads) + " register chunks the kernel is built for at most " +
                         std::to_string(most));
    return Support::no("more register chunks than a lane's " +
                       std::to_string(units * r.gates * ((r.hidden + 4 * bc.k_split - 1) / (4 * bc.k_split))) +
                       " has");
  }
  if (plan.blocks == 0) {
    if (bc.k_split > 4) return Support::no("the row layout (unit_groups 0) splits a gate row over 1, 2 or 4 threads");
    const bool wide = bc.register_quads > 16;
    const int most = wide ? kr::kMaxWideRegisterThreads : kr::kMaxBlockThreads;
    if (r.gates * r.hidden * bc.k_split > most)
      return Support::no(std::to_string(r.gates * r.hidden * bc.k_split) + " threads (G H x k_split); the kernel is "
                         "built for at most " + std::to_string(most) + (wide ? " with over 16 register chunks" : ""));
    if (wide && bc.rows_per_block > 2)
      return Support::no("over 16 register chunks are built for at most 2 rows a block");
    if (bc.rows_per_block * r.hidden > r.gates * r.hidden * bc.k_split)
      return Support::no("the cell needs rows_per_block x H = " + std::to_string(bc.rows_per_block * r.hidden) +
                         " threads, more than the block's G H x k_split");
    return Support::no("more register chunks than a thread's slice of " +
                       std::to_string((r.hidden + bc.k_split - 1) / bc.k_split) + " columns has");
  }
  if (static_cast<std::int64_t>(plan.shared_bytes) > limits.shared_memory_per_block_optin)
    return Support::no("W_hh's chunks outside registers, the h rows (and the partial sums) need " +
                       std::to_string(plan.shared_bytes) + " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin) + " (more register_quads hold more)");
  return Support::yes();
}

template <typename T>
LaunchStatus persistent_block(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const kr::Layer<T> l = layer_of<T>(a);
  auto* input_gates = static_cast<float*>(a.workspace);
  const kr::BlockConfig c = block_config(a.config);
  kr::BlockProjection<T> projection;
  if (c.project) {
    projection.w_ih = static_cast<const T*>(w_ih_of(a));
    projection.ready = reinterpret_cast<int*>(static_cast<char*>(a.workspace) + input_gates_bytes(r));
  } else if (LaunchStatus s = project_inputs(a, r, l.x, input_gates); !s.ok) {
    return s;
  }
  const cudaError_t e = kr::block_forward(l, input_gates, c, projection, a.stream);
  if (e == cudaErrorCooperativeLaunchTooLarge)
    return LaunchStatus::refused("the device holds no block beside the recurrence's to project the inputs");
  return launch_status(e);
}

// The input gates, then (project = 1) a count a step of their finished tiles.
std::size_t block_workspace(const Problem& p, const Config&) {
  const RnnProblem r = rnn_of(p);
  return input_gates_bytes(r) + align256(static_cast<std::size_t>(r.steps) * sizeof(int));
}

// ---- persistent_cluster -------------------------------------------------------------------------

kr::ClusterConfig cluster_config(const Config& c) {
  return {cfg(c, "cluster_size"), cfg(c, "rows_per_cluster"), cfg(c, "k_split"), cfg(c, "rows_per_thread"),
          cfg(c, "exchange")};
}

// Clusters and distributed shared memory exist from sm_90 on; the kernel is built for sm_90a
// with the Hopper-only library, so it runs on compute capability 9.0 alone.
Support cluster_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  if (limits.compute_capability != 90)
    return Support::no("needs sm_90a (thread block clusters, distributed shared memory; built for compute capability "
                       "9.0 exactly); the device is sm_" + std::to_string(limits.compute_capability));
  const RnnProblem r = rnn_of(p);
  const kr::ClusterConfig cc = cluster_config(c);
  if (cc.rows_per_cluster > 1 && cc.rows_per_cluster / 2 >= r.batch)
    return Support::no("rows_per_cluster " + std::to_string(cc.rows_per_cluster) +
                       " is the same single cluster as a smaller one for batch " + std::to_string(r.batch));
  if (cc.rows_per_thread > std::min<std::int64_t>(cc.rows_per_cluster, r.batch))
    return Support::no("more rows per thread than the cluster has rows");
  if (cc.cluster_size > r.hidden) return Support::no("more blocks in a cluster than hidden units");
  const kr::ClusterPlan plan = kr::cluster_plan(r.cell, static_cast<int>(r.batch), static_cast<int>(r.hidden), cc);
  if (plan.threads == 0) return Support::no("not a valid cluster config");
  if (static_cast<std::int64_t>(plan.shared_bytes) > limits.shared_memory_per_block_optin)
    return Support::no("a block's W_hh slice and h buffers need " + std::to_string(plan.shared_bytes) +
                       " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin) + " (a larger cluster holds less each)");
  if (plan.threads > kr::kMaxClusterThreads)
    return Support::no(std::to_string(plan.threads) + " threads a block (units x rows / rows_per_thread x k_split); "
                       "the kernel is built for at most " + std::to_string(kr::kMaxClusterThreads));
  return Support::yes();
}

std::size_t cluster_workspace(const Problem& p, const Config&) { return input_gates_bytes(rnn_of(p)); }

template <typename T>
LaunchStatus persistent_cluster(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const kr::Layer<T> l = layer_of<T>(a);
  auto* input_gates = static_cast<float*>(a.workspace);
  if (LaunchStatus s = project_inputs(a, r, l.x, input_gates); !s.ok) return s;
  const cudaError_t e = kr::cluster_forward(l, input_gates, cluster_config(a.config), a.stream);
  if (e == cudaErrorCooperativeLaunchTooLarge)
    return LaunchStatus::refused("the device cannot place one cluster of this size with this much shared memory");
  if (e == cudaErrorNotSupported) return LaunchStatus::refused("needs compute capability 9.0");
  return launch_status(e);
}

// ---- cudnn ------------------------------------------------------------------------------------

LaunchStatus cudnn_forward(const LaunchArgs& a) {
  const RnnProblem r = rnn_of(a.problem);
  const bool lstm = r.cell == kr::Cell::lstm;
  const int w = lstm ? 3 : 2;
  CudnnRnnForward f;
  f.cell = lstm ? CudnnRnnCell::lstm : CudnnRnnCell::gru;
  f.dtype = a.problem.dtype;
  f.steps = r.steps, f.batch = r.batch, f.input = r.input, f.hidden = r.hidden;
  f.algo = cfg(a.config, "algo");
  f.x = a.tensors[0];
  f.h0 = a.tensors[1];
  f.c0 = lstm ? a.tensors[2] : nullptr;
  f.w_ih = a.tensors[static_cast<std::size_t>(w)];
  f.w_hh = a.tensors[static_cast<std::size_t>(w + 1)];
  f.b_ih = a.tensors[static_cast<std::size_t>(w + 2)];
  f.b_hh = a.tensors[static_cast<std::size_t>(w + 3)];
  f.y = a.tensors[static_cast<std::size_t>(w + 4)];
  f.h_t = a.tensors[static_cast<std::size_t>(w + 5)];
  f.c_t = lstm ? a.tensors[static_cast<std::size_t>(w + 6)] : nullptr;
  return library_status(cudnn_rnn_forward(a.libraries, a.stream, f));
}

template <LaunchStatus (*kFloat)(const LaunchArgs&), LaunchStatus (*kHalf)(const LaunchArgs&),
          LaunchStatus (*kBf16)(const LaunchArgs&)>
LaunchStatus by_type(const LaunchArgs& a) {
  switch (storage_of(a.problem.dtype)) {
    case DType::f32: return kFloat(a);
    case DType::f16: return kHalf(a);
    case DType::bf16: return kBf16(a);
    default: return LaunchStatus::failure("the recurrent family has no " + std::string(dtype_name(a.problem.dtype)) +
                                          " variant");
  }
}

void add_variants(Catalogue& cat, const std::string& primitive) {
  Variant s;
  s.primitive = primitive;
  s.name = "stepwise";
  s.description = "input projection as one GEMM, then per step a recurrent GEMM (cuBLAS) and the fused cell kernel";
  s.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  s.workspace_bytes = stepwise_workspace;
  s.launch = by_type<stepwise<float>, stepwise<__half>, stepwise<__nv_bfloat16>>;
  cat.add(s);

  Variant g;
  g.primitive = primitive;
  g.name = "stepwise_graph";
  g.description = "stepwise's launches captured once into a CUDA graph (cached per shape and pointers) and replayed: "
                  "one launch a call instead of 2 T + 2 (GRU) or 2 T + 4 (LSTM)";
  g.supports = s.supports;
  g.workspace_bytes = stepwise_workspace;
  g.launch = [](const LaunchArgs& a) {
    return launch_as_graph("stepwise_graph", a,
                           [&a] { return by_type<stepwise<float>, stepwise<__half>, stepwise<__nv_bfloat16>>(a); });
  };
  cat.add(g);

  Variant p;
  p.primitive = primitive;
  p.name = "persistent";
  p.description = "one cooperative launch for all steps: W_hh slices in shared memory, h through L2, a grid barrier a step";
  // k_split 1 is the rung as first built (and what winners stored before the axis existed complete
  // to); more lanes a unit shorten each step's dot-product chain where H is large.
  p.params = ParamSpace({{"units_per_block", {1, 2, 4, 8, 16}, "hidden units a block owns (their G gate rows of W_hh)"},
                         {"block_size", {64, 128, 256, 512}, "threads per block"},
                         {"batch_groups", {1, 2, 4, 8}, "the batch split over groups of blocks (each its own W_hh slices)"},
                         {"k_split", {1, 4, 8, 16}, "lanes that share one unit's dot products (summed by shuffles)"}},
                        [](const Config& c) {
                          return c.at("block_size") % (c.at("units_per_block") * c.at("k_split")) == 0;
                        },
                        "block_size a multiple of units_per_block x k_split");
  p.default_config = Config({{"units_per_block", 2}, {"block_size", 128}, {"batch_groups", 1}, {"k_split", 1}});
  p.supports = persistent_supports;
  p.workspace_bytes = persistent_workspace;
  p.launch = by_type<persistent<float>, persistent<__half>, persistent<__nv_bfloat16>>;
  cat.add(p);

  Variant pr;
  pr.primitive = primitive;
  pr.name = "persistent_registers";
  pr.description = "persistent with W_hh in registers: a warp a hidden unit, its G gate rows across the lanes, h "
                   "copied into shared memory (cp.async) each step, a grid barrier a step (H <= 512)";
  pr.params = ParamSpace({{"units_per_block", {2, 4, 8}, "warps a block, one hidden unit each"},
                          {"batch_groups", {1, 2, 4, 8},
                           "the batch split over groups of blocks (at most 64 rows each)"}});
  pr.default_config = Config({{"units_per_block", 8}, {"batch_groups", 2}});
  pr.supports = register_supports;
  pr.workspace_bytes = persistent_workspace;
  pr.launch = by_type<persistent_registers<float>, persistent_registers<__half>, persistent_registers<__nv_bfloat16>>;
  cat.add(pr);

  Variant pb;
  pb.primitive = primitive;
  pb.name = "persistent_block";
  pb.description = "one thread block holds all of W_hh (registers and shared memory) and runs every step for its own "
                   "batch rows: no exchange between blocks, one or two block barriers a step";
  pb.params = ParamSpace(
      {{"rows_per_block", {1, 2, 4}, "batch rows a block runs (blocks = N / this)"},
       {"k_split", {1, 2, 4, 8}, "threads (lanes) that split one dot product"},
       {"register_quads", {0, 8, 16, 24, 32},
        "16-byte chunks of a thread's share of W_hh in registers (the rest in shared memory); rows: 24 and 32 "
        "with at most 384 threads and 2 rows a block; unit groups: a multiple of G"},
       {"project", {0, 1},
        "0: the input projection (cuBLAS) before the launch; 1: the launch's spare blocks project a step at a "
        "time ahead of the recurrence (a cooperative launch)"},
       {"unit_groups", {0, 1},
        "0: a thread a gate row's slice (G H x k_split <= 512 threads), sums through shared memory, two barriers a "
        "step; 1: k_split lanes a group of hidden units, each holding all their G gate rows over its column "
        "chunks, sums by shuffles, one barrier a step"},
       {"group_units", {1, 2},
        "unit_groups 1: hidden units a lane group holds; 2 (1 row a block) feeds each h value loaded from shared "
        "memory to twice the FMAs, halving the loads that bound a step at H 128"}});
  pb.default_config = Config({{"rows_per_block", 2},
                              {"k_split", 1},
                              {"register_quads", 16},
                              {"project", 0},
                              {"unit_groups", 0},
                              {"group_units", 1}});
  pb.supports = block_supports;
  pb.workspace_bytes = block_workspace;
  pb.launch = by_type<persistent_block<float>, persistent_block<__half>, persistent_block<__nv_bfloat16>>;
  cat.add(pb);

  Variant pc;
  pc.primitive = primitive;
  pc.name = "persistent_cluster";
  pc.description = "sm_90a: the batch split over independent thread block clusters, W_hh split over a cluster's "
                   "blocks in shared memory, h exchanged through distributed shared memory each step (stores and a "
                   "cluster barrier, or st.async on mbarriers)";
  pc.params = ParamSpace(
      {{"cluster_size", {4, 8, 16}, "blocks a cluster splits W_hh over (16 is a non-portable size)"},
       {"rows_per_cluster", {1, 2, 4, 8, 16}, "batch rows a cluster owns (the batch splits over N / this clusters)"},
       {"k_split", {4, 8, 16}, "lanes that share one hidden unit's dot products (summed by shuffles)"},
       {"rows_per_thread", {1, 2, 4}, "batch rows a lane group computes at once (W read once for them)"},
       {"exchange", {0, 1},
        "how h crosses the cluster: 0 remote stores and a release barrier a step, 1 st.async counted on the "
        "receiver's mbarrier (no fence; a relaxed barrier guards buffer reuse)"}},
      [](const Config& c) { return c.at("rows_per_thread") <= c.at("rows_per_cluster"); },
      "rows_per_thread at most rows_per_cluster");
  pc.default_config =
      Config({{"cluster_size", 8}, {"rows_per_cluster", 4}, {"k_split", 4}, {"rows_per_thread", 1}, {"exchange", 0}});
  pc.supports = cluster_supports;
  pc.workspace_bytes = cluster_workspace;
  pc.launch = by_type<persistent_cluster<float>, persistent_cluster<__half>, persistent_cluster<__nv_bfloat16>>;
  cat.add(pc);

  Variant c;
  c.primitive = primitive;
  c.name = "cudnn";
  c.description = "cudnnRNNForward (inference), algo: 0 STANDARD, 1 PERSIST_STATIC, 2 PERSIST_DYNAMIC, "
                  "3 PERSIST_STATIC_SMALL_H; weights repacked into cuDNN's weight space by one copy kernel; FMA math "
                  "for f32, tensor-op math for f16 and bf16, default math (TF32 products) for tf32";
  c.baseline = true;
  c.library = true;
  c.params = ParamSpace({{"algo", {0, 1, 2, 3}, "cuDNN's RNN algorithm"}});
  c.default_config = Config({{"algo", 0}});
  c.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  c.launch = cudnn_forward;
  cat.add(c);
}

}  // namespace

void register_rnn(Catalogue& cat) {
  for (const kr::Cell cell : {kr::Cell::lstm, kr::Cell::gru}) {
    const Primitive p = rnn_primitive(cell);
    const std::string name = p.name;
    cat.add(p);
    add_variants(cat, name);
  }
}

}  // namespace shapetune
