// The catalogue: every primitive with its reference, cost model and tolerances, and every
// variant of it with its parameter space, constraints and launch function.
// variants/<primitive>.cpp registers them; kernels/<primitive>.cu holds the kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/param_space.hpp"
#include "core/records.hpp"
#include "core/types.hpp"

namespace shapetune {

class LibraryHandles;  // baselines/library_handles.hpp

enum class TensorRole : std::uint8_t { input, output, inout };

// One argument tensor of a primitive for a given problem.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> extents;  // row-major; product is the element count
  TensorRole role = TensorRole::input;
  // Inputs (and inout initial values) are drawn uniformly from [low, high): integers for i32.
  double low = -1;
  double high = 1;

  std::int64_t elements() const;
  std::int64_t bytes() const;
};

// Host tensors for the reference, one per TensorSpec in order, as float64. Inputs hold the
// values the device sees (already rounded to the storage type); outputs are to be filled;
// inout tensors hold the initial values and are overwritten with the expected results.
using HostTensors = std::vector<std::vector<double>>;

// A run-time scalar argument of a primitive (Adam's learning rate, LayerNorm's epsilon). Not
// part of the dispatch key: tuning uses `value`, callers pass their own.
struct ScalarParam {
  std::string name;
  double value = 0;
  std::string description;
};

// Elements [begin, end) of an output tensor, in row-major order.
struct ElementRange {
  std::int64_t begin = 0, end = 0;
};

struct Primitive {
  std::string name;
  std::string description;
  std::string signature;           // e.g. "y[r,c] = exp(x[r,c] - max_c x[r,:]) / sum_c exp(...)"
  std::vector<std::string> axes;   // shape axes in order
  std::vector<DType> dtypes;       // problem dtypes it is defined for
  std::function<std::vector<TensorSpec>(const Problem&)> tensors;
  std::vector<ScalarParam> scalars;  // in the order launches and the reference receive them
  std::function<void(const Problem&, std::span<const double> scalars, HostTensors&)> reference;
  std::function<Cost(const Problem&)> cost;
  std::function<Tolerance(DType)> tolerance;
  // Set where the tolerance depends on the shape too (GEMM: rounding error grows with K);
  // tolerance_for() prefers it over `tolerance`.
  std::function<Tolerance(const Problem&)> problem_tolerance;
  std::string default_variant;     // what dispatch falls back to when nothing is tuned
  // Where default_variant cannot run a problem (a dtype or an epilogue it lacks, an older device),
  // what dispatch tries next, in order, before the first registered variant that can.
  std::vector<std::string> fallback_variants;
  // Where a float64 reference of every output element would take too long (attention at
  // S = 100,000 costs about 1e13 FLOPs), the ranges of each output that the reference computes
  // and the check compares, sorted and disjoint; the reference leaves the rest alone. Unset, or
  // an empty list: every element. The same variants are checked whole at smaller shapes.
  std::function<std::vector<ElementRange>(const Problem&)> checked_ranges;
  // Checks axes that the YAML or a caller gave against the primitive's own rules
  // (e.g. extents >= 1). Returns an empty Support on success.
  std::function<Support(const Shape&)> validate_shape;
};

// What the float64 reference of a problem costs the host: the primitive's cost, its FLOPs scaled
// to the share of output elements the reference computes where it computes only some
// (checked_ranges).
Cost reference_cost(const Primitive&, const Problem&);

// The default tolerance of a problem: the shape-aware one where the primitive has it.
inline Tolerance tolerance_for(const Primitive& primitive, const Problem& problem) {
  if (primitive.problem_tolerance) return primitive.problem_tolerance(problem);
  return primitive.tolerance ? primitive.tolerance(problem.dtype) : Tolerance{};
}

// What a launch gets: device pointers in TensorSpec order, the stream, library handles and
// workspace of the size the variant asked for.
struct LaunchArgs {
  const Problem& problem;
  const Config& config;
  std::span<void* const> tensors;
  cudaStream_t stream;
  LibraryHandles& libraries;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::span<const double> scalars = {};  // the primitive's ScalarParams, in order
  // A library algorithm recorded with the winner (Variant::describe_algorithm's text): the
  // variant runs exactly that one where it still exists, else what its config says.
  std::string_view library_algo = {};
};

// The tuning values of a primitive's scalars.
std::vector<double> default_scalars(const Primitive&);

// A launch either queued its work or says why not. `unsupported` marks refusals decided at
// run time (a library returning NOT_SUPPORTED) as opposed to errors.
struct LaunchStatus {
  bool ok = true;
  bool unsupported = false;
  std::string message;
  static LaunchStatus success() { return {}; }
  static LaunchStatus failure(std::string m) { return {false, false, std::move(m)}; }
  static LaunchStatus refused(std::string m) { return {false, true, std::move(m)}; }
};

struct Variant {
  std::string primitive;
  std::string name;
  std::string description;  // one line: what it does differently
  bool baseline = false;    // the bar to beat: a library call, or the unfused chain a fused primitive replaces
  // A vendor library (cuBLAS, cuBLASLt, cuDNN) rather than shapetune's own kernels: reports call a
  // speedup "over a library" only over these.
  bool library = false;
  ParamSpace params;
  Config default_config;    // used when dispatch falls back to this variant
  std::function<Support(const Problem&, const Config&, const DeviceLimits&)> supports;
  std::function<std::size_t(const Problem&, const Config&)> workspace_bytes;  // may be empty: none
  std::function<LaunchStatus(const LaunchArgs&)> launch;
  // Primitives timed as a training step's forward and backward together (lstm.backward,
  // gru.backward) also launch as two halves, so that a trainer computes its loss between them
  // and runs the forward once. forward_half keeps its activations in the workspace and writes the
  // layer's outputs (`outputs`: y, then h_T, and c_T for an LSTM; the states may be null);
  // backward_half continues from that workspace and those outputs, which nothing may change in
  // between. `launch` is the same work with the outputs in the workspace. Empty elsewhere.
  std::function<LaunchStatus(const LaunchArgs&, std::span<void* const> outputs)> forward_half, backward_half;
  // Library variants whose config picks an algorithm by rank (cuBLASLt's heuristic): the
  // library's identity of the algorithm this config runs now, stored with a winner so that
  // dispatch replays that kernel later. May be empty: nothing to record.
  std::function<std::string(const Problem&, const Config&, LibraryHandles&)> describe_algorithm;
};

class Catalogue {
 public:
  void add(Primitive);
  void add(Variant);  // its primitive must be added first

  const Primitive* find_primitive(std::string_view name) const;
  const Variant* find_variant(std::string_view primitive, std::string_view variant) const;
  std::vector<const Primitive*> primitives() const;               // in registration order
  std::vector<const Variant*> variants(std::string_view primitive) const;  // in registration order
  std::string primitive_names() const;                             // "softmax, layernorm"
  std::string variant_names(std::string_view primitive) const;

 private:
  std::vector<std::unique_ptr<Primitive>> primitives_;
  std::vector<std::unique_ptr<Variant>> variants_;
};

// The catalogue of everything this build knows, built once on first use.
const Catalogue& catalogue();

// The cost model of a problem of the catalogue; NaN bytes and FLOPs where this build does not know
// its primitive (a database from another version).
Cost catalogue_cost(const Problem&);

// A stored config with the parameters the variant gained since it was recorded set to their
// defaults (a new parameter's default is the behaviour it had before the parameter existed), so
// winners of older databases still launch.
Config complete_config(const Variant&, Config stored);
// A measured candidate's config key as this build runs it (complete_config), so "tile=0,stages=3"
// recorded before wgmma gained `persistent` is the candidate "tile=0,stages=3,persistent=0"; the
// recorded key where this build does not know the variant.
std::string completed_config_key(const CandidateRecord&);

// Registration entry points, one per primitive family (variants/<family>.cpp).
void register_softmax(Catalogue&);
void register_layernorm(Catalogue&);     // layernorm, residual_layernorm
void register_adam(Catalogue&);
void register_activation(Catalogue&);    // activation.*, activation_backward.*, bias_activation.*
void register_softmax_xent(Catalogue&);
void register_logistic_bce(Catalogue&);  // logistic_bce: unfused (cuBLAS GEMVs), row_warp, fused_block
void register_gemm(Catalogue&);          // gemm*.{nn,nt,tn}: the primitives and the CUDA-core ladder
void register_gemm_tensor_core(Catalogue&);  // mma_sync, mma_sync_tf32 on every GEMM primitive
void register_gemm_wgmma(Catalogue&);    // wgmma (sm_90a) on every GEMM primitive
void register_gemm_cublas(Catalogue&);   // cublas, cublas_tf32, cublaslt on every GEMM primitive
void register_rnn(Catalogue&);           // lstm.forward, gru.forward: stepwise, stepwise_graph, persistent, cudnn
void register_rnn_backward(Catalogue&);  // lstm.backward, gru.backward: stepwise, stepwise_graph, cudnn (after register_rnn)
void register_rnn_cell(Catalogue&);      // lstm_cell.{forward,backward}, gru_cell.{forward,backward}: fused
void register_attention(Catalogue&);     // attention.{causal,full}.{split,packed}[.padded]: naive, flash_mma, cudnn_sdpa
void register_qkv_projection(Catalogue&);  // qkv_projection: split, packed (cuBLAS), packed_head_split (mma.sync)
// gemm_bias_residual_layernorm.nt: unfused, wgmma (after the GEMM and LayerNorm variants)
void register_gemm_residual_layernorm(Catalogue&);
void register_fault_injection(Catalogue&);  // test only (SHAPETUNE_FAULT_VARIANTS=1): faults on purpose

}  // namespace shapetune
