#include "db/dispatch.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "db/store.hpp"

namespace shapetune {

std::string_view dispatch_source_name(DispatchSource source) {
  switch (source) {
    case DispatchSource::exact: return "exact";
    case DispatchSource::nearest: return "nearest";
    case DispatchSource::fallback: return "fallback";
  }
  return "?";
}

// The Euclidean distance between the shapes' log extents. Lookup ranks by it, which ranks the
// same as the sum of squares the header describes. Extents that are not positive have no
// logarithm, so such shapes are as incomparable as shapes with other axes.
std::optional<double> shape_log_distance(const Shape& a, const Shape& b) {
  const auto& a_dims = a.dims();
  const auto& b_dims = b.dims();
  if (a_dims.size() != b_dims.size()) return std::nullopt;
  double sum_of_squares = 0;
  for (std::size_t i = 0; i < a_dims.size(); ++i) {
    const auto& [a_axis, a_extent] = a_dims[i];
    const auto& [b_axis, b_extent] = b_dims[i];
    if (a_axis != b_axis || a_extent <= 0 || b_extent <= 0) return std::nullopt;
    const double difference = std::log(static_cast<double>(a_extent)) - std::log(static_cast<double>(b_extent));
    sum_of_squares += difference * difference;
  }
  return std::sqrt(sum_of_squares);
}

DispatchTable DispatchTable::load(const Store& store, const std::string& device_key) {
  DispatchTable table = from_winners(store.winners(device_key));
  for (const WinnerRecord& w : table.rows_) {
    if (w.sweep_id == 0) continue;  // a winner stored without its sweep: no candidates to read
    // Per variant: configs that ran, and the worst of those outside the tolerance.
    std::map<std::string, std::pair<int, AccuracyFailure>> by_variant;
    for (const CandidateRecord& c : store.candidates(w.sweep_id, w.problem.key())) {
      if (!c.accuracy || (c.status != CandidateStatus::ok && c.status != CandidateStatus::failed_accuracy)) continue;
      auto& [ran, failure] = by_variant[c.variant];
      ++ran;
      if (c.status != CandidateStatus::failed_accuracy) continue;
      failure.variant = c.variant;
      ++failure.configs;
      if (failure.configs == 1 || c.accuracy->max_abs_error > failure.max_abs_error) {
        failure.max_abs_error = c.accuracy->max_abs_error;
        failure.first_mismatch = c.accuracy->first_mismatch;
      }
    }
    std::vector<AccuracyFailure> failed;
    for (auto& [variant, counts] : by_variant)
      if (counts.second.configs > 0 && counts.second.configs == counts.first) failed.push_back(std::move(counts.second));
    if (!failed.empty()) table.failures_.emplace(w.problem.key(), std::move(failed));
  }
  return table;
}

const std::vector<AccuracyFailure>& DispatchTable::accuracy_failures(const std::string& problem_key) const {
  static const std::vector<AccuracyFailure> none;
  const auto it = failures_.find(problem_key);
  return it == failures_.end() ? none : it->second;
}

DispatchTable DispatchTable::from_winners(std::vector<WinnerRecord> winners) {
  DispatchTable table;
  table.rows_ = std::move(winners);
  for (std::size_t i = 0; i < table.rows_.size(); ++i) {
    const std::string key = table.rows_[i].problem.key();
    // Two rows for one problem means the winners of several devices were mixed.
    if (!table.by_key_.emplace(key, i).second)
      throw std::invalid_argument("dispatch table: two winners for " + key + " (devices " +
                                  table.rows_[table.by_key_.at(key)].device_key + " and " +
                                  table.rows_[i].device_key + "); load one device's winners");
  }
  return table;
}

DispatchChoice DispatchTable::lookup(const Problem& problem, const SupportsFn& supports,
                                     const DefaultFn& default_for) const {
  const std::string key = problem.key();
  if (const auto exact = by_key_.find(key); exact != by_key_.end()) {
    const WinnerRecord& row = rows_[exact->second];
    return DispatchChoice{row.variant, row.config, DispatchSource::exact, key, row.library_algo};
  }

  // (distance, problem key, row): sorting the tuple applies the tie-break by key.
  std::vector<std::tuple<double, std::string, const WinnerRecord*>> neighbours;
  for (const WinnerRecord& row : rows_) {
    if (row.problem.primitive != problem.primitive || row.problem.dtype != problem.dtype) continue;
    if (const auto distance = shape_log_distance(row.problem.shape, problem.shape))
      neighbours.emplace_back(*distance, row.problem.key(), &row);
  }
  std::sort(neighbours.begin(), neighbours.end());
  // The nearest that supports the problem; among those as near as it, the smallest key.
  const WinnerRecord* chosen = nullptr;
  const std::string* chosen_key = nullptr;
  double tie_limit = 0;
  for (const auto& [distance, tuned_key, row] : neighbours) {
    if (chosen && distance > tie_limit) break;
    if ((!chosen || tuned_key < *chosen_key) && supports(problem, row->variant, row->config)) {
      if (!chosen) tie_limit = distance + kDispatchTieDistance;
      chosen = row;
      chosen_key = &tuned_key;
    }
  }
  if (chosen) return DispatchChoice{chosen->variant, chosen->config, DispatchSource::nearest, *chosen_key, ""};

  auto fallback = default_for(problem);
  if (!fallback)
    throw std::runtime_error("no variant for " + key + ": nothing tuned applies and primitive '" + problem.primitive +
                             "' has no default variant");
  return DispatchChoice{std::move(fallback->first), std::move(fallback->second), DispatchSource::fallback, "", ""};
}

}  // namespace shapetune
