// Everything one problem needs on both sides: random inputs, the float64 reference computed
// once, and device buffer sets (set 0 for verification; more for rotating tiny kernels).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "harness/device_buffer.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

struct Footprint {
  std::int64_t device_bytes = 0;  // one buffer set plus the pristine copies of inout tensors
  std::int64_t host_bytes = 0;    // device images, float64 inputs and references, staging
};
Footprint footprint(const Primitive&, const Problem&);

// Why this machine cannot hold the problem (device or host memory), or nullopt.
std::optional<std::string> cannot_hold(const Footprint&, std::int64_t reserved_device_bytes);

class ProblemData {
 public:
  // Draws inputs from the primitive's ranges (seeded), runs the reference, allocates set 0.
  // `adjust` may change the specs first (e.g. a test shifting input ranges).
  // `scalars` empty: the primitive's tuning values.
  ProblemData(const Primitive&, Problem, std::uint64_t seed,
              const std::function<void(std::vector<TensorSpec>&)>& adjust = {}, std::vector<double> scalars = {});

  const Problem& problem() const { return problem_; }
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const std::vector<double>& scalars() const { return scalars_; }
  bool has_inout() const;
  std::int64_t bytes_per_set() const { return bytes_per_set_; }
  int sets() const { return static_cast<int>(sets_.size()); }
  // Adds sets up to `count`, each a copy of set 0's inputs, for rotation.
  void ensure_sets(int count, cudaStream_t);
  std::vector<void*> pointers(int set) const;

  // Makes a set ready for a verified launch: outputs poisoned with 0xFF bytes (NaN in every
  // float type), inout tensors restored to their initial values.
  void prepare(int set, cudaStream_t);
  // Restores only the inout tensors (between timing samples of in-place kernels).
  void restore_inout(int set, cudaStream_t);
  // Waits for the stream, copies the set's outputs and inout tensors back and compares every
  // element with the reference.
  AccuracyReport check(int set, Tolerance, cudaStream_t);

  // Host side, for tests: the reference's expected values of tensor i.
  const std::vector<double>& expected(std::size_t tensor) const { return host_values_[tensor]; }

 private:
  Problem problem_;
  std::vector<TensorSpec> specs_;
  std::vector<double> scalars_;
  std::vector<std::vector<std::byte>> initial_images_;  // inputs and inout tensors, as stored
  std::vector<std::vector<double>> host_values_;        // inputs: as stored; outputs/inout: reference
  std::vector<std::vector<DeviceBuffer>> sets_;         // [set][tensor]
  std::vector<DeviceBuffer> pristine_inout_;            // [tensor], empty for non-inout ones
  std::vector<ElementRange> checked_ranges_;            // empty: every element
  PinnedBuffer staging_;
  std::int64_t bytes_per_set_ = 0;
};

}  // namespace shapetune
