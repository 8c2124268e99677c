#include "core/types.hpp"

#include <charconv>
#include <stdexcept>

namespace shapetune {

namespace {

constexpr std::pair<DType, std::string_view> kDTypeNames[] = {
    {DType::f32, "f32"}, {DType::f16, "f16"}, {DType::bf16, "bf16"}, {DType::i32, "i32"}, {DType::tf32, "tf32"}};

// "a=1,b=2" -> pairs; used by Shape and Config keys, whose grammar is the same.
std::vector<std::pair<std::string, std::int64_t>> parse_pairs(std::string_view text, std::string_view what) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  if (text.empty()) return out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw std::invalid_argument(std::string(what) + " key '" + std::string(text) + "': expected name=value");
    std::int64_t value = 0;
    std::string_view number = item.substr(eq + 1);
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc{} || end != number.data() + number.size() || number.empty())
      throw std::invalid_argument(std::string(what) + " key '" + std::string(text) + "': '" + std::string(number) +
                                  "' is not an integer");
    out.emplace_back(std::string(item.substr(0, eq)), value);
    pos = comma + 1;
  }
  return out;
}

std::string join_pairs(const std::vector<std::pair<std::string, std::int64_t>>& pairs) {
  std::string out;
  for (const auto& [name, value] : pairs) {
    if (!out.empty()) out += ',';
    out += name;
    out += '=';
    out += std::to_string(value);
  }
  return out;
}

template <typename Pairs>
const std::int64_t* lookup(const Pairs& pairs, std::string_view name) {
  for (const auto& [key, value] : pairs)
    if (key == name) return &value;
  return nullptr;
}

}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [type, name] : kDTypeNames)
    if (type == t) return name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view text) {
  for (const auto& [type, name] : kDTypeNames)
    if (name == text) return type;
  return std::nullopt;
}

std::string dtype_names() {
  std::string out;
  for (const auto& [type, name] : kDTypeNames) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::tf32: return 4;
  }
  return 0;
}

std::int64_t Shape::at(std::string_view axis) const {
  if (const auto* v = lookup(dims_, axis)) return *v;
  throw std::out_of_range("shape " + key() + " has no axis '" + std::string(axis) + "'");
}

std::optional<std::int64_t> Shape::find(std::string_view axis) const {
  if (const auto* v = lookup(dims_, axis)) return *v;
  return std::nullopt;
}

std::int64_t Shape::elements() const {
  std::int64_t n = 1;
  for (const auto& [name, extent] : dims_) n *= extent;
  return n;
}

std::string Shape::key() const { return join_pairs(dims_); }

Shape Shape::parse_key(std::string_view key) { return Shape(parse_pairs(key, "shape")); }

std::string Problem::key() const {
  return primitive + "/" + std::string(dtype_name(dtype)) + "/" + shape.key();
}

Problem Problem::parse_key(std::string_view key) {
  std::size_t a = key.find('/');
  std::size_t b = a == std::string_view::npos ? a : key.find('/', a + 1);
  if (b == std::string_view::npos)
    throw std::invalid_argument("problem key '" + std::string(key) + "': expected primitive/dtype/shape");
  auto dtype = parse_dtype(key.substr(a + 1, b - a - 1));
  if (!dtype) throw std::invalid_argument("problem key '" + std::string(key) + "': unknown dtype");
  return Problem{std::string(key.substr(0, a)), *dtype, Shape::parse_key(key.substr(b + 1))};
}

std::int64_t Config::at(std::string_view name) const {
  if (const auto* v = lookup(values_, name)) return *v;
  throw std::out_of_range("config '" + key() + "' has no parameter '" + std::string(name) + "'");
}

std::optional<std::int64_t> Config::find(std::string_view name) const {
  if (const auto* v = lookup(values_, name)) return *v;
  return std::nullopt;
}

void Config::set(std::string name, std::int64_t value) {
  for (auto& [key, v] : values_)
    if (key == name) {
      v = value;
      return;
    }
  values_.emplace_back(std::move(name), value);
}

std::string Config::key() const { return join_pairs(values_); }

Config Config::parse_key(std::string_view key) { return Config(parse_pairs(key, "config")); }

DeviceLimits nominal_device_limits() { return DeviceLimits{}; }

std::string DeviceFingerprint::key() const {
  // Memory rounded to GiB so that a few MiB reserved by a different driver do not split it.
  return name + "|sm_" + std::to_string(compute_capability) + "|" + std::to_string(sm_count) + "SM|" +
         std::to_string((memory_bytes + (std::int64_t{1} << 29)) >> 30) + "GiB";
}

}  // namespace shapetune
