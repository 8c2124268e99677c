#include "harness/problem_data.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "harness/accuracy.hpp"
#include "harness/cuda_check.hpp"
#include "harness/host_tensor.hpp"

namespace shapetune {
namespace {

bool is_output(const TensorSpec& s) { return s.role != TensorRole::input; }
bool has_initial_values(const TensorSpec& s) { return s.role != TensorRole::output; }

std::string gib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

Footprint footprint(const Primitive& primitive, const Problem& problem) {
  Footprint f;
  std::int64_t largest_output = 0;
  for (const auto& spec : primitive.tensors(problem)) {
    f.device_bytes += spec.bytes() * (spec.role == TensorRole::inout ? 2 : 1);
    f.host_bytes += spec.elements() * static_cast<std::int64_t>(sizeof(double));
    if (has_initial_values(spec)) f.host_bytes += spec.bytes();
    if (is_output(spec)) largest_output = std::max(largest_output, spec.bytes());
  }
  f.host_bytes += largest_output;
  return f;
}

std::optional<std::string> cannot_hold(const Footprint& f, std::int64_t reserved_device_bytes) {
  std::size_t free_bytes = 0, total_bytes = 0;
  SHAPETUNE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Leave room for the flush buffer, workspaces and library handles.
  const std::int64_t usable = static_cast<std::int64_t>(free_bytes) - reserved_device_bytes;
  if (f.device_bytes > usable)
    return "needs " + gib(f.device_bytes) + " of device memory; " + gib(std::max<std::int64_t>(usable, 0)) +
           " is free after the harness's own buffers";
  const std::int64_t host_total = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (f.host_bytes > host_total)
    return "needs " + gib(f.host_bytes) + " of host memory for inputs and the float64 reference; the machine has " +
           gib(host_total);
  return std::nullopt;
}

ProblemData::ProblemData(const Primitive& primitive, Problem problem, std::uint64_t seed,
                         const std::function<void(std::vector<TensorSpec>&)>& adjust, std::vector<double> scalars)
    : problem_(std::move(problem)),
      specs_(primitive.tensors(problem_)),
      scalars_(scalars.empty() ? default_scalars(primitive) : std::move(scalars)) {
  if (adjust) adjust(specs_);
  initial_images_.resize(specs_.size());
  host_values_.resize(specs_.size());
  std::int64_t largest_output = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const auto& spec = specs_[i];
    bytes_per_set_ += spec.bytes();
    if (has_initial_values(spec))
      draw_uniform(spec, seed + 0x1000 * (i + 1), initial_images_[i], host_values_[i]);
    else
      host_values_[i].assign(static_cast<std::size_t>(spec.elements()), 0.0);
    if (is_output(spec)) largest_output = std::max(largest_output, spec.bytes());
  }
  // The reference overwrites output and inout tensors in place with the expected values.
  primitive.reference(problem_, scalars_, host_values_);
  if (primitive.checked_ranges) checked_ranges_ = primitive.checked_ranges(problem_);

  sets_.emplace_back();
  pristine_inout_.resize(specs_.size());
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    sets_[0].emplace_back(static_cast<std::size_t>(specs_[i].bytes()));
    if (has_initial_values(specs_[i]))
      SHAPETUNE_CUDA_CHECK(cudaMemcpy(sets_[0][i].get(), initial_images_[i].data(), initial_images_[i].size(),
                                      cudaMemcpyHostToDevice));
    if (specs_[i].role == TensorRole::inout) {
      pristine_inout_[i] = DeviceBuffer(static_cast<std::size_t>(specs_[i].bytes()));
      SHAPETUNE_CUDA_CHECK(cudaMemcpy(pristine_inout_[i].get(), initial_images_[i].data(),
                                      initial_images_[i].size(), cudaMemcpyHostToDevice));
    }
  }
  staging_ = PinnedBuffer(static_cast<std::size_t>(largest_output));
}

bool ProblemData::has_inout() const {
  return std::any_of(specs_.begin(), specs_.end(), [](const TensorSpec& s) { return s.role == TensorRole::inout; });
}

void ProblemData::ensure_sets(int count, cudaStream_t stream) {
  while (sets() < count) {
    std::vector<DeviceBuffer> set;
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      set.emplace_back(static_cast<std::size_t>(specs_[i].bytes()));
      if (has_initial_values(specs_[i]))
        SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(set[i].get(), sets_[0][i].get(), set[i].bytes(),
                                             cudaMemcpyDeviceToDevice, stream));
    }
    sets_.push_back(std::move(set));
  }
  SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<void*> ProblemData::pointers(int set) const {
  std::vector<void*> out;
  for (const auto& buffer : sets_.at(static_cast<std::size_t>(set))) out.push_back(buffer.get());
  return out;
}

void ProblemData::prepare(int set, cudaStream_t stream) {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].role == TensorRole::output)
      SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(sets_[set][i].get(), 0xFF, sets_[set][i].bytes(), stream));
  restore_inout(set, stream);
}

void ProblemData::restore_inout(int set, cudaStream_t stream) {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].role == TensorRole::inout)
      SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(sets_[set][i].get(), pristine_inout_[i].get(), sets_[set][i].bytes(),
                                           cudaMemcpyDeviceToDevice, stream));
}

AccuracyReport ProblemData::check(int set, Tolerance tolerance, cudaStream_t stream) {
  AccuracyReport total;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (!is_output(specs_[i])) continue;
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), sets_[set][i].get(), sets_[set][i].bytes(),
                                         cudaMemcpyDeviceToHost, stream));
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
    merge_into(total, compare_with_reference(specs_[i], staging_.get(), host_values_[i], tolerance, checked_ranges_));
  }
  return total;
}

}  // namespace shapetune
