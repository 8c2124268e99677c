// Softmax cross-entropy for classification, forward and backward in one primitive: the primitive
// and its ladder of hand-written variants (kernels/softmax_xent.cu). cuDNN has no softmax
// cross-entropy, so the library-style reference point is `unfused`, the chain of separate
// kernels a framework runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "baselines/reference.hpp"
#include "kernels/softmax_xent.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kx = kernels::softmax_xent;

constexpr const char* kPrimitive = "softmax_xent";
// Static shared memory of the block-per-row kernels (their warps' partial statistics), with room
// to spare, beside the staged row.
constexpr std::int64_t kStaticSharedBytes = 1024;

struct RowsClasses {
  std::int64_t rows;
  int classes;
};
RowsClasses rows_classes(const Problem& p) { return {p.shape.at("rows"), static_cast<int>(p.shape.at("classes"))}; }

// The launch's tensors, typed, in TensorSpec order: logits, labels, loss, dlogits.
template <typename T>
struct XentTensors {
  const T* logits;
  const std::int32_t* labels;
  float* loss;
  T* dlogits;
};

template <typename T>
XentTensors<T> tensors_of(const LaunchArgs& a) {
  return {static_cast<const T*>(a.tensors[0]), static_cast<const std::int32_t*>(a.tensors[1]),
          static_cast<float*>(a.tensors[2]), static_cast<T*>(a.tensors[3])};
}

using WorkspaceBytes = std::function<std::size_t(const Problem&, const Config&)>;

// The row losses, which a second kernel averages.
std::size_t fused_workspace(const Problem& p, const Config&) { return kx::fused_workspace_bytes(p.shape.at("rows")); }

// Adapts `call(tensors, rows, classes, config, workspace, stream)` to the catalogue's launch
// signature. A smaller workspace than the variant asked for is refused: the kernels would write
// past it.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> xent_launch(WorkspaceBytes workspace_bytes, Call call) {
  return [workspace_bytes, call](const LaunchArgs& a) {
    const std::size_t needed = workspace_bytes ? workspace_bytes(a.problem, a.config) : 0;
    if (a.workspace_bytes < needed || (needed > 0 && a.workspace == nullptr))
      return LaunchStatus::failure("workspace of " + std::to_string(a.workspace_bytes) + " bytes; the variant needs " +
                                   std::to_string(needed));
    const auto [rows, classes] = rows_classes(a.problem);
    return with_storage_type(a.problem.dtype, "softmax_xent", [&](auto tag) {
      using T = decltype(tag);
      return launch_status(call(tensors_of<T>(a), rows, classes, a.config, a.workspace, a.stream));
    });
  };
}

int pack_elements(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

Support grid_fits(std::int64_t blocks) {
  return blocks <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

Support rows_per_block_fit(const Problem& p, std::int64_t rows_per_block) {
  return grid_fits((p.shape.at("rows") + rows_per_block - 1) / rows_per_block);
}

Primitive softmax_xent_primitive() {
  Primitive p;
  p.name = kPrimitive;
  p.description =
      "softmax cross-entropy against integer labels, forward and backward: the mean loss and "
      "d(loss)/d(logits), fp32 statistics";
  p.signature =
      "loss = mean_r (log sum_c exp(x[r,c]) - x[r,label[r]]); "
      "dlogits[r,c] = (softmax(x[r,:])[c] - [c == label[r]]) / rows";
  p.axes = {"rows", "classes"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), classes = problem.shape.at("classes");
    const auto high = static_cast<double>(classes);
    // Logits over [-8, 8): probabilities span 7 decades, so a wrong max or sum shows up.
    return std::vector<TensorSpec>{{"logits", problem.dtype, {rows, classes}, TensorRole::input, -8, 8},
                                   {"labels", DType::i32, {rows}, TensorRole::input, 0, high},
                                   {"loss", DType::f32, {1}, TensorRole::output},
                                   {"dlogits", problem.dtype, {rows, classes}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::softmax_xent(problem.shape.at("rows"), problem.shape.at("classes"), t[0].data(), t[1].data(),
                            t[2].data(), t[3].data());
  };
  p.cost = [](const Problem& problem) {
    const double rows = static_cast<double>(problem.shape.at("rows"));
    const double n = rows * static_cast<double>(problem.shape.at("classes"));
    // Logits read and dlogits written once each, labels read, the loss written.
    const double bytes = 2 * n * static_cast<double>(dtype_size(problem.dtype)) + 4 * rows + 4;
    // Per logit a max, a subtract, an exp, an add and a multiply (exp counted as one); per row
    // the log, the loss's add, the scale's division, the label's product and the mean's add.
    return Cost{bytes, 5 * n + 5 * rows};
  };
  p.tolerance = [](DType dtype) {
    // dlogits are ~1/(rows * classes) (1e-9 and below at vocabulary sizes), so rtol does the
    // work and atol is kept under any gradient a real problem produces. f32: the float
    // statistics and __expf give a few 1e-6 at 50000 classes. f16/bf16: rounding dlogits to
    // the storage type (half an ulp: 2^-11, 2^-8), twice over; f16 also needs atol for its
    // subnormals (spacing 2^-24 = 6e-8; smaller gradients cannot be stored). bf16 has f32's
    // exponent range. The f32 loss is far more precise than the 16-bit rtol asks.
    switch (dtype) {
      case DType::f16: return Tolerance{6e-8, 1e-3};
      case DType::bf16: return Tolerance{1e-30, 8e-3};
      default: return Tolerance{1e-30, 1e-5};
    }
  };
  p.default_variant = "fused_block_row";
  p.validate_shape = [](const Shape& shape) {
    // 32-bit class indices, with room for a loop's last step past the row's end.
    if (shape.at("classes") > (std::int64_t{1} << 30)) return Support::no("classes must be at most 2^30");
    // Far beyond any device's memory, and keeps rows * classes (and its bytes) inside int64.
    if (shape.at("rows") > (std::int64_t{1} << 48) / shape.at("classes"))
      return Support::no("rows * classes must be at most 2^48 elements");
    return Support::yes();
  };
  return p;
}

void add_unfused(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "unfused";
  v.baseline = true;  // the reference point the fused variants' speedups are measured against
  v.description =
      "library-style chain: softmax to an f32 workspace, then loss, gradient and mean kernels (4 launches)";
  v.workspace_bytes = [](const Problem& p, const Config&) {
    return kx::unfused_workspace_bytes(p.shape.at("rows"), p.shape.at("classes"));
  };
  v.supports = [workspace = v.workspace_bytes](const Problem& p, const Config& c, const DeviceLimits& limits) {
    const auto tensors = static_cast<std::int64_t>(2 * p.shape.elements() * dtype_size(p.dtype));
    if (static_cast<std::int64_t>(workspace(p, c)) + tensors > limits.global_memory_bytes)
      return Support::no("the f32 probabilities and the tensors exceed the device's memory");
    return rows_per_block_fit(p, kx::unfused_rows_per_block);
  };
  v.launch = xent_launch(v.workspace_bytes,
                         [](auto t, std::int64_t rows, int classes, const Config&, void* workspace, cudaStream_t s) {
                           return kx::unfused(t.logits, t.labels, t.loss, t.dlogits, rows, classes, workspace, s);
                         });
  cat.add(v);
}

void add_fused_row_variants(Catalogue& cat) {
  Variant v2;
  v2.primitive = kPrimitive;
  v2.name = "fused_warp_row";
  v2.description = "one warp per row: statistics with shuffles, then dlogits and the row loss in one more pass";
  v2.params = ParamSpace({{"warps_per_block", {1, 2, 4, 8, 16, 32}, "rows (warps) per block"}});
  v2.default_config = Config({{"warps_per_block", 4}});
  v2.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    return rows_per_block_fit(p, c.at("warps_per_block"));
  };
  v2.workspace_bytes = fused_workspace;
  v2.launch = xent_launch(v2.workspace_bytes,
                          [](auto t, std::int64_t rows, int classes, const Config& c, void* workspace, cudaStream_t s) {
                            return kx::fused_warp_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes,
                                                      cfg(c, "warps_per_block"), workspace, s);
                          });
  cat.add(v2);

  Variant v3;
  v3.primitive = kPrimitive;
  v3.name = "fused_block_row";
  v3.description =
      "one block per row: 16-byte loads/stores on the aligned body, warps merge statistics in shared memory";
  v3.params = ParamSpace({{"block_size", {64, 128, 256, 512, 1024}, "threads per block (per row)"}});
  v3.default_config = Config({{"block_size", 256}});
  v3.supports = [](const Problem& p, const Config&, const DeviceLimits&) { return grid_fits(p.shape.at("rows")); };
  v3.workspace_bytes = fused_workspace;
  v3.launch = xent_launch(v3.workspace_bytes,
                          [](auto t, std::int64_t rows, int classes, const Config& c, void* workspace, cudaStream_t s) {
                            return kx::fused_block_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes,
                                                       cfg(c, "block_size"), workspace, s);
                          });
  cat.add(v3);

  Variant v4 = v3;
  v4.name = "fused_smem_row";
  v4.description = "as fused_block_row, but the row is staged in shared memory: logits read from memory once";
  v4.supports = [](const Problem& p, const Config&, const DeviceLimits& limits) {
    const auto staged = static_cast<std::int64_t>(kx::staged_row_bytes(p.shape.at("classes"), dtype_size(p.dtype)));
    if (staged + kStaticSharedBytes > limits.shared_memory_per_block_optin)
      return Support::no("row of " + std::to_string(staged) + " bytes exceeds the shared memory of a block");
    return grid_fits(p.shape.at("rows"));
  };
  v4.launch = xent_launch(v4.workspace_bytes, [](auto t, std::int64_t rows, int classes, const Config& c,
                                                 void* workspace, cudaStream_t s) {
    return kx::fused_smem_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes, cfg(c, "block_size"), workspace, s);
  });
  cat.add(v4);
}

// The register variants hold the row body in `holders` (threads per row, times blocks per row
// for the cluster variant) x packs_per_thread packs.
Support register_capacity(const Problem& p, std::int64_t holders, std::int64_t per_thread) {
  const std::int64_t packs_needed = p.shape.at("classes") / pack_elements(p.dtype);  // worst-aligned row's body
  if (packs_needed > holders * per_thread)
    return Support::no("row needs " + std::to_string(packs_needed) + " packs; config holds " +
                       std::to_string(holders * per_thread));
  if (per_thread > 1 && packs_needed <= holders * (per_thread / 2))
    return Support::no("half the packs per thread would hold the row (this config only wastes registers)");
  return Support::yes();
}

void add_register_row(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "fused_register_row";
  v.description = "threads_per_row threads per row hold the row in registers: logits read from memory once";
  v.params = ParamSpace(
      {{"threads_per_row", {4, 8, 16, 32, 64, 128, 256, 512, 1024}, "threads cooperating on one row"},
       {"block_size", {128, 256, 512, 1024}, "threads per block"},
       {"packs_per_thread", {1, 2, 4, 8, 16}, "16-byte packs each thread keeps in registers"}},
      [](const Config& c) { return c.at("threads_per_row") <= c.at("block_size"); }, "threads_per_row <= block_size");
  v.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}, {"packs_per_thread", 4}});
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    if (Support s = register_capacity(p, c.at("threads_per_row"), c.at("packs_per_thread")); !s.ok) return s;
    return rows_per_block_fit(p, c.at("block_size") / c.at("threads_per_row"));
  };
  v.workspace_bytes = fused_workspace;
  v.launch = xent_launch(fused_workspace, [](auto t, std::int64_t rows, int classes, const Config& c, void* workspace,
                                cudaStream_t s) {
    return kx::fused_register_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes, cfg(c, "threads_per_row"),
                                  cfg(c, "block_size"), cfg(c, "packs_per_thread"), workspace, s);
  });
  cat.add(v);
}

void add_cluster_row(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "fused_cluster_row";
  v.description =
      "a row split over a thread-block cluster (sm_90), slices in registers, statistics merged through "
      "distributed shared memory: more, smaller blocks per SM for wide rows";
  v.params = ParamSpace({{"blocks_per_row", {2, 4, 8}, "blocks of a cluster sharing one row"},
                         {"block_size", {128, 256, 512, 1024}, "threads per block"},
                         {"packs_per_thread", {1, 2, 4, 8, 16}, "16-byte packs each thread keeps in registers"}});
  v.default_config = Config({{"blocks_per_row", 4}, {"block_size", 256}, {"packs_per_thread", 8}});
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    if (limits.compute_capability < 90) return Support::no("thread-block clusters need sm_90");
    const std::int64_t blocks = c.at("blocks_per_row");
    if (Support s = register_capacity(p, blocks * c.at("block_size"), c.at("packs_per_thread")); !s.ok) return s;
    // A slice per block of at least a pack per thread: narrower rows are fused_register_row's.
    const std::int64_t packs_needed = p.shape.at("classes") / pack_elements(p.dtype);
    if (packs_needed <= (blocks - 1) * c.at("block_size"))
      return Support::no("fewer blocks would hold the row (a block of the cluster would hold nothing)");
    return grid_fits(p.shape.at("rows") * blocks);
  };
  v.workspace_bytes = fused_workspace;
  v.launch = xent_launch(fused_workspace, [](auto t, std::int64_t rows, int classes, const Config& c, void* workspace,
                                cudaStream_t s) {
    return kx::fused_cluster_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes, cfg(c, "blocks_per_row"),
                                 cfg(c, "block_size"), cfg(c, "packs_per_thread"), workspace, s);
  });
  cat.add(v);
}

void add_ring_row(Catalogue& cat) {
  Variant v;
  v.primitive = kPrimitive;
  v.name = "fused_ring_row";
  v.description =
      "persistent blocks (sm_90): one thread streams row bodies into a shared-memory ring by bulk copies (TMA) "
      "while the other warps reduce and write rows from it (a block or one warp per row): logits read once, "
      "reads never wait for a reduction";
  v.params = ParamSpace(
      {{"consumer_warps", {4, 8, 16, 31}, "warps that reduce and write rows (plus 1 producer warp)"},
       {"chunk_bytes", {4096, 8192, 16384, 32768}, "bytes per ring slot (one bulk copy)"},
       {"blocks_per_sm", {1, 2, 3}, "resident blocks per SM, sharing its shared memory"},
       {"warp_per_row", {0, 1}, "1: each row one warp's alone, its body in one slot (narrow rows); 0: all warps"},
       {"claim_rows", {0, 1},
        "with warp_per_row 0: 1: blocks claim their next row from a counter (SMs that run faster take more rows); "
        "0: block b takes rows b, b + grid, ..."}});
  v.default_config = Config(
      {{"consumer_warps", 8}, {"chunk_bytes", 16384}, {"blocks_per_sm", 1}, {"warp_per_row", 0}, {"claim_rows", 1}});
  v.supports = [](const Problem& p, const Config& c, const DeviceLimits& limits) {
    if (limits.compute_capability < 90) return Support::no("bulk copies into an mbarrier ring need sm_90");
    // The launch reads the exact figures from the device; these are sm_90's (1 KiB reserved per block).
    constexpr std::int64_t kReserved = 1024;
    const std::int64_t chunk = c.at("chunk_bytes");
    const int slots = kx::ring_slots(chunk, static_cast<int>(c.at("blocks_per_sm")),
                                     limits.shared_memory_per_block_optin + kReserved,
                                     limits.shared_memory_per_block_optin, kReserved);
    const std::int64_t chunks = kx::ring_chunks_per_row(p.shape.at("classes"), dtype_size(p.dtype), chunk);
    if (c.at("warp_per_row") == 1) {
      if (c.at("claim_rows") == 1) return Support::no("a row per warp takes rows in a fixed order");
      if (chunks > 1) return Support::no("a row per warp needs the row's body in one slot; it takes " +
                                         std::to_string(chunks));
      // Slots twice the body only make the ring shallower (the smallest slot is always allowed).
      const std::int64_t body = kx::ring_chunks_per_row(p.shape.at("classes"), dtype_size(p.dtype), 16) * 16;
      if (chunk > 4096 && body <= chunk / 2) return Support::no("half the slot would hold the row");
      // Each slot one warp's: the ring uses a multiple of the consumer warps.
      if (slots < c.at("consumer_warps"))
        return Support::no("fewer slots (" + std::to_string(slots) + ") than consumer warps");
    }
    if (chunks > slots)
      return Support::no("a row takes " + std::to_string(chunks) + " slots; the ring holds " + std::to_string(slots));
    return Support::yes();
  };
  v.workspace_bytes = [](const Problem& p, const Config&) { return kx::ring_workspace_bytes(p.shape.at("rows")); };
  v.launch = xent_launch(v.workspace_bytes, [](auto t, std::int64_t rows, int classes, const Config& c,
                                               void* workspace, cudaStream_t s) {
    return kx::fused_ring_row(t.logits, t.labels, t.loss, t.dlogits, rows, classes, cfg(c, "consumer_warps"),
                              cfg(c, "chunk_bytes"), cfg(c, "blocks_per_sm"), cfg(c, "warp_per_row") == 1,
                              cfg(c, "claim_rows") == 1, workspace, s);
  });
  cat.add(v);
}

}  // namespace

void register_softmax_xent(Catalogue& cat) {
  cat.add(softmax_xent_primitive());
  add_unfused(cat);
  add_fused_row_variants(cat);
  add_register_row(cat);
  add_cluster_row(cat);
  add_ring_row(cat);
}

}  // namespace shapetune
