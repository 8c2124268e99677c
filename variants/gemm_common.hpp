// The GEMM primitives' names and argument order, shared by every file that registers GEMM
// variants (variants/gemm*.cpp, baselines/cublas_gemm.cpp).
//
// Primitives: "<op>.<layout>" with op in {gemm, gemm_bias, gemm_bias_relu, gemm_bias_gelu} and
// layout in {nn, nt, tn} (kernels/gemm/gemm.cuh says what they mean): twelve primitives, axes m, n, k,
// dtypes f32, f16, bf16 and tf32 (fp32 tensors, TF32 products allowed: tensor-core variants
// and cuBLAS's TF32 mode only, tuned apart from f32).
// Tensors, in order: a, b, then bias [n] for the epilogue ops, then c (inout: read when beta != 0).
// Scalars, in order: alpha, beta.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/gemm/gemm.cuh"
#include "variants/catalogue.hpp"

namespace shapetune {

struct GemmKind {
  kernels::gemm::Layout layout;
  kernels::gemm::Epilogue epilogue;
};

inline constexpr std::array<std::string_view, 4> kGemmOps = {"gemm", "gemm_bias", "gemm_bias_relu", "gemm_bias_gelu"};
inline constexpr std::array<std::string_view, 3> kGemmLayouts = {"nn", "nt", "tn"};

// Every GEMM primitive name, op-major: gemm.nn, gemm.nt, gemm.tn, gemm_bias.nn, ...
inline std::vector<std::string> gemm_primitive_names() {
  std::vector<std::string> out;
  for (std::string_view op : kGemmOps)
    for (std::string_view layout : kGemmLayouts) out.push_back(std::string(op) + "." + std::string(layout));
  return out;
}

// nullopt when `name` is not a GEMM primitive.
inline std::optional<GemmKind> parse_gemm_primitive(std::string_view name) {
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view op = name.substr(0, dot), layout = name.substr(dot + 1);
  GemmKind kind{};
  bool found = false;
  for (std::size_t i = 0; i < kGemmOps.size(); ++i)
    if (op == kGemmOps[i]) kind.epilogue = static_cast<kernels::gemm::Epilogue>(i), found = true;
  if (!found) return std::nullopt;
  for (std::size_t i = 0; i < kGemmLayouts.size(); ++i)
    if (layout == kGemmLayouts[i]) return GemmKind{static_cast<kernels::gemm::Layout>(i), kind.epilogue};
  return std::nullopt;
}


// The values 0 .. count - 1 of a `tile` axis, which indexes a kernel's table of tile shapes.
inline std::vector<std::int64_t> tile_indices(std::size_t count) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(static_cast<std::int64_t>(i));
  return out;
}

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
