// Search strategies: which candidates of one problem get measured, and how hard.
//
// Plain C++ over callbacks (verify a candidate; time it with a fixed sample count or fully),
// so that the strategies are tested on the CPU with a synthetic cost function; the sweep
// binds the callbacks to the measurement engine and the store.
//
// - exhaustive: every candidate, in the order given, each fully measured (the default).
// - random: every baseline and every variant's default config, then a uniform draw without
//   replacement from the others, until a count (or fraction) or the time budget is reached.
// - halving (successive halving): each baseline's default config fully measured; every other
//   candidate (other configs of a baseline too) verified,
//   then raced with a short fixed sample count; the best 1/eta go on to a rung with eta times
//   the samples, until at most eta are left: those get the full adaptive measurement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/records.hpp"

namespace shapetune {

enum class SearchStrategy : std::uint8_t { exhaustive, random, halving };
std::string_view search_strategy_name(SearchStrategy);
std::optional<SearchStrategy> parse_search_strategy(std::string_view);
inline constexpr std::string_view kSearchStrategyNames = "exhaustive, random, halving";

struct SearchOptions {
  SearchStrategy strategy = SearchStrategy::exhaustive;

  // random: how many candidates to measure in all, baselines and defaults included (they are
  // measured even when they alone exceed it): a count, or a fraction of the supported ones
  // (rounded up). Neither: until the time budget runs out.
  std::optional<std::int64_t> samples;
  std::optional<double> fraction;
  std::uint64_t seed = 1;  // the draw; mixed with the problem key (seed_for)

  // halving: keep the best 1/eta of each rung; the first rung takes min_samples samples per
  // candidate, each later one eta times as many.
  int eta = 3;
  int min_samples = 5;

  // "halving (eta 3, min_samples 5)", "random (samples 50, seed 1)", "exhaustive".
  std::string describe() const;
  bool operator==(const SearchOptions&) const = default;
};

// A candidate as a strategy sees it. The list a strategy gets holds only candidates that
// passed supports(): pruning happens before any strategy, so none samples what cannot run.
struct SearchCandidate {
  bool baseline = false;        // a library implementation (its default config: the bar, always measured)
  bool default_config = false;  // a variant's default config: random search always takes it
};

// One timing request. Race rungs take a fixed number of samples; the final rung (and every
// measurement of exhaustive and random search) is the full adaptive measurement.
struct Rung {
  int index = 0;    // 0-based
  int count = 1;    // rungs in this problem's race, the final one included; 1: no race
  int samples = 0;  // a race rung's fixed sample count; 0: the full adaptive measurement
  bool full() const { return samples == 0; }
};

struct SearchHooks {
  // The accuracy check, once per candidate, before any timing. False: the candidate is out
  // (failed the reference, or could not run); it is never timed.
  std::function<bool(std::size_t candidate)> verify;
  // Times a verified candidate; its median in microseconds, or nullopt when timing failed.
  std::function<std::optional<double>(std::size_t candidate, const Rung&)> time;
  // Whether the problem's share of the time budget is spent. Empty: no budget.
  std::function<bool()> over_budget;
};

struct SearchReport {
  std::size_t candidates = 0;          // supported candidates searched over
  std::size_t verified = 0;            // accuracy-checked, passing or not
  std::size_t fully_measured = 0;      // timed with the full adaptive rule (baselines included)
  std::size_t raced = 0;               // timed in at least one race rung
  int race_rungs = 0;                  // race rungs run (the final, full one not counted)
  std::size_t skipped_for_budget = 0;  // left unmeasured because the time budget ran out
};

// Runs one problem's search. Exceptions thrown by the hooks (an interrupt, a lost device)
// pass through; whatever was measured before stays measured.
SearchReport run_search(const SearchOptions&, std::span<const SearchCandidate>, const SearchHooks&);

// The seed of one problem's random draw: the same problem gets the same draw in every run
// (a resumed sweep continues the draw it started), different problems different draws.
std::uint64_t seed_for(std::uint64_t seed, std::string_view problem_key);

// How the store tells a race measurement from a full one, in the candidates' stop_reason
// (there is no column for it): "halving rung 2 of 5" for a candidate whose last timing was a
// race rung (its sample count a fixed one), "<adaptive reason>; halving final rung 5 of 5" for
// a finalist. Only full measurements may make a winner.
std::string race_stop_reason(const Rung&);
std::string final_stop_reason(std::string_view adaptive_reason, const Rung&);
bool is_race_stop_reason(std::string_view stop_reason);
// The 0-based rung of a race stop reason; nullopt for any other text.
std::optional<int> race_rung_index(std::string_view stop_reason);
// The records that may make a winner or a runner-up: all but race rows, whose few samples
// only ranked candidates against each other.
std::vector<CandidateRecord> full_measurements(std::vector<CandidateRecord>);

}  // namespace shapetune
