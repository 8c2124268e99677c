// Tensor-core variants of the twelve GEMM primitives (variants/gemm.cpp registers the
// primitives), hand-written with warp-level mma.sync (kernels/gemm/tensor_core.cu):
//   mma_sync       f16 and bf16: m16n8k16, fp32 accumulation
//   mma_sync_tf32  tf32 problems: fp32 tensors rounded to TF32, m16n8k8, fp32 accumulation
// f32 problems are never theirs: an f32 answer must not carry TF32 products.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <string>

#include "kernels/gemm/tensor_core.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ktc = kernels::gemm_tensor_core;

constexpr int kMinComputeCapability = 80;  // cp.async, bf16 and tf32 mma, m16n8k16

// What a variant of this family is, beside its name: the dtypes it takes and its tile table.
struct Family {
  const char* name;
  const char* description;
  std::vector<DType> dtypes;
  const ktc::TileShape* tiles;
  int tile_count;
  std::size_t element_bytes;
  Config default_config;
};

std::string tile_list(const Family& f) {
  std::string out;
  for (int i = 0; i < f.tile_count; ++i) {
    const ktc::TileShape& t = f.tiles[i];
    out += (i ? "; " : "") + std::to_string(i) + ": " + std::to_string(t.block_m) + "x" + std::to_string(t.block_n) +
           "x" + std::to_string(t.block_k) + ", " + std::to_string(t.warps_m * t.warps_n) + " warps of " +
           std::to_string(t.block_m / t.warps_m) + "x" + std::to_string(t.block_n / t.warps_n);
  }
  return out;
}


Support supports(const Family& f, kernels::gemm::Layout layout, const Problem& p, const Config& c,
                 const DeviceLimits& limits) {
  bool dtype_ok = false;
  for (DType d : f.dtypes) dtype_ok = dtype_ok || d == p.dtype;
  if (!dtype_ok) {
    if (p.dtype == DType::f32) return Support::no("f32 problems must not get TF32 products; tensor cores take f16, bf16, tf32");
    return Support::no(std::string(f.name) + " has no " + std::string(dtype_name(p.dtype)) + " kernel");
  }
  if (limits.compute_capability < kMinComputeCapability)
    return Support::no("needs sm_80+ (cp.async, m16n8k16 and bf16/tf32 mma.sync); the device is sm_" +
                       std::to_string(limits.compute_capability));
  const std::int64_t index = c.at("tile");
  if (index < 0 || index >= f.tile_count) return Support::no("no such tile");
  const ktc::TileShape& t = f.tiles[index];
  if (t.threads() > limits.max_threads_per_block)
    return Support::no(std::to_string(t.threads()) + " threads per block; the device allows " +
                       std::to_string(limits.max_threads_per_block));
  const std::size_t shared = ktc::shared_bytes(t, f.element_bytes, layout, static_cast<int>(c.at("stages")));
  if (static_cast<std::int64_t>(shared) > limits.shared_memory_per_block_optin)
    return Support::no(std::to_string(shared) + " bytes of shared memory per block; the device allows " +
                       std::to_string(limits.shared_memory_per_block_optin));
  // The kernel maps blocks to tiles in int arithmetic (grouped rows of tiles); keep it exact.
  const std::int64_t tiles_m = (p.shape.at("m") + t.block_m - 1) / t.block_m;
  const std::int64_t tiles_n = (p.shape.at("n") + t.block_n - 1) / t.block_n;
  if (tiles_m > (INT_MAX / 2) / tiles_n || tiles_n > INT_MAX / 16) return Support::no("needs more than 2^30 blocks");
  return Support::yes();
}

template <typename T>
LaunchStatus launch_typed(const LaunchArgs& a) {
  const cudaError_t e = ktc::mma_sync(gemm_args<T>(a), static_cast<int>(a.config.at("tile")),
                                      static_cast<int>(a.config.at("stages")), a.stream);
  if (e == cudaErrorNotSupported) return LaunchStatus::refused("the current device is below sm_80");
  return launch_status(e);
}

LaunchStatus launch(const LaunchArgs& a) {
  switch (a.problem.dtype) {
    case DType::f16: return launch_typed<__half>(a);
    case DType::bf16: return launch_typed<__nv_bfloat16>(a);
    case DType::tf32: return launch_typed<float>(a);  // fp32 storage, TF32 products
    default: return LaunchStatus::failure("no tensor-core kernel for " + std::string(dtype_name(a.problem.dtype)));
  }
}

void add(Catalogue& cat, const std::string& primitive, kernels::gemm::Layout layout, const Family& f) {
  Variant v;
  v.primitive = primitive;
  v.name = f.name;
  v.description = f.description;
  v.params = ParamSpace({{"tile", tile_indices(static_cast<std::size_t>(f.tile_count)), "block tile (bm x bn x bk, warps): " + tile_list(f)},
                         {"stages",
                          {ktc::kMinStages, 3, ktc::kMaxStages},
                          "shared-memory buffers of the cp.async pipeline (stages - 1 tiles in flight)"}});
  v.default_config = f.default_config;
  v.supports = [f, layout](const Problem& p, const Config& c, const DeviceLimits& limits) {
    return supports(f, layout, p, c, limits);
  };
  v.launch = launch;
  cat.add(v);
}

}  // namespace

void register_gemm_tensor_core(Catalogue& cat) {
  static_assert(ktc::kMaxStages - ktc::kMinStages == 2, "the stages axis lists 2, 3, 4");
  // Defaults for dispatch without a tuned entry: 128x128 tiles (4 warps of 64x64, two blocks per
  // SM) with 3 stages fill an H100/H200 from about 2048 x 2048 on and waste little below.
  const Family mma{"mma_sync",
                   "tensor cores via mma.sync m16n8k16 (fp32 accumulation): cp.async multi-stage pipeline into "
                   "XOR-swizzled shared tiles, ldmatrix(.trans) fragments, 64x64 warp tiles at most; f16, bf16",
                   {DType::f16, DType::bf16},
                   ktc::kTiles16.data(),
                   static_cast<int>(ktc::kTiles16.size()),
                   2,
                   Config({{"tile", 4}, {"stages", 3}})};
  const Family tf32{"mma_sync_tf32",
                    "mma_sync for tf32 problems: fp32 tensors rounded to TF32 (cvt.rna) into mma.sync m16n8k8, fp32 "
                    "accumulation; operands whose K is not contiguous read with 32-bit shared loads",
                    {DType::tf32},
                    ktc::kTilesTf32.data(),
                    static_cast<int>(ktc::kTilesTf32.size()),
                    4,
                    Config({{"tile", 2}, {"stages", 3}})};
  for (const std::string& name : gemm_primitive_names()) {
    const kernels::gemm::Layout layout = parse_gemm_primitive(name)->layout;
    add(cat, name, layout, mma);
    add(cat, name, layout, tf32);
  }
}

}  // namespace shapetune
