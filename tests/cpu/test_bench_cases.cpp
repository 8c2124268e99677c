// shapetune-bench's cases: which (problem, variant, config) a shape file expands to, in which
// order, under which names. Names are what Google Benchmark's filters and compare.py pair
// runs by, so they must not drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/device.hpp"
#include "tuner/bench_cases.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr const char* kTwoSoftmaxShapes = R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    axes:
      rows: [1024, 7]
      cols: [1000, 4097]
    zip: [rows, cols]
  - primitive: layernorm
    dtypes: [f32]
    axes:
      rows: 8
      cols: 1024
)";

std::vector<std::string> names(const std::vector<BenchCase>& cases) {
  std::vector<std::string> out;
  for (const auto& c : cases) out.push_back(c.name);
  return out;
}

std::vector<BenchCase> expand(const std::string& yaml, const BenchSelection& selection = {}) {
  return expand_bench_cases(parse_shape_text(yaml, "test.yaml", catalogue()), selection, nominal_device_limits());
}

Problem softmax_problem(std::int64_t rows, std::int64_t cols) {
  return Problem{"softmax", DType::f32, Shape::parse_key("rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols))};
}

TEST(BenchCases, NameIsProblemKeyThenCandidateAsTheSweepPrintsIt) {
  Variant v;
  v.primitive = "softmax";
  v.name = "some_variant";
  EXPECT_EQ(bench_case_name(softmax_problem(4096, 1000), v, Config({{"block_size", 256}, {"vec", 4}})),
            "softmax/f32/rows=4096,cols=1000/some_variant{block_size=256,vec=4}");
  EXPECT_EQ(bench_case_name(softmax_problem(7, 4097), v, Config()), "softmax/f32/rows=7,cols=4097/some_variant");
}

TEST(BenchCases, DefaultIsEveryVariantsDefaultConfigThatSupportsTheProblemInFileAndCatalogueOrder) {
  const auto cases = expand(kTwoSoftmaxShapes, {{"softmax"}, {}, false});
  std::vector<std::string> expected;
  for (const Problem& p : {softmax_problem(1024, 1000), softmax_problem(7, 4097)})
    for (const Variant* v : catalogue().variants("softmax"))
      if (v->supports(p, v->default_config, nominal_device_limits()).ok)
        expected.push_back(bench_case_name(p, *v, v->default_config));
  EXPECT_EQ(names(cases), expected);
  // The library baseline is a case like any other; it has no parameters.
  EXPECT_NE(std::find(expected.begin(), expected.end(), "softmax/f32/rows=1024,cols=1000/cudnn"), expected.end());
  for (const auto& c : cases) {
    EXPECT_EQ(c.config, c.variant->default_config) << c.name;
    EXPECT_EQ(c.tolerance, tolerance_for(*catalogue().find_primitive("softmax"), c.problem)) << c.name;
  }
}

TEST(BenchCases, ExpansionIsStableAndNamesAreUnique) {
  BenchSelection all;
  all.all_configs = true;
  const auto first = names(expand(kTwoSoftmaxShapes, all));
  EXPECT_EQ(names(expand(kTwoSoftmaxShapes, all)), first);
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()).size(), first.size());
}

TEST(BenchCases, AllConfigsIsEverySupportedConfigWithEachVariantsDefaultFirst) {
  BenchSelection selection{{"softmax"}, {"warp_row_online", "register_row"}, true};
  const auto cases = expand(kTwoSoftmaxShapes, selection);
  const Problem p = softmax_problem(7, 4097);
  for (const char* name : {"warp_row_online", "register_row"}) {
    const Variant& v = *catalogue().find_variant("softmax", name);
    std::vector<Config> expected;
    for (const Config& c : v.params.enumerate())
      if (v.supports(p, c, nominal_device_limits()).ok) expected.push_back(c);
    std::vector<Config> got;
    for (const auto& c : cases)
      if (c.problem == p && c.variant == &v) got.push_back(c.config);
    ASSERT_FALSE(got.empty()) << name;
    EXPECT_EQ(got.size(), expected.size()) << name;
    if (v.supports(p, v.default_config, nominal_device_limits()).ok) {
      EXPECT_EQ(got.front(), v.default_config) << name;
    }
    for (const Config& c : expected) EXPECT_NE(std::find(got.begin(), got.end(), c), got.end()) << name << " " << c.key();
  }
}

TEST(BenchCases, PrimitiveAndVariantSelectionsFilterInCatalogueOrder) {
  // Asked for in the other order: cases still come in catalogue order, baseline last.
  const auto cases = expand(kTwoSoftmaxShapes, {{"softmax"}, {"cudnn", "warp_row_online"}, false});
  EXPECT_EQ(names(cases), (std::vector<std::string>{"softmax/f32/rows=1024,cols=1000/warp_row_online{warps_per_block=4}",
                                                    "softmax/f32/rows=1024,cols=1000/cudnn",
                                                    "softmax/f32/rows=7,cols=4097/warp_row_online{warps_per_block=4}",
                                                    "softmax/f32/rows=7,cols=4097/cudnn"}));
  for (const auto& c : expand(kTwoSoftmaxShapes, {{"layernorm"}, {}, false}))
    EXPECT_EQ(c.problem.primitive, "layernorm") << c.name;
  // A variant name selects it in every primitive that has one by that name, as in a sweep.
  EXPECT_EQ(names(expand(kTwoSoftmaxShapes, {{}, {"cudnn"}, false})).back(), "layernorm/f32/rows=8,cols=1024/cudnn");
}

TEST(BenchCases, TheFilesVariantListRestrictsToo) {
  const auto cases = expand(R"(matrices:
  - primitive: softmax
    dtypes: [f16]
    variants: [cudnn, block_row_online]
    axes: {rows: 64, cols: 512}
)");
  EXPECT_EQ(names(cases), (std::vector<std::string>{"softmax/f16/rows=64,cols=512/block_row_online{block_size=256}",
                                                    "softmax/f16/rows=64,cols=512/cudnn"}));
  // The command line narrows the file's list further, never widens it.
  EXPECT_TRUE(expand(R"(matrices:
  - primitive: softmax
    dtypes: [f32]
    variants: [cudnn]
    axes: {rows: 64, cols: 512}
)",
                     {{}, {"warp_row_online"}, false})
                  .empty());
}

TEST(BenchCases, UnknownPrimitiveOrVariantIsRefusedByName) {
  try {
    expand(kTwoSoftmaxShapes, {{"sofmax"}, {}, false});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown primitive 'sofmax'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand(kTwoSoftmaxShapes, {{}, {"no_such_variant"}, false}), std::invalid_argument);
  // A variant of another primitive than the ones selected is unknown there.
  EXPECT_THROW(expand(kTwoSoftmaxShapes, {{"layernorm"}, {"warp_row_online"}, false}), std::invalid_argument);
}

TEST(BenchSession, WithoutADeviceEveryCaseSaysSoInsteadOfRunning) {
  const auto why = cuda_unavailable_reason();
  if (!why) GTEST_SKIP() << "a CUDA device is usable here; tests/gpu/test_bench_front_end.cpp measures with it";
  const auto cases = expand(kTwoSoftmaxShapes, {{"softmax"}, {"cudnn"}, false});
  ASSERT_FALSE(cases.empty());
  BenchSession session(MeasureOptions{}, 0, 1);
  for (const auto& c : cases) {
    const CandidateOutcome outcome = session.measure(c);
    EXPECT_EQ(outcome.status, CandidateStatus::error);
    EXPECT_EQ(outcome.reason, "no usable CUDA device: " + *why);
    EXPECT_FALSE(outcome.timing);
  }
}

}  // namespace
}  // namespace shapetune
