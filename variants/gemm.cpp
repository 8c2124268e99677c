// GEMM: the twelve primitives "<op>.<layout>" (variants/gemm_common.hpp names them), their float64
// reference (baselines/reference_gemm.cpp), and the ladder of CUDA-core variants
// (kernels/gemm/gemm.cu). Tensor-core and cuBLAS variants register on the same primitives from their
// own files.
#include <climits>
#include <cmath>

#include "baselines/reference.hpp"
#include "kernels/gemm/gemm.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kg = kernels::gemm;
using kg::Epilogue;
using kg::Layout;

// ---- the primitives -----------------------------------------------------------------------------


}  // namespace

// Unit roundoff (half an ulp of 1) of a stored result.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

// The tolerance of a depth-k problem, for inputs uniform in [-1, 1] (the drawn ranges) and
// |alpha|, |beta| <= 1.
//
// Accumulation is fp32 in every dtype (unit roundoff u = 2^-24; f16 and bf16 products are exact
// in fp32, f32 ones are fused into the add). The partial sum s_i of i products has standard
// deviation sqrt(i)/3, and adding to it rounds by at most half an ulp (ulp <= 2u|s_i|), with
// random sign: over K steps the error has standard deviation below u sqrt(sum_i i/27) ~ 0.14 u K.
// The worst-case bound, ~u K^2/4, would be useless at K = 4096, so the bound here is
// A = u (2K + 16): 2uK is some 15 sigma, leaving room for accumulators that truncate instead of
// rounding (tensor cores, whose error is biased), and 16u covers alpha, beta C, the bias and the
// activation, each an fp32 step on O(1) values.
// tf32: each input keeps 10 mantissa bits (an error up to 2^-10 relative when truncated), so each
// product is off by up to 2^-9 relative, independently: over K products that is a random walk of
// standard deviation ~0.27 sqrt(K) 2^-10, and A gains 2^-9 sqrt(K) (over 7 sigma).
// The output is then rounded to the storage type (unit roundoff u_out: 2^-24, 2^-11 for f16,
// 2^-8 for bf16), so |out - ref| <= A + u_out |ref|. With rtol = 2 u_out + 16u, the least atol
// for which "|out - ref| <= atol or <= rtol |ref|" accepts every such error is
// A rtol / (rtol - u_out): about 1.06 A for fp32 outputs, 2 A for 16-bit ones, whose output
// rounding dominates everywhere but near zero.
//
// A 16-bit GELU epilogue takes the GELU of its pre-activation s as stored (rounded to the output
// type), as PyTorch's Linear then F.gelu does, and so does the reference. Where the fp32 sum and the
// float64 one straddle a rounding boundary they are stored one ulp apart (<= 2 u_out |s|), and the
// GELU G carries that to the output: for s >= 0 by at most 2.6 u_out |G(s)| (2 G'(s) / Phi(s) peaks
// near s = 1), for s < 0 by at most 0.4 u_out absolute (2 |s G'(s)| peaks near 0.39 at s = -1.7),
// where the output rounding adds at most 0.17 u_out (|G| <= 0.17). With the output rounding the
// relative error reaches c = 3.6 u_out, so rtol = 4 u_out + 16u; atol covers the accumulation bound
// through G's slope (<= 1.13) where the relative test cannot, A 1.13 rtol / (rtol - c), plus 0.6 u_out.
// (One tolerance per problem: the check cannot tell flipped elements from others.)
Tolerance gemm_tolerance(DType dtype, std::int64_t k, bool gelu_of_stored) {
  constexpr double u = 0x1p-24;
  const double depth = static_cast<double>(k);
  double bound = u * (2 * depth + 16);
  if (dtype == DType::tf32) bound += 0x1p-9 * std::sqrt(depth);
  const double u_out = unit_roundoff(dtype);
  if (gelu_of_stored && (dtype == DType::f16 || dtype == DType::bf16)) {
    const double rtol = 4 * u_out + 16 * u, c = 3.6 * u_out;
    return Tolerance{1.13 * bound * rtol / (rtol - c) + 0.6 * u_out, rtol};
  }
  const double rtol = 2 * u_out + 16 * u;
  return Tolerance{bound * rtol / (rtol - u_out), rtol};
}

namespace {

// The depth the per-dtype tolerance (shown by `shapetune list`) assumes: the seed squares' middle.
constexpr std::int64_t kTypicalDepth = 4096;

const char* operand_a(Layout layout) { return layout == Layout::tn ? "A[k,i]" : "A[i,k]"; }
const char* operand_b(Layout layout) { return layout == Layout::nt ? "B[j,k]" : "B[k,j]"; }

std::string signature_of(GemmKind kind) {
  std::string sum = std::string("alpha sum_k ") + operand_a(kind.layout) + " " + operand_b(kind.layout) +
                    " + beta C[i,j]";
  switch (kind.epilogue) {
    case Epilogue::none: return "C[i,j] = " + sum;
    case Epilogue::bias: return "C[i,j] = " + sum + " + bias[j]";
    case Epilogue::bias_relu: return "C[i,j] = relu(" + sum + " + bias[j])";
    case Epilogue::bias_gelu:
      return "C[i,j] = gelu(" + sum + " + bias[j]), gelu(x) = x Phi(x) (erf form); in f16 and bf16 the gelu reads "
             "its input rounded to the storage type, as a framework's Linear then GELU";
  }
  return sum;
}

std::string description_of(GemmKind kind) {
  static const char* const layouts[] = {"A [m,k] times B [k,n]", "A [m,k] times B^T, B stored [n,k]",
                                        "A^T times B [k,n], A stored [k,m]"};
  static const char* const epilogues[] = {"", ", plus a bias per column", ", plus a bias per column, then ReLU",
                                          ", plus a bias per column, then GELU"};
  return std::string("row-major GEMM, ") + layouts[static_cast<int>(kind.layout)] +
         epilogues[static_cast<int>(kind.epilogue)] + "; beta = 0 leaves C unread";
}

std::vector<TensorSpec> gemm_tensors(const Problem& problem, GemmKind kind) {
  const std::int64_t m = problem.shape.at("m"), n = problem.shape.at("n"), k = problem.shape.at("k");
  const DType t = storage_of(problem.dtype);
  std::vector<TensorSpec> specs;
  specs.push_back({"a", t, kind.layout == Layout::tn ? std::vector<std::int64_t>{k, m} : std::vector<std::int64_t>{m, k},
                   TensorRole::input});
  specs.push_back({"b", t, kind.layout == Layout::nt ? std::vector<std::int64_t>{n, k} : std::vector<std::int64_t>{k, n},
                   TensorRole::input});
  if (kind.epilogue != Epilogue::none) specs.push_back({"bias", t, {n}, TensorRole::input});
  specs.push_back({"c", t, {m, n}, TensorRole::inout});
  return specs;
}

Support validate_gemm_shape(const Shape& shape) {
  for (const char* axis : {"m", "n", "k"}) {
    const std::int64_t v = shape.at(axis);
    if (v < 1 || v > INT_MAX) return Support::no(std::string(axis) + " must be in [1, 2^31 - 1]");
  }
  const std::int64_t m = shape.at("m"), n = shape.at("n"), k = shape.at("k");
  // Far beyond any device's memory, and keeps every matrix's element count (and its bytes) and
  // every element offset inside int64.
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
  if (m > kMaxElements / n || m > kMaxElements / k || k > kMaxElements / n)
    return Support::no("m*n, m*k and k*n must each be at most 2^48 elements");
  return Support::yes();
}

Primitive gemm_primitive(const std::string& name, GemmKind kind) {
  Primitive p;
  p.name = name;
  p.description = description_of(kind);
  p.signature = signature_of(kind);
  p.axes = {"m", "n", "k"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16, DType::tf32};
  p.tensors = [kind](const Problem& problem) { return gemm_tensors(problem, kind); };
  p.scalars = {{"alpha", 1, "scales op(A) op(B)"},
               {"beta", 0, "scales the C read back; 0 means C is not read (BLAS semantics)"}};
  p.reference = [kind](const Problem& problem, std::span<const double> scalars, HostTensors& t) {
    const bool has_bias = kind.epilogue != Epilogue::none;
    reference::GemmSpec spec;
    spec.m = problem.shape.at("m");
    spec.n = problem.shape.at("n");
    spec.k = problem.shape.at("k");
    spec.a_transposed = kind.layout == Layout::tn;
    spec.b_transposed = kind.layout == Layout::nt;
    spec.alpha = scalars.size() > 0 ? scalars[0] : 1;
    spec.beta = scalars.size() > 1 ? scalars[1] : 0;
    spec.bias = has_bias ? t[2].data() : nullptr;
    if (kind.epilogue == Epilogue::bias_relu) spec.activation = reference::Activation::relu;
    if (kind.epilogue == Epilogue::bias_gelu) {
      spec.activation = reference::Activation::gelu;
      // The kernels' GELU reads the 16-bit pre-activation as stored (kernels/gemm/epilogue.cuh).
      if (problem.dtype == DType::f16 || problem.dtype == DType::bf16)
        spec.round_pre_activation = reference::rounding_for(problem.dtype);
    }
    reference::gemm(spec, t[0].data(), t[1].data(), t[has_bias ? 3 : 2].data());
  };
  p.cost = [kind](const Problem& problem) {
    const double m = static_cast<double>(problem.shape.at("m")), n = static_cast<double>(problem.shape.at("n"));
    const double k = static_cast<double>(problem.shape.at("k"));
    const double bias = kind.epilogue != Epilogue::none ? n : 0;
    // A, B and the bias read once, C written once. C is also read when beta != 0, which the
    // problem (the dispatch key) does not know, so it is counted once either way: the tuning
    // value of beta is 0. The epilogue's few operations per output are left out of the flops.
    const double elements = m * k + k * n + bias + m * n;
    return Cost{elements * static_cast<double>(dtype_size(problem.dtype)), 2 * m * n * k};
  };
  const bool gelu = kind.epilogue == Epilogue::bias_gelu;
  p.problem_tolerance = [gelu](const Problem& problem) {
    return gemm_tolerance(problem.dtype, problem.shape.at("k"), gelu);
  };
  p.tolerance = [gelu](DType dtype) { return gemm_tolerance(dtype, kTypicalDepth, gelu); };
  // Untuned, the library's own first choice: cuBLASLt's algo 0 runs every shape and dtype of the
  // plain GEMMs and the f32 and tf32 ones with a bias or bias+ReLU, where the plainest kernel was
  // a cliff (the MLP's f32 512x256x784 on the H200: naive 119.6 us, cuBLASLt algo 0 16.1 us,
  // reports/h200/2026-12-01-gemm). It has no erf GELU and misses the 16-bit bias tolerance; there
  // the tensor-core kernel of the dtype (sm_80+), else the fastest CUDA-core one (warp_tiled_async:
  // f32 on sm_80+; warp_tiled_broadcast). wgmma is not among them: it refuses operands off a
  // 16-byte boundary at launch, which supports() cannot see, and a fallback must not fail there.
  p.default_variant = "cublaslt";
  p.fallback_variants = {"mma_sync", "mma_sync_tf32", "warp_tiled_async", "warp_tiled_broadcast"};
  p.validate_shape = validate_gemm_shape;
  return p;
}

// ---- the variants -------------------------------------------------------------------------------

Support cuda_core_dtype(const Problem& p) {
  if (p.dtype == DType::tf32)
    return Support::no("CUDA-core variants multiply in fp32; tf32 problems are for tensor-core variants and cuBLAS");
  return Support::yes();
}

Support threads_fit(std::int64_t threads, const DeviceLimits& limits) {
  if (threads > limits.max_threads_per_block)
    return Support::no(std::to_string(threads) + " threads per block; the device allows " +
                       std::to_string(limits.max_threads_per_block));
  return Support::yes();
}

Support shared_fits(std::size_t bytes, const DeviceLimits& limits) {
  if (static_cast<std::int64_t>(bytes) > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(bytes) + " bytes of shared memory per block; the device allows " +
                       std::to_string(limits.shared_memory_per_block_optin));
  return Support::yes();
}

// The block-tiled kernels launch one block per output tile on a 1-D grid.
std::int64_t output_tiles(const Problem& p, std::int64_t bm, std::int64_t bn) {
  return (p.shape.at("m") + bm - 1) / bm * ((p.shape.at("n") + bn - 1) / bn);
}

Support tiles_fit(const Problem& p, std::int64_t bm, std::int64_t bn) {
  return output_tiles(p, bm, bn) <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

Support all_of(std::initializer_list<Support> checks) {
  for (const Support& s : checks)
    if (!s.ok) return s;
  return Support::yes();
}

// The tile a config's index names; nullptr outside the curated list.
const kg::BlockTile* tile_of(const Config& c, const kg::BlockTile* tiles, int count) {
  const std::int64_t index = c.at("tile");
  return index >= 0 && index < count ? &tiles[index] : nullptr;
}

Support block_tile_supports(const Problem& p, const kg::BlockTile* tile, bool double_buffered,
                            const DeviceLimits& limits) {
  if (!tile) return Support::no("no such tile");
  const int element_bytes = static_cast<int>(dtype_size(p.dtype));
  return all_of({cuda_core_dtype(p), threads_fit(tile->threads(), limits),
                 shared_fits(kg::block_tile_shared_bytes(*tile, double_buffered, limits.compute_capability, element_bytes),
                             limits),
                 tiles_fit(p, tile->bm, tile->bn)});
}

std::string tile_list(const kg::BlockTile* tiles, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const kg::BlockTile& t = tiles[i];
    out += (i ? "; " : "") + std::to_string(i) + ": " + std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" +
           std::to_string(t.bk) + ", ";
    if (t.warps_m > 0)
      out += std::to_string(t.warps_m) + "x" + std::to_string(t.threads() / 32 / t.warps_m) + " warps, lanes " +
             std::to_string(t.lanes_m) + "x" + std::to_string(32 / t.lanes_m) + ", ";
    out += std::to_string(t.tm) + "x" + std::to_string(t.tn) + " per thread";
    if (t.min_blocks > 1) out += ", " + std::to_string(t.min_blocks) + " blocks per SM";
    if (t.register_staged) out += ", next K step staged in registers";
    if (t.async_stages > 0) out += ", " + std::to_string(t.async_stages) + " cp.async stages";
  }
  return out;
}


// Adapts `call(Args<T>, launch args)` to the catalogue's launch signature.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> gemm_launch(Call call) {
  return [call](const LaunchArgs& a) {
    return with_storage_type(a.problem.dtype, "the CUDA-core GEMM ladder", [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(gemm_args<T>(a), a));
    });
  };
}

Variant base_variant(const std::string& primitive, const char* name, const char* description) {
  Variant v;
  v.primitive = primitive;
  v.name = name;
  v.description = description;
  return v;
}

void add_simple_variants(Catalogue& cat, const std::string& primitive) {
  Variant naive = base_variant(primitive, "naive", "one thread per output, dot product straight from global memory (the plainest)");
  naive.params = ParamSpace({{"block_size", {64, 128, 256, 512, 1024}, "threads per block, along n"}});
  naive.default_config = Config({{"block_size", 128}});
  naive.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return all_of({cuda_core_dtype(p), threads_fit(c.at("block_size"), limits)});
  };
  naive.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::naive(args, cfg(a.config, "block_size"), a.stream);
  });
  cat.add(naive);

  Variant smem = base_variant(primitive, "smem_tiled",
                              "tile x tile threads share square tiles of A and B through shared memory, one output each");
  smem.params = ParamSpace({{"tile", {kg::kSmemTiles[0], kg::kSmemTiles[1]}, "tile side: tile^2 threads and outputs per block"},
                            {"pad", {0, 1}, "extra column per shared row, against the bank conflicts of transposed stores"}});
  smem.default_config = Config({{"tile", 16}, {"pad", 1}});
  smem.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const std::int64_t tile = c.at("tile");
    const auto shared = static_cast<std::size_t>(2 * tile * (tile + c.at("pad")) * 4);
    return all_of({cuda_core_dtype(p), threads_fit(tile * tile, limits), shared_fits(shared, limits),
                   tiles_fit(p, tile, tile)});
  };
  smem.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::smem_tiled(args, cfg(a.config, "tile"), cfg(a.config, "pad"), a.stream);
  });
  cat.add(smem);
}

void add_block_tiled_variants(Catalogue& cat, const std::string& primitive) {
  const ParamAxis block_tile_axis{"tile", tile_indices(kg::kBlockTileCount),
                                  "block tile (bm x bn x bk, outputs per thread): " +
                                      tile_list(kg::kBlockTiles, kg::kBlockTileCount)};

  Variant blocked = base_variant(primitive, "register_blocked",
                                 "each thread a tm x tn block of outputs from float4 reads of shared tiles; 16-byte global loads where aligned");
  blocked.params = ParamSpace({block_tile_axis});
  blocked.default_config = Config({{"tile", 0}});
  blocked.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return block_tile_supports(p, tile_of(c, kg::kBlockTiles, kg::kBlockTileCount), false, limits);
  };
  blocked.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::register_blocked(args, cfg(a.config, "tile"), a.stream);
  });
  cat.add(blocked);

  Variant buffered = base_variant(primitive, "double_buffered",
                                  "register_blocked with two shared stages: the next K step loads (registers on sm_75, "
                                  "cp.async on sm_80+) while this one multiplies");
  buffered.params = ParamSpace({block_tile_axis});
  buffered.default_config = Config({{"tile", 0}});
  buffered.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return block_tile_supports(p, tile_of(c, kg::kBlockTiles, kg::kBlockTileCount), true, limits);
  };
  buffered.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::double_buffered(args, cfg(a.config, "tile"), a.stream);
  });
  cat.add(buffered);

  Variant warp = base_variant(primitive, "warp_tiled",
                              "double_buffered with warp tiles: lanes' 4x4 pieces side by side, so shared reads are "
                              "conflict-free and warps share few rows");
  warp.params = ParamSpace({{"tile", tile_indices(kg::kWarpTileCount),
                             "block tile (bm x bn x bk, outputs per thread): " + tile_list(kg::kWarpTiles, kg::kWarpTileCount)}});
  warp.default_config = Config({{"tile", 0}});
  warp.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return block_tile_supports(p, tile_of(c, kg::kWarpTiles, kg::kWarpTileCount), true, limits);
  };
  warp.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::warp_tiled(args, cfg(a.config, "tile"), a.stream);
  });
  cat.add(warp);

  Variant split = base_variant(primitive, "split_k",
                               "K cut into slices multiplied in parallel (double_buffered) into fp32 partials, then "
                               "one pass sums them and applies the epilogue: for small M x N with large K");
  split.params = ParamSpace({block_tile_axis, {"splits", {2, 4, 8, 16}, "K slices, each a whole number of bk steps"}});
  split.default_config = Config({{"tile", 2}, {"splits", 4}});
  split.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const kg::BlockTile* tile_shape = tile_of(c, kg::kBlockTiles, kg::kBlockTileCount);
    if (Support s = block_tile_supports(p, tile_shape, true, limits); !s.ok) return s;
    const kg::BlockTile& tile = *tile_shape;
    const std::int64_t splits = c.at("splits"), k_steps = (p.shape.at("k") + tile.bk - 1) / tile.bk;
    if (splits > k_steps)
      return Support::no("K has " + std::to_string(k_steps) + " steps of " + std::to_string(tile.bk) +
                         "; more slices than that leaves some empty");
    // Past a few blocks per SM the unsplit kernel already fills the device; splitting would only
    // add the partials' round trip through memory.
    if (output_tiles(p, tile.bm, tile.bn) >= 4 * static_cast<std::int64_t>(limits.sm_count))
      return Support::no("M x N already makes 4 blocks per SM without splitting");
    constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;
    if (kg::split_k_workspace_bytes(p.shape.at("m"), p.shape.at("n"), static_cast<int>(splits)) > kMaxWorkspace)
      return Support::no("partial sums would need more than 1 GiB of workspace");
    return Support::yes();
  };
  split.workspace_bytes = [](const Problem& p, const Config& c) {
    return kg::split_k_workspace_bytes(p.shape.at("m"), p.shape.at("n"), static_cast<int>(c.at("splits")));
  };
  split.launch = [launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
                    return kg::split_k(args, cfg(a.config, "tile"), cfg(a.config, "splits"), a.workspace,
                                       a.workspace_bytes, a.stream);
                  })](const LaunchArgs& a) {
    const std::size_t needed = kg::split_k_workspace_bytes(a.problem.shape.at("m"), a.problem.shape.at("n"),
                                                           cfg(a.config, "splits"));
    if (!a.workspace || a.workspace_bytes < needed)
      return LaunchStatus::failure("split_k needs " + std::to_string(needed) + " bytes of workspace for its partial sums");
    return launch(a);
  };
  cat.add(split);

  Variant broadcast = base_variant(primitive, "warp_tiled_broadcast",
                                   "warp_tiled for large problems: lanes paired so each float4 shared read serves two "
                                   "lanes (half the shared-memory clocks), next k's fragments prefetched into "
                                   "registers, interior loads walking precomputed offsets");
  broadcast.params = ParamSpace({{"tile", tile_indices(kg::kBroadcastTileCount),
                                  "block tile (bm x bn x bk, outputs per thread): " +
                                      tile_list(kg::kBroadcastTiles, kg::kBroadcastTileCount)}});
  broadcast.default_config = Config({{"tile", 0}});
  broadcast.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return block_tile_supports(p, tile_of(c, kg::kBroadcastTiles, kg::kBroadcastTileCount), true, limits);
  };
  broadcast.launch = gemm_launch([](const auto& args, const LaunchArgs& a) {
    return kg::warp_tiled_broadcast(args, cfg(a.config, "tile"), a.stream);
  });
  cat.add(broadcast);

  Variant async = base_variant(primitive, "warp_tiled_async",
                               "f32 on sm_80+: warp_tiled_broadcast's lanes with both operands copied to shared "
                               "memory by 16-byte cp.async as they lie (a ring of stages, no staging registers, "
                               "no transposing stores); K-contiguous tiles swizzled against bank conflicts");
  async.params = ParamSpace({{"tile", tile_indices(kg::kAsyncTileCount),
                              "block tile (bm x bn x bk, outputs per thread): " +
                                  tile_list(kg::kAsyncTiles, kg::kAsyncTileCount)}});
  async.default_config = Config({{"tile", 0}});
  async.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const kg::BlockTile* tile = tile_of(c, kg::kAsyncTiles, kg::kAsyncTileCount);
    if (!tile) return Support::no("no such tile");
    if (p.dtype != DType::f32)
      return Support::no("copies f32 tiles as they lie; 16-bit types are for the tensor-core variants");
    if (limits.compute_capability < 80)
      return Support::no("cp.async needs sm_80 or newer; this device is sm_" + std::to_string(limits.compute_capability));
    if (p.shape.at("m") > kg::kAsyncMaxExtent || p.shape.at("n") > kg::kAsyncMaxExtent)
      return Support::no("m and n must be at most 2^31 - 257 (32-bit tile arithmetic)");
    // m is A's leading dimension in tn, n is B's in nn and tn: the kernel steps 8 ld in 32 bits.
    const Layout layout = parse_gemm_primitive(p.primitive)->layout;
    if (layout == Layout::tn && p.shape.at("m") > kg::kAsyncMaxStridedExtent)
      return Support::no("m, A's leading dimension in tn, must be below 2^28 (8 ld is 32-bit in the kernel)");
    if (layout != Layout::nt && p.shape.at("n") > kg::kAsyncMaxStridedExtent)
      return Support::no("n, B's leading dimension in nn and tn, must be below 2^28 (8 ld is 32-bit in the kernel)");
    return all_of({threads_fit(tile->threads(), limits), shared_fits(kg::async_tile_shared_bytes(*tile), limits),
                   tiles_fit(p, tile->bm, tile->bn)});
  };
  async.launch = [](const LaunchArgs& a) {
    return launch_status(kg::warp_tiled_async(gemm_args<float>(a), cfg(a.config, "tile"), a.stream));
  };
  cat.add(async);
}

}  // namespace

void register_gemm(Catalogue& cat) {
  for (const std::string& name : gemm_primitive_names()) {
    cat.add(gemm_primitive(name, *parse_gemm_primitive(name)));
    add_simple_variants(cat, name);
    add_block_tiled_variants(cat, name);
  }
}

}  // namespace shapetune
