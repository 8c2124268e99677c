// cuBLAS and cuBLASLt as baseline variants of the twelve GEMM primitives (variants/gemm.cpp
// registers the primitives and the hand-written ladder; baselines/cublas_gemm.cpp makes the
// library calls). Three variants per primitive:
//   cublas       plain cuBLAS in the problem's precision; no epilogues
//   cublas_tf32  plain cuBLAS with TF32 products, for tf32 problems only
//   cublaslt     cuBLASLt, the heuristic's algorithm of rank `algo`, epilogues fused
// and, for the primitives with an epilogue, the chain a fused kernel replaces:
//   unfused      cuBLAS's GEMM with an fp32 result, then one pass adding the bias and applying the
//                activation (kernels/gemm: finish_product); the baseline where cuBLASLt's epilogue
//                is refused (its GELU is the tanh form, its 16-bit bias epilogue rounds twice)
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "baselines/cublas.hpp"
#include "kernels/gemm/gemm.cuh"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kg = kernels::gemm;

Support fits_32_bit_api(const Problem& p) {
  for (const char* axis : {"m", "n", "k"})
    if (p.shape.at(axis) > INT_MAX) return Support::no(std::string(axis) + " beyond 2^31-1 (cuBLAS's 32-bit API)");
  return Support::yes();
}

Support no_epilogue(const GemmKind& kind) {
  if (kind.epilogue == kg::Epilogue::none) return Support::yes();
  return Support::no("plain cuBLAS cannot fuse the bias or activation; the cublaslt variant does");
}

LaunchStatus launch_cublas(const LaunchArgs& a) {
  return library_status(cublas_gemm(a.libraries, a.stream, a.problem.dtype, gemm_args<void>(a)));
}

void add_cublas(Catalogue& cat, const std::string& primitive, GemmKind kind) {
  Variant v;
  v.primitive = primitive;
  v.name = "cublas";
  v.description =
      "cuBLAS: cublasSgemm in true fp32 (no TF32) for f32, cublasGemmEx with fp32 accumulation for f16 and bf16";
  v.baseline = true;
  v.library = true;
  v.supports = [kind](const Problem& p, const Config&, const DeviceLimits&) {
    if (Support s = no_epilogue(kind); !s.ok) return s;
    // A tf32 problem may take TF32 products, so true fp32 would only be a slower answer to it;
    // cublas_tf32 is cuBLAS's answer there.
    if (p.dtype == DType::tf32) return Support::no("tf32 problems are cublas_tf32's (this variant never uses TF32)");
    return fits_32_bit_api(p);
  };
  v.launch = launch_cublas;
  cat.add(v);
}

void add_cublas_tf32(Catalogue& cat, const std::string& primitive, GemmKind kind) {
  Variant v;
  v.primitive = primitive;
  v.name = "cublas_tf32";
  v.description =
      "cuBLAS with TF32 tensor-core products (10-bit mantissa), not fp32: cublasGemmEx, "
      "CUBLAS_COMPUTE_32F_FAST_TF32, fp32 accumulation; tf32 problems only";
  v.baseline = true;
  v.library = true;
  v.supports = [kind](const Problem& p, const Config&, const DeviceLimits&) {
    if (p.dtype != DType::tf32)
      return Support::no("TF32 products are allowed for tf32 problems only, never for " +
                         std::string(dtype_name(p.dtype)));
    if (Support s = no_epilogue(kind); !s.ok) return s;
    return fits_32_bit_api(p);
  };
  v.launch = launch_cublas;
  cat.add(v);
}

// `primitive` is the catalogue's own entry, which outlives the variant (the catalogue holds both
// by pointer, so moving the catalogue moves neither).
void add_cublaslt(Catalogue& cat, const Primitive* primitive, GemmKind kind) {
  std::vector<std::int64_t> ranks;
  for (int r = 0; r < kCublasLtHeuristicCount; ++r) ranks.push_back(r);

  Variant v;
  v.primitive = primitive->name;
  v.name = "cublaslt";
  v.description =
      "cuBLASLt: the algorithm its heuristic ranks `algo`-th, bias and bias+ReLU fused in the epilogue (fp32 "
      "and tf32); fp32 accumulation, TF32 products for tf32 problems only";
  v.baseline = true;
  v.library = true;
  v.params = ParamSpace({{"algo", ranks, "rank of the algorithm in cuBLASLt's heuristic list (0: its first choice)"}});
  v.default_config = Config({{"algo", 0}});
  // Both refusals come from measurements on an H200 (reports/h200/2026-12-01-gemm): they are what
  // cuBLASLt computes, not what this primitive defines.
  v.supports = [kind](const Problem& p, const Config&, const DeviceLimits&) {
    if (kind.epilogue == kg::Epilogue::bias_gelu)
      return Support::no("cuBLASLt's GELU epilogue is the tanh approximation (within 5.2e-6 of it), up to 4.7e-4 "
                         "from the erf GELU this primitive defines");
    if (kind.epilogue != kg::Epilogue::none && (p.dtype == DType::f16 || p.dtype == DType::bf16))
      return Support::no("cuBLASLt's 16-bit bias epilogue misses the fp32-epilogue tolerance (up to 3.9e-3 off at "
                         "K = 65, where 1.7e-5 is allowed)");
    return Support::yes();
  };
  v.workspace_bytes = [](const Problem&, const Config&) { return kCublasLtWorkspaceBytes; };
  v.launch = [](const LaunchArgs& a) {
    if (!a.library_algo.empty()) {
      // The recorded kernel; refused where it no longer exists (another cuBLASLt, another
      // device), and then the rank as the config says.
      const LibraryCallResult recorded = cublaslt_gemm_recorded(a.libraries, a.stream, a.problem.dtype, gemm_args<void>(a),
                                                                std::string(a.library_algo), a.workspace,
                                                                a.workspace_bytes);
      if (recorded.ok || !recorded.not_supported) return library_status(recorded);
    }
    return library_status(cublaslt_gemm(a.libraries, a.stream, a.problem.dtype, gemm_args<void>(a),
                                        static_cast<int>(a.config.at("algo")), a.workspace, a.workspace_bytes));
  };
  v.describe_algorithm = [](const Problem& p, const Config& c, LibraryHandles& libraries) {
    return describe_cublaslt_algo(p, static_cast<int>(c.at("algo")), libraries);
  };
  cat.add(v);
}

// The unfused chain: the product through cuBLAS (in C itself where C is fp32, else in an fp32
// workspace), then alpha, beta, the bias and the activation in one pass, rounded once: what the
// fused kernels compute, two launches and an fp32 round trip through memory later.
LaunchStatus launch_unfused(const LaunchArgs& a) {
  const DType dtype = a.problem.dtype;
  return with_storage_type(storage_of(dtype), "the unfused GEMM chain", [&](auto tag) {
    using T = decltype(tag);
    kg::Args<T> finish = gemm_args<T>(a);
    const float* product = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      GemmOperands plain = gemm_args<void>(a);  // alpha op(A) op(B) + beta C into C, in fp32 (TF32 for tf32)
      plain.epilogue = kg::Epilogue::none;
      plain.bias = nullptr;
      if (LaunchStatus s = library_status(cublas_gemm(a.libraries, a.stream, dtype, plain)); !s.ok) return s;
      finish.alpha = 1.f, finish.beta = 0.f;  // applied; the pass reads its product from C
      product = finish.c;
    } else {
      float* acc = static_cast<float*>(a.workspace);
      if (LaunchStatus s = library_status(cublas_product_to_f32(a.libraries, a.stream, dtype, gemm_args<void>(a), acc));
          !s.ok)
        return s;
      product = acc;
    }
    return launch_status(kg::finish_product(finish, product, a.stream));
  });
}

void add_unfused(Catalogue& cat, const std::string& primitive, GemmKind kind) {
  if (kind.epilogue == kg::Epilogue::none) return;
  Variant v;
  v.primitive = primitive;
  v.name = "unfused";
  v.description = "the chain a fused epilogue replaces: cuBLAS's GEMM with an fp32 result (TF32 products for tf32 "
                  "only), then one pass for alpha, beta, the bias and the activation";
  v.baseline = true;  // the unfused chain, not a library alone: reports say "over the unfused chain"
  v.supports = [](const Problem& p, const Config&, const DeviceLimits& limits) {
    if (Support s = fits_32_bit_api(p); !s.ok) return s;
    const std::size_t product = static_cast<std::size_t>(p.shape.at("m")) * static_cast<std::size_t>(p.shape.at("n")) *
                                sizeof(float);
    if (storage_of(p.dtype) != DType::f32 && static_cast<double>(product) > 0.5 * static_cast<double>(limits.global_memory_bytes))
      return Support::no("its fp32 product would take more than half the device's memory");
    return Support::yes();
  };
  v.workspace_bytes = [](const Problem& p, const Config&) -> std::size_t {
    if (storage_of(p.dtype) == DType::f32) return 0;  // the product goes to C itself
    return static_cast<std::size_t>(p.shape.at("m")) * static_cast<std::size_t>(p.shape.at("n")) * sizeof(float);
  };
  v.launch = launch_unfused;
  cat.add(v);
}

}  // namespace

void register_gemm_cublas(Catalogue& cat) {
  for (const std::string& name : gemm_primitive_names()) {
    const Primitive* primitive = cat.find_primitive(name);
    if (!primitive)
      throw std::logic_error("register_gemm_cublas: primitive '" + name + "' is not registered (register_gemm first)");
    const GemmKind kind = *parse_gemm_primitive(name);
    add_cublas(cat, name, kind);
    add_cublas_tf32(cat, name, kind);
    add_cublaslt(cat, primitive, kind);
    add_unfused(cat, name, kind);
  }
}

}  // namespace shapetune
