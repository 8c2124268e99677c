#include "core/records.hpp"

#include <iterator>
#include <utility>

namespace shapetune {

namespace {

// These names are stored in the database and written to exports: changing one breaks old files.
constexpr std::pair<TimingMode, std::string_view> kTimingModeNames[] = {
    {TimingMode::cold, "cold"},
    {TimingMode::hot, "hot"},
    {TimingMode::graph_batch, "graph_batch"},
    {TimingMode::batch, "batch"},
};

constexpr std::pair<CandidateStatus, std::string_view> kCandidateStatusNames[] = {
    {CandidateStatus::ok, "ok"},
    {CandidateStatus::failed_accuracy, "failed_accuracy"},
    {CandidateStatus::unsupported, "unsupported"},
    {CandidateStatus::error, "error"},
    {CandidateStatus::skipped, "skipped"},
    {CandidateStatus::crashed, "crashed"},
    {CandidateStatus::timeout, "timeout"},
};
static_assert(std::size(kCandidateStatusNames) == kCandidateStatusCount);

template <typename Enum, std::size_t N>
std::string_view name_of(const std::pair<Enum, std::string_view> (&names)[N], Enum value) {
  for (const auto& [candidate, name] : names)
    if (candidate == value) return name;
  return "?";
}

template <typename Enum, std::size_t N>
std::optional<Enum> parse_name(const std::pair<Enum, std::string_view> (&names)[N], std::string_view text) {
  for (const auto& [value, name] : names)
    if (name == text) return value;
  return std::nullopt;
}

}  // namespace

std::string_view timing_mode_name(TimingMode mode) { return name_of(kTimingModeNames, mode); }

std::optional<TimingMode> parse_timing_mode(std::string_view text) { return parse_name(kTimingModeNames, text); }

std::string_view candidate_status_name(CandidateStatus status) { return name_of(kCandidateStatusNames, status); }

std::optional<CandidateStatus> parse_candidate_status(std::string_view text) {
  return parse_name(kCandidateStatusNames, text);
}

}  // namespace shapetune
