// Binary logistic regression (the original work's first model), forward, loss and gradient in one
// primitive: the primitive and its ladder (kernels/logistic_bce.cu). No library has it fused, so
// the reference point is `unfused`, the library way: two cuBLAS GEMVs with elementwise and
// reduction kernels between them.
#include <cublas_v2.h>

#include <climits>
#include <cmath>

#include "baselines/library_handles.hpp"
#include "baselines/reference.hpp"
#include "kernels/logistic_bce.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kl = kernels::logistic_bce;

constexpr const char* kPrimitive = "logistic_bce";
// fused_block_kernel's static shared memory (the double-buffered warp dot products), with room.
constexpr std::int64_t kFusedStaticSharedBytes = 2048;

struct RowsFeatures {
  std::int64_t rows;
  int features;
};
RowsFeatures rows_features(const Problem& p) {
  return {p.shape.at("rows"), static_cast<int>(p.shape.at("features"))};
}

// The launch's tensors, typed, in TensorSpec order: x, w, b, labels, p, loss, dw, db.
template <typename T>
struct BceTensors {
  const T* x;
  const float* w;
  const float* b;
  const std::int32_t* labels;
  float* p;
  float* loss;
  float* dw;
  float* db;
};

template <typename T>
BceTensors<T> tensors_of(const LaunchArgs& a) {
  return {static_cast<const T*>(a.tensors[0]),       static_cast<const float*>(a.tensors[1]),
          static_cast<const float*>(a.tensors[2]),   static_cast<const std::int32_t*>(a.tensors[3]),
          static_cast<float*>(a.tensors[4]),         static_cast<float*>(a.tensors[5]),
          static_cast<float*>(a.tensors[6]),         static_cast<float*>(a.tensors[7])};
}

using WorkspaceBytes = std::function<std::size_t(const Problem&, const Config&)>;

// Adapts `call(tensors, rows, features, config, workspace, stream)` to the catalogue's launch; a
// smaller workspace than the variant asked for is refused (the kernels would write past it).
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> bce_launch(WorkspaceBytes workspace_bytes, Call call) {
  return [workspace_bytes, call](const LaunchArgs& a) {
    const std::size_t needed = workspace_bytes(a.problem, a.config);
    if (a.workspace_bytes < needed || a.workspace == nullptr)
      return LaunchStatus::failure("workspace of " + std::to_string(a.workspace_bytes) + " bytes; the variant needs " +
                                   std::to_string(needed));
    const auto [rows, features] = rows_features(a.problem);
    return with_storage_type(a.problem.dtype, kPrimitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(tensors_of<T>(a), rows, features, a.config, a.workspace, a.stream));
    });
  };
}

Support grid_fits(std::int64_t blocks) {
  return blocks <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

// The tolerance of a problem of `features` columns. Every output is f32 whatever x's storage
// type (16-bit x values are exact in fp32, and the reference sees the stored values), so one
// tolerance serves every dtype. z is a depth-D fp32 dot product: GEMM's bound for depth D
// (variants/gemm.cpp: u (2D + 16) for operands in [-1, 1]; the drawn w is smaller, so it holds
// with room) is z's absolute error. p moves by at most a quarter of it (sigmoid' <= 1/4), each
// row's loss and residual by at most all of it (|d loss/dz| = |p - y| <= 1), and the means over
// rows, which average those errors, add their own fp32 rounding per block (before the double
// stage) of at most a few u relative; 48u more covers that and the exp/log1p of each row. rtol
// 32u serves the loss at large |z|, where it grows like |z| and its error is relative.
Tolerance logistic_tolerance(std::int64_t features) {
  constexpr double u = 0x1p-24;
  return Tolerance{u * (2 * static_cast<double>(features) + 64), 32 * u};
}

// The depth the per-dtype tolerance (shown by `shapetune list`) assumes: Fashion-MNIST's 784 pixels.
constexpr std::int64_t kTypicalFeatures = 784;

Primitive logistic_bce_primitive() {
  Primitive p;
  p.name = kPrimitive;
  p.description =
      "binary logistic regression, forward and backward: p = sigmoid(x w + b), the mean binary cross-entropy and "
      "its gradients dw, db; fp32 accumulation, f32 parameters and outputs";
  p.signature =
      "z = x[i,:] . w + b; p[i] = sigmoid(z); loss = mean_i max(z,0) - z y[i] + log1p(exp(-|z|)); "
      "dw[j] = mean_i x[i,j] (p[i] - y[i]); db = mean_i (p[i] - y[i])";
  p.axes = {"rows", "features"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), features = problem.shape.at("features");
    // w drawn in +-3/sqrt(D): z = x w has a standard deviation near 1 at every D, so p spans
    // (0, 1) and both branches of the stable loss are exercised (with w in [-1, 1], z would be
    // ~sqrt(D)/3 and nearly every p saturated at D = 784).
    const double w_range = 3 / std::sqrt(static_cast<double>(features));
    return std::vector<TensorSpec>{{"x", problem.dtype, {rows, features}, TensorRole::input, -1, 1},
                                   {"w", DType::f32, {features}, TensorRole::input, -w_range, w_range},
                                   {"b", DType::f32, {1}, TensorRole::input, -1, 1},
                                   {"labels", DType::i32, {rows}, TensorRole::input, 0, 2},
                                   {"p", DType::f32, {rows}, TensorRole::output},
                                   {"loss", DType::f32, {1}, TensorRole::output},
                                   {"dw", DType::f32, {features}, TensorRole::output},
                                   {"db", DType::f32, {1}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::logistic_bce(problem.shape.at("rows"), problem.shape.at("features"), t[0].data(), t[1].data(), t[2][0],
                            t[3].data(), t[4].data(), t[5].data(), t[6].data(), t[7].data());
  };
  p.cost = [](const Problem& problem) {
    const double rows = static_cast<double>(problem.shape.at("rows"));
    const double features = static_cast<double>(problem.shape.at("features"));
    // The minimum traffic: x read once, w read and dw written once, labels read and p written
    // once per row, and the three scalars. Two-pass variants (unfused, row_warp) read x twice,
    // which their timing shows against this floor.
    const double bytes = rows * features * static_cast<double>(dtype_size(problem.dtype)) + 8 * features + 8 * rows + 12;
    // A multiply-add per element for z and another for dw; per row about ten more (the exp,
    // log1p, the sigmoid's division, the loss's terms, the means' adds).
    return Cost{bytes, 4 * rows * features + 10 * rows};
  };
  p.tolerance = [](DType) { return logistic_tolerance(kTypicalFeatures); };
  p.problem_tolerance = [](const Problem& problem) { return logistic_tolerance(problem.shape.at("features")); };
  p.default_variant = "fused_block";
  // Where the block's dw partial does not fit its shared memory (D past ~56000 on an H200).
  p.fallback_variants = {"row_warp"};
  p.validate_shape = [](const Shape& shape) {
    // 32-bit column indices in the kernels, and cuBLAS's int extents in `unfused`.
    if (shape.at("features") > (std::int64_t{1} << 30)) return Support::no("features must be at most 2^30");
    if (shape.at("rows") > (std::int64_t{1} << 48) / shape.at("features"))
      return Support::no("rows * features must be at most 2^48 elements");
    return Support::yes();
  };
  return p;
}

LaunchStatus cublas_call(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return LaunchStatus::success();
  return LaunchStatus::failure(std::string(call) + ": " + cublas_status_text(status));
}

void add_unfused(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "unfused";
  v.baseline = true;  // the chain a framework runs: what the fused variants' speedups are measured against
  v.description =
      "library way: cuBLAS GEMV z = X w, a kernel for p, the residuals and row losses, cuBLAS GEMV dw = X^T r / N, "
      "a mean kernel (4 launches, X read twice)";
  v.workspace_bytes = [](const Problem& p, const Config&) { return kl::row_scratch_bytes(p.shape.at("rows")); };
  v.supports = [](const Problem& p, const Config&, const DeviceLimits&) {
    if (p.dtype != DType::f32) return Support::no("cublasSgemv is f32 only (a 16-bit x would need GemmEx, a GEMM)");
    if (p.shape.at("rows") > INT_MAX) return Support::no("cuBLAS's 32-bit API takes extents up to 2^31-1");
    return Support::yes();
  };
  v.launch = [workspace_bytes = v.workspace_bytes](const LaunchArgs& a) {
    if (a.problem.dtype != DType::f32) return LaunchStatus::refused("cublasSgemv is f32 only");
    const std::size_t needed = workspace_bytes(a.problem, a.config);
    if (a.workspace_bytes < needed || a.workspace == nullptr)
      return LaunchStatus::failure("workspace of " + std::to_string(a.workspace_bytes) + " bytes; the variant needs " +
                                   std::to_string(needed));
    const auto [rows, features] = rows_features(a.problem);
    const BceTensors<float> t = tensors_of<float>(a);
    float* residuals = static_cast<float*>(a.workspace);
    float* row_losses = residuals + kl::align256(static_cast<std::size_t>(rows) * sizeof(float)) / sizeof(float);
    cublasHandle_t handle = a.libraries.cublas(a.stream);
    // Row-major x [N, D] is column-major x^T [D, N] with leading dimension D.
    const int n = static_cast<int>(rows), d = features;
    const float one = 1.f, zero = 0.f, inv_rows = static_cast<float>(1.0 / static_cast<double>(rows));
    if (LaunchStatus s = cublas_call(cublasSgemv(handle, CUBLAS_OP_T, d, n, &one, t.x, d, t.w, 1, &zero, residuals, 1),
                                     "cublasSgemv (z = X w)");
        !s.ok)
      return s;
    if (LaunchStatus s = launch_status(kl::unfused_rows(residuals, t.b, t.labels, t.p, row_losses, rows, a.stream));
        !s.ok)
      return s;
    if (LaunchStatus s = cublas_call(
            cublasSgemv(handle, CUBLAS_OP_N, d, n, &inv_rows, t.x, d, residuals, 1, &zero, t.dw, 1),
            "cublasSgemv (dw = X^T r / N)");
        !s.ok)
      return s;
    return launch_status(kl::unfused_means(row_losses, residuals, rows, t.loss, t.db, a.stream));
  };
  cat.add(v);
}

void add_row_warp(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "row_warp";
  v.description =
      "a warp per row (z by shuffles, p, residual, loss), then a column pass summing x[:, j] r in row chunks and "
      "a fixed-order finish: X read twice, no atomics";
  v.params = ParamSpace({{"warps_per_block", {2, 4, 8, 16}, "rows (warps) per block of the row pass"},
                         {"rows_per_chunk", {64, 256, 1024}, "rows one column thread sums in the column pass"}});
  v.default_config = Config({{"warps_per_block", 4}, {"rows_per_chunk", 256}});
  v.workspace_bytes = [](const Problem& p, const Config& c) {
    return kl::row_warp_workspace_bytes(p.shape.at("rows"), p.shape.at("features"), cfg(c, "rows_per_chunk"));
  };
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    if (kl::row_warp_chunks(p.shape.at("rows"), cfg(c, "rows_per_chunk")) > 65535)
      return Support::no("more than 65535 row chunks (the column pass's grid y)");
    return grid_fits((p.shape.at("rows") + c.at("warps_per_block") - 1) / c.at("warps_per_block"));
  };
  v.launch = bce_launch(v.workspace_bytes, [](auto t, std::int64_t rows, int features, const Config& c,
                                              void* workspace, cudaStream_t s) {
    return kl::row_warp(t.x, t.w, t.b, t.labels, t.p, t.loss, t.dw, t.db, rows, features, cfg(c, "warps_per_block"),
                        cfg(c, "rows_per_chunk"), workspace, s);
  });
  cat.add(v);
}

void add_fused_block(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "fused_block";
  v.description =
      "one pass: a block per tile of rows, four rows per barrier, each thread adding its own columns of the "
      "block's dw partial in shared memory; a fixed-order finish: X read once, bit-identical runs";
  v.params = ParamSpace({{"block_size", {64, 128, 256, 512}, "threads per block (each owns D / block_size columns)"},
                         {"rows_per_block", {16, 64, 256, 1024}, "rows of a block's tile (more: fewer partials)"}});
  v.default_config = Config({{"block_size", 256}, {"rows_per_block", 64}});
  v.workspace_bytes = [](const Problem& p, const Config& c) {
    return kl::fused_block_workspace_bytes(p.shape.at("rows"), p.shape.at("features"), cfg(c, "rows_per_block"));
  };
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const auto shared = static_cast<std::int64_t>(kl::fused_block_shared_bytes(p.shape.at("features")));
    if (shared + kFusedStaticSharedBytes > limits.shared_memory_per_block_optin)
      return Support::no("the block's dw partial (" + std::to_string(shared) +
                         " bytes) exceeds the shared memory of a block");
    if (c.at("block_size") > limits.max_threads_per_block) return Support::no("block larger than the device allows");
    return grid_fits(kl::fused_block_count(p.shape.at("rows"), cfg(c, "rows_per_block")));
  };
  v.launch = bce_launch(v.workspace_bytes, [](auto t, std::int64_t rows, int features, const Config& c,
                                              void* workspace, cudaStream_t s) {
    return kl::fused_block(t.x, t.w, t.b, t.labels, t.p, t.loss, t.dw, t.db, rows, features, cfg(c, "block_size"),
                           cfg(c, "rows_per_block"), workspace, s);
  });
  cat.add(v);
}

}  // namespace

void register_logistic_bce(Catalogue& cat) {
  cat.add(logistic_bce_primitive());
  add_unfused(cat);
  add_row_warp(cat);
  add_fused_block(cat);
}

}  // namespace shapetune
