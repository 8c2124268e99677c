// The QKV projection of attention: x [B S, D] times the stacked weights w [3 D, D] (Q's, K's, V's,
// as PyTorch's in_proj_weight) plus bias [3 D], delivered heads-split as Q, K, V [B, H, S, hd]
// (D = H hd): the layout attention.*.split reads. Axes B, S, H, hd, as attention's; dtypes f16,
// bf16 and tf32 (f32 storage, TF32 products). The ladder:
//   split:             the reference's way (three nn.Linear, then view and transpose): three cuBLAS
//                      GEMMs into fp32 [B S, D] each, then one pass that adds the biases, rounds once
//                      and transposes the heads out; the baseline;
//   packed:            one cuBLAS GEMM against all 3 D rows of w (one launch, x read once), then the
//                      same pass;
//   packed_head_split: one mma.sync GEMM whose epilogue adds the bias and writes Q, K and V straight
//                      into the heads-split layout: no [B S, 3 D] intermediate, no second pass;
//   wgmma_head_split:  the same epilogue on the Hopper wgmma GEMM (TMA, warp-specialised; sm_90a,
//                      f16, bf16 and tf32): the projection at the speed of that GEMM.
// Whether a packed GEMM passes the element-wise gate is the sweep's to decide per shape and dtype
// (the TechJam work found packed fp16 failing on some shapes under cuBLAS): each variant is
// checked against the float64 reference like any other.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "baselines/cublas.hpp"
#include "baselines/reference.hpp"
#include "kernels/attention/qkv_projection.cuh"
#include "kernels/gemm/tensor_core.cuh"
#include "kernels/gemm/wgmma.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ktc = kernels::gemm_tensor_core;
namespace kwg = kernels::gemm_wgmma;

struct Projection {
  std::int64_t batch, seq, heads, head_dim;
  std::int64_t rows() const { return batch * seq; }
  std::int64_t width() const { return heads * head_dim; }  // D
};

Projection projection_of(const Problem& p) {
  return {p.shape.at("B"), p.shape.at("S"), p.shape.at("H"), p.shape.at("hd")};
}


// The float64 reference costs 3 D^2 multiply-adds a row; past this many in all, a sample of rows
// is computed and checked (TechJam case 14, 3.2 million rows at D = 1024, would take 1e13).
constexpr double kReferenceBudget = 4e9;

// The rows (b S + s) the reference computes: all where that fits the budget, else in every batch
// row the first, the last and evenly spaced ones between.
std::vector<std::int64_t> reference_rows(const Projection& p) {
  const double row_cost = 3.0 * static_cast<double>(p.width()) * static_cast<double>(p.width());
  const double affordable = kReferenceBudget / row_cost;
  if (static_cast<double>(p.rows()) <= affordable) return {};
  const std::int64_t per_batch = std::clamp<std::int64_t>(static_cast<std::int64_t>(affordable / p.batch), 2, p.seq);
  std::vector<std::int64_t> rows;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t last = -1;
    for (std::int64_t r = 0; r < per_batch; ++r) {
      const std::int64_t s = r * (p.seq - 1) / (per_batch - 1);
      if (s != last) rows.push_back(b * p.seq + s);
      last = s;
    }
  }
  return rows;
}

Support validate_shape(const Shape& s) {
  const std::int64_t B = s.at("B"), S = s.at("S"), H = s.at("H"), hd = s.at("hd");
  if (std::max({B, S, H, hd}) > INT_MAX / 4) return Support::no("B, S, H and hd must be below 2^29");
  if (H * hd > 16384) return Support::no("D = H hd must be at most 16384");
  if (B * S * H * hd > (std::int64_t{1} << 36)) return Support::no("B S H hd must be at most 2^36 (per tensor)");
  return Support::yes();
}

Primitive qkv_primitive() {
  Primitive p;
  p.name = "qkv_projection";
  p.description = "attention's input projection: x [B S, D] w[3 D, D]^T + bias [3 D], delivered heads-split as "
                  "Q, K, V [B, H, S, hd] (D = H hd)";
  p.signature = "q|k|v[b,h,s,d] = sum_e x[b S + s, e] w[j D + h hd + d, e] + bias[j D + h hd + d], j = 0|1|2";
  p.axes = {"B", "S", "H", "hd"};
  p.dtypes = {DType::f16, DType::bf16, DType::tf32};
  p.tensors = [](const Problem& problem) {
    const Projection pr = projection_of(problem);
    const DType t = storage_of(problem.dtype);
    // Inputs uniform in [-1, 1], as GEMM's tolerance assumes.
    return std::vector<TensorSpec>{
        {"x", t, {pr.rows(), pr.width()}, TensorRole::input},
        {"w", t, {3 * pr.width(), pr.width()}, TensorRole::input},
        {"bias", t, {3 * pr.width()}, TensorRole::input},
        {"q", t, {pr.batch, pr.heads, pr.seq, pr.head_dim}, TensorRole::output},
        {"k", t, {pr.batch, pr.heads, pr.seq, pr.head_dim}, TensorRole::output},
        {"v", t, {pr.batch, pr.heads, pr.seq, pr.head_dim}, TensorRole::output},
    };
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    const Projection pr = projection_of(problem);
    reference::qkv_projection({pr.batch, pr.seq, pr.heads, pr.head_dim}, t[0].data(), t[1].data(), t[2].data(),
                              reference_rows(pr), t[3].data(), t[4].data(), t[5].data());
  };
  p.checked_ranges = [](const Problem& problem) {
    const Projection pr = projection_of(problem);
    std::vector<ElementRange> ranges;
    for (const std::int64_t row : reference_rows(pr)) {
      const std::int64_t b = row / pr.seq, s = row % pr.seq;
      for (std::int64_t h = 0; h < pr.heads; ++h) {
        const std::int64_t begin = ((b * pr.heads + h) * pr.seq + s) * pr.head_dim;
        ranges.push_back({begin, begin + pr.head_dim});
      }
    }
    std::sort(ranges.begin(), ranges.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
    return ranges;
  };
  p.cost = [](const Problem& problem) {
    const Projection pr = projection_of(problem);
    const double rows = static_cast<double>(pr.rows()), d = static_cast<double>(pr.width());
    const double element = static_cast<double>(dtype_size(storage_of(problem.dtype)));
    // x, w and bias read once, Q, K and V written once: what a fused kernel must move.
    return Cost{(rows * d + 3 * d * d + 3 * d + 3 * rows * d) * element, 2 * rows * 3 * d * d};
  };
  p.problem_tolerance = [](const Problem& problem) {
    return gemm_tolerance(problem.dtype, problem.shape.at("H") * problem.shape.at("hd") + 1);  // + 1: the bias
  };
  p.tolerance = [](DType dtype) { return gemm_tolerance(dtype, 1024); };
  p.default_variant = "packed_head_split";
  p.validate_shape = validate_shape;
  return p;
}

template <typename Fn>
LaunchStatus with_projection_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::tf32: return fn(float{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    default: return LaunchStatus::failure("qkv_projection has no " + std::string(dtype_name(dtype)) + " variant");
  }
}

// Tensor order: x, w, bias, q, k, v.
template <typename T>
struct Tensors {
  const T *x, *w, *bias;
  T* out[3];
};

template <typename T>
Tensors<T> tensors_of(const LaunchArgs& a) {
  return {static_cast<const T*>(a.tensors[0]),
          static_cast<const T*>(a.tensors[1]),
          static_cast<const T*>(a.tensors[2]),
          {static_cast<T*>(a.tensors[3]), static_cast<T*>(a.tensors[4]), static_cast<T*>(a.tensors[5])}};
}

// ---- split and packed: cuBLAS GEMMs, then the bias and the heads' transpose in one pass ---------

// The GEMMs' fp32 output before the bias and the transpose: [rows, 3 D] or three [rows, D].
std::size_t library_workspace(const Problem& problem, const Config&) {
  const Projection pr = projection_of(problem);
  return align256(static_cast<std::size_t>(pr.rows() * pr.width() * 3) * sizeof(float));
}

// C [rows, n] = x w_rows^T for `gemms` launches of n = 3 D / gemms output columns each.
LaunchStatus library_projection(const LaunchArgs& a, std::int64_t gemms) {
  const Projection pr = projection_of(a.problem);
  return with_projection_type(a.problem.dtype, [&](auto tag) -> LaunchStatus {
    using T = decltype(tag);
    const Tensors<T> t = tensors_of<T>(a);
    auto* staging = static_cast<float*>(a.workspace);
    const std::int64_t n = 3 * pr.width() / gemms;
    for (std::int64_t g = 0; g < gemms; ++g) {
      const T* w = t.w + g * n * pr.width();
      float* c = staging + g * pr.rows() * n;
      LibraryCallResult r;
      if (a.problem.dtype == DType::tf32) {  // fp32 tensors, TF32 products, fp32 output
        GemmOperands op;
        op.a = t.x, op.b = w, op.c = c;
        op.m = pr.rows(), op.n = n, op.k = pr.width();
        op.layout = kernels::gemm::Layout::nt;
        r = cublas_gemm(a.libraries, a.stream, a.problem.dtype, op);
      } else {  // 16-bit operands, fp32 output
        r = cublas_times_transposed_f32(a.libraries, a.stream, a.problem.dtype, pr.rows(), n, pr.width(), t.x, w, c);
      }
      if (LaunchStatus s = library_status(r); !s.ok) return s;
    }
    // Packed: Q, K and V are column blocks of one [rows, 3 D] matrix; split: three [rows, D] ones.
    const float* src[3];
    for (int j = 0; j < 3; ++j)
      src[j] = gemms == 1 ? staging + j * pr.width() : staging + j * pr.rows() * pr.width();
    return launch_status(kernels::attention::head_split_bias<T>(src, gemms == 1 ? 3 * pr.width() : pr.width(), t.bias,
                                                                t.out, pr.rows(), pr.seq, static_cast<int>(pr.heads),
                                                                static_cast<int>(pr.head_dim), a.stream));
  });
}

// ---- packed_head_split: one mma.sync GEMM, its epilogue writing heads-split ---------------------

struct TileTable {
  const ktc::TileShape* tiles;
  int count;
  std::size_t element_bytes;
};

TileTable tiles_of(DType dtype) {
  if (dtype == DType::tf32) return {ktc::kTilesTf32.data(), static_cast<int>(ktc::kTilesTf32.size()), 4};
  return {ktc::kTiles16.data(), static_cast<int>(ktc::kTiles16.size()), 2};
}

Support fused_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  if (limits.compute_capability < 80)
    return Support::no("needs sm_80+ (cp.async, m16n8k16 and bf16/tf32 mma.sync); the device is sm_" +
                       std::to_string(limits.compute_capability));
  const TileTable table = tiles_of(p.dtype);
  const std::int64_t index = c.at("tile");
  // The tf32 table is shorter: its indices past the end are not configs of a tf32 problem.
  if (index >= table.count) return Support::no("tile " + std::to_string(index) + " exists for 16-bit types only");
  const ktc::TileShape& t = table.tiles[index];
  if (t.threads() > limits.max_threads_per_block)
    return Support::no(std::to_string(t.threads()) + " threads per block; the device allows " +
                       std::to_string(limits.max_threads_per_block));
  const std::size_t shared =
      ktc::shared_bytes(t, table.element_bytes, kernels::gemm::Layout::nt, static_cast<int>(c.at("stages")));
  if (static_cast<std::int64_t>(shared) > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(shared) + " bytes of shared memory per block; the device allows " +
                       std::to_string(limits.shared_memory_per_block_optin));
  const Projection pr = projection_of(p);
  if (pr.rows() > INT_MAX) return Support::no("the head-split epilogue indexes rows in 32 bits: B S must be below 2^31");
  const std::int64_t tiles_m = (pr.rows() + t.block_m - 1) / t.block_m;
  const std::int64_t tiles_n = (3 * pr.width() + t.block_n - 1) / t.block_n;
  if (tiles_m > (INT_MAX / 2) / tiles_n || tiles_n > INT_MAX / 16) return Support::no("needs more than 2^30 blocks");
  return Support::yes();
}

// The fused variants' GEMM, x [B S, D] times w [3 D, D] transposed plus the bias, and where its
// epilogue writes: Q, K, V heads-split.
template <typename T>
struct FusedCall {
  kernels::gemm::Args<T> args;
  kernels::gemm::HeadSplitOutput<T> out;
};

template <typename T>
FusedCall<T> fused_call(const LaunchArgs& a) {
  const Projection pr = projection_of(a.problem);
  const Tensors<T> t = tensors_of<T>(a);
  FusedCall<T> f;
  f.args.a = t.x;
  f.args.b = t.w;
  f.args.bias = t.bias;
  f.args.m = pr.rows(), f.args.n = 3 * pr.width(), f.args.k = pr.width();
  f.args.layout = kernels::gemm::Layout::nt;
  f.args.epilogue = kernels::gemm::Epilogue::bias;
  for (int j = 0; j < 3; ++j) f.out.dst[j] = t.out[j];
  f.out.seq = pr.seq, f.out.heads = static_cast<int>(pr.heads), f.out.head_dim = static_cast<int>(pr.head_dim);
  return f;
}

LaunchStatus fused(const LaunchArgs& a) {
  return with_projection_type(a.problem.dtype, [&](auto tag) -> LaunchStatus {
    const auto f = fused_call<decltype(tag)>(a);
    const cudaError_t e = ktc::mma_sync_head_split(f.args, f.out, cfg(a.config, "tile"), cfg(a.config, "stages"), a.stream);
    if (e == cudaErrorNotSupported) return LaunchStatus::refused("the current device is below sm_80");
    return launch_status(e);
  });
}

// ---- wgmma_head_split: the same epilogue on the Hopper GEMM --------------------------------------

// The GEMM as wgmma sees it (gemm.nt, m = B S, n = 3 D, k = D), and the head split's own needs:
// whole 16-byte chunks of a head, rows and columns the 32-bit epilogue indexes.
Support wgmma_split_supports(const Problem& p, const Config& c, const DeviceLimits& limits) {
  const Projection pr = projection_of(p);
  const Problem gemm{"gemm_bias.nt", p.dtype, Shape({{"m", pr.rows()}, {"n", 3 * pr.width()}, {"k", pr.width()}})};
  if (Support s = wgmma_supports(kernels::gemm::Layout::nt, gemm, c, limits); !s.ok) return s;
  const std::int64_t chunk = p.dtype == DType::tf32 ? 4 : 8;  // elements of 16 bytes
  if (pr.head_dim % chunk != 0)
    return Support::no("the epilogue stores whole 16-byte chunks of a head: hd must be a multiple of " +
                       std::to_string(chunk) + ", not " + std::to_string(pr.head_dim));
  if (pr.rows() > INT_MAX || 3 * pr.width() > INT_MAX)
    return Support::no("the head-split epilogue indexes rows and columns in 32 bits: B S and 3 D below 2^31");
  return Support::yes();
}

LaunchStatus wgmma_split(const LaunchArgs& a) {
  const auto run = [&](auto tag) -> LaunchStatus {
    using T = decltype(tag);
    const auto f = fused_call<T>(a);
    if (reinterpret_cast<std::uintptr_t>(f.args.a) % 16 != 0 || reinterpret_cast<std::uintptr_t>(f.args.b) % 16 != 0)
      return LaunchStatus::refused("TMA needs x and w 16-byte aligned");
    const cudaError_t e =
        kwg::wgmma_head_split(f.args, f.out, cfg(a.config, "tile"), cfg(a.config, "stages"),
                              cfg(a.config, "persistent") != 0, a.stream);
    if (e == cudaErrorNotSupported)
      return LaunchStatus::refused("the current device is not sm_90 (or its driver cannot encode TMA tensor maps)");
    return launch_status(e);
  };
  switch (a.problem.dtype) {
    case DType::f16: return run(__half{});
    case DType::bf16: return run(__nv_bfloat16{});
    case DType::tf32: return run(float{});  // fp32 storage, TF32 products
    default: return LaunchStatus::failure("wgmma_head_split has no " + std::string(dtype_name(a.problem.dtype)) + " kernel");
  }
}

}  // namespace

void register_qkv_projection(Catalogue& cat) {
  cat.add(qkv_primitive());

  Variant split;
  split.primitive = "qkv_projection";
  split.name = "split";
  split.description = "the reference's way: three cuBLAS GEMMs x W_q^T, x W_k^T, x W_v^T into fp32 [B S, D] each, "
                      "then one pass adding the biases, rounding once and transposing the heads out";
  split.baseline = true;
  split.workspace_bytes = library_workspace;
  split.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  split.launch = [](const LaunchArgs& a) { return library_projection(a, 3); };
  cat.add(split);

  Variant packed = split;
  packed.name = "packed";
  packed.description = "one cuBLAS GEMM against the stacked [3 D, D] weights (x read once, one launch), then the "
                       "same bias and transpose pass";
  packed.baseline = false;
  packed.launch = [](const LaunchArgs& a) { return library_projection(a, 1); };
  cat.add(packed);

  static_assert(ktc::kMaxStages - ktc::kMinStages == 2, "the stages axis lists 2, 3, 4");
  Variant fused_variant;
  fused_variant.primitive = "qkv_projection";
  fused_variant.name = "packed_head_split";
  fused_variant.description = "one mma.sync GEMM against the stacked weights whose epilogue adds the bias and writes "
                              "Q, K, V heads-split: no intermediate, no transpose pass";
  fused_variant.params =
      ParamSpace({{"tile", tile_indices(ktc::kTiles16.size()),
                   "block tile: an index into mma_sync's table (16-bit) or mma_sync_tf32's (tf32; shorter)"},
                  {"stages", {ktc::kMinStages, 3, ktc::kMaxStages}, "shared-memory buffers of the cp.async pipeline"}});
  // Tile 2 (128 rows in both tables), 3 stages: fine from a few thousand rows on.
  fused_variant.default_config = Config({{"tile", 2}, {"stages", 3}});
  fused_variant.supports = fused_supports;
  fused_variant.launch = fused;
  cat.add(fused_variant);

  Variant hopper;
  hopper.primitive = "qkv_projection";
  hopper.name = "wgmma_head_split";
  hopper.description = "packed_head_split's epilogue on the Hopper wgmma GEMM (TMA producer, two consumer "
                       "warpgroups; sm_90a, f16 and bf16 with hd a multiple of 8, tf32 with hd a multiple of 4)";
  std::vector<std::int64_t> stages;
  for (int s = kwg::kMinStages; s <= kwg::kMaxStages; ++s) stages.push_back(s);
  hopper.params = ParamSpace({{"tile", tile_indices(kwg::kTiles.size()), "block tile: an index into wgmma's table"},
                              {"stages", stages, "shared-memory buffers of the TMA pipeline"},
                              {"persistent", {0, 1}, kWgmmaPersistentHelp}});
  // 128x128 (tile 2), 4 stages: the narrow n = 3 D of the cases (384 at D = 128) leaves tile 0's
  // 256 columns half empty at its edge.
  hopper.default_config = Config({{"tile", 2}, {"stages", 4}, {"persistent", 0}});
  hopper.supports = wgmma_split_supports;
  hopper.launch = wgmma_split;
  cat.add(hopper);
}

}  // namespace shapetune
