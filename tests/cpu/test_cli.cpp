// The `shapetune` command's behaviour on good and bad input, without a GPU.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "harness/counters.hpp"
#include "support/test_support.hpp"
#include "tuner/sweep.hpp"

namespace shapetune {
namespace {

using Result = test_support::CliResult;
constexpr auto run = &test_support::run_shapetune;

using test_support::contains;

std::string quick_yaml() { return (test_support::source_dir() / "shapes" / "quick.yaml").string(); }

TEST(Cli, HelpAndUsage) {
  const Result none = run({});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.err, "usage: shapetune COMMAND"));
  const Result help = run({"--help"});
  EXPECT_EQ(help.code, 0);
  for (const char* command : {"devices", "list", "sweep", "winners", "export", "ceilings"})
    EXPECT_TRUE(contains(help.out, command)) << command;
  const Result sweep_help = run({"sweep", "--help"});
  EXPECT_EQ(sweep_help.code, 0);
  EXPECT_TRUE(contains(sweep_help.out, "--budget SECONDS"));
  EXPECT_TRUE(contains(sweep_help.out, "resumes"));
}

TEST(Cli, UnknownCommandAndOptionNameTheValidOnes) {
  const Result cmd = run({"sweeep"});
  EXPECT_EQ(cmd.code, 2);
  EXPECT_TRUE(contains(cmd.err, "unknown command 'sweeep'"));
  EXPECT_TRUE(contains(cmd.err, "sweep"));
  const Result opt = run({"winners", "--db", "x.db", "--bogus"});
  EXPECT_EQ(opt.code, 2);
  EXPECT_TRUE(contains(opt.err, "unknown option --bogus"));
  EXPECT_TRUE(contains(opt.err, "shapetune winners --help"));
}

TEST(Cli, MissingArgumentsAndBadValues) {
  EXPECT_TRUE(contains(run({"sweep"}).err, "needs FILE.yaml"));
  EXPECT_TRUE(contains(run({"sweep", quick_yaml()}).err, "--db FILE is required"));
  const Result budget = run({"sweep", quick_yaml(), "--db", "x.db", "--budget", "ten"});
  EXPECT_EQ(budget.code, 2);
  EXPECT_TRUE(contains(budget.err, "--budget expects a number, got 'ten'"));
  const Result negative = run({"sweep", quick_yaml(), "--db", "x.db", "--time-cap", "-1"});
  EXPECT_EQ(negative.code, 2);
  EXPECT_TRUE(contains(negative.err, "--time-cap must be between"));
  const Result dangling = run({"winners", "--db"});
  EXPECT_EQ(dangling.code, 2);
  EXPECT_TRUE(contains(dangling.err, "--db needs a value"));
}

TEST(Cli, UnknownPrimitiveVariantListTheKnownNames) {
  const Result p = run({"sweep", quick_yaml(), "--db", "x.db", "--primitive", "sofmax"});
  EXPECT_EQ(p.code, 2);
  EXPECT_TRUE(contains(p.err, "unknown primitive 'sofmax'"));
  EXPECT_TRUE(contains(p.err, "softmax"));
  const Result v = run({"sweep", quick_yaml(), "--db", "x.db", "--variant", "warp_row"});
  EXPECT_EQ(v.code, 2);
  EXPECT_TRUE(contains(v.err, "unknown variant 'warp_row'"));
  EXPECT_TRUE(contains(v.err, "warp_row_online"));
  const Result l = run({"list", "layernorn"});
  EXPECT_EQ(l.code, 2);
  EXPECT_TRUE(contains(l.err, "unknown primitive 'layernorn'"));
}

TEST(Cli, MalformedShapeFileGivesFileLineColumn) {
  test_support::TempDir dir;
  const std::string path = dir.file("bad.yaml");
  std::ofstream(path) << "matrices:\n  - primitive: softmax\n    dtypes: [f32\n";
  const Result r = run({"sweep", path, "--db", dir.file("x.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, path + ":")) << r.err;
  EXPECT_TRUE(contains(r.err, "malformed YAML")) << r.err;
}

TEST(Cli, DryRunNeedsNoGpu) {
  const Result r = run({"sweep", quick_yaml(), "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "softmax/f32/rows=1024,cols=1000"));
  EXPECT_TRUE(contains(r.out, "Dry run: nothing measured"));
}

TEST(Cli, CounterOptionsAreCheckedBeforeAnythingRuns) {
  const Result bad_mode = run({"sweep", quick_yaml(), "--dry-run", "--counters", "some"});
  EXPECT_EQ(bad_mode.code, 2);
  EXPECT_TRUE(contains(bad_mode.err, "--counters must be all, winners or none, got 'some'")) << bad_mode.err;

  if (kCountersBlockedBySanitizer) GTEST_SKIP() << "CUPTI's host library cannot run under AddressSanitizer";
  // Without a GPU the names are checked against GH100 (H100/H200), on the host.
  const Result bad_metric =
      run({"sweep", quick_yaml(), "--dry-run", "--metrics", "dram__bytes_read.sum,dram__bytes_teleported.sum"});
  EXPECT_EQ(bad_metric.code, 2);
  EXPECT_TRUE(contains(bad_metric.err, "'dram__bytes_teleported.sum'")) << bad_metric.err;
  EXPECT_FALSE(contains(bad_metric.out, "Dry run")) << "refused before the dry run";

  const Result good = run({"sweep", quick_yaml(), "--dry-run", "--counters", "all", "--metrics", "lts__t_sectors.sum"});
  EXPECT_EQ(good.code, 0) << good.err;

  const Result none = run({"sweep", quick_yaml(), "--dry-run", "--counters", "none", "--metrics", "lts__t_sectors.sum"});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.err, "--counters none")) << none.err;

  const Result help = run({"sweep", "--help"});
  for (const char* text : {"--counters all|winners|none", "--metrics M", "counters unavailable: REASON",
                           "counters: DRAM 1.02x model"})
    EXPECT_TRUE(contains(help.out, text)) << text;
}

TEST(Cli, SweepHelpDescribesTheStrategies) {
  const Result help = run({"sweep", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(contains(help.out, "--strategy NAME"));
  for (const char* text : {"exhaustive, random or halving", "successive halving", "samples: N or fraction: F",
                           "measured 5/312 (halving"})
    EXPECT_TRUE(contains(help.out, text)) << text;
}

TEST(Cli, UnknownStrategyListsTheValidOnes) {
  const Result r = run({"sweep", quick_yaml(), "--dry-run", "--strategy", "halfing"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--strategy must be one of exhaustive, random, halving, got 'halfing'")) << r.err;
}

TEST(Cli, DryRunShowsEachProblemsStrategyAndPrunedCounts) {
  const Result exhaustive = run({"sweep", quick_yaml(), "--dry-run"});
  EXPECT_EQ(exhaustive.code, 0) << exhaustive.err;
  EXPECT_TRUE(contains(exhaustive.out, "; search: exhaustive; expected ~")) << exhaustive.out;
  EXPECT_TRUE(contains(exhaustive.out, " by constraint, ")) << exhaustive.out;
  const Result halving = run({"sweep", quick_yaml(), "--dry-run", "--strategy", "halving"});
  EXPECT_EQ(halving.code, 0) << halving.err;
  EXPECT_TRUE(contains(halving.out, "softmax/f32/rows=1024,cols=1000: ")) << halving.out;
  EXPECT_TRUE(contains(halving.out, "search: halving (eta 3, min_samples 5)")) << halving.out;
  EXPECT_FALSE(contains(halving.out, "search: exhaustive")) << halving.out;
}

TEST(Cli, ShapeFileSearchAndItsCommandLineOverride) {
  test_support::TempDir dir;
  const std::string path = dir.file("s.yaml");
  std::ofstream(path) << "matrices:\n  - primitive: softmax\n    dtypes: [f32]\n    axes: {rows: 8, cols: 1000}\n"
                         "    search: {strategy: random, samples: 20, seed: 4}\n";
  const Result file = run({"sweep", path, "--dry-run"});
  EXPECT_EQ(file.code, 0) << file.err;
  EXPECT_TRUE(contains(file.out, "search: random (samples 20, seed 4)")) << file.out;
  // The same strategy on the command line keeps the file's settings; another replaces them.
  EXPECT_TRUE(contains(run({"sweep", path, "--dry-run", "--strategy", "random"}).out, "random (samples 20, seed 4)"));
  EXPECT_TRUE(contains(run({"sweep", path, "--dry-run", "--strategy", "halving"}).out, "search: halving (eta 3"));
  // Random search with neither a count nor a budget is refused before anything starts.
  const Result unbounded = run({"sweep", quick_yaml(), "--dry-run", "--strategy", "random"});
  EXPECT_EQ(unbounded.code, 2);
  EXPECT_TRUE(contains(unbounded.err, quick_yaml() + ":")) << unbounded.err;
  EXPECT_TRUE(contains(unbounded.err, "random search of this matrix has no limit")) << unbounded.err;
  EXPECT_TRUE(contains(unbounded.err, "--budget SECONDS")) << unbounded.err;
  EXPECT_EQ(run({"sweep", quick_yaml(), "--dry-run", "--strategy", "random", "--budget", "60"}).code, 0);
}

TEST(Cli, BadSearchInTheShapeFileGivesFileLineColumn) {
  test_support::TempDir dir;
  const std::string path = dir.file("bad.yaml");
  std::ofstream(path) << "matrices:\n  - primitive: softmax\n    dtypes: [f32]\n    axes: {rows: 8, cols: 1000}\n"
                         "    search: {strategy: halving, eta: 1}\n";
  const Result r = run({"sweep", path, "--dry-run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, path + ":5:38: eta 1 is out of range; expected eta: an integer from 2 to 100")) << r.err;
}

TEST(Cli, StrategyIsPartOfTheSweepIdentityOnlyWhenGiven) {
  SweepOptions options;
  const std::string plain = result_affecting_options(options);
  EXPECT_FALSE(contains(plain, "strategy")) << plain;
  options.strategy = SearchStrategy::halving;
  EXPECT_TRUE(contains(result_affecting_options(options), ";strategy=halving"));
  options.strategy = SearchStrategy::exhaustive;
  EXPECT_NE(result_affecting_options(options), plain);
}

TEST(Cli, SweepWithoutAGpuSaysSoAndExitsTwo) {
  if (!cuda_unavailable_reason()) GTEST_SKIP() << "a CUDA device is present; this checks the no-GPU path";
  test_support::TempDir dir;
  const Result r = run({"sweep", quick_yaml(), "--db", dir.file("x.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "needs a CUDA device")) << r.err;
  EXPECT_TRUE(contains(r.err, "--dry-run")) << r.err;
  const Result d = run({"devices"});
  EXPECT_EQ(d.code, 2);
  EXPECT_TRUE(contains(d.err, "no usable CUDA device"));
  // A machine with no driver at all is told so, not that its driver is too old.
  if (!std::filesystem::exists("/proc/driver/nvidia/version")) {
    EXPECT_TRUE(contains(d.err, "no NVIDIA driver is loaded on this machine")) << d.err;
    EXPECT_TRUE(contains(r.err, "no NVIDIA driver is loaded on this machine")) << r.err;
  }
}

TEST(Cli, ListShowsVariantsAndParameterSpaces) {
  const Result all = run({"list"});
  EXPECT_EQ(all.code, 0);
  EXPECT_TRUE(contains(all.out, "cudnn (baseline)"));
  const Result softmax = run({"list", "softmax"});
  EXPECT_EQ(softmax.code, 0);
  EXPECT_TRUE(contains(softmax.out, "register_row"));
  EXPECT_TRUE(contains(softmax.out, "packs_per_thread in {1, 2, 4, 8, 16}"));
  EXPECT_TRUE(contains(softmax.out, "where threads_per_row <= block_size"));
}

TEST(Cli, DatabaseErrorsAreClearAndExitTwo) {
  test_support::TempDir dir;
  const std::string text_file = dir.file("notes.txt");
  std::ofstream(text_file) << "this is not a database, it is a shopping list\n";
  const Result not_db = run({"winners", "--db", text_file});
  EXPECT_EQ(not_db.code, 2);
  EXPECT_TRUE(contains(not_db.err, text_file)) << not_db.err;

  const std::string newer = dir.file("newer.db");
  Store::open(newer).reset();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  const Result future = run({"export", "--db", newer, "--format", "json"});
  EXPECT_EQ(future.code, 2);
  EXPECT_TRUE(contains(future.err, "99")) << future.err;

  const Result missing = run({"winners", "--db", dir.file("nope.db")});
  EXPECT_EQ(missing.code, 2);
}

TEST(Cli, ExportFormatsAndUnwritablePaths) {
  test_support::TempDir dir;
  const std::string db = dir.file("w.db");
  {
    auto store = Store::open(db);
    WinnerRecord w;
    w.device_key = "NVIDIA H200|sm_90|132SM|140GiB";
    w.problem = Problem{"softmax", DType::f32, Shape({{"rows", 4096}, {"cols", 4096}})};
    w.variant = "register_row";
    w.config = Config({{"threads_per_row", 512}, {"block_size", 512}, {"packs_per_thread", 2}});
    w.timing.median_us = 40;
    w.timing.p10_us = 39;
    w.timing.p90_us = 41;
    w.timing.samples = 30;
    w.best_baseline = "cudnn";
    w.baseline_us = 80;
    w.speedup_vs_baseline = 2;
    store->store_winner(w);
  }
  const Result table = run({"winners", "--db", db});
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_TRUE(contains(table.out, "softmax/f32/rows=4096,cols=4096"));
  EXPECT_TRUE(contains(table.out, "2.00x"));
  EXPECT_TRUE(contains(table.out, "3.36 TB/s"));  // 2*4096*4096*4 bytes in 40 us
  EXPECT_TRUE(contains(table.out, "counters")) << table.out;
  EXPECT_FALSE(contains(table.out, "DRAM")) << "not profiled: no counters to show";
  {
    auto store = Store::open(db);
    store->upsert_device(DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{140} << 30, "580.0", "13.0",
                                           "13.1.0", "9.14.0"});
    const std::int64_t sweep = store->begin_sweep({"NVIDIA H200|sm_90|132SM|140GiB", "shapetune sweep", "abc", "q.yaml",
                                                   "feed", "l2=cold"});
    // The winner row above has sweep_id 0; point it at the sweep that profiled it.
    WinnerRecord w = store->winners().at(0);
    w.sweep_id = sweep;
    store->store_winner(w);
    // 2*4096*4096*4 = 134217728 bytes in the model (catalogue's, the row has no stored cost); 5% more measured.
    store->record_counters({sweep, w.problem.key(), w.variant, w.config.key(),
                            {{"dram__bytes_read.sum", 134217728 * 0.55}, {"dram__bytes_write.sum", 134217728 * 0.5}}});
  }
  const Result profiled = run({"winners", "--db", db});
  EXPECT_EQ(profiled.code, 0) << profiled.err;
  EXPECT_TRUE(contains(profiled.out, "DRAM 1.05x model")) << profiled.out;

  const Result json = run({"export", "--db", db, "--format", "json"});
  EXPECT_EQ(json.code, 0);
  EXPECT_TRUE(contains(json.out, "\"variant\""));
  EXPECT_TRUE(contains(json.out, "register_row"));

  const std::string csv_path = dir.file("w.csv");
  EXPECT_EQ(run({"export", "--db", db, "--format", "csv", "-o", csv_path}).code, 0);
  std::ifstream csv(csv_path);
  std::string header;
  std::getline(csv, header);
  EXPECT_TRUE(contains(header, "variant"));

  const std::string header_path = dir.file("dispatch.hpp");
  const Result header_run = run({"export", "--db", db, "--format", "header", "-o", header_path});
  EXPECT_EQ(header_run.code, 0) << header_run.err;
  EXPECT_TRUE(contains(header_run.err, "wrote 1 winners to " + header_path)) << header_run.err;
  std::ifstream header_file(header_path);
  std::stringstream header_text;
  header_text << header_file.rdbuf();
  EXPECT_TRUE(contains(header_text.str(), "// command: shapetune export --db " + db + " --format header -o " + header_path + "\n"))
      << header_text.str();
  EXPECT_TRUE(contains(header_text.str(), "// database: " + db + "\n")) << header_text.str();
  EXPECT_TRUE(contains(header_text.str(), "// schema version: " + std::to_string(Store::latest_schema_version()) + "\n"));
  EXPECT_TRUE(contains(header_text.str(), "#pragma once"));
  EXPECT_TRUE(contains(header_text.str(),
                       "{\"NVIDIA H200|sm_90|132SM|140GiB\", \"softmax\", \"f32\", \"rows=4096,cols=4096\", "
                       "\"register_row\", \"threads_per_row=512,block_size=512,packs_per_thread=2\", \"\", 40.0, 2.0},"))
      << header_text.str();
  EXPECT_TRUE(contains(header_text.str(), "kWinnerCount = 1;"));
  const Result header_out = run({"export", "--db", db, "--format", "header"});
  EXPECT_EQ(header_out.code, 0) << header_out.err;
  EXPECT_TRUE(contains(header_out.out, "namespace shapetune_dispatch {"));

  const Result xml = run({"export", "--db", db, "--format", "xml"});
  EXPECT_EQ(xml.code, 2);
  EXPECT_TRUE(contains(xml.err, "json, csv or header")) << xml.err;
  const Result help = run({"export", "--help"});
  EXPECT_TRUE(contains(help.out, "json|csv|header")) << help.out;
  const Result unwritable = run({"export", "--db", db, "--format", "csv", "-o", "/nonexistent-dir/w.csv"});
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_TRUE(contains(unwritable.err, "cannot write /nonexistent-dir/w.csv"));
  const Result db_unwritable = run({"sweep", quick_yaml(), "--db", "/nonexistent-dir/x.db"});
  EXPECT_EQ(db_unwritable.code, 2);
}

TEST(Cli, Report) {
  const Result help = run({"--help"});
  EXPECT_TRUE(contains(help.out, "report"));
  EXPECT_TRUE(contains(run({"report", "--help"}).out, "--compare OTHER.db"));

  test_support::TempDir dir;
  const std::string db = dir.file("r.db");
  {
    auto store = Store::open(db);
    WinnerRecord w;
    w.device_key = "NVIDIA H200|sm_90|132SM|140GiB";
    w.problem = Problem{"softmax", DType::f32, Shape({{"rows", 4096}, {"cols", 4096}})};
    w.variant = "register_row";
    w.timing.median_us = 40;
    w.timing.samples = 30;
    w.cost = Cost{2.0 * 4096 * 4096 * 4, 5.0 * 4096 * 4096};
    store->store_winner(w);
  }
  const Result no_dir = run({"report", "--db", db});
  EXPECT_EQ(no_dir.code, 2);
  EXPECT_TRUE(contains(no_dir.err, "-o DIR is required")) << no_dir.err;
  EXPECT_TRUE(contains(run({"report", "-o", dir.file("out")}).err, "--db FILE is required"));

  const Result missing = run({"report", "--db", dir.file("nope.db"), "-o", dir.file("out")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(contains(missing.err, "does not exist")) << missing.err;

  std::ofstream(dir.file("file")) << "x";
  const Result unwritable = run({"report", "--db", db, "-o", dir.file("file") + "/sub"});
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_TRUE(contains(unwritable.err, "cannot create directory")) << unwritable.err;

  const Result ok = run({"report", "--db", db, "-o", dir.file("out"), "--compare", db});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "wrote " + dir.file("out") + "/README.md (1 winners")) << ok.out;
  std::ifstream readme(dir.file("out") + "/README.md");
  std::stringstream text;
  text << readme.rdbuf();
  EXPECT_TRUE(contains(text.str(), "| `softmax/f32/rows=4096,cols=4096` | `register_row` | 40.00 us | 3.36 TB/s |"));
  EXPECT_TRUE(contains(text.str(), "Summary: 1 problems in both: 0 faster, 0 slower, 1 same within noise"));
}

}  // namespace
}  // namespace shapetune
