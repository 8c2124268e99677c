// Progress and provenance of long work, without a GPU: the ETA estimate, the progress line's
// throttling, the --json-progress events read back, the baseline warning over candidate records,
// the filters that leave nothing to measure, and the parallel sweep's progress end to end over
// fixture sweeps. A real sweep's progress (the Sweep's crediting of candidates, the worker's NVTX
// ranges in an Nsight Systems capture) needs a GPU: scripts/gpu-check.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "cli/cli.hpp"
#include "core/json_reader.hpp"
#include "harness/nvtx.hpp"
#include "support/fixture_sweep.hpp"
#include "support/test_support.hpp"
#include "tuner/missing_baseline.hpp"
#include "tuner/parallel_sweep.hpp"
#include "tuner/progress.hpp"
#include "tuner/progress_events.hpp"
#include "tuner/search.hpp"
#include "tuner/shape_file.hpp"
#include "tuner/sweep.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using test_support::contains;
using test_support::TempDir;

std::string shapes(const std::string& name) { return (test_support::source_dir() / "shapes" / name).string(); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// ---- the estimate ------------------------------------------------------------------------------

TEST(Progress, EstimateScalesWhatIsLeftByTheMeasuredRate) {
  // Nothing done yet: the cost model alone.
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 0, 0), 100);
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 0, 30), 100);
  // A quarter of the expected work done in twice its expected time: the rest takes twice too.
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 25, 50), 150);
  // Faster than the model.
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 50, 25), 25);
  // Done, or more done than expected (work a strategy skipped is counted as done).
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 100, 80), 0);
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 130, 80), 0);
  // Nonsense in, no nonsense out.
  EXPECT_DOUBLE_EQ(estimate_seconds_left(std::nan(""), 10, 10), 0);
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, -5, 10), 100);
  EXPECT_DOUBLE_EQ(estimate_seconds_left(100, 50, -1), 0);
  EXPECT_TRUE(std::isfinite(estimate_seconds_left(100, 1e-300, 1e300)));
}

TEST(Progress, SnapshotCapsTheEstimateByTheBudgetAndSaysSo) {
  ProgressSnapshot s;
  s.problems = 31;
  s.problems_done = 3;
  s.expected_total_s = 100;
  s.expected_done_s = 25;
  s.elapsed_s = 50;
  EXPECT_DOUBLE_EQ(*s.model_ratio(), 2);
  EXPECT_DOUBLE_EQ(s.seconds_left(), 150);
  const std::string text = progress_text(s);
  EXPECT_CONTAINS(text, "3/31 problems, 25% of the expected work in 50 s, about 2.5 min left (2.00x the cost model)");
  EXPECT_FALSE(contains(text, "budget"));
  s.budget_left_s = 40;
  EXPECT_DOUBLE_EQ(s.seconds_left(), 40);
  EXPECT_CONTAINS(progress_text(s), "about 40 s left (2.00x the cost model), capped by --budget");
  s.expected_done_s = 0;
  EXPECT_FALSE(s.model_ratio());
  EXPECT_CONTAINS(progress_text(s), "(the cost model's guess)");
  s.current = "[4/31] softmax/f32/rows=7,cols=4097: 3/40 candidates";
  EXPECT_CONTAINS(progress_text(s), " | [4/31] softmax/f32/rows=7,cols=4097: 3/40 candidates");
}

TEST(Progress, DurationsReadAsSecondsMinutesOrHours) {
  EXPECT_EQ(format_duration(0), "0 s");
  EXPECT_EQ(format_duration(42.4), "42 s");
  EXPECT_EQ(format_duration(89), "89 s");
  EXPECT_EQ(format_duration(90), "1.5 min");
  EXPECT_EQ(format_duration(3000), "50.0 min");
  EXPECT_EQ(format_duration(5400), "1.5 h");
  EXPECT_EQ(format_duration(-3), "0 s");
  EXPECT_EQ(format_duration(std::nan("")), "0 s");
}

// ---- the line ----------------------------------------------------------------------------------

TEST(Progress, ThrottleLetsOneEventThroughPerInterval) {
  Throttle t(10, 10);
  EXPECT_FALSE(t.due(0));
  EXPECT_FALSE(t.due(9.9));
  EXPECT_TRUE(t.due(10));
  EXPECT_FALSE(t.due(19.9));
  EXPECT_TRUE(t.due(25));
  EXPECT_FALSE(t.due(34));  // counted from the last one let through, not from the schedule
  EXPECT_TRUE(t.due(35));
  t.release();
  EXPECT_TRUE(t.due(35.1));
  EXPECT_FALSE(t.due(35.2));
}

TEST(Progress, PlainLinesInALogComeAtMostOncePerInterval) {
  std::ostringstream log;
  ProgressLine line(log, ProgressStyle::plain, 100, 10);
  ProgressSnapshot s;
  s.problems = 2;
  s.expected_total_s = 50;
  // An update after every candidate, for a minute, every 0.1 s, as fast as the model says.
  for (int tick = 0; tick <= 600; ++tick) {
    s.elapsed_s = tick / 10.0;
    s.expected_done_s = tick / 10.0;
    line.update(s, 100 + s.elapsed_s);
  }
  const auto lines = lines_of(log.str());
  ASSERT_EQ(lines.size(), 6u) << log.str();  // at 10, 20, ..., 60 s: none in the first interval
  for (const auto& l : lines) {
    EXPECT_EQ(l.rfind("progress: 0/2 problems, ", 0), 0u) << l;
    EXPECT_FALSE(contains(l, "\r")) << l;
  }
  EXPECT_CONTAINS(lines.front(), "20% of the expected work in 10 s, about 40 s left (1.00x the cost model)");
  line.clear();  // nothing to erase in a log
  EXPECT_EQ(lines_of(log.str()).size(), 6u);
  EXPECT_FALSE(contains(log.str(), "\033"));
}

TEST(Progress, ATerminalLineIsRedrawnInPlaceCutToItsWidthAndCleared) {
  std::ostringstream tty;
  auto returns = [&] {
    const std::string text = tty.str();
    return std::count(text.begin(), text.end(), '\r');
  };
  ProgressLine line(tty, ProgressStyle::redraw, 0, 10, 40);
  ProgressSnapshot s;
  s.problems = 31;
  s.current = "[1/31] gemm.nn/f32/m=512,n=256,k=784: 1/9 candidates";
  line.update(s, 0);
  line.update(s, 0.1);  // within the redraw interval: not drawn
  EXPECT_EQ(tty.str().find('\r'), 0u);
  EXPECT_EQ(returns(), 1);
  EXPECT_EQ(tty.str().find('\n'), std::string::npos);
  const std::string drawn = tty.str().substr(1, tty.str().find('\033') - 1);
  EXPECT_EQ(drawn.size(), 39u) << drawn;  // the last column stays free
  line.update(s, 0.3);
  EXPECT_EQ(returns(), 2);
  tty.str("");
  line.clear();
  EXPECT_EQ(tty.str(), "\r\033[K");
  line.clear();  // once is enough
  EXPECT_EQ(tty.str(), "\r\033[K");
  line.update(s, 0.31);  // drawn again at once after other output
  EXPECT_EQ(returns(), 2);
}

TEST(Progress, NoLineWhenNoneIsWanted) {
  std::ostringstream out;
  ProgressLine line(out, ProgressStyle::none, 0, 0.001);
  ProgressSnapshot s;
  for (int i = 0; i < 10; ++i) line.update(s, i);
  line.clear();
  EXPECT_EQ(out.str(), "");
}

// ---- the JSON events ---------------------------------------------------------------------------

// Each member's name and raw kind, in order, read with the project's strict reader.
std::vector<std::pair<std::string, JsonKind>> members(const std::string& line) {
  JsonReader reader(line);
  std::vector<std::pair<std::string, JsonKind>> out;
  reader.begin_object();
  std::string name;
  while (reader.next_member(name)) {
    out.emplace_back(name, reader.peek());
    reader.skip_value();
  }
  reader.expect_end();
  return out;
}

std::vector<std::string> names(const std::vector<std::pair<std::string, JsonKind>>& list) {
  std::vector<std::string> out;
  for (const auto& [name, kind] : list) out.push_back(name);
  return out;
}

CandidateRecord record(const std::string& variant, bool baseline, CandidateStatus status, std::optional<double> median_us,
                       const std::string& reason = "", int algo = -1) {
  CandidateRecord r;
  r.problem = Problem{"gemm_bias_gelu.nt", DType::bf16, Shape({{"m", 4096}, {"n", 1024}, {"k", 1024}})};
  r.variant = variant;
  if (algo >= 0) r.config = Config({{"algo", algo}});
  r.baseline = baseline;
  r.status = status;
  r.reason = reason;
  if (median_us) {
    r.timing = TimingStats{};
    r.timing->median_us = *median_us;
    r.timing->stop_reason = "converged";
  }
  return r;
}

TEST(ProgressEvents, EachEventIsOneStrictJsonObjectWithItsMembersInOrder) {
  const std::string start = sweep_start_event({7, true, "shapes/quick.yaml", "NVIDIA H200|sm_90", "2/4", 31, 69.25});
  EXPECT_EQ(names(members(start)), (std::vector<std::string>{"event", "sweep", "resumed", "shape_file", "device", "shard",
                                                              "problems", "expected_s"}));
  EXPECT_EQ(start.find('\n'), std::string::npos);

  const std::string candidate = candidate_event(record("cublaslt", true, CandidateStatus::ok, 12.5, "", 3), 4);
  EXPECT_EQ(names(members(candidate)), (std::vector<std::string>{"event", "problem", "index", "variant", "config",
                                                                  "baseline", "status", "median_us", "race", "reason"}));
  const std::string refused =
      candidate_event(record("cublas", true, CandidateStatus::unsupported, std::nullopt, "needs \"f32\"\n"), 4);
  EXPECT_EQ(members(refused)[7], std::make_pair(std::string("median_us"), JsonKind::null));
  {
    JsonReader reader(refused);
    reader.begin_object();
    std::string name, reason;
    while (reader.next_member(name))
      if (name == "reason") reason = reader.read_string();
      else reader.skip_value();
    EXPECT_EQ(reason, "needs \"f32\"\n");  // escaped on the way out, whole on the way back
  }

  WinnerRecord w;
  w.variant = "mma_sync";
  w.config = Config({{"tile", 3}, {"stages", 4}});
  w.timing.median_us = 100;
  const std::string no_baseline =
      problem_done_event({"gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024", 4, 31, "done", "", w,
                          {{"cublas", "unsupported: no epilogue"}, {"cublaslt", "8 unsupported (tanh GELU)"}}, 3.5});
  const auto done = members(no_baseline);
  EXPECT_EQ(names(done), (std::vector<std::string>{"event", "problem", "index", "problems", "outcome", "winner", "config",
                                                    "median_us", "baseline", "baseline_us", "speedup",
                                                    "missing_baselines", "seconds"}));
  EXPECT_EQ(done[8].second, JsonKind::null);   // baseline
  EXPECT_EQ(done[10].second, JsonKind::null);  // speedup
  EXPECT_EQ(done[11].second, JsonKind::array);
  WinnerRecord held = w;
  held.variant = "wgmma";
  held.sweep_id = 2;
  const auto kept = members(problem_done_event({"gemm_bias.nt/f16/m=8192,n=1024,k=1024", 4, 31, "done", "", w, {}, 3.5,
                                                held}));
  ASSERT_EQ(kept.back(), std::make_pair(std::string("table_keeps"), JsonKind::object));
  const std::string skipped = problem_done_event({"softmax/f32/rows=2097152,cols=1048576", 1, 4, "skipped",
                                                  "needs 16 TiB", std::nullopt, {}, 0.1});
  EXPECT_EQ(members(skipped)[5], std::make_pair(std::string("reason"), JsonKind::string));
  EXPECT_EQ(members(skipped)[6], std::make_pair(std::string("winner"), JsonKind::null));

  const std::string end = sweep_end_event({"complete", 0, 31, 31, 0, 1, 104.75});
  EXPECT_EQ(names(members(end)), (std::vector<std::string>{"event", "status", "exit_code", "problems_done", "problems",
                                                            "without_winner", "without_baseline", "elapsed_s"}));
}

TEST(ProgressEvents, ReadBackGivesWhatWasWritten) {
  ProgressSnapshot s;
  s.problems = 31;
  s.problems_done = 3;
  s.expected_total_s = 69.25;
  s.expected_done_s = 20.5;
  s.elapsed_s = 41;
  const auto progress = read_progress_event(progress_event(s));
  ASSERT_TRUE(progress);
  EXPECT_EQ(progress->event, "progress");
  EXPECT_EQ(progress->problems_done, 3);
  EXPECT_EQ(progress->problems, 31);
  EXPECT_EQ(progress->expected_s, 69.25);
  EXPECT_EQ(progress->done_s, 20.5);
  EXPECT_EQ(progress->elapsed_s, 41);
  EXPECT_DOUBLE_EQ(*progress->eta_s, s.seconds_left());

  const auto end = read_progress_event(sweep_end_event({"nothing measured", 1, 2, 2, 2, 0, 3.25}));
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, "nothing measured");
  EXPECT_EQ(end->exit_code, 1);
  EXPECT_EQ(end->without_winner, 2);
  EXPECT_EQ(end->without_baseline, 0);

  const auto candidate = read_progress_event(candidate_event(record("naive", false, CandidateStatus::crashed, std::nullopt), 1));
  ASSERT_TRUE(candidate);
  EXPECT_EQ(candidate->status, "crashed");
  EXPECT_EQ(candidate->problem, "gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024");

  // A later version's members are skipped; what is not an event object is not an event.
  const auto later = read_progress_event(
      R"({"event": "progress", "gpu": {"temps": [61, 62.5e0, null], "ok": true}, "done_s": 1e1, "expected_s": null})");
  ASSERT_TRUE(later);
  EXPECT_EQ(later->done_s, 10);
  EXPECT_FALSE(later->expected_s);
  for (const char* bad : {"", "progress: 3/31 problems", "[gpu0] Sweep #1", "{\"event\": \"progress\"", "{}",
                          "{\"event\": \"progress\", \"done_s\": 01}", "{\"event\": \"x\"} trailing"})
    EXPECT_FALSE(read_progress_event(bad)) << bad;
}

TEST(ProgressEvents, LinesAreWholeFlushedAndProgressIsThrottled) {
  std::ostringstream out;
  JsonProgress json(out);
  ProgressSnapshot s;
  for (int tick = 0; tick < 30; ++tick) json.progress(s, tick * 0.1, false);  // three seconds of updates
  json.progress(s, 2.95, true);                                                // a problem done: always
  json.write(sweep_end_event({"complete", 0, 0, 0, 0, 0, 3}));
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 5u) << out.str();  // at 0, 1, 2 s, the forced one, the end
  for (const auto& line : lines) EXPECT_TRUE(read_progress_event(line)) << line;
  EXPECT_EQ(out.str().back(), '\n');
}

// ---- the baseline warning ----------------------------------------------------------------------

TEST(MissingBaselines, NoneWhenNoBaselineWasAskedForOrOneRan) {
  EXPECT_TRUE(missing_baselines({}).empty());
  EXPECT_TRUE(missing_baselines({record("mma_sync", false, CandidateStatus::ok, 10)}).empty());
  EXPECT_TRUE(missing_baselines({record("cublas", true, CandidateStatus::unsupported, std::nullopt, "no epilogue"),
                                 record("cublaslt", true, CandidateStatus::ok, 12, "", 0),
                                 record("mma_sync", false, CandidateStatus::ok, 10)})
                  .empty());
}

TEST(MissingBaselines, EachBaselineIsNamedWithWhyItGaveNothing) {
  std::vector<CandidateRecord> records{record("cublas", true, CandidateStatus::unsupported, std::nullopt,
                                              "plain cuBLAS cannot fuse the bias or activation"),
                                       record("mma_sync", false, CandidateStatus::ok, 10)};
  for (int algo = 0; algo < 8; ++algo)
    records.push_back(record("cublaslt", true, algo < 6 ? CandidateStatus::unsupported : CandidateStatus::failed_accuracy,
                             std::nullopt, algo < 6 ? "tanh GELU" : "y[0,3]: got 1, want 2", algo));
  const auto missing = missing_baselines(records);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].variant, "cublas");
  EXPECT_EQ(missing[0].reason, "unsupported: plain cuBLAS cannot fuse the bias or activation");
  EXPECT_EQ(missing[1].variant, "cublaslt");
  EXPECT_EQ(missing[1].reason, "6 unsupported (tanh GELU), 2 failed_accuracy (y[0,3]: got 1, want 2)");
  EXPECT_EQ(missing_baselines_warning("gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024", missing),
            "warning: gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024: no baseline ran, so its winner is compared with "
            "none: cublas: unsupported: plain cuBLAS cannot fuse the bias or activation; cublaslt: 6 unsupported "
            "(tanh GELU), 2 failed_accuracy (y[0,3]: got 1, want 2)");
}

TEST(MissingBaselines, CrashesAndRaceOnlyTimingsAreNotABaseline) {
  CandidateRecord raced = record("cublaslt", true, CandidateStatus::ok, 12, "", 1);
  raced.timing->stop_reason = race_stop_reason(Rung{0, 5, 3});
  ASSERT_TRUE(is_race_stop_reason(raced.timing->stop_reason));
  const auto missing = missing_baselines({record("cudnn", true, CandidateStatus::crashed, std::nullopt, "killed by signal 11"),
                                          record("cudnn_graph", true, CandidateStatus::timeout, std::nullopt, "20 s"), raced});
  ASSERT_EQ(missing.size(), 3u);
  EXPECT_EQ(missing[0].reason, "crashed: killed by signal 11");
  EXPECT_EQ(missing[1].reason, "timeout: 20 s");
  EXPECT_EQ(missing[2].reason, "raced only");
  // Every variant alike, baseline or not: what the nothing-to-measure error lists.
  const auto all = variants_without_measurement({record("naive", false, CandidateStatus::unsupported, std::nullopt, "f32 only"),
                                                 record("mma_sync", false, CandidateStatus::ok, 10)});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(failures_text(all), "naive: unsupported: f32 only");
}

// ---- the command line without a GPU ------------------------------------------------------------

using Result = test_support::CliResult;
constexpr auto cli = &test_support::run_shapetune;

TEST(SweepFilters, LeavingNoSupportedCandidateIsAnErrorNotASilentSuccess) {
  // quick.yaml's bf16 GEMM with bias+GELU: plain cuBLAS cannot fuse the epilogue, cuBLASLt's GELU
  // is the tanh form. Asked for those two alone, nothing can be measured.
  const Result r = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--primitive", "gemm_bias_gelu.nt", "--variant",
                        "cublas,cublaslt"});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "0 supported candidates");
  EXPECT_CONTAINS(r.err, "error: nothing to measure: no candidate of the 1 problem with --variant cublas,cublaslt is "
                         "supported (nominal sm_90 limits)");
  EXPECT_CONTAINS(r.err, "gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024: cublas: unsupported: ");
  EXPECT_CONTAINS(r.err, "cublaslt: 8 unsupported (");
  // With a kernel too: measurable, but the baselines left are gone, which is said.
  const Result all = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--primitive", "gemm_bias_gelu.nt", "--variant",
                          "mma_sync,cublas,cublaslt"});
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_CONTAINS(all.err, "warning: gemm_bias_gelu.nt/bf16/m=4096,n=1024,k=1024: no baseline supports it");
  // Every variant of the file's matrix: the unfused chain is its baseline, and nothing is said.
  const Result whole = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--primitive", "gemm_bias_gelu.nt"});
  EXPECT_EQ(whole.code, 0) << whole.err;
  EXPECT_EQ(whole.err.find("no baseline"), std::string::npos) << whole.err;
  // A filter that leaves some problem something is no error; nor is a shard holding nothing.
  EXPECT_EQ(cli({"sweep", shapes("quick.yaml"), "--dry-run", "--variant", "cublas,cublaslt"}).code, 0);
  const Result shard = cli({"sweep", shapes("quick.yaml"), "--dry-run", "--primitive", "gemm_bias_gelu.nt", "--variant",
                            "cublas,cublaslt", "--shard", "1/1"});
  EXPECT_EQ(shard.code, 0) << shard.err;
  EXPECT_CONTAINS(shard.err, "warning: shard 1/1: nothing to measure");
  // --devices refuses it for the whole sweep before starting a worker (each sees only its shard).
  ShapeFile file = load_shape_file(shapes("quick.yaml"), catalogue());
  SweepOptions options;
  options.primitives = {"gemm_bias_gelu.nt"};
  options.variants = {"cublas", "cublaslt"};
  EXPECT_TRUE(nothing_to_measure(file, options));
  options.variants.clear();
  EXPECT_FALSE(nothing_to_measure(file, options));
}

TEST(SweepFilters, JsonProgressThatCannotBeWrittenStopsTheSweepBeforeItStarts) {
  const Result r = cli({"sweep", shapes("quick.yaml"), "--db", "/nonexistent-dir/x.db", "--json-progress",
                        "/nonexistent-dir/events.jsonl"});
  EXPECT_EQ(r.code, 2);
  EXPECT_CONTAINS(r.err, "--json-progress: cannot write /nonexistent-dir/events.jsonl");
  EXPECT_EQ(cli({"sweep", shapes("quick.yaml"), "--db", "x.db", "--json-progress="}).code, 2);
}

TEST(SweepFilters, HelpDocumentsProgressJsonNvtxAndExitCodes) {
  const Result help = cli({"sweep", "--help"});
  for (const char* text : {"--no-progress", "--json-progress FILE", "redrawn in place", "every 10 s at most",
                           "sweep_start", "problem_done", "nsys profile -t cuda,nvtx", "no baseline ran",
                           "nothing measured", "nothing to\nmeasure"})
    EXPECT_CONTAINS(help.out, text);
}

// ---- expected time ------------------------------------------------------------------------------

TEST(ExpectedTime, ShardsAddUpToTheWholeSweepAndSplitAsSweepProblemsDoes) {
  const ShapeFile file = load_shape_file(shapes("quick.yaml"), catalogue());
  SweepOptions options;
  double whole = 0;
  for (const PlannedProblem* p : sweep_problems(file, options))
    whole += expected_problem_time(*p, {}, options.measure, nominal_device_limits()).total_s();
  const std::vector<double> shards = expected_shard_s(file, options, 4);
  ASSERT_EQ(shards.size(), 4u);
  EXPECT_NEAR(std::accumulate(shards.begin(), shards.end(), 0.0), whole, 1e-9 * whole);
  for (int k = 1; k <= 4; ++k) {
    options.shard = ShardSpec{k, 4};
    double mine = 0;
    for (const PlannedProblem* p : sweep_problems(file, options))
      mine += expected_problem_time(*p, {}, options.measure, nominal_device_limits()).total_s();
    EXPECT_NEAR(shards[static_cast<std::size_t>(k - 1)], mine, 1e-9 * whole) << k;
  }
  const auto one = expected_problem_time(file.problems.front(), {}, options.measure, nominal_device_limits());
  EXPECT_GT(one.setup_s, 0);
  EXPECT_GT(one.per_candidate_s, 0);
  EXPECT_GT(one.supported, 0);
}

// ---- end to end over fixture sweeps -------------------------------------------------------------

std::vector<ReadEvent> events_of(const std::string& path) {
  std::vector<ReadEvent> events;
  for (const auto& line : lines_of(test_support::read_file(path))) {
    const auto e = read_progress_event(line);
    EXPECT_TRUE(e) << "not an event: " << line;
    if (e) events.push_back(*e);
  }
  return events;
}

TEST(ProgressEndToEnd, AFixtureSweepWritesTheEventsOfASweep) {
  TempDir dir;
  test_support::FixtureSweep f{shapes("quick.yaml"), dir.file("f.db"), std::nullopt, "", dir.file("events.jsonl")};
  std::string error;
  ASSERT_EQ(test_support::run_fixture_sweep(f, &error), 0) << error;
  const auto events = events_of(f.json_progress);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().event, "sweep_start");
  EXPECT_EQ(events.back().event, "sweep_end");
  EXPECT_EQ(events.back().status, "complete");
  const std::size_t problems = static_cast<std::size_t>(*events.front().problems);
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const ReadEvent& e) { return e.event == "problem_done"; }),
            static_cast<std::ptrdiff_t>(problems));
  const auto last_progress =
      std::find_if(events.rbegin(), events.rend(), [](const ReadEvent& e) { return e.event == "progress"; });
  ASSERT_NE(last_progress, events.rend());
  EXPECT_EQ(*last_progress->problems_done, static_cast<std::int64_t>(problems));
  EXPECT_DOUBLE_EQ(*last_progress->done_s, *last_progress->expected_s);
  EXPECT_EQ(*last_progress->eta_s, 0);
}

TEST(ProgressEndToEnd, TheParallelSweepCountsItsWorkersEventsIntoOneProgress) {
  TempDir dir;
  const std::string file = shapes("quick.yaml");
  ParallelSweepOptions o;
  o.shape_file = file;
  o.db_path = dir.file("parallel.db");
  o.devices = {0, 0};
  const ShapeFile shape_file = load_shape_file(file, catalogue());
  o.problem_count = sweep_problems(shape_file, SweepOptions{}).size();
  o.shard_count = 5;
  o.shard_expected_s = expected_shard_s(shape_file, SweepOptions{}, 5);
  o.executable = SHAPETUNE_FIXTURE_SWEEP;
  o.progress = ProgressStyle::plain;
  o.progress_interval_s = 0.001;  // a line at nearly every update: the log shows each step
  o.json_progress = dir.file("events.jsonl");
  std::ostringstream out, err;
  ASSERT_EQ(run_parallel_sweep(o, out, err), 0) << out.str() << err.str();

  // The human line: on the error stream, never inside the workers' forwarded lines.
  EXPECT_CONTAINS(err.str(), "progress: ");
  EXPECT_CONTAINS(err.str(), "workers running");
  EXPECT_FALSE(contains(out.str(), "progress: ")) << out.str();
  EXPECT_FALSE(contains(out.str(), "{\"event\"")) << out.str();
  EXPECT_CONTAINS(out.str(), "5 of 5 shards done");

  const auto events = events_of(o.json_progress);
  // Every shard's own start and end pass through, with the shard they are of...
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const ReadEvent& e) { return e.event == "sweep_start"; }), 5);
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const ReadEvent& e) { return e.event == "sweep_end"; }), 5);
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const ReadEvent& e) { return e.event == "problem_done"; }),
            static_cast<std::ptrdiff_t>(o.problem_count));
  // ...and "progress" is the whole sweep's: its expected work is the plan's, done in the end.
  std::vector<ReadEvent> progress;
  for (const auto& e : events)
    if (e.event == "progress") progress.push_back(e);
  ASSERT_FALSE(progress.empty());
  const double planned = std::accumulate(o.shard_expected_s.begin(), o.shard_expected_s.end(), 0.0);
  for (const auto& p : progress) {
    EXPECT_EQ(*p.problems, static_cast<std::int64_t>(o.problem_count));
    EXPECT_NEAR(*p.expected_s, planned, 1e-6 * planned);
    EXPECT_LE(*p.done_s, *p.expected_s * (1 + 1e-9));
  }
  for (std::size_t i = 1; i < progress.size(); ++i) EXPECT_GE(*progress[i].done_s, *progress[i - 1].done_s);
  EXPECT_NEAR(*progress.back().done_s, planned, 1e-6 * planned);
  EXPECT_EQ(*progress.back().problems_done, static_cast<std::int64_t>(o.problem_count));
}

// ---- NVTX ----------------------------------------------------------------------------------------

TEST(Nvtx, RangesNestAndCostNothingVisibleWithoutAProfiler) {
  // No tool is injected here: the calls bind to no-ops. What runs under nsys is checked on the
  // GPU box (a captured sweep's timeline shows each problem, candidate and phase).
  const NvtxRange problem("problem softmax/f32/rows=7,cols=4097");
  { const NvtxRange candidate("softmax/f32/rows=7,cols=4097 warp_online{block=128} verify"); }
  std::optional<NvtxRange> held;
  held.emplace("problem a");
  held.reset();
  held.emplace("problem b");
  SUCCEED();
}

}  // namespace
}  // namespace shapetune
