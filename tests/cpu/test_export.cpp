#include "db/export.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "db/dispatch.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

WinnerRecord sample_winner() {
  WinnerRecord winner;
  winner.device_key = "NVIDIA H200|sm_90|132SM|141GiB";
  winner.problem = Problem{"softmax", DType::f32, Shape({{"rows", 4096}, {"cols", 1000}})};
  winner.variant = "block_per_row";
  winner.config = Config({{"block_size", 256}, {"vec", 4}});
  winner.timing.median_us = 7.0 / 3.0;
  winner.timing.p10_us = 2.25;
  winner.timing.p90_us = 100000.0;
  winner.timing.samples = 200;
  winner.timing.mode = TimingMode::graph_batch;
  winner.tolerance = Tolerance{1e-5, 0.1};
  winner.best_baseline = "cudnn";
  winner.baseline_us = 3.5;
  winner.speedup_vs_baseline = 1.5;
  winner.runner_up_variant = "warp_per_row";
  winner.runner_up_config = Config({{"block_size", 128}, {"vec", 2}});
  winner.runner_up_us = 2.4;
  winner.margin_rel = 2.4 / (7.0 / 3.0) - 1;
  winner.tie = true;
  winner.cost = Cost{4096.0 * 1000 * 4 * 2, 4096.0 * 1000 * 5};
  winner.sweep_id = 42;
  winner.git_sha = "abc1234";
  winner.measured_at = "2026-11-30T19:18:14Z";
  return winner;
}

DeviceFingerprint h200() {
  return DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{141} << 30, "550.54.15", "12.4", "12.4.5", "9.1.0"};
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
}

// The JSON text of the first member called `name`: a whole string literal (escapes included),
// or a scalar up to the next comma, line break or closing brace.
std::string json_value_of(const std::string& json, const std::string& name) {
  const std::string label = "\"" + name + "\": ";
  const std::size_t start = json.find(label);
  if (start == std::string::npos) return "<missing " + name + ">";
  const std::size_t value = start + label.size();
  if (json[value] != '"') return json.substr(value, json.find_first_of(",\n}", value) - value);
  std::size_t end = value + 1;
  while (end < json.size() && json[end] != '"') end += json[end] == '\\' ? 2 : 1;
  return json.substr(value, end + 1 - value);
}

// RFC 4180 reader for the test: quoted fields, doubled quotes, line breaks inside quotes.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
    } else {
      field += c;
    }
  }
  EXPECT_TRUE(field.empty() && row.empty()) << "CSV does not end with a line break";
  return rows;
}

// ---- JSON ----------------------------------------------------------------------------------

TEST(ExportJson, TopLevelInStableOrder) {
  const std::string json = export_json({h200()}, {sample_winner()});
  ASSERT_EQ(json.front(), '{');
  EXPECT_EQ(json_value_of(json, "schema"), "\"shapetune-dispatch/1\"");
  const std::size_t schema = json.find("\"schema\"");
  const std::size_t devices = json.find("\"devices\"");
  const std::size_t winners = json.find("\"winners\"");
  EXPECT_LT(schema, devices);
  EXPECT_LT(devices, winners);
  EXPECT_NE(winners, std::string::npos);
  EXPECT_EQ(json, export_json({h200()}, {sample_winner()})) << "export is not deterministic";
}

TEST(ExportJson, EmptyListsAreEmptyArrays) {
  const std::string json = export_json({}, {});
  EXPECT_EQ(json_value_of(json, "devices"), "[]");
  EXPECT_EQ(json_value_of(json, "winners"), "[]");
}

TEST(ExportJson, DeviceFields) {
  const std::string json = export_json({h200()}, {});
  EXPECT_EQ(json_value_of(json, "key"), "\"" + h200().key() + "\"");
  EXPECT_EQ(json_value_of(json, "name"), "\"NVIDIA H200\"");
  EXPECT_EQ(json_value_of(json, "compute_capability"), "90");
  EXPECT_EQ(json_value_of(json, "memory_bytes"), std::to_string(std::int64_t{141} << 30));
  EXPECT_EQ(json_value_of(json, "cudnn_version"), "\"9.1.0\"");
}

TEST(ExportJson, WinnerFieldsInOrder) {
  const std::string json = export_json({}, {sample_winner()});
  const std::string order[] = {
      "device_key", "problem", "primitive", "dtype", "shape", "variant", "config", "baseline",
      "median_us", "p10_us", "p90_us", "samples", "timing_mode", "state_restored", "best_baseline",
      "baseline_us", "speedup_vs_baseline", "runner_up_variant", "runner_up_config", "runner_up_us", "margin_rel",
      "tie", "bytes", "flops", "achieved_bytes_per_s", "atol", "rtol", "library_algo", "git_sha", "measured_at",
      "sweep_id",
  };
  std::size_t previous = 0;
  for (const std::string& name : order) {
    const std::size_t at = json.find('"' + name + "\": ", previous);
    ASSERT_NE(at, std::string::npos) << name << " missing or out of order";
    previous = at;
  }
}

TEST(ExportJson, WinnerValues) {
  const std::string json = export_json({}, {sample_winner()});
  EXPECT_EQ(json_value_of(json, "problem"), "\"softmax/f32/rows=4096,cols=1000\"");
  expect_contains(json, "\"shape\": {\"rows\": 4096, \"cols\": 1000}");
  expect_contains(json, "\"config\": {\"block_size\": 256, \"vec\": 4}");
  EXPECT_EQ(json_value_of(json, "runner_up_config"), "\"block_size=128,vec=2\"");
  EXPECT_EQ(json_value_of(json, "baseline"), "false");
  EXPECT_EQ(json_value_of(json, "tie"), "true");
  EXPECT_EQ(json_value_of(json, "samples"), "200");
  EXPECT_EQ(json_value_of(json, "sweep_id"), "42");
  EXPECT_EQ(json_value_of(json, "timing_mode"), "\"graph_batch\"");
  EXPECT_EQ(json_value_of(json, "p90_us"), "100000") << "integral values print as integers";
  EXPECT_EQ(json_value_of(json, "rtol"), "0.1") << "shortest form that reads back exactly";
}

TEST(ExportJson, NumbersReadBackExactly) {
  const WinnerRecord winner = sample_winner();
  const std::string json = export_json({}, {winner});
  EXPECT_EQ(std::strtod(json_value_of(json, "median_us").c_str(), nullptr), winner.timing.median_us);
  EXPECT_EQ(std::strtod(json_value_of(json, "margin_rel").c_str(), nullptr), winner.margin_rel);
  EXPECT_EQ(std::strtod(json_value_of(json, "atol").c_str(), nullptr), winner.tolerance.atol);
}

TEST(ExportJson, NonFiniteNumbersAreNull) {
  WinnerRecord winner = sample_winner();
  winner.margin_rel = std::numeric_limits<double>::quiet_NaN();
  winner.runner_up_us = std::numeric_limits<double>::infinity();
  const std::string json = export_json({}, {winner});
  EXPECT_EQ(json_value_of(json, "margin_rel"), "null");
  EXPECT_EQ(json_value_of(json, "runner_up_us"), "null");
}

TEST(ExportJson, EscapesStrings) {
  WinnerRecord winner = sample_winner();
  winner.variant = "say \"hi\"\\ok\nnext\ttab\x01";
  const std::string json = export_json({}, {winner});
  EXPECT_EQ(json_value_of(json, "variant"), R"("say \"hi\"\\ok\u000anext\u0009tab\u0001")");
  EXPECT_EQ(json.find('\t'), std::string::npos) << "raw control character in JSON";
}

// ---- CSV -----------------------------------------------------------------------------------

TEST(ExportCsv, Header) {
  const std::string csv = export_csv({});
  EXPECT_EQ(csv,
            "device_key,problem,primitive,dtype,shape,variant,config,baseline,median_us,p10_us,p90_us,samples,"
            "timing_mode,speedup_vs_baseline,best_baseline,baseline_us,runner_up_variant,runner_up_config,"
            "runner_up_us,margin_rel,tie,bytes,flops,achieved_bytes_per_s,atol,rtol,library_algo,git_sha,measured_at\n");
}

TEST(ExportCsv, QuotesFieldsThatNeedIt) {
  WinnerRecord winner = sample_winner();
  winner.variant = "say \"hi\"";
  winner.best_baseline = "two\nlines";
  const std::string csv = export_csv({winner});
  expect_contains(csv, ",\"softmax/f32/rows=4096,cols=1000\",softmax,f32,\"rows=4096,cols=1000\",");
  expect_contains(csv, ",\"say \"\"hi\"\"\",");
  expect_contains(csv, ",\"two\nlines\",");
  expect_contains(csv, ",abc1234,2026-11-30T19:18:14Z\n");
}

TEST(ExportCsv, ParsesBackToTheSameFields) {
  WinnerRecord tricky = sample_winner();
  tricky.variant = "a,b \"c\"\nd";
  tricky.problem.shape = Shape({{"rows", 1}, {"cols", 7}});
  tricky.tie = false;
  tricky.library_algo = "cublaslt=13.1.0 algo_id=55 tile_id=15";  // spaces, '=': a field as it is
  const std::vector<WinnerRecord> winners{sample_winner(), tricky};
  const auto rows = parse_csv(export_csv(winners));
  ASSERT_EQ(rows.size(), 3u);
  const std::vector<std::string>& header = rows[0];
  ASSERT_EQ(header.size(), 29u);
  const auto column = [&](const std::string& name) {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    ADD_FAILURE() << "no column " << name;
    return std::size_t{0};
  };
  for (std::size_t i = 0; i < winners.size(); ++i) {
    const std::vector<std::string>& row = rows[i + 1];
    ASSERT_EQ(row.size(), header.size()) << "row " << i;
    EXPECT_EQ(row[column("problem")], winners[i].problem.key());
    EXPECT_EQ(row[column("shape")], winners[i].problem.shape.key());
    EXPECT_EQ(row[column("variant")], winners[i].variant);
    EXPECT_EQ(row[column("config")], winners[i].config.key());
    EXPECT_EQ(std::strtod(row[column("median_us")].c_str(), nullptr), winners[i].timing.median_us);
    EXPECT_EQ(std::strtod(row[column("margin_rel")].c_str(), nullptr), winners[i].margin_rel);
    EXPECT_EQ(row[column("tie")], winners[i].tie ? "true" : "false");
    EXPECT_EQ(row[column("measured_at")], winners[i].measured_at);
    EXPECT_EQ(row[column("library_algo")], winners[i].library_algo);
    EXPECT_EQ(std::strtod(row[column("bytes")].c_str(), nullptr), winners[i].cost.bytes);
    // The achieved rate is derived: bytes over the median time, in bytes per second.
    EXPECT_DOUBLE_EQ(std::strtod(row[column("achieved_bytes_per_s")].c_str(), nullptr),
                     winners[i].cost.bytes / (winners[i].timing.median_us * 1e-6));
  }
}

// ---- C++ header ----------------------------------------------------------------------------

HeaderExportSource header_source() {
  return {"shapetune export --db /tmp/w.db --format header -o dispatch.hpp", 3, "/tmp/w.db"};
}

// The tricky variant: quote, backslash, line break, tab, a control byte followed by a hex digit,
// a byte above ASCII and a would-be trigraph.
const std::string kTrickyVariant = std::string("say \"hi\"\\ok\nnext\ttab\x01") + "f\xff?" "?/";
const std::string kTrickyVariantLiteral = R"("say \"hi\"\\ok\nnext\ttab\001f\377?\?/")";

WinnerRecord tricky_winner() {
  WinnerRecord winner = sample_winner();
  winner.variant = kTrickyVariant;
  winner.problem.shape = Shape({{"rows", 1}, {"cols", 7}});
  winner.timing.median_us = 0.1;
  winner.speedup_vs_baseline = std::numeric_limits<double>::quiet_NaN();
  return winner;
}

// The one line of `header` that holds `part`.
std::string line_with(const std::string& header, const std::string& part) {
  const std::size_t at = header.find(part);
  if (at == std::string::npos) return "<no line with " + part + ">";
  const std::size_t begin = header.rfind('\n', at) + 1;
  return header.substr(begin, header.find('\n', at) - begin);
}

// Runs `c++ -std=c++17 -fsyntax-only` on a program that includes `header` and then `body`;
// empty when it compiles, else the command and the compiler's messages. nullopt when there
// is no C++ compiler on PATH.
std::optional<std::string> compile_with_header(const std::string& header, const std::string& body) {
  if (std::system("command -v c++ >/dev/null 2>&1") != 0) return std::nullopt;
  test_support::TempDir dir;
  std::ofstream(dir.file("shapetune_dispatch.hpp"), std::ios::binary) << header;
  std::ofstream(dir.file("main.cpp"), std::ios::binary)
      << "#include \"shapetune_dispatch.hpp\"\n#include \"shapetune_dispatch.hpp\"  // #pragma once\n"
      << body << "\nint main() { return 0; }\n";
  // -Wno-address: GCC folds `find(...) != nullptr` to `&kWinners[i] != nullptr` and warns that
  // the address "will never be NULL", about the static_assert's own expression, not the header.
  const std::string command = "c++ -std=c++17 -fsyntax-only -Wall -Wextra -Wno-address -pedantic-errors -Werror '" +
                              dir.file("main.cpp") + "' >'" + dir.file("log.txt") + "' 2>&1";
  if (std::system(command.c_str()) == 0) return std::string();
  std::ifstream log(dir.file("log.txt"));
  std::stringstream text;
  text << log.rdbuf();
  return command + "\n" + text.str();
}

TEST(ExportHeader, TopCommentAndLayout) {
  const std::string header = export_header({sample_winner()}, header_source());
  ASSERT_EQ(header.rfind("// ", 0), 0u) << "starts with the comment:\n" << header;
  expect_contains(header, "\n// command: shapetune export --db /tmp/w.db --format header -o dispatch.hpp\n");
  expect_contains(header, "\n// schema version: 3\n");
  expect_contains(header, "\n// database: /tmp/w.db\n");
  expect_contains(header, "-1 where the\n// database holds no finite value");
  expect_contains(header, "\n#pragma once\n");
  expect_contains(header, "\n#include <cstdint>\n");
  EXPECT_EQ(header.find("<cstring>"), std::string::npos);
  EXPECT_EQ(header.find("<limits>"), std::string::npos);
  expect_contains(header, "namespace shapetune_dispatch {");
  expect_contains(header,
                  "struct Entry {\n  const char* device_key;\n  const char* primitive;\n  const char* dtype;\n"
                  "  const char* shape;\n  const char* variant;\n  const char* config;\n  const char* library_algo;\n"
                  "  double median_us;\n"
                  "  double speedup_vs_baseline;\n};\n");
  expect_contains(header, "inline constexpr Entry kWinners[] = {\n");
  expect_contains(header, "inline constexpr std::size_t kWinnerCount = 1;\n");
  expect_contains(header, "constexpr const Entry* find(const char* device_key, const char* primitive, const char* dtype,");
  EXPECT_EQ(header, export_header({sample_winner()}, header_source())) << "export is not deterministic";
}

TEST(ExportHeader, EntryFieldsInOrder) {
  const std::string header = export_header({sample_winner()}, header_source());
  EXPECT_EQ(line_with(header, "\"softmax\""),
            "    {\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f32\", \"rows=4096,cols=1000\", "
            "\"block_per_row\", \"block_size=256,vec=4\", \"\", 2.3333333333333335, 1.5},");
}

TEST(ExportHeader, EntriesInTheGivenOrder) {
  const std::string header = export_header({sample_winner(), tricky_winner()}, header_source());
  EXPECT_LT(header.find("\"rows=4096,cols=1000\""), header.find("\"rows=1,cols=7\""));
  expect_contains(header, "kWinnerCount = 2;");
}

TEST(ExportHeader, EscapesStrings) {
  const std::string header = export_header({tricky_winner()}, header_source());
  expect_contains(header, ", " + kTrickyVariantLiteral + ", ");
  EXPECT_EQ(header.find('\t'), std::string::npos) << "raw control character in the header";
  EXPECT_EQ(header.find('\xff'), std::string::npos) << "raw non-ASCII byte in the header";

  // The comment lines cannot be broken or spliced by what the path and command hold.
  HeaderExportSource source = header_source();
  source.db_path = "C:\\dbs\\\nint oops;\\";
  source.command_line = "shapetune export --db 'C:\\dbs\\' --format header";
  const std::string odd = export_header({}, source);
  expect_contains(odd, "\n// database: \"C:\\\\dbs\\\\\\nint oops;\\\\\"\n");
  expect_contains(odd, "\n// command: \"shapetune export --db 'C:\\\\dbs\\\\' --format header\"\n");
}

TEST(ExportHeader, NumbersReadBackExactly) {
  WinnerRecord winner = sample_winner();
  winner.timing.median_us = 0.1;
  winner.speedup_vs_baseline = 1e300 / 3;
  const std::string line = line_with(export_header({winner}, header_source()), "\"softmax\"");
  const std::size_t speedup_at = line.rfind(", ");
  const std::size_t median_at = line.rfind(", ", speedup_at - 1);
  const std::string median = line.substr(median_at + 2, speedup_at - median_at - 2);
  const std::string speedup = line.substr(speedup_at + 2, line.size() - speedup_at - 4);
  EXPECT_EQ(median, "0.10000000000000001");
  EXPECT_EQ(std::strtod(median.c_str(), nullptr), winner.timing.median_us);
  EXPECT_EQ(std::strtod(speedup.c_str(), nullptr), winner.speedup_vs_baseline) << speedup;
}

TEST(ExportHeader, IntegralAndNonFiniteNumbers) {
  WinnerRecord winner = sample_winner();
  winner.timing.median_us = 40;
  winner.speedup_vs_baseline = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(line_with(export_header({winner}, header_source()), "\"softmax\"").find(", 40.0, -1.0},") !=
              std::string::npos)
      << "integral values are double literals; infinity is -1";
  winner.timing.median_us = std::numeric_limits<double>::quiet_NaN();
  winner.speedup_vs_baseline = 2;
  EXPECT_TRUE(line_with(export_header({winner}, header_source()), "\"softmax\"").find(", -1.0, 2.0},") !=
              std::string::npos)
      << "NaN is -1";
}

// A problem no baseline ran for: the database holds 0 for the baseline's time and the speedup;
// every format says "none" instead of passing 0 on as a measurement.
TEST(ExportFormats, NoBaselineIsNoneNotZero) {
  WinnerRecord winner = sample_winner();
  winner.best_baseline.clear();
  winner.baseline_us = 0;
  winner.speedup_vs_baseline = 0;
  const std::string json = export_json({}, {winner});
  EXPECT_EQ(json_value_of(json, "best_baseline"), "\"\"");
  EXPECT_EQ(json_value_of(json, "baseline_us"), "null");
  EXPECT_EQ(json_value_of(json, "speedup_vs_baseline"), "null");
  const auto rows = parse_csv(export_csv({winner}));
  ASSERT_EQ(rows.size(), 2u);
  for (std::size_t i = 0; i < rows[0].size(); ++i) {
    if (rows[0][i] == "baseline_us" || rows[0][i] == "speedup_vs_baseline") {
      EXPECT_EQ(rows[1][i], "") << rows[0][i];
    }
  }
  EXPECT_NE(line_with(export_header({winner}, header_source()), "\"softmax\"").find(", -1.0},"), std::string::npos);
}

TEST(ExportHeader, EmptyTableHasASentinelAndCountZero) {
  const std::string header = export_header({}, header_source());
  expect_contains(header,
                  "inline constexpr Entry kWinners[] = {\n    {\"\", \"\", \"\", \"\", \"\", \"\", \"\", -1.0, -1.0},\n};\n");
  expect_contains(header, "inline constexpr std::size_t kWinnerCount = 0;\n");
  expect_contains(header, "\n// winners: 0\n");
}

TEST(ExportHeader, CompilesAsCxx17AndFindIsConstexpr) {
  WinnerRecord library = sample_winner();
  library.library_algo = "id=21 tile=7 stages=3";
  const std::string header = export_header({library, tricky_winner()}, header_source());
  const std::string body =
      "namespace sd = shapetune_dispatch;\n"
      "static_assert(sd::kWinnerCount == 2, \"count\");\n"
      "static_assert(sd::find(\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f32\", \"rows=4096,cols=1000\") "
      "!= nullptr, \"sample found\");\n"
      "static_assert(sd::find(\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f32\", \"rows=4096,cols=1000\") "
      "== &sd::kWinners[0], \"first entry\");\n"
      "static_assert(sd::find(\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f32\", \"rows=1,cols=7\") "
      "== &sd::kWinners[1], \"second entry\");\n"
      "static_assert(sd::find(\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f16\", \"rows=4096,cols=1000\") "
      "== nullptr, \"other dtype\");\n"
      "static_assert(sd::find(\"NVIDIA H200|sm_90|132SM|141GiB\", \"softmax\", \"f32\", \"rows=4096,cols=100\") "
      "== nullptr, \"prefix is no match\");\n"
      "static_assert(sd::kWinners[0].median_us == 7.0 / 3.0, \"median reads back exactly\");\n"
      "static_assert(sd::kWinners[0].speedup_vs_baseline == 1.5, \"speedup\");\n"
      "static_assert(sd::kWinners[1].median_us == 0.1, \"0.1 reads back exactly\");\n"
      "static_assert(sd::kWinners[1].speedup_vs_baseline == -1.0, \"NaN is -1\");\n"
      "static_assert(sd::detail::equal(sd::kWinners[0].config, \"block_size=256,vec=4\"), \"config\");\n"
      "static_assert(sd::detail::equal(sd::kWinners[0].library_algo, \"id=21 tile=7 stages=3\"), \"algo\");\n"
      "static_assert(sd::detail::equal(sd::kWinners[1].library_algo, \"\"), \"no algo\");\n"
      "static_assert(sd::detail::equal(sd::kWinners[1].variant, " + kTrickyVariantLiteral + "), \"escapes\");\n"
      "static_assert(sizeof(" + kTrickyVariantLiteral + ") == " + std::to_string(kTrickyVariant.size() + 1) +
      ", \"one byte per escape\");\n";
  const auto failure = compile_with_header(header, body);
  if (!failure) GTEST_SKIP() << "no C++ compiler (c++) on PATH to compile the exported header with";
  EXPECT_EQ(*failure, "") << header;
}

// A winner of `device` for `primitive`/`dtype` at `shape`, its variant named after its shape so
// that a wrong pick shows which one.
WinnerRecord winner_at(const std::string& device, const std::string& primitive, DType dtype, const Shape& shape) {
  WinnerRecord winner = sample_winner();
  winner.device_key = device;
  winner.problem = Problem{primitive, dtype, shape};
  winner.variant = "tuned_for_" + shape.key();
  return winner;
}

// The test's texts hold no quote or backslash, so quoting them makes a literal.
std::string cpp_literal(const std::string& text) {
  EXPECT_EQ(text.find_first_of("\"\\"), std::string::npos) << text;
  return "\"" + text + "\"";
}

std::string double_literal(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// find_nearest() resolves every query as DispatchTable::lookup does when every variant supports
// every shape: the header cannot ask, so that is the Dispatcher it has to match. The queries cover
// exact matches, plain nearest ones, ties (exact mirror images, and 4 between 2 and 8, whose
// logarithms round apart), other devices, dtypes and axes, extents that have no logarithm, and
// extents near 2^62.
TEST(ExportHeader, FindNearestResolvesAsTheDispatcher) {
  const std::string a = "NVIDIA H200|sm_90|132SM|141GiB", b = "Tesla T4|sm_75|40SM|15GiB";
  const auto rows_cols = [](std::int64_t rows, std::int64_t cols) { return Shape({{"rows", rows}, {"cols", cols}}); };
  const auto mnk = [](std::int64_t m, std::int64_t n, std::int64_t k) { return Shape({{"m", m}, {"n", n}, {"k", k}}); };
  const std::vector<WinnerRecord> winners = {
      winner_at(a, "softmax", DType::f32, rows_cols(4096, 4096)),
      winner_at(a, "softmax", DType::f32, rows_cols(1024, 1000)),
      winner_at(a, "softmax", DType::f32, rows_cols(8, 1000)),
      winner_at(a, "softmax", DType::f32, rows_cols(2, 1000)),
      winner_at(a, "layernorm", DType::f32, rows_cols(2000, 100)),
      winner_at(a, "layernorm", DType::f32, rows_cols(100, 2000)),
      winner_at(a, "softmax", DType::f16, rows_cols(1000, 1000)),
      winner_at(a, "softmax", DType::f32, Shape({{"rows", 64}, {"width", 64}})),
      winner_at(b, "softmax", DType::f32, rows_cols(1000, 999)),
      winner_at(a, "gemm.nt", DType::f16, mnk(4096, 4096, 4096)),
      winner_at(a, "gemm.nt", DType::f16, mnk(128, 4096, 4096)),
      winner_at(a, "gemm.nt", DType::f16, mnk(std::int64_t{1} << 40, 3, 1)),
      winner_at(b, "gemm.nt", DType::f16, mnk(1000, 4096, 4096)),
  };
  struct Query {
    std::string device;
    Problem problem;
  };
  const std::vector<Query> queries = {
      {a, {"softmax", DType::f32, rows_cols(4096, 4096)}},   // exact
      {a, {"softmax", DType::f32, rows_cols(1000, 1000)}},   // nearest, not device b's closer one
      {b, {"softmax", DType::f32, rows_cols(1000, 1000)}},   // device b's own
      {a, {"softmax", DType::f32, rows_cols(4, 1000)}},      // 2 and 8: the key decides
      {a, {"softmax", DType::f32, rows_cols(5, 1000)}},      // past the tie: 8
      {a, {"layernorm", DType::f32, rows_cols(448, 448)}},   // 2000x100 and 100x2000 mirror each other
      {a, {"softmax", DType::f32, rows_cols(1, 1)}},
      {a, {"softmax", DType::f32, rows_cols(std::int64_t{1} << 62, 3)}},
      {a, {"softmax", DType::f16, rows_cols(3, 70000)}},     // the one f16 entry
      {a, {"softmax", DType::bf16, rows_cols(1000, 1000)}},  // nothing in bf16
      {a, {"softmax", DType::f32, rows_cols(0, 1000)}},      // no logarithm: nothing near
      {a, {"softmax", DType::f32, Shape({{"cols", 1000}, {"rows", 1000}})}},  // other order
      {a, {"softmax", DType::f32, Shape({{"rows", 60}, {"width", 70}})}},
      {a, {"softmax_xent", DType::f32, rows_cols(1000, 1000)}},
      {a, {"gemm.nt", DType::f16, mnk(4096, 4096, 4096)}},
      {a, {"gemm.nt", DType::f16, mnk(1000, 4096, 4096)}},
      {a, {"gemm.nt", DType::f16, mnk(std::int64_t{1} << 39, 3, 2)}},
      {b, {"gemm.nt", DType::f16, mnk(1, 1, 1)}},
      {b, {"gemm.nt", DType::f32, mnk(1, 1, 1)}},
  };
  const DispatchTable::SupportsFn supports_everything = [](const Problem&, const std::string&, const Config&) {
    return true;
  };
  const DispatchTable::DefaultFn none_tuned = [](const Problem&) {
    return std::optional<std::pair<std::string, Config>>({"<default>", Config()});
  };
  std::string body = "namespace sd = shapetune_dispatch;\n";
  int nearest = 0;
  for (const Query& query : queries) {
    std::vector<WinnerRecord> of_device;
    for (const WinnerRecord& w : winners)
      if (w.device_key == query.device) of_device.push_back(w);
    const DispatchChoice choice =
        DispatchTable::from_winners(of_device).lookup(query.problem, supports_everything, none_tuned);
    std::string expected = "m.entry == nullptr && m.resolution == sd::Resolution::none";
    for (std::size_t i = 0; i < winners.size(); ++i)
      if (choice.source != DispatchSource::fallback && winners[i].device_key == query.device &&
          winners[i].problem.key() == choice.tuned_problem) {
        const bool exact = choice.source == DispatchSource::exact;
        nearest += !exact;
        expected = "m.entry == &sd::kWinners[" + std::to_string(i) + "] && m.resolution == sd::Resolution::" +
                   (exact ? "exact" : "nearest");
      }
    body += "static_assert([] {\n  constexpr sd::Match m = sd::find_nearest(" + cpp_literal(query.device) + ", " +
            cpp_literal(query.problem.primitive) + ", " + cpp_literal(std::string(dtype_name(query.problem.dtype))) +
            ", " + cpp_literal(query.problem.shape.key()) + ");\n  return " + expected + ";\n}(), " +
            cpp_literal(query.device + " " + query.problem.key() + ": " + choice.variant) + ");\n";
  }
  EXPECT_EQ(nearest, 12) << "the queries no longer test what they say";
  // The distance it reports, against the standard library's logarithms.
  const double distance = *shape_log_distance(rows_cols(1024, 1000), rows_cols(1000, 1000));
  body += "static_assert([] {\n  constexpr double d = sd::find_nearest(" + cpp_literal(a) +
          ", \"softmax\", \"f32\", \"rows=1000,cols=1000\").log_distance;\n  return d - " + double_literal(distance) +
          " < 1e-15 && " + double_literal(distance) + " - d < 1e-15;\n}(), \"log distance\");\n";
  body += "static_assert(sd::kTieDistance == " + double_literal(kDispatchTieDistance) + ", \"the Dispatcher's tie\");\n";
  const auto failure = compile_with_header(export_header(winners, header_source()), body);
  if (!failure) GTEST_SKIP() << "no C++ compiler (c++) on PATH to compile the exported header with";
  EXPECT_EQ(*failure, "") << body;
}

TEST(ExportHeader, FindNearestOnOddTextsAndOddExtents) {
  WinnerRecord winner = sample_winner();  // softmax f32 rows=4096,cols=1000
  std::string body = "namespace sd = shapetune_dispatch;\nconstexpr const char* dev = " +
                     cpp_literal(winner.device_key) + ";\n";
  // Texts Shape::key() never writes: nothing is near them, and evaluating them is still a constant.
  for (const char* shape : {"", "rows", "rows=", "rows=,cols=1000", "rows=4096,", "rows=4096,cols=1000,",
                            "rows=04096,cols=1000", "rows=-4096,cols=1000", "rows=4096,cols=1000x",
                            "rows=99999999999999999999,cols=1000", "rows=4096;cols=1000"})
    body += "static_assert(sd::find_nearest(dev, \"softmax\", \"f32\", " + cpp_literal(shape) +
            ").resolution == sd::Resolution::none, " + cpp_literal(shape) + ");\n";
  body += "static_assert(sd::find_nearest(nullptr, nullptr, nullptr, nullptr).entry == nullptr, \"nulls\");\n";
  // Its logarithm, from 1 to 2^62, within a few units in the last place of the library's.
  for (const double x : {1.0, 2.0, 3.0, 10.0, 1000.0, 4095.0, 4096.0, 1e12, 4611686018427387904.0}) {
    const std::string expected = double_literal(std::log(x));
    body += "static_assert(sd::detail::log_positive(" + double_literal(x) + ") - " + expected + " <= 1e-15 && " +
            expected + " - sd::detail::log_positive(" + double_literal(x) + ") <= 1e-15, \"ln " + double_literal(x) +
            "\");\n";
  }
  const auto failure = compile_with_header(export_header({winner}, header_source()), body);
  if (!failure) GTEST_SKIP() << "no C++ compiler (c++) on PATH to compile the exported header with";
  EXPECT_EQ(*failure, "") << body;
}

TEST(ExportHeader, EmptyTableCompiles) {
  const std::string header = export_header({}, header_source());
  const auto failure = compile_with_header(
      header,
      "static_assert(shapetune_dispatch::kWinnerCount == 0, \"count\");\n"
      "static_assert(shapetune_dispatch::find(\"\", \"\", \"\", \"\") == nullptr, \"the sentinel is never found\");\n");
  if (!failure) GTEST_SKIP() << "no C++ compiler (c++) on PATH to compile the exported header with";
  EXPECT_EQ(*failure, "") << header;
}

}  // namespace
}  // namespace shapetune
