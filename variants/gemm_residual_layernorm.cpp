// gemm_bias_residual_layernorm.nt: a pre-LN Transformer's projection and the residual step after
// it in one primitive, h = round(round(x W^T + bias) + r) and y = LayerNorm(h), rounded where the
// two primitives it replaces (gemm_bias.nt, then residual_layernorm with round_h = 1) store their
// results. Each of those is a kernel of a few microseconds at the TechJam cases' small shapes and
// a pass over [m, n] at case 6's 1.28 million rows; fused, the projection's output never leaves
// the chip.
//   wgmma:   the Hopper GEMM (kernels/gemm/wgmma_sm90a.cu) whose epilogue adds the residual and
//            normalises each row a warp has staged: a tile spans every column (n <= 256).
//   unfused: the baseline, the two primitives' own kernels in turn (mma_sync, then fused_vec with
//            round_h = 1) through a workspace holding the projection.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "baselines/reference.hpp"
#include "kernels/gemm/wgmma.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kwg = kernels::gemm_wgmma;

constexpr const char* kName = "gemm_bias_residual_layernorm.nt";

// Tensor order: x [m, k], w [n, k], bias [n], r [m, n], gamma [n], beta [n], then h and y [m, n].
// w is drawn within +-sqrt(3 / k), as a layer's weights scale with its fan-in, so the projection
// has a standard deviation near 0.58 whatever k (x within +-1): |projection| stays below about 3.
std::vector<TensorSpec> tensors(const Problem& p) {
  const std::int64_t m = p.shape.at("m"), n = p.shape.at("n"), k = p.shape.at("k");
  const DType t = p.dtype;
  const double w = std::sqrt(3.0 / static_cast<double>(k));
  return {{"x", t, {m, k}, TensorRole::input, -1, 1},          {"w", t, {n, k}, TensorRole::input, -w, w},
          {"bias", t, {n}, TensorRole::input, -0.5, 0.5},      {"r", t, {m, n}, TensorRole::input, -1, 1},
          {"gamma", t, {n}, TensorRole::input, 0.5, 1.5},      {"beta", t, {n}, TensorRole::input, -0.5, 0.5},
          {"h", t, {m, n}, TensorRole::output},                {"y", t, {m, n}, TensorRole::output}};
}

// A variant's fp32 projection can round to the other side of a storage value than the float64
// one (its accumulation is off by far less than the storage type's ulp, but a value can lie that
// close to a rounding boundary): h is then one ulp of the projection off, at most 2 u |p| with
// |p| < 4 (u: the storage type's unit roundoff), plus the sum's own rounding, and y moves by that
// times rstd gamma (rstd near 1 here: h's spread is about one). Both stay within 16 u absolute;
// beyond that, two roundings of values up to 4 and LayerNorm's float statistics stay within 4 u
// relative. A skipped bias, residual or scale errs by 0.1 or more.
Tolerance tolerance(DType dtype) {
  const double u = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  return Tolerance{16 * u, 4 * u};
}

Primitive primitive() {
  Primitive p;
  p.name = kName;
  p.description = "a projection with bias and the pre-LN residual step after it: h = x W^T + bias + r (each sum "
                  "rounded as stored) and y = LayerNorm(h); fp32 accumulation and statistics";
  p.signature = "p = round(x W^T + bias); h = round(p + r); y[i,j] = (h[i,j] - mean_i) / sqrt(var_i + eps) "
                "gamma[j] + beta[j]";
  p.axes = {"m", "n", "k"};
  p.dtypes = {DType::f16, DType::bf16};
  p.scalars = {{"epsilon", 1e-5, "added to the variance"}};
  p.tensors = tensors;
  p.reference = [](const Problem& problem, std::span<const double> scalars, HostTensors& t) {
    const std::int64_t m = problem.shape.at("m"), n = problem.shape.at("n"), k = problem.shape.at("k");
    reference::GemmSpec spec;
    spec.m = m, spec.n = n, spec.k = k;
    spec.b_transposed = true;
    spec.bias = t[2].data();
    std::vector<double> projected(static_cast<std::size_t>(m * n));
    reference::gemm(spec, t[0].data(), t[1].data(), projected.data());
    const auto round = reference::rounding_for(problem.dtype);
    for (double& v : projected) v = round(v);
    reference::residual_layernorm(m, n, projected.data(), t[3].data(), t[4].data(), t[5].data(), scalars[0], round,
                                  t[6].data(), t[7].data());
  };
  p.cost = [](const Problem& problem) {
    const double m = static_cast<double>(problem.shape.at("m")), n = static_cast<double>(problem.shape.at("n")),
                 k = static_cast<double>(problem.shape.at("k"));
    // x, w, r and the vectors read once, h and y written: the projection's m n never moves.
    const double elements = m * k + n * k + 3 * m * n + 3 * n;
    return Cost{elements * static_cast<double>(dtype_size(problem.dtype)), 2 * m * n * k + 10 * m * n};
  };
  p.tolerance = tolerance;
  p.default_variant = "unfused";
  p.validate_shape = [](const Shape& shape) {
    for (const char* axis : {"m", "n", "k"}) {
      const std::int64_t v = shape.at(axis);
      if (v < 1 || v > INT_MAX) return Support::no(std::string(axis) + " must be in [1, 2^31 - 1]");
    }
    if (shape.at("m") > (std::int64_t{1} << 48) / std::max(shape.at("n"), shape.at("k")))
      return Support::no("m*n and m*k must be at most 2^48 elements");
    return Support::yes();
  };
  return p;
}

// ---- wgmma ------------------------------------------------------------------------------------

// The GEMM as wgmma_supports sees it, and the epilogue's own need: every column in one tile.
Support wgmma_fused_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const std::int64_t m = p.shape.at("m"), n = p.shape.at("n"), k = p.shape.at("k");
  const Problem gemm{"gemm_bias.nt", p.dtype, Shape({{"m", m}, {"n", n}, {"k", k}})};
  if (Support s = wgmma_supports(kernels::gemm::Layout::nt, gemm, c, limits); !s.ok) return s;
  const kwg::TileShape& t = kwg::kTiles[static_cast<std::size_t>(c.at("tile"))];
  if (n > t.block_n)
    return Support::no("a warp normalises the whole rows it stages: n = " + std::to_string(n) +
                       " needs a tile of at least that many columns (this one has " + std::to_string(t.block_n) + ")");
  return Support::yes();
}

template <typename T>
LaunchStatus wgmma_fused(const LaunchArgs& a) {
  kernels::gemm::Args<T> args;
  args.a = static_cast<const T*>(a.tensors[0]);
  args.b = static_cast<const T*>(a.tensors[1]);
  args.bias = static_cast<const T*>(a.tensors[2]);
  args.c = static_cast<T*>(a.tensors[6]);
  args.m = a.problem.shape.at("m"), args.n = a.problem.shape.at("n"), args.k = a.problem.shape.at("k");
  args.layout = kernels::gemm::Layout::nt;
  args.epilogue = kernels::gemm::Epilogue::bias;
  if (reinterpret_cast<std::uintptr_t>(args.a) % 16 != 0 || reinterpret_cast<std::uintptr_t>(args.b) % 16 != 0)
    return LaunchStatus::refused("TMA needs x and w 16-byte aligned");
  kwg::ResidualLayerNorm<T> norm;
  norm.residual = static_cast<const T*>(a.tensors[3]);
  norm.gamma = static_cast<const T*>(a.tensors[4]);
  norm.beta = static_cast<const T*>(a.tensors[5]);
  norm.y = static_cast<T*>(a.tensors[7]);
  norm.epsilon = static_cast<float>(a.scalars[0]);
  const cudaError_t e = kwg::wgmma_residual_layernorm(args, norm, cfg(a.config, "tile"), cfg(a.config, "stages"),
                                                      cfg(a.config, "persistent") != 0, a.stream);
  if (e == cudaErrorNotSupported)
    return LaunchStatus::refused("the current device is not sm_90 (or its driver cannot encode TMA tensor maps)");
  return launch_status(e);
}

// ---- unfused ----------------------------------------------------------------------------------

// The two primitives' variants the baseline chains, at their default configs (round_h = 1), found
// once at registration.
struct Chain {
  const Variant* gemm;
  const Variant* norm;
  Config norm_config;
};

Chain chain_in(const Catalogue& cat) {
  const Variant* gemm = cat.find_variant("gemm_bias.nt", "mma_sync");
  const Variant* norm = cat.find_variant("residual_layernorm", "fused_vec");
  if (!gemm || !norm)
    throw std::logic_error("register_gemm_residual_layernorm needs the GEMM and LayerNorm variants registered first");
  Config norm_config = norm->default_config;
  norm_config.set("round_h", 1);
  return {gemm, norm, norm_config};
}

std::size_t projection_bytes(const Problem& p) {
  return align256(static_cast<std::size_t>(p.shape.at("m") * p.shape.at("n")) * dtype_size(p.dtype));
}

Problem gemm_part(const Problem& p) {
  return {"gemm_bias.nt", p.dtype, Shape({{"m", p.shape.at("m")}, {"n", p.shape.at("n")}, {"k", p.shape.at("k")}})};
}
Problem norm_part(const Problem& p) {
  return {"residual_layernorm", p.dtype, Shape({{"rows", p.shape.at("m")}, {"cols", p.shape.at("n")}})};
}

Support unfused_supports(const Chain& c, const Problem& p, const DeviceLimits& limits) {
  if (Support s = c.gemm->supports(gemm_part(p), c.gemm->default_config, limits); !s.ok)
    return Support::no("gemm_bias.nt mma_sync: " + s.reason);
  if (Support s = c.norm->supports(norm_part(p), c.norm_config, limits); !s.ok)
    return Support::no("residual_layernorm fused_vec: " + s.reason);
  return Support::yes();
}

LaunchStatus unfused(const Chain& c, const LaunchArgs& a) {
  void* projected = a.workspace;
  const Problem gemm = gemm_part(a.problem), norm = norm_part(a.problem);
  void* gemm_tensors[] = {a.tensors[0], a.tensors[1], a.tensors[2], projected};
  const double plain[] = {1.0, 0.0};
  const LaunchArgs g{gemm, c.gemm->default_config, gemm_tensors, a.stream, a.libraries, nullptr, 0, plain};
  if (LaunchStatus s = c.gemm->launch(g); !s.ok) return s;
  void* norm_tensors[] = {projected, a.tensors[3], a.tensors[4], a.tensors[5], a.tensors[6], a.tensors[7]};
  const LaunchArgs n{norm, c.norm_config, norm_tensors, a.stream, a.libraries, nullptr, 0, a.scalars};
  return c.norm->launch(n);
}

}  // namespace

void register_gemm_residual_layernorm(Catalogue& cat) {
  const Chain chain = chain_in(cat);  // the catalogue keeps its variants where they were added
  cat.add(primitive());

  Variant u;
  u.primitive = kName;
  u.name = "unfused";
  u.description = "the two primitives it fuses in turn: gemm_bias.nt's mma_sync into a workspace, then "
                  "residual_layernorm's fused_vec (round_h = 1)";
  u.baseline = true;
  u.supports = [chain](const Problem& p, const Config&, const DeviceLimits& limits) {
    return unfused_supports(chain, p, limits);
  };
  u.workspace_bytes = [](const Problem& p, const Config&) { return projection_bytes(p); };
  u.launch = [chain](const LaunchArgs& a) { return unfused(chain, a); };
  cat.add(u);

  Variant w;
  w.primitive = kName;
  w.name = "wgmma";
  w.description = "the Hopper wgmma GEMM (sm_90a) whose epilogue rounds the projection, adds the residual and "
                  "normalises each row a warp has staged: n up to the tile's columns (256)";
  std::vector<std::int64_t> stages;
  for (int s = kwg::kMinStages; s <= kwg::kMaxStages; ++s) stages.push_back(s);
  w.params = ParamSpace({{"tile", tile_indices(kwg::kTiles.size()), "block tile: an index into wgmma's table"},
                         {"stages", stages, "shared-memory buffers of the TMA pipeline"},
                         {"persistent", {0, 1}, kWgmmaPersistentHelp}});
  // 128x256, the one tile that takes every n this variant can (up to 256), 3 stages.
  w.default_config = Config({{"tile", 0}, {"stages", 3}, {"persistent", 0}});
  w.supports = wgmma_fused_supports;
  w.launch = [](const LaunchArgs& a) {
    switch (a.problem.dtype) {
      case DType::f16: return wgmma_fused<__half>(a);
      case DType::bf16: return wgmma_fused<__nv_bfloat16>(a);
      default: return LaunchStatus::failure("no wgmma kernel for " + std::string(dtype_name(a.problem.dtype)));
    }
  };
  cat.add(w);
}

}  // namespace shapetune
