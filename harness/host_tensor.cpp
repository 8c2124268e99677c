#include "harness/host_tensor.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>

#include "core/parallel.hpp"

namespace shapetune {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double unit_uniform(std::uint64_t seed, std::int64_t index) {
  const std::uint64_t bits = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(index)));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace

double load_as_double(DType dtype, const void* buffer, std::int64_t i) {
  switch (dtype) {
    case DType::f32:
    case DType::tf32: return static_cast<const float*>(buffer)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(buffer)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(buffer)[i]);
    case DType::i32: return static_cast<const std::int32_t*>(buffer)[i];
  }
  return NAN;
}

void store_from_double(DType dtype, double v, void* buffer, std::int64_t i) {
  // 16-bit types go through float: two roundings, which is harmless here because the
  // reference always reads back the stored value rather than v.
  switch (dtype) {
    case DType::f32:
    case DType::tf32: static_cast<float*>(buffer)[i] = static_cast<float>(v); break;
    case DType::f16: static_cast<__half*>(buffer)[i] = __float2half_rn(static_cast<float>(v)); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(buffer)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    case DType::i32: static_cast<std::int32_t*>(buffer)[i] = static_cast<std::int32_t>(v); break;
  }
}

void draw_uniform(const TensorSpec& spec, std::uint64_t seed, std::vector<std::byte>& bytes, std::vector<double>& values) {
  const std::int64_t n = spec.elements();
  bytes.resize(static_cast<std::size_t>(spec.bytes()));
  values.resize(static_cast<std::size_t>(n));
  const bool integral = spec.dtype == DType::i32;
  parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      double v = spec.low + unit_uniform(seed, i) * (spec.high - spec.low);
      if (integral) v = std::floor(v);
      store_from_double(spec.dtype, v, bytes.data(), i);
      values[static_cast<std::size_t>(i)] = load_as_double(spec.dtype, bytes.data(), i);
    }
  });
}

std::string element_name(const TensorSpec& spec, std::int64_t flat) {
  std::vector<std::int64_t> index(spec.extents.size());
  for (std::size_t d = spec.extents.size(); d-- > 0;) {
    index[d] = flat % spec.extents[d];
    flat /= spec.extents[d];
  }
  std::string out = spec.name + "[";
  for (std::size_t d = 0; d < index.size(); ++d) out += (d ? "," : "") + std::to_string(index[d]);
  return out + "]";
}

}  // namespace shapetune
