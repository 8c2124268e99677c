#include "models/dispatcher.hpp"

#include <stdexcept>

#include "db/store.hpp"

namespace shapetune {

namespace {

std::string primitive_and_dtype(const Problem& p) { return p.primitive + "/" + std::string(dtype_name(p.dtype)); }

}  // namespace

Dispatcher::Dispatcher(const std::string& db_path, const std::string& device_key, DeviceLimits limits)
    : limits_(limits) {
  const auto store = Store::open(db_path, OpenMode::read_only);
  table_ = DispatchTable::load(*store, device_key);
  for (const WinnerRecord& w : store->winners())
    if (w.device_key != device_key)
      elsewhere_[primitive_and_dtype(w.problem)].insert(w.device_key.substr(0, w.device_key.find('|')));
}

Dispatcher::Dispatcher(DeviceLimits limits) : table_(DispatchTable::from_winners({})), limits_(limits) {}

DispatchChoice Dispatcher::lookup(const Problem& problem) const {
  const Catalogue& cat = catalogue();
  auto supports = [&](const Problem& p, const std::string& variant, const Config& config) {
    const Variant* v = cat.find_variant(p.primitive, variant);
    return v && v->supports(p, complete_config(*v, config), limits_).ok;
  };
  // The primitive's default variant; where it cannot run the problem with its default config
  // (GEMM's cuBLASLt default has no erf-GELU epilogue), its fallback variants in order, then the
  // first registered variant that can.
  auto default_for = [&](const Problem& p) -> std::optional<std::pair<std::string, Config>> {
    const Primitive* primitive = cat.find_primitive(p.primitive);
    if (!primitive) return std::nullopt;
    std::vector<const Variant*> choices{cat.find_variant(p.primitive, primitive->default_variant)};
    for (const std::string& name : primitive->fallback_variants) choices.push_back(cat.find_variant(p.primitive, name));
    for (const Variant* v : cat.variants(p.primitive)) choices.push_back(v);
    for (const Variant* v : choices)
      if (v && v->supports(p, v->default_config, limits_).ok) return std::make_pair(v->name, v->default_config);
    return std::nullopt;
  };
  DispatchChoice choice = table_.lookup(problem, supports, default_for);
  if (const Variant* v = cat.find_variant(problem.primitive, choice.variant))
    choice.config = complete_config(*v, std::move(choice.config));
  return choice;
}

std::vector<std::string> Dispatcher::tuned_elsewhere(const Problem& problem) const {
  const auto it = elsewhere_.find(primitive_and_dtype(problem));
  if (it == elsewhere_.end()) return {};
  return std::vector<std::string>(it->second.begin(), it->second.end());
}

const Variant& Dispatcher::variant_of(const Problem& problem, const DispatchChoice& choice) const {
  const Variant* v = catalogue().find_variant(problem.primitive, choice.variant);
  if (!v) throw std::runtime_error("dispatch names unknown variant " + problem.primitive + "/" + choice.variant);
  return *v;
}

}  // namespace shapetune
