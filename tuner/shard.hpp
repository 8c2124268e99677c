// Splitting a sweep's problems into N shards that independent processes (several GPUs of one
// host, the tasks of a Slurm array) sweep side by side, each problem exactly once. The split is
// balanced by expected time, not by count: one 8192^3 GEMM outweighs a hundred small softmaxes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace shapetune {

// Shard `index` of `count`, both as the user writes them: 1 <= index <= count ("--shard 2/8").
struct ShardSpec {
  int index = 1;
  int count = 1;
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// Parses "K/N"; nullopt (and `why`) for anything else, 0, K > N, or N beyond kMaxShards.
inline constexpr int kMaxShards = 100000;
std::optional<ShardSpec> parse_shard(const std::string& text, std::string* why = nullptr);

// Assigns item i (of expected time expected_s[i]) to one of `count` shards: longest first, each
// to the shard with the least expected time so far (the lowest-numbered on ties), which keeps the
// largest shard within one item of the mean. Deterministic: the same times give the same split on
// every machine. Returns each shard's item indices in ascending order (file order).
std::vector<std::vector<std::size_t>> partition_by_time(const std::vector<double>& expected_s, int count);

}  // namespace shapetune
