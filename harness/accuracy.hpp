// Comparison of a device result with the float64 reference, element by element.
#pragma once

#include <span>
#include <vector>

#include "core/records.hpp"
#include "core/types.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

// |got - want| <= atol OR |got - want| <= rtol * |want|; NaN and Inf never pass (not even
// against an infinite reference: no primitive here produces one from finite inputs).
bool element_passes(double got, double want, Tolerance tol);

// Every element of `device_image` (the output's bytes, copied to the host) against `want`, or
// only those in `ranges` where it is not empty (Primitive::checked_ranges).
AccuracyReport compare_with_reference(const TensorSpec& spec, const void* device_image,
                                      const std::vector<double>& want, Tolerance tol,
                                      std::span<const ElementRange> ranges = {});

// Combines reports of several outputs of one launch: worst errors, summed counts, the first
// mismatch of the first tensor that has one.
void merge_into(AccuracyReport& total, const AccuracyReport& part);

}  // namespace shapetune
