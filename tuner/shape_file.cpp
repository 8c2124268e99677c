// Shape files (shapes/*.yaml): the problems a sweep visits, written as matrices of shapes.
//
//   name: quick                          # optional
//   description: one minute on a GPU     # optional
//   matrices:                            # required, non-empty list
//     - primitive: softmax               # required; a primitive of the catalogue
//       dtypes: [f32, f16, bf16]         # required, non-empty; dtypes the primitive lists
//       axes:                            # required: exactly the primitive's axes
//         rows: [1, 7, 1024]             # a list of integers
//         cols: {range: [1000, 1010, 5]} # start, stop (inclusive), step >= 1 (default 1)
//         # or {pow2: [5, 12]}           # 2^5 .. 2^12 inclusive, exponents in 0..40
//         # or 4096                      # one integer
//         # or [1, {pow2: [4, 6]}, 1000] # a list mixing integers, ranges and pow2
//       zip: [rows, cols]                # optional: these axes advance together (equal
//                                        # lengths); or groups: [[a, b], [c, d]]
//       variants: [warp_online]          # optional: only these variants of the primitive
//       tolerance:                       # optional, per dtype of this matrix
//         f16: {atol: 1e-3, rtol: 1e-2}  # either or both; the other keeps the default
//       search: {strategy: halving, eta: 3, min_samples: 5}   # optional; default exhaustive
//       # or {strategy: random, samples: 50, seed: 1}, or {strategy: random, fraction: 0.1}
//
// Extents are decimal integers from 1 to 2^40, and each shape must pass the primitive's
// validate_shape. Expansion: the cartesian product of axis groups (a zip group is one group
// whose i-th point takes the i-th value of every member; every other axis is a group of its
// own), groups ordered by their earliest axis in the primitive's axis order, last group
// fastest; for each shape the dtypes in listed order. A problem seen before (same key, in
// any matrix) is kept only at its first place. More than 1,000,000 problems is an error.
//
// Every error reads "path:line:column: what was wrong; what was expected", pointing at the
// offending node, so that a typo in a long sweep file is found without bisecting it.
#include "tuner/shape_file.hpp"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "core/sha256.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

namespace {

constexpr int kMaxPow2Exponent = 40;
constexpr std::int64_t kMaxExtent = std::int64_t{1} << kMaxPow2Exponent;
// A typo'd range (a stop with three zeros too many) would otherwise expand for minutes.
constexpr std::int64_t kMaxProblems = 1'000'000;

const std::vector<std::string> kTopLevelKeys = {"name", "description", "matrices"};
const std::vector<std::string> kMatrixKeys = {"primitive", "dtypes", "axes", "zip", "variants", "tolerance", "search"};
const std::vector<std::string> kValueFormKeys = {"range", "pow2"};
const std::vector<std::string> kToleranceKeys = {"atol", "rtol"};
// Which `search:` keys each strategy takes; every strategy takes `strategy`.
const std::vector<std::string> kExhaustiveSearchKeys = {"strategy"};
const std::vector<std::string> kRandomSearchKeys = {"strategy", "samples", "fraction", "seed"};
const std::vector<std::string> kHalvingSearchKeys = {"strategy", "eta", "min_samples"};
const std::vector<std::string> kAllSearchKeys = {"strategy", "samples", "fraction", "seed", "eta", "min_samples"};
const std::string kSearchExample =
    "a map such as {strategy: halving, eta: 3, min_samples: 5} or {strategy: random, samples: 50, seed: 1}";

const std::string kValueForms =
    "an integer, a list, {range: [start, stop]}, {range: [start, stop, step]} or {pow2: [low, high]}";
const std::string kExtentRule = "an integer from 1 to 2^40 (" + std::to_string(kMaxExtent) + ")";

// For messages that list valid names, so that an empty list does not read as a cut-off one.
std::string or_none(std::string names) { return names.empty() ? "(none)" : names; }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return or_none(out);
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::vector<std::string> names;
  for (DType dtype : dtypes) names.emplace_back(dtype_name(dtype));
  return join(names);
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return node.size() == 0 ? "an empty list" : "a list";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  return "empty";
}

// A key and its value. An empty value (`key:` and nothing after it) is marked by yaml-cpp at
// the start of the next line, so errors about it point at the key instead.
struct Entry {
  YAML::Node key;
  YAML::Node value;

  std::string name() const { return key.Scalar(); }
  YAML::Mark mark() const { return value.IsNull() ? key.Mark() : value.Mark(); }
};

const Entry* find_entry(const std::vector<Entry>& entries, std::string_view name) {
  for (const auto& entry : entries)
    if (entry.name() == name) return &entry;
  return nullptr;
}

// What a tolerance entry changes; an absent field keeps the primitive's default.
struct ToleranceOverride {
  std::optional<double> atol;
  std::optional<double> rtol;
};

// One `matrices:` entry, checked and with its axis values spelled out.
struct Matrix {
  YAML::Mark mark;
  const Primitive* primitive = nullptr;
  std::vector<DType> dtypes;
  std::vector<std::vector<std::int64_t>> axis_values;  // in the primitive's axis order
  std::vector<std::vector<std::size_t>> axis_groups;   // axis positions; expansion order
  std::vector<std::string> variants;
  std::map<DType, ToleranceOverride> tolerances;
  SearchOptions search;
};

class ShapeFileParser {
 public:
  ShapeFileParser(const std::string& path, const Catalogue& catalogue) : path_(path), catalogue_(catalogue) {}

  ShapeFile parse(std::string_view text) const {
    const YAML::Node root = load_document(text);
    const auto entries = map_entries(root, root.Mark(), "the top level", kTopLevelKeys);
    ShapeFile file;
    file.path = path_;
    file.sha256 = sha256_hex(text);
    if (const Entry* name = find_entry(entries, "name")) file.name = scalar_text(*name);
    if (const Entry* description = find_entry(entries, "description")) file.description = scalar_text(*description);
    const Entry& matrices = require_entry(entries, "matrices", root.Mark(), "the top level");
    std::unordered_set<std::string> seen_keys;
    for (const YAML::Node& item : sequence_items(matrices)) expand(parse_matrix(item), file.problems, seen_keys);
    return file;
  }

 private:
  const std::string& path_;
  const Catalogue& catalogue_;
  mutable std::int64_t expanded_ = 0;  // problems every matrix so far expanded to, duplicates included

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& what, const std::string& expected) const {
    throw ShapeFileError(path_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": " +
                         what + "; expected " + expected);
  }

  // yaml-cpp's LoadAll loops without end (allocating a null document each turn) when its parser
  // stops on a token no node can start with, such as a ',' outside flow collections (fixed in
  // yaml-cpp 0.8.1, not in Debian's 0.7). So the documents are counted by driving the parser
  // ourselves, two at most, and the one document is then read with Load, which parses one. A
  // second "document" that no "---" or "..." begins is that stuck token.
  struct FirstNode : YAML::EventHandler {
    std::optional<YAML::Mark> mark;  // of the document's first node
    void at(const YAML::Mark& m) {
      if (!mark) mark = m;
    }
    void OnDocumentStart(const YAML::Mark&) override { mark.reset(); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark& m, YAML::anchor_t) override { at(m); }
    void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { at(m); }
    void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { at(m); }
    void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      at(m);
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      at(m);
    }
    void OnMapEnd() override {}
  };

  YAML::Node load_document(std::string_view text) const {
    YAML::Node root;
    try {
      std::istringstream stream{std::string(text)};
      YAML::Parser parser(stream);
      FirstNode first;
      int documents = 0;
      while (documents < 2 && parser.HandleNextDocument(first)) ++documents;
      if (documents == 0) fail(YAML::Mark(), "the file is empty", "a map with keys " + join(kTopLevelKeys));
      if (documents > 1) {
        // yaml-cpp would silently ignore every document after the first.
        if (const auto marker = second_document_mark(text))
          fail(*marker, "a second YAML document", "one document per shape file");
        fail(first.mark.value_or(YAML::Mark()), "malformed YAML: no node can begin here (a ',' outside [...] or {...}?)",
             "well-formed YAML (see shapes/README.md)");
      }
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      fail(e.mark, "malformed YAML: " + e.msg, "well-formed YAML (see shapes/README.md)");
    }
    if (root.IsNull()) fail(YAML::Mark(), "the file is empty", "a map with keys " + join(kTopLevelKeys));
    return root;
  }

  // Where a second document starts: the line after the first "---" or "..." after content, if any.
  static std::optional<YAML::Mark> second_document_mark(std::string_view text) {
    bool content = false;
    int line = 0;
    for (std::size_t begin = 0; begin < text.size(); ++line) {
      const std::size_t end = std::min(text.find('\n', begin), text.size());
      const std::string_view row = text.substr(begin, end - begin);
      begin = end + 1;
      const bool marker = row.substr(0, 3) == "---" || row.substr(0, 3) == "...";
      if (marker && content) {
        YAML::Mark mark;
        mark.line = line + 1;  // the document's first line, after its marker
        return mark;
      }
      const std::size_t first = row.find_first_not_of(" \t\r");
      if (!marker && first != std::string_view::npos && row[first] != '#' && row[first] != '%') content = true;
    }
    return std::nullopt;
  }

  // The entries of a map, each key a unique scalar from valid_keys (any scalar if empty).
  std::vector<Entry> map_entries(const YAML::Node& map, const YAML::Mark& mark, const std::string& where,
                                 const std::vector<std::string>& valid_keys = {}) const {
    if (!map.IsMap()) fail(mark, where + " is " + describe(map), "a map");
    std::vector<Entry> entries;
    std::unordered_set<std::string> names;  // a map of 60000 keys checked pairwise took half a minute
    for (auto it = map.begin(); it != map.end(); ++it) {
      const Entry entry{it->first, it->second};
      if (!entry.key.IsScalar()) fail(entry.key.Mark(), "a key in " + where + " is " + describe(entry.key), "a name");
      if (!valid_keys.empty() && !contains(valid_keys, entry.name()))
        fail(entry.key.Mark(), "unknown key '" + entry.name() + "' in " + where, "one of: " + join(valid_keys));
      // yaml-cpp keeps both copies of a repeated key and lookups see only the first.
      if (!names.insert(entry.name()).second)
        fail(entry.key.Mark(), "key '" + entry.name() + "' appears twice in " + where, "each key once");
      entries.push_back(entry);
    }
    return entries;
  }

  const Entry& require_entry(const std::vector<Entry>& entries, const std::string& name, const YAML::Mark& map_mark,
                             const std::string& where) const {
    if (const Entry* entry = find_entry(entries, name)) return *entry;
    fail(map_mark, where + " has no '" + name + "'", "a '" + name + ":' key");
  }

  std::vector<YAML::Node> sequence_items(const Entry& entry) const {
    if (!entry.value.IsSequence()) fail(entry.mark(), "'" + entry.name() + "' is " + describe(entry.value), "a list");
    if (entry.value.size() == 0) fail(entry.mark(), "'" + entry.name() + "' is an empty list", "at least one item");
    return {entry.value.begin(), entry.value.end()};
  }

  std::string scalar_text(const Entry& entry) const {
    if (!entry.value.IsScalar()) fail(entry.mark(), "'" + entry.name() + "' is " + describe(entry.value), "a string");
    return entry.value.Scalar();
  }

  std::string item_name(const YAML::Node& item, const std::string& what, const std::string& expected) const {
    if (!item.IsScalar()) fail(item.Mark(), what + " is " + describe(item), expected);
    return item.Scalar();
  }

  Matrix parse_matrix(const YAML::Node& node) const {
    const std::string where = "the matrix entry";
    const auto entries = map_entries(node, node.Mark(), where, kMatrixKeys);
    Matrix matrix;
    matrix.mark = node.Mark();
    matrix.primitive = parse_primitive(require_entry(entries, "primitive", node.Mark(), where));
    matrix.dtypes = parse_dtypes(require_entry(entries, "dtypes", node.Mark(), where), *matrix.primitive);
    matrix.axis_values = parse_axes(require_entry(entries, "axes", node.Mark(), where), *matrix.primitive);
    const Entry* zip = find_entry(entries, "zip");
    matrix.axis_groups =
        zip ? parse_zip(*zip, *matrix.primitive, matrix.axis_values) : order_groups({}, matrix.primitive->axes.size());
    if (const Entry* variants = find_entry(entries, "variants"))
      matrix.variants = parse_variants(*variants, *matrix.primitive);
    if (const Entry* tolerance = find_entry(entries, "tolerance"))
      matrix.tolerances = parse_tolerances(*tolerance, matrix.dtypes);
    if (const Entry* search = find_entry(entries, "search")) matrix.search = parse_search(*search);
    return matrix;
  }

  const Primitive* parse_primitive(const Entry& entry) const {
    const std::string name = scalar_text(entry);
    const Primitive* primitive = catalogue_.find_primitive(name);
    if (!primitive)
      fail(entry.mark(), "unknown primitive '" + name + "'", "one of: " + or_none(catalogue_.primitive_names()));
    return primitive;
  }

  std::vector<DType> parse_dtypes(const Entry& entry, const Primitive& primitive) const {
    const std::string allowed = "one of " + primitive.name + "'s dtypes: " + dtype_list(primitive.dtypes);
    std::vector<DType> dtypes;
    for (const YAML::Node& item : sequence_items(entry)) {
      const std::string name = item_name(item, "a dtype", allowed);
      const std::optional<DType> dtype = parse_dtype(name);
      if (!dtype || std::find(primitive.dtypes.begin(), primitive.dtypes.end(), *dtype) == primitive.dtypes.end())
        fail(item.Mark(), "dtype '" + name + "' is not one " + primitive.name + " supports", allowed);
      if (std::find(dtypes.begin(), dtypes.end(), *dtype) != dtypes.end())
        fail(item.Mark(), "dtype '" + name + "' is listed twice", "each dtype once");
      dtypes.push_back(*dtype);
    }
    return dtypes;
  }

  std::vector<std::vector<std::int64_t>> parse_axes(const Entry& entry, const Primitive& primitive) const {
    const std::string expected = "exactly " + primitive.name + "'s axes: " + join(primitive.axes);
    const auto entries = map_entries(entry.value, entry.mark(), "'axes'");
    for (const Entry& axis : entries)
      if (!contains(primitive.axes, axis.name()))
        fail(axis.key.Mark(), primitive.name + " has no axis '" + axis.name() + "'", expected);
    std::vector<std::vector<std::int64_t>> values;
    for (const std::string& axis : primitive.axes) {
      const Entry* given = find_entry(entries, axis);
      if (!given) fail(entry.mark(), "axis '" + axis + "' of " + primitive.name + " is missing", expected);
      values.push_back(parse_axis_values(*given));
    }
    return values;
  }

  std::vector<std::int64_t> parse_axis_values(const Entry& axis) const {
    std::vector<std::int64_t> values;
    if (axis.value.IsNull()) fail(axis.mark(), "axis '" + axis.name() + "' has no values", kValueForms);
    if (!axis.value.IsSequence()) {
      append_values(axis.value, values);
      return values;
    }
    if (axis.value.size() == 0) fail(axis.mark(), "axis '" + axis.name() + "' is an empty list", "at least one value");
    for (const YAML::Node& item : axis.value) {
      if (item.IsSequence())
        fail(item.Mark(), "a list inside the list of axis '" + axis.name() + "'",
             "integers, {range: ...} or {pow2: ...}");
      append_values(item, values);
    }
    return values;
  }

  // One integer, or a {range: ...} or {pow2: ...} map.
  void append_values(const YAML::Node& node, std::vector<std::int64_t>& values) const {
    if (!node.IsMap()) {
      values.push_back(parse_extent(node));
      return;
    }
    const auto entries = map_entries(node, node.Mark(), "a value map", kValueFormKeys);
    if (entries.size() != 1)
      fail(node.Mark(), "a value map with " + std::to_string(entries.size()) + " keys", "exactly one of: range, pow2");
    if (entries.front().name() == "range")
      append_range(entries.front(), values);
    else
      append_pow2(entries.front(), values);
  }

  std::int64_t parse_integer(const YAML::Node& node, const std::string& expected) const {
    if (!node.IsScalar()) fail(node.Mark(), "the value is " + describe(node), expected);
    const std::string& text = node.Scalar();
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc::result_out_of_range) fail(node.Mark(), "'" + text + "' is too large", expected);
    if (error != std::errc{} || end != text.data() + text.size())
      fail(node.Mark(), "'" + text + "' is not an integer", expected);
    return value;
  }

  std::int64_t parse_extent(const YAML::Node& node) const {
    const std::int64_t extent = parse_integer(node, kExtentRule);
    if (extent < 1 || extent > kMaxExtent)
      fail(node.Mark(), "extent " + std::to_string(extent) + " is out of range", kExtentRule);
    return extent;
  }

  std::vector<YAML::Node> form_arguments(const Entry& form, std::size_t min_count, std::size_t max_count,
                                         const std::string& expected) const {
    if (!form.value.IsSequence() || form.value.size() < min_count || form.value.size() > max_count)
      fail(form.mark(),
           "'" + form.name() + "' is " + describe(form.value) +
               (form.value.IsSequence() ? " of " + std::to_string(form.value.size()) + " items" : ""),
           expected);
    return {form.value.begin(), form.value.end()};
  }

  void append_range(const Entry& range, std::vector<std::int64_t>& values) const {
    const std::string expected =
        "{range: [start, stop]} or {range: [start, stop, step]} with 1 <= start <= stop <= 2^40, step >= 1";
    const auto arguments = form_arguments(range, 2, 3, expected);
    const std::int64_t start = parse_extent(arguments[0]);
    const std::int64_t stop = parse_extent(arguments[1]);
    const std::int64_t step = arguments.size() == 3 ? parse_integer(arguments[2], expected) : 1;
    if (stop < start)
      fail(arguments[1].Mark(), "range stop " + std::to_string(stop) + " is below start " + std::to_string(start),
           expected);
    if (step < 1) fail(arguments[2].Mark(), "range step " + std::to_string(step) + " is below 1", expected);
    const std::int64_t count = (stop - start) / step + 1;
    if (static_cast<std::int64_t>(values.size()) + count > kMaxProblems)
      fail(range.mark(), "range yields " + std::to_string(count) + " values",
           "at most " + std::to_string(kMaxProblems) + " problems per shape file (is stop or step mistyped?)");
    for (std::int64_t value = start; value <= stop; value += step) values.push_back(value);
  }

  void append_pow2(const Entry& pow2, std::vector<std::int64_t>& values) const {
    const std::string expected = "{pow2: [low, high]} with 0 <= low <= high <= " + std::to_string(kMaxPow2Exponent);
    const auto arguments = form_arguments(pow2, 2, 2, expected);
    std::int64_t exponents[2];
    for (int i = 0; i < 2; ++i) {
      exponents[i] = parse_integer(arguments[i], expected);
      if (exponents[i] < 0 || exponents[i] > kMaxPow2Exponent)
        fail(arguments[i].Mark(),
             "pow2 exponent " + std::to_string(exponents[i]) + " is outside 0.." + std::to_string(kMaxPow2Exponent),
             expected);
    }
    if (exponents[1] < exponents[0])
      fail(arguments[1].Mark(),
           "pow2 high " + std::to_string(exponents[1]) + " is below low " + std::to_string(exponents[0]), expected);
    for (std::int64_t exponent = exponents[0]; exponent <= exponents[1]; ++exponent)
      values.push_back(std::int64_t{1} << exponent);
  }

  // `zip: [a, b]` is one group, `zip: [[a, b], [c, d]]` several.
  std::vector<std::vector<std::size_t>> parse_zip(const Entry& zip, const Primitive& primitive,
                                                  const std::vector<std::vector<std::int64_t>>& axis_values) const {
    const auto items = sequence_items(zip);
    const bool nested = items.front().IsSequence();
    std::vector<YAML::Node> group_nodes = nested ? items : std::vector<YAML::Node>{zip.value};
    std::vector<std::vector<std::size_t>> groups;
    std::vector<bool> zipped(primitive.axes.size(), false);
    for (const YAML::Node& group_node : group_nodes) {
      if (!group_node.IsSequence() || group_node.size() == 0)
        fail(group_node.Mark(), "a zip group is " + describe(group_node), "[a, b] or [[a, b], [c, d]] with axis names");
      groups.push_back(parse_zip_group(group_node, primitive, zipped));
      check_equal_lengths(group_node, groups.back(), primitive, axis_values);
    }
    return order_groups(groups, primitive.axes.size());
  }

  std::vector<std::size_t> parse_zip_group(const YAML::Node& group_node, const Primitive& primitive,
                                           std::vector<bool>& zipped) const {
    const std::string expected = "axis names of " + primitive.name + ": " + join(primitive.axes);
    std::vector<std::size_t> group;
    for (const YAML::Node& item : group_node) {
      const std::string name = item_name(item, "a zipped axis", expected);
      const auto position = std::find(primitive.axes.begin(), primitive.axes.end(), name) - primitive.axes.begin();
      if (position == static_cast<std::ptrdiff_t>(primitive.axes.size()))
        fail(item.Mark(), "zip names '" + name + "', which is not an axis of " + primitive.name, expected);
      if (zipped[position])
        fail(item.Mark(), "axis '" + name + "' is zipped twice", "each axis in at most one zip group");
      zipped[position] = true;
      group.push_back(static_cast<std::size_t>(position));
    }
    return group;
  }

  void check_equal_lengths(const YAML::Node& group_node, const std::vector<std::size_t>& group,
                           const Primitive& primitive,
                           const std::vector<std::vector<std::int64_t>>& axis_values) const {
    std::string lengths;
    bool equal = true;
    for (std::size_t position : group) {
      if (!lengths.empty()) lengths += ", ";
      lengths += primitive.axes[position] + ": " + std::to_string(axis_values[position].size());
      equal = equal && axis_values[position].size() == axis_values[group.front()].size();
    }
    if (!equal)
      fail(group_node.Mark(), "zipped axes have unequal lengths (" + lengths + ")",
           "the same number of values on every zipped axis");
  }

  // Adds a group of its own for every axis not zipped, and orders all groups by their
  // earliest axis, so that expansion follows the primitive's axis order.
  static std::vector<std::vector<std::size_t>> order_groups(std::vector<std::vector<std::size_t>> groups,
                                                            std::size_t axis_count) {
    for (std::size_t position = 0; position < axis_count; ++position) {
      const bool grouped = std::any_of(groups.begin(), groups.end(), [&](const auto& group) {
        return std::find(group.begin(), group.end(), position) != group.end();
      });
      if (!grouped) groups.push_back({position});
    }
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
    });
    return groups;
  }

  std::vector<std::string> parse_variants(const Entry& entry, const Primitive& primitive) const {
    const std::string allowed =
        "one of " + primitive.name + "'s variants: " + or_none(catalogue_.variant_names(primitive.name));
    std::vector<std::string> variants;
    for (const YAML::Node& item : sequence_items(entry)) {
      const std::string name = item_name(item, "a variant", allowed);
      if (!catalogue_.find_variant(primitive.name, name))
        fail(item.Mark(), primitive.name + " has no variant '" + name + "'", allowed);
      if (contains(variants, name)) fail(item.Mark(), "variant '" + name + "' is listed twice", "each variant once");
      variants.push_back(name);
    }
    return variants;
  }

  std::map<DType, ToleranceOverride> parse_tolerances(const Entry& entry, const std::vector<DType>& dtypes) const {
    std::map<DType, ToleranceOverride> overrides;
    for (const Entry& per_dtype : map_entries(entry.value, entry.mark(), "'tolerance'")) {
      const std::optional<DType> dtype = parse_dtype(per_dtype.name());
      if (!dtype || std::find(dtypes.begin(), dtypes.end(), *dtype) == dtypes.end())
        fail(per_dtype.key.Mark(), "tolerance for '" + per_dtype.name() + "', which is not a dtype of this matrix",
             "one of: " + dtype_list(dtypes));
      overrides[*dtype] = parse_tolerance_override(per_dtype);
    }
    return overrides;
  }

  ToleranceOverride parse_tolerance_override(const Entry& per_dtype) const {
    const std::string where = "the tolerance for " + per_dtype.name();
    const auto fields = map_entries(per_dtype.value, per_dtype.mark(), where, kToleranceKeys);
    if (fields.empty()) fail(per_dtype.mark(), where + " is empty", "atol, rtol or both");
    ToleranceOverride result;
    if (const Entry* atol = find_entry(fields, "atol")) result.atol = parse_bound(*atol);
    if (const Entry* rtol = find_entry(fields, "rtol")) result.rtol = parse_bound(*rtol);
    return result;
  }

  double parse_bound(const Entry& field) const {
    const std::string expected = "a finite number >= 0";
    if (!field.value.IsScalar()) fail(field.mark(), field.name() + " is " + describe(field.value), expected);
    const std::string& text = field.value.Scalar();
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
      fail(field.mark(), field.name() + " '" + text + "' is not a number", expected);
    if (value < 0) fail(field.mark(), field.name() + " " + text + " is negative", expected);
    return value;
  }

  SearchOptions parse_search(const Entry& entry) const {
    const std::string strategies = "one of: " + std::string(kSearchStrategyNames);
    if (!entry.value.IsMap()) fail(entry.mark(), "'search' is " + describe(entry.value), kSearchExample);
    const auto fields = map_entries(entry.value, entry.mark(), "'search'", kAllSearchKeys);
    const Entry* strategy_entry = find_entry(fields, "strategy");
    if (!strategy_entry) fail(entry.mark(), "'search' has no 'strategy'", "a 'strategy:' key, " + strategies);
    if (!strategy_entry->value.IsScalar())
      fail(strategy_entry->mark(), "'strategy' is " + describe(strategy_entry->value), strategies);
    const std::string name = strategy_entry->value.Scalar();
    const std::optional<SearchStrategy> strategy = parse_search_strategy(name);
    if (!strategy) fail(strategy_entry->mark(), "unknown search strategy '" + name + "'", strategies);

    SearchOptions search;
    search.strategy = *strategy;
    const std::vector<std::string> valid = *strategy == SearchStrategy::random    ? kRandomSearchKeys
                                           : *strategy == SearchStrategy::halving ? kHalvingSearchKeys
                                                                                  : kExhaustiveSearchKeys;
    for (const Entry& field : fields) {
      if (!contains(valid, field.name()))
        fail(field.key.Mark(), "'" + field.name() + "' does not apply to " + name + " search",
             name + " search's keys: " + join(valid));
      if (field.name() == "samples") search.samples = parse_search_integer(field, 1, 1'000'000'000);
      if (field.name() == "seed")
        search.seed =
            static_cast<std::uint64_t>(parse_search_integer(field, 0, std::numeric_limits<std::int64_t>::max()));
      if (field.name() == "eta") search.eta = static_cast<int>(parse_search_integer(field, 2, 100));
      if (field.name() == "min_samples") search.min_samples = static_cast<int>(parse_search_integer(field, 1, 100'000));
      if (field.name() == "fraction") search.fraction = parse_fraction(field);
    }
    if (search.samples && search.fraction)
      fail(find_entry(fields, "fraction")->key.Mark(), "'samples' and 'fraction' are both given",
           "one of them: a count of candidates, or a fraction of the supported ones");
    return search;
  }

  std::int64_t parse_search_integer(const Entry& field, std::int64_t low, std::int64_t high) const {
    const std::string expected =
        field.name() + ": an integer from " + std::to_string(low) + " to " + std::to_string(high);
    if (field.value.IsNull()) fail(field.mark(), "'" + field.name() + "' has no value", expected);
    const std::int64_t value = parse_integer(field.value, expected);
    if (value < low || value > high)
      fail(field.mark(), field.name() + " " + std::to_string(value) + " is out of range", expected);
    return value;
  }

  double parse_fraction(const Entry& field) const {
    const std::string expected = "fraction: a number above 0 and at most 1";
    if (!field.value.IsScalar()) fail(field.mark(), "fraction is " + describe(field.value), expected);
    const std::string& text = field.value.Scalar();
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
      fail(field.mark(), "fraction '" + text + "' is not a number", expected);
    if (value <= 0 || value > 1) fail(field.mark(), "fraction " + text + " is out of range", expected);
    return value;
  }

  // Expansion is work even where it adds nothing (a matrix repeated through 89 YAML aliases
  // expanded 89 million shapes to keep a million): the points every matrix expands to are
  // counted together, duplicates included, and bounded before any is made.
  void check_problem_count(const Matrix& matrix) const {
    std::int64_t count = static_cast<std::int64_t>(matrix.dtypes.size());
    for (const auto& group : matrix.axis_groups) {
      count *= static_cast<std::int64_t>(matrix.axis_values[group.front()].size());
      if (count > kMaxProblems)
        fail(matrix.mark, "the matrix expands to more than " + std::to_string(kMaxProblems) + " problems",
             "at most " + std::to_string(kMaxProblems) + " problems per shape file (is a range mistyped?)");
    }
    expanded_ += count;
    if (expanded_ > kMaxProblems)
      fail(matrix.mark, "with this matrix the file's matrices expand to more than " + std::to_string(kMaxProblems) +
                            " problems in all (a matrix repeated through aliases counts each time)",
           "at most " + std::to_string(kMaxProblems) + " problems per shape file");
  }

  Shape make_shape(const Matrix& matrix, const std::vector<std::size_t>& group_index) const {
    std::vector<std::pair<std::string, std::int64_t>> dims(matrix.axis_values.size());
    for (std::size_t g = 0; g < matrix.axis_groups.size(); ++g)
      for (std::size_t position : matrix.axis_groups[g])
        dims[position] = {matrix.primitive->axes[position], matrix.axis_values[position][group_index[g]]};
    Shape shape(std::move(dims));
    if (matrix.primitive->validate_shape) {
      const Support support = matrix.primitive->validate_shape(shape);
      if (!support.ok)
        fail(matrix.mark,
             "shape " + shape.key() + " is not valid for " + matrix.primitive->name + ": " + support.reason,
             "axis values that " + matrix.primitive->name + " accepts");
    }
    return shape;
  }

  static PlannedProblem plan(const Matrix& matrix, Problem problem) {
    PlannedProblem planned;
    planned.problem = std::move(problem);
    const DType dtype = planned.problem.dtype;
    planned.tolerance = tolerance_for(*matrix.primitive, planned.problem);
    if (const auto found = matrix.tolerances.find(dtype); found != matrix.tolerances.end()) {
      planned.tolerance.atol = found->second.atol.value_or(planned.tolerance.atol);
      planned.tolerance.rtol = found->second.rtol.value_or(planned.tolerance.rtol);
      planned.tolerance_overridden = true;
    }
    planned.variants = matrix.variants;
    planned.search = matrix.search;
    planned.source_line = matrix.mark.line + 1;
    return planned;
  }

  // Odometer over the axis groups, last group fastest; dtypes innermost.
  void expand(const Matrix& matrix, std::vector<PlannedProblem>& problems,
              std::unordered_set<std::string>& seen_keys) const {
    check_problem_count(matrix);
    std::vector<std::size_t> group_index(matrix.axis_groups.size(), 0);
    while (true) {
      const Shape shape = make_shape(matrix, group_index);
      for (DType dtype : matrix.dtypes) {
        Problem problem{matrix.primitive->name, dtype, shape};
        if (seen_keys.insert(problem.key()).second) problems.push_back(plan(matrix, std::move(problem)));
      }
      if (!advance(matrix, group_index)) break;
    }
    if (static_cast<std::int64_t>(problems.size()) > kMaxProblems)
      fail(matrix.mark, "with this matrix the file holds more than " + std::to_string(kMaxProblems) + " problems",
           "at most " + std::to_string(kMaxProblems) + " problems per shape file");
  }

  static bool advance(const Matrix& matrix, std::vector<std::size_t>& group_index) {
    for (std::size_t g = group_index.size(); g-- > 0;) {
      if (++group_index[g] < matrix.axis_values[matrix.axis_groups[g].front()].size()) return true;
      group_index[g] = 0;
    }
    return false;
  }
};

// A shape file is a regular file of at most this many bytes: a FIFO would block the read
// forever and /dev/zero would never end it.
constexpr std::size_t kMaxShapeFileBytes = std::size_t{1} << 20;

std::string read_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw ShapeFileError(path + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) throw ShapeFileError(path + ": is a directory; expected a YAML shape file");
  if (!S_ISREG(info.st_mode))
    throw ShapeFileError(path + ": not a regular file (a pipe, a device or a socket); expected a YAML shape file");
  if (static_cast<std::uintmax_t>(info.st_size) > kMaxShapeFileBytes)
    throw ShapeFileError(path + ": " + std::to_string(info.st_size) + " bytes; a shape file is at most " +
                         std::to_string(kMaxShapeFileBytes) + " bytes (1 MiB)");
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw ShapeFileError(path + ": cannot read: " + std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  std::size_t count = 0;
  while ((count = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    bytes.append(buffer, count);
    if (bytes.size() > kMaxShapeFileBytes)  // it grew after the stat
      throw ShapeFileError(path + ": more than " + std::to_string(kMaxShapeFileBytes) + " bytes; a shape file is at most 1 MiB");
  }
  if (std::ferror(file.get())) throw ShapeFileError(path + ": cannot read: " + std::strerror(errno));
  return bytes;
}

}  // namespace

ShapeFile load_shape_file(const std::string& path, const Catalogue& catalogue) {
  return parse_shape_text(read_file(path), path, catalogue);
}

ShapeFile parse_shape_text(std::string_view text, const std::string& path_for_messages, const Catalogue& catalogue) {
  return ShapeFileParser(path_for_messages, catalogue).parse(text);
}

}  // namespace shapetune
