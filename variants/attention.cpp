// The attention family: attention.{causal,full}.{split,packed}[.padded][.rounded], O =
// softmax(Q K^T * hd^-0.5 + mask) V over [B, H, S, hd] with fp32 softmax statistics, the output
// heads-merged [B, S, H, hd]. `split` reads three tensors [B, H, S, hd]; `packed` one [B, S, 3, H,
// hd], as a packed QKV projection writes it; `padded` adds valid lengths [B] (keys past a row's
// length are masked, its queries past the length output zero). `rounded` rounds where a framework's
// materialised eager attention (the TechJam reference) rounds, st() = round to the storage type:
// S = st(st(Q K^T) scale), P = st(softmax(S)) normalised before P V, O = st(P V); a flash kernel
// keeps S in fp32 and stores unnormalised P, which leaves a few elements per million of a 16-bit
// Transformer outside the TechJam rule (reports/cpu/2026-12-05-transformer-rounding-study). dtypes
// f16, bf16 and tf32 (f32 storage, TF32 products). The ladder (kernels/attention/):
//   naive:      the reference's way: a score GEMM, the masked fp32 softmax written back as P in the
//               model's type, a P V GEMM; O(S^2) memory, refused where the scores do not fit;
//               rounded: the GEMM stores the scores in the model's type;
//   flash_mma:  FlashAttention-2 style on mma.sync: K/V tiles streamed through shared memory,
//               online softmax in registers, tiles above the causal diagonal skipped; rounded:
//               two passes over the key tiles (row max and sum, then normalised P and P V);
//   flash_wgmma: the Hopper rung (sm_90a): a warpgroup's 64 query rows through wgmma, Q K^T from
//               swizzled shared memory, P V with P from registers; hd 64 and 128, f16 and bf16;
//               not rounded;
//   cudnn_sdpa: cuDNN's fused flash attention through its graph API (the baseline); not rounded.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "baselines/cublas.hpp"
#include "baselines/cudnn.hpp"
#include "baselines/reference.hpp"
#include "core/primitive_name.hpp"
#include "kernels/attention/attention.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ka = kernels::attention;

struct AttentionProblem {
  int batch, heads, seq, head_dim;
  ka::Mask mask;
  bool packed, padded, rounded;

  float scale() const { return static_cast<float>(1 / std::sqrt(static_cast<double>(head_dim))); }
  std::int64_t rows() const { return std::int64_t{batch} * seq; }
};

AttentionProblem attention_of(const Problem& p) {
  const PrimitiveName name = *PrimitiveName::parse(p.primitive);
  return {static_cast<int>(p.shape.at("B")),
          static_cast<int>(p.shape.at("H")),
          static_cast<int>(p.shape.at("S")),
          static_cast<int>(p.shape.at("hd")),
          name.has("causal") ? ka::Mask::causal : ka::Mask::full,
          name.has("packed"),
          name.has("padded"),
          name.has("rounded")};
}

// Tensor order. split: q, k, v, [lengths], o; packed: qkv, [lengths], o.
struct Pointers {
  const void *q, *k, *v;
  const int* lengths;
  void* o;
  ka::Strides q_strides, k_strides, v_strides, o_strides;
};

Pointers pointers_of(const AttentionProblem& a, std::span<void* const> tensors, std::size_t element_bytes) {
  Pointers p{};
  std::size_t next = 0;
  if (a.packed) {
    const auto* qkv = static_cast<const char*>(tensors[next++]);
    const std::size_t head_block = static_cast<std::size_t>(a.heads) * a.head_dim * element_bytes;
    p.q = qkv;
    p.k = qkv + head_block;
    p.v = qkv + 2 * head_block;
    p.q_strides = p.k_strides = p.v_strides = ka::packed_strides(a.heads, a.seq, a.head_dim);
  } else {
    p.q = tensors[next++];
    p.k = tensors[next++];
    p.v = tensors[next++];
    p.q_strides = p.k_strides = p.v_strides = ka::split_strides(a.heads, a.seq, a.head_dim);
  }
  p.lengths = a.padded ? static_cast<const int*>(tensors[next++]) : nullptr;
  p.o = tensors[next];
  p.o_strides = ka::merged_strides(a.heads, a.seq, a.head_dim);
  return p;
}


// ---- the primitive ------------------------------------------------------------------------------

// The float64 reference of every query row costs B H S keys hd 2 multiply-adds; past this many a
// sample of rows is computed and checked instead (a few seconds on the GPU box's 16 cores).
constexpr double kReferenceBudget = 4e9;

// The query rows (b S + i) the reference computes: all of them where that fits the budget, else
// in every batch row the first and the last and evenly spaced ones between them.
std::vector<std::int64_t> reference_rows(const AttentionProblem& a) {
  const double keys = a.mask == ka::Mask::causal ? (a.seq + 1) / 2.0 : a.seq;
  const double row_cost = 2.0 * a.heads * keys * a.head_dim;
  const double affordable = kReferenceBudget / row_cost;
  if (static_cast<double>(a.rows()) <= affordable) return {};
  const std::int64_t per_batch =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(affordable / a.batch), 2, a.seq);
  std::vector<std::int64_t> rows;
  for (std::int64_t b = 0; b < a.batch; ++b) {
    std::int64_t last = -1;
    for (std::int64_t r = 0; r < per_batch; ++r) {
      const std::int64_t i = r * (a.seq - 1) / (per_batch - 1);
      if (i != last) rows.push_back(b * a.seq + i);
      last = i;
    }
  }
  return rows;
}

Tolerance attention_tolerance(DType dtype) {
  // The outputs are averages of values in [-2, 2]. f16: the output's rounding (half an ulp of 2,
  // 9.8e-4) plus P rounded to f16 before P V (2^-11 relative, averaged); bf16 the same at 8 times
  // the unit; tf32: Q K^T and P V taken in TF32 (10-bit mantissas), the logits' error a few 1e-4.
  switch (dtype) {
    case DType::f16: return {2e-3, 1e-2};
    case DType::bf16: return {1.2e-2, 2e-2};
    default: return {2e-3, 1e-2};
  }
}

Tolerance rounded_attention_tolerance(DType dtype) {
  // A correct kernel rounds where this reference rounds; what differs is the order of its fp32
  // sums (and the expf, the scale in fp32), so now and then a stored value lands on the other
  // side of a rounding boundary: one unit of the storage type (ulp <= 2^-10 |x| in f16, 2^-7 in
  // bf16). Its worst effects on an output, |O| <= 2 (an average of values in [-2, 2]):
  //   the output itself: half an ulp of 2, 9.8e-4 (f16), 7.8e-3 (bf16); rtol 4e-3 and 1.6e-2
  //     cover one ulp four and two times over;
  //   a probability P_j: ulp(P_j) |v_j| <= 2^-11 * 2 = 9.8e-4 (f16) for P_j in [1/2, 1), 7.8e-3
  //     (bf16), smaller for smaller P_j;
  //   a score S_j: key j's weight changes by exp(ulp(S_j)) - 1 relative, the output by that
  //     times P_j (1 - P_j) (v_j - O without j) <= ulp(S_j) / 4 * 4 = ulp(S_j): 1.95e-3 (f16)
  //     and 1.56e-2 (bf16) for |S_j| in [2, 4) (logits here have a standard deviation of about
  //     1.3, so among millions of rows some key has |S| > 2 and holds a large share of its row).
  // So atol 3e-3 (f16) and 2.4e-2 (bf16): a flipped score of |S| < 4 with the output's own
  // rounding. On the H200 the rounded variants, all agreeing to the bit, reached 2.4e-3 (f16,
  // 10 of 8.4 million outputs past 1.5e-3, hd 256) and 1.27e-2 (bf16, 3 of 30.7 million past
  // 1e-2) against this reference (reports/h200/2026-12-05-transformer-cases); a host emulation
  // on 2 million outputs had stayed within 1e-3 and so had not seen that tail. A kernel that
  // skips or misplaces work errs by the size of the values, hundreds of times more. tf32: st() is
  // the identity and the products are TF32 as in the plain primitive (flash_mma also rounds P to
  // TF32), so its tolerance is the plain one.
  switch (dtype) {
    case DType::f16: return {3e-3, 4e-3};
    case DType::bf16: return {2.4e-2, 1.6e-2};
    default: return attention_tolerance(dtype);
  }
}

Support validate_attention_shape(const Shape& s) {
  const std::int64_t B = s.at("B"), H = s.at("H"), S = s.at("S"), hd = s.at("hd");
  if (std::max({B, H, S, hd}) > INT_MAX / 4) return Support::no("B, H, S and hd must be below 2^29");
  if (hd > 256) return Support::no("hd must be at most 256");
  if (B * H * S * hd > (std::int64_t{1} << 36)) return Support::no("B H S hd must be at most 2^36 (per tensor)");
  return Support::yes();
}

Primitive attention_primitive(ka::Mask mask, bool packed, bool padded, bool rounded) {
  Primitive p;
  p.name = std::string("attention.") + (mask == ka::Mask::causal ? "causal" : "full") + (packed ? ".packed" : ".split") +
           (padded ? ".padded" : "") + (rounded ? ".rounded" : "");
  p.description = std::string(mask == ka::Mask::causal ? "causal" : "full") + " scaled dot-product attention, " +
                  (packed ? "packed QKV [B, S, 3, H, hd]" : "split Q, K, V [B, H, S, hd]") +
                  (padded ? ", valid lengths [B] (padded keys masked, padded queries zero)" : "") +
                  " -> O [B, S, H, hd]; fp32 softmax statistics" +
                  (rounded ? "; the rounding points of a framework's materialised eager attention: scores stored "
                             "in the model's type twice (Q K^T, then scaled), the normalised probabilities stored "
                             "before P V, the output stored"
                           : "");
  const std::string masks = std::string(mask == ka::Mask::causal ? " + (j > i ? -inf : 0)" : "") +
                            (padded ? " + (j >= len_b ? -inf : 0)" : "");
  const std::string invalid_rows = padded ? ", 0 for i >= len_b" : "";
  if (rounded)
    p.signature = "st() = round to the storage type (nearest even; identity for tf32's f32): S_ij = st(st(q_i . k_j) / "
                  "sqrt(hd))" + masks + ", P_ij = st(exp(S_ij - max_j S_ij) / sum_j exp(S_ij - max_j S_ij)) in fp32, "
                  "O[b,i,h] = st(sum_j P_ij v_j)" + invalid_rows;
  else
    p.signature = "O[b,i,h] = sum_j softmax_j(q_i . k_j / sqrt(hd)" + masks + ") v_j" + invalid_rows;
  p.axes = {"B", "H", "S", "hd"};
  p.dtypes = {DType::f16, DType::bf16, DType::tf32};
  p.tensors = [packed, padded](const Problem& problem) {
    const std::int64_t B = problem.shape.at("B"), H = problem.shape.at("H"), S = problem.shape.at("S"),
                       hd = problem.shape.at("hd");
    const DType t = storage_of(problem.dtype);
    // Logits q.k/sqrt(hd) of standard deviation about 1.3: softmax rows neither flat nor one-hot.
    std::vector<TensorSpec> specs;
    if (packed) {
      specs.push_back({"qkv", t, {B, S, 3, H, hd}, TensorRole::input, -2, 2});
    } else {
      for (const char* name : {"q", "k", "v"}) specs.push_back({name, t, {B, H, S, hd}, TensorRole::input, -2, 2});
    }
    if (padded)
      specs.push_back({"lengths", DType::i32, {B}, TensorRole::input, 0, static_cast<double>(S + 1)});
    specs.push_back({"o", t, {B, S, H, hd}, TensorRole::output});
    return specs;
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    const AttentionProblem a = attention_of(problem);
    reference::AttentionSpec s;
    s.batch = a.batch, s.heads = a.heads, s.seq = a.seq, s.head_dim = a.head_dim;
    s.scale = 1 / std::sqrt(static_cast<double>(a.head_dim));
    s.causal = a.mask == ka::Mask::causal;
    if (a.rounded) s.round = reference::rounding_for(storage_of(problem.dtype));
    const auto set = [](std::int64_t (&to)[3], ka::Strides from) { to[0] = from.batch, to[1] = from.head, to[2] = from.row; };
    const ka::Strides in = a.packed ? ka::packed_strides(a.heads, a.seq, a.head_dim)
                                    : ka::split_strides(a.heads, a.seq, a.head_dim);
    set(s.q_strides, in), set(s.k_strides, in), set(s.v_strides, in);
    set(s.o_strides, ka::merged_strides(a.heads, a.seq, a.head_dim));
    const std::size_t lengths = a.packed ? 1 : 3;
    const double* q = t[0].data();
    const double* k = a.packed ? q + std::int64_t{a.heads} * a.head_dim : t[1].data();
    const double* v = a.packed ? q + 2 * std::int64_t{a.heads} * a.head_dim : t[2].data();
    reference::attention(s, q, k, v, a.padded ? t[lengths].data() : nullptr, reference_rows(a), t.back().data());
  };
  p.checked_ranges = [](const Problem& problem) {
    const AttentionProblem a = attention_of(problem);
    const std::int64_t row_elements = std::int64_t{a.heads} * a.head_dim;  // every head of a query row
    std::vector<ElementRange> ranges;
    for (const std::int64_t row : reference_rows(a)) ranges.push_back({row * row_elements, (row + 1) * row_elements});
    return ranges;
  };
  p.cost = [mask](const Problem& problem) {
    const double B = static_cast<double>(problem.shape.at("B")), H = static_cast<double>(problem.shape.at("H")),
                 S = static_cast<double>(problem.shape.at("S")), hd = static_cast<double>(problem.shape.at("hd"));
    // Q, K, V read once and O written once; Q K^T and P V, halved by the causal mask (the
    // convention FlashAttention's published rates use).
    const double bytes = 4 * B * S * H * hd * static_cast<double>(dtype_size(storage_of(problem.dtype)));
    return Cost{bytes, 4 * B * H * S * S * hd / (mask == ka::Mask::causal ? 2 : 1)};
  };
  p.tolerance = rounded ? rounded_attention_tolerance : attention_tolerance;
  // Untuned, the fastest hand-written rung that runs the problem: flash_wgmma (sm_90, 16-bit); its
  // default config (pipeline 0, also what winners recorded before `pipeline` existed complete to)
  // took 0.62x flash_mma's default's time at (4, 16, 8192, 128), 0.92x at (8, 16, 2048, 64) and
  // 0.82x at (1, 16, 100000, 64) on the H200 (reports/h200/2026-12-03-attention-rnn-backward,
  // targets.db); else flash_mma, which has no code for hd 8 (nor for block_k 128 at hd 256) and
  // needs sm_80. At hd 8 cuDNN's fused attention won every 16-bit problem on the H200 (naive never
  // won one), and tf32, which cuDNN lacks, has only naive. flash_wgmma and cuDNN do not round as
  // `rounded` asks: naive alone backs flash_mma there.
  p.default_variant = rounded ? "flash_mma" : "flash_wgmma";
  p.fallback_variants = rounded ? std::vector<std::string>{"naive"}
                                : std::vector<std::string>{"flash_mma", "cudnn_sdpa", "naive"};
  p.validate_shape = validate_attention_shape;
  return p;
}

// Calls fn(tag) with tag's type the storage type of the problem (tf32: float).
template <typename Fn>
LaunchStatus with_attention_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::tf32: return fn(float{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    default: return LaunchStatus::failure("attention has no " + std::string(dtype_name(dtype)) + " variant");
  }
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1 << 30));
  return text;
}

// ---- naive --------------------------------------------------------------------------------------

// The scores (fp32; rounded: stored in the model's type, as the framework's score GEMM stores
// them) and the probabilities in the model's type, [B, H, S, S] each.
std::size_t naive_score_bytes(const AttentionProblem& a, DType dtype) {
  return a.rounded ? dtype_size(storage_of(dtype)) : sizeof(float);
}

std::size_t naive_workspace(const Problem& problem, const Config&) {
  const AttentionProblem a = attention_of(problem);
  const auto squares = static_cast<std::size_t>(a.batch) * a.heads * a.seq * a.seq;
  return align256(squares * naive_score_bytes(a, problem.dtype)) +
         align256(squares * dtype_size(storage_of(problem.dtype)));
}

Support naive_supports(const Problem& problem, const Config& config, const DeviceLimits& limits) {
  const double bytes = static_cast<double>(naive_workspace(problem, config));
  if (bytes > 0.5 * static_cast<double>(limits.global_memory_bytes))
    return Support::no("needs " + gib(bytes) + " of scores and probabilities; at most half the device's " +
                       gib(static_cast<double>(limits.global_memory_bytes)) + " is allowed");
  return Support::yes();
}

LaunchStatus naive(const LaunchArgs& args) {
  const AttentionProblem a = attention_of(args.problem);
  return with_attention_type(args.problem.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Pointers p = pointers_of(a, args.tensors, sizeof(T));
    const std::int64_t square = std::int64_t{a.seq} * a.seq;
    // fp32, or T when rounded (for tf32 both are float).
    char* scores = static_cast<char*>(args.workspace);
    const std::size_t score_bytes = naive_score_bytes(a, args.problem.dtype);
    T* probabilities = reinterpret_cast<T*>(
        scores + align256(static_cast<std::size_t>(square * a.batch * a.heads) * score_bytes));
    const auto element = [](const void* base, std::int64_t offset) {
      return static_cast<const void*>(static_cast<const T*>(base) + offset);
    };
    // The packed layout and the merged output have no single stride from one (batch row, head)
    // to the next, but each has one along the batch rows and one along the heads: so one
    // strided batch per head over the batch rows, or per batch row over the heads, whichever
    // makes fewer launches (case 6 of the TechJam cases has 10,000 batch rows and 4 heads).
    const bool batch_inside = a.batch >= a.heads;
    const int outer = batch_inside ? a.heads : a.batch, inner = batch_inside ? a.batch : a.heads;
    const std::int64_t score_stride = batch_inside ? a.heads * square : square;  // from one GEMM of a batch to the next
    const auto along = [&](const ka::Strides& s) { return batch_inside ? s.batch : s.head; };
    const auto first = [&](const ka::Strides& s, int o) { return batch_inside ? o * s.head : o * s.batch; };
    const auto first_square = [&](int o) { return (batch_inside ? std::int64_t{o} : std::int64_t{o} * a.heads) * square; };
    for (int o = 0; o < outer; ++o) {
      StridedBatchedGemm g;
      g.m = a.seq, g.n = a.seq, g.k = a.head_dim, g.count = inner;
      g.a = element(p.q, first(p.q_strides, o)), g.lda = p.q_strides.row, g.stride_a = along(p.q_strides);
      g.b = element(p.k, first(p.k_strides, o)), g.ldb = p.k_strides.row, g.stride_b = along(p.k_strides);
      g.b_transposed = true;
      g.c = scores + static_cast<std::size_t>(first_square(o)) * score_bytes, g.ldc = a.seq, g.stride_c = score_stride;
      g.c_fp32 = !a.rounded;
      if (LaunchStatus s = library_status(cublas_strided_batched(args.libraries, args.stream, args.problem.dtype, g));
          !s.ok)
        return s;
    }
    const cudaError_t softmax =
        a.rounded ? ka::rounded_masked_softmax(reinterpret_cast<const T*>(scores), probabilities, p.lengths, a.batch,
                                               a.heads, a.seq, a.scale(), a.mask, args.stream)
                  : ka::masked_softmax(reinterpret_cast<const float*>(scores), probabilities, p.lengths, a.batch,
                                       a.heads, a.seq, a.scale(), a.mask, args.stream);
    if (LaunchStatus s = launch_status(softmax); !s.ok) return s;
    for (int o = 0; o < outer; ++o) {
      StridedBatchedGemm g;
      g.m = a.seq, g.n = a.head_dim, g.k = a.seq, g.count = inner;
      g.a = probabilities + first_square(o), g.lda = a.seq, g.stride_a = score_stride;
      g.b = element(p.v, first(p.v_strides, o)), g.ldb = p.v_strides.row, g.stride_b = along(p.v_strides);
      g.c = static_cast<T*>(p.o) + first(p.o_strides, o), g.ldc = p.o_strides.row, g.stride_c = along(p.o_strides);
      if (LaunchStatus s = library_status(cublas_strided_batched(args.libraries, args.stream, args.problem.dtype, g));
          !s.ok)
        return s;
    }
    return LaunchStatus::success();
  });
}

// Heads and batch rows are grid dimensions of at most 65535 (ka::kMaxGridYZ) for the flash kernels.
Support grid_takes_heads_and_batch(const AttentionProblem& a) {
  if (a.batch > ka::kMaxGridYZ || a.heads > ka::kMaxGridYZ)
    return Support::no("B and H are the grid's z and y: at most " + std::to_string(ka::kMaxGridYZ) + " each");
  return Support::yes();
}

// The kernels' parameter block of a problem's tensors.
template <typename T>
ka::Params<T> kernel_params(const AttentionProblem& a, const Pointers& p) {
  ka::Params<T> params;
  params.q = static_cast<const T*>(p.q), params.k = static_cast<const T*>(p.k), params.v = static_cast<const T*>(p.v);
  params.o = static_cast<T*>(p.o);
  params.q_strides = p.q_strides, params.k_strides = p.k_strides, params.v_strides = p.v_strides;
  params.o_strides = p.o_strides;
  params.lengths = p.lengths;
  params.batch = a.batch, params.heads = a.heads, params.seq = a.seq, params.head_dim = a.head_dim;
  params.scale = a.scale();
  params.mask = a.mask;
  params.rounded = a.rounded;
  return params;
}

// ---- flash_mma ----------------------------------------------------------------------------------

// `passes` is a parameter of the rounded primitives' flash_mma only.
ka::FlashMmaConfig flash_config(const Config& c) {
  return {cfg(c, "warps"), cfg(c, "block_k"), cfg(c, "stages"), static_cast<int>(c.find("passes").value_or(2))};
}

Support flash_mma_supports(const Problem& problem, const Config& config, const DeviceLimits& limits) {
  if (limits.compute_capability < 80)
    return Support::no("needs mma.sync for 16-bit and TF32 operands (sm_80+); the device is sm_" +
                       std::to_string(limits.compute_capability));
  const AttentionProblem a = attention_of(problem);
  if (!ka::flash_mma_head_dim_supported(a.head_dim))
    return Support::no("built for hd 8, 16, 32, 64, 80, 96, 128 and 256; not " + std::to_string(a.head_dim));
  if (cfg(config, "block_k") > ka::flash_mma_max_block_k(a.head_dim))
    return Support::no("at hd " + std::to_string(a.head_dim) + " key tiles stop at " +
                       std::to_string(ka::flash_mma_max_block_k(a.head_dim)) +
                       " rows: 128 keys of fp32 scores (64 registers a thread) beside the output's 128 would spill");
  if (Support s = grid_takes_heads_and_batch(a); !s.ok) return s;
  const std::size_t shared =
      ka::flash_mma_shared_bytes(flash_config(config), a.head_dim, static_cast<int>(dtype_size(storage_of(problem.dtype))));
  if (static_cast<std::int64_t>(shared) > limits.shared_memory_per_block_optin)
    return Support::no("needs " + std::to_string(shared) + " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin));
  return Support::yes();
}

LaunchStatus flash_mma(const LaunchArgs& args) {
  const AttentionProblem a = attention_of(args.problem);
  return with_attention_type(args.problem.dtype, [&](auto tag) {
    using T = decltype(tag);
    const ka::Params<T> params = kernel_params<T>(a, pointers_of(a, args.tensors, sizeof(T)));
    const cudaError_t e = ka::flash_mma_forward(params, flash_config(args.config), args.stream);
    if (e == cudaErrorNotSupported) return LaunchStatus::refused("flash_mma has no code for this head dimension or device");
    return launch_status(e);
  });
}

// ---- flash_wgmma --------------------------------------------------------------------------------

// Why flash_wgmma and cuDNN SDPA refuse the rounded primitives.
constexpr const char* kNotRounded =
    "not rounded as a framework's materialised attention rounds: a flash kernel keeps the scores in fp32 and "
    "stores unnormalised probabilities for P V";

ka::FlashWgmmaConfig flash_wgmma_config(const Config& c) {
  return {cfg(c, "warpgroups"), cfg(c, "block_k"), cfg(c, "pipeline"), cfg(c, "sections"), cfg(c, "pingpong")};
}

Support flash_wgmma_supports(const Problem& problem, const Config& config, const DeviceLimits& limits) {
  if (limits.compute_capability != 90)
    return Support::no("needs sm_90a (wgmma); the device is sm_" + std::to_string(limits.compute_capability));
  if (problem.dtype != DType::f16 && problem.dtype != DType::bf16)
    return Support::no("wgmma takes 16-bit operands here (f16, bf16); not " + std::string(dtype_name(problem.dtype)));
  const AttentionProblem a = attention_of(problem);
  if (a.rounded) return Support::no(kNotRounded);
  if (!ka::flash_wgmma_head_dim_supported(a.head_dim))
    return Support::no("built for hd 64 and 128; not " + std::to_string(a.head_dim));
  if (Support s = grid_takes_heads_and_batch(a); !s.ok) return s;
  if (cfg(config, "pipeline") != 0 && cfg(config, "warpgroups") == 1)
    return Support::no("the warp-specialised pipelines run two or three consumer warpgroups beside their producer "
                       "(the register splits: 128 x 24 + 256 x 240, 128 x 24 + 384 x 160)");
  if (cfg(config, "warpgroups") == 3 && a.head_dim != 64)
    return Support::no("three consumer warpgroups have 160 registers a thread, which hold O, S and P at hd 64 only; "
                       "not " + std::to_string(a.head_dim));
  if (cfg(config, "pipeline") == 3 && a.padded)
    return Support::no("pipeline 3's TMA boxes zero-fill past S but not past a batch row's length, whose keys must "
                       "arrive as zeros: pipelines 1 and 2 copy them with cp.async's zero fill");
  const std::size_t shared = ka::flash_wgmma_shared_bytes(flash_wgmma_config(config), a.head_dim);
  if (static_cast<std::int64_t>(shared) > limits.shared_memory_per_block_optin)
    return Support::no("needs " + std::to_string(shared) + " bytes of shared memory; a block may have " +
                       std::to_string(limits.shared_memory_per_block_optin));
  return Support::yes();
}

LaunchStatus flash_wgmma(const LaunchArgs& args) {
  const AttentionProblem a = attention_of(args.problem);
  return with_attention_type(args.problem.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      return LaunchStatus::refused("flash_wgmma takes f16 or bf16");
    } else {
      const ka::Params<T> params = kernel_params<T>(a, pointers_of(a, args.tensors, sizeof(T)));
      const cudaError_t e = ka::flash_wgmma_forward(params, flash_wgmma_config(args.config), args.stream);
      if (e == cudaErrorNotSupported)
        return LaunchStatus::refused("flash_wgmma has no code for this head dimension, alignment or device");
      return launch_status(e);
    }
  });
}

// ---- cudnn_sdpa ---------------------------------------------------------------------------------

LaunchStatus cudnn_sdpa(const LaunchArgs& args) {
  const AttentionProblem a = attention_of(args.problem);
  if (args.problem.dtype != DType::f16 && args.problem.dtype != DType::bf16)
    return LaunchStatus::refused("cuDNN SDPA takes f16 or bf16");
  if (a.rounded) return LaunchStatus::refused(kNotRounded);
  const Pointers p = pointers_of(a, args.tensors, dtype_size(args.problem.dtype));
  CudnnSdpaForward f;
  f.dtype = args.problem.dtype;
  f.batch = a.batch, f.heads = a.heads, f.seq = a.seq, f.head_dim = a.head_dim;
  f.scale = a.scale();
  f.causal = a.mask == ka::Mask::causal;
  f.lengths = p.lengths;
  f.q = p.q, f.k = p.k, f.v = p.v, f.o = p.o;
  const auto set = [](std::int64_t (&to)[4], ka::Strides from) {
    to[0] = from.batch, to[1] = from.head, to[2] = from.row, to[3] = 1;
  };
  set(f.q_strides, p.q_strides), set(f.k_strides, p.k_strides), set(f.v_strides, p.v_strides);
  set(f.o_strides, p.o_strides);
  if (LaunchStatus s = library_status(cudnn_sdpa_forward(args.libraries, args.stream, f)); !s.ok) return s;
  if (!a.padded) return LaunchStatus::success();
  // cuDNN leaves the outputs of padded queries to the caller; the primitive says they are zero.
  return with_attention_type(args.problem.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_status(ka::zero_invalid_rows(static_cast<T*>(p.o), p.o_strides, p.lengths, a.batch, a.heads, a.seq,
                                               a.head_dim, args.stream));
  });
}

void add_variants(Catalogue& cat, const std::string& primitive, bool rounded) {
  Variant n;
  n.primitive = primitive;
  n.name = "naive";
  n.description = rounded ? "the reference's way, its rounding points included: score GEMM (cuBLAS) stored in the "
                            "model's type, scaled and stored again, masked fp32 softmax written as P, P V GEMM; O(S^2) memory"
                          : "the reference's way: score GEMM (cuBLAS), masked fp32 softmax written as P, P V GEMM; O(S^2) memory";
  n.supports = naive_supports;
  n.workspace_bytes = naive_workspace;
  n.launch = naive;
  cat.add(n);

  Variant f;
  f.primitive = primitive;
  f.name = "flash_mma";
  f.description = rounded ? "FlashAttention-2 style, rounding as the materialised reference does: in two passes, the "
                            "row max and sum of each query tile over the K tiles first, then the scores again, P "
                            "normalised and stored in the model's type, and P V; or in one, the scores rounded and "
                            "the plain online softmax (mma.sync, K/V through shared memory)"
                          : "FlashAttention-2 style: K/V tiles through shared memory (cp.async), online softmax in "
                            "registers, mma.sync, tiles above the causal diagonal skipped";
  std::vector<ParamAxis> params = {{"warps", {4, 8}, "warps per block, 16 query rows each (block_q = 64 or 128)"},
                                   {"block_k", {32, 64, 128}, "key rows per K/V tile"},
                                   {"stages", {1, 2}, "K/V tiles in flight (cp.async double buffering)"}};
  if (rounded)
    params.push_back({"passes", {2, 1},
                      "2: every rounding point (P normalised and stored before P V); 1: the scores rounded, P kept "
                      "unnormalised in fp32 as the plain kernel keeps it (half the work; within the tolerance)"});
  f.params = ParamSpace(std::move(params));
  f.default_config = rounded ? Config({{"warps", 4}, {"block_k", 64}, {"stages", 2}, {"passes", 2}})
                             : Config({{"warps", 4}, {"block_k", 64}, {"stages", 2}});
  f.supports = flash_mma_supports;
  f.launch = flash_mma;
  cat.add(f);

  Variant w;
  w.primitive = primitive;
  w.name = "flash_wgmma";
  w.description = "FlashAttention-3 style on Hopper (sm_90a): wgmma for Q K^T (swizzled shared operands) and P V "
                  "(P from registers), K/V double-buffered by cp.async, online softmax in registers; pipeline 1 adds "
                  "a producer warpgroup (mbarrier ring) and overlaps each tile's softmax with the next products; "
                  "pipeline 2 runs that persistently, one block per SM; pipeline 3 loads with TMA instead; pingpong "
                  "has the consumer warpgroups take turns at the tensor cores";
  w.params = ParamSpace({{"warpgroups", {1, 2, 3},
                          "consumer warpgroups per block, 64 query rows each (block_q = 64, 128 or 192); 3 with "
                          "pipelines 1-3 at hd 64 only"},
                         {"block_k", {64, 128}, "key rows per K/V tile (the n of Q K^T, the k of P V)"},
                         {"pipeline", {0, 1, 2, 3},
                          "0: every thread copies, block barriers, each product waited for; 1: warp-specialised "
                          "(two or three warpgroups); 2: 1 on one block per SM taking query tiles in turn, the "
                          "next tile's loads under this one's math; 3: 2 whose producer is one thread issuing TMA "
                          "boxes (problems without padding)"},
                         {"sections", {0, 1, 2, 3},
                          "pipelines 1-3: 0 takes every head's longest query tile first; s > 0 does so within "
                          "sections of heads whose K and V fit 1 / 2^s of the L2 (half, a quarter, an eighth), so "
                          "the blocks running together share K and V tiles in L2 instead of each reading its own "
                          "from DRAM"},
                         {"pingpong", {0, 1},
                          "pipelines 1-3: 1 has the consumer warpgroups take turns at issuing their products "
                          "(named barriers), so one's softmax runs while another's products do"}},
                        [](const Config& c) {
                          return (c.at("sections") == 0 && c.at("pingpong") == 0 && c.at("warpgroups") <= 2) ||
                                 c.at("pipeline") != 0;
                        },
                        "sections > 0, pingpong = 1 and warpgroups = 3 only with pipelines 1-3 (pipeline 0 has no "
                        "producer warpgroup; its grid already runs head by head)");
  w.default_config =
      Config({{"warpgroups", 2}, {"block_k", 128}, {"pipeline", 0}, {"sections", 0}, {"pingpong", 0}});
  w.supports = flash_wgmma_supports;
  w.launch = flash_wgmma;
  cat.add(w);

  Variant c;
  c.primitive = primitive;
  c.name = "cudnn_sdpa";
  c.description = "cuDNN's fused flash attention (graph API, SDPA forward); padded query rows zeroed after it";
  c.baseline = true;
  c.library = true;
  c.supports = [](const Problem& problem, const Config&, const DeviceLimits&) {
    if (problem.dtype != DType::f16 && problem.dtype != DType::bf16) return Support::no("cuDNN SDPA takes f16 or bf16");
    const AttentionProblem a = attention_of(problem);
    if (a.rounded) return Support::no(kNotRounded);
    // zero_invalid_rows has the batch rows as its grid's y. PyTorch routes nothing past 65535
    // batch rows or heads to cuDNN SDPA either (pytorch/pytorch#180718: a failure past them);
    // not measured here.
    if (a.batch > ka::kMaxGridYZ || a.heads > ka::kMaxGridYZ)
      return Support::no("B and H at most " + std::to_string(ka::kMaxGridYZ) +
                         " each (the padded rows' zeroing grid; PyTorch's limit for cuDNN SDPA)");
    return Support::yes();
  };
  c.launch = cudnn_sdpa;
  cat.add(c);
}

}  // namespace

void register_attention(Catalogue& cat) {
  for (const ka::Mask mask : {ka::Mask::causal, ka::Mask::full})
    for (const bool packed : {false, true})
      for (const bool padded : {false, true})
        for (const bool rounded : {false, true}) {
          Primitive p = attention_primitive(mask, packed, padded, rounded);
          const std::string name = p.name;
          cat.add(std::move(p));
          add_variants(cat, name, rounded);
        }
}

}  // namespace shapetune
