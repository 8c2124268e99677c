// The GEMM primitives through cuBLAS and cuBLASLt (baselines/cublas.hpp says what each computes
// and how the row-major problem maps onto the libraries' column-major one).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "baselines/cublas.hpp"
#include "baselines/library_handles.hpp"
#include "baselines/reference.hpp"
#include "kernels/gemm/gemm_kind.hpp"

namespace shapetune {
namespace {

namespace kg = kernels::gemm;

// ---------------------------------------------------------------------------------------------
// Statuses. Library calls inside the cuBLASLt plumbing throw a Failure, which the entry points
// turn into their LibraryCallResult.

struct Failure {
  LibraryCallResult result;
};

LibraryCallResult from_status(cublasStatus_t status, const std::string& call) {
  if (status == CUBLAS_STATUS_SUCCESS) return {};
  const bool refused = status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH;
  return {false, refused, call + ": " + cublas_status_text(status)};
}

void check(cublasStatus_t status, const std::string& call) {
  if (LibraryCallResult r = from_status(status, call); !r.ok) throw Failure{std::move(r)};
}

LibraryCallResult refusal(std::string why) { return {false, true, std::move(why)}; }

// ---------------------------------------------------------------------------------------------
// Types.

bool is_gemm_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::tf32 || dtype == DType::f16 || dtype == DType::bf16;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;  // f32, and tf32 whose tensors are f32
  }
}

// fp32 accumulation everywhere; tf32 problems are the only ones allowed TF32 products.
cublasComputeType_t compute_type(DType dtype) {
  return dtype == DType::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// ---------------------------------------------------------------------------------------------
// The column-major problem: C^T[n, m] = op(B)^T op(A)^T, so B is the first operand.

struct ColumnMajorGemm {
  cublasOperation_t op_first = CUBLAS_OP_N;
  cublasOperation_t op_second = CUBLAS_OP_N;
  std::int64_t rows = 0, cols = 0, depth = 0;  // of the result: n, m; k
  const void* first = nullptr;
  std::int64_t ld_first = 0;
  const void* second = nullptr;
  std::int64_t ld_second = 0;

  // Extents of the stored matrices, before their op.
  std::int64_t first_rows() const { return op_first == CUBLAS_OP_N ? rows : depth; }
  std::int64_t first_cols() const { return op_first == CUBLAS_OP_N ? depth : rows; }
  std::int64_t second_rows() const { return op_second == CUBLAS_OP_N ? depth : cols; }
  std::int64_t second_cols() const { return op_second == CUBLAS_OP_N ? cols : depth; }
};

ColumnMajorGemm column_major(const GemmOperands& g) {
  // Row-major [r, c] with stride c is column-major [c, r]: nn's B [K,N] is already op(B)^T
  // [N,K]; nt's B [N,K] reads as [K,N] and needs a transpose; likewise tn's A.
  ColumnMajorGemm v;
  v.op_first = g.layout == kg::Layout::nt ? CUBLAS_OP_T : CUBLAS_OP_N;
  v.op_second = g.layout == kg::Layout::tn ? CUBLAS_OP_T : CUBLAS_OP_N;
  v.rows = g.n;
  v.cols = g.m;
  v.depth = g.k;
  v.first = g.b;
  v.ld_first = g.ldb();
  v.second = g.a;
  v.ld_second = g.lda();
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// cuBLAS.

LibraryCallResult cublas_gemm(LibraryHandles& libraries, cudaStream_t stream, DType dtype, const GemmOperands& g) {
  if (!is_gemm_dtype(dtype)) return refusal("no cuBLAS GEMM for " + std::string(dtype_name(dtype)));
  if (g.epilogue != kg::Epilogue::none)
    return refusal("cuBLAS's GEMM has no fused bias or activation (cuBLASLt's epilogues do)");
  if (std::max({g.m, g.n, g.k}) > INT_MAX) return refusal("cuBLAS's 32-bit API takes extents up to 2^31-1");
  const ColumnMajorGemm v = column_major(g);
  const int rows = static_cast<int>(v.rows), cols = static_cast<int>(v.cols), depth = static_cast<int>(v.depth);
  const int ld_first = static_cast<int>(v.ld_first), ld_second = static_cast<int>(v.ld_second), ld_c = rows;

  cublasHandle_t handle = libraries.cublas(stream);
  // The handle is shared with every other cuBLAS user, so the math mode is set on each call.
  // DEFAULT_MATH never takes fp32 products in TF32 (only TF32_TENSOR_OP_MATH or a compute type
  // does); disallowing reduced-precision reductions keeps split-K partial sums of 16-bit outputs
  // in fp32, as the primitive's "accumulation is always float" says.
  const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (LibraryCallResult r = from_status(cublasSetMathMode(handle, math), "cublasSetMathMode"); !r.ok) return r;

  if (dtype == DType::f32)
    return from_status(cublasSgemm(handle, v.op_first, v.op_second, rows, cols, depth, &g.alpha,
                                   static_cast<const float*>(v.first), ld_first, static_cast<const float*>(v.second),
                                   ld_second, &g.beta, static_cast<float*>(g.c), ld_c),
                       "cublasSgemm");
  const cudaDataType_t type = data_type(dtype);
  return from_status(cublasGemmEx(handle, v.op_first, v.op_second, rows, cols, depth, &g.alpha, v.first, type,
                                  ld_first, v.second, type, ld_second, &g.beta, g.c, type, ld_c, compute_type(dtype),
                                  CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
}

LibraryCallResult cublas_product_to_f32(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                        const GemmOperands& g, float* c) {
  if (dtype != DType::f16 && dtype != DType::bf16)
    return refusal("an fp32 product of " + std::string(dtype_name(dtype)) + " operands is cublas_gemm's own output");
  if (std::max({g.m, g.n, g.k}) > INT_MAX) return refusal("cuBLAS's 32-bit API takes extents up to 2^31-1");
  const ColumnMajorGemm v = column_major(g);
  cublasHandle_t handle = libraries.cublas(stream);
  const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (LibraryCallResult r = from_status(cublasSetMathMode(handle, math), "cublasSetMathMode"); !r.ok) return r;
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t type = data_type(dtype);
  return from_status(cublasGemmEx(handle, v.op_first, v.op_second, static_cast<int>(v.rows), static_cast<int>(v.cols),
                                  static_cast<int>(v.depth), &one, v.first, type, static_cast<int>(v.ld_first),
                                  v.second, type, static_cast<int>(v.ld_second), &zero, c, CUDA_R_32F,
                                  static_cast<int>(v.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
}

LibraryCallResult cublas_times_transposed_f32(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                              std::int64_t rows, std::int64_t cols, std::int64_t depth, const void* a,
                                              const void* w, float* c, float beta) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    return refusal("no fp32-output product of " + std::string(dtype_name(dtype)) + " operands");
  if (std::max({rows, cols, depth}) > INT_MAX) return refusal("cuBLAS's 32-bit API takes extents up to 2^31-1");
  cublasHandle_t handle = libraries.cublas(stream);
  const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (LibraryCallResult r = from_status(cublasSetMathMode(handle, math), "cublasSetMathMode"); !r.ok) return r;
  // Column-major: C^T [cols, rows] = W [cols, depth] (W^T stored depth-major, op T) times A^T.
  const float alpha = 1.f;
  const cudaDataType_t type = data_type(dtype);
  return from_status(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows),
                                  static_cast<int>(depth), &alpha, w, type, static_cast<int>(depth), a, type,
                                  static_cast<int>(depth), &beta, c, CUDA_R_32F, static_cast<int>(cols),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
}

LibraryCallResult cublas_product_f32(LibraryHandles& libraries, cudaStream_t stream, std::int64_t rows,
                                     std::int64_t cols, std::int64_t depth, const float* a, bool a_transposed,
                                     const float* b, float* c, float beta) {
  if (std::max({rows, cols, depth}) > INT_MAX) return refusal("cuBLAS's 32-bit API takes extents up to 2^31-1");
  cublasHandle_t handle = libraries.cublas(stream);
  const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (LibraryCallResult r = from_status(cublasSetMathMode(handle, math), "cublasSetMathMode"); !r.ok) return r;
  // Column-major: C^T [cols, rows] = B^T [cols, depth] op(A)^T. Row-major B is B^T stored
  // column-major (no op), row-major A [rows, depth] likewise A^T; a stored A [depth, rows] reads
  // as A itself, so op(A)^T is its transpose (op T).
  const float alpha = 1.f;
  return from_status(cublasSgemm(handle, CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(cols),
                                 static_cast<int>(rows), static_cast<int>(depth), &alpha, b, static_cast<int>(cols), a,
                                 static_cast<int>(a_transposed ? rows : depth), &beta, c, static_cast<int>(cols)),
                     "cublasSgemm");
}

LibraryCallResult cublas_strided_batched(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                         const StridedBatchedGemm& g) {
  if (!is_gemm_dtype(dtype))
    return refusal("no strided batched product of " + std::string(dtype_name(dtype)) + " operands");
  if (std::max({g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.count}) > INT_MAX)
    return refusal("cuBLAS's 32-bit API takes extents up to 2^31-1");
  cublasHandle_t handle = libraries.cublas(stream);
  const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (LibraryCallResult r = from_status(cublasSetMathMode(handle, math), "cublasSetMathMode"); !r.ok) return r;
  // Column-major: C^T [n, m] = op(B)^T A^T. B stored [n, k] reads as [k, n] and needs the
  // transpose back; B stored [k, n] reads as op(B)^T already.
  const float alpha = 1.f, beta = 0.f;
  const cudaDataType_t type = data_type(dtype);
  return from_status(
      cublasGemmStridedBatchedEx(handle, g.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(g.n),
                                 static_cast<int>(g.m), static_cast<int>(g.k), &alpha, g.b, type, static_cast<int>(g.ldb),
                                 g.stride_b, g.a, type, static_cast<int>(g.lda), g.stride_a, &beta, g.c,
                                 g.c_fp32 ? CUDA_R_32F : type, static_cast<int>(g.ldc), g.stride_c,
                                 static_cast<int>(g.count), compute_type(dtype), CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt: descriptors and heuristic answers kept per problem in the LibraryHandles.

namespace {

template <class Opaque, cublasStatus_t (*destroy)(Opaque*)>
struct Destroyer {
  void operator()(Opaque* p) const { destroy(p); }
};
using OperationDesc =
    std::unique_ptr<cublasLtMatmulDescOpaque_t, Destroyer<cublasLtMatmulDescOpaque_t, cublasLtMatmulDescDestroy>>;
using MatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t,
                                     Destroyer<cublasLtMatrixLayoutOpaque_t, cublasLtMatrixLayoutDestroy>>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                                   Destroyer<cublasLtMatmulPreferenceOpaque_t, cublasLtMatmulPreferenceDestroy>>;

// cuBLASLt picks kernels by how the buffers are aligned (up to 256 bytes, cudaMalloc's), so an
// algorithm chosen for aligned buffers may not run on offset ones: alignment is part of the key.
constexpr std::uint32_t kMaxAlignment = 256;

std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return kMaxAlignment;  // describe_cublaslt_algo's buffers: cudaMalloc'd
  return static_cast<std::uint32_t>(std::min<std::uintptr_t>(kMaxAlignment, address & (~address + 1)));
}

struct PlanKey {
  DType dtype;
  kg::Layout layout;
  kg::Epilogue epilogue;
  std::int64_t m, n, k;
  std::uint32_t align_a, align_b, align_c, align_bias;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey plan_key(DType dtype, const GemmOperands& g) {
  return {dtype,        g.layout,     g.epilogue,   g.m, g.n, g.k, alignment(g.a), alignment(g.b),
          alignment(g.c), alignment(g.bias)};
}

// An algorithm rebuilt from a recorded description, or why it cannot be.
struct RecordedAlgo {
  LibraryCallResult status;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
};

struct Plan {
  OperationDesc operation;
  MatrixLayout first, second, result;  // result serves as both C and D (in place)
  bool heuristic_asked = false;
  LibraryCallResult heuristic_status;  // kept, so a refusal is not asked again on every launch
  std::vector<cublasLtMatmulHeuristicResult_t> ranked;
  std::map<std::string, RecordedAlgo> recorded;
};

struct Plans {
  std::map<PlanKey, std::unique_ptr<Plan>> by_key;
};

template <class T>
void set_operation(Plan& plan, cublasLtMatmulDescAttributes_t attribute, const T& value, const char* name) {
  check(cublasLtMatmulDescSetAttribute(plan.operation.get(), attribute, &value, sizeof value),
        std::string("cublasLtMatmulDescSetAttribute(") + name + ")");
}

MatrixLayout matrix_layout(DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  check(cublasLtMatrixLayoutCreate(&raw, data_type(dtype), static_cast<std::uint64_t>(rows),
                                   static_cast<std::uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate");
  return MatrixLayout(raw);
}

cublasLtEpilogue_t epilogue_of(kg::Epilogue e) {
  switch (e) {
    case kg::Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case kg::Epilogue::bias_relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case kg::Epilogue::bias_gelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// A pointer value standing for "aligned to `bytes`": the heuristic never dereferences the bias
// pointer, it only reads its alignment (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER).
const void* aligned_stand_in(std::uint32_t bytes) { return reinterpret_cast<const void*>(std::uintptr_t{bytes}); }

std::unique_ptr<Plan> make_plan(const PlanKey& key) {
  auto plan = std::make_unique<Plan>();
  GemmOperands extents;
  extents.m = key.m;
  extents.n = key.n;
  extents.k = key.k;
  extents.layout = key.layout;
  const ColumnMajorGemm v = column_major(extents);  // no pointers: extents, ops and strides

  cublasLtMatmulDesc_t raw = nullptr;
  check(cublasLtMatmulDescCreate(&raw, compute_type(key.dtype), CUDA_R_32F), "cublasLtMatmulDescCreate");
  plan->operation = OperationDesc(raw);
  set_operation(*plan, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(v.op_first), "TRANSA");
  set_operation(*plan, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(v.op_second), "TRANSB");
  if (key.epilogue != kg::Epilogue::none) {
    set_operation(*plan, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(epilogue_of(key.epilogue)),
                  "EPILOGUE");
    // The bias has C's type (as cuBLASLt's default); said explicitly so that no default can drift.
    set_operation(*plan, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(data_type(key.dtype)),
                  "BIAS_DATA_TYPE");
    set_operation(*plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, aligned_stand_in(key.align_bias), "BIAS_POINTER");
  }
  plan->first = matrix_layout(key.dtype, v.first_rows(), v.first_cols(), v.ld_first);
  plan->second = matrix_layout(key.dtype, v.second_rows(), v.second_cols(), v.ld_second);
  plan->result = matrix_layout(key.dtype, v.rows, v.cols, v.rows);
  return plan;
}

Plan& plan_for(LibraryHandles& libraries, const PlanKey& key) {
  std::unique_ptr<Plan>& slot = libraries.cache<Plans>("cublaslt_gemm").by_key[key];
  if (!slot) slot = make_plan(key);  // on a throw the empty slot stays and is filled next time
  return *slot;
}

template <class T>
void set_preference(Preference& preference, cublasLtMatmulPreferenceAttributes_t attribute, const T& value,
                    const char* name) {
  check(cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute, &value, sizeof value),
        std::string("cublasLtMatmulPreferenceSetAttribute(") + name + ")");
}

// The heuristic's ranking, asked once per plan.
void rank_algorithms(Plan& plan, const PlanKey& key, cublasLtHandle_t handle) {
  if (plan.heuristic_asked) return;
  cublasLtMatmulPreference_t raw = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw), "cublasLtMatmulPreferenceCreate");
  Preference preference(raw);
  set_preference(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kCublasLtWorkspaceBytes},
                 "MAX_WORKSPACE_BYTES");
  // cuBLASLt's A is our B and its B our A (the column-major view); C and D are our C.
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b, "MIN_ALIGNMENT_A_BYTES");
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a, "MIN_ALIGNMENT_B_BYTES");
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, "MIN_ALIGNMENT_C_BYTES");
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c, "MIN_ALIGNMENT_D_BYTES");
  if (key.dtype == DType::f16 || key.dtype == DType::bf16) {
    // Split-K partial sums reduced in fp32 only: in place or in the output type they would be
    // rounded to 16 bits between partial sums, and the primitive accumulates in float.
    set_preference(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), "REDUCTION_SCHEME_MASK");
  }

  std::vector<cublasLtMatmulHeuristicResult_t> results(kCublasLtHeuristicCount);
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, plan.operation.get(), plan.first.get(), plan.second.get(), plan.result.get(), plan.result.get(),
      preference.get(), kCublasLtHeuristicCount, results.data(), &returned);
  plan.heuristic_asked = true;
  plan.heuristic_status = from_status(status, "cublasLtMatmulAlgoGetHeuristic");
  if (!plan.heuristic_status.ok) return;
  results.resize(static_cast<std::size_t>(std::max(returned, 0)));
  // Every returned entry should be usable; one that is not would shift the ranks silently.
  for (const cublasLtMatmulHeuristicResult_t& r : results)
    if (r.state == CUBLAS_STATUS_SUCCESS) plan.ranked.push_back(r);
  if (plan.ranked.empty())
    plan.heuristic_status = refusal("cublasLtMatmulAlgoGetHeuristic found no algorithm for this problem");
}

LibraryCallResult run(Plan& plan, cublasLtHandle_t handle, cudaStream_t stream, const GemmOperands& g,
                      const cublasLtMatmulAlgo_t& algo, std::size_t needed_workspace, void* workspace,
                      std::size_t workspace_bytes) {
  if (needed_workspace > workspace_bytes)
    return refusal("the algorithm needs " + std::to_string(needed_workspace) + " bytes of workspace; " +
                   std::to_string(workspace_bytes) + " given");
  if (g.epilogue != kg::Epilogue::none) set_operation(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, "BIAS_POINTER");
  const ColumnMajorGemm v = column_major(g);
  return from_status(cublasLtMatmul(handle, plan.operation.get(), &g.alpha, v.first, plan.first.get(), v.second,
                                    plan.second.get(), &g.beta, g.c, plan.result.get(), g.c, plan.result.get(), &algo,
                                    workspace, workspace_bytes, stream),
                     "cublasLtMatmul");
}

// ---------------------------------------------------------------------------------------------
// Describing and rebuilding an algorithm by its configuration attributes.

struct IdentityField {
  const char* key;
  cublasLtMatmulAlgoConfigAttributes_t attribute;
};
// Together these say which kernel runs and how; CUBLASLT_ALGO_CONFIG_ID comes first because
// cublasLtMatmulAlgoInit takes it and the others are set on what it returns.
const IdentityField kIdentity[] = {
    {"algo_id", CUBLASLT_ALGO_CONFIG_ID},
    {"tile_id", CUBLASLT_ALGO_CONFIG_TILE_ID},
    {"stages_id", CUBLASLT_ALGO_CONFIG_STAGES_ID},
    {"splitk_num", CUBLASLT_ALGO_CONFIG_SPLITK_NUM},
    {"reduction_scheme", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME},
    {"cta_swizzling", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING},
    {"custom_option", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION},
    {"inner_shape_id", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID},
    {"cluster_shape_id", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID},
};

// The attributes are 16-, 32- or 64-bit depending on the attribute (and the cuBLASLt version), so
// the size is asked first rather than assumed.
std::size_t attribute_size(const cublasLtMatmulAlgo_t& algo, const IdentityField& field) {
  std::size_t size = 0;
  check(cublasLtMatmulAlgoConfigGetAttribute(&algo, field.attribute, nullptr, 0, &size),
        std::string("cublasLtMatmulAlgoConfigGetAttribute(") + field.key + ")");
  return size;
}

std::int64_t read_attribute(const cublasLtMatmulAlgo_t& algo, const IdentityField& field) {
  const std::string call = std::string("cublasLtMatmulAlgoConfigGetAttribute(") + field.key + ")";
  std::size_t written = 0;
  switch (attribute_size(algo, field)) {
    case 2: {
      std::uint16_t value = 0;
      check(cublasLtMatmulAlgoConfigGetAttribute(&algo, field.attribute, &value, sizeof value, &written), call);
      return value;
    }
    case 4: {
      std::int32_t value = 0;
      check(cublasLtMatmulAlgoConfigGetAttribute(&algo, field.attribute, &value, sizeof value, &written), call);
      return value;
    }
    case 8: {
      std::int64_t value = 0;
      check(cublasLtMatmulAlgoConfigGetAttribute(&algo, field.attribute, &value, sizeof value, &written), call);
      return value;
    }
    default: throw Failure{{false, false, call + ": unexpected attribute size"}};
  }
}

void write_attribute(cublasLtMatmulAlgo_t& algo, const IdentityField& field, std::int64_t value) {
  const std::string call = std::string("cublasLtMatmulAlgoConfigSetAttribute(") + field.key + ")";
  switch (attribute_size(algo, field)) {
    case 2: {
      const auto narrow = static_cast<std::uint16_t>(value);
      check(cublasLtMatmulAlgoConfigSetAttribute(&algo, field.attribute, &narrow, sizeof narrow), call);
      return;
    }
    case 4: {
      const auto narrow = static_cast<std::int32_t>(value);
      check(cublasLtMatmulAlgoConfigSetAttribute(&algo, field.attribute, &narrow, sizeof narrow), call);
      return;
    }
    case 8: check(cublasLtMatmulAlgoConfigSetAttribute(&algo, field.attribute, &value, sizeof value), call); return;
    default: throw Failure{{false, false, call + ": unexpected attribute size"}};
  }
}

std::string cublaslt_version() {
  int major = 0, minor = 0, patch = 0;
  cublasLtGetProperty(MAJOR_VERSION, &major);
  cublasLtGetProperty(MINOR_VERSION, &minor);
  cublasLtGetProperty(PATCH_LEVEL, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string describe(const cublasLtMatmulHeuristicResult_t& result) {
  std::ostringstream out;
  out << "cublaslt=" << cublaslt_version();
  for (const IdentityField& field : kIdentity) out << ' ' << field.key << '=' << read_attribute(result.algo, field);
  out << " workspace_bytes=" << result.workspaceSize << " waves=" << result.wavesCount;
  return out.str();
}

RecordedAlgo rebuild(Plan& plan, DType dtype, cublasLtHandle_t handle, const std::string& description) {
  std::map<std::string, std::int64_t> values;
  std::istringstream in(description);
  for (std::string token; in >> token;) {
    const std::size_t eq = token.find('=');
    if (eq == std::string::npos) return {refusal("recorded cuBLASLt algorithm: '" + token + "' is not key=value")};
    const std::string key = token.substr(0, eq);
    for (const IdentityField& field : kIdentity) {
      if (key != field.key) continue;
      try {
        values[key] = std::stoll(token.substr(eq + 1));
      } catch (const std::exception&) {
        return {refusal("recorded cuBLASLt algorithm: " + key + " is not an integer")};
      }
    }
  }
  for (const IdentityField& field : kIdentity)
    if (!values.contains(field.key))
      return {refusal(std::string("recorded cuBLASLt algorithm lacks ") + field.key + ": '" + description + "'")};

  // Whatever the library says about a recorded algorithm, the answer is that it does not run
  // here: a refusal, so that the caller falls back to the heuristic.
  try {
    RecordedAlgo out;
    const cudaDataType_t type = data_type(dtype);
    check(cublasLtMatmulAlgoInit(handle, compute_type(dtype), CUDA_R_32F, type, type, type, type,
                                 static_cast<int>(values["algo_id"]), &out.algo),
          "cublasLtMatmulAlgoInit");
    for (const IdentityField& field : kIdentity)
      if (field.attribute != CUBLASLT_ALGO_CONFIG_ID) write_attribute(out.algo, field, values[field.key]);
    cublasLtMatmulHeuristicResult_t checked{};
    check(cublasLtMatmulAlgoCheck(handle, plan.operation.get(), plan.first.get(), plan.second.get(),
                                  plan.result.get(), plan.result.get(), &out.algo, &checked),
          "cublasLtMatmulAlgoCheck");
    out.workspace_bytes = checked.workspaceSize;
    return out;
  } catch (const Failure& f) {
    return {refusal("recorded cuBLASLt algorithm does not run here: " + f.result.message)};
  }
}

}  // namespace

LibraryCallResult cublaslt_gemm(LibraryHandles& libraries, cudaStream_t stream, DType dtype, const GemmOperands& g,
                                int rank, void* workspace, std::size_t workspace_bytes) {
  if (!is_gemm_dtype(dtype)) return refusal("no cuBLASLt GEMM for " + std::string(dtype_name(dtype)));
  try {
    const PlanKey key = plan_key(dtype, g);
    Plan& plan = plan_for(libraries, key);
    cublasLtHandle_t handle = libraries.cublas_lt();
    rank_algorithms(plan, key, handle);
    if (!plan.heuristic_status.ok) return plan.heuristic_status;
    if (rank < 0 || static_cast<std::size_t>(rank) >= plan.ranked.size())
      return refusal("cuBLASLt's heuristic returned " + std::to_string(plan.ranked.size()) +
                     " algorithms for this problem; rank " + std::to_string(rank) + " is past them");
    const cublasLtMatmulHeuristicResult_t& choice = plan.ranked[static_cast<std::size_t>(rank)];
    return run(plan, handle, stream, g, choice.algo, choice.workspaceSize, workspace, workspace_bytes);
  } catch (const Failure& f) {
    return f.result;
  }
}

std::string describe_cublaslt_algo(const Problem& problem, int rank, LibraryHandles& libraries) {
  const std::optional<kg::GemmKind> kind = kg::parse_gemm_primitive(problem.primitive);
  if (!kind) throw std::invalid_argument("describe_cublaslt_algo: '" + problem.primitive + "' is not a GEMM primitive");
  if (!is_gemm_dtype(problem.dtype))
    throw std::invalid_argument("describe_cublaslt_algo: no GEMM for " + std::string(dtype_name(problem.dtype)));
  GemmOperands g;  // null pointers: the alignment of cudaMalloc'd buffers
  g.m = problem.shape.at("m");
  g.n = problem.shape.at("n");
  g.k = problem.shape.at("k");
  g.layout = kind->layout;
  g.epilogue = kind->epilogue;
  try {
    const PlanKey key = plan_key(problem.dtype, g);
    Plan& plan = plan_for(libraries, key);
    rank_algorithms(plan, key, libraries.cublas_lt());
    if (!plan.heuristic_status.ok) throw Failure{plan.heuristic_status};
    if (rank < 0 || static_cast<std::size_t>(rank) >= plan.ranked.size()) return "";
    return describe(plan.ranked[static_cast<std::size_t>(rank)]);
  } catch (const Failure& f) {
    throw LibraryError("describe_cublaslt_algo(" + problem.key() + "): " + f.result.message);
  }
}

LibraryCallResult cublaslt_gemm_recorded(LibraryHandles& libraries, cudaStream_t stream, DType dtype,
                                         const GemmOperands& g, const std::string& algo_description, void* workspace,
                                         std::size_t workspace_bytes) {
  if (!is_gemm_dtype(dtype)) return refusal("no cuBLASLt GEMM for " + std::string(dtype_name(dtype)));
  try {
    const PlanKey key = plan_key(dtype, g);
    Plan& plan = plan_for(libraries, key);
    cublasLtHandle_t handle = libraries.cublas_lt();
    if (g.epilogue != kg::Epilogue::none)  // AlgoCheck reads the bias pointer's alignment
      set_operation(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, "BIAS_POINTER");
    auto [it, inserted] = plan.recorded.try_emplace(algo_description);
    if (inserted) it->second = rebuild(plan, dtype, handle, algo_description);
    const RecordedAlgo& recorded = it->second;
    if (!recorded.status.ok) return recorded.status;
    return run(plan, handle, stream, g, recorded.algo, recorded.workspace_bytes, workspace, workspace_bytes);
  } catch (const Failure& f) {
    return f.result;
  }
}

}  // namespace shapetune
