// `shapetune report`: README tables, data files, plot scripts, compare verdicts, errors.
#include "db/report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

const char* kDevice = "NVIDIA H200|sm_90|132SM|140GiB";

using test_support::contains;


DeviceFingerprint h200() {
  return DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{140} << 30, "580.0", "13.0", "13.1.0", "9.14.0"};
}

WinnerRecord winner(const std::string& primitive, Shape shape, const std::string& variant, Config config, double us,
                    double ci_rel) {
  WinnerRecord w;
  w.device_key = kDevice;
  w.problem = Problem{primitive, DType::f32, std::move(shape)};
  w.variant = variant;
  w.config = std::move(config);
  w.timing.median_us = us;
  w.timing.p10_us = us;
  w.timing.p90_us = us;
  w.timing.median_ci_rel = ci_rel;
  w.timing.samples = 20;
  w.sweep_id = 1;
  w.git_sha = "abc1234";
  w.measured_at = "2026-12-01T00:00:00Z";
  return w;
}

const Shape kSoftmaxShape({{"rows", 1024}, {"cols", 1000}});
const Shape kGemmShape({{"m", 4096}, {"n", 4096}, {"k", 4096}});
const Shape kSmallGemmShape({{"m", 64}, {"n", 64}, {"k", 64}});

// Memory-bound softmax (4 us, 8.192 MB: 2.048 TB/s, half of a 4.096 TB/s copy ceiling), a GEMM
// (10 ms for 2*4096^3 FLOPs: 13.7 TFLOP/s; a tie with its runner-up) and a NaN-cost winner.
void fill_fixture(const std::string& path, double softmax_us = 4.0, double gemm_us = 10000, bool compute_ceiling = false) {
  auto store = Store::open(path);
  store->upsert_device(h200());
  store->store_ceiling({kDevice, "dram_copy_best", 4.096e12, "B/s", "best of the copies", "abc1234", "2026-12-01T00:00:00Z"});
  if (compute_ceiling)
    store->store_ceiling({kDevice, "fp32_fma_peak", 50e12, "FLOP/s", "FMA chain kernel", "abc1234", "2026-12-01T00:00:00Z"});

  WinnerRecord softmax = winner("softmax", kSoftmaxShape, "register_row", Config({{"block_size", 128}}), softmax_us, 0.005);
  softmax.cost = Cost{8192000, 5120000};
  softmax.best_baseline = "cudnn";
  softmax.baseline_us = 5.0;
  softmax.speedup_vs_baseline = 5.0 / softmax_us;
  softmax.runner_up_variant = "warp_row";
  softmax.runner_up_config = Config({{"block_size", 64}});
  softmax.runner_up_us = softmax_us * 1.1;
  softmax.margin_rel = 0.1;
  store->store_winner(softmax);

  WinnerRecord gemm = winner("gemm.nn", kGemmShape, "tiled", Config({{"tile_m", 128}, {"tile_n", 128}}), gemm_us, 0.002);
  gemm.cost = Cost{3.0 * 4096 * 4096 * 4, 2.0 * 4096 * 4096 * 4096};
  gemm.best_baseline = "cublas";
  gemm.baseline_us = 9000;
  gemm.speedup_vs_baseline = 9000 / gemm_us;
  gemm.runner_up_variant = "tiled";
  gemm.runner_up_config = Config({{"tile_m", 64}, {"tile_n", 128}});
  gemm.runner_up_us = gemm_us * 1.005;
  gemm.margin_rel = 0.005;
  gemm.tie = true;
  store->store_winner(gemm);

  // As a row stored before schema 4 reads back: no cost (NaN), no baseline, no runner-up.
  store->store_winner(winner("gemm.nt", kSmallGemmShape, "tiled", Config({{"tile_m", 64}, {"tile_n", 64}}), 3.0, 0.004));
}

// As the CLI classifies baselines from the catalogue: cuBLAS and cuDNN are libraries, "unfused"
// is shapetune's own chain, anything else unknown.
BaselineKind fixture_kind(const std::string&, const std::string& variant) {
  if (variant.rfind("cublas", 0) == 0 || variant.rfind("cudnn", 0) == 0) return BaselineKind::library;
  if (variant == "unfused") return BaselineKind::own_chain;
  return BaselineKind::unknown;
}

ReportOptions options(const std::string& db, const fs::path& out, std::optional<std::string> compare = {},
                      const std::string& gnuplot = "shapetune-no-such-gnuplot") {
  ReportOptions o;
  o.db_path = db;
  o.out_dir = out.string();
  o.compare_db = std::move(compare);
  o.gnuplot = gnuplot;
  o.baseline_kind = fixture_kind;
  return o;
}

struct ReportFixture : ::testing::Test {
  test_support::TempDir tmp;
  std::string db = tmp.file("fixture.db");
  fs::path out = tmp.path() / "report";
  void SetUp() override { fill_fixture(db); }
  ReportResult report(const std::string& gnuplot = "gnuplot", std::optional<std::string> compare = {}) {
    return write_report(options(db, out, std::move(compare), gnuplot));
  }
};

TEST_F(ReportFixture, ReadmeTablesHaveExactRows) {
  const ReportResult result = report("shapetune-no-such-gnuplot");
  EXPECT_EQ(result.winners, 3);
  const std::string md = test_support::read_file(out / "README.md");
  EXPECT_CONTAINS(md, "(schema v6): 3 winners, 1 ceiling, 0 sweeps.\n");
  EXPECT_CONTAINS(md, "| `NVIDIA H200\\|sm_90\\|132SM\\|140GiB` | NVIDIA H200 | 9.0 | 132 | 60 MiB | 140.0 GiB | 580.0 | 13.0 "
                      "| 13.1.0 | 9.14.0 |\n");
  EXPECT_CONTAINS(md, "| name | value | method |\n|---|---|---|\n| `dram_copy_best` | 4.10 TB/s | best of the copies |\n");
  EXPECT_CONTAINS(md, "## Provenance\n\nNo sweeps recorded in this database.\n");
  // Families: "gemm" (gemm.nn, gemm.nt) before "softmax".
  const auto gemm = md.find("### gemm\n");
  const auto softmax = md.find("### softmax\n");
  ASSERT_NE(gemm, std::string::npos);
  ASSERT_NE(softmax, std::string::npos);
  EXPECT_LT(gemm, softmax);
  const std::string head =
      "| problem | winner | median | achieved | % of roof | best baseline | speedup | runner-up | margin |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  EXPECT_CONTAINS(md, "### softmax\n\n" + head +
                          "| `softmax/f32/rows=1024,cols=1000` | `register_row{block_size=128}` | 4.00 us | 2.05 TB/s | "
                          "50.0% | cudnn 5.00 us (library) | 1.25x | `warp_row{block_size=64}` | 10.0% |\n\n");
  EXPECT_CONTAINS(md, "### gemm\n\n" + head +
                          "| `gemm.nn/f32/m=4096,n=4096,k=4096` | `tiled{tile_m=128,tile_n=128}` | 10000.0 us | "
                          "13.7 TFLOP/s | no compute ceiling measured | cublas 9000.0 us (library) | 0.90x | "
                          "`tiled{tile_m=64,tile_n=128}` | 0.5% (tie) |\n"
                          "| `gemm.nt/f32/m=64,n=64,k=64` | `tiled{tile_m=64,tile_n=64}` | 3.00 us | - | - | - | - | - "
                          "| - |\n\n");
  EXPECT_FALSE(contains(md, "## Compared with"));
  EXPECT_FALSE(contains(md, "## Counters")) << "nothing profiled, nothing unavailable: no section";
}

// Winners profiled by `sweep --counters`: measured DRAM bytes against the cost model's, and the
// reason a sweep had no counters.
TEST_F(ReportFixture, CountersOfProfiledWinners) {
  {
    auto store = Store::open(db);
    const SweepInfo info{kDevice, "shapetune sweep q.yaml", "abc1234", "q.yaml", "feed", "l2=cold"};
    const std::int64_t profiled = store->begin_sweep(info);  // #1: the fixture's winners name it
    ASSERT_EQ(profiled, 1);
    const std::int64_t refused = store->begin_sweep(info);
    store->set_counters_unavailable(refused, "insufficient privileges: run as root");
    // Softmax's model moves 8192000 bytes; 2% more measured.
    store->record_counters({profiled, "softmax/f32/rows=1024,cols=1000", "register_row", "block_size=128",
                            {{"dram__bytes_read.sum", 4300000},
                             {"dram__bytes_write.sum", 4055840},
                             {"gpu__time_duration.sum", 3900},
                             {"sm__warps_active.avg.pct_of_peak_sustained_active", 81.3},
                             {"lts__t_sector_hit_rate.pct", 12.5},
                             {"dram__throughput.avg.pct_of_peak_sustained_elapsed", 55},
                             {"sm__throughput.avg.pct_of_peak_sustained_elapsed", 20},
                             {"fp32_flops", 5120000},
                             {"sm__inst_executed_pipe_tensor.sum", 0},
                             {"kernels", 1}}});
    // A candidate that is not the winner does not show.
    store->record_counters({profiled, "softmax/f32/rows=1024,cols=1000", "warp_row", "block_size=64",
                            {{"dram__bytes_read.sum", 1}, {"dram__bytes_write.sum", 1}}});
  }
  report("shapetune-no-such-gnuplot");
  const std::string md = test_support::read_file(out / "README.md");
  EXPECT_CONTAINS(md, "## Counters\n\n");
  EXPECT_CONTAINS(md, "- sweep #2: counters unavailable: insufficient privileges: run as root\n");
  EXPECT_CONTAINS(md, "| problem | winner | DRAM read | DRAM written | model bytes | DRAM vs model | duration | occupancy "
                      "| L2 hit | DRAM % | SM % | FP32 FLOPs | FP16 FLOPs | tensor inst | kernels |\n");
  EXPECT_CONTAINS(md, "| `softmax/f32/rows=1024,cols=1000` | `register_row{block_size=128}` | 4.3 MB | 4.1 MB | 8.2 MB | "
                      "**1.02x model** | 3.90 us | 81.3% | 12.5% | 55.0% | 20.0% | 5.12e+06 | - | 0 | 1 |\n");
  EXPECT_FALSE(contains(md, "`warp_row{block_size=64}` | 0.0 MB")) << md;
  // The GEMM winners were not profiled: no row for them in the section.
  EXPECT_EQ(md.find("| `gemm.nn/f32/m=4096,n=4096,k=4096` | `tiled{tile_m=128,tile_n=128}` | ", md.find("## Counters")),
            std::string::npos);
}

TEST_F(ReportFixture, ComputeBoundUsesAMeasuredComputeCeilingOnly) {
  test_support::TempDir other;
  const std::string db2 = other.file("fma.db");
  fill_fixture(db2, 4.0, 10000, /*compute_ceiling=*/true);
  write_report(options(db2, out));
  const std::string md = test_support::read_file(out / "README.md");
  // 13.74 TFLOP/s over min(50 TFLOP/s, 4.096 TB/s * 682.7 FLOP/B) = 27.5%.
  EXPECT_CONTAINS(md, "| 10000.0 us | 13.7 TFLOP/s | 27.5% | cublas 9000.0 us (library) |");
  EXPECT_CONTAINS(md, "| `fp32_fma_peak` | 50.0 TFLOP/s | FMA chain kernel |");
  EXPECT_FALSE(contains(md, "no compute ceiling measured"));
}

TEST_F(ReportFixture, DataFilesAndScripts) {
  const ReportResult result = report("shapetune-no-such-gnuplot");
  const std::string roofline_head =
      "# intensity_flop_per_byte winner_tflop_per_s best_baseline_tflop_per_s label problem variant label_y\n";
  EXPECT_EQ(test_support::read_file(out / "data" / "roofline_softmax.dat"),
            roofline_head + "# dtype f32\n"
                            "0.625 1.28 1.024 \"f32 1024x1000\" \"softmax/f32/rows=1024,cols=1000\" \"register_row\" 1.28\n\n\n");
  // The NaN-cost gemm.nt has no point; the point's label names attributes, dtype and extents.
  EXPECT_EQ(test_support::read_file(out / "data" / "roofline_gemm.dat"),
            roofline_head + "# dtype f32\n"
                            "682.667 13.7439 15.271 \"nn f32 4096x4096x4096\" \"gemm.nn/f32/m=4096,n=4096,k=4096\" "
                            "\"tiled\" 13.7439\n\n\n");
  // Bars carry their colour: 29362 is 0x0072b2, the library colour.
  EXPECT_EQ(test_support::read_file(out / "data" / "speedup.dat"),
            "# index speedup colour problem baseline kind\n"
            "0 0.9 29362 \"gemm.nn/f32/m=4096,n=4096,k=4096\" \"cublas\" \"library\"\n"
            "1 1.25 29362 \"softmax/f32/rows=1024,cols=1000\" \"cudnn\" \"library\"\n");
  EXPECT_EQ(test_support::read_file(out / "data" / "winner_map.dat"),
            "# variant_index problem_index colour problem variant\n"
            "0 0 29362 \"gemm.nn/f32/m=4096,n=4096,k=4096\" \"tiled\"\n"
            "0 1 29362 \"gemm.nt/f32/m=64,n=64,k=64\" \"tiled\"\n"
            "1 2 29362 \"softmax/f32/rows=1024,cols=1000\" \"register_row\"\n");
  for (const char* name : {"roofline_gemm", "roofline_softmax", "speedup", "winner_map"}) {
    const fs::path script = out / "plots" / (std::string(name) + ".gp");
    ASSERT_TRUE(fs::exists(script)) << script;
    const std::string text = test_support::read_file(script);
    EXPECT_CONTAINS(text, "set terminal svg");
    EXPECT_CONTAINS(text, std::string("set output here . '") + name + ".svg'");
    EXPECT_CONTAINS(text, std::string("set output here . '") + name + ".png'");
    EXPECT_FALSE(fs::exists(out / "plots" / (std::string(name) + ".svg")));
  }
  // No compute ceiling in this fixture: the copy roof alone, in TFLOP/s per FLOP/byte.
  const std::string softmax = test_support::read_file(out / "plots" / "roofline_softmax.gp");
  EXPECT_CONTAINS(softmax, " ? 4.096 * x : NaN) with lines lw 2 lc rgb '#000000' title 'DRAM copy 4.10 TB/s x intensity'");
  EXPECT_CONTAINS(softmax, "set ylabel 'achieved TFLOP/s'");
  EXPECT_CONTAINS(softmax, "using 1:7:4 with labels");
  EXPECT_EQ(result.scripts.size(), 4u);
  EXPECT_FALSE(result.gnuplot_found);
  EXPECT_TRUE(result.svgs.empty());
  const std::string md = test_support::read_file(out / "README.md");
  EXPECT_CONTAINS(md, "gnuplot was not on PATH");
  EXPECT_CONTAINS(md, "`gnuplot " + (out / "plots").string() + "/*.gp`");
  EXPECT_CONTAINS(md, "![Roofline: softmax](plots/roofline_softmax.png) ([SVG](plots/roofline_softmax.svg))");
  EXPECT_CONTAINS(md, "![Speedup over the best baseline](plots/speedup.png)");
  EXPECT_CONTAINS(md, "![Winner map](plots/winner_map.png)");
}

// Two problems at one spot (same intensity and rate, as a size swept in two dtypes often is):
// the second label climbs above the first instead of printing over it, and a short log range
// gets 1-2-5 ticks rather than a single decade label.
TEST(ReportPlots, CoincidentPointsGetSeparateLabelLinesAndShortRangesGetTicks) {
  test_support::TempDir tmp;
  const std::string db = tmp.file("two.db");
  {
    auto store = Store::open(db);
    store->upsert_device(h200());
    store->store_ceiling({kDevice, "dram_copy_best", 4.096e12, "B/s", "copy", "abc1234", "2026-12-01T00:00:00Z"});
    for (const char* primitive : {"softmax", "softmax.other"}) {
      WinnerRecord w = winner(primitive, kSoftmaxShape, "register_row", Config(), 4.0, 0.01);
      w.cost = Cost{8192000, 5120000};
      store->store_winner(w);
    }
  }
  const fs::path out = tmp.path() / "report";
  write_report(options(db, out));
  const std::string data = test_support::read_file(out / "data" / "roofline_softmax.dat");
  std::vector<double> label_y;
  std::istringstream lines(data);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') label_y.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
  ASSERT_EQ(label_y.size(), 2u) << data;
  EXPECT_EQ(label_y[0], 1.28);
  EXPECT_GT(label_y[1], label_y[0] * 1.01) << "the second label must sit on its own line";
  const std::string script = test_support::read_file(out / "plots" / "roofline_softmax.gp");
  EXPECT_CONTAINS(script, "set ytics (0.5, 1, 2)");
}

bool gnuplot_on_path() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

TEST_F(ReportFixture, SvgsWhenGnuplotIsPresent) {
  if (!gnuplot_on_path()) GTEST_SKIP() << "gnuplot is not on PATH here (Debian: apt-get install gnuplot-nox)";
  const ReportResult result = report();
  EXPECT_TRUE(result.gnuplot_found);
  EXPECT_EQ(result.plots_failed, 0);
  EXPECT_EQ(result.svgs.size(), 4u);
  for (const char* name : {"roofline_gemm", "roofline_softmax", "speedup", "winner_map"}) {
    const fs::path svg = out / "plots" / (std::string(name) + ".svg");
    ASSERT_TRUE(fs::exists(svg)) << svg;
    EXPECT_CONTAINS(test_support::read_file(svg), "<svg");
    const std::string png = test_support::read_file(out / "plots" / (std::string(name) + ".png"));
    EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n") << name;
  }
  EXPECT_FALSE(contains(test_support::read_file(out / "README.md"), "gnuplot was not on PATH"));
  // The scripts find their data relative to themselves: rendering from another directory works.
  fs::remove(out / "plots" / "speedup.svg");
  const std::string command = "cd / && gnuplot '" + (out / "plots" / "speedup.gp").string() + "' 2>/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0);
  EXPECT_TRUE(fs::exists(out / "plots" / "speedup.svg"));
}

// A report of someone else's database must never run anything. Every string field that reaches a
// plot script or data file carries payloads that would create a marker file if gnuplot (or a
// shell) ever executed them: backticks, $( ), a quote that ends a literal and calls system(),
// a line break that starts a new command, a macro, a backslash.
std::vector<std::string> hostile_payloads(const fs::path& marker_dir) {
  const std::string m = (marker_dir / "PWNED").string();
  return {"x`touch " + m + "1`", "x$(touch " + m + "2)", "x'.system('touch " + m + "3').'",
          "x\".system(\"touch " + m + "4\").\"", "x\nsystem 'touch " + m + "5'\n", "x@evil\\'\\\"\x01\xff"};
}

// The script with its comments and every single-quoted gnuplot literal ('' inside one is a quote)
// cut out: what is left is what gnuplot reads as commands.
std::string outside_literals(const std::string& script) {
  std::string out;
  bool in_literal = false;
  for (std::size_t i = 0; i < script.size(); ++i) {
    const char c = script[i];
    if (!in_literal) {
      if (c == '#') {
        while (i + 1 < script.size() && script[i + 1] != '\n') ++i;
      } else if (c == '\'') {
        in_literal = true;
      } else {
        out += c;
      }
    } else if (c == '\'') {
      if (i + 1 < script.size() && script[i + 1] == '\'') ++i;
      else in_literal = false;
    }
  }
  EXPECT_FALSE(in_literal) << "an unterminated literal in\n" << script;
  return out;
}

TEST(Report, HostileStringsInADatabaseNeverRun) {
  test_support::TempDir tmp;
  const std::string db = tmp.file("evil.db");
  const auto payloads = hostile_payloads(tmp.path());
  {
    auto store = Store::open(db);
    store->upsert_device(h200());
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      const std::string& p = payloads[i];
      store->store_ceiling({kDevice, "fp32_fma" + p, 50e12, "FLOP/s", p, p, "2026-12-01T00:00:00Z"});
      // A memory-bound and a compute-bound point per payload: every plot draws them.
      WinnerRecord w = winner("softmax" + p, Shape({{"rows" + p, 1024}, {"cols", 1000 + std::int64_t(i)}}), "v" + p,
                              Config(), 4.0, 0.01);
      w.cost = Cost{8192000, 5120000};
      w.best_baseline = "b" + p;
      w.baseline_us = 5.0;
      w.speedup_vs_baseline = 1.25;
      w.runner_up_variant = "r" + p;
      w.runner_up_us = 4.4;
      store->store_winner(w);
      WinnerRecord g = winner("gemm" + p, Shape({{"m", 4096 + std::int64_t(i)}, {"n", 4096}, {"k", 4096}}), "g" + p,
                              Config(), 10000, 0.01);
      g.cost = Cost{3.0 * 4096 * 4096 * 4, 2.0 * 4096 * 4096 * 4096};
      g.best_baseline = "c" + p;
      g.baseline_us = 9000;
      g.speedup_vs_baseline = 0.9;
      store->store_winner(g);
    }
    store->store_ceiling({kDevice, "dram_copy_best", 4.096e12, "B/s", payloads[0], payloads[1], "2026-12-01T00:00:00Z"});
  }
  const fs::path out = tmp.path() / "report";
  const ReportResult result = write_report(options(db, out.string(), std::nullopt, "gnuplot"));
  ASSERT_FALSE(result.scripts.empty());
  for (const std::string& script_path : result.scripts) {
    const std::string code = outside_literals(test_support::read_file(script_path));
    for (const char* danger : {"`", "$(", "system", "@", "\"", "touch", "PWNED"})
      EXPECT_FALSE(contains(code, danger)) << script_path << " has " << danger << " outside a literal:\n" << code;
  }
  for (const auto& entry : fs::directory_iterator(out / "data")) {
    const std::string data = test_support::read_file(entry.path());
    for (const std::string control : {"\r", "\x01", "\xff"})
      EXPECT_FALSE(contains(data, control)) << entry.path();
  }
  if (result.gnuplot_found) {
    EXPECT_EQ(result.plots_failed, 0) << "hostile labels must still render";
  }
  for (int i = 1; i <= 5; ++i)
    EXPECT_FALSE(fs::exists(tmp.path() / ("PWNED" + std::to_string(i)))) << "payload " << i << " ran";
}

TEST_F(ReportFixture, CompareShowsBothWinnersAndEveryProblemOnlyInOneSide) {
  const std::string other = tmp.file("other.db");
  {
    // The other database is 10% faster on softmax with another variant (a planted regression
    // here) and 0.3% slower on the GEMM (inside the 1% band); it lacks gemm.nt and has a problem
    // of its own, which this one lost.
    auto store = Store::open(other);
    store->upsert_device(h200());
    ASSERT_EQ(store->begin_sweep({kDevice, "shapetune sweep old.yaml", "0ld5ha", "old.yaml", "beef", "l2=cold"}), 1);
    store->store_winner(winner("softmax", kSoftmaxShape, "warp_row", Config({{"block_size", 64}}), 4.0 / 1.1, 0.004));
    store->store_winner(winner("gemm.nn", kGemmShape, "tiled", Config({{"tile_m", 128}, {"tile_n", 128}}), 10030, 0.002));
    store->store_winner(winner("layernorm", Shape({{"rows", 8}, {"cols", 8}}), "register_row", Config(), 2.0, 0.01));
  }
  const ReportResult result = report("shapetune-no-such-gnuplot", other);
  const std::string md = test_support::read_file(out / "README.md");
  EXPECT_CONTAINS(md, "## Compared with `" + other + "`\n\n");
  EXPECT_CONTAINS(md, "- Other: `" + other + "`: sweep #1 `shapetune sweep old.yaml` at `0ld5ha`, ");
  EXPECT_CONTAINS(md, "- This: `" + db + "` (no sweep holds a winner)\n");
  EXPECT_CONTAINS(md, "Summary: 2 problems in both: 0 faster, 1 slower, 1 same within noise; 1 only here, 1 only in "
                      "the other. 2 regressions.\n");
  EXPECT_CONTAINS(md, "| problem | this winner | this | other winner | other | change | noise band | verdict |\n"
                      "|---|---|---|---|---|---|---|---|\n"
                      "| `gemm.nn/f32/m=4096,n=4096,k=4096` | `tiled{tile_m=128,tile_n=128}` | 10000.0 us | "
                      "`tiled{tile_m=128,tile_n=128}` | 10030.0 us | -0.3% | 1.0% | same |\n"
                      "| `softmax/f32/rows=1024,cols=1000` | `register_row{block_size=128}` | 4.00 us | "
                      "`warp_row{block_size=64}` | 3.64 us | +10.0% | 1.0% | **slower** |\n");
  EXPECT_CONTAINS(md, "### Only in this database\n\n- `gemm.nt/f32/m=64,n=64,k=64`: `tiled{tile_m=64,tile_n=64}` 3.00 us\n");
  EXPECT_CONTAINS(md, "### Only in the other database (lost here)\n\n- `layernorm/f32/rows=8,cols=8`: `register_row` 2.00 us\n");
  EXPECT_EQ(result.regressions, 2);
  EXPECT_EQ(result.regressed, (std::vector<std::string>{"softmax/f32/rows=1024,cols=1000", "layernorm/f32/rows=8,cols=8"}));

  // Against itself: nothing to fail on.
  EXPECT_EQ(report("shapetune-no-such-gnuplot", db).regressions, 0);
  EXPECT_CONTAINS(test_support::read_file(out / "README.md"), "0 only here, 0 only in the other. No regressions.\n");
}

// The CLI: --fail-on-regression turns a regression into exit 1 (for CI), and needs --compare.
TEST_F(ReportFixture, FailOnRegressionExitsOne) {
  const std::string slower = tmp.file("slower.db");
  fill_fixture(slower, /*softmax_us=*/5.0);  // softmax 25% slower than the fixture's 4 us
  auto run = [&](std::vector<std::string> args, std::string* err_text = nullptr) {
    const auto result = test_support::run_shapetune(args);
    if (err_text) *err_text = result.err;
    return result.code;
  };
  const std::string dir = (tmp.path() / "cli-report").string();
  std::string err;
  EXPECT_EQ(run({"report", "--db", slower, "-o", dir, "--compare", db, "--fail-on-regression"}, &err), 1);
  EXPECT_CONTAINS(err, "REGRESSION: 1 problem slower than in " + db);
  EXPECT_CONTAINS(err, "softmax/f32/rows=1024,cols=1000");
  EXPECT_EQ(run({"report", "--db", slower, "-o", dir, "--compare", db}, &err), 0) << "without the flag, a note only";
  EXPECT_CONTAINS(err, "note: 1 problem slower");
  EXPECT_EQ(run({"report", "--db", db, "-o", dir, "--compare", slower, "--fail-on-regression"}), 0) << "faster is fine";
  EXPECT_EQ(run({"report", "--db", db, "-o", dir, "--fail-on-regression"}, &err), 2);
  EXPECT_CONTAINS(err, "--fail-on-regression needs --compare");
}

// A report written into a directory that held an older one leaves none of the old files behind,
// and nothing a user put there is touched.
TEST_F(ReportFixture, StaleOutputsAreRemoved) {
  report("shapetune-no-such-gnuplot");
  fs::create_directories(out / "plots");
  std::ofstream(out / "plots" / "roofline_retired_family.gp") << "old";
  std::ofstream(out / "plots" / "roofline_retired_family.png") << "old";
  std::ofstream(out / "data" / "roofline_retired_family.dat") << "old";
  std::ofstream(out / "notes.txt") << "mine";
  report("shapetune-no-such-gnuplot");
  EXPECT_FALSE(fs::exists(out / "plots" / "roofline_retired_family.gp"));
  EXPECT_FALSE(fs::exists(out / "plots" / "roofline_retired_family.png"));
  EXPECT_FALSE(fs::exists(out / "data" / "roofline_retired_family.dat"));
  EXPECT_TRUE(fs::exists(out / "plots" / "roofline_softmax.gp"));
  EXPECT_EQ(test_support::read_file(out / "notes.txt"), "mine");
}

TEST(ReportVerdict, NoiseBandIsTheLargerOfOnePercentAndEitherCi) {
  EXPECT_EQ(compare_verdict(110, 0.005, 100, 0.004), "slower");
  EXPECT_EQ(compare_verdict(90, 0.005, 100, 0.004), "faster");
  EXPECT_EQ(compare_verdict(100.5, 0.001, 100, 0.001), "same");
  EXPECT_EQ(compare_verdict(101.5, 0.001, 100, 0.001), "slower");  // outside 1%
  EXPECT_EQ(compare_verdict(101.5, 0.02, 100, 0.001), "same");     // inside this one's CI
  EXPECT_EQ(compare_verdict(97, 0.001, 100, 0.05), "same");        // inside the other's CI
  EXPECT_EQ(compare_verdict(101.5, std::nan(""), 100, std::nan("")), "slower");
  EXPECT_EQ(compare_verdict(std::nan(""), 0.01, 100, 0.01), "n/a");
}

TEST(ReportErrors, MissingDatabase) {
  test_support::TempDir tmp;
  try {
    write_report(options(tmp.file("nope.db"), tmp.file("out"), std::nullopt, "gnuplot"));
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "nope.db does not exist");
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
}

TEST(ReportErrors, MissingCompareDatabase) {
  test_support::TempDir tmp;
  fill_fixture(tmp.file("a.db"));
  EXPECT_THROW(write_report(options(tmp.file("a.db"), tmp.file("out"), tmp.file("nope.db"), "gnuplot")), ReportError);
}

TEST(ReportErrors, UnwritableDirectory) {
  test_support::TempDir tmp;
  fill_fixture(tmp.file("a.db"));
  std::ofstream(tmp.file("plain-file")) << "x";
  // A file where a directory must go: fails even as root, unlike a permission bit.
  try {
    write_report(options(tmp.file("a.db"), tmp.file("plain-file") + "/report", std::nullopt, "gnuplot"));
    FAIL() << "no error";
  } catch (const ReportError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "cannot create directory");
  }
}

TEST(ReportErrors, NoWinnersSaysSo) {
  test_support::TempDir tmp;
  {
    auto store = Store::open(tmp.file("empty.db"));
    store->upsert_device(h200());
  }
  const ReportResult result = write_report(options(tmp.file("empty.db"), tmp.file("out"), std::nullopt, "gnuplot"));
  EXPECT_EQ(result.winners, 0);
  EXPECT_TRUE(result.scripts.empty());
  const std::string md = test_support::read_file(tmp.path() / "out" / "README.md");
  EXPECT_CONTAINS(md, "No winners in this database yet");
  EXPECT_CONTAINS(md, "No ceilings measured");
  EXPECT_CONTAINS(md, "NVIDIA H200");
  EXPECT_FALSE(contains(md, "## Plots"));
}

TEST(ReportSmoke, CommittedMemoryBoundDatabase) {
  const fs::path db = test_support::source_dir() / "reports" / "h200" / "2026-11-30-memory-bound" / "h200.db";
  ASSERT_TRUE(fs::exists(db)) << db;
  test_support::TempDir tmp;
  const ReportResult result = write_report(options(db.string(), tmp.file("out"), std::nullopt, "gnuplot"));
  EXPECT_GT(result.winners, 0);
  const std::string md = test_support::read_file(tmp.path() / "out" / "README.md");
  EXPECT_CONTAINS(md, "### layernorm\n");
  EXPECT_CONTAINS(md, "`layernorm/");
  EXPECT_CONTAINS(md, "| `dram_copy_best` | 4.26 TB/s |");
  EXPECT_CONTAINS(md, "| `dram_copy_memcpy` | 4.26 TB/s |");
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "plots" / "roofline_layernorm.gp"));
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "data" / "roofline_layernorm.dat"));
}

// An older schema is read through a migrated temporary copy; the file itself is not touched,
// and its rows (stored without a cost) show "-" for achieved and roofline.
TEST(ReportSmoke, OlderSchemaIsReadWithoutChangingTheFile) {
  const fs::path db = test_support::source_dir() / "reports" / "h200" / "2026-11-30-foundation-softmax" / "h200.db";
  ASSERT_TRUE(fs::exists(db)) << db;
  const std::string before = test_support::read_file(db);
  test_support::TempDir tmp;
  const ReportResult result = write_report(options(db.string(), tmp.file("out"), std::nullopt, "shapetune-no-such-gnuplot"));
  EXPECT_GT(result.winners, 0);
  const std::string md = test_support::read_file(tmp.path() / "out" / "README.md");
  EXPECT_CONTAINS(md, "(schema v2, read through a temporary copy migrated to v6)");
  EXPECT_CONTAINS(md, " | - | - | cudnn ");
  EXPECT_EQ(test_support::read_file(db), before);
}

}  // namespace
}  // namespace shapetune
