// Host copies of tensors: the bytes the device holds and the float64 values they stand for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

// Element i of a buffer of `dtype` as a double (exact: every storage type fits in a double).
double load_as_double(DType dtype, const void* buffer, std::int64_t i);
// Rounds v to `dtype` (nearest even) and stores it as element i.
void store_from_double(DType dtype, double v, void* buffer, std::int64_t i);

// Draws a spec's initial values from its [low, high) range with a counter-based generator, so
// the values depend only on (seed, index) and can be drawn in parallel. Fills both the device
// image (`bytes`, dtype-sized elements) and the float64 values the reference must use
// (the stored values, after rounding).
void draw_uniform(const TensorSpec& spec, std::uint64_t seed, std::vector<std::byte>& bytes, std::vector<double>& values);

// "y[3,4097]" for element `flat` of a tensor with these extents.
std::string element_name(const TensorSpec& spec, std::int64_t flat);

}  // namespace shapetune
