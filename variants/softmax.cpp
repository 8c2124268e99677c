// Row softmax: the primitive, its ladder of hand-written variants (kernels/softmax.cu) and
// the cuDNN baseline (baselines/cudnn_softmax.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "baselines/cudnn.hpp"
#include "baselines/reference.hpp"
#include "kernels/softmax.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ks = kernels::softmax;

struct RowsCols {
  std::int64_t rows;
  int cols;
};
RowsCols rows_cols(const Problem& p) { return {p.shape.at("rows"), static_cast<int>(p.shape.at("cols"))}; }

// Adapts a kernel wrapper taking (x, y, rows, cols, ...) to the catalogue's launch signature.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> softmax_launch(Call call) {
  return [call](const LaunchArgs& a) {
    const auto [rows, cols] = rows_cols(a.problem);
    return with_storage_type(a.problem.dtype, "softmax", [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(a.tensors[0]);
      T* y = static_cast<T*>(a.tensors[1]);
      return launch_status(call(x, y, rows, cols, a.config, a.stream));
    });
  };
}

Support grid_fits(std::int64_t blocks) {
  return blocks <= INT_MAX ? Support::yes() : Support::no("needs more than 2^31-1 blocks");
}

int pack_elements(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

Primitive softmax_primitive() {
  Primitive p;
  p.name = "softmax";
  p.description = "row softmax over a row-major [rows, cols] tensor, fp32 accumulation";
  p.signature = "y[r,c] = exp(x[r,c] - max_k x[r,k]) / sum_k exp(x[r,k] - max_k x[r,k])";
  p.axes = {"rows", "cols"};
  p.dtypes = {DType::f32, DType::f16, DType::bf16};
  p.tensors = [](const Problem& problem) {
    const auto rows = problem.shape.at("rows"), cols = problem.shape.at("cols");
    // Logits spread over [-8, 8): exp spans 7 decades, so a wrong max or sum shows up.
    return std::vector<TensorSpec>{{"x", problem.dtype, {rows, cols}, TensorRole::input, -8, 8},
                                   {"y", problem.dtype, {rows, cols}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    reference::softmax(problem.shape.at("rows"), problem.shape.at("cols"), t[0].data(), t[1].data());
  };
  p.cost = [](const Problem& problem) {
    const double n = static_cast<double>(problem.shape.elements());
    // One read and one write of every element; per element a max, a subtract, an exp, an
    // add and a multiply (exp counted as one operation).
    return Cost{2 * n * static_cast<double>(dtype_size(problem.dtype)), 5 * n};
  };
  p.tolerance = [](DType dtype) {
    // Output rounding dominates for 16-bit types (half an ulp: 2^-11 for f16, 2^-8 for bf16);
    // atol covers f16 subnormals and f32 flush-to-zero of tiny probabilities.
    switch (dtype) {
      case DType::f16: return Tolerance{1e-7, 1e-3};
      case DType::bf16: return Tolerance{1e-7, 8e-3};
      default: return Tolerance{1e-12, 1e-5};
    }
  };
  p.default_variant = "vec_online";
  p.validate_shape = [](const Shape& shape) {
    if (shape.at("cols") > INT_MAX) return Support::no("cols must fit in 32 bits");
    // Far beyond any device's memory, and keeps rows * cols (and its bytes) inside int64.
    if (shape.at("rows") > (std::int64_t{1} << 48) / shape.at("cols"))
      return Support::no("rows * cols must be at most 2^48 elements");
    return Support::yes();
  };
  return p;
}

const std::vector<std::int64_t> kBlockSizes = {64, 128, 256, 512, 1024};
const std::vector<std::int64_t> kGroupSizes = {4, 8, 16, 32, 64, 128, 256, 512, 1024};

ParamAxis block_size_axis(std::vector<std::int64_t> values) {
  return {"block_size", std::move(values), "threads per block"};
}

bool group_fits_block(const Config& c) { return c.at("threads_per_row") <= c.at("block_size"); }

void add_thread_per_row_variants(Catalogue& cat) {
  Variant v1;
  v1.primitive = "softmax";
  v1.name = "thread_row_3pass";
  v1.description = "one thread per row; max, sum and write as three passes (the plainest)";
  v1.params = ParamSpace({block_size_axis({64, 128, 256, 512})});
  v1.default_config = Config({{"block_size", 128}});
  v1.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    return grid_fits((p.shape.at("rows") + c.at("block_size") - 1) / c.at("block_size"));
  };
  v1.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::thread_row_3pass(x, y, rows, cols, static_cast<int>(c.at("block_size")), s);
  });
  cat.add(v1);

  Variant v2 = v1;
  v2.name = "thread_row_online";
  v2.description = "one thread per row; running max and sum in one pass, then the write pass";
  v2.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::thread_row_online(x, y, rows, cols, static_cast<int>(c.at("block_size")), s);
  });
  cat.add(v2);
}

void add_cooperative_variants(Catalogue& cat) {
  Variant v3;
  v3.primitive = "softmax";
  v3.name = "warp_row_online";
  v3.description = "one warp per row; coalesced loads, online statistics merged with shuffles";
  v3.params = ParamSpace({{"warps_per_block", {1, 2, 4, 8, 16}, "rows (warps) per block"}});
  v3.default_config = Config({{"warps_per_block", 4}});
  v3.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    return grid_fits((p.shape.at("rows") + c.at("warps_per_block") - 1) / c.at("warps_per_block"));
  };
  v3.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::warp_row_online(x, y, rows, cols, static_cast<int>(c.at("warps_per_block")), s);
  });
  cat.add(v3);

  Variant v4;
  v4.primitive = "softmax";
  v4.name = "block_row_online";
  v4.description = "one block per row; online statistics merged across warps in shared memory";
  v4.params = ParamSpace({block_size_axis(kBlockSizes)});
  v4.default_config = Config({{"block_size", 256}});
  v4.supports = [](const Problem& p, const Config&, const DeviceLimits&) { return grid_fits(p.shape.at("rows")); };
  v4.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::block_row_online(x, y, rows, cols, static_cast<int>(c.at("block_size")), s);
  });
  cat.add(v4);
}

void add_vectorized_variants(Catalogue& cat) {
  const ParamAxis group_axis{"threads_per_row", kGroupSizes, "threads cooperating on one row"};
  const ParamAxis block_axis = block_size_axis({128, 256, 512, 1024});

  Variant v5;
  v5.primitive = "softmax";
  v5.name = "vec_online";
  v5.description = "threads_per_row threads per row; 16-byte loads/stores on the aligned body, scalar head and tail";
  v5.params = ParamSpace({group_axis, block_axis}, group_fits_block, "threads_per_row <= block_size");
  v5.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}});
  v5.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    const auto rows_per_block = c.at("block_size") / c.at("threads_per_row");
    return grid_fits((p.shape.at("rows") + rows_per_block - 1) / rows_per_block);
  };
  v5.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::vec_online(x, y, rows, cols, static_cast<int>(c.at("threads_per_row")),
                          static_cast<int>(c.at("block_size")), s);
  });
  cat.add(v5);

  Variant v6;
  v6.primitive = "softmax";
  v6.name = "register_row";
  v6.description = "as vec_online, but the row is held in registers: one read of memory instead of two";
  v6.params = ParamSpace({{"threads_per_row", {16, 32, 64, 128, 256, 512, 1024}, "threads cooperating on one row"},
                          block_axis,
                          {"packs_per_thread", {1, 2, 4, 8, 16}, "16-byte packs each thread keeps in registers"}},
                         group_fits_block, "threads_per_row <= block_size");
  v6.default_config = Config({{"threads_per_row", 32}, {"block_size", 256}, {"packs_per_thread", 4}});
  v6.supports = [](const Problem& p, const Config& c, const DeviceLimits&) {
    const std::int64_t cols = p.shape.at("cols"), pack = pack_elements(p.dtype);
    const std::int64_t group = c.at("threads_per_row"), per_thread = c.at("packs_per_thread");
    // Body packs of the worst-aligned row: everything but up to two partial packs of edges.
    const std::int64_t packs_needed = cols / pack;
    if (packs_needed > group * per_thread)
      return Support::no("row needs " + std::to_string(packs_needed) + " packs; config holds " +
                         std::to_string(group * per_thread));
    if (per_thread > 1 && packs_needed <= group * (per_thread / 2))
      return Support::no("half the packs per thread would hold the row (this config only wastes registers)");
    const auto rows_per_block = c.at("block_size") / group;
    return grid_fits((p.shape.at("rows") + rows_per_block - 1) / rows_per_block);
  };
  v6.launch = softmax_launch([](auto x, auto y, std::int64_t rows, int cols, const Config& c, cudaStream_t s) {
    return ks::register_row(x, y, rows, cols, static_cast<int>(c.at("threads_per_row")),
                            static_cast<int>(c.at("block_size")), static_cast<int>(c.at("packs_per_thread")), s);
  });
  cat.add(v6);
}

void add_cudnn_baseline(Catalogue& cat) {
  Variant v;
  v.primitive = "softmax";
  v.name = "cudnn";
  v.description = "cudnnSoftmaxForward, accurate algorithm, per-row (instance) mode";
  v.baseline = true;
  v.library = true;
  v.supports = [](const Problem& p, const Config&, const DeviceLimits&) {
    return p.shape.at("rows") <= INT_MAX ? Support::yes() : Support::no("cuDNN extents are 32-bit");
  };
  v.launch = [](const LaunchArgs& a) {
    const auto [rows, cols] = rows_cols(a.problem);
    return library_status(
        cudnn_softmax_forward(a.libraries, a.stream, a.problem.dtype, rows, cols, a.tensors[0], a.tensors[1]));
  };
  cat.add(v);
}

}  // namespace

void register_softmax(Catalogue& cat) {
  cat.add(softmax_primitive());
  add_thread_per_row_variants(cat);
  add_cooperative_variants(cat);
  add_vectorized_variants(cat);
  add_cudnn_baseline(cat);
}

}  // namespace shapetune
