// The GEMM primitives' argument order, shared by every file that registers GEMM variants
// (variants/gemm*.cpp); their names are parsed by kernels/gemm/gemm_kind.hpp.
//
// Primitives: "<op>.<layout>" (gemm_kind.hpp): twelve primitives, axes m, n, k,
// dtypes f32, f16, bf16 and tf32 (fp32 tensors, TF32 products allowed: tensor-core variants
// and cuBLAS's TF32 mode only, tuned apart from f32).
// Tensors, in order: a, b, then bias [n] for the epilogue ops, then c (inout: read when beta != 0).
// Scalars, in order: alpha, beta.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/gemm/gemm_kind.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

using kernels::gemm::gemm_primitive_names;
using kernels::gemm::GemmKind;
using kernels::gemm::kGemmLayouts;
using kernels::gemm::kGemmOps;
using kernels::gemm::parse_gemm_primitive;

// Unit roundoff (half an ulp of 1) of a result stored in dtype (tf32: fp32 storage).
double unit_roundoff(DType dtype);

// The tolerance of a product of depth k with fp32 accumulation, inputs uniform in [-1, 1], the
// result stored in dtype (the derivation is at the definition, variants/gemm.cpp); gelu_of_stored:
// a GELU epilogue that reads the 16-bit pre-activation as stored. Other families whose outputs are
// such products (the QKV projection) use it too.
Tolerance gemm_tolerance(DType dtype, std::int64_t k, bool gelu_of_stored = false);

// The values 0 .. count - 1 of a `tile` axis, which indexes a kernel's table of tile shapes.
inline std::vector<std::int64_t> tile_indices(std::size_t count) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(static_cast<std::int64_t>(i));
  return out;
}

// Whether the wgmma kernel (variants/gemm_wgmma.cpp) takes a GEMM of this layout, dtype and m, n, k
// with this tile, stage count and persistence on this device, and why not; the QKV projection's
// wgmma variant asks it for its GEMM.
Support wgmma_supports(kernels::gemm::Layout layout, const Problem& gemm_problem, const Config& config,
                       const DeviceLimits& limits);

// The wgmma variants' `persistent` parameter.
inline constexpr const char* kWgmmaPersistentHelp =
    "0: a block a tile; 1: a block an SM looping over tiles, the next tile's loads in flight while the consumers "
    "store one (its staging apart from the pipeline: tiles of 256 columns do not fit); for few K steps a tile";

// The kernel arguments of a launch of a GEMM primitive, pointers typed as T.
template <typename T>
kernels::gemm::Args<T> gemm_args(const LaunchArgs& launch) {
  const GemmKind kind = *parse_gemm_primitive(launch.problem.primitive);
  const bool has_bias = kind.epilogue != kernels::gemm::Epilogue::none;
  kernels::gemm::Args<T> args;
  args.a = static_cast<const T*>(launch.tensors[0]);
  args.b = static_cast<const T*>(launch.tensors[1]);
  args.bias = has_bias ? static_cast<const T*>(launch.tensors[2]) : nullptr;
  args.c = static_cast<T*>(launch.tensors[has_bias ? 3 : 2]);
  args.m = launch.problem.shape.at("m");
  args.n = launch.problem.shape.at("n");
  args.k = launch.problem.shape.at("k");
  args.alpha = launch.scalars.size() > 0 ? static_cast<float>(launch.scalars[0]) : 1.f;
  args.beta = launch.scalars.size() > 1 ? static_cast<float>(launch.scalars[1]) : 0.f;
  args.layout = kind.layout;
  args.epilogue = kind.epilogue;
  return args;
}

}  // namespace shapetune
