#include "support/fixture_sweep.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "tuner/choose.hpp"
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
    for (const PlannedProblem* planned : problems) {
      const std::string key = planned->problem.key();
      if (store->problem_status(sweep, key)) continue;
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
      }
      if (auto winner = choose_winner(store->candidates(sweep, key))) {
        winner->device_key = device.key();
        winner->git_sha = "fixture";
        winner->measured_at = utc_now_iso8601();
        store->store_winner(*winner);
      }
      store->record_problem(sweep, key, "done", "fixture");
      if (!f.die_marker.empty() && !std::filesystem::exists(f.die_marker)) {
        std::ofstream(f.die_marker) << "died once\n";
        std::abort();
      }
    }
    store->finish_sweep(sweep, "complete");
    return 0;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return 2;
  }
}

}  // namespace shapetune::test_support
