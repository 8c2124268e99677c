#include "tuner/search.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

namespace shapetune {
namespace {

// splitmix64: small and well mixed, and unlike std::uniform_int_distribution its output is
// specified, so a draw is the same wherever a sweep is resumed.
class DrawRng {
 public:
  explicit DrawRng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) for n > 0: draws below 2^64 mod n are rejected, so that every residue
  // is backed by the same number of raw values (plain r % n favours the small ones).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (true) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  std::uint64_t state_;
};

constexpr std::string_view kRacePrefix = "halving rung ";
// Rung sample counts grow geometrically; this keeps them (and their product) inside an int.
constexpr std::int64_t kMaxRungSamples = 1 << 24;

class Search {
 public:
  Search(const SearchOptions& options, std::span<const SearchCandidate> candidates, const SearchHooks& hooks)
      : options_(options), candidates_(candidates), hooks_(hooks) {
    report_.candidates = candidates.size();
  }

  SearchReport run() {
    switch (options_.strategy) {
      case SearchStrategy::exhaustive: exhaustive(); break;
      case SearchStrategy::random: random(); break;
      case SearchStrategy::halving: halving(); break;
    }
    return report_;
  }

 private:
  const SearchOptions& options_;
  std::span<const SearchCandidate> candidates_;
  const SearchHooks& hooks_;
  SearchReport report_;
  bool has_winner_ = false;  // some candidate has an accurate full measurement

  bool over_budget() const { return hooks_.over_budget && hooks_.over_budget(); }

  bool verify(std::size_t i) {
    ++report_.verified;
    return hooks_.verify(i);
  }

  std::optional<double> time_fully(std::size_t i, const Rung& rung) {
    ++report_.fully_measured;
    auto median = hooks_.time(i, rung);
    has_winner_ = has_winner_ || median.has_value();
    return median;
  }

  // The budget cuts anything once the problem has a winner; before that, the bar and the
  // defaults are still measured, in order, so that every problem keeps one.
  bool cut_by_budget(bool always) const { return (!always || has_winner_) && over_budget(); }

  void measure_fully(std::size_t i) {
    if (verify(i)) time_fully(i, Rung{});
  }

  void exhaustive() {
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      // As in random(): a problem whose share of the budget went on the one before (a slow
      // reference, a measurement that overran) still measures its bar and defaults until it
      // has a winner.
      const bool always = candidates_[i].baseline || candidates_[i].default_config;
      if (cut_by_budget(always)) {
        ++report_.skipped_for_budget;
        continue;
      }
      measure_fully(i);
    }
  }

  void random() {
    std::vector<std::size_t> always, others;
    for (std::size_t i = 0; i < candidates_.size(); ++i)
      (candidates_[i].baseline || candidates_[i].default_config ? always : others).push_back(i);
    std::size_t target = candidates_.size();
    if (options_.samples) target = static_cast<std::size_t>(std::max<std::int64_t>(*options_.samples, 0));
    if (options_.fraction)
      target = static_cast<std::size_t>(std::ceil(*options_.fraction * static_cast<double>(candidates_.size())));
    // The bar and the defaults are never cut by the count; the clock cuts them only once the
    // problem has a winner.
    for (std::size_t i : always) {
      if (cut_by_budget(true)) {
        ++report_.skipped_for_budget;
        continue;
      }
      measure_fully(i);
    }
    const std::size_t draws = target > always.size() ? std::min(target - always.size(), others.size()) : 0;
    // A partial Fisher-Yates shuffle: the first `draws` places become a uniform sample
    // without replacement, drawn one at a time so the budget can stop it anywhere.
    DrawRng rng(options_.seed);
    for (std::size_t k = 0; k < draws; ++k) {
      if (over_budget()) {
        report_.skipped_for_budget += draws - k;
        return;
      }
      std::swap(others[k], others[k + rng.below(others.size() - k)]);
      measure_fully(others[k]);
    }
  }

  struct Contender {
    std::size_t index;
    std::optional<double> median;  // from the latest rung that timed it
    bool failed = false;           // timing failed: out of the race
  };

  static void rank(std::vector<Contender>& contenders) {
    // Stable, so that equal medians keep the given order (defaults first).
    std::stable_sort(contenders.begin(), contenders.end(), [](const Contender& a, const Contender& b) {
      if (a.median.has_value() != b.median.has_value()) return a.median.has_value();
      return a.median && *a.median < *b.median;
    });
  }

  void halving() {
    const auto eta = static_cast<std::size_t>(std::max(options_.eta, 2));
    std::vector<Contender> alive;
    // Each library baseline's default config is the bar, measured fully up front; its other
    // configs (cuBLASLt's heuristic ranks) race like every other candidate, or a library with
    // many algorithms would be measured fully on every one of them.
    const auto bar = [&](std::size_t i) { return candidates_[i].baseline && candidates_[i].default_config; };
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      if (!bar(i)) continue;
      if (cut_by_budget(true)) {
        ++report_.skipped_for_budget;
        continue;
      }
      measure_fully(i);
    }
    // Verification first, for all: a candidate that fails never races.
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      if (bar(i)) continue;
      if (over_budget()) {
        ++report_.skipped_for_budget;
        continue;
      }
      if (verify(i)) alive.push_back({i, std::nullopt});
    }

    // Rungs are planned from the verified count, so every rung's label knows how many
    // there are: race while more than eta remain; at most eta reach the final rung.
    int planned_race_rungs = 0;
    for (std::size_t n = alive.size(); n > eta; n = (n + eta - 1) / eta) ++planned_race_rungs;
    const int rung_count = planned_race_rungs + 1;

    bool out_of_time = false;
    std::int64_t samples = std::max(options_.min_samples, 1);
    for (int k = 0; k < planned_race_rungs && alive.size() > eta && !out_of_time; ++k) {
      const Rung rung{k, rung_count, static_cast<int>(samples)};
      for (Contender& c : alive) {
        if (over_budget()) {
          out_of_time = true;
          break;
        }
        if (k == 0) ++report_.raced;
        report_.race_rungs = k + 1;
        c.median = hooks_.time(c.index, rung);
        c.failed = !c.median;
      }
      std::erase_if(alive, [](const Contender& c) { return c.failed; });
      rank(alive);
      if (!out_of_time) alive.resize(std::min(alive.size(), (alive.size() + eta - 1) / eta));
      samples = std::min(samples * static_cast<std::int64_t>(eta), kMaxRungSamples);
    }

    // A race cut short by the budget still ends in one full measurement, of the leader by
    // its latest median (or of the first verified candidate, a default, when none was timed),
    // so that the problem has a winner to compare with the baselines.
    if (out_of_time && !alive.empty()) alive.resize(1);
    const Rung final_rung{report_.race_rungs, rung_count, 0};
    for (std::size_t f = 0; f < alive.size(); ++f) {
      if (f > 0 && over_budget()) {
        report_.skipped_for_budget += alive.size() - f;
        break;
      }
      time_fully(alive[f].index, final_rung);
    }
  }
};

}  // namespace

std::string_view search_strategy_name(SearchStrategy s) {
  switch (s) {
    case SearchStrategy::exhaustive: return "exhaustive";
    case SearchStrategy::random: return "random";
    case SearchStrategy::halving: return "halving";
  }
  return "?";
}

std::optional<SearchStrategy> parse_search_strategy(std::string_view name) {
  for (SearchStrategy s : {SearchStrategy::exhaustive, SearchStrategy::random, SearchStrategy::halving})
    if (search_strategy_name(s) == name) return s;
  return std::nullopt;
}

std::string SearchOptions::describe() const {
  std::ostringstream s;
  s << search_strategy_name(strategy);
  if (strategy == SearchStrategy::random) {
    s << " (";
    if (samples) s << "samples " << *samples;
    else if (fraction) s << "fraction " << *fraction;
    else s << "until the budget";
    s << ", seed " << seed << ")";
  } else if (strategy == SearchStrategy::halving) {
    s << " (eta " << eta << ", min_samples " << min_samples << ")";
  }
  return s.str();
}

SearchReport run_search(const SearchOptions& options, std::span<const SearchCandidate> candidates,
                        const SearchHooks& hooks) {
  return Search(options, candidates, hooks).run();
}

std::uint64_t seed_for(std::uint64_t seed, std::string_view problem_key) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : problem_key) hash = (hash ^ c) * 0x100000001b3ULL;
  return DrawRng(seed ^ hash).next();
}

std::string race_stop_reason(const Rung& rung) {
  return std::string(kRacePrefix) + std::to_string(rung.index + 1) + " of " + std::to_string(rung.count);
}

std::string final_stop_reason(std::string_view adaptive_reason, const Rung& rung) {
  if (rung.count <= 1) return std::string(adaptive_reason);
  return std::string(adaptive_reason) + "; halving final rung " + std::to_string(rung.index + 1) + " of " +
         std::to_string(rung.count);
}

bool is_race_stop_reason(std::string_view stop_reason) { return stop_reason.starts_with(kRacePrefix); }

std::optional<int> race_rung_index(std::string_view stop_reason) {
  if (!is_race_stop_reason(stop_reason)) return std::nullopt;
  const std::string_view rest = stop_reason.substr(kRacePrefix.size());
  int rung = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), rung);
  if (error != std::errc{} || rung < 1 || !std::string_view(end, rest.data() + rest.size()).starts_with(" of "))
    return std::nullopt;
  return rung - 1;
}

std::vector<CandidateRecord> full_measurements(std::vector<CandidateRecord> records) {
  std::erase_if(records, [](const CandidateRecord& r) {
    return r.timing && is_race_stop_reason(r.timing->stop_reason);
  });
  return records;
}

}  // namespace shapetune
