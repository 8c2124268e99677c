// shapetune-bench: the session it measures with, and the binary itself, run as a user would
// (a filter, JSON out), read back: the number Google Benchmark reports is the engine's median.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness/device.hpp"
#include "support/test_support.hpp"
#include "tuner/bench_cases.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

// One accurate softmax problem, and one whose zero tolerance no f16 kernel can meet.
constexpr const char* kMatrix = R"(name: bench-front-end
matrices:
  - primitive: softmax
    dtypes: [f32]
    axes: {rows: 1024, cols: 1000}
  - primitive: softmax
    dtypes: [f16]
    axes: {rows: 64, cols: 1000}
    tolerance:
      f16: {atol: 0, rtol: 0}
)";

const BenchCase& find_case(const std::vector<BenchCase>& cases, const std::string& name) {
  for (const auto& c : cases)
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

MeasureOptions quick_options() {
  MeasureOptions options;
  options.stop.time_cap_s = 0.2;
  return options;
}

TEST(BenchSession, VerifiesOnceThenEachMeasurementIsAFullOneByTheEngine) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  std::ofstream(dir.file("m.yaml")) << kMatrix;
  const auto cases = expand_bench_cases(load_shape_file(dir.file("m.yaml"), catalogue()), {{}, {"warp_row_online"}, false},
                                        use_device(0).limits);
  const BenchCase& accurate = find_case(cases, "softmax/f32/rows=1024,cols=1000/warp_row_online{warps_per_block=4}");
  const BenchCase& exact = find_case(cases, "softmax/f16/rows=64,cols=1000/warp_row_online{warps_per_block=4}");

  BenchSession session(quick_options(), 0, 1);
  for (int round = 0; round < 2; ++round) {  // the second round only times (and re-checks)
    const CandidateOutcome outcome = session.measure(accurate);
    ASSERT_EQ(outcome.status, CandidateStatus::ok) << outcome.reason;
    ASSERT_TRUE(outcome.timing);
    EXPECT_GT(outcome.timing->median_us, 0);
    EXPECT_GE(outcome.timing->samples, 10);
    ASSERT_TRUE(outcome.accuracy) << "round " << round << ": the verification's report is kept";
    EXPECT_EQ(outcome.accuracy->mismatches, 0);
    EXPECT_GT(outcome.accuracy->checked, 0);
  }
  const CandidateOutcome failed = session.measure(exact);
  EXPECT_EQ(failed.status, CandidateStatus::failed_accuracy);
  EXPECT_FALSE(failed.timing);
  // Back to the first problem: its data is built again, and it verifies again.
  EXPECT_EQ(session.measure(accurate).status, CandidateStatus::ok);
  ASSERT_TRUE(session.device());
}

// shapetune-bench sits beside the tests' folder, in a build tree as in a carried bundle.
std::filesystem::path bench_binary() {
  const auto beside = std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "shapetune-bench";
  if (std::filesystem::exists(beside)) return beside;
  return SHAPETUNE_BENCH_BINARY;
}

// Google Benchmark's JSON, one "key": value per line: each benchmark as a map of its keys.
std::vector<std::map<std::string, std::string>> read_benchmarks(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::map<std::string, std::string>> out;
  std::string line;
  bool in_benchmarks = false;
  while (std::getline(in, line)) {
    if (line.find("\"benchmarks\":") != std::string::npos) in_benchmarks = true;
    const auto colon = line.find("\": ");
    const auto first_quote = line.find('"');
    if (!in_benchmarks || colon == std::string::npos || first_quote == std::string::npos) continue;
    const std::string key = line.substr(first_quote + 1, colon - first_quote - 1);
    std::string value = line.substr(colon + 3);
    if (!value.empty() && value.back() == ',') value.pop_back();
    if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
    if (key == "name") out.emplace_back();
    if (!out.empty()) out.back()[key] = value;
  }
  return out;
}

TEST(BenchFrontEnd, FilteredCaseReportsTheEnginesMedianAsManualTimeInJson) {
  SHAPETUNE_REQUIRE_GPU();
  const auto binary = bench_binary();
  ASSERT_TRUE(std::filesystem::exists(binary)) << binary << " is missing: build the shapetune-bench target";
  test_support::TempDir dir;
  std::ofstream(dir.file("m.yaml")) << kMatrix;
  const std::string json = dir.file("out.json"), log = dir.file("log.txt");
  const std::string command = binary.string() + " " + dir.file("m.yaml") +
                              " --time-cap 0.2 --benchmark_repetitions=2"
                              " '--benchmark_filter=^softmax/f32/rows=1024,cols=1000/warp_row_online\\{'"
                              " --benchmark_out=" + json + " --benchmark_out_format=json >" + log + " 2>&1";
  const int status = std::system(command.c_str());
  std::stringstream output;
  output << std::ifstream(log).rdbuf();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output.str();

  const auto benchmarks = read_benchmarks(json);
  int iterations = 0;
  bool median_aggregate = false;
  for (const auto& b : benchmarks) {
    SCOPED_TRACE(b.at("name"));
    EXPECT_EQ(b.at("run_name"), "softmax/f32/rows=1024,cols=1000/warp_row_online{warps_per_block=4}/iterations:1/manual_time")
        << "the filter let only this case through";
    EXPECT_EQ(b.count("error_occurred"), 0u) << b.at("error_message");
    EXPECT_EQ(b.at("time_unit"), "us");
    if (b.at("run_type") == "aggregate") {
      median_aggregate = median_aggregate || b.at("aggregate_name") == "median";
      continue;
    }
    ++iterations;
    EXPECT_EQ(b.at("iterations"), "1");
    const double median = std::stod(b.at("real_time"));
    EXPECT_GT(median, 0);
    // The manual time is the measurement's median, so it lies between its p10 and p90.
    EXPECT_LE(std::stod(b.at("p10_us")), median * (1 + 1e-9));
    EXPECT_GE(std::stod(b.at("p90_us")), median * (1 - 1e-9));
    EXPECT_GE(std::stod(b.at("samples")), 10);
    const Problem problem{"softmax", DType::f32, Shape::parse_key("rows=1024,cols=1000")};
    const double bytes = catalogue().find_primitive("softmax")->cost(problem).bytes;
    EXPECT_NEAR(std::stod(b.at("bytes_per_second")), bytes / (median * 1e-6), 1e-6 * bytes / (median * 1e-6));
    EXPECT_EQ(b.count("label"), 1u);
  }
  EXPECT_EQ(iterations, 2) << "one per repetition";
  EXPECT_TRUE(median_aggregate);

  // A case that fails verification is skipped with the reason, and the exit code says so.
  const std::string failing = binary.string() + " " + dir.file("m.yaml") +
                              " --time-cap 0.2 '--benchmark_filter=^softmax/f16/rows=64,cols=1000/warp_row_online\\{'"
                              " --benchmark_format=json >" + json + " 2>" + log;
  const int failing_status = std::system(failing.c_str());
  EXPECT_TRUE(WIFEXITED(failing_status) && WEXITSTATUS(failing_status) == 1) << failing;
  const auto skipped = read_benchmarks(json);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].at("error_occurred"), "true");
  EXPECT_EQ(skipped[0].at("error_message").rfind("failed_accuracy: ", 0), 0u) << skipped[0].at("error_message");
}

}  // namespace
}  // namespace shapetune
