// The Hopper tensor-core variant of the twelve GEMM primitives (variants/gemm.cpp registers the
// primitives), hand-written with warpgroup-level wgmma (kernels/gemm/wgmma_sm90a.cu):
//   wgmma  f16 and bf16 on sm_90a: TMA into swizzled shared memory, wgmma.mma_async from it,
//          fp32 accumulation; tf32 (fp32 tensors, TF32 products) in layout nt, the one layout
//          TF32 wgmma reads (both operands K-major).
// It takes only problems whose A and B TMA can address (leading dimensions whole 16-byte units);
// mma_sync and mma_sync_tf32 (variants/gemm_tensor_core.cpp) take every shape and layout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <string>

#include "kernels/gemm/wgmma.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kwg = kernels::gemm_wgmma;
using kernels::gemm::Layout;

// wgmma and setmaxnreg are sm_90a features: the code runs on compute capability 9.0 alone.
constexpr int kComputeCapability = 90;

std::string tile_list() {
  std::string out;
  for (std::size_t i = 0; i < kwg::kTiles.size(); ++i) {
    const kwg::TileShape& t = kwg::kTiles[i];
    out += (i ? "; " : "") + std::to_string(i) + ": " + std::to_string(t.block_m) + "x" + std::to_string(t.block_n) +
           "x" + std::to_string(kwg::block_k(2)) + ", 2 consumer warpgroups of " + std::to_string(t.warpgroup_m()) +
           "x" + std::to_string(t.block_n);
  }
  return out + " (K a stage: " + std::to_string(kwg::block_k(2)) + " 16-bit or " + std::to_string(kwg::block_k(4)) +
         " tf32 elements)";
}

std::vector<std::int64_t> stage_counts() {
  std::vector<std::int64_t> out;
  for (int s = kwg::kMinStages; s <= kwg::kMaxStages; ++s) out.push_back(s);
  return out;
}


template <typename T>
LaunchStatus launch_typed(const LaunchArgs& a) {
  const kernels::gemm::Args<T> args = gemm_args<T>(a);
  // Pointers are the caller's (supports() sees only the shape): a sub-matrix off a 16-byte
  // boundary is refused here, for mma_sync to take.
  if (reinterpret_cast<std::uintptr_t>(args.a) % 16 != 0 || reinterpret_cast<std::uintptr_t>(args.b) % 16 != 0)
    return LaunchStatus::refused("TMA needs A and B 16-byte aligned");
  const cudaError_t e = kwg::wgmma(args, static_cast<int>(a.config.at("tile")), static_cast<int>(a.config.at("stages")),
                                   a.config.at("persistent") != 0, a.stream);
  if (e == cudaErrorNotSupported)
    return LaunchStatus::refused("the current device is not sm_90 (or its driver cannot encode TMA tensor maps)");
  return launch_status(e);
}

LaunchStatus launch(const LaunchArgs& a) {
  switch (a.problem.dtype) {
    case DType::f16: return launch_typed<__half>(a);
    case DType::bf16: return launch_typed<__nv_bfloat16>(a);
    case DType::tf32: return launch_typed<float>(a);  // fp32 storage, TF32 products
    default: return LaunchStatus::failure("no wgmma kernel for " + std::string(dtype_name(a.problem.dtype)));
  }
}

}  // namespace

Support wgmma_supports(Layout layout, const Problem& p, const Config& c, const DeviceLimits& limits) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16 && p.dtype != DType::tf32) {
    if (p.dtype == DType::f32)
      return Support::no("f32 problems must not get TF32 products; wgmma here takes f16, bf16 and tf32");
    return Support::no("wgmma has no " + std::string(dtype_name(p.dtype)) + " kernel");
  }
  const std::size_t element_bytes = p.dtype == DType::tf32 ? 4 : 2;
  if (!kwg::reads_layout(layout, element_bytes))
    return Support::no("TF32 wgmma reads both operands K-major: tf32 takes layout nt only, not " +
                       std::string(kGemmLayouts[static_cast<std::size_t>(layout)]));
  if (limits.compute_capability != kComputeCapability)
    return Support::no("needs sm_90a (wgmma, TMA, setmaxnreg: compute capability 9.0 exactly); the device is sm_" +
                       std::to_string(limits.compute_capability));
  const std::int64_t index = c.at("tile");
  if (index < 0 || index >= static_cast<std::int64_t>(kwg::kTiles.size())) return Support::no("no such tile");
  const std::int64_t stages = c.at("stages");
  if (stages < kwg::kMinStages || stages > kwg::kMaxStages) return Support::no("no such stage count");
  const kwg::TileShape& t = kwg::kTiles[index];
  if (kwg::kThreads > limits.max_threads_per_block)
    return Support::no(std::to_string(kwg::kThreads) + " threads per block; the device allows " +
                       std::to_string(limits.max_threads_per_block));
  const std::int64_t persistent = c.at("persistent");
  if (persistent != 0 && persistent != 1) return Support::no("persistent is 0 or 1");
  const std::size_t shared = kwg::shared_bytes(t, static_cast<int>(stages), persistent != 0);
  if (static_cast<std::int64_t>(shared) > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(shared) + " bytes of shared memory per block; the device allows " +
                       std::to_string(limits.shared_memory_per_block_optin));
  const std::int64_t m = p.shape.at("m"), n = p.shape.at("n"), k = p.shape.at("k");
  if (!kwg::tma_addressable(layout, m, n, k, element_bytes)) {
    const std::int64_t multiple = kwg::leading_dimension_multiple(element_bytes);
    const std::int64_t lda = layout == Layout::tn ? m : k, ldb = layout == Layout::nt ? k : n;
    const char* which = lda % multiple != 0 ? (layout == Layout::tn ? "m" : "k") : (layout == Layout::nt ? "k" : "n");
    const std::int64_t value = lda % multiple != 0 ? lda : ldb;
    return Support::no("TMA needs lda and ldb multiples of " + std::to_string(multiple) + " elements (16 bytes); " +
                       std::string(which) + " = " + std::to_string(value) + " in " +
                       std::string(kGemmLayouts[static_cast<std::size_t>(layout)]));
  }
  // TMA coordinates are int32; the kernel maps blocks to tiles in int arithmetic (grouped rows).
  constexpr std::int64_t kMaxExtent = INT_MAX - 256;
  if (m > kMaxExtent || n > kMaxExtent || k > kMaxExtent) return Support::no("TMA coordinates are 32-bit: extents below 2^31 - 256");
  const std::int64_t tiles_m = (m + t.block_m - 1) / t.block_m, tiles_n = (n + t.block_n - 1) / t.block_n;
  if (tiles_m > (INT_MAX / 2) / tiles_n || tiles_n > INT_MAX / 32) return Support::no("needs more than 2^30 blocks");
  return Support::yes();
}

void register_gemm_wgmma(Catalogue& cat) {
  for (const std::string& name : gemm_primitive_names()) {
    const Layout layout = parse_gemm_primitive(name)->layout;
    Variant v;
    v.primitive = name;
    v.name = "wgmma";
    v.description =
        "Hopper tensor cores via wgmma.mma_async m64nNk16 (m64nNk8 in TF32; fp32 accumulation), sm_90a: a TMA "
        "producer warp fills a multi-stage mbarrier ring of 128-byte-swizzled shared tiles, two consumer warpgroups "
        "multiply from shared memory; f16, bf16 (lda and ldb multiples of 8) and tf32 in layout nt (multiples of 4), "
        "whose stages the consumers round to TF32 in place (to nearest, as cuBLAS; wgmma would truncate)";
    v.params = ParamSpace({{"tile", tile_indices(kwg::kTiles.size()), "block tile (bm x bn x bk, consumers): " + tile_list()},
                           {"stages", stage_counts(), "shared-memory buffers of the TMA pipeline (full/empty mbarrier ring)"},
                           {"persistent", {0, 1}, kWgmmaPersistentHelp}});
    // 128x256 tiles with 3 stages: the most reuse per byte, one block per SM. The fastest at bf16
    // 8192^3 on the H200 (1567 us; 4 stages 1612 us) in reports/h200/*-quick-gemm-at-00fe28e.
    // One block a tile, as before the persistent axis existed.
    v.default_config = Config({{"tile", 0}, {"stages", 3}, {"persistent", 0}});
    v.supports = [layout](const Problem& p, const Config& c, const DeviceLimits& limits) {
      return wgmma_supports(layout, p, c, limits);
    };
    v.launch = launch;
    cat.add(v);
  }
}

}  // namespace shapetune
