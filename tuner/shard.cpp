#include "tuner/shard.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace shapetune {

namespace {

std::optional<int> parse_positive(const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 1) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ShardSpec> parse_shard(const std::string& text, std::string* why) {
  auto fail = [&](const std::string& reason) -> std::optional<ShardSpec> {
    if (why) *why = reason;
    return std::nullopt;
  };
  const auto slash = text.find('/');
  if (slash == std::string::npos) return fail("expected K/N (shard K of N, 1 <= K <= N), got '" + text + "'");
  const auto index = parse_positive(text.substr(0, slash));
  const auto count = parse_positive(text.substr(slash + 1));
  if (!index || !count) return fail("expected K/N with whole numbers K, N >= 1, got '" + text + "'");
  if (*count > kMaxShards) return fail("at most " + std::to_string(kMaxShards) + " shards, got " + std::to_string(*count));
  if (*index > *count) return fail("shard " + std::to_string(*index) + " of " + std::to_string(*count) +
                                   " does not exist: K counts from 1 to N");
  return ShardSpec{*index, *count};
}

std::vector<std::vector<std::size_t>> partition_by_time(const std::vector<double>& expected_s, int count) {
  std::vector<std::vector<std::size_t>> shards(static_cast<std::size_t>(std::max(count, 1)));
  std::vector<std::size_t> order(expected_s.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // A NaN or negative estimate weighs nothing rather than breaking the order.
  auto weight = [&](std::size_t i) { return std::isfinite(expected_s[i]) && expected_s[i] > 0 ? expected_s[i] : 0.0; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight(a) > weight(b); });
  std::vector<double> load(shards.size(), 0.0);
  for (const std::size_t i : order) {
    const auto lightest = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    shards[lightest].push_back(i);
    load[lightest] += weight(i);
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

}  // namespace shapetune
