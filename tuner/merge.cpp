#include "tuner/merge.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>

#include "db/store.hpp"
#include "tuner/choose.hpp"
#include "tuner/search.hpp"

namespace shapetune {

namespace {

std::string plural(std::int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string describe(const MergeCounts& c) {
  if (!c.changed()) return "nothing new (already merged)";
  std::string text = plural(c.sweeps_added, "sweep") + " added";
  if (c.sweeps_updated) text += ", " + plural(c.sweeps_updated, "sweep") + " brought up to date";
  text += ", " + plural(c.problems, "problem outcome") + ", " + plural(c.candidates_added, "candidate") + " added";
  if (c.candidates_replaced) text += ", " + std::to_string(c.candidates_replaced) + " replaced by later measurements";
  if (c.counters) text += ", " + plural(c.counters, "counter value");
  text += ", " + plural(c.winners, "winner row");
  if (c.devices) text += ", " + plural(c.devices, "new device");
  if (c.ceilings) text += ", " + plural(c.ceilings, "ceiling");
  return text;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return std::filesystem::exists(a, error) && std::filesystem::exists(b, error) &&
         std::filesystem::equivalent(a, b, error);
}

}  // namespace

WinnerRefresh recompute_winners(Store& store, const CostModel& cost, const ConfigAsRun& as_run) {
  WinnerRefresh refresh;
  std::set<std::string> device_keys;
  std::map<std::int64_t, const SweepRow*> sweep_of;
  const std::vector<SweepRow> sweeps = store.sweeps();
  for (const SweepRow& sweep : sweeps) {
    device_keys.insert(sweep.info.device_key);
    sweep_of[sweep.id] = &sweep;
  }
  for (const std::string& device_key : device_keys) {
    std::map<std::string, WinnerRecord> held;
    for (auto& w : store.winners(device_key)) held.emplace(w.problem.key(), std::move(w));
    for (const auto& [problem_key, sweep_ids] : store.done_sweeps(device_key)) {
      ++refresh.problems;
      std::vector<SweepMeasurements> measured;
      for (const std::int64_t id : sweep_ids) {
        const SweepInfo& info = sweep_of.at(id)->info;
        measured.push_back({l2_mode_of(info.options), store.candidates(id, problem_key), info.git_sha});
      }
      std::optional<WinnerRecord> winner = choose_row(measured, as_run);
      if (!winner) continue;
      const auto it = held.find(problem_key);
      const bool same_choice = it != held.end() && it->second.variant == winner->variant && it->second.config == winner->config;
      if (same_choice && it->second.sweep_id == winner->sweep_id) continue;
      winner->device_key = device_key;
      if (cost) winner->cost = cost(winner->problem);
      // The algorithm a library variant's config picked on this device (and library version,
      // both in the device key) is the one recorded for the same choice.
      if (same_choice) winner->library_algo = it->second.library_algo;
      store.store_winner(*winner);
      ++refresh.changed;
    }
  }
  return refresh;
}

int run_merge(const std::string& output, const std::vector<std::string>& inputs, const CostModel& cost,
              const ConfigAsRun& as_run, std::ostream& out, std::ostream& err) {
  std::unique_ptr<Store> store;
  try {
    store = Store::open(output, OpenMode::read_write);
  } catch (const StoreError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  out << "Merging " << plural(static_cast<std::int64_t>(inputs.size()), "database") << " into " << output << "\n";
  std::size_t merged = 0;
  for (const std::string& input : inputs) {
    if (same_file(input, output)) {
      out << "  " << input << ": the output itself, skipped\n";
      continue;
    }
    try {
      const MergeCounts counts = store->merge_from(input);
      out << "  " << input << " (schema v" << counts.from_schema << "): " << describe(counts) << "\n";
      ++merged;
    } catch (const StoreError& e) {
      err << "error: " << e.what() << "\n";
      if (merged)
        err << "The " << plural(static_cast<std::int64_t>(merged), "database") << " before it "
            << (merged == 1 ? "is" : "are") << " merged; merging is idempotent, so fix or drop " << input
            << " and run the same command again.\n";
      return 2;
    }
  }
  try {
    const WinnerRefresh refresh = recompute_winners(*store, cost, as_run);
    std::set<std::string> devices;
    std::int64_t candidates = 0;
    const auto sweeps = store->sweeps();
    for (const auto& s : sweeps) devices.insert(s.info.device_key);
    for (const auto& s : sweeps) candidates += static_cast<std::int64_t>(store->candidates(s.id).size());
    out << "Winners: " << plural(refresh.problems, "finished problem") << " on " << plural(static_cast<std::int64_t>(devices.size()), "device")
        << ", each from the newest measurements of the sweeps that finished it; "
        << (refresh.changed ? std::to_string(refresh.changed) + " rows rewritten" : std::string("no row changed"))
        << ".\n"
        << output << " now holds " << plural(static_cast<std::int64_t>(sweeps.size()), "sweep") << ", "
        << plural(candidates, "candidate") << " and " << plural(static_cast<std::int64_t>(store->winners().size()), "winner")
        << " (shapetune winners --db " << output << ").\n";
  } catch (const StoreError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace shapetune
