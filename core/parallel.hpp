// Splits [0, n) into contiguous chunks over the machine's cores. The float64 references and
// the output checks walk hundreds of millions of elements; one core would take seconds each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace shapetune {

// Calls body(begin, end) on disjoint chunks covering [0, n), concurrently; returns when all
// are done. Chunks are at least `grain` long so small inputs stay on the calling thread.
template <typename Body>
void parallel_for(std::int64_t n, std::int64_t grain, Body&& body) {
  if (n <= 0) return;
  const std::int64_t cores = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  const std::int64_t chunks = std::clamp<std::int64_t>(n / std::max<std::int64_t>(grain, 1), 1, cores);
  if (chunks == 1) {
    body(std::int64_t{0}, n);
    return;
  }
  std::vector<std::jthread> workers;
  workers.reserve(chunks - 1);
  const std::int64_t step = (n + chunks - 1) / chunks;
  for (std::int64_t c = 1; c < chunks; ++c) {
    const std::int64_t begin = c * step, end = std::min(n, begin + step);
    if (begin < end) workers.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(std::int64_t{0}, std::min(n, step));
}

}  // namespace shapetune
