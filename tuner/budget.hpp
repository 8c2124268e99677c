// How a sweep shares its --budget out over its problems. Each problem needs some time whatever
// the budget: its inputs and float64 reference (a 4096^3 GEMM's takes seconds on the host) and
// one measured winner. The setup is predicted from the problem's cost model, at rates the plan
// learns as the problems are prepared; the time to a first winner is the mean observed so far.
// Both are reserved for every problem still to come, and what is left of the budget is shared
// equally. So an early, cheap problem cannot spend what a later, expensive one will need, and
// the whole sweep ends near the budget.
//
// The plan also predicts how long a counter profile takes, so that one is started only if it
// ends inside its problem's share: a profile is ten or more replays of the kernel and, started
// just before the share ends, overran it by its whole length.
#pragma once

#include <cstddef>
#include <vector>

#include "core/types.hpp"

namespace shapetune {

class BudgetPlan {
 public:
  // The host's rates before anything is observed: float64 reference FLOPs and bytes of inputs,
  // outputs and checks per second, and a floor per problem.
  static constexpr double kReferenceFlopsPerS = 30e9;
  static constexpr double kHostBytesPerS = 1e9;
  static constexpr double kSetupFloorS = 0.02;

  BudgetPlan(double budget_s, std::vector<Cost> problems);

  // Seconds problem i may take from now, `elapsed_s` into the sweep: its own predicted setup and
  // time to a winner, plus an equal part of what those of problems i.. do not need. Never
  // negative.
  double share_s(std::size_t i, double elapsed_s) const;
  // Records how long problem i's setup took; later predictions scale by observed / predicted.
  void observed_setup(std::size_t i, double seconds);
  double predicted_setup_s(std::size_t i) const;
  // The setups of every problem, as predicted now.
  double predicted_setups_s() const;
  // Records how long a problem took from the end of its setup to its first accurate full
  // measurement (the part no budget cuts); the mean is reserved per problem.
  void observed_time_to_winner(double seconds);
  double time_to_winner_s() const { return winners_seen_ ? winner_s_ / winners_seen_ : 0; }
  // Records a counter profile: its wall time and the kernel time it replayed (passes x median).
  void observed_profile(double seconds, double kernel_s);
  // A profile replaying `kernel_s` of kernel time: the mean overhead seen plus that. 0 before
  // the first profile, which therefore always starts.
  double predicted_profile_s(double kernel_s) const;

 private:
  double raw_setup_s(std::size_t i) const;
  double scale() const;

  double budget_s_;
  std::vector<Cost> problems_;
  double observed_s_ = 0, observed_raw_s_ = 0;
  double winner_s_ = 0;
  int winners_seen_ = 0;
  double profile_overhead_s_ = 0;
  int profiles_seen_ = 0;
};

}  // namespace shapetune
