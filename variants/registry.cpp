#include <cstdlib>
#include <limits>
#include <string_view>

#include "variants/catalogue.hpp"

namespace shapetune {

const Catalogue& catalogue() {
  // Built on first use rather than by static registrars, which a static library would drop.
  static const Catalogue instance = [] {
    Catalogue c;
    register_softmax(c);
    register_layernorm(c);
    register_adam(c);
    register_activation(c);
    register_softmax_xent(c);
    register_logistic_bce(c);
    register_gemm(c);
    register_gemm_tensor_core(c);
    register_gemm_wgmma(c);
    register_gemm_cublas(c);
    register_rnn(c);
    register_rnn_backward(c);
    register_rnn_cell(c);
    register_attention(c);
    register_qkv_projection(c);
    register_gemm_residual_layernorm(c);
    // Test only: variants that fault on purpose, for the isolation tests.
    if (const char* faults = std::getenv("SHAPETUNE_FAULT_VARIANTS"); faults && std::string_view(faults) == "1")
      register_fault_injection(c);
    return c;
  }();
  return instance;
}

Cost catalogue_cost(const Problem& problem) {
  if (const Primitive* primitive = catalogue().find_primitive(problem.primitive)) return primitive->cost(problem);
  return Cost{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
}

Config complete_config(const Variant& variant, Config stored) {
  for (const auto& [name, value] : variant.default_config.values())
    if (!stored.find(name)) stored.set(name, value);
  return stored;
}

std::string completed_config_key(const CandidateRecord& r) {
  const Variant* v = catalogue().find_variant(r.problem.primitive, r.variant);
  return v ? complete_config(*v, r.config).key() : r.config.key();
}

}  // namespace shapetune
