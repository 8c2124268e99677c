// The vocabulary every layer shares: element types, shapes, problems, configs, tolerances.
// Plain C++ on purpose: the store, the shape-file parser and the CPU tests use these
// without CUDA or SQLite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shapetune {

// Storage type of a tensor. Problems are keyed by a floating type; i32 exists for index
// tensors (labels) that some primitives take beside their float data. tf32 is a problem type
// only: fp32 tensors whose products may be taken in TF32 (10-bit mantissa) on tensor cores, so
// such results are tuned, stored and dispatched apart from fp32 and never compared with it.
// Its storage is f32 (dtype_size 4; tensors of a tf32 problem are declared f32).
enum class DType : std::uint8_t { f32, f16, bf16, i32, tf32 };

std::string_view dtype_name(DType);
std::optional<DType> parse_dtype(std::string_view);
std::size_t dtype_size(DType);
// The type a dtype's tensors are stored in: tf32's are f32 (only its products are TF32).
constexpr DType storage_of(DType dtype) { return dtype == DType::tf32 ? DType::f32 : dtype; }
// Names accepted by parse_dtype, for error messages.
std::string dtype_names();

// Named extents in the order the primitive declares its axes, e.g. rows=4096, cols=1000.
class Shape {
 public:
  Shape() = default;
  explicit Shape(std::vector<std::pair<std::string, std::int64_t>> dims) : dims_(std::move(dims)) {}

  std::int64_t at(std::string_view axis) const;  // throws std::out_of_range naming the axis
  std::optional<std::int64_t> find(std::string_view axis) const;
  const std::vector<std::pair<std::string, std::int64_t>>& dims() const { return dims_; }
  std::int64_t elements() const;  // product of all extents
  std::string key() const;        // "rows=4096,cols=1000"
  static Shape parse_key(std::string_view key);  // inverse of key(); throws std::invalid_argument
  bool operator==(const Shape&) const = default;

 private:
  std::vector<std::pair<std::string, std::int64_t>> dims_;
};

// The dispatch key: what is computed, on what, in which type.
struct Problem {
  std::string primitive;
  DType dtype = DType::f32;
  Shape shape;

  std::string key() const;  // "softmax/f32/rows=4096,cols=1000"
  static Problem parse_key(std::string_view key);  // throws std::invalid_argument
  bool operator==(const Problem&) const = default;
};

// One point of a variant's parameter space, ordered as the space declares its axes.
class Config {
 public:
  Config() = default;
  explicit Config(std::vector<std::pair<std::string, std::int64_t>> values) : values_(std::move(values)) {}

  std::int64_t at(std::string_view name) const;  // throws std::out_of_range naming the parameter
  std::optional<std::int64_t> find(std::string_view name) const;
  void set(std::string name, std::int64_t value);
  const std::vector<std::pair<std::string, std::int64_t>>& values() const { return values_; }
  std::string key() const;  // "block_size=256,vec=4"; "" for a variant with no parameters
  static Config parse_key(std::string_view key);
  bool operator==(const Config&) const = default;

 private:
  std::vector<std::pair<std::string, std::int64_t>> values_;
};

// Pass rule per element: |out - ref| <= atol OR |out - ref| <= rtol * |ref|; NaN/Inf never pass.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  bool operator==(const Tolerance&) const = default;
};

// The least work a primitive must do for a problem: bytes through device memory (each input
// read once, each output written once) and floating-point operations.
struct Cost {
  double bytes = 0;
  double flops = 0;
};

// What a kernel's constraints are checked against. Filled from cudaGetDeviceProperties on a GPU;
// nominal_device_limits() stands in where there is none (dry runs, CPU tests).
struct DeviceLimits {
  int compute_capability = 90;  // major*10 + minor
  int sm_count = 132;
  int max_threads_per_block = 1024;
  std::int64_t shared_memory_per_block_optin = 227 * 1024;
  std::int64_t l2_bytes = 60 * 1024 * 1024;
  std::int64_t global_memory_bytes = std::int64_t{141} << 30;
};
DeviceLimits nominal_device_limits();

// Whether a variant can run a problem with a config, and if not, why.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// Who the winners belong to. The key identifies the hardware; versions are provenance.
struct DeviceFingerprint {
  std::string name;
  int compute_capability = 0;
  int sm_count = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
  std::string driver_version;
  std::string runtime_version;
  std::string cublas_version;
  std::string cudnn_version;

  // Winners are keyed by this: name, capability, SMs and memory size. Driver and library
  // versions are stored beside it but do not split the table.
  std::string key() const;
};

}  // namespace shapetune
