// GPU tests' common step: every variant of a primitive, every config that supports the
// problem, launched on poisoned outputs and compared element by element with the reference.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "harness/measure.hpp"
#include "harness/problem_data.hpp"
#include "variants/catalogue.hpp"

namespace shapetune::test_support {

// Returns how many (variant, config) pairs were verified; failures are reported through
// EXPECT_*. Configs refused at launch (registers, alignment, a library's NOT_SUPPORTED) are
// skipped, as the sweep records them as unsupported. `only_variant` and `only_configs`, where
// given, limit it to that variant and to the configs they accept.
inline int verify_every_config(Measurer& measurer, const DeviceInfo& device, const Problem& problem, std::uint64_t seed,
                               const std::function<void(std::vector<TensorSpec>&)>& adjust = {},
                               std::vector<double> scalars = {}, const std::string& only_variant = "",
                               const std::function<bool(const Config&)>& only_configs = {}) {
  const Primitive& primitive = *catalogue().find_primitive(problem.primitive);
  ProblemData data(primitive, problem, seed, adjust, std::move(scalars));
  const Tolerance tol = tolerance_for(primitive, problem);
  int verified = 0;
  for (const Variant* v : catalogue().variants(problem.primitive)) {
    if (!only_variant.empty() && v->name != only_variant) continue;
    for (const Config& config : v->params.enumerate()) {
      if ((only_configs && !only_configs(config)) || !v->supports(problem, config, device.limits).ok) continue;
      const std::size_t workspace_bytes = v->workspace_bytes ? v->workspace_bytes(problem, config) : 0;
      DeviceBuffer workspace(workspace_bytes);
      std::vector<void*> pointers = data.pointers(0);
      const LaunchArgs args{problem,   config, pointers, measurer.stream(), measurer.libraries(), workspace.get(),
                            workspace_bytes, data.scalars()};
      data.prepare(0, measurer.stream());
      const LaunchStatus status = v->launch(args);
      if (!status.ok && status.unsupported) continue;
      const std::string name = problem.key() + " " + v->name + "{" + config.key() + "}";
      EXPECT_TRUE(status.ok) << name << ": " << status.message;
      if (!status.ok) continue;
      const AccuracyReport report = data.check(0, tol, measurer.stream());
      EXPECT_EQ(report.mismatches, 0) << name << ": " << report.first_mismatch;
      ++verified;
    }
  }
  return verified;
}

// The bytes of every output (and inout) tensor of `pointers` (a set of `data`), once `stream` is done.
inline std::vector<std::vector<std::byte>> device_outputs(const ProblemData& data, const std::vector<void*>& pointers,
                                                          cudaStream_t stream) {
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 0; i < data.specs().size(); ++i) {
    if (data.specs()[i].role == TensorRole::input) continue;
    out.emplace_back(static_cast<std::size_t>(data.specs()[i].bytes()));
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(out.back().data(), pointers[i], out.back().size(), cudaMemcpyDeviceToHost));
  }
  return out;
}

// The bytes of every output (and inout) tensor after one launch of `v` on the problem's first
// buffer set, its workspace filled with the byte `fill` first: two calls with different fills
// show whether a variant's results depend on what its workspace held (they must not).
inline std::vector<std::vector<std::byte>> outputs_after_launch(const Variant& v, const Config& config,
                                                                ProblemData& data, Measurer& measurer, int fill) {
  const Problem& problem = data.problem();
  const std::size_t workspace_bytes = v.workspace_bytes ? v.workspace_bytes(problem, config) : 0;
  DeviceBuffer workspace(workspace_bytes);
  if (workspace_bytes) SHAPETUNE_CUDA_CHECK(cudaMemset(workspace.get(), fill, workspace_bytes));
  std::vector<void*> pointers = data.pointers(0);
  const LaunchArgs args{problem,         config,          pointers,      measurer.stream(), measurer.libraries(),
                        workspace.get(), workspace_bytes, data.scalars()};
  data.prepare(0, measurer.stream());
  const LaunchStatus status = v.launch(args);
  EXPECT_TRUE(status.ok) << v.name << ": " << status.message;
  return device_outputs(data, pointers, measurer.stream());
}

}  // namespace shapetune::test_support
