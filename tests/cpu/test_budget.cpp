// How --budget is shared out: every problem's predicted setup reserved, the rest shared equally,
// the prediction corrected by what setups really took.
#include <gtest/gtest.h>

#include <cmath>

#include "tuner/budget.hpp"

namespace shapetune {
namespace {

constexpr double kFloor = BudgetPlan::kSetupFloorS;

TEST(BudgetPlan, ReservesEachProblemsSetupAndSharesTheRestEqually) {
  // Three cheap problems and one whose reference is 30 GFLOP (1 s at the initial rate).
  BudgetPlan plan(10, {Cost{0, 0}, Cost{0, 0}, Cost{0, 30e9}, Cost{0, 0}});
  EXPECT_NEAR(plan.predicted_setup_s(2), kFloor + 1, 1e-12);
  const double setups = 4 * kFloor + 1;
  EXPECT_NEAR(plan.predicted_setups_s(), setups, 1e-12);
  const double free_each = (10 - setups) / 4;
  EXPECT_NEAR(plan.share_s(0, 0), kFloor + free_each, 1e-12);
  // The expensive one gets its setup on top of the same free part.
  EXPECT_NEAR(plan.share_s(2, 2 * (kFloor + free_each)), kFloor + 1 + free_each, 1e-9);
}

TEST(BudgetPlan, AnOverrunEarlyLeavesLessForTheRestButNeverLessThanTheirSetups) {
  BudgetPlan plan(4, {Cost{0, 0}, Cost{0, 30e9}, Cost{0, 30e9}});
  // The first problem took 3.5 s of the 4: the two GEMMs still get their setups (1 s each).
  EXPECT_NEAR(plan.share_s(1, 3.5), kFloor + 1, 1e-12);
  EXPECT_GE(plan.share_s(2, 100), plan.predicted_setup_s(2));
  EXPECT_EQ(plan.share_s(3, 0), 0);  // past the last problem
}

TEST(BudgetPlan, LearnsTheHostsRateFromObservedSetups) {
  BudgetPlan plan(100, {Cost{0, 30e9}, Cost{0, 60e9}, Cost{1e9, 0}});
  const double before = plan.predicted_setup_s(1);
  plan.observed_setup(0, 2 * plan.predicted_setup_s(0));  // the host is half as fast as assumed
  EXPECT_NEAR(plan.predicted_setup_s(1), 2 * before, 1e-9);
  // Bounded: one absurd observation cannot scale predictions without limit.
  BudgetPlan odd(100, {Cost{0, 0}, Cost{0, 30e9}});
  odd.observed_setup(0, 1e6);
  EXPECT_LE(odd.predicted_setup_s(1), 20 * (kFloor + 1) + 1e-9);
  // NaN costs (rows stored before cost models) count as the floor.
  BudgetPlan nan_cost(1, {Cost{std::nan(""), std::nan("")}});
  EXPECT_NEAR(nan_cost.predicted_setup_s(0), kFloor, 1e-12);
}

TEST(BudgetPlan, ReservesTheMeanTimeToAWinnerForEveryProblemLeft) {
  BudgetPlan plan(10, {Cost{0, 0}, Cost{0, 0}, Cost{0, 0}, Cost{0, 0}});
  EXPECT_EQ(plan.time_to_winner_s(), 0);
  plan.observed_time_to_winner(0.5);
  plan.observed_time_to_winner(1.5);
  EXPECT_NEAR(plan.time_to_winner_s(), 1.0, 1e-12);
  // 2 s into the sweep, problems 2 and 3 are left: each keeps its setup and 1 s for a winner,
  // and shares what remains of the 8 s.
  const double free_each = (8 - 2 * (kFloor + 1)) / 2;
  EXPECT_NEAR(plan.share_s(2, 2), kFloor + 1 + free_each, 1e-12);
  // However late, a problem is still given the time its winner needs.
  EXPECT_NEAR(plan.share_s(3, 100), kFloor + 1, 1e-12);
}

TEST(BudgetPlan, PredictsAProfileAsItsMeanOverheadPlusTheKernelTimeItReplays) {
  BudgetPlan plan(10, {Cost{0, 0}});
  EXPECT_EQ(plan.predicted_profile_s(0.1), 0);  // nothing seen: the first profile always starts
  plan.observed_profile(0.4, 0.1);              // 0.3 s of overhead
  plan.observed_profile(0.2, 0.0);              // 0.2 s
  EXPECT_NEAR(plan.predicted_profile_s(0.0), 0.25, 1e-12);
  EXPECT_NEAR(plan.predicted_profile_s(1.0), 1.25, 1e-12);
  // A profile that took less than its kernel time (a clock step) counts no negative overhead.
  BudgetPlan odd(10, {Cost{0, 0}});
  odd.observed_profile(0.1, 0.5);
  EXPECT_NEAR(odd.predicted_profile_s(0.5), 0.5, 1e-12);
}

}  // namespace
}  // namespace shapetune
