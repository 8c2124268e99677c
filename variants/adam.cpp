// The AdamW optimizer step: the primitive and its ladder of hand-written variants
// (kernels/adam.cu). No library baseline: neither cuDNN nor cuBLAS has an optimizer step.
#include <string>

#include "baselines/reference.hpp"
#include "kernels/adam.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace ka = kernels::adam;

std::vector<std::int64_t> tensor_sizes_of(const Problem& p) {
  return ka::tensor_sizes(p.shape.at("n"), p.shape.at("tensors"));
}

// The primitive's scalars, in the order Primitive::scalars lists them.
ka::Hyperparameters hyperparameters_of(std::span<const double> s) { return {s[0], s[1], s[2], s[3], s[4], s[5]}; }

const std::vector<ScalarParam> kScalars = {
    {"lr", 1e-3, "learning rate"},
    {"beta1", 0.9, "decay of the first moment m"},
    {"beta2", 0.999, "decay of the second moment v"},
    {"eps", 1e-8, "added to sqrt(v_hat) in the denominator"},
    {"weight_decay", 0.01, "decoupled weight decay (AdamW); 0 is plain Adam"},
    {"step", 10, "t >= 1, the bias-correction exponent (the step being taken)"},
};

// Adapts a kernel wrapper taking (buffers, sizes, hyperparameters, config, stream) to the
// catalogue's launch signature.
template <typename Call>
std::function<LaunchStatus(const LaunchArgs&)> adam_launch(Call call) {
  return [call](const LaunchArgs& a) {
    if (a.scalars.size() != kScalars.size())
      return LaunchStatus::failure("adam takes " + std::to_string(kScalars.size()) +
                                   " scalars (lr, beta1, beta2, eps, weight_decay, step); got " +
                                   std::to_string(a.scalars.size()));
    const ka::Hyperparameters h = hyperparameters_of(a.scalars);
    if (const char* why = ka::invalid_reason(h)) return LaunchStatus::failure(std::string("adam: ") + why);
    const ka::Buffers buffers{static_cast<float*>(a.tensors[0]), static_cast<const float*>(a.tensors[1]),
                              static_cast<float*>(a.tensors[2]), static_cast<float*>(a.tensors[3])};
    return launch_status(call(buffers, tensor_sizes_of(a.problem), h, a.config, a.stream));
  };
}

Primitive adam_primitive() {
  Primitive p;
  p.name = "adam";
  p.description =
      "AdamW step, in place, over n parameters forming `tensors` consecutive tensors (weights and biases); f32 only: "
      "fp16 moments underflow (v ~ g^2) and bf16 parameters need fp32 master weights, a different primitive";
  p.signature =
      "m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p = p - lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay p)";
  p.axes = {"n", "tensors"};
  p.dtypes = {DType::f32};
  p.tensors = [](const Problem& problem) {
    const std::int64_t n = problem.shape.at("n");
    // v >= 0 as a second moment must be; m and v of the size a few steps of gradients in
    // [-1, 1) leave, so the update is ~lr and the bias correction matters.
    return std::vector<TensorSpec>{{"p", DType::f32, {n}, TensorRole::inout, -1, 1},
                                   {"g", DType::f32, {n}, TensorRole::input, -1, 1},
                                   {"m", DType::f32, {n}, TensorRole::inout, -0.1, 0.1},
                                   {"v", DType::f32, {n}, TensorRole::inout, 0, 0.01}};
  };
  p.scalars = kScalars;
  p.reference = [](const Problem& problem, std::span<const double> s, HostTensors& t) {
    const std::vector<std::int64_t> sizes = tensor_sizes_of(problem);
    const reference::AdamHyperparameters h{s[0], s[1], s[2], s[3], s[4], s[5]};
    reference::adam(sizes.data(), static_cast<std::int64_t>(sizes.size()), h, t[0].data(), t[1].data(), t[2].data(),
                    t[3].data());
  };
  p.cost = [](const Problem& problem) {
    const double n = static_cast<double>(problem.shape.at("n"));
    // Reads p, g, m, v and writes p, m, v: 7 accesses of 4 bytes. Per parameter: m 3 (two
    // multiplies, an add), v 4, the two bias corrections 2, sqrt + eps + divide 3, decay, its
    // add, lr and the subtraction 4 (sqrt and divide counted as one operation each).
    return Cost{7 * 4 * n, 16 * n};
  };
  p.tolerance = [](DType) {
    // One float step: p (~1) is rounded once against an update ~lr, so its error is half an
    // ulp (6e-8 relative) plus the update's own (about ten roundings through m, v, sqrt and the
    // divide: ~6e-7 of ~1e-3). atol covers m and p where they cancel to near zero (m: rounding
    // of the 0.1 (g - m) term, ~1e-8). A host emulation of the kernels' float operations over
    // 20M elements of these ranges (steps 1 and 10, with and without decay) used at most 11% of it.
    return Tolerance{1e-7, 1e-6};
  };
  p.default_variant = "multi_tensor";
  p.validate_shape = [](const Shape& shape) {
    const std::int64_t n = shape.at("n"), tensors = shape.at("tensors");
    if (tensors < 1) return Support::no("tensors must be >= 1");
    if (tensors > n) return Support::no("tensors must be <= n: every tensor holds at least one parameter");
    if (tensors > ka::kMaxTensors) return Support::no("tensors must be at most " + std::to_string(ka::kMaxTensors));
    // Far beyond any device's memory, and keeps the bytes of the four buffers inside int64.
    if (n > (std::int64_t{1} << 48)) return Support::no("n must be at most 2^48");
    return Support::yes();
  };
  return p;
}

const ParamAxis kBlockSizeAxis{"block_size", {128, 256, 512, 1024}, "threads per block"};

// Every variant runs any problem the primitive accepts: grid-stride loops, any tensor size.
Support any_problem(const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); }

void add_per_tensor_variants(Catalogue& cat) {
  Variant v1;
  v1.primitive = "adam";
  v1.name = "scalar";
  v1.description = "one launch per tensor, one element per thread, grid-stride (the plainest)";
  v1.params = ParamSpace({kBlockSizeAxis});
  v1.default_config = Config({{"block_size", 256}});
  v1.supports = any_problem;
  v1.launch = adam_launch([](const ka::Buffers& b, const std::vector<std::int64_t>& sizes,
                             const ka::Hyperparameters& h, const Config& c, cudaStream_t s) {
    return ka::scalar(b, sizes, h, static_cast<int>(c.at("block_size")), s);
  });
  cat.add(v1);

  Variant v2;
  v2.primitive = "adam";
  v2.name = "vec4";
  v2.description = "one launch per tensor; float4 loads/stores on each tensor's aligned body, scalar head and tail";
  v2.params = ParamSpace(
      {kBlockSizeAxis, {"packs_per_thread", {1, 2, 4, 8}, "16-byte packs of each buffer a thread loads before using"}});
  v2.default_config = Config({{"block_size", 256}, {"packs_per_thread", 4}});
  v2.supports = any_problem;
  v2.launch = adam_launch([](const ka::Buffers& b, const std::vector<std::int64_t>& sizes,
                             const ka::Hyperparameters& h, const Config& c, cudaStream_t s) {
    return ka::vec4(b, sizes, h, static_cast<int>(c.at("block_size")), static_cast<int>(c.at("packs_per_thread")), s);
  });
  cat.add(v2);
}

void add_multi_tensor_variant(Catalogue& cat) {
  Variant v3;
  v3.primitive = "adam";
  v3.name = "multi_tensor";
  v3.description =
      "one launch for many tensors: their aligned bodies' float4 packs numbered as one range, each pack's tensor "
      "found by binary search in a table passed by value; scalar heads and tails one per thread";
  v3.params = ParamSpace(
      {kBlockSizeAxis,
       {"packs_per_thread", {1, 2, 4}, "16-byte packs of each buffer a thread loads before using (sets registers)"}});
  v3.default_config = Config({{"block_size", 256}, {"packs_per_thread", 2}});
  v3.supports = any_problem;
  v3.launch = adam_launch([](const ka::Buffers& b, const std::vector<std::int64_t>& sizes,
                             const ka::Hyperparameters& h, const Config& c, cudaStream_t s) {
    return ka::multi_tensor(b, sizes, h, static_cast<int>(c.at("block_size")),
                            static_cast<int>(c.at("packs_per_thread")), s);
  });
  cat.add(v3);
}

}  // namespace

void register_adam(Catalogue& cat) {
  cat.add(adam_primitive());
  add_per_tensor_variants(cat);
  add_multi_tensor_variant(cat);
}

}  // namespace shapetune
