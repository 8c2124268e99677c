#include "tuner/budget.hpp"

#include <algorithm>
#include <cmath>

namespace shapetune {

BudgetPlan::BudgetPlan(double budget_s, std::vector<Cost> problems) : budget_s_(budget_s), problems_(std::move(problems)) {}

double BudgetPlan::raw_setup_s(std::size_t i) const {
  const Cost& c = problems_.at(i);
  const double flops = std::isfinite(c.flops) ? c.flops : 0, bytes = std::isfinite(c.bytes) ? c.bytes : 0;
  return kSetupFloorS + flops / kReferenceFlopsPerS + bytes / kHostBytesPerS;
}

// Observed over predicted, over the setups seen so far; bounded, so that one odd problem
// cannot make the plan promise everything or nothing.
double BudgetPlan::scale() const {
  if (observed_raw_s_ <= 0) return 1;
  return std::clamp(observed_s_ / observed_raw_s_, 0.05, 20.0);
}

double BudgetPlan::predicted_setup_s(std::size_t i) const { return raw_setup_s(i) * scale(); }

double BudgetPlan::predicted_setups_s() const {
  double sum = 0;
  for (std::size_t i = 0; i < problems_.size(); ++i) sum += predicted_setup_s(i);
  return sum;
}

double BudgetPlan::share_s(std::size_t i, double elapsed_s) const {
  const std::size_t left = problems_.size() - std::min(i, problems_.size());
  if (left == 0) return 0;
  const double to_winner = time_to_winner_s();
  double reserved = to_winner * static_cast<double>(left);
  for (std::size_t j = i; j < problems_.size(); ++j) reserved += predicted_setup_s(j);
  const double free_s = std::max(0.0, budget_s_ - elapsed_s - reserved);
  return predicted_setup_s(i) + to_winner + free_s / static_cast<double>(left);
}

void BudgetPlan::observed_time_to_winner(double seconds) {
  winner_s_ += std::max(0.0, seconds);
  ++winners_seen_;
}

void BudgetPlan::observed_profile(double seconds, double kernel_s) {
  profile_overhead_s_ += std::max(0.0, seconds - std::max(0.0, kernel_s));
  ++profiles_seen_;
}

double BudgetPlan::predicted_profile_s(double kernel_s) const {
  if (profiles_seen_ == 0) return 0;
  return profile_overhead_s_ / profiles_seen_ + std::max(0.0, kernel_s);
}

void BudgetPlan::observed_setup(std::size_t i, double seconds) {
  observed_s_ += std::max(0.0, seconds);
  observed_raw_s_ += raw_setup_s(i);
}

}  // namespace shapetune
