// Elementwise activations (relu, gelu, gelu_tanh, sigmoid, silu): for each function F three
// primitives, activation.F (y = F(x)), activation_backward.F (dx = dy * F'(x)) and
// bias_activation.F (y = F(x + b), b broadcast along rows), their ladders of hand-written
// variants (kernels/activation.cu) and, where cuDNN has the function, its legacy activation API
// as the baseline (baselines/cudnn_activation.cpp). cuDNN has no GELU, so gelu and gelu_tanh
// have no baseline, and nothing in cuDNN fuses a bias with these activations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <optional>

#include "baselines/cudnn.hpp"
#include "baselines/reference.hpp"
#include "kernels/activation.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ka = kernels::activation;

struct FunctionInfo {
  std::string name;
  ka::Function kernel;
  reference::Activation reference;
  std::optional<CudnnActivation> cudnn;
  std::string value;       // F(x)
  std::string derivative;  // F'(x)
  // Operations per element, exp and erf counted as one each (as softmax's cost model counts exp).
  double value_flops;
  double derivative_flops;
};

const std::vector<FunctionInfo>& functions() {
  static const std::vector<FunctionInfo> table = {
      {"relu", ka::Function::relu, reference::Activation::relu, CudnnActivation::relu, "max(x, 0)",
       "[x > 0] (0 at x = 0)", 1, 1},
      {"gelu", ka::Function::gelu, reference::Activation::gelu, std::nullopt, "0.5 x (1 + erf(x / sqrt 2))",
       "Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi)", 5, 10},
      {"gelu_tanh", ka::Function::gelu_tanh, reference::Activation::gelu_tanh, std::nullopt,
       "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", "s + x s (1 - s) du/dx, s = sigmoid(u), u = 2 sqrt(2/pi) (x + 0.044715 x^3)",
       9, 17},
      {"sigmoid", ka::Function::sigmoid, reference::Activation::sigmoid, CudnnActivation::sigmoid,
       "1 / (1 + exp(-x))", "s (1 - s), s = sigmoid(x)", 3, 5},
      {"silu", ka::Function::silu, reference::Activation::silu, CudnnActivation::silu, "x sigmoid(x)",
       "s + x s (1 - s), s = sigmoid(x)", 4, 7},
  };
  return table;
}

std::string forward_name(const FunctionInfo& f) { return "activation." + f.name; }
std::string backward_name(const FunctionInfo& f) { return "activation_backward." + f.name; }
std::string bias_name(const FunctionInfo& f) { return "bias_activation." + f.name; }

std::int64_t pack_elements(DType dtype) { return 16 / static_cast<std::int64_t>(dtype_size(dtype)); }

Support grid_fits(std::int64_t blocks) {
  return blocks <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

// ---- the primitives ---------------------------------------------------------------------------

Tolerance activation_tolerance(DType dtype) {
  // Output rounding dominates for 16-bit types (half an ulp: 2^-11 relative for f16, 2^-8 for
  // bf16). f32 holds a few ulps, but where the result crosses zero it is only absolutely
  // accurate: 1 + erf(x / sqrt 2) cancels in gelu's left tail (error up to |x| ulp(1) / 2, 4e-7
  // at |x| = 7), as do the derivatives' two terms near their zeros (gelu' at -0.75, silu' at
  // -1.28): atol 1e-6 covers both, and f16's subnormal spacing (6e-8).
  switch (dtype) {
    case DType::f16: return Tolerance{1e-6, 1e-3};
    case DType::bf16: return Tolerance{1e-6, 8e-3};
    default: return Tolerance{1e-6, 1e-5};
  }
}

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// The x range: [-6, 6) covers every function's curved part and its tails (gelu(-6) = -6e-9).
constexpr double kInputLow = -6, kInputHigh = 6;

Support elementwise_shape(const Shape& shape) {
  return shape.at("n") <= (std::int64_t{1} << 48) ? Support::yes() : Support::no("n must be at most 2^48");
}

Primitive forward_primitive(const FunctionInfo& f) {
  Primitive p;
  p.name = forward_name(f);
  p.description = f.name + " of every element, fp32 arithmetic" +
                  (f.cudnn ? std::string() : "; no library baseline (cuDNN has no GELU)");
  p.signature = "y[i] = " + f.value + " at x = x[i]";
  p.axes = {"n"};
  p.dtypes = kDtypes;
  p.tensors = [](const Problem& problem) {
    const auto n = problem.shape.at("n");
    return std::vector<TensorSpec>{{"x", problem.dtype, {n}, TensorRole::input, kInputLow, kInputHigh},
                                   {"y", problem.dtype, {n}, TensorRole::output}};
  };
  p.reference = [fn = f.reference](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::activation_forward(fn, problem.shape.at("n"), t[0].data(), t[1].data());
  };
  p.cost = [flops = f.value_flops](const Problem& problem) {
    const double n = static_cast<double>(problem.shape.at("n"));
    return Cost{2 * n * static_cast<double>(dtype_size(problem.dtype)), flops * n};
  };
  p.tolerance = activation_tolerance;
  p.default_variant = "vec";
  p.validate_shape = elementwise_shape;
  return p;
}

Primitive backward_primitive(const FunctionInfo& f) {
  Primitive p;
  p.name = backward_name(f);
  p.description = "gradient of " + f.name + " with respect to its input, fp32 arithmetic" +
                  (f.cudnn ? std::string() : "; no library baseline (cuDNN has no GELU)");
  p.signature = "dx[i] = dy[i] * F'(x[i]), F'(x) = " + f.derivative;
  p.axes = {"n"};
  p.dtypes = kDtypes;
  p.tensors = [](const Problem& problem) {
    const auto n = problem.shape.at("n");
    return std::vector<TensorSpec>{{"x", problem.dtype, {n}, TensorRole::input, kInputLow, kInputHigh},
                                   {"dy", problem.dtype, {n}, TensorRole::input, -1, 1},
                                   {"dx", problem.dtype, {n}, TensorRole::output}};
  };
  p.reference = [fn = f.reference](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::activation_backward(fn, problem.shape.at("n"), t[0].data(), t[1].data(), t[2].data());
  };
  p.cost = [flops = f.derivative_flops + 1](const Problem& problem) {  // + 1: the product with dy
    const double n = static_cast<double>(problem.shape.at("n"));
    return Cost{3 * n * static_cast<double>(dtype_size(problem.dtype)), flops * n};
  };
  p.tolerance = activation_tolerance;
  p.default_variant = "vec";
  p.validate_shape = elementwise_shape;
  return p;
}

Primitive bias_primitive(const FunctionInfo& f) {
  Primitive p;
  p.name = bias_name(f);
  p.description = f.name + " of x plus a bias broadcast along rows, one pass, fp32 arithmetic; no library baseline";
  p.signature = "y[r,c] = " + f.value + " at x = x[r,c] + b[c]";
  p.axes = {"rows", "cols"};
  p.dtypes = kDtypes;
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), cols = problem.shape.at("cols");
    return std::vector<TensorSpec>{{"x", problem.dtype, {rows, cols}, TensorRole::input, kInputLow, kInputHigh},
                                   {"b", problem.dtype, {cols}, TensorRole::input, -1, 1},
                                   {"y", problem.dtype, {rows, cols}, TensorRole::output}};
  };
  p.reference = [fn = f.reference](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::bias_activation(fn, problem.shape.at("rows"), problem.shape.at("cols"), t[0].data(), t[1].data(),
                               t[2].data());
  };
  p.cost = [flops = f.value_flops + 1](const Problem& problem) {  // + 1: the bias add
    const double rows = static_cast<double>(problem.shape.at("rows"));
    const double cols = static_cast<double>(problem.shape.at("cols"));
    return Cost{(2 * rows * cols + cols) * static_cast<double>(dtype_size(problem.dtype)), flops * rows * cols};
  };
  p.tolerance = activation_tolerance;
  p.default_variant = "flat_vec";  // as fast as row_vec on wide rows, 1.6x faster on narrow ones
  p.validate_shape = [](const Shape& shape) {
    if (shape.at("cols") > INT_MAX) return Support::no("cols must fit in 32 bits");
    if (shape.at("rows") > (std::int64_t{1} << 48) / shape.at("cols"))
      return Support::no("rows * cols must be at most 2^48 elements");
    return Support::yes();
  };
  return p;
}

// ---- the variants -----------------------------------------------------------------------------

const ParamAxis kScalarBlockAxis{"block_size", {128, 256, 512, 1024}, "threads per block"};
const ParamAxis kBlocksPerSmAxis{"blocks_per_sm", {1, 2, 4, 8, 16, 32},
                                 "grid-stride grid: at most this many blocks per SM"};

Variant scalar_variant(std::string primitive) {
  Variant v;
  v.primitive = std::move(primitive);
  v.name = "scalar";
  v.params = ParamSpace({kScalarBlockAxis, kBlocksPerSmAxis});
  v.default_config = Config({{"block_size", 256}, {"blocks_per_sm", 8}});
  v.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  return v;
}

Variant vec_variant(std::string primitive) {
  Variant v;
  v.primitive = std::move(primitive);
  v.name = "vec";
  v.description = "16-byte loads/stores, packs_per_thread packs of every input loaded before use, scalar edges";
  v.params = ParamSpace({{"block_size", {64, 128, 256, 512, 1024}, "threads per block"},
                         {"packs_per_thread", {1, 2, 4, 8}, "16-byte packs per thread and input, all in flight"}});
  // Within 2% of the best on the H200 at 2^28 elements in f32 and 16-bit types, and for flat_vec.
  v.default_config = Config({{"block_size", 128}, {"packs_per_thread", 2}});
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    const std::int64_t per_block = pack_elements(p.dtype) * c.at("block_size") * c.at("packs_per_thread");
    return grid_fits((p.shape.at("n") + per_block - 1) / per_block);
  };
  return v;
}

Support cudnn_extent(const Problem& p) {
  return p.shape.at("n") <= INT_MAX ? Support::yes() : Support::no("cuDNN extents are 32-bit");
}

void add_forward_variants(Catalogue& cat, const FunctionInfo& f) {
  const ka::Function fn = f.kernel;
  Variant scalar = scalar_variant(forward_name(f));
  scalar.description = "grid-stride, one element per thread per step (the plainest)";
  scalar.launch = [fn](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, a.problem.primitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(ka::forward_scalar(fn, static_cast<const T*>(a.tensors[0]), static_cast<T*>(a.tensors[1]),
                                              a.problem.shape.at("n"), cfg(a.config, "block_size"),
                                              cfg(a.config, "blocks_per_sm"), a.stream));
    });
  };
  cat.add(scalar);

  Variant vec = vec_variant(forward_name(f));
  vec.launch = [fn](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, a.problem.primitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(ka::forward_vec(fn, static_cast<const T*>(a.tensors[0]), static_cast<T*>(a.tensors[1]),
                                           a.problem.shape.at("n"), cfg(a.config, "block_size"),
                                           cfg(a.config, "packs_per_thread"), a.stream));
    });
  };
  cat.add(vec);

  if (!f.cudnn) return;
  Variant cudnn;
  cudnn.primitive = forward_name(f);
  cudnn.name = "cudnn";
  cudnn.description = "cudnnActivationForward (legacy API)" +
                      std::string(*f.cudnn == CudnnActivation::silu ? ", swish with beta 1" : "");
  cudnn.baseline = true;
  cudnn.library = true;
  cudnn.supports = [](const Problem& p, const Config&, const DeviceLimits&) { return cudnn_extent(p); };
  cudnn.launch = [mode = *f.cudnn](const LaunchArgs& a) {
    return library_status(cudnn_activation_forward(a.libraries, a.stream, a.problem.dtype, mode,
                                                   a.problem.shape.at("n"), a.tensors[0], a.tensors[1]));
  };
  cat.add(cudnn);
}

void add_backward_variants(Catalogue& cat, const FunctionInfo& f) {
  const ka::Function fn = f.kernel;
  Variant scalar = scalar_variant(backward_name(f));
  scalar.description = "grid-stride, one element per thread per step (the plainest)";
  scalar.launch = [fn](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, a.problem.primitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(ka::backward_scalar(fn, static_cast<const T*>(a.tensors[0]),
                                               static_cast<const T*>(a.tensors[1]), static_cast<T*>(a.tensors[2]),
                                               a.problem.shape.at("n"), cfg(a.config, "block_size"),
                                               cfg(a.config, "blocks_per_sm"), a.stream));
    });
  };
  cat.add(scalar);

  Variant vec = vec_variant(backward_name(f));
  vec.launch = [fn](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, a.problem.primitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(ka::backward_vec(fn, static_cast<const T*>(a.tensors[0]),
                                            static_cast<const T*>(a.tensors[1]), static_cast<T*>(a.tensors[2]),
                                            a.problem.shape.at("n"), cfg(a.config, "block_size"),
                                            cfg(a.config, "packs_per_thread"), a.stream));
    });
  };
  cat.add(vec);

  if (!f.cudnn) return;
  Variant cudnn;
  cudnn.primitive = backward_name(f);
  cudnn.name = "cudnn";
  cudnn.description =
      "cudnnActivationBackward; includes the forward pass cuDNN's backward needs (y = F(x) into the workspace)";
  cudnn.baseline = true;
  cudnn.library = true;
  cudnn.supports = [](const Problem& p, const Config&, const DeviceLimits&) { return cudnn_extent(p); };
  cudnn.workspace_bytes = [](const Problem& p, const Config&) {
    return static_cast<std::size_t>(p.shape.at("n")) * dtype_size(p.dtype);
  };
  cudnn.launch = [mode = *f.cudnn](const LaunchArgs& a) {
    if (a.workspace_bytes < static_cast<std::size_t>(a.problem.shape.at("n")) * dtype_size(a.problem.dtype))
      return LaunchStatus::failure("cuDNN's backward needs a workspace for y of n elements");
    return library_status(cudnn_activation_backward(a.libraries, a.stream, a.problem.dtype, mode,
                                                    a.problem.shape.at("n"), a.tensors[0], a.tensors[1],
                                                    a.tensors[2], a.workspace));
  };
  cat.add(cudnn);
}

// Tensor order: x, b, y.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> bias_launch(Call call) {
  return [call](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, a.problem.primitive, [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(static_cast<const T*>(a.tensors[0]), static_cast<const T*>(a.tensors[1]),
                                static_cast<T*>(a.tensors[2]), a.problem.shape.at("rows"),
                                static_cast<int>(a.problem.shape.at("cols")), a.config, a.stream));
    });
  };
}

void add_bias_variants(Catalogue& cat, const FunctionInfo& f) {
  const ka::Function fn = f.kernel;
  Variant scalar = scalar_variant(bias_name(f));
  scalar.description = "flat grid-stride, one element per thread per step, column = index % cols (the plainest)";
  scalar.launch = bias_launch([fn](auto x, auto b, auto y, std::int64_t rows, int cols, const Config& c,
                                   cudaStream_t s) {
    return ka::bias_forward_scalar(fn, x, b, y, rows, cols, cfg(c, "block_size"), cfg(c, "blocks_per_sm"), s);
  });
  cat.add(scalar);

  Variant row_vec;
  row_vec.primitive = bias_name(f);
  row_vec.name = "row_vec";
  row_vec.description =
      "threads_per_row threads per row; 16-byte packs of x, y (and b where aligned) on the row body, scalar head and tail";
  row_vec.params = ParamSpace({{"threads_per_row", {4, 8, 16, 32, 64, 128, 256, 512, 1024}, "threads sharing one row"},
                               {"block_size", {128, 256, 512, 1024}, "threads per block"}},
                              [](const Config& c) { return c.at("threads_per_row") <= c.at("block_size"); },
                              "threads_per_row <= block_size");
  row_vec.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}});
  row_vec.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    const std::int64_t rows_per_block = c.at("block_size") / c.at("threads_per_row");
    return grid_fits((p.shape.at("rows") + rows_per_block - 1) / rows_per_block);
  };
  row_vec.launch = bias_launch([fn](auto x, auto b, auto y, std::int64_t rows, int cols, const Config& c,
                                    cudaStream_t s) {
    return ka::bias_forward_row_vec(fn, x, b, y, rows, cols, cfg(c, "threads_per_row"), cfg(c, "block_size"), s);
  });
  cat.add(row_vec);

  Variant flat_vec = vec_variant(bias_name(f));
  flat_vec.name = "flat_vec";
  flat_vec.description =
      "as vec over the flat tensor, rows ignored: no per-row head and tail, each pack's bias column tracked incrementally";
  flat_vec.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    const std::int64_t per_block = pack_elements(p.dtype) * c.at("block_size") * c.at("packs_per_thread");
    return grid_fits((p.shape.at("rows") * p.shape.at("cols") + per_block - 1) / per_block);
  };
  flat_vec.launch = bias_launch([fn](auto x, auto b, auto y, std::int64_t rows, int cols, const Config& c,
                                     cudaStream_t s) {
    return ka::bias_forward_flat_vec(fn, x, b, y, rows, cols, cfg(c, "block_size"), cfg(c, "packs_per_thread"), s);
  });
  cat.add(flat_vec);

  Variant column_vec;
  column_vec.primitive = bias_name(f);
  column_vec.name = "column_vec";
  column_vec.description =
      "each thread owns one 16-byte column pack, its bias in registers, and walks rows_per_thread rows at a time: no "
      "index division, no bias reloads; element by element where rows are not 16-byte aligned";
  column_vec.params = ParamSpace({{"block_size", {64, 128, 256, 512, 1024}, "threads per block"},
                                  {"rows_per_thread", {1, 2, 4, 8}, "rows of a thread's column loaded before use"}});
  column_vec.default_config = Config({{"block_size", 256}, {"rows_per_thread", 4}});
  column_vec.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  column_vec.launch = bias_launch([fn](auto x, auto b, auto y, std::int64_t rows, int cols, const Config& c,
                                       cudaStream_t s) {
    return ka::bias_forward_column_vec(fn, x, b, y, rows, cols, cfg(c, "block_size"), cfg(c, "rows_per_thread"), s);
  });
  cat.add(column_vec);
}

}  // namespace

void register_activation(Catalogue& cat) {
  for (const FunctionInfo& f : functions()) {
    cat.add(forward_primitive(f));
    add_forward_variants(cat, f);
    cat.add(backward_primitive(f));
    add_backward_variants(cat, f);
    cat.add(bias_primitive(f));
    add_bias_variants(cat, f);
  }
}

}  // namespace shapetune
