#include "tuner/missing_baseline.hpp"

#include <algorithm>
#include <map>

#include "tuner/search.hpp"

namespace shapetune {
namespace {

bool full_accurate(const CandidateRecord& r) {
  return r.status == CandidateStatus::ok && r.timing && !is_race_stop_reason(r.timing->stop_reason);
}

// A baseline's records say why it gave nothing: one record, its status and reason; several (a
// library's algorithms), a count per status with the first reason of each.
std::string why_none(const std::vector<const CandidateRecord*>& records) {
  auto status_text = [](const CandidateRecord& r) {
    // An accurate record here is one a race rung timed and the search did not keep.
    return r.status == CandidateStatus::ok ? std::string("raced only") : std::string(candidate_status_name(r.status));
  };
  if (records.size() == 1) {
    const CandidateRecord& r = *records.front();
    return status_text(r) + (r.reason.empty() ? "" : ": " + r.reason);
  }
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, std::string>> by_status;  // count, first reason
  for (const CandidateRecord* r : records) {
    const std::string status = status_text(*r);
    auto [it, fresh] = by_status.try_emplace(status, 0, r->reason);
    if (fresh) order.push_back(status);
    ++it->second.first;
  }
  std::string text;
  for (const auto& status : order) {
    const auto& [count, reason] = by_status[status];
    text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + status + (reason.empty() ? "" : " (" + reason + ")");
  }
  return text;
}

}  // namespace

std::vector<VariantFailure> variants_without_measurement(const std::vector<CandidateRecord>& records) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const CandidateRecord*>> by_variant;
  for (const auto& r : records) {
    auto& list = by_variant[r.variant];
    if (list.empty()) order.push_back(r.variant);
    list.push_back(&r);
  }
  std::vector<VariantFailure> failures;
  for (const auto& variant : order) {
    const auto& list = by_variant[variant];
    if (std::none_of(list.begin(), list.end(), [](const CandidateRecord* r) { return full_accurate(*r); }))
      failures.push_back({variant, why_none(list)});
  }
  return failures;
}

std::vector<VariantFailure> missing_baselines(const std::vector<CandidateRecord>& records) {
  std::vector<CandidateRecord> baselines;
  for (const auto& r : records)
    if (r.baseline) {
      if (full_accurate(r)) return {};
      baselines.push_back(r);
    }
  return variants_without_measurement(baselines);
}

std::string failures_text(const std::vector<VariantFailure>& failures) {
  std::string text;
  for (const auto& f : failures) text += (text.empty() ? "" : "; ") + f.variant + ": " + f.reason;
  return text;
}

std::string missing_baselines_warning(const std::string& problem_key, const std::vector<VariantFailure>& failures) {
  return "warning: " + problem_key + ": no baseline ran, so its winner is compared with none: " + failures_text(failures);
}

}  // namespace shapetune
