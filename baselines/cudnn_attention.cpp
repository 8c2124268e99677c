// Scaled dot-product attention forward through cuDNN's graph API: the decomposed attention graph
// that cuDNN 9's runtime fusion engine recognises as fused flash attention fprop ("SDPA forward"),
// built node for node the way cudnn_frontend's composite SDPA node lowers it for a 9.14 backend
// (read there, not copied), inference only. Building it takes a fraction of a second and
// allocates, so it happens once per problem (PlanKey) and is kept with its workspace in the
// LibraryHandles; later calls only fill a variant pack and execute, which is safe inside a capture.
//
// Tensors. Q, V, O are [B, H, S, D] with the caller's strides (elements; D contiguous). The
// backend's first matmul takes K already transposed: K^T is [B, H, D, S] over K's memory, its
// strides those of K with the last two swapped. All four are in the data type (f16 or bf16) and
// promised `alignment` bytes (the largest power of two up to 16 dividing every pointer; cuDNN
// refuses what its kernels cannot do). Intermediates are virtual tensors with packed strides:
// scores [B, H, S, S] in f32, row statistics [B, H, S, 1] ({H S, S, 1, 1}) in f32, indices in int32,
// masks in boolean, and P, the softmax that feeds the second matmul, in the data type (the
// engine takes bmm2's A operand in the I/O type). Scalars are by-value [1, 1, 1, 1] f32 tensors
// whose host addresses go in the variant pack. seq_len_q and seq_len_kv are int32 [B, 1, 1, 1]
// (strides 1) in device memory, two tensors with two ids over the same `lengths` pointer.
// Every matmul, reduction and pointwise computes in f32 unless said otherwise.
//
// Nodes, in graph order (x, b, t: a pointwise's inputs; y its output):
//   1. MATMUL bmm1: S = Q K^T (f32). With lengths: GEMM_M_OVERRIDE = seq_len_q,
//      GEMM_N_OVERRIDE = seq_len_kv and the matmul's PADDING_VALUE 0, so rows and columns past
//      the lengths are neither read nor computed (the frontend's padding form).
//   2. POINTWISE MUL: S' = S * scale (a by-value scalar, read at each execution; the plan key
//      holds the scale as well, so a new scale builds a new plan).
//   With lengths (padding mask, frontend's padding_mask):
//   3. POINTWISE GEN_INDEX axis 2 (math int32) -> row (int32)
//   4. POINTWISE GEN_INDEX axis 3 (math int32) -> col (int32)
//   5. POINTWISE CMP_LT (math boolean): row < seq_len_q -> boolean
//   6. POINTWISE CMP_LT (math boolean): col < seq_len_kv -> boolean
//   7. POINTWISE LOGICAL_AND (math boolean) -> keep
//   8. POINTWISE BINARY_SELECT: y = keep ? S' : -inf (by value) -> S'
//   With causal (frontend's top-left diagonal band with right bound 0; cuDNN 9.14 has no
//   DIAGONAL_BAND_MASK operation, which came in 9.21, so it is spelt out as pointwise nodes):
//   9. POINTWISE GEN_INDEX axis 2 (math f32, as the frontend leaves it) -> row (int32)
//  10. POINTWISE GEN_INDEX axis 3 (math f32) -> col (int32)
//  11. POINTWISE CMP_GE (math boolean): row >= col -> keep (key j <= query i)
//  12. POINTWISE BINARY_SELECT: y = keep ? S' : -inf (its own by-value tensor) -> S'
//   Softmax (the frontend's composite softmax; the engine matches this whole chain):
//  13. REDUCTION MAX over the last axis -> M [B, H, S, 1]
//  14. POINTWISE SUB: S' - M (broadcast over the last axis)
//  15. POINTWISE EXP
//  16. REDUCTION ADD over the last axis -> Z [B, H, S, 1]
//  17. POINTWISE LOG: log Z
//  18. POINTWISE ADD: M + log Z -> stats, a virtual [B, H, S, 1] f32 tensor. Inference needs no
//      statistics, but the frontend always builds this branch (as a virtual output when none is
//      asked for), so the graph has the shape the engine was written against; being virtual it
//      takes no memory.
//  19. POINTWISE DIV: exp / Z -> P (data type)
//  20. MATMUL bmm2: O = P V (f32 compute). With lengths: GEMM_M_OVERRIDE = seq_len_q,
//      GEMM_K_OVERRIDE = seq_len_kv (no padding value, as in the frontend).
// -inf is -infinity (the frontend's choice from cuDNN 9.10 on; older ones took the lowest float).
//
// Engines: heuristics mode A's configs, the first whose execution plan finalizes. When none does
// and each refusal is NOT_SUPPORTED, the call is `not_supported` with every config's status text.
#include <cudnn.h>

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>

#include "baselines/cudnn.hpp"
#include "baselines/cudnn_graph.hpp"
#include "baselines/library_handles.hpp"

namespace shapetune {
namespace {

using namespace cudnn_graph;

// The variant pack names tensors by these ids; virtual tensors are numbered from kFirstVirtual.
enum TensorId : std::int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kScale,
  kSeqLenQ,
  kSeqLenKv,
  kPaddingFill,
  kCausalFill,
  kFirstVirtual = 100,
};

struct PlanKey {
  DType dtype;
  std::int64_t batch, heads, seq, head_dim;
  std::array<Extents, 4> strides;  // Q, K, V, O as the caller gave them
  bool causal;
  bool has_lengths;
  std::uint32_t scale_bits;           // the scale's bits: a total order, NaN included
  std::int64_t alignment;             // bytes that every one of Q, K, V, O has
  std::int64_t lengths_alignment;     // bytes that `lengths` has; 0 without lengths
  auto operator<=>(const PlanKey&) const = default;
};

std::string plan_text(const PlanKey& key) {
  return "SDPA plan for " + std::string(dtype_name(key.dtype)) + " B=" + std::to_string(key.batch) +
         " H=" + std::to_string(key.heads) + " S=" + std::to_string(key.seq) + " D=" + std::to_string(key.head_dim) +
         (key.causal ? " causal" : "") + (key.has_lengths ? " with lengths" : "");
}

// Packed strides of a 4-d tensor (the last dimension contiguous).
Extents packed_strides(const Extents& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

// Adds tensors and operations to an OperationGraph and lists the operations in order.
class GraphBuilder {
 public:
  explicit GraphBuilder(OperationGraph& out) : out_(out) {}

  const Descriptor& memory(const std::string& name, TensorId id, cudnnDataType_t type, const Extents& dims,
                           const Extents& strides, std::int64_t alignment) {
    return out_.parts.emplace_back(tensor_descriptor(name, id, type, dims, strides, alignment));
  }

  // An f32 scalar whose host address goes in the variant pack.
  const Descriptor& scalar(const std::string& name, TensorId id) {
    const Extents ones{1, 1, 1, 1};
    return out_.parts.emplace_back(tensor_descriptor(name, id, CUDNN_DATA_FLOAT, ones, ones, 16, TensorKind::by_value));
  }

  const Descriptor& intermediate(const std::string& name, cudnnDataType_t type, const Extents& dims) {
    return out_.parts.emplace_back(
        tensor_descriptor(name, next_virtual_++, type, dims, packed_strides(dims), 16, TensorKind::virtual_));
  }

  // y = mode(x[, b][, t]); `axis` only for GEN_INDEX.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math, const Descriptor& x,
                 const Descriptor* b, const Descriptor* t, const Descriptor& y, std::int64_t axis = -1) {
    Descriptor& pw = out_.parts.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name + " pointwise");
    pw.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, mode);
    pw.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, axis);
    pw.finalize();

    Descriptor& op = out_.parts.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name + " operation");
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), pw);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), x);
    if (b) op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), *b);
    if (t) op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), *t);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), y);
    // The blend factors are cuDNN's defaults; set as the frontend sets them.
    const float one = 1.0F;
    op.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, one);
    op.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, one);
    op.finalize();
    operations_.push_back(&op);
  }

  // y = reduce(x) over the dimensions where y is 1, in f32.
  void reduction(const std::string& name, cudnnReduceTensorOp_t reduce, const Descriptor& x, const Descriptor& y) {
    Descriptor& desc = out_.parts.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name + " reduction");
    desc.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, reduce);
    desc.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    desc.finalize();

    Descriptor& op = out_.parts.emplace_back(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name + " operation");
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), x);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), y);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_REDUCTION_DESC), desc);
    op.finalize();
    operations_.push_back(&op);
  }

  // c = a b per batch and head, in f32; the overrides (device int32 per batch) bound M, N, K.
  struct MatmulOverrides {
    const Descriptor* m = nullptr;
    const Descriptor* n = nullptr;
    const Descriptor* k = nullptr;
    bool pad_with_zero = false;  // the matmul descriptor's PADDING_VALUE = 0 past the overrides
  };
  void matmul(const std::string& name, const Descriptor& a, const Descriptor& b, const Descriptor& c,
              const MatmulOverrides& overrides) {
    Descriptor& desc = out_.parts.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR, name + " matmul");
    desc.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    if (overrides.pad_with_zero) {
      const double zero = 0.0;
      desc.set_value(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_MATMUL_PADDING_VALUE), CUDNN_TYPE_DOUBLE, zero);
    }
    desc.finalize();

    Descriptor& op = out_.parts.emplace_back(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name + " operation");
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_ADESC), a);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_BDESC), b);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_CDESC), c);
    op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_DESC), desc);
    if (overrides.m) op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC), *overrides.m);
    if (overrides.n) op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC), *overrides.n);
    if (overrides.k) op.set_descriptor(SHAPETUNE_ATTRIBUTE(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC), *overrides.k);
    op.finalize();
    operations_.push_back(&op);
  }

  void finish(cudnnHandle_t handle) { finalize_graph(out_, handle, operations_); }

 private:
  OperationGraph& out_;
  std::vector<const Descriptor*> operations_;
  std::int64_t next_virtual_ = kFirstVirtual;
};

OperationGraph sdpa_graph(cudnnHandle_t handle, const PlanKey& key) {
  const cudnnDataType_t io = cudnn_type(key.dtype);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const std::int64_t b = key.batch, h = key.heads, s = key.seq, d = key.head_dim;
  const Extents& q_strides = key.strides[0];
  const Extents& k_strides = key.strides[1];
  const Extents scores{b, h, s, s};
  const Extents rows{b, h, s, 1};

  OperationGraph out;
  GraphBuilder g(out);
  const Descriptor& q = g.memory("Q", kQ, io, {b, h, s, d}, q_strides, key.alignment);
  const Descriptor& k_t =
      g.memory("K^T", kK, io, {b, h, d, s}, {k_strides[0], k_strides[1], k_strides[3], k_strides[2]}, key.alignment);
  const Descriptor& v = g.memory("V", kV, io, {b, h, s, d}, key.strides[2], key.alignment);
  const Descriptor& o = g.memory("O", kO, io, {b, h, s, d}, key.strides[3], key.alignment);
  const Descriptor* seq_len_q = nullptr;
  const Descriptor* seq_len_kv = nullptr;
  if (key.has_lengths) {
    const Extents lengths{b, 1, 1, 1};
    const Extents ones{1, 1, 1, 1};
    seq_len_q = &g.memory("seq_len_q", kSeqLenQ, CUDNN_DATA_INT32, lengths, ones, key.lengths_alignment);
    seq_len_kv = &g.memory("seq_len_kv", kSeqLenKv, CUDNN_DATA_INT32, lengths, ones, key.lengths_alignment);
  }

  // 1-2. S = Q K^T * scale.
  const Descriptor& raw_scores = g.intermediate("S = Q K^T", f32, scores);
  g.matmul("bmm1 (Q K^T)", q, k_t, raw_scores, {seq_len_q, seq_len_kv, nullptr, key.has_lengths});
  const Descriptor& scale = g.scalar("attention scale", kScale);
  const Descriptor* last = &g.intermediate("S * scale", f32, scores);
  g.pointwise("attention scale", CUDNN_POINTWISE_MUL, f32, raw_scores, &scale, nullptr, *last);

  // 3-8. Padding mask: keep (i, j) where i < seq_len_q and j < seq_len_kv.
  if (key.has_lengths) {
    const Descriptor& row = g.intermediate("padding row index", CUDNN_DATA_INT32, scores);
    g.pointwise("padding row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, *last, nullptr, nullptr, row, 2);
    const Descriptor& col = g.intermediate("padding column index", CUDNN_DATA_INT32, scores);
    g.pointwise("padding column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, *last, nullptr, nullptr, col, 3);
    const Descriptor& row_in = g.intermediate("row < seq_len_q", CUDNN_DATA_BOOLEAN, scores);
    g.pointwise("row < seq_len_q", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, seq_len_q, nullptr, row_in);
    const Descriptor& col_in = g.intermediate("column < seq_len_kv", CUDNN_DATA_BOOLEAN, scores);
    g.pointwise("column < seq_len_kv", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, seq_len_kv, nullptr, col_in);
    const Descriptor& keep = g.intermediate("padding keep", CUDNN_DATA_BOOLEAN, scores);
    g.pointwise("padding keep", CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, row_in, &col_in, nullptr, keep);
    const Descriptor& fill = g.scalar("padding fill (-inf)", kPaddingFill);
    const Descriptor& masked = g.intermediate("padding-masked scores", f32, scores);
    g.pointwise("padding select", CUDNN_POINTWISE_BINARY_SELECT, f32, *last, &fill, &keep, masked);
    last = &masked;
  }

  // 9-12. Causal mask: keep (i, j) where i >= j.
  if (key.causal) {
    const Descriptor& row = g.intermediate("causal row index", CUDNN_DATA_INT32, scores);
    g.pointwise("causal row index", CUDNN_POINTWISE_GEN_INDEX, f32, *last, nullptr, nullptr, row, 2);
    const Descriptor& col = g.intermediate("causal column index", CUDNN_DATA_INT32, scores);
    g.pointwise("causal column index", CUDNN_POINTWISE_GEN_INDEX, f32, *last, nullptr, nullptr, col, 3);
    const Descriptor& keep = g.intermediate("row >= column", CUDNN_DATA_BOOLEAN, scores);
    g.pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, &col, nullptr, keep);
    const Descriptor& fill = g.scalar("causal fill (-inf)", kCausalFill);
    const Descriptor& masked = g.intermediate("causal-masked scores", f32, scores);
    g.pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, f32, *last, &fill, &keep, masked);
    last = &masked;
  }

  // 13-19. Softmax over keys, with the (virtual) log-sum-exp statistics.
  const Descriptor& row_max = g.intermediate("row max", f32, rows);
  g.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, *last, row_max);
  const Descriptor& centered = g.intermediate("S - max", f32, scores);
  g.pointwise("subtract row max", CUDNN_POINTWISE_SUB, f32, *last, &row_max, nullptr, centered);
  const Descriptor& exps = g.intermediate("exp(S - max)", f32, scores);
  g.pointwise("exp", CUDNN_POINTWISE_EXP, f32, centered, nullptr, nullptr, exps);
  const Descriptor& row_sum = g.intermediate("row sum", f32, rows);
  g.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  const Descriptor& log_sum = g.intermediate("log(row sum)", f32, rows);
  g.pointwise("log of row sum", CUDNN_POINTWISE_LOG, f32, row_sum, nullptr, nullptr, log_sum);
  const Descriptor& stats = g.intermediate("softmax stats", f32, rows);
  g.pointwise("softmax stats", CUDNN_POINTWISE_ADD, f32, row_max, &log_sum, nullptr, stats);
  const Descriptor& p = g.intermediate("P = softmax", io, scores);
  g.pointwise("normalize", CUDNN_POINTWISE_DIV, f32, exps, &row_sum, nullptr, p);

  // 20. O = P V.
  g.matmul("bmm2 (P V)", p, v, o, {seq_len_q, nullptr, seq_len_kv, false});

  g.finish(handle);
  return out;
}

// ---------------------------------------------------------------------------------------------
// A built plan and what it needs at every call.

class SdpaPlan {
 public:
  SdpaPlan(cudnnHandle_t handle, const PlanKey& key)
      : has_lengths_(key.has_lengths),
        causal_(key.causal),
        graph_(sdpa_graph(handle, key)),
        plan_(first_plan_that_finalizes(handle, *graph_.graph, plan_text(key))),
        workspace_(workspace_size(plan_), "cuDNN workspace") {}

  void execute(cudnnHandle_t handle, const CudnnSdpaForward& call) const {
    // By-value scalars go by host address, as aligned as their tensors say (16 bytes).
    alignas(16) float scale = call.scale;
    alignas(16) float padding_fill = -std::numeric_limits<float>::infinity();
    alignas(16) float causal_fill = -std::numeric_limits<float>::infinity();
    std::array<std::int64_t, 9> ids{};
    std::array<void*, 9> pointers{};
    std::size_t n = 0;
    const auto add = [&](TensorId id, const void* pointer) {
      ids[n] = id;
      pointers[n] = const_cast<void*>(pointer);
      ++n;
    };
    add(kQ, call.q);
    add(kK, call.k);
    add(kV, call.v);
    add(kO, call.o);
    add(kScale, &scale);
    if (has_lengths_) {
      add(kSeqLenQ, call.lengths);
      add(kSeqLenKv, call.lengths);
      add(kPaddingFill, &padding_fill);
    }
    if (causal_) add(kCausalFill, &causal_fill);
    execute_plan(handle, plan_, std::span(ids).first(n), std::span(pointers).first(n), workspace_.get());
  }

 private:
  bool has_lengths_;
  bool causal_;
  OperationGraph graph_;  // the plan was finalized from these: they go last
  Descriptor plan_;
  DeviceMemory workspace_;
};

}  // namespace

LibraryCallResult cudnn_sdpa_forward(LibraryHandles& libraries, cudaStream_t stream, const CudnnSdpaForward& call) {
  if (call.dtype != DType::f16 && call.dtype != DType::bf16)
    return {false, true, "cuDNN SDPA takes f16 or bf16, not " + std::string(dtype_name(call.dtype))};
  if (call.batch < 1 || call.heads < 1 || call.seq < 1 || call.head_dim < 1)
    return {false, false, "SDPA needs batch, heads, seq and head_dim >= 1"};
  if (call.head_dim % 8 != 0 || call.head_dim > 256)
    return {false, true,
            "cuDNN SDPA takes head_dim a multiple of 8 up to 256, not " + std::to_string(call.head_dim)};
  if (call.q_strides[3] != 1 || call.k_strides[3] != 1 || call.v_strides[3] != 1 || call.o_strides[3] != 1)
    return {false, true, "cuDNN SDPA needs head_dim contiguous (stride 1) in Q, K, V and O"};
  if (!call.q || !call.k || !call.v || !call.o) return {false, false, "SDPA needs Q, K, V and O pointers"};
  try {
    const cudnnHandle_t handle = libraries.cudnn(stream);
    PlanKey key{};
    key.dtype = call.dtype;
    key.batch = call.batch;
    key.heads = call.heads;
    key.seq = call.seq;
    key.head_dim = call.head_dim;
    const std::int64_t* strides[4] = {call.q_strides, call.k_strides, call.v_strides, call.o_strides};
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < 4; ++i) key.strides[t][i] = strides[t][i];
    key.causal = call.causal;
    key.has_lengths = call.lengths != nullptr;
    key.scale_bits = std::bit_cast<std::uint32_t>(call.scale);
    key.alignment = common_alignment({call.q, call.k, call.v, call.o});
    key.lengths_alignment = key.has_lengths ? common_alignment({call.lengths}) : 0;
    const auto& entry = plan_for<SdpaPlan>(libraries, "cudnn_sdpa_forward", handle, stream, key, plan_text);
    if (!entry.plan) return entry.refusal;
    entry.plan->execute(handle, call);
    return {};
  } catch (const Failure& f) {
    return f.result;
  } catch (const LibraryError& e) {
    return {false, false, e.what()};
  }
}

}  // namespace shapetune
