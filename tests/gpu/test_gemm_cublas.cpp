// The cuBLAS, cuBLASLt and unfused-chain GEMM baselines against the float64 reference: every variant, every
// config (each cuBLASLt heuristic rank), every layout and epilogue, every dtype, at awkward
// shapes (single elements, M, N or K of 1, odd extents) and at 256^3, with beta 0 and beta != 0.
// Then what random data in cudaMalloc'd buffers does not show: beta = 0 with NaN in C, buffers off
// their 256-byte alignment, cuBLASLt's GELU against the bound the support rule assumes, recorded
// algorithms replayed, and launches captured into a CUDA graph from the stream they were given.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "baselines/cublas.hpp"
#include "baselines/library_handles.hpp"
#include "baselines/reference.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/measure.hpp"
#include "harness/problem_data.hpp"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"
#include "variants/gemm_common.hpp"

namespace shapetune {
namespace {

struct Extents {
  std::int64_t m, n, k;
};
// One element; odd extents on every axis; M, N or K of 1 (a vector product and an outer product);
// a cube large enough for the libraries' tiled and split-K kernels.
const Extents kShapes[] = {{1, 1, 1}, {17, 33, 65}, {127, 129, 31}, {1, 129, 67}, {131, 1, 67}, {65, 33, 1},
                           {256, 256, 256}};
// {alpha, beta}: the plain product, C not read; then alpha != 1 (a bias scaled with the product
// would show) and a negative beta (C read back, a sign slip would show).
const std::vector<double> kScalars[] = {{1, 0}, {0.75, -0.5}};

bool mentions(const std::string& text, const std::string& word) { return text.find(word) != std::string::npos; }

std::vector<const Variant*> cublas_variants(const std::string& primitive) {
  std::vector<const Variant*> out;
  for (const Variant* v : catalogue().variants(primitive))
    if (v->name == "cublas" || v->name == "cublas_tf32" || v->name == "cublaslt" || v->name == "unfused")
      out.push_back(v);
  return out;
}

Problem gemm_problem(const std::string& primitive, DType dtype, Extents e) {
  return {primitive, dtype, Shape({{"m", e.m}, {"n", e.n}, {"k", e.k}})};
}

std::string label(const ProblemData& data, const Variant& v, const Config& c) {
  std::ostringstream out;
  out << data.problem().key() << " " << v.name << "{" << c.key() << "} alpha=" << data.scalars().at(0)
      << " beta=" << data.scalars().at(1);
  return out.str();
}

std::size_t tensor_index(const ProblemData& data, const std::string& name) {
  for (std::size_t i = 0; i < data.specs().size(); ++i)
    if (data.specs()[i].name == name) return i;
  throw std::out_of_range("no tensor " + name + " in " + data.problem().key());
}

void expect_accurate(const AccuracyReport& report, const std::string& what) {
  EXPECT_EQ(report.mismatches, 0) << what << ": " << report.mismatches << " of " << report.checked
                                  << " elements outside tolerance; first " << report.first_mismatch
                                  << "; max abs error " << report.max_abs_error;
}

// The only refusal at launch a supported config may meet: a heuristic rank cuBLASLt did not fill.
bool refused_for_a_missing_rank(const Variant& v, const Config& c, const LaunchStatus& s) {
  return !s.ok && s.unsupported && v.name == "cublaslt" && c.at("algo") > 0 && mentions(s.message, "past them");
}

class GemmCublas : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    measurer_ = std::make_unique<Measurer>(device_, MeasureOptions{});
    workspace_ = DeviceBuffer(kCublasLtWorkspaceBytes);
    seed_ = std::random_device{}();
  }

  cudaStream_t stream() const { return measurer_->stream(); }
  LibraryHandles& libraries() { return measurer_->libraries(); }

  LaunchArgs args(const Variant& v, const Config& c, const ProblemData& data, std::span<void* const> pointers) {
    const std::size_t bytes = v.workspace_bytes ? v.workspace_bytes(data.problem(), c) : 0;
    EXPECT_LE(bytes, workspace_.bytes()) << v.name;
    return LaunchArgs{data.problem(), c, pointers, stream(), libraries(), bytes ? workspace_.get() : nullptr, bytes,
                      data.scalars()};
  }
  // Queues one launch (nothing else: usable inside a stream capture).
  LaunchStatus queue(const Variant& v, const Config& c, const ProblemData& data, std::span<void* const> pointers) {
    return v.launch(args(v, c, data, pointers));
  }
  // One launch, waited for.
  LaunchStatus launch(const Variant& v, const Config& c, const ProblemData& data, std::span<void* const> pointers) {
    const LaunchStatus s = queue(v, c, data, pointers);
    if (s.ok) {
      EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    }
    return s;
  }

  DeviceInfo device_;
  std::unique_ptr<Measurer> measurer_;
  DeviceBuffer workspace_;
  std::uint64_t seed_ = 0;
};

TEST_P(GemmCublas, EveryVariantConfigLayoutShapeAndScalarsMatchFloat64) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::map<std::string, int> supported, verified;  // by "variant{config}"
  for (const std::string& primitive : gemm_primitive_names()) {
    const Primitive& gemm = *catalogue().find_primitive(primitive);
    for (const Extents& e : kShapes) {
      for (const std::vector<double>& scalars : kScalars) {
        const Problem problem = gemm_problem(primitive, dtype, e);
        ProblemData data(gemm, problem, seed_, {}, scalars);
        const Tolerance tolerance = tolerance_for(gemm, problem);
        for (const Variant* v : cublas_variants(primitive)) {
          for (const Config& config : v->params.enumerate()) {
            if (!v->supports(problem, config, device_.limits).ok) continue;
            const std::string key = v->name + "{" + config.key() + "}";
            ++supported[key];
            data.prepare(0, stream());
            const LaunchStatus status = launch(*v, config, data, data.pointers(0));
            if (!status.ok) {
              EXPECT_TRUE(refused_for_a_missing_rank(*v, config, status)) << label(data, *v, config) << ": "
                                                                          << status.message;
              continue;
            }
            expect_accurate(data.check(0, tolerance, stream()), label(data, *v, config));
            ++verified[key];
          }
        }
      }
    }
  }
  // The variants that must run did run wherever they were supported, and were supported where
  // they should be: plain cuBLAS on the three plain GEMMs of its dtypes, cuBLASLt on the plain
  // GEMMs and, in fp32 and tf32, with bias and bias+ReLU (never GELU: it is the tanh form), the
  // unfused chain on every GEMM with an epilogue.
  for (const char* key : {"cublas{}", "cublas_tf32{}", "cublaslt{algo=0}", "unfused{}"})
    EXPECT_EQ(verified[key], supported[key]) << key;
  const int plain_problems = static_cast<int>(kGemmLayouts.size() * std::size(kShapes) * std::size(kScalars));
  EXPECT_EQ(supported[dtype == DType::tf32 ? "cublas_tf32{}" : "cublas{}"], plain_problems);
  EXPECT_EQ(supported[dtype == DType::tf32 ? "cublas{}" : "cublas_tf32{}"], 0);
  const bool sixteen_bit = dtype == DType::f16 || dtype == DType::bf16;
  EXPECT_EQ(supported["cublaslt{algo=0}"], (sixteen_bit ? 1 : 3) * plain_problems);
  EXPECT_EQ(supported["unfused{}"], 3 * plain_problems);  // bias, bias+ReLU, bias+GELU
}

TEST_P(GemmCublas, BetaZeroNeverReadsC) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const std::string& primitive : gemm_primitive_names()) {
    const Primitive& gemm = *catalogue().find_primitive(primitive);
    const Problem problem = gemm_problem(primitive, dtype, {17, 33, 65});
    ProblemData data(gemm, problem, seed_, {}, {1.25, 0});
    const std::size_t c = tensor_index(data, "c");
    for (const Variant* v : cublas_variants(primitive)) {
      for (const Config& config : v->params.enumerate()) {
        if (!v->supports(problem, config, device_.limits).ok) continue;
        data.prepare(0, stream());
        // NaN in every element of C: 0 * NaN is NaN, so any read of C shows in the result.
        ASSERT_EQ(cudaMemsetAsync(data.pointers(0)[c], 0xFF, static_cast<std::size_t>(data.specs()[c].bytes()),
                                  stream()),
                  cudaSuccess);
        const LaunchStatus status = launch(*v, config, data, data.pointers(0));
        if (!status.ok) {
          EXPECT_TRUE(refused_for_a_missing_rank(*v, config, status)) << label(data, *v, config) << ": "
                                                                      << status.message;
          continue;
        }
        expect_accurate(data.check(0, tolerance_for(gemm, problem), stream()),
                        label(data, *v, config) + ", NaN in C");
      }
    }
  }
}

// cudaMalloc'd buffers are 256-byte aligned and cuBLASLt's heuristic assumes as much unless told
// otherwise; views into a larger tensor are not. Every tensor here starts one element past a
// 256-byte boundary, so only algorithms chosen for that alignment may run. cuBLASLt may refuse
// such buffers (a refusal, never an error); plain cuBLAS takes any element-aligned pointer.
TEST_P(GemmCublas, BuffersOneElementOffAlignmentGetAlgorithmsThatRunOnThem) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  int lt_verified = 0;
  for (const char* primitive : {"gemm.nn", "gemm_bias.nt", "gemm_bias_relu.tn"}) {
    const Primitive& gemm = *catalogue().find_primitive(primitive);
    const Problem problem = gemm_problem(primitive, dtype, {17, 33, 65});
    ProblemData data(gemm, problem, seed_, {}, {0.75, -0.5});
    const std::size_t c = tensor_index(data, "c");
    std::vector<DeviceBuffer> storage;
    std::vector<void*> shifted;
    for (const TensorSpec& spec : data.specs()) {
      storage.emplace_back(static_cast<std::size_t>(spec.bytes()) + 256);
      shifted.push_back(static_cast<std::byte*>(storage.back().get()) + dtype_size(spec.dtype));
    }
    for (const Variant* v : cublas_variants(primitive)) {
      for (const Config& config : v->params.enumerate()) {
        if (!v->supports(problem, config, device_.limits).ok) continue;
        data.prepare(0, stream());
        for (std::size_t i = 0; i < shifted.size(); ++i)
          ASSERT_EQ(cudaMemcpyAsync(shifted[i], data.pointers(0)[i], static_cast<std::size_t>(data.specs()[i].bytes()),
                                    cudaMemcpyDeviceToDevice, stream()),
                    cudaSuccess);
        const LaunchStatus status = launch(*v, config, data, shifted);
        if (!status.ok) {
          EXPECT_TRUE(status.unsupported && v->name == "cublaslt") << label(data, *v, config) << ": "
                                                                    << status.message;
          continue;
        }
        if (v->name == "cublaslt") ++lt_verified;
        // The result back into set 0, where check() reads it.
        ASSERT_EQ(cudaMemcpyAsync(data.pointers(0)[c], shifted[c], static_cast<std::size_t>(data.specs()[c].bytes()),
                                  cudaMemcpyDeviceToDevice, stream()),
                  cudaSuccess);
        expect_accurate(data.check(0, tolerance_for(gemm, problem), stream()),
                        label(data, *v, config) + ", tensors one element off alignment");
      }
    }
  }
  RecordProperty("cublaslt_configs_verified_off_alignment", lt_verified);
}

// What dispatch does with a cuBLASLt winner: the variant describes the algorithm of its rank
// (stored with the winner), and a launch given that description runs it; a description this
// cuBLASLt does not have falls back to the rank instead of failing.
TEST_P(GemmCublas, VariantLaunchReplaysItsDescribedAlgorithmOrFallsBackToTheRank) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const Primitive& gemm = *catalogue().find_primitive("gemm.nn");
  const Variant& lt = *catalogue().find_variant("gemm.nn", "cublaslt");
  ASSERT_TRUE(lt.describe_algorithm);
  const Problem problem = gemm_problem("gemm.nn", dtype, {127, 129, 31});
  ProblemData data(gemm, problem, seed_, {}, {1, 0});
  const Tolerance tolerance = tolerance_for(gemm, problem);
  const Config first({{"algo", 0}});
  const std::string description = lt.describe_algorithm(problem, first, libraries());
  ASSERT_FALSE(description.empty()) << problem.key();
  const std::vector<void*> pointers = data.pointers(0);
  for (const std::string& recorded :
       {description, std::string("cublaslt=0.0.0 algo_id=999999 tile_id=0 stages_id=0 splitk_num=1 "
                                 "reduction_scheme=0 cta_swizzling=0 custom_option=0 inner_shape_id=0 "
                                 "cluster_shape_id=0")}) {
    data.prepare(0, stream());
    LaunchArgs a = args(lt, first, data, pointers);
    a.library_algo = recorded;
    const LaunchStatus status = lt.launch(a);
    ASSERT_TRUE(status.ok) << recorded << ": " << status.message;
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    expect_accurate(data.check(0, tolerance, stream()), "launched with '" + recorded + "'");
  }
}

// describe_cublaslt_algo names the algorithm of each rank; launching from that description
// (what dispatch stores) computes the same product, without asking the heuristic.
TEST_P(GemmCublas, RecordedAlgorithmsReplayAndMatchFloat64) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // cuBLASLt's 16-bit bias epilogues are refused (off tolerance): the plain GEMM stands in there.
  const bool sixteen_bit = dtype == DType::f16 || dtype == DType::bf16;
  const std::pair<const char*, Extents> cases[] = {{sixteen_bit ? "gemm.nt" : "gemm_bias_relu.nt", {127, 129, 31}},
                                                   {"gemm.tn", {256, 256, 256}}};
  const char* const identity[] = {"cublaslt=",        "algo_id=",       "tile_id=",        "stages_id=",
                                  "splitk_num=",      "reduction_scheme=", "cta_swizzling=", "custom_option=",
                                  "inner_shape_id=",  "cluster_shape_id="};
  for (const auto& [primitive, extents] : cases) {
    const Primitive& gemm = *catalogue().find_primitive(primitive);
    const Variant& lt = *catalogue().find_variant(primitive, "cublaslt");
    const Problem problem = gemm_problem(primitive, dtype, extents);
    ProblemData data(gemm, problem, seed_, {}, {0.75, -0.5});
    const Tolerance tolerance = tolerance_for(gemm, problem);
    int described = 0;
    for (int rank = 0; rank < kCublasLtHeuristicCount; ++rank) {
      const Config config({{"algo", rank}});
      const std::string description = describe_cublaslt_algo(problem, rank, libraries());
      EXPECT_EQ(description, describe_cublaslt_algo(problem, rank, libraries())) << "asked twice";
      data.prepare(0, stream());
      const LaunchStatus by_rank = launch(lt, config, data, data.pointers(0));
      EXPECT_EQ(description.empty(), !by_rank.ok) << label(data, lt, config) << ": '" << description << "' / "
                                                  << by_rank.message;
      if (description.empty()) continue;
      ++described;
      for (const char* key : identity) EXPECT_TRUE(mentions(description, key)) << key << " in " << description;

      data.prepare(0, stream());
      const std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs a = args(lt, config, data, pointers);
      const LibraryCallResult replayed = cublaslt_gemm_recorded(libraries(), stream(), dtype, gemm_args<void>(a),
                                                                description, a.workspace, a.workspace_bytes);
      ASSERT_TRUE(replayed.ok) << description << ": " << replayed.message;
      expect_accurate(data.check(0, tolerance, stream()),
                      label(data, lt, config) + " replayed from '" + description + "'");
    }
    EXPECT_GE(described, 1) << problem.key();

    // An algorithm this cuBLASLt does not have, and a description without the identity, are
    // refusals (dispatch then falls back to a rank), never errors.
    const std::vector<void*> pointers = data.pointers(0);
    const Config first({{"algo", 0}});
    const LaunchArgs a = args(lt, first, data, pointers);
    const LibraryCallResult unknown = cublaslt_gemm_recorded(
        libraries(), stream(), dtype, gemm_args<void>(a),
        "cublaslt=0.0.0 algo_id=999999 tile_id=0 stages_id=0 splitk_num=1 reduction_scheme=0 cta_swizzling=0 "
        "custom_option=0 inner_shape_id=0 cluster_shape_id=0",
        a.workspace, a.workspace_bytes);
    EXPECT_FALSE(unknown.ok);
    EXPECT_TRUE(unknown.not_supported) << unknown.message;
    const LibraryCallResult partial =
        cublaslt_gemm_recorded(libraries(), stream(), dtype, gemm_args<void>(a), "algo_id=0", a.workspace,
                               a.workspace_bytes);
    EXPECT_FALSE(partial.ok);
    EXPECT_TRUE(partial.not_supported) << partial.message;
    EXPECT_TRUE(mentions(partial.message, "lacks")) << partial.message;
  }
}

// Each variant must queue its work on the stream it is given: a launch inside a capture of that
// stream lands in the graph, and the replayed graph computes the product.
TEST_P(GemmCublas, LaunchesRunOnTheGivenStreamAndCaptureIntoAGraph) {
  const DType dtype = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::pair<const char*, const char*> cases[] = {
      {"gemm.nt", dtype == DType::tf32 ? "cublas_tf32" : "cublas"},
      {dtype == DType::f16 || dtype == DType::bf16 ? "gemm.nn" : "gemm_bias_relu.nn", "cublaslt"}};
  for (const auto& [primitive, variant] : cases) {
    const Primitive& gemm = *catalogue().find_primitive(primitive);
    const Variant& v = *catalogue().find_variant(primitive, variant);
    const Problem problem = gemm_problem(primitive, dtype, {127, 129, 31});
    const Config config = v.default_config;
    ASSERT_TRUE(v.supports(problem, config, device_.limits).ok) << problem.key() << " " << variant;
    ProblemData data(gemm, problem, seed_, {}, {0.75, -0.5});
    const Tolerance tolerance = tolerance_for(gemm, problem);
    const std::vector<void*> pointers = data.pointers(0);

    // Outside a capture first: the handle and the cuBLASLt plan are made there, as in the harness.
    data.prepare(0, stream());
    const LaunchStatus direct = launch(v, config, data, pointers);
    ASSERT_TRUE(direct.ok) << direct.message;
    expect_accurate(data.check(0, tolerance, stream()), label(data, v, config) + ", direct");

    // C is restored to its initial values: a graph without the GEMM in it leaves them there.
    data.prepare(0, stream());
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const LaunchStatus captured = queue(v, config, data, pointers);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream(), &graph);
    if (!captured.ok || end != cudaSuccess || !graph) {
      if (graph) cudaGraphDestroy(graph);
      FAIL() << label(data, v, config) << " inside the capture: " << (captured.ok ? "ok" : captured.message)
             << "; capture ended with: " << cudaGetErrorString(end);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    ASSERT_EQ(instantiated, cudaSuccess) << cudaGetErrorString(instantiated);
    const cudaError_t replayed = cudaGraphLaunch(exec, stream());
    const AccuracyReport report = data.check(0, tolerance, stream());
    cudaGraphExecDestroy(exec);
    ASSERT_EQ(replayed, cudaSuccess) << cudaGetErrorString(replayed);
    expect_accurate(report, label(data, v, config) + ", replayed graph");
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, GemmCublas, ::testing::Values(DType::f32, DType::tf32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Why the catalogue's cublaslt refuses gemm_bias_gelu: cuBLASLt's GELU epilogue is the tanh form,
// measurably apart from the erf GELU the primitive defines. Pre-activations are exactly x = -8 ... 8
// in steps of 1/256 (A = x as an [M, 1] column, B = ones, bias = 0, fp32, K = 1), called directly
// (the catalogue would refuse it).
TEST(CublasLtGeluEpilogue, IsTheTanhFormNotTheErfForm) {
  SHAPETUNE_REQUIRE_GPU();
  const DeviceInfo device = use_device(0);
  Measurer measurer(device, MeasureOptions{});
  const std::int64_t m = 16 * 256 + 1, n = 8, k = 1;
  std::vector<float> x(static_cast<std::size_t>(m)), ones(static_cast<std::size_t>(n), 1.f),
      zeros(static_cast<std::size_t>(n), 0.f), out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) x[static_cast<std::size_t>(i)] = -8.f + static_cast<float>(i) / 256.f;
  DeviceBuffer a(x.size() * sizeof(float)), b(ones.size() * sizeof(float)), bias(zeros.size() * sizeof(float)),
      c(out.size() * sizeof(float)), workspace(kCublasLtWorkspaceBytes);
  ASSERT_EQ(cudaMemcpy(a.get(), x.data(), a.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.get(), ones.data(), b.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bias.get(), zeros.data(), bias.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(c.get(), 0xFF, c.bytes()), cudaSuccess);

  GemmOperands g;
  g.a = a.get();
  g.b = b.get();
  g.bias = bias.get();
  g.c = c.get();
  g.m = m;
  g.n = n;
  g.k = k;
  g.layout = kernels::gemm::Layout::nn;
  g.epilogue = kernels::gemm::Epilogue::bias_gelu;
  const LibraryCallResult r =
      cublaslt_gemm(measurer.libraries(), measurer.stream(), DType::f32, g, 0, workspace.get(), workspace.bytes());
  ASSERT_TRUE(r.ok) << r.message;
  ASSERT_EQ(cudaStreamSynchronize(measurer.stream()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), c.get(), c.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);

  using reference::Activation;
  double from_tanh = 0, from_erf = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    const double xi = x[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < n; ++j) {
      const double got = out[static_cast<std::size_t>(i * n + j)];
      // NaN makes both distances NaN, which fails both expectations below.
      from_erf = std::isnan(got) ? got : std::max(from_erf, std::fabs(got - reference::activation(Activation::gelu, xi)));
      from_tanh = std::isnan(got) ? got
                                  : std::max(from_tanh, std::fabs(got - reference::activation(Activation::gelu_tanh, xi)));
    }
  }
  RecordProperty("max_distance_from_tanh_gelu", std::to_string(from_tanh));
  RecordProperty("max_distance_from_erf_gelu", std::to_string(from_erf));
  EXPECT_LT(from_tanh, 2e-5) << "cuBLASLt's GELU is not the tanh form (largest distance " << from_tanh << ")";
  EXPECT_GT(from_erf, 4e-4) << "cuBLASLt's GELU is close to the erf form (largest distance " << from_erf
                            << "): the refusal in variants/gemm_cublas.cpp may be lifted";
}

}  // namespace
}  // namespace shapetune
