// A catalogue for the fuzz targets: primitives with the axes and dtypes of the real families and
// one variant each, built without CUDA.
#pragma once

#include "variants/catalogue.hpp"

namespace shapetune::fuzz {

inline Primitive primitive(std::string name, std::vector<std::string> axes) {
  Primitive p;
  p.name = std::move(name);
  p.axes = std::move(axes);
  p.dtypes = {DType::f32, DType::f16, DType::bf16, DType::tf32};
  p.tolerance = [](DType) { return Tolerance{1e-5, 1e-5}; };
  p.default_variant = "plain";
  p.validate_shape = [](const Shape& shape) {
    for (const auto& [name, value] : shape.dims())
      if (value > (std::int64_t{1} << 31)) return Support::no(name + " must be at most 2^31");
    return Support::yes();
  };
  return p;
}

inline const Catalogue& catalogue() {
  static const Catalogue built = [] {
    Catalogue c;
    const std::vector<std::pair<std::string, std::vector<std::string>>> families = {
        {"softmax", {"rows", "cols"}},         {"layernorm", {"rows", "cols"}}, {"adam", {"n", "tensors"}},
        {"activation.gelu", {"n"}},            {"gemm.nn", {"m", "n", "k"}},   {"gemm_bias_gelu.nt", {"m", "n", "k"}},
        {"lstm.forward", {"T", "N", "D", "H"}}, {"softmax_xent", {"rows", "classes"}}};
    for (const auto& [name, axes] : families) {
      c.add(primitive(name, axes));
      Variant v;
      v.primitive = name;
      v.name = "plain";
      v.params = ParamSpace({{"block_size", {64, 128, 256}, "threads"}});
      c.add(v);
    }
    return c;
  }();
  return built;
}

}  // namespace shapetune::fuzz
