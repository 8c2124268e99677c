#include "core/param_space.hpp"

#include <algorithm>

namespace shapetune {

std::vector<Config> ParamSpace::enumerate() const {
  std::vector<Config> out;
  if (std::any_of(axes_.begin(), axes_.end(), [](const ParamAxis& a) { return a.values.empty(); })) return out;
  std::vector<std::size_t> index(axes_.size(), 0);
  while (true) {
    std::vector<std::pair<std::string, std::int64_t>> values;
    values.reserve(axes_.size());
    for (std::size_t i = 0; i < axes_.size(); ++i) values.emplace_back(axes_[i].name, axes_[i].values[index[i]]);
    Config config(std::move(values));
    if (!constraint_ || constraint_(config)) out.push_back(std::move(config));
    // Odometer increment, last axis fastest.
    std::size_t i = axes_.size();
    while (i > 0) {
      --i;
      if (++index[i] < axes_[i].values.size()) break;
      index[i] = 0;
      if (i == 0) return out;
    }
    if (axes_.empty()) return out;
  }
}

std::int64_t ParamSpace::raw_size() const {
  std::int64_t n = 1;
  for (const auto& axis : axes_) n *= static_cast<std::int64_t>(axis.values.size());
  return n;
}

bool ParamSpace::contains(const Config& config) const {
  if (config.values().size() != axes_.size()) return false;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    const auto& [name, value] = config.values()[i];
    if (name != axes_[i].name) return false;
    if (std::find(axes_[i].values.begin(), axes_[i].values.end(), value) == axes_[i].values.end()) return false;
  }
  return !constraint_ || constraint_(config);
}

}  // namespace shapetune
