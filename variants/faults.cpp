// fault_injection: a copy y = x whose variants fail on purpose, one way each, so that tests can
// prove a sweep survives them (tests/gpu/test_fault_isolation.cpp). Registered only when the
// environment has SHAPETUNE_FAULT_VARIANTS=1: never in a user's catalogue by accident.
#include <cstdlib>

#include "kernels/faults.cuh"
#include "variants/catalogue.hpp"
#include "variants/launch_helpers.hpp"

namespace shapetune {
namespace {

namespace kf = kernels::faults;

Primitive copy_primitive() {
  Primitive p;
  p.name = "fault_injection";
  p.description = "test only: y = x, with variants that fault, trap, hang or abort on purpose";
  p.signature = "y[i] = x[i]";
  p.axes = {"n"};
  p.dtypes = {DType::f32};
  p.tensors = [](const Problem& problem) {
    const auto n = problem.shape.at("n");
    return std::vector<TensorSpec>{{"x", DType::f32, {n}, TensorRole::input, -1, 1},
                                   {"y", DType::f32, {n}, TensorRole::output}};
  };
  p.reference = [](const Problem& problem, std::span<const double>, HostTensors& t) {
    const auto n = problem.shape.at("n");
    for (std::int64_t i = 0; i < n; ++i) t[1][i] = t[0][i];
  };
  p.cost = [](const Problem& problem) { return Cost{8.0 * static_cast<double>(problem.shape.at("n")), 0}; };
  p.tolerance = [](DType) { return Tolerance{0, 0}; };
  p.default_variant = "copy";
  p.validate_shape = [](const Shape& shape) {
    return shape.at("n") <= (std::int64_t{1} << 32) ? Support::yes() : Support::no("n must be at most 2^32");
  };
  return p;
}

Variant copy_variant(std::string name, std::string description, kf::Fault fault) {
  Variant v;
  v.primitive = "fault_injection";
  v.name = std::move(name);
  v.description = std::move(description);
  // Two configs for the copy that works (a choice for the winner), one for each fault: every
  // fault costs a worker restart, the hang a whole watchdog limit.
  if (fault == kf::Fault::none && v.name == "copy")
    v.params = ParamSpace({{"block_size", {128, 256}, "threads per block"}});
  else
    v.params = ParamSpace({{"block_size", {256}, "threads per block"}});
  v.default_config = Config({{"block_size", 256}});
  v.supports = [](const Problem&, const Config&, const DeviceLimits&) { return Support::yes(); };
  v.launch = [fault](const LaunchArgs& a) {
    return launch_status(kf::copy_with_fault(fault, static_cast<const float*>(a.tensors[0]),
                                             static_cast<float*>(a.tensors[1]), a.problem.shape.at("n"),
                                             cfg(a.config, "block_size"), a.stream));
  };
  return v;
}

}  // namespace

void register_fault_injection(Catalogue& c) {
  c.add(copy_primitive());
  c.add(copy_variant("copy", "a grid-stride copy that works", kf::Fault::none));
  c.add(copy_variant("out_of_bounds", "copies, then stores 4 TiB past the output", kf::Fault::out_of_bounds));
  c.add(copy_variant("trap", "copies, then every thread executes trap", kf::Fault::trap));
  c.add(copy_variant("spin", "copies, then waits forever for a flag nothing sets", kf::Fault::spin));
  Variant abort_variant = copy_variant("host_abort", "calls abort() on the host instead of launching", kf::Fault::none);
  abort_variant.launch = [](const LaunchArgs&) -> LaunchStatus { std::abort(); };
  c.add(std::move(abort_variant));
}

}  // namespace shapetune
