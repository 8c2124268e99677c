// LayerNorm and the fused pre-LN residual step: the primitives, their ladders of hand-written
// variants (kernels/layernorm.cu) and the cuDNN graph-API baseline (baselines/cudnn_layernorm.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "baselines/cudnn.hpp"
#include "baselines/reference.hpp"
#include "kernels/layernorm.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kl = kernels::layernorm;

const std::vector<std::int64_t> kGroupSizes = {4, 8, 16, 32, 64, 128, 256, 512, 1024};
const std::vector<std::int64_t> kRegisterGroupSizes = {16, 32, 64, 128, 256, 512, 1024};

int pack_elements(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

// Tensor order: layernorm [x, gamma, beta, y]; residual_layernorm [x, r, gamma, beta, h, y].
template <typename T>
kl::Row<T> row_of(const LaunchArgs& a, int first_param) {
  return kl::Row<T>{static_cast<const T*>(a.tensors[0]),
                    static_cast<const T*>(a.tensors[first_param]),
                    static_cast<const T*>(a.tensors[first_param + 1]),
                    static_cast<T*>(a.tensors[a.tensors.size() - 1]),
                    a.problem.shape.at("rows"),
                    static_cast<int>(a.problem.shape.at("cols")),
                    static_cast<float>(a.scalars[0])};
}

template <typename T>
kl::ResidualRow<T> residual_of(const LaunchArgs& a) {
  const bool round_h = a.config.find("round_h").value_or(0) != 0;
  return kl::ResidualRow<T>{row_of<T>(a, 2), static_cast<const T*>(a.tensors[1]), static_cast<T*>(a.tensors[4]),
                            round_h};
}

// Adapts `call(typed args, config, stream)` to the catalogue's launch signature.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> layernorm_launch(Call call) {
  return [call](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, "layernorm", [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(row_of<T>(a, 1), a.config, a.stream));
    });
  };
}

template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> residual_launch(Call call) {
  return [call](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, "layernorm", [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(residual_of<T>(a), a.config, a.stream));
    });
  };
}

Support grid_fits(std::int64_t blocks) {
  return blocks <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

Support groups_fit(const Problem& p, const Config& c) {
  const auto rows_per_block = c.at("block_size") / c.at("threads_per_row");
  return grid_fits((p.shape.at("rows") + rows_per_block - 1) / rows_per_block);
}

// A row body held in registers by `holders` threads of packs_per_thread packs each.
Support row_packs_fit(const Problem& p, const Config& c, std::int64_t holders) {
  const std::int64_t pack = pack_elements(p.dtype), per_thread = c.at("packs_per_thread");
  const std::int64_t packs_needed = p.shape.at("cols") / pack;
  if (per_thread * pack > 64)
    return Support::no("more than 64 floats of row per thread would spill; the kernel is not built for it");
  if (packs_needed > holders * per_thread)
    return Support::no("row needs " + std::to_string(packs_needed) + " packs; config holds " +
                       std::to_string(holders * per_thread));
  if (per_thread > 1 && packs_needed <= holders * (per_thread / 2))
    return Support::no("half the packs per thread would hold the row (this config only wastes registers)");
  return Support::yes();
}

// The register variants hold the row body in packs_per_thread * threads_per_row packs.
Support register_capacity(const Problem& p, const Config& c) {
  const Support s = row_packs_fit(p, c, c.at("threads_per_row"));
  return s.ok ? groups_fit(p, c) : s;
}

// fused_ring (sm_90) holds one row per block in registers, block_size * packs_per_thread packs,
// and `stages` row bodies of x and r in shared memory.
Support ring_fits(const Problem& p, const Config& c, const DeviceLimits& limits) {
  if (limits.compute_capability < 90) return Support::no("bulk copies into an mbarrier ring need sm_90");
  if (const Support s = row_packs_fit(p, c, c.at("block_size")); !s.ok) return s;
  const std::int64_t bytes = kl::ring_dynamic_shared_bytes(p.shape.at("cols"), static_cast<int>(dtype_size(p.dtype)),
                                                           static_cast<int>(c.at("stages"))) +
                             kl::kRingStaticSharedBytes;
  if (bytes > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(c.at("stages")) + " ring slots need " + std::to_string(bytes) +
                       " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin));
  return Support::yes();
}

// fused_pipelined stages whole row bodies of x and r in shared memory: the width it can take
// depends on the device (227 KB per block on an H100/H200: in 2 stages, f32 rows up to ~14500
// wide, 16-bit ones up to ~29000).
Support pipelined_shared_memory_fits(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const std::int64_t bytes = kl::pipelined_dynamic_shared_bytes(p.shape.at("cols"),
                                                                 static_cast<int>(dtype_size(p.dtype)),
                                                                 static_cast<int>(c.at("stages"))) +
                             kl::kPipelinedStaticSharedBytes;
  if (bytes > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(c.at("stages")) + " staged rows need " + std::to_string(bytes) +
                       " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin));
  return Support::yes();
}

bool group_fits_block(const Config& c) { return c.at("threads_per_row") <= c.at("block_size"); }

Support validate_rows_cols(const Shape& shape) {
  if (shape.at("cols") > INT_MAX) return Support::no("cols must fit in 32 bits");
  if (shape.at("rows") > (std::int64_t{1} << 48) / shape.at("cols"))
    return Support::no("rows * cols must be at most 2^48 elements");
  return Support::yes();
}

Tolerance layernorm_tolerance(DType dtype) {
  // Outputs are O(1) (up to ~5 with these gamma/beta): half an ulp there is 2e-3 in f16 and
  // 1.6e-2 in bf16, so atol allows two half-ulps; f32 errors come from the float statistics
  // and rsqrtf (~1e-6 absolute).
  switch (dtype) {
    case DType::f16: return Tolerance{4e-3, 2e-3};
    case DType::bf16: return Tolerance{3.2e-2, 1.6e-2};
    default: return Tolerance{1e-5, 1e-5};
  }
}

// x has a nonzero mean (uniform over [-1, 3)): a one-pass E[x^2] - E[x]^2 would lose digits.
constexpr double kXLow = -1, kXHigh = 3;

Primitive layernorm_primitive() {
  Primitive p;
  p.name = "layernorm";
  p.description = "LayerNorm forward over the rows of [rows, cols]: gamma/beta per column, fp32 statistics";
  p.signature = "y[r,c] = (x[r,c] - mean_r) / sqrt(var_r + eps) * gamma[c] + beta[c]  (biased variance)";
  p.axes = {"rows", "cols"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.scalars = {{"epsilon", 1e-5, "added to the variance"}};
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), cols = problem.shape.at("cols");
    const DType t = problem.dtype;
    return std::vector<TensorSpec>{{"x", t, {rows, cols}, TensorRole::input, kXLow, kXHigh},
                                   {"gamma", t, {cols}, TensorRole::input, 0.5, 1.5},
                                   {"beta", t, {cols}, TensorRole::input, -0.5, 0.5},
                                   {"y", t, {rows, cols}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double> scalars, HostTensors& t) {
    reference::layernorm(problem.shape.at("rows"), problem.shape.at("cols"), t[0].data(), t[1].data(), t[2].data(),
                         scalars[0], t[3].data());
  };
  p.cost = [](const Problem& problem) {
    const double n = static_cast<double>(problem.shape.elements()), cols = static_cast<double>(problem.shape.at("cols"));
    // x read and y written once; gamma and beta once. Per element: sum, deviation, square,
    // add, then subtract, two multiplies and an add.
    return Cost{(2 * n + 2 * cols) * static_cast<double>(dtype_size(problem.dtype)), 8 * n};
  };
  p.tolerance = layernorm_tolerance;
  p.default_variant = "vec_welford";
  p.validate_shape = validate_rows_cols;
  return p;
}

Primitive residual_primitive() {
  Primitive p;
  p.name = "residual_layernorm";
  p.description = "pre-LN residual step: h = x + r (written, the next residual) and y = LayerNorm(h)";
  p.signature = "h = x + r; y[r,c] = (h[r,c] - mean_r) / sqrt(var_r + eps) * gamma[c] + beta[c]";
  p.axes = {"rows", "cols"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.scalars = {{"epsilon", 1e-5, "added to the variance"}};
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), cols = problem.shape.at("cols");
    const DType t = problem.dtype;
    return std::vector<TensorSpec>{{"x", t, {rows, cols}, TensorRole::input, kXLow, kXHigh},
                                   {"r", t, {rows, cols}, TensorRole::input, -1, 1},
                                   {"gamma", t, {cols}, TensorRole::input, 0.5, 1.5},
                                   {"beta", t, {cols}, TensorRole::input, -0.5, 0.5},
                                   {"h", t, {rows, cols}, TensorRole::output},
                                   {"y", t, {rows, cols}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double> scalars, HostTensors& t) {
    // The statistics are of h as stored (rounded to the storage type): the h every later layer
    // reads. A variant with round_h = 0 takes them of the unrounded sum, within tolerance of it.
    reference::residual_layernorm(problem.shape.at("rows"), problem.shape.at("cols"), t[0].data(), t[1].data(),
                                  t[2].data(), t[3].data(), scalars[0], reference::rounding_for(problem.dtype),
                                  t[4].data(), t[5].data());
  };
  p.cost = [](const Problem& problem) {
    const double n = static_cast<double>(problem.shape.elements()), cols = static_cast<double>(problem.shape.at("cols"));
    // x and r read, h and y written: four passes; the add on top of LayerNorm's eight.
    return Cost{(4 * n + 2 * cols) * static_cast<double>(dtype_size(problem.dtype)), 9 * n};
  };
  p.tolerance = layernorm_tolerance;
  p.default_variant = "fused_vec";
  p.validate_shape = validate_rows_cols;
  return p;
}

ParamAxis group_axis(std::vector<std::int64_t> values) {
  return {"threads_per_row", std::move(values), "threads cooperating on one row"};
}
const ParamAxis kBlockAxis{"block_size", {128, 256, 512, 1024}, "threads per block"};
const ParamAxis kPacksAxis{"packs_per_thread", {1, 2, 4, 8, 16}, "16-byte packs each thread keeps in registers"};
const ParamAxis kRingPacksAxis{"packs_per_thread", {1, 2, 4, 8}, "16-byte packs each thread keeps in registers"};
const ParamAxis kRingStagesAxis{"stages", {2, 3, 4}, "ring slots per block: rows on their way while one is normalized"};
const ParamAxis kStagesAxis{"stages", {2, 3}, "row buffers per block: stages - 1 rows in flight while one is normalized"};
const ParamAxis kStreamingAxis{"streaming_stores", {0, 1}, "1: h and y stored evict-first (st.global.cs)"};
const ParamAxis kRoundAxis{"round_h", {0, 1}, "1: statistics of h rounded to the storage type (as frameworks do)"};

Variant variant(std::string primitive, std::string name, std::string description) {
  Variant v;
  v.primitive = std::move(primitive);
  v.name = std::move(name);
  v.description = std::move(description);
  return v;
}

void add_layernorm_variants(Catalogue& cat) {
  Variant v1 = variant("layernorm", "thread_row_two_pass",
                       "one thread per row; mean, then variance about it, then the write (the plainest)");
  v1.params = ParamSpace({{"block_size", {64, 128, 256, 512}, "threads per block"}});
  v1.default_config = Config({{"block_size", 128}});
  v1.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    return grid_fits((p.shape.at("rows") + c.at("block_size") - 1) / c.at("block_size"));
  };
  v1.launch = layernorm_launch([](auto row, const Config& c, cudaStream_t s) {
    return kl::thread_row_two_pass(row, cfg(c, "block_size"), s);
  });
  cat.add(v1);

  Variant v2 = variant("layernorm", "warp_row_welford", "one warp per row; Welford statistics merged with shuffles");
  v2.params = ParamSpace({{"warps_per_block", {1, 2, 4, 8, 16}, "rows (warps) per block"}});
  v2.default_config = Config({{"warps_per_block", 4}});
  v2.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    return grid_fits((p.shape.at("rows") + c.at("warps_per_block") - 1) / c.at("warps_per_block"));
  };
  v2.launch = layernorm_launch([](auto row, const Config& c, cudaStream_t s) {
    return kl::warp_row_welford(row, cfg(c, "warps_per_block"), s);
  });
  cat.add(v2);

  Variant v3 = variant("layernorm", "block_row_welford",
                       "one block per row; Welford statistics merged across warps in shared memory");
  v3.params = ParamSpace({{"block_size", {64, 128, 256, 512, 1024}, "threads per block"}});
  v3.default_config = Config({{"block_size", 256}});
  v3.supports = [](const Problem& p, const Config&, const DeviceLimits&) { return grid_fits(p.shape.at("rows")); };
  v3.launch = layernorm_launch([](auto row, const Config& c, cudaStream_t s) {
    return kl::block_row_welford(row, cfg(c, "block_size"), s);
  });
  cat.add(v3);

  Variant v4 = variant("layernorm", "vec_welford",
                       "threads_per_row threads per row; 16-byte packs with scalar head/tail, Welford per pack, "
                       "the write pass re-reads x");
  v4.params = ParamSpace({group_axis(kGroupSizes), kBlockAxis}, group_fits_block, "threads_per_row <= block_size");
  v4.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}});
  v4.supports = [](const Problem& p, const Config& c, const DeviceLimits&) { return groups_fit(p, c); };
  v4.launch = layernorm_launch([](auto row, const Config& c, cudaStream_t s) {
    return kl::vec_welford(row, cfg(c, "threads_per_row"), cfg(c, "block_size"), s);
  });
  cat.add(v4);

  Variant v5 = variant("layernorm", "register_row",
                       "as vec_welford, but the row stays in registers: one read, exact two-pass statistics");
  v5.params = ParamSpace({group_axis(kRegisterGroupSizes), kBlockAxis, kPacksAxis}, group_fits_block,
                         "threads_per_row <= block_size");
  v5.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}, {"packs_per_thread", 4}});
  v5.supports = [](const Problem& p, const Config& c, const DeviceLimits&) { return register_capacity(p, c); };
  v5.launch = layernorm_launch([](auto row, const Config& c, cudaStream_t s) {
    return kl::register_row(row, cfg(c, "threads_per_row"), cfg(c, "block_size"), cfg(c, "packs_per_thread"), s);
  });
  cat.add(v5);

  Variant cudnn = variant("layernorm", "cudnn", "cuDNN graph API: NORM_FORWARD in layer-norm mode (inference)");
  cudnn.baseline = true;
  cudnn.library = true;
  // cuDNN 9.14 finalises no layer-norm graph past 2^31 elements (NOT_SUPPORTED_SHAPE at 3200000 x
  // 1024, TechJam case 14, on the H100): refused here, so a dispatch table's nearest winner skips it.
  cudnn.supports = [](const Problem& p, const Config&, const DeviceLimits&) {
    if (p.shape.at("rows") * p.shape.at("cols") > INT_MAX)
      return Support::no("cuDNN's layer norm takes at most 2^31 - 1 elements (NOT_SUPPORTED_SHAPE past it)");
    return Support::yes();
  };
  cudnn.launch = [](const LaunchArgs& a) {
    return library_status(cudnn_layernorm_forward(a.libraries, a.stream, a.problem.dtype, a.problem.shape.at("rows"),
                                                  a.problem.shape.at("cols"), a.tensors[0], a.tensors[1],
                                                  a.tensors[2], static_cast<float>(a.scalars[0]), a.tensors[3]));
  };
  cat.add(cudnn);
}

void add_residual_variants(Catalogue& cat) {
  Variant unfused = variant("residual_layernorm", "unfused",
                            "library-style chain, the reference point: an add kernel writes h, then vec_welford "
                            "LayerNorm reads it back (6 passes instead of 4)");
  unfused.baseline = true;
  unfused.params = ParamSpace({group_axis(kGroupSizes), kBlockAxis}, group_fits_block, "threads_per_row <= block_size");
  unfused.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}});
  unfused.supports = [](const Problem& p, const Config& c, const DeviceLimits&) { return groups_fit(p, c); };
  unfused.launch = residual_launch([](auto residual, const Config& c, cudaStream_t s) {
    const auto& row = residual.row;
    if (cudaError_t e = kl::residual_add(row.x, residual.r, residual.h, row.rows * row.cols, s); e != cudaSuccess)
      return e;
    auto normalized = row;
    normalized.x = residual.h;
    return kl::vec_welford(normalized, cfg(c, "threads_per_row"), cfg(c, "block_size"), s);
  });
  cat.add(unfused);

  // round_h changes nothing in f32 (h is already f32): only one of the two is worth timing, and
  // it is round_h=1, the one every dtype supports (the fallback's default config).
  auto round_h_matters = [](const Problem& p, const Config& c) {
    return p.dtype != DType::f32 || c.at("round_h") == 1 ? Support::yes()
                                                         : Support::no("round_h has no effect on f32");
  };

  Variant fused_vec = variant("residual_layernorm", "fused_vec",
                              "one kernel; pass 1 reads x and r, writes h and takes Welford statistics; pass 2 "
                              "re-reads h (from L2 when it fits) and writes y");
  fused_vec.params = ParamSpace({group_axis(kGroupSizes), kBlockAxis, kRoundAxis}, group_fits_block,
                                "threads_per_row <= block_size");
  fused_vec.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}, {"round_h", 1}});
  fused_vec.supports = [round_h_matters](const Problem& p, const Config& c, const DeviceLimits&) {
    const Support s = round_h_matters(p, c);
    if (!s.ok) return s;
    // Pass 2 normalizes the h it reads back, which is the stored (rounded) one: statistics of
    // the unrounded h would not be its statistics (a 1-column row then gives (h' - h) / sqrt(eps)
    // instead of beta).
    if (c.at("round_h") == 0)
      return Support::no("normalizes the stored h, so its statistics are those of the rounded h (round_h=1)");
    return groups_fit(p, c);
  };
  fused_vec.launch = residual_launch([](auto residual, const Config& c, cudaStream_t s) {
    return kl::residual_vec_welford(residual, cfg(c, "threads_per_row"), cfg(c, "block_size"), s);
  });
  cat.add(fused_vec);

  Variant fused_register = variant("residual_layernorm", "fused_register",
                                   "one kernel, h kept in registers: x and r read once, h and y written once "
                                   "(threads_per_row 32 is warp-per-row, more is block-per-row)");
  fused_register.params = ParamSpace({group_axis(kRegisterGroupSizes), kBlockAxis, kPacksAxis, kRoundAxis},
                                     group_fits_block, "threads_per_row <= block_size");
  fused_register.default_config =
      Config({{"threads_per_row", 32}, {"block_size", 256}, {"packs_per_thread", 4}, {"round_h", 1}});
  fused_register.supports = [round_h_matters](const Problem& p, const Config& c, const DeviceLimits&) {
    const Support s = round_h_matters(p, c);
    return s.ok ? register_capacity(p, c) : s;
  };
  fused_register.launch = residual_launch([](auto residual, const Config& c, cudaStream_t s) {
    return kl::residual_register_row(residual, cfg(c, "threads_per_row"), cfg(c, "block_size"),
                                     cfg(c, "packs_per_thread"), s);
  });
  cat.add(fused_register);

  Variant ring = variant("residual_layernorm", "fused_ring",
                         "as fused_register with one row per block, but persistent (sm_90): thread 0 keeps the next "
                         "rows' x and r on their way into a shared-memory ring by bulk copies (TMA)");
  ring.params = ParamSpace({kBlockAxis, kRingPacksAxis, kRingStagesAxis, kRoundAxis});
  ring.default_config = Config({{"block_size", 256}, {"packs_per_thread", 4}, {"stages", 3}, {"round_h", 1}});
  ring.supports = [round_h_matters](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const Support s = round_h_matters(p, c);
    return s.ok ? ring_fits(p, c, limits) : s;
  };
  ring.launch = residual_launch([](auto residual, const Config& c, cudaStream_t s) {
    return kl::residual_ring_row(residual, cfg(c, "block_size"), cfg(c, "packs_per_thread"), cfg(c, "stages"), s);
  });
  cat.add(ring);

  Variant pipelined = variant("residual_layernorm", "fused_pipelined",
                              "persistent blocks walk rows; the next rows' x and r stream into shared memory "
                              "(cp.async) while the current one is reduced and written: reads never pause");
  pipelined.params = ParamSpace({{"block_size", {128, 256, 512}, "threads per block, all on one row at a time"},
                                 kStagesAxis, kRoundAxis, kStreamingAxis});
  pipelined.default_config = Config({{"block_size", 256}, {"stages", 2}, {"round_h", 1}, {"streaming_stores", 1}});
  pipelined.supports = [round_h_matters](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const Support s = round_h_matters(p, c);
    return s.ok ? pipelined_shared_memory_fits(p, c, limits) : s;
  };
  pipelined.launch = residual_launch([](auto residual, const Config& c, cudaStream_t s) {
    return kl::residual_pipelined(residual, cfg(c, "block_size"), cfg(c, "stages"), c.at("streaming_stores") != 0, s);
  });
  cat.add(pipelined);
}

}  // namespace

void register_layernorm(Catalogue& cat) {
  cat.add(layernorm_primitive());
  add_layernorm_variants(cat);
  cat.add(residual_primitive());
  add_residual_variants(cat);
}

}  // namespace shapetune
