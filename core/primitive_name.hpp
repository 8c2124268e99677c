// A primitive's name as a family and dotted attributes, parsed in one place: "gemm_bias_gelu.nt"
// is family gemm_bias_gelu with layout attribute nt; "attention.causal.packed" is family
// attention, mask causal, layout packed; "softmax" has none. Every part is a lowercase word of
// letters, digits and '_'. The catalogue, the baselines and the report read names through this.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shapetune {

struct PrimitiveName {
  std::string family;
  std::vector<std::string> attributes;

  // nullopt for an empty name, an empty part ("a..b", "a.", ".a") or a character outside
  // [a-z0-9_].
  static std::optional<PrimitiveName> parse(std::string_view name);

  bool has(std::string_view attribute) const;
  // The attribute among `choices`, when exactly one of them is present; nullopt when none or
  // several are. For attributes that form a closed set: a mask (causal, full), a layout.
  std::optional<std::string> one_of(std::initializer_list<std::string_view> choices) const;
  std::string text() const;  // "family.attr1.attr2"
};

// The index of `value` in `choices` (any range of strings: an array of names, a braced list),
// or nullopt.
template <typename Choices>
std::optional<std::size_t> index_in(std::string_view value, const Choices& choices) {
  std::size_t i = 0;
  for (const auto& choice : choices) {
    if (std::string_view(choice) == value) return i;
    ++i;
  }
  return std::nullopt;
}
inline std::optional<std::size_t> index_in(std::string_view value, std::initializer_list<std::string_view> choices) {
  return index_in<std::initializer_list<std::string_view>>(value, choices);
}

}  // namespace shapetune
