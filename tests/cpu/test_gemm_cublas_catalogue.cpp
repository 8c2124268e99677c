// The cuBLAS and cuBLASLt GEMM baselines in the catalogue, checked without a GPU: what is
// registered for each of the twelve GEMM primitives, how it is described, its parameter space,
// and what supports() refuses and why. First on a catalogue of stand-in primitives whose
// tolerances the test chooses, then on the real catalogue.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <string>

#include "baselines/cublas.hpp"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

const char* const kCublasVariants[] = {"cublas", "cublas_tf32", "cublaslt"};
const DType kGemmDtypes[] = {DType::f32, DType::tf32, DType::f16, DType::bf16};

Problem gemm_problem(const std::string& primitive, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {primitive, dtype, Shape({{"m", m}, {"n", n}, {"k", k}})};
}

bool mentions(const std::string& text, const std::string& word) { return text.find(word) != std::string::npos; }

Support supports(const Variant& v, const Problem& p, const Config& c) {
  return v.supports(p, c, nominal_device_limits());
}

// ---- on stand-in primitives ----------------------------------------------------------------

// The twelve GEMM primitives with only what the baselines read: names, axes, dtypes and a
// tolerance the test controls (tight for f32, loose for bf16, in between for f16).
Catalogue stand_in_catalogue() {
  Catalogue c;
  for (const std::string& name : gemm_primitive_names()) {
    Primitive p;
    p.name = name;
    p.axes = {"m", "n", "k"};
    p.dtypes = {DType::f32, DType::f16, DType::bf16, DType::tf32};
    p.problem_tolerance = [](const Problem& problem) {
      switch (problem.dtype) {
        case DType::bf16: return Tolerance{1e-2, 1e-2};
        case DType::f16: return Tolerance{5e-4, 2e-3};
        default: return Tolerance{1e-6, 1e-5};
      }
    };
    c.add(std::move(p));
  }
  register_gemm_cublas(c);
  return c;
}

TEST(GemmCublasRegistration, NeedsTheGemmPrimitivesFirst) {
  Catalogue empty;
  EXPECT_THROW(register_gemm_cublas(empty), std::logic_error);
}

TEST(GemmCublasRegistration, ThreeBaselinesOnEveryGemmPrimitive) {
  const Catalogue c = stand_in_catalogue();
  for (const std::string& primitive : gemm_primitive_names()) {
    for (const char* name : kCublasVariants) {
      const Variant* v = c.find_variant(primitive, name);
      ASSERT_NE(v, nullptr) << primitive << "/" << name;
      EXPECT_TRUE(v->baseline) << primitive << "/" << name;
      EXPECT_TRUE(v->launch) << primitive << "/" << name;
      EXPECT_TRUE(v->params.contains(v->default_config)) << primitive << "/" << name;
    }
  }
}

TEST(GemmCublasRegistration, DescriptionsSayWhereTf32IsUsed) {
  const Catalogue c = stand_in_catalogue();
  for (const std::string& primitive : gemm_primitive_names()) {
    const std::string plain = c.find_variant(primitive, "cublas")->description;
    const std::string tf32 = c.find_variant(primitive, "cublas_tf32")->description;
    const std::string lt = c.find_variant(primitive, "cublaslt")->description;
    EXPECT_TRUE(mentions(plain, "no TF32")) << plain;
    EXPECT_TRUE(mentions(tf32, "TF32")) << tf32;
    EXPECT_TRUE(mentions(tf32, "not fp32")) << tf32;
    EXPECT_TRUE(mentions(lt, "TF32 products for tf32 problems only")) << lt;
  }
}

TEST(GemmCublasRegistration, OnlyCublasLtIsTunedAndAsksForWorkspace) {
  const Catalogue c = stand_in_catalogue();
  const Problem p = gemm_problem("gemm.nn", DType::f32, 64, 64, 64);
  for (const char* name : {"cublas", "cublas_tf32"}) {
    const Variant* v = c.find_variant("gemm.nn", name);
    EXPECT_EQ(v->params.enumerate().size(), 1u) << name;
    EXPECT_FALSE(v->workspace_bytes) << name;
  }
  const Variant* lt = c.find_variant("gemm.nn", "cublaslt");
  const std::vector<Config> configs = lt->params.enumerate();
  ASSERT_EQ(configs.size(), 8u);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(configs[static_cast<std::size_t>(r)].at("algo"), r);
  EXPECT_EQ(lt->default_config, Config({{"algo", 0}}));
  ASSERT_TRUE(lt->workspace_bytes);
  EXPECT_EQ(lt->workspace_bytes(p, configs[0]), std::size_t{32} << 20);
}

TEST(GemmCublasSupports, PlainCublasTakesNoEpilogueAndTheTf32VariantOnlyTf32) {
  const Catalogue c = stand_in_catalogue();
  for (const std::string& primitive : gemm_primitive_names()) {
    const bool epilogue = parse_gemm_primitive(primitive)->epilogue != kernels::gemm::Epilogue::none;
    for (DType dtype : kGemmDtypes) {
      const Problem p = gemm_problem(primitive, dtype, 127, 129, 31);
      const std::string what = p.key();
      const Support plain = supports(*c.find_variant(primitive, "cublas"), p, {});
      const Support tf32 = supports(*c.find_variant(primitive, "cublas_tf32"), p, {});
      EXPECT_EQ(plain.ok, !epilogue && dtype != DType::tf32) << what << ": " << plain.reason;
      EXPECT_EQ(tf32.ok, !epilogue && dtype == DType::tf32) << what << ": " << tf32.reason;
      if (epilogue) {
        EXPECT_TRUE(mentions(plain.reason, "cublaslt")) << plain.reason;
      }
      if (dtype != DType::tf32) {
        EXPECT_TRUE(mentions(tf32.reason, "tf32 problems only")) << tf32.reason;
      }
    }
  }
}

TEST(GemmCublasSupports, PlainCublasRefusesExtentsBeyondItsIntApi) {
  const Catalogue c = stand_in_catalogue();
  const std::int64_t big = std::int64_t{INT_MAX} + 1;
  for (const Problem& p : {gemm_problem("gemm.nn", DType::f16, big, 1, 1),
                           gemm_problem("gemm.nt", DType::f32, 1, big, 1),
                           gemm_problem("gemm.tn", DType::tf32, 1, 1, big)}) {
    const char* name = p.dtype == DType::tf32 ? "cublas_tf32" : "cublas";
    const Support s = supports(*c.find_variant(p.primitive, name), p, {});
    EXPECT_FALSE(s.ok) << p.key();
    EXPECT_TRUE(mentions(s.reason, "2^31-1")) << s.reason;
    EXPECT_TRUE(supports(*c.find_variant(p.primitive, "cublaslt"), p, Config({{"algo", 0}})).ok) << p.key();
  }
}

// cuBLASLt computes a tanh GELU, and its 16-bit bias epilogue missed the fp32-epilogue tolerance
// on an H200: it takes every dtype only without an epilogue, and fp32/tf32 bias and bias+ReLU.
TEST(GemmCublasSupports, CublasLtRefusesGeluAndSixteenBitBiasEpilogues) {
  const Catalogue c = stand_in_catalogue();
  for (const std::string& primitive : gemm_primitive_names()) {
    const auto epilogue = parse_gemm_primitive(primitive)->epilogue;
    const Variant& lt = *c.find_variant(primitive, "cublaslt");
    for (DType dtype : kGemmDtypes) {
      const Problem p = gemm_problem(primitive, dtype, 17, 33, 65);
      const bool sixteen_bit = dtype == DType::f16 || dtype == DType::bf16;
      const bool expected = epilogue == kernels::gemm::Epilogue::none ||
                            (epilogue != kernels::gemm::Epilogue::bias_gelu && !sixteen_bit);
      for (const Config& config : lt.params.enumerate()) {
        const Support s = supports(lt, p, config);
        EXPECT_EQ(s.ok, expected) << p.key() << " " << config.key() << ": " << s.reason;
        if (!s.ok) {
          EXPECT_TRUE(mentions(s.reason, epilogue == kernels::gemm::Epilogue::bias_gelu ? "tanh" : "16-bit"))
              << s.reason;
        }
      }
    }
  }
}

// ---- on the real catalogue -----------------------------------------------------------------

TEST(GemmCublasCatalogue, EveryGemmPrimitiveHasTheThreeBaselines) {
  for (const std::string& primitive : gemm_primitive_names()) {
    ASSERT_NE(catalogue().find_primitive(primitive), nullptr) << primitive;
    for (const char* name : kCublasVariants) {
      const Variant* v = catalogue().find_variant(primitive, name);
      ASSERT_NE(v, nullptr) << primitive << "/" << name;
      EXPECT_TRUE(v->baseline) << primitive << "/" << name;
    }
  }
}

TEST(GemmCublasCatalogue, FloatProblemsNeverGetTf32AndTf32ProblemsNeverGetPlainFp32) {
  const std::int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {4096, 4096, 4096}};
  for (const std::string& primitive : gemm_primitive_names()) {
    const Variant& tf32 = *catalogue().find_variant(primitive, "cublas_tf32");
    const Variant& plain = *catalogue().find_variant(primitive, "cublas");
    for (const auto& s : shapes) {
      for (DType dtype : {DType::f32, DType::f16, DType::bf16})
        EXPECT_FALSE(supports(tf32, gemm_problem(primitive, dtype, s[0], s[1], s[2]), {}).ok) << primitive;
      EXPECT_FALSE(supports(plain, gemm_problem(primitive, DType::tf32, s[0], s[1], s[2]), {}).ok) << primitive;
    }
  }
}

}  // namespace
}  // namespace shapetune
