#include <gtest/gtest.h>

#include <chrono>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr std::string_view kPath = "test.yaml";

Tolerance fake_softmax_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return {1e-4, 1e-3};
    case DType::bf16: return {1e-3, 8e-3};
    default: return {1e-6, 1e-5};
  }
}

Primitive fake_softmax() {
  Primitive softmax;
  softmax.name = "softmax";
  softmax.axes = {"rows", "cols"};
  softmax.dtypes = {DType::f32, DType::f16, DType::bf16};
  softmax.tolerance = fake_softmax_tolerance;
  softmax.validate_shape = [](const Shape& shape) {
    return shape.at("cols") > 1'000'000 ? Support::no("cols above 1e6 are out of this test's reach") : Support::yes();
  };
  return softmax;
}

// Four axes, for zip groups that interleave; no tolerance or validate_shape, to see that
// those may be left unset.
Primitive fake_attention() {
  Primitive attention;
  attention.name = "attention";
  attention.axes = {"batch", "heads", "rows", "cols"};
  attention.dtypes = {DType::f32};
  return attention;
}

Variant fake_variant(std::string name) {
  Variant variant;
  variant.primitive = "softmax";
  variant.name = std::move(name);
  return variant;
}

const Catalogue& test_catalogue() {
  static const Catalogue catalogue = [] {
    Catalogue built;
    built.add(fake_softmax());
    built.add(fake_attention());
    built.add(fake_variant("warp_online"));
    built.add(fake_variant("block_online"));
    return built;
  }();
  return catalogue;
}

ShapeFile parse(std::string_view yaml) { return parse_shape_text(yaml, std::string(kPath), test_catalogue()); }

std::vector<std::string> problem_keys(std::string_view yaml) {
  std::vector<std::string> keys;
  for (const auto& planned : parse(yaml).problems) keys.push_back(planned.problem.key());
  return keys;
}

// The message must start with "test.yaml:<location>: " and contain every part.
::testing::AssertionResult fails_with(std::string_view yaml, std::string_view location,
                                      std::initializer_list<std::string_view> parts) {
  std::string message;
  try {
    parse(yaml);
    return ::testing::AssertionFailure() << "parsed without error";
  } catch (const ShapeFileError& e) {
    message = e.what();
  }
  const std::string prefix = std::string(kPath) + ":" + std::string(location) + ": ";
  if (!message.starts_with(prefix)) return ::testing::AssertionFailure() << "no '" << prefix << "' in: " << message;
  for (std::string_view part : parts)
    if (message.find(part) == std::string::npos)
      return ::testing::AssertionFailure() << "no '" << part << "' in: " << message;
  return ::testing::AssertionSuccess() << message;
}

// A softmax matrix with the given axes line and f32 only.
std::string softmax_with_axes(std::string_view axes) {
  return "matrices:\n  - primitive: softmax\n    dtypes: [f32]\n    axes: " + std::string(axes) + "\n";
}

// Values of one axis, for matrices whose other axes and dtypes have one value each.
std::vector<std::int64_t> cols_of(std::string_view cols_yaml) {
  std::vector<std::int64_t> cols;
  for (const auto& planned : parse(softmax_with_axes("{rows: 1, cols: " + std::string(cols_yaml) + "}")).problems)
    cols.push_back(planned.problem.shape.at("cols"));
  return cols;
}

using Values = std::vector<std::int64_t>;
using Keys = std::vector<std::string>;

// ---- the catalogue the tests build ------------------------------------------------------

TEST(Catalogue, FindsWhatWasAddedInRegistrationOrder) {
  const Catalogue& catalogue = test_catalogue();
  ASSERT_NE(catalogue.find_primitive("softmax"), nullptr);
  EXPECT_EQ(catalogue.find_primitive("softmax")->axes, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(catalogue.find_primitive("layernorm"), nullptr);
  EXPECT_NE(catalogue.find_variant("softmax", "block_online"), nullptr);
  EXPECT_EQ(catalogue.find_variant("attention", "block_online"), nullptr);
  EXPECT_EQ(catalogue.primitive_names(), "softmax, attention");
  EXPECT_EQ(catalogue.variant_names("softmax"), "warp_online, block_online");
  EXPECT_EQ(catalogue.variant_names("attention"), "");
  ASSERT_EQ(catalogue.primitives().size(), 2u);
  EXPECT_EQ(catalogue.primitives()[1]->name, "attention");
  ASSERT_EQ(catalogue.variants("softmax").size(), 2u);
  EXPECT_EQ(catalogue.variants("softmax")[0]->name, "warp_online");
  EXPECT_TRUE(catalogue.variants("attention").empty());
}

TEST(Catalogue, VariantOfAnUnregisteredPrimitiveIsALogicError) {
  Catalogue catalogue;
  EXPECT_THROW(catalogue.add(fake_variant("warp_online")), std::logic_error);
  catalogue.add(fake_softmax());
  EXPECT_NO_THROW(catalogue.add(fake_variant("warp_online")));
}

TEST(Catalogue, DuplicateRegistrationsAreLogicErrors) {
  Catalogue catalogue;
  catalogue.add(fake_softmax());
  catalogue.add(fake_variant("warp_online"));
  EXPECT_THROW(catalogue.add(fake_softmax()), std::logic_error);
  EXPECT_THROW(catalogue.add(fake_variant("warp_online")), std::logic_error);
}

TEST(TensorSpec, ElementsAndBytes) {
  const TensorSpec logits{"x", DType::bf16, {3, 5, 7}};
  EXPECT_EQ(logits.elements(), 105);
  EXPECT_EQ(logits.bytes(), 210);
  const TensorSpec scalar{"loss", DType::f32, {}};
  EXPECT_EQ(scalar.elements(), 1);
  EXPECT_EQ(scalar.bytes(), 4);
}

// ---- value forms ------------------------------------------------------------------------

TEST(ShapeFileValues, SingleInteger) { EXPECT_EQ(cols_of("4096"), (Values{4096})); }

TEST(ShapeFileValues, ListOfIntegersKeepsItsOrder) { EXPECT_EQ(cols_of("[1024, 7, 1]"), (Values{1024, 7, 1})); }

TEST(ShapeFileValues, RangeIncludesStop) { EXPECT_EQ(cols_of("{range: [1000, 1010, 5]}"), (Values{1000, 1005, 1010})); }

TEST(ShapeFileValues, RangeStepDefaultsToOne) { EXPECT_EQ(cols_of("{range: [3, 6]}"), (Values{3, 4, 5, 6})); }

TEST(ShapeFileValues, RangeStopsBeforeOvershooting) { EXPECT_EQ(cols_of("{range: [1, 10, 4]}"), (Values{1, 5, 9})); }

TEST(ShapeFileValues, RangeOfOneValue) { EXPECT_EQ(cols_of("{range: [8, 8]}"), (Values{8})); }

TEST(ShapeFileValues, Pow2IsInclusive) { EXPECT_EQ(cols_of("{pow2: [5, 7]}"), (Values{32, 64, 128})); }

TEST(ShapeFileValues, Pow2Extremes) {
  EXPECT_EQ(cols_of("{pow2: [0, 1]}"), (Values{1, 2}));
  EXPECT_EQ(parse(softmax_with_axes("{rows: {pow2: [40, 40]}, cols: 8}")).problems.at(0).problem.shape.at("rows"),
            std::int64_t{1} << 40);
}

TEST(ShapeFileValues, ListMixesIntegersRangesAndPow2) {
  EXPECT_EQ(cols_of("[1, {pow2: [4, 6]}, 1000, {range: [2, 3]}]"), (Values{1, 16, 32, 64, 1000, 2, 3}));
}

TEST(ShapeFileValues, BlockStyleListsWork) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes:
      - f16
    axes:
      rows:
        - 2
        - range: [5, 6]
      cols: 8
)";
  EXPECT_EQ(problem_keys(yaml),
            (Keys{"softmax/f16/rows=2,cols=8", "softmax/f16/rows=5,cols=8", "softmax/f16/rows=6,cols=8"}));
}

// ---- expansion order --------------------------------------------------------------------

TEST(ShapeFileExpansion, CartesianProductLastAxisFastest) {
  EXPECT_EQ(problem_keys(softmax_with_axes("{rows: [1, 2], cols: [10, 20, 30]}")),
            (Keys{"softmax/f32/rows=1,cols=10", "softmax/f32/rows=1,cols=20", "softmax/f32/rows=1,cols=30",
                  "softmax/f32/rows=2,cols=10", "softmax/f32/rows=2,cols=20", "softmax/f32/rows=2,cols=30"}));
}

TEST(ShapeFileExpansion, PrimitiveAxisOrderWinsOverFileOrder) {
  EXPECT_EQ(problem_keys(softmax_with_axes("{cols: [10, 20], rows: [1, 2]}")),
            (Keys{"softmax/f32/rows=1,cols=10", "softmax/f32/rows=1,cols=20", "softmax/f32/rows=2,cols=10",
                  "softmax/f32/rows=2,cols=20"}));
}

TEST(ShapeFileExpansion, DtypesAreInnermostInListedOrder) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [bf16, f32]
    axes: {rows: [1, 2], cols: 8}
)";
  EXPECT_EQ(problem_keys(yaml), (Keys{"softmax/bf16/rows=1,cols=8", "softmax/f32/rows=1,cols=8",
                                      "softmax/bf16/rows=2,cols=8", "softmax/f32/rows=2,cols=8"}));
}

TEST(ShapeFileExpansion, FlatZipAdvancesAxesTogether) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: [1, 2, 3], cols: {range: [10, 30, 10]}}
    zip: [cols, rows]
)";
  EXPECT_EQ(problem_keys(yaml),
            (Keys{"softmax/f32/rows=1,cols=10", "softmax/f32/rows=2,cols=20", "softmax/f32/rows=3,cols=30"}));
}

// Groups follow the position of their earliest axis ({batch, cols} before {heads, rows}),
// not the order the file lists them in nor their first-named axis; the last group is fastest.
TEST(ShapeFileExpansion, NestedZipGroupsFollowTheirEarliestAxis) {
  const std::string yaml = R"(matrices:
  - primitive: attention
    dtypes: [f32]
    axes: {batch: [1, 2], heads: [4, 8, 16], rows: [100, 200, 300], cols: [64, 128]}
    zip: [[heads, rows], [cols, batch]]
)";
  EXPECT_EQ(
      problem_keys(yaml),
      (Keys{"attention/f32/batch=1,heads=4,rows=100,cols=64", "attention/f32/batch=1,heads=8,rows=200,cols=64",
            "attention/f32/batch=1,heads=16,rows=300,cols=64", "attention/f32/batch=2,heads=4,rows=100,cols=128",
            "attention/f32/batch=2,heads=8,rows=200,cols=128", "attention/f32/batch=2,heads=16,rows=300,cols=128"}));
}

// rows sits between the zipped heads and cols in axis order, yet the group {heads, cols} is
// placed by heads, so rows, a group of its own after it, runs fastest.
TEST(ShapeFileExpansion, ZipGroupAmongUnzippedAxes) {
  const std::string yaml = R"(matrices:
  - primitive: attention
    dtypes: [f32]
    axes: {batch: [1, 2], heads: [4, 8], rows: [7, 9], cols: [64, 128]}
    zip: [heads, cols]
)";
  EXPECT_EQ(problem_keys(yaml),
            (Keys{"attention/f32/batch=1,heads=4,rows=7,cols=64", "attention/f32/batch=1,heads=4,rows=9,cols=64",
                  "attention/f32/batch=1,heads=8,rows=7,cols=128", "attention/f32/batch=1,heads=8,rows=9,cols=128",
                  "attention/f32/batch=2,heads=4,rows=7,cols=64", "attention/f32/batch=2,heads=4,rows=9,cols=64",
                  "attention/f32/batch=2,heads=8,rows=7,cols=128", "attention/f32/batch=2,heads=8,rows=9,cols=128"}));
}

TEST(ShapeFileExpansion, DuplicatesWithinAMatrixAreKeptOnceAtTheirFirstPlace) {
  EXPECT_EQ(problem_keys(softmax_with_axes("{rows: [2, 1, 2, {range: [1, 3]}], cols: 8}")),
            (Keys{"softmax/f32/rows=2,cols=8", "softmax/f32/rows=1,cols=8", "softmax/f32/rows=3,cols=8"}));
}

TEST(ShapeFileExpansion, DuplicatesAcrossMatricesKeepTheFirstMatrixSettings) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f16]
    axes: {rows: 1, cols: [8, 16]}
    variants: [warp_online]
  - primitive: softmax
    dtypes: [f32, f16]
    axes: {rows: 1, cols: [16, 32]}
    tolerance: {f16: {atol: 0.5}}
)";
  const ShapeFile file = parse(yaml);
  std::vector<std::string> keys;
  for (const auto& planned : file.problems) keys.push_back(planned.problem.key());
  EXPECT_EQ(keys, (Keys{"softmax/f16/rows=1,cols=8", "softmax/f16/rows=1,cols=16", "softmax/f32/rows=1,cols=16",
                        "softmax/f32/rows=1,cols=32", "softmax/f16/rows=1,cols=32"}));
  const PlannedProblem& repeated = file.problems[1];
  EXPECT_EQ(repeated.source_line, 2);
  EXPECT_EQ(repeated.variants, (std::vector<std::string>{"warp_online"}));
  EXPECT_FALSE(repeated.tolerance_overridden);
  EXPECT_EQ(file.problems[4].source_line, 6);
  EXPECT_TRUE(file.problems[4].tolerance_overridden);
}

// ---- what each problem carries ----------------------------------------------------------

TEST(ShapeFileFields, NameDescriptionPathAndHash) {
  const std::string yaml = R"(name: quick
description: one minute on a GPU
matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1, cols: 8}
)";
  const ShapeFile file = parse(yaml);
  EXPECT_EQ(file.name, "quick");
  EXPECT_EQ(file.description, "one minute on a GPU");
  EXPECT_EQ(file.path, kPath);
  EXPECT_EQ(file.sha256, sha256_hex(yaml));
}

TEST(ShapeFileFields, NameAndDescriptionAreOptional) {
  const ShapeFile file = parse(softmax_with_axes("{rows: 1, cols: 8}"));
  EXPECT_EQ(file.name, "");
  EXPECT_EQ(file.description, "");
  EXPECT_EQ(file.problems.size(), 1u);
}

TEST(ShapeFileFields, DefaultsComeFromThePrimitive) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32, f16, bf16]
    axes: {rows: 1, cols: 8}
)";
  const ShapeFile file = parse(yaml);
  ASSERT_EQ(file.problems.size(), 3u);
  for (const auto& planned : file.problems) {
    EXPECT_EQ(planned.tolerance, fake_softmax_tolerance(planned.problem.dtype)) << planned.problem.key();
    EXPECT_FALSE(planned.tolerance_overridden);
    EXPECT_TRUE(planned.variants.empty());
    EXPECT_EQ(planned.source_line, 2);
  }
}

TEST(ShapeFileFields, PrimitiveWithoutToleranceFunctionGetsZeroTolerance) {
  const std::string yaml = R"(matrices:
  - primitive: attention
    dtypes: [f32]
    axes: {batch: 1, heads: 1, rows: 1, cols: 1}
)";
  EXPECT_EQ(parse(yaml).problems.at(0).tolerance, Tolerance{});
}

TEST(ShapeFileFields, ToleranceOverridesOnlyTheGivenDtypeAndFields) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32, f16, bf16]
    axes: {rows: 1, cols: 8}
    tolerance:
      f16: {atol: 1e-3, rtol: 0.02}
      bf16: {rtol: 0}
)";
  const ShapeFile file = parse(yaml);
  ASSERT_EQ(file.problems.size(), 3u);
  EXPECT_EQ(file.problems[0].tolerance, fake_softmax_tolerance(DType::f32));
  EXPECT_FALSE(file.problems[0].tolerance_overridden);
  EXPECT_EQ(file.problems[1].tolerance, (Tolerance{1e-3, 0.02}));
  EXPECT_TRUE(file.problems[1].tolerance_overridden);
  EXPECT_EQ(file.problems[2].tolerance, (Tolerance{fake_softmax_tolerance(DType::bf16).atol, 0}));
  EXPECT_TRUE(file.problems[2].tolerance_overridden);
}

TEST(ShapeFileFields, VariantsAndSourceLinePerMatrix) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1, cols: 8}
    variants: [block_online, warp_online]

  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 2, cols: 8}
)";
  const ShapeFile file = parse(yaml);
  ASSERT_EQ(file.problems.size(), 2u);
  EXPECT_EQ(file.problems[0].variants, (std::vector<std::string>{"block_online", "warp_online"}));
  EXPECT_EQ(file.problems[0].source_line, 2);
  EXPECT_TRUE(file.problems[1].variants.empty());
  EXPECT_EQ(file.problems[1].source_line, 7);
}

TEST(ShapeFileFields, SearchDefaultsToExhaustiveAndIsPerMatrix) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1, cols: 8}
    search: {strategy: halving, eta: 4, min_samples: 7}
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 2, cols: 8}
    search: {strategy: random, samples: 50, seed: 9}
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 3, cols: 8}
    search: {strategy: random, fraction: 0.25}
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: [1, 4], cols: 8}
)";
  const ShapeFile file = parse(yaml);
  ASSERT_EQ(file.problems.size(), 4u);
  SearchOptions halving;
  halving.strategy = SearchStrategy::halving;
  halving.eta = 4;
  halving.min_samples = 7;
  EXPECT_EQ(file.problems[0].search, halving);
  SearchOptions random;
  random.strategy = SearchStrategy::random;
  random.samples = 50;
  random.seed = 9;
  EXPECT_EQ(file.problems[1].search, random);
  EXPECT_EQ(file.problems[2].search.fraction, 0.25);
  EXPECT_FALSE(file.problems[2].search.samples);
  EXPECT_EQ(file.problems[2].search.seed, 1u);
  // rows=1 was listed first with halving, and keeps it; rows=4 is new and exhaustive.
  EXPECT_EQ(file.problems[3].problem.shape.at("rows"), 4);
  EXPECT_EQ(file.problems[3].search, SearchOptions{});
}

TEST(ShapeFileFields, SearchDefaultsOfEachStrategy) {
  const ShapeFile file = parse(softmax_with_axes("{rows: 1, cols: 8}") + "    search: {strategy: halving}\n");
  EXPECT_EQ(file.problems[0].search.eta, 3);
  EXPECT_EQ(file.problems[0].search.min_samples, 5);
  EXPECT_EQ(parse(softmax_with_axes("{rows: 1, cols: 8}") + "    search: {strategy: exhaustive}\n").problems[0].search,
            SearchOptions{});
}

// ---- files on disk ----------------------------------------------------------------------

class ShapeFileOnDisk : public ::testing::Test {
 protected:
  // A fresh directory per test: /tmp is shared with whatever else runs on the machine.
  void SetUp() override {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "shapetune_shape_file.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string write(const std::string& name, const std::string& bytes) const {
    const auto path = directory_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }

  std::filesystem::path directory_;
};

TEST_F(ShapeFileOnDisk, LoadsAndHashesTheFileBytes) {
  const std::string bytes = "name: disk\r\n" + softmax_with_axes("{rows: [1, 2], cols: 8}");
  const std::string path = write("disk.yaml", bytes);
  const ShapeFile file = load_shape_file(path, test_catalogue());
  EXPECT_EQ(file.path, path);
  EXPECT_EQ(file.name, "disk");
  EXPECT_EQ(file.sha256, sha256_hex(bytes));
  EXPECT_EQ(file.problems.size(), 2u);
}

TEST_F(ShapeFileOnDisk, ErrorsNameTheRealPath) {
  const std::string path = write("bad.yaml", "matrices: []\n");
  try {
    load_shape_file(path, test_catalogue());
    FAIL() << "expected ShapeFileError";
  } catch (const ShapeFileError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(path + ":1:11: ")) << e.what();
  }
}

TEST_F(ShapeFileOnDisk, MissingFileSaysWhy) {
  const std::string path = (directory_ / "absent.yaml").string();
  try {
    load_shape_file(path, test_catalogue());
    FAIL() << "expected ShapeFileError";
  } catch (const ShapeFileError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot read: No such file or directory");
  }
}

TEST_F(ShapeFileOnDisk, DirectoryIsNotAFile) {
  try {
    load_shape_file(directory_.string(), test_catalogue());
    FAIL() << "expected ShapeFileError";
  } catch (const ShapeFileError& e) {
    EXPECT_EQ(std::string(e.what()), directory_.string() + ": is a directory; expected a YAML shape file");
  }
}

// ---- errors: the document ---------------------------------------------------------------

TEST(ShapeFileErrors, MalformedYaml) {
  EXPECT_TRUE(fails_with("matrices: [1, 2\nname: x\n", "2:5", {"malformed YAML: end of sequence flow not found"}));
}

TEST(ShapeFileErrors, EmptyFile) {
  EXPECT_TRUE(fails_with("", "1:1", {"empty", "a map with keys name, description, matrices"}));
  EXPECT_TRUE(fails_with("# only a comment\n", "1:1", {"empty"}));
}

TEST(ShapeFileErrors, TwoDocuments) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8}") + "---\nname: second\n", "6:1",
                         {"second YAML document", "one document"}));
}

TEST(ShapeFileErrors, TopLevelNotAMap) {
  EXPECT_TRUE(fails_with("- primitive: softmax\n", "1:1", {"top level is a list", "a map"}));
  EXPECT_TRUE(fails_with("softmax\n", "1:1", {"top level is 'softmax'", "a map"}));
}

TEST(ShapeFileErrors, UnknownTopLevelKeyListsValidKeys) {
  EXPECT_TRUE(fails_with("name: x\nmatrix: []\n", "2:1", {"unknown key 'matrix'", "name, description, matrices"}));
}

TEST(ShapeFileErrors, RepeatedKey) {
  EXPECT_TRUE(fails_with("name: a\nname: b\nmatrices: []\n", "2:1", {"'name' appears twice"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8, rows: 2}"), "4:30", {"'rows' appears twice"}));
}

TEST(ShapeFileErrors, NameMustBeAString) {
  EXPECT_TRUE(fails_with("name: [a, b]\n", "1:7", {"'name' is a list", "a string"}));
}

TEST(ShapeFileErrors, MissingMatrices) {
  EXPECT_TRUE(fails_with("name: x\n", "1:1", {"no 'matrices'", "'matrices:'"}));
}

TEST(ShapeFileErrors, MatricesNotAList) {
  EXPECT_TRUE(fails_with("matrices:\n  primitive: softmax\n", "2:3", {"'matrices' is a map", "a list"}));
  EXPECT_TRUE(fails_with("matrices:\nname: x\n", "1:1", {"'matrices' is empty", "a list"}));
}

TEST(ShapeFileErrors, EmptyMatrices) {
  EXPECT_TRUE(fails_with("matrices: []\n", "1:11", {"'matrices' is an empty list", "at least one"}));
}

TEST(ShapeFileErrors, MatrixEntryNotAMap) {
  EXPECT_TRUE(fails_with("matrices:\n  - softmax\n", "2:5", {"matrix entry is 'softmax'", "a map"}));
}

// ---- errors: a matrix entry -------------------------------------------------------------

TEST(ShapeFileErrors, UnknownMatrixKeyListsValidKeys) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtype: [f32]
)";
  EXPECT_TRUE(
      fails_with(yaml, "3:5", {"unknown key 'dtype'", "primitive, dtypes, axes, zip, variants, tolerance, search"}));
}

TEST(ShapeFileErrors, MissingRequiredMatrixKeys) {
  EXPECT_TRUE(fails_with("matrices:\n  - dtypes: [f32]\n    axes: {rows: 1, cols: 1}\n", "2:5", {"no 'primitive'"}));
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    axes: {rows: 1, cols: 1}\n", "2:5", {"no 'dtypes'"}));
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes: [f32]\n", "2:5", {"no 'axes'"}));
}

TEST(ShapeFileErrors, UnknownPrimitiveListsValidNames) {
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: sofmax\n", "2:16",
                         {"unknown primitive 'sofmax'", "one of: softmax, attention"}));
}

TEST(ShapeFileErrors, UnknownDtypeListsThePrimitiveDtypes) {
  const std::string expected = "one of softmax's dtypes: f32, f16, bf16";
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes: [f32, f64]\n", "3:19",
                         {"dtype 'f64' is not one softmax supports", expected}));
  // i32 is a dtype, but not one softmax lists.
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes: [i32]\n", "3:14", {"'i32'", expected}));
}

TEST(ShapeFileErrors, EmptyOrRepeatedDtypes) {
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes: []\n", "3:13", {"'dtypes' is an empty list"}));
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes:\n    axes: {}\n", "3:5",
                         {"'dtypes' is empty", "a list"}));
  EXPECT_TRUE(fails_with("matrices:\n  - primitive: softmax\n    dtypes: [f16, f16]\n", "3:19", {"listed twice"}));
}

TEST(ShapeFileErrors, MissingAxisListsThePrimitiveAxes) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1}"), "4:11",
                         {"axis 'cols' of softmax is missing", "exactly softmax's axes: rows, cols"}));
}

TEST(ShapeFileErrors, UnknownAxisListsThePrimitiveAxes) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8, depth: 2}"), "4:30",
                         {"softmax has no axis 'depth'", "rows, cols"}));
}

TEST(ShapeFileErrors, AxesNotAMap) {
  EXPECT_TRUE(fails_with(softmax_with_axes("[rows, cols]"), "4:11", {"'axes' is a list", "a map"}));
}

TEST(ShapeFileErrors, EmptyAxisValues) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: [], cols: 8}"), "4:18", {"axis 'rows' is an empty list"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: , cols: 8}"), "4:12", {"axis 'rows' has no values"}));
}

TEST(ShapeFileErrors, NonIntegerExtents) {
  const std::string rule = "an integer from 1 to 2^40 (1099511627776)";
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1.5, cols: 8}"), "4:18", {"'1.5' is not an integer", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: [1, abc], cols: 8}"), "4:22", {"'abc' is not an integer", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: \"12\\n\", cols: 8}"), "4:18", {"is not an integer"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1e3, cols: 8}"), "4:18", {"'1e3' is not an integer"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 99999999999999999999, cols: 8}"), "4:18", {"too large", rule}));
}

TEST(ShapeFileErrors, ExtentsOutOfRange) {
  const std::string rule = "an integer from 1 to 2^40";
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 0, cols: 8}"), "4:18", {"extent 0 is out of range", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: -3, cols: 8}"), "4:18", {"extent -3 is out of range", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1099511627777, cols: 8}"), "4:18",
                         {"extent 1099511627777 is out of range", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: {range: [0, 4]}, cols: 8}"), "4:27", {"extent 0 is out of range"}));
}

TEST(ShapeFileErrors, NestedListInAxisValues) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: [1, [2, 3]], cols: 8}"), "4:22", {"a list inside the list"}));
}

TEST(ShapeFileErrors, BadValueMap) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: {steps: [1, 2]}, cols: 8}"), "4:19",
                         {"unknown key 'steps'", "range, pow2"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: {range: [1, 2], pow2: [1, 2]}, cols: 8}"), "4:18",
                         {"2 keys", "exactly one of: range, pow2"}));
}

TEST(ShapeFileErrors, RangeStopBelowStart) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [10, 5]}}"), "4:40",
                         {"range stop 5 is below start 10", "start <= stop"}));
}

TEST(ShapeFileErrors, RangeStepBelowOne) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [1, 5, 0]}}"), "4:42",
                         {"range step 0 is below 1", "step >= 1"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [1, 5, -2]}}"), "4:42", {"range step -2"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [1, 5, x]}}"), "4:42", {"'x' is not an integer"}));
}

TEST(ShapeFileErrors, RangeArity) {
  const std::string forms = "{range: [start, stop]} or {range: [start, stop, step]}";
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [1]}}"), "4:35", {"a list of 1 items", forms}));
  EXPECT_TRUE(
      fails_with(softmax_with_axes("{rows: 1, cols: {range: [1, 2, 3, 4]}}"), "4:35", {"a list of 4 items", forms}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: 7}}"), "4:35", {"'range' is '7'", forms}));
}

TEST(ShapeFileErrors, Pow2OutOfRange) {
  const std::string rule = "{pow2: [low, high]} with 0 <= low <= high <= 40";
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {pow2: [5, 41]}}"), "4:38",
                         {"pow2 exponent 41 is outside 0..40", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {pow2: [-1, 3]}}"), "4:35", {"pow2 exponent -1", rule}));
  EXPECT_TRUE(
      fails_with(softmax_with_axes("{rows: 1, cols: {pow2: [6, 5]}}"), "4:38", {"high 5 is below low 6", rule}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {pow2: [5]}}"), "4:34", {"a list of 1 items", rule}));
}

TEST(ShapeFileErrors, ShapeRejectedByThePrimitive) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1, cols: 8}
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1, cols: [8, 2000000]}
)";
  EXPECT_TRUE(fails_with(yaml, "5:5", {"rows=1,cols=2000000", "cols above 1e6 are out of this test's reach"}));
}

// ---- errors: zip ------------------------------------------------------------------------

std::string softmax_zip(std::string_view axes, std::string_view zip) {
  return softmax_with_axes(axes) + "    zip: " + std::string(zip) + "\n";
}

std::string attention_zip(std::string_view zip) {
  return "matrices:\n  - primitive: attention\n    dtypes: [f32]\n"
         "    axes: {batch: [1, 2], heads: [1, 2], rows: [1, 2], cols: [1, 2]}\n    zip: " +
         std::string(zip) + "\n";
}

TEST(ShapeFileErrors, ZipUnknownAxisListsTheAxes) {
  EXPECT_TRUE(fails_with(softmax_zip("{rows: 1, cols: 2}", "[rows, depth]"), "5:17",
                         {"zip names 'depth', which is not an axis of softmax", "rows, cols"}));
}

TEST(ShapeFileErrors, ZipAxisInTwoGroups) {
  EXPECT_TRUE(fails_with(attention_zip("[[batch, rows], [heads, batch]]"), "5:34",
                         {"axis 'batch' is zipped twice", "at most one zip group"}));
  EXPECT_TRUE(fails_with(softmax_zip("{rows: 1, cols: 2}", "[rows, rows]"), "5:17", {"'rows' is zipped twice"}));
}

TEST(ShapeFileErrors, ZipUnequalLengths) {
  EXPECT_TRUE(fails_with(softmax_zip("{rows: [1, 2, 3], cols: {pow2: [1, 2]}}", "[rows, cols]"), "5:10",
                         {"unequal lengths (rows: 3, cols: 2)", "same number of values"}));
  const std::string nested = R"(matrices:
  - primitive: attention
    dtypes: [f32]
    axes: {batch: [1, 2], heads: [1, 2, 3], rows: [1, 2], cols: [1, 2]}
    zip: [[batch, rows], [heads, cols]]
)";
  EXPECT_TRUE(fails_with(nested, "5:26", {"unequal lengths (heads: 3, cols: 2)"}));
}

TEST(ShapeFileErrors, ZipMalformed) {
  EXPECT_TRUE(fails_with(softmax_zip("{rows: 1, cols: 2}", "[]"), "5:10", {"'zip' is an empty list"}));
  EXPECT_TRUE(fails_with(softmax_zip("{rows: 1, cols: 2}", "rows"), "5:10", {"'zip' is 'rows'", "a list"}));
  EXPECT_TRUE(fails_with(attention_zip("[[batch, rows], heads]"), "5:26", {"a zip group is 'heads'"}));
  EXPECT_TRUE(fails_with(attention_zip("[[batch, rows], []]"), "5:26", {"a zip group is an empty list"}));
  EXPECT_TRUE(fails_with(attention_zip("[batch, [rows, heads]]"), "5:18", {"a zipped axis is a list"}));
}

// ---- errors: variants and tolerance -----------------------------------------------------

TEST(ShapeFileErrors, UnknownVariantListsValidOnes) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8}") + "    variants: [warp_online, warp]\n", "5:29",
                         {"softmax has no variant 'warp'", "one of softmax's variants: warp_online, block_online"}));
}

TEST(ShapeFileErrors, PrimitiveWithoutVariantsSaysSo) {
  const std::string yaml = R"(matrices:
  - primitive: attention
    dtypes: [f32]
    axes: {batch: 1, heads: 1, rows: 1, cols: 1}
    variants: [naive]
)";
  EXPECT_TRUE(fails_with(yaml, "5:16", {"attention has no variant 'naive'", "one of attention's variants: (none)"}));
}

TEST(ShapeFileErrors, EmptyOrRepeatedVariants) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8}") + "    variants: []\n", "5:15",
                         {"'variants' is an empty list"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8}") + "    variants: [warp_online, warp_online]\n", "5:29",
                         {"'warp_online' is listed twice"}));
}

std::string softmax_tolerance(std::string_view tolerance) {
  return "matrices:\n  - primitive: softmax\n    dtypes: [f32, f16]\n    axes: {rows: 1, cols: 8}\n"
         "    tolerance: " +
         std::string(tolerance) + "\n";
}

TEST(ShapeFileErrors, ToleranceForDtypeNotInMatrix) {
  EXPECT_TRUE(fails_with(softmax_tolerance("{bf16: {atol: 1}}"), "5:17",
                         {"tolerance for 'bf16', which is not a dtype of this matrix", "one of: f32, f16"}));
  EXPECT_TRUE(fails_with(softmax_tolerance("{fp16: {atol: 1}}"), "5:17", {"tolerance for 'fp16'"}));
}

TEST(ShapeFileErrors, NegativeTolerance) {
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {atol: -1e-3}}"), "5:29",
                         {"atol -1e-3 is negative", "a finite number >= 0"}));
}

TEST(ShapeFileErrors, NonNumericTolerance) {
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {rtol: tight}}"), "5:29", {"rtol 'tight' is not a number"}));
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {rtol: .nan}}"), "5:29", {"rtol '.nan' is not a number"}));
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {rtol: [1]}}"), "5:29", {"rtol is a list"}));
}

TEST(ShapeFileErrors, UnknownToleranceKey) {
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {abstol: 1e-3}}"), "5:23",
                         {"unknown key 'abstol' in the tolerance for f16", "one of: atol, rtol"}));
}

TEST(ShapeFileErrors, EmptyOrMalformedTolerance) {
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: {}}"), "5:22", {"tolerance for f16 is empty", "atol, rtol or both"}));
  EXPECT_TRUE(fails_with(softmax_tolerance("{f16: 1e-3}"), "5:22", {"tolerance for f16 is '1e-3'", "a map"}));
  EXPECT_TRUE(fails_with(softmax_tolerance("[f16]"), "5:16", {"'tolerance' is a list", "a map"}));
}

// ---- errors: search ---------------------------------------------------------------------

// A softmax matrix whose fifth line is `    search: <search>`; its value starts at column 13.
std::string softmax_search(std::string_view search) {
  return softmax_with_axes("{rows: 1, cols: 8}") + "    search: " + std::string(search) + "\n";
}

TEST(ShapeFileErrors, SearchMustBeAMap) {
  EXPECT_TRUE(fails_with(softmax_search("halving"), "5:13",
                         {"'search' is 'halving'", "{strategy: halving, eta: 3, min_samples: 5}"}));
  EXPECT_TRUE(fails_with(softmax_search("[halving]"), "5:13", {"'search' is a list"}));
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: 8}") + "    search:\n", "5:5", {"'search' is empty"}));
}

TEST(ShapeFileErrors, SearchNeedsAKnownStrategy) {
  EXPECT_TRUE(fails_with(softmax_search("{eta: 3}"), "5:13",
                         {"'search' has no 'strategy'", "one of: exhaustive, random, halving"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: halfing}"), "5:24",
                         {"unknown search strategy 'halfing'", "one of: exhaustive, random, halving"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: [halving]}"), "5:24",
                         {"'strategy' is a list", "one of: exhaustive, random, halving"}));
}

TEST(ShapeFileErrors, UnknownSearchKeyListsEveryKey) {
  EXPECT_TRUE(fails_with(softmax_search("{strategy: halving, etta: 3}"), "5:33",
                         {"unknown key 'etta' in 'search'", "strategy, samples, fraction, seed, eta, min_samples"}));
}

TEST(ShapeFileErrors, SearchKeyOfAnotherStrategyListsThisOnesKeys) {
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, eta: 3}"), "5:32",
                         {"'eta' does not apply to random search",
                          "random search's keys: strategy, samples, fraction, seed"}));
  EXPECT_TRUE(fails_with(softmax_search("{samples: 5, strategy: halving}"), "5:14",
                         {"'samples' does not apply to halving search", "strategy, eta, min_samples"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: exhaustive, seed: 1}"), "5:36",
                         {"'seed' does not apply to exhaustive search", "exhaustive search's keys: strategy"}));
}

TEST(ShapeFileErrors, SearchNumbersOutOfRange) {
  EXPECT_TRUE(fails_with(softmax_search("{strategy: halving, eta: 1}"), "5:38",
                         {"eta 1 is out of range", "eta: an integer from 2 to 100"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: halving, min_samples: 2.5}"), "5:46",
                         {"'2.5' is not an integer", "min_samples: an integer from 1 to 100000"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, samples: 0}"), "5:41",
                         {"samples 0 is out of range", "samples: an integer from 1 to"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, seed: -1}"), "5:38", {"seed -1 is out of range"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, fraction: 1.5}"), "5:42",
                         {"fraction 1.5 is out of range", "a number above 0 and at most 1"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, fraction: half}"), "5:42",
                         {"fraction 'half' is not a number"}));
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, fraction: 0}"), "5:42", {"fraction 0 is out of range"}));
}

TEST(ShapeFileErrors, SearchSamplesAndFractionTogether) {
  EXPECT_TRUE(fails_with(softmax_search("{strategy: random, samples: 5, fraction: 0.5}"), "5:44",
                         {"'samples' and 'fraction' are both given", "one of them"}));
}

TEST(ShapeFileErrors, SearchKeyRepeated) {
  EXPECT_TRUE(fails_with(softmax_search("{strategy: halving, eta: 3, eta: 4}"), "5:41", {"key 'eta' appears twice"}));
}

// ---- errors: size -----------------------------------------------------------------------

TEST(ShapeFileErrors, RangeWithTooManyValues) {
  EXPECT_TRUE(fails_with(softmax_with_axes("{rows: 1, cols: {range: [1, 1099511627776]}}"), "4:35",
                         {"range yields 1099511627776 values", "at most 1000000 problems"}));
}

// Checked before expanding: a trillion problems must fail at once, not after hours.
TEST(ShapeFileErrors, MatrixWithTooManyProblems) {
  const std::string yaml = R"(matrices:
  - primitive: softmax
    dtypes: [f32, f16]
    axes: {rows: {range: [1, 1000000]}, cols: {range: [1, 1000000]}}
)";
  EXPECT_TRUE(fails_with(yaml, "2:5", {"the matrix expands to more than 1000000 problems"}));
}

// The work is bounded, not only the result: the first matrix alone is exactly at the limit, and
// the second, a repeat of it that would add no problem, fails before it is expanded.
TEST(ShapeFileErrors, FileWhoseMatricesExpandToTooManyProblems) {
  const std::string matrix = R"(
  - primitive: attention
    dtypes: [f32]
    axes: {batch: {range: [1, 1000]}, heads: 1, rows: 1, cols: {range: [1, 1000]}})";
  EXPECT_TRUE(fails_with("matrices:" + matrix + matrix, "5:5",
                         {"the file's matrices expand to more than 1000000 problems in all"}));
}

// A 1M-problem matrix repeated through YAML aliases took 83 s to reach its error: now the first
// alias fails at once (an alias's position is its anchor's, line 2).
TEST(ShapeFileErrors, AliasesOfALargeMatrixFailFast) {
  std::string yaml = R"(matrices:
  - &big {primitive: attention, dtypes: [f32], axes: {batch: {range: [1, 1000]}, heads: 1, rows: 1, cols: {range: [1, 1000]}}})";
  for (int i = 0; i < 89; ++i) yaml += "\n  - *big";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(fails_with(yaml + "\n", "2:5", {"expand to more than 1000000 problems in all"}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20)
      << "one expansion, not 89";
}

// Debian's yaml-cpp (0.7) loops in LoadAll, allocating without end, on a token no node can begin
// with: a ',' at a document's start, or dedented past the top level (the second found by
// tests/fuzz). Each is now a clean error at the token.
TEST(ShapeFileErrors, ATokenNoNodeBeginsWithIsAnErrorNotALoop) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(fails_with(",", "1:1", {"malformed YAML: no node can begin here"}));
  EXPECT_TRUE(fails_with("# a comment\n\n   , x", "3:4", {"no node can begin here"}));
  EXPECT_TRUE(fails_with("  a: 1\n, b]", "2:1", {"no node can begin here"}));
  EXPECT_TRUE(fails_with("  a:\n    b: 1\n,", "3:1", {"no node can begin here"}));
  EXPECT_TRUE(fails_with("  rows: [1, 2]\n  z [f32 and x: [rows, cols]\n, which", "3:1", {"no node can begin here"}));
  EXPECT_TRUE(fails_with("name: x\n---\n,", "3:1", {"a second YAML document"}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
  // A comma that starts a line inside a flow collection is YAML as usual: yaml-cpp reads it.
  const ShapeFile file = parse("matrices: [{primitive: softmax, dtypes: [f32], axes: {rows: [2\n  , 3], cols: 4}}]\n");
  EXPECT_EQ(file.problems.size(), 2u);
}

}  // namespace
}  // namespace shapetune
