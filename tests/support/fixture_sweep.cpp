#include "support/fixture_sweep.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "tuner/choose.hpp"
#include "tuner/missing_baseline.hpp"
#include "tuner/progress_events.hpp"
#include "tuner/shape_file.hpp"
#include "tuner/sweep.hpp"
#include "variants/catalogue.hpp"

namespace shapetune::test_support {

namespace {

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

DeviceFingerprint fixture_device() {
  DeviceFingerprint d;
  d.name = "Fixture GPU";
  d.compute_capability = 90;
  d.sm_count = 132;
  d.l2_bytes = 50 << 20;
  d.memory_bytes = 80ll << 30;
  d.driver_version = d.runtime_version = d.cublas_version = d.cudnn_version = "fixture";
  return d;
}

}  // namespace

int run_fixture_sweep(const FixtureSweep& f, std::string* error) {
  try {
    const ShapeFile file = load_shape_file(f.shape_file, catalogue());
    SweepOptions options;
    options.shape_file = f.shape_file;
    options.db_path = f.db_path;
    options.shard = f.shard;
    const auto problems = sweep_problems(file, options);
    auto store = Store::open(f.db_path);
    const DeviceFingerprint device = fixture_device();
    store->upsert_device(device);
    const SweepInfo info{device.key(), "fixture_sweep " + f.shape_file + (f.shard ? " --shard " + f.shard->text() : ""),
                         "fixture", f.shape_file, file.sha256, result_affecting_options(options)};
    const auto resumable = store->find_resumable_sweep(info);
    const std::int64_t sweep = resumable ? *resumable : store->begin_sweep(info);
    std::ofstream json_file;
    if (!f.json_progress.empty()) json_file.open(f.json_progress);
    std::optional<JsonProgress> json;
    if (json_file) json.emplace(json_file);
    ProgressSnapshot progress;
    progress.problems = problems.size();
    std::vector<double> expected;
    for (const PlannedProblem* planned : problems) {
      expected.push_back(expected_problem_time(*planned, {}, options.measure, nominal_device_limits()).total_s());
      progress.expected_total_s += expected.back();
    }
    if (json)
      json->write(sweep_start_event({sweep, resumable.has_value(), f.shape_file, device.key(),
                                     f.shard ? f.shard->text() : "", problems.size(), progress.expected_total_s}));
    for (std::size_t index = 0; index < problems.size(); ++index) {
      const PlannedProblem* planned = problems[index];
      const std::string key = planned->problem.key();
      if (store->problem_status(sweep, key)) {
        progress.expected_total_s -= expected[index];  // a sweep leaves what it resumes out of its work
        ++progress.problems_done;
        continue;
      }
      for (const Variant* v : catalogue().variants(planned->problem.primitive)) {
        CandidateRecord r;
        r.sweep_id = sweep;
        r.problem = planned->problem;
        r.variant = v->name;
        r.config = v->default_config;
        r.baseline = v->baseline;
        r.tolerance = planned->tolerance;
        r.accuracy = AccuracyReport{0, 0, 0, 1, ""};
        TimingStats t;
        t.median_us = 1 + static_cast<double>(fnv1a(key + "/" + v->name) % 100000) / 100;
        t.p10_us = t.min_us = t.median_us * 0.99;
        t.p90_us = t.median_us * 1.01;
        t.median_ci_rel = 0.002;
        t.samples = 10;
        t.stop_reason = "converged";
        r.timing = t;
        store->record_candidate(r);
        if (json) json->write(candidate_event(r, index + 1));
      }
      const auto records = store->candidates(sweep, key);
      auto winner = choose_winner(records);
      if (winner) {
        winner->device_key = device.key();
        winner->git_sha = "fixture";
        winner->measured_at = utc_now_iso8601();
        store->store_winner(*winner);
      }
      store->record_problem(sweep, key, "done", "fixture");
      progress.expected_done_s += expected[index];
      ++progress.problems_done;
      if (json) {
        json->write(problem_done_event({key, index + 1, problems.size(), "done", "", winner, missing_baselines(records), 0}));
        json->progress(progress, 0, true);
      }
      if (!f.die_marker.empty() && !std::filesystem::exists(f.die_marker)) {
        std::ofstream(f.die_marker) << "died once\n";
        std::abort();
      }
    }
    store->finish_sweep(sweep, "complete");
    if (json) json->write(sweep_end_event({"complete", 0, progress.problems_done, problems.size(), 0, 0, 0}));
    return 0;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return 2;
  }
}

}  // namespace shapetune::test_support
