#include "variants/catalogue.hpp"

#include <stdexcept>

namespace shapetune {

std::vector<double> default_scalars(const Primitive& p) {
  std::vector<double> out;
  for (const auto& s : p.scalars) out.push_back(s.value);
  return out;
}

Cost reference_cost(const Primitive& primitive, const Problem& problem) {
  Cost cost = primitive.cost(problem);
  if (!primitive.checked_ranges) return cost;
  const std::vector<ElementRange> ranges = primitive.checked_ranges(problem);
  if (ranges.empty()) return cost;
  std::int64_t outputs = 0, checked = 0;
  for (const TensorSpec& spec : primitive.tensors(problem))
    if (spec.role != TensorRole::input) outputs += spec.elements();
  for (const ElementRange& range : ranges) checked += range.end - range.begin;
  if (outputs > 0) cost.flops *= static_cast<double>(checked) / static_cast<double>(outputs);
  return cost;
}

namespace {

template <typename Items>
std::string join_names(const Items& items) {
  std::string out;
  for (const auto* item : items) {
    if (!out.empty()) out += ", ";
    out += item->name;
  }
  return out;
}

}  // namespace

std::int64_t TensorSpec::elements() const {
  std::int64_t n = 1;
  for (std::int64_t extent : extents) n *= extent;
  return n;
}

std::int64_t TensorSpec::bytes() const { return elements() * static_cast<std::int64_t>(dtype_size(dtype)); }

void Catalogue::add(Primitive primitive) {
  // Lookups return the first match, so a second registration would be silently unreachable.
  if (find_primitive(primitive.name)) throw std::logic_error("primitive '" + primitive.name + "' is registered twice");
  primitives_.push_back(std::make_unique<Primitive>(std::move(primitive)));
}

void Catalogue::add(Variant variant) {
  if (!find_primitive(variant.primitive))
    throw std::logic_error("variant '" + variant.name + "' belongs to primitive '" + variant.primitive +
                           "', which is not registered; add the primitive first");
  if (find_variant(variant.primitive, variant.name))
    throw std::logic_error("variant '" + variant.primitive + "/" + variant.name + "' is registered twice");
  variants_.push_back(std::make_unique<Variant>(std::move(variant)));
}

const Primitive* Catalogue::find_primitive(std::string_view name) const {
  for (const auto& primitive : primitives_)
    if (primitive->name == name) return primitive.get();
  return nullptr;
}

const Variant* Catalogue::find_variant(std::string_view primitive, std::string_view variant) const {
  for (const auto& candidate : variants_)
    if (candidate->primitive == primitive && candidate->name == variant) return candidate.get();
  return nullptr;
}

std::vector<const Primitive*> Catalogue::primitives() const {
  std::vector<const Primitive*> out;
  out.reserve(primitives_.size());
  for (const auto& primitive : primitives_) out.push_back(primitive.get());
  return out;
}

std::vector<const Variant*> Catalogue::variants(std::string_view primitive) const {
  std::vector<const Variant*> out;
  for (const auto& variant : variants_)
    if (variant->primitive == primitive) out.push_back(variant.get());
  return out;
}

std::string Catalogue::primitive_names() const { return join_names(primitives()); }

std::string Catalogue::variant_names(std::string_view primitive) const { return join_names(variants(primitive)); }

}  // namespace shapetune
