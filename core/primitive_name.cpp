#include "core/primitive_name.hpp"

namespace shapetune {
namespace {

bool valid_part(std::string_view part) {
  if (part.empty()) return false;
  for (const char c : part)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace

std::optional<PrimitiveName> PrimitiveName::parse(std::string_view name) {
  PrimitiveName out;
  bool first = true;
  while (true) {
    const std::size_t dot = name.find('.');
    const std::string_view part = name.substr(0, dot);
    if (!valid_part(part)) return std::nullopt;
    if (first) out.family = std::string(part);
    else out.attributes.emplace_back(part);
    first = false;
    if (dot == std::string_view::npos) return out;
    name.remove_prefix(dot + 1);
  }
}

bool PrimitiveName::has(std::string_view attribute) const {
  for (const auto& a : attributes)
    if (a == attribute) return true;
  return false;
}

std::optional<std::string> PrimitiveName::one_of(std::initializer_list<std::string_view> choices) const {
  const std::string* found = nullptr;
  for (const auto& a : attributes)
    if (index_in(a, choices)) {
      if (found) return std::nullopt;
      found = &a;
    }
  if (!found) return std::nullopt;
  return *found;
}

std::string PrimitiveName::text() const {
  std::string out = family;
  for (const auto& a : attributes) out += "." + a;
  return out;
}

}  // namespace shapetune
