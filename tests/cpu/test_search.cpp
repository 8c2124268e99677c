// Search strategies on a synthetic problem: candidates with known true times, samples drawn
// with multiplicative noise, and a simulated clock (nothing here reads a real one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tuner/choose.hpp"
#include "tuner/search.hpp"
#include "tuner/shape_file.hpp"
#include "tuner/sweep.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

// What the hooks saw, and the fake measurement engine behind them.
class Synthetic {
  // First, so that they are initialized before the vectors sized from them.
  std::vector<double> true_us_;
  std::mt19937_64 rng_;
  double noise_;

 public:
  // true_us[i]: candidate i's real time; candidates listed in `inaccurate` fail verification.
  Synthetic(std::vector<double> true_us, std::uint64_t noise_seed, double noise = 0.0)
      : true_us_(std::move(true_us)), rng_(noise_seed), noise_(noise), verify_calls(true_us_.size(), 0),
        full_calls(true_us_.size(), 0), rungs_timed(true_us_.size()) {
    candidates.resize(true_us_.size());
  }

  std::vector<SearchCandidate> candidates;
  std::set<std::size_t> inaccurate;
  std::set<std::size_t> timing_fails;  // time() returns nullopt for these
  int full_samples = 100;              // what the adaptive rule takes in this fake engine
  double verify_cost_s = 0.001;        // simulated seconds per verification
  std::optional<double> budget_s;      // over budget once the simulated clock passes it

  std::vector<int> verify_calls;
  std::vector<int> full_calls;
  std::vector<std::vector<Rung>> rungs_timed;  // race rungs only, per candidate
  std::vector<std::size_t> verify_order, full_order;
  std::map<std::size_t, double> full_median;   // what a full measurement said
  std::int64_t samples_taken = 0;
  double clock_s = 0;
  bool timed_before_verified = false;  // a hook order violation
  bool work_after_budget = false;      // a verification or race timing started over budget
  std::size_t calls_after_budget = 0;  // full measurements started over budget
  std::size_t race_timings = 0;
  std::size_t race_timings_at_last_verify = 0;  // 0: every verification came before the race

  SearchHooks hooks() {
    SearchHooks h;
    h.verify = [this](std::size_t i) {
      if (over()) work_after_budget = true;
      ++verify_calls[i];
      verify_order.push_back(i);
      race_timings_at_last_verify = race_timings;
      clock_s += verify_cost_s;
      return !inaccurate.count(i);
    };
    h.time = [this](std::size_t i, const Rung& rung) -> std::optional<double> {
      if (verify_calls[i] == 0 || inaccurate.count(i)) timed_before_verified = true;
      if (over()) {
        if (rung.full()) ++calls_after_budget;
        else work_after_budget = true;
      }
      if (rung.full()) {
        ++full_calls[i];
        full_order.push_back(i);
      } else {
        rungs_timed[i].push_back(rung);
        ++race_timings;
      }
      if (timing_fails.count(i)) return std::nullopt;
      const double median = median_of(i, rung.full() ? full_samples : rung.samples);
      if (rung.full()) full_median[i] = median;
      return median;
    };
    if (budget_s) h.over_budget = [this] { return over(); };
    return h;
  }

  // The candidate a sweep would choose: the fastest full measurement.
  std::optional<std::size_t> winner() const {
    if (full_median.empty()) return std::nullopt;
    return std::min_element(full_median.begin(), full_median.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  }

 private:
  bool over() const { return budget_s && clock_s > *budget_s; }

  double median_of(std::size_t i, int n) {
    std::vector<double> samples(static_cast<std::size_t>(n), true_us_[i]);
    if (noise_ > 0) {
      std::normal_distribution<double> log_noise(0.0, noise_);
      for (double& s : samples) s *= std::exp(log_noise(rng_));
    }
    std::sort(samples.begin(), samples.end());
    samples_taken += n;
    clock_s += true_us_[i] * 1e-6 * n;
    return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  }
};

std::vector<double> linear_times(std::size_t n, double first = 10, double step = 1) {
  std::vector<double> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = first + step * static_cast<double>(i);
  return t;
}

SearchOptions strategy(SearchStrategy s) {
  SearchOptions o;
  o.strategy = s;
  return o;
}

std::size_t count_nonzero(const std::vector<int>& v) {
  return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](int x) { return x > 0; }));
}

// ---- exhaustive -------------------------------------------------------------------------

TEST(ExhaustiveSearch, VerifiesAndFullyMeasuresEveryCandidateInOrder) {
  Synthetic s(linear_times(20), 1);
  s.candidates[0].baseline = true;
  s.inaccurate = {3, 7};
  const SearchReport r = run_search(strategy(SearchStrategy::exhaustive), s.candidates, s.hooks());
  EXPECT_EQ(r.candidates, 20u);
  EXPECT_EQ(r.verified, 20u);
  EXPECT_EQ(r.fully_measured, 18u);
  EXPECT_EQ(r.raced, 0u);
  EXPECT_EQ(r.race_rungs, 0);
  EXPECT_EQ(r.skipped_for_budget, 0u);
  std::vector<std::size_t> in_order(20);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(s.verify_order, in_order);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(s.verify_calls[i], 1) << i;
    EXPECT_EQ(s.full_calls[i], s.inaccurate.count(i) ? 0 : 1) << i;
    EXPECT_TRUE(s.rungs_timed[i].empty()) << i;
  }
  EXPECT_FALSE(s.timed_before_verified);
}

TEST(ExhaustiveSearch, StopsStartingCandidatesOnceOverBudget) {
  Synthetic s(linear_times(50, 1000), 1);  // about 0.1 s per full measurement
  s.budget_s = 1.0;
  const SearchReport r = run_search(strategy(SearchStrategy::exhaustive), s.candidates, s.hooks());
  EXPECT_GT(r.fully_measured, 3u);
  EXPECT_LT(r.fully_measured, 20u);
  EXPECT_EQ(r.fully_measured + r.skipped_for_budget, 50u);
  EXPECT_FALSE(s.work_after_budget);
}

// A problem whose share of the budget is gone before it starts (a slow reference, the problem
// before overran) measures its baselines and defaults in order until it has a winner, then stops.
TEST(ExhaustiveSearch, OverBudgetFromTheStartMeasuresTheBarAndDefaultsUntilThereIsAWinner) {
  Synthetic s(linear_times(30, 1000), 1);
  s.candidates[0].baseline = true;
  s.candidates[1].default_config = s.candidates[2].default_config = true;
  s.budget_s = 0.0;
  s.clock_s = 1.0;  // already over
  const SearchReport r = run_search(strategy(SearchStrategy::exhaustive), s.candidates, s.hooks());
  EXPECT_EQ(r.fully_measured, 1u);
  EXPECT_EQ(r.skipped_for_budget, 29u);
  EXPECT_EQ(s.full_calls[0], 1);
  for (std::size_t i = 1; i < 30; ++i) EXPECT_EQ(s.full_calls[i], 0) << i;

  // The baseline fails the reference: the first default is measured instead, then nothing more.
  Synthetic t(linear_times(30, 1000), 1);
  t.candidates[0].baseline = true;
  t.candidates[1].default_config = t.candidates[2].default_config = true;
  t.inaccurate = {0};
  t.budget_s = 0.0;
  t.clock_s = 1.0;
  const SearchReport u = run_search(strategy(SearchStrategy::exhaustive), t.candidates, t.hooks());
  EXPECT_EQ(u.verified, 2u);
  EXPECT_EQ(t.full_calls[1], 1);
  EXPECT_EQ(t.full_calls[2], 0);
  EXPECT_EQ(u.skipped_for_budget, 28u);
}

// ---- random -----------------------------------------------------------------------------

// 300 candidates: two baselines first, then three variants' defaults, as the sweep orders them.
Synthetic random_problem(std::uint64_t seed) {
  Synthetic s(linear_times(300), seed);
  s.candidates[0].baseline = s.candidates[1].baseline = true;
  for (std::size_t i : {2, 3, 4}) s.candidates[i].default_config = true;
  return s;
}

TEST(RandomSearch, MeasuresExactlyTheCountIncludingBaselinesAndDefaults) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Synthetic s = random_problem(seed);
    SearchOptions o = strategy(SearchStrategy::random);
    o.samples = 50;
    o.seed = seed;
    const SearchReport r = run_search(o, s.candidates, s.hooks());
    EXPECT_EQ(r.verified, 50u);
    EXPECT_EQ(r.fully_measured, 50u);
    EXPECT_EQ(count_nonzero(s.verify_calls), 50u) << "a candidate was drawn twice";
    EXPECT_EQ(*std::max_element(s.verify_calls.begin(), s.verify_calls.end()), 1);
    for (std::size_t i : {0, 1, 2, 3, 4}) EXPECT_EQ(s.full_calls[i], 1) << "seed " << seed << ", candidate " << i;
  }
}

TEST(RandomSearch, FailedCandidatesCountAgainstTheBudgetAndAreNeverTimed) {
  Synthetic s = random_problem(3);
  for (std::size_t i = 5; i < 300; i += 2) s.inaccurate.insert(i);
  SearchOptions o = strategy(SearchStrategy::random);
  o.samples = 40;
  const SearchReport r = run_search(o, s.candidates, s.hooks());
  EXPECT_EQ(r.verified, 40u);
  EXPECT_LT(r.fully_measured, 40u);
  EXPECT_FALSE(s.timed_before_verified);
}

TEST(RandomSearch, FractionOfTheSupportedCandidatesRoundsUp) {
  Synthetic s = random_problem(1);
  SearchOptions o = strategy(SearchStrategy::random);
  o.fraction = 0.101;  // 30.3 of 300
  EXPECT_EQ(run_search(o, s.candidates, s.hooks()).verified, 31u);
}

TEST(RandomSearch, BaselinesAndDefaultsAreKeptWhenTheyAloneExceedTheCount) {
  Synthetic s = random_problem(1);
  SearchOptions o = strategy(SearchStrategy::random);
  o.samples = 2;
  run_search(o, s.candidates, s.hooks());
  EXPECT_EQ(count_nonzero(s.verify_calls), 5u);
  for (std::size_t i : {0, 1, 2, 3, 4}) EXPECT_EQ(s.full_calls[i], 1) << i;
}

TEST(RandomSearch, TimeBudgetStopsTheDrawAndTheBarOnceThereIsAWinner) {
  Synthetic s = random_problem(1);
  s.budget_s = 0.0;
  s.clock_s = 1.0;  // spent before it starts: the first baseline alone runs
  SearchOptions o = strategy(SearchStrategy::random);
  const SearchReport r = run_search(o, s.candidates, s.hooks());
  EXPECT_EQ(count_nonzero(s.full_calls), 1u);
  EXPECT_EQ(s.full_calls[0], 1);
  EXPECT_EQ(r.skipped_for_budget, 299u);

  Synthetic t(linear_times(300, 1000), 2);  // about 0.1 s per full measurement
  t.candidates[0].baseline = true;
  t.candidates[1].default_config = true;
  t.budget_s = 2.0;
  const SearchReport u = run_search(o, t.candidates, t.hooks());
  EXPECT_GT(u.fully_measured, 5u);
  EXPECT_LT(u.fully_measured, 40u);
  EXPECT_EQ(u.verified + u.skipped_for_budget, 300u);
  EXPECT_FALSE(t.work_after_budget) << "a draw started after the budget ran out";
}

TEST(RandomSearch, DrawsUniformlyAndReproducibly) {
  // Ten candidates besides one default; three drawn each time, so each should come up in
  // 30% of 3000 draws (900, standard deviation about 25).
  std::vector<int> drawn(11, 0);
  for (std::uint64_t seed = 0; seed < 3000; ++seed) {
    Synthetic s(linear_times(11), seed);
    s.candidates[0].default_config = true;
    SearchOptions o = strategy(SearchStrategy::random);
    o.samples = 4;
    o.seed = seed_for(seed, "softmax/f32/rows=1,cols=1");
    run_search(o, s.candidates, s.hooks());
    for (std::size_t i = 1; i < 11; ++i) drawn[i] += s.verify_calls[i];
  }
  for (std::size_t i = 1; i < 11; ++i) {
    EXPECT_GT(drawn[i], 800) << "candidate " << i;
    EXPECT_LT(drawn[i], 1000) << "candidate " << i;
  }

  auto draw = [](std::uint64_t seed) {
    Synthetic s = random_problem(1);
    SearchOptions o = strategy(SearchStrategy::random);
    o.samples = 20;
    o.seed = seed;
    run_search(o, s.candidates, s.hooks());
    return s.verify_order;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(RandomSearch, SeedForIsPerProblemAndStable) {
  EXPECT_EQ(seed_for(1, "gemm/f16/m=1,n=2,k=3"), seed_for(1, "gemm/f16/m=1,n=2,k=3"));
  EXPECT_NE(seed_for(1, "gemm/f16/m=1,n=2,k=3"), seed_for(1, "gemm/f16/m=1,n=2,k=4"));
  EXPECT_NE(seed_for(1, "gemm/f16/m=1,n=2,k=3"), seed_for(2, "gemm/f16/m=1,n=2,k=3"));
}

// ---- successive halving -----------------------------------------------------------------

TEST(HalvingSearch, RungScheduleOnANoiseFreeProblem) {
  // 300 candidates, candidate 299 the fastest: rungs of 300, 100, 34, 12 and 4 candidates at
  // 5, 15, 45, 135 and 405 samples, then the best 2 measured fully.
  std::vector<double> times = linear_times(300, 400, -1);
  Synthetic s(times, 1);
  const SearchReport r = run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_EQ(r.race_rungs, 5);
  EXPECT_EQ(r.raced, 300u);
  EXPECT_EQ(r.fully_measured, 2u);
  std::map<int, std::size_t> per_rung;
  std::map<int, int> samples_of_rung;
  for (const auto& rungs : s.rungs_timed)
    for (const Rung& rung : rungs) {
      ++per_rung[rung.index];
      samples_of_rung[rung.index] = rung.samples;
      EXPECT_EQ(rung.count, 6);
    }
  EXPECT_EQ(per_rung, (std::map<int, std::size_t>{{0, 300}, {1, 100}, {2, 34}, {3, 12}, {4, 4}}));
  EXPECT_EQ(samples_of_rung, (std::map<int, int>{{0, 5}, {1, 15}, {2, 45}, {3, 135}, {4, 405}}));
  EXPECT_EQ(s.full_order, (std::vector<std::size_t>{299, 298}));
  // Every candidate that reached rung k was among the fastest at rung k-1.
  for (std::size_t i = 0; i < 300; ++i)
    EXPECT_EQ(s.rungs_timed[i].size(), 1u + (i >= 200) + (i >= 266) + (i >= 288) + (i >= 296)) << i;
  EXPECT_EQ(s.winner(), 299u);
}

TEST(HalvingSearch, KeepsTheTrueBestUnderNoise) {
  // 300 candidates, the best 3% ahead of the second, the rest spread up to twice the best;
  // every sample off by 5% (log-normal). Positions shuffled so that order cannot help.
  int found = 0;
  std::size_t most_full = 0;
  std::int64_t most_samples = 0;
  for (std::uint64_t trial = 0; trial < 100; ++trial) {
    std::mt19937_64 layout(1000 + trial);
    std::vector<double> times{100.0, 103.0};
    std::uniform_real_distribution<double> rest(103.0, 200.0);
    while (times.size() < 300) times.push_back(rest(layout));
    std::shuffle(times.begin(), times.end(), layout);
    const std::size_t best = static_cast<std::size_t>(std::min_element(times.begin(), times.end()) - times.begin());

    Synthetic s(times, trial, 0.05);
    run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
    found += s.winner() == best;
    most_full = std::max(most_full, static_cast<std::size_t>(count_nonzero(s.full_calls)));
    most_samples = std::max(most_samples, s.samples_taken);
  }
  EXPECT_GE(found, 95);
  EXPECT_LE(most_full, 3u) << "at most eta candidates reach the full measurement";
  // Exhaustive search would take 300 full measurements of 100 samples each.
  EXPECT_LT(most_samples, 300 * 100 / 3);
}

TEST(HalvingSearch, VerifiesEachCandidateOnceBeforeAnyTimingAndFailuresNeverRace) {
  Synthetic s(linear_times(60), 1, 0.05);
  s.candidates[0].baseline = s.candidates[0].default_config = true;
  s.inaccurate = {1, 5, 9, 30};
  const SearchReport r = run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_FALSE(s.timed_before_verified);
  for (std::size_t i = 0; i < 60; ++i) EXPECT_EQ(s.verify_calls[i], 1) << i;
  for (std::size_t i : s.inaccurate) {
    EXPECT_TRUE(s.rungs_timed[i].empty()) << i;
    EXPECT_EQ(s.full_calls[i], 0) << i;
  }
  EXPECT_EQ(r.verified, 60u);
  EXPECT_EQ(r.raced, 55u);  // 60, less the baseline and the four failures
  EXPECT_GT(s.race_timings, 55u);
  EXPECT_EQ(s.race_timings_at_last_verify, 0u) << "a verification came after race timings";
}

TEST(HalvingSearch, BaselineDefaultsAreMeasuredFullyAndNeverRace) {
  Synthetic s(linear_times(100), 1);
  s.candidates[0].baseline = s.candidates[1].baseline = true;
  s.candidates[0].default_config = s.candidates[1].default_config = true;
  run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  for (std::size_t i : {0, 1}) {
    EXPECT_EQ(s.full_calls[i], 1) << i;
    EXPECT_TRUE(s.rungs_timed[i].empty()) << i;
  }
  // The fastest non-baseline (2) made it to the final rung.
  EXPECT_EQ(s.full_calls[2], 1);
}

// A library with many algorithms (cuBLASLt's heuristic ranks) is one bar, its default; the other
// ranks race, and only a fast one reaches the full measurement.
TEST(HalvingSearch, OtherConfigsOfABaselineRace) {
  Synthetic s(linear_times(60), 1);
  for (std::size_t i : {50, 51, 52, 53}) s.candidates[i].baseline = true;
  s.candidates[50].default_config = true;
  s.candidates[1].baseline = true;  // a fast non-default rank (0, 1, 2 are the three fastest)
  run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_EQ(s.full_calls[50], 1);
  EXPECT_TRUE(s.rungs_timed[50].empty());
  for (std::size_t i : {51, 52, 53}) {
    EXPECT_FALSE(s.rungs_timed[i].empty()) << i;
    EXPECT_EQ(s.full_calls[i], 0) << i << ": a slow rank was measured fully";
  }
  EXPECT_EQ(s.full_calls[1], 1) << "a fast rank races through to the final rung";
}

TEST(HalvingSearch, ASmallSpaceIsMeasuredFullyWithoutARace) {
  Synthetic s(linear_times(3), 1);
  const SearchReport r = run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_EQ(r.race_rungs, 0);
  EXPECT_EQ(r.fully_measured, 3u);
  for (const auto& rungs : s.rungs_timed) EXPECT_TRUE(rungs.empty());
}

TEST(HalvingSearch, EtaAndMinSamplesShapeTheRungs) {
  Synthetic s(linear_times(64), 1);
  SearchOptions o = strategy(SearchStrategy::halving);
  o.eta = 2;
  o.min_samples = 3;
  const SearchReport r = run_search(o, s.candidates, s.hooks());
  // 64 -> 32 -> 16 -> 8 -> 4 -> 2: five race rungs at 3, 6, 12, 24, 48 samples.
  EXPECT_EQ(r.race_rungs, 5);
  EXPECT_EQ(s.rungs_timed[0].size(), 5u);
  EXPECT_EQ(s.rungs_timed[0].back().samples, 48);
  EXPECT_EQ(s.full_order, (std::vector<std::size_t>{0, 1}));
}

TEST(HalvingSearch, ACandidateWhoseTimingFailsLeavesTheRace) {
  Synthetic s(linear_times(30), 1);
  s.timing_fails = {0};
  run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_EQ(s.rungs_timed[0].size(), 1u);
  EXPECT_EQ(s.full_calls[0], 0);
  EXPECT_EQ(s.winner(), 1u);
}

TEST(HalvingSearch, ABudgetThatRunsOutMidRaceEndsInOneFullMeasurementOfTheLeader) {
  Synthetic s(linear_times(300, 1000), 1);  // rung 0 alone takes about 1.5 simulated seconds
  s.candidates[0].baseline = s.candidates[0].default_config = true;
  s.budget_s = 0.9;
  const SearchReport r = run_search(strategy(SearchStrategy::halving), s.candidates, s.hooks());
  EXPECT_EQ(r.race_rungs, 1);
  EXPECT_LT(r.raced, 299u);
  EXPECT_FALSE(s.work_after_budget);
  EXPECT_EQ(count_nonzero(s.full_calls), 2u);  // the baseline and the leader
  EXPECT_EQ(s.full_calls[1], 1) << "candidate 1 is the fastest that was raced";
}

// ---- how the store tells race rows from full ones ---------------------------------------

TEST(SearchStopReasons, RaceAndFinalLabelsRoundTrip) {
  const Rung race{1, 5, 15};
  EXPECT_EQ(race_stop_reason(race), "halving rung 2 of 5");
  EXPECT_TRUE(is_race_stop_reason(race_stop_reason(race)));
  EXPECT_EQ(race_rung_index(race_stop_reason(race)), 1);

  const std::string final_reason = final_stop_reason("converged", Rung{4, 5, 0});
  EXPECT_EQ(final_reason, "converged; halving final rung 5 of 5");
  EXPECT_FALSE(is_race_stop_reason(final_reason));
  EXPECT_EQ(race_rung_index(final_reason), std::nullopt);
  EXPECT_EQ(final_stop_reason("time cap", Rung{}), "time cap");  // no race: the plain reason

  for (const char* other : {"converged", "", "halving rung", "halving rung x of 3", "halving rung 0 of 3"})
    EXPECT_EQ(race_rung_index(other), std::nullopt) << other;
}

// A race row can hold a lower median than any finalist (few samples, noise): it must not win.
TEST(SearchStopReasons, RaceRowsNeverMakeTheWinnerOrTheRunnerUp) {
  auto record = [](std::string variant, double median_us, std::string stop_reason, bool baseline = false) {
    CandidateRecord r;
    r.variant = std::move(variant);
    r.baseline = baseline;
    r.timing = TimingStats{};
    r.timing->median_us = median_us;
    r.timing->stop_reason = std::move(stop_reason);
    return r;
  };
  CandidateRecord failed;
  failed.variant = "wrong";
  failed.status = CandidateStatus::failed_accuracy;
  const std::vector<CandidateRecord> records{
      record("cublas", 12, "converged", true),
      record("lucky", 9, race_stop_reason(Rung{0, 4, 5})),
      record("luckier", 9.5, race_stop_reason(Rung{2, 4, 45})),
      record("finalist_a", 10, final_stop_reason("converged", Rung{3, 4, 0})),
      record("finalist_b", 11, final_stop_reason("time cap", Rung{3, 4, 0})),
      failed,
  };
  const auto kept = full_measurements(records);
  EXPECT_EQ(kept.size(), 4u);
  const auto winner = choose_winner(kept);
  ASSERT_TRUE(winner);
  EXPECT_EQ(winner->variant, "finalist_a");
  EXPECT_EQ(winner->runner_up_variant, "finalist_b");
  EXPECT_EQ(winner->best_baseline, "cublas");
}

TEST(SearchOptionsText, NamesAndDescriptions) {
  EXPECT_EQ(parse_search_strategy("halving"), SearchStrategy::halving);
  EXPECT_EQ(parse_search_strategy("Halving"), std::nullopt);
  EXPECT_EQ(search_strategy_name(SearchStrategy::random), "random");
  SearchOptions o;
  EXPECT_EQ(o.describe(), "exhaustive");
  o.strategy = SearchStrategy::halving;
  EXPECT_EQ(o.describe(), "halving (eta 3, min_samples 5)");
  o.strategy = SearchStrategy::random;
  o.samples = 50;
  EXPECT_EQ(o.describe(), "random (samples 50, seed 1)");
  o.samples.reset();
  o.fraction = 0.25;
  EXPECT_EQ(o.describe(), "random (fraction 0.25, seed 1)");
}

// ---- the sweep's measuring order ------------------------------------------------------------

// Baselines, then the variants' defaults in dispatch's order, then the other configs. Attention's
// default variant is flash_mma and naive comes first in the catalogue: measured first, naive
// (0.2 s a launch at 40,000 heads) would be the winner a budget keeps once it has one.
TEST(MeasuringOrder, BaselinesThenTheDefaultVariantFirstAmongTheDefaults) {
  for (const char* name : {"attention.causal.split.rounded", "attention.causal.split", "gemm_bias.nt"}) {
    PlannedProblem planned;
    const bool attention = std::string(name).rfind("attention", 0) == 0;
    planned.problem = attention ? Problem{name, DType::f16, Shape({{"B", 10000}, {"H", 4}, {"S", 128}, {"hd", 32}})}
                                : Problem{name, DType::f16, Shape({{"m", 8192}, {"n", 128}, {"k", 128}})};
    const Primitive& primitive = *catalogue().find_primitive(name);
    const auto order = measuring_order(planned, {});
    ASSERT_FALSE(order.empty()) << name;
    const auto is_baseline = [&](const std::string& v) { return catalogue().find_variant(name, v)->baseline; };
    std::size_t i = 0;
    while (i < order.size() && is_baseline(order[i].first)) ++i;
    for (std::size_t j = i; j < order.size(); ++j) EXPECT_FALSE(is_baseline(order[j].first)) << name << " " << j;
    ASSERT_LT(i, order.size()) << name;
    // The first of dispatch's order (the default variant, then its fallbacks) that is no baseline.
    std::vector<std::string> dispatch_order{primitive.default_variant};
    dispatch_order.insert(dispatch_order.end(), primitive.fallback_variants.begin(), primitive.fallback_variants.end());
    const auto own = std::find_if(dispatch_order.begin(), dispatch_order.end(),
                                  [&](const std::string& v) { return !is_baseline(v); });
    ASSERT_NE(own, dispatch_order.end()) << name;
    EXPECT_EQ(order[i].first, *own) << name;
    // Every variant's default once, right after the baselines, before any other config.
    std::set<std::string> defaults;
    for (std::size_t j = i; j < order.size(); ++j) {
      const Variant& v = *catalogue().find_variant(name, order[j].first);
      if (!(order[j].second == v.default_config)) break;
      EXPECT_TRUE(defaults.insert(v.name).second) << name << ": " << v.name << " twice";
    }
    for (const Variant* v : catalogue().variants(name)) {
      if (!v->baseline) {
        EXPECT_TRUE(defaults.count(v->name)) << name << ": " << v->name << "'s default is not among them";
      }
    }
  }
}

}  // namespace
}  // namespace shapetune
