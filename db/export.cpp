#include "db/export.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>

#include "core/json.hpp"
#include "db/dispatch.hpp"

namespace shapetune {

namespace {

// A Shape or Config as {"name": value, ...} in declaration order.
std::string json_pairs(const std::vector<std::pair<std::string, std::int64_t>>& pairs) {
  JsonObject object;
  for (const auto& [name, value] : pairs) object.add(name, json_integer(value));
  return object.inline_text();
}

std::string device_json(const DeviceFingerprint& device) {
  return JsonObject()
      .add("key", json_string(device.key()))
      .add("name", json_string(device.name))
      .add("compute_capability", json_integer(device.compute_capability))
      .add("sm_count", json_integer(device.sm_count))
      .add("l2_bytes", json_integer(device.l2_bytes))
      .add("memory_bytes", json_integer(device.memory_bytes))
      .add("driver_version", json_string(device.driver_version))
      .add("runtime_version", json_string(device.runtime_version))
      .add("cublas_version", json_string(device.cublas_version))
      .add("cudnn_version", json_string(device.cudnn_version))
      .inline_text();
}

// A winner without a baseline has no baseline time or speedup. The database stores 0 for both,
// which an export must not pass on as if it had been measured.
bool has_baseline(const WinnerRecord& winner) { return !winner.best_baseline.empty(); }

std::string winner_json(const WinnerRecord& winner, const std::string& indent) {
  return JsonObject()
      .add("device_key", json_string(winner.device_key))
      .add("problem", json_string(winner.problem.key()))
      .add("primitive", json_string(winner.problem.primitive))
      .add("dtype", json_string(dtype_name(winner.problem.dtype)))
      .add("shape", json_pairs(winner.problem.shape.dims()))
      .add("variant", json_string(winner.variant))
      .add("config", json_pairs(winner.config.values()))
      .add("baseline", json_bool(winner.baseline))
      .add("median_us", json_number(winner.timing.median_us))
      .add("p10_us", json_number(winner.timing.p10_us))
      .add("p90_us", json_number(winner.timing.p90_us))
      .add("samples", json_integer(winner.timing.samples))
      .add("timing_mode", json_string(timing_mode_name(winner.timing.mode)))
      .add("state_restored", json_bool(winner.timing.state_restored))
      .add("best_baseline", json_string(winner.best_baseline))
      .add("baseline_us", has_baseline(winner) ? json_number(winner.baseline_us) : "null")
      .add("speedup_vs_baseline", has_baseline(winner) ? json_number(winner.speedup_vs_baseline) : "null")
      .add("runner_up_variant", json_string(winner.runner_up_variant))
      .add("runner_up_config", json_string(winner.runner_up_config.key()))
      .add("runner_up_us", json_number(winner.runner_up_us))
      .add("margin_rel", json_number(winner.margin_rel))
      .add("tie", json_bool(winner.tie))
      .add("bytes", json_number(winner.cost.bytes))
      .add("flops", json_number(winner.cost.flops))
      .add("achieved_bytes_per_s", json_number(winner.cost.bytes / (winner.timing.median_us * 1e-6)))
      .add("atol", json_number(winner.tolerance.atol))
      .add("rtol", json_number(winner.tolerance.rtol))
      .add("library_algo", json_string(winner.library_algo))
      .add("git_sha", json_string(winner.git_sha))
      .add("measured_at", json_string(winner.measured_at))
      .add("sweep_id", json_integer(winner.sweep_id))
      .block_text(indent);
}

// ---- CSV -----------------------------------------------------------------------------------

// RFC 4180: a field with a comma, quote or line break is quoted, and its quotes doubled.
std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

// Spreadsheets and pandas read "nan" and "inf".
std::string csv_number(double value) {
  if (auto text = finite_number_text(value)) return *text;
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

std::string csv_bool(bool value) { return value ? "true" : "false"; }

constexpr std::string_view kCsvColumns[] = {
    "device_key", "problem", "primitive", "dtype", "shape", "variant", "config", "baseline",
    "median_us", "p10_us", "p90_us", "samples", "timing_mode", "speedup_vs_baseline", "best_baseline",
    "baseline_us", "runner_up_variant", "runner_up_config", "runner_up_us", "margin_rel", "tie",
    "bytes", "flops", "achieved_bytes_per_s", "atol", "rtol", "library_algo", "git_sha", "measured_at",
};

// In kCsvColumns' order.
std::vector<std::string> csv_values(const WinnerRecord& winner) {
  return {
      winner.device_key,
      winner.problem.key(),
      winner.problem.primitive,
      std::string(dtype_name(winner.problem.dtype)),
      winner.problem.shape.key(),
      winner.variant,
      winner.config.key(),
      csv_bool(winner.baseline),
      csv_number(winner.timing.median_us),
      csv_number(winner.timing.p10_us),
      csv_number(winner.timing.p90_us),
      std::to_string(winner.timing.samples),
      std::string(timing_mode_name(winner.timing.mode)),
      has_baseline(winner) ? csv_number(winner.speedup_vs_baseline) : "",
      winner.best_baseline,
      has_baseline(winner) ? csv_number(winner.baseline_us) : "",
      winner.runner_up_variant,
      winner.runner_up_config.key(),
      csv_number(winner.runner_up_us),
      csv_number(winner.margin_rel),
      csv_bool(winner.tie),
      csv_number(winner.cost.bytes),
      csv_number(winner.cost.flops),
      csv_number(winner.cost.bytes / (winner.timing.median_us * 1e-6)),
      csv_number(winner.tolerance.atol),
      csv_number(winner.tolerance.rtol),
      winner.library_algo,
      winner.git_sha,
      winner.measured_at,
  };
}

template <typename Fields>
std::string csv_line(const Fields& fields) {
  std::string line;
  bool first = true;
  for (const auto& field : fields) {
    if (!first) line += ',';
    first = false;
    line += csv_field(field);
  }
  return line + '\n';
}

// ---- C++ header ----------------------------------------------------------------------------

// A C++ narrow string literal, quotes included, that reads back as exactly these bytes: named
// escapes for quote, backslash, \n, \t and \r; every other byte outside printable ASCII as a
// three-digit octal escape (an octal escape ends after three digits, so it never swallows the
// character after it, which a \x escape would); '?' after '?' as \? so no trigraph can form.
std::string cpp_string(std::string_view text) {
  std::string out = "\"";
  char previous = '\0';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '?' && previous == '?') {
      out += "\\?";
    } else if (byte < 0x20 || byte >= 0x7f) {
      char escape[5];
      std::snprintf(escape, sizeof escape, "\\%03o", static_cast<unsigned>(byte));
      out += escape;
    } else {
      out += c;
    }
    previous = c;
  }
  return out + '"';
}

// Text for a // comment line: as is when it is plain printable ASCII without backslashes, else
// as an escaped string literal, so no line break can end the comment early and no trailing
// backslash can splice the next line into it.
std::string cpp_comment_text(std::string_view text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '\\') return cpp_string(text);
  }
  return std::string(text);
}

// A double literal that reads back exactly (%.17g, with ".0" added to integral values so it is
// a floating literal); -1.0 for NaN and infinities, which have no portable constant expression.
std::string cpp_double(double value) {
  if (!std::isfinite(value)) return "-1.0";
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  std::string out = text;
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

std::string cpp_entry(const WinnerRecord& winner) {
  std::string out = "{";  // appended to, not "{" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  return out + cpp_string(winner.device_key) + ", " + cpp_string(winner.problem.primitive) + ", " +
         cpp_string(dtype_name(winner.problem.dtype)) + ", " + cpp_string(winner.problem.shape.key()) + ", " +
         cpp_string(winner.variant) + ", " + cpp_string(winner.config.key()) + ", " +
         cpp_string(winner.library_algo) + ", " + cpp_double(winner.timing.median_us) + ", " +
         (has_baseline(winner) ? cpp_double(winner.speedup_vs_baseline) : std::string("-1.0")) + "}";
}

// The header's detail:: functions behind find_nearest(), C++17 constexpr and free of <cmath>
// (whose functions are not constexpr). Extents are parsed as the integers Shape::key() wrote and
// converted to double as shape_log_distance() converts them.
constexpr const char* kNearestHelpers = R"cpp(
// Whether a sorts before b, byte by byte as std::string compares.
constexpr bool less(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return static_cast<unsigned char>(*a) < static_cast<unsigned char>(*b);
}

// ln x for x > 0, within a few units in the last place: x = m 2^e with m in [1, 2), and
// ln m = 2 atanh(z) = 2 (z + z^3/3 + z^5/5 + ...), z = (m - 1) / (m + 1) < 1/3.
constexpr double log_positive(double x) {
  int exponent = 0;
  while (x >= 2.0) {
    x /= 2.0;
    ++exponent;
  }
  while (x < 1.0) {
    x *= 2.0;
    --exponent;
  }
  const double z = (x - 1.0) / (x + 1.0);
  double power = z;
  double sum = 0.0;
  for (int n = 1; n < 40; n += 2) {
    sum += power / n;
    power *= z * z;
  }
  return 2.0 * sum + exponent * 0.693147180559945309417;
}

// Newton's iteration from above the root, where each step only falls, until it stops falling.
constexpr double square_root(double x) {
  if (x <= 0.0) return 0.0;
  double root = x < 1.0 ? 1.0 : x;
  for (int step = 0; step < 200; ++step) {
    const double next = 0.5 * (root + x / root);
    if (next >= root) break;
    root = next;
  }
  return root;
}

// One "axis=extent" of a shape text ("rows=4096,cols=1000").
struct Axis {
  const char* name;
  std::size_t name_length;
  double extent;
  const char* rest;  // the next axis, or the final '\0'; nullptr for a malformed text or an extent < 1
};

constexpr Axis read_axis(const char* text) {
  Axis axis{text, 0, 0.0, nullptr};
  while (text[axis.name_length] != '\0' && text[axis.name_length] != '=') ++axis.name_length;
  const char* at = text + axis.name_length;
  // A positive extent starts with 1 to 9: no sign, no leading zero.
  if (axis.name_length == 0 || *at != '=' || at[1] < '1' || at[1] > '9') return axis;
  std::int64_t extent = 0;
  for (++at; *at >= '0' && *at <= '9'; ++at) {
    if (extent > (INT64_MAX - 9) / 10) return axis;
    extent = extent * 10 + (*at - '0');
  }
  if (*at == ',' && at[1] != '\0') axis.rest = at + 1;
  if (*at == '\0') axis.rest = at;
  axis.extent = static_cast<double>(extent);
  return axis;
}

// The square root of the sum over axes of (ln a - ln b)^2, or -1 where the shapes are not
// comparable: other axis names or order, an extent below 1, a malformed text.
constexpr double log_distance(const char* a, const char* b) {
  if (a == nullptr || b == nullptr) return -1.0;
  double sum = 0.0;
  for (;;) {
    const Axis x = read_axis(a);
    const Axis y = read_axis(b);
    if (x.rest == nullptr || y.rest == nullptr || x.name_length != y.name_length) return -1.0;
    for (std::size_t i = 0; i < x.name_length; ++i)
      if (x.name[i] != y.name[i]) return -1.0;
    const double difference = log_positive(x.extent) - log_positive(y.extent);
    sum += difference * difference;
    a = x.rest;
    b = y.rest;
    if (*a == '\0' || *b == '\0') return *a == *b ? square_root(sum) : -1.0;
  }
}

constexpr bool same_table(const Entry& e, const char* device_key, const char* primitive, const char* dtype) {
  return equal(e.device_key, device_key) && equal(e.primitive, primitive) && equal(e.dtype, dtype);
}
)cpp";

// find_nearest() and what it returns; the header's top comment says how it resolves.
constexpr const char* kFindNearest = R"cpp(
enum class Resolution { none, exact, nearest };

struct Match {
  const Entry* entry;     // nullptr for Resolution::none
  Resolution resolution;
  double log_distance;    // from the asked shape to entry->shape: 0 when exact, -1 for none
};

constexpr Match find_nearest(const char* device_key, const char* primitive, const char* dtype,
                             const char* shape) {
  if (const Entry* exact = find(device_key, primitive, dtype, shape)) return {exact, Resolution::exact, 0.0};
  double nearest = -1.0;
  for (const Entry* e = kWinners; e != kWinners + kWinnerCount; ++e) {
    if (!detail::same_table(*e, device_key, primitive, dtype)) continue;
    const double distance = detail::log_distance(e->shape, shape);
    if (distance >= 0.0 && (nearest < 0.0 || distance < nearest)) nearest = distance;
  }
  Match match{nullptr, Resolution::none, -1.0};
  if (nearest < 0.0) return match;
  for (const Entry* e = kWinners; e != kWinners + kWinnerCount; ++e) {
    if (!detail::same_table(*e, device_key, primitive, dtype)) continue;
    const double distance = detail::log_distance(e->shape, shape);
    if (distance >= 0.0 && distance <= nearest + kTieDistance &&
        (match.entry == nullptr || detail::less(e->shape, match.entry->shape)))
      match = Match{e, Resolution::nearest, distance};
  }
  return match;
}

)cpp";

}  // namespace

std::string export_json(const std::vector<DeviceFingerprint>& devices, const std::vector<WinnerRecord>& winners) {
  const std::string indent = "  ";
  std::vector<std::string> device_items;
  for (const auto& device : devices) device_items.push_back(device_json(device));
  std::vector<std::string> winner_items;
  for (const auto& winner : winners) winner_items.push_back(winner_json(winner, indent + "  "));
  return JsonObject()
             .add("schema", json_string("shapetune-dispatch/1"))
             .add("devices", json_block_array(device_items, indent))
             .add("winners", json_block_array(winner_items, indent))
             .block_text("") +
         "\n";
}

std::string export_csv(const std::vector<WinnerRecord>& winners) {
  std::string out = csv_line(kCsvColumns);
  for (const auto& winner : winners) out += csv_line(csv_values(winner));
  return out;
}

std::string export_header(const std::vector<WinnerRecord>& winners, const HeaderExportSource& source) {
  std::string out;
  out += "// shapetune dispatch table, generated: do not edit.\n";
  out += "// command: " + cpp_comment_text(source.command_line) + "\n";
  out += "// schema version: " + std::to_string(source.schema_version) + "\n";
  out += "// database: " + cpp_comment_text(source.db_path) + "\n";
  out += "// winners: " + std::to_string(winners.size()) + "\n";
  out += "//\n";
  out += "// C++17, no library to link. median_us is the winner's median time in microseconds;\n";
  out += "// speedup_vs_baseline is the best baseline's time over the winner's. Both are -1 where the\n";
  out += "// database holds no finite value (NaN or infinity); speedup_vs_baseline is -1 too where no\n";
  out += "// baseline ran for the problem. find() matches device_key (as\n";
  out += "// `shapetune devices` prints it), primitive, dtype (\"f32\") and shape (\"rows=4096,cols=1000\")\n";
  out += "// exactly and returns the first match, or nullptr. library_algo is the library algorithm\n";
  out += "// recorded with a cuBLASLt winner (replay it rather than the heuristic's first), else \"\".\n";
  out += "//\n";
  out += "// find_nearest() resolves as shapetune's Dispatcher does, less one check: the exact match, else\n";
  out += "// among the entries of that device, primitive and dtype whose shapes have the same axes in the\n";
  out += "// same order, the one at the smallest log distance (the square root of the sum over axes of\n";
  out += "// (ln a - ln b)^2; distances within kTieDistance are equal, and the smaller shape text wins).\n";
  out += "// The Dispatcher also passes over a nearest winner whose variant cannot run the asked shape\n";
  out += "// (split_k with more slices than the shorter K has steps, naive attention whose scores no\n";
  out += "// longer fit): only the catalogue knows that, and this header links nothing. So before\n";
  out += "// launching a Resolution::nearest entry, check that its variant supports the shape, and take\n";
  out += "// the primitive's default variant where it does not or where the resolution is none. Pass\n";
  out += "// library_algo on for exact matches only: it was recorded for the tuned shape.\n";
  out += "#pragma once\n\n";
  out += "#include <cstddef>  // std::size_t\n";
  out += "#include <cstdint>\n\n";
  out += "namespace shapetune_dispatch {\n\n";
  out += "struct Entry {\n";
  out += "  const char* device_key;\n";
  out += "  const char* primitive;\n";
  out += "  const char* dtype;\n";
  out += "  const char* shape;\n";
  out += "  const char* variant;\n";
  out += "  const char* config;\n";
  out += "  const char* library_algo;\n";
  out += "  double median_us;\n";
  out += "  double speedup_vs_baseline;\n";
  out += "};\n\n";
  if (winners.empty()) {
    out += "// No winners. An array of length zero is ill-formed, so kWinners holds one sentinel entry\n";
    out += "// that kWinnerCount excludes and find() never returns.\n";
    out += "inline constexpr Entry kWinners[] = {\n";
    out += "    {\"\", \"\", \"\", \"\", \"\", \"\", \"\", -1.0, -1.0},\n";
    out += "};\n";
  } else {
    out += "inline constexpr Entry kWinners[] = {\n";
    for (const auto& winner : winners) out += "    " + cpp_entry(winner) + ",\n";
    out += "};\n";
  }
  out += "inline constexpr std::size_t kWinnerCount = " + std::to_string(winners.size()) + ";\n\n";
  out += "namespace detail {\n";
  out += "constexpr bool equal(const char* a, const char* b) {\n";
  out += "  if (a == nullptr || b == nullptr) return a == b;\n";
  out += "  while (*a != '\\0' && *a == *b) {\n";
  out += "    ++a;\n";
  out += "    ++b;\n";
  out += "  }\n";
  out += "  return *a == *b;\n";
  out += "}\n";
  out += kNearestHelpers;
  out += "}  // namespace detail\n\n";
  out += "constexpr const Entry* find(const char* device_key, const char* primitive, const char* dtype,\n";
  out += "                            const char* shape) {\n";
  out += "  for (const Entry* e = kWinners; e != kWinners + kWinnerCount; ++e) {\n";
  out += "    if (detail::equal(e->device_key, device_key) && detail::equal(e->primitive, primitive) &&\n";
  out += "        detail::equal(e->dtype, dtype) && detail::equal(e->shape, shape))\n";
  out += "      return e;\n";
  out += "  }\n";
  out += "  return nullptr;\n";
  out += "}\n\n";
  out += "// Log distances closer than this are equal (shapetune's kDispatchTieDistance): the same distance\n";
  out += "// reached through different logarithms differs in its last bits.\n";
  out += "inline constexpr double kTieDistance = " + cpp_double(kDispatchTieDistance) + ";\n";
  out += kFindNearest;
  out += "}  // namespace shapetune_dispatch\n";
  return out;
}

}  // namespace shapetune
