// The GEMM primitives' names, for the host code that registers and runs them (the catalogue,
// the cuBLAS baselines): "<op>.<layout>", op in {gemm, gemm_bias, gemm_bias_relu, gemm_bias_gelu}
// (the epilogue), layout in {nn, nt, tn} (gemm.cuh says what they mean): twelve primitives.
// Host only (never compiled by nvcc for a kernel).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/primitive_name.hpp"
#include "kernels/gemm/gemm.cuh"

namespace shapetune::kernels::gemm {

struct GemmKind {
  Layout layout;
  Epilogue epilogue;
};

// In Epilogue's and Layout's order.
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
  const auto parsed = PrimitiveName::parse(name);
  if (!parsed || parsed->attributes.size() != 1) return std::nullopt;
  const auto op = index_in(parsed->family, kGemmOps);
  const auto layout = index_in(parsed->attributes[0], kGemmLayouts);
  if (!op || !layout) return std::nullopt;
  return GemmKind{static_cast<Layout>(*layout), static_cast<Epilogue>(*op)};
}

}  // namespace shapetune::kernels::gemm
